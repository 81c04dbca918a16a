// Converting compressed elements between a tensor's dtype (F32, F64, F16,
// BF16) and the type they accumulate in (f64 for F64, f32 otherwise).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/reduce.h"
#include "nexar.h"

namespace nexar {

// Element i of data (of dtype), widened exactly to Acc.
template <class Acc>
inline Acc widen(const void *data, size_t i, nexar_dtype_t dtype) {
  switch (dtype) {
    case NEXAR_DTYPE_F64: {
      double x;
      memcpy(&x, static_cast<const uint8_t *>(data) + 8 * i, 8);
      return static_cast<Acc>(x);
    }
    case NEXAR_DTYPE_F16:
    case NEXAR_DTYPE_BF16: {
      uint16_t h;
      memcpy(&h, static_cast<const uint8_t *>(data) + 2 * i, 2);
      return dtype == NEXAR_DTYPE_F16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
    default: {
      float x;
      memcpy(&x, static_cast<const uint8_t *>(data) + 4 * i, 4);
      return static_cast<Acc>(x);
    }
  }
}

// Stores x rounded to dtype as element j of out; returns the stored value
// widened back (x itself for F32 and F64).
template <class Acc>
inline Acc narrow(void *out, size_t j, Acc x, nexar_dtype_t dtype) {
  uint8_t *o = static_cast<uint8_t *>(out);
  switch (dtype) {
    case NEXAR_DTYPE_F16: {
      const uint16_t h = f32_to_f16(static_cast<float>(x));
      memcpy(o + 2 * j, &h, 2);
      return f16_to_f32(h);
    }
    case NEXAR_DTYPE_BF16: {
      const uint16_t h = f32_to_bf16(static_cast<float>(x));
      memcpy(o + 2 * j, &h, 2);
      return bf16_to_f32(h);
    }
    default:
      memcpy(o + sizeof(Acc) * j, &x, sizeof(Acc));
      return x;
  }
}

}  // namespace nexar
