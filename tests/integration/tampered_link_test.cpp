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
// A second relay damages every datagram both ways, the handshake's included:
// a damaged copy arriving before the original must not stop the dial.
// A third loses some of rank 1's large datagrams: what QUIC resends is sealed
// from the sender's buffer again (PacketCipher::Source), found by its stream
// offset, and the receive still ends exact.
// A fourth only watches: the handshake's Initials travel in link-sized
// datagrams, while bulk data uses loopback's large ones.
#include <poll.h>

#include <atomic>
#include <string>

#include "loopback_udp.h"
#include "seeded_pair.h"

// These tests look at what QUIC does with payloads: in-process ranks would
// otherwise share memory, so every byte stays on QUIC here.
[[maybe_unused]] static const bool kEveryByteOnQuic = setenv("NEXAR_SHM", "off", 1) == 0;

using namespace nexar_test;

namespace {

// Which datagrams the relay sends damaged (each as damaged, original,
// damaged, original).
enum class Damage {
  LargeOneRttToRank0,      // rank 1's 1-RTT datagrams of kLarge bytes or more
  Everything,              // every datagram both ways, Initial and Handshake too
  LoseLargeOneRttToRank0,  // not damaged: one in kLoseEvery of those is not sent
  None,                    // every datagram passes untouched
};
constexpr uint64_t kLoseEvery = 6;

class TamperingRelay {
 public:
  static constexpr size_t kLarge = 20000;

  TamperingRelay(uint16_t server_port, Damage damage)
      : server_(loopback(server_port)), damage_(damage) {
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
  uint64_t damaged_long_header() const { return damaged_long_header_; }
  uint64_t lost() const { return lost_; }
  // The largest datagram that began with an Initial packet, and the largest
  // that began with a 1-RTT packet, each way.
  size_t largest_initial_to_rank0() const { return largest_initial_[0]; }
  size_t largest_initial_to_rank1() const { return largest_initial_[1]; }
  size_t largest_one_rtt_to_rank0() const { return largest_one_rtt_[0]; }
  size_t largest_one_rtt_to_rank1() const { return largest_one_rtt_[1]; }

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
        watch(buf.data(), static_cast<size_t>(n), 0);
        // By default only 1-RTT packets (short header): the handshake's are
        // not opened in place.
        const bool short_header = (buf[0] & 0x80) == 0;
        const bool large = static_cast<size_t>(n) >= kLarge && short_header;
        if (damage_ == Damage::LoseLargeOneRttToRank0) {
          if (large && ++large_seen_ % kLoseEvery == 0) {
            ++lost_;
            continue;
          }
          forward(buf.data(), static_cast<size_t>(n), false, back_, server_);
          continue;
        }
        const bool damage =
            damage_ == Damage::Everything || (damage_ == Damage::LargeOneRttToRank0 && large);
        forward(buf.data(), static_cast<size_t>(n), damage, back_, server_);
      }
      if (fds[1].revents & POLLIN) {  // rank 0's answers
        const ssize_t n = recv(back_, buf.data(), buf.size(), 0);
        if (n > 0) watch(buf.data(), static_cast<size_t>(n), 1);
        if (n > 0 && have_client)
          forward(buf.data(), static_cast<size_t>(n), damage_ == Damage::Everything, front_,
                  client);
      }
    }
  }
  // Coalesced packets start with the Initial, if there is one (RFC 9000
  // section 12.2); its type is in bits 4-5 of a long header (QUIC v1).
  void watch(const uint8_t *p, size_t n, int to_rank) {
    std::atomic<size_t> *largest = &largest_one_rtt_[to_rank];
    if (p[0] & 0x80) {
      if (((p[0] & 0x30) >> 4) != 0) return;  // a Handshake, 0-RTT or Retry packet first
      largest = &largest_initial_[to_rank];
    }
    if (n > *largest) *largest = n;
  }
  void forward(const uint8_t *p, size_t n, bool damage, int fd, const sockaddr_in &to) {
    const auto send = [&](const uint8_t *d) {
      sendto(fd, d, n, 0, reinterpret_cast<const sockaddr *>(&to), sizeof to);
    };
    if (!damage) return send(p);
    std::vector<uint8_t> bad(p, p + n);
    bad[n / 2] ^= 0x5a;
    send(bad.data());
    send(p);
    send(bad.data());
    send(p);
    ++damaged_;
    if (p[0] & 0x80) ++damaged_long_header_;
  }

  sockaddr_in server_;
  Damage damage_;
  int front_ = -1, back_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> damaged_{0}, damaged_long_header_{0}, lost_{0};
  std::atomic<size_t> largest_initial_[2] = {0, 0}, largest_one_rtt_[2] = {0, 0};
  uint64_t large_seen_ = 0;  // relay thread only
  std::thread thread_;
};

