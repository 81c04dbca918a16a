// Polls a condition that another thread (an engine's loop) makes true, with a
// bound, so a broken feature fails the test instead of hanging it.
#pragma once

#include <chrono>
#include <thread>

namespace nexar_test {

// Whether pred() held within `limit` (checked every 5 ms).
template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = std::chrono::seconds(30)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred();
}

}  // namespace nexar_test
