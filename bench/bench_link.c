/* What a user on a slow link waits for: the demo's flows (upload, run,
 * bench of the example MLP) by the real vmclient binary, through a
 * loopback proxy that adds a round-trip delay and caps the bandwidth, next
 * to the ideal for the link:
 *
 *   wire_ideal = round trips x rtt + bytes / bandwidth
 *   ideal = local + wire_ideal
 *
 * where round trips are the requests the agent counted for the flow plus
 * one (nng's connection handshake) and bytes are what crossed the proxy,
 * both directions. The proxy models a link per direction: a chunk read at
 * time t leaves once the link is free (bytes / bandwidth after the chunk
 * before it) and arrives rtt / 2 after that.
 *
 * Figures per flow (median over rounds): <flow>_ms (wall time of the
 * vmclient process through the proxy), <flow>_local_ms (the same flow
 * without the proxy: process start, hashing, the agent's work),
 * <flow>_wire_ideal_ms, <flow>_ideal_ms, <flow>_ratio (wall / ideal),
 * <flow>_requests, <flow>_bytes. Flows:
 * upload_cold (a fresh agent store), upload_hit, run_cold (store miss),
 * run (cached), bench (cached, --number 1 --repeat 1), all on opencl:0.
 * Each round uses models of fresh seeds (so "cold" is a store miss while
 * the agent's compiled kernels stay warm); a first round warms the agent
 * and is not counted.
 *
 * Usage: bench_link [rounds [rtt_ms [mbit]]]: default 3 rounds, 5 ms, 100
 * Mbit/s. Binaries come from $VMRPC_BUILD_DIR (default: the directory
 * above this program): agent/vmagent, client/vmclient and
 * examples/vmrpc-gen-model, so a build of another revision can be measured
 * with this program. Prints one JSON object.
 *
 *   bench_link proxy PORT RTT_MS MBIT   only the proxy: listens on
 *   127.0.0.1 (free port), forwards to 127.0.0.1:PORT, prints its port.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent_proc.h"
#include "vmrpc/vmclient.h"

#include "bench_stats.h"

extern char **environ;

#define MAX_ROUNDS 15
#define PIECE (64 * 1024)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_until(double t) {
  double d = t - now_s();
  if (d <= 0) return;
  struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
  nanosleep(&ts, NULL);
}

/* ------------------------------------------------------------------ proxy */

typedef struct piece {
  struct piece *next;
  double deliver_at;
  size_t len;
  uint8_t data[];
} piece_t;

/* One direction of a link: a reader thread queues what it reads, stamped
 * with its arrival time; a writer thread delivers it then. */
typedef struct pipe_dir {
  int from, to;
  double rtt_s, bytes_per_s;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  piece_t *head, *tail;
  int eof;
  atomic_uint_fast64_t *bytes;
} pipe_dir_t;

typedef struct proxy {
  int listen_fd;
  uint16_t port, target_port;
  double rtt_s, bytes_per_s;
  atomic_uint_fast64_t bytes;
  pthread_t accept_thread;
} proxy_t;

static void *dir_reader(void *arg) {
  pipe_dir_t *d = arg;
  double link_free = 0;
  for (;;) {
    piece_t *p = malloc(sizeof(*p) + PIECE);
    if (!p) break;
    ssize_t n = read(d->from, p->data, PIECE);
    if (n <= 0) {
      free(p);
      break;
    }
    double t = now_s();
    double start = t > link_free ? t : link_free;
    link_free = start + (d->bytes_per_s > 0 ? (double)n / d->bytes_per_s : 0);
    p->deliver_at = link_free + d->rtt_s / 2;
    p->len = (size_t)n;
    p->next = NULL;
    atomic_fetch_add(d->bytes, (uint64_t)n);
    pthread_mutex_lock(&d->mu);
    if (d->tail)
      d->tail->next = p;
    else
      d->head = p;
    d->tail = p;
    pthread_cond_signal(&d->cv);
    pthread_mutex_unlock(&d->mu);
  }
  pthread_mutex_lock(&d->mu);
  d->eof = 1;
  pthread_cond_signal(&d->cv);
  pthread_mutex_unlock(&d->mu);
  return NULL;
}

