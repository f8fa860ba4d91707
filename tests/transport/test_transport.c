/* The transport layer on real loopback sockets: tcp://, ipc:// and
 * tls+tcp:// connections (partial reads and writes, TLS bytes pending in
 * the library, a close from another thread, a peer that stalls
 * mid-frame), the frame codec, the multiplexer (calling and serving ends,
 * replies into a call's own buffer) and the send queues. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>

#include "vmtransport/conn.h"
#include "vmtransport/frame.h"
#include "vmtransport/mux.h"
#include "vmtransport/sendq.h"

enum { K_TCP, K_IPC, K_TLS, K_COUNT };
static const char *const KIND[K_COUNT] = {"tcp", "ipc", "tls"};

static char g_dir[64];
static char *g_cert, *g_key;

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  char *buf = calloc(1, 1 << 16);
  assert_non_null(buf);
  size_t n = fread(buf, 1, (1 << 16) - 1, f);
  fclose(f);
  assert_true(n > 0);
  return buf;
}

static int setup_all(void **state) {
  (void)state;
  snprintf(g_dir, sizeof(g_dir), "/tmp/vmt-test-XXXXXX");
  if (!mkdtemp(g_dir)) return -1;
  char cmd[512];
  snprintf(cmd, sizeof(cmd),
           "cd %s && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
           "-days 2 -subj /CN=127.0.0.1 -keyout key.pem -out cert.pem >/dev/null 2>&1",
           g_dir);
  if (system(cmd) != 0) return -1;
  char p[128];
  snprintf(p, sizeof(p), "%s/cert.pem", g_dir);
  g_cert = slurp(p);
  snprintf(p, sizeof(p), "%s/key.pem", g_dir);
  g_key = slurp(p);
  return 0;
}

static int teardown_all(void **state) {
  (void)state;
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", g_dir);
  int rc = system(cmd);
  free(g_cert);
  free(g_key);
  return rc == 0 ? 0 : -1;
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

/* A connected pair of one kind: a is the dialer, b the accepted end. */
typedef struct pair {
  vmt_listener_t *l;
  vmt_tls_t *stls, *ctls;
  vmt_conn_t *a, *b;
  char url[128];
} pair_t;

typedef struct accept_arg {
  pair_t *p;
  int rv;
} accept_arg_t;

static void *accept_main(void *arg) {
  accept_arg_t *x = arg;
  x->rv = vmt_listener_accept(x->p->l, &x->p->b);
  if (!x->rv) x->rv = vmt_conn_start(x->p->b, 5000);
  if (x->rv) { /* as the agent does: a failed start ends the connection */
    vmt_conn_free(x->p->b);
    x->p->b = NULL;
  }
  return NULL;
}

static void pair_open(pair_t *p, int kind) {
  memset(p, 0, sizeof(*p));
  char err[256];
  if (kind == K_TLS) {
    vmt_tls_opts_t so = {.server = 1, .cert_pem = g_cert, .key_pem = g_key};
    assert_int_equal(vmt_tls_new(&so, &p->stls, err, sizeof(err)), 0);
    vmt_tls_opts_t co = {.ca_pem = g_cert, .server_name = "127.0.0.1"};
    assert_int_equal(vmt_tls_new(&co, &p->ctls, err, sizeof(err)), 0);
  }
  if (kind == K_IPC)
    snprintf(p->url, sizeof(p->url), "ipc://%s/sock", g_dir);
  else
    snprintf(p->url, sizeof(p->url), "%s://127.0.0.1:0", kind == K_TLS ? "tls+tcp" : "tcp");
  assert_int_equal(vmt_listen(p->url, p->stls, &p->l), 0);
  if (kind != K_IPC) {
    assert_true(vmt_listener_port(p->l) > 0);
    snprintf(p->url, sizeof(p->url), "%s://127.0.0.1:%d", kind == K_TLS ? "tls+tcp" : "tcp",
             vmt_listener_port(p->l));
  }
  accept_arg_t x = {.p = p};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, accept_main, &x), 0);
  assert_int_equal(vmt_dial(p->url, p->ctls, 5000, &p->a), 0);
  pthread_join(t, NULL);
  assert_int_equal(x.rv, 0);
  assert_int_equal(p->a->ipc, kind == K_IPC);
  assert_int_equal(p->b->ipc, kind == K_IPC);
}

static void pair_close(pair_t *p) {
  vmt_conn_free(p->a);
  vmt_conn_free(p->b);
  vmt_listener_close(p->l);
  vmt_listener_free(p->l);
  vmt_tls_free(p->stls);
  vmt_tls_free(p->ctls);
}

/* ------------------------------------------------------------ codec */

