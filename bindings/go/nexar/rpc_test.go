package nexar_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/nexar-project/nexar/bindings/go/nexar"
)

func TestRPC(t *testing.T) {
	comms := world(t, 2)
	server, client := comms[1], comms[0]

	if err := server.Register(1, func(src uint32, req []byte) ([]byte, error) {
		out := []byte(fmt.Sprintf("from %d: ", src))
		for i := len(req) - 1; i >= 0; i-- {
			out = append(out, req[i])
		}
		return out, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := server.Register(2, func(uint32, []byte) ([]byte, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	if err := client.Register(3, func(src uint32, req []byte) ([]byte, error) {
		return append([]byte("self "), req...), nil
	}); err != nil {
		t.Fatal(err)
	}

	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			ctx, cancel := m.ctx()
			defer cancel()
			resp, err := client.Call(ctx, 1, 1, []byte("abc"))
			if err != nil {
				t.Fatal(err)
			}
			if string(resp) != "from 0: cba" {
				t.Fatalf("got %q", resp)
			}
			resp, err = client.Call(ctx, 1, 2, nil) // empty request, empty response
			if err != nil || len(resp) != 0 {
				t.Fatalf("empty call: %q, %v", resp, err)
			}
			resp, err = client.Call(ctx, 0, 3, []byte("call")) // this rank
			if err != nil || string(resp) != "self call" {
				t.Fatalf("call to self: %q, %v", resp, err)
			}
			big := bytes.Repeat([]byte{1, 2, 3, 4, 5, 6, 7}, 150000) // ~1 MiB each way
			resp, err = client.Call(ctx, 1, 1, big)
			if err != nil {
				t.Fatal(err)
			}
			if len(resp) != len("from 0: ")+len(big) || resp[len(resp)-1] != 1 || resp[len(resp)-2] != 2 {
				t.Fatalf("big call: %d bytes back", len(resp))
			}
			_, err = client.Call(ctx, 1, 77, []byte("x"))
			if !errors.Is(err, nexar.ErrRPCNotRegistered) {
				t.Fatalf("unknown fn: got %v, want ErrRPCNotRegistered", err)
			}
		})
	}

	// Many concurrent calls, both paths, each checked.
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ctx := context.Background()
			if i%2 == 1 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, rankDeadline)
				defer cancel()
			}
			resp, err := client.Call(ctx, 1, 1, []byte{byte(i), 'x'})
			if err == nil && !bytes.Equal(resp, append([]byte("from 0: x"), byte(i))) {
				err = fmt.Errorf("call %d got %q", i, resp)
			}
			errs <- err
		}(i)
	}
	within(t, rankDeadline, "64 concurrent calls", wg.Wait)
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}

	// Replacing, then unregistering.
	if err := server.Register(1, func(uint32, []byte) ([]byte, error) { return []byte("v2"), nil }); err != nil {
		t.Fatal(err)
	}
	if resp, err := client.Call(context.Background(), 1, 1, nil); err != nil || string(resp) != "v2" {
		t.Fatalf("replaced handler: %q, %v", resp, err)
	}
	if err := server.Unregister(1); err != nil {
		t.Fatal(err)
	}
	_, err := client.Call(context.Background(), 1, 1, nil)
	if !errors.Is(err, nexar.ErrRPCNotRegistered) {
		t.Fatalf("after Unregister: got %v, want ErrRPCNotRegistered", err)
	}
	var ne *nexar.Error
	if !errors.As(err, &ne) || ne.Op != "rpc_call" || ne.Rank != 0 {
		t.Fatalf("after Unregister: %#v", err)
	}
}

func TestRPCHandlerFailures(t *testing.T) {
	comms := world(t, 2)
	server, client := comms[1], comms[0]
	if err := server.Register(10, func(uint32, []byte) ([]byte, error) {
		return nil, errors.New("bad request: no widgets")
	}); err != nil {
		t.Fatal(err)
	}
	if err := server.Register(11, func(uint32, []byte) ([]byte, error) {
		var m map[string]int
		m["kaboom"]++ // a nil map: runtime panic
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := server.Register(12, func(uint32, []byte) ([]byte, error) {
		panic("custom panic value 1234")
	}); err != nil {
		t.Fatal(err)
	}
	// A blocking operation inside a handler would wait for the thread that runs it.
	inner := make(chan error, 1)
	if err := server.Register(13, func(uint32, []byte) ([]byte, error) {
		err := server.Barrier(context.Background())
		inner <- err
		return nil, err
	}); err != nil {
		t.Fatal(err)
	}

	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			ctx, cancel := m.ctx()
			defer cancel()
			for _, tc := range []struct {
				fn   uint32
				want []string
			}{
				{10, []string{"bad request: no widgets"}},
				{11, []string{"panic", "assignment to entry in nil map"}},
				{12, []string{"panic", "custom panic value 1234"}},
			} {
				resp, err := client.Call(ctx, 1, tc.fn, []byte("req"))
				if !errors.Is(err, nexar.ErrRPCFailed) {
					t.Fatalf("fn %d: got %q, %v; want ErrRPCFailed", tc.fn, resp, err)
				}
				for _, w := range tc.want {
					if !contains(err.Error(), w) {
						t.Errorf("fn %d: %q does not mention %q", tc.fn, err, w)
					}
				}
			}
			_, err := client.Call(ctx, 1, 13, nil)
			if !errors.Is(err, nexar.ErrRPCFailed) {
				t.Fatalf("fn 13: got %v, want ErrRPCFailed", err)
			}
			if in := <-inner; !errors.Is(in, nexar.ErrWouldDeadlock) {
				t.Fatalf("a blocking call inside a handler: got %v, want ErrWouldDeadlock", in)
			}
		})
	}
	// The server still serves after its handlers failed and panicked.
	if err := server.Register(14, func(uint32, []byte) ([]byte, error) { return []byte("ok"), nil }); err != nil {
		t.Fatal(err)
	}
	if resp, err := client.Call(context.Background(), 1, 14, nil); err != nil || string(resp) != "ok" {
		t.Fatalf("after failures: %q, %v", resp, err)
	}
}
