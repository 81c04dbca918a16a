// The Unix socket of a same-host pair: SOCK_SEQPACKET in the abstract
// namespace (no file to leave behind), carrying the setup packets and the
// segments' descriptors (SCM_RIGHTS), then one-byte doorbells for the life of
// the pair. Its hang-up tells the survivor at once that the peer is gone.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/unique_fd.h"

namespace nexar {

// Listens on a fresh random abstract name (*name, without the leading NUL).
Status shm_listen(UniqueFd *out, std::string *name);
// Connects (non-blocking) to the abstract name a peer announced.
Status shm_connect(const std::string &name, UniqueFd *out);
// Accepts one pending connection (non-blocking); an invalid fd if none.
UniqueFd shm_accept(int listener);
// Sends one packet, with pass_fd attached when >= 0.
Status shm_send_packet(int fd, std::span<const uint8_t> bytes, int pass_fd = -1);

enum class ShmRecv { Packet, WouldBlock, HungUp, Error };
// Receives one packet (at most max bytes; longer ones are an error), and
// the descriptor it carried, if any.
ShmRecv shm_recv_packet(int fd, size_t max, std::vector<uint8_t> *out, UniqueFd *passed,
                        std::string *why);
// The connected peer's uid and pid (SO_PEERCRED).
Status shm_peer_credentials(int fd, uint32_t *uid, uint32_t *pid);

}  // namespace nexar
