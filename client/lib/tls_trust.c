/* What a tls+tcp:// connection trusts: the system CA store (default), a CA
 * bundle (--tls-ca), or one pinned certificate (--tls-pin sha256:HEX).
 *
 * nng's TLS engine shows no peer certificate, so a pin is checked by a
 * probe: one TLS handshake of our own (OpenSSL) fetches the certificate the
 * agent presents, its SHA-256 is compared with the pin, and that very
 * certificate then becomes the only trust anchor of nng's connections. A
 * man in the middle who passes the probe through still fails nng's
 * handshake (he lacks the pinned certificate's key), so the token is never
 * sent to him. Only a self-signed certificate can be its own anchor.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "vmc_internal.h"

const char *vmci_tls_system_ca(void) {
  const char *env = getenv("SSL_CERT_FILE");
  if (env && env[0]) return access(env, R_OK) == 0 ? env : NULL;
  static const char *const paths[] = {
      "/etc/ssl/certs/ca-certificates.crt", /* Debian, Ubuntu, Arch */
      "/etc/pki/tls/certs/ca-bundle.crt",   /* Fedora, RHEL */
      "/etc/ssl/ca-bundle.pem",             /* openSUSE */
      "/etc/ssl/cert.pem",                  /* Alpine, BSDs */
  };
  for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
    if (access(paths[i], R_OK) == 0) return paths[i];
  return NULL;
}

static int hex_val(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

vm_status_t vmci_tls_pin_parse(const char *pin, uint8_t out[32]) {
  const char *usage =
      "expected sha256: and the 64 hex digits of the agent certificate's SHA-256 fingerprint, "
      "colons allowed (what `openssl x509 -noout -fingerprint -sha256 -in CERT` prints)";
  if (strncasecmp(pin, "sha256:", 7) != 0)
    return vm_status_make(VM_INVALID_ARGUMENT, "--tls-pin '%.80s': %s", pin, usage);
  const char *p = pin + 7;
  size_t n = 0;
  while (*p) {
    if (*p == ':' && n > 0 && n < 32 && p[1] != ':') {
      p++;
      continue;
    }
    int hi = hex_val(p[0]), lo = hi < 0 ? -1 : hex_val(p[1]);
    if (hi < 0 || lo < 0 || n == 32)
      return vm_status_make(VM_INVALID_ARGUMENT, "--tls-pin '%.80s': %s", pin, usage);
    out[n++] = (uint8_t)(hi << 4 | lo);
    p += 2;
  }
  if (n != 32) return vm_status_make(VM_INVALID_ARGUMENT, "--tls-pin '%.80s': %s", pin, usage);
  return VM_STATUS_OK;
}

static void hex_colons(const uint8_t *d, size_t n, char *out) {
  for (size_t i = 0; i < n; i++) sprintf(out + 3 * i, "%02X%s", d[i], i + 1 < n ? ":" : "");
}

/* A TCP connection to host:port within timeout_ms, then blocking with the
 * same bound on every read and write. Returns the fd or -1 (errno). */
static int tcp_connect(const char *host, const char *port, int32_t timeout_ms) {
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(host, port, &hints, &res) != 0) {
    errno = EHOSTUNREACH;
    return -1;
  }
  int fd = -1, err = ECONNREFUSED;
  for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      struct pollfd pfd = {fd, POLLOUT, 0};
      rc = poll(&pfd, 1, timeout_ms);
      socklen_t len = sizeof(err);
      if (rc == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0)
        rc = 0;
      else
        rc = -1, err = rc == 0 ? ETIMEDOUT : err;
    } else if (rc != 0) {
      err = errno;
    }
    if (rc != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) {
    errno = err;
    return -1;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  return fd;
}

