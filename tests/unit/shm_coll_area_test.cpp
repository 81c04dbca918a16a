// A collective area between two real in-process engines with real segments.
//
// When a collective on shared memory rings a member: only when that member's
// wait may sleep (its sleeping word is set), not while it polls the counters.
// A doorbell is a system call and wakes the member's loop thread; rung on
// every step it made a small collective several times slower (counts, not
// times).
//
// Direct reads: each member finds out whether it can read the other's
// process, and an address a peer publishes that does not hold its data is a
// protocol error naming it, never a crash.
#include <gtest/gtest.h>

#include <memory>

#include "client/shm_coll_area.h"
#include "client/shm_host.h"
#include "client_probe.h"
#include "cluster/local_bootstrap.h"
#include "collective/coll.h"
#include "collective/shm_coll_steps.h"
#include "collective/shm_one_ticket.h"
#include "transport/shm_channel.h"

using namespace nexar;
using namespace nexar_test;

namespace {

// An allgather's operation and collective on each of two members.
struct Allgathers {
  Allgathers(std::vector<std::unique_ptr<Communicator>> &w, const CollArgs &args0,
             const CollArgs &args1)
      : a0(args0),
        a1(args1),
        op0(&w[0]->client().loop(), 1, "allgather"),
        op1(&w[1]->client().loop(), 1, "allgather"),
        c0(w[0].get(), &op0, CollKind::Allgather, a0, 1),
        c1(w[1].get(), &op1, CollKind::Allgather, a1, 1) {}
  // Of count bytes each, with no buffers (the test announces its own).
  Allgathers(std::vector<std::unique_ptr<Communicator>> &w, uint64_t count)
      : Allgathers(w, counted(count), counted(count)) {}
  static CollArgs counted(uint64_t count) {
    CollArgs a;
    a.count = count;
    return a;
  }
  CollArgs a0, a1;
  OpContext op0, op1;
  Coll c0, c1;
};

class TwoAreas : public ::testing::Test {
 protected:
  void SetUp() override {
    Config cfg;
    ASSERT_TRUE(bootstrap_local(2, cfg, &w_).ok());
    for (uint32_t r = 0; r < 2; ++r)
      ASSERT_TRUE(eventually([&] { return channel(r) != nullptr; }))
          << "rank " << r << " has no same-host channel";
    for (uint32_t r = 0; r < 2; ++r)
      on_loop(r, [&] { area_[r] = ShmCollArea::create(host(r), r, 2, cma()); });
    ASSERT_TRUE(area_[0] && area_[1]);
    for (uint32_t r = 0; r < 2; ++r)
      on_loop(r, [&] { attached_[r] = area_[r]->attach(1 - r, 1 - r, area_[1 - r]->offset()); });
    ASSERT_TRUE(attached_[0] && attached_[1]);
  }

  void TearDown() override {
    for (uint32_t r = 0; r < 2; ++r)
      if (r < w_.size() && area_[r]) on_loop(r, [&] { area_[r].reset(); });
  }

  virtual Config::ShmCma cma() const { return Config::ShmCma::On; }

  ShmHost &host(uint32_t r) { return w_[r]->client().shm(); }
  ShmChannel *channel(uint32_t r) { return host(r).channel(1 - r); }
  void on_loop(uint32_t r, const std::function<void()> &fn) { w_[r]->client().loop().run_sync(fn); }
  // Rank 1's loop sleep word, as rank 0 reads it.
  uint64_t peer_sleep_seq() { return shm_load(&host(1).segment().header()->sleep_seq); }

  // Rank 0 changed a counter: rings rank 1 as a collective step does.
  // Returns the doorbells it rang, and in *seq rank 1's sleep word then.
  uint64_t ring_from_rank0(uint64_t *seq) {
    uint64_t rung = 0;
    on_loop(0, [&] {
      const uint64_t before = channel(0)->doorbells_rung();
      *seq = peer_sleep_seq();
      area_[0]->ring_all();
      rung = channel(0)->doorbells_rung() - before;
    });
    return rung;
  }

