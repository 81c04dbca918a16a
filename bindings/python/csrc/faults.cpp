// Failures in Python: comm.failed, comm.ack_failed(), comm.revoke(),
// comm.revoked, comm.agree(flags), comm.shrink() and a failure callback
// (docs/failures.md). They block with the GIL released; agree and shrink are
// collectives over the survivors.
#include <algorithm>
#include <vector>

#include "bindings.h"
#include "communicator.h"
#include "errors.h"

namespace nexar_py {
namespace {

// Runs on nexar's completion thread: the GIL is taken for the Python call,
// and an exception it raises is reported, not propagated into nexar.
void on_failure(void *box, nexar_comm_t *, uint32_t rank, nexar_status_t cause) {
  py::gil_scoped_acquire gil;
  try {
    py::object fn = py::reinterpret_borrow<py::list>(static_cast<PyObject *>(box))[0];
    if (!fn.is_none()) fn(rank, cause);
  } catch (py::error_already_set &e) {
    e.discard_as_unraisable("nexar failure callback");
  }
}

}  // namespace

void bind_faults(py::class_<Communicator> &cls) {
  cls.def_property_readonly(
         "failed",
         [](Communicator &c) {
           std::vector<uint32_t> ranks;
           c.call("failed", [&](nexar_comm_t *h) {
             uint32_t n = 0;
             nexar_status_t s = nexar_comm_get_failed(h, nullptr, 0, &n);
             if (s != NEXAR_OK) return s;
             ranks.resize(n);
             s = nexar_comm_get_failed(h, ranks.data(), n, &n);
             ranks.resize(std::min<size_t>(n, ranks.size()));
             return s;
           });
           py::list out;
           for (uint32_t r : ranks)
             out.append(r);
           return out;
         },
         "The ranks known to have failed, in the order they were learned (only grows).")
      .def(
          "ack_failed",
          [](Communicator &c, int64_t n) {
            if (n < 0 || n > UINT32_MAX) throw py::value_error("ack_failed: n must be >= 0");
            uint32_t acked = 0;
            c.call("ack_failed", [&](nexar_comm_t *h) {
              return nexar_comm_ack_failed(h, static_cast<uint32_t>(n), &acked);
            });
            return acked;
          },
          py::arg("n") = static_cast<int64_t>(UINT32_MAX),
          "Acknowledge the first n failures (default: all known); agree no longer fails "
          "because of them. Returns how many are acknowledged.")
      .def(
          "revoke",
          [](Communicator &c) {
            c.call("revoke", [](nexar_comm_t *h) { return nexar_comm_revoke(h); });
          },
          "Revoke the communicator at every live member: pending and later operations raise "
          "RevokedError, except agree and shrink.")
      .def_property_readonly(
          "revoked",
          [](Communicator &c) {
            int32_t r = 0;
            c.call("revoked", [&](nexar_comm_t *h) {
              r = nexar_comm_is_revoked(h);
              return NEXAR_OK;
            });
            return r == 1;
          },
          "True once the communicator was revoked, here or by a peer.")
      .def(
          "agree",
          [](Communicator &c, uint64_t flags) {
            c.call("agree",
                   [&](nexar_comm_t *h) { return nexar_comm_agree(h, &flags, nullptr, nullptr); });
            return flags;
          },
          py::arg("flags"),
          "Fault-tolerant agreement: the AND of every live member's flags, the same at every "
          "survivor. Raises PeerFailedError (uniformly) when a member failed that not every "
          "survivor acknowledged.")
      .def(
          "shrink",
          [](Communicator &c) {
            nexar_comm_t *out = nullptr;
            c.call("shrink",
                   [&](nexar_comm_t *h) { return nexar_comm_shrink(h, &out, nullptr, nullptr); });
            return wrap(out);
          },
          "A new Communicator of the survivors, ranks renumbered in their old order.")
      .def(
          "set_failure_callback",
          [](Communicator &c, py::object fn) {
            if (!fn.is_none() && !PyCallable_Check(fn.ptr()))
              throw py::type_error("set_failure_callback: fn must be callable or None");
            if (!c.failure_callback) {
              py::list box;
              box.append(py::none());
              c.failure_callback = std::make_shared<py::object>(std::move(box));
            }
            py::list box = c.failure_callback->cast<py::list>();
            box[0] = fn;
            PyObject *raw = c.failure_callback->ptr();
            c.call("set_failure_callback", [&](nexar_comm_t *h) {
              return nexar_comm_set_failure_callback(h, fn.is_none() ? nullptr : on_failure, raw);
            });
          },
          py::arg("fn"),
          "Call fn(rank, cause) once per failed rank (on nexar's completion thread); None "
          "removes it.")
      .def(
          "pending_joins",
          [](Communicator &c) {
            uint32_t n = 0;
            c.call("pending_joins",
                   [&](nexar_comm_t *h) { return nexar_comm_pending_joins(h, &n); });
            return n;
          },
          "How many processes wait to join through the elastic seed (local and cheap; "
          "docs/elastic.md).")
      .def(
          "grow",
          [](Communicator &c, int64_t max_new) {
            if (max_new < 0 || max_new > UINT32_MAX)
              throw py::value_error("grow: max_new must be >= 0");
            nexar_comm_t *out = nullptr;
            c.call("grow", [&](nexar_comm_t *h) {
              return nexar_comm_grow(h, static_cast<uint32_t>(max_new), &out, nullptr, nullptr);
            });
            return wrap(out);
          },
          py::arg("max_new"),
          "Collective over the members: admit up to max_new waiting processes. Returns the "
          "grown Communicator (old ranks keep their numbers, new ones are appended); this one "
          "stays usable. Raises PeerFailedError at every member when a member failed.");
}

}  // namespace nexar_py
