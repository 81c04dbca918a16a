package nexar

/*
#include "shim.h"
#include <stdlib.h>
*/
import "C"

import (
	"context"
	"fmt"
	"log"
	"runtime/cgo"
	"sync"
	"sync/atomic"
	"unsafe"
)

// How an operation runs (see the package documentation, "Cancellation"):
//
//   - ctx.Done() == nil (context.Background, context.TODO): the fast path.
//     nexar is called with done == NULL on the caller's Go memory and blocks
//     until the operation has completed. nexar does not keep the pointers
//     after it returns, which the cgo pointer rules allow.
//   - otherwise: the cancellable path. The data is staged in C memory, the
//     operation is started with a completion callback (the C trampoline
//     gx_done calls goNexarDone) and this goroutine selects on the completion
//     and ctx.Done(). Results are copied back after a completion; when ctx
//     ends first the caller gets ctx.Err() at once and goNexarDone frees the
//     C memory whenever nexar completes the operation.

// opArgs describes one collective or point-to-point operation on Go memory.
// Byte counts are for the Go buffers; count is what nexar gets (elements, or
// bytes for send and recv).
type opArgs struct {
	name  string
	kind  int            // gxAllreduce, ...
	send  unsafe.Pointer // Go memory nexar reads, or nil; == recv means in place
	sendN int
	recv  unsafe.Pointer // Go memory nexar writes, or nil
	recvN int
	count int
	dtype int32
	redop int32
	peer  uint32 // root, dest or src
	tag   uint32
}

// The operation kinds of shim.h, for the generic (cgo-free) wrappers in ops.go.
const (
	gxAllreduce     = C.GX_ALLREDUCE
	gxBroadcast     = C.GX_BROADCAST
	gxReduce        = C.GX_REDUCE
	gxAllgather     = C.GX_ALLGATHER
	gxReduceScatter = C.GX_REDUCE_SCATTER
	gxAlltoall      = C.GX_ALLTOALL
	gxGather        = C.GX_GATHER
	gxScatter       = C.GX_SCATTER
	gxScan          = C.GX_SCAN
	gxExscan        = C.GX_EXSCAN
	gxBarrier       = C.GX_BARRIER
	gxSend          = C.GX_SEND
	gxRecv          = C.GX_RECV
)

// bytesOf views n bytes of memory at p (Go or C) as a slice.
func bytesOf(p unsafe.Pointer, n int) []byte {
	if p == nil || n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(p), n)
}

// run runs a on the fast or the cancellable path, as ctx allows.
func (c *Comm) run(ctx context.Context, a *opArgs) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if ctx.Done() == nil {
		return c.callC(a.name, func(h *C.nexar_comm_t, e *C.gx_err) C.nexar_status_t {
			return C.gx_op(C.int(a.kind), h, a.send, a.recv, C.size_t(a.count), C.nexar_dtype_t(a.dtype),
				C.nexar_op_t(a.redop), C.uint32_t(a.peer), C.uint32_t(a.tag), nil, e)
		})
	}

	inPlace := a.send != nil && a.send == a.recv
	total := a.recvN
	if !inPlace {
		total += a.sendN
	}
	var cs, cr unsafe.Pointer // the staged buffers nexar gets
	return c.runAsync(ctx, a.name, total,
		func(buf unsafe.Pointer) {
			if inPlace {
				cs, cr = buf, buf
				copy(bytesOf(buf, a.recvN), bytesOf(a.send, a.sendN))
				return
			}
			if a.send != nil {
				cs = buf
				copy(bytesOf(buf, a.sendN), bytesOf(a.send, a.sendN))
			}
			if a.recv != nil {
				cr = unsafe.Add(buf, a.sendN)
			}
		},
		func(h *C.nexar_comm_t, p *C.gx_pending, e *C.gx_err) C.nexar_status_t {
			return C.gx_op(C.int(a.kind), h, cs, cr, C.size_t(a.count), C.nexar_dtype_t(a.dtype),
				C.nexar_op_t(a.redop), C.uint32_t(a.peer), C.uint32_t(a.tag), p, e)
		},
		func(*C.gx_pending) {
			if a.recv != nil {
				copy(bytesOf(a.recv, a.recvN), bytesOf(cr, a.recvN))
			}
		})
}

// waiter is the Go side of one operation on the cancellable path, reached
// from nexar's completion thread through a cgo.Handle in gx_pending.handle.
type waiter struct {
	op        string // the operation, for the message of a panic in goNexarDone
	mu        sync.Mutex
	ch        chan struct{} // closed on completion, unless abandoned
	done      bool          // the completion arrived
	abandoned bool          // the caller left (ctx ended): the callback frees
	status    C.nexar_status_t
	failed    int
	msg       string
}

// livePending counts gx_pending records not yet freed (for the tests).
var livePending atomic.Int64

