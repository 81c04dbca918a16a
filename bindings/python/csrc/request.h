// Request: an operation started with async_op=True, as Python sees it.
#pragma once

#include <nexar.h>
#include <pybind11/pybind11.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "errors.h"
#include "pending.h"
#include "rpc_handler.h"

namespace py = pybind11;

namespace nexar_py {

class Request {
 public:
  explicit Request(std::shared_ptr<Pending> p) : p_(std::move(p)) {}

  bool done() const { return p_->is_done(); }

  // Waits (GIL released, in slices so that Ctrl-C works) and returns the
  // result or raises the operation's error.
  py::object wait(py::object timeout) {
    if (t_in_rpc_handler && !p_->is_done())
      raise_nexar(NEXAR_ERR_WOULD_DEADLOCK, -1,
                  p_->op +
                      ": waiting inside an RPC handler would wait for the thread that runs "
                      "it; use add_done_callback, or wait after the handler has returned",
                  p_->op, p_->comm_rank);
    const bool bounded = !timeout.is_none();
    const double limit = bounded ? timeout.cast<double>() : 0.0;
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(limit > 0 ? limit : 0.0));
    for (;;) {
      bool finished;
      {
        py::gil_scoped_release nogil;
        std::unique_lock<std::mutex> g(p_->mu);
        auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
        if (bounded && deadline < until) until = deadline;
        finished = p_->cv.wait_until(g, until, [&] { return p_->done; });
      }
      if (finished) break;
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      if (bounded && std::chrono::steady_clock::now() >= deadline) {
        PyErr_Format(PyExc_TimeoutError,
                     "%s: not complete after %.3g s (the operation is still running; wait again)",
                     p_->op.c_str(), limit);
        throw py::error_already_set();
      }
    }
    return value();
  }

  // The outcome of a finished operation.
  py::object value() {
    nexar_status_t st;
    int32_t failed;
    std::string msg;
    {
      std::lock_guard<std::mutex> g(p_->mu);
      st = p_->status;
      failed = p_->failed_rank;
      msg = p_->message;
    }
    p_->materialize();
    if (st != NEXAR_OK) raise_nexar(st, failed, msg, p_->op, p_->comm_rank);
    if (!p_->result) return py::none();
    return py::reinterpret_borrow<py::object>(p_->result);
  }

  // fn() runs on the dispatcher thread once the operation has completed (at
  // once, on this thread, if that already happened).
  void on_done(py::object fn) {
    if (p_->dispatched) {
      fn();
      return;
    }
    p_->callbacks.push_back(fn.release().ptr());
  }

  std::string repr() const {
    std::lock_guard<std::mutex> g(p_->mu);
    std::string state = !p_->done ? "pending"
                        : p_->status == NEXAR_OK
                            ? "done"
                            : std::string("failed: ") + nexar_status_str(p_->status);
    return "<nexar.Request " + p_->op + " rank " + std::to_string(p_->comm_rank) + " " + state +
           ">";
  }
  const std::string &op() const { return p_->op; }

 private:
  std::shared_ptr<Pending> p_;
};

}  // namespace nexar_py
