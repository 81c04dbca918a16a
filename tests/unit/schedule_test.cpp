// The pure schedule layer of the collectives (src/collective/schedule.h),
// checked exhaustively for 1..64 ranks without any network: block layouts,
// the power-of-two fold, binomial trees, and symbolic runs of the ring,
// halving-doubling and recursive-doubling schedules that track which ranks'
// contributions every block holds.
#include "collective/schedule.h"

#include <gtest/gtest.h>

#include <bitset>
#include <set>
#include <vector>

using namespace nexar::sched;

namespace {

constexpr uint32_t kMaxWorld = 64;
using Contrib = std::bitset<kMaxWorld>;  // which ranks' data a partial holds

Contrib all_ranks(uint32_t n) {
  Contrib c;
  for (uint32_t r = 0; r < n; ++r)
    c.set(r);
  return c;
}

}  // namespace

TEST(ChunkLayout, BlocksCoverTheVectorAndDifferByAtMostOne) {
  for (uint32_t parts = 1; parts <= kMaxWorld; ++parts) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{2}, size_t{parts - 1}, size_t{parts},
                         size_t{parts + 1}, size_t{3 * parts + 2}, size_t{1000003}}) {
      const ChunkLayout l(count, parts);
      size_t off = 0;
      for (uint32_t i = 0; i < parts; ++i) {
        EXPECT_EQ(l.offset(i), off) << count << "/" << parts << " block " << i;
        EXPECT_LE(l.length(i), l.max_length());
        EXPECT_GE(l.length(i) + 1, l.max_length());
        if (i > 0) EXPECT_LE(l.length(i), l.length(i - 1)) << "early blocks come first";
        off += l.length(i);
      }
      EXPECT_EQ(off, count);
      EXPECT_EQ(l.offset(parts), count);
      EXPECT_EQ(l.range_length(0, parts), count);
    }
  }
}

TEST(ChunkLayout, SegmentsOfEveryBlockCoverIt) {
  // What the ring engine does: blocks cut into segs pieces each.
  for (uint32_t n = 1; n <= 16; ++n)
    for (size_t count : {size_t{0}, size_t{5}, size_t{4097}, size_t{1} << 20})
      for (uint32_t segs = 1; segs <= 9; ++segs) {
        const ChunkLayout blocks(count, n);
        std::vector<int> hit(count, 0);
        for (uint32_t b = 0; b < n; ++b) {
          const ChunkLayout seg(blocks.length(b), segs);
          for (uint32_t j = 0; j < segs; ++j)
            for (size_t k = 0; k < seg.length(j); ++k)
              ++hit[blocks.offset(b) + seg.offset(j) + k];
        }
        for (size_t i = 0; i < count; ++i)
          ASSERT_EQ(hit[i], 1) << "element " << i << " n=" << n << " segs=" << segs;
      }
}

TEST(Pof2, FloorAndLog) {
  for (uint32_t n = 1; n <= 5000; ++n) {
    const uint32_t p = pof2_floor(n);
    EXPECT_EQ(p & (p - 1), 0u);
    EXPECT_LE(p, n);
    EXPECT_GT(2 * p, n);
    EXPECT_EQ(1u << log2_floor(n), p);
  }
  EXPECT_EQ(pof2_floor(0xFFFFFFFFu), 0x80000000u);
}

TEST(Fold, VirtualRanksAreABijectionThatKeepsOrder) {
  for (uint32_t n = 1; n <= kMaxWorld; ++n) {
    const Fold f(n);
    EXPECT_EQ(f.pof2 + f.rem, n);
    std::set<uint32_t> seen;
    uint32_t out = 0;
    for (uint32_t r = 0; r < n; ++r) {
      if (f.sits_out(r)) {
        ++out;
        EXPECT_TRUE(f.absorbs(r + 1));
        continue;
      }
      const uint32_t v = f.vrank(r);
      EXPECT_LT(v, f.pof2);
      EXPECT_TRUE(seen.insert(v).second);
      EXPECT_EQ(f.real(v), r);
    }
    EXPECT_EQ(out, f.rem);
    EXPECT_EQ(seen.size(), f.pof2);
    for (uint32_t v = 0; v + 1 < f.pof2; ++v) {
      EXPECT_LT(f.real(v), f.first_real(v + 1)) << "virtual ranks hold ordered real ranges";
      EXPECT_LE(f.first_real(v), f.real(v));
    }
  }
}

