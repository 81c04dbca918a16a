package nexar_test

import (
	"context"
	"errors"
	"reflect"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/nexar-project/nexar/bindings/go/nexar"
)

// waitFailed waits (bounded, a hang guard) until c knows want failed ranks.
func waitFailed(t *testing.T, c *nexar.Comm, want []int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := c.Failed()
		if err != nil {
			t.Fatalf("Failed: %v", err)
		}
		if reflect.DeepEqual(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Failed() = %v, want %v", got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// eachSurvivor runs fn on every communicator at once and waits for all.
func eachSurvivor(comms []*nexar.Comm, fn func(i int, c *nexar.Comm)) {
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func(i int, c *nexar.Comm) {
			defer wg.Done()
			fn(i, c)
		}(i, c)
	}
	wg.Wait()
}

func TestRevokeReachesEveryMemberAndAgreeStillWorks(t *testing.T) {
	comms := world(t, 3)
	if err := comms[0].Revoke(); err != nil {
		t.Fatal(err)
	}
	for _, c := range comms {
		deadline := time.Now().Add(30 * time.Second)
		for !c.Revoked() && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if !c.Revoked() {
			t.Fatalf("rank %d: not revoked", c.Rank())
		}
	}
	if err := comms[1].Barrier(context.Background()); !errors.Is(err, nexar.ErrRevoked) {
		t.Fatalf("barrier on a revoked communicator: %v, want ErrRevoked", err)
	}
	flags := make([]uint64, 3)
	errs := make([]error, 3)
	eachSurvivor(comms, func(i int, c *nexar.Comm) { flags[i], errs[i] = c.Agree(0b111) })
	for i := range comms {
		if errs[i] != nil || flags[i] != 0b111 {
			t.Fatalf("rank %d: agree = %b, %v", i, flags[i], errs[i])
		}
	}
}

func TestAgreeAndShrinkAfterARankAborts(t *testing.T) {
	comms := world(t, 4)
	if err := comms[3].Abort(); err != nil {
		t.Fatal(err)
	}
	survivors := comms[:3]
	for _, c := range survivors {
		waitFailed(t, c, []int{3})
	}
	// After a peer's abort, operations fail naming it; agree and shrink work.
	var ne *nexar.Error
	if err := survivors[1].Barrier(context.Background()); !errors.Is(err, nexar.ErrAborted) || !errors.As(err, &ne) || ne.FailedRank != 3 {
		t.Fatalf("barrier after rank 3 aborted: %v, want ErrAborted naming rank 3", err)
	}
	// Unacknowledged: every survivor gets ErrPeerFailed, and the same flags.
	flags := make([]uint64, 3)
	errs := make([]error, 3)
	eachSurvivor(survivors, func(i int, c *nexar.Comm) { flags[i], errs[i] = c.Agree(0b111 ^ uint64(i)) })
	for i := range survivors {
		if !errors.Is(errs[i], nexar.ErrPeerFailed) || flags[i] != 0b100 {
			t.Fatalf("survivor %d: agree = %b, %v; want 100, ErrPeerFailed", i, flags[i], errs[i])
		}
		if n, err := survivors[i].AckFailed(1); err != nil || n != 1 {
			t.Fatalf("AckFailed: %d, %v", n, err)
		}
	}
	eachSurvivor(survivors, func(i int, c *nexar.Comm) { flags[i], errs[i] = c.Agree(0b110) })
	for i := range survivors {
		if errs[i] != nil || flags[i] != 0b110 {
			t.Fatalf("survivor %d: agree = %b, %v; want 110, nil", i, flags[i], errs[i])
		}
	}
	shrunk := make([]*nexar.Comm, 3)
	eachSurvivor(survivors, func(i int, c *nexar.Comm) { shrunk[i], errs[i] = c.Shrink() })
	for i, s := range shrunk {
		if errs[i] != nil {
			t.Fatalf("survivor %d: shrink: %v", i, errs[i])
		}
		defer s.Close()
		if s.Size() != 3 || s.Rank() != i {
			t.Fatalf("survivor %d: shrunk to rank %d of %d", i, s.Rank(), s.Size())
		}
	}
	eachSurvivor(shrunk, func(i int, c *nexar.Comm) {
		buf := []int64{int64(i + 1), 10}
		errs[i] = nexar.AllReduce(context.Background(), c, buf, nexar.Sum)
		if errs[i] == nil && (buf[0] != 6 || buf[1] != 30) {
			errs[i] = errors.New("wrong sum")
		}
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("survivor %d: allreduce after shrink: %v", i, err)
		}
	}
}

// failureEvent is one call of a failure callback: which survivor saw which
// rank fail, and why.
type failureEvent struct {
	survivor, rank int
	cause          nexar.Status
}

// failureLog collects failure callback calls from nexar's completion threads.
type failureLog struct {
	mu     sync.Mutex
	events []failureEvent
}

func (l *failureLog) recorder(survivor int) nexar.FailureFunc {
	return func(rank int, cause nexar.Status) {
		l.mu.Lock()
		l.events = append(l.events, failureEvent{survivor, rank, cause})
		l.mu.Unlock()
	}
}

func (l *failureLog) snapshot() []failureEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]failureEvent(nil), l.events...)
}

