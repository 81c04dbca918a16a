// WithheldCredit: QUIC receive credit kept back from one peer (a sink's
// write() returned less than it took), so that a peer whose data is not
// consumed yet is slowed by flow control instead of growing memory here.
// Used by the per-peer budgets of the relay (bytes held for forwarding) and
// the RPC hub (requests queued for their handler). Loop thread only.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "transport/quic_connection.h"

namespace nexar {

class WithheldCredit {
 public:
  // Keeps `bytes` of stream stream_id on c back (one peer: always the same c).
  void add(QuicConnection *c, int64_t stream_id, uint64_t bytes) {
    conn_ = c;
    if (!streams_.empty() && streams_.back().first == stream_id)
      streams_.back().second += bytes;
    else
      streams_.emplace_back(stream_id, bytes);
  }
  // Gives all of it back (nothing if the connection is gone).
  void release() {
    auto streams = std::move(streams_);
    streams_.clear();
    if (conn_)
      for (auto &[sid, n] : streams)
        conn_->release_credit(sid, static_cast<size_t>(n));
  }
  // The connection is going away: nothing more is given back to it.
  void forget(const QuicConnection *c) {
    if (conn_ != c) return;
    conn_ = nullptr;
    streams_.clear();
  }
  bool empty() const { return streams_.empty(); }

 private:
  QuicConnection *conn_ = nullptr;
  std::vector<std::pair<int64_t, uint64_t>> streams_;  // (stream, bytes)
};

}  // namespace nexar
