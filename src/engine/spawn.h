// Starting coroutines from plain code (spawn), and running several at once
// inside one operation (when_all).
#pragma once

#include <coroutine>
#include <exception>
#include <functional>
#include <vector>

#include "core/status.h"
#include "engine/task.h"
#include "engine/wait.h"

namespace nexar {

// A coroutine that starts at once and frees itself when it ends. Used only by
// spawn() and when_all(), which catch everything inside.
struct Detached {
  struct promise_type {
    Detached get_return_object() noexcept { return {}; }
    std::suspend_never initial_suspend() const noexcept { return {}; }
    std::suspend_never final_suspend() const noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }
  };
};

// Runs task to completion on the loop thread and hands its Status to done.
// An exception escaping the task becomes NEXAR_ERR_INTERNAL (or NO_MEMORY).
Detached spawn(Task<Status> task, std::function<void(Status)> done);

// Runs every task concurrently; the first failure fails op (ending the other
// tasks' waits at once) and is the result. Must be awaited on the loop thread.
Task<Status> when_all(OpContext *op, std::vector<Task<Status>> tasks);

}  // namespace nexar
