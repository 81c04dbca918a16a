#include "transport/tls_credentials.h"

#include <fcntl.h>
#include <gnutls/abstract.h>
#include <gnutls/crypto.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <sstream>

namespace nexar {

namespace {

const char *const kTlsPriority =
    "NORMAL:-VERS-ALL:+VERS-TLS1.3:-CIPHER-ALL:+AES-128-GCM:-GROUP-ALL:+GROUP-X25519:"
    "+GROUP-SECP256R1:%DISABLE_TLS13_COMPAT_MODE";

// The parsed priorities; GnuTLS only reads them once made.
struct PriorityCache {
  gnutls_priority_t priority = nullptr;
  int rc = 0;
  PriorityCache() { rc = gnutls_priority_init(&priority, kTlsPriority, nullptr); }
  ~PriorityCache() {
    if (rc >= 0) gnutls_priority_deinit(priority);
  }
};

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

Status set_common_fields(gnutls_x509_crt_t crt, const std::string &cn, const std::string &org) {
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
  return {};
}

Status set_common_fields(gnutls_x509_crt_t crt, gnutls_x509_privkey_t key, const std::string &cn,
                         const std::string &org) {
  Status s = set_common_fields(crt, cn, org);
  if (!s) return s;
  TRY_TLS(gnutls_x509_crt_set_key(crt, key));
  return {};
}

// Owns a buffer GnuTLS allocated.
struct Datum {
  gnutls_datum_t d{nullptr, 0};
  ~Datum() { gnutls_free(d.data); }
  std::string str() const { return std::string(reinterpret_cast<const char *>(d.data), d.size); }
};

gnutls_datum_t view(const std::string &s) {
  return {reinterpret_cast<unsigned char *>(const_cast<char *>(s.data())),
          static_cast<unsigned>(s.size())};
}

Status read_file(const std::string &path, std::string *out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return error(NEXAR_ERR_IO, format("cannot read %s: %s", path.c_str(), strerror(errno)));
  std::ostringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return {};
}

// Writes through a temporary file and a rename, so a crash never leaves half a key.
Status write_file(const std::string &path, const std::string &data, mode_t mode) {
  const std::string tmp = path + ".tmp";
  unlink(tmp.c_str());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0)
    return error(NEXAR_ERR_IO, format("cannot create %s: %s", tmp.c_str(), strerror(errno)));
  fchmod(fd, mode);  // whatever the umask says
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = errno;
      close(fd);
      unlink(tmp.c_str());
      return error(NEXAR_ERR_IO, format("cannot write %s: %s", tmp.c_str(), strerror(e)));
    }
    off += static_cast<size_t>(n);
  }
  fsync(fd);
  close(fd);
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    unlink(tmp.c_str());
    return error(NEXAR_ERR_IO, format("cannot rename %s: %s", tmp.c_str(), strerror(e)));
  }
  return {};
}

std::string hex(const uint8_t *p, size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out.push_back(digits[p[i] >> 4]);
    out.push_back(digits[p[i] & 15]);
  }
  return out;
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

Status make_csr_pem(gnutls_x509_privkey_t key, std::string *pem) {
  gnutls_x509_crq_t q = nullptr;
  TRY_TLS(gnutls_x509_crq_init(&q));
  X509Crq crq(q);
  TRY_TLS(gnutls_x509_crq_set_version(q, 1));
  static const char cn[] = "nexar-worker";  // informational: the seed names the node
  TRY_TLS(gnutls_x509_crq_set_dn_by_oid(q, GNUTLS_OID_X520_COMMON_NAME, 0, cn, sizeof cn - 1));
  TRY_TLS(gnutls_x509_crq_set_key(q, key));
  TRY_TLS(gnutls_x509_crq_sign2(q, key, GNUTLS_DIG_SHA256, 0));
  Datum d;
  TRY_TLS(gnutls_x509_crq_export2(q, GNUTLS_X509_FMT_PEM, &d.d));
  *pem = d.str();
  return {};
}

Status cert_to_pem(gnutls_x509_crt_t crt, std::string *pem) {
  Datum d;
  TRY_TLS(gnutls_x509_crt_export2(crt, GNUTLS_X509_FMT_PEM, &d.d));
  *pem = d.str();
  return {};
}

