/* A seeded run of generated hostile executables against one live vmagent
 * (a real child process on loopback, OpenCL device, carried kernels
 * allowed with a time bound, session and host memory limits), mixing the
 * primitives that used to crash, hang or exhaust it (docs/security.md,
 * "Hostile executables"):
 *   args    cl.kernel with random values for pointer, narrow-integer,
 *           float and __local parameters (numbers for buffers included)
 *   deep    recursion to the call-depth limit with 2..65536 registers
 *   concat  cl.concat of tensors made at run time with random, often
 *           empty, extents up to INT64_MAX
 *   slice   cl.slice with begin/end/step near the int64 limits
 *   time    the time evaluator with cache-flush buffers up to 1 GiB
 * Every call must end with one of the statuses a checked refusal gives
 * (OK, INVALID_ARGUMENT, RESOURCE_EXHAUSTED, NOT_FOUND), never a lost
 * agent; every 25 programs, and at the end, another client runs the example
 * MLP on the same device and checks its output. Prints the counts per
 * primitive and status.
 *
 *   VMRPC_HOSTILE_ITERS  programs to run [200]
 *   VMRPC_HOSTILE_SEED   PRNG seed [1]
 *   VMRPC_HOSTILE_VERBOSE  set: print every program's status
 * Skipped without an OpenCL device. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_proc.h"
#include "helper_agent.h"
#include "test_util.h"
#include "vm/executable.h"
#include "vmrpc/vmclient.h"
#include "vmexamples/models.h"

enum { P_ARGS, P_DEEP, P_CONCAT, P_SLICE, P_TIME, P_COUNT };
static const char *k_prim[P_COUNT] = {"args", "deep", "concat", "slice", "time"};

static uint64_t g_rng;
static uint8_t *g_mlp;
static size_t g_mlp_len;

static uint64_t rnd(void) { /* xorshift64* */
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return g_rng * 0x2545F4914F6CDD1DULL;
}

static uint64_t below(uint64_t n) {
  return rnd() % n;
}

/* A dim: mostly small, often 0, sometimes at the edges of int64. */
static int64_t pick_dim(void) {
  static const int64_t edge[] = {
      0,         1,         2,         3,         7, INT_MAX,          1LL << 31,
      1LL << 32, 1LL << 61, 1LL << 62, INT64_MAX, 0, INT64_MAX / 2 + 1};
  return below(4) == 0 ? (int64_t)below(64) : edge[below(sizeof(edge) / sizeof(edge[0]))];
}

/* The program text being generated: constants first (c0, c1, ...), then
 * the functions. */
typedef struct gen {
  char consts[8192], body[8192];
  size_t nc;
} gen_t;

static void cat(char *buf, size_t cap, const char *fmt, ...) {
  size_t len = strlen(buf);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + len, cap - len, fmt, ap);
  va_end(ap);
}

/* Adds ".const cN KIND VALUE" and returns N. */
static size_t add_const(gen_t *g, const char *kind_value) {
  cat(g->consts, sizeof(g->consts), ".const c%zu %s\n", g->nc, kind_value);
  return g->nc++;
}

static size_t add_shape(gen_t *g, int n, int first_zero) {
  char v[256] = "shape [";
  for (int i = 0; i < n; i++)
    cat(v, sizeof(v), "%s%" PRId64, i ? ", " : "", i == 0 && first_zero ? 0 : pick_dim());
  cat(v, sizeof(v), "]");
  return add_const(g, v);
}

static const char k_kernels[] =
    ".kernel m {\n"
    "  \"__kernel void fill(__global int* x, int v) { x[get_global_id(0)] = v; }\\n\"\n"
    "  \"__kernel void narrow(__global int* x, char c, ushort s) { x[0] = c + s; }\\n\"\n"
    "  \"__kernel void scale(__global int* x, float a) { x[0] = (int)(x[0] * a); }\\n\"\n"
    "  \"__kernel void with_local(__global int* x, __local int* t) { t[0] = x[0]; }\\n\"\n"
    "}\n";

/* A kernel argument: the input tensor, or a constant of a random kind. */
static void kernel_arg(gen_t *g, char *out, size_t cap) {
  char v[96];
  switch (below(6)) {
    case 0: snprintf(out, cap, "%%0"); return;
    case 1: snprintf(v, sizeof(v), "int %" PRId64, (int64_t)rnd()); break;
    case 2: snprintf(v, sizeof(v), "int %" PRId64, below(2) ? pick_dim() : -pick_dim()); break;
    case 3: snprintf(v, sizeof(v), "float %g", (double)(int64_t)rnd() / 1e3); break;
    case 4: snprintf(v, sizeof(v), "string \"x\""); break;
    default: snprintf(v, sizeof(v), "shape [%" PRId64 "]", pick_dim()); break;
  }
  snprintf(out, cap, "c%zu", add_const(g, v));
}

