/* The wire against the physical limits of this machine: vmrpc's round trip
 * and bulk transfers through a real vmagent child on a loopback port,
 * each next to a raw TCP baseline measured in the same run (this process
 * and a child process of its own on a loopback socket pair, TCP_NODELAY,
 * blocking calls: two processes, as the client and the agent are; two
 * threads of one process switch between each other without changing
 * address space, which no client and agent can do).
 *
 * Figures (median over rounds; rounds interleave baseline and vmrpc so
 * drift of the shared machine hits both alike):
 *   raw_tcp_rtt_us        32-byte ping-pong between the two processes
 *   nng_rtt_us            bare nng req0/rep0 echo (both ends in this process,
 *                         blocking nng_sendmsg/nng_recvmsg): what nng itself
 *                         costs, a diagnostic, not a baseline
 *   transport_rtt_us      32-byte ping-pong over two connections of the
 *                         transport layer (vmtransport/conn.h) between two
 *                         threads of this process: what vmrpc's own
 *                         transport costs beyond raw TCP, a diagnostic;
 *                         transport_rtt_ratio against raw TCP
 *   ping_rtt_us           vmc_ping (no work on the agent)
 *   get_output4_rtt_us    vmc_get_output_into of a 4-byte tensor
 *   rtt_ratio             ping / raw; get_output4_rtt_ratio likewise
 *   raw_tcp_gbps_N        the best raw TCP stream of N MiB between the
 *                         two processes: of three streams measured every round
 *                         (an 8-byte request, then: the peer writes all N
 *                         MiB in one call; it writes them one chunk, the
 *                         agent's chunk size, per call; this thread writes
 *                         them one chunk per call and the peer reads them,
 *                         an upload; each into a reused buffer), the one
 *                         with the highest median (raw_tcp_best_N names
 *                         it; raw_tcp_variants_gbps_N lists the three)
 *   upload_gbps_N         vmc_set_input of an N MiB u8 tensor (cpu device)
 *   download_gbps_N       vmc_get_output_into of it into a reused buffer
 *   upload/download_ratio_N   against raw_tcp_gbps_N: the median of the
 *                         per-round ratios, each against the best stream's
 *                         run of the same round (a round runs the raw
 *                         streams, the upload and the download, odd rounds
 *                         in the reverse order)
 *   upload/download_cpu_ratio_N   the raw stream's CPU time per byte over
 *                         vmrpc's (both processes; median of per-round
 *                         ratios): the load-independent view, > 1 when
 *                         vmrpc does less work per byte than raw TCP
 *   ..._client_mallopt    64 and 256 MiB again after this process tuned
 *                         glibc's malloc (docs/performance.md)
 *   *_cpu_ns_per_byte_N, *_ctx_switches_per_chunk_N   CPU time and
 *                         context switches of both processes, and
 *   *_faults_per_mib_N    page faults of each (a fresh 4 KiB page costs
 *                         one): diagnostics
 *   cold_upload_ms        vmc_upload_file of a 64 MiB executable (one big
 *                         tensor constant) the agent has never seen
 *   store_hit_upload_ms   the same file again: UploadBegin finds it in the
 *                         agent's store; store_hit_ratio = hit / cold
 *   store_hit_memory_upload_ms   the same bytes from memory
 *                         (vmc_upload_memory, which hashes them again);
 *                         store_hit_memory_ratio
 *   client_sha256_ms      vm_sha256 of those bytes in this process
 *   ping_cpu_us, ping_ctx_switches_*   CPU time and context switches per
 *                         Ping (both processes / each side), raw_* the same
 *                         for the raw ping-pong (diagnostics)
 * N is 1, 64 and 256 (MiB).
 *
 * Usage: bench_rpc [rounds [parts]]: rounds 3..51 (default 7); parts is a
 * comma list of rtt, bulk, exec (default all three; the JSON then holds
 * only those figures, for tuning one path at a time). The agent serves
 * only the cpu device (--device cpu) with its defaults otherwise (extra
 * flags from $VMRPC_BENCH_AGENT_ARGS, for experiments), and a fresh
 * executable store in a temporary directory (removed at the end);
 * $VMRPC_BENCH_CLIENT_CA names the CA file when those flags make it listen
 * on tls+tcp://. Needs
 * VMRPC_BUILD_DIR (defaults to the directory above this program). Prints
 * one JSON object.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdarg.h>
#include <limits.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>
#include <ftw.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>

#include "agent_proc.h"
#include "vm/executable.h"
#include "vm/vm.h"
#include "vmrpc/vmclient.h"
#include "vmtransport/conn.h"

#include "bench_stats.h"

#define MAX_ROUNDS 51
#define RTT_ITERS 2000 /* round trips per round and figure */
#define MIB (1ull << 20)
#define NSIZES 3
static const uint64_t SIZES_MIB[NSIZES] = {1, 64, 256};
/* Transfers per round: small sizes repeat to rise above timer noise. */
static const int REPS[NSIZES] = {32, 2, 1};
#define EXEC_CONST_BYTES (64 * MIB)
#define PING_BYTES 32

static void check(vm_status_t st, const char *what) {
  if (!st) return;
  fprintf(stderr, "bench_rpc: %s: %s: %s\n", what, vm_code_name(vm_status_code(st)),
          vm_status_message(st));
  exit(1);
}

static void die(const char *what) {
  fprintf(stderr, "bench_rpc: %s: %s\n", what, strerror(errno));
  exit(1);
}

static double now_s(void) {
  return (double)vm_now_ns() * 1e-9;
}

