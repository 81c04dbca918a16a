package nexar

/*
#cgo pkg-config: nexar
#include "shim.h"
#include <stdlib.h>
*/
import "C"

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"runtime/cgo"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Version returns the version of the libnexar actually loaded, e.g. "0.1.0".
func Version() string { return C.GoString(C.nexar_version_string()) }

// Comm is one rank's view of a group of processes (a nexar_comm_t). Make one
// with InitFromEnv, BootstrapLocal or Split; release it with Close.
//
// Every method and operation may be called from any goroutine, several at
// once. Collectives on one communicator must be issued in the same order on
// every rank (ranks that disagree get ErrMismatch, never a hang).
//
// A Comm that becomes unreachable without Close is closed by the garbage
// collector, as an *os.File is; Close it yourself to release it at a known
// time.
type Comm struct {
	rank, size int

	mu       sync.Mutex
	cond     sync.Cond // on mu: inflight reached 0, or Close finished
	h        *C.nexar_comm_t
	inflight int  // calls into nexar in progress on this handle
	closing  bool // Close started: new calls fail with ErrClosed
	closed   bool // Close finished: the handle is destroyed

	rpcMu    sync.Mutex            // keeps nexar's handler registry and handlers in step
	handlers map[uint32]cgo.Handle // the Handler that nexar calls for each fnID

	failureMu sync.Mutex   // serializes SetFailureCallback
	failure   *failureSlot // what nexar's failure callback calls (nil until set)
}

// finalizerCloses counts the communicators the garbage collector closed (for
// the tests).
var finalizerCloses atomic.Int64

func newComm(h *C.nexar_comm_t) *Comm {
	c := &Comm{
		h:        h,
		rank:     int(C.nexar_comm_rank(h)),
		size:     int(C.nexar_comm_size(h)),
		handlers: map[uint32]cgo.Handle{},
	}
	c.cond.L = &c.mu
	// Unreachable means no call is running on it (a caller holds it); a
	// pending cancellable operation whose caller left completes with
	// ErrClosed. Close runs on its own goroutine: nexar_comm_destroy waits
	// for this rank's last data to be acknowledged, which must not hold up
	// the runtime's single finalizer goroutine. A split child outlives its
	// parent, so the order in which they are collected does not matter. (The
	// pointer from cond to mu is no cycle for the collector: it ignores
	// pointers from an object into itself.)
	runtime.SetFinalizer(c, func(c *Comm) {
		go func() {
			if c.Close() == nil {
				finalizerCloses.Add(1)
			}
		}()
	})
	return c
}

// Rank returns this rank, 0..Size()-1. It stays valid after Close.
func (c *Comm) Rank() int { return c.rank }

// Size returns the number of ranks in the communicator.
func (c *Comm) Size() int { return c.size }

// String describes the communicator, e.g. "nexar.Comm(rank 0 of 4)".
func (c *Comm) String() string {
	return fmt.Sprintf("nexar.Comm(rank %d of %d)", c.rank, c.size)
}

// acquire returns the handle for one call into nexar, or ErrClosed. Every
// acquire is paired with release; Close waits for the calls in between.
func (c *Comm) acquire(op string) (*C.nexar_comm_t, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return nil, newError(op, c.rank, ErrClosed, -1, "the communicator is closed")
	}
	c.inflight++
	return c.h, nil
}

func (c *Comm) release() {
	c.mu.Lock()
	c.inflight--
	if c.inflight == 0 && c.closing {
		c.cond.Broadcast()
	}
	c.mu.Unlock()
}

// callC makes one call into nexar for op: it acquires the handle (or fails
// with ErrClosed), calls f with it and an empty gx_err, releases the handle
// and turns the status and gx_err into an error (nil for NEXAR_OK).
func (c *Comm) callC(op string, f func(h *C.nexar_comm_t, e *C.gx_err) C.nexar_status_t) error {
	h, err := c.acquire(op)
	if err != nil {
		return err
	}
	e := newErr()
	st := f(h, &e)
	c.release()
	return takeErr(op, c.rank, st, &e)
}