static void *dir_writer(void *arg) {
  pipe_dir_t *d = arg;
  for (;;) {
    pthread_mutex_lock(&d->mu);
    while (!d->head && !d->eof) pthread_cond_wait(&d->cv, &d->mu);
    piece_t *p = d->head;
    if (p) {
      d->head = p->next;
      if (!d->head) d->tail = NULL;
    }
    pthread_mutex_unlock(&d->mu);
    if (!p) break; /* eof and drained */
    sleep_until(p->deliver_at);
    size_t off = 0;
    while (off < p->len) {
      ssize_t w = write(d->to, p->data + off, p->len - off);
      if (w <= 0) break;
      off += (size_t)w;
    }
    free(p);
  }
  shutdown(d->to, SHUT_WR);
  return NULL;
}

typedef struct conn_job {
  proxy_t *px;
  int client_fd;
} conn_job_t;

static int dial_local(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a;
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

static void *conn_main(void *arg) {
  conn_job_t *job = arg;
  proxy_t *px = job->px;
  int c = job->client_fd;
  free(job);
  int s = dial_local(px->target_port);
  if (s < 0) {
    close(c);
    return NULL;
  }
  pipe_dir_t up, down;
  pipe_dir_t *dirs[2] = {&up, &down};
  memset(&up, 0, sizeof(up));
  memset(&down, 0, sizeof(down));
  up.from = c;
  up.to = s;
  down.from = s;
  down.to = c;
  pthread_t th[4];
  for (int i = 0; i < 2; i++) {
    dirs[i]->rtt_s = px->rtt_s;
    dirs[i]->bytes_per_s = px->bytes_per_s;
    dirs[i]->bytes = &px->bytes;
    pthread_mutex_init(&dirs[i]->mu, NULL);
    pthread_cond_init(&dirs[i]->cv, NULL);
    pthread_create(&th[2 * i], NULL, dir_reader, dirs[i]);
    pthread_create(&th[2 * i + 1], NULL, dir_writer, dirs[i]);
  }
  for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 2; i++) {
    pthread_mutex_destroy(&dirs[i]->mu);
    pthread_cond_destroy(&dirs[i]->cv);
  }
  close(c);
  close(s);
  return NULL;
}

static void *accept_main(void *arg) {
  proxy_t *px = arg;
  for (;;) {
    int c = accept(px->listen_fd, NULL, NULL);
    if (c < 0) {
      if (errno == EINTR) continue;
      break; /* the listening socket was shut down */
    }
    int one = 1;
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    conn_job_t *job = malloc(sizeof(*job));
    pthread_t t;
    if (!job) {
      close(c);
      continue;
    }
    job->px = px;
    job->client_fd = c;
    if (pthread_create(&t, NULL, conn_main, job) != 0) {
      close(c);
      free(job);
      continue;
    }
    pthread_detach(t);
  }
  return NULL;
}

static int proxy_start(proxy_t *px, uint16_t target_port, double rtt_ms, double mbit) {
  memset(px, 0, sizeof(*px));
  px->target_port = target_port;
  px->rtt_s = rtt_ms * 1e-3;
  px->bytes_per_s = mbit * 1e6 / 8;
  atomic_init(&px->bytes, 0);
  px->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
  if (px->listen_fd < 0) return -1;
  struct sockaddr_in a;
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK); /* loopback only */
  socklen_t al = sizeof(a);
  if (bind(px->listen_fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
      listen(px->listen_fd, 64) != 0 || getsockname(px->listen_fd, (struct sockaddr *)&a, &al) != 0)
    return -1;
  px->port = ntohs(a.sin_port);
  return pthread_create(&px->accept_thread, NULL, accept_main, px) == 0 ? 0 : -1;
}

static void proxy_stop(proxy_t *px) {
  shutdown(px->listen_fd, SHUT_RDWR);
  close(px->listen_fd);
  pthread_join(px->accept_thread, NULL);
}

/* ------------------------------------------------------------------ flows */

static char g_bin[PATH_MAX];
static char g_work[PATH_MAX];

/* Runs vmclient with args (NULL-terminated) in g_work, output discarded.
 * Returns its wall time in seconds, or -1 if it failed. */
static double run_vmclient(const char *const *args) {
  char prog[PATH_MAX + 32];
  snprintf(prog, sizeof(prog), "%s/client/vmclient", g_bin);
  const char *argv[40];
  int n = 0;
  argv[n++] = prog;
  for (int i = 0; args[i] && n < 39; i++) argv[n++] = args[i];
  argv[n] = NULL;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  double t0 = now_s();
  pid_t pid;
  if (chdir(g_work) != 0) return -1;
  int rc = posix_spawn(&pid, prog, &fa, NULL, (char *const *)argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  double t = now_s() - t0;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "bench_link: vmclient %s failed (status %d)\n", args[2], status);
    return -1;
  }
  return t;
}

