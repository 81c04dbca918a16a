// nexar_last_error: the full outcome of the calling thread's last failed
// call. A blocking call names the rank and the operation that failed it
// itself, which the communicator's first asynchronous error need not.
#include <atomic>
#include <cstddef>
#include <cstring>

#include "harness.h"

using namespace nexar_test;

namespace {

nexar_completion_t read_last_error() {
  nexar_completion_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  EXPECT_EQ(nexar_last_error(&info), NEXAR_OK);
  return info;
}

// Waits (bounded) until comm reports an asynchronous error, and returns it.
nexar_completion_t wait_async_error(nexar_comm_t *comm) {
  nexar_completion_t info;
  memset(&info, 0, sizeof info);
  for (int i = 0; i < 1000 && nexar_comm_get_async_error(comm, &info) == NEXAR_OK; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return info;
}

// The highest operation number among the completions of two self-addressed
// operations on comm: the next operation submitted there gets one more.
uint64_t last_seq_after_self_exchange(nexar_comm_t *comm) {
  Completions done;
  uint64_t in = 0, out = 7;
  const uint32_t me = nexar_comm_rank(comm);
  EXPECT_EQ(nexar_recv(comm, &in, sizeof in, me, 9, Completions::callback, &done), NEXAR_OK);
  EXPECT_EQ(nexar_send(comm, &out, sizeof out, me, 9, Completions::callback, &done), NEXAR_OK);
  EXPECT_TRUE(done.wait(2));
  uint64_t last = 0;
  for (auto &r : done.records) {
    EXPECT_EQ(r.status, NEXAR_OK) << r.message;
    last = r.seq > last ? r.seq : last;
  }
  return last;
}

}  // namespace

TEST(LastError, ReadsNoFailureOnAFreshThread) {
  std::thread([] {
    nexar_completion_t info = read_last_error();
    EXPECT_EQ(info.struct_size, sizeof info);
    EXPECT_EQ(info.status, NEXAR_OK);
    EXPECT_EQ(info.failed_rank, -1);
    EXPECT_EQ(info.op_seq, 0u);
    ASSERT_NE(info.message, nullptr);
    EXPECT_STREQ(info.message, "");
  }).join();
}

TEST(LastError, ArgumentErrorRecordsItsStatusAndMessage) {
  World w(2);
  ASSERT_TRUE(w.ok());
  uint64_t v = 0;
  ASSERT_EQ(nexar_send(w[0], &v, sizeof v, 5, 1, nullptr, nullptr), NEXAR_ERR_INVALID_RANK);
  nexar_completion_t info = read_last_error();
  EXPECT_EQ(info.status, NEXAR_ERR_INVALID_RANK);
  EXPECT_EQ(info.failed_rank, -1) << "an argument error names no failed rank";
  EXPECT_EQ(info.op_seq, 0u) << "a refused call got no operation number";
  ASSERT_NE(info.message, nullptr);
  EXPECT_NE(std::string(info.message).find("rank 5"), std::string::npos) << info.message;
  EXPECT_STREQ(info.message, nexar_last_error_message());

  // A success clears the record, but the message handed out stays readable
  // and unchanged until the next failing call.
  const std::string before = info.message;
  const char *held = info.message;
  NX_OK(nexar_send(w[0], &v, sizeof v, 1, 1, nullptr, nullptr));
  nexar_completion_t cleared = read_last_error();
  EXPECT_EQ(cleared.status, NEXAR_OK);
  EXPECT_EQ(cleared.failed_rank, -1);
  EXPECT_EQ(cleared.op_seq, 0u);
  EXPECT_STREQ(cleared.message, "");
  EXPECT_STREQ(nexar_last_error_message(), "");
  EXPECT_EQ(before, held);
  NX_OK(nexar_recv(w[1], &v, sizeof v, 0, 1, nullptr, nullptr));
}

TEST(LastError, RefusedQueriesLeaveTheRecordAndSmallStructsGetWhatFits) {
  ASSERT_EQ(nexar_comm_abort(nullptr), NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(nexar_last_error(nullptr), NEXAR_ERR_INVALID_ARGUMENT);
  nexar_completion_t tiny;
  memset(&tiny, 0, sizeof tiny);
  tiny.struct_size = sizeof(size_t);
  EXPECT_EQ(nexar_last_error(&tiny), NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tiny.status, NEXAR_OK) << "nothing is written when status does not fit";

  // A caller that knows only struct_size, status and failed_rank.
  nexar_completion_t older;
  memset(&older, 0xAB, sizeof older);
  older.struct_size = offsetof(nexar_completion_t, failed_rank) + sizeof older.failed_rank;
  ASSERT_EQ(nexar_last_error(&older), NEXAR_OK);
  EXPECT_EQ(older.struct_size, offsetof(nexar_completion_t, failed_rank) + sizeof(int32_t));
  EXPECT_EQ(older.status, NEXAR_ERR_INVALID_ARGUMENT) << "the abort's failure is still recorded";
  EXPECT_EQ(older.failed_rank, -1);
  uint64_t untouched;
  memset(&untouched, 0xAB, sizeof untouched);
  EXPECT_EQ(older.op_seq, untouched) << "fields past struct_size are not written";

  nexar_completion_t info = read_last_error();
  EXPECT_EQ(info.status, NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(info.message).find("nexar_comm_abort"), std::string::npos) << info.message;
}

// Rank 3 dies first, so rank 0's asynchronous error names rank 3; the
// blocking receive from rank 2 then fails because rank 2 dies, and only the
// call's own record says so.
TEST(LastError, BlockingReceiveFromADestroyedPeerNamesThatPeer) {
  World w(4);
  ASSERT_TRUE(w.ok());
  nexar_comm_destroy(w.comms[3]);
  w.comms[3] = nullptr;
  nexar_completion_t async = wait_async_error(w[0]);
  ASSERT_EQ(async.status, NEXAR_ERR_PEER_FAILED);
  ASSERT_EQ(async.failed_rank, 3);

  const uint64_t last = last_seq_after_self_exchange(w[0]);
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    nexar_comm_destroy(w.comms[2]);
    w.comms[2] = nullptr;
  });
  uint64_t v = 0;
  EXPECT_EQ(nexar_recv(w[0], &v, sizeof v, 2, 1, nullptr, nullptr), NEXAR_ERR_PEER_FAILED);
  nexar_completion_t info = read_last_error();
  killer.join();
  EXPECT_EQ(info.status, NEXAR_ERR_PEER_FAILED);
  EXPECT_EQ(info.failed_rank, 2) << info.message;
  EXPECT_EQ(info.op_seq, last + 1);
  EXPECT_STREQ(info.message, nexar_last_error_message());
}

