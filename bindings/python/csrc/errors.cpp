#include "errors.h"

#include <cstring>

namespace nexar_py {

py::object &support() {
  // Never destroyed: no Python object may be released after finalization.
  static py::object *mod = new py::object(py::module_::import("nexar._support"));
  return *mod;
}

[[noreturn]] void raise_nexar(nexar_status_t status, int32_t failed_rank, const std::string &msg,
                              const std::string &op, int64_t comm_rank) {
  py::object exc = support().attr("make_error")(status, failed_rank, msg, op, comm_rank);
  PyErr_SetObject(reinterpret_cast<PyObject *>(Py_TYPE(exc.ptr())), exc.ptr());
  throw py::error_already_set();
}

// The record of the call that just failed on this thread (nexar_last_error):
// its message and the rank it names. Read before any other nexar call.
void read_last_error(std::string *msg, int32_t *failed_rank) {
  nexar_completion_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  if (nexar_last_error(&info) == NEXAR_OK) {
    *msg = info.message;
    *failed_rank = info.failed_rank;
  } else {
    *msg = nexar_last_error_message();
    *failed_rank = -1;
  }
}

[[noreturn]] void raise_closed(const std::string &op) {
  raise_nexar(NEXAR_ERR_CLOSED, -1, op + ": the communicator is closed", op, -1);
}

}  // namespace nexar_py