/* vmci_tls_probe_pin() without the SIGPIPE guard. */
static vm_status_t probe_pin(const char *url, const char *host, const char *port,
                             int32_t timeout_ms, const char *pin_text, const uint8_t pin[32],
                             char **out_pem) {
  *out_pem = NULL;
  vm_status_t st = VM_STATUS_OK;
  SSL_CTX *ctx = NULL;
  SSL *ssl = NULL;
  X509 *x = NULL;
  BIO *bio = NULL;
  int fd = tcp_connect(host, port, timeout_ms);
  if (fd < 0)
    return vm_status_make(VM_UNAVAILABLE,
                          "cannot reach the agent at %s to check its certificate against "
                          "--tls-pin: %s — is vmagent running there with tls+tcp://?",
                          url, strerror(errno));
  ctx = SSL_CTX_new(TLS_client_method());
  ssl = ctx ? SSL_new(ctx) : NULL;
  if (!ssl) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory setting up the --tls-pin check");
    goto done;
  }
  /* Nothing is trusted here: the pin below is the whole check. */
  SSL_set_verify(ssl, SSL_VERIFY_NONE, NULL);
  SSL_set_fd(ssl, fd);
  if (SSL_connect(ssl) != 1) {
    st = vm_status_make(VM_UNAVAILABLE,
                        "TLS handshake with the agent at %s failed while checking --tls-pin — "
                        "check that the agent listens on tls+tcp:// at that address",
                        url);
    goto done;
  }
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
  x = SSL_get1_peer_certificate(ssl);
#else
  x = SSL_get_peer_certificate(ssl);
#endif
  uint8_t md[EVP_MAX_MD_SIZE];
  unsigned md_len = 0;
  if (!x || X509_digest(x, EVP_sha256(), md, &md_len) != 1 || md_len != 32) {
    st = vm_status_make(VM_UNAVAILABLE, "the agent at %s presented no usable TLS certificate", url);
    goto done;
  }
  if (CRYPTO_memcmp(md, pin, 32) != 0) {
    char got[32 * 3];
    hex_colons(md, 32, got);
    st = vm_status_make(VM_UNAVAILABLE,
                        "the agent at %s presented a certificate with fingerprint sha256:%s, "
                        "not the one pinned by --tls-pin %.120s: the connection may be "
                        "intercepted, or the agent's certificate changed (read it with `openssl "
                        "x509 -noout -fingerprint -sha256 -in CERT` where the agent runs)",
                        url, got, pin_text);
    goto done;
  }
  if (X509_check_issued(x, x) != X509_V_OK) {
    st = vm_status_make(VM_FAILED_PRECONDITION,
                        "the agent's certificate matches --tls-pin but is not self-signed, so it "
                        "cannot be its own trust anchor: give the CA that signed it with --tls-ca "
                        "instead");
    goto done;
  }
  char *data = NULL;
  long n = 0;
  bio = BIO_new(BIO_s_mem());
  if (bio && PEM_write_bio_X509(bio, x) == 1) n = BIO_get_mem_data(bio, &data);
  char *pem = n > 0 ? malloc((size_t)n + 1) : NULL;
  if (!pem) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory keeping the pinned certificate");
    goto done;
  }
  memcpy(pem, data, (size_t)n);
  pem[n] = '\0';
  *out_pem = pem;
done:
  BIO_free(bio);
  X509_free(x);
  if (ssl) SSL_free(ssl);
  SSL_CTX_free(ctx);
  close(fd);
  return st;
}

vm_status_t vmci_tls_probe_pin(const char *url, const char *host, const char *port,
                               int32_t timeout_ms, const char *pin_text, const uint8_t pin[32],
                               char **out_pem) {
  /* OpenSSL writes with plain send(): a peer that hangs up mid-handshake
   * would raise SIGPIPE and kill the caller. Block it on this thread for
   * the probe and drop one it raised. */
  sigset_t pipe_set, old;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
  vm_status_t st = probe_pin(url, host, port, timeout_ms, pin_text, pin, out_pem);
  sigset_t pending;
  if (!sigismember(&old, SIGPIPE) && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE)) {
    struct timespec zero = {0, 0};
    (void)sigtimedwait(&pipe_set, NULL, &zero);
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return st;
}
