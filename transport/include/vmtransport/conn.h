/* Connections: tcp://, ipc:// (and abstract://) and tls+tcp:// byte
 * streams that own their descriptors. Every one is a non-blocking socket
 * waited on with poll() by the thread that wants its bytes, so a reply or
 * a request wakes that thread directly, on every transport.
 *
 * A connection may be read by one thread and written by another at the
 * same time (TLS serialises its library calls inside; none of them
 * blocks). vmt_conn_close may come from any thread: it wakes whoever
 * waits on the connection, and every later operation fails with
 * NNG_ECLOSED; the descriptor itself is released by vmt_conn_free.
 *
 * Errors are nng's numbers: NNG_ETIMEDOUT (nothing moved in time),
 * NNG_ECONNSHUT (the peer closed), NNG_ECONNRESET, NNG_ECLOSED (closed
 * here), NNG_ECONNREFUSED, NNG_EADDRINVAL / NNG_EINVAL / NNG_ENOTSUP (a
 * bad URL), NNG_EADDRINUSE, NNG_EUNREACHABLE, NNG_ECRYPTO (TLS failed),
 * NNG_EPEERAUTH (the peer's certificate was refused), NNG_ENOMEM.
 * Timeouts are in ms; <= 0 means no limit unless said otherwise.
 */
#ifndef VMTRANSPORT_CONN_H
#define VMTRANSPORT_CONN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vmt_conn vmt_conn_t;
typedef struct vmt_listener vmt_listener_t;
typedef struct vmt_tls vmt_tls_t;

/* The operations of one kind of connection. */
typedef struct vmt_conn_ops {
  /* Reads what is there now, at most cap bytes, without waiting: 0 with
   * *got > 0, NNG_EAGAIN when nothing is there yet, or the error. */
  int (*read_now)(vmt_conn_t *c, void *buf, size_t cap, size_t *got);
  /* Writes what the socket takes now, without waiting: 0 with *moved
   * (maybe 0), or the error. */
  int (*writev_now)(vmt_conn_t *c, const struct iovec *iov, unsigned n, size_t *moved);
  /* Bytes already read from the socket and buffered by the library
   * (TLS records decrypted but not yet taken): a reader must not wait
   * on the socket while there are any. */
  size_t (*pending)(vmt_conn_t *c);
  /* After read_now or writev_now said NNG_EAGAIN or moved nothing: the
   * poll() events the socket must show before trying again. */
  short (*want)(vmt_conn_t *c, int writing);
  void (*free)(vmt_conn_t *c);
} vmt_conn_ops_t;

struct vmt_conn {
  const vmt_conn_ops_t *ops;
  int fd;     /* owned: non-blocking, closed by vmt_conn_free */
  int ipc;    /* ipc:// framing (a type byte before each length) */
  int closed; /* atomic: vmt_conn_close was called */
  char peer[64]; /* the peer's address ("ipc" on ipc://) */
};

/* Reads at least one byte (at most cap) into buf, waiting up to
 * timeout_ms for it: 0 and *got, or the error. */
int vmt_conn_read(vmt_conn_t *c, void *buf, size_t cap, int32_t timeout_ms, size_t *got);
/* Writes every byte of iov (n entries), each wait for the socket to take
 * more taking up to timeout_ms: 0, or the error with *moved (may be
 * NULL) the bytes that did go, so a caller can tell a clean timeout (0)
 * from a stream left in mid-message. */
int vmt_conn_writev(vmt_conn_t *c, const struct iovec *iov, unsigned n, int32_t timeout_ms,
                    size_t *moved);
/* Writes as much of iov as the socket takes now: 0 and *moved, or the
 * error. */
int vmt_conn_writev_now(vmt_conn_t *c, const struct iovec *iov, unsigned n, size_t *moved);
/* Waits up to timeout_ms (0: not at all, < 0: no limit) until c has bytes to read (or
 * its end or an error): 0, or NNG_ETIMEDOUT, or NNG_ECLOSED. */
int vmt_conn_wait_readable(vmt_conn_t *c, int32_t timeout_ms);
/* Waits up to timeout_ms (as above) until c takes more bytes: 0, NNG_ETIMEDOUT or
 * NNG_ECLOSED. */
