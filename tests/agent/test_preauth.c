/* Work before authentication (docs/security.md, "Before authentication"):
 * peers that never say Hello, or never read their replies, cannot stall
 * the workers, lock the owner out, or leave memory behind. Each test runs
 * a real vmagent with a token, attacks it over raw sockets (the SP framing
 * of docs/protocol.md, written by hand) and meanwhile drives it with the
 * real client, which must keep being served:
 * - stalled peers: two peers pipeline requests before Hello and never read,
 *   two more do the same after their Hello; an upload + run stays under
 *   2 s, and the ones after Hello are dropped at --write-timeout (tcp and
 *   ipc);
 * - idle peers: 1,100 connections that did the SP handshake and said
 *   nothing more, and 50 that send their handshake one byte a second; an
 *   authenticated Ping works at every probe, and the slow ones are closed
 *   at the Hello deadline although they never stop sending (tcp; over TLS:
 *   idle connections and half a ClientHello);
 * - memory: 1,000 connections without a token pipelining 8 KiB requests
 *   while stalled peers run; the agent's RSS comes back within 10 % of
 *   where it started once they are gone.
 * The test raises its own RLIMIT_NOFILE for the 1,150 sockets; the agent
 * needs no more than its default 1,024 (it keeps at most
 * --max-unauthenticated connections without Hello). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "agent_proc.h"
#include "helper_agent.h"
#include "test_util.h"
#include "vmrpc/file.h"
#include "vmrpc/vmclient.h"
#include "vmproto/wire.h"

#define TOKEN "preauth-test-token-0123456789"

static ha_fixtures_t g_fx;
static char g_token_file[64];

/* ------------------------------------------------------------ raw peers */

/* Where a raw peer dials: tcp 127.0.0.1:port or an ipc:// path. */
typedef struct pa_target {
  int ipc;
  int port;
  char path[108];
} pa_target_t;

static void pa_target(const char *url, pa_target_t *t) {
  memset(t, 0, sizeof(*t));
  if (strncmp(url, "ipc://", 6) == 0) {
    t->ipc = 1;
    snprintf(t->path, sizeof(t->path), "%s", url + 6);
    return;
  }
  const char *colon = strrchr(url, ':');
  assert_non_null(colon);
  t->port = atoi(colon + 1);
  assert_true(t->port > 0);
}

/* A connected, non-blocking socket, or -1. */
static int pa_dial(const pa_target_t *t) {
  int fd;
  if (t->ipc) {
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", t->path);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
      close(fd);
      return -1;
    }
  } else {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)t->port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
      close(fd);
      return -1;
    }
  }
  if (fd >= 0) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  return fd;
}

/* Writes what the socket takes of buf[*off..len): 0 (maybe partly), or -1
 * once the agent closed the connection. */
