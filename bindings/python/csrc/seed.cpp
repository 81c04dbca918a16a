// Seed: a seed run by this process (nexar.Seed), which forms a world of
// workers that join it.
#include <nexar.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <optional>
#include <string>

#include "bindings.h"
#include "errors.h"

namespace nexar_py {

namespace {

class Seed {
 public:
  Seed(int64_t world_size, const std::string &listen, const std::string &token,
       double formation_timeout) {
    if (world_size < 1 || world_size > 1024)
      throw py::value_error("Seed: world_size must be in 1..1024");
    nexar_seed_options_t o;
    if (nexar_status_t st = nexar_seed_options_init(&o, sizeof o))
      raise_nexar(st, -1, nexar_last_error_message(), "Seed", -1);
    o.listen_address = listen.c_str();
    o.world_size = static_cast<uint32_t>(world_size);
    o.cluster_token = token.empty() ? nullptr : token.c_str();
    o.token_file = nullptr;
    o.open = 0;
    // Past what a uint64_t holds (or infinite): the largest value, which the
    // seed refuses, naming its bound (a cast would be undefined).
    if (formation_timeout > 0)
      o.formation_timeout_ms = formation_timeout * 1000.0 < 1.8e19
                                   ? static_cast<uint64_t>(formation_timeout * 1000.0)
                                   : UINT64_MAX;
    nexar_status_t st;
    std::string msg;
    {
      py::gil_scoped_release nogil;
      st = nexar_seed_start(&seed_, &o);
      if (st != NEXAR_OK) msg = nexar_last_error_message();
    }
    if (st != NEXAR_OK) raise_nexar(st, -1, msg, "Seed", -1);
    address_ = nexar_seed_address(seed_);
  }
  ~Seed() { stop(); }
  Seed(const Seed &) = delete;
  Seed &operator=(const Seed &) = delete;

  const std::string &address() const { return address_; }

  // (ended, status, message): ended is False while the world is still forming.
  py::tuple wait(double timeout) {
    if (!seed_) return py::make_tuple(true, NEXAR_ERR_CLOSED, "the seed was stopped");
    int32_t ended = 0;
    nexar_status_t st;
    std::string msg;
    {
      py::gil_scoped_release nogil;
      const double ms = timeout < 0 ? 0 : (timeout > 3600 ? 3600e3 : timeout * 1000.0);
      st = nexar_seed_wait(seed_, static_cast<uint32_t>(ms), &ended);
      if (st != NEXAR_OK) msg = nexar_last_error_message();
    }
    return py::make_tuple(ended != 0, st, msg);
  }

  void stop() {
    if (!seed_) return;
    nexar_seed_t *s = seed_;
    seed_ = nullptr;
    std::optional<py::gil_scoped_release> nogil;
    if (PyGILState_Check()) nogil.emplace();
    nexar_seed_stop(s);
  }

 private:
  nexar_seed_t *seed_ = nullptr;
  std::string address_;
};

}  // namespace

void bind_seed(py::module_ &m) {
  py::class_<Seed>(m, "Seed")
      .def(py::init<int64_t, const std::string &, const std::string &, double>(),
           py::arg("world_size"), py::arg("listen") = "127.0.0.1:0", py::arg("token") = "",
           py::arg("formation_timeout") = 0.0)
      .def_property_readonly("address", &Seed::address)
      .def("wait", &Seed::wait, py::arg("timeout"))
      .def("stop", &Seed::stop);
}

}  // namespace nexar_py
