// Element types and reduction operators of the public ABI (nexar_dtype_t, nexar_op_t): sizes,
// validity checks and short names for logs and error messages.
#pragma once

#include <cstddef>

#include "nexar.h"

namespace nexar {

/** Size in bytes of one element of `dtype`, or 0 if `dtype` is not a known NEXAR_DTYPE_*. */
size_t dtype_size(nexar_dtype_t dtype);

/** True if `dtype` is one of the NEXAR_DTYPE_* values. */
bool dtype_valid(nexar_dtype_t dtype);

/** True if `op` is one of the NEXAR_OP_* values. */
bool op_valid(nexar_op_t op);

/** Short lowercase name ("f32", "bf16", "u64", ...); "unknown" for an invalid dtype. */
const char *dtype_name(nexar_dtype_t dtype);

/** Short lowercase name ("sum", "prod", "min", "max"); "unknown" for an invalid op. */
const char *op_name(nexar_op_t op);

}  // namespace nexar
