#include "cluster/mesh.h"

#include <chrono>
#include <string>
#include <thread>

#include "core/log.h"
#include "rpc/rpc_hub.h"
#include "transport/packet_cipher.h"

namespace nexar {

namespace {
constexpr int kRedialPauseMs = 50;
}  // namespace

std::shared_ptr<Client> make_client(Client::Identity id, Config cfg,
                                    std::shared_ptr<TlsCredentials> creds) {
  auto client = std::make_shared<Client>(id, std::move(cfg), std::move(creds));
  client->set_rpc_lanes(std::make_unique<rpc::RpcHub>(*client));
  return client;
}

MeshFormation::MeshFormation(std::shared_ptr<Client> client, bool redial_other_worlds)
    : client_(std::move(client)), redial_other_worlds_(redial_other_worlds) {
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

bool MeshFormation::redial_in_other_world(uint32_t rank) {
  if (!redial_other_worlds_) return false;
  LOG_DEBUG("rank %u still runs another world: dialing it again", rank);
  std::lock_guard<std::mutex> g(mu_);
  redials_.push_back(rank);
  cv_.notify_all();
  return true;
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
  peer_addrs_ = peer_addrs;
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
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  std::unique_lock<std::mutex> g(mu_);
  bool done = false;
  for (;;) {
    done = cv_.wait_until(g, deadline,
                          [&] { return ready_ == want || !error_.ok() || !redials_.empty(); });
    if (!done || !error_.ok() || ready_ == want) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      done = false;
      break;
    }
    // A peer still in the attempt the seed replaced: give it time to leave.
    std::vector<uint32_t> ranks = std::move(redials_);
    redials_.clear();
    g.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(kRedialPauseMs));
    client_->loop().run_sync([&] {
      for (uint32_t r : ranks) {
        Status s = client_->dial(r, peer_addrs_[r]);
        if (!s)
          client_->fail_formation(
              error(s.code, format("connecting to rank %u again: %s", r, s.message.c_str()),
                    static_cast<int32_t>(r)));
      }
    });
    g.lock();
  }
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
