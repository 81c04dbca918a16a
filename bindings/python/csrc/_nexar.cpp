// nexar._nexar: the Python binding's native half, on the public C ABI only.
//
// Threads. nexar runs completion callbacks on its own completion thread and
// log callbacks on any of its threads (the I/O thread included). Neither ever
// runs Python code or touches a Python object here: a completion records its
// status in a Pending (mutex + condition variable) and queues it; a log line
// is queued as text. One Python daemon thread, "nexar-dispatch" (started by
// nexar/__init__.py, running dispatch_loop below), takes both queues with the
// GIL: it drops the references that kept an operation's buffers alive, runs
// done-callbacks (which hand results to asyncio with call_soon_threadsafe)
// and passes log lines to logging.getLogger("nexar").
//
// RPC handlers are the one exception: a Python function registered with
// register_rpc runs on nexar's completion thread, which takes the GIL for it
// (serve_rpc). So every call here that may wait for that thread (registering,
// closing, aborting) releases the GIL first, and Request.wait() refuses to
// wait inside a handler.
//
// Blocking calls release the GIL and call the C ABI with done == NULL.
// Asynchronous calls hold a strong reference to every buffer they read or
// write until the completion has been seen by the dispatcher, so dropping the
// last user reference to a buffer or a Request is safe.
#include <nexar.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace {

// ---- Python-side helpers (nexar/_support.py), imported once and kept ------------

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

// ---- Operations in flight -------------------------------------------------------

class Communicator;

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
  // Communicator, copies an RPC response into bytes (defined below).
  void materialize();
};

// ---- The dispatcher: completions and log lines, handed to Python ----------------

struct LogLine {
  int32_t level;
  std::string text;
};

class Dispatcher {
 public:
  static Dispatcher &get() {
    static Dispatcher *d = new Dispatcher();  // never destroyed (see support())
    return *d;
  }

  // nexar's threads: no Python here, never throws.
  void push_done(std::shared_ptr<Pending> p) noexcept {
    try {
      std::lock_guard<std::mutex> g(mu_);
      done_.push_back(std::move(p));
    } catch (...) {
      return;  // out of memory: the buffers stay referenced (leak, no crash)
    }
    cv_.notify_one();
  }
  void push_log(int32_t level, const char *line) noexcept {
    try {
      std::lock_guard<std::mutex> g(mu_);
      if (logs_.size() >= kMaxQueuedLines) {
        ++dropped_;
        return;
      }
      logs_.push_back({level, line});
    } catch (...) {
      return;
    }
    cv_.notify_one();
  }

  // The "nexar-dispatch" Python thread; returns once stop() was called and the
  // queues are empty.
  void loop() {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = false;
      running_ = true;
    }
    for (;;) {
      std::deque<std::shared_ptr<Pending>> done;
      std::deque<LogLine> logs;
      uint64_t dropped = 0;
      bool stop;
      {
        py::gil_scoped_release nogil;
        std::unique_lock<std::mutex> g(mu_);
        cv_.wait(g, [&] { return stop_ || !done_.empty() || !logs_.empty(); });
        done.swap(done_);
        logs.swap(logs_);
        dropped = dropped_;
        dropped_ = 0;
        stop = stop_;
        busy_ = !done.empty() || !logs.empty();
      }
      for (auto &l : logs)
        emit_log(l.level, l.text);
      if (dropped)
        emit_log(NEXAR_LOG_WARN, std::to_string(dropped) +
                                     " nexar log line(s) dropped: the Python side fell behind");
      for (auto &p : done) {
        try {
          finish(*p);
        } catch (py::error_already_set &e) {
          const std::string where = "nexar: completing " + p->op;
          e.discard_as_unraisable(where.c_str());
        } catch (const std::exception &e) {
          PyErr_WarnFormat(PyExc_RuntimeWarning, 1, "nexar: completing %s: %s", p->op.c_str(),
                           e.what());
        }
      }
      done.clear();  // with the GIL: Pending may release Python objects
      {
        std::lock_guard<std::mutex> g(mu_);
        busy_ = false;
        if (stop && done_.empty() && logs_.empty()) {
          running_ = false;
          idle_cv_.notify_all();
          return;
        }
        if (done_.empty() && logs_.empty()) idle_cv_.notify_all();
      }
    }
  }
  void stop() {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
    }
    cv_.notify_all();
  }
  // Waits (GIL released) until everything queued so far was handed to Python.
  bool flush(double timeout_s) {
    py::gil_scoped_release nogil;
    std::unique_lock<std::mutex> g(mu_);
    return idle_cv_.wait_for(g, std::chrono::duration<double>(timeout_s), [&] {
      return !running_ || (done_.empty() && logs_.empty() && !busy_);
    });
  }

  static void finish(Pending &p) {
    p.release_keep();
    p.materialize();
    p.dispatched = true;
    std::vector<PyObject *> cbs;
    cbs.swap(p.callbacks);
    for (PyObject *cb : cbs) {
      PyObject *r = PyObject_CallNoArgs(cb);
      if (!r)
        PyErr_WriteUnraisable(cb);
      else
        Py_DECREF(r);
      Py_DECREF(cb);
    }
  }

 private:
  static constexpr size_t kMaxQueuedLines = 10000;

  static void emit_log(int32_t level, const std::string &text) {
    static const int kLevels[] = {40, 30, 20, 10, 5};  // ERROR WARNING INFO DEBUG "TRACE"
    try {
      static py::object *logger =
          new py::object(py::module_::import("logging").attr("getLogger")("nexar"));
      const int pylevel = kLevels[level < 0 ? 0 : (level > 4 ? 4 : level)];
      logger->attr("log")(pylevel, "%s", text);
    } catch (py::error_already_set &e) {
      e.discard_as_unraisable("nexar log line");
    }
  }

  std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::shared_ptr<Pending>> done_;
  std::deque<LogLine> logs_;
  uint64_t dropped_ = 0;
  bool stop_ = false, running_ = false, busy_ = false;
};

