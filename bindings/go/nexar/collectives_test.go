package nexar_test

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"testing"

	"github.com/nexar-project/nexar/bindings/go/nexar"
)

func TestAllReduceOps(t *testing.T) {
	forWorlds(t, func(t *testing.T, comms []*nexar.Comm, ctx context.Context) {
		n := len(comms)
		onEach(t, comms, func(c *nexar.Comm) error {
			r := c.Rank()
			for _, tc := range []struct {
				op   nexar.Op
				want func(i int) float64
			}{
				{nexar.Sum, func(i int) float64 { return float64(n*(n+1)/2 + n*i) }},
				{nexar.Prod, func(i int) float64 {
					p := 1.0
					for k := 0; k < n; k++ {
						p *= float64(k + 1 + i)
					}
					return p
				}},
				{nexar.Min, func(i int) float64 { return float64(1 + i) }},
				{nexar.Max, func(i int) float64 { return float64(n + i) }},
			} {
				buf := make([]float64, 5)
				want := make([]float64, 5)
				for i := range buf {
					buf[i] = float64(r + 1 + i)
					want[i] = tc.want(i)
				}
				if err := nexar.AllReduce(ctx, c, buf, tc.op); err != nil {
					return err
				}
				if err := equal(buf, want); err != nil {
					return fmt.Errorf("allreduce %v: %v", tc.op, err)
				}
			}
			// An empty vector completes at once, on every path.
			return nexar.AllReduce(ctx, c, []float32{}, nexar.Sum)
		})
	})
}

// allReduceType checks Sum, Prod, Min and Max for one element type.
func allReduceType[T nexar.Numeric](ctx context.Context, c *nexar.Comm) error {
	n, r := c.Size(), c.Rank()
	buf := []T{T(r + 1), 2, T(10 - r), T(r)}
	if err := nexar.AllReduce(ctx, c, buf, nexar.Sum); err != nil {
		return err
	}
	want := []T{T(n * (n + 1) / 2), T(2 * n), T(10*n - n*(n-1)/2), T(n * (n - 1) / 2)}
	if err := equal(buf, want); err != nil {
		return fmt.Errorf("%T sum: %v", buf, err)
	}
	buf = []T{T(r + 1), 2}
	if err := nexar.AllReduce(ctx, c, buf, nexar.Prod); err != nil {
		return err
	}
	fact, pow := 1, 1
	for k := 1; k <= n; k++ {
		fact *= k
		pow *= 2
	}
	if err := equal(buf, []T{T(fact), T(pow)}); err != nil {
		return fmt.Errorf("%T prod: %v", buf, err)
	}
	buf = []T{T(r + 3), T(7 - r)}
	if err := nexar.AllReduce(ctx, c, buf, nexar.Min); err != nil {
		return err
	}
	if err := equal(buf, []T{3, T(7 - (n - 1))}); err != nil {
		return fmt.Errorf("%T min: %v", buf, err)
	}
	buf = []T{T(r + 3), T(7 - r)}
	if err := nexar.AllReduce(ctx, c, buf, nexar.Max); err != nil {
		return err
	}
	if err := equal(buf, []T{T(n + 2), 7}); err != nil {
		return fmt.Errorf("%T max: %v", buf, err)
	}
	return nil
}

// A named type over a numeric one maps to the same dtype.
type celsius float32

func TestAllReduceEveryType(t *testing.T) {
	forWorlds(t, func(t *testing.T, comms []*nexar.Comm, ctx context.Context) {
		onEach(t, comms, func(c *nexar.Comm) error {
			for _, f := range []func(context.Context, *nexar.Comm) error{
				allReduceType[float32], allReduceType[float64], allReduceType[int8],
				allReduceType[int32], allReduceType[int64], allReduceType[uint8],
				allReduceType[uint32], allReduceType[uint64], allReduceType[celsius],
			} {
				if err := f(ctx, c); err != nil {
					return err
				}
			}
			// Negative values and values past 32 bits travel intact.
			big := []int64{-(1 << 40), int64(c.Rank())}
			if err := nexar.AllReduce(ctx, c, big, nexar.Min); err != nil {
				return err
			}
			return equal(big, []int64{-(1 << 40), 0})
		})
	})
}

