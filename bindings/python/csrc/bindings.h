// What each file adds to the module: the Communicator's operations by
// concern, the ways to make communicators, the seed.
#pragma once

#include <pybind11/pybind11.h>

#include "communicator.h"

namespace py = pybind11;

namespace nexar_py {

void bind_collectives(py::class_<Communicator> &cls);
void bind_point_to_point(py::class_<Communicator> &cls);
void bind_rpc(py::class_<Communicator> &cls);
void bind_faults(py::class_<Communicator> &cls);
void bind_creation(py::module_ &m);
void bind_seed(py::module_ &m);
void bind_gradients(py::module_ &m, py::class_<Communicator> &cls);
void bind_symmetric(py::class_<Communicator> &cls);

}  // namespace nexar_py
