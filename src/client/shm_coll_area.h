// ShmCollArea: one communicator's collective area, a block of each member's
// symmetric heap that the members read straight out of each other's
// segments (collective/shm_collectives.h runs the algorithms on it).
//
// Layout of a member's area (each counter on a cache line of its own, written
// only by the owner, read by every member):
//
//   line 0   identity:  where this area lies in its owner's process and a
//                       random word (a peer that reads the same two words
//                       there, with process_vm_readv, may read this member's
//                       buffers directly), then one bit per member this
//                       member reads directly. (A ticket's publication is the
//                       published word of its slot's header, so the data
//                       arrives with the news: kPublished names that wait.)
//   line 1   reduced:   tickets whose slice this member reduced in its slot
//   line 2   finished:  tickets this member is done reading from the others
//   line 3   sleeping:  nonzero while a wait of this member on the others'
//                       counters may sleep (then a change rings it)
//   line 4   running on: the CPU this member last published or waited on,
//                       plus one (a waiter on the same CPU yields it)
//   line 5   withdrawn: the last ticket, plus one, whose data this member
//                       published by address (direct reads) and gave up
//                       before its readers finished: they fail, not return
//                       what its caller may now overwrite
//   then kSlots slots, each a header line (SlotHeader, then a ticket's data
//   when it is that small), kSlotBytes of data and kResultBytes for the
//   slice of it this member reduces
//
// A ticket is one step of a collective (one chunk of an allreduce); every
// member numbers them alike, and ticket t uses slot t % kSlots. A member
// refills a slot only once every member finished the ticket before that
// slot's previous use, so the counters alone order every access.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/config.h"
#include "transport/shm_segment.h"

namespace nexar {

class ShmHost;

class ShmCollArea {
 public:
  enum Counter : uint32_t {
    kPublished = 0,
    kReduced = 1,
    kFinished = 2,
    kSleeping = 3,
    kRunningOn = 4,
    kWithdrawn = 5
  };
  static constexpr uint32_t kCounterLines = 6;
  static constexpr uint32_t kSlots = 2;
  static constexpr uint64_t kSlotBytes = 1ull << 20;
  // What the owner writes before publishing a ticket.
  struct SlotHeader {
    uint64_t published;    // the ticket in the slot, plus one: stored last
    uint64_t check;        // the collective's check (Coll::check)
    uint64_t data_offset;  // where the data is, in the owner's heap
    uint64_t bytes;
  };
  // Up to this many bytes of a ticket travel in its header's line, after
  // the header: a reader then takes one line from the owner, not two.
  static constexpr uint64_t kHeaderDataBytes = kShmLine - sizeof(SlotHeader);
  // A slice is at most half a slot (and an element): there are two members
  // or more.
  static constexpr uint64_t kResultBytes = kSlotBytes / 2 + kShmLine;
  static constexpr uint64_t kSlotStride = kShmLine + kSlotBytes + kResultBytes;
  static constexpr uint64_t kAreaBytes = kCounterLines * kShmLine + kSlots * kSlotStride;
  // Line 0 (see above).
  struct Identity {
    uint64_t address;
    uint64_t nonce;
    uint64_t reads_directly[6];  // bit r: this member reads member r directly
  };
  static constexpr uint32_t kMaxDirectMembers = 6 * 64;

  // This member's area (rank of size members), or null when the heap cannot
  // hold one (the communicator's collectives then travel as messages).
  // cma: whether to read the members' buffers directly (NEXAR_SHM_CMA).
  static std::unique_ptr<ShmCollArea> create(ShmHost &host, uint32_t rank, uint32_t size,
                                             Config::ShmCma cma);
  // own: the area, at offset in this member's heap (create() makes one).
  ShmCollArea(ShmHost &host, uint32_t rank, uint32_t size, uint8_t *own, uint64_t offset,
              Config::ShmCma cma);
  ~ShmCollArea();
  ShmCollArea(const ShmCollArea &) = delete;
  ShmCollArea &operator=(const ShmCollArea &) = delete;

  ShmHost &host() const { return host_; }
  uint32_t rank() const { return rank_; }
  uint32_t size() const { return static_cast<uint32_t>(members_.size()); }
  // Where this member's area starts in its heap (what the others attach).
  uint64_t offset() const { return offset_; }
  // Member r (world rank world_rank) has its area at offset in its heap;
  // false if its channel is gone or the area does not fit that heap. Also
  // finds out whether this member can read r's process directly (and, with
  // NEXAR_SHM_CMA=auto, what that costs on this machine, once per process).
  bool attach(uint32_t r, uint32_t world_rank, uint64_t offset);
  // Whether this member reads r's buffers directly.
  bool reads_directly(uint32_t r) const { return members_[r].pid != 0; }
  // Copies bytes at address in member r's process (reads_directly(r)). A
  // process that ended, also while it was read, is NEXAR_ERR_PEER_FAILED and
  // declared failed at once: its channel may not have hung up yet, and every
  // survivor must hear of the death rather than of this member's failure.
  Status read_member(uint32_t r, uint64_t address, void *out, uint64_t bytes) const;
  // Whether every other member reads this member's buffers directly (each
  // says so in its identity line once it has checked), and whether that
  // pays where one direct read replaces copies_replaced copies through the
  // segments: with NEXAR_SHM_CMA=auto, if a read through the kernel was
  // measured cheaper than that many copies; always with on.
  bool read_directly_by_all(double copies_replaced) const;
  // Copies of mapped memory that one read through the kernel costs in a
  // transfer, as this process measured it (NEXAR_SHM_CMA=auto); 0 until it
  // did.
  static double kernel_read_cost() { return kernel_read_cost_.load(std::memory_order_relaxed); }

