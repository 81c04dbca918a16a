#include "client/stall_exchange.h"

#include "client/client.h"
#include "client/communicator.h"

namespace nexar {

void on_stall_query(Client &client, uint32_t from_world, const wire::StallQuery &q) {
  wire::StallAnswer a;
  a.comm_id = q.comm_id;
  a.coll_seq = q.coll_seq;
  // A communicator not made here yet has entered nothing: the zeros say so.
  if (Communicator *c = client.comms().by_id(q.comm_id)) {
    const CollectiveTracker &t = c->collectives();
    a.last_started = t.last_started();
    a.last_completed = t.last_ended();
    // The collective asked about if it runs here, else the latest running.
    a.running_seq = t.running_what(q.coll_seq) ? q.coll_seq : t.running_seq();
    if (a.running_seq) {
      a.running_what = t.running_what(a.running_seq);
      a.waits_on = c->waiting_on(a.running_seq);
    }
  }
  client.send_control(from_world, a);
}

void on_stall_answer(Client &client, uint32_t from_world, const wire::StallAnswer &a) {
  if (Communicator *c = client.comms().by_id(a.comm_id))
    c->collectives().on_stall_answer(from_world, a);
}

}  // namespace nexar
