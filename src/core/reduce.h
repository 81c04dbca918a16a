// Element-wise reduction kernels used by the collectives (allreduce, reduce, reduce-scatter, scan).
//
// Buffers are arrays of `count` little-endian elements of `dtype`; pointers need no particular
// alignment, and may be null when count == 0. An unknown dtype or op is a caller bug: the kernels
// then do nothing (validate with dtype_valid()/op_valid() from core/dtype.h first).
//
// Semantics, identical in the scalar and every SIMD path, bit for bit:
//   integers  SUM and PROD wrap around (two's complement); MIN and MAX are the usual ones.
//   f32, f64  one IEEE operation per element, round to nearest even (no FMA, no reassociation).
//             MIN and MAX are IEEE 754-2019 minimum/maximum: NaN if either input is NaN, and
//             -0 < +0.
//   f16, bf16 widened exactly to f32, computed as above, rounded once to nearest even. As f32
//             has at least 2p+2 bits, this is the correctly rounded f16/bf16 result. NaNs
//             stay (quiet) NaNs; f16 conversion matches the x86 F16C instructions exactly.
//   NaN inputs: if a is NaN the result is a with its quiet bit set; otherwise, if b is NaN, b
//             quieted. An invalid SUM/PROD (inf - inf, 0 * inf) gives the CPU's default NaN.
//
// SIMD on x86-64: AVX-512 (F+BW+DQ+VL) or AVX2 (+F16C), chosen at run time; elsewhere scalar.
#pragma once

#include <cstddef>
#include <cstdint>

#include "nexar.h"

namespace nexar {

/**
 * dst[i] = dst[i] op src[i] for i < count (so a = dst, b = src above). dst may equal src; no
 * other overlap is allowed.
 */
void reduce_inplace(void *dst, const void *src, size_t count, nexar_dtype_t dtype, nexar_op_t op);

/**
 * dst[i] = a[i] op b[i] for i < count. dst may be the same pointer as a and/or b; other
 * overlaps are not allowed.
 */
void reduce_out(void *dst, const void *a, const void *b, size_t count, nexar_dtype_t dtype,
                nexar_op_t op);

/**
 * Fills dst with the identity of op: SUM 0, PROD 1, MIN the type's maximum (+inf for floating
 * types), MAX the type's minimum (-inf for floating types).
 */
void fill_identity(void *dst, size_t count, nexar_dtype_t dtype, nexar_op_t op);

// ---- SIMD level (for tests and diagnostics) ------------------------------------------------

enum class SimdLevel { Scalar = 0, Avx2 = 1, Avx512 = 2 };

/**
 * The level the kernels use. At first use it is the best the CPU supports, lowered by the
 * environment variable NEXAR_SIMD=scalar|avx2|avx512 if set (read once).
 */
SimdLevel simd_level();

/** The best level this CPU (and build) supports. */
SimdLevel simd_level_supported();

/** Sets the level the kernels use, clamped to simd_level_supported(). Thread-safe. */
void force_simd_level(SimdLevel level);

/** "scalar", "avx2" or "avx512". */
const char *simd_level_name(SimdLevel level);

// ---- Scalar conversions (the exact ones the kernels use) -----------------------------------

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);  // round to nearest even; NaN stays a quiet NaN
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);  // round to nearest even; NaN stays a quiet NaN

namespace detail {

// Implemented in reduce_x86.cpp. Each reduces dst[i] = a[i] op b[i] for a prefix of the
// elements, a whole number of vectors, and returns how many it did; the caller finishes the
// rest with the scalar kernel. dtype and op must be valid. They return 0 when not built in.
size_t reduce_avx2(void *dst, const void *a, const void *b, size_t count, nexar_dtype_t dtype,
                   nexar_op_t op);
size_t reduce_avx512(void *dst, const void *a, const void *b, size_t count, nexar_dtype_t dtype,
                     nexar_op_t op);
// Whether reduce_x86.cpp was built with the SIMD kernels (x86-64 with GCC).
bool simd_kernels_built();

}  // namespace detail

}  // namespace nexar