TEST(Binomial, TreeSpansEveryRankOnce) {
  for (uint32_t n = 1; n <= kMaxWorld; ++n) {
    std::vector<int> parent_of(n, -2);
    for (uint32_t v = 0; v < n; ++v) {
      const uint32_t kids = Binomial::num_children(v, n);
      uint32_t next = v + 1;
      for (uint32_t i = 0; i < kids; ++i) {
        const uint32_t c = Binomial::child(v, i);
        ASSERT_LT(c, n);
        EXPECT_EQ(Binomial::parent(c), static_cast<int64_t>(v));
        EXPECT_EQ(parent_of[c], -2) << "one parent";
        parent_of[c] = static_cast<int>(v);
        // Children's subtrees tile v's subtree after v, in order.
        EXPECT_EQ(c, next);
        next = Binomial::subtree_end(c, n);
      }
      EXPECT_EQ(next, Binomial::subtree_end(v, n)) << "n=" << n << " v=" << v;
    }
    EXPECT_EQ(Binomial::parent(0), -1);
    EXPECT_EQ(Binomial::subtree_end(0, n), n);
    for (uint32_t v = 1; v < n; ++v)
      EXPECT_EQ(parent_of[v], Binomial::parent(v)) << "n=" << n << " v=" << v;
    // Depth is at most ceil(log2 n).
    uint32_t depth_max = 0;
    for (uint32_t v = 0; v < n; ++v)
      depth_max = std::max<uint32_t>(depth_max, static_cast<uint32_t>(Contrib(v).count()));
    EXPECT_LE(depth_max, log2_floor(n) + 1);
  }
}

TEST(VirtualRanks, RoundTrip) {
  for (uint32_t n = 1; n <= 20; ++n)
    for (uint32_t root = 0; root < n; ++root) {
      EXPECT_EQ(to_vrank(root, root, n), 0u);
      for (uint32_t r = 0; r < n; ++r)
        EXPECT_EQ(from_vrank(to_vrank(r, root, n), root, n), r);
    }
}

// Ring reduce-scatter then allgather, played symbolically: each rank's copy
// of each block is the set of contributions it holds.
TEST(RingSchedule, ReduceScatterThenAllgatherGivesEveryoneEverything) {
  for (uint32_t n = 2; n <= kMaxWorld; ++n) {
    std::vector<std::vector<Contrib>> held(n, std::vector<Contrib>(n));
    for (uint32_t r = 0; r < n; ++r)
      for (uint32_t b = 0; b < n; ++b)
        held[r][b].set(r);
    for (uint32_t s = 0; s + 1 < n; ++s) {
      std::vector<std::vector<Contrib>> next = held;
      for (uint32_t r = 0; r < n; ++r) {
        const uint32_t to = ring_next(r, n);
        // What r sends is what `to` expects to receive at this step.
        ASSERT_EQ(rs_send_block(r, s, n), rs_recv_block(to, s, n));
        const uint32_t b = rs_send_block(r, s, n);
        ASSERT_TRUE((held[r][b] & held[to][b]).none()) << "nothing is counted twice";
        next[to][b] |= held[r][b];
      }
      held = next;
    }
    for (uint32_t r = 0; r < n; ++r)
      EXPECT_EQ(held[r][r], all_ranks(n)) << "rank " << r << " owns block r after RS, n=" << n;
    // Allgather: copies, starting from the owned block.
    std::vector<std::vector<bool>> has(n, std::vector<bool>(n, false));
    for (uint32_t r = 0; r < n; ++r)
      has[r][r] = true;
    for (uint32_t s = 0; s + 1 < n; ++s) {
      auto next = has;
      for (uint32_t r = 0; r < n; ++r) {
        const uint32_t to = ring_next(r, n);
        ASSERT_EQ(ag_send_block(r, s, n), ag_recv_block(to, s, n));
        ASSERT_TRUE(has[r][ag_send_block(r, s, n)]) << "sends only what it has";
        next[to][ag_send_block(r, s, n)] = true;
      }
      has = next;
    }
    for (uint32_t r = 0; r < n; ++r)
      for (uint32_t b = 0; b < n; ++b)
        EXPECT_TRUE(has[r][b]);
  }
}

