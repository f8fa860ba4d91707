/* The statistics of vmclient compare under noise this program makes
 * itself: does vmc_compare() keep its promises on a loaded machine?
 *
 * A vmagent child serves opencl:0 (PoCL on this machine: the device is the
 * host's CPU, so CPU load is device noise). A is N x N gemms done 20 times
 * per call; A' does 21 (5 % more device work). While a background thread
 * loads the CPU in bursts (busy 10..100 ms, idle 0..50 ms, from a fixed
 * sequence; it stops at the end or after 30 minutes, whichever comes
 * first), the program runs COUNT comparisons of A against A (two sessions,
 * as `vmclient compare a.vmx a.vmx` does) and COUNT of A against A',
 * interleaved, with vmc_compare()'s defaults (threshold 2 %, 95 %,
 * 10..100 rounds, 20 batches of 1 ms per side per round) except
 * max_seconds (60).
 *
 * Figures:
 *   aa_false_verdicts   A/A comparisons that said faster or slower (the
 *                       promise: at most 1 in 20)
 *   aa_same, aa_inconclusive
 *   ab_slower           A/A' comparisons that said slower (the goal: at
 *                       least 18 of 20)
 *   ab_same, ab_faster, ab_inconclusive
 *   aa_runs[], ab_runs[]  each: verdict, rounds, seconds, ratio, ci
 *   *_median_rounds, *_median_seconds
 *   ab_ratio_quiet      the A'/A ratio measured before the load starts
 *                       (100 rounds, no verdict): the true effect size
 *
 * Usage: bench_compare [count [round_ms]]: count 1..100 (default 20),
 * round_ms 1..1000 (default 1, vmc_compare()'s). Needs VMRPC_BUILD_DIR (defaults to the
 * directory above this program). Prints one JSON object.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent_proc.h"
#include "gemm_exec.h"
#include "vm/executable.h"
#include "vmrpc/vmclient.h"

#include "bench_stats.h"

#define N 96
#define GEMMS_A 20
#define GEMMS_B 21
#define MAX_COUNT 100

static void check(vm_status_t st, const char *what) {
  if (!st) return;
  fprintf(stderr, "bench_compare: %s: %s: %s\n", what, vm_code_name(vm_status_code(st)),
          vm_status_message(st));
  exit(1);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* main(x) computes x * x `gemms` times (tests/common/gemm_exec.c). */
static void build_exec(int gemms, uint8_t **bytes, size_t *size) {
  vm_executable_t *e;
  check(gemm_chain_exec(N, gemms, &e), "assembling");
  check(vm_executable_write(e, bytes, size), "serialising");
  vm_executable_free(e);
}

/* A session with a VM of the executable, its input set and run once. */
static vmc_compare_side_t open_side(const char *url, const uint8_t *bytes, size_t size,
                                    const vmc_tensor_t *x) {
  vmc_compare_side_t s = {NULL, {0}, "main"};
  check(vmc_connect(url, NULL, &s.conn), "connecting");
  vmc_exec_t ex;
  check(vmc_upload_memory(s.conn, bytes, size, NULL, NULL, &ex, NULL), "upload");
  vmc_device_spec_t spec = {"opencl:0", "pooled"};
  check(vmc_create_vm(s.conn, ex, &spec, 1, "bytecode", &s.vm), "create VM");
  check(vmc_set_input(s.conn, s.vm, "main", 0, x), "set_input");
  check(vmc_invoke(s.conn, s.vm, "main", 0, NULL), "first run");
  return s;
}

/* The background load: bursts of busy work and short pauses, from a fixed
 * sequence, until told to stop or 30 minutes have passed. */
typedef struct load {
  atomic_int stop;
  double busy_s;
} load_t;

static void *load_main(void *arg) {
  load_t *l = arg;
  uint64_t lcg = 12345;
  double t_end = now_s() + 1800;
  volatile double sink = 0;
  while (!atomic_load(&l->stop) && now_s() < t_end) {
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    double busy = 0.010 + 0.090 * (double)(lcg >> 40) / (double)(1ull << 24);
    double idle = 0.050 * (double)((lcg >> 16) & 0xffffff) / (double)(1ull << 24);
    double t0 = now_s();
    while (now_s() - t0 < busy)
      for (int i = 0; i < 1000; i++) sink += sqrt((double)i + sink * 1e-9);
    l->busy_s += now_s() - t0;
    struct timespec ts = {0, (long)(idle * 1e9)};
    nanosleep(&ts, NULL);
  }
  return NULL;
}

