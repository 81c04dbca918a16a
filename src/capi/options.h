// The versioned C options struct (nexar_comm_options_t, sized by its
// struct_size): filled with defaults and the environment, and read into the
// library's own Config. Only the C ABI layer sees the struct's layout.
#pragma once

#include <cstddef>

#include "core/config.h"
#include "nexar.h"

namespace nexar {

// Fills opts (of the caller's struct_size) with defaults and the environment.
Status init_options_from_env(nexar_comm_options_t *opts, size_t struct_size);

// Copies the fields a caller set (NULL opts = defaults plus environment),
// checks them, and reads the environment's forced algorithms.
Status config_from_options(const nexar_comm_options_t *opts, Config *out);

}  // namespace nexar
