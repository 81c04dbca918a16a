// Errors raised into Python: nexar's statuses become the exceptions of
// nexar/_support.py (make_error), imported once and kept.
#pragma once

#include <nexar.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

namespace py = pybind11;

namespace nexar_py {

// nexar/_support.py, never released (no Python object may be after
// finalization).
py::object &support();

// Raises the NexarError subclass of status.
[[noreturn]] void raise_nexar(nexar_status_t status, int32_t failed_rank, const std::string &msg,
                              const std::string &op, int64_t comm_rank);

// The record of the call that just failed on this thread (nexar_last_error):
// its message and the rank it names. Read before any other nexar call.
void read_last_error(std::string *msg, int32_t *failed_rank);

// Raises ClosedError for op on a closed communicator.
[[noreturn]] void raise_closed(const std::string &op);

}  // namespace nexar_py
