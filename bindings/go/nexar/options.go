package nexar

/*
#include "shim.h"
#include <stdlib.h>
*/
import "C"

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unsafe"
)

// ---- Options of the communicators BootstrapLocal and Join make ----------------

// Option changes one setting of the communicators BootstrapLocal and Join
// make. The defaults are nexar's, after the NEXAR_* environment variables.
type Option func(*config) error

// config is the nexar_comm_options_t passed to nexar, filled by
// nexar_comm_options_init and then changed by each Option, and the C
// strings it points to (freed by free once nexar has copied them).
type config struct {
	raw  C.nexar_comm_options_t
	strs cStrings
}

// cStrings are C copies of Go strings for one call into nexar, which copies
// every string it keeps; free releases them after the call.
type cStrings []*C.char

// add copies s into C memory; name says which setting, for the error about
// a NUL byte (which C would cut the string at).
func (cs *cStrings) add(name, s string) (*C.char, error) {
	if strings.IndexByte(s, 0) >= 0 {
		return nil, fmt.Errorf("the %s must not contain a NUL byte", name)
	}
	p := C.CString(s)
	*cs = append(*cs, p)
	return p, nil
}

func (cs *cStrings) free() {
	for _, p := range *cs {
		C.free(unsafe.Pointer(p))
	}
	*cs = nil
}

// checkWorldSize is the rule of nexar_bootstrap_local, nexar_comm_join and
// nexar_seed_start.
func checkWorldSize(n int) error {
	if n < 1 || n > 1024 {
		return fmt.Errorf("the world size must be in 1..1024, not %d", n)
	}
	return nil
}

// buildConfig makes the options of op: nexar's defaults, then opts.
func buildConfig(op string, opts []Option) (*config, error) {
	c := &config{}
	e := newErr()
	if err := takeErr(op, -1, C.gx_options_init(&c.raw, &e), &e); err != nil {
		return nil, err
	}
	for _, opt := range opts {
		if err := opt(c); err != nil {
			c.free()
			return nil, newError(op, -1, ErrInvalidArgument, -1, err.Error())
		}
	}
	return c, nil
}

func (c *config) free() { c.strs.free() }

// stringOption sets a string field to s (a copy in C memory).
func stringOption(name, s string, field func(*config) **C.char) Option {
	return func(c *config) error {
		p, err := c.strs.add(name, s)
		if err != nil {
			return err
		}
		*field(c) = p
		return nil
	}
}

// WithSeed names the seed Join joins, "host:port" (NEXAR_SEED).
func WithSeed(address string) Option {
	return stringOption("seed address", address, func(c *config) **C.char { return &c.raw.seed_address })
}

// WithClusterToken is the token the seed expects (NEXAR_CLUSTER_TOKEN).
func WithClusterToken(token string) Option {
	return stringOption("cluster token", token, func(c *config) **C.char { return &c.raw.cluster_token })
}

// WithListenAddress is the "host:port" this rank's QUIC endpoint binds
// (NEXAR_LISTEN_ADDR; default: one is picked).
func WithListenAddress(address string) Option {
	return stringOption("listen address", address, func(c *config) **C.char { return &c.raw.listen_address })
}

// WithAdvertiseAddress is the address the other ranks are told to reach
// this one at (NEXAR_ADVERTISE_ADDR).
func WithAdvertiseAddress(address string) Option {
	return stringOption("advertise address", address,
		func(c *config) **C.char { return &c.raw.advertise_address })
}

// WithSocketInterface chooses the network interface, in NCCL's syntax
// (NEXAR_SOCKET_IFNAME, e.g. "eth0" or "^docker").
func WithSocketInterface(spec string) Option {
	return stringOption("socket interface", spec, func(c *config) **C.char { return &c.raw.socket_ifname })
}

// WithRank is the rank Join asks the seed for (NEXAR_RANK; default: the
// seed assigns one).
func WithRank(r int) Option {
	return func(c *config) error {
		if r < 0 || r >= 1024 {
			return fmt.Errorf("rank must be in 0..1023, not %d", r)
		}
		c.raw.rank = C.int32_t(r)
		return nil
	}
}

// WithWorldSize is the number of ranks Join expects (NEXAR_WORLD_SIZE).
func WithWorldSize(n int) Option {
	return func(c *config) error {
		if err := checkWorldSize(n); err != nil {
			return err
		}
		c.raw.world_size = C.uint32_t(n)
		return nil
	}
}

func durationOption(name string, d time.Duration, field func(*config) *C.uint64_t) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%s must be positive, not %v", name, d)
		}
		*field(c) = millis(d)
		return nil
	}
}

// WithCollectiveTimeout bounds every collective but Barrier (default 30 s).
func WithCollectiveTimeout(d time.Duration) Option {
	return durationOption("collective timeout", d,
		func(c *config) *C.uint64_t { return &c.raw.collective_timeout_ms })
}

// WithBarrierTimeout bounds Barrier (default 30 s).
func WithBarrierTimeout(d time.Duration) Option {
	return durationOption("barrier timeout", d,
		func(c *config) *C.uint64_t { return &c.raw.barrier_timeout_ms })
}

// WithP2PTimeout bounds Send and Recv (default 300 s).
func WithP2PTimeout(d time.Duration) Option {
	return durationOption("p2p timeout", d, func(c *config) *C.uint64_t { return &c.raw.p2p_timeout_ms })
}

