#include "collective/shm_inline.h"

#include <memory>

#include "client/shm_host.h"
#include "collective/forced_choice.h"
#include "collective/shm_coll_steps.h"
#include "collective/shm_one_ticket.h"
#include "core/clock.h"

namespace nexar {
namespace {

// What goes on as an operation once a member is late: the turn, the wait
// that polled in vain and the steps after it.
struct Rest {
  shm_coll::Turn turn;
  shm_coll::ShmNeed need;
  ShmOneTicket steps;
  Status withdrawn;  // the steps failed on a withdrawal: only its cause is left
};

Task<Status> go_on(Coll &c, std::shared_ptr<Rest> rest) {
  ShmCollArea &a = *c.comm()->shm_coll().area;  // the turn keeps it
  c.note_algorithm("shm");
  Status s;
  if (!rest->withdrawn) {
    s = co_await shm_coll::cause_of_withdrawal(c, std::move(rest->withdrawn));
  } else if ((s = co_await shm_coll::wait_for(c, a, rest->need))) {
    s = co_await run_one_ticket(c, a, rest->steps);
  } else {
    rest->steps.end(a, s);
  }
  co_return shm_coll::after_body(c, std::move(s));
}

// On the loop's side, the collective's operation on the stack.
bool run_here(Communicator &comm, CollKind kind, const CollArgs &g, OpContext &op, Status *status,
              Communicator::Body *rest) {
  Communicator::ShmColl &sc = comm.shm_coll();
  // The one look at the clock before it ends: its deadline and its
  // flight-recorder times count from here.
  const uint64_t began = now_ns();
  Coll c(&comm, &op, kind, g, 0, began + coll_timeout_ms(comm.config(), kind) * kNsPerMs);
  shm_coll::Turn turn(sc);
  turn.take_now();  // none waits before it (run_inline_collective)
  ShmCollArea &a = *sc.area;
  a.host().count_collective();
  ShmOneTicket steps(c, a, kind);
  shm_coll::ShmNeed need{};
  fr::AtOnce record{};
  Status withdrawn;
  for (;;) {
    Status s = steps.advance(c, a, &need);
    if (!s || !need.doing) steps.end(a, s);
    if (!s && steps.saw_withdrawal()) {
      withdrawn = std::move(s);
      break;
    }
    if (!s || !need.doing) {
      s = shm_coll::after_body(c, std::move(s));
      if (s.code == NEXAR_ERR_MISMATCH) comm.announce_mismatch(c.seq(), s.message);
      comm.collectives().ran_at_once(c.seq(), c.check());
      describe_for_flight(&comm, kind, g, &record);
      record.op_seq = op.seq();
      record.coll_seq = c.seq();
      record.name = op.name().c_str();
      record.began_ns = began;
      record.algorithm = "shm";
      record.status = s.code;
      fr::ran_at_once(comm.flight(), record);
      *status = std::move(s);
      return true;
    }
    if (!shm_coll::poll_for(c, a, need)) break;
  }
  // It waits from here (for a late member, or for the cause of a
  // withdrawal): it gets its entry now (go_on records the rest).
  op.set_trace(fr::queued(comm.flight(), op.seq(), c.seq(), op.name().c_str(), began));
  fr::started(comm.flight(), op.trace(), c.seq(), began);
  auto left = std::make_shared<Rest>(Rest{std::move(turn), need, steps, std::move(withdrawn)});
  *rest = [&comm, kind, g, left, deadline = c.deadline_ns()](OpContext *o) {
    return run_collective_as(
        &comm, o, kind, g, [left](Coll &coll) { return go_on(coll, left); }, 0, deadline);
  };
  return false;
}

}  // namespace

bool shm_run_inline(Communicator &comm, const char *name, CollKind kind, const CollArgs &args,
                    Status *status, uint64_t *seq) {
  // A forced algorithm runs over messages, as the usual path runs it.
  if (!ShmOneTicket::fits(kind, args, comm.size()) || forces_algorithm(comm.config(), kind))
    return false;
  struct Call {
    Communicator &comm;
    CollKind kind;
    const CollArgs &args;
  } call{comm, kind, args};
  // One reference: the std::function keeps it without a heap block.
  return comm.run_inline_collective(
      name,
      [&call](OpContext &op, Status *s, Communicator::Body *rest) {
        return run_here(call.comm, call.kind, call.args, op, s, rest);
      },
      status, seq);
}

}  // namespace nexar
