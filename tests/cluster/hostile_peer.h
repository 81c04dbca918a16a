// Hostile peers for the security tests, played with nexar's own transport
// classes (tests/cluster/cluster_probe.cpp runs them):
//
// Against a rank's mesh listener, by a process that joined the world as a
// member (so it holds a valid certificate for its own rank):
//   other-ca                a certificate for its rank and cluster signed by
//                           a CA of its own
//   claim-rank:N            its valid certificate, a hello claiming rank N
//   expired, not-yet-valid  a certificate for its rank signed by the
//                           cluster's real CA (read from --ca-dir) whose
//                           validity is over or has not begun
//   wrong-alpn              its valid certificate, ALPN "nexar/0"
//   chacha20                its valid certificate, offering only
//                           TLS_CHACHA20_POLY1305_SHA256
//   finish-streams          its valid certificate; opens stream after
//                           stream, each finished (FIN) after its lane byte,
//                           up to 2000 (nexar's streams live as long as the
//                           connection: each closed one would be replaced)
//   length-over-limit       its valid certificate; a P2P frame whose length
//                           field says 4 GiB + 1
//   length-4g               its valid certificate; a P2P frame of exactly
//                           4 GiB (the largest message) for a tag nobody
//                           receives, sent for as long as the victim lets it
//   connections             its valid certificate; 64 connections at once,
//                           none of which says hello
// Each prints one line:
//   ATTACK <name> ACCEPTED | REFUSED <why> [streams=N] | CONTAINED written=N
// (connections: ATTACK connections ACCEPTED|REFUSED opened=N closed=K)
//
// Against the seed:
//   slow-joiner: answers the challenge one byte every 200 ms (a JoinRequest
//   frame that would take minutes); prints "SLOW sent=N CLOSED <why>" when
//   the seed closes it, or "SLOW sent=N NOT_CLOSED" after --seconds.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "transport/socket_address.h"
#include "transport/tls_credentials.h"

namespace nexar_probe {

struct AttackTarget {
  nexar::SocketAddress addr;  // the victim's mesh listener
  uint32_t rank = 0;          // the victim's rank
  uint32_t own_rank = 0;      // the rank the attacker's certificate names
  uint64_t cluster_id = 0;
  uint32_t world_size = 0;
  std::shared_ptr<nexar::TlsCredentials> creds;  // the attacker's valid ones
  std::string ca_dir;                            // the seed's --ca-dir (expired, not-yet-valid)
};

// Runs attack `what`; false when it is none of the attacks above.
bool hostile_attack(const std::string &what, const AttackTarget &t);

// The slow joiner (argv: --seed ADDR [--seconds S]).
int slow_joiner(int argc, char **argv);

}  // namespace nexar_probe