  uint64_t *own(Counter c) const { return reinterpret_cast<uint64_t *>(own_ + c * kShmLine); }
  const uint64_t *counter(uint32_t r, Counter c) const {
    return reinterpret_cast<const uint64_t *>(members_[r].area + c * kShmLine);
  }
  SlotHeader *own_header(uint64_t ticket) const {
    return reinterpret_cast<SlotHeader *>(own_ + slot_offset(ticket));
  }
  const SlotHeader *header(uint32_t r, uint64_t ticket) const {
    return reinterpret_cast<const SlotHeader *>(members_[r].area + slot_offset(ticket));
  }
  // Ticket's slot data in member r's area (this member's own for r == rank()).
  const uint8_t *slot(uint32_t r, uint64_t ticket) const {
    return members_[r].area + slot_offset(ticket) + kShmLine;
  }
  uint8_t *own_result(uint64_t ticket) const {
    return own_ + slot_offset(ticket) + kShmLine + kSlotBytes;
  }
  const uint8_t *result(uint32_t r, uint64_t ticket) const {
    return members_[r].area + slot_offset(ticket) + kShmLine + kSlotBytes;
  }
  uint8_t *own_slot(uint64_t ticket) const { return own_ + slot_offset(ticket) + kShmLine; }
  // The kHeaderDataBytes after ticket's header in this member's area, and
  // their heap offset.
  uint8_t *own_header_data(uint64_t ticket) const {
    return own_ + slot_offset(ticket) + sizeof(SlotHeader);
  }
  uint64_t own_header_data_offset(uint64_t ticket) const {
    return offset_ + slot_offset(ticket) + sizeof(SlotHeader);
  }
  // Heap offset of ticket's slot data in any member's area (the areas differ
  // in offset; this is the owner's).
  uint64_t own_slot_offset(uint64_t ticket) const {
    return offset_ + slot_offset(ticket) + kShmLine;
  }
  // Member r's heap (this member's own for r == rank()) and its size: a
  // header's data_offset points into it.
  const uint8_t *heap(uint32_t r) const { return members_[r].heap; }
  uint64_t heap_bytes(uint32_t r) const { return members_[r].heap_bytes; }
  // This member's heap offset of p, or false if p is not in its heap.
  bool in_own_heap(const void *p, uint64_t bytes, uint64_t *offset) const;

  // After a change of this member's counters: rings every other member
  // whose wait on them may sleep (its sleeping word is set) and whose loop
  // sleeps. A member that polls needs no doorbell: the ring is a syscall
  // and wakes its loop thread for nothing.
  void ring_all() const;

  // The bytes a member copies or reduces per ticket of the running
  // collective (0: a few): how long a wait on a peer's step may poll.
  uint64_t step_bytes() const { return step_bytes_; }
  void set_step_bytes(uint64_t bytes) { step_bytes_ = bytes; }

  // Tickets: the next one of this communicator (the same on every member).
  uint64_t take_tickets(uint64_t n) {
    const uint64_t t = next_ticket_;
    next_ticket_ += n;
    return t;
  }

 private:
  // NEXAR_SHM_CMA=auto: times reading member r (process pid, its area at
  // address there) through the kernel against copies, unless this process
  // already did (kernel_read_cost_: copies per read, 0 until measured).
  void measure_kernel_reads(uint32_t r, uint32_t pid, uint64_t address);
  static std::atomic<double> kernel_read_cost_;

  static uint64_t slot_offset(uint64_t ticket) {
    return kCounterLines * kShmLine + (ticket % kSlots) * kSlotStride;
  }

  struct Member {
    uint32_t world_rank = 0;
    const uint8_t *area = nullptr;
    const uint8_t *heap = nullptr;
    uint64_t heap_bytes = 0;
    uint32_t pid = 0;  // set when read directly
  };
  ShmHost &host_;
  uint32_t rank_;
  uint8_t *own_;
  uint64_t offset_;
  std::vector<Member> members_;
  uint64_t next_ticket_ = 0;
  uint64_t step_bytes_ = 0;
  Config::ShmCma cma_;
};

}  // namespace nexar
