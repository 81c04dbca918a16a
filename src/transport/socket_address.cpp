#include "transport/socket_address.h"

#include <arpa/inet.h>
#include <netdb.h>

namespace nexar {

uint16_t SocketAddress::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in *>(&storage)->sin_port);
  if (family() == AF_INET6)
    return ntohs(reinterpret_cast<const sockaddr_in6 *>(&storage)->sin6_port);
  return 0;
}

bool SocketAddress::is_loopback() const {
  if (family() == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in *>(&storage)->sin_addr.s_addr) >> 24) == 127;
  if (family() == AF_INET6)
    return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6 *>(&storage)->sin6_addr);
  return false;
}

std::string SocketAddress::to_string() const {
  char host[INET6_ADDRSTRLEN] = "?";
  if (family() == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in *>(&storage)->sin_addr, host,
              sizeof host);
    return format("%s:%u", host, port());
  }
  if (family() == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6 *>(&storage)->sin6_addr, host,
              sizeof host);
    return format("[%s]:%u", host, port());
  }
  return "(none)";
}

Status SocketAddress::parse(const std::string &text, SocketAddress *out) {
  std::string host, port;
  if (!text.empty() && text[0] == '[') {
    auto close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return error(NEXAR_ERR_INVALID_ARGUMENT,
                   format("address '%s' is not [host]:port", text.c_str()));
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string::npos)
      return error(NEXAR_ERR_INVALID_ARGUMENT,
                   format("address '%s' is not host:port", text.c_str()));
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  char *end = nullptr;
  unsigned long p = strtoul(port.c_str(), &end, 10);
  if (port.empty() || *end || p > 65535)
    return error(NEXAR_ERR_INVALID_ARGUMENT,
                 format("address '%s' has no valid port", text.c_str()));
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo *res = nullptr;
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 || !res)
    return error(NEXAR_ERR_INVALID_ARGUMENT,
                 format("cannot resolve '%s': %s", text.c_str(), gai_strerror(rc)));
  memcpy(&out->storage, res->ai_addr, res->ai_addrlen);
  out->len = res->ai_addrlen;
  freeaddrinfo(res);
  return {};
}

bool SocketAddress::parse_numeric(const std::string &text, SocketAddress *out) {
  std::string host, port;
  if (!text.empty() && text[0] == '[') {
    auto close = text.find("]:");
    if (close == std::string::npos) return false;
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string::npos) return false;
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos)
    return false;
  unsigned long p = strtoul(port.c_str(), nullptr, 10);
  if (p == 0 || p > 65535) return false;
  SocketAddress a;
  auto *v4 = reinterpret_cast<sockaddr_in *>(&a.storage);
  auto *v6 = reinterpret_cast<sockaddr_in6 *>(&a.storage);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(p));
    a.len = sizeof *v4;
  } else if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(p));
    a.len = sizeof *v6;
  } else {
    return false;
  }
  *out = a;
  return true;
}

}  // namespace nexar
