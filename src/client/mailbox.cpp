#include "client/mailbox.h"

#include <algorithm>
#include <cstring>

#include "core/copy.h"
#include "core/log.h"
#include "core/reduce.h"

namespace nexar {
namespace {
constexpr uint64_t kSmallMessage = 64 << 10;  // buffered in one exact-size piece
constexpr uint64_t kChunk = 8ull << 20;       // larger ones in pooled chunks
}  // namespace

// ---- Incoming ------------------------------------------------------------------

Incoming::Incoming(Mailbox *box, MsgKey key, uint64_t length, uint32_t check, QuicConnection *conn,
                   int64_t stream_id)
    : box_(box), key_(key), length_(length), check_(check), conn_(conn), stream_id_(stream_id) {}

size_t Incoming::write(const uint8_t *data, size_t len) {
  if (discard_) {
    received_ += len;
    return len;
  }
  if (waiter_) {
    waiter_->take(received_, data, len);
    received_ += len;
    return len;
  }
  // Unexpected: buffer it. Small messages take one exact-size piece; large
  // ones pooled chunks, so no single allocation of a whole large message.
  size_t left = len;
  while (left > 0) {
    if (chunks_.empty() || chunks_.back().size() == chunks_.back().capacity()) {
      const uint64_t want =
          length_ <= kSmallMessage ? length_ : std::min(kChunk, length_ - received_);
      PooledBuf b = length_ <= kSmallMessage ? PooledBuf::unpooled(static_cast<size_t>(want))
                                             : box_->pool().checkout(static_cast<size_t>(want));
      b.resize(0);
      chunks_.push_back(std::move(b));
    }
    PooledBuf &b = chunks_.back();
    size_t room = std::min<size_t>(left, b.capacity() - b.size());
    const size_t old = b.size();
    b.resize(old + room);
    memcpy(b.data() + old, data, room);
    data += room;
    left -= room;
    received_ += room;
  }
  buffered_ += len;
  box_->buffered_total_ += len;
  uint64_t &peer_bytes = box_->unexpected_per_peer_[key_.peer];
  peer_bytes += len;
  if (peer_bytes <= kUnexpectedBudget) return len;
  withheld_ += len;
  return 0;
}

uint8_t *Incoming::place(size_t len) {
  // Only a bound receive that copies (one combining reads the bytes), and
  // only within the message; bind() discards a message whose length is not
  // the buffer's, so within the message is within the buffer.
  if (discard_ || waiter_ == nullptr || waiter_->combine_.own != nullptr) return nullptr;
  if (received_ + len > length_) return nullptr;
  return waiter_->buf_ + received_;
}

bool Incoming::placed(const uint8_t *to, size_t len, size_t *credit) {
  // Abandoned since (discarding): dropped, as write() would drop them.
  if (!discard_ && place(len) != to) return false;
  received_ += len;
  *credit = len;
  return true;
}

void Incoming::release_buffer() {
  box_->buffered_total_ -= buffered_;
  box_->unexpected_per_peer_[key_.peer] -= buffered_;
  buffered_ = 0;
  chunks_.clear();
  if (withheld_ > 0 && conn_ && !conn_->closed())
    conn_->release_credit(stream_id_, static_cast<size_t>(withheld_));
  withheld_ = 0;
}

void Incoming::bind(RecvWait *w) {
  waiter_ = w;
  w->msg_ = this;
  if (length_ != w->size_ || check_ != w->check_) {
    discard_ = true;  // the message is consumed; the receive reports the mismatch
  } else {
    uint64_t off = 0;
    for (auto &c : chunks_) {
      w->take(off, c.data(), c.size());
      off += c.size();
    }
  }
  release_buffer();
}

void Incoming::finish(bool ok) {
  complete_ = true;
  failed_ = !ok;

  if (!waiter_) {
    if (discard_) box_->destroy_message(this);  // abandoned mid-way: nobody wants it
    return;                                     // otherwise it waits for its receive
  }
  RecvWait *w = std::exchange(waiter_, nullptr);
  w->msg_ = nullptr;
  Status s;
  if (!ok)
    s = error(NEXAR_ERR_PEER_FAILED,
              format("%s: connection to rank %d lost while the message was arriving", w->what_,
                     w->user_rank_),
              w->user_rank_);
  else if (check_ != w->check_)
    s = error(NEXAR_ERR_MISMATCH,
              format("%s: rank %d issued a different collective (operation, dtype, count or "
                     "root differ)",
                     w->what_, w->user_rank_),
              w->user_rank_);
  else if (length_ != w->size_)
    s = error(NEXAR_ERR_SIZE_MISMATCH,
              format("%s: message from rank %d has %llu bytes, the receive buffer %llu", w->what_,
                     w->user_rank_, static_cast<unsigned long long>(length_),
                     static_cast<unsigned long long>(w->size_)),
              w->user_rank_);
  box_->destroy_message(this);
  w->finish(std::move(s));
}

// ---- RecvWait ------------------------------------------------------------------

RecvWait::RecvWait(Mailbox *box, OpContext *op, uint64_t deadline_ns, const PostedRecv &r)
    : Wait(op->loop(), op, deadline_ns, r.user_rank),
      box_(box),
      key_(r.key),
      buf_(static_cast<uint8_t *>(r.buf)),
      size_(r.size),
      check_(r.check),
      user_rank_(r.user_rank),
      what_(r.what),
      combine_(r.combine) {}

void RecvWait::combine(uint64_t off, const uint8_t *incoming, size_t elems) {
  const CombineOnArrival &c = combine_;
  if (c.own_first)
    reduce_out(buf_ + off, c.own + off, incoming, elems, c.dtype, c.op);
  else
    reduce_out(buf_ + off, incoming, c.own + off, elems, c.dtype, c.op);
}

void RecvWait::take(uint64_t off, const uint8_t *data, size_t len) {
  if (!combine_.own) {
    copy_bytes(buf_ + off, data, len);
    return;
  }
  // Bytes arrive in order, so only the element at a delivery's edge can be
  // split; it is completed from partial_ (off is element-aligned otherwise).
  const size_t es = combine_.esize;
  if (partial_len_ > 0) {
    const size_t k = std::min(es - partial_len_, len);
    memcpy(partial_ + partial_len_, data, k);
    partial_len_ += k;
    data += k;
    len -= k;
    off += k;
    if (partial_len_ < es) return;
    combine(off - es, partial_, 1);
    partial_len_ = 0;
  }
  const size_t whole = len / es * es;
  if (whole) combine(off, data, whole / es);
  partial_len_ = len - whole;
  memcpy(partial_, data + whole, partial_len_);
}

bool RecvWait::await_ready() {
  if (const Status *dead = box_->liveness_.failure(key_.peer)) {
    Mailbox::Queue *q = nullptr;
    auto it = box_->queues_.find(key_);
    if (it != box_->queues_.end()) q = &it->second;
    // Complete messages that arrived before the failure still count.
    if (!q || q->unexpected.empty() || !q->unexpected.front()->complete_ ||
        q->unexpected.front()->failed_) {
      finish(error(dead->code, format("%s: %s", what_, dead->message.c_str()), user_rank_));
      return true;
    }
  }
  Mailbox::Queue &q = box_->queue(key_);
  if (!q.unexpected.empty()) {
    Incoming *m = q.unexpected.front();
    q.unexpected.pop_front();
    box_->erase_if_idle(key_);
    if (m->failed_) {
      box_->destroy_message(m);
      finish(error(
          NEXAR_ERR_PEER_FAILED,
          format("%s: connection to rank %d was lost while the message arrived", what_, user_rank_),
          user_rank_));
      return true;
    }
    m->bind(this);
    if (m->complete_) {
      m->finish(true);  // reports success or the size mismatch to us
      return true;
    }
    return false;  // the rest streams straight into our buffer
  }
  q.posted.push_back(this);
  posted_ = true;
  return false;
}

void RecvWait::detach() {
  if (posted_) {
    auto it = box_->queues_.find(key_);
    if (it != box_->queues_.end()) {
      auto &p = it->second.posted;
      p.erase(std::remove(p.begin(), p.end(), this), p.end());
      box_->erase_if_idle(key_);
    }
    posted_ = false;
  }
  if (msg_) {
    // Abandoned while the message streams in: consume and drop the rest.
    msg_->waiter_ = nullptr;
    msg_->discard_ = true;
    msg_ = nullptr;
  }
}

std::string RecvWait::timeout_message() const {
  return format("%s: nothing arrived from rank %d before the deadline", what_, user_rank_);
}

// ---- Mailbox -------------------------------------------------------------------

Mailbox::~Mailbox() {
  for (auto &[k, q] : queues_)
    for (RecvWait *w : q.posted)
      w->posted_ = false;
  queues_.clear();
  live_.clear();
}

MessageSink *Mailbox::on_message(const MsgKey &key, uint64_t length, uint32_t check,
                                 QuicConnection *conn, int64_t stream_id) {
  if (key.kind == static_cast<uint8_t>(wire::FrameKind::Collective)) {
    auto t = trackers_.find(key.comm_id);
    if (t != trackers_.end() &&
        t->second->on_frame(key.tag >> 24, check, key.peer) == CollectiveTracker::Frame::Drop) {
      auto dropped = std::make_unique<Incoming>(this, key, length, check, conn, stream_id);
      dropped->discard_ = true;
      Incoming *raw = dropped.get();
      live_.emplace(raw, std::move(dropped));
      return raw;
    }
  }
  auto owned = std::make_unique<Incoming>(this, key, length, check, conn, stream_id);
  Incoming *m = owned.get();
  live_.emplace(m, std::move(owned));
  Queue &q = queue(key);
  if (!q.posted.empty()) {
    RecvWait *w = q.posted.front();
    q.posted.pop_front();
    w->posted_ = false;
    erase_if_idle(key);
    m->bind(w);  // finish() comes from the stream once every byte is in
  } else {
    q.unexpected.push_back(m);
  }
  return m;
}

void Mailbox::deliver_local(const MsgKey &key, const void *data, uint64_t length, uint32_t check) {
  MessageSink *m = on_message(key, length, check, nullptr, -1);
  // Local bytes need no credit; the budget bookkeeping is the same as remote.
  const uint8_t *p = static_cast<const uint8_t *>(data);
  uint64_t left = length;
  while (left > 0) {
    size_t k = static_cast<size_t>(std::min<uint64_t>(left, 1ull << 30));
    m->write(p, k);
    p += k;
    left -= k;
  }
  m->finish(true);
}

void Mailbox::untrack(uint64_t comm_id, const CollectiveTracker *t) {
  auto it = trackers_.find(comm_id);
  if (it != trackers_.end() && it->second == t) trackers_.erase(it);
}

void Mailbox::begin_collective(uint64_t comm_id, uint64_t seq) {
  auto t = trackers_.find(comm_id);
  if (t == trackers_.end()) return;
  CollectiveTracker *tracker = t->second;
  for (auto &[k, q] : queues_) {
    if (k.kind != static_cast<uint8_t>(wire::FrameKind::Collective) || k.comm_id != comm_id ||
        (k.tag >> 24) != seq)
      continue;
    for (Incoming *m : q.unexpected)
      if (tracker->on_frame(seq, m->check_, k.peer) == CollectiveTracker::Frame::Mismatched)
        return;  // reported once; the collective may have ended
  }
}

void Mailbox::end_collective(uint64_t comm_id, uint64_t seq) {
  std::vector<MsgKey> idle;
  for (auto &[k, q] : queues_) {
    if (k.kind != static_cast<uint8_t>(wire::FrameKind::Collective) || k.comm_id != comm_id ||
        (k.tag >> 24) != seq)
      continue;
    for (Incoming *m : q.unexpected) {
      if (m->complete_) {
        destroy_message(m);
      } else {
        // Still arriving: its stream keeps writing into it; drop it at the end.
        m->release_buffer();
        m->discard_ = true;
      }
    }
    q.unexpected.clear();
    if (q.posted.empty()) idle.push_back(k);
  }
  for (const MsgKey &k : idle)
    queues_.erase(k);
}

int32_t Mailbox::waiting_on(uint64_t comm_id, uint64_t seq) const {
  int32_t lowest = -1;
  for (const auto &[k, q] : queues_)
    if (k.kind == static_cast<uint8_t>(wire::FrameKind::Collective) && k.comm_id == comm_id &&
        (k.tag >> 24) == seq && !q.posted.empty() &&
        (lowest < 0 || k.peer < static_cast<uint32_t>(lowest)))
      lowest = static_cast<int32_t>(k.peer);
  return lowest;
}

void Mailbox::forget_connection(const QuicConnection *c) {
  for (auto &[raw, m] : live_)
    if (m->conn_ == c) m->conn_ = nullptr;
}

void Mailbox::destroy_message(Incoming *m) {
  m->release_buffer();
  live_.erase(m);
}

void Mailbox::erase_if_idle(const MsgKey &key) {
  auto it = queues_.find(key);
  if (it != queues_.end() && it->second.unexpected.empty() && it->second.posted.empty())
    queues_.erase(it);
}

void Mailbox::fail_peer(uint32_t peer, const Status &s) {
  std::vector<RecvWait *> victims;
  for (auto &[k, q] : queues_)
    if (k.peer == peer)
      for (RecvWait *w : q.posted)
        victims.push_back(w);
  for (RecvWait *w : victims)
    w->finish(error(s.code, format("%s: %s", w->what_, s.message.c_str()), w->user_rank_));
}

}  // namespace nexar