static int pa_push(int fd, const uint8_t *buf, size_t len, size_t *off) {
  while (*off < len) {
    ssize_t n = send(fd, buf + *off, len - *off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      *off += (size_t)n;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    if (n < 0 && errno == EINTR) continue;
    return -1;
  }
  return 0;
}

/* The client's SP header: req0. */
static const uint8_t pa_sp_req0[8] = {0, 'S', 'P', 0, 0x00, 0x30, 0, 0};

/* One request message as a req0 peer frames it (prefix, id word, body),
 * its body rq's frame plus pad bytes; malloc'ed, *len its size. */
static uint8_t *pa_frame_payload(const pa_target_t *t, uint32_t id, Vmrpc__Request *rq,
                                 const void *payload, size_t pad, size_t *len);
static uint8_t *pa_frame(const pa_target_t *t, uint32_t id, Vmrpc__Request *rq, size_t pad,
                         size_t *len) {
  return pa_frame_payload(t, id, rq, NULL, pad, len);
}

/* The same with payload bytes (pad of them) after the envelope, not zeros. */
static uint8_t *pa_frame_payload(const pa_target_t *t, uint32_t id, Vmrpc__Request *rq,
                                 const void *payload, size_t pad, size_t *len) {
  size_t env = vmp_frame_size(&rq->base);
  size_t body = 4 + env + pad;
  size_t pn = t->ipc ? 9 : 8;
  uint8_t *m = calloc(1, pn + body);
  assert_non_null(m);
  size_t k = 0;
  if (t->ipc) m[k++] = 1;
  for (int i = 7; i >= 0; i--) m[k++] = (uint8_t)((uint64_t)body >> (8 * i));
  id |= 0x80000000u;
  m[k++] = (uint8_t)(id >> 24);
  m[k++] = (uint8_t)(id >> 16);
  m[k++] = (uint8_t)(id >> 8);
  m[k++] = (uint8_t)id;
  vmp_frame_write(&rq->base, m + k);
  if (payload) memcpy(m + k + env, payload, pad);
  *len = pn + body;
  return m;
}

/* FreeVM of a VM that does not exist: not a cheap operation, so before
 * this change it went to a worker, whose reply then waited on the peer. */
static uint8_t *pa_free_vm(const pa_target_t *t, uint64_t session, size_t pad, size_t *len) {
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__FreeVMRequest f = VMRPC__FREE_VMREQUEST__INIT;
  f.vm_id = 777;
  rq.id = 1;
  rq.session = session;
  rq.op_case = VMRPC__REQUEST__OP_FREE_VM;
  rq.free_vm = &f;
  return pa_frame(t, 1, &rq, pad, len);
}

/* Reads n bytes within timeout_ms: 0 or -1. */
static int pa_read_full(int fd, uint8_t *dst, size_t n, int timeout_ms) {
  double end = ha_now_s() + timeout_ms / 1000.0;
  size_t got = 0;
  while (got < n) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int left = (int)((end - ha_now_s()) * 1000);
    if (left <= 0 || poll(&p, 1, left) <= 0) return -1;
    ssize_t r = recv(fd, dst + got, n - got, 0);
    if (r == 0) return -1;
    if (r < 0 && errno != EAGAIN && errno != EINTR) return -1;
    if (r > 0) got += (size_t)r;
  }
  return 0;
}

/* Writes all of buf within 10 s: 0 or -1. */
static int pa_push_all(int fd, const uint8_t *buf, size_t len) {
  size_t off = 0;
  double end = ha_now_s() + 10;
  while (off < len && ha_now_s() < end) {
    if (pa_push(fd, buf, len, &off)) return -1;
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    if (off < len) (void)poll(&p, 1, 100);
  }
  return off == len ? 0 : -1;
}

/* Sends rq (payload: plen bytes after its envelope) on a raw connection
 * and reads the one reply: the response (vmrpc__response__free_unpacked),
 * or NULL. */
static Vmrpc__Response *pa_call(const pa_target_t *t, int fd, Vmrpc__Request *rq,
                                const void *payload, size_t plen) {
  size_t len;
  uint8_t *m = pa_frame_payload(t, (uint32_t)rq->id, rq, payload, plen, &len);
  int rv = pa_push_all(fd, m, len);
  free(m);
  uint8_t pre[9];
  size_t pn = t->ipc ? 9 : 8;
  if (rv || pa_read_full(fd, pre, pn, 10000)) return NULL;
  uint64_t n = 0;
  for (size_t i = pn - 8; i < pn; i++) n = (n << 8) | pre[i];
  if (n < 4 || n > (64u << 20)) return NULL;
  uint8_t *body = malloc(n);
  Vmrpc__Response *r = NULL;
  if (body && !pa_read_full(fd, body, n, 10000)) {
    const uint8_t *env, *pl;
    size_t env_len, pl_len;
    vm_status_t st = vmp_frame_split(body + 4, n - 4, 0, &env, &env_len, &pl, &pl_len);
    if (!st) st = vmp_response_unpack(env, env_len, &r);
    vm_status_free(st);
  }
  free(body);
  if (r && r->status && r->status->code) {
    fprintf(stderr, "raw call: %s\n", r->status->message ? r->status->message : "");
    vmrpc__response__free_unpacked(r, NULL);
    r = NULL;
  }
  return r;
}

/* Handshake + Hello with the token on a raw connection: the session id,
 * or 0. */
static uint64_t pa_hello(const pa_target_t *t, int fd) {
  uint8_t sp[8];
  if (pa_push_all(fd, pa_sp_req0, sizeof(pa_sp_req0)) || pa_read_full(fd, sp, 8, 5000)) return 0;
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__HelloRequest h = VMRPC__HELLO_REQUEST__INIT;
  h.protocol_major = 1;
  h.client_name = (char *)"staller";
  h.token = (char *)TOKEN;
  rq.id = 1;
  rq.op_case = VMRPC__REQUEST__OP_HELLO;
  rq.hello = &h;
  Vmrpc__Response *r = pa_call(t, fd, &rq, NULL, 0);
  uint64_t session = r && r->hello ? r->hello->session : 0;
  if (r) vmrpc__response__free_unpacked(r, NULL);
  return session;
}