// Close releases the communicator (nexar_comm_destroy). New calls fail with
// ErrClosed at once; calls already inside nexar finish first (a blocking
// operation is bounded by nexar's timeouts); operations started on the
// cancellable path and still pending complete with ErrClosed; RPC handlers
// are unregistered. Close is safe to call from several goroutines: every
// call returns once the communicator is closed. The call that closed it
// returns nil; any other (a second Close, or one that came while the first
// was closing) returns an *Error with ErrClosed, like every other method
// after Close. It must not be called from inside an RPC handler.
func (c *Comm) Close() error {
	c.mu.Lock()
	if c.closing {
		for !c.closed {
			c.cond.Wait()
		}
		c.mu.Unlock()
		return newError("close", c.rank, ErrClosed, -1, "the communicator is already closed")
	}
	c.closing = true
	for c.inflight > 0 {
		c.cond.Wait()
	}
	h := c.h
	c.h = nil
	c.mu.Unlock()

	// Nothing else uses h now. Pending operations complete with
	// NEXAR_ERR_CLOSED, and no handler runs, once this returns.
	C.nexar_comm_destroy(h)

	c.rpcMu.Lock()
	for id, hd := range c.handlers {
		hd.Delete()
		delete(c.handlers, id)
	}
	c.rpcMu.Unlock()
	c.releaseFailureSlot()

	c.mu.Lock()
	c.closed = true
	c.cond.Broadcast()
	c.mu.Unlock()
	return nil
}

// Abort fails every pending operation of this communicator with ErrAborted
// and tells the peers (nexar_comm_abort). The communicator stays open (every
// later operation fails) until Close.
func (c *Comm) Abort() error {
	return c.callC("abort", func(h *C.nexar_comm_t, e *C.gx_err) C.nexar_status_t {
		return C.gx_abort(h, e)
	})
}

// AsyncError reports a failure nexar found in the background (a dead peer,
// an abort by a peer) as an *Error, or nil when there is none or the
// communicator is closed.
func (c *Comm) AsyncError() error {
	h, err := c.acquire("async_error")
	if err != nil {
		return nil
	}
	defer c.release()
	var info C.nexar_completion_t
	info.struct_size = C.size_t(unsafe.Sizeof(info))
	st := C.nexar_comm_get_async_error(h, &info)
	if st == C.NEXAR_OK {
		return nil
	}
	msg := ""
	if info.message != nil {
		msg = C.GoString(info.message)
	}
	return newError("async_error", c.rank, Status(st), int(info.failed_rank), msg)
}

// Stats are the counters of a communicator's engine (nexar_stats_t), shared
// by the communicators split from it.
type Stats struct {
	BytesSent            uint64 // payload bytes handed to the transport
	BytesReceived        uint64 // payload bytes that arrived
	MessagesSent         uint64
	MessagesReceived     uint64
	StreamsOpened        uint64 // QUIC streams opened by this engine, all peers
	StreamsAccepted      uint64 // QUIC streams opened by peers
	PendingTags          uint64 // (peer, tag) match state alive right now
	UnexpectedBytes      uint64 // arrived before their receive, buffered now
	Connections          uint64 // live QUIC connections
	RPCRequestsServed    uint64 // RPC requests answered by this engine (any outcome)
	RPCResponsesDropped  uint64 // RPC responses nobody waited for
	RelayBytesSent       uint64 // payload bytes sent to non-neighbours via relay
	RelayBytesForwarded  uint64 // payload bytes forwarded for other ranks
	RelayFramesDropped   uint64 // malformed, misrouted or undeliverable relay frames
	RelayBytesHeld       uint64 // bytes held now for forwarding
	PacketsFastAEAD      uint64 // QUIC packets protected with ipsec-mb's AES-GCM
	BytesOpenedInPlace   uint64 // received bytes decrypted straight into the receive buffer
	BytesSealedInPlace   uint64 // sent bytes encrypted straight from the send buffer
	SHMPairs             uint64 // peers reached through shared memory
	SHMBytesSent         uint64 // payload bytes written into shared memory (not in BytesSent)
	SHMBytesReceived     uint64 // payload bytes read from peers' shared memory
	SHMCollectives       uint64 // collectives run on shared memory, reading the peers' segments
	SHMBytesByReference  uint64 // payload bytes peers read straight from MemAlloc buffers
	ConnectionsRefused   uint64 // peers refused at the handshake (docs/security.md)
	ProtocolViolations   uint64 // connections closed because the peer broke the protocol
	SHMBytesReadDirectly uint64 // payload bytes collectives copied straight out of same-host peers' processes (NEXAR_SHM_CMA)
}