static void test_frame_codec(void **state) {
  (void)state;
  uint8_t h[VMT_HANDSHAKE_LEN];
  vmt_handshake_make(VMT_SP_REQ0, h);
  const uint8_t want[8] = {0, 'S', 'P', 0, 0x00, 0x30, 0, 0};
  assert_memory_equal(h, want, 8);
  assert_int_equal(vmt_handshake_check(h, VMT_SP_REQ0), 0);
  assert_int_equal(vmt_handshake_check(h, VMT_SP_REP0), NNG_EPROTO);
  h[6] = 1;
  assert_int_equal(vmt_handshake_check(h, VMT_SP_REQ0), NNG_EPROTO);

  uint8_t pre[VMT_PREFIX_MAX];
  assert_int_equal(vmt_prefix_make(0, 0x0102030405060708ull, pre), 8);
  const uint8_t be[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  assert_memory_equal(pre, be, 8);
  uint64_t len = 0;
  assert_int_equal(vmt_prefix_parse(0, pre, &len), 0);
  assert_true(len == 0x0102030405060708ull);
  assert_int_equal(vmt_prefix_make(1, 300, pre), 9);
  assert_int_equal(pre[0], 1);
  assert_int_equal(vmt_prefix_parse(1, pre, &len), 0);
  assert_int_equal(len, 300);
  pre[0] = 2; /* not a message */
  assert_int_equal(vmt_prefix_parse(1, pre, &len), NNG_EPROTO);

  uint8_t head[VMT_HEAD_MAX];
  assert_int_equal(vmt_head_make(0, vmt_id_make(0x180000005ull), 10, head), 12);
  assert_int_equal(head[7], 14); /* id + body */
  assert_int_equal(vmt_id_get(head + 8), 0x80000005u);

  uint8_t msg[40] = {0};
  assert_int_equal(vmt_request_header(msg, 3), 0);
  msg[0] = 0x80;
  assert_int_equal(vmt_request_header(msg, 4), 4);
  msg[0] = 0;
  msg[8] = 0x80;
  assert_int_equal(vmt_request_header(msg, 12), 12);
  assert_int_equal(vmt_request_header(msg, 11), 0);
  memset(msg, 0, sizeof(msg));
  assert_int_equal(vmt_request_header(msg, sizeof(msg)), -1);

  uint8_t a[3], b[5], c[2];
  struct iovec v[3] = {{a, 3}, {b, 5}, {c, 2}}, *p = v;
  unsigned n = 3;
  vmt_iov_advance(&p, &n, 4);
  assert_int_equal(n, 2);
  assert_ptr_equal(p->iov_base, b + 1);
  assert_int_equal(p->iov_len, 4);
  vmt_iov_advance(&p, &n, 4);
  assert_int_equal(n, 1);
  assert_ptr_equal(p->iov_base, c);
  vmt_iov_advance(&p, &n, 2);
  assert_int_equal(n, 0);

  assert_int_equal(vmt_url_check("tcp://127.0.0.1:5555"), 0);
  assert_int_equal(vmt_url_check("tls+tcp://[::1]:5555"), 0);
  assert_int_equal(vmt_url_check("ipc:///tmp/x"), 0);
  assert_int_equal(vmt_url_check("abstract://x%20y"), 0);
  assert_int_equal(vmt_url_check("tcp://127.0.0.1"), NNG_EADDRINVAL);
  assert_int_equal(vmt_url_check("tcp://127.0.0.1:99999"), NNG_EADDRINVAL);
  assert_int_equal(vmt_url_check("tcp://127.0.0.1:5x"), NNG_EADDRINVAL);
  assert_int_equal(vmt_url_check("ws://127.0.0.1:80"), NNG_ENOTSUP);
  assert_int_equal(vmt_url_check("127.0.0.1:80"), NNG_EADDRINVAL);
  assert_true(vmt_url_is_ipc("ipc:///x") && vmt_url_is_ipc("abstract://x"));
  assert_false(vmt_url_is_ipc("tcp://x:1"));
}

/* --------------------------------------------------- connections */

typedef struct bulk_arg {
  vmt_conn_t *c;
  uint8_t *buf;
  size_t n;
  int slow; /* read in small pieces with pauses: the writer sees partial writes */
  int rv;
} bulk_arg_t;

static void *bulk_reader(void *arg) {
  bulk_arg_t *x = arg;
  size_t done = 0;
  while (done < x->n && !x->rv) {
    size_t got = 0, cap = x->slow ? 4096 : x->n - done;
    if (cap > x->n - done) cap = x->n - done;
    x->rv = vmt_conn_read(x->c, x->buf + done, cap, 5000, &got);
    done += got;
    if (x->slow && done < (1u << 20)) sleep_ms(done % (256 << 10) < 4096 ? 20 : 0);
  }
  return NULL;
}

/* 8 MiB in one writev of three parts, read in 4 KiB pieces with pauses:
 * the writer's socket fills, its writes are partial and resume; every
 * byte arrives in order. Then the other way, read whole. */
static void check_bulk(int kind) {
  pair_t p;
  pair_open(&p, kind);
  uint8_t rep[VMT_HANDSHAKE_LEN];
  vmt_handshake_make(VMT_SP_REP0, rep);
  struct iovec hv = {rep, sizeof(rep)};
  assert_int_equal(vmt_conn_writev(p.b, &hv, 1, 5000, NULL), 0);
  assert_int_equal(vmt_conn_handshake(p.a, VMT_SP_REQ0, VMT_SP_REP0, 5000), 0);
  size_t n = 8u << 20;
  uint8_t *src = malloc(n), *dst = calloc(1, n);
  assert_non_null(src);
  assert_non_null(dst);
  for (size_t i = 0; i < n; i++) src[i] = (uint8_t)(i * 131 + (i >> 13));
  for (int dir = 0; dir < 2; dir++) {
    vmt_conn_t *w = dir ? p.b : p.a, *r = dir ? p.a : p.b;
    if (dir == 0) { /* the server checks the handshake the client sent */
      uint8_t h[8];
      size_t got = 0;
      assert_int_equal(vmt_conn_read(r, h, 8, 5000, &got), 0);
      assert_int_equal(got, 8);
      assert_int_equal(vmt_handshake_check(h, VMT_SP_REQ0), 0);
    }
    memset(dst, 0, n);
    bulk_arg_t x = {.c = r, .buf = dst, .n = n, .slow = dir == 0};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, bulk_reader, &x), 0);
    struct iovec v[3] = {{src, 1000}, {src + 1000, (n - 1000) / 2}, {src + 1000 + (n - 1000) / 2, n - 1000 - (n - 1000) / 2}};
    size_t moved = 0;
    assert_int_equal(vmt_conn_writev(w, v, 3, 5000, &moved), 0);
    assert_int_equal(moved, n);
    pthread_join(t, NULL);
    assert_int_equal(x.rv, 0);
    assert_memory_equal(src, dst, n);
  }
  /* A non-blocking write into a peer that reads nothing stops short. */
  size_t total = 0, moved = 1;
  for (int i = 0; i < 10000 && moved; i++) {
    struct iovec v = {src, n};
    assert_int_equal(vmt_conn_writev_now(p.a, &v, 1, &moved), 0);
    total += moved;
  }
  assert_int_equal(moved, 0);
  assert_true(total > 0);
  struct iovec v = {src, n};
  int64_t t0 = now_ms();
  assert_int_equal(vmt_conn_writev(p.a, &v, 1, 200, &moved), NNG_ETIMEDOUT);
  assert_true(now_ms() - t0 >= 150);
  free(src);
  free(dst);
  pair_close(&p);
}

static void test_bulk_tcp(void **state) {
  (void)state;
  check_bulk(K_TCP);
}
static void test_bulk_ipc(void **state) {
  (void)state;
  check_bulk(K_IPC);
}
static void test_bulk_tls(void **state) {
  (void)state;
  check_bulk(K_TLS);
}

/* Bytes the library holds: after a one-byte read of a 100-byte record
 * the socket is empty, yet the connection is readable (TLS: pending in
 * OpenSSL's buffer) and the rest reads without waiting. */
static void check_pending(int kind) {
  pair_t p;
  pair_open(&p, kind);
  uint8_t out[100], in[100];
  for (int i = 0; i < 100; i++) out[i] = (uint8_t)i;
  struct iovec v = {out, sizeof(out)};
  assert_int_equal(vmt_conn_writev(p.b, &v, 1, 5000, NULL), 0);
  assert_int_equal(vmt_conn_wait_readable(p.a, 5000), 0);
  size_t got = 0;
  assert_int_equal(vmt_conn_read(p.a, in, 1, 5000, &got), 0);
  assert_int_equal(got, 1);
  struct pollfd pf = {.fd = p.a->fd, .events = POLLIN};
  if (kind == K_TLS) {
    assert_true(vmt_conn_has_pending(p.a));
    assert_int_equal(poll(&pf, 1, 50), 0); /* the socket itself has nothing */
  } else {
    assert_false(vmt_conn_has_pending(p.a));
    assert_int_equal(poll(&pf, 1, 50), 1); /* the kernel holds the rest */
  }
  assert_int_equal(vmt_conn_wait_readable(p.a, 0), 0);
  assert_int_equal(vmt_conn_read(p.a, in + 1, 99, 0, &got), 0);
  assert_int_equal(got, 99);
  assert_memory_equal(in, out, 100);
  assert_false(vmt_conn_has_pending(p.a));
  assert_int_equal(vmt_conn_wait_readable(p.a, 50), NNG_ETIMEDOUT);
  /* The peer's end reads as NNG_ECONNSHUT. */
  vmt_conn_close(p.b);
  assert_int_equal(vmt_conn_read(p.a, in, 1, 5000, &got), NNG_ECONNSHUT);
  pair_close(&p);
}

