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
  // Debian's default net.core.rmem_max.
  EXPECT_EQ(congestion_control_for(212992), NGTCP2_CC_ALGO_CUBIC);
  EXPECT_EQ(congestion_control_for(0), NGTCP2_CC_ALGO_CUBIC);
}

TEST(CongestionControl, TheSocketReportsTheBufferTheKernelGranted) {
  uint64_t rmem_max = 0;
  std::ifstream("/proc/sys/net/core/rmem_max") >> rmem_max;
  ASSERT_GT(rmem_max, 0u);
  SocketAddress any;
  ASSERT_TRUE(SocketAddress::parse("127.0.0.1:0", &any));
  UdpSocket sock;
  ASSERT_TRUE(sock.bind(any));
  // The socket asks for 8 MiB: with CAP_NET_ADMIN it gets them, without it
  // rmem_max at most (rmem_default if it did not ask). SO_RCVBUF reads back
  // twice the grant; receive_buffer() must not.
  const uint64_t asked = uint64_t{8} << 20;
  const uint64_t got = sock.receive_buffer();
  EXPECT_TRUE(got == asked || got == std::min(asked, rmem_max))
      << got << " bytes; rmem_max " << rmem_max;
}
