/* Interpreter dispatch cost: nanoseconds per Call of a no-op packed builtin,
 * in bytecode and compiled mode.
 *
 * Workloads (each built with the builder):
 *   chain: one function of 1,000,000 straight-line `r0 = bench.noop()`
 *          Calls (the code streams through the caches: 40 MB of bytecode,
 *          32 MB of compiled records);
 *   chain2: the same with two arguments `r0 = bench.noop(r1, 7)`;
 *   loop:  100 no-op Calls in a loop body run 10,000 times (code stays in
 *          cache; the loop's own add/less/If/Goto count as overhead).
 * Each is run `runs` times per mode after a warm-up; medians are reported.
 * Baseline measured in the same run: memcpy of 64 MiB (GB/s), and each
 * per-call time is also given as a ratio to the time memcpy takes for 64
 * bytes (one cache line).
 *
 * Usage: bench_vm [runs]   (default 7). Prints one JSON object.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vm/vm.h"

#define CHAIN_CALLS 1000000u
#define LOOP_BODY 100u
#define LOOP_ITERS 10000u

static void check(vm_status_t st, const char *what) {
  if (!st) return;
  fprintf(stderr, "bench_vm: %s: %s: %s\n", what, vm_code_name(vm_status_code(st)),
          vm_status_message(st));
  exit(1);
}

static vm_status_t b_noop(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                          void *user) {
  return VM_STATUS_OK;
}

static vm_status_t b_add(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                         void *user) {
  *out = vm_value_int(args[0].u.i + args[1].u.i);
  return VM_STATUS_OK;
}

static vm_status_t b_less(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                          void *user) {
  *out = vm_value_bool(args[0].u.i < args[1].u.i);
  return VM_STATUS_OK;
}

static vm_executable_t *build(void) {
  vm_builder_t *b;
  check(vm_builder_create(&b), "builder");
  uint32_t noop, add, less, chain, chain2, loop;
  check(vm_builder_declare_packed(b, "bench.noop", &noop), "declare");
  check(vm_builder_declare_packed(b, "bench.add", &add), "declare");
  check(vm_builder_declare_packed(b, "bench.less", &less), "declare");
  check(vm_builder_declare_function(b, "chain", 0, NULL, &chain), "declare");
  check(vm_builder_declare_function(b, "chain2", 0, NULL, &chain2), "declare");
  check(vm_builder_declare_function(b, "loop", 0, NULL, &loop), "declare");

  check(vm_builder_begin_function(b, chain), "begin");
  for (uint32_t i = 0; i < CHAIN_CALLS; i++)
    check(vm_builder_emit_call(b, 0, noop, 0, NULL), "emit");
  check(vm_builder_emit_ret(b, 0), "emit");
  check(vm_builder_end_function(b, 0), "end");

  check(vm_builder_begin_function(b, chain2), "begin");
  int64_t a2[2] = {VM_REG(1), VM_IMM(7)};
  for (uint32_t i = 0; i < CHAIN_CALLS; i++) check(vm_builder_emit_call(b, 0, noop, 2, a2), "emit");
  check(vm_builder_emit_ret(b, 0), "emit");
  check(vm_builder_end_function(b, 2), "end");

  check(vm_builder_begin_function(b, loop), "begin");
  vm_label_t head = vm_builder_new_label(b), done = vm_builder_new_label(b);
  int64_t z[2] = {VM_IMM(0), VM_IMM(0)};
  check(vm_builder_emit_call(b, 1, add, 2, z), "emit"); /* i = 0 */
  check(vm_builder_bind_label(b, head), "label");
  int64_t c[2] = {VM_REG(1), VM_IMM(LOOP_ITERS)};
  check(vm_builder_emit_call(b, 2, less, 2, c), "emit");
  check(vm_builder_emit_if(b, 2, done), "emit");
  for (uint32_t i = 0; i < LOOP_BODY; i++) check(vm_builder_emit_call(b, 0, noop, 0, NULL), "emit");
  int64_t inc[2] = {VM_REG(1), VM_IMM(1)};
  check(vm_builder_emit_call(b, 1, add, 2, inc), "emit");
  check(vm_builder_emit_goto(b, head), "emit");
  check(vm_builder_bind_label(b, done), "label");
  check(vm_builder_emit_ret(b, 0), "emit");
  check(vm_builder_end_function(b, 3), "end");

  vm_executable_t *e;
  check(vm_builder_finish(b, &e), "finish");
  vm_builder_free(b);
  return e;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(*v), cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Median ns per Call of func over runs (after one warm-up run). */
