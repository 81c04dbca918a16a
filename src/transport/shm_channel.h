// ShmChannel: the data path of one same-host pair once it is set up
// (client/shm_pairing.h does that through the QUIC session). Frames travel
// exactly as on a QUIC stream (frame.h: a 32-byte header, then the payload),
// but through two byte rings, each in its writer's own segment: this rank
// writes its ring to the peer in its own slot, and reads the peer's ring to
// it out of the peer's segment, mapped read-only. Each side publishes how
// far it wrote (tail) and how far it read (head) in its own segment.
//
// A message of at least kShmRefMinBytes whose payload lies in this rank's
// symmetric heap (nexar_mem_alloc) travels by reference: the ring carries
// its header, flagged, and the payload's offset in the heap; the peer copies
// the payload straight out of the heap into its sink, then counts it in its
// refs_done line. The send completes once the peer's count covers it, so
// the buffer is not reused while the peer reads it.
//
// Wake-ups: a side whose loop is about to sleep makes its segment's sleep
// word odd, then looks once more for work (client/shm_host.h); a writer that
// published, or a reader that made room, rings the peer's doorbell (a byte on
// the pair's socket) only when that word is odd and it has not rung for that
// sleep yet. The socket's hang-up is the peer's death notice; a peer that
// leaves in order sends a goodbye packet first. Loop thread only.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <vector>

#include "core/buffer_pool.h"
#include "core/status.h"
#include "core/unique_fd.h"
#include "transport/frame.h"
#include "transport/receive_framer.h"
#include "transport/send_lanes.h"
#include "transport/shm_segment.h"

namespace nexar {

class ShmChannel;

class ShmChannelHandler {
 public:
  virtual ~ShmChannelHandler() = default;
  // Where the payload of a frame from the peer goes (null: it is dropped).
  virtual MessageSink *on_shm_frame(ShmChannel *ch, const wire::FrameHeader &h) = 0;
  // The channel is finished: the peer left (left == true), died, or broke
  // the protocol; or it cut this rank off (why.code NEXAR_ERR_EXCLUDED):
  // it declared this rank failed. Nothing is read or written after this.
  virtual void on_shm_closed(ShmChannel *ch, const Status &why, bool left) = 0;
};

inline constexpr uint64_t kShmRefMinBytes = 64 << 10;
// The frame header's flags byte (frame.h: zero on QUIC) marks a message by
// reference on a ring, followed by kShmRefBytes: the heap offset and length.
inline constexpr uint8_t kShmRefFlag = 0x52;
inline constexpr size_t kShmRefBytes = 16;

// One queued message, as the ring will carry it.
struct ShmSendItem {
  uint8_t header[wire::kFrameHeaderSize + kShmRefBytes];
  bool by_ref = false;  // header then the reference, written together
  const uint8_t *payload = nullptr;
  uint64_t payload_len = 0;
  PooledBuf owned;
  SendListener *listener = nullptr;
  uint64_t written = 0;    // bytes of header + payload in the ring
  bool zero_rest = false;  // cancelled mid-way: zeros for the rest
  // Bytes the ring carries for it.
  uint64_t total() const { return wire::kFrameHeaderSize + (by_ref ? kShmRefBytes : payload_len); }
  uint64_t ref_index = 0;  // by reference, once written: the peer's count that covers it
};

class ShmChannel {
 public:
  // own: this rank's segment (slot own_slot is the ring to the peer); peer:
  // the peer's, mapped at the slot it gave this rank; sock: the pair's socket.
  ShmChannel(ShmChannelHandler &handler, uint32_t peer_rank, UniqueFd sock,
             const OwnShmSegment &own, uint64_t own_slot, PeerShmSegment peer);
  ~ShmChannel();
  ShmChannel(const ShmChannel &) = delete;
  ShmChannel &operator=(const ShmChannel &) = delete;

  uint32_t peer_rank() const { return peer_rank_; }
  int socket() const { return sock_.get(); }
  bool closed() const { return closed_; }
  uint64_t own_slot() const { return own_slot_; }

  // Queues a message and writes what fits now. The listener hears once all
  // of it is in the ring (or the channel failed). Returns a handle for
  // cancel(), or null when it finished at once.
  ShmSendItem *send(OutgoingMessage msg);
  // Writes a small message whole now if the ring has room and nothing is
  // queued ahead of it; false otherwise (nothing written).
  bool send_now(const wire::FrameHeader &h, const void *payload);
  // Forgets a queued message: untouched, it is dropped; partly written, the
  // rest goes as zeros. Either way its payload is not read again and its
  // listener hears nothing more.
  void cancel(ShmSendItem *item);
  uint64_t queued_bytes() const { return queued_bytes_; }

