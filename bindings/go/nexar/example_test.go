package nexar_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/nexar-project/nexar/bindings/go/nexar"
)

// Two ranks in one process, one goroutine each, sum a vector.
func Example() {
	comms, err := nexar.BootstrapLocal(2)
	if err != nil {
		panic(err)
	}
	results := make([][]float32, len(comms))
	var wg sync.WaitGroup
	for _, c := range comms {
		wg.Add(1)
		go func(c *nexar.Comm) {
			defer wg.Done()
			grad := []float32{float32(c.Rank()), 1, 2}
			if err := nexar.AllReduce(context.Background(), c, grad, nexar.Sum); err != nil {
				panic(err)
			}
			results[c.Rank()] = grad
		}(c)
	}
	wg.Wait()
	for _, c := range comms {
		c.Close()
	}
	fmt.Println(results[0], results[1])
	// Output: [1 2 4] [1 2 4]
}

// Serving and calling a function.
func ExampleComm_Call() {
	comms, err := nexar.BootstrapLocal(2)
	if err != nil {
		panic(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	comms[1].Register(42, func(src uint32, req []byte) ([]byte, error) {
		return []byte(fmt.Sprintf("rank %d asked %q", src, req)), nil
	})
	resp, err := comms[0].Call(context.Background(), 1, 42, []byte("ping"))
	fmt.Println(string(resp), err)
	// Output: rank 0 asked "ping" <nil>
}

// Half-precision values hold their bits; convert them from and to float32.
func ExampleFloat16FromFloat32() {
	h, b := nexar.Float16FromFloat32(1), nexar.BFloat16FromFloat32(-2.5)
	fmt.Printf("%#04x %v %#04x %v\n", uint16(h), h, uint16(b), b.Float32())
	fmt.Println(nexar.Float16FromFloat32(70000), nexar.Float16(0x0001).Float32())
	// Output:
	// 0x3c00 1 0xc020 -2.5
	// +Inf 5.9604645e-08
}
