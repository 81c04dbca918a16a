// The congestion controller follows the socket's receive buffer
// (transport/congestion_control.h), and the engine's socket asks for a buffer
// big enough for BBRv2 wherever the system allows it.
#include "transport/congestion_control.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>

#include "transport/socket_address.h"
#include "transport/udp_socket.h"

using namespace nexar;

TEST(CongestionControl, Bbr2FromTheThresholdCubicBelowIt) {
  EXPECT_EQ(congestion_control_for(kBbrMinReceiveBuffer), NGTCP2_CC_ALGO_BBR2);
  EXPECT_EQ(congestion_control_for(size_t{16} << 20), NGTCP2_CC_ALGO_BBR2);
  EXPECT_EQ(congestion_control_for(kBbrMinReceiveBuffer - 1), NGTCP2_CC_ALGO_CUBIC);
  // Debian's default net.core.rmem_max (212992), as SO_RCVBUF reports it.
  EXPECT_EQ(congestion_control_for(2 * 212992), NGTCP2_CC_ALGO_CUBIC);
  EXPECT_EQ(congestion_control_for(0), NGTCP2_CC_ALGO_CUBIC);
}

TEST(CongestionControl, TheSocketGetsAtLeastWhatRmemMaxAllows) {
  uint64_t rmem_max = 0;
  std::ifstream("/proc/sys/net/core/rmem_max") >> rmem_max;
  ASSERT_GT(rmem_max, 0u);
  SocketAddress any;
  ASSERT_TRUE(SocketAddress::parse("127.0.0.1:0", &any));
  UdpSocket sock;
  ASSERT_TRUE(sock.bind(any));
  // The socket asks for 8 MiB; without CAP_NET_ADMIN the kernel grants at
  // most rmem_max, and SO_RCVBUF reports twice what was granted.
  const uint64_t granted_at_least = std::min<uint64_t>(uint64_t{8} << 20, rmem_max);
  EXPECT_GE(sock.receive_buffer(), 2 * granted_at_least);
}
