package nexar_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nexar-project/nexar/bindings/go/nexar"
)

// A blocking call's error names the rank that failed it, taken from the call
// itself: here the communicator's first asynchronous error names another
// rank (3, closed earlier), while the receive fails because rank 2 aborts.
func TestBlockingErrorNamesTheRankThatFailedIt(t *testing.T) {
	comms := world(t, 4)
	if err := comms[3].Close(); err != nil {
		t.Fatal(err)
	}
	var async *nexar.Error
	waitFor(t, "rank 0's async error", func() bool { return errors.As(comms[0].AsyncError(), &async) })
	if async.FailedRank != 3 {
		t.Fatalf("async error names rank %d, want 3: %v", async.FailedRank, async)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		if err := comms[2].Abort(); err != nil {
			t.Errorf("Abort: %v", err)
		}
	}()
	// context.Background() takes the blocking path (done == NULL).
	err := nexar.Recv(context.Background(), comms[0], make([]byte, 8), 2, 1)
	var e *nexar.Error
	if !errors.As(err, &e) {
		t.Fatalf("Recv: got %v, want a *nexar.Error", err)
	}
	if !errors.Is(err, nexar.ErrAborted) || e.FailedRank != 2 {
		t.Fatalf("Recv from the aborted rank 2: got %v (failed rank %d), want ErrAborted naming rank 2", err, e.FailedRank)
	}
}

// A call refused before it starts (the communicator aborted here) names no
// rank and carries nexar's message.
func TestRefusedCallNamesNoRank(t *testing.T) {
	comms := world(t, 2)
	if err := comms[0].Abort(); err != nil {
		t.Fatal(err)
	}
	err := nexar.Recv(context.Background(), comms[0], make([]byte, 8), 1, 1)
	var e *nexar.Error
	if !errors.As(err, &e) || !errors.Is(err, nexar.ErrAborted) {
		t.Fatalf("Recv after Abort: got %v, want ErrAborted", err)
	}
	if e.FailedRank != -1 || e.Message == "" {
		t.Fatalf("refused Recv: got failed rank %d, message %q; want -1 and nexar's message", e.FailedRank, e.Message)
	}
}
