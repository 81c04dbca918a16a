// Buffers: numpy arrays and buffer-protocol objects, viewed without copying,
// and the checks of the arguments that go with them.
#pragma once

#include <nexar.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace py = pybind11;

namespace nexar_py {

struct View {
  py::array arr;
  void *data = nullptr;
  size_t count = 0;  // elements
  size_t nbytes = 0;
  nexar_dtype_t dtype = NEXAR_DTYPE_U8;
};

// The name of obj's type, for messages.
std::string type_name(py::handle obj);

// Any numpy array or buffer-protocol object, viewed without copying.
View view_of(py::handle obj, bool writable, const std::string &op, const char *name);

std::vector<py::ssize_t> shape_of(const py::array &a);

// An output buffer: the caller's (checked) or a new array.
View out_view(py::object out, const View &like, const std::vector<py::ssize_t> &shape, size_t count,
              const std::string &op);

nexar_op_t check_op(int64_t op, const std::string &name);

// The nexar dtype of a numpy dtype (or anything numpy.dtype accepts).
nexar_dtype_t dtype_of(py::handle dtype_like, const std::string &op);

// A tag or an RPC function id: what nexar takes as uint32_t.
uint32_t check_u32(int64_t v, const std::string &op, const char *what);

}  // namespace nexar_py
