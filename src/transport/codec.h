// Compact little-endian codec for nexar's control messages.
//
// Control messages travel on the control lane of a mesh connection. Everything a
// peer sends is untrusted: the reader checks every field against the remaining
// input and against explicit limits before it allocates, and a failed read leaves
// the reader failed so that decoders can check once per field without cascading
// out-of-bounds reads. Bulk payloads never go through this codec.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace nexar::wire {

inline constexpr uint8_t kControlVersion = 1;
inline constexpr uint32_t kMaxStringLen = 4096;
inline constexpr std::size_t kMaxControlMessage = 64 * 1024;
// Entries in a list field (each entry is a string of at most kMaxStringLen).
inline constexpr uint32_t kMaxListLen = 16384;

// Appends little-endian values to a caller-owned buffer, so a frame header and
// its payload can be built in one allocation.
class ByteWriter {
 public:
  explicit ByteWriter(std::vector<uint8_t> &out) : out_(out) {}

  void u8(uint8_t v) { out_.push_back(v); }
  void u16(uint16_t v) { put_le(v, 2); }
  void u32(uint32_t v) { put_le(v, 4); }
  void u64(uint64_t v) { put_le(v, 8); }
  void i32(int32_t v) { u32(static_cast<uint32_t>(v)); }
  // u32 length prefix, then the bytes. Throws std::length_error above 4 GiB.
  void bytes(std::span<const uint8_t> b);
  void str(std::string_view s);
  // No prefix: the reader must know the length from elsewhere.
  void raw(std::span<const uint8_t> b) { out_.insert(out_.end(), b.begin(), b.end()); }

  std::size_t size() const { return out_.size(); }

 private:
  void put_le(uint64_t v, int n);
  void length_prefix(std::size_t n);

  std::vector<uint8_t> &out_;
};

// Reads little-endian values from a non-owning view. Every getter returns false on
// truncated or invalid input, leaves its output untouched, and from then on the
// reader stays failed (all getters return false).
class ByteReader {
 public:
  enum class Error : uint8_t { kNone, kTruncated, kTooLong };

  explicit ByteReader(std::span<const uint8_t> in) : in_(in) {}

  bool u8(uint8_t &v);
  bool u16(uint16_t &v);
  bool u32(uint32_t &v);
  bool u64(uint64_t &v);
  bool i32(int32_t &v);
  // Length-prefixed; a declared length above max_len (kTooLong) or above the
  // remaining input (kTruncated) fails before anything is allocated.
  bool bytes(std::size_t max_len, std::vector<uint8_t> &out);
  bool str(std::size_t max_len, std::string &out);
  // Unprefixed: a view of the next n bytes, valid as long as the input is.
  bool raw(std::size_t n, std::span<const uint8_t> &out);
  // A QUIC variable-length integer (RFC 9000, 16: big-endian, its length in
  // the first byte's top two bits), as in QUIC frames.
  bool quic_varint(uint64_t &v);

  std::size_t remaining() const { return in_.size() - pos_; }
  std::size_t position() const { return pos_; }
  bool ok() const { return error_ == Error::kNone; }
  bool at_end() const { return ok() && remaining() == 0; }
  Error error() const { return error_; }

 private:
  bool get_le(uint64_t &v, std::size_t n);
  bool fail(Error e);
  // Reads a length prefix and checks it; on success the next len bytes exist.
  bool length_prefix(std::size_t max_len, std::size_t &len);

  std::span<const uint8_t> in_;
  std::size_t pos_ = 0;
  Error error_ = Error::kNone;
};

// Control messages. Each lists its fields once, in wire order, in fields(); the
// codec derives encoding, decoding and error messages ("truncated Hello.node_name")
// from that list. Strings are limited to kMaxStringLen bytes; longer ones are
// truncated when encoding so that a failing node can still report why.
// Type bytes are part of the wire format: never renumber, only add.

