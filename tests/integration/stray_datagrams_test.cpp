// Datagrams nobody can read, sent to a rank's and the seed's ports while two
// ranks work: noise, truncated headers, client Initials whose payload cannot
// be opened, an unknown QUIC version, packets for no connection, the largest
// datagram UDP carries. Anyone who can reach the port can send them, no
// key needed. They must change nothing: every result exact, no connection
// lost, and not one datagram sent back (an answer to a forged source
// address would make nexar a reflector).
#include <poll.h>

#include <atomic>
#include <random>
#include <string>

#include "loopback_udp.h"
#include "seeded_pair.h"

using namespace nexar_test;

namespace {

using Datagram = std::vector<uint8_t>;

Datagram random_bytes(std::mt19937 &rng, size_t n) {
  Datagram d(n);
  for (auto &b : d)
    b = static_cast<uint8_t>(rng());
  return d;
}

// A QUIC v1 long header (RFC 9000 section 17.2) with random connection IDs,
// padded with random bytes to 1200, the size a client Initial must have.
Datagram long_header_packet(std::mt19937 &rng, uint8_t first, uint32_t version) {
  Datagram d = random_bytes(rng, 1200);
  size_t i = 0;
  d[i++] = first;
  for (int shift = 24; shift >= 0; shift -= 8)
    d[i++] = static_cast<uint8_t>(version >> shift);
  d[i++] = 8;  // destination connection ID length (the 8 bytes stay random)
  i += 8;
  d[i++] = 8;  // source connection ID length
  i += 8;
  if ((first & 0x30) == 0) d[i++] = 0;  // Initial: no token
  const size_t rest = d.size() - i - 2;
  d[i++] = static_cast<uint8_t>(0x40 | (rest >> 8));  // 2-byte varint length
  d[i++] = static_cast<uint8_t>(rest);
  return d;
}

std::vector<Datagram> stray_datagrams(std::mt19937 &rng) {
  std::vector<Datagram> out;
  out.push_back({0x00});
  Datagram short_header = random_bytes(rng, 1500);
  short_header[0] = static_cast<uint8_t>(0x40 | (short_header[0] & 0x3f));
  out.push_back(short_header);                               // 1-RTT, no such connection
  out.push_back(long_header_packet(rng, 0xc3, 1));           // Initial nobody can open
  out.push_back(long_header_packet(rng, 0xe3, 1));           // Handshake, no such connection
  out.push_back(long_header_packet(rng, 0xc3, 0x1a2a3a4a));  // unknown version
  out.push_back({0xc3, 0, 0, 0, 1, 20});                     // truncated long header
  out.push_back(random_bytes(rng, 65507));                   // the largest UDP datagram
  return out;
}

// Sends stray datagrams to the targets until stopped; counts what comes back.
class StraySender {
 public:
  explicit StraySender(std::vector<uint16_t> targets) : targets_(std::move(targets)) {
    uint16_t ignored;
    fd_ = bound_udp_socket(0, &ignored);
    thread_ = std::thread([this] { run(); });
  }
  ~StraySender() { stop(); }
  void stop() {
    if (!thread_.joinable()) return;
    stop_ = true;
    thread_.join();
    close(fd_);
  }
  bool ok() const { return fd_ >= 0; }
  uint64_t sent() const { return sent_; }
  uint64_t answers() const { return answers_; }

 private:
  void run() {
    std::mt19937 rng(20261123);
    std::vector<uint8_t> buf(70000);
    while (!stop_) {
      for (const Datagram &d : stray_datagrams(rng)) {
        for (uint16_t port : targets_) {
          const sockaddr_in to = loopback(port);
          if (sendto(fd_, d.data(), d.size(), 0, reinterpret_cast<const sockaddr *>(&to),
                     sizeof to) == static_cast<ssize_t>(d.size()))
            ++sent_;
        }
      }
      drain(buf, 2);
    }
    drain(buf, 300);  // a late answer still counts
  }
  void drain(std::vector<uint8_t> &buf, int wait_ms) {
    pollfd p{fd_, POLLIN, 0};
    while (poll(&p, 1, wait_ms) > 0)
      if (recv(fd_, buf.data(), buf.size(), 0) >= 0) ++answers_;
  }

  std::vector<uint16_t> targets_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> sent_{0}, answers_{0};
  std::thread thread_;
};

}  // namespace

TEST(StrayDatagrams, ChangeNothingAndGetNoAnswer) {
  SeededPair pair;
  const uint16_t rank0_port = free_port();
  ASSERT_NO_FATAL_FAILURE(pair.join(rank0_port));
  nexar_comm_t **comm = pair.comm;

  StraySender stray({rank0_port, port_of(pair.seed_address)});
  ASSERT_TRUE(stray.ok());
  const size_t n = 16384;
  on_each_rank(2, [&](uint32_t r) {
    std::vector<float> v(n);
    for (int it = 0; it < 200; ++it) {
      for (size_t i = 0; i < n; ++i)
        v[i] = static_cast<float>((i + r + static_cast<size_t>(it)) % 11);
      NX_OK(nexar_allreduce(comm[r], v.data(), v.data(), n, NEXAR_DTYPE_F32, NEXAR_OP_SUM, nullptr,
                            nullptr));
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(v[i], static_cast<float>((i + static_cast<size_t>(it)) % 11 +
                                           (i + 1 + static_cast<size_t>(it)) % 11))
            << "allreduce " << it << " element " << i;
    }
  });
  const std::vector<uint8_t> out = pattern(4 << 20, 5);
  std::vector<uint8_t> in;
  send_to_posted_receive(comm, 1, out, &in, 9, 60);
  EXPECT_TRUE(in == out) << "the 4 MiB message arrived changed";
  stray.stop();

  EXPECT_GT(stray.sent(), 100u) << "too few stray datagrams were sent to test anything";
  EXPECT_EQ(stray.answers(), 0u) << "nexar answered datagrams it could not read";
  for (uint32_t r = 0; r < 2; ++r) {
    nexar_completion_t info;
    memset(&info, 0, sizeof info);
    EXPECT_EQ(nexar_comm_get_async_error(comm[r], &info), NEXAR_OK)
        << "rank " << r
        << " found a failure in the background: " << (info.message ? info.message : "");
  }
  std::printf("sent %llu stray datagrams during the run; answers: %llu\n",
              static_cast<unsigned long long>(stray.sent()),
              static_cast<unsigned long long>(stray.answers()));
}
