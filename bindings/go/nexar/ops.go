package nexar

import (
	"context"
	"fmt"
	"reflect"
	"unsafe"
)

// Numeric is the element types nexar reduces and moves: each maps to a
// NEXAR_DTYPE_* (float32 F32, float64 F64, Float16 F16, BFloat16 BF16, int8
// I8, int32 I32, int64 I64, uint8 and byte U8, uint32 U32, uint64 U64).
// Named types over the built-in ones work too (celsius float32 is F32);
// Float16 and BFloat16 are taken as they are, since both are uint16
// underneath: a type defined over one of them is not Numeric, and neither is
// uint16 (nexar has no 16-bit integer type). Generic code over Numeric that
// does arithmetic on a Float16 or BFloat16 does it on the bits.
type Numeric interface {
	~float32 | ~float64 | Float16 | BFloat16 | ~int8 | ~int32 | ~int64 | ~uint8 | ~uint32 | ~uint64
}

// Op is a reduction operator (nexar_op_t).
type Op int32

// The reduction operators of include/nexar.h.
const (
	Sum  Op = 0 // NEXAR_OP_SUM
	Prod Op = 1 // NEXAR_OP_PROD
	Min  Op = 2 // NEXAR_OP_MIN
	Max  Op = 3 // NEXAR_OP_MAX
)

// String returns the operator's name: "sum", "prod", "min" or "max".
func (o Op) String() string {
	switch o {
	case Sum:
		return "sum"
	case Prod:
		return "prod"
	case Min:
		return "min"
	case Max:
		return "max"
	}
	return fmt.Sprintf("Op(%d)", int32(o))
}

// The NEXAR_DTYPE_* values (include/nexar.h; they never change).
const (
	dtF32  int32 = 0
	dtF64  int32 = 1
	dtF16  int32 = 2
	dtBF16 int32 = 3
	dtI8   int32 = 4
	dtI32  int32 = 5
	dtI64  int32 = 6
	dtU8   int32 = 7
	dtU32  int32 = 8
	dtU64  int32 = 9
)

// dtypeOf maps T to its NEXAR_DTYPE_*.
func dtypeOf[T Numeric]() int32 {
	var z T
	switch any(z).(type) { // by type first: both are uint16 underneath
	case Float16:
		return dtF16
	case BFloat16:
		return dtBF16
	}
	switch reflect.TypeOf(z).Kind() { // by kind: named types over these count too
	case reflect.Float32:
		return dtF32
	case reflect.Float64:
		return dtF64
	case reflect.Int8:
		return dtI8
	case reflect.Int32:
		return dtI32
	case reflect.Int64:
		return dtI64
	case reflect.Uint8:
		return dtU8
	case reflect.Uint32:
		return dtU32
	case reflect.Uint64:
		return dtU64
	}
	panic("nexar: dtypeOf: a Numeric kind without a NEXAR_DTYPE")
}

// raw returns the address of s's first element (nil when empty) and its size in bytes.
func raw[T Numeric](s []T) (unsafe.Pointer, int) {
	if len(s) == 0 {
		return nil, 0
	}
	var z T
	return unsafe.Pointer(&s[0]), len(s) * int(unsafe.Sizeof(z))
}

func invalid(c *Comm, op, format string, args ...any) error {
	return newError(op, c.rank, ErrInvalidArgument, -1, fmt.Sprintf(format, args...))
}

// inPlace runs a collective whose one buffer is read and written everywhere.
func inPlace[T Numeric](ctx context.Context, c *Comm, name string, kind int, buf []T, op Op, root int) error {
	peer, err := c.checkRank(name, "root", root)
	if err != nil {
		return err
	}
	p, n := raw(buf)
	return c.run(ctx, &opArgs{name: name, kind: kind, send: p, sendN: n, recv: p, recvN: n,
		count: len(buf), dtype: dtypeOf[T](), redop: int32(op), peer: uint32(peer)})
}