/* The agent's request counter, read on a direct connection (its own
 * Hello and Stats are counted before it is read, its Goodbye after). */
static uint64_t agent_requests(const char *url) {
  vmc_conn_t *c;
  vm_status_t st = vmc_connect(url, NULL, &c);
  if (st) {
    fprintf(stderr, "bench_link: %s\n", vm_status_message(st));
    exit(1);
  }
  vmc_stats_t s;
  st = vmc_stats(c, &s);
  if (st) {
    fprintf(stderr, "bench_link: %s\n", vm_status_message(st));
    exit(1);
  }
  uint64_t n = s.requests;
  vmc_stats_free(&s);
  vmc_close(c);
  return n;
}

enum { F_UPLOAD_COLD, F_UPLOAD_HIT, F_RUN_COLD, F_RUN, F_BENCH, NFLOWS };
static const char *const k_flow[NFLOWS] = {"upload_cold", "upload_hit", "run_cold", "run", "bench"};

typedef struct sample {
  double ms, wire_ms, local_ms;
  uint64_t requests, bytes;
} sample_t;

/* The arguments of flow f against url (model m: mlp<m>.vmx). */
static void flow_args(int f, const char *url, const char *model, const char **a) {
  int n = 0;
  a[n++] = "--host";
  a[n++] = url;
  switch (f) {
    case F_UPLOAD_COLD:
    case F_UPLOAD_HIT:
      a[n++] = "upload";
      a[n++] = model;
      break;
    case F_RUN_COLD:
    case F_RUN:
      a[n++] = "run";
      a[n++] = model;
      a[n++] = "--input";
      a[n++] = "x=mlp_x.npy";
      a[n++] = "--device";
      a[n++] = "opencl:0";
      break;
    default:
      a[n++] = "bench";
      a[n++] = model;
      a[n++] = "--input";
      a[n++] = "x=mlp_x.npy";
      a[n++] = "--device";
      a[n++] = "opencl:0";
      a[n++] = "--number";
      a[n++] = "1";
      a[n++] = "--repeat";
      a[n++] = "1";
      break;
  }
  a[n++] = "-q";
  a[n] = NULL;
}

/* Writes two models never seen by the agent (fresh seeds: the agent's
 * store outlives this process): mlpA.vmx and mlpB.vmx, and the input
 * mlp_x.npy. */
static int fresh_models(void) {
  static long seed;
  if (!seed) seed = (long)time(NULL) % 1000000 * 100;
  char cmd[3 * PATH_MAX];
  for (int m = 0; m < 2; m++) {
    snprintf(cmd, sizeof(cmd),
             "cd '%s' && '%s/examples/vmrpc-gen-model' mlp --seed %ld --out mlp%c.vmx --input "
             "mlp_x.npy --npy > /dev/null",
             g_work, g_bin, seed++, 'A' + m);
    if (system(cmd) != 0) {
      fprintf(stderr, "bench_link: generating the model failed\n");
      return -1;
    }
  }
  return 0;
}

/* One round: each flow through the proxy, then the same flows on fresh
 * models without it. */
static int round_once(const char *url, double rtt_ms, double mbit, sample_t out[NFLOWS]) {
  const char *port = strrchr(url, ':');
  proxy_t px;
  if (!port || proxy_start(&px, (uint16_t)atoi(port + 1), rtt_ms, mbit) != 0) return -1;
  char purl[64];
  snprintf(purl, sizeof(purl), "tcp://127.0.0.1:%u", px.port);
  int rc = 0;
  for (int shaped = 1; shaped >= 0 && !rc; shaped--) {
    rc = fresh_models();
    for (int f = 0; f < NFLOWS && !rc; f++) {
      /* run_cold runs a model the store has never seen; the rest the one
       * upload_cold put there. */
      const char *model = f == F_RUN_COLD ? "mlpB.vmx" : "mlpA.vmx";
      const char *a[24];
      flow_args(f, shaped ? purl : url, model, a);
      uint64_t r0 = agent_requests(url);
      uint64_t b0 = atomic_load(&px.bytes);
      double t = run_vmclient(a);
      uint64_t r1 = agent_requests(url);
      if (t < 0) {
        rc = -1;
      } else if (shaped) {
        out[f].ms = t * 1e3;
        out[f].requests = r1 - r0 - 3;
        out[f].bytes = atomic_load(&px.bytes) - b0;
        out[f].wire_ms =
            (double)(out[f].requests + 1) * rtt_ms + (double)out[f].bytes / (mbit * 1e6 / 8) * 1e3;
      } else {
        out[f].local_ms = t * 1e3;
      }
    }
  }
  proxy_stop(&px);
  return rc;
}

