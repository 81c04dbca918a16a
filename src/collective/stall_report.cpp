#include "collective/stall_report.h"

#include <algorithm>

#include "core/clock.h"
#include "core/config.h"
#include "core/log.h"

namespace nexar {
namespace {

constexpr uint64_t kDefaultStallMs = 30000;
constexpr uint64_t kMaxAnswerWindowNs = 1000 * kNsPerMs;

// NEXAR_STALL_REPORT_SECS, read once (a malformed value keeps the default).
uint64_t stall_report_ns() {
  static const uint64_t ns = [] {
    uint64_t ms = kDefaultStallMs;
    if (env("NEXAR_STALL_REPORT_SECS") && !env_seconds_ms("NEXAR_STALL_REPORT_SECS", &ms))
      ms = kDefaultStallMs;
    return ms * kNsPerMs;
  }();
  return ns;
}

std::string join(const std::vector<std::string> &parts) {
  std::string s;
  for (const std::string &p : parts)
    s += (s.empty() ? "" : ", ") + p;
  return s.empty() ? "none" : s;
}

}  // namespace

StallReport::StallReport(const Coll &c, uint64_t start_ns, uint64_t deadline_ns)
    : coll_(c), loop_(c.op()->loop()), start_ns_(start_ns) {
  ev_init(&timer_, &StallReport::on_timer);
  timer_.data = this;
  if (c.size() < 2 || deadline_ns <= start_ns) return;
  // The report must be made before the timeout ends the collective: the
  // answers get a window before the report time.
  const uint64_t report_ns = std::min(stall_report_ns(), deadline_ns - start_ns);
  const uint64_t window = std::min(report_ns / 5, kMaxAnswerWindowNs);
  conclude_at_ns_ = start_ns + report_ns;
  loop_->arm_timer(&timer_, start_ns + report_ns - window, now_ns());
}

StallReport::~StallReport() {
  loop_->stop_timer(&timer_);
}

void StallReport::on_timer(struct ev_loop *, ev_timer *w, int) {
  auto *self = static_cast<StallReport *>(w->data);
  if (!self->asked_)
    self->ask();
  else
    self->conclude();
}

void StallReport::ask() {
  asked_ = true;
  Communicator *comm = coll_.comm();
  const uint64_t seq = coll_.seq();
  own_waits_on_ = comm->waiting_on(seq);
  answers_.assign(comm->size(), Answer{});
  comm->collectives().listen_stall(
      seq, [this](uint32_t world_peer, const wire::StallAnswer &a) { on_answer(world_peer, a); });
  for (uint32_t r = 0; r < comm->size(); ++r)
    if (r != comm->rank())
      comm->client().send_control(comm->world_rank_of(r), wire::StallQuery{comm->comm_id(), seq});
  loop_->arm_timer(&timer_, conclude_at_ns_, now_ns());
}

void StallReport::on_answer(uint32_t world_peer, const wire::StallAnswer &a) {
  const int32_t r = coll_.comm()->rank_of_world(world_peer);
  if (r < 0 || answers_[r].heard) return;
  answers_[r] = Answer{true, a};
  if (++heard_ + 1 == coll_.size()) conclude();  // everyone answered
}

void StallReport::conclude() {
  if (concluded_) return;
  concluded_ = true;
  loop_->stop_timer(&timer_);
  LOG_WARN("%s", text().c_str());
}

std::string StallReport::text() const {
  const Communicator *comm = coll_.comm();
  const uint64_t seq = coll_.seq();
  std::vector<std::string> inside, absent, other, finished, silent;
  auto waits = [](uint32_t r, int32_t on) {
    return on < 0 ? format("rank %u", r) : format("rank %u (waits on rank %d)", r, on);
  };
  for (uint32_t r = 0; r < comm->size(); ++r) {
    if (r == comm->rank()) {
      inside.push_back(waits(r, own_waits_on_));
      continue;
    }
    const Answer &ans = answers_[r];
    if (!ans.heard) {
      silent.push_back(format("rank %u", r));
      continue;
    }
    const wire::StallAnswer &a = ans.a;
    const char *ours = coll_name(coll_.kind());
    if (a.running_seq == seq && a.running_what == ours)
      inside.push_back(waits(r, a.waits_on));
    else if (a.running_seq == seq)
      other.push_back(format("rank %u (%s #%llu)", r, a.running_what.c_str(),
                             static_cast<unsigned long long>(seq)));
    else if (a.last_started < seq)
      absent.push_back(format("rank %u (last completed #%llu)", r,
                              static_cast<unsigned long long>(a.last_completed)));
    else
      finished.push_back(format("rank %u", r));
  }
  std::string s = format(
      "stall report of %s after %.1f s: inside it: %s; not entered: %s; called "
      "something else: %s",
      coll_.what(), static_cast<double>(now_ns() - start_ns_) / 1e9, join(inside).c_str(),
      join(absent).c_str(), join(other).c_str());
  if (!finished.empty()) s += "; finished it: " + join(finished);
  if (!silent.empty()) s += "; no answer: " + join(silent);
  return s;
}

int32_t StallReport::culprit() const {
  const Communicator *comm = coll_.comm();
  const uint64_t seq = coll_.seq();
  int32_t other = -1, silent = -1;
  std::vector<uint32_t> waited(comm->size(), 0);
  if (own_waits_on_ >= 0) ++waited[own_waits_on_];
  for (uint32_t r = 0; r < comm->size(); ++r) {
    if (r == comm->rank()) continue;
    const Answer &ans = answers_[r];
    if (!ans.heard) {
      if (silent < 0) silent = static_cast<int32_t>(r);
      continue;
    }
    if (ans.a.running_seq != seq && ans.a.last_started < seq) return static_cast<int32_t>(r);
    if (ans.a.running_seq == seq && ans.a.running_what != coll_name(coll_.kind()) && other < 0)
      other = static_cast<int32_t>(r);
    if (ans.a.running_seq == seq && ans.a.waits_on >= 0 &&
        static_cast<uint32_t>(ans.a.waits_on) < comm->size())
      ++waited[ans.a.waits_on];
  }
  if (other >= 0) return other;
  if (silent >= 0) return silent;
  const auto most = std::max_element(waited.begin(), waited.end());
  return *most > 0 ? static_cast<int32_t>(most - waited.begin()) : -1;
}

Status StallReport::annotate(Status s) const {
  if (s.code != NEXAR_ERR_TIMEOUT || !asked_) return s;
  s.message += "; " + text();
  if (const int32_t c = culprit(); c >= 0) s.failed_rank = c;
  return s;
}

}  // namespace nexar
