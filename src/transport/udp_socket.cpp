#include "transport/udp_socket.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/udp.h>
#include <unistd.h>

#include <cstring>

#include "core/log.h"

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

namespace nexar {
namespace {
constexpr size_t kRxSlotSize = 65536;  // one GRO super-datagram at most
constexpr size_t kCtrlSlot = CMSG_SPACE(sizeof(int));
constexpr int kSocketBuffer = 8 << 20;
constexpr size_t kMaxGsoSegments = 64;
constexpr size_t kMaxGsoBytes = 65000;
}  // namespace

UdpSocket::~UdpSocket() {
  if (fd_ >= 0) close(fd_);
}

Status UdpSocket::bind(const SocketAddress &addr) {
  fd_ = socket(addr.family(), SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return error(NEXAR_ERR_IO, format("socket(): %s", strerror(errno)));
  configure(addr.family());
  if (::bind(fd_, addr.sa(), addr.len) != 0)
    return error(NEXAR_ERR_IO, format("bind(%s): %s", addr.to_string().c_str(), strerror(errno)));
  return finish();
}

Status UdpSocket::adopt(int fd) {
  fd_ = fd;
  local_.len = sizeof local_.storage;
  if (getsockname(fd_, local_.sa(), &local_.len) != 0 || local_.port() == 0)
    return error(NEXAR_ERR_INVALID_ARGUMENT, "adopted UDP socket is not bound");
  int fl = fcntl(fd_, F_GETFL);
  if (fl < 0 || fcntl(fd_, F_SETFL, fl | O_NONBLOCK) != 0)
    return error(NEXAR_ERR_IO, format("fcntl(O_NONBLOCK): %s", strerror(errno)));
  configure(local_.family());
  return finish();
}

void UdpSocket::configure(int family) {
  int buf = kSocketBuffer;
  // Ask for big buffers; the kernel caps them at net.core.[rw]mem_max.
  setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
  setsockopt(fd_, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
  // Root may exceed the cap (FORCE variants); failure is harmless.
  setsockopt(fd_, SOL_SOCKET, SO_RCVBUFFORCE, &buf, sizeof buf);
  setsockopt(fd_, SOL_SOCKET, SO_SNDBUFFORCE, &buf, sizeof buf);
  if (family == AF_INET) {
    // Never fragment: packet sizes are chosen to fit the path.
    int pmtu = IP_PMTUDISC_DO;
    setsockopt(fd_, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof pmtu);
  } else {
    int pmtu = IPV6_PMTUDISC_DO;
    setsockopt(fd_, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &pmtu, sizeof pmtu);
  }
  int one = 1;
  gro_ = setsockopt(fd_, IPPROTO_UDP, UDP_GRO, &one, sizeof one) == 0;
}

Status UdpSocket::finish() {
  local_.len = sizeof local_.storage;
  getsockname(fd_, local_.sa(), &local_.len);
  // GSO is probed by a setsockopt that only checks support.
  int seg = 1200;
  gso_ = setsockopt(fd_, IPPROTO_UDP, UDP_SEGMENT, &seg, sizeof seg) == 0;
  seg = 0;
  if (gso_) setsockopt(fd_, IPPROTO_UDP, UDP_SEGMENT, &seg, sizeof seg);
  // SO_RCVBUF reads back twice the grant (the kernel's bookkeeping share).
  int rcvbuf = 0;
  socklen_t rcvbuf_len = sizeof rcvbuf;
  if (getsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, &rcvbuf_len) == 0 && rcvbuf > 0)
    receive_buffer_ = static_cast<size_t>(rcvbuf) / 2;

  rx_buf_.resize(kMaxBatch * kRxSlotSize);
  rx_msgs_.resize(kMaxBatch);
  rx_iov_.resize(kMaxBatch);
  rx_addr_.resize(kMaxBatch);
  rx_ctrl_.resize(kMaxBatch * kCtrlSlot);
  for (size_t i = 0; i < kMaxBatch; ++i) {
    rx_iov_[i] = {rx_buf_.data() + i * kRxSlotSize, kRxSlotSize};
    msghdr &h = rx_msgs_[i].msg_hdr;
    memset(&h, 0, sizeof h);
    h.msg_name = &rx_addr_[i];
    h.msg_iov = &rx_iov_[i];
    h.msg_iovlen = 1;
    h.msg_control = rx_ctrl_.data() + i * kCtrlSlot;
  }
  rx_filled_ = kMaxBatch;  // every slot's lengths still to set
  LOG_DEBUG("udp socket bound to %s (gso %d, gro %d, receive buffer %zu KiB)",
            local_.to_string().c_str(), gso_, gro_, receive_buffer_ >> 10);
  return {};
}

size_t UdpSocket::receive_batch(std::vector<Datagram> &out) {
  out.clear();
  // The kernel rewrites only the lengths of the slots it filled: restore
  // those (a wake-up usually fills one or two of the 64).
  for (size_t i = 0; i < rx_filled_; ++i) {
    rx_msgs_[i].msg_hdr.msg_namelen = sizeof rx_addr_[i];
    rx_msgs_[i].msg_hdr.msg_controllen = kCtrlSlot;
  }
  int got = recvmmsg(fd_, rx_msgs_.data(), kMaxBatch, MSG_DONTWAIT, nullptr);
  rx_filled_ = got > 0 ? static_cast<size_t>(got) : 1;  // a failed call may have touched slot 0
  if (got <= 0) return 0;
  for (int i = 0; i < got; ++i) {
    msghdr &h = rx_msgs_[i].msg_hdr;
    Datagram d;
    d.data = rx_buf_.data() + static_cast<size_t>(i) * kRxSlotSize;
    d.len = rx_msgs_[i].msg_len;
    d.segment_size = d.len;
    for (cmsghdr *c = CMSG_FIRSTHDR(&h); c; c = CMSG_NXTHDR(&h, c)) {
      if (c->cmsg_level == IPPROTO_UDP && c->cmsg_type == UDP_GRO) {
        int seg = 0;
        memcpy(&seg, CMSG_DATA(c), sizeof seg);
        if (seg > 0) d.segment_size = static_cast<size_t>(seg);
      }
    }
    memcpy(&d.from.storage, &rx_addr_[i], h.msg_namelen);
    d.from.len = h.msg_namelen;
    out.push_back(d);
  }
  return out.size();
}

bool UdpSocket::send_packets(const SocketAddress &dest, const uint8_t *buf, const size_t *sizes,
                             size_t count, size_t *sent) {
  size_t i = 0;
  size_t offset = 0;
  while (i < count) {
    // A GSO run: equal sizes (the last may be shorter), bounded in count and bytes.
    size_t seg = sizes[i];
    size_t j = i + 1;
    size_t bytes = seg;
    if (gso_) {
      while (j < count && j - i < kMaxGsoSegments && sizes[j] <= seg &&
             bytes + sizes[j] <= kMaxGsoBytes) {
        bytes += sizes[j];
        if (sizes[j] < seg) {
          ++j;
          break;
        }
        ++j;
      }
    }
    iovec iov{const_cast<uint8_t *>(buf + offset), bytes};
    msghdr h{};
    h.msg_name = const_cast<sockaddr *>(dest.sa());
    h.msg_namelen = dest.len;
    h.msg_iov = &iov;
    h.msg_iovlen = 1;
    alignas(cmsghdr) uint8_t ctrl[CMSG_SPACE(sizeof(uint16_t))];
    if (j - i > 1) {
      memset(ctrl, 0, sizeof ctrl);
      h.msg_control = ctrl;
      h.msg_controllen = sizeof ctrl;
      cmsghdr *c = CMSG_FIRSTHDR(&h);
      c->cmsg_level = IPPROTO_UDP;
      c->cmsg_type = UDP_SEGMENT;
      c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
      uint16_t s16 = static_cast<uint16_t>(seg);
      memcpy(CMSG_DATA(c), &s16, sizeof s16);
    }
    ssize_t rc;
    do {
      rc = sendmsg(fd_, &h, 0);
    } while (rc < 0 && errno == EINTR);
    if (rc < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) {
        *sent = i;
        return false;
      }
      // Other errors (e.g. unreachable peer): the packets are lost; QUIC
      // recovery or the idle timeout deals with it.
      LOG_DEBUG("sendmsg to %s: %s", dest.to_string().c_str(), strerror(errno));
    }
    offset += bytes;
    i = j;
  }
  *sent = count;
  return true;
}

}  // namespace nexar
