package nexar_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nexar-project/nexar/bindings/go/nexar"
)

func TestSendRecvRing(t *testing.T) {
	forWorlds(t, func(t *testing.T, comms []*nexar.Comm, ctx context.Context) {
		n := len(comms)
		onEach(t, comms, func(c *nexar.Comm) error {
			r := c.Rank()
			next, prev := (r+1)%n, (r+n-1)%n
			sent := make(chan error, 1)
			go func() {
				err := nexar.Send(ctx, c, []float64{float64(r), float64(r) + 0.5}, next, 7)
				if err == nil {
					err = nexar.Send(ctx, c, []byte(fmt.Sprintf("hello from %d", r)), next, 8)
				}
				sent <- err
			}()
			got := make([]float64, 2)
			if err := nexar.Recv(ctx, c, got, prev, 7); err != nil {
				return err
			}
			if err := equal(got, []float64{float64(prev), float64(prev) + 0.5}); err != nil {
				return err
			}
			text := make([]byte, len("hello from 0"))
			if err := nexar.Recv(ctx, c, text, prev, 8); err != nil {
				return err
			}
			if string(text) != fmt.Sprintf("hello from %d", prev) {
				return fmt.Errorf("got %q", text)
			}
			return <-sent
		})
	})
}

func TestSendRecvOrderAndTags(t *testing.T) {
	comms := world(t, 2)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			ctx, cancel := m.ctx()
			defer cancel()
			onEach(t, comms, func(c *nexar.Comm) error {
				if c.Rank() == 0 {
					for i := 0; i < 5; i++ { // tag 2 first, then tag 1
						if err := nexar.Send(ctx, c, []int32{int32(100 + i)}, 1, 2); err != nil {
							return err
						}
					}
					return nexar.Send(ctx, c, []int32{1}, 1, 1)
				}
				one := []int32{0}
				if err := nexar.Recv(ctx, c, one, 0, 1); err != nil { // tag 1 matches only its own
					return err
				}
				if one[0] != 1 {
					return fmt.Errorf("tag 1 got %d", one[0])
				}
				for i := 0; i < 5; i++ { // tag 2 in send order
					if err := nexar.Recv(ctx, c, one, 0, 2); err != nil {
						return err
					}
					if one[0] != int32(100+i) {
						return fmt.Errorf("message %d of tag 2 is %d", i, one[0])
					}
				}
				return nil
			})
		})
	}
}

// A Recv nobody sends to, with a short deadline: ctx's error at once, the
// slice untouched even when the message comes later, the C memory freed,
// and the world still usable.
func TestCancelRecvDeadline(t *testing.T) {
	comms := world(t, 2)
	base := nexar.LivePending()

	buf := []int64{-1, -1}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := nexar.Recv(ctx, comms[0], buf, 1, 99)
	elapsed := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Recv: got %v, want context.DeadlineExceeded", err)
	}
	if elapsed > 3*time.Second {
		t.Fatalf("Recv returned after %v, past its 200 ms deadline", elapsed)
	}
	var ne *nexar.Error
	if errors.As(err, &ne) {
		t.Fatalf("a cancelled call is not a nexar failure: %#v", ne)
	}
	for _, want := range []string{"recv", "rank 0"} {
		if !contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if got := nexar.LivePending(); got != base+1 {
		t.Fatalf("%d records pending, want %d: the abandoned recv is still posted in nexar", got, base+1)
	}

	// The message arrives later: the abandoned recv (still posted in nexar)
	// takes it into C memory, and the Go slice is never written.
	if err := nexar.Send(context.Background(), comms[1], []int64{5, 6}, 0, 99); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the abandoned recv's memory to be freed", func() bool { return nexar.LivePending() == base })
	if err := equal(buf, []int64{-1, -1}); err != nil {
		t.Fatalf("the slice of a cancelled recv was written: %v", err)
	}

	// Other tags (and the same tag) work afterwards, both ways.
	onEach(t, comms, func(c *nexar.Comm) error {
		ctx, cancel := context.WithTimeout(context.Background(), rankDeadline)
		defer cancel()
		peer := 1 - c.Rank()
		errc := make(chan error, 1)
		go func() { errc <- nexar.Send(ctx, c, []int64{int64(c.Rank()), 7}, peer, 100) }()
		got := []int64{0, 0}
		if err := nexar.Recv(ctx, c, got, peer, 100); err != nil {
			return err
		}
		if err := equal(got, []int64{int64(peer), 7}); err != nil {
			return err
		}
		return <-errc
	})
	onEach(t, comms, func(c *nexar.Comm) error {
		if c.Rank() == 1 {
			return nexar.Send(context.Background(), c, []int64{8, 9}, 0, 99)
		}
		got := []int64{0, 0}
		if err := nexar.Recv(context.Background(), c, got, 1, 99); err != nil {
			return err
		}
		return equal(got, []int64{8, 9})
	})
}