// First message on a mesh connection, in both directions.
struct Hello {
  static constexpr uint8_t kType = 0x01;
  static constexpr std::string_view kName = "Hello";
  uint16_t protocol_version = 0;
  uint64_t cluster_id = 0;
  uint32_t rank = 0;
  uint32_t world_size = 0;
  std::string node_name;

  template <class M, class F>
  static void fields(M &m, F &&f) {
    f("protocol_version", m.protocol_version);
    f("cluster_id", m.cluster_id);
    f("rank", m.rank);
    f("world_size", m.world_size);
    f("node_name", m.node_name);
  }
  bool operator==(const Hello &) const = default;
};

struct HelloAck {
  static constexpr uint8_t kType = 0x02;
  static constexpr std::string_view kName = "HelloAck";
  uint32_t rank = 0;

  template <class M, class F>
  static void fields(M &m, F &&f) {
    f("rank", m.rank);
  }
  bool operator==(const HelloAck &) const = default;
};

struct Heartbeat {
  static constexpr uint8_t kType = 0x03;
  static constexpr std::string_view kName = "Heartbeat";
  uint64_t seq = 0;
  uint64_t timestamp_ns = 0;

  template <class M, class F>
  static void fields(M &m, F &&f) {
    f("seq", m.seq);
    f("timestamp_ns", m.timestamp_ns);
  }
  bool operator==(const Heartbeat &) const = default;
};

// A rank aborts communicator comm_id; status is a nexar_status_t.
struct Abort {
  static constexpr uint8_t kType = 0x04;
  static constexpr std::string_view kName = "Abort";
  uint64_t comm_id = 0;
  uint32_t rank = 0;
  int32_t status = 0;
  std::string reason;

  template <class M, class F>
  static void fields(M &m, F &&f) {
    f("comm_id", m.comm_id);
    f("rank", m.rank);
    f("status", m.status);
    f("reason", m.reason);
  }
  bool operator==(const Abort &) const = default;
};

// Orderly shutdown: the peer is leaving, not failing.
struct Goodbye {
  static constexpr uint8_t kType = 0x05;
  static constexpr std::string_view kName = "Goodbye";
  uint32_t rank = 0;

  template <class M, class F>
  static void fields(M &m, F &&f) {
    f("rank", m.rank);
  }
  bool operator==(const Goodbye &) const = default;
};

// Ranks issued different collectives at the same op_seq (NEXAR_ERR_MISMATCH).
struct CollectiveMismatch {
  static constexpr uint8_t kType = 0x06;
  static constexpr std::string_view kName = "CollectiveMismatch";
  uint64_t comm_id = 0;
  uint64_t op_seq = 0;
  std::string detail;

  template <class M, class F>
  static void fields(M &m, F &&f) {
    f("comm_id", m.comm_id);
    f("op_seq", m.op_seq);
    f("detail", m.detail);
  }
  bool operator==(const CollectiveMismatch &) const = default;
};

// Both directions, after Hello (dialler) and HelloAck (listener): whether
// this rank takes a same-host channel (client/shm_host.h), and where to reach
// it. Ranks whose host keys (boot id, network namespace, uid) match and that
// both enable it set one up through the socket named here.
struct ShmOffer {
  static constexpr uint8_t kType = 0x0B;
  static constexpr std::string_view kName = "ShmOffer";
  uint8_t enabled = 0;
  std::string host_key;
  uint32_t pid = 0;
  std::string socket_name;

  template <class M, class F>
  static void fields(M &m, F &&f) {
    f("enabled", m.enabled);
    f("host_key", m.host_key);
    f("pid", m.pid);
    f("socket_name", m.socket_name);
  }
  bool operator==(const ShmOffer &) const = default;
};

// A rank whose collective coll_seq of comm_id waits long asks the other
// members what they are doing (the stall report); the engine answers, so a
// rank whose application thread hangs still does.
struct StallQuery {
  static constexpr uint8_t kType = 0x30;
  static constexpr std::string_view kName = "StallQuery";
  uint64_t comm_id = 0;
  uint64_t coll_seq = 0;

