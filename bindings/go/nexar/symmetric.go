package nexar

// #include "shim.h"
import "C"

import "unsafe"

// MemAlloc returns n elements of this rank's symmetric memory
// (nexar_mem_alloc): a slice over C memory inside the rank's shared segment.
// Large messages sent from it to ranks on the same host travel by
// reference, one copy instead of two; it works like any other slice
// everywhere else. Free it with MemFree; it is gone once the last
// communicator of this rank's engine is closed.
func MemAlloc[T Numeric](c *Comm, n int) ([]T, error) {
	var zero T
	size := int(unsafe.Sizeof(zero))
	if n <= 0 || n > int(^uint(0)>>1)/size {
		return nil, invalid(c, "mem_alloc", "n must be positive and n * element size fit (n = %d)", n)
	}
	var p unsafe.Pointer
	if err := c.callC("mem_alloc", func(h *C.nexar_comm_t, e *C.gx_err) C.nexar_status_t {
		return C.gx_mem_alloc(h, C.size_t(n*size), &p, e)
	}); err != nil {
		return nil, err
	}
	return unsafe.Slice((*T)(p), n), nil
}

// MemFree frees a slice MemAlloc returned (nexar_mem_free); an empty slice
// is nothing to free. ErrInvalidArgument for a slice MemAlloc did not give.
func MemFree[T Numeric](c *Comm, s []T) error {
	if len(s) == 0 {
		return nil
	}
	p := unsafe.Pointer(&s[0])
	return c.callC("mem_free", func(h *C.nexar_comm_t, e *C.gx_err) C.nexar_status_t {
		return C.gx_mem_free(h, p, e)
	})
}
