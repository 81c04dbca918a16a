// Point-to-point: send and recv.
#include <nexar.h>
#include <pybind11/pybind11.h>

#include <string>

#include "bindings.h"
#include "buffers.h"
#include "communicator.h"

namespace nexar_py {

namespace {

py::object send(Communicator &c, py::object buf, int64_t dest, int64_t tag, bool async_op) {
  const std::string name = "send";
  View v = view_of(buf, false, name, "buf");
  const uint32_t to = c.check_rank(dest, name, "dest");
  const uint32_t tg = check_u32(tag, name, "tag");
  const void *d = v.data;
  const size_t n = v.nbytes;
  return c.run(
      name,
      [=](nexar_comm_t *h, nexar_done_fn f, void *u) { return nexar_send(h, d, n, to, tg, f, u); },
      {buf, v.arr}, py::none(), async_op);
}

py::object recv(Communicator &c, py::object buf, int64_t source, int64_t tag, bool async_op) {
  const std::string name = "recv";
  View v = view_of(buf, true, name, "buf");
  const uint32_t from = c.check_rank(source, name, "source");
  const uint32_t tg = check_u32(tag, name, "tag");
  void *d = v.data;
  const size_t n = v.nbytes;
  return c.run(
      name,
      [=](nexar_comm_t *h, nexar_done_fn f, void *u) {
        return nexar_recv(h, d, n, from, tg, f, u);
      },
      {buf, v.arr}, buf, async_op);
}

}  // namespace

void bind_point_to_point(py::class_<Communicator> &cls) {
  cls.def("send", &send, py::arg("buf"), py::arg("dest"), py::arg("tag") = 0, py::kw_only(),
          py::arg("async_op") = false, "Send buf's bytes to rank dest with a tag.")
      .def("recv", &recv, py::arg("buf"), py::arg("source"), py::arg("tag") = 0, py::kw_only(),
           py::arg("async_op") = false,
           "Receive the next message from source with this tag into buf (its size must "
           "match); returns buf.");
}

}  // namespace nexar_py
