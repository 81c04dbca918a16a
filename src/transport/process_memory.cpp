#include "transport/process_memory.h"

#include <errno.h>
#include <string.h>
#include <sys/uio.h>

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

}  // namespace nexar