TEST(LastError, BlockingReceiveFromAnAbortedPeerNamesThatPeer) {
  World w(3);
  ASSERT_TRUE(w.ok());
  const uint64_t last = last_seq_after_self_exchange(w[0]);
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(nexar_comm_abort(w[1]), NEXAR_OK);
  });
  uint64_t v = 0;
  EXPECT_EQ(nexar_recv(w[0], &v, sizeof v, 1, 1, nullptr, nullptr), NEXAR_ERR_ABORTED);
  nexar_completion_t info = read_last_error();
  aborter.join();
  EXPECT_EQ(info.status, NEXAR_ERR_ABORTED);
  EXPECT_EQ(info.failed_rank, 1) << info.message;
  EXPECT_EQ(info.op_seq, last + 1);
  EXPECT_NE(std::string(info.message).find("rank 1"), std::string::npos) << info.message;
}

TEST(LastError, BlockingCollectiveNamesTheRankThatAborted) {
  World w(3);
  ASSERT_TRUE(w.ok());
  const uint64_t last = last_seq_after_self_exchange(w[0]);
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(nexar_comm_abort(w[2]), NEXAR_OK);
  });
  EXPECT_EQ(nexar_barrier(w[0], nullptr, nullptr), NEXAR_ERR_ABORTED);
  nexar_completion_t info = read_last_error();
  aborter.join();
  EXPECT_EQ(info.status, NEXAR_ERR_ABORTED);
  EXPECT_EQ(info.failed_rank, 2) << info.message;
  EXPECT_EQ(info.op_seq, last + 1);
}

// Each thread has its own record.
TEST(LastError, RecordsAreThreadLocal) {
  World w(2);
  ASSERT_TRUE(w.ok());
  uint64_t v = 0;
  ASSERT_EQ(nexar_send(w[0], &v, sizeof v, 9, 1, nullptr, nullptr), NEXAR_ERR_INVALID_RANK);
  std::thread([] { EXPECT_EQ(read_last_error().status, NEXAR_OK); }).join();
  EXPECT_EQ(read_last_error().status, NEXAR_ERR_INVALID_RANK);
}
