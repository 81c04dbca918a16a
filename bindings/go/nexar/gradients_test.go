package nexar_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/nexar-project/nexar/bindings/go/nexar"
)

// Bucketed results equal one AllReduce per slice; the cancellable path too.
func TestAllReduceBucketedEqualsPerSlice(t *testing.T) {
	comms := world(t, 3)
	sizes := []int{0, 7, 70000, 3, 300001, 11}
	onEach(t, comms, func(c *nexar.Comm) error {
		mine := make([][]int64, len(sizes))
		ref := make([][]int64, len(sizes))
		for i, n := range sizes {
			mine[i] = make([]int64, n)
			for j := range mine[i] {
				mine[i][j] = int64(j*(c.Rank()+1) + i)
			}
			ref[i] = append([]int64(nil), mine[i]...)
			if err := nexar.AllReduce(context.Background(), c, ref[i], nexar.Sum); err != nil {
				return err
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), rankDeadline)
		defer cancel()
		if err := nexar.AllReduceBucketed(ctx, c, mine, nexar.Sum, 1<<20); err != nil {
			return err
		}
		for i := range sizes {
			for j := range mine[i] {
				if mine[i][j] != ref[i][j] {
					return fmt.Errorf("slice %d element %d: %d, want %d", i, j, mine[i][j], ref[i][j])
				}
			}
		}
		return nil
	})
}

// TopK over 3 ranks: the sum of each rank's 1 % largest magnitudes.
func TestAllReduceCompressedTopK(t *testing.T) {
	comms := world(t, 3)
	const n = 2000 // k = 20
	input := func(rank, i int) float32 { return float32(math.Sin(float64(i*(rank+3)))) * float32(i%97) }
	results := make([][]float32, len(comms))
	onEach(t, comms, func(c *nexar.Comm) error {
		z, err := nexar.NewCompressor[float32](nexar.TopK, 0.01, n, 0)
		if err != nil {
			return err
		}
		defer z.Close()
		in := make([]float32, n)
		for i := range in {
			in[i] = input(c.Rank(), i)
		}
		out := make([]float32, n)
		results[c.Rank()] = out
		return nexar.AllReduceCompressed(context.Background(), c, in, out, z)
	})
	want := make([]float32, n)
	for r := range comms {
		// Top 20 by magnitude, ties to the lower index.
		taken := make([]bool, n)
		for k := 0; k < 20; k++ {
			best := -1
			for i := 0; i < n; i++ {
				if !taken[i] && (best < 0 || math.Abs(float64(input(r, i))) > math.Abs(float64(input(r, best)))) {
					best = i
				}
			}
			taken[best] = true
		}
		for i := 0; i < n; i++ {
			if taken[i] {
				want[i] += input(r, i)
			}
		}
	}
	for r, got := range results {
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("rank %d element %d: %v, want %v", r, i, got[i], want[i])
			}
		}
	}
}

// RandomK: the same positions everywhere; different ratios: ErrMismatch.
func TestAllReduceCompressedRandomKAndMismatch(t *testing.T) {
	comms := world(t, 2)
	const n = 1000
	results := make([][]float64, 2)
	onEach(t, comms, func(c *nexar.Comm) error {
		z, err := nexar.NewCompressor[float64](nexar.RandomK, 0.05, n, 42)
		if err != nil {
			return err
		}
		defer z.Close()
		buf := make([]float64, n)
		for i := range buf {
			buf[i] = float64(c.Rank() + 1)
		}
		results[c.Rank()] = buf
		return nexar.AllReduceCompressed(context.Background(), c, buf, buf, z)
	})
	kept := 0
	for i := 0; i < n; i++ {
		if results[0][i] != results[1][i] {
			t.Fatalf("element %d differs between ranks", i)
		}
		if results[0][i] != 0 {
			kept++
			if results[0][i] != 3 {
				t.Fatalf("element %d: %v, want 3", i, results[0][i])
			}
		}
	}
	if kept != 50 {
		t.Fatalf("%d elements kept, want 50", kept)
	}
	onEach(t, comms, func(c *nexar.Comm) error {
		z, err := nexar.NewCompressor[float32](nexar.TopK, 0.01*float64(c.Rank()+1), n, 0)
		if err != nil {
			return err
		}
		defer z.Close()
		buf := make([]float32, n)
		err = nexar.AllReduceCompressed(context.Background(), c, buf, buf, z)
		if !errors.Is(err, nexar.ErrMismatch) {
			return fmt.Errorf("mismatched compressors: %v, want ErrMismatch", err)
		}
		return nil
	})
	if _, err := nexar.NewCompressor[int32](nexar.TopK, 0.1, 10, 0); !errors.Is(err, nexar.ErrInvalidArgument) {
		t.Fatalf("an int32 compressor: %v, want ErrInvalidArgument", err)
	}
}
