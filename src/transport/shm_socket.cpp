#include "transport/shm_socket.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>

namespace nexar {
namespace {

socklen_t abstract_address(const std::string &name, sockaddr_un *a) {
  memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  const size_t n = std::min(name.size(), sizeof a->sun_path - 1);
  memcpy(a->sun_path + 1, name.data(), n);  // sun_path[0] == 0: abstract
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

UniqueFd seqpacket_socket() {
  return UniqueFd(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
}

}  // namespace

Status shm_listen(UniqueFd *out, std::string *name) {
  uint8_t rnd[12];
  if (getrandom(rnd, sizeof rnd, 0) != static_cast<ssize_t>(sizeof rnd))
    return error(NEXAR_ERR_INTERNAL, format("getrandom: %s", strerror(errno)));
  std::string n = "nexar-shm-";
  for (uint8_t b : rnd)
    n += format("%02x", b);
  UniqueFd fd = seqpacket_socket();
  if (!fd.valid()) return error(NEXAR_ERR_IO, format("socket(AF_UNIX): %s", strerror(errno)));
  sockaddr_un a;
  const socklen_t len = abstract_address(n, &a);
  if (bind(fd.get(), reinterpret_cast<sockaddr *>(&a), len) != 0 || listen(fd.get(), 64) != 0)
    return error(NEXAR_ERR_IO, format("binding the same-host socket: %s", strerror(errno)));
  *out = std::move(fd);
  *name = std::move(n);
  return {};
}

Status shm_connect(const std::string &name, UniqueFd *out) {
  UniqueFd fd = seqpacket_socket();
  if (!fd.valid()) return error(NEXAR_ERR_IO, format("socket(AF_UNIX): %s", strerror(errno)));
  sockaddr_un a;
  const socklen_t len = abstract_address(name, &a);
  if (connect(fd.get(), reinterpret_cast<sockaddr *>(&a), len) != 0)
    return error(NEXAR_ERR_IO,
                 format("connecting to the peer's same-host socket: %s", strerror(errno)));
  *out = std::move(fd);
  return {};
}

UniqueFd shm_accept(int listener) {
  return UniqueFd(accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
}

Status shm_send_packet(int fd, std::span<const uint8_t> bytes, int pass_fd) {
  iovec iov{const_cast<uint8_t *>(bytes.data()), bytes.size()};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  if (pass_fd >= 0) {
    memset(control, 0, sizeof control);
    m.msg_control = control;
    m.msg_controllen = sizeof control;
    cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
  }
  for (;;) {
    const ssize_t n = sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n == static_cast<ssize_t>(bytes.size())) return {};
    if (n < 0 && errno == EINTR) continue;
    return error(NEXAR_ERR_IO, n < 0 ? format("sendmsg: %s", strerror(errno))
                                     : std::string("sendmsg: short packet"));
  }
}

ShmRecv shm_recv_packet(int fd, size_t max, std::vector<uint8_t> *out, UniqueFd *passed,
                        std::string *why) {
  out->resize(max + 1);
  iovec iov{out->data(), out->size()};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
  m.msg_control = control;
  m.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = recvmsg(fd, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return ShmRecv::WouldBlock;
    if (errno == ECONNRESET) return ShmRecv::HungUp;
    *why = format("recvmsg: %s", strerror(errno));
    return ShmRecv::Error;
  }
  // Descriptors first, so that every one passed is owned (and closed) here.
  int fds_seen = 0;
  for (cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int got;
      memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      UniqueFd owned(got);
      if (fds_seen++ == 0 && passed) *passed = std::move(owned);
    }
  }
  if (n == 0 && fds_seen == 0) return ShmRecv::HungUp;
  if ((m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || static_cast<size_t>(n) > max || fds_seen > 1) {
    *why = "an oversized packet or too many descriptors";
    return ShmRecv::Error;
  }
  out->resize(static_cast<size_t>(n));
  return ShmRecv::Packet;
}

Status shm_peer_credentials(int fd, uint32_t *uid, uint32_t *pid) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
    return error(NEXAR_ERR_IO, format("SO_PEERCRED: %s", strerror(errno)));
  *uid = cred.uid;
  *pid = static_cast<uint32_t>(cred.pid);
  return {};
}

}  // namespace nexar