// Rank 1 dials rank 0 through the relay: rank 0 advertises it.
struct RelayedPair {
  explicit RelayedPair(Damage damage) : rank0_port(free_port()), relay(rank0_port, damage) {}
  void join() {
    ASSERT_TRUE(relay.ok());
    pair.join(rank0_port, relay.port());
  }

  const uint16_t rank0_port;
  TamperingRelay relay;  // outlives the ranks: destroyed after pair
  SeededPair pair;
  nexar_comm_t **comm = pair.comm;
};

}  // namespace

TEST(TamperedLink, DamagedAndReplayedPacketsNeverReachTheReceive) {
  RelayedPair pair(Damage::LargeOneRttToRank0);
  ASSERT_NO_FATAL_FAILURE(pair.join());
  nexar_comm_t **comm = pair.comm;
  const TamperingRelay &relay = pair.relay;

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
}

// A damaged copy of a handshake datagram that arrives before the original is
// noise anyone on the path can make: it must be dropped, not end the dial.
TEST(TamperedLink, DamagedHandshakeDatagramsDoNotStopTheDial) {
  RelayedPair pair(Damage::Everything);
  ASSERT_NO_FATAL_FAILURE(pair.join());
  EXPECT_GT(pair.relay.damaged_long_header(), 0u)
      << "no handshake datagram crossed the relay: nothing was tested";

  const std::vector<uint8_t> out = pattern(1 << 20, 7);
  std::vector<uint8_t> in;
  send_to_posted_receive(pair.comm, 1, out, &in, 4, 120);
  EXPECT_TRUE(in == out) << "damaged datagrams changed the received bytes";
  std::printf("damaged %llu datagrams, %llu of them handshake\n",
              static_cast<unsigned long long>(pair.relay.damaged()),
              static_cast<unsigned long long>(pair.relay.damaged_long_header()));
}

// Lost datagrams are resent by QUIC from the same stream offsets: nexar seals
// those from the sender's buffer again, so more bytes are sealed in place
// than were sent, and the receive is exact.
TEST(TamperedLink, LostPacketsAreResentFromTheSendersBuffer) {
  RelayedPair pair(Damage::LoseLargeOneRttToRank0);
  ASSERT_NO_FATAL_FAILURE(pair.join());
  nexar_comm_t **comm = pair.comm;

  const size_t n = 8 << 20;
  const std::vector<uint8_t> out = pattern(n, 57);
  std::vector<uint8_t> in;
  const uint64_t sealed_before = stats(comm[1]).bytes_sealed_in_place;
  send_to_posted_receive(comm, 1, out, &in, 6, 120);
  EXPECT_TRUE(in == out) << "resent packets changed the received bytes";
  EXPECT_GT(pair.relay.lost(), 8u) << "the relay lost too few packets to test anything";
  const uint64_t sealed = stats(comm[1]).bytes_sealed_in_place - sealed_before;
  std::printf("lost %llu datagrams; sealed in place: %llu bytes for %zu sent\n",
              static_cast<unsigned long long>(pair.relay.lost()),
              static_cast<unsigned long long>(sealed), n);
  if (fast_aead_in_use())
    EXPECT_GT(sealed, n) << "the resent data was not sealed from the sender's buffer";
}

// ngtcp2 pads a datagram that carries an Initial to the whole size it may
// write, and loopback allows 65000 bytes: each handshake datagram was 65000
// bytes both ways. They now fit a link; the data after the handshake still
// travels in loopback's large datagrams.
TEST(TamperedLink, HandshakeDatagramsFitALinkBulkDataDoesNot) {
  RelayedPair pair(Damage::None);
  ASSERT_NO_FATAL_FAILURE(pair.join());
  // Rank 1 is the client of the connection, rank 0 the server.
  for (uint32_t from : {1u, 0u}) {
    const std::vector<uint8_t> out = pattern(1 << 20, 11 + from);
    std::vector<uint8_t> in;
    send_to_posted_receive(pair.comm, from, out, &in, 4, 120);
    EXPECT_TRUE(in == out) << "from rank " << from;
  }
  const TamperingRelay &relay = pair.relay;
  // A client pads its Initials to 1200 bytes at least (RFC 9000 section 14.1).
  EXPECT_GE(relay.largest_initial_to_rank0(), 1200u) << "no client Initial crossed the relay";
  EXPECT_LE(relay.largest_initial_to_rank0(), 1472u);
  EXPECT_GT(relay.largest_initial_to_rank1(), 0u) << "no server Initial crossed the relay";
  EXPECT_LE(relay.largest_initial_to_rank1(), 1472u);
  EXPECT_GT(relay.largest_one_rtt_to_rank0(), 16384u) << "the client's bulk data is link-sized";
  EXPECT_GT(relay.largest_one_rtt_to_rank1(), 16384u) << "the server's bulk data is link-sized";
}
