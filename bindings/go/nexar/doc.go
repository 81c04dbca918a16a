// Package nexar is the Go binding of nexar, a distributed communication
// runtime (collectives, point-to-point, RPC) over encrypted QUIC. It calls
// the C ABI of libnexar.so.0 (include/nexar.h) through cgo and is found with
// pkg-config ("#cgo pkg-config: nexar").
//
// # Communicators
//
// InitFromEnv joins the cluster the environment describes (a nexar seed,
// torchrun, Open MPI, PMI, Slurm); Join joins through a seed named in its
// options (StartSeed runs one in this process); BootstrapLocal makes a whole
// world in one process (tests, examples); Comm.Split divides one. Close
// releases a communicator.
//
// # Operations
//
// Go methods cannot have type parameters, so the operations on numeric
// slices are functions taking the communicator after the context:
//
//	err := nexar.AllReduce(ctx, comm, grad, nexar.Sum)
//
// The others (Barrier, Split, Call, Register, ...) are methods. Failures are
// *Error values; errors.Is(err, nexar.ErrTimeout) (or any Status) tells
// which.
//
// # Cancellation
//
// Every operation takes a context.Context.
//
// When ctx can never end (ctx.Done() == nil: context.Background,
// context.TODO), the operation runs on the fast path: nexar is called with
// done == NULL directly on the slice, blocking the goroutine (and its OS
// thread) until nexar completes it. No copy is made; nexar's own timeouts
// (WithCollectiveTimeout, ...) bound the wait.
//
// Otherwise it runs on the cancellable path: its input is copied into C
// memory, the operation is started with a completion callback, and the
// goroutine waits for either the completion or ctx. On completion the
// results are copied back into the slice. When ctx ends first, the call
// returns at once with an error wrapping ctx.Err() (errors.Is(err,
// context.DeadlineExceeded) or context.Canceled) that names the operation;
// the operation goes on inside nexar (a collective still needs every rank,
// a posted Recv still consumes the next matching message), the slice is
// never written, its results are dropped, and the C memory is freed when
// nexar completes it. Cancelling is local: the other ranks are not told.
// A ctx that has already ended starts nothing.
//
// The cancellable path costs a malloc and two copies of the data (in before,
// out after: 2×len bytes for an in-place collective, len(in)+len(out) for
// the others), plus a callback through cgo; it is what lets Go memory never
// stay in C's hands after a cgo call returns (the cgo pointer rules; Go 1.19
// has no runtime.Pinner). For large buffers and no need to cancel, prefer
// context.Background() and nexar's timeouts.
//
// # Threads
//
// Everything may be called from any goroutine, several at once. Collectives
// on one communicator must be issued in the same order on every rank. A
// blocking (fast path) call holds an OS thread for its duration; the
// cancellable path holds none while it waits. Completions and RPC handlers
// run on nexar's completion thread (a C thread calling into Go); see Handler
// for what a handler may do.
//
// # Logging
//
// nexar writes its warnings and errors to stderr; SetLogHandler hands them
// to a Go function instead (e.g. to log/slog).
package nexar
