// The collectives: all_reduce, broadcast, reduce, all_gather, reduce_scatter,
// all_to_all, gather, scatter, scan, exscan, barrier.
#include <nexar.h>
#include <pybind11/pybind11.h>

#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "buffers.h"
#include "communicator.h"

namespace nexar_py {

namespace {

// Blocks of `whole` split over `size` ranks: along the first axis when it has
// `size` entries, else flat.
std::vector<py::ssize_t> block_shape(const View &whole, uint32_t size, size_t block) {
  const py::array &a = whole.arr;
  if (a.ndim() >= 1 && a.shape(0) == static_cast<py::ssize_t>(size))
    return std::vector<py::ssize_t>(a.shape() + 1, a.shape() + a.ndim());
  return {static_cast<py::ssize_t>(block)};
}

size_t blocks_of(const View &v, uint32_t size, const std::string &op) {
  if (v.count % size != 0)
    throw py::value_error(op + ": buf holds " + std::to_string(v.count) +
                          " elements, not a multiple of the communicator size " +
                          std::to_string(size));
  return v.count / size;
}

using InPlaceFn = nexar_status_t (*)(nexar_comm_t *, const void *, void *, size_t, nexar_dtype_t,
                                     nexar_op_t, nexar_done_fn, void *);

py::object in_place(Communicator &c, const std::string &name, py::object buf, int64_t op,
                    bool async_op, InPlaceFn fn) {
  View v = view_of(buf, true, name, "buf");
  const nexar_op_t o = check_op(op, name);
  void *d = v.data;
  const size_t n = v.count;
  const nexar_dtype_t t = v.dtype;
  return c.run(
      name, [=](nexar_comm_t *h, nexar_done_fn f, void *u) { return fn(h, d, d, n, t, o, f, u); },
      {buf, v.arr}, buf, async_op);
}

py::object all_reduce(Communicator &c, py::object buf, int64_t op, bool async_op) {
  return in_place(c, "all_reduce", std::move(buf), op, async_op, nexar_allreduce);
}
py::object scan(Communicator &c, py::object buf, int64_t op, bool async_op) {
  return in_place(c, "scan", std::move(buf), op, async_op, nexar_scan);
}
py::object exscan(Communicator &c, py::object buf, int64_t op, bool async_op) {
  return in_place(c, "exscan", std::move(buf), op, async_op, nexar_exscan);
}

py::object broadcast(Communicator &c, py::object buf, int64_t root, bool async_op) {
  const std::string name = "broadcast";
  View v = view_of(buf, true, name, "buf");
  const uint32_t r = c.check_rank(root, name, "root");
  void *d = v.data;
  const size_t n = v.count;
  const nexar_dtype_t t = v.dtype;
  return c.run(
      name,
      [=](nexar_comm_t *h, nexar_done_fn f, void *u) {
        return nexar_broadcast(h, d, n, t, r, f, u);
      },
      {buf, v.arr}, buf, async_op);
}

py::object reduce(Communicator &c, py::object buf, int64_t op, int64_t root, bool async_op) {
  const std::string name = "reduce";
  View v = view_of(buf, true, name, "buf");
  const nexar_op_t o = check_op(op, name);
  const uint32_t r = c.check_rank(root, name, "root");
  void *d = v.data;
  const size_t n = v.count;
  const nexar_dtype_t t = v.dtype;
  return c.run(
      name,
      [=](nexar_comm_t *h, nexar_done_fn f, void *u) {
        return nexar_reduce(h, d, d, n, t, o, r, f, u);
      },
      {buf, v.arr}, buf, async_op);
}

py::object all_gather(Communicator &c, py::object buf, py::object out, bool async_op) {
  const std::string name = "all_gather";
  View in = view_of(buf, false, name, "buf");
  std::vector<py::ssize_t> shape = shape_of(in.arr);
  shape.insert(shape.begin(), c.size());
  View o = out_view(out, in, shape, in.count * c.size(), name);
  const void *s = in.data;
  void *d = o.data;
  const size_t n = in.count;
  const nexar_dtype_t t = in.dtype;
  py::object result = out.is_none() ? py::object(o.arr) : out;
  return c.run(
      name,
      [=](nexar_comm_t *h, nexar_done_fn f, void *u) {
        return nexar_allgather(h, s, d, n, t, f, u);
      },
      {buf, in.arr, out, o.arr}, result, async_op);
}

py::object reduce_scatter(Communicator &c, py::object buf, int64_t op, py::object out,
                          bool async_op) {
  const std::string name = "reduce_scatter";
  View in = view_of(buf, false, name, "buf");
  const nexar_op_t op_ = check_op(op, name);
  const size_t block = blocks_of(in, c.size(), name);
  View o = out_view(out, in, block_shape(in, c.size(), block), block, name);
  const void *s = in.data;
  void *d = o.data;
  const nexar_dtype_t t = in.dtype;
  py::object result = out.is_none() ? py::object(o.arr) : out;
  return c.run(
      name,
      [=](nexar_comm_t *h, nexar_done_fn f, void *u) {
        return nexar_reduce_scatter(h, s, d, block, t, op_, f, u);
      },
      {buf, in.arr, out, o.arr}, result, async_op);
}

py::object all_to_all(Communicator &c, py::object buf, py::object out, bool async_op) {
  const std::string name = "all_to_all";
  View in = view_of(buf, false, name, "buf");
  const size_t block = blocks_of(in, c.size(), name);
  View o = out_view(out, in, shape_of(in.arr), in.count, name);
  const void *s = in.data;
  void *d = o.data;
  const nexar_dtype_t t = in.dtype;
  py::object result = out.is_none() ? py::object(o.arr) : out;
  return c.run(
      name,
      [=](nexar_comm_t *h, nexar_done_fn f, void *u) {
        return nexar_alltoall(h, s, d, block, t, f, u);
      },
      {buf, in.arr, out, o.arr}, result, async_op);
}

py::object gather(Communicator &c, py::object buf, int64_t root, py::object out, bool async_op) {
  const std::string name = "gather";
  View in = view_of(buf, false, name, "buf");
  const uint32_t r = c.check_rank(root, name, "root");
  const void *s = in.data;
  const size_t n = in.count;
  const nexar_dtype_t t = in.dtype;
  if (c.rank() != r)
    return c.run(
        name,
        [=](nexar_comm_t *h, nexar_done_fn f, void *u) {
          return nexar_gather(h, s, nullptr, n, t, r, f, u);
        },
        {buf, in.arr}, py::none(), async_op);
  std::vector<py::ssize_t> shape = shape_of(in.arr);
  shape.insert(shape.begin(), c.size());
  View o = out_view(out, in, shape, n * c.size(), name);
  void *d = o.data;
  py::object result = out.is_none() ? py::object(o.arr) : out;
  return c.run(
      name,
      [=](nexar_comm_t *h, nexar_done_fn f, void *u) {
        return nexar_gather(h, s, d, n, t, r, f, u);
      },
      {buf, in.arr, out, o.arr}, result, async_op);
}

py::object scatter(Communicator &c, py::object buf, int64_t root, py::object out, bool async_op) {
  const std::string name = "scatter";
  const uint32_t r = c.check_rank(root, name, "root");
  const bool is_root = c.rank() == r;
  if (buf.is_none() && (is_root || out.is_none()))
    throw py::value_error(is_root ? "scatter: the root must pass buf (size blocks)"
                                  : "scatter: pass buf (its shape gives the block) or out");
  View o;
  View in;
  if (!buf.is_none()) {
    in = view_of(buf, false, name, "buf");
    const size_t block = blocks_of(in, c.size(), name);
    o = out_view(out, in, block_shape(in, c.size(), block), block, name);
  } else {
    o = view_of(out, true, name, "out");
  }
  const void *s = is_root ? in.data : nullptr;
  void *d = o.data;
  const size_t n = o.count;
  const nexar_dtype_t t = o.dtype;
  py::object result = out.is_none() ? py::object(o.arr) : out;
  return c.run(
      name,
      [=](nexar_comm_t *h, nexar_done_fn f, void *u) {
        return nexar_scatter(h, s, d, n, t, r, f, u);
      },
      {buf, in.arr, out, o.arr}, result, async_op);
}

py::object barrier(Communicator &c, bool async_op) {
  return c.run(
      "barrier", [](nexar_comm_t *h, nexar_done_fn f, void *u) { return nexar_barrier(h, f, u); },
      {}, py::none(), async_op);
}

}  // namespace

void bind_collectives(py::class_<Communicator> &cls) {
  cls.def("all_reduce", &all_reduce, py::arg("buf"), py::arg("op") = NEXAR_OP_SUM, py::kw_only(),
          py::arg("async_op") = false,
          "Reduce buf element-wise over every rank, in place; returns buf.")
      .def("broadcast", &broadcast, py::arg("buf"), py::arg("root") = 0, py::kw_only(),
           py::arg("async_op") = false, "Copy root's buf into every rank's buf; returns buf.")
      .def("reduce", &reduce, py::arg("buf"), py::arg("op") = NEXAR_OP_SUM, py::arg("root") = 0,
           py::kw_only(), py::arg("async_op") = false,
           "Reduce buf over every rank into root's buf (in place; other ranks' buf is left "
           "as it was); returns buf.")
      .def("all_gather", &all_gather, py::arg("buf"), py::kw_only(), py::arg("out") = py::none(),
           py::arg("async_op") = false,
           "Every rank's buf, stacked: a new array of shape (size, *buf.shape), or out.")
      .def("reduce_scatter", &reduce_scatter, py::arg("buf"), py::arg("op") = NEXAR_OP_SUM,
           py::kw_only(), py::arg("out") = py::none(), py::arg("async_op") = false,
           "buf holds size blocks (along its first axis when it has size rows, else flat); "
           "returns block `rank` reduced over every rank.")
      .def("all_to_all", &all_to_all, py::arg("buf"), py::kw_only(), py::arg("out") = py::none(),
           py::arg("async_op") = false,
           "buf holds size blocks; block j goes to rank j. Returns a new array of buf's shape "
           "whose block i came from rank i.")
      .def("gather", &gather, py::arg("buf"), py::arg("root") = 0, py::kw_only(),
           py::arg("out") = py::none(), py::arg("async_op") = false,
           "Every rank's buf stacked on root (shape (size, *buf.shape)); None elsewhere.")
      .def("scatter", &scatter, py::arg("buf"), py::arg("root") = 0, py::kw_only(),
           py::arg("out") = py::none(), py::arg("async_op") = false,
           "root's buf holds size blocks; returns block `rank`. Other ranks pass a buf of the "
           "same shape (not read) or out.")
      .def("scan", &scan, py::arg("buf"), py::arg("op") = NEXAR_OP_SUM, py::kw_only(),
           py::arg("async_op") = false, "Inclusive prefix reduction over ranks, in place.")
      .def("exscan", &exscan, py::arg("buf"), py::arg("op") = NEXAR_OP_SUM, py::kw_only(),
           py::arg("async_op") = false,
           "Exclusive prefix reduction over ranks, in place (rank 0's buf is left as it was).")
      .def("barrier", &barrier, py::kw_only(), py::arg("async_op") = false,
           "Return once every rank has entered the barrier.");
}

}  // namespace nexar_py
