#include "cpu_binding.h"

#include <fstream>
#include <map>
#include <utility>

namespace nexar_run {
namespace {

// The core a CPU belongs to, from sysfs; the CPU itself when sysfs does not
// say (containers without /sys), so each CPU is then its own core.
std::pair<long, long> core_of(int cpu) {
  const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
  long package = -1, core = -1;
  std::ifstream p(dir + "physical_package_id"), c(dir + "core_id");
  if (!(p >> package) || !(c >> core)) return {-1, cpu};
  return {package, core};
}

}  // namespace

bool parse_bind_to(const std::string &s, BindTo *out) {
  if (s == "none")
    *out = BindTo::kNone;
  else if (s == "core")
    *out = BindTo::kCore;
  else if (s == "hwthread")
    *out = BindTo::kHwThread;
  else
    return false;
  return true;
}

std::vector<cpu_set_t> binding_slots(BindTo how) {
  std::vector<cpu_set_t> slots;
  if (how == BindTo::kNone) return slots;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return slots;
  // Cores in (package, core) order, each with its allowed hardware threads.
  std::map<std::pair<long, long>, cpu_set_t> cores;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed)) continue;
    if (how == BindTo::kHwThread) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpu, &one);
      slots.push_back(one);
      continue;
    }
    auto [it, fresh] = cores.try_emplace(core_of(cpu));
    if (fresh) CPU_ZERO(&it->second);
    CPU_SET(cpu, &it->second);
  }
  for (auto &[key, set] : cores)
    slots.push_back(set);
  return slots;
}

std::string describe_cpus(const cpu_set_t &set) {
  std::string s;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    // Appended piece by piece: GCC 12's -Wrestrict misreads "," + string at -O3.
    if (!s.empty()) s += ',';
    s += std::to_string(cpu);
  }
  return s;
}

}  // namespace nexar_run
