package nexar_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nexar-project/nexar/bindings/go/nexar"
)

// A world of 2 formed through an elastic seed grows to 3: the members keep
// their ranks, the joiner gets rank 2, and an allreduce includes it at once.
func TestElasticGrowAdmitsAJoiner(t *testing.T) {
	seed, err := nexar.StartSeed(nexar.SeedOptions{WorldSize: 2, ClusterToken: "go-elastic",
		FormationTimeout: 30 * time.Second, Elastic: true})
	if err != nil {
		t.Fatalf("StartSeed: %v", err)
	}
	defer seed.Stop()
	join := func(opts ...nexar.Option) (*nexar.Comm, error) {
		base := []nexar.Option{nexar.WithSeed(seed.Address()), nexar.WithClusterToken("go-elastic"),
			nexar.WithElastic(true), nexar.WithJoinTimeout(opTimeout),
			nexar.WithConnectTimeout(opTimeout), nexar.WithCollectiveTimeout(opTimeout)}
		return nexar.Join(append(base, opts...)...)
	}
	members := make([]*nexar.Comm, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range members {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			members[r], errs[r] = join(nexar.WithRank(r))
		}(r)
	}
	within(t, rankDeadline, "Join of 2 ranks", wg.Wait)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("Join rank %d: %v", r, err)
		}
		defer members[r].Close()
	}
	var joiner *nexar.Comm
	var joinErr error
	joined := make(chan struct{})
	go func() {
		defer close(joined)
		joiner, joinErr = join()
	}()
	for _, c := range members {
		for n := 0; n < 1; {
			if n, err = c.PendingJoins(); err != nil {
				t.Fatalf("PendingJoins: %v", err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	grown := make([]*nexar.Comm, 2)
	onEach(t, members, func(c *nexar.Comm) error {
		g, err := c.Grow(1)
		grown[c.Rank()] = g
		return err
	})
	within(t, rankDeadline, "the joiner's Join", func() { <-joined })
	if joinErr != nil {
		t.Fatalf("joiner: %v", joinErr)
	}
	all := []*nexar.Comm{grown[0], grown[1], joiner}
	for r, c := range all {
		defer c.Close()
		if c.Rank() != r || c.Size() != 3 {
			t.Fatalf("grown comm %d is rank %d of %d", r, c.Rank(), c.Size())
		}
	}
	onEach(t, all, func(c *nexar.Comm) error {
		v := []float64{float64(c.Rank()) + 1}
		if err := nexar.AllReduce(context.Background(), c, v, nexar.Sum); err != nil {
			return err
		}
		return equal(v, []float64{6})
	})
}
