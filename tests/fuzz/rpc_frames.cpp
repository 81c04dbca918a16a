// RPC request and response frames (rpc/rpc_hub.h) through the stream framer:
// two streams on the request lane, two on the response lane, so every input
// is spent on RPC frame headers and payloads. A frame the framer hands on is
// of its lane's kind; a response's status is what the caller will report.
#include "core/status.h"
#include "framer_driver.h"

namespace {

void check_rpc_frame(const nexar::wire::FrameHeader &h) {
  using nexar::wire::FrameKind;
  FUZZ_CHECK(h.kind == FrameKind::RpcRequest || h.kind == FrameKind::RpcResponse);
  FUZZ_CHECK(h.length <= nexar::wire::kMaxMessageBytes);
  if (h.kind == FrameKind::RpcResponse) {
    const auto code = static_cast<int32_t>(h.check);
    (void)nexar::is_known_error(code);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using nexar::wire::Lane;
  const uint8_t lanes[4] = {
      static_cast<uint8_t>(Lane::RpcRequest), static_cast<uint8_t>(Lane::RpcRequest),
      static_cast<uint8_t>(Lane::RpcResponse), static_cast<uint8_t>(Lane::RpcResponse)};
  nexar_fuzz::drive_framer(data, size, lanes, check_rpc_frame);
  return 0;
}
