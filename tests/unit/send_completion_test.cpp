// When a send completes (client/transfer.h), on a real connection between two
// in-process engines whose receiver is held so that it acknowledges nothing:
// a copied send completes at once, an acknowledged one only after the
// receiver's acknowledgement, and copies stop once kEagerQueueLimit bytes
// wait on the connection. Each test also checks that the connection's count
// of queued bytes is back to zero once everything is written: a count that
// wrapped below zero had silently made every send wait for its
// acknowledgement.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>

#include "client/transfer.h"
#include "client_probe.h"
#include "cluster/local_bootstrap.h"
#include "engine/spawn.h"

using namespace nexar;
using namespace nexar_test;

namespace {

using std::chrono::seconds;

// Keeps an engine's loop thread inside a command until released: it reads
// nothing from its socket meanwhile, so it acknowledges nothing. held() says
// whether the loop thread entered the command within 30 s.
class LoopHold {
 public:
  explicit LoopHold(Client &e) {
    // The command owns what it touches (the shared promise, its copy of the
    // release future), so this object may go whether or not it ever ran.
    auto entered = std::make_shared<std::promise<void>>();
    std::future<void> in = entered->get_future();
    std::shared_future<void> until = release_.get_future().share();
    e.loop().post([entered, until] {
      entered->set_value();
      until.wait_for(seconds(60));  // bounded, should a test fail before releasing
    });
    held_ = in.wait_for(seconds(30)) == std::future_status::ready;
  }
  ~LoopHold() { release(); }
  bool held() const { return held_; }
  void release() {
    if (!released_) release_.set_value();
    released_ = true;
  }

 private:
  std::promise<void> release_;
  bool held_ = false, released_ = false;
};

class SendCompletionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Config cfg;
    cfg.shm = NEXAR_SHM_OFF;  // QUIC's acknowledgements are what is tested
    ASSERT_TRUE(bootstrap_local(2, cfg, &world_).ok());
    op_ = std::make_unique<OpContext>(&sender().loop(), 1, "send completion test");
  }
  void TearDown() override {
    // On the loop thread, which completes the sends: a failed test may leave
    // one waiting, and the operation then ends it as it goes.
    sender().loop().run_sync([&] { op_.reset(); });
    world_.clear();
  }
  Client &sender() { return world_[0]->client(); }
  Client &receiver() { return world_[1]->client(); }

  // Starts `count` sends of `bytes` to rank 1 on the sender's loop thread;
  // returns how many completed before the command returned.
  uint32_t start_sends(uint32_t count, uint64_t bytes, SendCompletion completion) {
    payload_.assign(bytes, 0x5a);
    uint32_t at_once = 0;
    sender().loop().run_sync([&] {
      for (uint32_t i = 0; i < count; ++i)
        spawn(send_to({world_[0].get(), op_.get(), UINT64_MAX},
                      {1, wire::FrameKind::P2P, 7, 0, "test send"}, payload_.data(), bytes,
                      completion),
              [this](Status s) {
                if (!s) failures_.fetch_add(1);
                completed_.fetch_add(1);
              });
      at_once = completed_.load();
    });
    return at_once;
  }

  uint64_t queued_bytes() {
    uint64_t q = 0;
    sender().loop().run_sync([&] {
      QuicConnection *c = sender().peer(1).direct_connection();
      q = c ? c->queued_bytes() : UINT64_MAX;
    });
    return q;
  }

  std::vector<std::unique_ptr<Communicator>> world_;
  std::unique_ptr<OpContext> op_;
  std::vector<uint8_t> payload_;
  std::atomic<uint32_t> completed_{0}, failures_{0};
};

TEST_F(SendCompletionTest, CopiedSendCompletesBeforeThePeerAcknowledges) {
  LoopHold hold(receiver());
  ASSERT_TRUE(hold.held()) << "the receiver's loop thread never ran the holding command";
  EXPECT_EQ(start_sends(1, 8, SendCompletion::Copied), 1u)
      << "an 8-byte copied send waited (queued bytes " << queued_bytes() << ")";
  hold.release();
  EXPECT_TRUE(eventually([&] { return stats_of(receiver()).unexpected_bytes == 8; }))
      << "the message did not arrive";
  EXPECT_EQ(failures_.load(), 0u);
  EXPECT_TRUE(eventually([&] { return queued_bytes() == 0; })) << queued_bytes();
}

TEST_F(SendCompletionTest, AcknowledgedSendWaitsForThePeer) {
  LoopHold hold(receiver());
  ASSERT_TRUE(hold.held()) << "the receiver's loop thread never ran the holding command";
  EXPECT_EQ(start_sends(1, 8, SendCompletion::Acknowledged), 0u);
  // The receiver cannot acknowledge while held: nothing else completes it.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(completed_.load(), 0u) << "completed without the receiver's acknowledgement";
  hold.release();
  EXPECT_TRUE(eventually([&] { return completed_.load() == 1; })) << "never completed";
  EXPECT_EQ(failures_.load(), 0u);
  EXPECT_TRUE(eventually([&] { return queued_bytes() == 0; })) << queued_bytes();
}

TEST_F(SendCompletionTest, CopiesStopAtTheQueueLimit) {
  // 12 MiB of 64 KiB messages (below the receiver's 16 MiB of buffering):
  // the transport writes what congestion and flow control allow, then the
  // rest waits in the queue, and past kEagerQueueLimit sends stop copying.
  const uint32_t count = static_cast<uint32_t>((kEagerQueueLimit + (4u << 20)) / kEagerBytes);
  LoopHold hold(receiver());
  ASSERT_TRUE(hold.held()) << "the receiver's loop thread never ran the holding command";
  const uint32_t at_once = start_sends(count, kEagerBytes, SendCompletion::Copied);
  EXPECT_GE(at_once, kEagerQueueLimit / kEagerBytes) << "copies stopped below the limit";
  EXPECT_LT(at_once, count) << "copies went on past the limit: the queue is unbounded";
  hold.release();
  EXPECT_TRUE(eventually([&] { return completed_.load() == count; }))
      << completed_.load() << " of " << count << " completed";
  EXPECT_EQ(failures_.load(), 0u);
  EXPECT_TRUE(eventually([&] { return queued_bytes() == 0; })) << queued_bytes();
}

}  // namespace