// The C completion callback: nexar's completion thread, no Python.
void on_done(void *user_data, const nexar_completion_t *c) {
  auto *holder = static_cast<std::shared_ptr<Pending> *>(user_data);
  std::shared_ptr<Pending> p = std::move(*holder);
  delete holder;
  try {
    std::lock_guard<std::mutex> g(p->mu);
    p->status = c->status;
    p->failed_rank = c->failed_rank;
    p->message = c->message ? c->message : "";
    p->done = true;
  } catch (...) {
    std::lock_guard<std::mutex> g(p->mu);  // the message could not be copied
    p->status = c->status;
    p->failed_rank = c->failed_rank;
    p->done = true;
  }
  p->cv.notify_all();
  Dispatcher::get().push_done(std::move(p));
}

// The C log callback: any nexar thread, no Python.
void on_log(void *, int32_t level, const char *line) {
  Dispatcher::get().push_log(level, line);
}

// ---- Buffers --------------------------------------------------------------------

struct View {
  py::array arr;
  void *data = nullptr;
  size_t count = 0;  // elements
  size_t nbytes = 0;
  nexar_dtype_t dtype = NEXAR_DTYPE_U8;
};

const char *const kSupported =
    "float16, float32, float64, int8, int32, int64, uint8, uint32, uint64, bfloat16 (ml_dtypes)";

bool dtype_code(const py::dtype &dt, nexar_dtype_t *out) {
  struct Known {
    char kind;
    py::ssize_t itemsize;
    nexar_dtype_t code;
  };
  static const Known kKnown[] = {
      {'f', 2, NEXAR_DTYPE_F16}, {'f', 4, NEXAR_DTYPE_F32}, {'f', 8, NEXAR_DTYPE_F64},
      {'i', 1, NEXAR_DTYPE_I8},  {'i', 4, NEXAR_DTYPE_I32}, {'i', 8, NEXAR_DTYPE_I64},
      {'u', 1, NEXAR_DTYPE_U8},  {'u', 4, NEXAR_DTYPE_U32}, {'u', 8, NEXAR_DTYPE_U64},
  };
  if (dt.byteorder() == '>') return false;  // only native (little-endian) data
  const char kind = dt.kind();
  const py::ssize_t size = dt.itemsize();
  for (const Known &k : kKnown)
    if (k.kind == kind && k.itemsize == size) {
      *out = k.code;
      return true;
    }
  // ml_dtypes.bfloat16 is a numpy user dtype of kind 'V'.
  if (kind == 'V' && size == 2 && py::str(dt.attr("name")).cast<std::string>() == "bfloat16") {
    *out = NEXAR_DTYPE_BF16;
    return true;
  }
  return false;
}

std::string type_name(py::handle obj) {
  return py::str(py::type::handle_of(obj).attr("__name__")).cast<std::string>();
}

// Any numpy array or buffer-protocol object, viewed without copying.
View view_of(py::handle obj, bool writable, const std::string &op, const char *name) {
  View v;
  if (py::isinstance<py::array>(obj)) {
    v.arr = py::reinterpret_borrow<py::array>(obj);
  } else if (PyObject_CheckBuffer(obj.ptr())) {
    // Through a memoryview, so that the buffer's own format and shape count
    // (numpy would read bytes as one string scalar).
    py::object mv = py::reinterpret_steal<py::object>(PyMemoryView_FromObject(obj.ptr()));
    if (!mv) throw py::error_already_set();
    v.arr = py::array::ensure(mv);
    if (!v.arr)
      throw py::type_error(op + ": " + name + " (" + type_name(obj) +
                           ") exposes a buffer numpy cannot read");
  } else {
    throw py::type_error(op + ": " + name +
                         " must be a numpy array or an object with the buffer protocol "
                         "(bytearray, memoryview, ...), not " +
                         type_name(obj));
  }
  if (!(v.arr.flags() & py::array::c_style))
    throw py::type_error(op + ": " + name +
                         " must be C-contiguous (numpy.ascontiguousarray makes a copy that is)");
  if (writable && !v.arr.writeable())
    throw py::type_error(op + ": " + name + " must be writable (this " + type_name(obj) +
                         " is read-only)");
  if (!dtype_code(v.arr.dtype(), &v.dtype))
    throw py::type_error(op + ": unsupported dtype " + py::str(v.arr.dtype()).cast<std::string>() +
                         " of " + name + "; supported: " + kSupported);
  v.count = static_cast<size_t>(v.arr.size());
  v.nbytes = static_cast<size_t>(v.arr.nbytes());
  v.data = writable ? v.arr.mutable_data() : const_cast<void *>(v.arr.data());
  return v;
}

