#include "cluster/mesh.h"

#include <chrono>
#include <string>

#include "core/log.h"
#include "rpc/rpc_hub.h"
#include "transport/packet_cipher.h"

namespace nexar {

std::shared_ptr<Client> make_client(Client::Identity id, Config cfg,
                                    std::shared_ptr<TlsCredentials> creds) {
  auto client = std::make_shared<Client>(id, std::move(cfg), std::move(creds));
  client->set_rpc_lanes(std::make_unique<rpc::RpcHub>(*client));
  return client;
}

MeshFormation::MeshFormation(std::shared_ptr<Client> client) : client_(std::move(client)) {
  client_->loop().run_sync([this] { client_->set_formation_observer(this); });
}

MeshFormation::~MeshFormation() {
  client_->loop().run_sync([this] { client_->set_formation_observer(nullptr); });
}

void MeshFormation::on_peers_changed() {
  std::lock_guard<std::mutex> g(mu_);
  ready_ = client_->ready_neighbours();
  if (error_.ok()) error_ = client_->formation_failure();
  cv_.notify_all();
}

void MeshFormation::fail(const Status &why) {
  std::lock_guard<std::mutex> g(mu_);
  if (error_.ok()) error_ = why;
  cv_.notify_all();
}

Status MeshFormation::start(const std::vector<SocketAddress> &peer_addrs) {
  const Client::Identity &me = client_->identity();
  if (!client_->topology().problem().ok()) {
    const Status &p = client_->topology().problem();
    return error(p.code, format("rank %u: %s", me.rank, p.message.c_str()));
  }
  if (me.world_size == 1) return {};
  Status start_error;
  client_->loop().run_sync([&] {
    for (uint32_t r = 0; r < me.rank && start_error.ok(); ++r) {
      if (!client_->peer(r).direct()) continue;
      Status s = client_->dial(r, peer_addrs[r]);
      if (!s)
        start_error = error(s.code,
                            format("connecting to rank %u at %s: %s", r,
                                   peer_addrs[r].to_string().c_str(), s.message.c_str()),
                            static_cast<int32_t>(r));
    }
  });
  return start_error;
}

Status MeshFormation::wait() {
  const Client::Identity &me = client_->identity();
  if (me.world_size == 1) return {};
  const uint64_t timeout_ms = client_->config().connect_timeout_ms;
  const size_t want = client_->neighbours();
  std::unique_lock<std::mutex> g(mu_);
  const bool done = cv_.wait_for(g, std::chrono::milliseconds(timeout_ms),
                                 [&] { return ready_ == want || !error_.ok(); });
  if (!error_.ok()) return error_;
  if (!done) {
    g.unlock();
    std::string missing;
    client_->loop().run_sync([&] {
      for (uint32_t r = 0; r < me.world_size; ++r) {
        if (!client_->peer(r).direct() || client_->peer(r).ready()) continue;
        if (!missing.empty()) missing += ',';
        missing += std::to_string(r);
      }
    });
    return error(NEXAR_ERR_TIMEOUT,
                 format("rank %u: mesh formation timed out after %llu ms; no hello from rank(s) %s",
                        me.rank, static_cast<unsigned long long>(timeout_ms), missing.c_str()));
  }
  LOG_DEBUG("mesh formed with %zu neighbours (%s topology; packets sealed by %s)", want,
            client_->topology().name().c_str(), PacketCipher::implementation());
  return {};
}

}  // namespace nexar
