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
struct X509CrqDeleter {
  void operator()(gnutls_x509_crq_int *q) const { gnutls_x509_crq_deinit(q); }
};
using X509Cert = std::unique_ptr<gnutls_x509_crt_int, X509CertDeleter>;
using X509Key = std::unique_ptr<gnutls_x509_privkey_int, X509KeyDeleter>;
using X509Crq = std::unique_ptr<gnutls_x509_crq_int, X509CrqDeleter>;

struct NodeIdentity {
  uint64_t cluster_id = 0;
  uint32_t rank = 0;
};

Status generate_key(X509Key *out);

// PEM helpers for what travels between a worker and the seed.
Status make_csr_pem(gnutls_x509_privkey_t key, std::string *pem);
Status cert_to_pem(gnutls_x509_crt_t crt, std::string *pem);
Status cert_from_pem(const std::string &pem, X509Cert *out);
// SHA-256 fingerprint of a certificate, as lowercase hex.
std::string cert_fingerprint(gnutls_x509_crt_t crt);
// The identity a node certificate names (CN=nexar-rank-<r>, O=nexar-cluster-<id>).
Status cert_identity(gnutls_x509_crt_t crt, NodeIdentity *out);
// True when crt certifies the public half of key.
bool cert_matches_key(gnutls_x509_crt_t crt, gnutls_x509_privkey_t key);

class ClusterCa {
 public:
  static Status generate(uint64_t cluster_id, std::unique_ptr<ClusterCa> *out);
  // Loads ca.pem + ca-key.pem from dir, or generates a CA with a random
  // cluster id and stores it there (the key file with mode 0600), so that a
  // restarted seed keeps the same trust anchor. *created tells which.
  static Status load_or_create(const std::string &dir, std::unique_ptr<ClusterCa> *out,
                               bool *created);
  // Signs a leaf for `rank` over the node's own key (the key never leaves the node).
  Status issue_node_cert(uint32_t rank, gnutls_x509_privkey_t node_key, X509Cert *out) const;
  // The same from a PKCS#10 request made by the node: the request's signature
  // is checked and only its public key is used (names and extensions in the
  // request are ignored; the CA sets them).
  Status issue_from_csr(uint32_t rank, const std::string &csr_pem, X509Cert *out) const;
  // The same for a world other than the CA's own (an elastic seed's grown
  // world): the certificate names world_id, so it is worth nothing elsewhere.
  Status issue_from_csr(uint32_t rank, const std::string &csr_pem, uint64_t world_id,
                        X509Cert *out) const;
  // Checks that a request is well formed and self-signed (without signing it).
  static Status check_csr(const std::string &csr_pem);
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
  // A server certificate signed by its own fresh key and no trust anchors: for
  // the seed's join endpoint, whose peers authenticate with the cluster token
  // instead (see cluster/seed.h).
  static Status create_self_signed(const std::string &common_name,
                                   std::shared_ptr<TlsCredentials> *out);
  // No certificate and no trust anchors: a worker's side of a join connection.
  static Status create_anonymous(std::shared_ptr<TlsCredentials> *out);
  gnutls_certificate_credentials_t get() const { return cred_; }

 private:
  gnutls_certificate_credentials_t cred_ = nullptr;
};

// Reads the verified peer certificate of a finished handshake.
Status peer_identity(gnutls_session_t session, NodeIdentity *out);

// The TLS 1.3, AES-128-GCM-only priorities (GnuTLS ChaCha20 is 10x slower
// here), parsed once per process and shared by every session: parsing them
// per session cost 8 KB a connection and the parse on every handshake.
Status tls_priority(gnutls_priority_t *out);

}  // namespace nexar
