#include "client/comm_faults.h"

#include <algorithm>

namespace nexar {

std::vector<uint32_t> CommFaults::failed_ranks() const {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<uint32_t> out;
  out.reserve(failed_.size());
  for (const Failed &f : failed_)
    out.push_back(f.rank);
  return out;
}

size_t CommFaults::failed_count() const {
  std::lock_guard<std::mutex> g(mu_);
  return failed_.size();
}

uint32_t CommFaults::acknowledge(uint32_t n) {
  std::lock_guard<std::mutex> g(mu_);
  const uint32_t known = static_cast<uint32_t>(failed_.size());
  acked_ = std::max(acked_, std::min(n, known));
  return acked_;
}

std::vector<uint32_t> CommFaults::acked_ranks() const {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<uint32_t> out;
  for (uint32_t i = 0; i < acked_; ++i)
    out.push_back(failed_[i].rank);
  return out;
}

void CommFaults::set_hook(nexar_done_fn hook, void *hook_data) {
  std::lock_guard<std::mutex> g(mu_);
  hook_ = hook;
  hook_data_ = hook_data;
}

void CommFaults::hook(nexar_done_fn *fn, void **data) const {
  std::lock_guard<std::mutex> g(mu_);
  *fn = hook_;
  *data = hook_data_;
}

bool CommFaults::add(uint32_t rank, const Status &cause, uint64_t left_after) {
  std::lock_guard<std::mutex> g(mu_);
  for (const Failed &f : failed_)
    if (f.rank == rank) return false;
  failed_.push_back(Failed{rank, cause, left_after});
  return true;
}

bool CommFaults::is_failed(uint32_t rank) const {
  std::lock_guard<std::mutex> g(mu_);
  for (const Failed &f : failed_)
    if (f.rank == rank) return true;
  return false;
}

const CommFaults::Failed *CommFaults::blocking(uint64_t coll_seq) const {
  // Loop thread: the only writer, so the pointer stays valid until the next add.
  std::lock_guard<std::mutex> g(mu_);
  for (const Failed &f : failed_)
    if (f.left_after == 0 || coll_seq > f.left_after) return &f;
  return nullptr;
}

std::string encode_ranks(const std::vector<uint32_t> &ranks) {
  std::string out;
  out.reserve(ranks.size() * 4);
  for (uint32_t r : ranks)
    for (int i = 0; i < 4; ++i)
      out.push_back(static_cast<char>((r >> (8 * i)) & 0xff));
  return out;
}

std::vector<uint32_t> decode_ranks(const std::string &bytes) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i + 4 <= bytes.size(); i += 4) {
    uint32_t r = 0;
    for (int k = 0; k < 4; ++k)
      r |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[i + k])) << (8 * k);
    out.push_back(r);
  }
  return out;
}

}  // namespace nexar
