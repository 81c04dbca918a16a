// Reading another process's memory straight into this one's (Linux's
// process_vm_readv, "cross-memory attach"): one copy between two ranks of a
// host instead of two through a shared segment. The kernel allows it only
// where it would allow ptrace (same uid, and Yama's ptrace_scope or a
// capability permitting); nexar never widens that permission, it only uses
// it where the host already grants it.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "core/unique_fd.h"

namespace nexar {

// Copies bytes from address in process pid into out. A short read is an
// error: NEXAR_ERR_PEER_FAILED if the process is gone, NEXAR_ERR_PROTOCOL
// if the range is not readable there (the peer published a bad address),
// NEXAR_ERR_AUTH if the host forbids it.
Status read_process_memory(uint32_t pid, uint64_t address, void *out, uint64_t bytes);

// How many copies of mapped memory one read of a process's memory through
// the kernel costs here, byte for byte, both timed on bytes in this core's
// cache (steady, where timing lines a peer just wrote is not). Measured on
// bytes at address in process pid, which this process maps at mapped,
// copied into scratch (as many bytes); 0 if the read fails. Kernels and
// machines differ by several times in this.
double kernel_read_cost_in_copies(uint32_t pid, uint64_t address, const void *mapped, void *scratch,
                                  uint64_t bytes);

// A handle on process pid (a pidfd) that tells when it ended: once it has,
// its pid may name another process, and what a read through that pid gave
// must not be used. Invalid where the kernel has no pidfd.
UniqueFd watch_process(uint32_t pid);
// Whether the process behind watch_process's handle has ended (true for an
// invalid handle: nothing says it still runs).
bool process_ended(const UniqueFd &process);

}  // namespace nexar