static void test_pending_tcp(void **state) {
  (void)state;
  check_pending(K_TCP);
}
static void test_pending_ipc(void **state) {
  (void)state;
  check_pending(K_IPC);
}
static void test_pending_tls(void **state) {
  (void)state;
  check_pending(K_TLS);
}

typedef struct closer {
  vmt_conn_t *c;
  int ms;
} closer_t;

static void *close_later(void *arg) {
  closer_t *x = arg;
  sleep_ms(x->ms);
  vmt_conn_close(x->c);
  return NULL;
}

/* A peer that stalls mid-frame: half a message, then silence. A read
 * with a limit gives up with NNG_ETIMEDOUT and says how much came; a
 * close from another thread ends a read that waits without a limit. */
static void check_stall(int kind) {
  pair_t p;
  pair_open(&p, kind);
  vmt_reader_t *r = calloc(1, sizeof(*r));
  assert_non_null(r);
  r->c = p.a;
  uint8_t head[VMT_HEAD_MAX], body[16] = "half a frame";
  size_t hn = vmt_head_make(p.b->ipc, vmt_id_make(7), 1000, head);
  struct iovec v[2] = {{head, hn}, {body, sizeof(body)}};
  assert_int_equal(vmt_conn_writev(p.b, v, 2, 5000, NULL), 0);
  uint8_t msg[1004];
  uint8_t pre[VMT_PREFIX_MAX];
  uint64_t len = 0;
  assert_int_equal(vmt_read(r, pre, vmt_prefix_len(p.a->ipc), 5000, NULL), 0);
  assert_int_equal(vmt_prefix_parse(p.a->ipc, pre, &len), 0);
  assert_int_equal(len, 1004);
  size_t moved = 0;
  int64_t t0 = now_ms();
  assert_int_equal(vmt_read(r, msg, (size_t)len, 200, &moved), NNG_ETIMEDOUT);
  assert_true(now_ms() - t0 >= 150);
  assert_int_equal(moved, 4 + sizeof(body));
  assert_memory_equal(msg + 4, body, sizeof(body));
  closer_t x = {.c = p.a, .ms = 100};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, close_later, &x), 0);
  assert_int_equal(vmt_read(r, msg, 10, 0, NULL), NNG_ECLOSED);
  pthread_join(t, NULL);
  assert_true(vmt_conn_is_closed(p.a));
  free(r);
  pair_close(&p);
}

static void test_stall_tcp(void **state) {
  (void)state;
  check_stall(K_TCP);
}
static void test_stall_ipc(void **state) {
  (void)state;
  check_stall(K_IPC);
}
static void test_stall_tls(void **state) {
  (void)state;
  check_stall(K_TLS);
}

/* Dial and listen errors, and TLS refusals. */
static void test_dial_errors(void **state) {
  (void)state;
  vmt_conn_t *c = NULL;
  pair_t p;
  pair_open(&p, K_TCP);
  char url[128];
  snprintf(url, sizeof(url), "%s", p.url);
  pair_close(&p); /* nobody listens there now */
  assert_int_equal(vmt_dial(url, NULL, 2000, &c), NNG_ECONNREFUSED);
  char path[128];
  snprintf(path, sizeof(path), "ipc://%s/nobody", g_dir);
  assert_int_equal(vmt_dial(path, NULL, 2000, &c), NNG_ECONNREFUSED);
  assert_int_equal(vmt_dial("tcp://127.0.0.1", NULL, 2000, &c), NNG_EADDRINVAL);
  assert_int_equal(vmt_dial("tls+tcp://127.0.0.1:1", NULL, 2000, &c), NNG_EINVAL); /* no config */
  assert_null(c);
  /* Two listeners on one ipc path: the second is refused; a stale file
   * of a dead one is replaced. */
  vmt_listener_t *l1 = NULL, *l2 = NULL;
  snprintf(path, sizeof(path), "ipc://%s/twice", g_dir);
  assert_int_equal(vmt_listen(path, NULL, &l1), 0);
  assert_int_equal(vmt_listen(path, NULL, &l2), NNG_EADDRINUSE);
  vmt_listener_close(l1);
  vmt_listener_free(l1);
  assert_int_equal(vmt_listen(path, NULL, &l2), 0);
  vmt_listener_free(l2);

  /* TLS: a client trusting another certificate is refused, so is a name
   * the certificate does not carry. */
  char err[256];
  vmt_tls_t *s = NULL, *bad = NULL, *wrong_name = NULL;
  vmt_tls_opts_t so = {.server = 1, .cert_pem = g_cert, .key_pem = g_key};
  assert_int_equal(vmt_tls_new(&so, &s, err, sizeof(err)), 0);
  vmt_tls_opts_t key_only = {.server = 1, .cert_pem = g_key, .key_pem = g_key};
  assert_int_equal(vmt_tls_new(&key_only, &bad, err, sizeof(err)), NNG_EINVAL);
  assert_non_null(strstr(err, "certificate"));
  vmt_tls_opts_t no_ca = {.ca_pem = "not a certificate"};
  assert_int_equal(vmt_tls_new(&no_ca, &bad, err, sizeof(err)), NNG_EINVAL);
  vmt_tls_opts_t co = {.ca_pem = g_cert, .server_name = "other.example"};
  assert_int_equal(vmt_tls_new(&co, &wrong_name, err, sizeof(err)), 0);
  vmt_listener_t *l = NULL;
  assert_int_equal(vmt_listen("tls+tcp://127.0.0.1:0", s, &l), 0);
  snprintf(url, sizeof(url), "tls+tcp://127.0.0.1:%d", vmt_listener_port(l));
  pair_t q = {.l = l};
  accept_arg_t x = {.p = &q};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, accept_main, &x), 0);
  assert_int_equal(vmt_dial(url, wrong_name, 5000, &c), NNG_EPEERAUTH);
  pthread_join(t, NULL);
  assert_int_not_equal(x.rv, 0); /* the server's handshake failed too */
  assert_null(q.b);
  /* A plain client on the TLS port: the SP handshake gets no SP answer. */
  q.b = NULL;
  assert_int_equal(pthread_create(&t, NULL, accept_main, &x), 0);
  snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", vmt_listener_port(l));
  assert_int_equal(vmt_dial(url, NULL, 5000, &c), 0);
  int rv = vmt_conn_handshake(c, VMT_SP_REQ0, VMT_SP_REP0, 2000);
  if (rv != NNG_EPROTO && rv != NNG_ECONNSHUT && rv != NNG_ECONNRESET)
    fail_msg("a plain SP handshake with a TLS server: %s", nng_strerror(rv));
  vmt_conn_free(c);
  pthread_join(t, NULL);
  assert_int_equal(x.rv, NNG_ECRYPTO);
  assert_null(q.b);
  /* A closed listener wakes its acceptor. */
  q.b = NULL;
  assert_int_equal(pthread_create(&t, NULL, accept_main, &x), 0);
  sleep_ms(50);
  vmt_listener_close(l);
  pthread_join(t, NULL);
  assert_int_equal(x.rv, NNG_ECLOSED);
  vmt_listener_free(l);
  vmt_tls_free(s);
  vmt_tls_free(wrong_name);
}