std::vector<py::ssize_t> shape_of(const py::array &a) {
  return std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim());
}

// An output buffer: the caller's (checked) or a new array.
View out_view(py::object out, const View &like, const std::vector<py::ssize_t> &shape, size_t count,
              const std::string &op) {
  if (out.is_none()) {
    View v;
    v.arr = py::array(like.arr.dtype(), shape);
    v.count = count;
    v.nbytes = static_cast<size_t>(v.arr.nbytes());
    v.data = v.arr.mutable_data();
    v.dtype = like.dtype;
    return v;
  }
  View v = view_of(out, true, op, "out");
  if (v.dtype != like.dtype)
    throw py::type_error(op + ": out has dtype " + py::str(v.arr.dtype()).cast<std::string>() +
                         ", buf has " + py::str(like.arr.dtype()).cast<std::string>());
  if (v.count != count)
    throw py::value_error(op + ": out holds " + std::to_string(v.count) + " elements, " +
                          std::to_string(count) + " are needed");
  return v;
}

nexar_op_t check_op(int64_t op, const std::string &name) {
  if (op < NEXAR_OP_SUM || op > NEXAR_OP_MAX)
    throw py::value_error(name + ": op " + std::to_string(op) +
                          " is not one of nexar.SUM, PROD, MIN, MAX");
  return static_cast<nexar_op_t>(op);
}

// A tag or an RPC function id: what nexar takes as uint32_t.
uint32_t check_u32(int64_t v, const std::string &op, const char *what) {
  if (v < 0 || v > UINT32_MAX) throw py::value_error(op + ": " + what + " must be in 0..2**32-1");
  return static_cast<uint32_t>(v);
}

// ---- RPC handlers -----------------------------------------------------------------

// An RPC response as bytes; frees the response.
py::bytes response_bytes(nexar_rpc_response_t *r) {
  std::unique_ptr<nexar_rpc_response_t, void (*)(nexar_rpc_response_t *)> own(
      r, nexar_rpc_response_free);
  const void *data = nexar_rpc_response_data(r);
  return py::bytes(data ? static_cast<const char *>(data) : "", nexar_rpc_response_size(r));
}

// A Python function serving one fn_id, owned by its Communicator.
struct RpcHandler {
  py::object fn;
};

// True while this thread (nexar's completion thread) runs a Python RPC
// handler: waiting there for a request would wait for this very thread.
thread_local bool t_in_rpc_handler = false;

bool interpreter_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

// What an exception raised by a handler tells the caller: "TypeName: text".
std::string describe_exception(const py::error_already_set &e) {
  try {
    return py::str(e.type().attr("__name__")).cast<std::string>() + ": " +
           py::str(e.value()).cast<std::string>();
  } catch (...) {
    return "an exception that could not be described";
  }
}

// The C handler behind every Python one (nexar's completion thread). The
// handler gets (src_rank, request as bytes) and returns bytes-like or None.
// An exception fails the caller's call with NEXAR_ERR_RPC_FAILED, its type
// and text in the message; a NexarError passes on its own status.
nexar_status_t serve_rpc(void *user_data, uint32_t src_rank, uint32_t, const void *request,
                         size_t request_len, nexar_rpc_reply_t *reply) {
  if (!Py_IsInitialized() || interpreter_finalizing()) {
    nexar_rpc_reply_set_error(reply, "the Python interpreter is shutting down");
    return NEXAR_ERR_CLOSED;
  }
  py::gil_scoped_acquire gil;
  // A reference of its own: the handler may replace itself while it runs.
  py::object fn = static_cast<RpcHandler *>(user_data)->fn;
  struct InHandler {
    InHandler() { t_in_rpc_handler = true; }
    ~InHandler() { t_in_rpc_handler = false; }
  } in_handler;
  try {
    py::object out =
        fn(src_rank, py::bytes(request ? static_cast<const char *>(request) : "", request_len));
    if (out.is_none()) return NEXAR_OK;
    Py_buffer view;
    if (PyObject_GetBuffer(out.ptr(), &view, PyBUF_SIMPLE) != 0) {
      PyErr_Clear();
      const std::string text = "TypeError: the handler returned " + type_name(out) +
                               ", not bytes, a contiguous buffer or None";
      nexar_rpc_reply_set_error(reply, text.c_str());
      return NEXAR_ERR_INVALID_ARGUMENT;
    }
    const nexar_status_t st = nexar_rpc_reply_set(reply, view.buf, static_cast<size_t>(view.len));
    PyBuffer_Release(&view);
    if (st != NEXAR_OK) nexar_rpc_reply_set_error(reply, nexar_last_error_message());
    return st;
  } catch (py::error_already_set &e) {
    nexar_status_t st = NEXAR_ERR_INTERNAL;
    if (py::isinstance(e.value(), support().attr("NexarError")))
      st = e.value().attr("status").cast<nexar_status_t>();
    nexar_rpc_reply_set_error(reply, describe_exception(e).c_str());
    return st < 0 ? st : NEXAR_ERR_INTERNAL;
  } catch (const std::exception &e) {
    nexar_rpc_reply_set_error(reply, e.what());
    return NEXAR_ERR_INTERNAL;
  }
}

