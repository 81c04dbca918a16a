// Writes the fuzz harnesses' seed corpora (tests/fuzz/corpus/<harness>/) from
// the real encoders: control and join messages (with a real certificate
// request, CA and node certificate), frame headers, relay frames, stream
// data as the framer receives it, and QUIC payloads (RFC 9000 frames).
//   fuzz_make_corpus tests/fuzz/corpus
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "transport/codec.h"
#include "transport/frame.h"
#include "transport/tls_credentials.h"
#include "worker_key.h"

using namespace nexar;
using Bytes = std::vector<uint8_t>;
namespace fs = std::filesystem;

namespace {

fs::path g_root;

void put(const std::string &harness, const std::string &name, const Bytes &b) {
  const fs::path dir = g_root / harness;
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary)
      .write(reinterpret_cast<const char *>(b.data()), static_cast<std::streamsize>(b.size()));
}

Bytes header(wire::FrameKind kind, uint64_t length, uint32_t check = 0, uint64_t tag = 5) {
  wire::FrameHeader h;
  h.kind = kind;
  h.comm_id = 0x1234;
  h.tag = tag;
  h.length = length;
  h.check = check;
  Bytes out(wire::kFrameHeaderSize);
  wire::encode_frame_header(h, out.data());
  return out;
}

Bytes prefix(uint8_t inner_kind, uint8_t flags, uint64_t total) {
  wire::RelayPrefix p;
  p.origin = 0;
  p.dest = 2;
  p.ttl = 4;
  p.inner_kind = inner_kind;
  p.flags = flags;
  p.send_id = 9;
  p.total = total;
  Bytes out(wire::kRelayPrefixSize);
  wire::encode_relay_prefix(p, out.data());
  return out;
}

// Stream bytes as framer_driver.h reads them: records of at most 255 bytes.
Bytes records(unsigned stream, const Bytes &bytes, uint8_t place = 0) {
  Bytes out;
  for (size_t i = 0; i < bytes.size(); i += 255) {
    const size_t n = std::min<size_t>(255, bytes.size() - i);
    out.push_back(static_cast<uint8_t>(stream | place));
    out.push_back(static_cast<uint8_t>(n));
    out.insert(out.end(), bytes.begin() + i, bytes.begin() + i + n);
  }
  return out;
}

Bytes cat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const auto &p : parts)
    out.insert(out.end(), p.begin(), p.end());
  return out;
}

void varint(Bytes &out, uint64_t v) {
  if (v < 64) {
    out.push_back(static_cast<uint8_t>(v));
  } else if (v < 16384) {
    out.push_back(static_cast<uint8_t>(0x40 | v >> 8));
    out.push_back(static_cast<uint8_t>(v));
  } else {
    out.push_back(static_cast<uint8_t>(0x80 | v >> 24));
    for (int s = 16; s >= 0; s -= 8)
      out.push_back(static_cast<uint8_t>(v >> s));
  }
}