static int proxy_only(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: bench_link proxy PORT RTT_MS MBIT\n");
    return 2;
  }
  proxy_t px;
  if (proxy_start(&px, (uint16_t)atoi(argv[2]), atof(argv[3]), atof(argv[4])) != 0) {
    perror("bench_link: proxy");
    return 1;
  }
  printf("proxy listening on tcp://127.0.0.1:%u\n", px.port);
  fflush(stdout);
  pthread_join(px.accept_thread, NULL);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "proxy") == 0) return proxy_only(argc, argv);
  int rounds = argc > 1 ? atoi(argv[1]) : 3;
  double rtt_ms = argc > 2 ? atof(argv[2]) : 5.0;
  double mbit = argc > 3 ? atof(argv[3]) : 100.0;
  if (rounds < 1 || rounds > MAX_ROUNDS || rtt_ms < 0 || mbit <= 0) {
    fprintf(stderr, "usage: bench_link [rounds 1..%d [rtt_ms [mbit]]]\n", MAX_ROUNDS);
    return 2;
  }
  const char *bd = getenv("VMRPC_BUILD_DIR");
  if (bd && *bd) {
    snprintf(g_bin, sizeof(g_bin), "%s", bd);
  } else {
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) return 1;
    self[n] = 0;
    *strrchr(self, '/') = 0; /* bench/ */
    *strrchr(self, '/') = 0; /* the build */
    snprintf(g_bin, sizeof(g_bin), "%s", self);
    setenv("VMRPC_BUILD_DIR", g_bin, 1);
  }
  snprintf(g_work, sizeof(g_work), "/tmp/bench_link.XXXXXX");
  if (!mkdtemp(g_work)) return 1;
  agent_proc_t ag;
  if (agent_proc_start(&ag, NULL) != 0) return 1;
  static sample_t s[MAX_ROUNDS][NFLOWS];
  /* Round 0 warms the agent (kernel builds) and is not counted. */
  int rc = round_once(ag.url, rtt_ms, mbit, s[0]);
  for (int r = 1; r <= rounds && !rc; r++) rc = round_once(ag.url, rtt_ms, mbit, s[r - 1]);
  if (agent_proc_stop(&ag) != 0) rc = 1;
  char cmd[PATH_MAX + 32];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_work);
  if (system(cmd) != 0) rc = 1;
  if (rc) {
    fprintf(stderr, "bench_link: a round failed\n");
    return 1;
  }
  printf("{\"rounds\": %d, \"rtt_ms\": %g, \"mbit\": %g", rounds, rtt_ms, mbit);
  for (int f = 0; f < NFLOWS; f++) {
    double ms[MAX_ROUNDS], wire[MAX_ROUNDS], ideal[MAX_ROUNDS], ratio[MAX_ROUNDS],
        local[MAX_ROUNDS];
    for (int r = 0; r < rounds; r++) {
      ms[r] = s[r][f].ms;
      wire[r] = s[r][f].wire_ms;
      local[r] = s[r][f].local_ms;
      ideal[r] = local[r] + wire[r];
      ratio[r] = ms[r] / ideal[r];
    }
    printf(
        ", \"%s_ms\": %.2f, \"%s_local_ms\": %.2f, \"%s_wire_ideal_ms\": %.2f, \"%s_ideal_ms\": "
        "%.2f, \"%s_ratio\": %.3f, \"%s_requests\": %llu, \"%s_bytes\": %llu",
        k_flow[f], median(ms, rounds), k_flow[f], median(local, rounds), k_flow[f],
        median(wire, rounds), k_flow[f], median(ideal, rounds), k_flow[f], median(ratio, rounds),
        k_flow[f], (unsigned long long)s[rounds - 1][f].requests, k_flow[f],
        (unsigned long long)s[rounds - 1][f].bytes);
  }
  printf("}\n");
  return 0;
}
