/* tls+tcp:// connections: OpenSSL over a socket we own. The library is
 * called under the connection's lock, never blocking (the socket is
 * non-blocking; waits are poll() on it outside the lock), so one thread
 * may read while another writes. Records the library has decrypted but
 * nobody has taken yet are "pending": a reader takes them before it
 * waits on the socket. Its socket I/O goes through a BIO of ours that
 * sends with MSG_NOSIGNAL, so a peer that went away never raises SIGPIPE
 * in the process. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <nng/nng.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "internal.h"

struct vmt_tls {
  SSL_CTX *ctx;
  int server;
  char server_name[256];
};

typedef struct tls_conn {
  vmt_conn_t base;
  pthread_mutex_t mu;
  SSL *ssl;
  short want_r, want_w; /* poll() events the last read / write waits for */
} tls_conn_t;

/* ------------------------------------------------------------- the BIO */

static int bio_write(BIO *b, const char *buf, int len) {
  int fd = (int)(intptr_t)BIO_get_data(b);
  BIO_clear_retry_flags(b);
  ssize_t n;
  do n = send(fd, buf, (size_t)len, MSG_DONTWAIT | MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) BIO_set_retry_write(b);
  return (int)n;
}

static int bio_read(BIO *b, char *buf, int len) {
  int fd = (int)(intptr_t)BIO_get_data(b);
  BIO_clear_retry_flags(b);
  ssize_t n;
  do n = recv(fd, buf, (size_t)len, MSG_DONTWAIT);
  while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) BIO_set_retry_read(b);
  return (int)n;
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr) {
  (void)b;
  (void)num;
  (void)ptr;
  return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

static int bio_create(BIO *b) {
  BIO_set_init(b, 1);
  return 1;
}

static int bio_destroy(BIO *b) {
  (void)b;
  return 1;
}

static BIO_METHOD *bio_method;
static pthread_once_t bio_once = PTHREAD_ONCE_INIT;

static void bio_method_init(void) {
  BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "vmtransport socket");
  if (!m) return;
  BIO_meth_set_write(m, bio_write);
  BIO_meth_set_read(m, bio_read);
  BIO_meth_set_ctrl(m, bio_ctrl);
  BIO_meth_set_create(m, bio_create);
  BIO_meth_set_destroy(m, bio_destroy);
  bio_method = m;
}

/* ------------------------------------------------------ configuration */

static void err_text(char *err, size_t cap, const char *what) {
  unsigned long e = ERR_get_error();
  char buf[200];
  if (e)
    ERR_error_string_n(e, buf, sizeof(buf));
  else
    snprintf(buf, sizeof(buf), "not PEM");
  snprintf(err, cap, "%s: %s", what, buf);
  ERR_clear_error();
}

static int load_cert_key(SSL_CTX *ctx, const char *cert, const char *key, char *err, size_t cap) {
  BIO *b = BIO_new_mem_buf(cert, -1);
  X509 *x = b ? PEM_read_bio_X509(b, NULL, NULL, NULL) : NULL;
  int ok = x && SSL_CTX_use_certificate(ctx, x) == 1;
  X509_free(x);
  while (ok) { /* the rest of the chain */
    X509 *ca = PEM_read_bio_X509(b, NULL, NULL, NULL);
    if (!ca) break;
    if (SSL_CTX_add_extra_chain_cert(ctx, ca) != 1) {
      X509_free(ca);
      ok = 0;
    }
  }
  ERR_clear_error(); /* the end of the chain reads as an error */
  BIO_free(b);
  if (!ok) {
    err_text(err, cap, "the certificate cannot be used");
    return NNG_EINVAL;
  }
  b = BIO_new_mem_buf(key, -1);
  EVP_PKEY *k = b ? PEM_read_bio_PrivateKey(b, NULL, NULL, NULL) : NULL;
  BIO_free(b);
  ok = k && SSL_CTX_use_PrivateKey(ctx, k) == 1 && SSL_CTX_check_private_key(ctx) == 1;
  EVP_PKEY_free(k);
  if (!ok) {
    err_text(err, cap, "the key cannot be used with the certificate");
    return NNG_EINVAL;
  }
  return 0;
}

