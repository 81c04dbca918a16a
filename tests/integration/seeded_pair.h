// Two ranks joined through a real seed, rank 0 on a port the test chose (and
// advertising another, e.g. a relay's), for tests that put something of their
// own on the wire between them.
#pragma once

#include <string>

#include "harness.h"

namespace nexar_test {

struct SeededPair {
  SeededPair() = default;
  SeededPair(const SeededPair &) = delete;
  SeededPair &operator=(const SeededPair &) = delete;
  ~SeededPair() {
    for (auto *c : comm)
      if (c) nexar_comm_destroy(c);
    if (seed) nexar_seed_stop(seed);
  }

  // Starts the seed and joins both ranks, rank 0 listening on 127.0.0.1:port0
  // and advertising 127.0.0.1:advertise0 (0: port0). Fails the test with the
  // join's error if either rank cannot join.
  void join(uint16_t port0, uint16_t advertise0 = 0) {
    nexar_seed_options_t so;
    NX_OK(nexar_seed_options_init(&so, sizeof so));
    so.world_size = 2;
    NX_OK(nexar_seed_start(&seed, &so));
    seed_address = nexar_seed_address(seed);
    const std::string listen0 = "127.0.0.1:" + std::to_string(port0);
    const std::string advertised0 = "127.0.0.1:" + std::to_string(advertise0 ? advertise0 : port0);
    on_each_rank(2, [&](uint32_t r) {
      nexar_comm_options_t o;
      NX_OK(nexar_comm_options_init(&o, sizeof o));
      o.seed_address = seed_address.c_str();
      o.rank = static_cast<int32_t>(r);
      o.world_size = 2;
      o.listen_address = r == 0 ? listen0.c_str() : "127.0.0.1:0";
      if (r == 0) o.advertise_address = advertised0.c_str();
      NX_OK(nexar_comm_join(&comm[r], &o));
    });
    ASSERT_TRUE(comm[0] && comm[1]);
  }

  nexar_seed_t *seed = nullptr;
  std::string seed_address;
  nexar_comm_t *comm[2] = {nullptr, nullptr};
};

}  // namespace nexar_test
