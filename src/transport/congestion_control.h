// Which congestion controller a QUIC connection runs, chosen by how much its
// endpoint's UDP socket can queue.
#pragma once

#include <ngtcp2/ngtcp2.h>

#include <cstddef>

namespace nexar {

// The granted socket receive buffer (UdpSocket::receive_buffer) from which
// connections run BBRv2: net.core.rmem_max = 4194304 for processes without
// CAP_NET_ADMIN.
inline constexpr size_t kBbrMinReceiveBuffer = size_t{4} << 20;

// Why not CUBIC everywhere: in a collective both ends of a connection send
// and compute at once, so a packet waits for its peer's current batch before
// it is acknowledged (smoothed RTT 90-185 us on loopback under load), and
// ngtcp2 0.12's CUBIC, capped at a multiple of delivery rate x RTT, kept its
// window at 0.5-2 MiB: the sender stalled on a full window while the peer
// had cores to spare. BBRv2 paces by measured bandwidth and keeps several MiB
// in flight, which a socket must be able to queue: with a small buffer it
// loses datagrams by the thousand (docs/performance.md), so below the
// threshold CUBIC stays. Both ends are assumed to have the same limit (one
// cluster, one sysctl).
constexpr ngtcp2_cc_algo congestion_control_for(size_t receive_buffer) {
  return receive_buffer >= kBbrMinReceiveBuffer ? NGTCP2_CC_ALGO_BBR2 : NGTCP2_CC_ALGO_CUBIC;
}

}  // namespace nexar