/* ------------------------------------------------------------- mux */

typedef struct msgbuf {
  uint8_t mem[64 + (1 << 16)];
  size_t off, len;
  uint8_t *ext;
  size_t ext_len;
} msgbuf_t;

static void *t_get(void *ctx, size_t size, uint8_t **mem) {
  (void)ctx;
  if (size > (1 << 16)) return NULL;
  msgbuf_t *m = calloc(1, sizeof(*m));
  if (m) *mem = m->mem;
  return m;
}
static void t_put(void *ctx, void *msg) {
  (void)ctx;
  free(msg);
}
static void t_received(void *ctx, void *msg, size_t off, size_t len, uint8_t *ext, size_t el) {
  (void)ctx;
  msgbuf_t *m = msg;
  m->off = off;
  m->len = len;
  m->ext = ext;
  m->ext_len = el;
}
/* Test bodies: a u32 (little-endian) count of head bytes after it, then the payload. */
static uint64_t t_payload(const uint8_t *head, uint64_t body_len) {
  uint64_t h = head[0] | (uint64_t)head[1] << 8 | (uint64_t)head[2] << 16 | (uint64_t)head[3] << 24;
  return h <= body_len - 4 ? body_len - 4 - h : 0;
}

/* The peer: reads n requests (id + body "x<k>"), then answers them in
 * reverse order with body = [4-byte head length 0][payload of 1000 bytes
 * of k], except request with k == drop which gets no answer. */
typedef struct peer {
  vmt_conn_t *c;
  int n, drop, close_after;
  int rv;
} peer_t;

static void *peer_main(void *arg) {
  peer_t *x = arg;
  vmt_reader_t *r = calloc(1, sizeof(*r));
  r->c = x->c;
  uint32_t ids[16];
  uint8_t ks[16];
  for (int i = 0; i < x->n && !x->rv; i++) {
    uint8_t pre[VMT_PREFIX_MAX], msg[64];
    uint64_t len = 0;
    x->rv = vmt_read(r, pre, vmt_prefix_len(x->c->ipc), 5000, NULL);
    if (!x->rv) x->rv = vmt_prefix_parse(x->c->ipc, pre, &len);
    if (!x->rv && (len < 6 || len > sizeof(msg))) x->rv = NNG_EPROTO;
    if (!x->rv) x->rv = vmt_read(r, msg, (size_t)len, 5000, NULL);
    if (!x->rv) {
      assert_int_equal(vmt_request_header(msg, (size_t)len), 4);
      ids[i] = vmt_id_get(msg);
      ks[i] = msg[5];
    }
  }
  if (x->close_after) {
    vmt_conn_close(x->c);
  } else {
    for (int i = x->n - 1; i >= 0 && !x->rv; i--) {
      if (ks[i] == x->drop) continue;
      uint8_t body[4 + 1000];
      memset(body, 0, 4);
      memset(body + 4, ks[i], 1000);
      uint8_t head[VMT_HEAD_MAX];
      size_t hn = vmt_head_make(x->c->ipc, ids[i], sizeof(body), head);
      struct iovec v[2] = {{head, hn}, {body, sizeof(body)}};
      x->rv = vmt_conn_writev(x->c, v, 2, 5000, NULL);
    }
  }
  free(r);
  return NULL;
}

static void check_mux(int kind) {
  pair_t p;
  pair_open(&p, kind);
  vmt_mux_msgs_t msgs = {.get = t_get, .put = t_put, .received = t_received,
                         .payload_len = t_payload, .peek = 4};
  vmt_mux_t m;
  assert_int_equal(vmt_mux_init(&m, p.a, &msgs, 1 << 16, 2000), 0);
  /* Four calls, answered in reverse order; two name a destination. */
  peer_t x = {.c = p.b, .n = 4, .drop = -1};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, peer_main, &x), 0);
  vmt_call_t k[4];
  uint8_t dst[2][1000];
  memset(k, 0, sizeof(k));
  for (int i = 0; i < 4; i++) {
    if (i < 2) {
      k[i].dst = dst[i];
      k[i].dst_len = 1000;
    }
    uint8_t body[2] = {'x', (uint8_t)i};
    struct iovec v = {body, 2};
    assert_int_equal(vmt_mux_send(&m, &k[i], vmt_id_make(100 + i), &v, 1), 0);
  }
  vmt_call_t *ks[4] = {&k[0], &k[1], &k[2], &k[3]};
  int64_t deadline = vmt_mux_now_ns() + 5000000000ll;
  for (int done = 0; done < 4;) {
    assert_int_equal(vmt_mux_wait(&m, ks, 4 - done, deadline), 0);
    for (int i = 0; i < 4 - done; i++)
      if (ks[i]->done) {
        ks[i] = ks[3 - done];
        done++;
        break;
      }
  }
  for (int i = 0; i < 4; i++) {
    assert_int_equal(k[i].rv, 0);
    msgbuf_t *r = k[i].reply;
    assert_non_null(r);
    if (i < 2) { /* straight into the destination */
      assert_ptr_equal(r->ext, dst[i]);
      assert_int_equal(r->ext_len, 1000);
      assert_int_equal(r->len, 4);
      assert_int_equal(dst[i][999], i);
    } else {
      assert_null(r->ext);
      assert_int_equal(r->len, 1004);
      assert_int_equal(r->mem[r->off + 4 + 999], i);
    }
    free(r);
  }
  pthread_join(t, NULL);
  assert_int_equal(x.rv, 0);

  /* A call given up on: its late reply is dropped, the next call gets
   * its own. */
  x = (peer_t){.c = p.b, .n = 2, .drop = 1};
  assert_int_equal(pthread_create(&t, NULL, peer_main, &x), 0);
  memset(k, 0, sizeof(k));
  for (int i = 0; i < 2; i++) {
    uint8_t body[2] = {'x', (uint8_t)i};
    struct iovec v = {body, 2};
    assert_int_equal(vmt_mux_send(&m, &k[i], vmt_id_make(200 + i), &v, 1), 0);
  }
  vmt_call_t *one = &k[1];
  assert_int_equal(vmt_mux_wait(&m, &one, 1, vmt_mux_now_ns() + 300000000ll), NNG_ETIMEDOUT);
  vmt_mux_abandon(&m, &k[1], NNG_ETIMEDOUT);
  assert_int_equal(k[1].rv, NNG_ETIMEDOUT);
  one = &k[0];
  assert_int_equal(vmt_mux_wait(&m, &one, 1, deadline), 0);
  assert_int_equal(k[0].rv, 0);
  free(k[0].reply);
  pthread_join(t, NULL);

  /* Lose-all: the peer reads two requests and closes; both calls fail,
   * and so does every later one. */
  x = (peer_t){.c = p.b, .n = 2, .drop = -1, .close_after = 1};
  assert_int_equal(pthread_create(&t, NULL, peer_main, &x), 0);
  memset(k, 0, sizeof(k));
  for (int i = 0; i < 2; i++) {
    uint8_t body[2] = {'x', (uint8_t)i};
    struct iovec v = {body, 2};
    assert_int_equal(vmt_mux_send(&m, &k[i], vmt_id_make(300 + i), &v, 1), 0);
  }
  ks[0] = &k[0];
  ks[1] = &k[1];
  assert_int_equal(vmt_mux_wait(&m, ks, 2, deadline), 0);
  assert_true(k[0].done && k[1].done);
  assert_int_equal(k[0].rv, NNG_ECONNSHUT);
  assert_int_equal(k[1].rv, NNG_ECONNSHUT);
  assert_int_not_equal(vmt_mux_lost(&m), 0);
  uint8_t body[2] = {'x', 9};
  struct iovec v = {body, 2};
  assert_int_equal(vmt_mux_send(&m, &k[2], vmt_id_make(400), &v, 1), NNG_ECONNSHUT);
  assert_true(k[2].done);
  pthread_join(t, NULL);
  vmt_mux_destroy(&m);
  pair_close(&p);
}

