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

void apply_options(nexar_comm_options_t *o, const py::kwargs &kw, std::vector<uint32_t> *edges) {
  for (auto item : kw) {
    const std::string k = py::str(item.first).cast<std::string>();
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
                           "rpc_timeout, topology, shm, shm_max_bytes)");
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

py::object init_from_env() {
  nexar_comm_t *h = nullptr;
  nexar_status_t st;
  std::string msg;
  {
    py::gil_scoped_release nogil;
    st = nexar_comm_init_from_env(&h);
    if (st != NEXAR_OK) msg = nexar_last_error_message();
  }
  if (st != NEXAR_OK) raise_nexar(st, -1, msg, "init", -1);
  return wrap(h);
}

}  // namespace

void bind_creation(py::module_ &m) {
  m.def("bootstrap_local", &bootstrap_local, py::arg("world_size"));
  m.def("init", &init_from_env);
}

}  // namespace nexar_py
