// The flight recorder through the C ABI: its dump is JSON with the documented
// fields and values of the operations that ran; an operation that times out
// dumps into NEXAR_FR_DUMP_DIR by itself; and nexar-fr, given the dumps of
// every rank of a planted desync, names the rank that skipped a collective
// and the rank that called something else.
#include <sys/stat.h>
#include <sys/wait.h>

#include <array>
#include <fstream>
#include <sstream>

#include "../../tools/fr/json.h"
#include "../cluster/cluster_process.h"
#include "harness.h"

using namespace nexar_test;
using cluster_test::contains;
using cluster_test::TempDir;
using nexar_fr::Json;

namespace {

Json load(const std::string &path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  Json doc;
  std::string err;
  EXPECT_TRUE(nexar_fr::parse_json(ss.str(), &doc, &err)) << path << ": " << err;
  return doc;
}

// Runs nexar-fr on args; returns its exit status and fills *out.
int run_nexar_fr(const std::string &args, std::string *out) {
  const std::string cmd = std::string(NEXAR_FR_BIN) + " " + args + " 2>&1";
  FILE *p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0)
    out->append(buf.data(), n);
  const int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

nexar_comm_options_t short_timeouts() {
  nexar_comm_options_t o;
  nexar_comm_options_init(&o, sizeof o);
  o.collective_timeout_ms = 1500;
  o.barrier_timeout_ms = 1500;
  return o;
}

}  // namespace

TEST(FlightRecorder, DumpIsJsonWithTheDocumentedFields) {
  unsetenv("NEXAR_FR_DUMP_DIR");
  World w(2);
  ASSERT_TRUE(w.ok());
  on_each_rank(2, [&](uint32_t r) {
    for (int i = 0; i < 3; ++i) {
      float in[4] = {1, 2, 3, float(r)}, out[4];
      NX_OK(nexar_allreduce(w[r], in, out, 4, NEXAR_DTYPE_F32, NEXAR_OP_SUM, nullptr, nullptr));
      EXPECT_EQ(out[3], 1.0f);
    }
  });
  TempDir dir;
  const std::string path = (dir / "rank1.json");
  NX_OK(nexar_flight_recorder_dump(w[1], path.c_str()));
  const Json doc = load(path);
  EXPECT_EQ(doc["nexar_flight_recorder"].as_int(), 1);
  EXPECT_FALSE(doc["host"].as_string().empty());
  EXPECT_EQ(doc["pid"].as_int(), getpid());
  EXPECT_EQ(doc["reason"].as_string(), "request");
  EXPECT_EQ(doc["capacity"].as_int(), 2048);
  ASSERT_EQ(doc["communicators"].items.size(), 1u) << "only the communicator asked for";
  const Json &c = doc["communicators"].items[0];
  EXPECT_EQ(c["comm_id"].as_string().size(), 16u);
  EXPECT_EQ(c["rank"].as_int(), 1);
  EXPECT_EQ(c["size"].as_int(), 2);
  ASSERT_EQ(c["members"].items.size(), 2u);
  EXPECT_EQ(c["members"].items[1].as_int(), 1);
  EXPECT_EQ(c["failed"].type, Json::Type::Array);
  EXPECT_TRUE(c["failed"].items.empty());
  EXPECT_EQ(c["revoked"].type, Json::Type::Bool);
  EXPECT_EQ(c["last_queued"].as_int(), 3);
  EXPECT_EQ(c["last_started"].as_int(), 3);
  EXPECT_EQ(c["last_completed"].as_int(), 3);
  ASSERT_EQ(c["peers"].items.size(), 1u);
  const Json &peer = c["peers"].items[0];
  EXPECT_EQ(peer["rank"].as_int(), 0);
  EXPECT_EQ(peer["transport"].as_string(), "quic");
  EXPECT_GE(peer["rtt_us"].as_int(-1), 0);
  EXPECT_GE(peer["bytes_in_flight"].as_int(-1), 0);
  const auto &ops = c["operations"].items;
  ASSERT_EQ(ops.size(), 3u);
  for (size_t i = 0; i < ops.size(); ++i) {
    const Json &e = ops[i];
    EXPECT_EQ(e["coll_seq"].as_int(), static_cast<long long>(i + 1));
    EXPECT_GT(e["seq"].as_int(), 0);
    EXPECT_EQ(e["op"].as_string(), "allreduce");
    EXPECT_EQ(e["dtype"].as_string(), "f32");
    EXPECT_EQ(e["reduction"].as_string(), "sum");
    EXPECT_EQ(e["count"].as_int(), 4);
    EXPECT_EQ(e["bytes"].as_int(), 16);
    EXPECT_EQ(e["root"].as_int(), -1);
    // Small, between ranks of one host: on the caller's thread, on shared memory.
    EXPECT_EQ(e["algorithm"].as_string(), "shm");
    EXPECT_EQ(e["transport"].as_string(), "quic");
    EXPECT_EQ(e["state"].as_string(), "completed");
    EXPECT_EQ(e["status"].as_int(-1), 0);
    EXPECT_EQ(e["waits_on"].as_int(), -1) << "a completed operation waits on nobody";
    EXPECT_EQ(e["step"].type, Json::Type::Number);
    const long long q = e["t_queued_ns"].as_int(), s = e["t_started_ns"].as_int(),
                    d = e["t_ended_ns"].as_int();
    EXPECT_GT(q, 0);
    EXPECT_LE(q, s);
    EXPECT_LE(s, d);
  }
  // NULL: every communicator of the process (both in-process ranks).
  const std::string all = (dir / "all.json");
  NX_OK(nexar_flight_recorder_dump(nullptr, all.c_str()));
  EXPECT_EQ(load(all)["communicators"].items.size(), 2u);
  // No path and no NEXAR_FR_DUMP_DIR: refused, saying why.
  EXPECT_EQ(nexar_flight_recorder_dump(w[0], nullptr), NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(nexar_last_error_message(), "NEXAR_FR_DUMP_DIR"));
}

