#include "cluster/join_protocol.h"

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/log.h"
#include "transport/quic_connection.h"

namespace nexar::join {

Status session_secret(const QuicConnection *c, Secret *out) {
  return c->export_keying_material(kExporterLabel, out->data(), out->size());
}

std::string proof(const std::string &token, const Secret &secret, std::string_view role) {
  std::vector<uint8_t> msg(secret.begin(), secret.end());
  msg.insert(msg.end(), role.begin(), role.end());
  uint8_t mac[kProofLen];
  if (gnutls_hmac_fast(GNUTLS_MAC_SHA256, token.data(), token.size(), msg.data(), msg.size(), mac) <
      0)
    return {};
  return std::string(reinterpret_cast<const char *>(mac), sizeof mac);
}

bool proof_matches(const std::string &token, const Secret &secret, std::string_view role,
                   const std::string &received) {
  const std::string expected = proof(token, secret, role);
  // The length is public (always kProofLen); the content is compared in
  // constant time.
  if (expected.size() != kProofLen || received.size() != kProofLen) return false;
  return gnutls_memcmp(expected.data(), received.data(), kProofLen) == 0;
}

Status load_token(const std::string &token, const std::string &token_file, std::string *out) {
  if (!token.empty()) {
    *out = token;
    return {};
  }
  out->clear();
  if (token_file.empty()) return {};
  std::ifstream f(token_file, std::ios::binary);
  if (!f)
    return error(NEXAR_ERR_INVALID_ARGUMENT, format("cannot read the cluster token file %s: %s",
                                                    token_file.c_str(), strerror(errno)));
  std::ostringstream ss;
  ss << f.rdbuf();
  std::string t = ss.str();
  while (!t.empty() &&
         (t.back() == '\n' || t.back() == '\r' || t.back() == ' ' || t.back() == '\t'))
    t.pop_back();
  if (t.empty())
    return error(NEXAR_ERR_INVALID_ARGUMENT,
                 format("the cluster token file %s is empty", token_file.c_str()));
  struct stat st;
  if (stat(token_file.c_str(), &st) == 0 && (st.st_mode & 077))
    LOG_WARN("the cluster token file %s is readable by other users (mode %03o)", token_file.c_str(),
             static_cast<unsigned>(st.st_mode & 0777));
  *out = std::move(t);
  return {};
}

}  // namespace nexar::join
