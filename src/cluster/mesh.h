// Forming one rank's mesh: its client (with the RPC lanes installed) and its
// QUIC connections to every neighbour of the topology, each authenticated by
// the Hello exchange (client/peer_router.h). The higher rank of a pair dials.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "client/client.h"

namespace nexar {

// A client for one rank, with everything a rank serves (RPC) plugged in.
std::shared_ptr<Client> make_client(Client::Identity id, Config cfg,
                                    std::shared_ptr<TlsCredentials> creds);

class MeshFormation : public FormationObserver {
 public:
  // The client must be started (its loop running). redial_other_worlds: a
  // grow's attempt, where a peer may still run the attempt the seed
  // replaced: a dialed peer that answers with another world's certificate
  // is dialed again (every 50 ms) until the wait's deadline.
  explicit MeshFormation(std::shared_ptr<Client> client, bool redial_other_worlds = false);
  ~MeshFormation() override;
  MeshFormation(const MeshFormation &) = delete;
  MeshFormation &operator=(const MeshFormation &) = delete;

  // Dials every lower neighbour (higher ones dial this rank).
  Status start(const std::vector<SocketAddress> &peer_addrs);
  // Waits, bounded by connect_timeout_ms, until every neighbour said hello.
  Status wait();
  // Ends a wait in progress (or the next one) with this error: the seed
  // reported that another rank died during formation. Any thread.
  void fail(const Status &why);

  // FormationObserver (loop thread)
  void on_peers_changed() override;
  bool redial_in_other_world(uint32_t rank) override;

 private:
  std::shared_ptr<Client> client_;
  const bool redial_other_worlds_;
  std::vector<SocketAddress> peer_addrs_;
  std::mutex mu_;
  std::condition_variable cv_;
  size_t ready_ = 0;
  Status error_;
  std::vector<uint32_t> redials_;  // ranks to dial again
};

}  // namespace nexar