// AllReduce reduces buf element-wise with op over every rank, in place: on
// return every rank's buf holds the result (nexar_allreduce). Float results
// are bit-identical on every rank.
func AllReduce[T Numeric](ctx context.Context, c *Comm, buf []T, op Op) error {
	return inPlace(ctx, c, "allreduce", gxAllreduce, buf, op, 0)
}

// Broadcast copies root's buf into every other rank's buf (nexar_broadcast).
// Every rank passes a buf of the same length.
func Broadcast[T Numeric](ctx context.Context, c *Comm, buf []T, root int) error {
	return inPlace(ctx, c, "broadcast", gxBroadcast, buf, Sum, root)
}

// Reduce reduces buf element-wise with op over every rank into root's buf,
// in place (nexar_reduce). Other ranks' buf is only read.
func Reduce[T Numeric](ctx context.Context, c *Comm, buf []T, op Op, root int) error {
	peer, err := c.checkRank("reduce", "root", root)
	if err != nil {
		return err
	}
	p, n := raw(buf)
	a := &opArgs{name: "reduce", kind: gxReduce, send: p, sendN: n, count: len(buf),
		dtype: dtypeOf[T](), redop: int32(op), peer: uint32(peer)}
	if root == c.rank {
		a.recv, a.recvN = p, n // in place on the root
	}
	return c.run(ctx, a)
}

// Scan is the inclusive prefix reduction over ranks, in place: rank r's buf
// becomes buf(0) op ... op buf(r) (nexar_scan).
func Scan[T Numeric](ctx context.Context, c *Comm, buf []T, op Op) error {
	return inPlace(ctx, c, "scan", gxScan, buf, op, 0)
}

// Exscan is the exclusive prefix reduction over ranks, in place: rank r > 0
// gets buf(0) op ... op buf(r-1); rank 0's buf is left as it was (nexar_exscan).
func Exscan[T Numeric](ctx context.Context, c *Comm, buf []T, op Op) error {
	if c.rank == 0 {
		p, n := raw(buf)
		return c.run(ctx, &opArgs{name: "exscan", kind: gxExscan, send: p, sendN: n,
			count: len(buf), dtype: dtypeOf[T](), redop: int32(op)})
	}
	return inPlace(ctx, c, "exscan", gxExscan, buf, op, 0)
}

// AllGather gathers every rank's in into every rank's out, in rank order:
// out[r*len(in) : (r+1)*len(in)] is rank r's in (nexar_allgather).
// len(out) must be Size()*len(in); in and out must not overlap.
func AllGather[T Numeric](ctx context.Context, c *Comm, in, out []T) error {
	if len(out) != len(in)*c.size {
		return invalid(c, "allgather", "out holds %d elements, %d are needed (len(in) %d × size %d)",
			len(out), len(in)*c.size, len(in), c.size)
	}
	s, sn := raw(in)
	r, rn := raw(out)
	return c.run(ctx, &opArgs{name: "allgather", kind: gxAllgather, send: s, sendN: sn, recv: r,
		recvN: rn, count: len(in), dtype: dtypeOf[T]()})
}

// ReduceScatter reduces in element-wise with op over every rank and leaves
// block r of the result in rank r's out (nexar_reduce_scatter). len(in) must
// be Size()*len(out); in and out must not overlap.
func ReduceScatter[T Numeric](ctx context.Context, c *Comm, in, out []T, op Op) error {
	if len(in) != len(out)*c.size {
		return invalid(c, "reduce_scatter", "in holds %d elements, %d are needed (len(out) %d × size %d)",
			len(in), len(out)*c.size, len(out), c.size)
	}
	s, sn := raw(in)
	r, rn := raw(out)
	return c.run(ctx, &opArgs{name: "reduce_scatter", kind: gxReduceScatter, send: s, sendN: sn,
		recv: r, recvN: rn, count: len(out), dtype: dtypeOf[T](), redop: int32(op)})
}

