package nexar_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nexar-project/nexar/bindings/go/nexar"
)

// logLines collects what the log handler receives.
type logLines struct {
	mu    sync.Mutex
	lines []string
	level []nexar.LogLevel
}

func (l *logLines) add(level nexar.LogLevel, line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, line)
	l.level = append(l.level, level)
}

func (l *logLines) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// find returns the first line containing text and its level.
func (l *logLines) find(text string) (string, nexar.LogLevel, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, s := range l.lines {
		if strings.Contains(s, text) {
			return s, l.level[i], true
		}
	}
	return "", 0, false
}

// A seed started from Go forms a 2-rank world joined from Go; a wrong token
// is refused with ErrAuth; nexar's log lines reach the Go handler (an open
// seed warns), and a panicking handler loses its line, not the process. Log
// handlers are process-wide: only this test and the next set one, one after
// the other.
func TestSeedJoinAndLogHandler(t *testing.T) {
	var got logLines
	if err := nexar.SetLogHandler(got.add); err != nil {
		t.Fatalf("SetLogHandler: %v", err)
	}
	defer func() {
		if err := nexar.SetLogHandler(nil); err != nil {
			t.Errorf("SetLogHandler(nil): %v", err)
		}
	}()

	seed, err := nexar.StartSeed(nexar.SeedOptions{WorldSize: 2, ClusterToken: "go-token",
		FormationTimeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("StartSeed: %v", err)
	}
	defer seed.Stop()
	if !strings.HasPrefix(seed.Address(), "127.0.0.1:") {
		t.Fatalf("seed address %q", seed.Address())
	}
	if ended, err := seed.Wait(time.Millisecond); ended || err != nil {
		t.Fatalf("Wait on a forming world: ended %v, %v", ended, err)
	}
	comms := make([]*nexar.Comm, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range comms {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			comms[r], errs[r] = nexar.Join(nexar.WithSeed(seed.Address()),
				nexar.WithClusterToken("go-token"), nexar.WithRank(r), nexar.WithWorldSize(2),
				nexar.WithConnectTimeout(opTimeout), nexar.WithCollectiveTimeout(opTimeout))
		}(r)
	}
	within(t, rankDeadline, "Join of 2 ranks", wg.Wait)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("Join rank %d: %v", r, err)
		}
		defer comms[r].Close()
	}
	if ended, err := seed.Wait(30 * time.Second); !ended || err != nil {
		t.Fatalf("seed Wait after formation: ended %v, %v", ended, err)
	}
	for r, c := range comms {
		if c.Rank() != r || c.Size() != 2 {
			t.Fatalf("joined comm %d is %v", r, c)
		}
	}
	onEach(t, comms, func(c *nexar.Comm) error {
		v := []float64{float64(c.Rank()) + 0.5}
		if err := nexar.AllReduce(context.Background(), c, v, nexar.Sum); err != nil {
			return err
		}
		return equal(v, []float64{2})
	})

	// A wrong token is refused.
	seed2, err := nexar.StartSeed(nexar.SeedOptions{WorldSize: 1, ClusterToken: "right",
		FormationTimeout: 20 * time.Second})
	if err != nil {
		t.Fatalf("StartSeed: %v", err)
	}
	_, err = nexar.Join(nexar.WithSeed(seed2.Address()), nexar.WithClusterToken("wrong"),
		nexar.WithWorldSize(1), nexar.WithConnectTimeout(20*time.Second))
	var ne *nexar.Error
	if !errors.Is(err, nexar.ErrAuth) || !errors.As(err, &ne) || ne.Op != "join" {
		t.Fatalf("Join with a wrong token: %v, want ErrAuth naming join", err)
	}
	seed2.Stop()
	if _, err := seed2.Wait(time.Millisecond); !errors.Is(err, nexar.ErrClosed) {
		t.Fatalf("Wait after Stop: %v, want ErrClosed", err)
	}

	// An open seed logs a warning through the handler.
	if err := logAWarning(); err != nil {
		t.Fatal(err)
	}
	line, level, ok := got.find("runs open")
	if !ok || level != nexar.LogWarn || !strings.Contains(line, "warn") {
		t.Fatalf("no warning about the open seed among the handler's lines: %q", got.snapshot())
	}

	// A panicking handler loses its line; the process and nexar go on.
	panicked := make(chan struct{}, 16)
	if err := nexar.SetLogHandler(func(nexar.LogLevel, string) {
		select {
		case panicked <- struct{}{}:
		default:
		}
		panic("a log handler that panics")
	}); err != nil {
		t.Fatalf("SetLogHandler: %v", err)
	}
	if err := logAWarning(); err != nil {
		t.Fatalf("after a panicking handler: %v", err)
	}
	select {
	case <-panicked:
	case <-time.After(10 * time.Second):
		t.Fatal("the panicking handler was not called")
	}
	if err := nexar.SetLogHandler(got.add); err != nil {
		t.Fatalf("SetLogHandler after a panic: %v", err)
	}
}

// A handler that replaces the handler while another goroutine's
// SetLogHandler holds the binding's lock and waits inside nexar for this very
// call to end gets ErrWouldDeadlock at once (a per-thread flag in shim.c),
// instead of waiting for that lock, which would hang both. It is the last
// test of the package: if that hang came back, this test fails after 10 s and
// leaves nexar's log callback stuck, which no later test could live with.
func TestLogHandlerReplacedFromInsideWhileAnotherReplacesIt(t *testing.T) {
	var got logLines
	running := make(chan struct{})
	inner := make(chan error, 1)
	var once sync.Once
	if err := nexar.SetLogHandler(func(nexar.LogLevel, string) {
		once.Do(func() {
			close(running)
			time.Sleep(200 * time.Millisecond) // the SetLogHandler below waits by now
			inner <- nexar.SetLogHandler(nil)
		})
	}); err != nil {
		t.Fatalf("SetLogHandler: %v", err)
	}
	logged := make(chan error, 1)
	go func() { logged <- logAWarning() }()
	select {
	case <-running:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler was not called")
	}
	var replaced error
	within(t, 10*time.Second, "SetLogHandler while the running handler calls it too", func() {
		replaced = nexar.SetLogHandler(got.add)
	})
	if replaced != nil {
		t.Fatalf("SetLogHandler while the handler ran: %v", replaced)
	}
	if err := <-inner; !errors.Is(err, nexar.ErrWouldDeadlock) {
		t.Fatalf("SetLogHandler inside the handler: %v, want ErrWouldDeadlock", err)
	}
	if err := <-logged; err != nil {
		t.Fatal(err)
	}
	if err := nexar.SetLogHandler(nil); err != nil {
		t.Fatalf("SetLogHandler(nil): %v", err)
	}
}

// logAWarning starts and stops an open seed, which logs a warning.
func logAWarning() error {
	open, err := nexar.StartSeed(nexar.SeedOptions{WorldSize: 1, Open: true})
	if err != nil {
		return fmt.Errorf("StartSeed (open): %w", err)
	}
	open.Stop()
	return nil
}
