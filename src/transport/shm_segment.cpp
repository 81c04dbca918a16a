#include "transport/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace nexar {

int shm_required_seals() {
  return F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL;
}

ShmMapping::~ShmMapping() {
  if (base_) munmap(base_, bytes_);
}

ShmMapping::ShmMapping(ShmMapping &&o) noexcept
    : base_(std::exchange(o.base_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

ShmMapping &ShmMapping::operator=(ShmMapping &&o) noexcept {
  if (this != &o) {
    if (base_) munmap(base_, bytes_);
    base_ = std::exchange(o.base_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

ShmGeometry ShmGeometry::fit(uint64_t budget, uint64_t ring_bytes, uint64_t max_slots) {
  ShmGeometry g;
  g.ring_bytes = ring_bytes;
  if (budget <= kShmHeaderBytes) return g;
  g.slot_count = std::min<uint64_t>(max_slots, (budget - kShmHeaderBytes) / g.slot_stride());
  if (budget > g.heap_offset()) g.heap_bytes = (budget - g.heap_offset()) & ~(kShmPage - 1);
  return g;
}

Status OwnShmSegment::create(uint32_t owner_rank, ShmGeometry g, OwnShmSegment *out) {
  if (g.slot_count == 0)
    return error(NEXAR_ERR_NO_MEMORY, "the shared-memory budget holds no peer's ring");
  UniqueFd fd(memfd_create("nexar-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) return error(NEXAR_ERR_INTERNAL, format("memfd_create: %s", strerror(errno)));
  const uint64_t total = g.total_bytes();
  if (ftruncate(fd.get(), static_cast<off_t>(total)) != 0)
    return error(NEXAR_ERR_NO_MEMORY,
                 format("sizing a %llu-byte segment: %s", static_cast<unsigned long long>(total),
                        strerror(errno)));
  void *p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) return error(NEXAR_ERR_NO_MEMORY, format("mmap: %s", strerror(errno)));
  ShmMapping map(p, total);
  // The owner's mapping predates the seal; no one can map it writable after.
  if (fcntl(fd.get(), F_ADD_SEALS, shm_required_seals()) != 0)
    return error(NEXAR_ERR_INTERNAL, format("sealing the segment: %s", strerror(errno)));
  auto *h = reinterpret_cast<ShmSegmentHeader *>(map.data());
  h->magic = kShmMagic;
  h->version = kShmVersion;
  h->owner_rank = owner_rank;
  h->slot_count = g.slot_count;
  h->ring_bytes = g.ring_bytes;
  h->slot_stride = g.slot_stride();
  h->total_bytes = total;
  h->heap_offset = g.heap_offset();
  h->heap_bytes = g.heap_bytes;
  out->fd_ = std::move(fd);
  out->map_ = std::move(map);
  out->geometry_ = g;
  return {};
}

Status PeerShmSegment::map(UniqueFd fd, uint32_t peer_rank, uint64_t slot, PeerShmSegment *out) {
  const int seals = fcntl(fd.get(), F_GET_SEALS);
  if (seals < 0 || (seals & shm_required_seals()) != shm_required_seals())
    return error(NEXAR_ERR_PROTOCOL,
                 format("rank %u's segment is not sealed against writing and resizing", peer_rank));
  struct stat st;
  if (fstat(fd.get(), &st) != 0 || st.st_size < static_cast<off_t>(kShmHeaderBytes))
    return error(NEXAR_ERR_PROTOCOL, format("rank %u's segment is too small", peer_rank));
  const auto size = static_cast<uint64_t>(st.st_size);
  void *p = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED)
    return error(NEXAR_ERR_NO_MEMORY,
                 format("mapping rank %u's segment: %s", peer_rank, strerror(errno)));
  ShmMapping map(p, size);
  // The geometry is read once; the seals keep the size as checked here.
  ShmSegmentHeader h;
  memcpy(&h, map.data(), sizeof h);
  ShmGeometry g{h.slot_count, h.ring_bytes, h.heap_bytes};
  const bool pow2 = h.ring_bytes && (h.ring_bytes & (h.ring_bytes - 1)) == 0;
  if (h.magic != kShmMagic || h.version != kShmVersion || h.owner_rank != peer_rank || !pow2 ||
      h.ring_bytes > (1ull << 32) || h.slot_count > (1u << 16) ||
      h.slot_stride != g.slot_stride() || h.heap_bytes % kShmPage != 0 || h.heap_bytes > size ||
      h.heap_offset != g.heap_offset() || h.total_bytes != g.total_bytes() ||
      g.total_bytes() > size || slot >= h.slot_count)
    return error(NEXAR_ERR_PROTOCOL,
                 format("rank %u's segment header is malformed or names another slot", peer_rank));
  out->map_ = std::move(map);
  out->slot_offset_ = kShmHeaderBytes + slot * g.slot_stride();
  out->ring_bytes_ = h.ring_bytes;
  out->heap_offset_ = h.heap_offset;
  out->heap_bytes_ = h.heap_bytes;
  return {};
}

}  // namespace nexar
