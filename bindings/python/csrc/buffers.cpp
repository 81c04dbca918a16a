#include "buffers.h"

namespace nexar_py {

namespace {

const char *const kSupported =
    "float16, float32, float64, int8, int32, int64, uint8, uint32, uint64, bfloat16 (ml_dtypes)";

bool dtype_code(const py::dtype &dt, nexar_dtype_t *out) {
  struct Known {
    char kind;
    py::ssize_t itemsize;
    nexar_dtype_t code;
  };
  static const Known kKnown[] = {
      {'f', 2, NEXAR_DTYPE_F16}, {'f', 4, NEXAR_DTYPE_F32}, {'f', 8, NEXAR_DTYPE_F64},
      {'i', 1, NEXAR_DTYPE_I8},  {'i', 4, NEXAR_DTYPE_I32}, {'i', 8, NEXAR_DTYPE_I64},
      {'u', 1, NEXAR_DTYPE_U8},  {'u', 4, NEXAR_DTYPE_U32}, {'u', 8, NEXAR_DTYPE_U64},
  };
  if (dt.byteorder() == '>') return false;  // only native (little-endian) data
  const char kind = dt.kind();
  const py::ssize_t size = dt.itemsize();
  for (const Known &k : kKnown)
    if (k.kind == kind && k.itemsize == size) {
      *out = k.code;
      return true;
    }
  // ml_dtypes.bfloat16 is a numpy user dtype of kind 'V'.
  if (kind == 'V' && size == 2 && py::str(dt.attr("name")).cast<std::string>() == "bfloat16") {
    *out = NEXAR_DTYPE_BF16;
    return true;
  }
  return false;
}

}  // namespace

std::string type_name(py::handle obj) {
  return py::str(py::type::handle_of(obj).attr("__name__")).cast<std::string>();
}

// Any numpy array or buffer-protocol object, viewed without copying.
View view_of(py::handle obj, bool writable, const std::string &op, const char *name) {
  View v;
  if (py::isinstance<py::array>(obj)) {
    v.arr = py::reinterpret_borrow<py::array>(obj);
  } else if (PyObject_CheckBuffer(obj.ptr())) {
    // Through a memoryview, so that the buffer's own format and shape count
    // (numpy would read bytes as one string scalar).
    py::object mv = py::reinterpret_steal<py::object>(PyMemoryView_FromObject(obj.ptr()));
    if (!mv) throw py::error_already_set();
    v.arr = py::array::ensure(mv);
    if (!v.arr)
      throw py::type_error(op + ": " + name + " (" + type_name(obj) +
                           ") exposes a buffer numpy cannot read");
  } else {
    throw py::type_error(op + ": " + name +
                         " must be a numpy array or an object with the buffer protocol "
                         "(bytearray, memoryview, ...), not " +
                         type_name(obj));
  }
  if (!(v.arr.flags() & py::array::c_style))
    throw py::type_error(op + ": " + name +
                         " must be C-contiguous (numpy.ascontiguousarray makes a copy that is)");
  if (writable && !v.arr.writeable())
    throw py::type_error(op + ": " + name + " must be writable (this " + type_name(obj) +
                         " is read-only)");
  if (!dtype_code(v.arr.dtype(), &v.dtype))
    throw py::type_error(op + ": unsupported dtype " + py::str(v.arr.dtype()).cast<std::string>() +
                         " of " + name + "; supported: " + kSupported);
  v.count = static_cast<size_t>(v.arr.size());
  v.nbytes = static_cast<size_t>(v.arr.nbytes());
  v.data = writable ? v.arr.mutable_data() : const_cast<void *>(v.arr.data());
  return v;
}

std::vector<py::ssize_t> shape_of(const py::array &a) {
  return std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim());
}

// An output buffer: the caller's (checked) or a new array.
View out_view(py::object out, const View &like, const std::vector<py::ssize_t> &shape, size_t count,
              const std::string &op) {
  if (out.is_none()) {
    View v;
    v.arr = py::array(like.arr.dtype(), shape);
    v.count = count;
    v.nbytes = static_cast<size_t>(v.arr.nbytes());
    v.data = v.arr.mutable_data();
    v.dtype = like.dtype;
    return v;
  }
  View v = view_of(out, true, op, "out");
  if (v.dtype != like.dtype)
    throw py::type_error(op + ": out has dtype " + py::str(v.arr.dtype()).cast<std::string>() +
                         ", buf has " + py::str(like.arr.dtype()).cast<std::string>());
  if (v.count != count)
    throw py::value_error(op + ": out holds " + std::to_string(v.count) + " elements, " +
                          std::to_string(count) + " are needed");
  return v;
}

nexar_op_t check_op(int64_t op, const std::string &name) {
  if (op < NEXAR_OP_SUM || op > NEXAR_OP_MAX)
    throw py::value_error(name + ": op " + std::to_string(op) +
                          " is not one of nexar.SUM, PROD, MIN, MAX");
  return static_cast<nexar_op_t>(op);
}

nexar_dtype_t dtype_of(py::handle dtype_like, const std::string &op) {
  const py::dtype dt = py::dtype::from_args(py::reinterpret_borrow<py::object>(dtype_like));
  nexar_dtype_t code;
  if (!dtype_code(dt, &code))
    throw py::type_error(op + ": unsupported dtype " + py::str(dt).cast<std::string>() +
                         "; supported: " + kSupported);
  return code;
}

// A tag or an RPC function id: what nexar takes as uint32_t.
uint32_t check_u32(int64_t v, const std::string &op, const char *what) {
  if (v < 0 || v > UINT32_MAX) throw py::value_error(op + ": " + what + " must be in 0..2**32-1");
  return static_cast<uint32_t>(v);
}

}  // namespace nexar_py