static void gen_args(gen_t *g) {
  static const char *kernels[] = {"fill", "narrow", "scale", "with_local"};
  const char *k = kernels[below(4)];
  size_t cm = add_const(g, "string \"m\"");
  char kv[48];
  snprintf(kv, sizeof(kv), "string \"%s\"", k);
  size_t ck = add_const(g, kv);
  int nargs = 1 + (int)below(3);
  char a[3][32];
  for (int i = 0; i < nargs; i++) kernel_arg(g, a[i], sizeof(a[i]));
  if (below(2)) snprintf(a[0], sizeof(a[0]), "%%0"); /* often a well-formed first argument */
  cat(g->body, sizeof(g->body),
      ".packed $cl.kernel\n.func @main(x) regs 1 {\n  call $cl.kernel(%%vm, c%zu, c%zu, %%0, 0", cm,
      ck);
  for (int i = 0; i < nargs; i++) cat(g->body, sizeof(g->body), ", %s", a[i]);
  cat(g->body, sizeof(g->body), ")\n  ret %%0\n}\n");
}

static void gen_deep(gen_t *g) {
  uint32_t regs = below(3) == 0 ? 65536 : 2 + (uint32_t)below(65535);
  cat(g->body, sizeof(g->body), ".func @main(x) regs %u {\n  %%1 = call @main(%%0)\n  ret %%1\n}\n",
      regs);
}

/* "%N = a tensor of int8 with shape cS on device 0" (registers from r). */
static void alloc_line(gen_t *g, int reg, size_t shape_c, size_t dt_c, size_t scope_c) {
  cat(g->body, sizeof(g->body),
      "  %%%d = call $vm.builtin.alloc_storage(%%vm, c%zu, 0, c%zu, c%zu)\n"
      "  %%%d = call $vm.builtin.alloc_tensor(%%%d, 0, c%zu, c%zu)\n",
      reg, shape_c, dt_c, scope_c, reg + 1, reg, shape_c, dt_c);
}

static const char k_alloc_decls[] =
    ".packed $vm.builtin.alloc_storage\n.packed $vm.builtin.alloc_tensor\n";

static void gen_concat(gen_t *g) {
  int rank = 1 + (int)below(3), nin = 1 + (int)below(3);
  int first_zero = below(4) != 0; /* mostly empty: huge extents allowed */
  size_t dt = add_const(g, "dtype int8"), scope = add_const(g, "string \"global\"");
  size_t sh[4];
  for (int i = 0; i <= nin; i++) sh[i] = add_shape(g, rank, first_zero);
  char axis[32];
  snprintf(axis, sizeof(axis), "int %" PRId64, (int64_t)below(2 * (uint64_t)rank) - rank);
  size_t ax = add_const(g, axis);
  cat(g->body, sizeof(g->body), "%s.packed $cl.concat\n.func @main(x) regs 12 {\n", k_alloc_decls);
  for (int i = 0; i <= nin; i++) alloc_line(g, 1 + 2 * i, sh[i], dt, scope);
  cat(g->body, sizeof(g->body), "  call $cl.concat(");
  for (int i = 0; i < nin; i++) cat(g->body, sizeof(g->body), "%%%d, ", 2 + 2 * i);
  cat(g->body, sizeof(g->body), "c%zu, %%%d)\n  ret %%0\n}\n", ax, 2 + 2 * nin);
}

static void gen_slice(gen_t *g) {
  int rank = 1 + (int)below(3);
  int first_zero = below(3) != 0;
  size_t dt = add_const(g, "dtype int8"), scope = add_const(g, "string \"global\"");
  size_t sx = add_shape(g, rank, first_zero), sy = add_shape(g, rank, first_zero);
  size_t b = add_shape(g, rank, 0), e = add_shape(g, rank, 0);
  char st[128] = "shape [";
  for (int i = 0; i < rank; i++)
    cat(st, sizeof(st), "%s%" PRId64, i ? ", " : "", below(2) ? 1 + (int64_t)below(3) : INT_MAX);
  cat(st, sizeof(st), "]");
  size_t s = add_const(g, st);
  cat(g->body, sizeof(g->body), "%s.packed $cl.slice\n.func @main(x) regs 6 {\n", k_alloc_decls);
  alloc_line(g, 1, sx, dt, scope);
  alloc_line(g, 3, sy, dt, scope);
  cat(g->body, sizeof(g->body), "  call $cl.slice(%%2, c%zu, c%zu, c%zu, %%4)\n  ret %%0\n}\n", b,
      e, s);
}

static void gen_time(gen_t *g) {
  (void)g;
  cat(g->body, sizeof(g->body), ".func @main(x) regs 1 {\n  ret %%0\n}\n");
}

/* Another client runs the example MLP on opencl:0 correctly. */
static void mlp_still_served(const char *url) {
  ASSERT_OK(ha_mlp_check(url, "opencl:0", g_mlp, g_mlp_len));
}

/* Uploads text, makes a VM on opencl:0, sets x = int32[16] zeros, invokes
 * main (or times it): the first failing status. */