// ---- Communicator -----------------------------------------------------------------

class Request;

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
    if (!gone.empty()) {
      py::gil_scoped_acquire gil;  // the handlers' functions go with the GIL
      gone.clear();
    }
  }

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
    return d;
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
py::object wrap(nexar_comm_t *h) {
  py::object comm = py::cast(std::make_unique<Communicator>(h));
  support().attr("track")(comm);
  return comm;
}

void Pending::materialize() {
  if (rpc) {
    rpc = false;
    nexar_rpc_response_t *r = std::exchange(rpc_response, nullptr);
    if (status == NEXAR_OK && !result)
      result = response_bytes(r).release().ptr();
    else
      nexar_rpc_response_free(r);
  }
  if (!split_out) return;
  nexar_comm_t *h = split_out;
  split_out = nullptr;
  if (status == NEXAR_OK && !result) {
    result = wrap(h).release().ptr();
  } else {
    nexar_comm_destroy(h);
  }
  Py_XDECREF(split_parent);
  split_parent = nullptr;
}

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

template <class Submit>
py::object Communicator::run(const std::string &op, const Submit &submit,
                             std::initializer_list<py::handle> keep, py::object result,
                             bool async_op) {
  if (!async_op) {
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
        st = submit(h_, nullptr, nullptr);
        if (st != NEXAR_OK) read_last_error(&msg, &failed);
      }
    }
    if (was_closed) raise_closed(op);
    if (st != NEXAR_OK) raise_nexar(st, failed, msg, op, rank_);
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

py::object Communicator::split(py::handle self, int64_t color, int64_t key, bool async_op) {
  const std::string op = "split";
  if (color < 0 || color > UINT32_MAX || key < 0 || key > UINT32_MAX)
    throw py::value_error("split: color and key must be in 0..2**32-1");
  const auto c = static_cast<uint32_t>(color), k = static_cast<uint32_t>(key);
  if (!async_op) {
    nexar_comm_t *out = nullptr;
    run(
        op,
        [&](nexar_comm_t *h, nexar_done_fn, void *) {
          return nexar_comm_split(h, c, k, &out, nullptr, nullptr);
        },
        {}, py::none(), false);
    return wrap(out);
  }
  auto p = std::make_shared<Pending>();
  p->op = op;
  p->comm_rank = rank_;
  p->split_parent = self.inc_ref().ptr();  // the parent outlives the operation
  Pending *raw = p.get();
  return submit_async(p, [raw, c, k](nexar_comm_t *h, nexar_done_fn done, void *ud) {
    return nexar_comm_split(h, c, k, &raw->split_out, done, ud);
  });
}

}  // namespace

