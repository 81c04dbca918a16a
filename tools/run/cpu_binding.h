// Where nexar-run places each local rank (--bind-to): on one core, one
// hardware thread, or wherever the scheduler likes (none, the default).
//
// Binding keeps a rank's caller thread and its engine's I/O thread on one
// CPU, so the hand-offs between them (a request, a completion) wake a thread
// on a busy CPU instead of an idle one. On a virtual machine an idle vCPU
// halts, and waking it costs tens of microseconds (docs/performance.md,
// "Binding ranks to cores"). It also confines the rank's own compute threads
// (OpenMP, data loaders) to that core, hence opt-in, as with mpirun.
#pragma once

#include <sched.h>

#include <string>
#include <vector>

namespace nexar_run {

enum class BindTo { kNone, kCore, kHwThread };

// "none", "core", "hwthread"; false for anything else.
bool parse_bind_to(const std::string &s, BindTo *out);

// The CPU set of each binding slot, from the CPUs this process may use (its
// affinity mask: taskset, cpusets and cgroups are honoured): one slot per
// core (its allowed hardware threads together) or per hardware thread.
// Empty for kNone.
std::vector<cpu_set_t> binding_slots(BindTo how);

// "0", "2,3": the CPUs of a set, for messages.
std::string describe_cpus(const cpu_set_t &set);

}  // namespace nexar_run