// Halving-doubling after the fold: the halving rounds leave every virtual
// rank with a different block complete; the doubling rounds (backwards) give
// everyone every block.
TEST(HalvingDoubling, RoundsReduceThenGatherEveryBlock) {
  for (uint32_t n = 2; n <= kMaxWorld; ++n) {
    const Fold f(n);
    const uint32_t p = f.pof2, rounds = log2_floor(p);
    // Contributions per (virtual rank, block) after the fold.
    std::vector<std::vector<Contrib>> held(p, std::vector<Contrib>(p));
    for (uint32_t v = 0; v < p; ++v)
      for (uint32_t b = 0; b < p; ++b)
        for (uint32_t r = f.first_real(v); r <= f.real(v); ++r)
          held[v][b].set(r);
    for (uint32_t k = 0; k < rounds; ++k) {
      auto next = held;
      for (uint32_t v = 0; v < p; ++v) {
        const HalvingRound h = halving_round(v, p, k), o = halving_round(h.partner, p, k);
        ASSERT_EQ(h.partner, v ^ (1u << k));
        EXPECT_EQ(o.partner, v);
        // The partner keeps what v gives and gives what v keeps.
        EXPECT_EQ(h.keep_first, o.give_first);
        EXPECT_EQ(h.keep_end, o.give_end);
        EXPECT_EQ(h.give_first, o.keep_first);
        EXPECT_EQ(h.keep_end - h.keep_first, p >> (k + 1));
        EXPECT_EQ(h.give_end - h.give_first, p >> (k + 1));
        if (k > 0) {  // inside what v kept in the previous round
          const HalvingRound prev = halving_round(v, p, k - 1);
          EXPECT_GE(std::min(h.keep_first, h.give_first), prev.keep_first);
          EXPECT_LE(std::max(h.keep_end, h.give_end), prev.keep_end);
        }
        for (uint32_t b = h.keep_first; b < h.keep_end; ++b) {
          ASSERT_TRUE((held[v][b] & held[h.partner][b]).none());
          next[v][b] |= held[h.partner][b];
        }
      }
      held = next;
    }
    std::set<uint32_t> owned;
    std::vector<uint32_t> block_of(p, 0);
    for (uint32_t v = 0; v < p; ++v) {
      const HalvingRound last =
          rounds ? halving_round(v, p, rounds - 1) : HalvingRound{v, 0, 1, 0, 0};
      EXPECT_EQ(last.keep_end, last.keep_first + 1);
      block_of[v] = last.keep_first;
      EXPECT_TRUE(owned.insert(last.keep_first).second) << "one owner per block";
      EXPECT_EQ(held[v][last.keep_first], all_ranks(n)) << "n=" << n << " v=" << v;
    }
    // Doubling: rounds backwards, sending the kept window, receiving the given one.
    std::vector<std::vector<bool>> has(p, std::vector<bool>(p, false));
    for (uint32_t v = 0; v < p; ++v)
      has[v][block_of[v]] = true;
    for (uint32_t k = rounds; k-- > 0;) {
      auto next = has;
      for (uint32_t v = 0; v < p; ++v) {
        const HalvingRound h = halving_round(v, p, k);
        for (uint32_t b = h.keep_first; b < h.keep_end; ++b)
          ASSERT_TRUE(has[v][b]) << "sends only what it has";
        for (uint32_t b = h.give_first; b < h.give_end; ++b)
          next[v][b] = has[h.partner][b];
      }
      has = next;
    }
    for (uint32_t v = 0; v < p; ++v)
      for (uint32_t b = 0; b < p; ++b)
        EXPECT_TRUE(has[v][b]);
  }
}