namespace {

// ---- The operations ---------------------------------------------------------------

// Blocks of `whole` split over `size` ranks: along the first axis when it has
// `size` entries, else flat.
std::vector<py::ssize_t> block_shape(const View &whole, uint32_t size, size_t block) {
  const py::array &a = whole.arr;
  if (a.ndim() >= 1 && a.shape(0) == static_cast<py::ssize_t>(size))
    return std::vector<py::ssize_t>(a.shape() + 1, a.shape() + a.ndim());
  return {static_cast<py::ssize_t>(block)};
}

size_t blocks_of(const View &v, uint32_t size, const std::string &op) {
  if (v.count % size != 0)
    throw py::value_error(op + ": buf holds " + std::to_string(v.count) +
                          " elements, not a multiple of the communicator size " +
                          std::to_string(size));
  return v.count / size;
}

using InPlaceFn = nexar_status_t (*)(nexar_comm_t *, const void *, void *, size_t, nexar_dtype_t,
                                     nexar_op_t, nexar_done_fn, void *);

py::object in_place(Communicator &c, const std::string &name, py::object buf, int64_t op,
                    bool async_op, InPlaceFn fn) {
  View v = view_of(buf, true, name, "buf");
  const nexar_op_t o = check_op(op, name);
  void *d = v.data;
  const size_t n = v.count;
  const nexar_dtype_t t = v.dtype;
  return c.run(
      name, [=](nexar_comm_t *h, nexar_done_fn f, void *u) { return fn(h, d, d, n, t, o, f, u); },
      {buf, v.arr}, buf, async_op);
}

py::object all_reduce(Communicator &c, py::object buf, int64_t op, bool async_op) {
  return in_place(c, "all_reduce", std::move(buf), op, async_op, nexar_allreduce);
}
py::object scan(Communicator &c, py::object buf, int64_t op, bool async_op) {
  return in_place(c, "scan", std::move(buf), op, async_op, nexar_scan);
}
py::object exscan(Communicator &c, py::object buf, int64_t op, bool async_op) {
  return in_place(c, "exscan", std::move(buf), op, async_op, nexar_exscan);
}

py::object broadcast(Communicator &c, py::object buf, int64_t root, bool async_op) {
  const std::string name = "broadcast";
  View v = view_of(buf, true, name, "buf");
  const uint32_t r = c.check_rank(root, name, "root");
  void *d = v.data;
  const size_t n = v.count;
  const nexar_dtype_t t = v.dtype;
  return c.run(
      name,
      [=](nexar_comm_t *h, nexar_done_fn f, void *u) {
        return nexar_broadcast(h, d, n, t, r, f, u);
      },
      {buf, v.arr}, buf, async_op);
}

py::object reduce(Communicator &c, py::object buf, int64_t op, int64_t root, bool async_op) {
  const std::string name = "reduce";
  View v = view_of(buf, true, name, "buf");
  const nexar_op_t o = check_op(op, name);
  const uint32_t r = c.check_rank(root, name, "root");
  void *d = v.data;
  const size_t n = v.count;
  const nexar_dtype_t t = v.dtype;
  return c.run(
      name,
      [=](nexar_comm_t *h, nexar_done_fn f, void *u) {
        return nexar_reduce(h, d, d, n, t, o, r, f, u);
      },
      {buf, v.arr}, buf, async_op);
}

py::object all_gather(Communicator &c, py::object buf, py::object out, bool async_op) {
  const std::string name = "all_gather";
  View in = view_of(buf, false, name, "buf");
  std::vector<py::ssize_t> shape = shape_of(in.arr);
  shape.insert(shape.begin(), c.size());
  View o = out_view(out, in, shape, in.count * c.size(), name);
  const void *s = in.data;
  void *d = o.data;
  const size_t n = in.count;
  const nexar_dtype_t t = in.dtype;
  py::object result = out.is_none() ? py::object(o.arr) : out;
  return c.run(
      name,
      [=](nexar_comm_t *h, nexar_done_fn f, void *u) {
        return nexar_allgather(h, s, d, n, t, f, u);
      },
      {buf, in.arr, out, o.arr}, result, async_op);
}

py::object reduce_scatter(Communicator &c, py::object buf, int64_t op, py::object out,
                          bool async_op) {
  const std::string name = "reduce_scatter";
  View in = view_of(buf, false, name, "buf");
  const nexar_op_t op_ = check_op(op, name);
  const size_t block = blocks_of(in, c.size(), name);
  View o = out_view(out, in, block_shape(in, c.size(), block), block, name);
  const void *s = in.data;
  void *d = o.data;
  const nexar_dtype_t t = in.dtype;
  py::object result = out.is_none() ? py::object(o.arr) : out;
  return c.run(
      name,
      [=](nexar_comm_t *h, nexar_done_fn f, void *u) {
        return nexar_reduce_scatter(h, s, d, block, t, op_, f, u);
      },
      {buf, in.arr, out, o.arr}, result, async_op);
}

py::object all_to_all(Communicator &c, py::object buf, py::object out, bool async_op) {
  const std::string name = "all_to_all";
  View in = view_of(buf, false, name, "buf");
  const size_t block = blocks_of(in, c.size(), name);
  View o = out_view(out, in, shape_of(in.arr), in.count, name);
  const void *s = in.data;
  void *d = o.data;
  const nexar_dtype_t t = in.dtype;
  py::object result = out.is_none() ? py::object(o.arr) : out;
  return c.run(
      name,
      [=](nexar_comm_t *h, nexar_done_fn f, void *u) {
        return nexar_alltoall(h, s, d, block, t, f, u);
      },
      {buf, in.arr, out, o.arr}, result, async_op);
}

py::object gather(Communicator &c, py::object buf, int64_t root, py::object out, bool async_op) {
  const std::string name = "gather";
  View in = view_of(buf, false, name, "buf");
  const uint32_t r = c.check_rank(root, name, "root");
  const void *s = in.data;
  const size_t n = in.count;
  const nexar_dtype_t t = in.dtype;
  if (c.rank() != r)
    return c.run(
        name,
        [=](nexar_comm_t *h, nexar_done_fn f, void *u) {
          return nexar_gather(h, s, nullptr, n, t, r, f, u);
        },
        {buf, in.arr}, py::none(), async_op);
  std::vector<py::ssize_t> shape = shape_of(in.arr);
  shape.insert(shape.begin(), c.size());
  View o = out_view(out, in, shape, n * c.size(), name);
  void *d = o.data;
  py::object result = out.is_none() ? py::object(o.arr) : out;
  return c.run(
      name,
      [=](nexar_comm_t *h, nexar_done_fn f, void *u) {
        return nexar_gather(h, s, d, n, t, r, f, u);
      },
      {buf, in.arr, out, o.arr}, result, async_op);
}

py::object scatter(Communicator &c, py::object buf, int64_t root, py::object out, bool async_op) {
  const std::string name = "scatter";
  const uint32_t r = c.check_rank(root, name, "root");
  const bool is_root = c.rank() == r;
  if (buf.is_none() && (is_root || out.is_none()))
    throw py::value_error(is_root ? "scatter: the root must pass buf (size blocks)"
                                  : "scatter: pass buf (its shape gives the block) or out");
  View o;
  View in;
  if (!buf.is_none()) {
    in = view_of(buf, false, name, "buf");
    const size_t block = blocks_of(in, c.size(), name);
    o = out_view(out, in, block_shape(in, c.size(), block), block, name);
  } else {
    o = view_of(out, true, name, "out");
  }
  const void *s = is_root ? in.data : nullptr;
  void *d = o.data;
  const size_t n = o.count;
  const nexar_dtype_t t = o.dtype;
  py::object result = out.is_none() ? py::object(o.arr) : out;
  return c.run(
      name,
      [=](nexar_comm_t *h, nexar_done_fn f, void *u) {
        return nexar_scatter(h, s, d, n, t, r, f, u);
      },
      {buf, in.arr, out, o.arr}, result, async_op);
}

py::object barrier(Communicator &c, bool async_op) {
  return c.run(
      "barrier", [](nexar_comm_t *h, nexar_done_fn f, void *u) { return nexar_barrier(h, f, u); },
      {}, py::none(), async_op);
}

py::object send(Communicator &c, py::object buf, int64_t dest, int64_t tag, bool async_op) {
  const std::string name = "send";
  View v = view_of(buf, false, name, "buf");
  const uint32_t to = c.check_rank(dest, name, "dest");
  const uint32_t tg = check_u32(tag, name, "tag");
  const void *d = v.data;
  const size_t n = v.nbytes;
  return c.run(
      name,
      [=](nexar_comm_t *h, nexar_done_fn f, void *u) { return nexar_send(h, d, n, to, tg, f, u); },
      {buf, v.arr}, py::none(), async_op);
}

py::object recv(Communicator &c, py::object buf, int64_t source, int64_t tag, bool async_op) {
  const std::string name = "recv";
  View v = view_of(buf, true, name, "buf");
  const uint32_t from = c.check_rank(source, name, "source");
  const uint32_t tg = check_u32(tag, name, "tag");
  void *d = v.data;
  const size_t n = v.nbytes;
  return c.run(
      name,
      [=](nexar_comm_t *h, nexar_done_fn f, void *u) {
        return nexar_recv(h, d, n, from, tg, f, u);
      },
      {buf, v.arr}, buf, async_op);
}

py::object rpc(Communicator &c, int64_t target, int64_t fn_id, py::object request, bool async_op) {
  const std::string name = "rpc";
  const uint32_t to = c.check_rank(target, name, "target");
  const uint32_t id = check_u32(fn_id, name, "fn_id");
  View v = view_of(request, false, name, "request");
  const void *d = v.data;
  const size_t n = v.nbytes;
  if (!async_op) {
    nexar_rpc_response_t *response = nullptr;
    c.run(
        name,
        [&](nexar_comm_t *h, nexar_done_fn, void *) {
          return nexar_rpc_call(h, to, id, d, n, &response, nullptr, nullptr);
        },
        {}, py::none(), false);
    return response_bytes(response);
  }
  auto p = std::make_shared<Pending>();
  p->op = name;
  p->comm_rank = c.rank();
  p->rpc = true;
  p->keep = {request.inc_ref().ptr(), v.arr.inc_ref().ptr()};
  Pending *raw = p.get();
  return c.submit_async(p, [raw, to, id, d, n](nexar_comm_t *h, nexar_done_fn done, void *ud) {
    return nexar_rpc_call(h, to, id, d, n, &raw->rpc_response, done, ud);
  });
}

// ---- Creating communicators -------------------------------------------------------

void apply_options(nexar_comm_options_t *o, const py::kwargs &kw) {
  for (auto item : kw) {
    const std::string k = py::str(item.first).cast<std::string>();
    if (k == "topology") {
      const std::string v =
          py::isinstance<py::str>(item.second) ? item.second.cast<std::string>() : "";
      if (v == "full")
        o->topology = NEXAR_TOPOLOGY_FULL;
      else if (v == "ring")
        o->topology = NEXAR_TOPOLOGY_RING;
      else
        throw py::value_error("topology must be \"full\" or \"ring\", not " +
                              py::repr(item.second).cast<std::string>());
      continue;
    }
    auto ms = [&](uint64_t *field) {
      const double secs = item.second.cast<double>();
      if (!(secs > 0)) throw py::value_error(k + " must be a positive number of seconds");
      *field = static_cast<uint64_t>(secs * 1000.0 + 0.5);
    };
    if (k == "collective_timeout")
      ms(&o->collective_timeout_ms);
    else if (k == "barrier_timeout")
      ms(&o->barrier_timeout_ms);
    else if (k == "p2p_timeout")
      ms(&o->p2p_timeout_ms);
    else if (k == "connect_timeout")
      ms(&o->connect_timeout_ms);
    else if (k == "heartbeat_interval")
      ms(&o->heartbeat_interval_ms);
    else if (k == "heartbeat_timeout")
      ms(&o->heartbeat_timeout_ms);
    else if (k == "rpc_timeout")
      ms(&o->rpc_timeout_ms);
    else
      throw py::type_error("unknown option " + k +
                           " (known: collective_timeout, barrier_timeout, p2p_timeout, "
                           "connect_timeout, heartbeat_interval, heartbeat_timeout, "
                           "rpc_timeout, topology)");
  }
}

py::list bootstrap_local(int64_t world_size, const py::kwargs &kw) {
  if (world_size < 1 || world_size > 1024)
    throw py::value_error("bootstrap_local: world_size must be in 1..1024");
  nexar_comm_options_t opts;
  if (nexar_status_t st = nexar_comm_options_init(&opts, sizeof opts))
    raise_nexar(st, -1, nexar_last_error_message(), "bootstrap_local", -1);
  apply_options(&opts, kw);
  std::vector<nexar_comm_t *> comms(static_cast<size_t>(world_size), nullptr);
  nexar_status_t st;
  std::string msg;
  {
    py::gil_scoped_release nogil;
    st = nexar_bootstrap_local(comms.data(), static_cast<uint32_t>(world_size), &opts);
    if (st != NEXAR_OK) msg = nexar_last_error_message();
  }
  if (st != NEXAR_OK) raise_nexar(st, -1, msg, "bootstrap_local", -1);
  py::list out;
  for (nexar_comm_t *h : comms)
    out.append(wrap(h));
  return out;
}

py::object init_from_env() {
  nexar_comm_t *h = nullptr;
  nexar_status_t st;
  std::string msg;
  {
    py::gil_scoped_release nogil;
    st = nexar_comm_init_from_env(&h);
    if (st != NEXAR_OK) msg = nexar_last_error_message();
  }
  if (st != NEXAR_OK) raise_nexar(st, -1, msg, "init", -1);
  return wrap(h);
}

// ---- Seed (for the launcher) --------------------------------------------------------

class Seed {
 public:
  Seed(int64_t world_size, const std::string &listen, const std::string &token,
       double formation_timeout) {
    if (world_size < 1 || world_size > 1024)
      throw py::value_error("Seed: world_size must be in 1..1024");
    nexar_seed_options_t o;
    if (nexar_status_t st = nexar_seed_options_init(&o, sizeof o))
      raise_nexar(st, -1, nexar_last_error_message(), "Seed", -1);
    o.listen_address = listen.c_str();
    o.world_size = static_cast<uint32_t>(world_size);
    o.cluster_token = token.empty() ? nullptr : token.c_str();
    o.token_file = nullptr;
    o.open = 0;
    // Past what a uint64_t holds (or infinite): the largest value, which the
    // seed refuses, naming its bound (a cast would be undefined).
    if (formation_timeout > 0)
      o.formation_timeout_ms = formation_timeout * 1000.0 < 1.8e19
                                   ? static_cast<uint64_t>(formation_timeout * 1000.0)
                                   : UINT64_MAX;
    nexar_status_t st;
    std::string msg;
    {
      py::gil_scoped_release nogil;
      st = nexar_seed_start(&seed_, &o);
      if (st != NEXAR_OK) msg = nexar_last_error_message();
    }
    if (st != NEXAR_OK) raise_nexar(st, -1, msg, "Seed", -1);
    address_ = nexar_seed_address(seed_);
  }
  ~Seed() { stop(); }
  Seed(const Seed &) = delete;
  Seed &operator=(const Seed &) = delete;

