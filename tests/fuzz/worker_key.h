// The worker's key in the join_messages harness and in the Welcome of its
// seed corpus (make_corpus.cpp): with the same key on both sides, a Welcome
// from the corpus passes accept_welcome's key check, and the fuzzer reaches
// the checks after it (identity, chain, addresses). A test key only.
#pragma once

#include <gnutls/x509.h>

#include "transport/tls_credentials.h"

namespace nexar_fuzz {

inline constexpr char kWorkerKeyPem[] =
    "-----BEGIN EC PRIVATE KEY-----\n"
    "MHgCAQEEIQDPdWzPNdZqGVhfdhJ8nnEf3HWBpYGJfihZhPmxWoTRDaAKBggqhkjO\n"
    "PQMBB6FEA0IABC9NSDU2HrDO5jKGW6hm5m2VCwEtZLD+Ec6ashh4U3rfdcD88c3k\n"
    "kxyqSEbMzw17obKfQTsoe4gbzXUGSnh0em8=\n"
    "-----END EC PRIVATE KEY-----\n";

inline bool load_worker_key(nexar::X509Key *out) {
  gnutls_x509_privkey_t k;
  if (gnutls_x509_privkey_init(&k) < 0) return false;
  out->reset(k);
  const gnutls_datum_t pem{reinterpret_cast<unsigned char *>(const_cast<char *>(kWorkerKeyPem)),
                           sizeof kWorkerKeyPem - 1};
  return gnutls_x509_privkey_import(k, &pem, GNUTLS_X509_FMT_PEM) >= 0;
}

}  // namespace nexar_fuzz