static vm_status_t run_program(vmc_conn_t *c, int prim, const char *text) {
  uint8_t *bytes = NULL;
  size_t len = 0;
  vm_executable_t *e = NULL;
  vm_status_t st = vm_executable_asm(text, strlen(text), NULL, &e);
  if (!st) st = vm_executable_write(e, &bytes, &len);
  vm_executable_free(e);
  if (st) return st; /* the generator made something the assembler refuses */
  vmc_exec_t ex;
  vmc_vm_t vm;
  st = vmc_upload_memory(c, bytes, len, NULL, NULL, &ex, NULL);
  free(bytes);
  vmc_device_spec_t dev = {"opencl:0", NULL};
  if (!st) st = vmc_create_vm(c, ex, &dev, 1, below(2) ? "compiled" : NULL, &vm);
  if (st) return st;
  int64_t n = 16;
  vmc_tensor_t x;
  ASSERT_OK(vmc_tensor_alloc(VM_I32, 1, &n, &x));
  memset(x.data, 0, 16 * sizeof(int32_t));
  st = vmc_set_input(c, vm, "main", 0, &x);
  vmc_tensor_free(&x);
  if (!st && prim == P_TIME) {
    vmc_time_params_t tp = vmc_time_params_default();
    tp.number = 1;
    tp.cache_flush_bytes = below(1ull << 30);
    vmc_time_result_t tr;
    st = vmc_time_evaluate(c, vm, "main", &tp, &tr);
    if (!st) vmc_time_result_free(&tr);
  } else if (!st) {
    st = vmc_invoke(c, vm, "main", 30000, NULL);
  }
  vm_status_t fr = vmc_free_vm(c, vm);
  if (fr && !st)
    st = fr;
  else
    vm_status_free(fr);
  vm_status_free(vmc_free_exec(c, ex));
  return st;
}

static void test_hostile_mix(void **state) {
  (void)state;
  const char *s_iters = getenv("VMRPC_HOSTILE_ITERS"), *s_seed = getenv("VMRPC_HOSTILE_SEED");
  int iters = s_iters ? atoi(s_iters) : 200;
  uint64_t seed = s_seed ? (uint64_t)strtoull(s_seed, NULL, 10) : 1;
  g_rng = seed;
  if (g_rng == 0) g_rng = 1;
  assert_int_equal(ha_mlp_bytes(11, &g_mlp, &g_mlp_len), 0);
  agent_proc_t p;
  const char *args[] = {"--device",
                        "opencl:0",
                        "--device",
                        "cpu",
                        "--kernels",
                        "allow",
                        "--kernel-timeout",
                        "5",
                        "--session-mem-limit",
                        "64M",
                        "--host-mem-limit",
                        "256M",
                        NULL};
  if (agent_proc_start(&p, args) != 0) skip(); /* no OpenCL device */
  vmc_conn_t *c = NULL;
  ASSERT_OK(vmc_connect(p.url, NULL, &c));
  int counts[P_COUNT][VM_UNAUTHENTICATED + 1];
  memset(counts, 0, sizeof(counts));
  for (int it = 0; it < iters; it++) {
    int prim = (int)below(P_COUNT);
    gen_t g;
    memset(&g, 0, sizeof(g));
    switch (prim) {
      case P_ARGS: gen_args(&g); break;
      case P_DEEP: gen_deep(&g); break;
      case P_CONCAT: gen_concat(&g); break;
      case P_SLICE: gen_slice(&g); break;
      default: gen_time(&g); break;
    }
    char *text = malloc(sizeof(k_kernels) + sizeof(g.consts) + sizeof(g.body));
    snprintf(text, sizeof(k_kernels) + sizeof(g.consts) + sizeof(g.body), "%s%s%s",
             prim == P_ARGS ? k_kernels : "", g.consts, g.body);
    vm_status_t st = run_program(c, prim, text);
    vm_code_t code = vm_status_code(st);
    if (code != VM_OK && code != VM_INVALID_ARGUMENT && code != VM_RESOURCE_EXHAUSTED &&
        code != VM_NOT_FOUND) {
      fail_msg("program %d (%s, seed %" PRIu64 ") ended with %s: %s\n%s", it, k_prim[prim], seed,
               vm_code_name(code), vm_status_message(st), text);
    }
    counts[prim][code]++;
    if (getenv("VMRPC_HOSTILE_VERBOSE"))
      fprintf(stderr, "%d %s: %s %s\n", it, k_prim[prim], vm_code_name(code),
              st ? vm_status_message(st) : "");
    vm_status_free(st);
    free(text);
    if ((it + 1) % 25 == 0) {
      ASSERT_OK(vmc_ping(c, NULL));
      mlp_still_served(p.url);
    }
  }
  vmc_close(c);
  mlp_still_served(p.url);
  fprintf(stderr, "hostile mix: %d programs, seed %" PRIu64 "\n", iters, seed);
  for (int pr = 0; pr < P_COUNT; pr++) {
    fprintf(stderr, "  %-7s", k_prim[pr]);
    for (int k = 0; k <= VM_UNAUTHENTICATED; k++)
      if (counts[pr][k]) fprintf(stderr, " %s %d", vm_code_name((vm_code_t)k), counts[pr][k]);
    fprintf(stderr, "\n");
  }
  assert_int_equal(agent_proc_stop(&p), 0);
  free(g_mlp);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hostile_mix),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
