#include "transport/shm_channel.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/copy.h"
#include "core/log.h"
#include "transport/shm_socket.h"

namespace nexar {
namespace {
constexpr uint8_t kDoorbell = 'D';
constexpr uint8_t kGoodbye = 'G';
constexpr uint8_t kCutOff = 'X';  // the sender declared this rank failed
}  // namespace

ShmChannel::ShmChannel(ShmChannelHandler &handler, uint32_t peer_rank, UniqueFd sock,
                       const OwnShmSegment &own, uint64_t own_slot, PeerShmSegment peer)
    : handler_(handler),
      peer_rank_(peer_rank),
      sock_(std::move(sock)),
      out_ring_(own.ring(own_slot)),
      out_mask_(own.geometry().ring_bytes - 1),
      out_tail_(own.tail(own_slot)),
      out_tail_local_(shm_load(own.tail(own_slot))),
      in_head_(own.head(own_slot)),
      in_head_local_(shm_load(own.head(own_slot))),
      own_header_(own.header()),
      own_slot_(own_slot),
      peer_(std::move(peer)),
      in_mask_(peer_.ring_bytes() - 1),
      own_heap_(own.heap()),
      own_heap_bytes_(own.heap_bytes()),
      refs_done_(own.refs_done(own_slot)),
      refs_done_local_(shm_load(own.refs_done(own_slot))) {}

ShmChannel::~ShmChannel() {
  for (auto *list : {&queue_, &refs_waiting_})
    for (ShmSendItem &item : *list)
      if (item.listener)
        std::exchange(item.listener, nullptr)
            ->on_send_done(error(NEXAR_ERR_CLOSED, "the same-host channel closed"));
}

uint64_t ShmChannel::ring_free() const {
  // The peer's head may only trail this side's tail by at most the ring.
  const uint64_t head = shm_load(peer_.head());
  const uint64_t used = out_tail_local_ - head;
  return used > out_mask_ + 1 ? 0 : out_mask_ + 1 - used;
}

void ShmChannel::write_ring(const uint8_t *src, uint64_t n) {
  const uint64_t at = out_tail_local_ & out_mask_;
  const uint64_t first = std::min(n, out_mask_ + 1 - at);
  if (src) {
    copy_bytes(out_ring_ + at, src, first);
    copy_bytes(out_ring_, src + first, n - first);
  } else {
    memset(out_ring_ + at, 0, first);
    memset(out_ring_, 0, n - first);
  }
  out_tail_local_ += n;
}

void ShmChannel::ring_peer() {
  // Dekker with the peer's arming: our publish, then its sleep word (both
  // sequentially consistent: shm_store, shm_load).
  const uint64_t seq = shm_load(&peer_.header()->sleep_seq);
  if ((seq & 1) == 0 || seq == last_rung_seq_) return;
  last_rung_seq_ = seq;
  ++doorbells_rung_;
  const ssize_t n = ::send(sock_.get(), &kDoorbell, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
  (void)n;  // a full socket already holds a doorbell; a dead peer shows as a hang-up
}

bool ShmChannel::send_now(const wire::FrameHeader &h, const void *payload) {
  if (closed_ || !queue_.empty() || ring_free() < wire::kFrameHeaderSize + h.length) return false;
  uint8_t hdr[wire::kFrameHeaderSize];
  wire::encode_frame_header(h, hdr);
  write_ring(hdr, sizeof hdr);
  if (h.length) write_ring(static_cast<const uint8_t *>(payload), h.length);
  shm_store(out_tail_, out_tail_local_);
  bytes_sent_ += h.length;
  ++messages_sent_;
  ring_peer();
  return true;
}

ShmSendItem *ShmChannel::send(OutgoingMessage msg) {
  if (closed_) {
    if (msg.listener)
      msg.listener->on_send_done(error(NEXAR_ERR_CLOSED, "the same-host channel is closed"));
    return nullptr;
  }
  ShmSendItem &item = queue_.emplace_back();
  wire::encode_frame_header(msg.header, item.header);
  item.payload = msg.payload;
  item.payload_len = msg.header.length;
  item.owned = std::move(msg.owned);
  item.listener = msg.listener;
  const uint8_t *p = item.payload;
  if (!item.owned && p && item.payload_len >= kShmRefMinBytes && p >= own_heap_ &&
      p < own_heap_ + own_heap_bytes_ &&
      item.payload_len <= static_cast<uint64_t>(own_heap_ + own_heap_bytes_ - p)) {
    // The peer reads it out of this rank's heap: one copy instead of two.
    const uint64_t ref[2] = {static_cast<uint64_t>(p - own_heap_), item.payload_len};
    item.by_ref = true;
    item.header[2] = kShmRefFlag;
    memcpy(item.header + wire::kFrameHeaderSize, ref, sizeof ref);
  }
  queued_bytes_ += item.total();
  ShmSendItem *handle = &item;
  uint64_t budget = UINT64_MAX;
  if (queue_.size() == 1 && pump_out(&budget)) ring_peer();
  // Finished at once (the listener was told, the item erased): nothing to
  // cancel. Otherwise it is still the newest in the queue.
  return !queue_.empty() && &queue_.back() == handle ? handle : nullptr;
}

void ShmChannel::finish_item(std::list<ShmSendItem>::iterator it, const Status &s) {
  queued_bytes_ -= it->total() - it->written;
  SendListener *l = std::exchange(it->listener, nullptr);
  queue_.erase(it);
  if (l) l->on_send_done(s);
}

void ShmChannel::cancel(ShmSendItem *item) {
  // Written by reference: the peer may still read the buffer, which it only
  // reads; the send is forgotten when the peer's count passes it.
  for (ShmSendItem &waiting : refs_waiting_)
    if (&waiting == item) {
      waiting.listener = nullptr;
      return;
    }
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    if (&*it != item) continue;
    it->listener = nullptr;
    it->owned = PooledBuf();
    if (it->written == 0) {
      finish_item(it, Status());
    } else {
      // The peer is reading this frame: it gets its length, zeros from here.
      it->zero_rest = true;
      it->payload = nullptr;
    }
    return;
  }
}

bool ShmChannel::pump_out(uint64_t *budget) {
  bool moved = false;
  while (!queue_.empty() && *budget > 0) {
    ShmSendItem &item = queue_.front();
    const uint64_t room = std::min(ring_free(), *budget);
    if (room == 0) break;
    uint64_t n = 0;
    if (item.by_ref) {
      // Header and reference go in together, so the reader finds both.
      if (room < item.total()) break;
      write_ring(item.header, item.total());
      n = item.total();
      bytes_sent_ += item.payload_len;
    } else if (item.written < wire::kFrameHeaderSize) {
      // The header goes in whole, so the reader never waits on half of one.
      if (room < wire::kFrameHeaderSize) break;
      write_ring(item.header, wire::kFrameHeaderSize);
      n = wire::kFrameHeaderSize;
    } else {
      const uint64_t off = item.written - wire::kFrameHeaderSize;
      n = std::min(room, item.payload_len - off);
      write_ring(item.zero_rest ? nullptr : item.payload + off, n);
      bytes_sent_ += n;
    }
    item.written += n;
    queued_bytes_ -= n;
    *budget -= std::min(*budget, n);
    moved = true;
    if (item.written == item.total()) {
      ++messages_sent_;
      shm_store(out_tail_, out_tail_local_);
      if (item.by_ref) {
        item.ref_index = ++refs_sent_;
        refs_waiting_.splice(refs_waiting_.end(), queue_, queue_.begin());
      } else {
        finish_item(queue_.begin(), Status());
      }
    }
  }
  if (moved) shm_store(out_tail_, out_tail_local_);
  return moved;
}

bool ShmChannel::peer_available(uint64_t *n) {
  const uint64_t tail = shm_load(peer_.tail());
  const uint64_t avail = tail - in_head_local_;
  if (avail > in_mask_ + 1) {
    fail(error(NEXAR_ERR_PROTOCOL,
               format("rank %u's same-host ring is corrupt (it claims %llu unread bytes in a "
                      "ring of %llu)",
                      peer_rank_, static_cast<unsigned long long>(avail),
                      static_cast<unsigned long long>(in_mask_ + 1)),
               static_cast<int32_t>(peer_rank_)),
         false);
    return false;
  }
  *n = avail;
  return true;
}

void ShmChannel::read_ring(uint8_t *dst, uint64_t n) {
  const uint64_t at = in_head_local_ & in_mask_;
  const uint64_t first = std::min(n, in_mask_ + 1 - at);
  copy_bytes(dst, peer_.ring() + at, first);
  copy_bytes(dst + first, peer_.ring(), n - first);
  in_head_local_ += n;
}

bool ShmChannel::pump_in(uint64_t *budget) {
  bool moved = false;
  uint64_t avail = 0;
  while (!closed_ && *budget > 0) {
    if (in_payload_ && in_ref_) {
      moved |= copy_ref(budget);
      continue;
    }
    if (!peer_available(&avail) || avail == 0) break;
    if (!in_payload_) {
      const uint64_t n = std::min<uint64_t>(avail, wire::kFrameHeaderSize - in_header_have_);
      read_ring(in_header_ + in_header_have_, n);
      in_header_have_ += n;
      moved = true;
      if (in_header_have_ < wire::kFrameHeaderSize) continue;
      in_header_have_ = 0;
      if (!begin_frame(&avail)) return moved;
      if (in_left_ > 0 || in_ref_) continue;  // avail counted the header: look again
    }
    if (in_left_ > 0) {
      // Straight from the ring into the sink: one copy.
      const uint64_t at = in_head_local_ & in_mask_;
      const uint64_t n = std::min({avail, in_left_, in_mask_ + 1 - at, *budget});
      if (n == 0) break;
      if (in_sink_) in_sink_->write(peer_.ring() + at, static_cast<size_t>(n));
      in_head_local_ += n;
      in_left_ -= n;
      bytes_received_ += n;
      *budget -= std::min(*budget, n);
      moved = true;
    }
    if (in_left_ == 0) {
      in_payload_ = false;
      if (MessageSink *sink = std::exchange(in_sink_, nullptr)) sink->finish(true);
    }
  }
  if (moved && !closed_) shm_store(in_head_, in_head_local_);
  return moved;
}

bool ShmChannel::begin_frame(uint64_t *avail) {
  const bool by_ref = in_header_[2] == kShmRefFlag;
  if (by_ref) in_header_[2] = 0;
  wire::FrameHeader h;
  Status s = wire::decode_frame_header(in_header_, &h);
  if (s.ok() && (h.kind == wire::FrameKind::Control || h.kind == wire::FrameKind::Relay))
    s = error(NEXAR_ERR_PROTOCOL, "a control or relay frame, which travel on QUIC only");
  uint64_t ref[2] = {0, 0};
  if (s.ok() && by_ref) {
    // The writer publishes a header by reference and its reference together.
    if (!peer_available(avail)) return false;
    if (*avail < kShmRefBytes) {
      s = error(NEXAR_ERR_PROTOCOL, "a message by reference without its reference");
    } else {
      read_ring(reinterpret_cast<uint8_t *>(ref), kShmRefBytes);
      if (ref[1] != h.length || ref[0] > peer_.heap_bytes() ||
          h.length > peer_.heap_bytes() - ref[0])
        s = error(
            NEXAR_ERR_PROTOCOL,
            format("a reference to %llu bytes at %llu, outside its heap of %llu",
                   static_cast<unsigned long long>(ref[1]), static_cast<unsigned long long>(ref[0]),
                   static_cast<unsigned long long>(peer_.heap_bytes())));
    }
  }
  if (!s) {
    fail(error(NEXAR_ERR_PROTOCOL,
               format("rank %u sent a malformed frame on its same-host ring: %s", peer_rank_,
                      s.message.c_str()),
               static_cast<int32_t>(peer_rank_)),
         false);
    return false;
  }
  in_sink_ = handler_.on_shm_frame(this, h);
  if (closed_) return false;
  in_left_ = h.length;
  in_payload_ = true;
  in_ref_ = by_ref ? peer_.heap() + ref[0] : nullptr;
  ++messages_received_;
  return true;
}

bool ShmChannel::copy_ref(uint64_t *budget) {
  const uint64_t n = std::min(in_left_, *budget);
  if (in_sink_ && n) in_sink_->write(in_ref_, static_cast<size_t>(n));
  in_ref_ += n;
  in_left_ -= n;
  bytes_received_ += n;
  *budget -= n;
  if (in_left_ == 0) {
    in_payload_ = false;
    in_ref_ = nullptr;
    if (MessageSink *sink = std::exchange(in_sink_, nullptr)) sink->finish(true);
    // Read: the peer may reuse its buffer.
    shm_store(refs_done_, ++refs_done_local_);
  }
  return true;
}

bool ShmChannel::collect_refs() {
  if (refs_waiting_.empty()) return false;
  const uint64_t done = shm_load(peer_.refs_done());
  if (done > refs_sent_) {
    fail(error(NEXAR_ERR_PROTOCOL,
               format("rank %u claims to have read %llu messages by reference of %llu sent",
                      peer_rank_, static_cast<unsigned long long>(done),
                      static_cast<unsigned long long>(refs_sent_)),
               static_cast<int32_t>(peer_rank_)),
         false);
    return false;
  }
  bool any = false;
  while (!refs_waiting_.empty() && refs_waiting_.front().ref_index <= done) {
    SendListener *l = std::exchange(refs_waiting_.front().listener, nullptr);
    bytes_by_reference_ += refs_waiting_.front().payload_len;
    refs_waiting_.pop_front();
    any = true;
    if (l) l->on_send_done(Status());
  }
  return any;
}

bool ShmChannel::progress(uint64_t budget) {
  if (closed_) return false;
  bool moved = pump_in(&budget);
  if (closed_) return moved;
  moved |= collect_refs();
  if (closed_) return moved;
  moved |= pump_out(&budget);
  if (moved) ring_peer();
  return moved;
}

bool ShmChannel::has_work() const {
  if (closed_) return false;
  if (in_payload_ && in_ref_) return true;
  if (!refs_waiting_.empty() && shm_load(peer_.refs_done()) >= refs_waiting_.front().ref_index)
    return true;
  const uint64_t tail = shm_load(peer_.tail());
  if (tail != in_head_local_) return true;
  if (queue_.empty()) return false;
  // As pump_out: a header goes in whole.
  const uint64_t need =
      queue_.front().written < wire::kFrameHeaderSize ? wire::kFrameHeaderSize : 1;
  return ring_free() >= need;
}

void ShmChannel::on_socket_ready() {
  // Doorbells are one-byte packets with no descriptors: plain recv, no
  // allocation, on this path of every wake-up.
  for (int i = 0; i < 64 && !closed_; ++i) {
    uint8_t b[16];
    ssize_t n;
    do {
      n = ::recv(sock_.get(), b, sizeof b, MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    const ShmRecv r = n > 0                                     ? ShmRecv::Packet
                      : n == 0 || errno == ECONNRESET           ? ShmRecv::HungUp
                      : errno == EAGAIN || errno == EWOULDBLOCK ? ShmRecv::WouldBlock
                                                                : ShmRecv::Error;
    const std::string why = r == ShmRecv::Error ? format("recv: %s", strerror(errno)) : "";
    switch (r) {
      case ShmRecv::WouldBlock:
        return;
      case ShmRecv::Packet:
        if (n == 1 && b[0] == kGoodbye) {
          // What the peer wrote before leaving is still in its segment.
          uint64_t budget = UINT64_MAX;
          pump_in(&budget);
          fail(error(NEXAR_ERR_PEER_FAILED, format("rank %u left", peer_rank_),
                     static_cast<int32_t>(peer_rank_)),
               true);
          return;
        }
        if (n == 1 && b[0] == kCutOff) {
          fail(error(NEXAR_ERR_EXCLUDED,
                     format("rank %u cut its same-host channel off: the other ranks declared "
                            "this rank failed",
                            peer_rank_),
                     static_cast<int32_t>(peer_rank_)),
               true);
          return;
        }
        break;  // a doorbell: the loop's pass looks at the rings
      case ShmRecv::HungUp: {
        uint64_t budget = UINT64_MAX;
        pump_in(&budget);
        fail(error(NEXAR_ERR_PEER_FAILED,
                   format("rank %u died: its same-host channel hung up without a goodbye",
                          peer_rank_),
                   static_cast<int32_t>(peer_rank_)),
             false);
        return;
      }
      case ShmRecv::Error:
        fail(error(NEXAR_ERR_PEER_FAILED,
                   format("rank %u's same-host channel failed: %s", peer_rank_, why.c_str()),
                   static_cast<int32_t>(peer_rank_)),
             false);
        return;
    }
  }
}

void ShmChannel::on_peer_process_ended() {
  on_socket_ready();
  if (closed_) return;
  uint64_t budget = UINT64_MAX;
  pump_in(&budget);
  fail(error(NEXAR_ERR_PEER_FAILED, format("rank %u died: its process ended", peer_rank_),
             static_cast<int32_t>(peer_rank_)),
       false);
}

void ShmChannel::fail_refs(const Status &s) {
  while (!refs_waiting_.empty()) {
    SendListener *l = std::exchange(refs_waiting_.front().listener, nullptr);
    bytes_by_reference_ += refs_waiting_.front().payload_len;
    refs_waiting_.pop_front();
    if (l) l->on_send_done(s);
  }
}

void ShmChannel::leave(const Status &s, bool cut_off) {
  if (closed_) return;
  const ssize_t n =
      ::send(sock_.get(), cut_off ? &kCutOff : &kGoodbye, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
  (void)n;  // a peer that is gone does not need the goodbye
  closed_ = true;
  while (!queue_.empty())
    finish_item(queue_.begin(), s);
  fail_refs(s);
  if (MessageSink *sink = std::exchange(in_sink_, nullptr)) sink->finish(false);
  sock_ = UniqueFd();
}

void ShmChannel::fail(const Status &s, bool left) {
  if (closed_) return;
  closed_ = true;
  while (!queue_.empty())
    finish_item(queue_.begin(), s);
  fail_refs(s);
  if (MessageSink *sink = std::exchange(in_sink_, nullptr)) sink->finish(false);
  handler_.on_shm_closed(this, s, left);
}

}  // namespace nexar
