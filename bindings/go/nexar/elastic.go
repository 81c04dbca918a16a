package nexar

// #include "shim.h"
import "C"

// Elastic membership (docs/elastic.md): a world formed through an elastic
// seed, with WithElastic(true), takes in processes that join it later.

// PendingJoins is how many processes wait to join (local and cheap: the
// elastic seed tells every member whenever the number changes).
func (c *Comm) PendingJoins() (int, error) {
	var n C.uint32_t
	if err := c.callC("pending_joins", func(h *C.nexar_comm_t, e *C.gx_err) C.nexar_status_t {
		return C.gx_pending_joins(h, &n, e)
	}); err != nil {
		return 0, err
	}
	return int(n), nil
}

// Grow is collective over the members: it admits up to maxNew waiting
// processes and returns the grown communicator (old ranks keep their
// numbers, new ones are appended); c stays usable. A member failing during
// the grow fails it at every member with ErrPeerFailed: shrink, then grow.
func (c *Comm) Grow(maxNew int) (*Comm, error) {
	if maxNew < 0 {
		maxNew = 0
	}
	var out *C.nexar_comm_t
	if err := c.callC("grow", func(h *C.nexar_comm_t, e *C.gx_err) C.nexar_status_t {
		return C.gx_grow(h, C.uint32_t(maxNew), &out, e)
	}); err != nil {
		return nil, err
	}
	return newComm(out), nil
}