// newPending allocates a gx_pending (and bufBytes of staging memory at
// p.buf) with a new waiter for op.
func newPending(op string, bufBytes int) (*C.gx_pending, *waiter, bool) {
	p := (*C.gx_pending)(C.calloc(1, C.size_t(unsafe.Sizeof(C.gx_pending{}))))
	if p == nil {
		return nil, nil, false
	}
	if bufBytes > 0 {
		p.buf = C.malloc(C.size_t(bufBytes))
		if p.buf == nil {
			C.free(unsafe.Pointer(p))
			return nil, nil, false
		}
	}
	w := &waiter{op: op, ch: make(chan struct{}), failed: -1}
	p.handle = C.uintptr_t(cgo.NewHandle(w))
	livePending.Add(1)
	return p, w, true
}

// freePending releases p and everything it still owns: staging memory, an
// RPC response, a split's new communicator (destroyed on a goroutine of its
// own, never on nexar's completion thread).
func freePending(p *C.gx_pending) {
	if p.response != nil {
		C.nexar_rpc_response_free(p.response)
	}
	if p.split_out != nil {
		orphan := p.split_out
		go func() { C.nexar_comm_destroy(orphan) }()
	}
	C.free(p.buf)
	cgo.Handle(p.handle).Delete()
	C.free(unsafe.Pointer(p))
	livePending.Add(-1)
}

// doneHook, when set, runs in goNexarDone with the operation's name before
// its outcome is recorded (the tests make it panic).
var doneHook atomic.Pointer[func(op string)]

// goNexarDone is every completion of the cancellable path, on nexar's
// completion thread (through gx_done in shim.c). It must not block: it
// records the outcome and wakes the caller, or frees everything when the
// caller has left. Nothing may unwind into C: a panic is recovered by
// donePanicked.
//
//export goNexarDone
func goNexarDone(p *C.gx_pending, status C.nexar_status_t, failed C.int32_t, msg *C.char) {
	defer func() {
		if r := recover(); r != nil {
			donePanicked(p, r)
		}
	}()
	w := cgo.Handle(p.handle).Value().(*waiter)
	if h := doneHook.Load(); h != nil {
		(*h)(w.op)
	}
	w.complete(p, status, int(failed), C.GoString(msg))
}

// complete records the outcome and wakes the caller, or frees p when the
// caller has left. It reports false, and changes nothing, when an outcome
// was recorded already.
func (w *waiter) complete(p *C.gx_pending, status C.nexar_status_t, failed int, msg string) bool {
	w.mu.Lock()
	defer w.mu.Unlock() // held through a panic too
	if w.done {
		return false
	}
	w.status, w.failed, w.msg = status, failed, msg
	w.done = true
	if w.abandoned {
		freePending(p) // nobody else holds p or w any more
	} else {
		close(w.ch)
	}
	return true
}

// donePanicked handles a panic in goNexarDone (a bug in the binding): the
// operation completes with ErrInternal naming the panic (its caller gets
// it, or it is freed when the caller has left). When its outcome was
// recorded already, or completing it panics too, the panic is logged.
func donePanicked(p *C.gx_pending, r any) {
	msg := fmt.Sprintf("panic in the Go completion callback: %v", r)
	defer func() {
		if r2 := recover(); r2 != nil {
			log.Printf("nexar: %s; completing the operation panicked too: %v", msg, r2)
		}
	}()
	w := cgo.Handle(p.handle).Value().(*waiter)
	if !w.complete(p, C.NEXAR_ERR_INTERNAL, -1, msg) {
		log.Printf("nexar: %s of %s, after its outcome was recorded", msg, w.op)
	}
}

// runAsync runs one operation on the cancellable path: bufBytes of C memory
// at p.buf, filled by stage (may be nil); submit starts the operation with p
// as its user data; finish (may be nil) runs after a successful completion,
// before p is freed, to take the results out.
func (c *Comm) runAsync(ctx context.Context, op string, bufBytes int,
	stage func(buf unsafe.Pointer),
	submit func(h *C.nexar_comm_t, p *C.gx_pending, e *C.gx_err) C.nexar_status_t,
	finish func(p *C.gx_pending)) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("nexar: %s on rank %d not started: %w", op, c.rank, err)
	}
	p, w, ok := newPending(op, bufBytes)
	if !ok {
		return newError(op, c.rank, ErrNoMemory, -1,
			fmt.Sprintf("cannot allocate %d bytes to stage the operation", bufBytes))
	}
	if stage != nil {
		stage(p.buf)
	}
	if err := c.callC(op, func(h *C.nexar_comm_t, e *C.gx_err) C.nexar_status_t {
		return submit(h, p, e)
	}); err != nil {
		freePending(p) // closed or refused: the callback never runs
		return err
	}

	select {
	case <-w.ch:
	case <-ctx.Done():
		w.mu.Lock()
		if !w.done {
			w.abandoned = true
			w.mu.Unlock()
			return fmt.Errorf("nexar: %s on rank %d: %w (the operation goes on in nexar; "+
				"its results are dropped)", op, c.rank, ctx.Err())
		}
		w.mu.Unlock() // completed meanwhile: report the outcome
	}
	defer freePending(p)
	if w.status != C.NEXAR_OK {
		return newError(op, c.rank, Status(w.status), w.failed, w.msg)
	}
	if finish != nil {
		finish(p)
	}
	return nil
}
