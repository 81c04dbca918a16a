#include "transport/tls_credentials.h"

#include <gnutls/crypto.h>

#include <cinttypes>
#include <cstring>
#include <ctime>

namespace nexar {

const char *const kTlsPriority =
    "NORMAL:-VERS-ALL:+VERS-TLS1.3:-CIPHER-ALL:+AES-128-GCM:-GROUP-ALL:+GROUP-X25519:"
    "+GROUP-SECP256R1:%DISABLE_TLS13_COMPAT_MODE";

namespace {

Status tls_error(const char *what, int rc) {
  return error(NEXAR_ERR_TLS, format("%s: %s", what, gnutls_strerror(rc)));
}

#define TRY_TLS(call)                          \
  do {                                         \
    int rc_ = (call);                          \
    if (rc_ < 0) return tls_error(#call, rc_); \
  } while (0)

std::string cluster_org(uint64_t cluster_id) {
  return format("nexar-cluster-%016" PRIx64, cluster_id);
}

Status new_cert(X509Cert *out) {
  gnutls_x509_crt_t c = nullptr;
  TRY_TLS(gnutls_x509_crt_init(&c));
  out->reset(c);
  return {};
}

Status set_common_fields(gnutls_x509_crt_t crt, gnutls_x509_privkey_t key, const std::string &cn,
                         const std::string &org) {
  uint8_t serial[16];
  TRY_TLS(gnutls_rnd(GNUTLS_RND_NONCE, serial, sizeof serial));
  serial[0] &= 0x7f;  // a positive serial number
  TRY_TLS(gnutls_x509_crt_set_version(crt, 3));
  TRY_TLS(gnutls_x509_crt_set_serial(crt, serial, sizeof serial));
  time_t now = time(nullptr);
  TRY_TLS(gnutls_x509_crt_set_activation_time(crt, now - 3600));  // tolerate clock skew
  TRY_TLS(gnutls_x509_crt_set_expiration_time(crt, now + 10 * 365 * 24 * 3600));
  TRY_TLS(gnutls_x509_crt_set_dn_by_oid(crt, GNUTLS_OID_X520_COMMON_NAME, 0, cn.data(),
                                        static_cast<unsigned>(cn.size())));
  TRY_TLS(gnutls_x509_crt_set_dn_by_oid(crt, GNUTLS_OID_X520_ORGANIZATION_NAME, 0, org.data(),
                                        static_cast<unsigned>(org.size())));
  TRY_TLS(gnutls_x509_crt_set_key(crt, key));
  return {};
}

}  // namespace

Status generate_key(X509Key *out) {
  gnutls_x509_privkey_t k = nullptr;
  TRY_TLS(gnutls_x509_privkey_init(&k));
  out->reset(k);
  TRY_TLS(gnutls_x509_privkey_generate(k, GNUTLS_PK_ECDSA,
                                       GNUTLS_CURVE_TO_BITS(GNUTLS_ECC_CURVE_SECP256R1), 0));
  return {};
}

Status ClusterCa::generate(uint64_t cluster_id, std::unique_ptr<ClusterCa> *out) {
  auto ca = std::make_unique<ClusterCa>();
  ca->cluster_id_ = cluster_id;
  Status s = generate_key(&ca->key_);
  if (!s) return s;
  if (!(s = new_cert(&ca->cert_))) return s;
  gnutls_x509_crt_t crt = ca->cert_.get();
  if (!(s = set_common_fields(crt, ca->key_.get(), "nexar-cluster-ca", cluster_org(cluster_id))))
    return s;
  TRY_TLS(gnutls_x509_crt_set_basic_constraints(crt, 1, 0));
  TRY_TLS(gnutls_x509_crt_set_key_usage(crt, GNUTLS_KEY_KEY_CERT_SIGN | GNUTLS_KEY_CRL_SIGN));
  TRY_TLS(gnutls_x509_crt_sign2(crt, crt, ca->key_.get(), GNUTLS_DIG_SHA256, 0));
  *out = std::move(ca);
  return {};
}

Status ClusterCa::issue_node_cert(uint32_t rank, gnutls_x509_privkey_t node_key,
                                  X509Cert *out) const {
  X509Cert leaf;
  Status s = new_cert(&leaf);
  if (!s) return s;
  gnutls_x509_crt_t crt = leaf.get();
  if (!(s = set_common_fields(crt, node_key, format("nexar-rank-%u", rank),
                              cluster_org(cluster_id_))))
    return s;
  TRY_TLS(gnutls_x509_crt_set_basic_constraints(crt, 0, -1));
  TRY_TLS(gnutls_x509_crt_set_key_usage(crt, GNUTLS_KEY_DIGITAL_SIGNATURE));
  TRY_TLS(gnutls_x509_crt_set_key_purpose_oid(crt, GNUTLS_KP_TLS_WWW_SERVER, 0));
  TRY_TLS(gnutls_x509_crt_set_key_purpose_oid(crt, GNUTLS_KP_TLS_WWW_CLIENT, 0));
  TRY_TLS(gnutls_x509_crt_sign2(crt, cert_.get(), key_.get(), GNUTLS_DIG_SHA256, 0));
  *out = std::move(leaf);
  return {};
}

TlsCredentials::~TlsCredentials() {
  if (cred_) gnutls_certificate_free_credentials(cred_);
}

Status TlsCredentials::create(gnutls_x509_crt_t ca_cert, gnutls_x509_crt_t node_cert,
                              gnutls_x509_privkey_t node_key,
                              std::shared_ptr<TlsCredentials> *out) {
  auto c = std::make_shared<TlsCredentials>();
  TRY_TLS(gnutls_certificate_allocate_credentials(&c->cred_));
  gnutls_x509_crt_t chain[1] = {node_cert};
  TRY_TLS(gnutls_certificate_set_x509_key(c->cred_, chain, 1, node_key));
  gnutls_x509_crt_t anchors[1] = {ca_cert};
  int n = gnutls_certificate_set_x509_trust(c->cred_, anchors, 1);
  if (n < 1)
    return tls_error("gnutls_certificate_set_x509_trust", n < 0 ? n : GNUTLS_E_CERTIFICATE_ERROR);
  *out = std::move(c);
  return {};
}

Status peer_identity(gnutls_session_t session, NodeIdentity *out) {
  unsigned n = 0;
  const gnutls_datum_t *certs = gnutls_certificate_get_peers(session, &n);
  if (!certs || n == 0) return error(NEXAR_ERR_TLS, "peer presented no certificate");
  X509Cert crt;
  Status s = new_cert(&crt);
  if (!s) return s;
  TRY_TLS(gnutls_x509_crt_import(crt.get(), &certs[0], GNUTLS_X509_FMT_DER));
  char buf[128];
  size_t len = sizeof buf - 1;
  TRY_TLS(gnutls_x509_crt_get_dn_by_oid(crt.get(), GNUTLS_OID_X520_COMMON_NAME, 0, 0, buf, &len));
  buf[len] = 0;
  unsigned rank = 0;
  char tail = 0;
  if (sscanf(buf, "nexar-rank-%u%c", &rank, &tail) != 1)
    return error(NEXAR_ERR_AUTH, format("peer certificate CN '%s' names no rank", buf));
  len = sizeof buf - 1;
  TRY_TLS(
      gnutls_x509_crt_get_dn_by_oid(crt.get(), GNUTLS_OID_X520_ORGANIZATION_NAME, 0, 0, buf, &len));
  buf[len] = 0;
  uint64_t cluster = 0;
  if (sscanf(buf, "nexar-cluster-%16" SCNx64 "%c", &cluster, &tail) != 1)
    return error(NEXAR_ERR_AUTH, format("peer certificate O '%s' names no cluster", buf));
  out->cluster_id = cluster;
  out->rank = rank;
  return {};
}

}  // namespace nexar
