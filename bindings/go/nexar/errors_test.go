package nexar_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nexar-project/nexar/bindings/go/nexar"
)

func TestSizeMismatch(t *testing.T) {
	comms := world(t, 2)
	for i, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			ctx, cancel := m.ctx()
			defer cancel()
			tag := uint32(20 + i)
			var recvErr error
			onEach(t, comms, func(c *nexar.Comm) error {
				if c.Rank() == 1 {
					return nexar.Send(ctx, c, []byte("8 bytes!"), 0, tag)
				}
				recvErr = nexar.Recv(ctx, c, make([]byte, 4), 1, tag)
				return nil
			})
			if !errors.Is(recvErr, nexar.ErrSizeMismatch) {
				t.Fatalf("got %v, want ErrSizeMismatch", recvErr)
			}
			var ne *nexar.Error
			if !errors.As(recvErr, &ne) || ne.Op != "recv" || ne.Rank != 0 || ne.Message == "" {
				t.Fatalf("error fields: %#v", recvErr)
			}
			if !strings.HasPrefix(recvErr.Error(), "recv on rank 0 failed (NEXAR_ERR_SIZE_MISMATCH)") {
				t.Fatalf("error text: %q", recvErr)
			}
			var st nexar.Status
			if !errors.As(recvErr, &st) || st != nexar.ErrSizeMismatch {
				t.Fatalf("errors.As Status: %v", st)
			}
		})
	}
}

func TestInvalidArguments(t *testing.T) {
	comms := world(t, 2)
	c := comms[0]
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			ctx, cancel := m.ctx()
			defer cancel()
			for _, tc := range []struct {
				what string
				err  error
				want nexar.Status
			}{
				{"send to rank 2 of 2", nexar.Send(ctx, c, []byte("x"), 2, 0), nexar.ErrInvalidRank},
				{"send to rank -1", nexar.Send(ctx, c, []byte("x"), -1, 0), nexar.ErrInvalidRank},
				{"recv from rank 5", nexar.Recv(ctx, c, []byte("x"), 5, 0), nexar.ErrInvalidRank},
				{"broadcast root 3", nexar.Broadcast(ctx, c, []int32{1}, 3), nexar.ErrInvalidRank},
				{"gather root -2", nexar.Gather(ctx, c, []int32{1}, nil, -2), nexar.ErrInvalidRank},
				{"call rank 9", func() error { _, err := c.Call(ctx, 9, 1, nil); return err }(), nexar.ErrInvalidRank},
				{"allgather short out", nexar.AllGather(ctx, c, []int32{1, 2}, make([]int32, 3)), nexar.ErrInvalidArgument},
				{"reduce_scatter short in", nexar.ReduceScatter(ctx, c, []int32{1, 2, 3}, make([]int32, 2), nexar.Sum), nexar.ErrInvalidArgument},
				{"alltoall odd length", nexar.AllToAll(ctx, c, []int32{1, 2, 3}, make([]int32, 3)), nexar.ErrInvalidArgument},
				{"gather short out on the root", nexar.Gather(ctx, c, []int32{1}, make([]int32, 1), 0), nexar.ErrInvalidArgument},
				{"scatter short in on the root", nexar.Scatter(ctx, c, []int32{1}, make([]int32, 1), 0), nexar.ErrInvalidArgument},
				{"unknown op", nexar.AllReduce(ctx, c, []int32{1}, nexar.Op(9)), nexar.ErrInvalidArgument},
			} {
				if !errors.Is(tc.err, tc.want) {
					t.Errorf("%s: got %v, want %v", tc.what, tc.err, tc.want)
				}
			}
		})
	}
	// Nothing was started: the world still works.
	onEach(t, comms, func(c *nexar.Comm) error {
		buf := []int32{1}
		if err := nexar.AllReduce(context.Background(), c, buf, nexar.Sum); err != nil {
			return err
		}
		return equal(buf, []int32{2})
	})
}

func TestNexarTimeout(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			comms := world(t, 2, nexar.WithCollectiveTimeout(300*time.Millisecond))
			ctx, cancel := m.ctx()
			defer cancel()
			start := time.Now()
			err := nexar.AllReduce(ctx, comms[0], []float32{1, 2}, nexar.Sum) // rank 1 never joins
			if d := time.Since(start); d > 10*time.Second {
				t.Fatalf("the 300 ms timeout took %v", d)
			}
			if !errors.Is(err, nexar.ErrTimeout) {
				t.Fatalf("got %v, want ErrTimeout", err)
			}
			if !strings.HasPrefix(err.Error(), "allreduce on rank 0 failed (NEXAR_ERR_TIMEOUT)") {
				t.Fatalf("error text %q does not name the operation", err)
			}
			var ne *nexar.Error
			if !errors.As(err, &ne) || ne.Message == "" || ne.Status != nexar.ErrTimeout {
				t.Fatalf("error fields: %#v", err)
			}
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nexar.ErrClosed) {
				t.Fatalf("%v matches other sentinels", err)
			}
		})
	}
}

func TestErrorText(t *testing.T) {
	e := &nexar.Error{Op: "barrier", Rank: 0, Status: nexar.ErrTimeout, FailedRank: 2, Message: "rank 2 did not arrive"}
	if got, want := e.Error(), "barrier on rank 0 failed (NEXAR_ERR_TIMEOUT) [rank 2]: rank 2 did not arrive"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	e = &nexar.Error{Op: "bootstrap_local", Rank: -1, Status: nexar.ErrIO, FailedRank: -1}
	if got := e.Error(); !strings.HasPrefix(got, "bootstrap_local failed (NEXAR_ERR_IO): NEXAR_ERR_IO") {
		t.Fatalf("got %q", got)
	}
	if !errors.Is(e, nexar.ErrIO) || errors.Is(e, nexar.ErrTimeout) {
		t.Fatal("Is matches the wrong status")
	}
	if nexar.ErrRPCFailed.String() != "NEXAR_ERR_RPC_FAILED" || nexar.Status(-99).String() != "nexar status -99" {
		t.Fatal("Status.String")
	}
	if !strings.HasPrefix(nexar.ErrTimeout.Error(), "NEXAR_ERR_TIMEOUT") {
		t.Fatalf("Status.Error: %q", nexar.ErrTimeout.Error())
	}
}

func TestBootstrapErrors(t *testing.T) {
	for _, tc := range []struct {
		what string
		n    int
		opts []nexar.Option
	}{
		{"world of 0", 0, nil},
		{"world of 5000", 5000, nil},
		{"unknown topology", 2, []nexar.Option{nexar.WithTopology("star")}},
		{"negative timeout", 2, []nexar.Option{nexar.WithP2PTimeout(-time.Second)}},
	} {
		comms, err := nexar.BootstrapLocal(tc.n, tc.opts...)
		if !errors.Is(err, nexar.ErrInvalidArgument) || comms != nil {
			t.Errorf("%s: got %v, %v; want ErrInvalidArgument", tc.what, comms, err)
		}
	}
}
