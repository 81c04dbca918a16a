#include "cluster/interface_select.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/log.h"

namespace nexar {

bool is_wildcard(const SocketAddress &a) {
  if (a.family() == AF_INET)
    return reinterpret_cast<const sockaddr_in *>(&a.storage)->sin_addr.s_addr == INADDR_ANY;
  if (a.family() == AF_INET6)
    return IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6 *>(&a.storage)->sin6_addr);
  return false;
}

void set_port(SocketAddress *a, uint16_t port) {
  if (a->family() == AF_INET)
    reinterpret_cast<sockaddr_in *>(&a->storage)->sin_port = htons(port);
  else if (a->family() == AF_INET6)
    reinterpret_cast<sockaddr_in6 *>(&a->storage)->sin6_port = htons(port);
}

namespace {

std::string host_of(const SocketAddress &a) {
  std::string s = a.to_string();
  return s.substr(0, s.rfind(':'));
}

std::vector<std::string> split(const std::string &s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string::npos) end = s.size();
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// The local address the kernel would use to reach `to` (no packet is sent).
Status route_source(const SocketAddress &to, SocketAddress *out) {
  int fd = socket(to.family(), SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return error(NEXAR_ERR_IO, format("socket(): %s", strerror(errno)));
  SocketAddress probe = to;
  if (probe.port() == 0) set_port(&probe, 9);
  if (connect(fd, probe.sa(), probe.len) != 0) {
    int e = errno;
    close(fd);
    return error(NEXAR_ERR_IO,
                 format("no route to the seed at %s: %s", to.to_string().c_str(), strerror(e)));
  }
  out->len = sizeof out->storage;
  getsockname(fd, out->sa(), &out->len);
  close(fd);
  set_port(out, 0);
  return {};
}

}  // namespace

bool interface_matches(const std::string &spec_in, const std::string &name) {
  std::string spec = spec_in;
  bool exclude = false, exact = false;
  if (!spec.empty() && spec[0] == '^') {
    exclude = true;
    spec.erase(0, 1);
  }
  if (!spec.empty() && spec[0] == '=') {
    exact = true;
    spec.erase(0, 1);
  }
  bool hit = false;
  for (const std::string &p : split(spec, ','))
    if (exact ? name == p : name.compare(0, p.size(), p) == 0) hit = true;
  return exclude ? !hit : hit;
}

std::vector<LocalInterface> local_interfaces() {
  std::vector<LocalInterface> out;
  ifaddrs *list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs *i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr) continue;
    const int fam = i->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    LocalInterface li;
    li.name = i->ifa_name;
    li.up = (i->ifa_flags & IFF_UP) && (i->ifa_flags & IFF_RUNNING);
    li.loopback = i->ifa_flags & IFF_LOOPBACK;
    li.addr.len = fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    memcpy(&li.addr.storage, i->ifa_addr, li.addr.len);
    if (fam == AF_INET6 &&
        IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<sockaddr_in6 *>(&li.addr.storage)->sin6_addr))
      continue;  // would need a scope id in every peer's address
    set_port(&li.addr, 0);
    out.push_back(std::move(li));
  }
  freeifaddrs(list);
  return out;
}

Status choose_listen_address(const Config &cfg, const SocketAddress &seed, ListenChoice *out) {
  uint16_t port = 0;
  if (!cfg.listen_address.empty()) {
    SocketAddress a;
    Status s = SocketAddress::parse(cfg.listen_address, &a);
    if (!s) return error(s.code, "NEXAR_LISTEN_ADDR: " + s.message);
    if (!is_wildcard(a)) {
      out->bind = a;
      out->how = "NEXAR_LISTEN_ADDR";
      return {};
    }
    port = a.port();
  }
  if (!cfg.socket_ifname.empty()) {
    std::string seen;
    for (const LocalInterface &li : local_interfaces()) {
      if (!li.up || li.addr.family() != seed.family()) continue;
      if (seen.find(li.name + " ") == std::string::npos) seen += li.name + " ";
      if (!interface_matches(cfg.socket_ifname, li.name)) continue;
      out->bind = li.addr;
      set_port(&out->bind, port);
      out->how = format("NEXAR_SOCKET_IFNAME=%s matched interface %s", cfg.socket_ifname.c_str(),
                        li.name.c_str());
      return {};
    }
    return error(NEXAR_ERR_INVALID_ARGUMENT,
                 format("NEXAR_SOCKET_IFNAME=%s matches no interface that is up and has an %s "
                        "address (up: %s)",
                        cfg.socket_ifname.c_str(), seed.family() == AF_INET ? "IPv4" : "IPv6",
                        seen.empty() ? "none" : seen.c_str()));
  }
  SocketAddress src;
  Status s = route_source(seed, &src);
  if (!s) return s;
  out->bind = src;
  set_port(&out->bind, port);
  out->how = format("the interface that routes to the seed %s", seed.to_string().c_str());
  return {};
}

Status bind_udp(const SocketAddress &addr, int *fd_out, SocketAddress *bound) {
  int fd = socket(addr.family(), SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return error(NEXAR_ERR_IO, format("socket(): %s", strerror(errno)));
  // Large buffers from the start: peers may dial this socket before the
  // engine that reads it exists.
  int buf = 8 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &buf, sizeof buf);
  if (bind(fd, addr.sa(), addr.len) != 0) {
    int e = errno;
    close(fd);
    return error(NEXAR_ERR_IO, format("cannot bind %s: %s", addr.to_string().c_str(), strerror(e)));
  }
  bound->len = sizeof bound->storage;
  getsockname(fd, bound->sa(), &bound->len);
  *fd_out = fd;
  return {};
}

Status advertised_address(const Config &cfg, const SocketAddress &bound, const SocketAddress &seed,
                          SocketAddress *out) {
  SocketAddress adv = bound;
  if (!cfg.advertise_address.empty()) {
    std::string text = cfg.advertise_address;
    const bool bracketed = !text.empty() && text[0] == '[';
    const bool has_port =
        bracketed ? text.find("]:") != std::string::npos : text.find(':') != std::string::npos;
    if (!has_port) text += ":0";
    Status s = SocketAddress::parse(text, &adv);
    if (!s) return error(s.code, "NEXAR_ADVERTISE_ADDR: " + s.message);
    if (adv.port() == 0) set_port(&adv, bound.port());
    if (is_wildcard(adv))
      return error(NEXAR_ERR_INVALID_ARGUMENT,
                   format("NEXAR_ADVERTISE_ADDR=%s is a wildcard address; peers cannot dial it",
                          cfg.advertise_address.c_str()));
  }
  if (adv.is_loopback() && !seed.is_loopback())
    return error(NEXAR_ERR_INVALID_ARGUMENT,
                 format("this worker would advertise the loopback address %s to a seed on another "
                        "host (%s), where no peer could reach it; set NEXAR_SOCKET_IFNAME, "
                        "NEXAR_LISTEN_ADDR or NEXAR_ADVERTISE_ADDR to a reachable address",
                        adv.to_string().c_str(), host_of(seed).c_str()));
  *out = adv;
  return {};
}

}  // namespace nexar
