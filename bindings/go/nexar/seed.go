package nexar

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"time"
)

// SeedOptions configure StartSeed. Fields left at their zero value keep
// nexar's defaults, after the NEXAR_* environment variables.
type SeedOptions struct {
	WorldSize        int           // workers expected, 1..1024 (required)
	ListenAddress    string        // "ip:port" to bind (default "127.0.0.1:0")
	ClusterToken     string        // the token workers must present
	TokenFile        string        // a file holding the token, read when ClusterToken is empty
	CADir            string        // the cluster CA's directory (ca.pem, ca-key.pem), made if absent
	Open             bool          // admit remote workers without a token (logs a warning)
	FormationTimeout time.Duration // how long formation may take (default 60 s)
	Elastic          bool          // stay up after formation and admit joiners (Comm.Grow)
	MaxWorldSize     int           // with Elastic: no grow past this many ranks (0: 1024)
}

// Seed is a running nexar seed (nexar_seed_t): the discovery server that
// admits workers, hands out ranks and certificates, and sees the mesh
// formed. Workers reach it with Join(WithSeed(seed.Address()), ...).
type Seed struct {
	mu   sync.Mutex // Wait's calls into nexar and Stop never overlap
	h    *C.nexar_seed_t
	addr string
}

// StartSeed binds and starts admitting workers, on a thread of nexar's own,
// until the world is complete or the formation timeout passes. Without a
// token it admits only workers on this host, unless Open is set.
func StartSeed(o SeedOptions) (*Seed, error) {
	const op = "seed_start"
	if err := checkWorldSize(o.WorldSize); err != nil {
		return nil, newError(op, -1, ErrInvalidArgument, -1, err.Error())
	}
	if o.FormationTimeout < 0 {
		return nil, newError(op, -1, ErrInvalidArgument, -1,
			fmt.Sprintf("the formation timeout must not be negative, not %v", o.FormationTimeout))
	}
	var raw C.nexar_seed_options_t
	e := newErr()
	if err := takeErr(op, -1, C.gx_seed_options_init(&raw, &e), &e); err != nil {
		return nil, err
	}
	raw.world_size = C.uint32_t(o.WorldSize)
	if o.Open {
		raw.open = 1
	}
	if o.FormationTimeout > 0 {
		raw.formation_timeout_ms = millis(o.FormationTimeout)
	}
	if o.Elastic {
		raw.elastic = 1
	}
	if o.MaxWorldSize > 0 {
		raw.max_world_size = C.uint32_t(o.MaxWorldSize)
	}
	var strs cStrings
	defer strs.free()
	for _, f := range []struct {
		name, value string
		field       **C.char
	}{
		{"listen address", o.ListenAddress, &raw.listen_address},
		{"cluster token", o.ClusterToken, &raw.cluster_token},
		{"token file", o.TokenFile, &raw.token_file},
		{"CA directory", o.CADir, &raw.ca_dir},
	} {
		if f.value == "" {
			continue
		}
		p, err := strs.add(f.name, f.value)
		if err != nil {
			return nil, newError(op, -1, ErrInvalidArgument, -1, err.Error())
		}
		*f.field = p
	}
	var h *C.nexar_seed_t
	e = newErr()
	if err := takeErr(op, -1, C.gx_seed_start(&h, &raw, &e), &e); err != nil {
		return nil, err
	}
	s := &Seed{h: h, addr: C.GoString(C.nexar_seed_address(h))}
	// As for Comm: a seed nobody stops is stopped once it is unreachable.
	runtime.SetFinalizer(s, func(s *Seed) { go s.Stop() })
	return s, nil
}

// Address is the "host:port" the seed actually bound.
func (s *Seed) Address() string { return s.addr }

// String describes the seed, e.g. "nexar.Seed(127.0.0.1:41234)".
func (s *Seed) String() string { return fmt.Sprintf("nexar.Seed(%s)", s.addr) }

// Wait waits up to timeout for formation to end. ended is false while the
// world is still forming. Once it has ended, ended is true and err is nil
// when every rank reported its mesh formed, else the failure (ErrTimeout
// when the formation timeout passed). After Stop it returns ErrClosed.
func (s *Seed) Wait(timeout time.Duration) (ended bool, err error) {
	const op = "seed_wait"
	deadline := time.Now().Add(timeout)
	for {
		// Short slices, so that Stop never waits long for a Wait.
		slice := time.Until(deadline)
		if slice > 100*time.Millisecond {
			slice = 100 * time.Millisecond
		}
		if slice < 0 {
			slice = 0
		}
		s.mu.Lock()
		if s.h == nil {
			s.mu.Unlock()
			return false, newError(op, -1, ErrClosed, -1, "the seed is stopped")
		}
		var done C.int32_t
		e := newErr()
		st := C.gx_seed_wait(s.h, C.uint32_t(slice/time.Millisecond), &done, &e)
		s.mu.Unlock()
		// Formation ended (its result), or the call failed: anything but
		// "still forming" (NEXAR_ERR_TIMEOUT while not ended).
		if done != 0 || st != C.NEXAR_ERR_TIMEOUT {
			return done != 0, takeErr(op, -1, st, &e)
		}
		if !time.Now().Before(deadline) {
			return false, nil
		}
	}
}

// Stop closes every connection of the seed and releases it. Communicators
// already formed are not affected. Later calls do nothing.
func (s *Seed) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.h != nil {
		C.nexar_seed_stop(s.h)
		s.h = nil
	}
}
