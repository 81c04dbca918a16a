#include "cluster/local_bootstrap.h"

#include <gnutls/crypto.h>

#include "cluster/mesh.h"
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
  std::vector<std::shared_ptr<Client>> clients;
  std::vector<SocketAddress> addrs;
  for (uint32_t r = 0; r < world_size; ++r) {
    // Each rank makes its own key; the CA signs only the public half.
    X509Key key;
    X509Cert cert;
    std::shared_ptr<TlsCredentials> creds;
    if (!(s = generate_key(&key))) return s;
    if (!(s = ca->issue_node_cert(r, key.get(), &cert))) return s;
    if (!(s = TlsCredentials::create(ca->cert(), cert.get(), key.get(), &creds))) return s;
    auto client = make_client(Client::Identity{r, world_size, cluster_id}, cfg, std::move(creds));
    if (!(s = client->start(loopback))) return s;
    addrs.push_back(client->address());
    clients.push_back(std::move(client));
  }
  std::vector<std::unique_ptr<MeshFormation>> meshes;
  for (auto &c : clients)
    meshes.push_back(std::make_unique<MeshFormation>(c));
  for (auto &m : meshes)
    if (!(s = m->start(addrs))) return s;
  for (auto &m : meshes)
    if (!(s = m->wait())) return s;
  std::vector<uint32_t> identity(world_size);
  for (uint32_t r = 0; r < world_size; ++r)
    identity[r] = r;
  out->clear();
  for (uint32_t r = 0; r < world_size; ++r)
    out->push_back(std::make_unique<Communicator>(clients[r], 0, r, identity, true));
  LOG_INFO("local world of %u ranks formed", world_size);
  return {};
}

}  // namespace nexar
