// Communicator.mem_alloc: a numpy array over nexar_mem_alloc's memory, freed
// with nexar_mem_free when the array (and every view of it) is gone.
#include <nexar.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <memory>

#include "bindings.h"
#include "communicator.h"

namespace py = pybind11;

namespace nexar_py {
namespace {

// The array's base: keeps the communicator alive while the memory is.
struct SymmetricBlock {
  py::object comm;
  void *ptr;
};

void free_block(void *p) {
  std::unique_ptr<SymmetricBlock> block(static_cast<SymmetricBlock *>(p));
  try {
    block->comm.cast<Communicator &>().call(
        "mem_free", [&](nexar_comm_t *h) { return nexar_mem_free(h, block->ptr); });
  } catch (const std::exception &) {
    // Closed: the memory went with the engine. Never raise from a destructor.
    PyErr_Clear();
  }
}

}  // namespace

void bind_symmetric(py::class_<Communicator> &cls) {
  cls.def(
      "mem_alloc",
      [](py::object self, size_t count, py::object dtype) {
        const py::dtype dt = py::dtype::from_args(dtype);
        const size_t item = static_cast<size_t>(dt.itemsize());
        if (count == 0 || item == 0 || count > SIZE_MAX / item)
          throw py::value_error("mem_alloc: count must be positive and count * itemsize fit");
        void *p = nullptr;
        self.cast<Communicator &>().call(
            "mem_alloc", [&](nexar_comm_t *h) { return nexar_mem_alloc(h, count * item, &p); });
        auto block = std::make_unique<SymmetricBlock>(SymmetricBlock{self, p});
        py::capsule base(block.get(), &free_block);
        block.release();  // the capsule owns it now
        return py::array(dt, {count}, {item}, p, base);
      },
      py::arg("count"), py::arg("dtype") = "float32",
      R"doc(A 1-D numpy array of count elements of dtype in this rank's symmetric memory
(nexar_mem_alloc): large messages sent from it to ranks on the same host travel by
reference, one copy instead of two. Freed when the array and its views are gone.
It lives in the communicator's engine: do not use it after the last communicator
of that engine is closed.)doc");
}

}  // namespace nexar_py
