#include "client/collective_tracker.h"

namespace nexar {
namespace {
constexpr size_t kEarlyMismatchLimit = 1024;
}  // namespace

std::optional<Status> CollectiveTracker::start(uint64_t seq) {
  if (seq > last_started_) last_started_ = seq;
  if (early_mismatch_.empty()) return std::nullopt;
  auto early = early_mismatch_.find(seq);
  if (early == early_mismatch_.end()) return std::nullopt;
  Status s = std::move(early->second);
  early_mismatch_.erase(early);
  return s;
}

void CollectiveTracker::defer_mismatch(uint64_t seq, const Status &s) {
  if (early_mismatch_.size() < kEarlyMismatchLimit) early_mismatch_.emplace(seq, s);
}

void CollectiveTracker::begin(uint64_t seq, const char *what, uint32_t check,
                              std::function<void(uint32_t)> on_mismatch) {
  running_[seq] = Running{check, what, std::move(on_mismatch), nullptr};
}

void CollectiveTracker::end(uint64_t seq) {
  auto run = running_.find(seq);
  if (run == running_.end()) return;
  const uint32_t check = run->second.check;
  running_.erase(run);
  ended(seq, check);
}

void CollectiveTracker::ended(uint64_t seq, uint32_t check) {
  ended_[seq % kEndedKept] = Ended{seq, check};
  if (seq > last_ended_) last_ended_ = seq;
}

CollectiveTracker::Frame CollectiveTracker::on_frame(uint64_t seq, uint32_t check,
                                                     uint32_t world_peer) {
  if (auto run = running_.find(seq); run != running_.end()) {
    if (run->second.check == check) return Frame::Keep;
    auto notify = run->second.on_mismatch;  // may end the collective
    notify(world_peer);
    return Frame::Mismatched;
  }
  const Ended &ended = ended_[seq % kEndedKept];
  if (seq == 0 || ended.seq != seq) return Frame::Keep;
  if (ended.check != check && on_late_) on_late_(seq, world_peer);
  return Frame::Drop;
}

void CollectiveTracker::listen_stall(uint64_t seq, StallListener listener) {
  auto run = running_.find(seq);
  if (run != running_.end()) run->second.on_stall = std::move(listener);
}

void CollectiveTracker::on_stall_answer(uint32_t world_peer, const wire::StallAnswer &a) {
  auto run = running_.find(a.coll_seq);
  if (run == running_.end() || !run->second.on_stall) return;  // over since it asked
  auto listener = run->second.on_stall;
  listener(world_peer, a);
}

uint64_t CollectiveTracker::running_seq() const {
  uint64_t top = 0;
  for (const auto &[seq, run] : running_)
    if (seq > top) top = seq;
  return top;
}

const char *CollectiveTracker::running_what(uint64_t seq) const {
  auto run = running_.find(seq);
  return run == running_.end() ? nullptr : run->second.what;
}

}  // namespace nexar
