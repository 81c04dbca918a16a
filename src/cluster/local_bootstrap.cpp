#include "cluster/local_bootstrap.h"

#include <gnutls/crypto.h>

#include "core/log.h"

namespace nexar {

Status bootstrap_local(uint32_t world_size, const Config &cfg,
                       std::vector<std::unique_ptr<Communicator>> *out) {
  uint64_t cluster_id = 0;
  gnutls_rnd(GNUTLS_RND_NONCE, &cluster_id, sizeof cluster_id);
  std::unique_ptr<ClusterCa> ca;
  Status s = ClusterCa::generate(cluster_id, &ca);
  if (!s) return s;

  SocketAddress loopback;
  if (!(s = SocketAddress::parse("127.0.0.1:0", &loopback))) return s;
  std::vector<std::shared_ptr<Engine>> engines;
  std::vector<SocketAddress> addrs;
  for (uint32_t r = 0; r < world_size; ++r) {
    // Each rank makes its own key; the CA signs only the public half.
    X509Key key;
    X509Cert cert;
    std::shared_ptr<TlsCredentials> creds;
    if (!(s = generate_key(&key))) return s;
    if (!(s = ca->issue_node_cert(r, key.get(), &cert))) return s;
    if (!(s = TlsCredentials::create(ca->cert(), cert.get(), key.get(), &creds))) return s;
    auto engine = std::make_shared<Engine>(Engine::Identity{r, world_size, cluster_id}, cfg,
                                           std::move(creds));
    if (!(s = engine->start(loopback))) return s;
    addrs.push_back(engine->address());
    engines.push_back(std::move(engine));
  }
  for (auto &e : engines)
    if (!(s = e->start_mesh(addrs))) return s;
  for (auto &e : engines)
    if (!(s = e->wait_mesh())) return s;
  std::vector<uint32_t> identity(world_size);
  for (uint32_t r = 0; r < world_size; ++r)
    identity[r] = r;
  out->clear();
  for (uint32_t r = 0; r < world_size; ++r)
    out->push_back(std::make_unique<Communicator>(engines[r], 0, r, identity, true));
  LOG_INFO("local world of %u ranks formed", world_size);
  return {};
}

}  // namespace nexar
