package nexar

// LivePending is the number of cancellable-path records not yet freed.
func LivePending() int64 { return livePending.Load() }

// InFlight is the number of calls inside nexar on c right now.
func InFlight(c *Comm) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inflight
}
