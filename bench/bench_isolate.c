/* What session isolation costs (vmagent --isolate session, docs/security.md):
 * the same requests against two vmagent children started side by side, one
 * with --isolate none (the baseline, sessions in the agent's process) and
 * one with --isolate session (each session's VMs in a worker process, the
 * agent forwarding its requests over a socketpair). Rounds interleave the
 * two so drift of the shared machine hits both alike; figures are medians
 * over rounds of each round's mean, ratios are isolated / baseline of the
 * same round (median of the per-round ratios): the cost, > 1 is slower.
 * Each figure F appears as F_none, F_session and F_ratio.
 *
 *   ping_us            vmc_ping: answered by the agent itself in both (a
 *                      control: its ratio should be 1; how far it is from 1
 *                      tells the noise of the run)
 *   get_output4_us     vmc_get_output_into of a 4-byte tensor: one small
 *                      forwarded request
 *   invoke_cpu_us      vmc_invoke of main(x) -> x on the cpu device: the
 *                      smallest invocation
 *   get_output4_cpu_us, invoke_cpu_cpu_us   CPU time per request of this
 *                      process, the agent and its workers (schedstat): the
 *                      cost whatever the load of the machine
 *   invoke_mlp_us      vmc_invoke of the example MLP on opencl:0 (when the
 *                      agent has an OpenCL device)
 *   upload_gbps_64, download_gbps_64   vmc_set_input / vmc_get_output_into
 *                      of a 64 MiB tensor on the cpu device: the extra copy
 *                      of every chunk through the worker's link
 *   new_session_ms     vmc_connect + vmc_stats + vmc_close: a new session
 *                      and its first request (isolated: binding a spare
 *                      worker started ahead); new_session_cold_ms the same
 *                      against a third agent with --spare-workers 0 (a
 *                      worker process and its OpenCL start-up per session)
 *   agent_rss_mib      the agents' RSS with the bench's one session (Stats:
 *                      isolated, the agent plus its workers)
 *
 * Usage: bench_isolate [rounds] (3..51, default 7). Needs VMRPC_BUILD_DIR
 * (defaults to the directory above this program). Prints one JSON object.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <ftw.h>

#include "agent_proc.h"
#include "vm/executable.h"
#include "vm/vm.h"
#include "vmrpc/vmclient.h"
#include "vmexamples/models.h"

#include "bench_stats.h"

#define MAX_ROUNDS 51
#define SMALL_ITERS 500
#define MLP_ITERS 100
#define BULK_BYTES (64ull << 20)
#define SESSIONS 4

static void check(vm_status_t st, const char *what) {
  if (!st) return;
  fprintf(stderr, "bench_isolate: %s: %s: %s\n", what, vm_code_name(vm_status_code(st)),
          vm_status_message(st));
  exit(1);
}

static double now_s(void) {
  return (double)vm_now_ns() / 1e9;
}

static void nap_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
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

/* main(x) returns x. */
static void identity_bytes(uint8_t **out, size_t *len) {
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
  check(vm_executable_write(e, out, len), "serialising");
  vm_executable_free(e);
}

typedef struct side {
  const char *name;
  agent_proc_t agent;
  char store[PATH_MAX];
  vmc_conn_t *c;
  vmc_vm_t ident, mlp;
  int has_cl;
} side_t;

static uint8_t *g_ident, *g_mlp;
static size_t g_ident_len, g_mlp_len;
static float *g_mlp_in;
static vmex_io_shape_t g_io;

static void side_start(side_t *s, const char *isolate, const char *spares) {
  snprintf(s->store, sizeof(s->store), "%s/bench-isolate-XXXXXX", getenv("VMRPC_BUILD_DIR"));
  if (!mkdtemp(s->store)) {
    perror("mkdtemp");
    exit(1);
  }
  const char *args[] = {"--device",  "opencl:0", "--device",        "cpu",  "--cache-dir", s->store,
                        "--isolate", isolate,    "--spare-workers", spares, NULL};
  if (agent_proc_start(&s->agent, args) != 0) {
    const char *cpu_only[] = {"--device",        "cpu",       "--cache-dir",
                              s->store,          "--isolate", isolate,
                              "--spare-workers", spares,      NULL};
    if (agent_proc_start(&s->agent, cpu_only) != 0) {
      fprintf(stderr, "bench_isolate: could not start vmagent\n");
      exit(1);
    }
  }
}

