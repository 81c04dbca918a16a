// Mailbox: matches incoming messages with posted receives by
// (peer, kind, communicator id, tag). Messages of one key are delivered in
// arrival order, which is send order because one key always travels on one
// stream. A message that arrives before its receive is buffered (bounded: past
// a per-peer budget its QUIC credit is withheld, which stalls the sender);
// a key's state is freed as soon as nothing waits or is buffered for it.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "client/collective_tracker.h"
#include "client/peer_liveness.h"
#include "core/buffer_pool.h"
#include "engine/wait.h"
#include "nexar.h"
#include "transport/quic_connection.h"

namespace nexar {

struct MsgKey {
  uint32_t peer;
  uint8_t kind;
  uint64_t comm_id;
  uint64_t tag;
  bool operator==(const MsgKey &o) const {
    return peer == o.peer && kind == o.kind && comm_id == o.comm_id && tag == o.tag;
  }
};
struct MsgKeyHash {
  size_t operator()(const MsgKey &k) const {
    uint64_t h = k.comm_id * 0x9E3779B97F4A7C15ull ^ (k.tag + 0x632BE59BD9B4E019ull);
    h ^= (uint64_t{k.peer} << 8 | k.kind) * 0xC2B2AE3D27D4EB4Full;
    return static_cast<size_t>(h ^ (h >> 29));
  }
};

class Mailbox;
class RecvWait;

// How a receive takes its bytes when `own` is set: each element lands in the
// buffer as (incoming op own), or (own op incoming) with own_first, the
// moment it arrives, reduced straight from the decrypted packet instead of
// from a scratch copy. own has the buffer's layout and may be the buffer
// itself.
struct CombineOnArrival {
  const uint8_t *own = nullptr;
  nexar_dtype_t dtype = NEXAR_DTYPE_U8;
  nexar_op_t op = NEXAR_OP_SUM;
  size_t esize = 1;
  bool own_first = false;
};

// One incoming message: streams straight into a bound receive, or is buffered.
class Incoming : public MessageSink {
 public:
  Incoming(Mailbox *box, MsgKey key, uint64_t length, uint32_t check, QuicConnection *conn,
           int64_t stream_id);
  size_t write(const uint8_t *data, size_t len) override;
  void finish(bool ok) override;
  uint8_t *place(size_t len) override;
  bool placed(const uint8_t *to, size_t len, size_t *credit) override;

 private:
  friend class Mailbox;
  friend class RecvWait;
  void bind(RecvWait *w);  // copies what is buffered, streams the rest
  void release_buffer();   // returns buffered memory and withheld credit

  Mailbox *box_;
  MsgKey key_;
  uint64_t length_;
  uint32_t check_;
  uint64_t received_ = 0;
  QuicConnection *conn_;
  int64_t stream_id_;
  RecvWait *waiter_ = nullptr;
  bool discard_ = false;  // consumed by a mismatched or abandoned receive
  bool complete_ = false;
  bool failed_ = false;
  std::vector<PooledBuf> chunks_;
  uint64_t buffered_ = 0;
  uint64_t withheld_ = 0;  // credit not yet returned to the peer
};

// A receive to post: its match key, where its bytes go, the check it expects
// (another fails it with NEXAR_ERR_MISMATCH), the rank and operation its
// errors name, and how it combines what arrives.
struct PostedRecv {
  MsgKey key;
  void *buf;
  uint64_t size;
  uint32_t check;
  int32_t user_rank;
  const char *what;
  CombineOnArrival combine = {};
};

class RecvWait : public Wait {
 public:
  RecvWait(Mailbox *box, OpContext *op, uint64_t deadline_ns, const PostedRecv &r);
  bool await_ready();
  bool await_suspend(std::coroutine_handle<> h) { return suspend(h); }
  Status await_resume() { return result(); }
  void *buffer() const { return buf_; }
  uint64_t size() const { return size_; }

 protected:
  void detach() override;
  std::string timeout_message() const override;

 private:
  friend class Mailbox;
  friend class Incoming;
  // Places len bytes at offset off of the message: copied, or combined.
  void take(uint64_t off, const uint8_t *data, size_t len);
  void combine(uint64_t off, const uint8_t *incoming, size_t elems);

  Mailbox *box_;
  MsgKey key_;
  uint8_t *buf_;
  uint64_t size_;
  uint32_t check_;
  int32_t user_rank_;
  const char *what_;
  Incoming *msg_ = nullptr;
  bool posted_ = false;
  CombineOnArrival combine_;
  // The start of an element split across two deliveries, when combining
  // (at most 7 bytes: the widest dtype has 8).
  uint8_t partial_[8];
  size_t partial_len_ = 0;
};

class Mailbox {
 public:
  // liveness: whose receives fail at once (the client's record of failed peers).
  Mailbox(std::shared_ptr<BufferPool> pool, const PeerLiveness &liveness)
      : pool_(std::move(pool)), liveness_(liveness) {}
  ~Mailbox();

  // A new message arrived; returns its sink.
  MessageSink *on_message(const MsgKey &key, uint64_t length, uint32_t check, QuicConnection *conn,
                          int64_t stream_id);
  // A message to ourselves: delivered without the network.
  void deliver_local(const MsgKey &key, const void *data, uint64_t length, uint32_t check);
  // The collective tracker of each communicator on this engine, by id: it
  // decides the fate of every collective frame (registered on the loop by
  // the communicator; a later one of the same id replaces it).
  void track(uint64_t comm_id, CollectiveTracker *t) { trackers_[comm_id] = t; }
  void untrack(uint64_t comm_id, const CollectiveTracker *t);
  // Collective seq of comm_id starts (its tracker already knows its check):
  // frames of it that arrived earlier are checked now. When it ends, frames
  // of it that nobody will receive any more are dropped.
  void begin_collective(uint64_t comm_id, uint64_t seq);
  void end_collective(uint64_t comm_id, uint64_t seq);
  // The lowest world rank a receive of collective seq of comm_id is posted
  // for and has had no byte yet, or -1 (what the stall report says it waits on).
  int32_t waiting_on(uint64_t comm_id, uint64_t seq) const;
  // The connection is going away: buffered messages stop returning credit to it.
  void forget_connection(const QuicConnection *c);
  // The peer is gone (already recorded in the liveness): every receive
  // waiting on it fails with s.
  void fail_peer(uint32_t peer, const Status &s);

  size_t keys() const { return queues_.size(); }
  uint64_t buffered_bytes() const { return buffered_total_; }
  BufferPool &pool() { return *pool_; }

 private:
  friend class Incoming;
  friend class RecvWait;
  struct Queue {
    std::deque<Incoming *> unexpected;
    std::deque<RecvWait *> posted;
  };
  void erase_if_idle(const MsgKey &key);
  void destroy_message(Incoming *m);
  Queue &queue(const MsgKey &key) { return queues_[key]; }

  std::shared_ptr<BufferPool> pool_;
  const PeerLiveness &liveness_;
  std::unordered_map<MsgKey, Queue, MsgKeyHash> queues_;
  // Owns every message from its first byte until it is consumed.
  std::unordered_map<Incoming *, std::unique_ptr<Incoming>> live_;
  std::unordered_map<uint32_t, uint64_t> unexpected_per_peer_;
  std::unordered_map<uint64_t, CollectiveTracker *> trackers_;
  uint64_t buffered_total_ = 0;
};

// Bytes of unexpected data per peer that are credited back at once; beyond
// this the sender is slowed by withheld QUIC credit.
constexpr uint64_t kUnexpectedBudget = 16ull << 20;

}  // namespace nexar
