#include "client/flight_dump.h"

#include <ngtcp2/ngtcp2.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>

#include "client/client.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/dtype.h"
#include "core/host.h"
#include "core/log.h"

namespace nexar {
namespace {

constexpr uint64_t kAutoDumpGapNs = 1000 * kNsPerMs;
std::atomic<uint64_t> g_last_auto_dump_ns{0};
// Set while an automatic dump runs: it may run on a loop thread, which must
// never wait for another loop.
thread_local bool t_auto_dump = false;

// The loop thread's view of one communicator: members' liveness and links.
struct PeerView {
  uint32_t rank;
  const char *transport;  // "self", "quic", "relay"
  bool failed;
  int64_t rtt_us;  // -1: unknown
  int64_t bytes_in_flight;
};

std::vector<PeerView> peers_on_loop(Client &client, const fr::CommCopy &c) {
  std::vector<PeerView> out;
  for (uint32_t r = 0; r < c.world_of.size(); ++r) {
    const uint32_t world = c.world_of[r];
    PeerView v{r, "self", false, -1, -1};
    if (r != c.rank) {
      const PeerConnection &p = client.peer(world);
      v.transport = p.direct() ? "quic" : "relay";
      v.failed = client.liveness().failure(world) != nullptr;
      if (QuicConnection *q = p.direct_connection()) {
        ngtcp2_conn_stat st;
        ngtcp2_conn_get_conn_stat(q->raw(), &st);
        v.rtt_us = static_cast<int64_t>(st.smoothed_rtt / 1000);
        v.bytes_in_flight = static_cast<int64_t>(st.bytes_in_flight);
      }
    }
    out.push_back(v);
  }
  return out;
}

void put_string(std::string &o, const char *s) {
  o += '"';
  for (; *s; ++s) {
    const unsigned char ch = static_cast<unsigned char>(*s);
    if (ch == '"' || ch == '\\') {
      o += '\\';
      o += static_cast<char>(ch);
    } else if (ch < 0x20) {
      char buf[8];
      snprintf(buf, sizeof buf, "\\u%04x", ch);
      o += buf;
    } else {
      o += static_cast<char>(ch);
    }
  }
  o += '"';
}

void put_entry(std::string &o, const fr::EntryCopy &e) {
  o += format("{\"seq\":%llu,\"coll_seq\":%llu,\"op\":", static_cast<unsigned long long>(e.op_seq),
              static_cast<unsigned long long>(e.coll_seq));
  put_string(o, e.name);
  o += ",\"dtype\":";
  put_string(o, e.dtype < 0 ? "" : dtype_name(static_cast<nexar_dtype_t>(e.dtype)));
  o += ",\"reduction\":";
  put_string(o, e.reduction < 0 ? "" : op_name(static_cast<nexar_op_t>(e.reduction)));
  o += format(",\"count\":%llu,\"bytes\":%llu,\"root\":%d,\"algorithm\":",
              static_cast<unsigned long long>(e.count), static_cast<unsigned long long>(e.bytes),
              e.root);
  put_string(o, e.algorithm);
  o += ",\"transport\":";
  put_string(o, e.transport);
  o += ",\"state\":";
  put_string(o, fr::state_name(e.state));
  o += format(
      ",\"status\":%d,\"t_queued_ns\":%llu,\"t_started_ns\":%llu,"
      "\"t_ended_ns\":%llu,\"waits_on\":%d,\"step\":%d}",
      e.status, static_cast<unsigned long long>(e.t_queued_ns),
      static_cast<unsigned long long>(e.t_started_ns),
      static_cast<unsigned long long>(e.t_ended_ns), e.waits_on, e.step);
}

void put_comm(std::string &o, const fr::CommCopy &c, const std::vector<PeerView> *peers,
              const std::vector<fr::EntryCopy> &entries) {
  o += format("{\"comm_id\":\"%016llx\",\"epoch\":0,\"rank\":%u,\"size\":%zu,\"members\":[",
              static_cast<unsigned long long>(c.comm_id), c.rank, c.world_of.size());
  for (size_t i = 0; i < c.world_of.size(); ++i)
    o += format("%s%u", i ? "," : "", c.world_of[i]);
  o += "],\"failed\":[";
  bool first = true;
  if (peers)
    for (const PeerView &p : *peers)
      if (p.failed) {
        o += format("%s%u", first ? "" : ",", p.rank);
        first = false;
      }
  o += format(
      "],\"revoked\":%s,\"last_queued\":%llu,\"last_started\":%llu,\"last_completed\":%llu,"
      "\"peers\":[",
      c.revoked ? "true" : "false", static_cast<unsigned long long>(c.last_queued),
      static_cast<unsigned long long>(c.last_started),
      static_cast<unsigned long long>(c.last_completed));
  first = true;
  if (peers)
    for (const PeerView &p : *peers) {
      if (p.rank == c.rank) continue;
      o += format(
          "%s{\"rank\":%u,\"transport\":\"%s\",\"failed\":%s,\"rtt_us\":%lld,"
          "\"bytes_in_flight\":%lld}",
          first ? "" : ",", p.rank, p.transport, p.failed ? "true" : "false",
          static_cast<long long>(p.rtt_us), static_cast<long long>(p.bytes_in_flight));
      first = false;
    }
  o += "],\"operations\":[";
  first = true;
  for (const fr::EntryCopy &e : entries) {
    if (e.comm_key != c.key) continue;
    if (!first) o += ",\n";
    put_entry(o, e);
    first = false;
  }
  o += "]}";
}

std::string default_path(const char *dir) {
  return format("%s/nexar-fr-%s-%d.json", dir, host_name().c_str(), static_cast<int>(getpid()));
}

// Writes through a temporary file so a reader never sees half a dump.
Status write_file(const std::string &path, const std::string &text) {
  const std::string tmp = format("%s.tmp%d", path.c_str(), static_cast<int>(getpid()));
  FILE *f = fopen(tmp.c_str(), "w");
  if (!f)
    return error(
        NEXAR_ERR_INVALID_ARGUMENT,
        format("nexar_flight_recorder_dump: cannot create %s: %s", tmp.c_str(), strerror(errno)));
  const bool written = fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool closed = fclose(f) == 0;
  if (!written || !closed || rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return error(NEXAR_ERR_INTERNAL, format("nexar_flight_recorder_dump: cannot write %s: %s",
                                            path.c_str(), strerror(err)));
  }
  return {};
}

}  // namespace

Status write_flight_dump(const fr::FlightComm *only, const char *path, const char *reason) {
  std::string where;
  if (path) {
    where = path;
  } else if (const char *dir = env("NEXAR_FR_DUMP_DIR")) {
    where = default_path(dir);
  } else {
    return error(NEXAR_ERR_INVALID_ARGUMENT,
                 "nexar_flight_recorder_dump: path is NULL and NEXAR_FR_DUMP_DIR is not set");
  }
  const std::vector<fr::EntryCopy> entries = fr::snapshot();
  std::string o = format("{\"nexar_flight_recorder\":1,\"host\":");
  put_string(o, host_name().c_str());
  o += format(",\"pid\":%d,\"reason\":", static_cast<int>(getpid()));
  put_string(o, reason);
  o += format(",\"time_ns\":%llu,\"capacity\":%zu,\"communicators\":[\n",
              static_cast<unsigned long long>(now_ns()), fr::capacity());
  const std::vector<fr::CommCopy> comms = fr::registered(only ? only->key : 0);
  if (only && comms.empty())
    return error(NEXAR_ERR_INVALID_ARGUMENT,
                 "nexar_flight_recorder_dump: the communicator is not registered");
  bool first = true;
  for (const fr::CommCopy &c : comms) {
    std::vector<PeerView> peers;
    bool have_peers = false;
    // The client stays alive while its peers are read.
    if (std::shared_ptr<Client> client = c.client.lock()) {
      EventLoop &loop = client->loop();
      if (loop.on_loop_thread()) {
        peers = peers_on_loop(*client, c);
        have_peers = true;
      } else if (!t_auto_dump) {
        loop.run_sync([&] {
          if (client->shut_down()) return;
          peers = peers_on_loop(*client, c);
          have_peers = true;
        });
      }
    }
    if (!first) o += ",\n";
    put_comm(o, c, have_peers ? &peers : nullptr, entries);
    first = false;
  }
  o += "\n]}\n";
  return write_file(where, o);
}

void flight_recorder_auto_dump(const char *reason) {
  if (!env("NEXAR_FR_DUMP_DIR") || fr::capacity() == 0) return;
  const uint64_t now = now_ns();
  uint64_t last = g_last_auto_dump_ns.load();
  if (last != 0 && now - last < kAutoDumpGapNs) return;
  if (!g_last_auto_dump_ns.compare_exchange_strong(last, now)) return;
  t_auto_dump = true;
  Status s = write_flight_dump(nullptr, nullptr, reason);
  t_auto_dump = false;
  if (!s)
    LOG_WARN("flight recorder: automatic dump after a %s failed: %s", reason, s.message.c_str());
}

void flight_recorder_on_revoke(fr::FlightComm &comm) {
  comm.revoked.store(true);
  flight_recorder_auto_dump("revoke");
}

}  // namespace nexar
