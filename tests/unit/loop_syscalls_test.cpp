// What one small message costs the engine's loop in system calls, on a real
// connection between two in-process engines: a wake-up reads its datagrams
// with one recvmmsg (no second call to find the queue empty), and a send
// leaves no already-due timer behind (each would cost an extra poll and loop
// pass). The figures are counts, not times, so they hold on a busy machine.
#include <gtest/gtest.h>

#include "cluster/local_bootstrap.h"
#include "engine_probe.h"

using namespace nexar;
using namespace nexar_test;

namespace {

constexpr uint32_t kMessages = 300;

// Sends kMessages small frames from a to b, one at a time: each is in b's
// mailbox before the next leaves, so each arrives on a wake-up of its own.
void send_one_by_one(Engine &a, Engine &b) {
  for (uint32_t i = 0; i < kMessages; ++i) {
    send_frame(a, 1, filled_frame(wire::FrameKind::P2P, 1, 8, static_cast<uint8_t>(i)));
    ASSERT_TRUE(eventually([&] { return stats_of(b).unexpected_bytes == 8 * (i + 1); }))
        << "message " << i << " did not arrive";
  }
}

}  // namespace

TEST(LoopSyscalls, OneWakeUpReadsItsDatagramsWithOneCall) {
  Config cfg;
  std::vector<std::unique_ptr<Communicator>> w;
  ASSERT_TRUE(bootstrap_local(2, cfg, &w).ok());
  Engine &a = w[0]->engine(), &b = w[1]->engine();
  const TransportStats before = b.transport_stats();
  send_one_by_one(a, b);
  const TransportStats after = b.transport_stats();
  const uint64_t reads = after.socket_reads - before.socket_reads;
  const uint64_t empty = after.empty_socket_reads - before.empty_socket_reads;
  // At least one read per message; reading until EAGAIN made every other call empty.
  EXPECT_GE(reads, kMessages);
  EXPECT_LE(empty * 10, reads) << empty << " of " << reads << " recvmmsg calls found nothing";
}

TEST(LoopSyscalls, SendingLeavesNoTimerThatIsAlreadyDue) {
  Config cfg;
  std::vector<std::unique_ptr<Communicator>> w;
  ASSERT_TRUE(bootstrap_local(2, cfg, &w).ok());
  Engine &a = w[0]->engine(), &b = w[1]->engine();
  const TransportStats before = a.transport_stats();
  send_one_by_one(a, b);
  const TransportStats after = a.transport_stats();
  // ngtcp2's pacing deadline after a small packet is due at once; arming a
  // timer for it was one extra poll per send.
  const uint64_t due = after.timers_armed_due - before.timers_armed_due;
  EXPECT_LE(due * 10, kMessages) << due << " timers armed already due for " << kMessages
                                 << " sends";
}
