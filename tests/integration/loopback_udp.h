// Plain UDP sockets on 127.0.0.1, for tests that put something of their own
// on the wire next to nexar's QUIC (a relay, a stray sender).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <ctime>
#include <random>
#include <string>

namespace nexar_test {

inline sockaddr_in loopback(uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

// A UDP socket bound to 127.0.0.1:port (0: any), its port in *bound; -1 on failure.
inline int bound_udp_socket(uint16_t port, uint16_t *bound) {
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in a = loopback(port);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0) return -1;
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len);
  *bound = ntohs(a.sin_port);
  return fd;
}

// A loopback port nobody is bound to right now, for a process started later.
// It is drawn below the kernel's ephemeral range (32768 and up by default):
// a port from there, freed and bound again later, can be taken in between
// by any socket another test binds to port 0.
inline uint16_t free_port() {
  static thread_local std::minstd_rand draw(static_cast<unsigned>(getpid()) * 7919u +
                                            static_cast<unsigned>(time(nullptr)));
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const auto port = static_cast<uint16_t>(20000 + draw() % 12000);
    uint16_t bound = 0;
    const int fd = bound_udp_socket(port, &bound);
    if (fd < 0) continue;
    close(fd);
    return port;
  }
  uint16_t port = 0;
  const int fd = bound_udp_socket(0, &port);
  close(fd);
  return port;
}

// The port of a "host:port" address.
inline uint16_t port_of(const std::string &address) {
  return static_cast<uint16_t>(std::stoul(address.substr(address.rfind(':') + 1)));
}

}  // namespace nexar_test