static int load_ca(SSL_CTX *ctx, const char *pem, char *err, size_t cap) {
  X509_STORE *st = SSL_CTX_get_cert_store(ctx);
  BIO *b = BIO_new_mem_buf(pem, -1);
  int n = 0;
  X509 *x;
  while (b && (x = PEM_read_bio_X509(b, NULL, NULL, NULL)) != NULL) {
    if (X509_STORE_add_cert(st, x) == 1) n++;
    X509_free(x);
  }
  ERR_clear_error();
  BIO_free(b);
  if (n == 0) {
    snprintf(err, cap, "no PEM certificate in it");
    return NNG_EINVAL;
  }
  return 0;
}

int vmt_tls_new(const vmt_tls_opts_t *o, vmt_tls_t **out, char *err, size_t err_cap) {
  *out = NULL;
  snprintf(err, err_cap, "out of memory");
  pthread_once(&bio_once, bio_method_init);
  if (!bio_method) return NNG_ENOMEM;
  vmt_tls_t *t = calloc(1, sizeof(*t));
  if (!t) return NNG_ENOMEM;
  t->server = o->server;
  t->ctx = SSL_CTX_new(o->server ? TLS_server_method() : TLS_client_method());
  if (!t->ctx) {
    free(t);
    return NNG_ENOMEM;
  }
  SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
  /* Writes may be partial and retried from a moved buffer: the server's
   * reply queue writes what the socket takes. */
  SSL_CTX_set_mode(t->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_CTX_set_options(t->ctx, SSL_OP_NO_RENEGOTIATION);
  int rv = 0;
  if ((o->cert_pem && o->cert_pem[0]) || (o->key_pem && o->key_pem[0]))
    rv = load_cert_key(t->ctx, o->cert_pem ? o->cert_pem : "", o->key_pem ? o->key_pem : "", err,
                       err_cap);
  if (!rv && !o->server) {
    if (o->ca_pem) {
      rv = load_ca(t->ctx, o->ca_pem, err, err_cap);
      SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER, NULL);
    } else {
      SSL_CTX_set_verify(t->ctx, SSL_VERIFY_NONE, NULL);
    }
    if (o->server_name) snprintf(t->server_name, sizeof(t->server_name), "%s", o->server_name);
  }
  if (rv) {
    vmt_tls_free(t);
    return rv;
  }
  *out = t;
  return 0;
}

void vmt_tls_free(vmt_tls_t *t) {
  if (!t) return;
  SSL_CTX_free(t->ctx);
  free(t);
}

/* -------------------------------------------------------- connections */

/* After an SSL call returned r: 0 with the wait set (want), or the
 * connection's error. mu held. */
static int ssl_outcome(tls_conn_t *t, int r, short *want) {
  int e = SSL_get_error(t->ssl, r);
  switch (e) {
    case SSL_ERROR_WANT_READ: *want = POLLIN; return NNG_EAGAIN;
    case SSL_ERROR_WANT_WRITE: *want = POLLOUT; return NNG_EAGAIN;
    case SSL_ERROR_ZERO_RETURN: return NNG_ECONNSHUT;
    case SSL_ERROR_SYSCALL: {
      int err = errno;
      ERR_clear_error();
      if (vmt_conn_is_closed(&t->base)) return NNG_ECLOSED;
      return r == 0 || err == 0 ? NNG_ECONNSHUT : vmt_errno(err);
    }
    default:
      ERR_clear_error();
      return vmt_conn_is_closed(&t->base) ? NNG_ECLOSED : NNG_ECRYPTO;
  }
}

static int tls_read_now(vmt_conn_t *c, void *buf, size_t cap, size_t *got) {
  tls_conn_t *t = (tls_conn_t *)c;
  pthread_mutex_lock(&t->mu);
  size_t n = 0;
  int r = SSL_read_ex(t->ssl, buf, cap, &n);
  int rv = r == 1 ? 0 : ssl_outcome(t, r, &t->want_r);
  pthread_mutex_unlock(&t->mu);
  *got = n;
  return rv;
}