func TestBroadcast(t *testing.T) {
	forWorlds(t, func(t *testing.T, comms []*nexar.Comm, ctx context.Context) {
		n := len(comms)
		onEach(t, comms, func(c *nexar.Comm) error {
			buf := []int32{0, 0, 0}
			if c.Rank() == n-1 {
				buf = []int32{7, -8, 9}
			}
			if err := nexar.Broadcast(ctx, c, buf, n-1); err != nil {
				return err
			}
			return equal(buf, []int32{7, -8, 9})
		})
	})
}

func TestReduce(t *testing.T) {
	forWorlds(t, func(t *testing.T, comms []*nexar.Comm, ctx context.Context) {
		n := len(comms)
		const root = 1
		onEach(t, comms, func(c *nexar.Comm) error {
			r := c.Rank()
			buf := []int64{int64(r + 1), int64(10 * (r + 1))}
			if err := nexar.Reduce(ctx, c, buf, nexar.Sum, root); err != nil {
				return err
			}
			if r == root {
				s := int64(n * (n + 1) / 2)
				return equal(buf, []int64{s, 10 * s})
			}
			return equal(buf, []int64{int64(r + 1), int64(10 * (r + 1))}) // only read
		})
	})
}

func TestAllGather(t *testing.T) {
	forWorlds(t, func(t *testing.T, comms []*nexar.Comm, ctx context.Context) {
		n := len(comms)
		onEach(t, comms, func(c *nexar.Comm) error {
			r := c.Rank()
			in := []uint32{uint32(10 * r), uint32(10*r + 1)}
			out := make([]uint32, 2*n)
			if err := nexar.AllGather(ctx, c, in, out); err != nil {
				return err
			}
			want := make([]uint32, 0, 2*n)
			for k := 0; k < n; k++ {
				want = append(want, uint32(10*k), uint32(10*k+1))
			}
			if err := equal(out, want); err != nil {
				return err
			}
			return equal(in, []uint32{uint32(10 * r), uint32(10*r + 1)}) // never written
		})
	})
}

func TestReduceScatter(t *testing.T) {
	forWorlds(t, func(t *testing.T, comms []*nexar.Comm, ctx context.Context) {
		n := len(comms)
		onEach(t, comms, func(c *nexar.Comm) error {
			r := c.Rank()
			in := make([]float32, 2*n)
			for j := range in {
				in[j] = float32(100*r + j)
			}
			out := make([]float32, 2)
			if err := nexar.ReduceScatter(ctx, c, in, out, nexar.Sum); err != nil {
				return err
			}
			want := make([]float32, 2)
			for k := range want {
				want[k] = float32(100*n*(n-1)/2 + n*(2*r+k))
			}
			return equal(out, want)
		})
	})
}

func TestAllToAll(t *testing.T) {
	forWorlds(t, func(t *testing.T, comms []*nexar.Comm, ctx context.Context) {
		n := len(comms)
		onEach(t, comms, func(c *nexar.Comm) error {
			r := c.Rank()
			in := make([]int8, 2*n)
			for j := 0; j < n; j++ {
				in[2*j], in[2*j+1] = int8(30*r+10*j), int8(30*r+10*j+1)
			}
			out := make([]int8, 2*n)
			if err := nexar.AllToAll(ctx, c, in, out); err != nil {
				return err
			}
			want := make([]int8, 2*n)
			for i := 0; i < n; i++ {
				want[2*i], want[2*i+1] = int8(30*i+10*r), int8(30*i+10*r+1)
			}
			return equal(out, want)
		})
	})
}

func TestGather(t *testing.T) {
	forWorlds(t, func(t *testing.T, comms []*nexar.Comm, ctx context.Context) {
		n := len(comms)
		onEach(t, comms, func(c *nexar.Comm) error {
			r := c.Rank()
			in := []float64{float64(r), -float64(r) - 0.5}
			// Off the root out is ignored: rank 1 passes one as long as the
			// root's, which must come back untouched, rank 2 nil.
			var out []float64
			if r <= 1 {
				out = make([]float64, 2*n)
				for i := range out {
					out[i] = 99
				}
			}
			if err := nexar.Gather(ctx, c, in, out, 0); err != nil {
				return err
			}
			if err := equal(in, []float64{float64(r), -float64(r) - 0.5}); err != nil {
				return fmt.Errorf("in was written: %v", err) // only read, on every rank
			}
			if r != 0 {
				for i, v := range out {
					if v != 99 {
						return fmt.Errorf("out was written off the root: element %d is %v (%v)", i, v, out)
					}
				}
				return nil
			}
			want := make([]float64, 0, 2*n)
			for k := 0; k < n; k++ {
				want = append(want, float64(k), -float64(k)-0.5)
			}
			return equal(out, want)
		})
	})
}