  template <class M, class F>
  static void fields(M &m, F &&f) {
    f("comm_id", m.comm_id);
    f("coll_seq", m.coll_seq);
  }
  bool operator==(const StallQuery &) const = default;
};

// The answer: the collective numbers this rank started and completed, the
// one it runs (0: none) and what it is, and the world rank it waits on there
// (-1: none).
struct StallAnswer {
  static constexpr uint8_t kType = 0x31;
  static constexpr std::string_view kName = "StallAnswer";
  uint64_t comm_id = 0;
  uint64_t coll_seq = 0;
  uint64_t last_started = 0;
  uint64_t last_completed = 0;
  uint64_t running_seq = 0;
  std::string running_what;
  int32_t waits_on = -1;

  template <class M, class F>
  static void fields(M &m, F &&f) {
    f("comm_id", m.comm_id);
    f("coll_seq", m.coll_seq);
    f("last_started", m.last_started);
    f("last_completed", m.last_completed);
    f("running_seq", m.running_seq);
    f("running_what", m.running_what);
    f("waits_on", m.waits_on);
  }
  bool operator==(const StallAnswer &) const = default;
};

// ---- Join protocol: between a worker and the seed, on a join connection ----
// (ALPN nexar-join/1; see cluster/join_protocol.h for the exchange.)

// Seed -> worker, first message: how the seed authenticates, and its proof
// that it knows the cluster token (HMAC over this session's exporter).
struct JoinChallenge {
  static constexpr uint8_t kType = 0x20;
  static constexpr std::string_view kName = "JoinChallenge";
  uint16_t protocol_version = 0;
  uint8_t auth = 0;         // 0 = open (no token), 1 = cluster token
  std::string seed_proof;   // 32 bytes with a token, empty when open
  uint32_t world_size = 0;  // the size of the world being formed
  uint64_t formation_ms_left = 0;

  template <class M, class F>
  static void fields(M &m, F &&f) {
    f("protocol_version", m.protocol_version);
    f("auth", m.auth);
    f("seed_proof", m.seed_proof);
    f("world_size", m.world_size);
    f("formation_ms_left", m.formation_ms_left);
  }
  bool operator==(const JoinChallenge &) const = default;
};

// Worker -> seed, once the seed's proof verified.
struct JoinRequest {
  static constexpr uint8_t kType = 0x21;
  static constexpr std::string_view kName = "JoinRequest";
  uint16_t protocol_version = 0;
  std::string worker_proof;       // 32 bytes with a token, empty when open
  int32_t rank = -1;              // the rank asked for, -1 = any
  uint32_t world_size = 0;        // the size the worker expects, 0 = any
  std::string advertise_address;  // numeric "ip:port" its peers dial
  std::string csr_pem;            // PKCS#10 request over the worker's own key
  std::string host_name;
  uint32_t pid = 0;

  template <class M, class F>
  static void fields(M &m, F &&f) {
    f("protocol_version", m.protocol_version);
    f("worker_proof", m.worker_proof);
    f("rank", m.rank);
    f("world_size", m.world_size);
    f("advertise_address", m.advertise_address);
    f("csr_pem", m.csr_pem);
    f("host_name", m.host_name);
    f("pid", m.pid);
  }
  bool operator==(const JoinRequest &) const = default;
};

// Seed -> worker: admitted; waiting for the rest of the world.
struct JoinAdmitted {
  static constexpr uint8_t kType = 0x22;
  static constexpr std::string_view kName = "JoinAdmitted";
  uint32_t joined = 0;
  uint32_t world_size = 0;

  template <class M, class F>
  static void fields(M &m, F &&f) {
    f("joined", m.joined);
    f("world_size", m.world_size);
  }
  bool operator==(const JoinAdmitted &) const = default;
};

// Seed -> worker once the world is complete: its rank, its certificate and
// where every rank listens (peers[r] is rank r's "ip:port").
struct Welcome {
  static constexpr uint8_t kType = 0x23;
  static constexpr std::string_view kName = "Welcome";
  uint32_t rank = 0;
  uint32_t world_size = 0;
  uint64_t cluster_id = 0;
  std::string ca_pem;
  std::string cert_pem;
  std::vector<std::string> peers;

