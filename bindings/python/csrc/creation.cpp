// Making communicators: bootstrap_local (one process) and init (from the
// environment a launcher set).
#include <nexar.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bindings.h"
#include "communicator.h"
#include "errors.h"

namespace nexar_py {

namespace {

// The join options' strings, owned here while nexar_comm_join copies them.
struct JoinStrings {
  std::string seed, token, listen, advertise, interface;
};

// Join options (nexar.init keywords): true when k is one of them.
bool apply_join_option(nexar_comm_options_t *o, JoinStrings *s, const std::string &k,
                       py::handle v) {
  auto text = [&](std::string *field, const char **target) {
    *field = v.cast<std::string>();
    *target = field->c_str();
  };
  if (k == "seed")
    text(&s->seed, &o->seed_address);
  else if (k == "token")
    text(&s->token, &o->cluster_token);
  else if (k == "listen")
    text(&s->listen, &o->listen_address);
  else if (k == "advertise")
    text(&s->advertise, &o->advertise_address);
  else if (k == "interface")
    text(&s->interface, &o->socket_ifname);
  else if (k == "rank") {
    const int64_t r = v.cast<int64_t>();
    if (r < -1 || r > INT32_MAX) throw py::value_error("rank must be -1 (any) or a rank >= 0");
    o->rank = static_cast<int32_t>(r);
  } else if (k == "world_size") {
    const int64_t n = v.cast<int64_t>();
    if (n < 0 || n > 1024) throw py::value_error("world_size must be in 0..1024 (0: unknown)");
    o->world_size = static_cast<uint32_t>(n);
  } else if (k == "spin") {
    const double secs = v.cast<double>();
    if (!(secs >= 0) || secs > 1.0) throw py::value_error("spin must be in 0..1 seconds");
    o->spin_us = static_cast<uint32_t>(secs * 1e6 + 0.5);
  } else {
    return false;
  }
  return true;
}

// topology="full" | "ring" | "hypercube" | "k_regular:K", or a sequence of
// (rank, rank) links (a custom graph, whose pairs land in *edges).
void apply_topology(nexar_comm_options_t *o, const py::handle &v, std::vector<uint32_t> *edges) {
  const std::string bad =
      "topology must be \"full\", \"ring\", \"hypercube\", "
      "\"k_regular:K\" or a list of (rank, rank) pairs, not " +
      py::repr(v).cast<std::string>();
  if (py::isinstance<py::str>(v)) {
    const std::string s = v.cast<std::string>();
    if (s == "full") {
      o->topology = NEXAR_TOPOLOGY_FULL;
    } else if (s == "ring") {
      o->topology = NEXAR_TOPOLOGY_RING;
    } else if (s == "hypercube") {
      o->topology = NEXAR_TOPOLOGY_HYPERCUBE;
    } else if (s.rfind("k_regular:", 0) == 0 && s.size() > 10 &&
               s.find_first_not_of("0123456789", 10) == std::string::npos && s.size() < 16) {
      o->topology = NEXAR_TOPOLOGY_KREGULAR;
      o->topology_degree = static_cast<uint32_t>(std::stoul(s.substr(10)));
    } else {
      throw py::value_error(bad);
    }
    return;
  }
  if (!py::isinstance<py::sequence>(v)) throw py::value_error(bad);
  edges->clear();
  for (auto pair : v.cast<py::sequence>()) {
    if (!py::isinstance<py::sequence>(pair) || py::len(pair) != 2) throw py::value_error(bad);
    for (auto end : pair.cast<py::sequence>()) {
      const int64_t r = end.cast<int64_t>();
      if (r < 0 || r > UINT32_MAX) throw py::value_error(bad);
      edges->push_back(static_cast<uint32_t>(r));
    }
  }
  o->topology = NEXAR_TOPOLOGY_CUSTOM;
  o->topology_edges = edges->data();
  o->topology_edge_count = edges->size() / 2;
}

// edges holds a custom topology's pairs, join the join options' strings
// (nexar.init only), while nexar reads them.
void apply_options(nexar_comm_options_t *o, const py::kwargs &kw, std::vector<uint32_t> *edges,
                   JoinStrings *join = nullptr) {
  for (auto item : kw) {
    const std::string k = py::str(item.first).cast<std::string>();
    if (join && apply_join_option(o, join, k, item.second)) continue;
    if (k == "topology") {
      apply_topology(o, item.second, edges);
      continue;
    }
    if (k == "shm") {
      const std::string v =
          py::isinstance<py::str>(item.second) ? item.second.cast<std::string>() : "";
      if (v == "auto")
        o->shm = NEXAR_SHM_AUTO;
      else if (v == "off")
        o->shm = NEXAR_SHM_OFF;
      else if (v == "require")
        o->shm = NEXAR_SHM_REQUIRE;
      else
        throw py::value_error("shm must be \"auto\", \"off\" or \"require\", not " +
                              py::repr(item.second).cast<std::string>());
      continue;
    }
    if (k == "shm_max_bytes") {
      const int64_t v = item.second.cast<int64_t>();
      if (v < 0) throw py::value_error("shm_max_bytes must not be negative");
      o->shm_max_bytes = static_cast<uint64_t>(v);
      continue;
    }
    auto ms = [&](uint64_t *field) {
      const double secs = item.second.cast<double>();
      if (!(secs > 0)) throw py::value_error(k + " must be a positive number of seconds");
      *field = static_cast<uint64_t>(secs * 1000.0 + 0.5);
    };
    if (k == "collective_timeout")
      ms(&o->collective_timeout_ms);
    else if (k == "barrier_timeout")
      ms(&o->barrier_timeout_ms);
    else if (k == "p2p_timeout")
      ms(&o->p2p_timeout_ms);
    else if (k == "connect_timeout")
      ms(&o->connect_timeout_ms);
    else if (k == "heartbeat_interval")
      ms(&o->heartbeat_interval_ms);
    else if (k == "heartbeat_timeout")
      ms(&o->heartbeat_timeout_ms);
    else if (k == "rpc_timeout")
      ms(&o->rpc_timeout_ms);
    else
      throw py::type_error("unknown option " + k +
                           " (known: collective_timeout, barrier_timeout, p2p_timeout, "
                           "connect_timeout, heartbeat_interval, heartbeat_timeout, "
                           "rpc_timeout, topology, shm, shm_max_bytes" +
                           std::string(join ? ", seed, token, rank, world_size, listen, "
                                              "advertise, interface, spin)"
                                            : ")"));
  }
}

py::list bootstrap_local(int64_t world_size, const py::kwargs &kw) {
  if (world_size < 1 || world_size > 1024)
    throw py::value_error("bootstrap_local: world_size must be in 1..1024");
  nexar_comm_options_t opts;
  if (nexar_status_t st = nexar_comm_options_init(&opts, sizeof opts))
    raise_nexar(st, -1, nexar_last_error_message(), "bootstrap_local", -1);
  std::vector<uint32_t> edges;  // read by nexar_bootstrap_local
  apply_options(&opts, kw, &edges);
  std::vector<nexar_comm_t *> comms(static_cast<size_t>(world_size), nullptr);
  nexar_status_t st;
  std::string msg;
  {
    py::gil_scoped_release nogil;
    st = nexar_bootstrap_local(comms.data(), static_cast<uint32_t>(world_size), &opts);
    if (st != NEXAR_OK) msg = nexar_last_error_message();
  }
  if (st != NEXAR_OK) raise_nexar(st, -1, msg, "bootstrap_local", -1);
  py::list out;
  for (nexar_comm_t *h : comms)
    out.append(wrap(h));
  return out;
}

// Without keywords: the world the environment describes; with them: a join
// through the seed they name (defaults from NEXAR_* as for every option).
py::object init(const py::kwargs &kw) {
  nexar_comm_t *h = nullptr;
  nexar_status_t st;
  std::string msg;
  int32_t failed = -1;
  if (kw.empty()) {
    py::gil_scoped_release nogil;
    st = nexar_comm_init_from_env(&h);
    if (st != NEXAR_OK) read_last_error(&msg, &failed);
  } else {
    nexar_comm_options_t opts;
    if (nexar_status_t s = nexar_comm_options_init(&opts, sizeof opts))
      raise_nexar(s, -1, nexar_last_error_message(), "init", -1);
    JoinStrings strings;
    std::vector<uint32_t> edges;  // read by nexar_comm_join
    apply_options(&opts, kw, &edges, &strings);
    if (!opts.seed_address || !*opts.seed_address)
      throw py::value_error(
          "init: seed= (\"host:port\" of a nexar seed) is required with "
          "keywords (or set NEXAR_SEED)");
    py::gil_scoped_release nogil;
    st = nexar_comm_join(&h, &opts);
    if (st != NEXAR_OK) read_last_error(&msg, &failed);
  }
  if (st != NEXAR_OK) raise_nexar(st, failed, msg, "init", -1);
  return wrap(h);
}

}  // namespace

void bind_creation(py::module_ &m) {
  m.def("bootstrap_local", &bootstrap_local, py::arg("world_size"));
  m.def("init", &init);
}

}  // namespace nexar_py