static int tls_writev_now(vmt_conn_t *c, const struct iovec *iov, unsigned n, size_t *moved) {
  tls_conn_t *t = (tls_conn_t *)c;
  size_t done = 0;
  int rv = 0;
  pthread_mutex_lock(&t->mu);
  for (unsigned i = 0; i < n && !rv; i++) {
    const uint8_t *p = iov[i].iov_base;
    size_t left = iov[i].iov_len;
    while (left > 0) {
      size_t w = 0;
      int r = SSL_write_ex(t->ssl, p, left, &w);
      if (r != 1) {
        rv = ssl_outcome(t, r, &t->want_w);
        break;
      }
      p += w;
      left -= w;
      done += w;
    }
  }
  pthread_mutex_unlock(&t->mu);
  *moved = done;
  return rv == NNG_EAGAIN ? 0 : rv;
}

static size_t tls_pending(vmt_conn_t *c) {
  tls_conn_t *t = (tls_conn_t *)c;
  pthread_mutex_lock(&t->mu);
  size_t n = (size_t)SSL_pending(t->ssl);
  pthread_mutex_unlock(&t->mu);
  return n;
}

static short tls_want(vmt_conn_t *c, int writing) {
  tls_conn_t *t = (tls_conn_t *)c;
  pthread_mutex_lock(&t->mu);
  short w = writing ? t->want_w : t->want_r;
  pthread_mutex_unlock(&t->mu);
  return w;
}

static void tls_free(vmt_conn_t *c) {
  tls_conn_t *t = (tls_conn_t *)c;
  SSL_free(t->ssl);
  pthread_mutex_destroy(&t->mu);
  free(t);
}

static const vmt_conn_ops_t tls_ops = {
    .read_now = tls_read_now,
    .writev_now = tls_writev_now,
    .pending = tls_pending,
    .want = tls_want,
    .free = tls_free,
};

int vmt_conn_is_tls(const vmt_conn_t *c) {
  return c->ops == &tls_ops;
}

int vmt_tls_wrap(vmt_tls_t *cfg, int fd, vmt_conn_t **out) {
  tls_conn_t *t = calloc(1, sizeof(*t));
  if (!t) return NNG_ENOMEM;
  BIO *b = BIO_new(bio_method);
  t->ssl = SSL_new(cfg->ctx);
  if (!b || !t->ssl || pthread_mutex_init(&t->mu, NULL) != 0) {
    BIO_free(b);
    SSL_free(t->ssl);
    free(t);
    return NNG_ENOMEM;
  }
  BIO_set_data(b, (void *)(intptr_t)fd);
  SSL_set_bio(t->ssl, b, b);
  if (cfg->server) {
    SSL_set_accept_state(t->ssl);
  } else {
    SSL_set_connect_state(t->ssl);
    if (cfg->server_name[0]) {
      SSL_set_tlsext_host_name(t->ssl, cfg->server_name);
      /* The name is compared as text with the certificate's DNS names
       * (else its common name), an address literal too: SSL_set1_host
       * would take one for an IP address and want it in an IP entry. */
      X509_VERIFY_PARAM_set1_host(SSL_get0_param(t->ssl), cfg->server_name, 0);
    }
  }
  t->base.ops = &tls_ops;
  t->base.fd = fd;
  t->want_r = POLLIN;
  t->want_w = POLLOUT;
  *out = &t->base;
  return 0;
}

int vmt_tls_handshake(vmt_conn_t *c, int32_t timeout_ms) {
  tls_conn_t *t = (tls_conn_t *)c;
  int64_t deadline = timeout_ms > 0 ? vmt_now_ns() + (int64_t)timeout_ms * 1000000 : -1;
  for (;;) {
    short want = POLLIN;
    pthread_mutex_lock(&t->mu);
    int r = SSL_do_handshake(t->ssl);
    int rv = 0;
    if (r != 1) {
      rv = ssl_outcome(t, r, &want);
      if (rv == NNG_ECRYPTO && SSL_get_verify_result(t->ssl) != X509_V_OK) rv = NNG_EPEERAUTH;
    }
    pthread_mutex_unlock(&t->mu);
    if (rv != NNG_EAGAIN) return rv;
    rv = vmt_poll(c, c->fd, want, deadline);
    if (rv) return rv;
  }
}
