// Names the calling thread, as top -H, perf, gdb and py-spy show it, so that
// nexar's threads stand apart from the application's.
#pragma once

namespace nexar {

// Linux keeps at most 15 characters; a longer name is cut there.
void name_this_thread(const char *name);

}  // namespace nexar