int control_and_join() {
  X509Key key;
  std::unique_ptr<ClusterCa> ca;
  X509Cert cert;
  std::string csr, ca_pem, cert_pem;
  if (!nexar_fuzz::load_worker_key(&key) || !make_csr_pem(key.get(), &csr) ||
      !ClusterCa::generate(77, &ca) || !ca->issue_node_cert(1, key.get(), &cert) ||
      !cert_to_pem(ca->cert(), &ca_pem) || !cert_to_pem(cert.get(), &cert_pem)) {
    std::fprintf(stderr, "fuzz_make_corpus: could not make the certificates\n");
    return 1;
  }
  const std::vector<std::pair<std::string, wire::ControlMessage>> msgs = {
      {"hello", wire::Hello{1, 77, 3, 4, "node-a"}},
      {"hello_ack", wire::HelloAck{3}},
      {"heartbeat", wire::Heartbeat{12, 123456789}},
      {"abort", wire::Abort{0x1234, 2, -7, "rank 2 gave up"}},
      {"goodbye", wire::Goodbye{1}},
      {"mismatch", wire::CollectiveMismatch{0x1234, 8, "allreduce vs broadcast"}},
      {"join_challenge", wire::JoinChallenge{1, 1, std::string(32, 's'), 4, 60000}},
      {"join_request",
       wire::JoinRequest{1, std::string(32, 'w'), -1, 4, "127.0.0.1:4000", csr, "host-a", 4242}},
      {"join_admitted", wire::JoinAdmitted{2, 4}},
      {"welcome", wire::Welcome{1, 2, 77, ca_pem, cert_pem, {"127.0.0.1:3999", "127.0.0.1:4000"}}},
      {"mesh_ready", wire::MeshReady{1, 0x1234abcdULL}},
      {"join_error", wire::JoinError{-5, 2, "rank 2 is gone\nforged line", 0x5eed5eedULL}},
      {"shm_offer", wire::ShmOffer{1, "boot/4026531840/1000", 4242, "nexar-shm-00ff"}},
  };
  for (const auto &[name, m] : msgs) {
    const Bytes enc = wire::encode_control(m);
    put("control_codec", name, enc);
    if (enc[1] >= wire::JoinChallenge::kType) {
      // join_messages.cpp: a type index, then the fields.
      Bytes j{static_cast<uint8_t>(enc[1] - wire::JoinChallenge::kType)};
      j.insert(j.end(), enc.begin() + 2, enc.end());
      put("join_messages", name, j);
    }
  }
  // Stream data: a control message, then a P2P message, on the control and data lanes.
  const Bytes hello = wire::encode_control(msgs[0].second);
  const Bytes control = cat({{static_cast<uint8_t>(wire::Lane::Control)},
                             header(wire::FrameKind::Control, hello.size()),
                             hello});
  const Bytes p2p = cat({{static_cast<uint8_t>(wire::Lane::Data)},
                         header(wire::FrameKind::P2P, 300),
                         Bytes(300, 0xab),
                         header(wire::FrameKind::Collective, 40, 0xfeed),
                         Bytes(40, 1)});
  put("receive_framer", "control_then_p2p", cat({records(0, control), records(1, p2p)}));
  put("receive_framer", "p2p_in_place", records(2, p2p, 0x80));
  const Bytes relay = cat({{static_cast<uint8_t>(wire::Lane::Relay)},
                           header(wire::FrameKind::Relay, 32 + 20),
                           prefix(2, wire::kRelayFirst | wire::kRelayLast, 20),
                           Bytes(20, 7)});
  put("receive_framer", "relay", records(3, relay));
  // RPC lanes (rpc_frames.cpp puts the lane bytes): streams 0-1 requests, 2-3 responses.
  put("rpc_frames", "request_and_response",
      cat({records(0, cat({header(wire::FrameKind::RpcRequest, 16, 3, 1), Bytes(16, 5)})),
           records(2, cat({header(wire::FrameKind::RpcResponse, 8, 0, 1), Bytes(8, 6)}))}));
  put("rpc_frames", "error_response",
      records(3, cat({header(wire::FrameKind::RpcResponse, 11, static_cast<uint32_t>(-14), 2),
                      Bytes{'n', 'o', ' ', 'h', 'a', 'n', 'd', 'l', 'e', 'r', '!'}})));
  return 0;
}

