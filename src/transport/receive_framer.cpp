#include "transport/receive_framer.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "transport/quic_connection.h"
#include "transport/quic_endpoint.h"

namespace nexar {

ReceiveFramer::ReceiveFramer(QuicConnection *conn, ConnectionHandler *handler,
                             TransportStats *stats)
    : conn_(conn), handler_(handler), stats_(stats) {}

size_t ReceiveFramer::on_data(int64_t sid, uint64_t offset, const uint8_t *data, size_t len,
                              Placement placed, Status *failure) {
  auto found = streams_.find(sid);
  if (found == streams_.end()) {
    found = streams_.emplace(sid, Stream{}).first;
    ++stats_->streams_accepted;
  }
  Stream &rs = found->second;
  rs.next_offset = offset + len;
  // place() saw this very state when the packet was opened, at the offset
  // ngtcp2 delivers next; anything else would leave a receive without bytes
  // that were opened for it, or copy bytes that were never opened.
  auto lost = [&] {
    *failure = error(NEXAR_ERR_INTERNAL,
                     format("data from rank %u was opened for a receive that no longer takes it",
                            conn_->expected_peer_rank()));
  };
  if (placed.len > 0 && (placed.offset != offset || !rs.in_payload || rs.sink == nullptr ||
                         std::min<uint64_t>(len, rs.remaining) != placed.len)) {
    lost();
    return 0;
  }
  size_t credit = 0;
  while (len > 0) {
    if (!rs.have_lane) {
      if (!wire::valid_lane(data[0])) {
        *failure =
            error(NEXAR_ERR_PROTOCOL, format("rank %u opened a stream with unknown lane 0x%02x",
                                             conn_->expected_peer_rank(), data[0]));
        return credit;
      }
      rs.have_lane = true;
      rs.lane = data[0];
      ++data;
      --len;
      ++credit;
      continue;
    }
    if (!rs.in_payload) {
      size_t k = std::min(len, wire::kFrameHeaderSize - rs.header_fill);
      memcpy(rs.header + rs.header_fill, data, k);
      rs.header_fill += k;
      data += k;
      len -= k;
      credit += k;
      if (rs.header_fill < wire::kFrameHeaderSize) break;
      rs.header_fill = 0;
      Status s = wire::decode_frame_header(rs.header, &rs.frame);
      if (s && rs.lane != static_cast<uint8_t>(wire::lane_of(rs.frame.kind)))
        s = error(NEXAR_ERR_PROTOCOL, "frame kind does not belong on its lane");
      if (!s) {
        *failure = error(s.code, format("malformed frame from rank %u: %s",
                                        conn_->expected_peer_rank(), s.message.c_str()));
        return credit;
      }
      rs.in_payload = true;
      rs.remaining = rs.frame.length;
      rs.sink = nullptr;
      if (rs.frame.kind == wire::FrameKind::Control) {
        // Grown as the bytes arrive, not reserved from the header's length:
        // a header alone (32 bytes on each of 16 streams) must not claim
        // 64 KiB apiece from a peer that never sends the rest.
        rs.control.clear();
      } else {
        rs.sink = handler_->on_message(conn_, sid, rs.frame);
        if (conn_->closed()) return credit;
      }
    }
    size_t k = static_cast<size_t>(std::min<uint64_t>(len, rs.remaining));
    if (placed.len > 0) {
      size_t c = 0;
      if (!rs.sink->placed(placed.to, k, &c)) {
        lost();
        return credit;
      }
      credit += c;
      stats_->bytes_opened_in_place += k;
      placed = {};
    } else if (rs.frame.kind == wire::FrameKind::Control) {
      rs.control.insert(rs.control.end(), data, data + k);
      credit += k;
    } else if (k > 0) {
      credit += rs.sink->write(data, k);
    }
    data += k;
    len -= k;
    rs.remaining -= k;
    if (rs.remaining == 0) {
      rs.in_payload = false;
      if (rs.frame.kind == wire::FrameKind::Control) {
        handler_->on_control(conn_, rs.control);
      } else {
        ++stats_->messages_received;
        stats_->bytes_received += rs.frame.length;
        MessageSink *sink = std::exchange(rs.sink, nullptr);
        sink->finish(true);
      }
      if (conn_->closed()) return credit;
    }
  }
  return credit;
}

uint8_t *ReceiveFramer::place(int64_t sid, uint64_t offset, size_t len, size_t *n) {
  if (conn_->closed()) return nullptr;
  auto found = streams_.find(sid);
  if (found == streams_.end()) return nullptr;
  Stream &rs = found->second;
  // Only data ngtcp2 will deliver at once (it continues the stream) and that
  // lies in the payload of the message being received, not in a header.
  if (offset != rs.next_offset || !rs.in_payload || rs.sink == nullptr) return nullptr;
  const size_t k = static_cast<size_t>(std::min<uint64_t>(len, rs.remaining));
  uint8_t *to = rs.sink->place(k);
  if (to) *n = k;
  return to;
}

void ReceiveFramer::fail_sinks() {
  for (auto &[id, rs] : streams_)
    if (rs.sink) std::exchange(rs.sink, nullptr)->finish(false);
}

}  // namespace nexar