func TestFailureCallbackNamesTheAbortedRankOncePerSurvivor(t *testing.T) {
	comms := world(t, 4)
	var replaced, current failureLog
	for i, c := range comms {
		// The first callback is replaced before anything fails: only the
		// second one may be called.
		if err := c.SetFailureCallback(replaced.recorder(i)); err != nil {
			t.Fatalf("rank %d: SetFailureCallback: %v", i, err)
		}
		if err := c.SetFailureCallback(current.recorder(i)); err != nil {
			t.Fatalf("rank %d: SetFailureCallback again: %v", i, err)
		}
	}
	if err := comms[3].Abort(); err != nil {
		t.Fatal(err)
	}
	for _, c := range comms[:3] {
		waitFailed(t, c, []int{3})
	}
	want := []failureEvent{{0, 3, nexar.ErrAborted}, {1, 3, nexar.ErrAborted}, {2, 3, nexar.ErrAborted}}
	deadline := time.Now().Add(30 * time.Second)
	for len(current.snapshot()) < len(want) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	got := current.snapshot()
	sort.Slice(got, func(a, b int) bool { return got[a].survivor < got[b].survivor })
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("failure callbacks: %v, want %v", got, want)
	}
	if r := replaced.snapshot(); len(r) != 0 {
		t.Fatalf("a replaced failure callback was called: %v", r)
	}
}

func TestFailureCallbackRemovedWithNilAndRefusedAfterClose(t *testing.T) {
	comms := world(t, 3)
	var removed, kept failureLog
	if err := comms[0].SetFailureCallback(removed.recorder(0)); err != nil {
		t.Fatal(err)
	}
	if err := comms[0].SetFailureCallback(nil); err != nil {
		t.Fatalf("SetFailureCallback(nil): %v", err)
	}
	if err := comms[1].SetFailureCallback(kept.recorder(1)); err != nil {
		t.Fatal(err)
	}
	// A member that closes normally is a failed member ("left") for the others.
	if err := comms[2].Close(); err != nil {
		t.Fatal(err)
	}
	waitFailed(t, comms[0], []int{2})
	waitFailed(t, comms[1], []int{2})
	deadline := time.Now().Add(30 * time.Second)
	for len(kept.snapshot()) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := kept.snapshot(); !reflect.DeepEqual(got, []failureEvent{{1, 2, nexar.ErrPeerFailed}}) {
		t.Fatalf("kept callback: %v, want rank 2 failed with ErrPeerFailed", got)
	}
	if got := removed.snapshot(); len(got) != 0 {
		t.Fatalf("a removed failure callback was called: %v", got)
	}
	if err := comms[1].Close(); err != nil {
		t.Fatal(err)
	}
	if err := comms[1].SetFailureCallback(kept.recorder(1)); !errors.Is(err, nexar.ErrClosed) {
		t.Fatalf("SetFailureCallback after Close: %v, want ErrClosed", err)
	}
}
