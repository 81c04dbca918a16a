// Certificates made at run time with GnuTLS: a per-cluster CA and a leaf per
// node. Each leaf names its cluster (O=nexar-cluster-<id>) and its rank
// (CN=nexar-rank-<r>); both ends of a mesh connection verify the other
// against the CA (mutual TLS) and then check the rank it claims.
#pragma once

#include <gnutls/gnutls.h>
#include <gnutls/x509.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

namespace nexar {

struct X509CertDeleter {
  void operator()(gnutls_x509_crt_int *c) const { gnutls_x509_crt_deinit(c); }
};
struct X509KeyDeleter {
  void operator()(gnutls_x509_privkey_int *k) const { gnutls_x509_privkey_deinit(k); }
};
using X509Cert = std::unique_ptr<gnutls_x509_crt_int, X509CertDeleter>;
using X509Key = std::unique_ptr<gnutls_x509_privkey_int, X509KeyDeleter>;

struct NodeIdentity {
  uint64_t cluster_id = 0;
  uint32_t rank = 0;
};

Status generate_key(X509Key *out);

class ClusterCa {
 public:
  static Status generate(uint64_t cluster_id, std::unique_ptr<ClusterCa> *out);
  // Signs a leaf for `rank` over the node's own key (the key never leaves the node).
  Status issue_node_cert(uint32_t rank, gnutls_x509_privkey_t node_key, X509Cert *out) const;
  gnutls_x509_crt_t cert() const { return cert_.get(); }
  uint64_t cluster_id() const { return cluster_id_; }

 private:
  uint64_t cluster_id_ = 0;
  X509Cert cert_;
  X509Key key_;
};

// What one node presents and trusts; shared by all its connections.
class TlsCredentials {
 public:
  ~TlsCredentials();
  static Status create(gnutls_x509_crt_t ca_cert, gnutls_x509_crt_t node_cert,
                       gnutls_x509_privkey_t node_key, std::shared_ptr<TlsCredentials> *out);
  gnutls_certificate_credentials_t get() const { return cred_; }

 private:
  gnutls_certificate_credentials_t cred_ = nullptr;
};

// Reads the verified peer certificate of a finished handshake.
Status peer_identity(gnutls_session_t session, NodeIdentity *out);

// The TLS 1.3, AES-128-GCM-only priority string (GnuTLS ChaCha20 is 10x slower here).
extern const char *const kTlsPriority;

}  // namespace nexar
