package nexar_test

import (
	"context"
	"errors"
	"testing"

	"github.com/nexar-project/nexar/bindings/go/nexar"
)

// Symmetric memory carries a large broadcast and an allreduce exactly (by
// reference between these same-host ranks), is freed once, and a slice it
// did not give is refused.
func TestMemAllocCarriesCollectives(t *testing.T) {
	comms := world(t, 2)
	const n = 1 << 18 // 1 MiB of float32: large enough to travel by reference
	ctx := context.Background()
	onEach(t, comms, func(c *nexar.Comm) error {
		buf, err := nexar.MemAlloc[float32](c, n)
		if err != nil {
			return err
		}
		for i := range buf {
			buf[i] = 0
			if c.Rank() == 1 {
				buf[i] = float32(i%1000) + 0.5
			}
		}
		if err := nexar.Broadcast(ctx, c, buf, 1); err != nil {
			return err
		}
		for i := range buf {
			if buf[i] != float32(i%1000)+0.5 {
				return errors.New("broadcast from symmetric memory: wrong element")
			}
		}
		if err := nexar.AllReduce(ctx, c, buf, nexar.Sum); err != nil {
			return err
		}
		for i := range buf {
			if buf[i] != 2*(float32(i%1000)+0.5) {
				return errors.New("allreduce in symmetric memory: wrong element")
			}
		}
		if err := nexar.MemFree(c, buf); err != nil {
			return err
		}
		if err := nexar.MemFree(c, buf); !errors.Is(err, nexar.ErrInvalidArgument) {
			return errors.New("a second MemFree was not refused")
		}
		other := make([]float32, 4)
		if err := nexar.MemFree(c, other); !errors.Is(err, nexar.ErrInvalidArgument) {
			return errors.New("MemFree of Go memory was not refused")
		}
		return nil
	})
}
