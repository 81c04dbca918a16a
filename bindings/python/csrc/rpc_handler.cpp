#include "rpc_handler.h"

#include <memory>
#include <string>

#include "buffers.h"
#include "errors.h"

namespace nexar_py {

// An RPC response as bytes; frees the response.
py::bytes response_bytes(nexar_rpc_response_t *r) {
  std::unique_ptr<nexar_rpc_response_t, void (*)(nexar_rpc_response_t *)> own(
      r, nexar_rpc_response_free);
  const void *data = nexar_rpc_response_data(r);
  return py::bytes(data ? static_cast<const char *>(data) : "", nexar_rpc_response_size(r));
}

thread_local bool t_in_rpc_handler = false;

namespace {

bool interpreter_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

// What an exception raised by a handler tells the caller: "TypeName: text".
std::string describe_exception(const py::error_already_set &e) {
  try {
    return py::str(e.type().attr("__name__")).cast<std::string>() + ": " +
           py::str(e.value()).cast<std::string>();
  } catch (...) {
    return "an exception that could not be described";
  }
}

}  // namespace

// The C handler behind every Python one (nexar's completion thread). The
// handler gets (src_rank, request as bytes) and returns bytes-like or None.
// An exception fails the caller's call with NEXAR_ERR_RPC_FAILED, its type
// and text in the message; a NexarError passes on its own status.
nexar_status_t serve_rpc(void *user_data, uint32_t src_rank, uint32_t, const void *request,
                         size_t request_len, nexar_rpc_reply_t *reply) {
  if (!Py_IsInitialized() || interpreter_finalizing()) {
    nexar_rpc_reply_set_error(reply, "the Python interpreter is shutting down");
    return NEXAR_ERR_CLOSED;
  }
  py::gil_scoped_acquire gil;
  // A reference of its own: the handler may replace itself while it runs.
  py::object fn = static_cast<RpcHandler *>(user_data)->fn;
  struct InHandler {
    InHandler() { t_in_rpc_handler = true; }
    ~InHandler() { t_in_rpc_handler = false; }
  } in_handler;
  try {
    py::object out =
        fn(src_rank, py::bytes(request ? static_cast<const char *>(request) : "", request_len));
    if (out.is_none()) return NEXAR_OK;
    Py_buffer view;
    if (PyObject_GetBuffer(out.ptr(), &view, PyBUF_SIMPLE) != 0) {
      PyErr_Clear();
      const std::string text = "TypeError: the handler returned " + type_name(out) +
                               ", not bytes, a contiguous buffer or None";
      nexar_rpc_reply_set_error(reply, text.c_str());
      return NEXAR_ERR_INVALID_ARGUMENT;
    }
    const nexar_status_t st = nexar_rpc_reply_set(reply, view.buf, static_cast<size_t>(view.len));
    PyBuffer_Release(&view);
    if (st != NEXAR_OK) nexar_rpc_reply_set_error(reply, nexar_last_error_message());
    return st;
  } catch (py::error_already_set &e) {
    nexar_status_t st = NEXAR_ERR_INTERNAL;
    if (py::isinstance(e.value(), support().attr("NexarError")))
      st = e.value().attr("status").cast<nexar_status_t>();
    nexar_rpc_reply_set_error(reply, describe_exception(e).c_str());
    return st < 0 ? st : NEXAR_ERR_INTERNAL;
  } catch (const std::exception &e) {
    nexar_rpc_reply_set_error(reply, e.what());
    return NEXAR_ERR_INTERNAL;
  }
}

}  // namespace nexar_py
