// An IPv4 or IPv6 socket address with parsing and printing.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>
#include <string>

#include "core/status.h"

namespace nexar {

struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t len = 0;

  const sockaddr *sa() const { return reinterpret_cast<const sockaddr *>(&storage); }
  sockaddr *sa() { return reinterpret_cast<sockaddr *>(&storage); }
  int family() const { return storage.ss_family; }
  uint16_t port() const;
  bool is_loopback() const;
  std::string to_string() const;  // "127.0.0.1:5000" or "[::1]:5000"

  bool operator==(const SocketAddress &o) const {
    return len == o.len && memcmp(&storage, &o.storage, len) == 0;
  }

  // Parses "host:port", "[v6]:port" (numeric hosts, or names resolved with
  // getaddrinfo).
  static Status parse(const std::string &text, SocketAddress *out);
  // "ip:port" or "[ip6]:port" with a numeric host and a non-zero port, never
  // resolved (a name from the network must not make this thread wait on DNS).
  static bool parse_numeric(const std::string &text, SocketAddress *out);
};

}  // namespace nexar