static void test_mux_tcp(void **state) {
  (void)state;
  check_mux(K_TCP);
}
static void test_mux_ipc(void **state) {
  (void)state;
  check_mux(K_IPC);
}
static void test_mux_tls(void **state) {
  (void)state;
  check_mux(K_TLS);
}

/* ------------------------------------------- mux: serving end, own buffers */

/* The serving end over a socketpair taken over with vmt_conn_adopt (the
 * agent<->worker link's shape): threads take the reading turn with
 * vmt_mux_next and answer each request [k, n] with a 4-byte head
 * "h" k 0 0 and n bytes of k, out of order when asked. */
typedef struct server {
  vmt_mux_t *m;
  int served;
  int end_rv; /* how vmt_mux_next ended */
  pthread_mutex_t mu;
} server_t;

static void *server_main(void *arg) {
  server_t *sv = arg;
  for (;;) {
    void *msg = NULL;
    uint32_t id = 0;
    int rv = vmt_mux_next(sv->m, &msg, &id);
    if (rv) {
      pthread_mutex_lock(&sv->mu);
      sv->end_rv = rv;
      pthread_mutex_unlock(&sv->mu);
      return NULL;
    }
    msgbuf_t *b = msg;
    assert_int_equal(b->len, 5);
    uint8_t k = b->mem[b->off];
    uint32_t n = (uint32_t)b->mem[b->off + 1] | (uint32_t)b->mem[b->off + 2] << 8 |
                 (uint32_t)b->mem[b->off + 3] << 16;
    uint8_t stray = b->mem[b->off + 4];
    vmt_mux_pass(sv->m); /* the next request is read while this one is served */
    t_put(NULL, msg);
    if (k == 0) { /* the first waits, so that the others overtake it */
      struct timespec ts = {0, 100 * 1000000};
      nanosleep(&ts, NULL);
    }
    uint8_t head[4] = {'h', k, 0, 0};
    uint8_t *pay = malloc(n ? n : 1);
    assert_non_null(pay);
    memset(pay, k, n);
    struct iovec v[2] = {{head, 4}, {pay, n}};
    assert_int_equal(vmt_mux_reply(sv->m, stray ? vmt_id_make(999) : id, v, 2), 0);
    free(pay);
    pthread_mutex_lock(&sv->mu);
    sv->served++;
    pthread_mutex_unlock(&sv->mu);
  }
}

static uint8_t *t_alloc(void *actx, size_t len) {
  uint8_t **slot = actx;
  free(*slot);
  *slot = malloc(len ? len : 1);
  return *slot;
}