static void side_setup(side_t *s) {
  check(vmc_connect(s->agent.url, NULL, &s->c), "connecting");
  vmc_exec_t ex;
  check(vmc_upload_memory(s->c, g_ident, g_ident_len, NULL, NULL, &ex, NULL), "upload");
  vmc_device_spec_t cpu = {"cpu", NULL};
  check(vmc_create_vm(s->c, ex, &cpu, 1, NULL, &s->ident), "create vm");
  int32_t v = 42;
  int64_t one = 1;
  vmc_tensor_t t;
  check(vmc_tensor_wrap(VM_I32, 1, &one, &v, &t), "wrap");
  check(vmc_set_input(s->c, s->ident, "main", 0, &t), "set input");
  check(vmc_invoke(s->c, s->ident, "main", 0, NULL), "invoke");
  vmc_device_spec_t cl = {"opencl:0", NULL};
  check(vmc_upload_memory(s->c, g_mlp, g_mlp_len, NULL, NULL, &ex, NULL), "upload mlp");
  vm_status_t st = vmc_create_vm(s->c, ex, &cl, 1, NULL, &s->mlp);
  s->has_cl = st == VM_STATUS_OK;
  vm_status_free(st);
  if (s->has_cl) {
    check(vmc_tensor_wrap(VM_F32, g_io.in_ndim, g_io.in_shape, g_mlp_in, &t), "wrap");
    check(vmc_set_input(s->c, s->mlp, "main", 0, &t), "set mlp input");
    check(vmc_invoke(s->c, s->mlp, "main", 0, NULL), "invoke mlp");
  }
}

