// Every suspension point of an operation is a Wait: it has a deadline, it is
// registered with its operation (so failure, abort or destroy can end all of
// an operation's waits at once), and it resumes its coroutine through the
// loop's ready queue, never re-entrantly.
#pragma once

#include <ev.h>

#include <coroutine>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/event_loop.h"

namespace nexar {

class OpContext;

class Wait {
 public:
  Wait(EventLoop *loop, OpContext *op, uint64_t deadline_ns, int32_t peer_rank);
  virtual ~Wait();
  Wait(const Wait &) = delete;
  Wait &operator=(const Wait &) = delete;

  // Ends the wait with s (idempotent: only the first call counts).
  void finish(Status s);
  bool finished() const { return finished_; }
  const Status &result() const { return result_; }
  int32_t peer_rank() const { return peer_rank_; }

 protected:
  // Called by derived await_suspend: remembers h, arms the deadline and
  // registers with the operation. Returns false if already finished.
  bool suspend(std::coroutine_handle<> h);
  // Derived classes unhook themselves from whatever would have finished them.
  virtual void detach() {}
  // The message used when the deadline passes.
  virtual std::string timeout_message() const = 0;

  EventLoop *loop_;
  OpContext *op_;

 private:
  friend class OpContext;
  static void on_timer(struct ev_loop *, ev_timer *w, int);

  uint64_t deadline_ns_;
  int32_t peer_rank_;
  bool finished_ = false;
  bool armed_ = false;
  Status result_;
  std::coroutine_handle<> handle_;
  ev_timer timer_;
  Wait *prev_ = nullptr;  // intrusive list of the operation's waits
  Wait *next_ = nullptr;
};

// The state of one operation in flight on its engine.
class OpContext {
 public:
  OpContext(EventLoop *loop, uint64_t seq, std::string name);
  ~OpContext();

  // Records the first failure and ends every wait of the operation with it.
  void fail(const Status &s);
  bool failed() const { return !status_.ok(); }
  const Status &status() const { return status_; }
  EventLoop *loop() const { return loop_; }
  uint64_t seq() const { return seq_; }
  // The collective sequence number (0 for other operations).
  uint64_t coll_seq() const { return coll_seq_; }
  // count: how many consecutive numbers the operation holds (a bucketed
  // allreduce runs one collective per bucket).
  void set_coll_seq(uint64_t s, uint32_t count = 1) {
    coll_seq_ = s;
    coll_seq_count_ = count;
  }
  uint32_t coll_seq_count() const { return coll_seq_count_; }
  bool covers_coll_seq(uint64_t s) const {
    return coll_seq_ != 0 && s >= coll_seq_ && s - coll_seq_ < coll_seq_count_;
  }
  // The operation's flight-recorder ticket (0: not recorded).
  uint64_t trace() const { return trace_; }
  void set_trace(uint64_t t) { trace_ = t; }
  const std::string &name() const { return name_; }

  // Zero-copy sends whose bytes the transport may still read: the operation's
  // completion (and with it the release of the user's buffers) waits for them.
  void pin() { ++pins_; }
  void unpin();
  bool pinned() const { return pins_ > 0; }
  void on_unpinned(std::function<void()> fn) { on_unpinned_ = std::move(fn); }
  // Keeps an object alive as long as the operation.
  void keep_alive(std::shared_ptr<void> p) { kept_.push_back(std::move(p)); }

 private:
  friend class Wait;
  void link(Wait *w);
  void unlink(Wait *w);

  EventLoop *loop_;
  uint64_t seq_;
  uint64_t coll_seq_ = 0;
  uint64_t trace_ = 0;
  uint32_t coll_seq_count_ = 1;
  std::string name_;
  Status status_;
  Wait *head_ = nullptr;
  int pins_ = 0;
  std::function<void()> on_unpinned_;
  std::vector<std::shared_ptr<void>> kept_;
};

// A plain timer wait (co_await Sleep(...)).
class SleepWait : public Wait {
 public:
  SleepWait(EventLoop *loop, OpContext *op, uint64_t deadline_ns)
      : Wait(loop, op, deadline_ns, -1) {}
  bool await_ready() const noexcept { return false; }
  bool await_suspend(std::coroutine_handle<> h) { return suspend(h); }
  Status await_resume() { return result().code == NEXAR_ERR_TIMEOUT ? Status() : result(); }

 protected:
  std::string timeout_message() const override { return "sleep"; }
};

}  // namespace nexar