static void test_mux_serving_end(void **state) {
  (void)state;
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  vmt_conn_t *ca = NULL, *cb = NULL;
  assert_int_equal(vmt_conn_adopt(sv[0], 0, "a", &ca), 0);
  assert_int_equal(vmt_conn_adopt(sv[1], 0, "b", &cb), 0);
  vmt_mux_msgs_t cm = {.get = t_get, .put = t_put, .received = t_received, .peek = 4,
                       .strict = 1};
  vmt_mux_msgs_t sm = {.get = t_get, .put = t_put, .received = t_received};
  vmt_mux_t client, server;
  assert_int_equal(vmt_mux_init(&client, ca, &cm, 4 + (4u << 20), 0), 0);
  assert_int_equal(vmt_mux_init(&server, cb, &sm, 1 << 10, 0), 0);
  server_t srv = {.m = &server};
  pthread_mutex_init(&srv.mu, NULL);
  pthread_t th[3];
  for (int i = 0; i < 3; i++) assert_int_equal(pthread_create(&th[i], NULL, server_main, &srv), 0);

  /* Three calls at once, replies of any size read into the calls' own
   * buffers (3 MiB straight from the socket), the first answered last. */
  const uint32_t sizes[3] = {3u << 20, 0, 1000};
  vmt_call_t k[3];
  uint8_t *bufs[3] = {NULL, NULL, NULL};
  for (int i = 0; i < 3; i++) {
    memset(&k[i], 0, sizeof(k[i]));
    k[i].alloc = t_alloc;
    k[i].actx = &bufs[i];
    uint8_t body[5] = {(uint8_t)i, (uint8_t)sizes[i], (uint8_t)(sizes[i] >> 8),
                       (uint8_t)(sizes[i] >> 16), 0};
    struct iovec v = {body, 5};
    assert_int_equal(vmt_mux_send(&client, &k[i], vmt_id_make(10 + i), &v, 1), 0);
  }
  vmt_call_t *ks[3] = {&k[0], &k[1], &k[2]};
  int64_t deadline = vmt_mux_now_ns() + 10000000000ll;
  unsigned left = 3;
  while (left) {
    assert_int_equal(vmt_mux_wait(&client, ks, left, deadline), 0);
    unsigned j = 0;
    for (unsigned i = 0; i < left; i++)
      if (!ks[i]->done) ks[j++] = ks[i];
    left = j;
  }
  for (int i = 0; i < 3; i++) {
    assert_int_equal(k[i].rv, 0);
    assert_null(k[i].reply);
    assert_int_equal(k[i].reply_len, sizes[i]);
    assert_memory_equal(k[i].head, ((uint8_t[]){'h', (uint8_t)i, 0, 0}), 4);
    assert_non_null(bufs[i]);
    for (uint32_t b = 0; b < sizes[i]; b += 4099) assert_int_equal(bufs[i][b], i);
  }

  /* A reply no call waits for: the strict end is lost with NNG_EPROTO. */
  memset(&k[0], 0, sizeof(k[0]));
  k[0].alloc = t_alloc;
  k[0].actx = &bufs[0];
  uint8_t stray[5] = {7, 4, 0, 0, 1};
  struct iovec v = {stray, 5};
  assert_int_equal(vmt_mux_send(&client, &k[0], vmt_id_make(20), &v, 1), 0);
  ks[0] = &k[0];
  assert_int_equal(vmt_mux_wait(&client, ks, 1, deadline), 0);
  assert_int_equal(k[0].rv, NNG_ECONNSHUT);
  assert_int_equal(vmt_mux_lost(&client), NNG_EPROTO);
  assert_int_equal(vmt_mux_send(&client, &k[1], vmt_id_make(21), &v, 1), NNG_ECONNSHUT);

  /* The client's end closes: every serving thread ends with the peer's
   * close, and the serving end is lost for writers too. */
  vmt_conn_close(ca);
  for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
  assert_int_equal(srv.served, 4);
  assert_int_equal(srv.end_rv, NNG_ECONNSHUT);
  assert_int_equal(vmt_mux_reply(&server, vmt_id_make(1), &v, 1), NNG_ECONNSHUT);
  for (int i = 0; i < 3; i++) free(bufs[i]);
  vmt_mux_destroy(&client);
  vmt_mux_destroy(&server);
  vmt_conn_free(ca);
  vmt_conn_free(cb);
  pthread_mutex_destroy(&srv.mu);
}

/* A call's own buffer that cannot be had, and a reply shorter than the
 * head every reply has, each lose the mux with their own error. */
static uint8_t *t_alloc_none(void *actx, size_t len) {
  (void)actx, (void)len;
  return NULL;
}