int vmt_conn_wait_writable(vmt_conn_t *c, int32_t timeout_ms);
/* Whether the library holds bytes of c already read from the socket. */
int vmt_conn_has_pending(vmt_conn_t *c);
/* Closes c for every thread: waiters wake, later calls fail. */
void vmt_conn_close(vmt_conn_t *c);
int vmt_conn_is_closed(const vmt_conn_t *c);
/* Releases c and its descriptor (no thread may use it any more). */
void vmt_conn_free(vmt_conn_t *c);

/* The SP handshake: sends ours (self) and checks the peer's (it must
 * announce peer) within timeout_ms: 0, NNG_EPROTO, or the I/O error. */
int vmt_conn_handshake(vmt_conn_t *c, uint16_t self, uint16_t peer, int32_t timeout_ms);

/* ------------------------------------------------------------------ TLS */

/* What a TLS end presents and trusts. PEM text, NUL-terminated; any may
 * be NULL. */
typedef struct vmt_tls_opts {
  int server;            /* accepting end */
  const char *cert_pem;  /* our certificate (chain); needs key_pem */
  const char *key_pem;
  const char *ca_pem;    /* client: the trust anchors (NULL: verify nothing) */
  const char *server_name; /* client: the name the certificate must carry (NULL: any) */
} vmt_tls_opts_t;

/* A TLS configuration (an OpenSSL context), shared by the connections it
 * makes: 0, or NNG_EINVAL with err (cap bytes) saying what is wrong. */
int vmt_tls_new(const vmt_tls_opts_t *o, vmt_tls_t **out, char *err, size_t err_cap);
void vmt_tls_free(vmt_tls_t *t);

/* ------------------------------------------------------------------ dial */

/* 0 when url is one vmt_dial and vmt_listen take, else NNG_ENOTSUP (an
 * unknown scheme) or NNG_EADDRINVAL. Nothing is resolved. */
int vmt_url_check(const char *url);

/* Connects to url (tcp://HOST:PORT, tls+tcp://HOST:PORT, ipc:///PATH,
 * abstract://NAME) within timeout_ms, TLS handshake included (tls: the
 * configuration for tls+tcp://, else NULL). TCP connections get
 * TCP_NODELAY and keep-alive. */
int vmt_dial(const char *url, vmt_tls_t *tls, int32_t timeout_ms, vmt_conn_t **out);

/* Takes over fd, a connected stream socket made elsewhere (a socketpair
 * end, an inherited descriptor): made non-blocking and owned by *out, framed
 * as tcp:// (ipc 0) or ipc://. 0, NNG_ENOMEM, or the fcntl error. */
int vmt_conn_adopt(int fd, int ipc, const char *peer, vmt_conn_t **out);

/* Listens on url (port 0: any free one; ipc: a stale socket file of a
 * dead listener is replaced). */
int vmt_listen(const char *url, vmt_tls_t *tls, vmt_listener_t **out);
/* The TCP port bound (0 for ipc). */
int vmt_listener_port(const vmt_listener_t *l);
/* Waits for the next connection: 0 and *out (for TLS the handshake is
 * still to come: vmt_conn_start), NNG_ECLOSED once the listener is
 * closed, or a transient error (out of descriptors ...). */
int vmt_listener_accept(vmt_listener_t *l, vmt_conn_t **out);
/* Finishes setting up an accepted connection within timeout_ms (the TLS
 * handshake; nothing for tcp and ipc). */
int vmt_conn_start(vmt_conn_t *c, int32_t timeout_ms);
/* Wakes and ends every accept; later ones fail with NNG_ECLOSED. */
void vmt_listener_close(vmt_listener_t *l);
void vmt_listener_free(vmt_listener_t *l);

/* -------------------------------------------------------------- reader */

/* Bytes a reader buffers: small messages arrive with one read. */
#define VMT_RBUF (16u << 10)

/* A buffered reader of one connection (used by one thread at a time). */
typedef struct vmt_reader {
  vmt_conn_t *c;
  size_t off, len;
  uint8_t buf[VMT_RBUF];
} vmt_reader_t;

/* Reads n bytes into dst: buffered bytes first, then the rest with as few
 * reads as it takes (small rests through the buffer, large ones straight
 * into dst). Each wait may take timeout_ms; *moved (may be NULL) as for
 * vmt_conn_writev. */
int vmt_read(vmt_reader_t *r, void *dst, size_t n, int32_t timeout_ms, size_t *moved);
/* Throws away what the reader buffered. */
void vmt_reader_drop(vmt_reader_t *r);

#ifdef __cplusplus
}
#endif
#endif /* VMTRANSPORT_CONN_H */