typedef struct run {
  vmc_verdict_t verdict;
  uint32_t rounds;
  double seconds, ratio, lo, hi;
} run_t;

static run_t compare_once(const vmc_compare_side_t *a, const vmc_compare_side_t *b,
                          const vmc_compare_opts_t *o) {
  vmc_compare_result_t r;
  check(vmc_compare(a, b, o, &r), "compare");
  run_t out = {r.verdict, r.num_rounds, r.seconds, r.ratio, r.lo, r.hi};
  vmc_compare_result_free(&r);
  return out;
}

static void print_runs(const char *key, const run_t *r, int n) {
  printf("  \"%s\": [", key);
  for (int i = 0; i < n; i++)
    printf("%s\n    {\"verdict\": \"%s\", \"rounds\": %u, \"seconds\": %.3f, \"ratio\": %.4f, "
           "\"ci\": [%.4f, %.4f]}",
           i ? "," : "", vmc_verdict_name(r[i].verdict), r[i].rounds, r[i].seconds, r[i].ratio,
           r[i].lo, r[i].hi);
  printf("],\n");
}

static void medians(const run_t *r, int n, double *rounds, double *seconds) {
  double a[MAX_COUNT], b[MAX_COUNT];
  for (int i = 0; i < n; i++) {
    a[i] = r[i].rounds;
    b[i] = r[i].seconds;
  }
  *rounds = median(a, n);
  *seconds = median(b, n);
}

static int parse_arg(int argc, char **argv, int i, int def, int lo, int hi) {
  if (argc <= i) return def;
  char *end;
  long v = strtol(argv[i], &end, 10);
  if (*end || v < lo || v > hi) {
    fprintf(stderr, "usage: bench_compare [count(1..%d) [round_ms(1..1000)]]\n", MAX_COUNT);
    exit(2);
  }
  return (int)v;
}

