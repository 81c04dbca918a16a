// What one small message costs the engine's loop in system calls, on a real
// connection between two in-process engines: a wake-up reads its datagrams
// with one recvmmsg (no second call to find the queue empty), and a send
// leaves no already-due timer behind (each would cost an extra poll and loop
// pass). The figures are counts, not times, so they hold on a busy machine.
#include <gtest/gtest.h>

#include <cstdio>
#include <optional>

#include "client_probe.h"
#include "cluster/local_bootstrap.h"

using namespace nexar;
using namespace nexar_test;

namespace {

constexpr uint32_t kMessages = 300;

// What the sender's and the receiver's counters moved by over the exchange.
struct Exchange {
  TransportStats sender, receiver;
};

TransportStats moved(const TransportStats &before, const TransportStats &after) {
  TransportStats d;
  d.socket_reads = after.socket_reads - before.socket_reads;
  d.empty_socket_reads = after.empty_socket_reads - before.empty_socket_reads;
  d.timers_fired_due = after.timers_fired_due - before.timers_fired_due;
  return d;
}

// Sends kMessages small frames from rank 0 to rank 1, one at a time: each is
// in the receiver's mailbox before the next leaves, so each arrives on a
// wake-up of its own.
void exchange(std::optional<Exchange> *out) {
  Config cfg;
  std::vector<std::unique_ptr<Communicator>> w;
  ASSERT_TRUE(bootstrap_local(2, cfg, &w).ok());
  Client &a = w[0]->client(), &b = w[1]->client();
  const TransportStats a0 = a.transport_stats(), b0 = b.transport_stats();
  for (uint32_t i = 0; i < kMessages; ++i) {
    send_frame(a, 1, filled_frame(wire::FrameKind::P2P, 1, 8, static_cast<uint8_t>(i)));
    ASSERT_TRUE(eventually([&] { return stats_of(b).unexpected_bytes == 8 * (i + 1); }))
        << "message " << i << " did not arrive";
  }
  *out = Exchange{moved(a0, a.transport_stats()), moved(b0, b.transport_stats())};
  // The counts, for docs/performance.md and for a failure's context.
  std::printf("receiver: %llu empty of %llu reads; sender: %llu timers fired due\n",
              static_cast<unsigned long long>((*out)->receiver.empty_socket_reads),
              static_cast<unsigned long long>((*out)->receiver.socket_reads),
              static_cast<unsigned long long>((*out)->sender.timers_fired_due));
}

class LoopSyscalls : public ::testing::Test {
 protected:
  // One exchange serves every test of the suite.
  static void SetUpTestSuite() { exchange(&measured_); }
  void SetUp() override { ASSERT_TRUE(measured_) << "the exchange failed"; }
  static std::optional<Exchange> measured_;
};
std::optional<Exchange> LoopSyscalls::measured_;

}  // namespace

TEST_F(LoopSyscalls, OneWakeUpReadsItsDatagramsWithOneCall) {
  const TransportStats &b = measured_->receiver;
  // At least one read per message; reading until EAGAIN made every other call empty.
  EXPECT_GE(b.socket_reads, kMessages);
  EXPECT_LE(b.empty_socket_reads * 10, b.socket_reads)
      << b.empty_socket_reads << " of " << b.socket_reads << " recvmmsg calls found nothing";
}

TEST_F(LoopSyscalls, SendingLeavesNoTimerThatIsAlreadyDue) {
  // ngtcp2's pacing deadline after a small packet is due at once; arming a
  // timer for it was one extra poll per send. A few still happen when the
  // thread is preempted between the write and arming its timer.
  const uint64_t due = measured_->sender.timers_fired_due;
  EXPECT_LE(due * 10, kMessages) << due << " timers armed already due fired over " << kMessages
                                 << " sends";
}
