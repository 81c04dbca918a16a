// Control messages (transport/codec.h) as a peer may send them: whatever
// decodes must encode back to exactly the same bytes (the wire format has one
// spelling per message), and whatever fails must say why.
#include <cstring>

#include "fuzz_check.h"
#include "transport/codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const nexar::wire::DecodeResult r = nexar::wire::decode_control({data, size});
  if (!r) {
    FUZZ_CHECK(!r.error.empty());
    return 0;
  }
  FUZZ_CHECK(r.error.empty());
  FUZZ_CHECK(!nexar::wire::control_name(*r.message).empty());
  const std::vector<uint8_t> again = nexar::wire::encode_control(*r.message);
  FUZZ_CHECK(again.size() == size);
  FUZZ_CHECK(memcmp(again.data(), data, size) == 0);
  return 0;
}
