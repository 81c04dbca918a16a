// StallReport: when a collective waits past NEXAR_STALL_REPORT_SECS (default
// 30 s, capped by the collective's timeout), it asks the other members what
// they are doing (their engines answer, so a rank whose application thread
// hangs still does) and logs a warn line: which ranks are inside the
// collective and whom each waits on, which have not entered it (with the
// last collective they completed), which called something else. If the
// collective then times out, its completion message carries the report and
// failed_rank names the culprit. Loop thread only.
#pragma once

#include <ev.h>

#include <cstdint>
#include <string>
#include <vector>

#include "collective/coll.h"

namespace nexar {

class StallReport {
 public:
  StallReport(const Coll &c, uint64_t start_ns, uint64_t deadline_ns);
  ~StallReport();
  StallReport(const StallReport &) = delete;
  StallReport &operator=(const StallReport &) = delete;

  // s, with the report and the culprit when s is a timeout the report saw.
  Status annotate(Status s) const;

 private:
  static void on_timer(struct ev_loop *, ev_timer *w, int);
  void ask();
  void conclude();
  void on_answer(uint32_t world_peer, const wire::StallAnswer &a);
  std::string text() const;
  int32_t culprit() const;

  const Coll &coll_;
  EventLoop *loop_;
  ev_timer timer_;
  uint64_t start_ns_;
  uint64_t conclude_at_ns_ = 0;
  bool asked_ = false, concluded_ = false;
  int32_t own_waits_on_ = -1;
  struct Answer {
    bool heard = false;
    wire::StallAnswer a;
  };
  std::vector<Answer> answers_;  // by rank of the communicator
  uint32_t heard_ = 0;
};

}  // namespace nexar
