#include "dispatcher.h"

#include <pybind11/pybind11.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include "pending.h"

namespace py = pybind11;

namespace nexar_py {

namespace {

struct LogLine {
  int32_t level;
  std::string text;
};

class Dispatcher {
 public:
  static Dispatcher &get() { return *current().load(std::memory_order_acquire); }
  // In a forked child: a dispatcher of its own. The parent's stays as the
  // fork copied it: a thread the child lacks may hold its mutex, and its
  // queue holds the parent's operations.
  static void replace_after_fork() { current().store(new Dispatcher(), std::memory_order_release); }

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

  // Never destroyed (see support(), errors.cpp).
  static std::atomic<Dispatcher *> &current() {
    static std::atomic<Dispatcher *> d{new Dispatcher()};
    return d;
  }

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

}  // namespace

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

void dispatch_loop() {
  Dispatcher::get().loop();
}
void dispatch_stop() {
  Dispatcher::get().stop();
}
void dispatch_after_fork_in_child() {
  Dispatcher::replace_after_fork();
}
bool dispatch_flush(double timeout_s) {
  return Dispatcher::get().flush(timeout_s);
}

}  // namespace nexar_py
