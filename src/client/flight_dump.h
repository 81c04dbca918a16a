// Writing the flight recorder as JSON (docs/flight-recorder.md lists the
// fields): by request (nexar_flight_recorder_dump) or automatically into
// NEXAR_FR_DUMP_DIR when an operation times out, a peer fails or a
// communicator is revoked.
#pragma once

#include <string>

#include "client/flight_recorder.h"
#include "core/status.h"

namespace nexar {

// Writes the recent operations of `only` (nullptr: of every communicator of
// this process) to path (nullptr: NEXAR_FR_DUMP_DIR/nexar-fr-HOST-PID.json).
// reason says why ("request", "timeout", ...). From an application thread
// the dump asks each communicator's loop for its peers; from a loop thread
// only that loop's communicators get them (loops never wait on each other).
Status write_flight_dump(const fr::FlightComm *only, const char *path, const char *reason);

// The automatic dump: when NEXAR_FR_DUMP_DIR is set, writes every
// communicator's record there, at most once a second per process (a failure
// ends many operations at once). Any thread.
void flight_recorder_auto_dump(const char *reason);

// The hook for revoke: marks the communicator revoked in its record and
// dumps automatically.
void flight_recorder_on_revoke(fr::FlightComm &comm);

}  // namespace nexar
