// Damaged and replayed packets on the link, with data opened straight into
// the receive (PacketCipher::Placer): two ranks join a real seed; rank 0
// advertises a relay, so everything rank 1 sends it crosses the relay, which
// sends each large 1-RTT datagram as a copy with one byte flipped in the
// middle of its payload, the original, the damaged copy again and the
// original again.
// A damaged copy that arrives first is opened into the pending receive before
// its tag fails; one that arrives after, and the replay, find that part of
// the receive already taken. The receive must still end with exactly the
// bytes sent, a good part of them opened in place.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <string>

#include "harness.h"

using namespace nexar_test;

namespace {

sockaddr_in loopback(uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

int bound_udp_socket(uint16_t port, uint16_t *bound) {
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in a = loopback(port);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0) return -1;
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len);
  *bound = ntohs(a.sin_port);
  return fd;
}

// A loopback port nobody is bound to right now.
uint16_t free_port() {
  uint16_t port = 0;
  const int fd = bound_udp_socket(0, &port);
  close(fd);
  return port;
}

class TamperingRelay {
 public:
  static constexpr size_t kLarge = 20000;

  explicit TamperingRelay(uint16_t server_port) : server_(loopback(server_port)) {
    uint16_t ignored;
    front_ = bound_udp_socket(0, &port_);
    back_ = bound_udp_socket(0, &ignored);
    thread_ = std::thread([this] { run(); });
  }
  ~TamperingRelay() {
    stop_ = true;
    thread_.join();
    close(front_);
    close(back_);
  }
  bool ok() const { return front_ >= 0 && back_ >= 0; }
  uint16_t port() const { return port_; }
  uint64_t damaged() const { return damaged_; }

 private:
  void run() {
    std::vector<uint8_t> buf(70000);
    sockaddr_in client{};
    bool have_client = false;
    while (!stop_) {
      pollfd fds[2] = {{front_, POLLIN, 0}, {back_, POLLIN, 0}};
      if (poll(fds, 2, 50) <= 0) continue;
      if (fds[0].revents & POLLIN) {  // from rank 1, towards rank 0
        socklen_t len = sizeof client;
        const ssize_t n = recvfrom(front_, buf.data(), buf.size(), 0,
                                   reinterpret_cast<sockaddr *>(&client), &len);
        if (n <= 0) continue;
        have_client = true;
        // Only 1-RTT packets (short header): the handshake's are not opened
        // in place, and a damaged first Initial would only abort the dial.
        const bool short_header = (buf[0] & 0x80) == 0;
        if (static_cast<size_t>(n) < kLarge || !short_header) {
          to_server(buf.data(), static_cast<size_t>(n));
        } else {
          std::vector<uint8_t> bad(buf.begin(), buf.begin() + n);
          bad[static_cast<size_t>(n) / 2] ^= 0x5a;
          to_server(bad.data(), bad.size());
          to_server(buf.data(), static_cast<size_t>(n));
          to_server(bad.data(), bad.size());
          to_server(buf.data(), static_cast<size_t>(n));
          ++damaged_;
        }
      }
      if (fds[1].revents & POLLIN) {  // rank 0's answers
        const ssize_t n = recv(back_, buf.data(), buf.size(), 0);
        if (n > 0 && have_client)
          sendto(front_, buf.data(), static_cast<size_t>(n), 0,
                 reinterpret_cast<const sockaddr *>(&client), sizeof client);
      }
    }
  }
  void to_server(const uint8_t *p, size_t n) {
    sendto(back_, p, n, 0, reinterpret_cast<const sockaddr *>(&server_), sizeof server_);
  }

  sockaddr_in server_;
  int front_ = -1, back_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> damaged_{0};
  std::thread thread_;
};

}  // namespace

TEST(TamperedLink, DamagedAndReplayedPacketsNeverReachTheReceive) {
  nexar_seed_options_t so;
  NX_OK(nexar_seed_options_init(&so, sizeof so));
  so.world_size = 2;
  nexar_seed_t *seed = nullptr;
  NX_OK(nexar_seed_start(&seed, &so));
  const std::string seed_addr = nexar_seed_address(seed);
  const uint16_t rank0_port = free_port();
  TamperingRelay relay(rank0_port);
  ASSERT_TRUE(relay.ok());
  const std::string listen0 = "127.0.0.1:" + std::to_string(rank0_port);
  const std::string advertise0 = "127.0.0.1:" + std::to_string(relay.port());

  nexar_comm_t *comm[2] = {nullptr, nullptr};
  on_each_rank(2, [&](uint32_t r) {
    nexar_comm_options_t o;
    NX_OK(nexar_comm_options_init(&o, sizeof o));
    o.seed_address = seed_addr.c_str();
    o.rank = static_cast<int32_t>(r);
    o.world_size = 2;
    o.listen_address = r == 0 ? listen0.c_str() : "127.0.0.1:0";
    if (r == 0) o.advertise_address = advertise0.c_str();
    NX_OK(nexar_comm_join(&comm[r], &o));
  });
  ASSERT_TRUE(comm[0] && comm[1]);

  const size_t n = 8 << 20;
  const std::vector<uint8_t> out = pattern(n, 31);
  std::vector<uint8_t> in;
  const uint64_t placed_before = stats(comm[0]).bytes_opened_in_place;
  send_to_posted_receive(comm, 1, out, &in, 4, 120);
  EXPECT_TRUE(in == out) << "damaged or replayed packets changed the received bytes";
  EXPECT_GT(relay.damaged(), 64u) << "the relay damaged too few packets to test anything";
  const uint64_t placed = stats(comm[0]).bytes_opened_in_place - placed_before;
  std::printf("damaged %llu datagrams; opened in place: %llu of %zu bytes\n",
              static_cast<unsigned long long>(relay.damaged()),
              static_cast<unsigned long long>(placed), n);
  // Less than without the relay (99 %): four datagrams for each one overflow
  // the socket, and what arrives out of order goes through ngtcp2's buffer.
  if (fast_aead_in_use())
    EXPECT_GT(placed, n / 16) << "the receive was hardly opened in place: nothing was tested";
  for (auto *c : comm)
    nexar_comm_destroy(c);
  nexar_seed_stop(seed);
}