/* Whether the agent closed fd (end of stream or reset); drains what it
 * sent (its SP header, replies). */
static int pa_closed(int fd) {
  uint8_t buf[4096];
  for (;;) {
    ssize_t r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (r > 0) continue;
    if (r == 0) return 1;
    if (errno == EINTR) continue;
    return errno != EAGAIN && errno != EWOULDBLOCK;
  }
}

/* ------------------------------------------------------------ stallers */

/* A peer that pipelines FreeVM and never reads a reply (after its Hello,
 * when authed); when the agent drops it, it comes back 50 ms later. */
typedef struct pa_staller {
  pa_target_t t;
  int authed;
  size_t pad; /* bytes after each request's envelope */
  atomic_int stop;
  pthread_t th;
  unsigned long sent, dropped;
} pa_staller_t;

static void *pa_staller_main(void *arg) {
  pa_staller_t *s = arg;
  while (!atomic_load(&s->stop)) {
    int fd = pa_dial(&s->t);
    if (fd < 0) {
      usleep(50 * 1000);
      continue;
    }
    uint64_t session = 0;
    int ok = 1;
    if (s->authed) {
      session = pa_hello(&s->t, fd);
      ok = session != 0;
    } else {
      size_t off = 0;
      ok = pa_push(fd, pa_sp_req0, sizeof(pa_sp_req0), &off) == 0;
    }
    size_t len = 0;
    uint8_t *m = pa_free_vm(&s->t, session, s->pad, &len);
    size_t off = 0;
    while (ok && !atomic_load(&s->stop)) {
      if (pa_push(fd, m, len, &off) != 0) break;
      if (off == len) {
        s->sent++;
        off = 0;
        continue;
      }
      usleep(20 * 1000); /* the socket is full: the agent stopped reading */
    }
    free(m);
    close(fd);
    if (!atomic_load(&s->stop)) {
      s->dropped++;
      usleep(50 * 1000);
    }
  }
  return NULL;
}

static void pa_stallers_start(pa_staller_t *s, size_t n, const char *url, int authed_from) {
  for (size_t i = 0; i < n; i++) {
    memset(&s[i], 0, sizeof(s[i]));
    pa_target(url, &s[i].t);
    s[i].authed = (int)i >= authed_from;
    atomic_init(&s[i].stop, 0);
    assert_int_equal(pthread_create(&s[i].th, NULL, pa_staller_main, &s[i]), 0);
  }
}

static void pa_stallers_stop(pa_staller_t *s, size_t n) {
  for (size_t i = 0; i < n; i++) atomic_store(&s[i].stop, 1);
  for (size_t i = 0; i < n; i++) pthread_join(s[i].th, NULL);
}

/* ------------------------------------------------------------ the agent */

static void pa_start(agent_proc_t *p, const char *listen, const char *const *more) {
  const char *args[24];
  size_t k = 0;
  args[k++] = "--token-file";
  args[k++] = g_token_file;
  args[k++] = "--device";
  args[k++] = "cpu";
  if (listen) {
    args[k++] = "--listen";
    args[k++] = listen;
  }
  for (size_t i = 0; more && more[i] && k < 23; i++) args[k++] = more[i];
  args[k] = NULL;
  assert_int_equal(agent_proc_start(p, args), 0);
}

static vmc_conn_opts_t pa_opts(void) {
  vmc_conn_opts_t o;
  memset(&o, 0, sizeof(o));
  o.token = TOKEN;
  o.connect_timeout_ms = 5000;
  o.request_timeout_ms = 10000;
  return o;
}

/* Upload + run as a legitimate client (the test program's ident on the
 * agent's cpu device, 4 Ki floats through and back): seconds taken. */
