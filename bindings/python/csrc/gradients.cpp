// Gradient traffic: all_reduce_bucketed (many arrays through fused buckets)
// and all_reduce_compressed with a Compressor (TopK or RandomK with error
// feedback).
#include <nexar.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <vector>

#include "bindings.h"
#include "buffers.h"
#include "communicator.h"

namespace nexar_py {

namespace {

class Compressor {
 public:
  Compressor(py::object kind, double ratio, int64_t count, py::object dtype, uint64_t seed) {
    const std::string op = "Compressor";
    int32_t k = 0;
    if (py::isinstance<py::str>(kind)) {
      const std::string name = kind.cast<std::string>();
      if (name == "topk")
        k = NEXAR_COMPRESS_TOPK;
      else if (name == "randomk")
        k = NEXAR_COMPRESS_RANDOMK;
      else
        throw py::value_error(op + ": kind must be \"topk\" or \"randomk\", not \"" + name + "\"");
    } else {
      k = kind.cast<int32_t>();
    }
    if (count < 1) throw py::value_error(op + ": count must be at least 1");
    dtype_ = dtype_of(dtype, op);
    count_ = static_cast<size_t>(count);
    nexar_compressor_t *z = nullptr;
    if (nexar_status_t st = nexar_compressor_create(&z, k, ratio, count_, dtype_, seed)) {
      std::string msg;
      int32_t failed = -1;
      read_last_error(&msg, &failed);
      raise_nexar(st, failed, msg, op, -1);
    }
    z_.reset(z);
    kind_ = k;
    ratio_ = ratio;
  }
  void reset() { nexar_compressor_reset(z_.get()); }
  nexar_compressor_t *handle() const { return z_.get(); }
  size_t count() const { return count_; }
  nexar_dtype_t dtype() const { return dtype_; }
  std::string kind() const { return kind_ == NEXAR_COMPRESS_TOPK ? "topk" : "randomk"; }
  double ratio() const { return ratio_; }

 private:
  struct Destroy {
    void operator()(nexar_compressor_t *z) const { nexar_compressor_destroy(z); }
  };
  std::unique_ptr<nexar_compressor_t, Destroy> z_;
  int32_t kind_ = 0;
  double ratio_ = 0;
  size_t count_ = 0;
  nexar_dtype_t dtype_ = NEXAR_DTYPE_F32;
};

py::object all_reduce_bucketed(Communicator &c, py::object tensors, int64_t op,
                               int64_t bucket_bytes, bool async_op) {
  const std::string name = "all_reduce_bucketed";
  const nexar_op_t o = check_op(op, name);
  if (bucket_bytes < 0) throw py::value_error(name + ": bucket_bytes must be >= 0");
  py::list arrays;
  // The C call's array of tensors, kept with the operation until it is done.
  auto list = std::make_unique<std::vector<nexar_tensor_t>>();
  nexar_dtype_t dtype = NEXAR_DTYPE_F32;
  for (py::handle t : tensors) {
    View v = view_of(t, true, name, "tensor");
    if (!list->empty() && v.dtype != dtype)
      throw py::type_error(name + ": every tensor must have the same dtype (tensor " +
                           std::to_string(list->size()) + " is " +
                           py::str(v.arr.dtype()).cast<std::string>() + ")");
    dtype = v.dtype;
    list->push_back({v.data, v.count});
    arrays.append(v.arr);
  }
  const nexar_tensor_t *ts = list->data();
  const size_t n = list->size();
  py::capsule keep_list(list.release(),
                        [](void *p) { delete static_cast<std::vector<nexar_tensor_t> *>(p); });
  const size_t bb = static_cast<size_t>(bucket_bytes);
  return c.run(
      name,
      [=](nexar_comm_t *h, nexar_done_fn f, void *u) {
        return nexar_allreduce_bucketed(h, ts, n, dtype, o, bb, f, u);
      },
      {tensors, arrays, keep_list}, tensors, async_op);
}

py::object all_reduce_compressed(Communicator &c, py::object buf, Compressor &z, py::object out,
                                 bool async_op) {
  const std::string name = "all_reduce_compressed";
  View in = view_of(buf, out.is_none(), name, "buf");
  if (in.dtype != z.dtype() || in.count != z.count())
    throw py::value_error(name + ": buf has " + std::to_string(in.count) +
                          " elements of another shape or dtype than the compressor's " +
                          std::to_string(z.count()));
  View o = out.is_none() ? in : out_view(out, in, shape_of(in.arr), in.count, name);
  const void *s = in.data;
  void *d = o.data;
  const size_t n = in.count;
  const nexar_dtype_t t = in.dtype;
  nexar_compressor_t *zh = z.handle();
  py::object result = out.is_none() ? buf : out;
  return c.run(
      name,
      [=](nexar_comm_t *h, nexar_done_fn f, void *u) {
        return nexar_allreduce_compressed(h, s, d, n, t, zh, f, u);
      },
      {buf, in.arr, out, o.arr}, result, async_op);
}

}  // namespace

void bind_gradients(py::module_ &m, py::class_<Communicator> &cls) {
  py::class_<Compressor>(m, "Compressor", R"doc(
A gradient compressor with error feedback, for all_reduce_compressed.

``Compressor("topk" | "randomk", ratio=0.01, count=..., dtype=numpy.float32,
seed=0)`` keeps k = max(1, ratio * count) elements per call: TopK the largest
magnitudes, RandomK positions drawn from seed (the same on every rank). What
is not sent stays in the compressor's residual and is added to the next
call's input. dtype: float32, float64, float16 or bfloat16. Every rank uses
the same parameters (MismatchError otherwise).)doc")
      .def(py::init<py::object, double, int64_t, py::object, uint64_t>(), py::arg("kind"),
           py::kw_only(), py::arg("ratio") = 0.01, py::arg("count"),
           py::arg("dtype") = py::str("float32"), py::arg("seed") = 0)
      .def("reset", &Compressor::reset, "Zero the residual.")
      .def_property_readonly("kind", &Compressor::kind)
      .def_property_readonly("ratio", &Compressor::ratio)
      .def_property_readonly("count", &Compressor::count);
  cls.def("all_reduce_bucketed", &all_reduce_bucketed, py::arg("tensors"),
          py::arg("op") = NEXAR_OP_SUM, py::kw_only(), py::arg("bucket_bytes") = 0,
          py::arg("async_op") = false,
          "Reduce every array of tensors (one dtype) in place, fused into buckets of about "
          "bucket_bytes (0: NEXAR_BUCKET_BYTES, default 25 MiB); returns tensors.")
      .def("all_reduce_compressed", &all_reduce_compressed, py::arg("buf"), py::arg("compressor"),
           py::kw_only(), py::arg("out") = py::none(), py::arg("async_op") = false,
           "The sum over ranks of each rank's compressed buf (plus its residual), zero where no "
           "rank sent; in place unless out is given. Returns buf (or out).");
}

}  // namespace nexar_py
