#include "communicator.h"

#include <utility>

namespace nexar_py {

// Every Communicator reaches Python through here: nexar/_support.py keeps a
// weak reference to it, to close it at exit if it is still open.
py::object wrap(nexar_comm_t *h) {
  py::object comm = py::cast(std::make_unique<Communicator>(h));
  support().attr("track")(comm);
  return comm;
}

void Pending::materialize() {
  if (rpc) {
    rpc = false;
    nexar_rpc_response_t *r = std::exchange(rpc_response, nullptr);
    if (status == NEXAR_OK && !result)
      result = response_bytes(r).release().ptr();
    else
      nexar_rpc_response_free(r);
  }
  if (!split_out) return;
  nexar_comm_t *h = split_out;
  split_out = nullptr;
  if (status == NEXAR_OK && !result) {
    result = wrap(h).release().ptr();
  } else {
    nexar_comm_destroy(h);
  }
  Py_XDECREF(split_parent);
  split_parent = nullptr;
}

py::object Communicator::split(py::handle self, int64_t color, int64_t key, bool async_op) {
  const std::string op = "split";
  if (color < 0 || color > UINT32_MAX || key < 0 || key > UINT32_MAX)
    throw py::value_error("split: color and key must be in 0..2**32-1");
  const auto c = static_cast<uint32_t>(color), k = static_cast<uint32_t>(key);
  if (!async_op) {
    nexar_comm_t *out = nullptr;
    run(
        op,
        [&](nexar_comm_t *h, nexar_done_fn done, void *ud) {
          return nexar_comm_split(h, c, k, &out, done, ud);
        },
        {}, py::none(), false);
    return wrap(out);
  }
  auto p = std::make_shared<Pending>();
  p->op = op;
  p->comm_rank = rank_;
  p->split_parent = self.inc_ref().ptr();  // the parent outlives the operation
  Pending *raw = p.get();
  return submit_async(p, [raw, c, k](nexar_comm_t *h, nexar_done_fn done, void *ud) {
    return nexar_comm_split(h, c, k, &raw->split_out, done, ud);
  });
}

}  // namespace nexar_py
