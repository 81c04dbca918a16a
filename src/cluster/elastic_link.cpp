#include "cluster/elastic_link.h"

#include <unistd.h>

#include "core/clock.h"
#include "core/log.h"

namespace nexar {
namespace {

// Beyond the seed's own bound on a grow (the members' connect timeout), so
// that its verdict arrives before this side gives up.
constexpr uint64_t kVerdictMarginMs = 5000;

struct SocketGuard {
  int fd = -1;
  ~SocketGuard() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

ElasticLink::ElasticLink(Config cfg, std::unique_ptr<SeedClient> seed)
    : cfg_(std::move(cfg)), seed_(std::move(seed)) {}

ElasticLink::~ElasticLink() {
  seed_->close();
}

Status ElasticLink::grow(Communicator &comm, uint64_t grow_seq, uint32_t max_new,
                         std::unique_ptr<Communicator> *out) {
  std::lock_guard<std::mutex> g(grow_mu_);
  const SocketAddress &seed = seed_->seed_address();
  if (seed_->seed_gone())
    return error(NEXAR_ERR_CLOSED,
                 format("rank %u: the elastic seed at %s is gone: the world goes on but cannot "
                        "grow",
                        comm.rank(), seed.to_string().c_str()));
  // This member's socket, key and certificate request in the grown world.
  SocketGuard fd;
  SocketAddress bound, advertised;
  Status s = bind_worker_socket(cfg_, seed, &fd.fd, &bound, &advertised);
  if (!s) return s;
  X509Key key;
  std::string csr;
  if (!(s = generate_key(&key))) return s;
  if (!(s = make_csr_pem(key.get(), &csr))) return s;

  wire::GrowRequest req;
  req.world_id = comm.client().identity().cluster_id;
  req.comm_id = comm.comm_id();
  req.grow_seq = grow_seq;
  req.rank = comm.rank();
  req.size = comm.size();
  req.max_new = max_new;
  req.timeout_ms = cfg_.connect_timeout_ms;
  req.advertise_address = advertised.to_string();
  req.csr_pem = csr;
  seed_->drop_words();  // news of an earlier grow
  seed_->request_grow(req);

  const uint64_t deadline = now_ns() + (2 * cfg_.connect_timeout_ms + kVerdictMarginMs) * kNsPerMs;
  for (;;) {
    SeedClient::Word w;
    if (!seed_->next_word(deadline, &w))
      return error(NEXAR_ERR_TIMEOUT,
                   format("rank %u: the elastic seed at %s gave no verdict on the grow in time",
                          comm.rank(), seed.to_string().c_str()));
    switch (w.kind) {
      case SeedClient::Word::Welcome:
        s = form_welcomed(cfg_, w.welcome, key.get(), advertised, static_cast<int32_t>(comm.rank()),
                          fd.fd, *seed_, true, out);
        if (s) return s;
        // Welcomed again (a joiner was lost), or the grow failed: the seed
        // says which, the same to every member (a mesh that failed here was
        // reported to it).
        continue;
      case SeedClient::Word::Error:
        return error(w.error.code, format("rank %u: %s", comm.rank(), w.error.message.c_str()),
                     w.error.failed_rank);
      case SeedClient::Word::Requeued:
      case SeedClient::Word::Formed:  // not this member's: it waits for a Welcome
        continue;
      case SeedClient::Word::Gone:
        return error(NEXAR_ERR_CLOSED,
                     format("rank %u: the elastic seed at %s is gone: the world goes on but "
                            "cannot grow",
                            comm.rank(), seed.to_string().c_str()));
    }
  }
}

}  // namespace nexar
