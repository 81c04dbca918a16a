#include "client/peer_connection.h"

#include "client/client.h"

namespace nexar {

PeerConnection::PeerConnection(Client &client, uint32_t world_rank, bool direct)
    : client_(client), rank_(world_rank), direct_(direct) {}

const Status *PeerConnection::failure() const {
  return client_.liveness().failure(rank_);
}

bool PeerConnection::set_ready() {
  if (ready_) return false;
  ready_ = true;
  return true;
}

bool PeerConnection::forming() const {
  return direct_ && !client_.shut_down() && !ready_ && !failure();
}

bool PeerConnection::detach() {
  conn_ = nullptr;
  return std::exchange(ready_, false);
}

QuicConnection *PeerConnection::direct_connection() const {
  return ready_ && conn_ && !conn_->closed() ? conn_ : nullptr;
}

QuicConnection *PeerConnection::route(Status *why) const {
  return direct_ ? direct_connection() : client_.relay().route(rank_, why);
}

ShmChannel *PeerConnection::shm() const {
  return failure() ? nullptr : client_.shm().channel(rank_);
}

bool PeerConnection::send_owned(OutgoingMessage msg, uint64_t key) {
  if (ShmChannel *ch = shm()) {
    if (!ch->send_now(msg.header, msg.payload)) ch->send(std::move(msg));
    return true;
  }
  QuicConnection *c = route(nullptr);
  if (!c) return false;
  if (direct_)
    c->send(std::move(msg), false, key);
  else
    client_.relay().send(c, rank_, msg.header, msg.payload, nullptr, 0, nullptr);
  return true;
}

void PeerConnection::send_control(const wire::ControlMessage &m) {
  if (!direct_)
    client_.relay().send_control(rank_, wire::encode_control(m));
  else if (conn_)
    conn_->send_control(m);
}

}  // namespace nexar
