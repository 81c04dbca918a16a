// CommFaults: what one communicator knows about failures. The members it
// knows to have failed (in the order it learned of them; the list only
// grows), how many of them the application acknowledged, whether the
// communicator is revoked, and the application's failure callback. The lists
// are read from any thread (nexar_comm_get_failed); they change on the loop
// thread only.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "nexar.h"

namespace nexar {

class CommFaults {
 public:
  struct Failed {
    uint32_t rank;
    Status cause;
    // A member that left normally after starting collective number
    // left_after: collectives up to that number may still finish with it.
    uint64_t left_after;
  };

  // ---- any thread ----
  // The failed ranks in the order they were learned.
  std::vector<uint32_t> failed_ranks() const;
  size_t failed_count() const;
  // Acknowledges the first n failures (at most those known); returns how many
  // are acknowledged now.
  uint32_t acknowledge(uint32_t n);
  // The acknowledged ranks.
  std::vector<uint32_t> acked_ranks() const;
  bool revoked() const { return revoked_.load(std::memory_order_acquire); }
  // The callback run once per failed rank (fn == nullptr removes it). It is
  // handed to the completion thread as a done function: hook(hook_data, c)
  // with c->failed_rank the rank and c->status the cause.
  void set_hook(nexar_done_fn hook, void *hook_data);
  void hook(nexar_done_fn *fn, void **data) const;

  // ---- loop thread ----
  // Records a failure; false if rank was already known to have failed.
  bool add(uint32_t rank, const Status &cause, uint64_t left_after);
  bool is_failed(uint32_t rank) const;
  // The first failed member that collective number coll_seq cannot run
  // with, or nullptr.
  const Failed *blocking(uint64_t coll_seq) const;
  // Marks the communicator revoked; false if it already was.
  bool set_revoked() { return !revoked_.exchange(true, std::memory_order_acq_rel); }
  // The other ranks declared this one failed; false if already known.
  bool set_excluded() { return !excluded_.exchange(true, std::memory_order_acq_rel); }
  bool excluded() const { return excluded_.load(std::memory_order_acquire); }

 private:
  mutable std::mutex mu_;
  std::vector<Failed> failed_;
  uint32_t acked_ = 0;
  nexar_done_fn hook_ = nullptr;
  void *hook_data_ = nullptr;
  std::atomic<bool> revoked_{false};
  std::atomic<bool> excluded_{false};
};

// Rank lists on the wire (little-endian u32 each) and back.
std::string encode_ranks(const std::vector<uint32_t> &ranks);
std::vector<uint32_t> decode_ranks(const std::string &bytes);

}  // namespace nexar