static double pa_legit_run(const char *url, const vmc_conn_opts_t *o) {
  enum { N = 4096 };
  static float x[N], got[N];
  for (int i = 0; i < N; i++) x[i] = (float)i * 0.5f;
  memset(got, 0, sizeof(got));
  double t0 = ha_now_s();
  vmc_conn_t *c = NULL;
  vmc_exec_t ex;
  vmc_vm_t vm;
  vmc_tensor_t t, meta;
  int64_t shape[1] = {N};
  vmc_device_spec_t dev = {"cpu", NULL};
  vm_status_t st = vmc_connect(url, o, &c);
  if (!st) st = vmc_upload_memory(c, g_fx.prog, g_fx.prog_len, NULL, NULL, &ex, NULL);
  if (!st) st = vmc_create_vm(c, ex, &dev, 1, NULL, &vm);
  if (!st) st = vmc_tensor_wrap(VM_F32, 1, shape, x, &t);
  if (!st) st = vmc_set_input(c, vm, "ident", 0, &t);
  if (!st) st = vmc_invoke(c, vm, "ident", 10000, NULL);
  if (!st) st = vmc_get_output_into(c, vm, "ident", NULL, 0, got, sizeof(got), &meta);
  if (!st && memcmp(got, x, sizeof(x)) != 0)
    st = vm_status_make(VM_INTERNAL, "ident returned other values");
  vmc_close(c);
  double took = ha_now_s() - t0;
  if (st) fail_msg("legitimate run: %s (after %.2f s)", vm_status_message(st), took);
  return took;
}

/* Connect + Hello + Ping + Goodbye: seconds taken, or a failure. */
static double pa_legit_ping(const char *url, const vmc_conn_opts_t *o) {
  double t0 = ha_now_s();
  vmc_conn_t *c = NULL;
  vm_status_t st = vmc_connect(url, o, &c);
  if (!st) st = vmc_ping(c, NULL);
  vmc_close(c);
  double took = ha_now_s() - t0;
  if (st) fail_msg("legitimate ping: %s (after %.2f s)", vm_status_message(st), took);
  return took;
}

static unsigned long long pa_rss_kib(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  unsigned long long kib = 0;
  while (f && fgets(line, sizeof(line), f))
    if (sscanf(line, "VmRSS: %llu kB", &kib) == 1) break;
  if (f) fclose(f);
  return kib;
}

static void pa_raise_nofile(rlim_t want) {
  struct rlimit rl;
  assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
  if (rl.rlim_cur >= want) return;
  if (rl.rlim_max < want) skip(); /* the machine does not allow this many sockets */
  rl.rlim_cur = want;
  assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
}

/* ------------------------------------------------------------ tests */

/* Two peers pipeline FreeVM before Hello and never read; two more do the
 * same after Hello. Before: one worker sat in a reply write for up to 60 s
 * and the others queued on that connection's write lock, so a legitimate
 * upload + run waited about a minute. */
static void pa_stalled_peers(const char *listen) {
  agent_proc_t p;
  const char *more[] = {"--hello-timeout", "1", "--write-timeout", "2", NULL};
  pa_start(&p, listen, more);
  vmc_conn_opts_t o = pa_opts();
  pa_legit_run(p.url, &o); /* warm: the first run compiles nothing, but loads the store */
  pa_staller_t s[4];
  pa_stallers_start(s, 4, p.url, 2);
  usleep(1500 * 1000); /* their socket buffers fill, their replies back up */
  double worst = 0;
  for (int i = 0; i < 5; i++) {
    double took = pa_legit_run(p.url, &o);
    if (took > worst) worst = took;
    usleep(200 * 1000);
  }
  /* The authenticated ones are dropped once they have taken none of
   * their replies for 2 s (--write-timeout). */
  double until = ha_now_s() + 8;
  while ((s[2].dropped == 0 || s[3].dropped == 0) && ha_now_s() < until) usleep(100 * 1000);
  pa_stallers_stop(s, 4);
  fprintf(stderr,
          "stalled peers (%s): worst upload+run %.3f s; pre-Hello peers sent %lu+%lu "
          "requests and were dropped %lu+%lu times; authenticated ones sent %lu+%lu, "
          "dropped %lu+%lu times\n",
          listen ? listen : "tcp", worst, s[0].sent, s[1].sent, s[0].dropped, s[1].dropped,
          s[2].sent, s[3].sent, s[2].dropped, s[3].dropped);
  assert_true(worst < 2.0);
  /* Before Hello a peer gets its one refusal, then nothing, and the
   * connection ends at its Hello deadline. */
  assert_true(s[0].dropped > 0 && s[1].dropped > 0);
  /* A writer that cannot progress costs its own connection only. */
  assert_true(s[2].dropped > 0 && s[3].dropped > 0);
  pa_legit_ping(p.url, &o);
  assert_int_equal(agent_proc_stop(&p), 0);
}

static void test_stalled_peers_tcp(void **state) {
  (void)state;
  pa_stalled_peers(NULL);
}

