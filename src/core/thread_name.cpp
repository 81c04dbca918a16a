#include "core/thread_name.h"

#include <pthread.h>

#include <cstring>

namespace nexar {

void name_this_thread(const char *name) {
  char cut[16] = {};
  std::strncpy(cut, name, sizeof cut - 1);
  pthread_setname_np(pthread_self(), cut);  // a failure only leaves the old name
}

}  // namespace nexar
