// Hostile peers against a real world (seed, two workers through the C ABI):
// a member of the world (tests/cluster/hostile_peer.h) attacks rank 0's mesh
// listener with bad certificates, a wrong ALPN or cipher, finished streams
// and length fields up to and past 4 GiB; a slow joiner dribbles bytes at the
// seed. Each is refused or contained, counted in rank 0's statistics and
// logged with its reason, and ranks 0 and 2 still exchange exactly after.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "seed_and_workers.h"

using namespace cluster_test;

namespace {

// The probe's line for one attack.
std::string attack_line(const std::string &probe, const std::string &name) {
  const size_t at = probe.find("ATTACK " + name + " ");
  if (at == std::string::npos) return "";
  return probe.substr(at, probe.find('\n', at) - at);
}

unsigned long long number(const std::string &text, const std::string &key) {
  return std::stoull("0" + field(text, key));
}

}  // namespace

// Certificates signed by the cluster's own CA but expired or not yet valid,
// a wrong ALPN and a cipher other than AES-GCM: each handshake is refused,
// counted, and logged with what was wrong.
TEST(HostilePeer, BadHandshakesAreRefusedCountedAndLogged) {
  const AttackedWorld o = attacked_world("expired,not-yet-valid,wrong-alpn,chacha20");
  const std::string all = o.probe + o.victim_out + o.victim_err;
  for (const char *name : {"expired", "not-yet-valid", "wrong-alpn", "chacha20"}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(attack_line(o.probe, name).rfind(std::string("ATTACK ") + name + " REFUSED", 0), 0u)
        << all;
  }
  // At least once each: a client Initial retransmitted before the refusal
  // reached the attacker is a second attempt, refused and counted again.
  EXPECT_GE(number(o.victim_out, "connections_refused"), 4u) << all;
  EXPECT_EQ(number(o.victim_out, "protocol_violations"), 0u) << all;
  // The reasons, in the victim's log.
  EXPECT_TRUE(contains(o.victim_err, "refusing connection from 127.0.0.1:")) << all;
  EXPECT_TRUE(contains(o.victim_err, "expired certificate")) << all;
  EXPECT_TRUE(contains(o.victim_err, "not yet valid certificate")) << all;
  EXPECT_TRUE(contains(o.victim_err, "(alert 120: No supported application protocol")) << all;
  EXPECT_TRUE(contains(o.victim_err, "(alert 40: Handshake failed)")) << all;  // the cipher
  // A certificate's verdict only where the certificate was the reason.
  EXPECT_FALSE(contains(o.victim_err, "revoked")) << all;
}

// A member that finishes its streams (each would be replaced by a new one,
// without bound) or sends a length field past 4 GiB is cut off at once.
TEST(HostilePeer, ProtocolBreakersAreCutOffCountedAndLogged) {
  const AttackedWorld o = attacked_world("finish-streams,length-over-limit");
  const std::string all = o.probe + o.victim_out + o.victim_err;
  const std::string streams = attack_line(o.probe, "finish-streams");
  EXPECT_EQ(streams.rfind("ATTACK finish-streams REFUSED", 0), 0u) << all;
  // No more than the 16 streams a connection is granted at a time.
  EXPECT_LE(number(streams, "streams"), 16u) << all;
  EXPECT_GE(number(streams, "streams"), 1u) << all;
  EXPECT_EQ(attack_line(o.probe, "length-over-limit").rfind("ATTACK length-over-limit REFUSED", 0),
            0u)
      << all;
  EXPECT_EQ(number(o.victim_out, "protocol_violations"), 2u) << all;
  EXPECT_TRUE(contains(o.victim_err, "closing the connection with 127.0.0.1:")) << all;
  EXPECT_TRUE(contains(o.victim_err, "finished stream")) << all;
  EXPECT_TRUE(contains(o.victim_err, "frame length 4294967297 exceeds the limit 4294967296"))
      << all;
}

// A member that opens 64 connections at once and never says hello on them
// keeps at most a few open: the others are refused, counted and logged.
TEST(HostilePeer, ConnectionsThatNeverSayHelloAreCapped) {
  const AttackedWorld o = attacked_world("connections");
  const std::string all = o.probe + o.victim_out + o.victim_err;
  const std::string line = attack_line(o.probe, "connections");
  EXPECT_EQ(line.rfind("ATTACK connections REFUSED", 0), 0u) << all;
  const unsigned long long opened = number(line, "opened"), closed = number(line, "closed");
  EXPECT_EQ(opened, 64u) << all;
  EXPECT_GE(closed, opened - 4) << all;  // PeerRouter's kMaxAwaitingHello stay
  EXPECT_GE(number(o.victim_out, "connections_refused"), opened - 4) << all;
  EXPECT_TRUE(contains(o.victim_err, "connections waiting to say hello")) << all;
}

// A frame that says 4 GiB (the largest message) for a tag nobody receives:
// the victim buffers it up to its per-peer budget, then withholds credit, so
// the sender gets no further than the budget plus the stream's window.
TEST(HostilePeer, FourGibLengthIsHeldByFlowControl) {
  const AttackedWorld o = attacked_world("length-4g");
  const std::string all = o.probe + o.victim_out + o.victim_err;
  const std::string line = attack_line(o.probe, "length-4g");
  EXPECT_EQ(line.rfind("ATTACK length-4g CONTAINED", 0), 0u) << all;
  constexpr unsigned long long kBudget = 16ull << 20, kStreamWindow = 32ull << 20;
  EXPECT_GE(number(line, "written"), kBudget) << all;  // it did flow, up to the budget
  EXPECT_LE(number(line, "written"), kBudget + kStreamWindow + (1 << 20)) << all;
  EXPECT_EQ(number(o.victim_out, "protocol_violations"), 0u) << all;
}

// A joiner that answers the seed's challenge a byte at a time is closed when
// the authentication timeout runs out, however steadily it sends; honest
// workers join meanwhile and after.
TEST(HostilePeer, SlowJoinerIsClosedAtTheAuthenticationTimeout) {
  TempDir dir;
  std::string addr;
  auto seed =
      start_seed(dir, "seed", {"--world-size", "2", "--token-file", write_token(dir)}, &addr);
  Proc slow(dir, "slow", {NEXAR_PROBE_BIN, "slow-joiner", "--seed", addr, "--seconds", "30"}, {});
  std::vector<std::unique_ptr<Proc>> workers;
  const Proc::Env env{{"NEXAR_SEED", addr}, {"NEXAR_CLUSTER_TOKEN", kToken}};
  workers.push_back(worker(dir, "w0", env));
  ASSERT_TRUE(slow.wait(60)) << slow.dump() << seed->dump();
  workers.push_back(worker(dir, "w1", env));
  expect_world(*seed, workers, 2);
  const std::string out = slow.out();
  EXPECT_TRUE(contains(out, " CLOSED ")) << slow.dump() << seed->dump();
  EXPECT_GE(number(out, "sent"), 2u) << out;  // it was sending, not silent
  EXPECT_LT(number(out, "sent"), number(out, "of")) << out;
  EXPECT_TRUE(contains(seed->err() + seed->out(), "did not authenticate within 5 s; closing"))
      << seed->dump();
}