func TestScatter(t *testing.T) {
	forWorlds(t, func(t *testing.T, comms []*nexar.Comm, ctx context.Context) {
		n := len(comms)
		root := n - 1
		onEach(t, comms, func(c *nexar.Comm) error {
			r := c.Rank()
			var in []uint64
			if r == root {
				in = make([]uint64, 2*n)
				for j := range in {
					in[j] = uint64(3 * j)
				}
			}
			out := []uint64{99, 99}
			if err := nexar.Scatter(ctx, c, in, out, root); err != nil {
				return err
			}
			return equal(out, []uint64{uint64(6 * r), uint64(6*r + 3)})
		})
	})
}

func TestScanExscan(t *testing.T) {
	forWorlds(t, func(t *testing.T, comms []*nexar.Comm, ctx context.Context) {
		onEach(t, comms, func(c *nexar.Comm) error {
			r := c.Rank()
			buf := []int32{int32(r + 1), int32(5 - r)}
			if err := nexar.Scan(ctx, c, buf, nexar.Sum); err != nil {
				return err
			}
			if err := equal(buf, []int32{int32((r + 1) * (r + 2) / 2), int32(5*(r+1) - r*(r+1)/2)}); err != nil {
				return fmt.Errorf("scan: %v", err)
			}
			buf = []int32{int32(r + 1), 42}
			if err := nexar.Scan(ctx, c, buf, nexar.Max); err != nil {
				return err
			}
			if err := equal(buf, []int32{int32(r + 1), 42}); err != nil {
				return fmt.Errorf("scan max: %v", err)
			}
			buf = []int32{int32(r + 1), -1000}
			if err := nexar.Exscan(ctx, c, buf, nexar.Sum); err != nil {
				return err
			}
			if r == 0 {
				return equal(buf, []int32{1, -1000}) // left as it was
			}
			return equal(buf, []int32{int32(r * (r + 1) / 2), int32(-1000 * r)})
		})
	})
}

func TestBarrier(t *testing.T) {
	forWorlds(t, func(t *testing.T, comms []*nexar.Comm, ctx context.Context) {
		var entered atomic.Int32
		onEach(t, comms, func(c *nexar.Comm) error {
			entered.Add(1)
			if err := c.Barrier(ctx); err != nil {
				return err
			}
			if got := entered.Load(); got != int32(len(comms)) {
				return fmt.Errorf("left the barrier when %d of %d ranks had entered", got, len(comms))
			}
			return nil
		})
	})
}

func TestSplit(t *testing.T) {
	comms := world(t, 4)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			ctx, cancel := m.ctx()
			defer cancel()
			onEach(t, comms, func(c *nexar.Comm) error {
				r := c.Rank()
				// Colors by parity; keys reverse the order.
				sub, err := c.Split(ctx, uint32(r%2), uint32(10-r))
				if err != nil {
					return err
				}
				defer sub.Close()
				if sub.Size() != 2 {
					return fmt.Errorf("sub size %d, want 2", sub.Size())
				}
				wantRank := 1 - r/2 // {0,2} -> 2 first; {1,3} -> 3 first
				if sub.Rank() != wantRank {
					return fmt.Errorf("sub rank %d, want %d", sub.Rank(), wantRank)
				}
				buf := []int32{int32(r)}
				if err := nexar.AllReduce(ctx, sub, buf, nexar.Sum); err != nil {
					return err
				}
				want := int32(0 + 2)
				if r%2 == 1 {
					want = 1 + 3
				}
				return equal(buf, []int32{want})
			})
		})
	}
}