static void test_mux_own_buffer_errors(void **state) {
  (void)state;
  for (int round = 0; round < 2; round++) {
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    vmt_conn_t *ca = NULL, *cb = NULL;
    assert_int_equal(vmt_conn_adopt(sv[0], 0, "a", &ca), 0);
    assert_int_equal(vmt_conn_adopt(sv[1], 0, "b", &cb), 0);
    vmt_mux_msgs_t cm = {.get = t_get, .put = t_put, .received = t_received, .peek = 4,
                         .strict = 1};
    vmt_mux_t m;
    assert_int_equal(vmt_mux_init(&m, ca, &cm, 1 << 16, 2000), 0);
    vmt_call_t k;
    memset(&k, 0, sizeof(k));
    k.alloc = t_alloc_none;
    uint8_t body[1] = {0};
    struct iovec v = {body, 1};
    assert_int_equal(vmt_mux_send(&m, &k, vmt_id_make(3), &v, 1), 0);
    uint8_t reply[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    size_t rlen = round == 0 ? 8 : 2; /* round 1: under the 4 bytes of head */
    uint8_t head[VMT_HEAD_MAX];
    size_t hn = vmt_head_make(0, vmt_id_make(3), rlen, head);
    struct iovec w[2] = {{head, hn}, {reply, rlen}};
    assert_int_equal(vmt_conn_writev(cb, w, 2, 5000, NULL), 0);
    vmt_call_t *ks = &k;
    assert_int_equal(vmt_mux_wait(&m, &ks, 1, 0), 0);
    assert_int_equal(k.rv, NNG_ECONNSHUT);
    assert_int_equal(vmt_mux_lost(&m), round == 0 ? NNG_ENOMEM : NNG_EPROTO);
    /* Giving the call up now returns at once: the refused reply left it
     * not filling. */
    vmt_mux_abandon(&m, &k, NNG_ETIMEDOUT);
    assert_true(k.done);
    assert_int_equal(k.rv, NNG_ECONNSHUT);
    vmt_mux_destroy(&m);
    vmt_conn_free(ca);
    vmt_conn_free(cb);
  }
}

/* A reply that stalls mid-frame loses the mux after its io timeout. */
static void test_mux_stalled_reply(void **state) {
  (void)state;
  pair_t p;
  pair_open(&p, K_TCP);
  vmt_mux_msgs_t msgs = {.get = t_get, .put = t_put, .received = t_received};
  vmt_mux_t m;
  assert_int_equal(vmt_mux_init(&m, p.a, &msgs, 1 << 16, 200), 0);
  vmt_call_t k;
  memset(&k, 0, sizeof(k));
  uint8_t body[2] = {'x', 0};
  struct iovec v = {body, 2};
  assert_int_equal(vmt_mux_send(&m, &k, vmt_id_make(5), &v, 1), 0);
  uint8_t head[VMT_HEAD_MAX], half[10] = {0};
  size_t hn = vmt_head_make(0, vmt_id_make(5), 100, head);
  struct iovec w[2] = {{head, hn}, {half, sizeof(half)}};
  assert_int_equal(vmt_conn_writev(p.b, w, 2, 5000, NULL), 0);
  vmt_call_t *ks = &k;
  int64_t t0 = now_ms();
  assert_int_equal(vmt_mux_wait(&m, &ks, 1, 0), 0); /* no deadline: the loss completes it */
  assert_true(now_ms() - t0 >= 150);
  assert_int_equal(k.rv, NNG_ECONNSHUT);
  assert_int_equal(vmt_mux_lost(&m), NNG_ECONNSHUT);
  /* A reply longer than the limit loses the mux at once. */
  vmt_mux_destroy(&m);
  pair_close(&p);
  pair_open(&p, K_TCP);
  assert_int_equal(vmt_mux_init(&m, p.a, &msgs, 64, 2000), 0);
  memset(&k, 0, sizeof(k));
  assert_int_equal(vmt_mux_send(&m, &k, vmt_id_make(6), &v, 1), 0);
  hn = vmt_head_make(0, vmt_id_make(6), 100, head);
  struct iovec w2 = {head, hn};
  assert_int_equal(vmt_conn_writev(p.b, &w2, 1, 5000, NULL), 0);
  assert_int_equal(vmt_mux_wait(&m, &ks, 1, 0), 0);
  assert_int_equal(k.rv, NNG_ECONNSHUT);
  assert_int_equal(vmt_mux_lost(&m), NNG_EMSGSIZE);
  vmt_mux_destroy(&m);
  pair_close(&p);
}

/* ---------------------------------------------------------- sendq */

typedef struct failed_rec {
  pthread_mutex_t mu;
  int calls, rv;
} failed_rec_t;

static void on_failed(void *ctx, int rv) {
  failed_rec_t *f = ctx;
  pthread_mutex_lock(&f->mu);
  f->calls++;
  f->rv = rv;
  pthread_mutex_unlock(&f->mu);
}

static vmt_sendbuf_t *buf_of(size_t n, uint8_t fill) {
  vmt_sendbuf_t *b = malloc(sizeof(*b) + n);
  assert_non_null(b);
  memset(b + 1, fill, n);
  b->p = (const uint8_t *)(b + 1);
  b->left = n;
  return b;
}

/* Messages larger than the socket takes at once go out whole and in
 * order through the flusher; a peer that stops reading fails the queue
 * after the write timeout, one that lets it pass its cap at once. */
static void check_sendq(int kind) {
  pair_t p;
  pair_open(&p, kind);
  vmt_flusher_t *f = NULL;
  assert_int_equal(vmt_flusher_start(300, &f), 0);
  failed_rec_t fr = {.mu = PTHREAD_MUTEX_INITIALIZER};
  vmt_sendq_t q;
  assert_int_equal(vmt_sendq_init(&q, p.a, f, 64u << 20, 1u << 20, on_failed, &fr), 0);
  size_t n = 3u << 20;
  for (int i = 0; i < 4; i++) vmt_sendq_send(&q, buf_of(n, (uint8_t)(i + 1)));
  uint8_t *in = malloc(4 * n);
  bulk_arg_t x = {.c = p.b, .buf = in, .n = 4 * n};
  bulk_reader(&x);
  assert_int_equal(x.rv, 0);
  for (int i = 0; i < 4; i++) {
    assert_int_equal(in[(size_t)i * n], i + 1);
    assert_int_equal(in[(size_t)i * n + n - 1], i + 1);
  }
  assert_int_equal(vmt_sendq_wait_room(&q), 0);
  assert_int_equal(fr.calls, 0);
  /* Nobody reads now: the flusher gives up after 300 ms of no progress. */
  int64_t t0 = now_ms();
  for (int i = 0; i < 8; i++) vmt_sendq_send(&q, buf_of(n, 9));
  for (int i = 0; i < 500 && !fr.calls; i++) sleep_ms(10);
  assert_int_equal(fr.calls, 1);
  assert_int_equal(fr.rv, NNG_ETIMEDOUT);
  assert_true(now_ms() - t0 >= 200);
  assert_int_equal(vmt_sendq_wait_room(&q), -1);
  vmt_sendq_send(&q, buf_of(10, 1)); /* dropped, no second call */
  assert_int_equal(fr.calls, 1);
  vmt_sendq_destroy(&q);
  pair_close(&p);

  pair_open(&p, kind);
  fr.calls = 0;
  assert_int_equal(vmt_sendq_init(&q, p.a, f, 4u << 20, 1u << 20, on_failed, &fr), 0);
  for (int i = 0; i < 8 && !fr.calls; i++) vmt_sendq_send(&q, buf_of(n, 7));
  assert_int_equal(fr.calls, 1);
  assert_int_equal(fr.rv, NNG_EMSGSIZE);
  vmt_sendq_destroy(&q);
  vmt_flusher_stop(f);
  free(in);
  pair_close(&p);
}

static void test_sendq_tcp(void **state) {
  (void)state;
  check_sendq(K_TCP);
}
static void test_sendq_ipc(void **state) {
  (void)state;
  check_sendq(K_IPC);
}
static void test_sendq_tls(void **state) {
  (void)state;
  check_sendq(K_TLS);
}

/* --------------------------------------------------- nng interop */

/* The wire bytes are nng's: nng 1.5's own req0 and rep0 sockets talk to
 * the transport layer on tcp://, ipc:// and tls+tcp:// (nng's TLS is
 * mbedTLS, ours OpenSSL). Both ways: our dialer and mux against an nng
 * rep0 listener, an nng req0 dialer against our listener. */
static nng_tls_config *nng_tls(int server) {
  nng_tls_config *cfg = NULL;
  assert_int_equal(nng_tls_config_alloc(&cfg, server ? NNG_TLS_MODE_SERVER : NNG_TLS_MODE_CLIENT),
                   0);
  if (server) {
    assert_int_equal(nng_tls_config_own_cert(cfg, g_cert, g_key, NULL), 0);
  } else {
    assert_int_equal(nng_tls_config_ca_chain(cfg, g_cert, NULL), 0);
    assert_int_equal(nng_tls_config_server_name(cfg, "127.0.0.1"), 0);
    assert_int_equal(nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_REQUIRED), 0);
  }
  return cfg;
}

