package nexar_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nexar-project/nexar/bindings/go/nexar"
)

// Every wait in these tests is bounded: nexar's timeouts (below), the
// deadline of the cancellable mode, and rankDeadline for a whole round.
const (
	opTimeout    = 20 * time.Second
	rankDeadline = 60 * time.Second
)

// world makes an in-process world of n ranks (real QUIC over loopback),
// closed when the test ends (unless the test closed them itself).
func world(t *testing.T, n int, opts ...nexar.Option) []*nexar.Comm {
	t.Helper()
	base := []nexar.Option{
		nexar.WithCollectiveTimeout(opTimeout), nexar.WithBarrierTimeout(opTimeout),
		nexar.WithP2PTimeout(opTimeout), nexar.WithRPCTimeout(opTimeout),
		nexar.WithConnectTimeout(opTimeout),
	}
	comms, err := nexar.BootstrapLocal(n, append(base, opts...)...)
	if err != nil {
		t.Fatalf("BootstrapLocal(%d): %v", n, err)
	}
	if len(comms) != n {
		t.Fatalf("BootstrapLocal(%d) made %d communicators", n, len(comms))
	}
	t.Cleanup(func() {
		for _, c := range comms {
			if err := c.Close(); err != nil && !errors.Is(err, nexar.ErrClosed) {
				t.Errorf("Close: %v", err)
			}
		}
	})
	return comms
}

// onEach runs fn for every rank, each on its own goroutine, and fails the
// test with every rank's error. It gives up after rankDeadline.
func onEach(t *testing.T, comms []*nexar.Comm, fn func(c *nexar.Comm) error) {
	t.Helper()
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func(i int, c *nexar.Comm) {
			defer wg.Done()
			errs[i] = fn(c)
		}(i, c)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(rankDeadline):
		t.Fatalf("the ranks did not finish within %v", rankDeadline)
	}
	for i, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", i, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// mode is how an operation runs: the fast path (a context that never ends)
// or the cancellable path (a context with a deadline, which does not pass).
type mode struct {
	name string
	ctx  func() (context.Context, context.CancelFunc)
}

var modes = []mode{
	{"fast", func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }},
	{"cancellable", func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), rankDeadline)
	}},
}

// forWorlds runs body as a subtest for worlds of 2 and 3 ranks in both modes.
func forWorlds(t *testing.T, body func(t *testing.T, comms []*nexar.Comm, ctx context.Context)) {
	for _, n := range []int{2, 3} {
		comms := world(t, n)
		for _, m := range modes {
			t.Run(fmt.Sprintf("n=%d/%s", n, m.name), func(t *testing.T) {
				ctx, cancel := m.ctx()
				defer cancel()
				body(t, comms, ctx)
			})
		}
	}
}

// equal compares two slices and describes the first difference.
func equal[T comparable](got, want []T) error {
	if len(got) != len(want) {
		return fmt.Errorf("got %d elements %v, want %d %v", len(got), got, len(want), want)
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Errorf("element %d: got %v, want %v (got %v, want %v)", i, got[i], want[i], got, want)
		}
	}
	return nil
}

// within fails the test if fn does not return within d.
func within(t *testing.T, d time.Duration, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not return within %v", what, d)
	}
}
