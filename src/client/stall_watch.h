// StallWatch: notices that this process's engine did not run for longer than
// the heartbeat timeout (the process was frozen by SIGSTOP, a debugger or the
// kernel). Its peers heard nothing from it all that time, so they have
// declared it failed and gone on without it: when it wakes it must not carry
// on as a member (fail-stop by decision), and its operations fail with
// NEXAR_ERR_EXCLUDED. Loop thread only.
#pragma once

#include <ev.h>

#include <cstdint>
#include <functional>

#include "engine/event_loop.h"

namespace nexar {

class StallWatch {
 public:
  // Ticks every period_ms; on_stall(gap_ms) runs once, the first time the
  // engine is found to have been still for more than limit_ms.
  StallWatch(EventLoop &loop, uint64_t period_ms, uint64_t limit_ms,
             std::function<void(uint64_t)> on_stall);
  ~StallWatch();
  StallWatch(const StallWatch &) = delete;
  StallWatch &operator=(const StallWatch &) = delete;

  void start();
  // Whether the engine stalled (checked also before a peer that fell silent
  // is declared failed: after a freeze, its timers may run before ours).
  bool stalled();
  // How long, beyond one tick period, the engine stood still within the
  // last window_ns (the stretch in progress or the last long one): when a
  // peer's silence fell mostly inside such a stretch, the silence was ours.
  uint64_t still_within(uint64_t window_ns) const;

 private:
  static void on_timer(struct ev_loop *, ev_timer *w, int);

  EventLoop &loop_;
  uint64_t period_ns_, limit_ns_;
  std::function<void(uint64_t)> on_stall_;
  ev_timer timer_;
  bool started_ = false;
  bool fired_ = false;
  uint64_t last_ns_ = 0;
  uint64_t long_gap_start_ns_ = 0, long_gap_end_ns_ = 0;  // the last gap over two periods
};

}  // namespace nexar
