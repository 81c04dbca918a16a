// The receive side of a QuicConnection: every stream the peer opened, parsed
// into its lane byte, then frame headers, each followed by its payload. A
// control frame's payload is gathered and handed to the ConnectionHandler
// whole; any other frame's payload goes to the MessageSink the handler
// chooses for it, as it arrives. QUIC receive credit is returned as the sink
// consumes bytes, so a consumer that falls behind slows the sender instead
// of growing memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "transport/frame.h"

namespace nexar {

class ConnectionHandler;
class QuicConnection;
struct TransportStats;

// Receives the payload of one incoming message.
class MessageSink {
 public:
  virtual ~MessageSink() = default;
  // Takes the next len bytes. Returns how many of them can be credited back
  // to the peer now; the rest is credited later through release_credit().
  virtual size_t write(const uint8_t *data, size_t len) = 0;
  // Every payload byte has arrived (or the stream died: ok == false).
  virtual void finish(bool ok) = 0;
  // Where the next len bytes would be copied unchanged, if write() would
  // copy them into memory that is there already (a posted receive): the
  // packet cipher may open them there instead. Null: give them to write().
  virtual uint8_t *place(size_t len) {
    (void)len;
    return nullptr;
  }
  // The next len bytes were opened at `to`, where place(len) pointed when
  // their packet arrived: takes them, setting *credit as write() returns it,
  // unless they no longer belong there (false: they are lost).
  virtual bool placed(const uint8_t *to, size_t len, size_t *credit) {
    (void)to, (void)len, (void)credit;
    return false;
  }
};

// Stream data that the packet being read had opened straight into its
// receive (CipherFastPath), ahead of ngtcp2 delivering it: ngtcp2's buffer
// holds no plaintext for those bytes.
struct Placement {
  int64_t stream_id = -1;
  uint64_t offset = 0;
  size_t len = 0;  // 0: none
  const uint8_t *to = nullptr;
};

class ReceiveFramer {
 public:
  // conn is what the handler is told about; stats (the endpoint's) count
  // streams, messages and bytes received.
  ReceiveFramer(QuicConnection *conn, ConnectionHandler *handler, TransportStats *stats);
  ReceiveFramer(const ReceiveFramer &) = delete;
  ReceiveFramer &operator=(const ReceiveFramer &) = delete;

  // Takes len bytes of stream stream_id at offset, as ngtcp2 delivers them
  // (in order); `placed` is what of them was opened into its receive already.
  // Returns the bytes to credit back to the peer now. On a peer's protocol
  // violation, or bytes opened for a receive that no longer takes them, sets
  // *failure and returns at once: the connection must fail. Stops as well
  // once the handler closed the connection.
  size_t on_data(int64_t stream_id, uint64_t offset, const uint8_t *data, size_t len,
                 Placement placed, Status *failure);
  // Where the first bytes (at most len) of stream stream_id's data at offset
  // can be opened straight into, if ngtcp2 will deliver them next and they
  // lie in the payload of a message whose sink takes them there; *n says how
  // many. Null otherwise (PacketCipher::Placer::place).
  uint8_t *place(int64_t stream_id, uint64_t offset, size_t len, size_t *n);
  // Tells every sink a message is still arriving for that it never will.
  void fail_sinks();

 private:
  struct Stream {
    bool have_lane = false;
    uint8_t lane = 0;
    uint8_t header[wire::kFrameHeaderSize + wire::kRelayPrefixSize];
    size_t header_fill = 0;
    bool in_payload = false;
    wire::FrameHeader frame;
    uint64_t remaining = 0;
    MessageSink *sink = nullptr;
    std::vector<uint8_t> control;
    uint64_t next_offset = 0;  // stream offset of the next byte ngtcp2 delivers
  };

  QuicConnection *conn_;
  ConnectionHandler *handler_;
  TransportStats *stats_;
  std::unordered_map<int64_t, Stream> streams_;
};

}  // namespace nexar
