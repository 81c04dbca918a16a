package nexar_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nexar-project/nexar/bindings/go/nexar"
)

// The variables InitFromEnv reads to find a launcher (docs/cluster.md).
var launcherVars = []string{
	"NEXAR_SEED", "NEXAR_RANK", "NEXAR_WORLD_SIZE", "NEXAR_PORT", "RANK", "WORLD_SIZE",
	"MASTER_ADDR", "MASTER_PORT", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
	"PMI_RANK", "PMI_SIZE", "SLURM_PROCID", "SLURM_NTASKS",
}

// cleanEnv is this process's environment without any launcher's variables.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		keep := name != "GO_NEXAR_HELPER_RANK"
		for _, v := range launcherVars {
			if name == v {
				keep = false
			}
		}
		if keep {
			env = append(env, kv)
		}
	}
	return env
}

func TestInitFromEnvNothingFits(t *testing.T) {
	// In a child process, so that this process's environment stays as it is.
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperNoLauncher$", "-test.v")
	cmd.Env = append(cleanEnv(), "GO_NEXAR_HELPER_RANK=none")
	out, err := runBounded(t, cmd)
	if err != nil || !strings.Contains(out, "init_from_env: not found ok") {
		t.Fatalf("%v\n%s", err, out)
	}
}

func TestHelperNoLauncher(t *testing.T) {
	if os.Getenv("GO_NEXAR_HELPER_RANK") != "none" {
		t.Skip("run by TestInitFromEnvNothingFits")
	}
	c, err := nexar.InitFromEnv()
	if c != nil || !errors.Is(err, nexar.ErrNotFound) {
		t.Fatalf("InitFromEnv with no launcher: %v, %v; want ErrNotFound", c, err)
	}
	var ne *nexar.Error
	if !errors.As(err, &ne) || ne.Op != "init_from_env" || ne.Message == "" {
		t.Fatalf("error fields: %#v", err)
	}
	fmt.Println("init_from_env: not found ok")
}

// Three real processes (this test binary, re-run) join through the
// torchrun variables: rank 0 hosts the embedded seed.
func TestInitFromEnvProcesses(t *testing.T) {
	const n = 3
	l, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.LocalAddr().(*net.UDPAddr).Port
	l.Close()

	type result struct {
		out string
		err error
	}
	results := make(chan result, n)
	for r := 0; r < n; r++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperRank$", "-test.v")
		cmd.Env = append(cleanEnv(), fmt.Sprintf("GO_NEXAR_HELPER_RANK=%d", r),
			fmt.Sprintf("RANK=%d", r), fmt.Sprintf("WORLD_SIZE=%d", n),
			"MASTER_ADDR=127.0.0.1", fmt.Sprintf("MASTER_PORT=%d", port),
			"NEXAR_CONNECT_TIMEOUT_SECS=30", "NEXAR_COLLECTIVE_TIMEOUT_SECS=30")
		go func() {
			out, err := runBounded(t, cmd)
			results <- result{out, err}
		}()
	}
	var all []string
	for r := 0; r < n; r++ {
		res := <-results
		if res.err != nil {
			t.Errorf("a rank failed: %v\n%s", res.err, res.out)
		}
		all = append(all, res.out)
	}
	joined := strings.Join(all, "\n")
	for r := 0; r < n; r++ {
		if want := fmt.Sprintf("rank %d of %d: ok", r, n); !strings.Contains(joined, want) {
			t.Errorf("no %q in the output:\n%s", want, joined)
		}
	}
}

// One rank of TestInitFromEnvProcesses.
func TestHelperRank(t *testing.T) {
	if os.Getenv("GO_NEXAR_HELPER_RANK") == "" || os.Getenv("RANK") == "" {
		t.Skip("run by TestInitFromEnvProcesses")
	}
	c, err := nexar.InitFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), rankDeadline)
	defer cancel()
	n, r := c.Size(), c.Rank()
	if want := os.Getenv("RANK"); fmt.Sprint(r) != want {
		t.Fatalf("rank %d, RANK=%s", r, want)
	}
	buf := []int64{int64(r + 1)}
	if err := nexar.AllReduce(context.Background(), c, buf, nexar.Sum); err != nil {
		t.Fatal(err)
	}
	if buf[0] != int64(n*(n+1)/2) {
		t.Fatalf("allreduce gave %d", buf[0])
	}
	if err := c.Register(5, func(src uint32, req []byte) ([]byte, error) {
		return []byte(fmt.Sprintf("%d served %d: %s", r, src, req)), nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Barrier(ctx); err != nil { // everyone serves before anyone calls
		t.Fatal(err)
	}
	target := (r + 1) % n
	resp, err := c.Call(ctx, target, 5, []byte("hi"))
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%d served %d: hi", target, r); string(resp) != want {
		t.Fatalf("got %q, want %q", resp, want)
	}
	if err := c.Barrier(ctx); err != nil { // leave together
		t.Fatal(err)
	}
	fmt.Printf("rank %d of %d: ok\n", r, n)
}

// runBounded runs cmd for at most a minute and returns its combined output.
func runBounded(t *testing.T, cmd *exec.Cmd) (string, error) {
	var buf strings.Builder
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return buf.String(), err
	case <-time.After(rankDeadline):
		cmd.Process.Kill()
		<-done
		return buf.String(), fmt.Errorf("killed after %v", rankDeadline)
	}
}
