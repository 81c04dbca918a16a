// ShmHost: a client's same-host path. It owns the rank's shared segment
// (transport/shm_segment.h), the Unix socket peers on this host reach it at,
// and one ShmChannel per same-host peer once that pair is set up.
//
// Setting up a pair rides on the QUIC connection the two already have, and
// finishes before the peer counts as ready (so no message ever travels one
// way over QUIC and the next over shared memory):
//   1. After Hello (dialler) and HelloAck (listener) each sends a ShmOffer:
//      whether it takes a channel (a slot of its segment is reserved for the
//      peer), its host key (boot id, network namespace, uid), pid and socket.
//   2. Both then know whether the pair qualifies (both offer, same host key).
//      If not, the peer is ready on QUIC at once.
//   3. The higher rank connects to the lower's socket and sends its rank, the
//      slot it gave the peer and a proof (HMAC over the QUIC session's TLS
//      exporter), with its segment's descriptor. The lower rank checks the
//      socket's credentials (same uid, the pid offered over QUIC), the proof
//      and the segment, maps it read-only and answers the same way; the
//      higher rank checks the same, maps, and sends 'K'. Each side is ready
//      once it is done (the lower on 'K').
//   Any failure closes the socket, which the other side sees: both fall back
//   to QUIC for that pair (logged once at info), or, with NEXAR_SHM=require,
//   formation fails. Loop thread only, except where noted.
#pragma once

#include <ev.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "client/symmetric_memory.h"
#include "core/status.h"
#include "core/unique_fd.h"
#include "nexar.h"
#include "transport/codec.h"
#include "transport/shm_channel.h"
#include "transport/shm_segment.h"

namespace nexar {

class Client;
class EventLoop;
class QuicConnection;
class ShmCondition;

class ShmHost : private ShmChannelHandler {
 public:
  explicit ShmHost(Client &client);
  ~ShmHost() override;
  ShmHost(const ShmHost &) = delete;
  ShmHost &operator=(const ShmHost &) = delete;

  // Creates the segment and the socket (before the loop starts). A failure
  // leaves the path off (logged; with NEXAR_SHM=require, formation fails at
  // the first same-host peer).
  void start();

  // ---- pair setup (see above) ----
  // What this rank offers peer, sent after Hello / HelloAck.
  wire::ShmOffer offer_for(uint32_t peer);
  // The Hello exchange with peer finished on c.
  void on_hello_done(uint32_t peer, QuicConnection *c);
  void on_offer(uint32_t peer, const wire::ShmOffer &offer);
  // The QUIC connection to peer closed: a pair still being set up is dropped.
  void on_connection_lost(uint32_t peer);

  // The open channel to peer, or null.
  ShmChannel *channel(uint32_t peer) const;
  // The pid of peer's process (its offer, which its socket's credentials
  // confirmed), or 0 without an open channel.
  uint32_t peer_pid(uint32_t peer) const;
  // Whether peer's process ended, or can no longer be told (no open channel
  // to it, or no pidfd on it): what a read through its pid gave is then not
  // to be used, for the pid may name another process.
  bool peer_process_ended(uint32_t peer) const;
  // The host key (boot id, network namespace, uid) world rank peer offered,
  // or this rank's own: what every offer of that rank carries. Empty when
  // its path is off (NEXAR_SHM=off) or no offer came from it.
  std::string host_key_of(uint32_t peer) const;
  // Messages written into no ring yet (a leaving rank waits for them).
  bool has_queued() const;
  // An orderly end of every channel (the peers read a goodbye).
  void leave_all(const Status &s);
  // Ends the channel to peer, which this rank declared failed: a peer that
  // was only frozen reads on waking that it is out, not that a rank left.
  void cut_off(uint32_t peer, const Status &why);
  // Loop side: peer's process is gone, seen before its channel hung up (a
  // direct read found it so). Its channel fails as at the end of its
  // process, after what runs now.
  void peer_vanished(uint32_t peer);
  void add_stats(nexar_stats_t *out) const;
  // nexar_mem_alloc's buffers: this segment's heap while the path is on.
  SymmetricMemory &symmetric() { return symmetric_; }

