// Communicator: one rank's communicator, as Python sees it, and how every
// operation runs through it (blocking or as a Request).
#pragma once

#include <nexar.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>

#include "buffers.h"
#include "ctrl_c.h"
#include "dispatcher.h"
#include "errors.h"
#include "interruptible.h"
#include "pending.h"
#include "request.h"
#include "rpc_handler.h"

namespace py = pybind11;

namespace nexar_py {

class Communicator {
 public:
  explicit Communicator(nexar_comm_t *h) : h_(h) {
    rank_ = nexar_comm_rank(h);
    size_ = nexar_comm_size(h);
  }
  ~Communicator() { close(); }
  Communicator(const Communicator &) = delete;
  Communicator &operator=(const Communicator &) = delete;

  uint32_t rank() const { return rank_; }
  uint32_t size() const { return size_; }
  bool closed() {
    std::shared_lock<std::shared_mutex> g(mu_);
    return h_ == nullptr;
  }

  void close() {
    nexar_comm_t *h;
    std::map<uint32_t, std::unique_ptr<RpcHandler>> gone;
    {
      // Waits for calls in progress on other threads (they are bounded by
      // nexar's timeouts); pending asynchronous operations complete with
      // NEXAR_ERR_CLOSED inside nexar_comm_destroy.
      std::optional<py::gil_scoped_release> nogil;
      if (PyGILState_Check()) nogil.emplace();
      {
        std::unique_lock<std::shared_mutex> g(mu_);
        h = h_;
        h_ = nullptr;
        if (h) nexar_comm_destroy(h);  // no handler runs after this
      }
      std::lock_guard<std::mutex> r(rpc_mu_);
      gone.swap(handlers_);
    }
    if (!gone.empty() || failure_callback) {
      py::gil_scoped_acquire gil;  // the handlers' functions go with the GIL
      gone.clear();
      failure_callback.reset();
    }
  }

  // Runs fn(handle) with the GIL released while the communicator cannot be
  // closed; raises ClosedError when it is closed, the nexar error when fn
  // returns one.
  template <class Fn>
  void call(const std::string &op, Fn &&fn) {
    nexar_status_t st = NEXAR_OK;
    std::string msg;
    int32_t failed = -1;
    bool was_closed = false;
    {
      py::gil_scoped_release nogil;
      std::shared_lock<std::shared_mutex> g(mu_);
      if (!h_) {
        was_closed = true;
      } else {
        st = fn(h_);
        if (st != NEXAR_OK) read_last_error(&msg, &failed);
      }
    }
    if (was_closed) raise_closed(op);
    if (st != NEXAR_OK) raise_nexar(st, failed, msg, op, rank_);
  }
  // The Python failure callback (faults.cpp); released with the GIL held
  // once the handle is destroyed, since no callback runs after that.
  std::shared_ptr<py::object> failure_callback;

  void abort() {
    py::gil_scoped_release nogil;  // pending handlers may need the GIL to end
    std::shared_lock<std::shared_mutex> g(mu_);
    if (!h_) return;
    nexar_comm_abort(h_);
  }

  // Serves fn_id with handler (None: stops serving it). Once this returns,
  // the handler it replaced is neither running nor going to start (unless
  // called from inside it).
  void register_rpc(int64_t fn_id, py::object handler) {
    const std::string op = "register_rpc";
    if (!handler.is_none() && !PyCallable_Check(handler.ptr()))
      throw py::type_error("register_rpc: handler must be callable or None, not " +
                           type_name(handler));
    const uint32_t id = check_u32(fn_id, op, "fn_id");
    // Both released with the GIL, after the swap: the replaced one, and the
    // new one if registering failed.
    std::unique_ptr<RpcHandler> fresh, replaced;
    if (!handler.is_none()) fresh = std::make_unique<RpcHandler>(RpcHandler{handler});
    nexar_status_t st = NEXAR_OK;
    std::string msg;
    bool was_closed = false;
    {
      // nexar waits for a running invocation of the replaced handler, which
      // needs the GIL. rpc_mu_ keeps nexar's registry and handlers_ in step.
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> r(rpc_mu_);
      std::shared_lock<std::shared_mutex> g(mu_);
      if (!h_) {
        was_closed = true;
      } else {
        st = nexar_rpc_register(h_, id, fresh ? serve_rpc : nullptr, fresh.get());
        if (st != NEXAR_OK) {
          msg = nexar_last_error_message();
        } else {
          auto it = handlers_.find(id);
          if (it != handlers_.end()) {
            replaced = std::move(it->second);
            handlers_.erase(it);
          }
          if (fresh) handlers_.emplace(id, std::move(fresh));
        }
      }
    }
    if (was_closed) raise_closed(op);
    if (st != NEXAR_OK) raise_nexar(st, -1, msg, op, rank_);
  }