  // Moves what can move: reads the peer's ring into its sinks, writes the
  // queue into this ring, rings the peer when it sleeps. Up to budget bytes;
  // true if anything moved.
  bool progress(uint64_t budget);
  // Whether progress() would find something to do now.
  bool has_work() const;
  // The socket is readable: drains doorbells, notices a goodbye or hang-up.
  void on_socket_ready();
  // The peer's process ended, which its socket does not say while another
  // process (a child forked with it) holds the socket too: what the peer sent
  // before is delivered, then the channel fails as a death unless the peer
  // said goodbye.
  void on_peer_process_ended();
  // An orderly end: tells the peer it leaves (or, with cut_off, that this
  // rank declared it failed), closes the socket. Queued messages fail with s.
  void leave(const Status &s, bool cut_off = false);
  // Fails the channel with s (protocol error, death): queued sends and the
  // message being read fail; the handler hears once.
  void fail(const Status &s, bool left);

  // Rings the peer's doorbell if its loop sleeps (and was not rung for that
  // sleep yet): after publishing something it may wait for.
  void ring_peer();
  // The peer's segment, mapped read-only (its heap holds the collective
  // areas, client/shm_coll_area.h).
  const PeerShmSegment &peer_segment() const { return peer_; }

  uint64_t bytes_sent() const { return bytes_sent_; }
  uint64_t bytes_received() const { return bytes_received_; }
  // Of bytes_sent, those the peer read out of this rank's heap.
  uint64_t bytes_by_reference() const { return bytes_by_reference_; }
  uint64_t messages_sent() const { return messages_sent_; }
  uint64_t messages_received() const { return messages_received_; }
  // Doorbells this side rang (each a system call that wakes the peer).
  uint64_t doorbells_rung() const { return doorbells_rung_; }

 private:
  uint64_t ring_free() const;
  void write_ring(const uint8_t *src, uint64_t n);  // n <= ring_free(); zeros if src null
  bool pump_out(uint64_t *budget);
  bool pump_in(uint64_t *budget);
  // Reads the frame header (and a reference) just completed in in_header_.
  bool begin_frame(uint64_t *avail);
  // Copies the current message by reference out of the peer's heap.
  bool copy_ref(uint64_t *budget);
  // Completes the sends by reference the peer has finished reading.
  bool collect_refs();
  void fail_refs(const Status &s);
  // Bytes the peer has published and this side not read; false (and the
  // channel failed) if the peer's counters are impossible.
  bool peer_available(uint64_t *n);
  void read_ring(uint8_t *dst, uint64_t n);
  void finish_item(std::list<ShmSendItem>::iterator it, const Status &s);

  ShmChannelHandler &handler_;
  uint32_t peer_rank_;
  UniqueFd sock_;
  // This side's ring to the peer.
  uint8_t *out_ring_;
  uint64_t out_mask_;
  uint64_t *out_tail_;       // published in own segment
  uint64_t out_tail_local_;  // written, maybe not published yet
  uint64_t *in_head_;        // how far this side read the peer's ring (own segment)
  uint64_t in_head_local_;
  const ShmSegmentHeader *own_header_;
  uint64_t own_slot_;
  // The peer's ring to this side.
  PeerShmSegment peer_;
  uint64_t in_mask_;
  uint64_t last_rung_seq_ = 0;
  uint64_t doorbells_rung_ = 0;  // the peer's sleep for which the doorbell rang

  std::list<ShmSendItem> queue_;
  uint64_t queued_bytes_ = 0;
  // This rank's heap, whose buffers may travel by reference.
  const uint8_t *own_heap_;
  uint64_t own_heap_bytes_;
  // Written by reference, waiting for the peer to finish reading them.
  std::list<ShmSendItem> refs_waiting_;
  uint64_t refs_sent_ = 0;
  uint64_t *refs_done_;  // own segment: references of the peer read
  uint64_t refs_done_local_ = 0;
  const uint8_t *in_ref_ = nullptr;  // the current message by reference: next byte

  // The frame being read.
  uint8_t in_header_[wire::kFrameHeaderSize];
  size_t in_header_have_ = 0;
  MessageSink *in_sink_ = nullptr;
  uint64_t in_left_ = 0;  // payload bytes still to read of the current frame
  bool in_payload_ = false;
  std::vector<uint8_t> scratch_;  // payload of a dropped frame

  bool closed_ = false;
  uint64_t bytes_by_reference_ = 0;
  uint64_t bytes_sent_ = 0, bytes_received_ = 0, messages_sent_ = 0, messages_received_ = 0;
};

}  // namespace nexar