// AllToAll sends block j of in to rank j; block i of out comes from rank i
// (nexar_alltoall). in and out have the same length, a multiple of Size(),
// and must not overlap.
func AllToAll[T Numeric](ctx context.Context, c *Comm, in, out []T) error {
	if len(in) != len(out) || len(in)%c.size != 0 {
		return invalid(c, "alltoall", "in (%d elements) and out (%d) must have the same length, "+
			"a multiple of the size %d", len(in), len(out), c.size)
	}
	s, sn := raw(in)
	r, rn := raw(out)
	return c.run(ctx, &opArgs{name: "alltoall", kind: gxAlltoall, send: s, sendN: sn, recv: r,
		recvN: rn, count: len(in) / c.size, dtype: dtypeOf[T]()})
}

// Gather collects every rank's in into root's out, in rank order
// (nexar_gather). On the root len(out) must be Size()*len(in); elsewhere out
// is ignored (pass nil).
func Gather[T Numeric](ctx context.Context, c *Comm, in, out []T, root int) error {
	peer, err := c.checkRank("gather", "root", root)
	if err != nil {
		return err
	}
	s, sn := raw(in)
	a := &opArgs{name: "gather", kind: gxGather, send: s, sendN: sn, count: len(in),
		dtype: dtypeOf[T](), peer: uint32(peer)}
	if root == c.rank {
		if len(out) != len(in)*c.size {
			return invalid(c, "gather", "out holds %d elements, %d are needed on the root "+
				"(len(in) %d × size %d)", len(out), len(in)*c.size, len(in), c.size)
		}
		a.recv, a.recvN = raw(out)
	}
	return c.run(ctx, a)
}

// Scatter sends block r of root's in to rank r's out (nexar_scatter). On the
// root len(in) must be Size()*len(out); elsewhere in is ignored (pass nil).
func Scatter[T Numeric](ctx context.Context, c *Comm, in, out []T, root int) error {
	peer, err := c.checkRank("scatter", "root", root)
	if err != nil {
		return err
	}
	r, rn := raw(out)
	a := &opArgs{name: "scatter", kind: gxScatter, recv: r, recvN: rn, count: len(out),
		dtype: dtypeOf[T](), peer: uint32(peer)}
	if root == c.rank {
		if len(in) != len(out)*c.size {
			return invalid(c, "scatter", "in holds %d elements, %d are needed on the root "+
				"(len(out) %d × size %d)", len(in), len(out)*c.size, len(out), c.size)
		}
		a.send, a.sendN = raw(in)
	}
	return c.run(ctx, a)
}

// Barrier returns once every rank has entered it (nexar_barrier).
func (c *Comm) Barrier(ctx context.Context) error {
	return c.run(ctx, &opArgs{name: "barrier", kind: gxBarrier})
}

// Send sends buf's bytes to rank dest with a tag (nexar_send). Messages
// between one pair with one tag arrive in send order. It returns once the
// peer's transport has acknowledged every byte. Any Numeric slice works,
// []byte included; the receiver needs a buffer of the same size in bytes.
func Send[T Numeric](ctx context.Context, c *Comm, buf []T, dest int, tag uint32) error {
	peer, err := c.checkRank("send", "dest", dest)
	if err != nil {
		return err
	}
	p, n := raw(buf)
	return c.run(ctx, &opArgs{name: "send", kind: gxSend, send: p, sendN: n, count: n,
		peer: uint32(peer), tag: tag})
}

// Recv receives the next message from rank src with this tag into buf
// (nexar_recv). A message of another size fails with ErrSizeMismatch (and is
// consumed).
func Recv[T Numeric](ctx context.Context, c *Comm, buf []T, src int, tag uint32) error {
	peer, err := c.checkRank("recv", "src", src)
	if err != nil {
		return err
	}
	p, n := raw(buf)
	return c.run(ctx, &opArgs{name: "recv", kind: gxRecv, recv: p, recvN: n, count: n,
		peer: uint32(peer), tag: tag})
}