  // Runs one operation, submit(handle, done, user_data): blocking (GIL
  // released, done == NULL) or asynchronously (a Request that keeps `keep`
  // and `result` alive until the operation has completed; None entries are
  // skipped). Templates, so that the blocking path allocates nothing.
  template <class Submit>
  py::object run(const std::string &op, const Submit &submit,
                 std::initializer_list<py::handle> keep, py::object result, bool async_op);
  template <class Submit>
  py::object submit_async(const std::shared_ptr<Pending> &p, const Submit &submit);
  py::object split(py::handle self, int64_t color, int64_t key, bool async_op);

  uint32_t check_rank(int64_t r, const std::string &op, const char *what) const {
    if (r < 0 || r >= static_cast<int64_t>(size_))
      raise_nexar(NEXAR_ERR_INVALID_RANK, -1,
                  op + ": " + what + " " + std::to_string(r) + " is outside the communicator of " +
                      std::to_string(size_) + " ranks",
                  op, rank_);
    return static_cast<uint32_t>(r);
  }

  py::dict stats() {
    std::shared_lock<std::shared_mutex> g(mu_);
    if (!h_) raise_closed("stats");
    nexar_stats_t s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    if (nexar_status_t st = nexar_comm_get_stats(h_, &s))
      raise_nexar(st, -1, nexar_last_error_message(), "stats", rank_);
    py::dict d;
    d["bytes_sent"] = s.bytes_sent;
    d["bytes_received"] = s.bytes_received;
    d["messages_sent"] = s.messages_sent;
    d["messages_received"] = s.messages_received;
    d["streams_opened"] = s.streams_opened;
    d["streams_accepted"] = s.streams_accepted;
    d["pending_tags"] = s.pending_tags;
    d["unexpected_bytes"] = s.unexpected_bytes;
    d["connections"] = s.connections;
    d["rpc_requests_served"] = s.rpc_requests_served;
    d["rpc_responses_dropped"] = s.rpc_responses_dropped;
    d["relay_bytes_sent"] = s.relay_bytes_sent;
    d["relay_bytes_forwarded"] = s.relay_bytes_forwarded;
    d["relay_frames_dropped"] = s.relay_frames_dropped;
    d["relay_bytes_held"] = s.relay_bytes_held;
    d["packets_fast_aead"] = s.packets_fast_aead;
    d["bytes_opened_in_place"] = s.bytes_opened_in_place;
    d["bytes_sealed_in_place"] = s.bytes_sealed_in_place;
    d["shm_pairs"] = s.shm_pairs;
    d["shm_bytes_sent"] = s.shm_bytes_sent;
    d["shm_bytes_received"] = s.shm_bytes_received;
    d["shm_collectives"] = s.shm_collectives;
    d["shm_bytes_by_reference"] = s.shm_bytes_by_reference;
    d["connections_refused"] = s.connections_refused;
    d["protocol_violations"] = s.protocol_violations;
    d["shm_bytes_read_directly"] = s.shm_bytes_read_directly;
    return d;
  }

  // Writes the flight recorder of this communicator (path None: into
  // NEXAR_FR_DUMP_DIR).
  void flight_recorder_dump(py::object path) {
    std::shared_lock<std::shared_mutex> g(mu_);
    if (!h_) raise_closed("flight_recorder_dump");
    const std::string p = path.is_none() ? std::string() : path.cast<std::string>();
    nexar_status_t st;
    {
      py::gil_scoped_release nogil;
      st = nexar_flight_recorder_dump(h_, path.is_none() ? nullptr : p.c_str());
    }
    if (st != NEXAR_OK)
      raise_nexar(st, -1, nexar_last_error_message(), "flight_recorder_dump", rank_);
  }

