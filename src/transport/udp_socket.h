// The engine's one UDP socket: large buffers, GRO + recvmmsg on receive and
// GSO on send (what the measurements in notes/quic-ngtcp2.md showed to matter).
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "transport/socket_address.h"

namespace nexar {

class UdpSocket {
 public:
  UdpSocket() = default;
  ~UdpSocket();
  UdpSocket(const UdpSocket &) = delete;
  UdpSocket &operator=(const UdpSocket &) = delete;

  Status bind(const SocketAddress &addr);
  // Takes over a socket the caller created and bound (made non-blocking here).
  Status adopt(int fd);
  int fd() const { return fd_; }
  // The receive buffer the kernel granted: what was asked for, capped at
  // net.core.rmem_max for processes without CAP_NET_ADMIN.
  size_t receive_buffer() const { return receive_buffer_; }
  const SocketAddress &local() const { return local_; }

  // One received datagram (GRO-coalesced datagrams are split by the caller
  // using segment_size).
  struct Datagram {
    const uint8_t *data;
    size_t len;
    size_t segment_size;  // == len unless GRO coalesced several
    SocketAddress from;
  };
  // The most datagrams one receive_batch reads.
  static constexpr size_t kMaxBatch = 64;
  // Reads up to kMaxBatch datagrams without blocking; returns how many
  // (0 = none; fewer than kMaxBatch = the queue was emptied).
  size_t receive_batch(std::vector<Datagram> &out);

  // Sends `count` packets laid out back to back in buf with the given sizes,
  // all to dest; equal-sized runs go out as one GSO send. Returns false if the
  // socket buffer is full (the rest must be retried when writable).
  bool send_packets(const SocketAddress &dest, const uint8_t *buf, const size_t *sizes,
                    size_t count, size_t *sent);

 private:
  void configure(int family);
  Status finish();

  int fd_ = -1;
  SocketAddress local_;
  bool gso_ = false;
  bool gro_ = false;
  size_t receive_buffer_ = 0;
  std::vector<uint8_t> rx_buf_;
  std::vector<mmsghdr> rx_msgs_;
  std::vector<iovec> rx_iov_;
  std::vector<sockaddr_storage> rx_addr_;
  std::vector<uint8_t> rx_ctrl_;
  size_t rx_filled_ = 0;  // slots the last recvmmsg filled
};

}  // namespace nexar