static void test_stalled_peers_ipc(void **state) {
  (void)state;
  char listen[128];
  snprintf(listen, sizeof(listen), "ipc:///tmp/vmagent-preauth-%d.ipc", (int)getpid());
  pa_stalled_peers(listen);
  unlink(listen + 6);
}

/* An authenticated peer pipelines 128 GetOutputs of a 1 MiB tensor and
 * reads none of the replies: once its unsent replies pass the cap (16 MiB
 * + 16 messages, 33 MiB here) the agent drops it, long before
 * --write-timeout, having written it less than all 128 MiB; other clients
 * are served meanwhile. Before: the workers sat in its reply writes. */
static void test_unread_replies_overflow(void **state) {
  (void)state;
  agent_proc_t p;
  const char *more[] = {"--write-timeout", "60", NULL};
  pa_start(&p, NULL, more);
  pa_target_t t;
  pa_target(p.url, &t);
  int fd = pa_dial(&t);
  assert_true(fd >= 0);
  uint64_t session = pa_hello(&t, fd);
  assert_true(session != 0);
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__Response *r;
  rq.session = session;
  /* Upload + CreateVM + SetInput of 1 MiB + Invoke of ident. */
  uint8_t sha[32];
  vm_sha256(g_fx.prog, g_fx.prog_len, sha);
  Vmrpc__UploadBeginRequest ub = VMRPC__UPLOAD_BEGIN_REQUEST__INIT;
  ub.sha256.data = sha;
  ub.sha256.len = 32;
  ub.size = g_fx.prog_len;
  rq.id = 2;
  rq.op_case = VMRPC__REQUEST__OP_UPLOAD_BEGIN;
  rq.upload_begin = &ub;
  assert_non_null(r = pa_call(&t, fd, &rq, NULL, 0));
  uint64_t upload = r->upload_begin->upload_id, exec = r->upload_begin->exec_id;
  int present = r->upload_begin->present;
  vmrpc__response__free_unpacked(r, NULL);
  if (!present) {
    Vmrpc__UploadChunkRequest uc = VMRPC__UPLOAD_CHUNK_REQUEST__INIT;
    uc.upload_id = upload;
    rq.id = 3;
    rq.op_case = VMRPC__REQUEST__OP_UPLOAD_CHUNK;
    rq.upload_chunk = &uc;
    assert_non_null(r = pa_call(&t, fd, &rq, g_fx.prog, g_fx.prog_len));
    vmrpc__response__free_unpacked(r, NULL);
    Vmrpc__UploadCommitRequest ucm = VMRPC__UPLOAD_COMMIT_REQUEST__INIT;
    ucm.upload_id = upload;
    rq.id = 4;
    rq.op_case = VMRPC__REQUEST__OP_UPLOAD_COMMIT;
    rq.upload_commit = &ucm;
    assert_non_null(r = pa_call(&t, fd, &rq, NULL, 0));
    exec = r->upload_commit->exec_id;
    vmrpc__response__free_unpacked(r, NULL);
  }
  Vmrpc__CreateVMRequest cv = VMRPC__CREATE_VMREQUEST__INIT;
  Vmrpc__DeviceSpec d = VMRPC__DEVICE_SPEC__INIT;
  Vmrpc__DeviceSpec *dl[1] = {&d};
  d.selector = (char *)"cpu";
  d.allocator = (char *)"";
  cv.exec_id = exec;
  cv.n_devices = 1;
  cv.devices = dl;
  cv.exec_mode = (char *)"";
  rq.id = 5;
  rq.op_case = VMRPC__REQUEST__OP_CREATE_VM;
  rq.create_vm = &cv;
  assert_non_null(r = pa_call(&t, fd, &rq, NULL, 0));
  uint64_t vm = r->create_vm->vm_id;
  vmrpc__response__free_unpacked(r, NULL);
  enum { MIB = 1 << 20 };
  uint8_t *x = calloc(1, MIB);
  assert_non_null(x);
  int64_t shape[1] = {MIB / 4};
  Vmrpc__TensorMeta tm = VMRPC__TENSOR_META__INIT;
  tm.dtype = (char *)"float32";
  tm.n_shape = 1;
  tm.shape = shape;
  tm.nbytes = MIB;
  Vmrpc__Value v = VMRPC__VALUE__INIT;
  v.kind_case = VMRPC__VALUE__KIND_TENSOR;
  v.tensor = &tm;
  Vmrpc__SetInputRequest si = VMRPC__SET_INPUT_REQUEST__INIT;
  si.vm_id = vm;
  si.func = (char *)"ident";
  si.param_case = VMRPC__SET_INPUT_REQUEST__PARAM_INDEX;
  si.index = 0;
  si.value = &v;
  rq.id = 6;
  rq.op_case = VMRPC__REQUEST__OP_SET_INPUT;
  rq.set_input = &si;
  assert_non_null(r = pa_call(&t, fd, &rq, x, MIB));
  vmrpc__response__free_unpacked(r, NULL);
  free(x);
  Vmrpc__InvokeRequest iv = VMRPC__INVOKE_REQUEST__INIT;
  iv.vm_id = vm;
  iv.func = (char *)"ident";
  rq.id = 7;
  rq.op_case = VMRPC__REQUEST__OP_INVOKE;
  rq.invoke = &iv;
  assert_non_null(r = pa_call(&t, fd, &rq, NULL, 0));
  vmrpc__response__free_unpacked(r, NULL);
  /* 128 GetOutputs of the whole 1 MiB, none of them read. */
  Vmrpc__GetOutputRequest go = VMRPC__GET_OUTPUT_REQUEST__INIT;
  go.vm_id = vm;
  go.func = (char *)"ident";
  go.max_bytes = MIB;
  rq.op_case = VMRPC__REQUEST__OP_GET_OUTPUT;
  rq.get_output = &go;
  double t0 = ha_now_s();
  for (uint32_t i = 0; i < 128; i++) {
    size_t len;
    rq.id = 100 + i;
    uint8_t *m = pa_frame(&t, (uint32_t)rq.id, &rq, 0, &len);
    assert_int_equal(pa_push_all(fd, m, len), 0);
    free(m);
  }
  /* Others are served while its replies pile up. */
  vmc_conn_opts_t o = pa_opts();
  for (int i = 0; i < 3; i++) assert_true(pa_legit_run(p.url, &o) < 2.0);
  usleep(2000 * 1000);
  /* Now read: what the kernel buffers held, then the end of the stream,
   * well before the 128 MiB were all sent. */
  uint64_t got = 0;
  int ended = 0;
  static uint8_t buf[1 << 16];
  for (;;) {
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    if (poll(&pf, 1, 3000) <= 0) break; /* nothing for 3 s: still open */
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      ended = n == 0 || errno != EAGAIN;
      if (ended) break;
      continue;
    }
    got += (uint64_t)n;
  }
  double took = ha_now_s() - t0;
  close(fd);
  fprintf(stderr,
          "unread replies: %llu MiB came before the agent dropped the connection (%.1f s)\n",
          (unsigned long long)(got >> 20), took);
  assert_true(ended);
  assert_true(got < 128ull * MIB);
  assert_true(took < 30);
  pa_legit_ping(p.url, &o);
  assert_int_equal(agent_proc_stop(&p), 0);
}

