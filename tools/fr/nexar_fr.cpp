// nexar-fr: merges the flight-recorder dumps of every rank of a job (files
// written by nexar_flight_recorder_dump or into NEXAR_FR_DUMP_DIR) and
// prints, per communicator, the first collective where the ranks diverge:
// which ranks are inside it and whom they wait on, which never joined it
// (with their last completed collective), which called something else.
#include <dirent.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "json.h"

namespace {

using nexar_fr::Json;

const char kUsage[] =
    "usage: nexar-fr [--help] DUMP_OR_DIR...\n"
    "Merges flight-recorder dumps (nexar-fr-HOST-PID.json, or any files that\n"
    "nexar_flight_recorder_dump wrote; a directory means every *.json in it)\n"
    "and prints, per communicator, the first collective where the ranks\n"
    "diverge: who is inside it and whom they wait on, who never joined it,\n"
    "who called something else.\n"
    "  --help   print this help\n"
    "Exit status: 0 no divergence, 1 a divergence was found, 2 bad input.\n";

// One collective as one rank recorded it.
struct Call {
  std::string op, what;  // what: the operation and the arguments all ranks must agree on
  std::string state;
  int waits_on = -1, step = -1;
};

// One rank's record of one communicator.
struct RankView {
  long long last_queued = 0, last_started = 0, last_completed = 0;
  std::map<long long, Call> calls;  // by collective number
  std::string source;
};

struct CommView {
  long long size = 0;
  std::map<long long, RankView> ranks;
};

std::string describe(const Json &e) {
  std::string d = e["op"].as_string();
  if (!e["dtype"].as_string().empty()) d.append(" ").append(e["dtype"].as_string());
  if (!e["reduction"].as_string().empty() &&
      e["op"].as_string().find("reduce") != std::string::npos)
    d.append(" ").append(e["reduction"].as_string());
  d += " count " + std::to_string(e["count"].as_int());
  if (e["root"].as_int(-1) >= 0) d += " root " + std::to_string(e["root"].as_int());
  return d;
}

bool read_file(const std::string &path, std::string *out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return true;
}

// Adds the dump at path to comms; false (with a message) if it is no dump.
bool add_dump(const std::string &path, std::map<std::string, CommView> *comms) {
  std::string text, err;
  Json doc;
  if (!read_file(path, &text)) {
    fprintf(stderr, "nexar-fr: cannot read %s: %s\n", path.c_str(), strerror(errno));
    return false;
  }
  if (!nexar_fr::parse_json(text, &doc, &err)) {
    fprintf(stderr, "nexar-fr: %s is not JSON: %s\n", path.c_str(), err.c_str());
    return false;
  }
  if (doc["nexar_flight_recorder"].as_int() != 1) {
    fprintf(stderr, "nexar-fr: %s is not a nexar flight-recorder dump\n", path.c_str());
    return false;
  }
  for (const Json &c : doc["communicators"].items) {
    CommView &view = (*comms)[c["comm_id"].as_string()];
    view.size = c["size"].as_int();
    RankView &r = view.ranks[c["rank"].as_int()];
    r = RankView();
    r.source = path;
    r.last_queued = c["last_queued"].as_int();
    r.last_started = c["last_started"].as_int();
    r.last_completed = c["last_completed"].as_int();
    for (const Json &e : c["operations"].items) {
      const long long n = e["coll_seq"].as_int();
      if (n <= 0) continue;
      Call call;
      call.op = e["op"].as_string();
      call.what = describe(e);
      call.state = e["state"].as_string();
      call.waits_on = static_cast<int>(e["waits_on"].as_int(-1));
      call.step = static_cast<int>(e["step"].as_int(-1));
      r.calls[n] = call;
    }
  }
  return true;
}

std::string join(const std::vector<long long> &v) {
  std::string s;
  for (long long x : v) {
    if (!s.empty()) s += ',';
    s += std::to_string(x);
  }
  return s;
}

// Prints the first divergence of one communicator; returns whether there is one.
bool report(const std::string &id, const CommView &c) {
  std::vector<long long> dumped, absent;
  for (const auto &[rank, r] : c.ranks)
    dumped.push_back(rank);
  for (long long r = 0; r < c.size; ++r)
    if (!c.ranks.count(r)) absent.push_back(r);
  printf("communicator %s: %lld ranks, dumps from ranks %s\n", id.c_str(), c.size,
         join(dumped).c_str());
  if (!absent.empty()) printf("  no dump from ranks %s\n", join(absent).c_str());
  // Only numbers every dumped rank can still show: older entries may have
  // left a ring.
  long long lo = 1, hi = 0;
  for (const auto &[rank, r] : c.ranks) {
    if (!r.calls.empty()) lo = std::max(lo, r.calls.begin()->first);
    hi = std::max(hi, r.last_queued);
  }
  for (long long n = lo; n <= hi; ++n) {
    std::map<std::string, std::vector<long long>> by_call;
    std::vector<long long> missing;
    for (const auto &[rank, r] : c.ranks) {
      auto it = r.calls.find(n);
      if (it != r.calls.end())
        by_call[it->second.what].push_back(rank);
      else if (r.last_queued < n)
        missing.push_back(rank);
    }
    if (missing.empty() && by_call.size() <= 1) continue;
    // The call most ranks made is the collective; the others diverge.
    std::string main_call;
    size_t most = 0;
    for (const auto &[what, ranks] : by_call)
      if (ranks.size() > most) {
        most = ranks.size();
        main_call = what;
      }
    printf("  first divergence at collective #%lld: %s\n", n, main_call.c_str());
    for (long long rank : by_call[main_call]) {
      const Call &call = c.ranks.at(rank).calls.at(n);
      printf("    rank %lld is inside it (%s", rank, call.state.c_str());
      if (call.waits_on >= 0) printf(", waits on rank %d at step %d", call.waits_on, call.step);
      printf(")\n");
    }
    for (long long rank : missing)
      printf("    rank %lld never joined it (last completed collective #%lld)\n", rank,
             c.ranks.at(rank).last_completed);
    for (const auto &[what, ranks] : by_call)
      if (what != main_call)
        for (long long rank : ranks)
          printf("    rank %lld called something else: %s\n", rank, what.c_str());
    return true;
  }
  printf("  no divergence in collectives #%lld to #%lld\n", lo, hi);
  return false;
}

void collect(const std::string &arg, std::vector<std::string> *files) {
  struct stat st;
  if (stat(arg.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    files->push_back(arg);
    return;
  }
  DIR *d = opendir(arg.c_str());
  if (!d) return;
  std::set<std::string> names;
  while (dirent *e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0) names.insert(name);
  }
  closedir(d);
  for (const std::string &n : names)
    files->push_back(arg + "/" + n);
}

}  // namespace

int main(int argc, char **argv) {
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      fputs(kUsage, stdout);
      return 0;
    }
    if (!a.empty() && a[0] == '-') {
      fprintf(stderr, "nexar-fr: unknown option %s\n%s", a.c_str(), kUsage);
      return 2;
    }
    collect(a, &files);
  }
  if (files.empty()) {
    fputs(kUsage, stderr);
    return 2;
  }
  std::map<std::string, CommView> comms;
  for (const std::string &f : files)
    if (!add_dump(f, &comms)) return 2;
  bool diverged = false;
  for (const auto &[id, c] : comms)
    diverged |= report(id, c);
  return diverged ? 1 : 0;
}