static double time_func(vm_machine_t *m, const char *func, double calls, int runs) {
  double *ns = calloc((size_t)runs, sizeof(double));
  vm_value_t out;
  check(vm_machine_invoke(m, func, NULL, 0, &out), "warm-up");
  vm_value_release(&out);
  for (int r = 0; r < runs; r++) {
    uint64_t t0 = vm_now_ns();
    check(vm_machine_invoke(m, func, NULL, 0, &out), func);
    uint64_t t1 = vm_now_ns();
    vm_value_release(&out);
    ns[r] = (double)(t1 - t0) / calls;
  }
  double med = median(ns, runs);
  free(ns);
  return med;
}

/* Median GB/s of memcpy over 64 MiB. */
static double memcpy_gbps(int runs) {
  size_t n = (size_t)64 << 20;
  char *src = malloc(n), *dst = malloc(n);
  if (!src || !dst) {
    fprintf(stderr, "bench_vm: out of memory\n");
    exit(1);
  }
  memset(src, 1, n);
  memset(dst, 2, n);
  double *g = calloc((size_t)runs, sizeof(double));
  for (int r = 0; r < runs; r++) {
    uint64_t t0 = vm_now_ns();
    memcpy(dst, src, n);
    uint64_t t1 = vm_now_ns();
    /* keep the copy observable */
    __asm__ volatile("" : : "r"(dst) : "memory");
    g[r] = (double)n / (double)(t1 - t0);
  }
  double med = median(g, runs);
  free(g);
  free(src);
  free(dst);
  return med;
}

int main(int argc, char **argv) {
  int runs = argc > 1 ? atoi(argv[1]) : 7;
  if (runs < 1) runs = 1;
  vm_registry_t *reg;
  check(vm_registry_create(&reg), "registry");
  check(vm_registry_add(reg, "bench.noop", b_noop, NULL), "registry");
  check(vm_registry_add(reg, "bench.add", b_add, NULL), "registry");
  check(vm_registry_add(reg, "bench.less", b_less, NULL), "registry");
  vm_executable_t *e = build();

  double chain[2], chain2[2], loop[2], create_ms[2];
  for (int mode = 0; mode < 2; mode++) {
    vm_machine_config_t c;
    memset(&c, 0, sizeof(c));
    c.mode = mode ? VM_EXEC_COMPILED : VM_EXEC_BYTECODE;
    c.registry = reg;
    vm_machine_t *m;
    uint64_t t0 = vm_now_ns();
    check(vm_machine_create(e, &c, &m), "create");
    create_ms[mode] = (double)(vm_now_ns() - t0) / 1e6;
    chain[mode] = time_func(m, "chain", CHAIN_CALLS, runs);
    chain2[mode] = time_func(m, "chain2", CHAIN_CALLS, runs);
    /* per loop iteration: LOOP_BODY no-ops + add + less (+ If + Goto) */
    loop[mode] = time_func(m, "loop", (double)LOOP_ITERS * (LOOP_BODY + 2), runs);
    vm_machine_free(m);
  }
  double gbps = memcpy_gbps(runs);
  double line_ns = 64.0 / gbps; /* ns to memcpy one 64-byte line */

  printf(
      "{\"calls\":%u,\"runs\":%d,"
      "\"ns_per_call_bytecode\":%.3f,\"ns_per_call_compiled\":%.3f,"
      "\"ns_per_call_2args_bytecode\":%.3f,\"ns_per_call_2args_compiled\":%.3f,"
      "\"ns_per_call_loop_bytecode\":%.3f,\"ns_per_call_loop_compiled\":%.3f,"
      "\"compiled_speedup\":%.3f,"
      "\"memcpy_gbps\":%.3f,\"memcpy_ns_per_64B\":%.3f,"
      "\"bytecode_call_vs_memcpy_64B\":%.3f,\"compiled_call_vs_memcpy_64B\":%.3f,"
      "\"create_ms_bytecode\":%.3f,\"create_ms_compiled\":%.3f}\n",
      CHAIN_CALLS, runs, chain[0], chain[1], chain2[0], chain2[1], loop[0], loop[1],
      chain[0] / chain[1], gbps, line_ns, chain[0] / line_ns, chain[1] / line_ns, create_ms[0],
      create_ms[1]);

  vm_executable_free(e);
  vm_registry_free(reg);
  return 0;
}
