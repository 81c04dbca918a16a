package nexar

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"runtime"
	"unsafe"
)

// AllReduceBucketed reduces every slice of tensors element-wise with op over
// every rank, in place, fused into buckets of about bucketBytes (0:
// NEXAR_BUCKET_BYTES, default 25 MiB) that are reduced while the next ones
// are packed (nexar_allreduce_bucketed). Every rank passes slices of the same
// lengths in the same order. The slices are staged in C memory for the call
// (one copy in, one out), as on the cancellable path of every operation.
func AllReduceBucketed[T Numeric](ctx context.Context, c *Comm, tensors [][]T, op Op,
	bucketBytes int) error {
	const name = "allreduce_bucketed"
	if bucketBytes < 0 {
		return invalid(c, name, "bucketBytes %d is negative", bucketBytes)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	var z T
	esize := int(unsafe.Sizeof(z))
	total := 0
	for _, t := range tensors {
		total += len(t) * esize
	}
	headBytes := len(tensors) * int(unsafe.Sizeof(C.nexar_tensor_t{}))
	var head *C.nexar_tensor_t
	return c.runAsync(ctx, name, headBytes+total,
		func(buf unsafe.Pointer) {
			// The C array of tensors first, then each tensor's data.
			head = (*C.nexar_tensor_t)(buf)
			descs := unsafe.Slice(head, len(tensors))
			at := unsafe.Add(buf, headBytes)
			for i, t := range tensors {
				p, n := raw(t)
				descs[i].buf = at
				descs[i].count = C.size_t(len(t))
				copy(bytesOf(at, n), bytesOf(p, n))
				at = unsafe.Add(at, n)
			}
		},
		func(h *C.nexar_comm_t, p *C.gx_pending, e *C.gx_err) C.nexar_status_t {
			return C.gx_allreduce_bucketed(h, head, C.size_t(len(tensors)),
				C.nexar_dtype_t(dtypeOf[T]()), C.nexar_op_t(op), C.size_t(bucketBytes), p, e)
		},
		func(p *C.gx_pending) {
			at := unsafe.Add(p.buf, headBytes)
			for _, t := range tensors {
				dst, n := raw(t)
				copy(bytesOf(dst, n), bytesOf(at, n))
				at = unsafe.Add(at, n)
			}
		})
}

// CompressKind selects a Compressor's rule.
type CompressKind int32

const (
	// TopK keeps the k largest magnitudes, sent with their positions.
	TopK CompressKind = C.NEXAR_COMPRESS_TOPK
	// RandomK keeps k positions drawn from a seed every rank shares, so only
	// the values travel.
	RandomK CompressKind = C.NEXAR_COMPRESS_RANDOMK
)

// Compressor is a gradient compressor with error feedback
// (nexar_compressor_t): each call keeps k = max(1, ratio*count) elements of
// input plus residual and keeps the rest as the next residual. It serves one
// call at a time. Close releases it.
type Compressor struct {
	z     *C.nexar_compressor_t
	count int
	dtype int32
}

// NewCompressor makes a compressor for slices of count elements of T
// (float32, float64, Float16 or BFloat16) with nexar_compressor_create.
func NewCompressor[T Numeric](kind CompressKind, ratio float64, count int,
	seed uint64) (*Compressor, error) {
	z := &Compressor{count: count, dtype: dtypeOf[T]()}
	if count < 0 {
		return nil, newError("compressor_create", -1, ErrInvalidArgument, -1, "count is negative")
	}
	e := newErr()
	st := C.gx_compressor_create(&z.z, C.int32_t(kind), C.double(ratio), C.size_t(count),
		C.nexar_dtype_t(z.dtype), C.uint64_t(seed), &e)
	if err := takeErr("compressor_create", -1, st, &e); err != nil {
		return nil, err
	}
	runtime.SetFinalizer(z, (*Compressor).Close)
	return z, nil
}

// Reset zeroes the residual (nexar_compressor_reset).
func (z *Compressor) Reset() {
	if z.z != nil {
		C.nexar_compressor_reset(z.z)
	}
}

// Close releases the compressor; it is safe to call more than once.
func (z *Compressor) Close() {
	if z.z != nil {
		C.nexar_compressor_destroy(z.z)
		z.z = nil
	}
}

// AllReduceCompressed sets out to the sum over ranks of each rank's
// compressed in (plus its residual), zero where no rank sent an element
// (nexar_allreduce_compressed). in and out have the compressor's count and
// element type; they may be the same slice. Every rank's compressor has the
// same parameters (ErrMismatch otherwise).
func AllReduceCompressed[T Numeric](ctx context.Context, c *Comm, in, out []T,
	z *Compressor) error {
	const name = "allreduce_compressed"
	if z == nil || z.z == nil {
		return invalid(c, name, "the compressor is nil or closed")
	}
	if len(in) != z.count || len(out) != z.count || dtypeOf[T]() != z.dtype {
		return invalid(c, name, "in (%d) and out (%d) must be the compressor's %d elements of "+
			"its type", len(in), len(out), z.count)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	s, n := raw(in)
	var cs, cr unsafe.Pointer
	err := c.runAsync(ctx, name, 2*n,
		func(buf unsafe.Pointer) {
			cs, cr = buf, unsafe.Add(buf, n)
			copy(bytesOf(cs, n), bytesOf(s, n))
		},
		func(h *C.nexar_comm_t, p *C.gx_pending, e *C.gx_err) C.nexar_status_t {
			return C.gx_allreduce_compressed(h, cs, cr, C.size_t(len(in)),
				C.nexar_dtype_t(z.dtype), z.z, p, e)
		},
		func(*C.gx_pending) {
			d, _ := raw(out)
			copy(bytesOf(d, n), bytesOf(cr, n))
		})
	runtime.KeepAlive(z)
	return err
}
