#include "engine/spawn.h"

#include <new>

namespace nexar {
namespace {

Status status_from_exception(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::bad_alloc &) {
    return Status(NEXAR_ERR_NO_MEMORY, "out of memory");
  } catch (const std::exception &ex) {
    return Status(NEXAR_ERR_INTERNAL, format("internal error: %s", ex.what()));
  } catch (...) {
    return Status(NEXAR_ERR_INTERNAL, "internal error: unknown exception");
  }
}

struct JoinState {
  OpContext *op;
  size_t remaining;
  Status first_error;
  std::coroutine_handle<> parent;
};

Detached run_child(Task<Status> task, JoinState *st) {
  Status s;
  try {
    s = co_await std::move(task);
  } catch (...) {
    s = status_from_exception(std::current_exception());
  }
  if (!s.ok() && st->first_error.ok()) {
    st->first_error = s;
    st->op->fail(s);
  }
  if (--st->remaining == 0) st->op->loop()->schedule(st->parent);
}

struct JoinAwaiter {
  JoinState *st;
  std::vector<Task<Status>> *tasks;
  bool await_ready() const noexcept { return tasks->empty(); }
  bool await_suspend(std::coroutine_handle<> h) {
    st->parent = h;
    st->remaining = tasks->size() + 1;  // +1 until every child has started
    for (auto &t : *tasks)
      run_child(std::move(t), st);
    return --st->remaining != 0;
  }
  void await_resume() const noexcept {}
};

}  // namespace

Detached spawn(Task<Status> task, std::function<void(Status)> done) {
  Status s;
  try {
    s = co_await std::move(task);
  } catch (...) {
    s = status_from_exception(std::current_exception());
  }
  done(std::move(s));
}

Task<Status> when_all(OpContext *op, std::vector<Task<Status>> tasks) {
  JoinState st{op, 0, {}, {}};
  co_await JoinAwaiter{&st, &tasks};
  co_return st.first_error;
}

}  // namespace nexar
