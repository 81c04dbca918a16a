// The flight recorder's dump on request.
#include "capi/handles.h"
#include "client/flight_dump.h"

using nexar::capi::fail;
using nexar::capi::guarded;
using nexar::capi::ok;

extern "C" {

NEXAR_API nexar_status_t nexar_flight_recorder_dump(nexar_comm_t *comm, const char *path) {
  return guarded("nexar_flight_recorder_dump", [&] {
    nexar::Status s =
        nexar::write_flight_dump(comm ? &comm->impl->flight() : nullptr, path, "request");
    return s ? ok() : fail(s);
  });
}

}  // extern "C"
