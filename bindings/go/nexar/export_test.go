package nexar

import "sync/atomic"

// LivePending is the number of cancellable-path records not yet freed.
func LivePending() int64 { return livePending.Load() }

// FinalizerCloses is the number of communicators the garbage collector closed.
func FinalizerCloses() int64 { return finalizerCloses.Load() }

// InFlight is the number of calls inside nexar on c right now.
func InFlight(c *Comm) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inflight
}

// PanicInCompletion makes goNexarDone panic once, in the next completion of
// an operation named op, before the outcome is recorded. The returned func
// removes the hook and reports whether it panicked.
func PanicInCompletion(op string) (undo func() (fired bool)) {
	var fired atomic.Bool
	f := func(name string) {
		if name == op && fired.CompareAndSwap(false, true) {
			panic("test panic in the completion of " + op)
		}
	}
	doneHook.Store(&f)
	return func() bool {
		doneHook.Store(nil)
		return fired.Load()
	}
}

// DtypeOf is the NEXAR_DTYPE_* that T's slices are sent as.
func DtypeOf[T Numeric]() int32 { return dtypeOf[T]() }
