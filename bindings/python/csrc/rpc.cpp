// RPC: calling a rank's function (rpc) and serving one (register_rpc,
// Communicator::register_rpc).
#include <nexar.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <string>

#include "bindings.h"
#include "buffers.h"
#include "communicator.h"
#include "pending.h"
#include "rpc_handler.h"

namespace nexar_py {

namespace {

py::object rpc(Communicator &c, int64_t target, int64_t fn_id, py::object request, bool async_op) {
  const std::string name = "rpc";
  const uint32_t to = c.check_rank(target, name, "target");
  const uint32_t id = check_u32(fn_id, name, "fn_id");
  View v = view_of(request, false, name, "request");
  const void *d = v.data;
  const size_t n = v.nbytes;
  if (!async_op) {
    nexar_rpc_response_t *response = nullptr;
    c.run(
        name,
        [&](nexar_comm_t *h, nexar_done_fn done, void *ud) {
          return nexar_rpc_call(h, to, id, d, n, &response, done, ud);
        },
        {}, py::none(), false);
    return response_bytes(response);
  }
  auto p = std::make_shared<Pending>();
  p->op = name;
  p->comm_rank = c.rank();
  p->rpc = true;
  p->keep = {request.inc_ref().ptr(), v.arr.inc_ref().ptr()};
  Pending *raw = p.get();
  return c.submit_async(p, [raw, to, id, d, n](nexar_comm_t *h, nexar_done_fn done, void *ud) {
    return nexar_rpc_call(h, to, id, d, n, &raw->rpc_response, done, ud);
  });
}

}  // namespace

void bind_rpc(py::class_<Communicator> &cls) {
  cls.def("register_rpc", &Communicator::register_rpc, py::arg("fn_id"), py::arg("handler"),
          "Serve fn_id with handler(src_rank, request: bytes) -> bytes-like or None (an "
          "empty response); None stops serving it. The handler runs on nexar's completion "
          "thread with the GIL, one at a time per communicator: it may start operations "
          "with async_op=True but not block on one. An exception fails the caller's call "
          "with RpcFailedError naming it.")
      .def("rpc", &rpc, py::arg("target"), py::arg("fn_id"), py::arg("request") = py::bytes(),
           py::kw_only(), py::arg("async_op") = false,
           "Call fn_id on rank target (this rank too) with request's bytes; returns the "
           "response as bytes. RpcNotRegisteredError when target does not serve fn_id, "
           "RpcFailedError when its handler failed, TimeoutError after rpc_timeout.");
}

}  // namespace nexar_py
