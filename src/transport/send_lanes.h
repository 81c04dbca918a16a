// The send side of a QuicConnection: nexar's lanes, each on one long-lived
// QUIC stream, and the messages queued on them.
//
// A queued message is one SendItem: its frame header, then its payload. The
// payload is referenced, not copied, until the peer acknowledges it (ngtcp2
// retransmits from the same memory), unless the caller handed over an owned
// copy. Each stream starts with its lane byte. The control lane is served
// first, the others round robin, so neither bulk data nor a large RPC payload
// starves the rest.
#pragma once

#include <ngtcp2/ngtcp2.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>

#include "core/buffer_pool.h"
#include "core/status.h"
#include "transport/frame.h"

namespace nexar {

// Told when a queued message has been acknowledged, or can never be.
class SendListener {
 public:
  virtual ~SendListener() = default;
  virtual void on_send_done(const Status &s) = 0;
};

struct OutgoingMessage {
  wire::FrameHeader header;
  const uint8_t *payload = nullptr;  // referenced until acknowledged, unless owned
  PooledBuf owned;                   // when set, payload points into it
  SendListener *listener = nullptr;  // may be null (fire and forget)
  // Relay frames only: the prefix sent between the header and the payload
  // (header.length counts it).
  uint8_t prefix[wire::kRelayPrefixSize] = {};
};

// One queued message as its stream carries it: header, then payload.
struct SendItem {
  uint8_t header[wire::kFrameHeaderSize + wire::kRelayPrefixSize];
  size_t header_len = wire::kFrameHeaderSize;
  const uint8_t *payload = nullptr;
  uint64_t payload_len = 0;
  PooledBuf owned;
  SendListener *listener = nullptr;
  uint64_t end_offset = 0;  // stream offset just past this item
  uint64_t written = 0;     // bytes of header + payload given to ngtcp2
  bool zero_rest = false;   // cancelled mid-way: send zeros for the rest
  // The payload went to ngtcp2 as stand-in bytes up to stand_in_end (an
  // offset within the item) and is sealed from `payload` (PacketCipher::Source).
  bool stand_in = false;
  uint64_t stand_in_end = 0;
  uint64_t total() const { return header_len + payload_len; }

  // The item that carries msg: its header encoded (with the relay prefix of
  // a relay frame), its payload referenced or owned.
  static std::unique_ptr<SendItem> framing(OutgoingMessage msg);
};

// One lane: its stream and the items queued on it.
struct SendLane {
  int64_t id = -1;  // the stream, once opened
  uint8_t lane_byte = 0;
  std::deque<std::unique_ptr<SendItem>> items;  // not yet acknowledged, in order
  size_t next = 0;                              // first item not fully written
  uint64_t offset = 0;                          // next stream offset to assign
  bool blocked = false;                         // by the peer's stream flow control
  bool opened() const { return id >= 0; }
  bool writable() const { return id >= 0 && !blocked && next < items.size(); }
};

class SendLanes {
 public:
  static constexpr size_t kDataStreams = 4;

  SendLanes();
  SendLanes(const SendLanes &) = delete;
  SendLanes &operator=(const SendLanes &) = delete;

  // The lane for a message: control, or by frame kind the RPC requests' or
  // responses', or by key one of the relay lanes (relay frames) or of the data
  // lanes (everything else). Messages with the same key stay in order.
  SendLane &lane_for(bool control, wire::FrameKind kind, uint64_t key);
  // Queues item at the end of lane, at the next stream offsets.
  SendItem *enqueue(SendLane &lane, std::unique_ptr<SendItem> item);
  // Opens a stream for every lane that has none, its lane byte ahead of
  // anything queued, counting each into *streams_opened. Relay lanes open
  // with their first item: full meshes never use them. Returns whether every
  // lane that should be open is (false: ngtcp2 has no stream credit yet).
  bool open(ngtcp2_conn *conn, uint64_t *streams_opened);
  // QuicConnection::cancel().
  bool cancel(SendItem *item, SendListener *replacement);

  // The lane to write next, or null if none can be written.
  SendLane *pick();
  // Describes lane's unwritten bytes in at most max vecs.
  size_t build_vecs(const SendLane &lane, ngtcp2_vec *vecs, size_t max) const;
  // ngtcp2 took the next n of those bytes.
  void advance(SendLane &lane, size_t n);
  // The peer acknowledged stream_id's bytes [offset, offset + len): tells
  // the listener of every item acknowledged whole.
  void on_acked(int64_t stream_id, uint64_t offset, uint64_t len);
  // The peer extended stream_id's flow control window.
  void unblock(int64_t stream_id);
  // Fails every item queued, telling its listener why.
  void fail_all(const Status &why);

  // Where stream stream_id's bytes at offset are (PacketCipher::Source::source).
  bool locate(int64_t stream_id, uint64_t offset, size_t len, const uint8_t **from,
              size_t *n) const;
  // Whether any queued item went to ngtcp2 as stand-in bytes.
  bool standing_in() const { return stand_in_items_ > 0; }

  bool has_unacked() const;
  // Bytes queued and not yet given to ngtcp2.
  uint64_t queued_bytes() const { return queued_bytes_; }

 private:
  // The lanes: control, then the ones pick() serves round robin: data (by
  // key), RPC requests, RPC responses, relay (keyed by origin and
  // destination, so each flow keeps its order).
  static constexpr size_t kRelayStreams = 2;
  static constexpr size_t kControl = 0, kData = 1, kRpcRequest = kData + kDataStreams,
                          kRpcResponse = kRpcRequest + 1, kRelay = kRpcResponse + 1,
                          kLanes = kRelay + kRelayStreams;

  SendLane *by_id(int64_t stream_id);
  const SendLane *by_id(int64_t stream_id) const;
  void finish_items(SendLane &lane, const Status &s);
  // Every SendItem leaves its lane through here (acknowledged, dropped or failed).
  void forget_item(const SendItem &it);

  SendLane lanes_[kLanes];
  size_t rr_ = 0;  // round-robin position over lanes_[kData..]
  uint64_t queued_bytes_ = 0;
  size_t stand_in_items_ = 0;  // queued items with stand_in set
};

}  // namespace nexar
