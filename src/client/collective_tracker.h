// CollectiveTracker: what one communicator knows of its collectives on this
// rank, in one place. Which collective numbers reached the loop (started),
// which one runs and with which check (a frame of it carrying another check
// means ranks issued different collectives), the checks of recently ended
// ones (their late frames are dropped, and reported when the check differs),
// and mismatch notices for collectives this rank has not started yet. The
// mailbox asks it about every collective frame, the communicator about
// mismatch notices; the stall report and the flight recorder read it.
// Loop thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "transport/codec.h"

namespace nexar {

class CollectiveTracker {
 public:
  // What the mailbox does with a collective frame.
  enum class Frame {
    Keep,        // deliver or buffer it as usual
    Mismatched,  // it belongs to the running collective but carries another check
    Drop,        // its collective ended here: nobody will receive it
  };
  // world_peer sent a frame of collective seq after it ended here with
  // another check: ranks still inside it must learn of the mismatch.
  using LateMismatch = std::function<void(uint64_t seq, uint32_t world_peer)>;

  explicit CollectiveTracker(LateMismatch on_late = nullptr) : on_late_(std::move(on_late)) {}

  // Collective seq reached the loop. Returns the mismatch a peer announced
  // for it before it started here, if any (the operation fails with it).
  std::optional<Status> start(uint64_t seq);
  // Whether collective seq has reached the loop here.
  bool started(uint64_t seq) const { return seq <= last_started_; }
  // A peer announced that collective seq (not started here yet) mismatched.
  // Bounded: one entry per announced future collective.
  void defer_mismatch(uint64_t seq, const Status &s);

  // The algorithm of collective seq runs now (what names it: "allreduce").
  // on_mismatch(world_peer) is called when a frame of it with another check
  // arrives (the caller fails the operation).
  void begin(uint64_t seq, const char *what, uint32_t check,
             std::function<void(uint32_t world_peer)> on_mismatch);
  // The algorithm of seq ended (however): its later frames are dropped.
  void end(uint64_t seq);
  // Collective seq with check started and ended on the caller's thread at
  // once (shm_inline.h), without frames: its later frames are dropped too.
  void ran_at_once(uint64_t seq, uint32_t check) { ended(seq, check); }
  // A frame of collective seq with check arrived from world_peer: decides its
  // fate and reports a mismatch (through on_mismatch or the late hook).
  Frame on_frame(uint64_t seq, uint32_t check, uint32_t world_peer);

  // The stall report of running collective seq hears the members' answers
  // through listener (dropped when the collective ends).
  using StallListener = std::function<void(uint32_t world_peer, const wire::StallAnswer &)>;
  void listen_stall(uint64_t seq, StallListener listener);
  void on_stall_answer(uint32_t world_peer, const wire::StallAnswer &a);

  // What the stall report and the flight recorder read.
  uint64_t last_started() const { return last_started_; }
  uint64_t last_ended() const { return last_ended_; }
  // The running collective with the highest number (0 and nullptr: none).
  uint64_t running_seq() const;
  const char *running_what(uint64_t seq) const;

 private:
  struct Running {
    uint32_t check;
    const char *what;
    std::function<void(uint32_t)> on_mismatch;
    StallListener on_stall;
  };
  void ended(uint64_t seq, uint32_t check);

  LateMismatch on_late_;
  uint64_t last_started_ = 0;
  uint64_t last_ended_ = 0;
  std::unordered_map<uint64_t, Running> running_;
  // Recently ended collectives and their checks, collective seq at
  // seq % kEndedKept: a newer one takes the place of one kEndedKept older.
  // No allocation per collective (small ones end thousands of times a second).
  struct Ended {
    uint64_t seq = 0;  // 0: none (collectives are numbered from 1)
    uint32_t check = 0;
  };
  static constexpr size_t kEndedKept = 1024;
  std::vector<Ended> ended_ = std::vector<Ended>(kEndedKept);
  std::unordered_map<uint64_t, Status> early_mismatch_;
};

}  // namespace nexar
