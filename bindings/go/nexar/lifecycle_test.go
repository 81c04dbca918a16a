package nexar_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nexar-project/nexar/bindings/go/nexar"
)

// closedByClose checks the error of a Close that did not close the
// communicator: ErrClosed, naming "close" and the rank.
func closedByClose(err error, rank int) error {
	var ne *nexar.Error
	if !errors.Is(err, nexar.ErrClosed) || !errors.As(err, &ne) || ne.Op != "close" || ne.Rank != rank {
		return fmt.Errorf("got %v, want ErrClosed naming close on rank %d", err, rank)
	}
	return nil
}

func TestCloseOnceAndClosedErrors(t *testing.T) {
	comms := world(t, 2)
	c := comms[0]
	// Concurrent Close calls all return once it is closed: the one that
	// closed it nil, the others ErrClosed.
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- c.Close()
		}()
	}
	within(t, 10*time.Second, "concurrent Close", wg.Wait)
	close(errs)
	closers := 0
	for err := range errs {
		if err == nil {
			closers++
		} else if e := closedByClose(err, 0); e != nil {
			t.Errorf("a concurrent Close: %v", e)
		}
	}
	if closers != 1 {
		t.Fatalf("%d of 4 concurrent Close calls returned nil, want 1", closers)
	}
	if err := closedByClose(c.Close(), 0); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := comms[1].Close(); err != nil {
		t.Fatalf("first Close of rank 1: %v", err)
	}
	if err := closedByClose(comms[1].Close(), 1); err != nil {
		t.Fatalf("second Close of rank 1: %v", err)
	}
	if c.Rank() != 0 || c.Size() != 2 {
		t.Fatalf("Rank/Size after Close: %d/%d", c.Rank(), c.Size())
	}
	for _, m := range modes {
		ctx, cancel := m.ctx()
		_, callErr := c.Call(ctx, 1, 1, nil)
		_, splitErr := c.Split(ctx, 0, 0)
		_, statsErr := c.Stats()
		for _, tc := range []struct {
			what string
			err  error
		}{
			{"allreduce", nexar.AllReduce(ctx, c, []float32{1}, nexar.Sum)},
			{"barrier", c.Barrier(ctx)},
			{"send", nexar.Send(ctx, c, []byte("x"), 1, 0)},
			{"recv", nexar.Recv(ctx, c, []byte("x"), 1, 0)},
			{"rpc_call", callErr},
			{"split", splitErr},
			{"stats", statsErr},
			{"rpc_register", c.Register(1, func(uint32, []byte) ([]byte, error) { return nil, nil })},
			{"abort", c.Abort()},
		} {
			var ne *nexar.Error
			if !errors.Is(tc.err, nexar.ErrClosed) || !errors.As(tc.err, &ne) || ne.Op != tc.what {
				t.Errorf("%s (%s) after Close: got %v, want ErrClosed naming it", tc.what, m.name, tc.err)
			}
		}
		cancel()
	}
	if err := c.AsyncError(); err != nil {
		t.Fatalf("AsyncError after Close: %v", err)
	}
}

