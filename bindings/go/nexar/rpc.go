package nexar

/*
#include "shim.h"
#include <stdlib.h>
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"runtime/cgo"
	"unsafe"
)

// Handler serves one RPC function: src is the calling rank, req the request
// (a copy the handler may keep). It returns the response (nil: an empty one)
// or an error, which fails the caller's Call with ErrRPCFailed whose message
// carries err.Error(). A panic is recovered and fails the call the same way,
// naming the panic; it never unwinds into nexar.
//
// Handlers run on nexar's completion thread of the serving communicator, one
// at a time per engine; while one runs, that engine's other completions
// (including those of operations started with a cancellable context) wait.
// A handler must return promptly and must not wait for a nexar operation:
// a blocking one (context.Background) fails with ErrWouldDeadlock, and
// waiting on a cancellable one would wait for the very thread running the
// handler (until its context ends). Start such work on a goroutine instead.
type Handler func(src uint32, req []byte) ([]byte, error)

// Register serves fnID on this communicator with handler
// (nexar_rpc_register); registering again replaces the handler, and a nil
// handler unregisters (like Unregister). Once Register returns, the handler
// it replaced is not running and never runs again. Requests for an fnID
// without a handler fail at the caller with ErrRPCNotRegistered. Handlers are
// released by Close.
func (c *Comm) Register(fnID uint32, handler Handler) error {
	const op = "rpc_register"
	c.rpcMu.Lock()
	defer c.rpcMu.Unlock()
	var fresh cgo.Handle
	if err := c.callC(op, func(h *C.nexar_comm_t, e *C.gx_err) C.nexar_status_t {
		if handler != nil {
			fresh = cgo.NewHandle(handler)
		}
		return C.gx_rpc_register(h, C.uint32_t(fnID), C.uintptr_t(fresh), e)
	}); err != nil {
		if fresh != 0 {
			fresh.Delete()
		}
		return err
	}
	if old, ok := c.handlers[fnID]; ok {
		old.Delete() // nexar no longer calls it
		delete(c.handlers, fnID)
	}
	if fresh != 0 {
		c.handlers[fnID] = fresh
	}
	return nil
}

// Unregister stops serving fnID (Register with a nil handler).
func (c *Comm) Unregister(fnID uint32) error { return c.Register(fnID, nil) }

// Call calls fnID on rank target (this rank too) with req and returns the
// response (nexar_rpc_call). Failures: ErrRPCNotRegistered (target does not
// serve fnID), ErrRPCFailed (its handler failed; the message says why),
// ErrTimeout (no response within the RPC timeout), ErrPeerFailed,
// ErrAborted, ErrClosed.
func (c *Comm) Call(ctx context.Context, target int, fnID uint32, req []byte) ([]byte, error) {
	const op = "rpc_call"
	to, err := c.checkRank(op, "target", target)
	if err != nil {
		return nil, err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	var reqp unsafe.Pointer
	if len(req) > 0 {
		reqp = unsafe.Pointer(&req[0])
	}
	if ctx.Done() == nil {
		var resp *C.nexar_rpc_response_t // Go memory holding a C pointer
		if err := c.callC(op, func(h *C.nexar_comm_t, e *C.gx_err) C.nexar_status_t {
			return C.gx_rpc_call(h, to, C.uint32_t(fnID), reqp, C.size_t(len(req)), &resp, nil, e)
		}); err != nil {
			C.nexar_rpc_response_free(resp)
			return nil, err
		}
		out := responseBytes(resp)
		C.nexar_rpc_response_free(resp)
		return out, nil
	}
	var out []byte
	err = c.runAsync(ctx, op, len(req),
		func(buf unsafe.Pointer) { copy(bytesOf(buf, len(req)), req) },
		func(h *C.nexar_comm_t, p *C.gx_pending, e *C.gx_err) C.nexar_status_t {
			return C.gx_rpc_call(h, to, C.uint32_t(fnID), p.buf, C.size_t(len(req)), &p.response, p, e)
		},
		func(p *C.gx_pending) { out = responseBytes(p.response) })
	return out, err
}

// responseBytes copies a response into Go memory (never nil).
func responseBytes(r *C.nexar_rpc_response_t) []byte {
	n := int(C.nexar_rpc_response_size(r))
	out := make([]byte, n)
	copy(out, bytesOf(C.nexar_rpc_response_data(r), n))
	return out
}

// setReplyError puts msg into a handler's reply.
func setReplyError(reply *C.nexar_rpc_reply_t, msg string) {
	cs := C.CString(msg)
	C.nexar_rpc_reply_set_error(reply, cs)
	C.free(unsafe.Pointer(cs))
}

// goNexarServe runs a Go Handler for one request, on nexar's completion
// thread (through gx_serve in shim.c). Nothing may unwind into C: a panic
// becomes NEXAR_ERR_INTERNAL with its text in the reply.
//
//export goNexarServe
func goNexarServe(handle C.uintptr_t, src, fnID C.uint32_t, req unsafe.Pointer, n C.size_t,
	reply *C.nexar_rpc_reply_t) (status C.nexar_status_t) {
	defer func() {
		if r := recover(); r != nil {
			setReplyError(reply, fmt.Sprintf("panic in the Go handler of fn %d: %v", uint32(fnID), r))
			status = C.NEXAR_ERR_INTERNAL
		}
	}()
	handler := cgo.Handle(handle).Value().(Handler)
	request := make([]byte, int(n))
	copy(request, bytesOf(req, int(n)))
	resp, err := handler(uint32(src), request)
	if err != nil {
		st := ErrInternal
		var s Status
		if errors.As(err, &s) && s < 0 {
			st = s // a nexar status passes on
		}
		setReplyError(reply, err.Error())
		return C.nexar_status_t(st)
	}
	if len(resp) == 0 {
		return C.NEXAR_OK
	}
	return C.gx_rpc_reply(reply, unsafe.Pointer(&resp[0]), C.size_t(len(resp)))
}