  template <class M, class F>
  static void fields(M &m, F &&f) {
    f("rank", m.rank);
    f("world_size", m.world_size);
    f("cluster_id", m.cluster_id);
    f("ca_pem", m.ca_pem);
    f("cert_pem", m.cert_pem);
    f("peers", m.peers);
  }
  bool operator==(const Welcome &) const = default;
};

// Worker -> seed: its mesh is complete. world_id is the cluster_id of the
// Welcome it formed: a report from an earlier attempt of a grow, still in
// flight when the seed welcomed again, must not count for the new one.
struct MeshReady {
  static constexpr uint8_t kType = 0x24;
  static constexpr std::string_view kName = "MeshReady";
  uint32_t rank = 0;
  uint64_t world_id = 0;

  template <class M, class F>
  static void fields(M &m, F &&f) {
    f("rank", m.rank);
    f("world_id", m.world_id);
  }
  bool operator==(const MeshReady &) const = default;
};

// Either direction: the join failed (a refusal, a worker that could not
// verify the seed, a formation that failed). status is a nexar_status_t.
// world_id names the grown world whose mesh failed (0: not about a grown
// world), so that an elastic seed tells a late report of an attempt it
// already replaced from one about the current attempt.
struct JoinError {
  static constexpr uint8_t kType = 0x25;
  static constexpr std::string_view kName = "JoinError";
  int32_t status = 0;
  int32_t failed_rank = -1;
  std::string reason;
  uint64_t world_id = 0;

  template <class M, class F>
  static void fields(M &m, F &&f) {
    f("status", m.status);
    f("failed_rank", m.failed_rank);
    f("reason", m.reason);
    f("world_id", m.world_id);
  }
  bool operator==(const JoinError &) const = default;
};

// ---- Elastic membership: between a member or a joiner and an elastic seed ----

// Seed -> every member: how many authenticated joiners wait to be admitted.
struct PendingJoins {
  static constexpr uint8_t kType = 0x26;
  static constexpr std::string_view kName = "PendingJoins";
  uint32_t count = 0;

  template <class M, class F>
  static void fields(M &m, F &&f) {
    f("count", m.count);
  }
  bool operator==(const PendingJoins &) const = default;
};

// Member -> seed: this member's part of a grow of communicator comm_id of
// world world_id (grow number grow_seq there): its rank and size there, the
// most joiners it admits, and its address and certificate request in the
// grown world. The seed answers every member of one grow with a Welcome to
// the same grown world, or a JoinError.
struct GrowRequest {
  static constexpr uint8_t kType = 0x27;
  static constexpr std::string_view kName = "GrowRequest";
  uint64_t world_id = 0;
  uint64_t comm_id = 0;
  uint64_t grow_seq = 0;
  uint32_t rank = 0;
  uint32_t size = 0;
  uint32_t max_new = 0;
  uint64_t timeout_ms = 0;
  std::string advertise_address;
  std::string csr_pem;

  template <class M, class F>
  static void fields(M &m, F &&f) {
    f("world_id", m.world_id);
    f("comm_id", m.comm_id);
    f("grow_seq", m.grow_seq);
    f("rank", m.rank);
    f("size", m.size);
    f("max_new", m.max_new);
    f("timeout_ms", m.timeout_ms);
    f("advertise_address", m.advertise_address);
    f("csr_pem", m.csr_pem);
  }
  bool operator==(const GrowRequest &) const = default;
};

// ---- Failures (client/comm_faults.h, client/agreement.h) ----

// A rank declared world rank `rank` failed (silence past the heartbeat
// timeout, a lost connection) and tells every other rank, so that every
// survivor names the same culprit.
struct PeerFailed {
  static constexpr uint8_t kType = 0x07;
  static constexpr std::string_view kName = "PeerFailed";
  uint32_t rank = 0;
  int32_t status = 0;
  std::string reason;