// FlightRecorderDump writes this communicator's recent operations as JSON to
// path ("" means NEXAR_FR_DUMP_DIR/nexar-fr-HOST-PID.json); nexar-fr merges
// the dumps of all ranks and prints where they diverge.
func (c *Comm) FlightRecorderDump(path string) error {
	var cpath *C.char
	if path != "" {
		cpath = C.CString(path)
		defer C.free(unsafe.Pointer(cpath))
	}
	return c.callC("flight_recorder_dump", func(h *C.nexar_comm_t, e *C.gx_err) C.nexar_status_t {
		return C.gx_flight_recorder_dump(h, cpath, e)
	})
}

// Stats returns the engine's counters (nexar_comm_get_stats).
func (c *Comm) Stats() (Stats, error) {
	var s C.nexar_stats_t
	if err := c.callC("stats", func(h *C.nexar_comm_t, e *C.gx_err) C.nexar_status_t {
		return C.gx_stats(h, &s, e)
	}); err != nil {
		return Stats{}, err
	}
	return Stats{
		BytesSent:            uint64(s.bytes_sent),
		BytesReceived:        uint64(s.bytes_received),
		MessagesSent:         uint64(s.messages_sent),
		MessagesReceived:     uint64(s.messages_received),
		StreamsOpened:        uint64(s.streams_opened),
		StreamsAccepted:      uint64(s.streams_accepted),
		PendingTags:          uint64(s.pending_tags),
		UnexpectedBytes:      uint64(s.unexpected_bytes),
		Connections:          uint64(s.connections),
		RPCRequestsServed:    uint64(s.rpc_requests_served),
		RPCResponsesDropped:  uint64(s.rpc_responses_dropped),
		RelayBytesSent:       uint64(s.relay_bytes_sent),
		RelayBytesForwarded:  uint64(s.relay_bytes_forwarded),
		RelayFramesDropped:   uint64(s.relay_frames_dropped),
		RelayBytesHeld:       uint64(s.relay_bytes_held),
		PacketsFastAEAD:      uint64(s.packets_fast_aead),
		BytesOpenedInPlace:   uint64(s.bytes_opened_in_place),
		BytesSealedInPlace:   uint64(s.bytes_sealed_in_place),
		SHMPairs:             uint64(s.shm_pairs),
		SHMBytesSent:         uint64(s.shm_bytes_sent),
		SHMBytesReceived:     uint64(s.shm_bytes_received),
		SHMCollectives:       uint64(s.shm_collectives),
		SHMBytesByReference:  uint64(s.shm_bytes_by_reference),
		ConnectionsRefused:   uint64(s.connections_refused),
		ProtocolViolations:   uint64(s.protocol_violations),
		SHMBytesReadDirectly: uint64(s.shm_bytes_read_directly),
	}, nil
}

// ---- Creating communicators ---------------------------------------------------