// Close waits for a blocking call in progress, which then completes normally.
func TestCloseWaitsForBlockingCall(t *testing.T) {
	comms := world(t, 2)
	recvDone := make(chan error, 1)
	go func() { recvDone <- nexar.Recv(context.Background(), comms[0], make([]byte, 3), 1, 4) }()
	waitFor(t, "the blocking recv to enter nexar", func() bool { return nexar.InFlight(comms[0]) == 1 })
	closed := make(chan error, 1)
	go func() { closed <- comms[0].Close() }()
	select {
	case <-closed:
		t.Fatal("Close returned while a blocking call was inside nexar")
	case err := <-recvDone:
		t.Fatalf("the recv returned before its message: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := nexar.Send(context.Background(), comms[1], []byte("abc"), 0, 4); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-recvDone:
		if err != nil {
			t.Fatalf("the recv in flight during Close: %v", err)
		}
	case <-time.After(rankDeadline):
		t.Fatal("the recv did not complete")
	}
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(rankDeadline):
		t.Fatal("Close did not return after the call finished")
	}
	if err := comms[0].Barrier(context.Background()); !errors.Is(err, nexar.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

func TestAbort(t *testing.T) {
	comms := world(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), rankDeadline)
	defer cancel()
	pending := make(chan error, 1)
	go func() { pending <- nexar.Recv(ctx, comms[1], make([]byte, 8), 0, 1) }()
	time.Sleep(100 * time.Millisecond)
	if err := comms[0].Abort(); err != nil {
		t.Fatal(err)
	}
	if err := comms[0].Barrier(context.Background()); !errors.Is(err, nexar.ErrAborted) {
		t.Fatalf("after Abort: got %v, want ErrAborted", err)
	}
	select {
	case err := <-pending: // the peer is told: its pending receive fails
		if !errors.Is(err, nexar.ErrAborted) && !errors.Is(err, nexar.ErrPeerFailed) {
			t.Fatalf("the peer's pending recv: got %v, want ErrAborted or ErrPeerFailed", err)
		}
	case <-time.After(rankDeadline):
		t.Fatal("the peer's pending recv did not fail after Abort")
	}
	waitFor(t, "the peer's async error", func() bool { return comms[1].AsyncError() != nil })
}

func TestStatsAndVersion(t *testing.T) {
	comms := world(t, 2, nexar.WithSHM("off")) // every byte over QUIC
	onEach(t, comms, func(c *nexar.Comm) error {
		return nexar.AllReduce(context.Background(), c, make([]float64, 1000), nexar.Sum)
	})
	s, err := comms[0].Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s.BytesSent < 8000 || s.BytesReceived < 8000 || s.Connections < 1 || s.MessagesSent < 1 {
		t.Fatalf("stats after an 8000-byte allreduce: %+v", s)
	}
	// A payload of 16 KiB or more is sealed straight from its buffer when
	// ipsec-mb is in use (CI installs it).
	onEach(t, comms, func(c *nexar.Comm) error {
		return nexar.AllReduce(context.Background(), c, make([]float64, 1<<17), nexar.Sum)
	})
	if s2, err := comms[0].Stats(); err != nil {
		t.Fatal(err)
	} else if s2.PacketsFastAEAD > 0 && s2.BytesSealedInPlace <= s.BytesSealedInPlace {
		t.Fatalf("a 1 MiB allreduce sealed nothing from its buffer: %+v", s2)
	}
	if v := nexar.Version(); v == "" || v[0] < '0' || v[0] > '9' {
		t.Fatalf("Version() = %q", v)
	}
}

// Hypercube, k_regular and custom meshes: few links each, exact results.
func TestSparseTopologies(t *testing.T) {
	cases := []struct {
		name  string
		n     int
		opt   nexar.Option
		links []uint64
	}{
		{"hypercube", 8, nexar.WithTopology("hypercube"), []uint64{3, 3, 3, 3, 3, 3, 3, 3}},
		{"k_regular:4", 6, nexar.WithTopology("k_regular:4"), []uint64{4, 4, 4, 4, 4, 4}},
		{"path", 4, nexar.WithTopologyEdges([][2]int{{0, 1}, {1, 2}, {2, 3}}), []uint64{1, 2, 2, 1}},
	}
	for _, tc := range cases {
		comms := world(t, tc.n, tc.opt)
		onEach(t, comms, func(c *nexar.Comm) error {
			buf := []int64{int64(c.Rank() + 1)}
			if err := nexar.AllReduce(context.Background(), c, buf, nexar.Sum); err != nil {
				return err
			}
			return equal(buf, []int64{int64(tc.n * (tc.n + 1) / 2)})
		})
		for r, c := range comms {
			st, err := c.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if st.Connections != tc.links[r] {
				t.Errorf("%s: rank %d has %d connections, want %d", tc.name, r, st.Connections,
					tc.links[r])
			}
		}
	}
	if _, err := nexar.BootstrapLocal(4, nexar.WithTopologyEdges([][2]int{{0, 1}, {2, 3}})); err == nil ||
		!strings.Contains(err.Error(), "not connected") {
		t.Fatalf("a disconnected graph: err = %v", err)
	}
	if _, err := nexar.BootstrapLocal(4, nexar.WithTopology("k_regular:1")); err == nil {
		t.Fatal("k_regular:1 accepted")
	}
}

// A ring topology relays between ranks that are not neighbours.
func TestRingTopology(t *testing.T) {
	comms := world(t, 4, nexar.WithTopology("ring"))
	onEach(t, comms, func(c *nexar.Comm) error {
		buf := []int32{int32(c.Rank())}
		if err := nexar.AllReduce(context.Background(), c, buf, nexar.Sum); err != nil {
			return err
		}
		if err := equal(buf, []int32{6}); err != nil {
			return err
		}
		switch c.Rank() { // 0 and 2 are not neighbours
		case 0:
			return nexar.Send(context.Background(), c, []byte("relayed"), 2, 1)
		case 2:
			got := make([]byte, 7)
			if err := nexar.Recv(context.Background(), c, got, 0, 1); err != nil {
				return err
			}
			return equal(got, []byte("relayed"))
		}
		return nil
	})
	s, err := comms[0].Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s.RelayBytesSent == 0 {
		t.Fatalf("rank 0 relayed nothing in a ring: %+v", s)
	}
}

// A Comm nobody closes is closed by the garbage collector once it is
// unreachable: both ranks' communicators are destroyed by their finalizers.
func TestUnreachableCommsAreClosedByTheCollector(t *testing.T) {
	before := nexar.FinalizerCloses()
	func() {
		comms, err := nexar.BootstrapLocal(2, nexar.WithConnectTimeout(opTimeout),
			nexar.WithBarrierTimeout(opTimeout))
		if err != nil {
			t.Fatalf("BootstrapLocal(2): %v", err)
		}
		onEach(t, comms, func(c *nexar.Comm) error { return c.Barrier(context.Background()) })
	}()
	deadline := time.Now().Add(30 * time.Second)
	for nexar.FinalizerCloses()-before < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 2 unreachable communicators closed after 30 s of collections",
				nexar.FinalizerCloses()-before)
		}
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
	}
}

