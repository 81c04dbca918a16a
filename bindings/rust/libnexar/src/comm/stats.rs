//! Counters of a communicator's engine.

use libnexar_sys as sys;

/// Counters of a communicator's engine (`nexar_stats_t`), shared by the
/// communicators split from it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Payload bytes handed to the transport.
    pub bytes_sent: u64,
    /// Payload bytes that arrived.
    pub bytes_received: u64,
    /// Messages sent.
    pub messages_sent: u64,
    /// Messages received.
    pub messages_received: u64,
    /// QUIC streams opened by this engine, all peers.
    pub streams_opened: u64,
    /// QUIC streams opened by peers.
    pub streams_accepted: u64,
    /// (peer, tag) match state alive right now.
    pub pending_tags: u64,
    /// Bytes that arrived before their receive, buffered now.
    pub unexpected_bytes: u64,
    /// Live QUIC connections.
    pub connections: u64,
    /// RPC requests answered by this engine (any outcome).
    pub rpc_requests_served: u64,
    /// RPC responses nobody waited for.
    pub rpc_responses_dropped: u64,
    /// Payload bytes sent to non-neighbours via relay.
    pub relay_bytes_sent: u64,
    /// Payload bytes forwarded for other ranks.
    pub relay_bytes_forwarded: u64,
    /// Malformed, misrouted or undeliverable relay frames.
    pub relay_frames_dropped: u64,
    /// Bytes held now for forwarding.
    pub relay_bytes_held: u64,
    /// QUIC packets sealed or opened with ipsec-mb's AES-GCM.
    pub packets_fast_aead: u64,
    /// Received payload bytes decrypted straight into the receive buffer.
    pub bytes_opened_in_place: u64,
    /// Sent payload bytes encrypted straight from the send buffer.
    pub bytes_sealed_in_place: u64,
    /// Peers reached through shared memory.
    pub shm_pairs: u64,
    /// Payload bytes written into shared memory (not in `bytes_sent`).
    pub shm_bytes_sent: u64,
    /// Payload bytes read from peers' shared memory.
    pub shm_bytes_received: u64,
    /// Collectives run on shared memory, reading the peers' segments.
    pub shm_collectives: u64,
    /// Payload bytes peers read straight from this rank's `mem_alloc` buffers.
    pub shm_bytes_by_reference: u64,
    /// Peers refused at the handshake (docs/security.md).
    pub connections_refused: u64,
    /// Connections closed because the peer broke the wire protocol.
    pub protocol_violations: u64,
    /// Payload bytes collectives copied straight out of same-host peers'
    /// processes (`NEXAR_SHM_CMA`).
    pub shm_bytes_read_directly: u64,
}

impl From<sys::nexar_stats_t> for Stats {
    fn from(s: sys::nexar_stats_t) -> Stats {
        Stats {
            bytes_sent: s.bytes_sent,
            bytes_received: s.bytes_received,
            messages_sent: s.messages_sent,
            messages_received: s.messages_received,
            streams_opened: s.streams_opened,
            streams_accepted: s.streams_accepted,
            pending_tags: s.pending_tags,
            unexpected_bytes: s.unexpected_bytes,
            connections: s.connections,
            rpc_requests_served: s.rpc_requests_served,
            rpc_responses_dropped: s.rpc_responses_dropped,
            relay_bytes_sent: s.relay_bytes_sent,
            relay_bytes_forwarded: s.relay_bytes_forwarded,
            relay_frames_dropped: s.relay_frames_dropped,
            relay_bytes_held: s.relay_bytes_held,
            packets_fast_aead: s.packets_fast_aead,
            bytes_opened_in_place: s.bytes_opened_in_place,
            bytes_sealed_in_place: s.bytes_sealed_in_place,
            shm_pairs: s.shm_pairs,
            shm_bytes_sent: s.shm_bytes_sent,
            shm_bytes_received: s.shm_bytes_received,
            shm_collectives: s.shm_collectives,
            shm_bytes_by_reference: s.shm_bytes_by_reference,
            connections_refused: s.connections_refused,
            protocol_violations: s.protocol_violations,
            shm_bytes_read_directly: s.shm_bytes_read_directly,
        }
    }
}
