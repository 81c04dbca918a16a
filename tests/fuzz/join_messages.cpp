// Join and seed messages (cluster/join_protocol.h) as a hostile worker or a
// fake seed may send them, taken as far as the seed and the worker take them:
// a JoinRequest's advertised address and certificate request, a Welcome's
// addresses and certificates (accept_welcome), a JoinError's status and
// reason. The first input byte picks the message type, so that every input
// is spent on join messages.
#include <variant>

#include "cluster/join.h"
#include "core/log.h"
#include "core/status.h"
#include "fuzz_check.h"
#include "transport/codec.h"
#include "transport/socket_address.h"
#include "transport/tls_credentials.h"
#include "worker_key.h"

using namespace nexar;

namespace {

constexpr uint8_t kJoinTypes[] = {wire::JoinChallenge::kType, wire::JoinRequest::kType,
                                  wire::JoinAdmitted::kType,  wire::Welcome::kType,
                                  wire::MeshReady::kType,     wire::JoinError::kType};

// The worker's own key, loaded once (worker_key.h).
gnutls_x509_privkey_t worker_key() {
  static X509Key *key = [] {
    auto *k = new X509Key;
    FUZZ_CHECK(nexar_fuzz::load_worker_key(k));
    return k;
  }();
  return key->get();
}

void take(const wire::JoinRequest &req) {
  SocketAddress adv;
  if (SocketAddress::parse_numeric(req.advertise_address, &adv))
    FUZZ_CHECK(!adv.to_string().empty());
  const Status s = ClusterCa::check_csr(req.csr_pem);
  if (!s) FUZZ_CHECK(!s.message.empty());
}

void take(const wire::Welcome &w) {
  SocketAddress advertised;
  FUZZ_CHECK(SocketAddress::parse_numeric("127.0.0.1:4000", &advertised));
  JoinTicket t;
  const Status s = accept_welcome(w, worker_key(), advertised, -1, &t);
  if (!s) {
    FUZZ_CHECK(!s.message.empty());
    return;
  }
  FUZZ_CHECK(t.rank < t.world_size && t.peers.size() == t.world_size && t.creds);
}

void take(const wire::JoinError &e) {
  const std::string line = log::one_line(e.reason, wire::kMaxStringLen);
  for (const char c : line)  // a peer's text cannot forge a log line
    FUZZ_CHECK(static_cast<unsigned char>(c) >= 0x20 && c != 0x7f);
  (void)is_known_error(e.status);
}

template <class T>
void take(const T &) {}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  std::vector<uint8_t> msg;
  msg.reserve(size + 1);
  msg.push_back(wire::kControlVersion);
  msg.push_back(kJoinTypes[data[0] % sizeof kJoinTypes]);
  msg.insert(msg.end(), data + 1, data + size);
  const wire::DecodeResult r = wire::decode_control(msg);
  if (!r) {
    FUZZ_CHECK(!r.error.empty());
    return 0;
  }
  std::visit([](const auto &m) { take(m); }, *r.message);
  return 0;
}
