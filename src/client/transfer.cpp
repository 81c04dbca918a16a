#include "client/transfer.h"

#include <cstring>

namespace nexar {
namespace {

// Keeps an operation's user buffer borrowed until the transport lets go of a
// cancelled send that was already partly written.
class PinListener : public SendListener {
 public:
  explicit PinListener(OpContext *op) : op_(op) { op_->pin(); }
  void on_send_done(const Status &) override {
    if (op_) std::exchange(op_, nullptr)->unpin();
  }

 private:
  OpContext *op_;
};

uint64_t stream_key(const wire::FrameHeader &h) {
  return MsgKeyHash{}(MsgKey{0, static_cast<uint8_t>(h.kind), h.comm_id, h.tag});
}

}  // namespace

SendWait::SendWait(Client &client, OpContext *op, uint64_t deadline_ns, uint32_t world_peer,
                   int32_t user_rank, const wire::FrameHeader &h, const void *payload,
                   const char *what, SendCompletion completion)
    : Wait(op->loop(), op, deadline_ns, user_rank),
      client_(client),
      world_peer_(world_peer),
      user_rank_(user_rank),
      header_(h),
      payload_(static_cast<const uint8_t *>(payload)),
      what_(what),
      completion_(completion) {}

bool SendWait::copies(const QuicConnection &c) const {
  return completion_ == SendCompletion::Copied && header_.length <= kEagerBytes &&
         c.queued_bytes() < kEagerQueueLimit;
}

bool SendWait::await_ready() {
  if (op_->failed()) {
    finish(op_->status());
    return true;
  }
  const PeerConnection &peer = client_.peer(world_peer_);
  if (ShmChannel *ch = peer.shm()) return shm_start(ch);
  relayed_ = !peer.direct();
  if (relayed_) {
    if (const Status *dead = peer.failure()) {
      finish(
          error(NEXAR_ERR_PEER_FAILED,
                format("%s: rank %d is unreachable: %s", what_, user_rank_, dead->message.c_str()),
                user_rank_));
      return true;
    }
  }
  Status why;
  conn_ = peer.route(&why);
  if (!conn_) {
    const Status *dead = peer.failure();
    finish(error(NEXAR_ERR_PEER_FAILED,
                 relayed_ ? format("%s: %s", what_, why.message.c_str())
                          : format("%s: no connection to rank %d%s%s", what_, user_rank_,
                                   dead ? ": " : "", dead ? dead->message.c_str() : ""),
                 user_rank_));
    return true;
  }
  if (relayed_) return relay_start();
  OutgoingMessage msg;
  msg.header = header_;
  if (copies(*conn_)) {
    PooledBuf copy = client_.pool().checkout(static_cast<size_t>(header_.length));
    if (header_.length) memcpy(copy.data(), payload_, static_cast<size_t>(header_.length));
    msg.payload = copy.data();
    msg.owned = std::move(copy);
    conn_->send(std::move(msg), false, stream_key(header_));
    finish(Status());
    return true;
  }
  msg.payload = payload_;
  msg.listener = this;
  item_ = conn_->send(std::move(msg), false, stream_key(header_));
  return finished();  // a closed connection reports at once
}

bool SendWait::shm_start(ShmChannel *ch) {
  // In the ring is at the peer: the send is done once written.
  if (ch->send_now(header_, payload_)) {
    finish(Status());
    return true;
  }
  shm_ = ch;
  OutgoingMessage msg;
  msg.header = header_;
  msg.payload = payload_;
  msg.listener = this;
  shm_item_ = ch->send(std::move(msg));
  return finished();
}

bool SendWait::relay_start() {
  if (copies(*conn_)) {
    client_.relay().send(conn_, world_peer_, header_, payload_, nullptr, 0, nullptr);
    finish(Status());
    return true;
  }
  const uint32_t hop = client_.topology().next_hop(client_.identity().rank, world_peer_);
  send_id_ = client_.relay().watch(this, world_peer_, hop);
  relay_started_ = true;
  client_.relay().send(conn_, world_peer_, header_, payload_, this, send_id_, &chunks_);
  return finished();  // a closed connection reports at once
}

void SendWait::relay_fail(const Status &s) {
  finish(
      error(s.code == NEXAR_ERR_CLOSED ? NEXAR_ERR_PEER_FAILED : s.code,
            format("%s: relaying %llu bytes to rank %d failed: %s", what_,
                   static_cast<unsigned long long>(header_.length), user_rank_, s.message.c_str()),
            user_rank_));
}

void SendWait::maybe_finish_relayed() {
  if (relay_started_ && chunks_done_ == chunks_.size() && send_id_ == 0) finish(Status());
}

void SendWait::on_relay_result(const Status &s) {
  send_id_ = 0;  // the relay already forgot it
  if (!s.ok())
    relay_fail(s);
  else
    maybe_finish_relayed();
}

void SendWait::on_send_done(const Status &s) {
  if (relayed_) {
    ++chunks_done_;
    if (!s.ok())
      relay_fail(s);
    else
      maybe_finish_relayed();
    return;
  }
  item_ = nullptr;
  shm_item_ = nullptr;
  if (s.ok()) {
    finish(Status());
  } else {
    finish(error(s.code == NEXAR_ERR_CLOSED ? NEXAR_ERR_PEER_FAILED : s.code,
                 format("%s: sending to rank %d failed: %s", what_, user_rank_, s.message.c_str()),
                 user_rank_));
  }
}

void SendWait::detach() {
  if (shm_) {
    // The payload is never read again once cancelled: nothing to pin.
    if (shm_item_) shm_->cancel(std::exchange(shm_item_, nullptr));
    return;
  }
  if (relayed_) {
    if (send_id_) client_.relay().unwatch(std::exchange(send_id_, 0));
    // Chunks not acknowledged yet: the transport must let go of the buffer.
    // A chunk cut off half-way reaches the destination padded with zeros and
    // the message after it is refused there (its flow restarted early).
    for (size_t i = chunks_done_; i < chunks_.size(); ++i) {
      if (!chunks_[i]) continue;
      auto pin = std::make_shared<PinListener>(op_);
      if (conn_->cancel(chunks_[i], pin.get()))
        op_->keep_alive(std::move(pin));
      else
        pin->on_send_done(Status());
    }
    chunks_done_ = chunks_.size();
    return;
  }
  if (!item_) return;
  auto pin = std::make_shared<PinListener>(op_);
  if (conn_->cancel(item_, pin.get()))
    op_->keep_alive(std::move(pin));
  else
    pin->on_send_done(Status());
  item_ = nullptr;
}

std::string SendWait::timeout_message() const {
  return format("%s: rank %d did not acknowledge %llu bytes before the deadline", what_, user_rank_,
                static_cast<unsigned long long>(header_.length));
}

Task<Status> send_to(OpScope scope, Envelope e, const void *data, uint64_t len,
                     SendCompletion completion) {
  Communicator *comm = scope.comm;
  if (e.peer == comm->rank()) {
    MsgKey key{comm->world_rank_of(e.peer), static_cast<uint8_t>(e.kind), comm->comm_id(), e.tag};
    comm->client().mailbox().deliver_local(key, data, len, e.check);
    co_return Status();
  }
  wire::FrameHeader h;
  h.kind = e.kind;
  h.comm_id = comm->comm_id();
  h.tag = e.tag;
  h.length = len;
  h.check = e.check;
  co_return co_await SendWait(comm->client(), scope.op, scope.deadline_ns,
                              comm->world_rank_of(e.peer), static_cast<int32_t>(e.peer), h, data,
                              e.what, completion);
}

Task<Status> recv_from(OpScope scope, Envelope e, void *data, uint64_t len,
                       CombineOnArrival combine) {
  Communicator *comm = scope.comm;
  MsgKey key{comm->world_rank_of(e.peer), static_cast<uint8_t>(e.kind), comm->comm_id(), e.tag};
  co_return co_await RecvWait(
      &comm->client().mailbox(), scope.op, scope.deadline_ns,
      PostedRecv{key, data, len, e.check, static_cast<int32_t>(e.peer), e.what, combine});
}

}  // namespace nexar