// halfCollectives runs AllReduce (every operator), Broadcast, AllGather,
// ReduceScatter and Send/Recv on one half type (H made by from), with values
// it holds exactly, so results compare exactly. Summed or compared as
// integers the bits would give other results: 1+1 would be 0x7800 (Float16)
// or 0x7f00 (BFloat16), not 2, and a negative value would be the largest.
func halfCollectives[H nexar.Float16 | nexar.BFloat16](ctx context.Context, c *nexar.Comm,
	from func(float32) H) error {
	n, r := c.Size(), c.Rank()
	hs := func(fs ...float32) []H {
		out := make([]H, len(fs))
		for i, f := range fs {
			out[i] = from(f)
		}
		return out
	}
	fn, fr := float32(n), float32(r)
	name := fmt.Sprintf("%T", H(0))

	buf := hs(fr+1, 1, -2.5, -fr, 0.25)
	if err := nexar.AllReduce(ctx, c, buf, nexar.Sum); err != nil {
		return err
	}
	if err := equal(buf, hs(fn*(fn+1)/2, fn, -2.5*fn, -fn*(fn-1)/2, 0.25*fn)); err != nil {
		return fmt.Errorf("%s sum: %v", name, err)
	}
	buf = hs(fr+1, -1, 0.5)
	if err := nexar.AllReduce(ctx, c, buf, nexar.Prod); err != nil {
		return err
	}
	fact, sign, pow := float32(1), float32(1), float32(1)
	for k := 1; k <= n; k++ {
		fact, sign, pow = fact*float32(k), -sign, pow*0.5
	}
	if err := equal(buf, hs(fact, sign, pow)); err != nil {
		return fmt.Errorf("%s prod: %v", name, err)
	}
	buf = hs(fr-1, 1-fr, 2, fr*0.5)
	if err := nexar.AllReduce(ctx, c, buf, nexar.Max); err != nil {
		return err
	}
	if err := equal(buf, hs(fn-2, 1, 2, (fn-1)*0.5)); err != nil {
		return fmt.Errorf("%s max: %v", name, err)
	}
	buf = hs(fr-1, 1-fr, 2, fr*0.5)
	if err := nexar.AllReduce(ctx, c, buf, nexar.Min); err != nil {
		return err
	}
	if err := equal(buf, hs(-1, 2-fn, 2, 0)); err != nil {
		return fmt.Errorf("%s min: %v", name, err)
	}

	// Broadcast moves the bits: infinities and NaN arrive as they were.
	nan := float32(math.NaN())
	sent := hs(1.5, -3, 100, float32(math.Inf(-1)), nan)
	buf = make([]H, len(sent))
	if r == n-1 {
		copy(buf, sent)
	}
	if err := nexar.Broadcast(ctx, c, buf, n-1); err != nil {
		return err
	}
	if err := equal(buf, sent); err != nil {
		return fmt.Errorf("%s broadcast: %v", name, err)
	}

	in := hs(fr, -0.5*fr)
	out := make([]H, 2*n)
	if err := nexar.AllGather(ctx, c, in, out); err != nil {
		return err
	}
	var want []H
	for k := 0; k < n; k++ {
		want = append(want, hs(float32(k), -0.5*float32(k))...)
	}
	if err := equal(out, want); err != nil {
		return fmt.Errorf("%s allgather: %v", name, err)
	}

	in = make([]H, 2*n)
	for j := range in {
		in[j] = from(fr + 0.5*float32(j))
	}
	out = make([]H, 2)
	if err := nexar.ReduceScatter(ctx, c, in, out, nexar.Sum); err != nil {
		return err
	}
	if err := equal(out, hs(fn*(fn-1)/2+fn*0.5*float32(2*r), fn*(fn-1)/2+fn*0.5*float32(2*r+1))); err != nil {
		return fmt.Errorf("%s reduce_scatter: %v", name, err)
	}

	next, prev := (r+1)%n, (r+n-1)%n
	done := make(chan error, 1)
	go func() { done <- nexar.Send(ctx, c, hs(fr, -0.25), next, 9) }()
	got := make([]H, 2)
	if err := nexar.Recv(ctx, c, got, prev, 9); err != nil {
		return err
	}
	if err := equal(got, hs(float32(prev), -0.25)); err != nil {
		return fmt.Errorf("%s send/recv: %v", name, err)
	}
	return <-done
}

func TestHalfCollectives(t *testing.T) {
	forWorlds(t, func(t *testing.T, comms []*nexar.Comm, ctx context.Context) {
		onEach(t, comms, func(c *nexar.Comm) error {
			if err := halfCollectives(ctx, c, nexar.Float16FromFloat32); err != nil {
				return err
			}
			return halfCollectives(ctx, c, nexar.BFloat16FromFloat32)
		})
	})
}
