// For internal tests that drive real engines built from the internals
// (cluster/local_bootstrap.h): read their counters, and put a hand-made frame
// on the wire to a neighbour, as a broken or hostile peer would.
#pragma once

#include <gtest/gtest.h>

#include <cstring>

#include "client/client.h"
#include "eventually.h"

namespace nexar_test {

inline nexar_stats_t stats_of(nexar::Client &e) {
  nexar_stats_t st;
  memset(&st, 0, sizeof st);
  e.stats(&st);
  return st;
}

// A frame of `kind` and `tag` whose payload is `bytes` bytes of `fill`.
inline nexar::OutgoingMessage filled_frame(nexar::wire::FrameKind kind, uint32_t tag, size_t bytes,
                                           uint8_t fill) {
  nexar::OutgoingMessage m;
  m.header.kind = kind;
  m.header.tag = tag;
  m.header.length = bytes;
  m.owned = nexar::PooledBuf::unpooled(bytes);
  if (bytes) memset(m.owned.data(), fill, bytes);
  m.payload = m.owned.data();
  return m;
}

// Sends m from `from` to its neighbour `to` on the engine's loop thread.
inline void send_frame(nexar::Client &from, uint32_t to, nexar::OutgoingMessage m) {
  from.loop().run_sync([&] {
    nexar::QuicConnection *c = from.peer(to).direct_connection();
    ASSERT_NE(c, nullptr) << "no connection to rank " << to;
    c->send(std::move(m), false, 0);
  });
}

}  // namespace nexar_test
