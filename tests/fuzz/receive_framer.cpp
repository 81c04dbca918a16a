// The stream framer (transport/receive_framer.h): lane bytes, frame headers
// and payloads on four streams, every lane byte chosen by the input.
#include "framer_driver.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const uint8_t lanes[4] = {0, 0, 0, 0};
  nexar_fuzz::drive_framer(data, size, lanes);
  return 0;
}
