#include "transport/process_memory.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>

#include "core/clock.h"
#include "core/copy.h"
#include "core/log.h"

namespace nexar {

Status read_process_memory(uint32_t pid, uint64_t address, void *out, uint64_t bytes) {
  auto *dst = static_cast<uint8_t *>(out);
  uint64_t done = 0;
  // The kernel may stop at a page it cannot read; what follows it is read
  // again on its own so that the error says why.
  while (done < bytes) {
    iovec local{dst + done, bytes - done};
    iovec remote{reinterpret_cast<void *>(address + done), bytes - done};
    const ssize_t n = process_vm_readv(static_cast<pid_t>(pid), &local, 1, &remote, 1, 0);
    if (n > 0) {
      done += static_cast<uint64_t>(n);
      continue;
    }
    const int e = n == 0 ? EFAULT : errno;
    if (e == EINTR) continue;
    const nexar_status_t code = e == ESRCH   ? NEXAR_ERR_PEER_FAILED
                                : e == EPERM ? NEXAR_ERR_AUTH
                                             : NEXAR_ERR_PROTOCOL;
    return error(code, format("reading %llu bytes of process %u at 0x%llx: %s",
                              static_cast<unsigned long long>(bytes - done), pid,
                              static_cast<unsigned long long>(address + done), strerror(e)));
  }
  return {};
}

double kernel_read_cost_in_copies(uint32_t pid, uint64_t address, const void *mapped, void *scratch,
                                  uint64_t bytes) {
  // The fastest of several of each, both warm (the same physical bytes:
  // mapped is address's view here): a busy machine only slows some of them.
  constexpr int kRounds = 20;
  uint64_t read_ns = UINT64_MAX, copy_ns = UINT64_MAX;
  for (int i = 0; i <= kRounds; ++i) {
    const uint64_t t0 = now_ns();
    if (!read_process_memory(pid, address, scratch, bytes)) return 0;
    const uint64_t t1 = now_ns();
    copy_bytes(scratch, mapped, bytes);
    const uint64_t t2 = now_ns();
    if (i == 0) continue;  // the warm-up: page tables, the scratch's lines
    read_ns = std::min(read_ns, t1 - t0);
    copy_ns = std::min(copy_ns, t2 - t1);
  }
  LOG_DEBUG("reading %llu bytes of process %u: %llu ns through the kernel, %llu ns mapped",
            static_cast<unsigned long long>(bytes), pid, static_cast<unsigned long long>(read_ns),
            static_cast<unsigned long long>(copy_ns));
  return static_cast<double>(read_ns) / static_cast<double>(std::max<uint64_t>(copy_ns, 1));
}

UniqueFd watch_process(uint32_t pid) {
#ifdef SYS_pidfd_open
  return UniqueFd(static_cast<int>(syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0)));
#else
  (void)pid;
  return UniqueFd();
#endif
}

bool process_ended(const UniqueFd &process) {
  if (!process.valid()) return true;
  // A pidfd turns readable when its process ends.
  pollfd p{process.get(), POLLIN, 0};
  int n;
  while ((n = poll(&p, 1, 0)) < 0 && errno == EINTR) {
  }
  return n != 0;
}

}  // namespace nexar