/* A thread that sends each connection's SP header one byte a second. */
typedef struct pa_dripper {
  int *fds;
  size_t n;
  const uint8_t *bytes; /* 8 of them */
  atomic_int stop;
} pa_dripper_t;

static void *pa_drip_main(void *arg) {
  pa_dripper_t *d = arg;
  for (size_t byte = 0; byte < 8 && !atomic_load(&d->stop); byte++) {
    for (size_t i = 0; i < d->n; i++) {
      size_t off = 0;
      if (d->fds[i] >= 0) (void)pa_push(d->fds[i], d->bytes + byte, 1, &off);
    }
    for (int k = 0; k < 10 && !atomic_load(&d->stop); k++) usleep(100 * 1000);
  }
  return NULL;
}

/* n_idle connections send `idle` (the SP header, or nothing), n_slow send
 * the 8 bytes of `slow` one a second; an authenticated Ping must work at every probe
 * for probe_s seconds, and every one of them is closed by the agent by
 * then (the Hello deadline is 3 s). Before: the 1,024th connection locked
 * everyone out, and a byte every 8 s kept a handshake alive. */
static void pa_idle_flood(const char *url, const vmc_conn_opts_t *o, size_t n_idle,
                          const uint8_t *idle, size_t idle_len, size_t n_slow,
                          const uint8_t slow[8], double probe_s) {
  pa_target_t t;
  pa_target(url, &t);
  int *fds = calloc(n_idle + n_slow, sizeof(int));
  assert_non_null(fds);
  size_t opened = 0;
  double t0 = ha_now_s();
  for (size_t i = 0; i < n_idle + n_slow; i++) {
    fds[i] = pa_dial(&t);
    if (fds[i] < 0) continue;
    opened++;
    size_t off = 0;
    if (i < n_idle && idle_len) (void)pa_push(fds[i], idle, idle_len, &off);
  }
  double open_s = ha_now_s() - t0;
  assert_true(opened == n_idle + n_slow);
  pa_dripper_t d = {.fds = fds + n_idle, .n = n_slow, .bytes = slow};
  atomic_init(&d.stop, 0);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, pa_drip_main, &d), 0);
  int probes = 0;
  double worst = 0;
  double end = ha_now_s() + probe_s;
  while (ha_now_s() < end) {
    double took = pa_legit_ping(url, o);
    if (took > worst) worst = took;
    probes++;
    usleep(250 * 1000);
  }
  atomic_store(&d.stop, 1);
  pthread_join(th, NULL);
  size_t closed_idle = 0, closed_slow = 0;
  for (size_t i = 0; i < n_idle + n_slow; i++)
    if (pa_closed(fds[i])) {
      if (i < n_idle)
        closed_idle++;
      else
        closed_slow++;
    }
  for (size_t i = 0; i < n_idle + n_slow; i++) close(fds[i]);
  free(fds);
  fprintf(stderr,
          "idle flood on %s: %zu connections opened in %.2f s; %d probes, worst %.3f s; "
          "closed by the agent: %zu/%zu idle, %zu/%zu slow\n",
          url, opened, open_s, probes, worst, closed_idle, n_idle, closed_slow, n_slow);
  assert_true(probes >= 10);
  assert_true(worst < 2.0);
  assert_int_equal(closed_idle, n_idle);
  assert_int_equal(closed_slow, n_slow);
}