// BootstrapLocal makes n communicators in this process (nexar_bootstrap_local),
// joined by real QUIC connections over loopback, each rank with its own
// engine; the i-th is rank i. Blocking operations then need one goroutine
// per rank. For tests, examples and notebooks.
func BootstrapLocal(n int, opts ...Option) ([]*Comm, error) {
	const op = "bootstrap_local"
	if err := checkWorldSize(n); err != nil {
		return nil, newError(op, -1, ErrInvalidArgument, -1, err.Error())
	}
	cfg, err := buildConfig(op, opts)
	if err != nil {
		return nil, err
	}
	defer cfg.free()
	handles := make([]*C.nexar_comm_t, n) // Go memory holding C pointers only
	e := newErr()
	if err := takeErr(op, -1, C.gx_bootstrap_local(&handles[0], C.uint32_t(n), &cfg.raw, &e), &e); err != nil {
		return nil, err
	}
	comms := make([]*Comm, n)
	for i, h := range handles {
		comms[i] = newComm(h)
	}
	return comms, nil
}

// InitFromEnv joins the cluster the environment describes
// (nexar_comm_init_from_env): NEXAR_SEED with NEXAR_RANK and
// NEXAR_WORLD_SIZE, torchrun's RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, Open
// MPI, PMI or Slurm. It fails with ErrNotFound, listing what it looked for,
// when nothing fits. See docs/cluster.md.
func InitFromEnv() (*Comm, error) {
	var h *C.nexar_comm_t
	e := newErr()
	if err := takeErr("init_from_env", -1, C.gx_init_from_env(&h, &e), &e); err != nil {
		return nil, err
	}
	return newComm(h), nil
}

// Join joins a cluster through a nexar seed (nexar_comm_join): WithSeed
// names it, WithClusterToken gives the token it expects, WithWorldSize the
// number of workers, WithRank the rank to ask for (default: the seed
// assigns one). It forms the mutually authenticated mesh with every other
// rank before it returns; a wrong token fails with ErrAuth. Options not
// given come from the NEXAR_* environment. See docs/cluster.md.
func Join(opts ...Option) (*Comm, error) {
	const op = "join"
	cfg, err := buildConfig(op, opts)
	if err != nil {
		return nil, err
	}
	defer cfg.free()
	var h *C.nexar_comm_t
	e := newErr()
	if err := takeErr(op, -1, C.gx_join(&h, &cfg.raw, &e), &e); err != nil {
		return nil, err
	}
	return newComm(h), nil
}

// Split makes a communicator of the ranks that passed the same color,
// ordered by (key, rank) (nexar_comm_split). Every rank must call it, like a
// collective. The new communicator has its own RPC handlers and must be
// closed on its own.
func (c *Comm) Split(ctx context.Context, color, key uint32) (*Comm, error) {
	const op = "split"
	if ctx == nil {
		ctx = context.Background()
	}
	if ctx.Done() == nil {
		var out *C.nexar_comm_t
		if err := c.callC(op, func(h *C.nexar_comm_t, e *C.gx_err) C.nexar_status_t {
			return C.gx_split(h, C.uint32_t(color), C.uint32_t(key), &out, nil, e)
		}); err != nil {
			return nil, err
		}
		return newComm(out), nil
	}
	var out *C.nexar_comm_t
	err := c.runAsync(ctx, op, 0, nil, func(h *C.nexar_comm_t, p *C.gx_pending, e *C.gx_err) C.nexar_status_t {
		return C.gx_split(h, C.uint32_t(color), C.uint32_t(key), &p.split_out, p, e)
	}, func(p *C.gx_pending) {
		out = p.split_out
		p.split_out = nil
	})
	if err != nil {
		return nil, err
	}
	return newComm(out), nil
}

// checkRank converts a rank argument to nexar's uint32. Ranks past the
// communicator are left to nexar to refuse (with its own message).
func (c *Comm) checkRank(op, what string, r int) (C.uint32_t, error) {
	if r < 0 || int64(r) > math.MaxUint32 {
		return 0, newError(op, c.rank, ErrInvalidRank, -1,
			fmt.Sprintf("%s %d is outside the communicator of %d ranks", what, r, c.size))
	}
	return C.uint32_t(r), nil
}
