// The join protocol between a worker and the seed, and how both sides prove
// they know the cluster token without ever sending it.
//
// A join connection is QUIC + TLS 1.3 with ALPN nexar-join/1 and no
// certificate verification on either side (ConnectionPolicy::join()): the worker has
// no certificate yet, and the seed's is self-signed. Authentication comes
// from the cluster token, bound to this very TLS session:
//
//   E = TLS exporter (RFC 8446 7.5), label "EXPORTER-nexar-join", 32 bytes.
//       Both ends of one session derive the same E; a man in the middle, who
//       holds two different sessions, gets two different values.
//   seed   -> worker  JoinChallenge{auth=token, seed_proof = HMAC-SHA256(token, E || "seed")}
//   worker            checks seed_proof in constant time; on mismatch it
//                     sends JoinError (no proof of its own) and fails with
//                     NEXAR_ERR_AUTH. A fake seed therefore never receives
//                     anything derived from the token.
//   worker -> seed    JoinRequest{worker_proof = HMAC-SHA256(token, E || "worker"),
//                     rank, world size, advertised address, PKCS#10 request}
//   seed              checks worker_proof in constant time; on mismatch it
//                     refuses that worker (JoinError, NEXAR_ERR_AUTH) and
//                     keeps forming the world.
//   seed -> worker    JoinAdmitted, then, once the world is complete,
//                     Welcome{rank, world size, cluster id, CA certificate,
//                     the worker's certificate signed from its request, every
//                     rank's address}. The private key never left the worker.
//   worker -> seed    TopologyDigest{rank, digest of its mesh graph, name}
//                     (not in a grow of an elastic seed's world).
//   seed -> worker    once every rank's digest arrived: the same digest back
//                     when they all agree, else a JoinError to every rank
//                     naming the ranks whose graphs differ. A worker dials
//                     its mesh only after this answer (join protocol 2).
//   worker -> seed    MeshReady once its mutual-TLS mesh is formed.
//   seed -> worker    in a grow of an elastic seed's world only: once every
//                     participant's MeshReady arrived, JoinAdmitted{n, n}
//                     (the grown world of n ranks formed; it is used only
//                     from then on), else a JoinError to the members and
//                     JoinAdmitted{0, 0} (wait again) to the joiners.
//
// Without a token (auth=open) the proofs are empty; such a seed admits only
// workers on its own host unless it was told to run open, and a worker that
// has a token refuses a seed that does not.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace nexar {
class QuicConnection;

namespace join {

// 3: JoinError names the grown world whose mesh failed.
inline constexpr uint16_t kProtocolVersion = 3;
inline constexpr std::string_view kExporterLabel = "EXPORTER-nexar-join";
inline constexpr size_t kSecretLen = 32;
inline constexpr size_t kProofLen = 32;
inline constexpr uint8_t kAuthOpen = 0;
inline constexpr uint8_t kAuthToken = 1;

// Join connections: keep-alive PINGs twice a second, a silent peer is gone
// after three (a worker killed during formation is noticed that fast, and
// before its peers' mesh connections to it time out).
inline constexpr uint64_t kKeepAliveMs = 500;
inline constexpr uint64_t kIdleTimeoutMs = 3000;

// How long a worker waits from its handshake to the seed's challenge. The
// seed closes a connection that waited that long for a challenge slot: its
// worker has given up.
inline constexpr uint64_t kChallengeWaitMs = 10000;

// The longest formation a seed runs (1e6 s, about 11.6 days; nexar-seed's
// --formation-timeout has the same bound). A worker waits for its Welcome no
// longer than the seed's deadline, as the challenge states it, and never more
// than this, whatever a seed claims.
inline constexpr uint64_t kMaxFormationMs = 1'000'000'000;

using Secret = std::array<uint8_t, kSecretLen>;

// The exporter secret of a finished join connection.
Status session_secret(const QuicConnection *c, Secret *out);
// HMAC-SHA256(token, secret || role), role "seed" or "worker".
std::string proof(const std::string &token, const Secret &secret, std::string_view role);
// Constant-time check of a received proof.
bool proof_matches(const std::string &token, const Secret &secret, std::string_view role,
                   const std::string &received);

// The token from an explicit value, else from a file (trailing whitespace
// removed). Both empty gives an empty token (open mode).
Status load_token(const std::string &token, const std::string &token_file, std::string *out);

}  // namespace join
}  // namespace nexar
