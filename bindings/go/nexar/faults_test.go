package nexar_test

import (
	"context"
	"errors"
	"reflect"
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
