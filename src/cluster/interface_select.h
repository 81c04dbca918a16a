// Which local address a worker listens on and which it tells its peers.
//
//   1. NEXAR_LISTEN_ADDR (listen_address) "ip:port": bound as given. A
//      wildcard host (0.0.0.0, [::]) keeps its port; the IP is chosen as below
//      (a QUIC server must answer from the address it was reached at, so the
//      socket is always bound to one concrete address).
//   2. NEXAR_SOCKET_IFNAME (socket_ifname), NCCL syntax: a comma-separated
//      list of interface name prefixes ("eth,ib0"); a leading '^' excludes
//      them instead ("^lo,docker"); a leading '=' (after any '^') matches
//      exact names. The first address of the seed's family on the first
//      matching interface that is up.
//   3. Otherwise the address of the interface that routes to the seed.
// NEXAR_ADVERTISE_ADDR (advertise_address) overrides what peers are told
// ("ip" or "ip:port"; no port or port 0 = the bound port). A worker never
// advertises a loopback address to a seed on another host: that is an error.
#pragma once

#include <string>
#include <vector>

#include "core/config.h"
#include "transport/socket_address.h"

namespace nexar {

struct ListenChoice {
  SocketAddress bind;  // port 0 = any
  std::string how;     // for the log: "NEXAR_LISTEN_ADDR", "interface eth0", ...
};

Status choose_listen_address(const Config &cfg, const SocketAddress &seed, ListenChoice *out);

// Creates a UDP socket bound to addr; *bound is the address actually bound.
Status bind_udp(const SocketAddress &addr, int *fd, SocketAddress *bound);

// What the peers dial: the advertised override or the bound address. Fails
// when that is loopback while the seed is not.
Status advertised_address(const Config &cfg, const SocketAddress &bound, const SocketAddress &seed,
                          SocketAddress *out);

// 0.0.0.0 or [::].
bool is_wildcard(const SocketAddress &a);
void set_port(SocketAddress *a, uint16_t port);

// NCCL-style interface name filter (exposed for tests).
bool interface_matches(const std::string &spec, const std::string &name);

struct LocalInterface {
  std::string name;
  SocketAddress addr;  // port 0
  bool up = false;
  bool loopback = false;
};
std::vector<LocalInterface> local_interfaces();

}  // namespace nexar
