// Drives a real ReceiveFramer (transport/receive_framer.h) with stream data a
// peer chose, as ngtcp2 delivers it: in order per stream, in chunks, with
// some chunks opened in place first (CipherFastPath), as the packet cipher
// does when the framer offers a place. The input is a list of records:
//
//   [stream u8][length u8][length bytes]
//
// The stream byte's low two bits choose one of four streams; its top bit asks
// for the chunk to be opened in place when the framer offers a place.
// Every message the framer hands out must get exactly its header's length,
// then one finish(); every control message must be within its limit.
#pragma once

#include <cstring>
#include <memory>
#include <vector>

#include "engine/event_loop.h"
#include "fuzz_check.h"
#include "transport/codec.h"
#include "transport/quic_connection.h"
#include "transport/quic_endpoint.h"
#include "transport/receive_framer.h"

namespace nexar_fuzz {

using namespace nexar;

// Takes one message's payload and checks it gets exactly that much.
class CheckingSink : public MessageSink {
 public:
  explicit CheckingSink(uint64_t length) : length_(length) {
    // Room to be opened into, as a posted receive offers (small ones only).
    if (length <= (64u << 10)) room_.resize(static_cast<size_t>(length));
  }
  size_t write(const uint8_t *data, size_t len) override {
    FUZZ_CHECK(!finished_ && len <= length_ - received_);
    if (!room_.empty()) memcpy(room_.data() + received_, data, len);
    received_ += len;
    return len;
  }
  void finish(bool ok) override {
    FUZZ_CHECK(!finished_);
    finished_ = true;
    if (ok) FUZZ_CHECK(received_ == length_);
  }
  uint8_t *place(size_t len) override {
    if (room_.empty() || len > length_ - received_) return nullptr;
    return room_.data() + received_;
  }
  bool placed(const uint8_t *to, size_t len, size_t *credit) override {
    FUZZ_CHECK(to == room_.data() + received_ && len <= length_ - received_);
    received_ += len;
    *credit = len;
    return true;
  }
  bool finished() const { return finished_; }

 private:
  uint64_t length_;
  uint64_t received_ = 0;
  bool finished_ = false;
  std::vector<uint8_t> room_;
};

class CheckingHandler : public ConnectionHandler {
 public:
  void on_handshake_done(QuicConnection *, const NodeIdentity &) override {}
  void on_control(QuicConnection *, std::span<const uint8_t> message) override {
    FUZZ_CHECK(message.size() <= wire::kMaxControlBytes);
    (void)wire::decode_control(message);
  }
  MessageSink *on_message(QuicConnection *, int64_t, const wire::FrameHeader &h) override {
    FUZZ_CHECK(h.kind != wire::FrameKind::Control);
    if (check_frame) check_frame(h);
    sinks.push_back(std::make_unique<CheckingSink>(h.length));
    return sinks.back().get();
  }
  void on_closed(QuicConnection *, const Status &) override {}

  void (*check_frame)(const wire::FrameHeader &) = nullptr;
  std::vector<std::unique_ptr<CheckingSink>> sinks;
};

// The engine parts a QuicConnection needs, made once per process.
struct FramerWorld {
  EventLoop loop{0};
  CheckingHandler handler;
  QuicEndpoint endpoint{&loop, &handler, 1, nullptr, 1000, 1000, 0};
  TransportStats stats;
};

// lane_of_stream: the lane byte each stream starts with, or 0 to take it
// from the input. check_frame (optional) checks each frame handed on.
inline void drive_framer(const uint8_t *data, size_t size, const uint8_t lane_of_stream[4],
                         void (*check_frame)(const wire::FrameHeader &) = nullptr) {
  static FramerWorld *world = new FramerWorld;  // lives as long as the process
  CheckingHandler &handler = world->handler;
  handler.sinks.clear();
  handler.check_frame = check_frame;
  QuicConnection conn(&world->endpoint, &handler, false, 7);
  ReceiveFramer framer(&conn, &handler, &world->stats);
  uint64_t offsets[4] = {0, 0, 0, 0};
  std::vector<uint8_t> chunk;
  size_t pos = 0;
  while (pos + 2 <= size) {
    const uint8_t sel = data[pos];
    size_t len = data[pos + 1];
    pos += 2;
    len = std::min(len, size - pos);
    const unsigned s = sel & 3;
    const int64_t sid = 3 + 4 * static_cast<int64_t>(s);  // server-initiated uni streams
    chunk.clear();
    if (offsets[s] == 0 && lane_of_stream[s] != 0) chunk.push_back(lane_of_stream[s]);
    chunk.insert(chunk.end(), data + pos, data + pos + len);
    pos += len;
    if (chunk.empty()) continue;
    Placement placed;
    if (sel & 0x80) {
      size_t n = 0;
      uint8_t *to = framer.place(sid, offsets[s], chunk.size(), &n);
      if (to) {
        FUZZ_CHECK(n > 0 && n <= chunk.size());
        memcpy(to, chunk.data(), n);
        placed = {sid, offsets[s], n, to};
      }
    }
    Status failure;
    const size_t credit =
        framer.on_data(sid, offsets[s], chunk.data(), chunk.size(), placed, &failure);
    FUZZ_CHECK(credit <= chunk.size());
    offsets[s] += chunk.size();
    if (!failure) {
      FUZZ_CHECK(!failure.message.empty());
      break;  // the connection fails here
    }
  }
  framer.fail_sinks();
  for (const auto &sink : handler.sinks)
    FUZZ_CHECK(sink->finished());
}

}  // namespace nexar_fuzz