func TestCancelRecvCancelFunc(t *testing.T) {
	comms := world(t, 2)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	err := nexar.Recv(ctx, comms[1], make([]byte, 16), 0, 5)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Recv: got %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Recv returned %v after its cancel", d)
	}
	// A context that has already ended starts nothing.
	err = nexar.Recv(ctx, comms[1], make([]byte, 16), 0, 6)
	if !errors.Is(err, context.Canceled) || !contains(err.Error(), "not started") {
		t.Fatalf("Recv with an ended context: %v", err)
	}
	err = comms[1].Barrier(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Barrier with an ended context: %v", err)
	}
}

// Closing a communicator fails its pending cancellable operations with
// ErrClosed.
func TestClosePendingRecv(t *testing.T) {
	comms := world(t, 2)
	base := nexar.LivePending()
	ctx, cancel := context.WithTimeout(context.Background(), rankDeadline)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- nexar.Recv(ctx, comms[0], make([]float32, 4), 1, 3) }()
	waitFor(t, "the recv to be posted", func() bool { return nexar.LivePending() > base })
	time.Sleep(50 * time.Millisecond)
	within(t, 10*time.Second, "Close", func() {
		if err := comms[0].Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	select {
	case err := <-errc:
		if !errors.Is(err, nexar.ErrClosed) {
			t.Fatalf("pending Recv after Close: got %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the pending Recv did not return after Close")
	}
}

// A panic in goNexarDone (made by a test hook) does not unwind into C: the
// operation fails with ErrInternal naming the panic, or, when its caller has
// left, is freed all the same; the world stays usable.
func TestCompletionPanic(t *testing.T) {
	comms := world(t, 2)
	base := nexar.LivePending()
	ctx, cancel := context.WithTimeout(context.Background(), rankDeadline)
	defer cancel()

	undo := nexar.PanicInCompletion("recv")
	var recvErr error
	onEach(t, comms, func(c *nexar.Comm) error {
		if c.Rank() == 1 {
			return nexar.Send(ctx, c, []int32{1, 2}, 0, 30)
		}
		buf := []int32{-1, -1}
		recvErr = nexar.Recv(ctx, c, buf, 1, 30)
		return equal(buf, []int32{-1, -1}) // a failed operation writes nothing
	})
	if !undo() {
		t.Fatal("the completion hook did not panic")
	}
	var ne *nexar.Error
	if !errors.Is(recvErr, nexar.ErrInternal) || !errors.As(recvErr, &ne) || ne.Op != "recv" || ne.Rank != 0 {
		t.Fatalf("Recv whose completion panicked: got %v, want ErrInternal naming recv on rank 0", recvErr)
	}
	for _, want := range []string{"panic", "test panic in the completion of recv"} {
		if !contains(ne.Message, want) {
			t.Errorf("message %q does not mention %q", ne.Message, want)
		}
	}
	waitFor(t, "the recv's memory to be freed", func() bool { return nexar.LivePending() == base })

	// The caller has left (its deadline passed) when the completion panics.
	undo = nexar.PanicInCompletion("recv")
	short, cancelShort := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancelShort()
	if err := nexar.Recv(short, comms[0], make([]int32, 2), 1, 31); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Recv: got %v, want context.DeadlineExceeded", err)
	}
	if err := nexar.Send(context.Background(), comms[1], []int32{3, 4}, 0, 31); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the abandoned recv's memory to be freed", func() bool { return nexar.LivePending() == base })
	if !undo() {
		t.Fatal("the completion hook did not panic for the abandoned recv")
	}

	onEach(t, comms, func(c *nexar.Comm) error {
		buf := []int32{int32(c.Rank())}
		if err := nexar.AllReduce(ctx, c, buf, nexar.Sum); err != nil {
			return err
		}
		return equal(buf, []int32{1})
	})
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// waitFor polls cond until it holds, for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