static void test_idle_connections_tcp(void **state) {
  (void)state;
  pa_raise_nofile(4096);
  agent_proc_t p;
  const char *more[] = {"--hello-timeout", "3", NULL};
  pa_start(&p, NULL, more);
  vmc_conn_opts_t o = pa_opts();
  pa_idle_flood(p.url, &o, 1100, pa_sp_req0, sizeof(pa_sp_req0), 50, pa_sp_req0, 6.0);
  assert_int_equal(agent_proc_stop(&p), 0);
}

/* Over TLS the agent's reader waits in the TLS handshake: idle connections
 * send nothing, slow ones half a ClientHello (a record header announcing
 * 512 bytes, then a byte a second). */
static void test_idle_connections_tls(void **state) {
  (void)state;
  if (system("command -v openssl >/dev/null 2>&1") != 0) skip();
  pa_raise_nofile(4096);
  char dir[] = "/tmp/vmagent-preauth-tls-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char cmd[1024];
  snprintf(cmd, sizeof(cmd),
           "cd %s && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
           "-days 2 -subj /CN=127.0.0.1 -keyout agent.key -out agent.pem >/dev/null 2>&1",
           dir);
  if (system(cmd) != 0) {
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    (void)system(cmd);
    skip();
  }
  char cert[128], key[128];
  snprintf(cert, sizeof(cert), "%s/agent.pem", dir);
  snprintf(key, sizeof(key), "%s/agent.key", dir);
  const char *more[] = {"--tls-cert", cert, "--tls-key", key, "--hello-timeout", "3", NULL};
  agent_proc_t p;
  pa_start(&p, "tls+tcp://127.0.0.1:0", more);
  vmc_conn_opts_t o = pa_opts();
  o.tls_insecure = 1;
  /* A TLS handshake record of 512 bytes, starting a ClientHello. */
  static const uint8_t half_hello[8] = {0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01};
  pa_idle_flood(p.url, &o, 300, NULL, 0, 50, half_hello, 6.0);
  assert_int_equal(agent_proc_stop(&p), 0);
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  (void)system(cmd);
}

/* 1,000 connections without a token each pipeline 16 requests of 8 KiB
 * while stalled peers run. Before: they queued for the stalled workers,
 * and the agent went from 505 to 1,134 MiB and stayed above 1 GiB after
 * they had all gone. */
