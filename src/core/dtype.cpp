#include "core/dtype.h"

namespace nexar {

size_t dtype_size(nexar_dtype_t dtype) {
  switch (dtype) {
    case NEXAR_DTYPE_I8:
    case NEXAR_DTYPE_U8:
      return 1;
    case NEXAR_DTYPE_F16:
    case NEXAR_DTYPE_BF16:
      return 2;
    case NEXAR_DTYPE_F32:
    case NEXAR_DTYPE_I32:
    case NEXAR_DTYPE_U32:
      return 4;
    case NEXAR_DTYPE_F64:
    case NEXAR_DTYPE_I64:
    case NEXAR_DTYPE_U64:
      return 8;
    default:
      return 0;
  }
}

bool dtype_valid(nexar_dtype_t dtype) {
  return dtype_size(dtype) != 0;
}

bool op_valid(nexar_op_t op) {
  return op == NEXAR_OP_SUM || op == NEXAR_OP_PROD || op == NEXAR_OP_MIN || op == NEXAR_OP_MAX;
}

const char *dtype_name(nexar_dtype_t dtype) {
  switch (dtype) {
    case NEXAR_DTYPE_F32:
      return "f32";
    case NEXAR_DTYPE_F64:
      return "f64";
    case NEXAR_DTYPE_F16:
      return "f16";
    case NEXAR_DTYPE_BF16:
      return "bf16";
    case NEXAR_DTYPE_I8:
      return "i8";
    case NEXAR_DTYPE_I32:
      return "i32";
    case NEXAR_DTYPE_I64:
      return "i64";
    case NEXAR_DTYPE_U8:
      return "u8";
    case NEXAR_DTYPE_U32:
      return "u32";
    case NEXAR_DTYPE_U64:
      return "u64";
    default:
      return "unknown";
  }
}

const char *op_name(nexar_op_t op) {
  switch (op) {
    case NEXAR_OP_SUM:
      return "sum";
    case NEXAR_OP_PROD:
      return "prod";
    case NEXAR_OP_MIN:
      return "min";
    case NEXAR_OP_MAX:
      return "max";
    default:
      return "unknown";
  }
}

}  // namespace nexar
