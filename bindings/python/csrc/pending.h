// One asynchronous operation in flight, shared by its Request, nexar's
// completion callback and the dispatcher.
#pragma once

#include <nexar.h>
#include <pybind11/pybind11.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace nexar_py {

// One asynchronous operation. status/failed_rank/message/done are written by
// nexar's completion thread under mu; everything holding PyObject* is touched
// only with the GIL.
struct Pending {
  std::string op;
  int64_t comm_rank = -1;

  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  nexar_status_t status = NEXAR_OK;
  int32_t failed_rank = -1;
  std::string message;

  // GIL only.
  std::vector<PyObject *> keep;                  // buffers (and their owners) kept alive
  PyObject *result = nullptr;                    // what wait() returns on success
  nexar_comm_t *split_out = nullptr;             // split: the new handle, until wrapped
  PyObject *split_parent = nullptr;              // split: keeps the parent alive meanwhile
  bool rpc = false;                              // rpc: the response becomes the result
  nexar_rpc_response_t *rpc_response = nullptr;  // written by nexar before done
  std::vector<PyObject *> callbacks;             // run by the dispatcher, once
  bool dispatched = false;

  ~Pending() {
    // Always released with the GIL (see the dispatcher); if the interpreter is
    // gone, leak rather than touch it.
    if (!Py_IsInitialized() || !PyGILState_Check()) return;
    release_keep();
    Py_XDECREF(result);
    for (PyObject *cb : callbacks)
      Py_DECREF(cb);
    if (split_out) nexar_comm_destroy(split_out);
    Py_XDECREF(split_parent);
    nexar_rpc_response_free(rpc_response);
  }
  void release_keep() {
    for (PyObject *o : keep)
      Py_DECREF(o);
    keep.clear();
  }
  bool is_done() {
    std::lock_guard<std::mutex> g(mu);
    return done;
  }
  // GIL held. Makes the result nexar left: wraps a split's handle into a
  // Communicator, copies an RPC response into bytes (communicator.cpp).
  void materialize();
};

}  // namespace nexar_py