Status cert_from_pem(const std::string &pem, X509Cert *out) {
  X509Cert crt;
  Status s = new_cert(&crt);
  if (!s) return s;
  gnutls_datum_t d = view(pem);
  TRY_TLS(gnutls_x509_crt_import(crt.get(), &d, GNUTLS_X509_FMT_PEM));
  *out = std::move(crt);
  return {};
}

std::string cert_fingerprint(gnutls_x509_crt_t crt) {
  uint8_t buf[32];
  size_t n = sizeof buf;
  if (gnutls_x509_crt_get_fingerprint(crt, GNUTLS_DIG_SHA256, buf, &n) < 0) return "?";
  return hex(buf, n);
}

bool cert_matches_key(gnutls_x509_crt_t crt, gnutls_x509_privkey_t key) {
  uint8_t a[64], b[64];
  size_t na = sizeof a, nb = sizeof b;
  if (gnutls_x509_crt_get_key_id(crt, GNUTLS_KEYID_USE_SHA256, a, &na) < 0) return false;
  if (gnutls_x509_privkey_get_key_id(key, GNUTLS_KEYID_USE_SHA256, b, &nb) < 0) return false;
  return na == nb && gnutls_memcmp(a, b, na) == 0;
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

Status ClusterCa::load_or_create(const std::string &dir, std::unique_ptr<ClusterCa> *out,
                                 bool *created) {
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return error(NEXAR_ERR_IO,
                 format("cannot create CA directory %s: %s", dir.c_str(), strerror(errno)));
  const std::string cert_path = dir + "/ca.pem", key_path = dir + "/ca-key.pem";
  struct stat cst, kst;
  const bool have_cert = stat(cert_path.c_str(), &cst) == 0;
  const bool have_key = stat(key_path.c_str(), &kst) == 0;
  if (have_cert != have_key)
    return error(
        NEXAR_ERR_INVALID_ARGUMENT,
        format("%s holds %s but not %s: restore both files or remove the directory", dir.c_str(),
               have_cert ? "ca.pem" : "ca-key.pem", have_cert ? "ca-key.pem" : "ca.pem"));
  if (!have_cert) {
    uint64_t cluster_id = 0;
    TRY_TLS(gnutls_rnd(GNUTLS_RND_NONCE, &cluster_id, sizeof cluster_id));
    std::unique_ptr<ClusterCa> ca;
    Status s = generate(cluster_id, &ca);
    if (!s) return s;
    Datum key;
    TRY_TLS(gnutls_x509_privkey_export2_pkcs8(ca->key_.get(), GNUTLS_X509_FMT_PEM, nullptr,
                                              GNUTLS_PKCS_PLAIN, &key.d));
    std::string cert;
    if (!(s = cert_to_pem(ca->cert(), &cert))) return s;
    if (!(s = write_file(key_path, key.str(), 0600))) return s;
    if (!(s = write_file(cert_path, cert, 0644))) return s;
    *created = true;
    *out = std::move(ca);
    return {};
  }
  if (kst.st_mode & 077)
    return error(NEXAR_ERR_INVALID_ARGUMENT,
                 format("%s is accessible by other users (mode %03o): run chmod 600 on it",
                        key_path.c_str(), static_cast<unsigned>(kst.st_mode & 0777)));
  std::string cert_pem, key_pem;
  Status s = read_file(cert_path, &cert_pem);
  if (!s) return s;
  if (!(s = read_file(key_path, &key_pem))) return s;
  auto ca = std::make_unique<ClusterCa>();
  if (!(s = cert_from_pem(cert_pem, &ca->cert_)))
    return error(s.code, format("%s: %s", cert_path.c_str(), s.message.c_str()));
  gnutls_x509_privkey_t k = nullptr;
  TRY_TLS(gnutls_x509_privkey_init(&k));
  ca->key_.reset(k);
  gnutls_datum_t kd = view(key_pem);
  int rc = gnutls_x509_privkey_import2(k, &kd, GNUTLS_X509_FMT_PEM, nullptr, 0);
  if (rc < 0) return error(NEXAR_ERR_TLS, format("%s: %s", key_path.c_str(), gnutls_strerror(rc)));
  if (!cert_matches_key(ca->cert(), k))
    return error(NEXAR_ERR_INVALID_ARGUMENT,
                 format("%s does not hold the key of %s", key_path.c_str(), cert_path.c_str()));
  unsigned is_ca = 0;
  if (gnutls_x509_crt_get_basic_constraints(ca->cert(), nullptr, &is_ca, nullptr) < 0 || !is_ca)
    return error(NEXAR_ERR_INVALID_ARGUMENT,
                 format("%s is not a CA certificate", cert_path.c_str()));
  char org[128];
  size_t len = sizeof org - 1;
  TRY_TLS(gnutls_x509_crt_get_dn_by_oid(ca->cert(), GNUTLS_OID_X520_ORGANIZATION_NAME, 0, 0, org,
                                        &len));
  org[len] = 0;
  char tail = 0;
  if (sscanf(org, "nexar-cluster-%16" SCNx64 "%c", &ca->cluster_id_, &tail) != 1)
    return error(NEXAR_ERR_INVALID_ARGUMENT,
                 format("%s is not a nexar cluster CA (O=%s)", cert_path.c_str(), org));
  *created = false;
  *out = std::move(ca);
  return {};
}

namespace {
// The leaf fields every node certificate carries; set_key installs the public key.
Status issue_leaf(uint32_t rank, uint64_t cluster_id, gnutls_x509_crt_t ca_cert,
                  gnutls_x509_privkey_t ca_key,
                  const std::function<int(gnutls_x509_crt_t)> &set_key, X509Cert *out) {
  X509Cert leaf;
  Status s = new_cert(&leaf);
  if (!s) return s;
  gnutls_x509_crt_t crt = leaf.get();
  if (!(s = set_common_fields(crt, format("nexar-rank-%u", rank), cluster_org(cluster_id))))
    return s;
  TRY_TLS(set_key(crt));
  TRY_TLS(gnutls_x509_crt_set_basic_constraints(crt, 0, -1));
  TRY_TLS(gnutls_x509_crt_set_key_usage(crt, GNUTLS_KEY_DIGITAL_SIGNATURE));
  TRY_TLS(gnutls_x509_crt_set_key_purpose_oid(crt, GNUTLS_KP_TLS_WWW_SERVER, 0));
  TRY_TLS(gnutls_x509_crt_set_key_purpose_oid(crt, GNUTLS_KP_TLS_WWW_CLIENT, 0));
  TRY_TLS(gnutls_x509_crt_sign2(crt, ca_cert, ca_key, GNUTLS_DIG_SHA256, 0));
  *out = std::move(leaf);
  return {};
}

struct PubkeyDeleter {
  void operator()(gnutls_pubkey_st *k) const { gnutls_pubkey_deinit(k); }
};

// Imports and checks a request: well formed, self-signed, an acceptable key.
Status load_csr(const std::string &csr_pem,
                std::unique_ptr<gnutls_pubkey_st, PubkeyDeleter> *key_out) {
  if (csr_pem.empty()) return error(NEXAR_ERR_INVALID_ARGUMENT, "empty certificate request");
  gnutls_x509_crq_t q = nullptr;
  TRY_TLS(gnutls_x509_crq_init(&q));
  X509Crq crq(q);
  gnutls_datum_t d = view(csr_pem);
  int rc = gnutls_x509_crq_import(q, &d, GNUTLS_X509_FMT_PEM);
  if (rc < 0)
    return error(NEXAR_ERR_INVALID_ARGUMENT,
                 format("malformed certificate request: %s", gnutls_strerror(rc)));
  if ((rc = gnutls_x509_crq_verify(q, 0)) < 0)
    return error(NEXAR_ERR_INVALID_ARGUMENT,
                 format("certificate request signature does not verify: %s", gnutls_strerror(rc)));
  gnutls_pubkey_t k = nullptr;
  TRY_TLS(gnutls_pubkey_init(&k));
  std::unique_ptr<gnutls_pubkey_st, PubkeyDeleter> key(k);
  TRY_TLS(gnutls_pubkey_import_x509_crq(k, q, 0));
  unsigned bits = 0;
  const int alg = gnutls_pubkey_get_pk_algorithm(k, &bits);
  const bool strong = (alg == GNUTLS_PK_ECDSA && bits >= 256) ||
                      (alg == GNUTLS_PK_RSA && bits >= 2048) || alg == GNUTLS_PK_EDDSA_ED25519 ||
                      alg == GNUTLS_PK_EDDSA_ED448;
  if (!strong)
    return error(NEXAR_ERR_INVALID_ARGUMENT,
                 format("certificate request key (%s, %u bits) is not accepted",
                        gnutls_pk_get_name(static_cast<gnutls_pk_algorithm_t>(alg)), bits));
  if (key_out) *key_out = std::move(key);
  return {};
}
}  // namespace

Status ClusterCa::issue_node_cert(uint32_t rank, gnutls_x509_privkey_t node_key,
                                  X509Cert *out) const {
  return issue_leaf(
      rank, cluster_id_, cert_.get(), key_.get(),
      [&](gnutls_x509_crt_t crt) { return gnutls_x509_crt_set_key(crt, node_key); }, out);
}

Status ClusterCa::check_csr(const std::string &csr_pem) {
  return load_csr(csr_pem, nullptr);
}

Status ClusterCa::issue_from_csr(uint32_t rank, const std::string &csr_pem, X509Cert *out) const {
  return issue_from_csr(rank, csr_pem, cluster_id_, out);
}

Status ClusterCa::issue_from_csr(uint32_t rank, const std::string &csr_pem, uint64_t world_id,
                                 X509Cert *out) const {
  std::unique_ptr<gnutls_pubkey_st, PubkeyDeleter> key;
  Status s = load_csr(csr_pem, &key);
  if (!s) return s;
  return issue_leaf(
      rank, world_id, cert_.get(), key_.get(),
      [&](gnutls_x509_crt_t crt) { return gnutls_x509_crt_set_pubkey(crt, key.get()); }, out);
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

Status TlsCredentials::create_self_signed(const std::string &common_name,
                                          std::shared_ptr<TlsCredentials> *out) {
  X509Key key;
  Status s = generate_key(&key);
  if (!s) return s;
  X509Cert cert;
  if (!(s = new_cert(&cert))) return s;
  gnutls_x509_crt_t crt = cert.get();
  if (!(s = set_common_fields(crt, key.get(), common_name, "nexar-seed"))) return s;
  TRY_TLS(gnutls_x509_crt_set_basic_constraints(crt, 0, -1));
  TRY_TLS(gnutls_x509_crt_set_key_usage(crt, GNUTLS_KEY_DIGITAL_SIGNATURE));
  TRY_TLS(gnutls_x509_crt_set_key_purpose_oid(crt, GNUTLS_KP_TLS_WWW_SERVER, 0));
  TRY_TLS(gnutls_x509_crt_sign2(crt, crt, key.get(), GNUTLS_DIG_SHA256, 0));
  auto c = std::make_shared<TlsCredentials>();
  TRY_TLS(gnutls_certificate_allocate_credentials(&c->cred_));
  gnutls_x509_crt_t chain[1] = {crt};
  TRY_TLS(gnutls_certificate_set_x509_key(c->cred_, chain, 1, key.get()));
  *out = std::move(c);
  return {};
}

Status TlsCredentials::create_anonymous(std::shared_ptr<TlsCredentials> *out) {
  auto c = std::make_shared<TlsCredentials>();
  TRY_TLS(gnutls_certificate_allocate_credentials(&c->cred_));
  *out = std::move(c);
  return {};
}

Status tls_priority(gnutls_priority_t *out) {
  static const PriorityCache cache;  // thread-safe initialisation
  if (cache.rc < 0) return tls_error("gnutls_priority_init", cache.rc);
  *out = cache.priority;
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
  return cert_identity(crt.get(), out);
}

Status cert_identity(gnutls_x509_crt_t crt, NodeIdentity *out) {
  char buf[128];
  size_t len = sizeof buf - 1;
  TRY_TLS(gnutls_x509_crt_get_dn_by_oid(crt, GNUTLS_OID_X520_COMMON_NAME, 0, 0, buf, &len));
  buf[len] = 0;
  unsigned rank = 0;
  char tail = 0;
  if (sscanf(buf, "nexar-rank-%u%c", &rank, &tail) != 1)
    return error(NEXAR_ERR_AUTH, format("peer certificate CN '%s' names no rank", buf));
  len = sizeof buf - 1;
  TRY_TLS(gnutls_x509_crt_get_dn_by_oid(crt, GNUTLS_OID_X520_ORGANIZATION_NAME, 0, 0, buf, &len));
  buf[len] = 0;
  uint64_t cluster = 0;
  if (sscanf(buf, "nexar-cluster-%16" SCNx64 "%c", &cluster, &tail) != 1)
    return error(NEXAR_ERR_AUTH, format("peer certificate O '%s' names no cluster", buf));
  out->cluster_id = cluster;
  out->rank = rank;
  return {};
}

}  // namespace nexar
