// Where log lines go: stderr, or a callback (bindings route them into their
// language's logging).
#include "capi/handles.h"
#include "core/log.h"

using nexar::capi::fail;
using nexar::capi::guarded;
using nexar::capi::ok;

extern "C" {

NEXAR_API nexar_status_t nexar_set_log_callback(nexar_log_fn fn, void *user_data) {
  return guarded("nexar_set_log_callback", [&] {
    if (!nexar::log::set_sink(fn, user_data))
      return fail(NEXAR_ERR_WOULD_DEADLOCK,
                  "nexar_set_log_callback: called from inside the log callback");
    return ok();
  });
}

}  // extern "C"
