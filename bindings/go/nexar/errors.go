package nexar

/*
#include "shim.h"
#include <stdlib.h>
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// Status is a nexar status code (nexar_status_t). Its values are those of
// include/nexar.h and never change. Every non-zero Status is an error, so the
// constants below work as sentinels:
//
//	if errors.Is(err, nexar.ErrTimeout) { ... }
type Status int32

// The NEXAR_ERR_* codes of include/nexar.h.
const (
	OK                  Status = C.NEXAR_OK                     // success (never returned as an error)
	ErrInvalidArgument  Status = C.NEXAR_ERR_INVALID_ARGUMENT   // an argument is wrong by itself
	ErrInvalidRank      Status = C.NEXAR_ERR_INVALID_RANK       // a rank outside the communicator
	ErrSizeMismatch     Status = C.NEXAR_ERR_SIZE_MISMATCH      // a message of another size than the receive
	ErrTimeout          Status = C.NEXAR_ERR_TIMEOUT            // nexar's own timeout passed
	ErrPeerFailed       Status = C.NEXAR_ERR_PEER_FAILED        // a peer died or its connection was lost
	ErrAborted          Status = C.NEXAR_ERR_ABORTED            // the communicator was aborted (here or by a peer)
	ErrClosed           Status = C.NEXAR_ERR_CLOSED             // the communicator is closed
	ErrMismatch         Status = C.NEXAR_ERR_MISMATCH           // ranks issued different collectives
	ErrTLS              Status = C.NEXAR_ERR_TLS                // TLS failure
	ErrAuth             Status = C.NEXAR_ERR_AUTH               // cluster token mismatch
	ErrProtocol         Status = C.NEXAR_ERR_PROTOCOL           // a peer broke the protocol
	ErrNoMemory         Status = C.NEXAR_ERR_NO_MEMORY          // out of memory
	ErrIO               Status = C.NEXAR_ERR_IO                 // socket or file failure
	ErrUnsupported      Status = C.NEXAR_ERR_UNSUPPORTED        // not supported here
	ErrNotFound         Status = C.NEXAR_ERR_NOT_FOUND          // nothing found (e.g. InitFromEnv's environment)
	ErrWouldDeadlock    Status = C.NEXAR_ERR_WOULD_DEADLOCK     // a blocking call inside a callback or RPC handler
	ErrInternal         Status = C.NEXAR_ERR_INTERNAL           // a bug, or a panic in a Go RPC handler or completion callback
	ErrRPCNotRegistered Status = C.NEXAR_ERR_RPC_NOT_REGISTERED // the target serves no handler for that function
	ErrRPCFailed        Status = C.NEXAR_ERR_RPC_FAILED         // the target's handler returned an error
	ErrRevoked          Status = C.NEXAR_ERR_REVOKED            // the communicator was revoked, here or by a peer
	ErrExcluded         Status = C.NEXAR_ERR_EXCLUDED           // the peers declared this process failed and removed it
)

var statusNames = map[Status]string{
	OK:                  "NEXAR_OK",
	ErrInvalidArgument:  "NEXAR_ERR_INVALID_ARGUMENT",
	ErrInvalidRank:      "NEXAR_ERR_INVALID_RANK",
	ErrSizeMismatch:     "NEXAR_ERR_SIZE_MISMATCH",
	ErrTimeout:          "NEXAR_ERR_TIMEOUT",
	ErrPeerFailed:       "NEXAR_ERR_PEER_FAILED",
	ErrAborted:          "NEXAR_ERR_ABORTED",
	ErrClosed:           "NEXAR_ERR_CLOSED",
	ErrMismatch:         "NEXAR_ERR_MISMATCH",
	ErrTLS:              "NEXAR_ERR_TLS",
	ErrAuth:             "NEXAR_ERR_AUTH",
	ErrProtocol:         "NEXAR_ERR_PROTOCOL",
	ErrNoMemory:         "NEXAR_ERR_NO_MEMORY",
	ErrIO:               "NEXAR_ERR_IO",
	ErrUnsupported:      "NEXAR_ERR_UNSUPPORTED",
	ErrNotFound:         "NEXAR_ERR_NOT_FOUND",
	ErrWouldDeadlock:    "NEXAR_ERR_WOULD_DEADLOCK",
	ErrInternal:         "NEXAR_ERR_INTERNAL",
	ErrRPCNotRegistered: "NEXAR_ERR_RPC_NOT_REGISTERED",
	ErrRPCFailed:        "NEXAR_ERR_RPC_FAILED",
	ErrRevoked:          "NEXAR_ERR_REVOKED",
	ErrExcluded:         "NEXAR_ERR_EXCLUDED",
}

// String returns the status's C name, e.g. "NEXAR_ERR_TIMEOUT".
func (s Status) String() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("nexar status %d", int32(s))
}

// Error returns nexar's description of the status (nexar_status_str), e.g.
// "NEXAR_ERR_TIMEOUT: ...".
func (s Status) Error() string {
	return C.GoString(C.nexar_status_str(C.nexar_status_t(s)))
}

// Error is a failed nexar operation. errors.Is(err, nexar.ErrTimeout) (any
// Status) tells its status; errors.As(err, &e) with e *nexar.Error gives the
// details. Its text names the operation, the rank that ran it, the status,
// the rank to blame and nexar's message:
//
//	allreduce on rank 0 failed (NEXAR_ERR_TIMEOUT) [rank 2]: ...
type Error struct {
	Op         string // the operation: "allreduce", "recv", "rpc_call", "bootstrap_local", ...
	Rank       int    // the rank of the communicator that ran it, -1 outside one
	Status     Status // the NEXAR_ERR_* code
	FailedRank int    // the rank that failed or did not answer, -1 when unknown
	Message    string // nexar's own words (the completion's message or nexar_last_error_message)
}

// Error formats the failure as "OP on rank R failed (STATUS) [rank F]: MESSAGE".
func (e *Error) Error() string {
	where := e.Op
	if where == "" {
		where = "nexar"
	}
	if e.Rank >= 0 {
		where = fmt.Sprintf("%s on rank %d", where, e.Rank)
	}
	blame := ""
	if e.FailedRank >= 0 {
		blame = fmt.Sprintf(" [rank %d]", e.FailedRank)
	}
	msg := e.Message
	if msg == "" {
		msg = e.Status.Error()
	}
	return fmt.Sprintf("%s failed (%s)%s: %s", where, e.Status.String(), blame, msg)
}

// Is reports whether target is this error's Status, so that
// errors.Is(err, nexar.ErrTimeout) works.
func (e *Error) Is(target error) bool {
	s, ok := target.(Status)
	return ok && s == e.Status
}

// Unwrap returns the Status, so that errors.As(err, &status) works too.
func (e *Error) Unwrap() error { return e.Status }

// newError builds an *Error; rank is the communicator's rank or -1.
func newError(op string, rank int, st Status, failed int, msg string) *Error {
	return &Error{Op: op, Rank: rank, Status: st, FailedRank: failed, Message: msg}
}

// takeErr turns a wrapper's status and gx_err into an error (nil for OK) and
// frees the copied message.
func takeErr(op string, rank int, st C.nexar_status_t, e *C.gx_err) error {
	msg := ""
	if e.msg != nil {
		msg = C.GoString(e.msg)
		C.free(unsafe.Pointer(e.msg))
		e.msg = nil
	}
	if st == C.NEXAR_OK {
		return nil
	}
	failed := -1
	if e.failed_rank >= 0 {
		failed = int(e.failed_rank)
	}
	return newError(op, rank, Status(st), failed, msg)
}

// newErr is an empty gx_err (no message, no rank to blame).
func newErr() C.gx_err { return C.gx_err{failed_rank: -1} }