  std::vector<std::unique_ptr<Communicator>> w_;
  std::unique_ptr<ShmCollArea> area_[2];
  bool attached_[2] = {false, false};
};

TEST_F(TwoAreas, RingsAMemberWhoseWaitMaySleepAndNotOneThatPolls) {
  // Rank 1 waits and may sleep: a change of rank 0's counters rings it, once
  // its loop sleeps (rung once per sleep).
  shm_store(area_[1]->own(ShmCollArea::kSleeping), 1);
  uint64_t rung_at = 0;
  ASSERT_TRUE(eventually([&] { return ring_from_rank0(&rung_at) == 1; }))
      << "a sleeping waiter was never rung";

  // Rank 1 polls (its word is clear): its loop sleeps again, after waking
  // for that doorbell, but nothing rings it.
  shm_store(area_[1]->own(ShmCollArea::kSleeping), 0);
  ASSERT_TRUE(eventually([&] {
    const uint64_t s = peer_sleep_seq();
    return s % 2 == 1 && s != rung_at;
  })) << "rank 1's loop did not sleep again";
  for (int i = 0; i < 100; ++i) {
    uint64_t seq = 0;
    EXPECT_EQ(ring_from_rank0(&seq), 0u) << "rang a member that polls, step " << i;
  }
}

TEST_F(TwoAreas, EachReadsTheOtherDirectly) {
  // In-process engines: the process reads itself, which the host allows.
  for (uint32_t r = 0; r < 2; ++r) {
    on_loop(r, [&] {
      EXPECT_TRUE(area_[r]->reads_directly(1 - r)) << "rank " << r;
      // With on, whatever it costs.
      EXPECT_TRUE(area_[r]->read_directly_by_all(0.5)) << "rank " << r;
    });
  }
}

class TwoAutoAreas : public TwoAreas {
  Config::ShmCma cma() const override { return Config::ShmCma::Auto; }
};

TEST_F(TwoAutoAreas, ReadDirectlyOnlyWhereAReadCostsLessThanTheCopiesItReplaces) {
  // Attaching timed a read through the kernel against copies, once for the
  // process; a direct read is taken where it replaces more copies than it
  // costs.
  const double cost = ShmCollArea::kernel_read_cost();
  ASSERT_GT(cost, 0) << "attach did not time a read";
  for (uint32_t r = 0; r < 2; ++r) {
    on_loop(r, [&] {
      EXPECT_TRUE(area_[r]->reads_directly(1 - r)) << "rank " << r;
      EXPECT_TRUE(area_[r]->read_directly_by_all(cost * 1.01)) << "rank " << r;
      EXPECT_FALSE(area_[r]->read_directly_by_all(cost * 0.99)) << "rank " << r;
    });
  }
}

TEST_F(TwoAreas, AnAddressThatHoldsNoDataIsAProtocolErrorNamingThePeer) {
  const uint64_t bytes = 1 << 20;
  Allgathers g(w_, bytes);
  Coll &c0 = g.c0, &c1 = g.c1;
  // Rank 0 announces ticket 0 as a buffer at an address nothing is mapped at.
  const uint64_t nowhere = 4096;
  on_loop(0,
          [&] { shm_coll::announce(c0, *area_[0], 0, shm_coll::kDirectAddress | nowhere, bytes); });
  on_loop(1, [&] {
    const uint8_t *data = nullptr;
    uint64_t direct = 0;
    // A reader that does not take addresses refuses it.
    Status s = shm_coll::published_data(c1, *area_[1], 0, 0, bytes, &data);
    EXPECT_EQ(s.code, NEXAR_ERR_PROTOCOL) << s.message;
    EXPECT_EQ(s.failed_rank, 0);
    EXPECT_NE(s.message.find("rank 0 published an address"), std::string::npos) << s.message;
    // One that does gets the address; reading it fails cleanly.
    s = shm_coll::published_data(c1, *area_[1], 0, 0, bytes, &data, &direct);
    ASSERT_TRUE(s.ok()) << s.message;
    EXPECT_EQ(direct, nowhere);
    std::vector<uint8_t> out(bytes);
    s = area_[1]->read_member(0, direct, out.data(), bytes);
    EXPECT_EQ(s.code, NEXAR_ERR_PROTOCOL) << s.message;
    EXPECT_NE(s.message.find("Bad address"), std::string::npos) << s.message;
  });
}

TEST_F(TwoAreas, AReaderFailsWhenTheOwnerGaveTheBufferUpWhileItRead) {
  const uint64_t bytes = 1 << 16;
  Allgathers g(w_, bytes);
  Coll &c0 = g.c0, &c1 = g.c1;
  std::vector<uint8_t> buffer(bytes, 7);
  std::vector<uint8_t> out(bytes);
  // Ticket 0 read while its owner waits: fine. Ticket 1's owner fails
  // before its reader checks (its Withdrawal goes out of scope armed).
  for (uint64_t t : {0u, 1u}) {
    on_loop(0, [&] {
      shm_coll::announce(c0, *area_[0], t,
                         shm_coll::kDirectAddress | reinterpret_cast<uint64_t>(buffer.data()),
                         bytes);
      if (t == 1) {
        shm_coll::Withdrawal gave_up(*area_[0], t);
        gave_up.arm();
      }
    });
    on_loop(1, [&] {
      const uint8_t *data = nullptr;
      uint64_t direct = 0;
      ASSERT_TRUE(shm_coll::published_data(c1, *area_[1], 0, t, bytes, &data, &direct).ok());
      ASSERT_TRUE(area_[1]->read_member(0, direct, out.data(), bytes).ok());
      EXPECT_EQ(out, buffer);
      const Status s = shm_coll::check_not_withdrawn(c1, *area_[1], 0, t);
      if (t == 0) {
        EXPECT_TRUE(s.ok()) << s.message;
      } else {
        EXPECT_EQ(s.code, NEXAR_ERR_ABORTED);
        EXPECT_EQ(s.failed_rank, 0);
        EXPECT_NE(s.message.find("rank 0 gave this collective up"), std::string::npos) << s.message;
      }
    });
  }
}

// A collective of one step (ShmOneTicket) whose blocks are large enough
// publishes them by address; a member that fails before its reader read
// withdraws its buffer, and the reader does not return what it read: it
// fails, and says so for its driver, which waits for the cause.
TEST_F(TwoAreas, AOneStepCollectiveWithdrawsItsBufferWhenItFailsBeforeItsReader) {
  const uint64_t bytes = shm_coll::kDirectMinBytes;
  std::vector<uint8_t> send0(bytes, 1), send1(bytes, 2), recv0(2 * bytes), recv1(2 * bytes);
  CollArgs args0, args1;
  args0.sendbuf = send0.data();
  args0.recvbuf = recv0.data();
  args1.sendbuf = send1.data();
  args1.recvbuf = recv1.data();
  args0.count = args1.count = bytes;
  args0.dtype = args1.dtype = NEXAR_DTYPE_U8;
  Allgathers g(w_, args0, args1);
  Coll &c0 = g.c0, &c1 = g.c1;
  ASSERT_TRUE(ShmOneTicket::fits(CollKind::Allgather, args0, 2));
  std::unique_ptr<ShmOneTicket> steps[2];
  shm_coll::ShmNeed need{};
  // Both publish and wait for the other's ticket.
  on_loop(0, [&] {
    steps[0] = std::make_unique<ShmOneTicket>(c0, *area_[0], CollKind::Allgather);
    ASSERT_TRUE(steps[0]->advance(c0, *area_[0], &need).ok());
    ASSERT_NE(need.doing, nullptr);
    const uint64_t offset = shm_load(&area_[0]->header(0, 0)->data_offset);
    EXPECT_EQ(offset, shm_coll::kDirectAddress | reinterpret_cast<uint64_t>(send0.data()));
  });
  on_loop(1, [&] {
    steps[1] = std::make_unique<ShmOneTicket>(c1, *area_[1], CollKind::Allgather);
    ASSERT_TRUE(steps[1]->advance(c1, *area_[1], &need).ok());
    ASSERT_NE(need.doing, nullptr);
  });
  // Rank 0 fails (its deadline, say) before rank 1 read its block.
  on_loop(0, [&] {
    steps[0]->end(*area_[0], error(NEXAR_ERR_TIMEOUT, "gave up"));
    EXPECT_EQ(shm_load(area_[0]->own(ShmCollArea::kWithdrawn)), 1u);
  });
  on_loop(1, [&] {
    const Status s = steps[1]->advance(c1, *area_[1], &need);
    EXPECT_EQ(s.code, NEXAR_ERR_ABORTED) << s.message;
    EXPECT_EQ(s.failed_rank, 0);
    EXPECT_TRUE(steps[1]->saw_withdrawal());
    steps[1]->end(*area_[1], s);
    // Rank 1 failed too before rank 0 read its block: it withdraws as well.
    EXPECT_EQ(shm_load(area_[1]->own(ShmCollArea::kWithdrawn)), 1u);
  });
  on_loop(0, [&] { steps[0].reset(); });
  on_loop(1, [&] { steps[1].reset(); });

  // Ticket 1: rank 0 read rank 1's block and waits for rank 1 to read its
  // own; failing there, it withdraws too. Rank 1 then reads all of it.
  on_loop(0, [&] {
    steps[0] = std::make_unique<ShmOneTicket>(c0, *area_[0], CollKind::Allgather);
    ASSERT_TRUE(steps[0]->advance(c0, *area_[0], &need).ok());
  });
  on_loop(1, [&] {
    steps[1] = std::make_unique<ShmOneTicket>(c1, *area_[1], CollKind::Allgather);
    ASSERT_TRUE(steps[1]->advance(c1, *area_[1], &need).ok());
  });
  on_loop(0, [&] {
    ASSERT_TRUE(steps[0]->advance(c0, *area_[0], &need).ok());
    EXPECT_STREQ(need.doing, "receive the data");
    EXPECT_EQ(recv0[bytes], 2);
    steps[0]->end(*area_[0], error(NEXAR_ERR_ABORTED, "aborted"));
    EXPECT_EQ(shm_load(area_[0]->own(ShmCollArea::kWithdrawn)), 2u);
  });
  on_loop(1, [&] {
    EXPECT_EQ(steps[1]->advance(c1, *area_[1], &need).code, NEXAR_ERR_ABORTED);
    EXPECT_TRUE(steps[1]->saw_withdrawal());
  });
  on_loop(0, [&] { steps[0].reset(); });
  on_loop(1, [&] { steps[1].reset(); });
}

}  // namespace