// WithConnectTimeout bounds forming the mesh (default 30 s).
func WithConnectTimeout(d time.Duration) Option {
	return durationOption("connect timeout", d,
		func(c *config) *C.uint64_t { return &c.raw.connect_timeout_ms })
}

// WithHeartbeatInterval sets how often peers are probed (default 1 s).
func WithHeartbeatInterval(d time.Duration) Option {
	return durationOption("heartbeat interval", d,
		func(c *config) *C.uint64_t { return &c.raw.heartbeat_interval_ms })
}

// WithHeartbeatTimeout sets after how long a silent peer counts as failed (default 5 s).
func WithHeartbeatTimeout(d time.Duration) Option {
	return durationOption("heartbeat timeout", d,
		func(c *config) *C.uint64_t { return &c.raw.heartbeat_timeout_ms })
}

// WithRPCTimeout bounds each Call (default 30 s).
func WithRPCTimeout(d time.Duration) Option {
	return durationOption("rpc timeout", d, func(c *config) *C.uint64_t { return &c.raw.rpc_timeout_ms })
}

// WithTopology chooses the mesh: "full" (every pair connected, the default),
// "ring" (each rank connected to its two neighbours, the rest relayed),
// "k_regular:K" (K neighbours each) or "hypercube" (about log2 N each); see
// docs/relay.md. Every rank must use the same topology.
func WithTopology(t string) Option {
	return func(c *config) error {
		switch {
		case t == "full":
			c.raw.topology = C.NEXAR_TOPOLOGY_FULL
		case t == "ring":
			c.raw.topology = C.NEXAR_TOPOLOGY_RING
		case t == "hypercube":
			c.raw.topology = C.NEXAR_TOPOLOGY_HYPERCUBE
		case strings.HasPrefix(t, "k_regular:"):
			k, err := strconv.ParseUint(t[len("k_regular:"):], 10, 16)
			if err != nil || k < 2 {
				return fmt.Errorf("topology %q: the degree must be a number from 2 to 65535", t)
			}
			c.raw.topology = C.NEXAR_TOPOLOGY_KREGULAR
			c.raw.topology_degree = C.uint32_t(k)
		default:
			return fmt.Errorf("topology must be \"full\", \"ring\", \"k_regular:K\" or "+
				"\"hypercube\", not %q", t)
		}
		return nil
	}
}

// WithTopologyEdges makes the mesh a custom graph: each pair is a direct
// link between two ranks, and the graph must be connected (creation fails
// otherwise). Every rank must give the same links.
func WithTopologyEdges(pairs [][2]int) Option {
	return func(c *config) error {
		if len(pairs) == 0 {
			return fmt.Errorf("topology edges: at least one pair of ranks is needed")
		}
		// C memory: nexar copies the pairs; free releases them with the strings.
		const word = C.size_t(unsafe.Sizeof(C.uint32_t(0)))
		mem := C.malloc(C.size_t(2*len(pairs)) * word)
		c.strs = append(c.strs, (*C.char)(mem))
		ranks := unsafe.Slice((*C.uint32_t)(mem), 2*len(pairs))
		for i, p := range pairs {
			for j, r := range p {
				if r < 0 || r > math.MaxUint32 {
					return fmt.Errorf("topology edge %d: rank %d is not valid", i, r)
				}
				ranks[2*i+j] = C.uint32_t(r)
			}
		}
		c.raw.topology = C.NEXAR_TOPOLOGY_CUSTOM
		c.raw.topology_edges = (*C.uint32_t)(mem)
		c.raw.topology_edge_count = C.size_t(len(pairs))
		return nil
	}
}

// WithSHM chooses the same-host path: "auto" (ranks on one host exchange
// payloads through shared memory, the default), "off" (every byte over QUIC)
// or "require" (creation fails if a same-host pair cannot use it).
func WithSHM(mode string) Option {
	return func(c *config) error {
		switch mode {
		case "auto":
			c.raw.shm = C.NEXAR_SHM_AUTO
		case "off":
			c.raw.shm = C.NEXAR_SHM_OFF
		case "require":
			c.raw.shm = C.NEXAR_SHM_REQUIRE
		default:
			return fmt.Errorf("shm must be \"auto\", \"off\" or \"require\", not %q", mode)
		}
		return nil
	}
}

// WithSHMMaxBytes bounds the shared segment of each process (default 64 MiB);
// same-host pairs beyond it stay on QUIC.
func WithSHMMaxBytes(n uint64) Option {
	return func(c *config) error {
		c.raw.shm_max_bytes = C.uint64_t(n)
		return nil
	}
}

// millis converts a positive duration to whole milliseconds, rounding up.
func millis(d time.Duration) C.uint64_t {
	ms := (d + time.Millisecond - 1) / time.Millisecond
	return C.uint64_t(ms)
}

// WithElastic keeps the connection to an elastic seed (Comm.PendingJoins,
// Comm.Grow) and lets a process join a running world: Join then waits until
// the members admit it (docs/elastic.md).
func WithElastic(on bool) Option {
	return func(c *config) error {
		if on {
			c.raw.elastic = 1
		} else {
			c.raw.elastic = 0
		}
		return nil
	}
}

// WithJoinTimeout bounds how long a joiner of a running world waits to be
// admitted (default 300 s).
func WithJoinTimeout(d time.Duration) Option {
	return durationOption("join timeout", d,
		func(c *config) *C.uint64_t { return &c.raw.join_timeout_ms })
}
