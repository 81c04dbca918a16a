#include "client/shm_coll_area.h"

#include <atomic>
#include <cmath>
#include <cstring>

#include <gnutls/crypto.h>

#include "client/shm_host.h"
#include "transport/process_memory.h"

namespace nexar {

std::unique_ptr<ShmCollArea> ShmCollArea::create(ShmHost &host, uint32_t rank, uint32_t size,
                                                 Config::ShmCma cma) {
  uint64_t offset = 0;
  uint8_t *own = host.allocate_shared(kAreaBytes, &offset);
  if (!own) return nullptr;
  // Counters start at zero: no ticket published, reduced or finished, and
  // no wait asleep.
  memset(own, 0, kCounterLines * kShmLine);
  for (uint32_t s = 0; s < kSlots; ++s)
    memset(own + slot_offset(s), 0, kShmLine);
  auto *id = reinterpret_cast<Identity *>(own);
  id->address = reinterpret_cast<uint64_t>(own);
  if (gnutls_rnd(GNUTLS_RND_NONCE, &id->nonce, sizeof id->nonce) < 0) cma = Config::ShmCma::Off;
  return std::make_unique<ShmCollArea>(host, rank, size, own, offset, cma);
}

ShmCollArea::ShmCollArea(ShmHost &host, uint32_t rank, uint32_t size, uint8_t *own, uint64_t offset,
                         Config::ShmCma cma)
    : host_(host), rank_(rank), own_(own), offset_(offset), members_(size), cma_(cma) {
  const OwnShmSegment &seg = host.segment();
  members_[rank] = {0, own, seg.heap(), seg.heap_bytes(), 0};
}

ShmCollArea::~ShmCollArea() {
  host_.release_shared(own_);
}

bool ShmCollArea::attach(uint32_t r, uint32_t world_rank, uint64_t offset) {
  const ShmChannel *ch = host_.channel(world_rank);
  if (!ch || r >= members_.size()) return false;
  const PeerShmSegment &seg = ch->peer_segment();
  if (offset > seg.heap_bytes() || seg.heap_bytes() - offset < kAreaBytes || offset % kShmLine)
    return false;
  members_[r] = {world_rank, seg.heap() + offset, seg.heap(), seg.heap_bytes(), 0};
  // r's identity, read through its process: the same two words mean that
  // pid is r's process and the host lets this one read it. The host's
  // handle on that process was taken when the channel opened: if it still
  // runs after the read, the pid was its.
  const uint32_t pid = host_.peer_pid(world_rank);
  if (cma_ == Config::ShmCma::Off || !pid || r >= kMaxDirectMembers || rank_ >= kMaxDirectMembers)
    return true;
  const auto *theirs = reinterpret_cast<const Identity *>(members_[r].area);
  const uint64_t address = shm_load(&theirs->address), nonce = shm_load(&theirs->nonce);
  uint64_t seen[2] = {};
  if (nonce && read_process_memory(pid, address, seen, sizeof seen).ok() && seen[0] == address &&
      seen[1] == nonce && !host_.peer_process_ended(world_rank)) {
    if (cma_ == Config::ShmCma::Auto) measure_kernel_reads(r, pid, address);
    members_[r].pid = pid;
    uint64_t *word = &reinterpret_cast<Identity *>(own_)->reads_directly[r / 64];
    shm_store(word, shm_load(word) | (uint64_t{1} << (r % 64)));
  }
  return true;
}

Status ShmCollArea::read_member(uint32_t r, uint64_t address, void *out, uint64_t bytes) const {
  const Member &m = members_[r];
  Status s = read_process_memory(m.pid, address, out, bytes);
  if (s && host_.peer_process_ended(m.world_rank))
    s = error(NEXAR_ERR_PEER_FAILED, format("process %u ended or left while it was read", m.pid));
  if (s.code == NEXAR_ERR_PEER_FAILED) host_.peer_vanished(m.world_rank);
  return s;
}

// The machine decides, not the member: measured once per process.
std::atomic<double> ShmCollArea::kernel_read_cost_{0};

namespace {

// The timing copies lines in this core's cache. A transfer's copy reads
// lines another core just wrote, several times slower, while the kernel's
// work per page stays: in a transfer a read costs fewer copies than timed.
// Measured: an Intel Xeon timing 2.2 to 3.3 copies per read, where direct
// reads beat two copies and lost to four copies in three reads (a 4-rank
// allgather), and an AMD EPYC timing 5.2, where they lost to two copies.
constexpr double kTransferCostOfTimedCost = 1 / 1.5;

}  // namespace

void ShmCollArea::measure_kernel_reads(uint32_t r, uint32_t pid, uint64_t address) {
  // On the first slot of the first member attached, read into this
  // member's own (idle until its first collective).
  if (kernel_read_cost_.load(std::memory_order_relaxed) > 0) return;
  constexpr uint64_t kSlot = kCounterLines * kShmLine + kShmLine, kBytes = 64 << 10;
  const double cost = kernel_read_cost_in_copies(pid, address + kSlot, members_[r].area + kSlot,
                                                 own_ + kSlot, kBytes);
  // A failed read is never cheap.
  kernel_read_cost_.store(cost > 0 ? cost * kTransferCostOfTimedCost : HUGE_VAL,
                          std::memory_order_relaxed);
}

bool ShmCollArea::read_directly_by_all(double copies_replaced) const {
  if (cma_ == Config::ShmCma::Off || rank_ >= kMaxDirectMembers) return false;
  // Auto in a process that never measured (it reads no member directly)
  // does not know: no.
  const double cost = kernel_read_cost_.load(std::memory_order_relaxed);
  if (cma_ == Config::ShmCma::Auto && !(cost > 0 && cost < copies_replaced)) return false;
  for (uint32_t r = 0; r < members_.size(); ++r) {
    if (r == rank_) continue;
    const auto *theirs = reinterpret_cast<const Identity *>(members_[r].area);
    if (!(shm_load(&theirs->reads_directly[rank_ / 64]) >> (rank_ % 64) & 1)) return false;
  }
  return true;
}

bool ShmCollArea::in_own_heap(const void *p, uint64_t bytes, uint64_t *offset) const {
  const uint8_t *heap = members_[rank_].heap;
  const uint64_t cap = members_[rank_].heap_bytes;
  const auto *b = static_cast<const uint8_t *>(p);
  if (!heap || b < heap || b >= heap + cap || bytes > static_cast<uint64_t>(heap + cap - b))
    return false;
  *offset = static_cast<uint64_t>(b - heap);
  return true;
}

void ShmCollArea::ring_all() const {
  // Dekker with the waiter (wait_for): it sets its sleeping word, then
  // looks at the counters; this side changed a counter, then looks at the
  // word (both sequentially consistent: shm_store, shm_load).
  for (uint32_t r = 0; r < members_.size(); ++r)
    if (r != rank_ && shm_load(counter(r, kSleeping)) != 0) host_.ring(members_[r].world_rank);
}

}  // namespace nexar
