#include "core/host.h"

#include <unistd.h>

namespace nexar {

std::string host_name() {
  char buf[256] = {0};
  gethostname(buf, sizeof buf - 1);  // truncated names stay terminated
  return buf;
}

}  // namespace nexar