static void side_stop(side_t *s) {
  if (s->c) vmc_close(s->c);
  agent_proc_stop(&s->agent);
  nftw(s->store, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

enum {
  F_PING,
  F_GET4,
  F_GET4_CPU,
  F_INV_CPU,
  F_INV_CPU_CPU,
  F_INV_MLP,
  F_UP,
  F_DOWN,
  F_NEW,
  F_COUNT
};
static const char *const FIG[F_COUNT] = {
    "ping_us",       "get_output4_us", "get_output4_cpu_us", "invoke_cpu_us", "invoke_cpu_cpu_us",
    "invoke_mlp_us", "upload_gbps_64", "download_gbps_64",   "new_session_ms"};

/* CPU ns of this process, the agent and its workers: what a request costs
 * whatever the load. */
static double cpu_now_ns(const side_t *s) {
  return (double)agent_proc_cpu_ns(getpid(), 0) + (double)agent_proc_cpu_ns(s->agent.pid, 1);
}

/* One round of every figure on side s into fig[F_*]. */
static void side_round(side_t *s, uint8_t *bulk, double *fig) {
  double t0 = now_s();
  for (int i = 0; i < SMALL_ITERS; i++) check(vmc_ping(s->c, NULL), "ping");
  fig[F_PING] = (now_s() - t0) * 1e6 / SMALL_ITERS;
  int32_t v = 0;
  vmc_tensor_t meta;
  double c0 = cpu_now_ns(s);
  t0 = now_s();
  for (int i = 0; i < SMALL_ITERS; i++)
    check(vmc_get_output_into(s->c, s->ident, "main", NULL, 0, &v, sizeof(v), &meta), "get");
  fig[F_GET4] = (now_s() - t0) * 1e6 / SMALL_ITERS;
  fig[F_GET4_CPU] = (cpu_now_ns(s) - c0) / 1e3 / SMALL_ITERS;
  c0 = cpu_now_ns(s);
  t0 = now_s();
  for (int i = 0; i < SMALL_ITERS; i++) check(vmc_invoke(s->c, s->ident, "main", 0, NULL), "inv");
  fig[F_INV_CPU] = (now_s() - t0) * 1e6 / SMALL_ITERS;
  fig[F_INV_CPU_CPU] = (cpu_now_ns(s) - c0) / 1e3 / SMALL_ITERS;
  fig[F_INV_MLP] = 0;
  if (s->has_cl) {
    t0 = now_s();
    for (int i = 0; i < MLP_ITERS; i++) check(vmc_invoke(s->c, s->mlp, "main", 0, NULL), "mlp");
    fig[F_INV_MLP] = (now_s() - t0) * 1e6 / MLP_ITERS;
  }
  /* 64 MiB through the identity VM, then back to its original input */
  int64_t n = (int64_t)BULK_BYTES;
  vmc_tensor_t t;
  check(vmc_tensor_wrap(VM_U8, 1, &n, bulk, &t), "wrap");
  t0 = now_s();
  check(vmc_set_input(s->c, s->ident, "main", 0, &t), "upload");
  fig[F_UP] = (double)BULK_BYTES / (now_s() - t0) / 1e9;
  check(vmc_invoke(s->c, s->ident, "main", 0, NULL), "invoke");
  t0 = now_s();
  check(vmc_get_output_into(s->c, s->ident, "main", NULL, 0, bulk, BULK_BYTES, &meta), "download");
  fig[F_DOWN] = (double)BULK_BYTES / (now_s() - t0) / 1e9;
  int64_t one = 1;
  v = 42;
  check(vmc_tensor_wrap(VM_I32, 1, &one, &v, &t), "wrap");
  check(vmc_set_input(s->c, s->ident, "main", 0, &t), "set input");
  check(vmc_invoke(s->c, s->ident, "main", 0, NULL), "invoke");
}

/* Mean ms of SESSIONS new sessions with their first request; the pause
 * before each lets a spare worker start (not timed). */
static double new_session_ms(const side_t *s) {
  double sum = 0;
  for (int i = 0; i < SESSIONS; i++) {
    nap_ms(400);
    double t0 = now_s();
    vmc_conn_t *c = NULL;
    check(vmc_connect(s->agent.url, NULL, &c), "connect");
    vmc_stats_t st;
    check(vmc_stats(c, &st), "stats");
    vmc_stats_free(&st);
    vmc_close(c);
    sum += (now_s() - t0) * 1e3;
  }
  return sum / SESSIONS;
}

static double rss_mib(side_t *s) {
  vmc_stats_t st;
  check(vmc_stats(s->c, &st), "stats");
  double mib = (double)st.agent_rss_bytes / (1 << 20);
  vmc_stats_free(&st);
  return mib;
}

int main(int argc, char **argv) {
  int rounds = 7;
  if (argc > 1) {
    char *end;
    long v = strtol(argv[1], &end, 10);
    if (*end || v < 3 || v > MAX_ROUNDS) {
      fprintf(stderr, "usage: bench_isolate [rounds(3..%d)]\n", MAX_ROUNDS);
      return 2;
    }
    rounds = (int)v;
  }
  set_build_dir();
  identity_bytes(&g_ident, &g_ident_len);
  vm_executable_t *mlp;
  check(vmex_build_mlp(11, NULL, &mlp, NULL), "building the MLP");
  check(vm_executable_write(mlp, &g_mlp, &g_mlp_len), "serialising the MLP");
  vm_executable_free(mlp);
  vmex_mlp_io_shape(NULL, &g_io);
  g_mlp_in = calloc(g_io.in_numel, sizeof(float));
  vmex_make_input(11, g_mlp_in, g_io.in_numel);
  uint8_t *bulk = malloc(BULK_BYTES);
  if (!bulk || !g_mlp_in) return 1;
  memset(bulk, 0x5a, BULK_BYTES);

  side_t sides[3] = {{.name = "none"}, {.name = "session"}, {.name = "session_cold"}};
  side_start(&sides[0], "none", "1");
  side_start(&sides[1], "session", "1");
  side_start(&sides[2], "session", "0");
  side_setup(&sides[0]);
  side_setup(&sides[1]);

  double fig[2][F_COUNT][MAX_ROUNDS], ratio[F_COUNT][MAX_ROUNDS], cold[MAX_ROUNDS];
  double warm[F_COUNT]; /* one untimed round each: caches, pages, spares */
  side_round(&sides[0], bulk, warm);
  side_round(&sides[1], bulk, warm);
  for (int r = 0; r < rounds; r++) {
    for (int k = 0; k < 2; k++) {
      int i = (r + k) % 2;
      double one[F_COUNT];
      side_round(&sides[i], bulk, one);
      one[F_NEW] = new_session_ms(&sides[i]);
      for (int f = 0; f < F_COUNT; f++) fig[i][f][r] = one[f];
    }
    for (int f = 0; f < F_COUNT; f++) {
      int bigger_is_better = f == F_UP || f == F_DOWN;
      double a = fig[0][f][r], b = fig[1][f][r];
      ratio[f][r] = a > 0 && b > 0 ? (bigger_is_better ? a / b : b / a) : 0;
    }
    cold[r] = new_session_ms(&sides[2]);
  }
  printf("{\"bench\":\"isolate\",\"rounds\":%d,\"opencl\":%s,", rounds,
         sides[0].has_cl ? "true" : "false");
  for (int f = 0; f < F_COUNT; f++) {
    if (f == F_INV_MLP && !sides[0].has_cl) continue;
    printf("\"%s_none\":%.3f,\"%s_session\":%.3f,\"%s_ratio\":%.3f,", FIG[f],
           median_copy(fig[0][f], rounds), FIG[f], median_copy(fig[1][f], rounds), FIG[f],
           median_copy(ratio[f], rounds));
  }
  printf("\"new_session_cold_ms\":%.2f,", median_copy(cold, rounds));
  printf("\"agent_rss_mib_none\":%.1f,\"agent_rss_mib_session\":%.1f}\n", rss_mib(&sides[0]),
         rss_mib(&sides[1]));
  for (int i = 0; i < 3; i++) side_stop(&sides[i]);
  free(bulk);
  free(g_mlp_in);
  free(g_ident);
  free(g_mlp);
  return 0;
}
