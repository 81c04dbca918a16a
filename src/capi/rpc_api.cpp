// RPC entry points: nexar_rpc_register / nexar_rpc_call, the reply a handler
// fills and the response a caller frees. Arguments are checked here, before
// anything is queued, so a rejected call never invokes its callback.
#include <cstring>

#include "capi/handles.h"
#include "rpc/rpc_hub.h"
#include "transport/frame.h"

using nexar::capi::fail;
using nexar::capi::guarded;
using nexar::capi::ok;

extern "C" {

NEXAR_API nexar_status_t nexar_rpc_register(nexar_comm_t *comm, uint32_t fn_id,
                                            nexar_rpc_handler_fn handler, void *user_data) {
  return guarded("nexar_rpc_register", [&] {
    if (nexar_status_t no = nexar::capi::check_comm(comm, "nexar_rpc_register")) return no;
    nexar::Communicator *c = comm->impl.get();
    auto reg = nexar::rpc::RpcHub::of(c->client()).registry(c, handler != nullptr);
    if (reg) reg->set(fn_id, {handler, user_data});
    return ok();
  });
}

NEXAR_API void *nexar_rpc_reply_alloc(nexar_rpc_reply_t *reply, size_t len) {
  void *out = nullptr;
  guarded("nexar_rpc_reply_alloc", [&] {
    if (!reply) return fail(NEXAR_ERR_INVALID_ARGUMENT, "nexar_rpc_reply_alloc: reply is NULL");
    if (len > nexar::wire::kMaxMessageBytes)
      return fail(
          NEXAR_ERR_INVALID_ARGUMENT,
          nexar::format("nexar_rpc_reply_alloc: %zu bytes exceeds the 4 GiB message limit", len));
    reply->data = nexar::PooledBuf::unpooled(len);
    out = len ? reply->data.data() : nullptr;
    return ok();
  });
  return out;
}

NEXAR_API nexar_status_t nexar_rpc_reply_set(nexar_rpc_reply_t *reply, const void *data,
                                             size_t len) {
  return guarded("nexar_rpc_reply_set", [&] {
    if (!reply || (!data && len > 0))
      return fail(NEXAR_ERR_INVALID_ARGUMENT,
                  "nexar_rpc_reply_set: reply is NULL, or data is NULL with a non-zero length");
    if (len > 0 && !nexar_rpc_reply_alloc(reply, len)) return NEXAR_ERR_INVALID_ARGUMENT;
    if (len == 0) reply->data = nexar::PooledBuf();
    if (len) memcpy(reply->data.data(), data, len);
    return ok();
  });
}

NEXAR_API nexar_status_t nexar_rpc_reply_set_error(nexar_rpc_reply_t *reply, const char *message) {
  return guarded("nexar_rpc_reply_set_error", [&] {
    if (!reply) return fail(NEXAR_ERR_INVALID_ARGUMENT, "nexar_rpc_reply_set_error: reply is NULL");
    reply->error = message ? std::string(message, strnlen(message, nexar::rpc::kMaxErrorMessage))
                           : std::string();
    return ok();
  });
}

NEXAR_API nexar_status_t nexar_rpc_call(nexar_comm_t *comm, uint32_t target_rank, uint32_t fn_id,
                                        const void *request, size_t request_len,
                                        nexar_rpc_response_t **response, nexar_done_fn done,
                                        void *user_data) {
  return guarded("nexar_rpc_call", [&] {
    if (nexar_status_t s =
            nexar::capi::check_message(comm, request, request_len, target_rank, "nexar_rpc_call"))
      return s;
    if (!response) return fail(NEXAR_ERR_INVALID_ARGUMENT, "nexar_rpc_call: response is NULL");
    nexar::Communicator *c = comm->impl.get();
    *response = nullptr;
    return nexar::capi::submit(
        comm, "nexar_rpc_call",
        [=](nexar::OpContext *op) {
          return nexar::rpc::RpcHub::of(c->client())
              .call(c, op, target_rank, fn_id, request, request_len, response);
        },
        done, user_data);
  });
}

NEXAR_API const void *nexar_rpc_response_data(const nexar_rpc_response_t *response) {
  return response && !response->bytes.empty() ? response->bytes.data() : nullptr;
}

NEXAR_API size_t nexar_rpc_response_size(const nexar_rpc_response_t *response) {
  return response ? response->bytes.size() : 0;
}

NEXAR_API void nexar_rpc_response_free(nexar_rpc_response_t *response) {
  delete response;
}

}  // extern "C"
