#include "transport/process_memory.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

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