void frames() {
  using wire::FrameKind;
  put("frame_header", "control", header(FrameKind::Control, 100));
  put("frame_header", "p2p", header(FrameKind::P2P, 1 << 20));
  put("frame_header", "collective", header(FrameKind::Collective, 4096, 0xdeadbeef));
  put("frame_header", "rpc_request", header(FrameKind::RpcRequest, 64, 7));
  put("frame_header", "rpc_response", header(FrameKind::RpcResponse, 0, 0));
  put("frame_header", "relay", header(FrameKind::Relay, 32 + 1000));
  const Bytes relay = header(FrameKind::Relay, 32 + 1000);
  put("relay_frame", "first_last_p2p",
      cat({relay, prefix(2, wire::kRelayFirst | wire::kRelayLast | wire::kRelayWantAck, 1000)}));
  put("relay_frame", "middle_chunk", cat({relay, prefix(3, 0, 1 << 20)}));
  put("relay_frame", "control", cat({relay, prefix(1, wire::kRelayFirst | wire::kRelayLast, 100)}));
  put("relay_frame", "ack", cat({header(FrameKind::Relay, 32), prefix(wire::kRelayAck, 0, 0)}));
  put("relay_frame", "rank_lost",
      cat({header(FrameKind::Relay, 32), prefix(wire::kRelayRankLost, 0, 3)}));
  // shm_ring scripts: a byte n (not a multiple of 5), then n bytes written
  // into the ring and published.
  auto write_op = [](const Bytes &b) { return cat({Bytes{static_cast<uint8_t>(b.size())}, b}); };
  put("shm_ring", "p2p_then_collective",
      cat({write_op(header(FrameKind::P2P, 99)), write_op(Bytes(99, 0x5a)),
           write_op(header(FrameKind::Collective, 0, 0x1234))}));
  Bytes big;
  for (int i = 0; i < 40; ++i)
    big = cat({big, write_op(Bytes(251, static_cast<uint8_t>(i)))});
  put("shm_ring", "wraps_the_ring",
      cat({write_op(header(FrameKind::RpcRequest, 40 * 251, 7)), big}));
}

// QUIC payloads: [2 bytes held back][frames].
void quic_payloads() {
  Bytes p{0, 0};
  p.push_back(0x02);  // ACK: largest 100, delay 5, 1 more range
  varint(p, 100), varint(p, 5), varint(p, 1), varint(p, 3), varint(p, 2), varint(p, 4);
  p.push_back(0x01);  // PING
  p.push_back(0x06);  // CRYPTO offset 0, 4 bytes
  varint(p, 0), varint(p, 4), p.insert(p.end(), 4, 0x16);
  p.push_back(0x0e);  // STREAM with offset and length
  varint(p, 3), varint(p, 70000), varint(p, 10), p.insert(p.end(), 10, 0x55);
  p.push_back(0x18);  // NEW_CONNECTION_ID
  varint(p, 1), varint(p, 0), p.push_back(8), p.insert(p.end(), 8 + 16, 0x33);
  p.push_back(0x0a);  // STREAM with length, offset 0
  varint(p, 7), varint(p, 5), p.insert(p.end(), 5, 0x66);
  p.push_back(0x0c);  // STREAM with offset, to the end of the payload
  varint(p, 11), varint(p, 12), p.insert(p.end(), 30, 0x77);
  put("stream_frame_scan", "mixed", p);
  Bytes q = p;
  q[0] = 20;  // the last 20 bytes not given
  put("stream_frame_scan", "mixed_held_back", q);
  Bytes d{0, 0, 0x10};  // MAX_DATA, then DATAGRAM with length, then RESET_STREAM
  varint(d, 1 << 20);
  d.push_back(0x31), varint(d, 3), d.insert(d.end(), 3, 0x44);
  d.push_back(0x04), varint(d, 3), varint(d, 1), varint(d, 100);
  d.push_back(0x1c), varint(d, 10), varint(d, 0), varint(d, 3), d.insert(d.end(), {'b', 'y', 'e'});
  d.push_back(0x30), d.insert(d.end(), 9, 0x99);  // DATAGRAM to the end
  put("stream_frame_scan", "control_frames", d);
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_make_corpus <corpus directory>\n");
    return 2;
  }
  g_root = argv[1];
  if (control_and_join() != 0) return 1;
  frames();
  quic_payloads();
  return 0;
}
