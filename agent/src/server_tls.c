/* The agent's TLS configuration: --tls-cert/--tls-key read, checked and
 * given to the transport; the certificate's fingerprint logged. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "agent_core.h"
#include "server_tls.h"
#include "vmtransport/conn.h"
#include "vmrpc/log.h"
#include "vmproto/wire.h"

static vm_status_t vma_read_text(const char *path, const char *what, char **out) {
  uint8_t *data = NULL;
  size_t len = 0;
  vm_status_t st = vm_read_file(path, 1 << 20, &data, &len);
  if (st) return vm_status_annotate(st, "reading %s %s", what, path);
  char *s = malloc(len + 1);
  if (!s) {
    free(data);
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  }
  memcpy(s, data, len);
  s[len] = '\0';
  free(data);
  *out = s;
  return VM_STATUS_OK;
}

/* Logs the SHA-256 fingerprint of the (first) certificate in pem, what a
 * client pins with --tls-pin. */
static void vma_log_fingerprint(const char *pem) {
  BIO *bio = BIO_new_mem_buf(pem, -1);
  X509 *x = bio ? PEM_read_bio_X509(bio, NULL, NULL, NULL) : NULL;
  uint8_t md[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  if (x && X509_digest(x, EVP_sha256(), md, &n) == 1 && n == 32) {
    char hex[32 * 3];
    for (unsigned i = 0; i < n; i++) sprintf(hex + 3 * i, "%02X%s", md[i], i + 1 < n ? ":" : "");
    VM_LOGI("TLS certificate sha256:%s (what a client gives to --tls-pin)", hex);
  }
  X509_free(x);
  BIO_free(bio);
}

vm_status_t vma_tls_setup(vmagent_t *a) {
  char *cert = NULL, *key = NULL;
  vm_status_t st = vma_read_text(a->tls_cert_file, "--tls-cert", &cert);
  if (!st) st = vma_read_text(a->tls_key_file, "--tls-key", &key);
  if (st) goto done;
  vmt_tls_opts_t o = {.server = 1, .cert_pem = cert, .key_pem = key};
  char err[256];
  int rv = vmt_tls_new(&o, &a->srv.tls, err, sizeof(err));
  if (rv == NNG_EINVAL)
    st = vm_status_make(VM_INVALID_ARGUMENT, "loading --tls-cert/--tls-key: %s", err);
  else if (rv)
    st = vmp_nng_status(rv, "creating the TLS configuration");
  if (!st) vma_log_fingerprint(cert);
done:
  free(cert);
  if (key) {
    memset(key, 0, strlen(key));
    free(key);
  }
  return st;
}