// Recursive doubling: after the rounds every virtual rank holds everything,
// and partners agree on which side is "lower" (it holds lower real ranks).
TEST(RecursiveDoubling, EveryoneEndsWithEverythingInOneOrder) {
  for (uint32_t n = 2; n <= kMaxWorld; ++n) {
    const Fold f(n);
    std::vector<Contrib> held(f.pof2);
    for (uint32_t v = 0; v < f.pof2; ++v)
      for (uint32_t r = f.first_real(v); r <= f.real(v); ++r)
        held[v].set(r);
    for (uint32_t m = 1; m < f.pof2; m <<= 1) {
      auto next = held;
      for (uint32_t v = 0; v < f.pof2; ++v) {
        const uint32_t peer = v ^ m;
        ASSERT_TRUE((held[v] & held[peer]).none());
        // Everything v holds lies below everything the higher partner holds.
        const uint32_t lo = std::min(v, peer), hi = std::max(v, peer);
        for (uint32_t a = 0; a < n; ++a)
          for (uint32_t b = 0; b < a; ++b)
            ASSERT_FALSE(held[lo][a] && held[hi][b]) << "n=" << n << " m=" << m;
        next[v] = held[v] | held[peer];
      }
      held = next;
    }
    for (uint32_t v = 0; v < f.pof2; ++v)
      EXPECT_EQ(held[v], all_ranks(n));
  }
}

TEST(Segments, BoundedAndEnough) {
  // Pieces of at most seg_bytes unless the budget says otherwise.
  EXPECT_EQ(segments_per_block(0, 4, 1 << 20, 2, 100), 1u);
  EXPECT_EQ(segments_per_block(1, 4, 1 << 20, 2, 100), 1u);
  EXPECT_EQ(segments_per_block(2, 4, 1 << 20, 2, 100), 2u);
  EXPECT_EQ(segments_per_block(1000, 4, 1 << 20, 1, 100), 1u);
  EXPECT_EQ(segments_per_block(1000, 4, 1 << 20, 2, 100), 2u);
  EXPECT_EQ(segments_per_block(1 << 20, 4, 1 << 20, 1, 100), 4u);
  EXPECT_EQ(segments_per_block((1 << 20) + 1, 4, 1 << 20, 1, 100), 5u);
  EXPECT_EQ(segments_per_block(size_t{1} << 30, 4, 1 << 20, 1, 100), 100u);
  EXPECT_EQ(segments_per_block(10, 8, 1, 1, 1000), 10u) << "never below one element";
  for (size_t elems : {size_t{1}, size_t{7}, size_t{1000}, size_t{123456789}})
    for (uint64_t seg : {uint64_t{1}, uint64_t{4096}, uint64_t{2} << 20})
      for (uint32_t budget : {1u, 3u, 1000u}) {
        const uint32_t s = segments_per_block(elems, 2, seg, 2, budget);
        EXPECT_GE(s, 1u);
        EXPECT_LE(s, budget);
        EXPECT_LE(s, elems);
        if (s < budget)
          EXPECT_LE(ChunkLayout(elems, s).max_length() * 2, std::max<uint64_t>(seg, 4));
      }
}

TEST(Steps, FitTheTwentyFourBitsCollTakes) {
  EXPECT_LT(step_id(kMaxPhase, kMaxStepIndex), 1u << 24);
  EXPECT_NE(step_id(1, 0), step_id(0, kMaxStepIndex));
}

TEST(ParseChoice, NamesAndDefaults) {
  const char *names[] = {"auto", "ring", "tree"};
  EXPECT_EQ(parse_choice(nullptr, names, 3), 0);
  EXPECT_EQ(parse_choice("", names, 3), 0);
  EXPECT_EQ(parse_choice("ring", names, 3), 1);
  EXPECT_EQ(parse_choice("tree", names, 3), 2);
  EXPECT_EQ(parse_choice("Ring", names, 3), -1);
  EXPECT_EQ(parse_choice("rings", names, 3), -1);
}
