// This machine's name, as logs show it and as hellos and join requests carry
// it to peers and the seed (for error messages naming where a rank runs).
#pragma once

#include <string>

namespace nexar {

std::string host_name();

}  // namespace nexar