/* Touches every page so that no figure pays for first-touch faults. */
static void *alloc_touched(size_t n, unsigned char fill) {
  unsigned char *p = malloc(n);
  if (!p) die("malloc");
  memset(p, fill, n);
  return p;
}

/* ------------------------------------------------------------ raw TCP */

/* A connected loopback pair, TCP_NODELAY on both ends. */
static void tcp_pair(int *a, int *b) {
  int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (l < 0) die("socket");
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t sl = sizeof(sa);
  if (bind(l, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(l, 1) != 0 ||
      getsockname(l, (struct sockaddr *)&sa, &sl) != 0)
    die("listen");
  int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (c < 0 || connect(c, (struct sockaddr *)&sa, sizeof(sa)) != 0) die("connect");
  int s = accept(l, NULL, NULL);
  if (s < 0) die("accept");
  close(l);
  int one = 1;
  setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  *a = c;
  *b = s;
}

static int read_full(int fd, void *buf, size_t n) {
  unsigned char *p = buf;
  while (n) {
    ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

static int write_full(int fd, const void *buf, size_t n) {
  const unsigned char *p = buf;
  while (n) {
    ssize_t r = write(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

/* The raw peer (a child process): answers 8-byte requests. A request n > 0 asks for n
 * bulk bytes; n == 0 is a ping (PING_BYTES follow, echoed back); EOF ends
 * it. */
typedef struct raw_peer {
  int fd;
  const unsigned char *src; /* bulk source, the largest size */
  unsigned char *sink;      /* where uploads land, the largest size */
  uint64_t chunk;
} raw_peer_t;

/* The request's top byte: how the N bytes move. */
enum { RAW_DOWN_WHOLE, RAW_DOWN_CHUNKED, RAW_UP_CHUNKED, RAW_MODES };
static const char *const RAW_MODE_NAME[RAW_MODES] = {"down_whole", "down_chunked", "up_chunked"};
#define RAW_LEN_MASK ((1ull << 56) - 1)

/* Writes n bytes of src, chunk bytes per call. */
static int write_chunked(int fd, const unsigned char *src, uint64_t n, uint64_t chunk) {
  for (uint64_t off = 0; off < n; off += chunk)
    if (write_full(fd, src + off, n - off < chunk ? n - off : chunk) != 0) return -1;
  return 0;
}

static void *raw_peer_main(void *arg) {
  raw_peer_t *p = arg;
  unsigned char ping[PING_BYTES];
  for (;;) {
    uint64_t req;
    if (read_full(p->fd, &req, sizeof(req)) != 0) break;
    uint64_t n = req & RAW_LEN_MASK;
    int mode = (int)(req >> 56), rc;
    if (n == 0)
      rc = read_full(p->fd, ping, sizeof(ping)) || write_full(p->fd, ping, sizeof(ping));
    else if (mode == RAW_DOWN_WHOLE)
      rc = write_full(p->fd, p->src, n);
    else if (mode == RAW_DOWN_CHUNKED)
      rc = write_chunked(p->fd, p->src, n, p->chunk);
    else
      rc = read_full(p->fd, p->sink, n) || write_full(p->fd, ping, 1);
    if (rc) break;
  }
  close(p->fd);
  return NULL;
}

/* Mean microseconds of one ping-pong (request header + 32 bytes each way
 * would be 40 bytes out; to match a Ping frame the header is sent once
 * with the payload). */
static double raw_rtt_us(int fd, int iters) {
  unsigned char msg[8 + PING_BYTES];
  memset(msg, 0, sizeof(msg));
  unsigned char back[PING_BYTES];
  double t0 = now_s();
  for (int i = 0; i < iters; i++) {
    if (write_full(fd, msg, sizeof(msg)) != 0 || read_full(fd, back, sizeof(back)) != 0)
      die("raw ping");
  }
  return (now_s() - t0) / iters * 1e6;
}

/* GB/s of `reps` transfers of n bytes each in mode: downloads received
 * into dst, uploads sent from src chunk bytes per call. */
static double raw_bulk_gbps(int fd, int mode, const unsigned char *src, unsigned char *dst,
                            uint64_t n, uint64_t chunk, int reps) {
  uint64_t req = n | (uint64_t)mode << 56;
  unsigned char ack;
  double t0 = now_s();
  for (int r = 0; r < reps; r++) {
    if (write_full(fd, &req, sizeof(req)) != 0) die("raw bulk");
    int rc = mode == RAW_UP_CHUNKED ? write_chunked(fd, src, n, chunk) || read_full(fd, &ack, 1)
                                    : read_full(fd, dst, n);
    if (rc) die("raw bulk");
  }
  return (double)n * reps / (now_s() - t0) / 1e9;
}

/* ---------------------------------------------------------- bare nng */

typedef struct nng_peer {
  nng_socket sock;
} nng_peer_t;

static void *nng_peer_main(void *arg) {
  nng_peer_t *p = arg;
  for (;;) {
    nng_msg *m;
    if (nng_recvmsg(p->sock, &m, 0) != 0) break;
    if (nng_sendmsg(p->sock, m, 0) != 0) {
      nng_msg_free(m);
      break;
    }
  }
  return NULL;
}

static double nng_rtt_us(nng_socket req, int iters) {
  double t0 = now_s();
  for (int i = 0; i < iters; i++) {
    nng_msg *m;
    if (nng_msg_alloc(&m, PING_BYTES) != 0) die("nng_msg_alloc");
    memset(nng_msg_body(m), 0, PING_BYTES);
    if (nng_sendmsg(req, m, 0) != 0) die("nng send");
    if (nng_recvmsg(req, &m, 0) != 0) die("nng recv");
    nng_msg_free(m);
  }
  return (now_s() - t0) / iters * 1e6;
}

/* ------------------------------------------------ the transport layer */

static void *transport_peer_main(void *arg) {
  vmt_conn_t *c = arg;
  unsigned char buf[PING_BYTES];
  for (;;) {
    size_t have = 0, got = 0;
    while (have < sizeof(buf) && vmt_conn_read(c, buf + have, sizeof(buf) - have, 0, &got) == 0)
      have += got;
    struct iovec v = {buf, sizeof(buf)};
    if (have < sizeof(buf) || vmt_conn_writev(c, &v, 1, 0, NULL) != 0) break;
  }
  return NULL;
}

static double transport_rtt_us(vmt_conn_t *c, int iters) {
  unsigned char buf[PING_BYTES] = {0};
  double t0 = now_s();
  for (int i = 0; i < iters; i++) {
    struct iovec v = {buf, sizeof(buf)};
    size_t have = 0, got = 0;
    if (vmt_conn_writev(c, &v, 1, 0, NULL) != 0) die("transport ping-pong");
    while (have < sizeof(buf))
      if (vmt_conn_read(c, buf + have, sizeof(buf) - have, 0, &got) != 0)
        die("transport ping-pong");
      else
        have += got;
  }
  return (now_s() - t0) / iters * 1e6;
}

typedef struct transport_accept {
  vmt_listener_t *l;
  vmt_conn_t *c;
} transport_accept_t;

static void *transport_accept_main(void *arg) {
  transport_accept_t *x = arg;
  if (vmt_listener_accept(x->l, &x->c) != 0) x->c = NULL;
  return NULL;
}

/* A dialed and an accepted tcp:// connection on loopback. */
static void transport_pair(vmt_listener_t **l, vmt_conn_t **a, vmt_conn_t **b) {
  char url[64];
  if (vmt_listen("tcp://127.0.0.1:0", NULL, l) != 0) die("transport listener");
  snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", vmt_listener_port(*l));
  transport_accept_t x = {.l = *l};
  pthread_t t;
  if (pthread_create(&t, NULL, transport_accept_main, &x) != 0) die("pthread_create");
  if (vmt_dial(url, NULL, 5000, a) != 0) die("transport dial");
  pthread_join(t, NULL);
  if (!x.c) die("transport accept");
  *b = x.c;
}

/* ----------------------------------------------------- vmrpc helpers */

/* main(x) returns x: whatever tensor is set comes back as the result. */
static vm_executable_t *identity_exec(void) {
  vm_builder_t *b;
  check(vm_builder_create(&b), "builder");
  const char *params[] = {"x"};
  uint32_t f;
  vm_builder_declare_function(b, "main", 1, params, &f);
  vm_builder_begin_function(b, f);
  vm_builder_emit_ret(b, 0);
  vm_builder_end_function(b, 0);
  vm_executable_t *e;
  check(vm_builder_finish(b, &e), "building the identity executable");
  vm_builder_free(b);
  return e;
}

/* The identity function plus a tensor constant of nbytes (a model's
 * weights); nonce makes the bytes (and so the hash) unique. */
static void big_exec_bytes(const unsigned char *weights, uint64_t nbytes, uint64_t nonce,
                           uint8_t **out, size_t *out_len) {
  vm_builder_t *b;
  check(vm_builder_create(&b), "builder");
  int64_t shape[1] = {(int64_t)nbytes};
  uint32_t ci;
  vm_builder_const_tensor(b, VM_U8, 1, shape, weights, nbytes, NULL, &ci);
  char nb[32];
  snprintf(nb, sizeof(nb), "%llu", (unsigned long long)nonce);
  vm_builder_add_meta(b, "bench.nonce", nb);
  const char *params[] = {"x"};
  uint32_t f;
  vm_builder_declare_function(b, "main", 1, params, &f);
  vm_builder_begin_function(b, f);
  vm_builder_emit_ret(b, 0);
  vm_builder_end_function(b, 0);
  vm_executable_t *e;
  check(vm_builder_finish(b, &e), "building the 64 MiB executable");
  vm_builder_free(b);
  check(vm_executable_write(e, out, out_len), "serialising the 64 MiB executable");
  vm_executable_free(e);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static void set_build_dir(void) {
  if (agent_proc_set_build_dir() != 0) exit(1);
}

static void upload_tensor(vmc_conn_t *c, vmc_vm_t vm, unsigned char *src, uint64_t n) {
  int64_t shape[1] = {(int64_t)n};
  vmc_tensor_t t;
  check(vmc_tensor_wrap(VM_U8, 1, shape, src, &t), "wrap");
  check(vmc_set_input(c, vm, "main", 0, &t), "set_input");
}

static void download_tensor(vmc_conn_t *c, vmc_vm_t vm, unsigned char *dst, uint64_t n) {
  vmc_tensor_t meta;
  check(vmc_get_output_into(c, vm, "main", NULL, 0, dst, n, &meta), "get_output");
  if (meta.nbytes != n) {
    fprintf(stderr, "bench_rpc: output of %llu bytes, expected %llu\n",
            (unsigned long long)meta.nbytes, (unsigned long long)n);
    exit(1);
  }
}

/* Context switches (voluntary + involuntary) of every thread of pid: a
 * thread hand-off costs one; the load-independent view of a round trip. */
static uint64_t ctx_switches(pid_t pid) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
  DIR *d = opendir(path);
  if (!d) return 0;
  uint64_t total = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char sp[PATH_MAX];
    snprintf(sp, sizeof(sp), "%s/%.32s/status", path, e->d_name);
    FILE *f = fopen(sp, "r");
    if (!f) continue;
    char line[256];
    while (fgets(line, sizeof(line), f)) {
      unsigned long long v;
      if (sscanf(line, "voluntary_ctxt_switches: %llu", &v) == 1 ||
          sscanf(line, "nonvoluntary_ctxt_switches: %llu", &v) == 1)
        total += v;
    }
    fclose(f);
  }
  closedir(d);
  return total;
}

/* Minor page faults of pid (field 10 of /proc/PID/stat). */
static uint64_t minor_faults(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *p = strrchr(buf, ')'); /* the command name may hold spaces */
  unsigned long long v = 0;
  if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %llu", &v) == 1) return v;
  return 0;
}

/* CPU nanoseconds run by every thread of pid (schedstat's first field). */
static uint64_t cpu_ns(pid_t pid) {
  return agent_proc_cpu_ns(pid, 0);
}

static double load_avg(void) {
  double l[1] = {0};
  return getloadavg(l, 1) == 1 ? l[0] : -1;
}

/* The JSON object, built part by part. */
static char g_json[8192];
static size_t g_len;

static void out(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void out(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(g_json + g_len, sizeof(g_json) - g_len, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof(g_json) - g_len) {
    fprintf(stderr, "bench_rpc: JSON buffer too small\n");
    exit(1);
  }
  g_len += (size_t)n;
}

/* What every part shares. */
typedef struct bench {
  int rounds;
  vmc_conn_t *c;
  vmc_exec_t ident; /* main(x) = x */
  int raw_fd;       /* raw TCP, the peer process answers */
  pid_t raw_pid;
  nng_socket nreq;  /* bare nng, the echo thread answers */
  vmt_conn_t *tc;   /* the transport layer, its peer thread answers */
  unsigned char *src, *dst;
  pid_t agent_pid;
  uint64_t chunk; /* the agent's chunk size */
} bench_t;

static void part_rtt(bench_t *b) {
  vmc_conn_t *c = b->c;
  int rounds = b->rounds;
  vmc_device_spec_t cpu = {"cpu", "pooled"};
  vmc_vm_t vm;
  check(vmc_create_vm(c, b->ident, &cpu, 1, "bytecode", &vm), "create VM");
  float four = 1.0f;
  unsigned char four_back[4];
  int64_t shape[1] = {1};
  vmc_tensor_t t;
  check(vmc_tensor_wrap(VM_F32, 1, shape, &four, &t), "wrap");
  check(vmc_set_input(c, vm, "main", 0, &t), "set 4-byte input");
  check(vmc_invoke(c, vm, "main", 0, NULL), "invoke");
  /* warm-up */
  raw_rtt_us(b->raw_fd, 200);
  nng_rtt_us(b->nreq, 200);
  transport_rtt_us(b->tc, 200);
  for (int i = 0; i < 200; i++) check(vmc_ping(c, NULL), "ping");
  for (int i = 0; i < 200; i++) download_tensor(c, vm, four_back, 4);

  double raw[MAX_ROUNDS], nng[MAX_ROUNDS], ping[MAX_ROUNDS], go[MAX_ROUNDS], nst[MAX_ROUNDS];
  for (int r = 0; r < rounds; r++) {
    raw[r] = raw_rtt_us(b->raw_fd, RTT_ITERS);
    nng[r] = nng_rtt_us(b->nreq, RTT_ITERS);
    nst[r] = transport_rtt_us(b->tc, RTT_ITERS);
    double t0 = now_s();
    for (int i = 0; i < RTT_ITERS; i++) check(vmc_ping(c, NULL), "ping");
    ping[r] = (now_s() - t0) / RTT_ITERS * 1e6;
    t0 = now_s();
    for (int i = 0; i < RTT_ITERS; i++) download_tensor(c, vm, four_back, 4);
    go[r] = (now_s() - t0) / RTT_ITERS * 1e6;
  }
  check(vmc_free_vm(c, vm), "free VM");
  double raw_m = median_copy(raw, rounds), nng_m = median_copy(nng, rounds);
  double ping_m = median_copy(ping, rounds), go_m = median_copy(go, rounds);
  double nst_m = median_copy(nst, rounds);
  /* Thread hand-offs per round trip, each side (raw TCP: one per side). */
  uint64_t cs0 = ctx_switches(getpid()), as0 = ctx_switches(b->agent_pid);
  uint64_t cpu0 = cpu_ns(getpid()) + cpu_ns(b->agent_pid) + cpu_ns(b->raw_pid);
  for (int i = 0; i < RTT_ITERS; i++) check(vmc_ping(c, NULL), "ping");
  uint64_t cs1 = ctx_switches(getpid()), as1 = ctx_switches(b->agent_pid);
  uint64_t rs1 = cs1 + ctx_switches(b->raw_pid); /* raw: both sides, as before */
  uint64_t cpu1 = cpu_ns(getpid()) + cpu_ns(b->agent_pid) + cpu_ns(b->raw_pid);
  raw_rtt_us(b->raw_fd, RTT_ITERS);
  uint64_t rs2 = ctx_switches(getpid()) + ctx_switches(b->raw_pid);
  uint64_t cpu2 = cpu_ns(getpid()) + cpu_ns(b->agent_pid) + cpu_ns(b->raw_pid);
  out("\"ping_ctx_switches_client\":%.2f,\"ping_ctx_switches_agent\":%.2f,"
      "\"raw_ctx_switches\":%.2f,\"ping_cpu_us\":%.2f,\"raw_cpu_us\":%.2f,",
      (double)(cs1 - cs0) / RTT_ITERS, (double)(as1 - as0) / RTT_ITERS,
      (double)(rs2 - rs1) / RTT_ITERS, (double)(cpu1 - cpu0) / RTT_ITERS / 1e3,
      (double)(cpu2 - cpu1) / RTT_ITERS / 1e3);
  out("\"raw_tcp_rtt_us\":%.2f,\"nng_rtt_us\":%.2f,\"ping_rtt_us\":%.2f,"
      "\"get_output4_rtt_us\":%.2f,\"rtt_ratio\":%.3f,\"get_output4_rtt_ratio\":%.3f,"
      "\"nng_rtt_ratio\":%.3f,\"transport_rtt_us\":%.2f,\"transport_rtt_ratio\":%.3f,",
      raw_m, nng_m, ping_m, go_m, ping_m / raw_m, go_m / raw_m, nng_m / raw_m, nst_m,
      nst_m / raw_m);
}

/* One timed phase: wall seconds and the CPU nanoseconds the processes
 * spent (this one, the agent and the raw peer: the one not in the phase
 * idles). */
typedef struct phase {
  double t0;
  uint64_t cpu0, cs0, agent_flt0, client_flt0;
} phase_t;

static void phase_start(const bench_t *b, phase_t *p) {
  p->agent_flt0 = minor_faults(b->agent_pid);
  p->client_flt0 = minor_faults(getpid());
  p->cs0 = ctx_switches(getpid()) + ctx_switches(b->agent_pid) + ctx_switches(b->raw_pid);
  p->cpu0 = cpu_ns(getpid()) + cpu_ns(b->agent_pid) + cpu_ns(b->raw_pid);
  p->t0 = now_s();
}

/* What a phase cost both processes. */
typedef struct phase_cost {
  double cpu_s, switches, agent_faults, client_faults;
} phase_cost_t;

/* Wall seconds; *c what it cost. */
static double phase_end(const bench_t *b, const phase_t *p, phase_cost_t *c) {
  double wall = now_s() - p->t0;
  c->cpu_s =
      (double)(cpu_ns(getpid()) + cpu_ns(b->agent_pid) + cpu_ns(b->raw_pid) - p->cpu0) * 1e-9;
  c->switches = (double)(ctx_switches(getpid()) + ctx_switches(b->agent_pid) +
                         ctx_switches(b->raw_pid) - p->cs0);
  c->agent_faults = (double)(minor_faults(b->agent_pid) - p->agent_flt0);
  c->client_faults = (double)(minor_faults(getpid()) - p->client_flt0);
  return wall;
}

/* One direction's figures per round: GB/s, CPU ns per byte, context
 * switches per chunk, page faults per MiB of the agent and the client. */
typedef struct dir_fig {
  double g[MAX_ROUNDS], c[MAX_ROUNDS], cs[MAX_ROUNDS], af[MAX_ROUNDS], cf[MAX_ROUNDS];
} dir_fig_t;

static void note_phase(dir_fig_t *f, int r, double bytes, double wall, const phase_cost_t *pc,
                       double chunks) {
  double mibs = bytes / (double)MIB;
  f->g[r] = bytes / wall / 1e9;
  f->c[r] = pc->cpu_s * 1e9 / bytes;
  f->cs[r] = pc->switches / chunks;
  f->af[r] = pc->agent_faults / mibs;
  f->cf[r] = pc->client_faults / mibs;
}

/* Bulk figures for sizes [first, NSIZES); key names end in suffix. */
static void part_bulk(bench_t *b, int first, const char *suffix) {
  vmc_conn_t *c = b->c;
  int rounds = b->rounds;
  vmc_device_spec_t cpu = {"cpu", "pooled"};
  double raw_g[NSIZES], up_g[NSIZES], down_g[NSIZES], up_r[NSIZES], down_r[NSIZES];
  double raw_v[NSIZES][RAW_MODES];
  double raw_cpu[NSIZES], up_cpu[NSIZES], down_cpu[NSIZES], up_cs[NSIZES], down_cs[NSIZES];
  double up_af[NSIZES], up_cf[NSIZES], down_af[NSIZES], down_cf[NSIZES];
  double up_cr[NSIZES], down_cr[NSIZES];
  int raw_best[NSIZES];
  for (int s = first; s < NSIZES; s++) {
    uint64_t n = SIZES_MIB[s] * MIB;
    int reps = REPS[s];
    double bytes = (double)n * reps;
    /* A VM per size, so the agent's pool holds only this size's blocks. */
    vmc_vm_t vm;
    check(vmc_create_vm(c, b->ident, &cpu, 1, "bytecode", &vm), "create VM");
    upload_tensor(c, vm, b->src, n); /* warm-up: pool blocks, message buffers */
    check(vmc_invoke(c, vm, "main", 0, NULL), "invoke");
    download_tensor(c, vm, b->dst, n);
    upload_tensor(c, vm, b->src, n);
    for (int m = 0; m < RAW_MODES; m++) raw_bulk_gbps(b->raw_fd, m, b->src, b->dst, n, b->chunk, 1);
    dir_fig_t up, down;
    double ur[MAX_ROUNDS], dr[MAX_ROUNDS], ucr[MAX_ROUNDS], dcr[MAX_ROUNDS];
    double rv[RAW_MODES][MAX_ROUNDS], rcm[RAW_MODES][MAX_ROUNDS];
    double chunks = (double)reps * (double)((n + b->chunk - 1) / b->chunk);
    for (int r = 0; r < rounds; r++) {
      phase_t ph;
      phase_cost_t pc;
      /* Every raw stream, then upload and download; odd rounds the other
       * way round, so that a drift of the machine's load within a round
       * does not favour one side. */
      for (int part = 0; part < 3; part++) {
        int what = r % 2 ? 2 - part : part;
        if (what == 0) {
          for (int m = 0; m < RAW_MODES; m++) {
            phase_start(b, &ph);
            raw_bulk_gbps(b->raw_fd, m, b->src, b->dst, n, b->chunk, reps);
            rv[m][r] = bytes / phase_end(b, &ph, &pc) / 1e9;
            rcm[m][r] = pc.cpu_s * 1e9 / bytes;
          }
        } else if (what == 1) {
          phase_start(b, &ph);
          for (int k = 0; k < reps; k++) upload_tensor(c, vm, b->src, n);
          note_phase(&up, r, bytes, phase_end(b, &ph, &pc), &pc, chunks);
        } else {
          memset(b->dst, 0, 4096);
          phase_start(b, &ph);
          for (int k = 0; k < reps; k++) download_tensor(c, vm, b->dst, n);
          note_phase(&down, r, bytes, phase_end(b, &ph, &pc), &pc, chunks);
          if (b->dst[0] != 0x5a || b->dst[n - 1] != 0x5a) {
            fprintf(stderr, "bench_rpc: downloaded bytes differ from the uploaded ones\n");
            exit(1);
          }
        }
      }
    }
    /* The baseline is the raw stream fastest over the rounds (the highest
     * median), not each round's fastest of three: a maximum of three noisy
     * samples against one sample of vmrpc would pull every ratio down by
     * the noise alone. Ratios are per round against that stream's run of
     * the same round (moments apart, under the same load); their median is
     * steadier than a ratio of medians. The CPU ratios (raw's CPU time per
     * byte over vmrpc's, both processes) do not depend on the load: above
     * 1, vmrpc costs less work per byte than the raw stream. */
    int best = 0;
    for (int m = 0; m < RAW_MODES; m++) {
      raw_v[s][m] = median_copy(rv[m], rounds);
      if (raw_v[s][m] > raw_v[s][best]) best = m;
    }
    for (int r = 0; r < rounds; r++) {
      ur[r] = up.g[r] / rv[best][r];
      dr[r] = down.g[r] / rv[best][r];
      ucr[r] = rcm[best][r] / up.c[r];
      dcr[r] = rcm[best][r] / down.c[r];
    }
    raw_best[s] = best;
    raw_g[s] = raw_v[s][best];
    up_g[s] = median_copy(up.g, rounds);
    down_g[s] = median_copy(down.g, rounds);
    up_r[s] = median_copy(ur, rounds);
    down_r[s] = median_copy(dr, rounds);
    up_cr[s] = median_copy(ucr, rounds);
    down_cr[s] = median_copy(dcr, rounds);
    raw_cpu[s] = median_copy(rcm[best], rounds);
    up_cpu[s] = median_copy(up.c, rounds);
    down_cpu[s] = median_copy(down.c, rounds);
    up_cs[s] = median_copy(up.cs, rounds);
    down_cs[s] = median_copy(down.cs, rounds);
    up_af[s] = median_copy(up.af, rounds);
    up_cf[s] = median_copy(up.cf, rounds);
    down_af[s] = median_copy(down.af, rounds);
    down_cf[s] = median_copy(down.cf, rounds);
    check(vmc_free_vm(c, vm), "free VM");
  }
  if (first <= 1) out("\"raw_tcp_gbps%s\":%.3f,", suffix, raw_g[1]);
  for (int s = first; s < NSIZES; s++) {
    unsigned long long m = (unsigned long long)SIZES_MIB[s];
    const char *x = suffix;
    out("\"raw_tcp_gbps_%llu%s\":%.3f,\"upload_gbps_%llu%s\":%.3f,\"download_gbps_%llu%s\":%.3f,"
        "\"upload_ratio_%llu%s\":%.3f,\"download_ratio_%llu%s\":%.3f,",
        m, x, raw_g[s], m, x, up_g[s], m, x, down_g[s], m, x, up_r[s], m, x, down_r[s]);
    out("\"raw_tcp_best_%llu%s\":\"%s\",\"upload_cpu_ratio_%llu%s\":%.3f,"
        "\"download_cpu_ratio_%llu%s\":%.3f,",
        m, x, RAW_MODE_NAME[raw_best[s]], m, x, up_cr[s], m, x, down_cr[s]);
    out("\"raw_tcp_variants_gbps_%llu%s\":{", m, x);
    for (int v = 0; v < RAW_MODES; v++)
      out("\"%s\":%.3f%s", RAW_MODE_NAME[v], raw_v[s][v], v + 1 < RAW_MODES ? "," : "},");
    out("\"raw_cpu_ns_per_byte_%llu%s\":%.3f,\"upload_cpu_ns_per_byte_%llu%s\":%.3f,"
        "\"download_cpu_ns_per_byte_%llu%s\":%.3f,\"upload_ctx_switches_per_chunk_%llu%s\":%.1f,"
        "\"download_ctx_switches_per_chunk_%llu%s\":%.1f,",
        m, x, raw_cpu[s], m, x, up_cpu[s], m, x, down_cpu[s], m, x, up_cs[s], m, x, down_cs[s]);
    out("\"upload_faults_per_mib_%llu%s\":{\"client\":%.1f,\"agent\":%.1f},"
        "\"download_faults_per_mib_%llu%s\":{\"client\":%.1f,\"agent\":%.1f},",
        m, x, up_cf[s], up_af[s], m, x, down_cf[s], down_af[s]);
  }
}

static void part_exec(bench_t *b) {
  vmc_conn_t *c = b->c;
  int rounds = b->rounds < 5 ? b->rounds : 5;
  /* The executables as files (what `vmclient upload` and most programs
   * send), written first and then left alone for a few seconds: the
   * client trusts a remembered hash only for a file that was not just
   * written (client/lib/hashmemo.c). */
  char dir[PATH_MAX];
  snprintf(dir, sizeof(dir), "%s/bench-rpc-files-XXXXXX", getenv("VMRPC_BUILD_DIR"));
  if (!mkdtemp(dir)) die("mkdtemp");
  char path[MAX_ROUNDS][PATH_MAX + 32];
  size_t exec_len = 0;
  for (int r = 0; r < rounds; r++) {
    uint8_t *xb;
    big_exec_bytes(b->src, EXEC_CONST_BYTES, vm_now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)r,
                   &xb, &exec_len);
    snprintf(path[r], sizeof(path[r]), "%s/x%d.vmx", dir, r);
    check(vm_write_file_atomic(path[r], xb, exec_len), "writing an executable file");
    free(xb);
  }
  sleep(3);
  double cold[MAX_ROUNDS], hit[MAX_ROUNDS], hit_mem[MAX_ROUNDS], hash_ms[MAX_ROUNDS];
  for (int r = 0; r < rounds; r++) {
    vmc_exec_t e1, e2, e3;
    vmc_upload_result_t res1, res2, res3;
    double t0 = now_s();
    check(vmc_upload_file(c, path[r], NULL, NULL, &e1, &res1), "cold upload");
    cold[r] = (now_s() - t0) * 1e3;
    t0 = now_s();
    check(vmc_upload_file(c, path[r], NULL, NULL, &e2, &res2), "store-hit upload");
    hit[r] = (now_s() - t0) * 1e3;
    /* The same bytes from memory: nothing to remember them by, so the
     * client hashes them again. */
    uint8_t *xb;
    size_t xl;
    check(vm_read_file(path[r], UINT64_MAX, &xb, &xl), "reading back");
    uint8_t digest[32];
    t0 = now_s();
    vm_sha256(xb, xl, digest);
    hash_ms[r] = (now_s() - t0) * 1e3;
    t0 = now_s();
    check(vmc_upload_memory(c, xb, xl, NULL, NULL, &e3, &res3), "store-hit upload (memory)");
    hit_mem[r] = (now_s() - t0) * 1e3;
    free(xb);
    if (res1.store_hit || !res2.store_hit || !res3.store_hit) {
      fprintf(stderr, "bench_rpc: expected a miss then hits (got %d, %d, %d)\n", res1.store_hit,
              res2.store_hit, res3.store_hit);
      exit(1);
    }
    check(vmc_free_exec(c, e1), "free exec");
    check(vmc_free_exec(c, e2), "free exec");
    check(vmc_free_exec(c, e3), "free exec");
    unlink(path[r]);
  }
  rmdir(dir);
  double cold_m = median_copy(cold, rounds), hit_m = median_copy(hit, rounds);
  double hit_mem_m = median_copy(hit_mem, rounds);
  out("\"exec_bytes\":%zu,\"exec_rounds\":%d,\"cold_upload_ms\":%.2f,"
      "\"store_hit_upload_ms\":%.3f,\"store_hit_ratio\":%.5f,"
      "\"store_hit_memory_upload_ms\":%.2f,\"store_hit_memory_ratio\":%.4f,"
      "\"client_sha256_ms\":%.2f,",
      exec_len, rounds, cold_m, hit_m, hit_m / cold_m, hit_mem_m, hit_mem_m / cold_m,
      median_copy(hash_ms, rounds));
}

int main(int argc, char **argv) {
  int rounds = 7;
  if (argc > 1) {
    char *end;
    long v = strtol(argv[1], &end, 10);
    if (*end || v < 3 || v > MAX_ROUNDS) {
      fprintf(stderr, "usage: bench_rpc [rounds(3..%d) [rtt,bulk,exec]]\n", MAX_ROUNDS);
      return 2;
    }
    rounds = (int)v;
  }
  const char *parts = argc > 2 ? argv[2] : "rtt,bulk,exec";
  set_build_dir();
  double load_start = load_avg();

  /* A fresh executable store: the cold upload must miss. */
  char store[PATH_MAX];
  snprintf(store, sizeof(store), "%s/bench-rpc-store-XXXXXX", getenv("VMRPC_BUILD_DIR"));
  if (!mkdtemp(store)) die("mkdtemp");
  agent_proc_t agent;
  /* $VMRPC_BENCH_AGENT_ARGS: extra agent flags (space separated) for
   * experiments, e.g. "--chunk-size 4M"; the figures then describe them. */
  const char *agent_args[24] = {"--device", "cpu", "--cache-dir", store};
  int nargs = 4;
  char extra[512] = "";
  if (getenv("VMRPC_BENCH_AGENT_ARGS")) {
    snprintf(extra, sizeof(extra), "%s", getenv("VMRPC_BENCH_AGENT_ARGS"));
    for (char *sv = NULL, *tok = strtok_r(extra, " ", &sv); tok && nargs < 22;
         tok = strtok_r(NULL, " ", &sv))
      agent_args[nargs++] = tok;
  }
  agent_args[nargs] = NULL;
  if (agent_proc_start(&agent, agent_args) != 0) {
    fprintf(stderr, "bench_rpc: could not start vmagent\n");
    return 1;
  }
  bench_t b;
  memset(&b, 0, sizeof(b));
  b.rounds = rounds;
  b.agent_pid = agent.pid;
  /* $VMRPC_BENCH_CLIENT_CA: the CA file of a tls+tcp:// agent (its
   * --listen, --tls-cert and --tls-key in $VMRPC_BENCH_AGENT_ARGS). */
  vmc_conn_opts_t copts;
  memset(&copts, 0, sizeof(copts));
  copts.tls_ca_file = getenv("VMRPC_BENCH_CLIENT_CA");
  check(vmc_connect(agent.url, &copts, &b.c), "connecting");
  vmc_info_t info;
  vmc_info(b.c, &info);
  b.chunk = info.limits.chunk_bytes;

  /* The raw TCP peer, a child process holding nothing but its end (else
   * the agent would not see this process's connection close). */
  uint64_t max_bytes = SIZES_MIB[NSIZES - 1] * MIB;
  b.src = alloc_touched(max_bytes, 0x5a);
  b.dst = alloc_touched(max_bytes, 0);
  int peer_fd;
  tcp_pair(&b.raw_fd, &peer_fd);
  fflush(NULL);
  b.raw_pid = fork();
  if (b.raw_pid < 0) die("fork");
  if (b.raw_pid == 0) {
    if (dup2(peer_fd, 3) < 0) _exit(1);
    close_range(4, ~0u, 0);
    raw_peer_t rp = {3, b.src, alloc_touched(max_bytes, 0), b.chunk};
    raw_peer_main(&rp);
    _exit(0);
  }
  close(peer_fd);

  /* Bare nng echo thread. */
  nng_peer_t np;
  pthread_t nng_thr;
  {
    int rv = nng_rep0_open(&np.sock);
    nng_listener l;
    if (!rv) rv = nng_listener_create(&l, np.sock, "tcp://127.0.0.1:0");
    if (!rv) rv = nng_listener_start(l, 0);
    int port = 0;
    if (!rv) rv = nng_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &port);
    char url[64];
    snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", port);
    if (!rv) rv = nng_req0_open(&b.nreq);
    if (!rv) rv = nng_dial(b.nreq, url, NULL, 0);
    if (rv) {
      fprintf(stderr, "bench_rpc: bare nng setup: %s\n", nng_strerror(rv));
      return 1;
    }
    if (pthread_create(&nng_thr, NULL, nng_peer_main, &np) != 0) die("pthread_create");
  }
  /* Transport-layer echo thread. */
  vmt_listener_t *tl;
  vmt_conn_t *tpeer;
  pthread_t tc_thr;
  transport_pair(&tl, &b.tc, &tpeer);
  if (pthread_create(&tc_thr, NULL, transport_peer_main, tpeer) != 0) die("pthread_create");

  vm_executable_t *ident = identity_exec();
  uint8_t *ibytes;
  size_t ilen;
  check(vm_executable_write(ident, &ibytes, &ilen), "serialising");
  vm_executable_free(ident);
  check(vmc_upload_memory(b.c, ibytes, ilen, NULL, NULL, &b.ident, NULL), "upload identity");
  free(ibytes);

  out("{\"bench\":\"rpc\",\"rounds\":%d,\"device\":\"cpu\",\"transport\":\"tcp loopback\","
      "\"agent_args\":\"%s\",\"chunk_bytes\":%llu,\"max_inflight_chunks\":%u,"
      "\"loadavg_start\":%.2f,",
      rounds, getenv("VMRPC_BENCH_AGENT_ARGS") ? getenv("VMRPC_BENCH_AGENT_ARGS") : "",
      (unsigned long long)info.limits.chunk_bytes, info.limits.max_inflight_chunks, load_start);
  if (strstr(parts, "rtt")) part_rtt(&b);
  if (strstr(parts, "bulk")) {
    part_bulk(&b, 0, "");
    /* Again with this process's malloc tuned as docs/performance.md
     * recommends for programs that move big tensors: chunk-sized message
     * buffers then stay in the heap instead of being unmapped and faulted
     * in again for every chunk (the agent does this itself). */
#ifdef __GLIBC__
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 128 << 20);
    part_bulk(&b, 1, "_client_mallopt");
#endif
  }
  if (strstr(parts, "exec")) part_exec(&b);

  check(vmc_free_exec(b.c, b.ident), "free exec");
  vmc_close(b.c);
  int arc = agent_proc_stop(&agent);
  shutdown(b.raw_fd, SHUT_RDWR);
  close(b.raw_fd);
  while (waitpid(b.raw_pid, NULL, 0) < 0 && errno == EINTR) {
  }
  nng_close(b.nreq);
  nng_close(np.sock);
  pthread_join(nng_thr, NULL);
  vmt_conn_close(b.tc); /* the peer reads the end of its stream and leaves */
  pthread_join(tc_thr, NULL);
  vmt_conn_free(b.tc);
  vmt_conn_free(tpeer);
  vmt_listener_free(tl);
  nftw(store, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  free(b.src);
  free(b.dst);
  if (arc != 0) fprintf(stderr, "bench_rpc: vmagent exited with status %d\n", arc);
  out("\"loadavg_end\":%.2f,\"agent_exit\":%d}", load_avg(), arc);
  printf("%s\n", g_json);
  return arc == 0 ? 0 : 1;
}