  template <class M, class F>
  static void fields(M &m, F &&f) {
    f("rank", m.rank);
    f("status", m.status);
    f("reason", m.reason);
  }
  bool operator==(const PeerFailed &) const = default;
};

// The sender destroyed its communicator comm_id after starting collective
// number last_coll_seq there.
struct CommLeft {
  static constexpr uint8_t kType = 0x08;
  static constexpr std::string_view kName = "CommLeft";
  uint64_t comm_id = 0;
  uint64_t last_coll_seq = 0;

  template <class M, class F>
  static void fields(M &m, F &&f) {
    f("comm_id", m.comm_id);
    f("last_coll_seq", m.last_coll_seq);
  }
  bool operator==(const CommLeft &) const = default;
};

// comm_id is revoked; every member forwards this once to every other member.
// failed: the ranks the sender knows failed (little-endian u32 each), so that
// a member the revocation reaches first still names them.
struct Revoke {
  static constexpr uint8_t kType = 0x09;
  static constexpr std::string_view kName = "Revoke";
  uint64_t comm_id = 0;
  std::string failed;

  template <class M, class F>
  static void fields(M &m, F &&f) {
    f("comm_id", m.comm_id);
    f("failed", m.failed);
  }
  bool operator==(const Revoke &) const = default;
};

// One message of agreement number `round` on comm_id (client/agreement.h):
// a vote (flags, the sender's failed and acknowledged ranks), a decision
// (flags, status, failed ranks), or a new coordinator's poll (its failed
// ranks). Rank lists are little-endian u32 ranks of the communicator.
struct AgreeMsg {
  static constexpr uint8_t kType = 0x0A;
  static constexpr std::string_view kName = "AgreeMsg";
  uint64_t comm_id = 0;
  uint64_t round = 0;
  uint8_t type = 0;
  uint64_t flags = 0;
  int32_t status = 0;
  std::string failed;
  std::string acked;

  template <class M, class F>
  static void fields(M &m, F &&f) {
    f("comm_id", m.comm_id);
    f("round", m.round);
    f("type", m.type);
    f("flags", m.flags);
    f("status", m.status);
    f("failed", m.failed);
    f("acked", m.acked);
  }
  bool operator==(const AgreeMsg &) const = default;
};

// Both directions (dialler: before Hello; listener: after HelloAck, before
// ShmOffer): the mesh graph this rank uses
// (client/topology.h). Ranks whose digests differ would route differently,
// so formation fails naming both. Also worker -> seed after the Welcome, and
// back once every rank's digest is the same (join_protocol.h).
struct TopologyDigest {
  static constexpr uint8_t kType = 0x40;
  static constexpr std::string_view kName = "TopologyDigest";
  uint32_t rank = 0;
  uint64_t digest = 0;
  std::string name;  // "k_regular:4", for the error message

  template <class M, class F>
  static void fields(M &m, F &&f) {
    f("rank", m.rank);
    f("digest", m.digest);
    f("name", m.name);
  }
  bool operator==(const TopologyDigest &) const = default;
};

using ControlMessage =
    std::variant<Hello, HelloAck, Heartbeat, Abort, Goodbye, CollectiveMismatch, JoinChallenge,
                 JoinRequest, JoinAdmitted, Welcome, MeshReady, JoinError, ShmOffer, StallQuery,
                 StallAnswer, PeerFailed, CommLeft, Revoke, AgreeMsg, PendingJoins, GrowRequest,
                 TopologyDigest>;

// Exactly one of message / error is set.
struct DecodeResult {
  std::optional<ControlMessage> message;
  std::string error;  // what was wrong, e.g. "truncated Hello.node_name"

  explicit operator bool() const { return message.has_value(); }
};

// [version u8][type u8][fields...]
std::vector<uint8_t> encode_control(const ControlMessage &msg);
// Rejects input above kMaxControlMessage, a different version, an unknown type,
// any truncated or over-limit field and trailing bytes.
DecodeResult decode_control(std::span<const uint8_t> in);

std::string_view control_name(const ControlMessage &msg);

}  // namespace nexar::wire