// Ranks in one process share a host: payloads go through shared memory,
// with the same results as over QUIC.
func TestSameHostSharedMemory(t *testing.T) {
	sums := map[string][]float32{}
	for _, mode := range []string{"auto", "off"} {
		comms := world(t, 3, nexar.WithSHM(mode))
		out := make([][]float32, 3)
		onEach(t, comms, func(c *nexar.Comm) error {
			buf := make([]float32, 100003)
			for i := range buf {
				buf[i] = 1 / float32(1+(i*7+c.Rank()*13)%1001) * float32(c.Rank()*1000+1)
			}
			out[c.Rank()] = buf
			return nexar.AllReduce(context.Background(), c, buf, nexar.Sum)
		})
		s, err := comms[0].Stats()
		if err != nil {
			t.Fatal(err)
		}
		if mode == "auto" && (s.SHMPairs != 2 || s.SHMCollectives != 1 || s.BytesSent >= 100003*4) {
			t.Fatalf("shm=auto: %+v", s)
		}
		if mode == "off" && (s.SHMPairs != 0 || s.SHMBytesSent != 0 || s.SHMCollectives != 0) {
			t.Fatalf("shm=off: %+v", s)
		}
		sums[mode] = out[1]
	}
	for i := range sums["auto"] {
		if math.Float32bits(sums["auto"][i]) != math.Float32bits(sums["off"][i]) {
			t.Fatalf("element %d: %v over shared memory, %v over QUIC", i, sums["auto"][i], sums["off"][i])
		}
	}
	if _, err := nexar.BootstrapLocal(2, nexar.WithSHM("sometimes")); err == nil {
		t.Fatal("an unknown shm mode was accepted")
	}
}
