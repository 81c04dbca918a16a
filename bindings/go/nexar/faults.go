package nexar

// #include "shim.h"
import "C"

import (
	"log"
	"runtime/cgo"
	"sync/atomic"
	"unsafe"
)

// Failures (docs/failures.md): a member that dies, freezes past the heartbeat
// timeout, aborts or closes its communicator is a failed member; every
// collective then fails with ErrPeerFailed naming it. The survivors revoke,
// agree and shrink to go on without it. These calls block.

// Failed returns the ranks known to have failed, in the order they were
// learned (the list only grows).
func (c *Comm) Failed() ([]int, error) {
	var ranks []C.uint32_t
	err := c.callC("failed", func(h *C.nexar_comm_t, e *C.gx_err) C.nexar_status_t {
		var n C.uint32_t
		if st := C.gx_get_failed(h, nil, 0, &n, e); st != C.NEXAR_OK {
			return st
		}
		if n == 0 {
			return C.NEXAR_OK
		}
		ranks = make([]C.uint32_t, n)
		st := C.gx_get_failed(h, (*C.uint32_t)(unsafe.Pointer(&ranks[0])), n, &n, e)
		if int(n) < len(ranks) {
			ranks = ranks[:n]
		}
		return st
	})
	if err != nil {
		return nil, err
	}
	out := make([]int, len(ranks))
	for i, r := range ranks {
		out[i] = int(r)
	}
	return out, nil
}

// AckFailed acknowledges the first n failures of Failed (more than are known
// acknowledges all): Agree no longer fails because of them. It returns how
// many are acknowledged now.
func (c *Comm) AckFailed(n int) (int, error) {
	if n < 0 {
		n = 0
	}
	if n > 1<<32-1 {
		n = 1<<32 - 1
	}
	var acked C.uint32_t
	err := c.callC("ack_failed", func(h *C.nexar_comm_t, e *C.gx_err) C.nexar_status_t {
		return C.gx_ack_failed(h, C.uint32_t(n), &acked, e)
	})
	return int(acked), err
}

// Revoke revokes the communicator at every live member: pending and later
// operations fail with ErrRevoked, except Agree and Shrink.
func (c *Comm) Revoke() error {
	return c.callC("revoke", func(h *C.nexar_comm_t, e *C.gx_err) C.nexar_status_t {
		return C.gx_revoke(h, e)
	})
}

// Revoked reports whether the communicator was revoked, here or by a peer
// (false once it is closed).
func (c *Comm) Revoked() bool {
	h, err := c.acquire("revoked")
	if err != nil {
		return false
	}
	defer c.release()
	return C.nexar_comm_is_revoked(h) == 1
}

// Agree is a fault-tolerant agreement: it returns the AND of every live
// member's flags, the same at every survivor. The error is the same at every
// survivor too: ErrPeerFailed when a member failed that not every survivor
// had acknowledged (the flags are agreed then as well).
func (c *Comm) Agree(flags uint64) (uint64, error) {
	v := C.uint64_t(flags)
	err := c.callC("agree", func(h *C.nexar_comm_t, e *C.gx_err) C.nexar_status_t {
		return C.gx_agree(h, &v, e)
	})
	return uint64(v), err
}

// Shrink returns a new communicator of the survivors, ranks renumbered in
// their old order (a collective over the survivors; works on a revoked
// communicator).
func (c *Comm) Shrink() (*Comm, error) {
	var out *C.nexar_comm_t
	if err := c.callC("shrink", func(h *C.nexar_comm_t, e *C.gx_err) C.nexar_status_t {
		return C.gx_shrink(h, &out, e)
	}); err != nil {
		return nil, err
	}
	return newComm(out), nil
}

// FailureFunc is told of one failed member: its rank and the cause
// (ErrPeerFailed: it died, froze or left; ErrAborted: it aborted).
type FailureFunc func(rank int, cause Status)

// failureSlot is what nexar's failure callback reaches through one
// cgo.Handle for the life of the handle: replacing the function only swaps
// fn, so a call already running never finds its handle deleted.
type failureSlot struct {
	handle cgo.Handle
	fn     atomic.Pointer[FailureFunc]
}

// SetFailureCallback calls fn once per failed member
// (nexar_comm_set_failure_callback), on nexar's completion thread, never on
// the I/O thread; nil removes it. Calling again replaces it: a call of the
// old function already running may still finish after SetFailureCallback
// returns. fn must return promptly and must not wait for a nexar operation;
// a panic in it is recovered and logged. Close releases it.
func (c *Comm) SetFailureCallback(fn FailureFunc) error {
	c.failureMu.Lock()
	defer c.failureMu.Unlock()
	return c.callC("set_failure_callback", func(h *C.nexar_comm_t, e *C.gx_err) C.nexar_status_t {
		if fn == nil {
			if c.failure != nil {
				c.failure.fn.Store(nil)
			}
			return C.gx_set_failure_callback(h, 0, e)
		}
		if c.failure == nil {
			c.failure = &failureSlot{}
			c.failure.handle = cgo.NewHandle(c.failure)
		}
		c.failure.fn.Store(&fn)
		return C.gx_set_failure_callback(h, C.uintptr_t(c.failure.handle), e)
	})
}

// releaseFailureSlot deletes the slot's handle once the communicator is
// destroyed (no failure callback runs after that).
func (c *Comm) releaseFailureSlot() {
	c.failureMu.Lock()
	defer c.failureMu.Unlock()
	if c.failure != nil {
		c.failure.handle.Delete()
		c.failure = nil
	}
}

// goNexarFailure runs the Go failure callback for one failed rank, where the
// communicator's callbacks run (through gx_failure in shim.c). Nothing may
// unwind into C: a panic is logged.
//
//export goNexarFailure
func goNexarFailure(handle C.uintptr_t, rank C.uint32_t, cause C.nexar_status_t) {
	defer func() {
		if r := recover(); r != nil {
			log.Printf("nexar: panic in the Go failure callback for rank %d: %v", uint32(rank), r)
		}
	}()
	slot := cgo.Handle(handle).Value().(*failureSlot)
	if fn := slot.fn.Load(); fn != nil {
		(*fn)(int(rank), Status(cause))
	}
}