static void test_pre_hello_memory_returns(void **state) {
  (void)state;
  pa_raise_nofile(4096);
  agent_proc_t p;
  pa_start(&p, NULL, NULL);
  vmc_conn_opts_t o = pa_opts();
  pa_legit_run(p.url, &o);
  /* The start: an agent that has served, and has seen connections without
   * Hello come and go, 100 at once (the reader thread stacks glibc keeps
   * for reuse, nng's first allocations). */
  pa_target_t t;
  pa_target(p.url, &t);
  {
    int warm[100];
    for (size_t i = 0; i < 100; i++) {
      size_t off = 0;
      warm[i] = pa_dial(&t);
      if (warm[i] >= 0) (void)pa_push(warm[i], pa_sp_req0, sizeof(pa_sp_req0), &off);
    }
    pa_staller_t w[2];
    pa_stallers_start(w, 2, p.url, 2);
    usleep(500 * 1000);
    pa_stallers_stop(w, 2);
    for (size_t i = 0; i < 100; i++)
      if (warm[i] >= 0) close(warm[i]);
  }
  usleep(1500 * 1000);
  unsigned long long base = pa_rss_kib(p.pid);
  assert_true(base > 0);
  pa_staller_t s[2];
  pa_stallers_start(s, 2, p.url, 2);
  size_t len = 0;
  uint8_t *m = pa_free_vm(&t, 0, 8000, &len);
  size_t burst = 16 * len;
  uint8_t *all = malloc(8 + burst);
  assert_non_null(all);
  memcpy(all, pa_sp_req0, 8);
  for (size_t i = 0; i < 16; i++) memcpy(all + 8 + i * len, m, len);
  free(m);
  enum { N = 1000 };
  static int fds[N];
  static size_t offs[N];
  unsigned long long peak = base;
  for (size_t i = 0; i < N; i++) {
    fds[i] = pa_dial(&t);
    offs[i] = 0;
    if (fds[i] >= 0 && pa_push(fds[i], all, 8 + burst, &offs[i]) != 0) {
      close(fds[i]);
      fds[i] = -1;
    }
    if (i % 100 == 99) {
      unsigned long long r = pa_rss_kib(p.pid);
      if (r > peak) peak = r;
    }
  }
  /* What the sockets did not take at once goes when the agent reads. */
  for (int round = 0; round < 20; round++) {
    for (size_t i = 0; i < N; i++)
      if (fds[i] >= 0 && offs[i] < 8 + burst && pa_push(fds[i], all, 8 + burst, &offs[i]) != 0) {
        close(fds[i]);
        fds[i] = -1;
      }
    usleep(50 * 1000);
  }
  for (size_t i = 0; i < N; i++)
    if (fds[i] >= 0) close(fds[i]);
  free(all);
  pa_stallers_stop(s, 2);
  unsigned long long now = 0;
  double t0 = ha_now_s();
  do {
    usleep(250 * 1000);
    now = pa_rss_kib(p.pid);
  } while (now * 10 > base * 11 && ha_now_s() - t0 < 10);
  fprintf(stderr, "pre-Hello flood: rss %llu KiB at the start, peak seen %llu, after %llu KiB\n",
          base, peak, now);
#if defined(__SANITIZE_ADDRESS__)
  /* AddressSanitizer's allocator keeps what is freed (its quarantine) and
   * shadows it: the bound is the release build's; here the flood runs for
   * the memory errors and leaks it could find. */
  fprintf(stderr, "pre-Hello flood: RSS bound not checked under AddressSanitizer\n");
#else
  assert_true(now * 10 <= base * 11);
#endif
  pa_legit_run(p.url, &o);
  assert_int_equal(agent_proc_stop(&p), 0);
}

static int setup(void **state) {
  (void)state;
  snprintf(g_token_file, sizeof(g_token_file), "/tmp/vmagent-preauth-token-XXXXXX");
  int fd = mkstemp(g_token_file);
  if (fd < 0) return -1;
  int ok = write(fd, TOKEN "\n", strlen(TOKEN) + 1) == (ssize_t)strlen(TOKEN) + 1;
  close(fd);
  if (!ok) return -1;
  return ha_fixtures_load(&g_fx, ha_test_program);
}

static int teardown(void **state) {
  (void)state;
  unlink(g_token_file);
  ha_fixtures_free(&g_fx);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_stalled_peers_tcp),
      cmocka_unit_test(test_stalled_peers_ipc),
      cmocka_unit_test(test_unread_replies_overflow),
      cmocka_unit_test(test_idle_connections_tcp),
      cmocka_unit_test(test_idle_connections_tls),
      cmocka_unit_test(test_pre_hello_memory_returns),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