int main(int argc, char **argv) {
  int count = parse_arg(argc, argv, 1, 20, 1, MAX_COUNT);
  int round_ms = parse_arg(argc, argv, 2, 1, 1, 1000);
  if (!getenv("VMRPC_BUILD_DIR")) {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0) {
      fprintf(stderr, "bench_compare: set VMRPC_BUILD_DIR to the build tree\n");
      return 1;
    }
    exe[n] = '\0';
    for (int k = 0; k < 2; k++) {
      char *slash = strrchr(exe, '/');
      if (slash) *slash = '\0';
    }
    setenv("VMRPC_BUILD_DIR", exe, 1);
  }
  char cache[PATH_MAX + 32];
  snprintf(cache, sizeof(cache), "%s/test-cache", getenv("VMRPC_BUILD_DIR"));
  agent_proc_t agent;
  const char *agent_args[] = {"--device", "opencl:0", "--cache-dir", cache, NULL};
  if (agent_proc_start(&agent, agent_args) != 0) {
    fprintf(stderr, "bench_compare: could not start vmagent\n");
    return 1;
  }
  uint8_t *ba, *bb;
  size_t na, nb;
  build_exec(GEMMS_A, &ba, &na);
  build_exec(GEMMS_B, &bb, &nb);
  int64_t shape[2] = {N, N};
  vmc_tensor_t x;
  check(vmc_tensor_alloc(VM_F32, 2, shape, &x), "input");
  float *xv = x.data;
  for (int i = 0; i < N * N; i++) xv[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
  vmc_compare_side_t a1 = open_side(agent.url, ba, na, &x);
  vmc_compare_side_t a2 = open_side(agent.url, ba, na, &x);
  vmc_compare_side_t b = open_side(agent.url, bb, nb, &x);
  vmc_tensor_free(&x);
  free(ba);
  free(bb);

  vmc_compare_opts_t o = vmc_compare_opts_default();
  o.round_ms = round_ms;
  o.max_seconds = 60;
  /* The true effect before the load: 100 rounds, whatever the verdict. */
  vmc_compare_opts_t quiet = o;
  quiet.min_rounds = quiet.max_rounds = 100;
  vmc_compare_result_t qr;
  check(vmc_compare(&a1, &b, &quiet, &qr), "quiet compare");
  double quiet_ratio = qr.ratio, quiet_lo = qr.lo, quiet_hi = qr.hi;
  int quiet_device = qr.device_time;
  vmc_compare_result_free(&qr);

  load_t load = {0, 0};
  pthread_t th;
  if (pthread_create(&th, NULL, load_main, &load) != 0) return 1;
  double t0 = now_s();
  static run_t aa[MAX_COUNT], ab[MAX_COUNT];
  for (int i = 0; i < count; i++) {
    aa[i] = compare_once(&a1, &a2, &o);
    ab[i] = compare_once(&a1, &b, &o);
    fprintf(stderr, "bench_compare: %d/%d: A/A %s (%u rounds), A/A' %s (%u rounds, %.4f)\n",
            i + 1, count, vmc_verdict_name(aa[i].verdict), aa[i].rounds,
            vmc_verdict_name(ab[i].verdict), ab[i].rounds, ab[i].ratio);
  }
  double total_s = now_s() - t0;
  atomic_store(&load.stop, 1);
  pthread_join(th, NULL);
  vmc_close(a1.conn);
  vmc_close(a2.conn);
  vmc_close(b.conn);
  agent_proc_stop(&agent);

  int aa_false = 0, aa_same = 0, aa_inc = 0, ab_slower = 0, ab_same = 0, ab_faster = 0, ab_inc = 0;
  for (int i = 0; i < count; i++) {
    aa_false += aa[i].verdict == VMC_VERDICT_FASTER || aa[i].verdict == VMC_VERDICT_SLOWER;
    aa_same += aa[i].verdict == VMC_VERDICT_SAME;
    aa_inc += aa[i].verdict == VMC_VERDICT_INCONCLUSIVE;
    ab_slower += ab[i].verdict == VMC_VERDICT_SLOWER;
    ab_same += ab[i].verdict == VMC_VERDICT_SAME;
    ab_faster += ab[i].verdict == VMC_VERDICT_FASTER;
    ab_inc += ab[i].verdict == VMC_VERDICT_INCONCLUSIVE;
  }
  double aa_mr, aa_ms, ab_mr, ab_ms;
  medians(aa, count, &aa_mr, &aa_ms);
  medians(ab, count, &ab_mr, &ab_ms);
  printf("{\n");
  printf("  \"count\": %d,\n  \"round_ms\": %d,\n  \"threshold\": %.3f,\n", count, round_ms,
         o.threshold);
  printf("  \"gemms_a\": %d,\n  \"gemms_b\": %d,\n  \"n\": %d,\n", GEMMS_A, GEMMS_B, N);
  printf("  \"ab_ratio_quiet\": %.4f,\n  \"ab_ratio_quiet_ci\": [%.4f, %.4f],\n", quiet_ratio,
         quiet_lo, quiet_hi);
  printf("  \"device_time\": %s,\n", quiet_device ? "true" : "false");
  printf("  \"aa_false_verdicts\": %d,\n  \"aa_same\": %d,\n  \"aa_inconclusive\": %d,\n",
         aa_false, aa_same, aa_inc);
  printf("  \"ab_slower\": %d,\n  \"ab_same\": %d,\n  \"ab_faster\": %d,\n"
         "  \"ab_inconclusive\": %d,\n",
         ab_slower, ab_same, ab_faster, ab_inc);
  printf("  \"aa_median_rounds\": %.1f,\n  \"aa_median_seconds\": %.3f,\n", aa_mr, aa_ms);
  printf("  \"ab_median_rounds\": %.1f,\n  \"ab_median_seconds\": %.3f,\n", ab_mr, ab_ms);
  print_runs("aa_runs", aa, count);
  print_runs("ab_runs", ab, count);
  printf("  \"load_busy_share\": %.3f,\n", total_s > 0 ? load.busy_s / total_s : 0.0);
  printf("  \"seconds\": %.1f,\n", total_s);
  printf("  \"aa_ok\": %s,\n  \"ab_ok\": %s\n}\n", aa_false <= count / 20 ? "true" : "false",
         ab_slower * 10 >= count * 9 ? "true" : "false");
  return 0;
}
