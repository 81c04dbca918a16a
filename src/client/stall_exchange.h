// The engine's side of the stall report (loop thread): a peer's StallQuery
// is answered from the communicator's collective tracker and the mailbox, by
// the engine, so a rank whose application thread hangs still answers; an
// answer goes to the collective that asked.
#pragma once

#include <cstdint>

#include "transport/codec.h"

namespace nexar {

class Client;

void on_stall_query(Client &client, uint32_t from_world, const wire::StallQuery &q);
void on_stall_answer(Client &client, uint32_t from_world, const wire::StallAnswer &a);

}  // namespace nexar
