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

}  // namespace nexar