  py::object async_error() {
    std::shared_lock<std::shared_mutex> g(mu_);
    if (!h_) return py::none();
    nexar_completion_t info;
    memset(&info, 0, sizeof info);
    nexar_status_t st = nexar_comm_get_async_error(h_, &info);
    if (st == NEXAR_OK) return py::none();
    return support().attr("make_error")(st, info.failed_rank, info.message, "async_error",
                                        static_cast<int64_t>(rank_));
  }

 private:
  std::shared_mutex mu_;  // shared: calls; exclusive: close
  nexar_comm_t *h_;
  std::mutex rpc_mu_;  // taken without the GIL, before mu_ (register_rpc)
  std::map<uint32_t, std::unique_ptr<RpcHandler>> handlers_;  // what nexar calls
  uint32_t rank_ = 0, size_ = 0;
};

// Every Communicator reaches Python through here: nexar/_support.py keeps a
// weak reference to it, to close it at exit if it is still open.
py::object wrap(nexar_comm_t *h);

template <class Submit>
py::object Communicator::run(const std::string &op, const Submit &submit,
                             std::initializer_list<py::handle> keep, py::object result,
                             bool async_op) {
  if (!async_op) {
    BlockingCall call;
    bool was_closed = false, interrupted = false, abort_on_ctrl_c = false;
    const bool blocking_path = blocking_path_allowed(&abort_on_ctrl_c);
    {
      py::gil_scoped_release nogil;
      std::shared_lock<std::shared_mutex> g(mu_);
      if (!h_) {
        was_closed = true;
      } else if (blocking_path || t_in_rpc_handler) {
        // The C ABI's blocking call (ctrl_c.h). On nexar's completion thread
        // (an RPC handler), which would have to run the callback waited for,
        // the only way: nexar refuses or serves it.
        AbortOnCtrlC watch(h_, abort_on_ctrl_c);
        call.status = submit(h_, nullptr, nullptr);
        if (call.status != NEXAR_OK) read_last_error(&call.message, &call.failed_rank);
      } else if (nexar_status_t st = submit(h_, BlockingCall::on_done, &call); st != NEXAR_OK) {
        call.status = st;
        read_last_error(&call.message, &call.failed_rank);
        call.done = true;
      } else {
        while (!call.wait_for(kSignalSlice)) {
          py::gil_scoped_acquire gil;
          if (PyErr_CheckSignals() != 0) {
            interrupted = true;
            break;
          }
        }
        if (interrupted) {
          // The operation fails at once with NEXAR_ERR_ABORTED; its callback
          // must have run before `call` leaves this frame.
          nexar_comm_abort(h_);
          while (!call.wait_for(kSignalSlice)) {
          }
        }
      }
    }
    // A Ctrl-C aborted the call: the KeyboardInterrupt, not its AbortedError.
    if (abort_on_ctrl_c && call.status != NEXAR_OK && PyErr_CheckSignals() != 0) interrupted = true;
    if (interrupted) throw py::error_already_set();
    if (was_closed) raise_closed(op);
    if (call.status != NEXAR_OK)
      raise_nexar(call.status, call.failed_rank, call.message, op, rank_);
    return result;
  }
  auto p = std::make_shared<Pending>();
  p->op = op;
  p->comm_rank = rank_;
  for (py::handle h : keep)
    if (h && !h.is_none()) p->keep.push_back(h.inc_ref().ptr());
  if (!result.is_none()) p->result = result.release().ptr();
  return submit_async(p, submit);
}

template <class Submit>
py::object Communicator::submit_async(const std::shared_ptr<Pending> &p, const Submit &submit) {
  auto *holder = new std::shared_ptr<Pending>(p);
  nexar_status_t st = NEXAR_OK;
  bool was_closed = false;
  std::string msg;
  {
    std::shared_lock<std::shared_mutex> g(mu_);
    if (!h_) {
      was_closed = true;
    } else {
      st = submit(h_, on_done, holder);
      if (st != NEXAR_OK) msg = nexar_last_error_message();
    }
  }
  if (was_closed || st != NEXAR_OK) {
    delete holder;  // done will never run
    if (was_closed) raise_closed(p->op);
    raise_nexar(st, -1, msg, p->op, rank_);
  }
  return py::cast(Request(p));
}

}  // namespace nexar_py
