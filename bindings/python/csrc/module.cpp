// nexar._nexar: the Python binding's native half, on the public C ABI only.
// This file makes the module; the other files of csrc/ each hold one concern.
//
// Threads. nexar runs completion callbacks on its own completion thread and
// log callbacks on any of its threads (the I/O thread included). Neither ever
// runs Python code or touches a Python object here: a completion records its
// status in a Pending (mutex + condition variable) and queues it; a log line
// is queued as text. One Python daemon thread, "nexar-dispatch" (started by
// nexar/__init__.py, running dispatch_loop, dispatcher.cpp), takes both queues with the
// GIL: it drops the references that kept an operation's buffers alive, runs
// done-callbacks (which hand results to asyncio with call_soon_threadsafe)
// and passes log lines to logging.getLogger("nexar").
//
// RPC handlers are the one exception: a Python function registered with
// register_rpc runs on nexar's completion thread, which takes the GIL for it
// (serve_rpc, rpc_handler.cpp). So every call here that may wait for that thread (registering,
// closing, aborting) releases the GIL first, and Request.wait() refuses to
// wait inside a handler.
//
// Blocking calls release the GIL and call the C ABI with done == NULL
// (ctrl_c.h says how Ctrl-C still interrupts them).
// Asynchronous calls hold a strong reference to every buffer they read or
// write until the completion has been seen by the dispatcher, so dropping the
// last user reference to a buffer or a Request is safe.
#include <nexar.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <string>

#include "bindings.h"
#include "communicator.h"
#include "dispatcher.h"
#include "request.h"

namespace py = pybind11;
using namespace nexar_py;

PYBIND11_MODULE(_nexar, m) {
  m.doc() = "nexar's native binding over the C ABI of libnexar.so.0; use the nexar package.";

  m.attr("SUM") = NEXAR_OP_SUM;
  m.attr("PROD") = NEXAR_OP_PROD;
  m.attr("MIN") = NEXAR_OP_MIN;
  m.attr("MAX") = NEXAR_OP_MAX;
  m.def(
      "version", [] { return std::string(nexar_version_string()); },
      "The version of the libnexar actually loaded.");
  m.def("status_str", [](int32_t s) { return std::string(nexar_status_str(s)); });

  py::class_<Request>(m, "Request", R"doc(
An operation started with ``async_op=True``.

``wait(timeout=None)`` blocks (without the GIL) until it completes and returns
its result (the buffer, the new array, None for barrier and send, the new
Communicator for split) or raises its NexarError. ``done()`` tells without
waiting. ``await request`` does the same in asyncio. The buffers it reads and
writes stay alive until it has completed, even when every other reference is
dropped.)doc")
      .def("wait", &Request::wait, py::arg("timeout") = py::none(),
           "Wait up to timeout seconds (None: until nexar completes it, which its own timeouts "
           "bound); return the result or raise the operation's error. A builtin TimeoutError "
           "when timeout passes first (the operation goes on).")
      .def("done", &Request::done, "True once the operation has completed.")
      .def("_on_done", &Request::on_done)
      .def_property_readonly("op", &Request::op)
      .def("__repr__", &Request::repr);

  py::class_<Communicator> comm(m, "Communicator", R"doc(
One rank's view of a group of processes. Made by nexar.init(),
nexar.bootstrap_local() or Communicator.split(); closed by close() or at the
end of a ``with`` block. Collectives must be called in the same order on every
rank. Every operation blocks (releasing the GIL) unless async_op=True, which
returns a Request.)doc");
  comm.def_property_readonly("rank", &Communicator::rank, "This rank, 0..size-1.")
      .def_property_readonly("size", &Communicator::size, "The number of ranks.")
      .def_property_readonly("closed", &Communicator::closed)
      .def("close", &Communicator::close,
           "Release the communicator; pending operations fail with ClosedError. Idempotent.")
      .def("abort", &Communicator::abort,
           "Fail every pending operation with AbortedError and tell the peers.")
      .def("stats", &Communicator::stats, "Counters of this rank's engine, as a dict.")
      .def("async_error", &Communicator::async_error,
           "A NexarError describing a failure found in the background, or None.")
      .def("flight_recorder_dump", &Communicator::flight_recorder_dump,
           py::arg("path") = py::none(),
           "Write this communicator's recent operations as JSON to path (None: into "
           "NEXAR_FR_DUMP_DIR); nexar-fr merges the dumps of all ranks.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](Communicator &c, py::args) { c.close(); })
      .def("__repr__",
           [](Communicator &c) {
             return "<nexar.Communicator rank " + std::to_string(c.rank()) + " of " +
                    std::to_string(c.size()) + (c.closed() ? " (closed)>" : ">");
           })
      .def(
          "split",
          [](py::object self, int64_t color, int64_t key, bool async_op) {
            return self.cast<Communicator &>().split(self, color, key, async_op);
          },
          py::arg("color"), py::arg("key") = 0, py::kw_only(), py::arg("async_op") = false,
          "A new Communicator of the ranks that passed the same color, ordered by (key, rank).");
  bind_collectives(comm);
  bind_point_to_point(comm);
  bind_rpc(comm);
  bind_faults(comm);
  bind_gradients(m, comm);
  bind_symmetric(comm);

  bind_creation(m);
  bind_seed(m);

  m.def(
      "_flight_recorder_dump_all",
      [](py::object path) {
        const std::string p = path.is_none() ? std::string() : path.cast<std::string>();
        nexar_status_t st;
        {
          py::gil_scoped_release nogil;
          st = nexar_flight_recorder_dump(nullptr, path.is_none() ? nullptr : p.c_str());
        }
        if (st != NEXAR_OK)
          raise_nexar(st, -1, nexar_last_error_message(), "flight_recorder_dump", -1);
      },
      py::arg("path") = py::none());
  m.def("_dispatch_loop", &dispatch_loop);
  m.def("_dispatch_stop", &dispatch_stop);
  m.def("_dispatch_after_fork_in_child", &dispatch_after_fork_in_child);
  m.def(
      "_flush", [](double timeout) { return dispatch_flush(timeout); }, py::arg("timeout") = 5.0);
  m.def("_install_log_sink", [] { return nexar_set_log_callback(on_log, nullptr); });
  m.def("_remove_log_sink", [] {
    py::gil_scoped_release nogil;
    return nexar_set_log_callback(nullptr, nullptr);
  });
}