static void check_nng_interop(int kind) {
  char url[128];
  /* 1. Our client side against an nng rep0 server. */
  nng_socket rep;
  nng_listener nl;
  assert_int_equal(nng_rep0_open(&rep), 0);
  if (kind == K_IPC)
    snprintf(url, sizeof(url), "ipc://%s/nng-rep", g_dir);
  else
    snprintf(url, sizeof(url), "%s://127.0.0.1:0", kind == K_TLS ? "tls+tcp" : "tcp");
  assert_int_equal(nng_listener_create(&nl, rep, url), 0);
  nng_tls_config *stls = NULL;
  if (kind == K_TLS) {
    stls = nng_tls(1);
    assert_int_equal(nng_listener_set_ptr(nl, NNG_OPT_TLS_CONFIG, stls), 0);
  }
  assert_int_equal(nng_listener_start(nl, 0), 0);
  nng_duration to = 5000;
  assert_int_equal(nng_socket_set_ms(rep, NNG_OPT_RECVTIMEO, to), 0);
  if (kind != K_IPC) {
    int port = 0;
    assert_int_equal(nng_listener_get_int(nl, NNG_OPT_TCP_BOUND_PORT, &port), 0);
    snprintf(url, sizeof(url), "%s://127.0.0.1:%d", kind == K_TLS ? "tls+tcp" : "tcp", port);
  }
  char err[256];
  vmt_tls_t *ctls = NULL;
  if (kind == K_TLS) {
    vmt_tls_opts_t co = {.ca_pem = g_cert, .server_name = "127.0.0.1"};
    assert_int_equal(vmt_tls_new(&co, &ctls, err, sizeof(err)), 0);
  }
  vmt_conn_t *c = NULL;
  assert_int_equal(vmt_dial(url, ctls, 5000, &c), 0);
  assert_int_equal(vmt_conn_handshake(c, VMT_SP_REQ0, VMT_SP_REP0, 5000), 0);
  vmt_mux_msgs_t msgs = {.get = t_get, .put = t_put, .received = t_received};
  vmt_mux_t m;
  assert_int_equal(vmt_mux_init(&m, c, &msgs, 1 << 16, 5000), 0);
  vmt_call_t k;
  memset(&k, 0, sizeof(k));
  char body[] = "request to nng";
  struct iovec v = {body, sizeof(body)};
  assert_int_equal(vmt_mux_send(&m, &k, vmt_id_make(77), &v, 1), 0);
  nng_msg *msg = NULL;
  assert_int_equal(nng_recvmsg(rep, &msg, 0), 0);
  assert_int_equal(nng_msg_len(msg), sizeof(body));
  assert_memory_equal(nng_msg_body(msg), body, sizeof(body));
  nng_msg_clear(msg);
  assert_int_equal(nng_msg_append(msg, "reply from nng", 15), 0);
  assert_int_equal(nng_sendmsg(rep, msg, 0), 0);
  vmt_call_t *ks = &k;
  assert_int_equal(vmt_mux_wait(&m, &ks, 1, vmt_mux_now_ns() + 5000000000ll), 0);
  assert_int_equal(k.rv, 0);
  msgbuf_t *r = k.reply;
  assert_int_equal(r->len, 15);
  assert_memory_equal(r->mem + r->off, "reply from nng", 15);
  free(r);
  vmt_mux_destroy(&m);
  vmt_conn_free(c);
  nng_close(rep);
  if (stls) nng_tls_config_free(stls);

  /* 2. An nng req0 client against our listener. */
  vmt_tls_t *tls = NULL;
  if (kind == K_TLS) {
    vmt_tls_opts_t so = {.server = 1, .cert_pem = g_cert, .key_pem = g_key};
    assert_int_equal(vmt_tls_new(&so, &tls, err, sizeof(err)), 0);
  }
  if (kind == K_IPC)
    snprintf(url, sizeof(url), "ipc://%s/vmt-rep", g_dir);
  else
    snprintf(url, sizeof(url), "%s://127.0.0.1:0", kind == K_TLS ? "tls+tcp" : "tcp");
  vmt_listener_t *l = NULL;
  assert_int_equal(vmt_listen(url, tls, &l), 0);
  if (kind != K_IPC)
    snprintf(url, sizeof(url), "%s://127.0.0.1:%d", kind == K_TLS ? "tls+tcp" : "tcp",
             vmt_listener_port(l));
  pair_t q = {.l = l};
  accept_arg_t x = {.p = &q};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, accept_main, &x), 0);
  nng_socket req;
  nng_dialer nd;
  assert_int_equal(nng_req0_open(&req), 0);
  assert_int_equal(nng_socket_set_ms(req, NNG_OPT_RECVTIMEO, to), 0);
  assert_int_equal(nng_dialer_create(&nd, req, url), 0);
  nng_tls_config *ntls = NULL;
  if (kind == K_TLS) {
    ntls = nng_tls(0);
    assert_int_equal(nng_dialer_set_ptr(nd, NNG_OPT_TLS_CONFIG, ntls), 0);
  }
  /* In the background: a blocking dial would wait for our SP handshake. */
  assert_int_equal(nng_dialer_start(nd, NNG_FLAG_NONBLOCK), 0);
  pthread_join(t, NULL);
  assert_int_equal(x.rv, 0);
  assert_int_equal(vmt_conn_handshake(q.b, VMT_SP_REP0, VMT_SP_REQ0, 5000), 0);
  assert_int_equal(nng_msg_alloc(&msg, 0), 0);
  assert_int_equal(nng_msg_append(msg, "request from nng", 17), 0);
  assert_int_equal(nng_sendmsg(req, msg, 0), 0);
  vmt_reader_t *rd = calloc(1, sizeof(*rd));
  assert_non_null(rd);
  rd->c = q.b;
  uint8_t pre[VMT_PREFIX_MAX], in[64];
  uint64_t len = 0;
  assert_int_equal(vmt_read(rd, pre, vmt_prefix_len(q.b->ipc), 5000, NULL), 0);
  assert_int_equal(vmt_prefix_parse(q.b->ipc, pre, &len), 0);
  assert_int_equal(len, 4 + 17);
  assert_int_equal(vmt_read(rd, in, (size_t)len, 5000, NULL), 0);
  assert_int_equal(vmt_request_header(in, (size_t)len), 4);
  assert_memory_equal(in + 4, "request from nng", 17);
  uint8_t head[VMT_HEAD_MAX];
  size_t hn = vmt_head_make(q.b->ipc, vmt_id_get(in), 13, head);
  struct iovec w[2] = {{head, hn}, {"reply to nng", 13}};
  assert_int_equal(vmt_conn_writev(q.b, w, 2, 5000, NULL), 0);
  assert_int_equal(nng_recvmsg(req, &msg, 0), 0);
  assert_int_equal(nng_msg_len(msg), 13);
  assert_memory_equal(nng_msg_body(msg), "reply to nng", 13);
  nng_msg_free(msg);
  nng_close(req);
  if (ntls) nng_tls_config_free(ntls);
  free(rd);
  vmt_conn_free(q.b);
  vmt_listener_close(l);
  vmt_listener_free(l);
  vmt_tls_free(tls);
  vmt_tls_free(ctls);
}

static void test_nng_interop_tcp(void **state) {
  (void)state;
  check_nng_interop(K_TCP);
}
static void test_nng_interop_ipc(void **state) {
  (void)state;
  check_nng_interop(K_IPC);
}
static void test_nng_interop_tls(void **state) {
  (void)state;
  check_nng_interop(K_TLS);
}

int main(void) {
  (void)KIND;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_frame_codec),   cmocka_unit_test(test_bulk_tcp),
      cmocka_unit_test(test_bulk_ipc),      cmocka_unit_test(test_bulk_tls),
      cmocka_unit_test(test_pending_tcp),   cmocka_unit_test(test_pending_ipc),
      cmocka_unit_test(test_pending_tls),   cmocka_unit_test(test_stall_tcp),
      cmocka_unit_test(test_stall_ipc),     cmocka_unit_test(test_stall_tls),
      cmocka_unit_test(test_dial_errors),   cmocka_unit_test(test_mux_tcp),
      cmocka_unit_test(test_mux_ipc),       cmocka_unit_test(test_mux_tls),
      cmocka_unit_test(test_mux_stalled_reply), cmocka_unit_test(test_mux_serving_end),
      cmocka_unit_test(test_mux_own_buffer_errors), cmocka_unit_test(test_sendq_tcp),
      cmocka_unit_test(test_sendq_ipc),     cmocka_unit_test(test_sendq_tls),
      cmocka_unit_test(test_nng_interop_tcp), cmocka_unit_test(test_nng_interop_ipc),
      cmocka_unit_test(test_nng_interop_tls),
  };
  return cmocka_run_group_tests(tests, setup_all, teardown_all);
}
