// RPC handlers: the Python functions a Communicator serves, and the C handler
// that runs them on nexar's completion thread.
#pragma once

#include <nexar.h>
#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>

namespace py = pybind11;

namespace nexar_py {

// An RPC response as bytes; frees the response.
py::bytes response_bytes(nexar_rpc_response_t *r);

// A Python function serving one fn_id, owned by its Communicator.
struct RpcHandler {
  py::object fn;
};

// True while this thread (nexar's completion thread) runs a Python RPC
// handler: waiting there for a request would wait for this very thread.
extern thread_local bool t_in_rpc_handler;

// The C handler behind every Python one; user_data is its RpcHandler.
nexar_status_t serve_rpc(void *user_data, uint32_t src_rank, uint32_t, const void *request,
                         size_t request_len, nexar_rpc_reply_t *reply);

}  // namespace nexar_py