  const std::string &address() const { return address_; }

  // (ended, status, message): ended is False while the world is still forming.
  py::tuple wait(double timeout) {
    if (!seed_) return py::make_tuple(true, NEXAR_ERR_CLOSED, "the seed was stopped");
    int32_t ended = 0;
    nexar_status_t st;
    std::string msg;
    {
      py::gil_scoped_release nogil;
      const double ms = timeout < 0 ? 0 : (timeout > 3600 ? 3600e3 : timeout * 1000.0);
      st = nexar_seed_wait(seed_, static_cast<uint32_t>(ms), &ended);
      if (st != NEXAR_OK) msg = nexar_last_error_message();
    }
    return py::make_tuple(ended != 0, st, msg);
  }

  void stop() {
    if (!seed_) return;
    nexar_seed_t *s = seed_;
    seed_ = nullptr;
    std::optional<py::gil_scoped_release> nogil;
    if (PyGILState_Check()) nogil.emplace();
    nexar_seed_stop(s);
  }

 private:
  nexar_seed_t *seed_ = nullptr;
  std::string address_;
};

}  // namespace

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

  py::class_<Communicator>(m, "Communicator", R"doc(
One rank's view of a group of processes. Made by nexar.init(),
nexar.bootstrap_local() or Communicator.split(); closed by close() or at the
end of a ``with`` block. Collectives must be called in the same order on every
rank. Every operation blocks (releasing the GIL) unless async_op=True, which
returns a Request.)doc")
      .def_property_readonly("rank", &Communicator::rank, "This rank, 0..size-1.")
      .def_property_readonly("size", &Communicator::size, "The number of ranks.")
      .def_property_readonly("closed", &Communicator::closed)
      .def("close", &Communicator::close,
           "Release the communicator; pending operations fail with ClosedError. Idempotent.")
      .def("abort", &Communicator::abort,
           "Fail every pending operation with AbortedError and tell the peers.")
      .def("stats", &Communicator::stats, "Counters of this rank's engine, as a dict.")
      .def("async_error", &Communicator::async_error,
           "A NexarError describing a failure found in the background, or None.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](Communicator &c, py::args) { c.close(); })
      .def("__repr__",
           [](Communicator &c) {
             return "<nexar.Communicator rank " + std::to_string(c.rank()) + " of " +
                    std::to_string(c.size()) + (c.closed() ? " (closed)>" : ">");
           })
      .def("all_reduce", &all_reduce, py::arg("buf"), py::arg("op") = NEXAR_OP_SUM, py::kw_only(),
           py::arg("async_op") = false,
           "Reduce buf element-wise over every rank, in place; returns buf.")
      .def("broadcast", &broadcast, py::arg("buf"), py::arg("root") = 0, py::kw_only(),
           py::arg("async_op") = false, "Copy root's buf into every rank's buf; returns buf.")
      .def("reduce", &reduce, py::arg("buf"), py::arg("op") = NEXAR_OP_SUM, py::arg("root") = 0,
           py::kw_only(), py::arg("async_op") = false,
           "Reduce buf over every rank into root's buf (in place; other ranks' buf is left "
           "as it was); returns buf.")
      .def("all_gather", &all_gather, py::arg("buf"), py::kw_only(), py::arg("out") = py::none(),
           py::arg("async_op") = false,
           "Every rank's buf, stacked: a new array of shape (size, *buf.shape), or out.")
      .def("reduce_scatter", &reduce_scatter, py::arg("buf"), py::arg("op") = NEXAR_OP_SUM,
           py::kw_only(), py::arg("out") = py::none(), py::arg("async_op") = false,
           "buf holds size blocks (along its first axis when it has size rows, else flat); "
           "returns block `rank` reduced over every rank.")
      .def("all_to_all", &all_to_all, py::arg("buf"), py::kw_only(), py::arg("out") = py::none(),
           py::arg("async_op") = false,
           "buf holds size blocks; block j goes to rank j. Returns a new array of buf's shape "
           "whose block i came from rank i.")
      .def("gather", &gather, py::arg("buf"), py::arg("root") = 0, py::kw_only(),
           py::arg("out") = py::none(), py::arg("async_op") = false,
           "Every rank's buf stacked on root (shape (size, *buf.shape)); None elsewhere.")
      .def("scatter", &scatter, py::arg("buf"), py::arg("root") = 0, py::kw_only(),
           py::arg("out") = py::none(), py::arg("async_op") = false,
           "root's buf holds size blocks; returns block `rank`. Other ranks pass a buf of the "
           "same shape (not read) or out.")
      .def("scan", &scan, py::arg("buf"), py::arg("op") = NEXAR_OP_SUM, py::kw_only(),
           py::arg("async_op") = false, "Inclusive prefix reduction over ranks, in place.")
      .def("exscan", &exscan, py::arg("buf"), py::arg("op") = NEXAR_OP_SUM, py::kw_only(),
           py::arg("async_op") = false,
           "Exclusive prefix reduction over ranks, in place (rank 0's buf is left as it was).")
      .def("barrier", &barrier, py::kw_only(), py::arg("async_op") = false,
           "Return once every rank has entered the barrier.")
      .def("send", &send, py::arg("buf"), py::arg("dest"), py::arg("tag") = 0, py::kw_only(),
           py::arg("async_op") = false, "Send buf's bytes to rank dest with a tag.")
      .def("recv", &recv, py::arg("buf"), py::arg("source"), py::arg("tag") = 0, py::kw_only(),
           py::arg("async_op") = false,
           "Receive the next message from source with this tag into buf (its size must "
           "match); returns buf.")
      .def("register_rpc", &Communicator::register_rpc, py::arg("fn_id"), py::arg("handler"),
           "Serve fn_id with handler(src_rank, request: bytes) -> bytes-like or None (an "
           "empty response); None stops serving it. The handler runs on nexar's completion "
           "thread with the GIL, one at a time per communicator: it may start operations "
           "with async_op=True but not block on one. An exception fails the caller's call "
           "with RpcFailedError naming it.")
      .def("rpc", &rpc, py::arg("target"), py::arg("fn_id"), py::arg("request") = py::bytes(),
           py::kw_only(), py::arg("async_op") = false,
           "Call fn_id on rank target (this rank too) with request's bytes; returns the "
           "response as bytes. RpcNotRegisteredError when target does not serve fn_id, "
           "RpcFailedError when its handler failed, TimeoutError after rpc_timeout.")
      .def(
          "split",
          [](py::object self, int64_t color, int64_t key, bool async_op) {
            return self.cast<Communicator &>().split(self, color, key, async_op);
          },
          py::arg("color"), py::arg("key") = 0, py::kw_only(), py::arg("async_op") = false,
          "A new Communicator of the ranks that passed the same color, ordered by (key, rank).");

  m.def("bootstrap_local", &bootstrap_local, py::arg("world_size"));
  m.def("init", &init_from_env);

  py::class_<Seed>(m, "Seed")
      .def(py::init<int64_t, const std::string &, const std::string &, double>(),
           py::arg("world_size"), py::arg("listen") = "127.0.0.1:0", py::arg("token") = "",
           py::arg("formation_timeout") = 0.0)
      .def_property_readonly("address", &Seed::address)
      .def("wait", &Seed::wait, py::arg("timeout"))
      .def("stop", &Seed::stop);

  m.def("_dispatch_loop", [] { Dispatcher::get().loop(); });
  m.def("_dispatch_stop", [] { Dispatcher::get().stop(); });
  m.def(
      "_flush", [](double timeout) { return Dispatcher::get().flush(timeout); },
      py::arg("timeout") = 5.0);
  m.def("_install_log_sink", [] { return nexar_set_log_callback(on_log, nullptr); });
  m.def("_remove_log_sink", [] {
    py::gil_scoped_release nogil;
    return nexar_set_log_callback(nullptr, nullptr);
  });
}