// Rank 2 skips collective #2 (it sleeps instead): ranks 0 and 1 time out,
// the process dumps by itself, and nexar-fr names rank 2 as never joined.
TEST(FlightRecorder, NexarFrNamesTheRankThatSkippedACollective) {
  TempDir auto_dir, dir;
  setenv("NEXAR_FR_DUMP_DIR", auto_dir.path.c_str(), 1);
  nexar_comm_options_t o = short_timeouts();
  auto w_owner = std::make_unique<World>(3, &o);
  World &w = *w_owner;
  ASSERT_TRUE(w.ok());
  std::vector<nexar_status_t> second(3, NEXAR_OK);
  on_each_rank(3, [&](uint32_t r) {
    int32_t in = 1, out = 0;
    NX_OK(nexar_allreduce(w[r], &in, &out, 1, NEXAR_DTYPE_I32, NEXAR_OP_SUM, nullptr, nullptr));
    if (r == 2) return;  // the desync: rank 2 never calls collective #2
    second[r] =
        nexar_allreduce(w[r], &in, &out, 1, NEXAR_DTYPE_I32, NEXAR_OP_SUM, nullptr, nullptr);
  });
  EXPECT_EQ(second[0], NEXAR_ERR_TIMEOUT);
  EXPECT_EQ(second[1], NEXAR_ERR_TIMEOUT);

  // The timeout dumped every communicator of the process by itself.
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const std::string auto_dump =
      (auto_dir / std::string("nexar-fr-") + host + "-" + std::to_string(getpid()) + ".json");
  const Json automatic = load(auto_dump);
  EXPECT_EQ(automatic["reason"].as_string(), "timeout");
  EXPECT_EQ(automatic["communicators"].items.size(), 3u);

  for (uint32_t r = 0; r < 3; ++r)
    NX_OK(nexar_flight_recorder_dump(w[r], (dir / "r" + std::to_string(r) + ".json").c_str()));
  std::string out;
  EXPECT_EQ(run_nexar_fr(dir.path, &out), 1) << out;
  EXPECT_TRUE(contains(out, "first divergence at collective #2: allreduce i32 sum count 1")) << out;
  EXPECT_TRUE(contains(out, "rank 2 never joined it (last completed collective #1)")) << out;
  EXPECT_TRUE(contains(out, "rank 0 is inside it (failed")) << out;
  EXPECT_TRUE(contains(out, "rank 1 is inside it (failed")) << out;
  EXPECT_TRUE(contains(out, "waits on rank")) << out;
  EXPECT_FALSE(contains(out, "rank 2 is inside")) << out;
  // With rank 2's dump missing, nexar-fr says so and finds no divergence
  // among the ranks it has.
  std::string partial;
  EXPECT_EQ(run_nexar_fr((dir / "r0.json") + " " + (dir / "r1.json"), &partial), 0) << partial;
  EXPECT_TRUE(contains(partial, "no dump from ranks 2")) << partial;
  w_owner.reset();  // no engine thread reads the environment any more
  unsetenv("NEXAR_FR_DUMP_DIR");
}

// Rank 1 calls a barrier where the others call an allreduce.
TEST(FlightRecorder, NexarFrNamesTheRankThatCalledSomethingElse) {
  nexar_comm_options_t o = short_timeouts();
  World w(3, &o);
  ASSERT_TRUE(w.ok());
  on_each_rank(3, [&](uint32_t r) {
    int32_t in = 1, out = 0;
    if (r == 1)
      EXPECT_NE(nexar_barrier(w[r], nullptr, nullptr), NEXAR_OK);
    else
      EXPECT_NE(
          nexar_allreduce(w[r], &in, &out, 1, NEXAR_DTYPE_I32, NEXAR_OP_MAX, nullptr, nullptr),
          NEXAR_OK);
  });
  TempDir dir;
  for (uint32_t r = 0; r < 3; ++r)
    NX_OK(nexar_flight_recorder_dump(w[r], (dir / "r" + std::to_string(r) + ".json").c_str()));
  std::string out;
  EXPECT_EQ(run_nexar_fr(dir.path, &out), 1) << out;
  EXPECT_TRUE(contains(out, "first divergence at collective #1: allreduce i32 max count 1")) << out;
  EXPECT_TRUE(contains(out, "rank 1 called something else: barrier")) << out;
  EXPECT_FALSE(contains(out, "never joined")) << out;
}

TEST(FlightRecorder, NexarFrRejectsWhatIsNoDump) {
  TempDir dir;
  std::ofstream((dir / "bad.json")) << "{\"nexar_flight_recorder\": 1, \"communicators\": [";
  std::string out;
  EXPECT_EQ(run_nexar_fr((dir / "bad.json"), &out), 2) << out;
  EXPECT_TRUE(contains(out, "is not JSON")) << out;
}
