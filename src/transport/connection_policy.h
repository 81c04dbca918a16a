// How the connections of an endpoint authenticate.
//
// Mesh connections (the default) use mutual TLS: both sides present a
// certificate signed by the cluster CA, and the peer's certificate must name
// this cluster (and, on the client side, the rank it dialled). Join
// connections between a worker and the seed cannot: the worker has no
// certificate yet. They skip certificate verification on both sides and
// authenticate with the cluster token instead, bound to this TLS session
// through its exporter secret (see cluster/join_protocol.h). They use another
// ALPN, so a join client never talks to a mesh endpoint or the reverse.
//
// The flow-control windows are what a peer may send ahead of what nexar has
// read, and ngtcp2 keeps out-of-order stream data up to them. Mesh peers are
// authenticated by the handshake and get windows sized for full speed. A join
// peer is anyone who completes a handshake, and a join message is at most
// wire::kMaxControlBytes: with the mesh's windows, one byte sent every 8 KiB
// of offset (ngtcp2 buffers in 8 KiB chunks) pinned 96 MiB of the seed's
// memory per connection for about 100 KB sent.
#pragma once

#include <cstdint>

namespace nexar {

struct ConnectionPolicy {
  bool mutual = true;
  const char *alpn = "nexar/1";
  // Initial and largest (ngtcp2 grows a window up to it). The mesh's are tens
  // of MB: bandwidth x RTT with a wide margin, as measured.
  uint64_t conn_window = 96ull << 20;
  uint64_t stream_window = 32ull << 20;  // per stream

  static ConnectionPolicy mesh() { return {}; }
  static ConnectionPolicy join() { return {false, "nexar-join/1", 256 << 10, 128 << 10}; }
};

}  // namespace nexar