  // ---- collectives on shared memory (client/shm_coll_area.h) ----
  EventLoop *loop() const;
  const OwnShmSegment &segment() const { return segment_; }
  // A block of this rank's heap (null: the path is off or the heap is full),
  // and its offset in the heap; released with release_shared.
  uint8_t *allocate_shared(uint64_t bytes, uint64_t *offset);
  void release_shared(uint8_t *p);
  // Rings world rank peer's doorbell if its loop sleeps.
  void ring(uint32_t peer);
  // Counted in the stats: a collective ran on shared memory; bytes of this
  // rank's heap a collective let the peers read where they are.
  void count_collective() { ++collectives_; }
  void count_by_reference(uint64_t bytes) { coll_bytes_by_reference_ += bytes; }
  // ... bytes a collective copied straight out of a peer's process.
  void count_read_directly(uint64_t bytes) { bytes_read_directly_ += bytes; }
  // Conditions re-checked on every pass of the loop (client/shm_wait.h).
  void add_waiter(ShmCondition *w) { waiters_.push_back(w); }
  void remove_waiter(ShmCondition *w);

 private:
  struct Pairing;
  struct Stranger;

  // ShmChannelHandler
  MessageSink *on_shm_frame(ShmChannel *ch, const wire::FrameHeader &h) override;
  void on_shm_closed(ShmChannel *ch, const Status &why, bool left) override;

  Pairing &pairing(uint32_t peer);
  void decide(Pairing &p);
  void dial(Pairing &p);
  void on_pairing_io(Pairing &p);
  void on_listener_io();
  void on_stranger_io(Stranger &s);
  // The dialler's first packet, from a socket not yet tied to a rank.
  Status admit(Stranger &s, const std::vector<uint8_t> &packet, UniqueFd fd, uint32_t *rank);
  Status check_reply(Pairing &p, const std::vector<uint8_t> &packet, UniqueFd fd);
  Status check_credentials(int sock, const Pairing &p) const;
  std::vector<uint8_t> hello_packet(const Pairing &p, std::string_view role) const;
  std::string proof(const Pairing &p, std::string_view role) const;
  void establish(Pairing &p);
  // The pair stays on QUIC (why says why, or nothing when it never qualified).
  void fall_back(Pairing &p, const Status &why);
  void end_setup(Pairing &p);
  void drop_stranger(Stranger *s);
  bool before_sleep();
  // Finishes the waiting conditions that hold; true if any did.
  bool poll_waiters();
  // A channel's socket is readable (a doorbell, a goodbye, a hang-up).
  void on_doorbell();
  void release_slot(int64_t slot);

  static void on_listener_ready(struct ev_loop *, ev_io *w, int);
  static void on_pairing_ready(struct ev_loop *, ev_io *w, int);
  static void on_stranger_ready(struct ev_loop *, ev_io *w, int);
  static void on_timer(struct ev_loop *, ev_timer *w, int);

  Client &client_;
  bool enabled_ = false;
  Status unavailable_;  // why start() could not enable the path
  std::string host_key_;
  std::string socket_name_;
  UniqueFd listener_;
  ev_io listener_io_;
  // The open channels' sockets: the loop's doorbell (EventLoop::watch_doorbell).
  UniqueFd channel_set_;
  OwnShmSegment segment_;
  SymmetricMemory symmetric_;
  std::vector<bool> slot_used_;
  std::vector<std::unique_ptr<Pairing>> pairs_;  // by world rank
  std::vector<std::unique_ptr<Stranger>> strangers_;
  std::vector<ShmChannel *> open_;  // channels in use
  std::vector<ShmCondition *> waiters_;
  bool logged_fallback_ = false;
  uint64_t pairs_up_ = 0;
  uint64_t collectives_ = 0, coll_bytes_by_reference_ = 0, bytes_read_directly_ = 0;
};

}  // namespace nexar
