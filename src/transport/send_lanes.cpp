#include "transport/send_lanes.h"

#include <algorithm>
#include <cstring>

namespace nexar {
namespace {

// The unwritten rest of a cancelled send, and the stand-in bytes ngtcp2
// copies for payloads sealed from the caller's memory (it stays in cache).
const uint8_t kZeros[64 * 1024] = {};

}  // namespace

std::unique_ptr<SendItem> SendItem::framing(OutgoingMessage msg) {
  auto item = std::make_unique<SendItem>();
  wire::encode_frame_header(msg.header, item->header);
  item->owned = std::move(msg.owned);
  item->payload = msg.payload;
  item->payload_len = msg.header.length;
  if (msg.header.kind == wire::FrameKind::Relay) {
    // The relay prefix travels with the header; the payload is the chunk.
    memcpy(item->header + wire::kFrameHeaderSize, msg.prefix, wire::kRelayPrefixSize);
    item->header_len = wire::kFrameHeaderSize + wire::kRelayPrefixSize;
    item->payload_len = msg.header.length - wire::kRelayPrefixSize;
  }
  item->listener = msg.listener;
  return item;
}

SendLanes::SendLanes() {
  for (size_t i = 0; i < kLanes; ++i) {
    const wire::Lane lane = i == kControl       ? wire::Lane::Control
                            : i < kRpcRequest   ? wire::Lane::Data
                            : i == kRpcRequest  ? wire::Lane::RpcRequest
                            : i == kRpcResponse ? wire::Lane::RpcResponse
                                                : wire::Lane::Relay;
    lanes_[i].lane_byte = static_cast<uint8_t>(lane);
  }
}

SendLane &SendLanes::lane_for(bool control, wire::FrameKind kind, uint64_t key) {
  return lanes_[control                                ? kControl
                : kind == wire::FrameKind::RpcRequest  ? kRpcRequest
                : kind == wire::FrameKind::RpcResponse ? kRpcResponse
                : kind == wire::FrameKind::Relay       ? kRelay + key % kRelayStreams
                                                       : kData + key % kDataStreams];
}

SendItem *SendLanes::enqueue(SendLane &lane, std::unique_ptr<SendItem> item) {
  if (item->stand_in) ++stand_in_items_;
  lane.offset += item->total();
  item->end_offset = lane.offset;
  queued_bytes_ += item->total();
  SendItem *raw = item.get();
  lane.items.push_back(std::move(item));
  return raw;
}

bool SendLanes::open(ngtcp2_conn *conn, uint64_t *streams_opened) {
  auto open = [&](SendLane &lane) {
    if (lane.id >= 0) return true;
    int64_t id;
    if (ngtcp2_conn_open_uni_stream(conn, &id, nullptr) != 0) return false;
    lane.id = id;
    ++*streams_opened;
    // The lane byte goes out first, ahead of anything already queued.
    auto item = std::make_unique<SendItem>();
    item->header[0] = lane.lane_byte;
    item->header_len = 1;
    for (auto &queued : lane.items)
      queued->end_offset += 1;
    lane.offset += 1;
    // Counted like any queued byte: advance() takes it off when written, and
    // an uncounted byte per stream wrapped the count below zero, which
    // turned every copied send into one that waits for its acknowledgement.
    queued_bytes_ += 1;
    item->end_offset = 1;
    lane.items.push_front(std::move(item));
    return true;
  };
  bool all = true;
  for (size_t i = 0; i < kLanes && all; ++i) {
    // Relay lanes open with their first frame: full meshes never use them.
    if (i >= kRelay && lanes_[i].items.empty()) continue;
    all = open(lanes_[i]);
  }
  return all;
}

bool SendLanes::cancel(SendItem *item, SendListener *replacement) {
  for (SendLane &lane : lanes_) {
    for (size_t i = 0; i < lane.items.size(); ++i) {
      if (lane.items[i].get() != item) continue;
      if (item->written == 0 && i >= lane.next) {
        // Never started: drop it and shift the later offsets back.
        const uint64_t n = item->total();
        for (size_t j = i + 1; j < lane.items.size(); ++j)
          lane.items[j]->end_offset -= n;
        lane.offset -= n;
        queued_bytes_ -= n;
        forget_item(*item);
        lane.items.erase(lane.items.begin() + static_cast<long>(i));
        return false;
      }
      // What was written is still sealed from the caller's memory until
      // acknowledged, as ngtcp2 still read it until then before.
      if (item->stand_in) item->stand_in_end = std::min(item->stand_in_end, item->written);
      item->zero_rest = true;
      item->listener = replacement;
      return true;
    }
  }
  return false;
}

SendLane *SendLanes::pick() {
  // Control first (barriers and heartbeats never wait behind bulk data), then
  // the data and RPC lanes round robin (a large RPC payload shares the link
  // with bulk data; neither starves the other).
  if (lanes_[kControl].writable()) return &lanes_[kControl];
  constexpr size_t kShared = kLanes - kData;
  for (size_t k = 0; k < kShared; ++k) {
    SendLane &d = lanes_[kData + (rr_ + k) % kShared];
    if (d.writable()) {
      rr_ = (rr_ + k + 1) % kShared;
      return &d;
    }
  }
  return nullptr;
}

size_t SendLanes::build_vecs(const SendLane &lane, ngtcp2_vec *vecs, size_t max) const {
  size_t n = 0;
  for (size_t i = lane.next; i < lane.items.size() && n < max; ++i) {
    SendItem &it = *lane.items[i];
    uint64_t pos = it.written;
    if (pos < it.header_len) {
      vecs[n++] = {it.header + pos, static_cast<size_t>(it.header_len - pos)};
      pos = it.header_len;
    }
    while (pos < it.total() && n < max) {
      const uint64_t off = pos - it.header_len;
      const uint64_t left = it.payload_len - off;
      if (it.stand_in && pos < it.stand_in_end) {
        // The sealer takes the real bytes from it.payload (locate()).
        size_t k = static_cast<size_t>(std::min<uint64_t>(it.stand_in_end - pos, sizeof kZeros));
        vecs[n++] = {const_cast<uint8_t *>(kZeros), k};
        pos += k;
      } else if (it.zero_rest) {
        size_t k = static_cast<size_t>(std::min<uint64_t>(left, sizeof kZeros));
        vecs[n++] = {const_cast<uint8_t *>(kZeros), k};
        pos += k;
      } else {
        // ngtcp2_vec lengths are size_t; one vec per item keeps the count low.
        vecs[n++] = {const_cast<uint8_t *>(it.payload + off), static_cast<size_t>(left)};
        pos = it.total();
      }
    }
  }
  return n;
}

void SendLanes::advance(SendLane &lane, size_t n) {
  while (n > 0 && lane.next < lane.items.size()) {
    SendItem &it = *lane.items[lane.next];
    const uint64_t left = it.total() - it.written;
    const uint64_t take = std::min<uint64_t>(left, n);
    it.written += take;
    n -= static_cast<size_t>(take);
    queued_bytes_ -= take;
    if (it.written == it.total()) ++lane.next;
  }
}

void SendLanes::on_acked(int64_t sid, uint64_t offset, uint64_t len) {
  SendLane *lane = by_id(sid);
  if (!lane) return;
  const uint64_t acked = offset + len;
  while (!lane->items.empty() && lane->items.front()->end_offset <= acked &&
         lane->items.front()->written == lane->items.front()->total()) {
    std::unique_ptr<SendItem> it = std::move(lane->items.front());
    lane->items.pop_front();
    forget_item(*it);
    if (lane->next > 0) --lane->next;
    if (it->listener) it->listener->on_send_done(Status());
  }
}

void SendLanes::unblock(int64_t sid) {
  if (SendLane *lane = by_id(sid)) lane->blocked = false;
}

void SendLanes::fail_all(const Status &why) {
  for (SendLane &lane : lanes_)
    finish_items(lane, why);
}

bool SendLanes::locate(int64_t sid, uint64_t offset, size_t len, const uint8_t **from,
                       size_t *n) const {
  const SendLane *lane = by_id(sid);
  if (!lane) return false;
  // The first item that ends past offset holds it (items are in stream order).
  auto found = std::upper_bound(
      lane->items.begin(), lane->items.end(), offset,
      [](uint64_t off, const std::unique_ptr<SendItem> &it) { return off < it->end_offset; });
  if (found == lane->items.end()) return false;
  const SendItem &it = **found;
  const uint64_t start = it.end_offset - it.total();
  if (offset < start) return false;  // acknowledged and gone
  const uint64_t at = offset - start;
  uint64_t until = it.total();  // the end of the run at `at`
  *from = nullptr;
  if (at < it.header_len) {
    until = it.header_len;
  } else if (it.stand_in && at < it.stand_in_end) {
    until = it.stand_in_end;
    *from = it.payload + (at - it.header_len);
  }
  *n = static_cast<size_t>(std::min<uint64_t>(len, until - at));
  return true;
}

bool SendLanes::has_unacked() const {
  for (const SendLane &lane : lanes_)
    if (!lane.items.empty()) return true;
  return false;
}

SendLane *SendLanes::by_id(int64_t sid) {
  for (SendLane &lane : lanes_)
    if (lane.id == sid) return &lane;
  return nullptr;
}

const SendLane *SendLanes::by_id(int64_t sid) const {
  for (const SendLane &lane : lanes_)
    if (lane.id == sid) return &lane;
  return nullptr;
}

void SendLanes::finish_items(SendLane &lane, const Status &s) {
  auto items = std::move(lane.items);
  lane.items.clear();
  lane.next = 0;
  for (auto &it : items) {
    forget_item(*it);
    if (it->listener) it->listener->on_send_done(s);
  }
}

void SendLanes::forget_item(const SendItem &it) {
  if (it.stand_in) --stand_in_items_;
}

}  // namespace nexar
