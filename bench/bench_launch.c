/* Per-call cost of the VM's OpenCL operators against bare OpenCL on the
 * same device, queue and kernel.
 *
 * The work is N elementwise adds c = a + b of a small float32 tensor (the
 * kernel binary_add_vec that cl.binary.add launches, taken from the
 * device's own program cache, so both sides run the same binary). Timed
 * from the first call to the end of a device sync, divided by N:
 *
 *   bare_us       N x clEnqueueNDRangeKernel with the arguments set once,
 *                 then clFinish: the driver's own floor per launch
 *   bare_args_us  the same, setting the kernel's 9 arguments before each
 *                 launch (what any operator on a shared cl_kernel must do)
 *   vm_us         one VM function of N straight-line cl.binary.add calls
 *                 on the function's parameters, invoked in-process, synced
 *   vm_views_us   as vm_us, each call's output a fresh
 *                 vm.builtin.alloc_tensor view of a planned storage, killed
 *                 after the call (how compiled models run their ops)
 *   vm_kernel_us  N cl.kernel calls of an executable-carried add kernel
 *   ratio         vm_us / bare_us; overhead_us = vm_us - bare_us: what the
 *                 VM and the operator add to each launch
 *
 * Every variant is run once to warm up (kernel builds), then runs rounds,
 * the variants alternating within each round; figures are medians.
 *
 * Usage: bench_launch [calls] [runs]   (defaults 200, 15). One JSON object.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cl_ops_internal.h"
#include "vm/vm.h"
#include "vmcl/vmcl.h"
#include "bench_stats.h"

#define NPARAMS 3 /* a, b, c */

static const int64_t SIZES[] = {64, 4096};
#define NSIZES (sizeof(SIZES) / sizeof(SIZES[0]))

static const char CARRIED_SRC[] =
    "__kernel void add(__global const float *a, __global const float *b, __global float *c,\n"
    "                  int n) {\n"
    "  int i = get_global_id(0);\n"
    "  if (i < n) c[i] = a[i] + b[i];\n"
    "}\n";

static void check(vm_status_t st, const char *what) {
  if (!st) return;
  fprintf(stderr, "bench_launch: %s: %s: %s\n", what, vm_code_name(vm_status_code(st)),
          vm_status_message(st));
  exit(1);
}

static void check_cl(cl_int err, const char *what) {
  if (err == CL_SUCCESS) return;
  fprintf(stderr, "bench_launch: %s: %s (%d)\n", what, vmcl_error_name(err), (int)err);
  exit(1);
}

/* Functions chain, chain_views and chain_kernel, each of `calls` calls. */
static vm_executable_t *build(int64_t n, uint32_t calls) {
  vm_builder_t *b;
  check(vm_builder_create(&b), "builder");
  uint32_t add, kern, alloc_st, alloc_t, kill, f_chain, f_views, f_kernel;
  check(vm_builder_declare_packed(b, "cl.binary.add", &add), "declare");
  check(vm_builder_declare_packed(b, "cl.kernel", &kern), "declare");
  check(vm_builder_declare_packed(b, "vm.builtin.alloc_storage", &alloc_st), "declare");
  check(vm_builder_declare_packed(b, "vm.builtin.alloc_tensor", &alloc_t), "declare");
  check(vm_builder_declare_packed(b, "vm.builtin.kill", &kill), "declare");
  check(vm_builder_declare_function(b, "chain", NPARAMS, NULL, &f_chain), "declare");
  check(vm_builder_declare_function(b, "chain_views", NPARAMS, NULL, &f_views), "declare");
  check(vm_builder_declare_function(b, "chain_kernel", NPARAMS, NULL, &f_kernel), "declare");
  check(vm_builder_add_kernel(b, "bench", CARRIED_SRC, ""), "kernel");
  uint32_t c_shape, c_dtype, c_scope, c_mod, c_name, c_nbytes;
  int64_t two = 2 * n; /* two outputs' worth, so views alternate offsets */
  check(vm_builder_const_shape(b, 1, &n, &c_shape), "constant");
  check(vm_builder_const_dtype(b, VM_F32, &c_dtype), "constant");
  check(vm_builder_const_string(b, "global", 6, &c_scope), "constant");
  check(vm_builder_const_string(b, "bench", 5, &c_mod), "constant");
  check(vm_builder_const_string(b, "add", 3, &c_name), "constant");
  check(vm_builder_const_shape(b, 1, &two, &c_nbytes), "constant");

  /* chain(a, b, c): c = a + b, calls times */
  check(vm_builder_begin_function(b, f_chain), "begin");
  int64_t w[3] = {VM_REG(0), VM_REG(1), VM_REG(2)};
  for (uint32_t i = 0; i < calls; i++)
    check(vm_builder_emit_call(b, VM_REG_VOID, add, 3, w), "emit");
  check(vm_builder_emit_ret(b, 2), "emit");
  check(vm_builder_end_function(b, NPARAMS), "end");

  /* chain_views(a, b, c): r3 = storage; per call r4 = view, a + b -> r4,
   * kill r4 */
  check(vm_builder_begin_function(b, f_views), "begin");
  int64_t ws[5] = {VM_REG(VM_REG_VM), VM_CONSTI(c_nbytes), VM_IMM(0), VM_CONSTI(c_dtype),
                   VM_CONSTI(c_scope)};
  check(vm_builder_emit_call(b, 3, alloc_st, 5, ws), "emit");
  for (uint32_t i = 0; i < calls; i++) {
    int64_t wt[4] = {VM_REG(3), VM_IMM((int64_t)(i % 2) * n * 4), VM_CONSTI(c_shape),
                     VM_CONSTI(c_dtype)};
    check(vm_builder_emit_call(b, 4, alloc_t, 4, wt), "emit");
    int64_t wa[3] = {VM_REG(0), VM_REG(1), VM_REG(4)};
    check(vm_builder_emit_call(b, VM_REG_VOID, add, 3, wa), "emit");
    int64_t wk[1] = {VM_REG(4)};
    check(vm_builder_emit_call(b, 4, kill, 1, wk), "emit");
  }
  check(vm_builder_emit_ret(b, 2), "emit");
  check(vm_builder_end_function(b, NPARAMS + 2), "end");

  /* chain_kernel(a, b, c): cl.kernel("bench", "add", c, 0, a, b, c, n) */
  check(vm_builder_begin_function(b, f_kernel), "begin");
  int64_t wk[8] = {VM_CONSTI(c_mod), VM_CONSTI(c_name), VM_REG(2), VM_IMM(0),
                   VM_REG(0),        VM_REG(1),         VM_REG(2), VM_IMM(n)};
  for (uint32_t i = 0; i < calls; i++)
    check(vm_builder_emit_call(b, VM_REG_VOID, kern, 8, wk), "emit");
  check(vm_builder_emit_ret(b, 2), "emit");
  check(vm_builder_end_function(b, NPARAMS), "end");

  vm_executable_t *e;
  check(vm_builder_finish(b, &e), "finish");
  vm_builder_free(b);
  return e;
}

static vm_value_t tensor(vm_device_t *dev, vm_allocator_t *al, int64_t n, float v) {
  vm_value_t t;
  check(vm_tensor_alloc(al, VM_F32, &n, 1, &t), "alloc");
  float *h = malloc((size_t)n * sizeof(float));
  if (!h) exit(1);
  for (int64_t i = 0; i < n; i++) h[i] = v + (float)i;
  vm_tensor_t *tt = vm_value_as_tensor(&t);
  check(dev->ops->copy_from_host(dev, tt->storage->buffer, tt->offset, h, (size_t)n * 4),
        "upload");
  free(h);
  return t;
}

/* The same kernel cl.binary.add launches for a dense float32 add. */
typedef struct bare {
  vmcl_dev_t *d;
  cl_command_queue queue; /* the device's, or one without profiling */
  cl_kernel k;
  cl_mem a, b, c;
  int n;
  size_t global, local;
} bare_t;

static void bare_set_args(const bare_t *x) {
  vmcl_args_t a = vmcl_args_begin(x->k);
  vmcl_arg_mem(&a, x->a);
  vmcl_arg_int(&a, 0);
  vmcl_arg_int(&a, 0);
  vmcl_arg_mem(&a, x->b);
  vmcl_arg_int(&a, 0);
  vmcl_arg_int(&a, 0);
  vmcl_arg_mem(&a, x->c);
  vmcl_arg_int(&a, 0);
  vmcl_arg_int(&a, x->n);
  check_cl(a.err, "clSetKernelArg");
}

/* CPU time of the whole process (the driver's worker threads included),
 * or of the calling thread alone (the host side of each call: ours and the
 * driver's enqueue). */
static uint64_t cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t thread_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

typedef struct sample {
  double wall, cpu, host; /* us per call */
} sample_t;

static sample_t bare_us(const bare_t *x, uint32_t calls, int args_each) {
  pthread_mutex_lock(&x->d->lock);
  uint64_t c0 = cpu_ns(), h0 = thread_ns(), t0 = vm_now_ns();
  if (!args_each) bare_set_args(x);
  for (uint32_t i = 0; i < calls; i++) {
    if (args_each) bare_set_args(x);
    check_cl(clEnqueueNDRangeKernel(x->queue, x->k, 1, NULL, &x->global, &x->local, 0, NULL,
                                    NULL),
             "clEnqueueNDRangeKernel");
  }
  uint64_t h1 = thread_ns(); /* before the wait: clFinish may spin */
  check_cl(clFinish(x->queue), "clFinish");
  uint64_t t1 = vm_now_ns(), c1 = cpu_ns();
  pthread_mutex_unlock(&x->d->lock);
  sample_t s = {(double)(t1 - t0) / 1e3 / calls, (double)(c1 - c0) / 1e3 / calls,
                (double)(h1 - h0) / 1e3 / calls};
  return s;
}

static sample_t vm_us(vm_machine_t *m, vm_device_t *dev, const char *func, vm_value_t *args,
                      uint32_t calls) {
  vm_value_t out;
  uint64_t c0 = cpu_ns(), h0 = thread_ns(), t0 = vm_now_ns();
  check(vm_machine_invoke(m, func, args, NPARAMS, &out), func);
  uint64_t h1 = thread_ns();
  check(dev->ops->sync(dev), "sync");
  uint64_t t1 = vm_now_ns(), c1 = cpu_ns();
  vm_value_release(&out);
  sample_t s = {(double)(t1 - t0) / 1e3 / calls, (double)(c1 - c0) / 1e3 / calls,
                (double)(h1 - h0) / 1e3 / calls};
  return s;
}

enum { V_BARE, V_BARE_ARGS, V_BARE_NOPROF, V_BARE_LOCAL, V_VM, V_VIEWS, V_KERNEL, NVAR };
static const char *const VNAMES[NVAR] = {"bare",   "bare_args", "bare_noprof", "bare_local",
                                         "vm",     "vm_views",  "vm_kernel"};

int main(int argc, char **argv) {
  int calls_arg = argc > 1 ? atoi(argv[1]) : 200;
  int runs = argc > 2 ? atoi(argv[2]) : 15;
  if (calls_arg < 1) calls_arg = 1;
  if (runs < 1) runs = 1;
  uint32_t calls = (uint32_t)calls_arg;
  vm_device_t *dev;
  vm_allocator_t *al;
  vm_registry_t *reg;
  check(vmcl_device_open(NULL, NULL, &dev), "open device");
  check(vm_allocator_create(dev, VM_ALLOC_NAIVE, &al), "allocator");
  check(vm_registry_create(&reg), "registry");
  check(vm_registry_add_builtins(reg), "register");
  check(vmcl_register_ops(reg), "register");
  vmcl_dev_t *d = vmcl_get(dev);
  printf("{\"device\": \"%s\", \"calls\": %u, \"runs\": %d, \"sizes\": [", dev->props.name, calls,
         runs);
  for (size_t si = 0; si < NSIZES; si++) {
    int64_t n = SIZES[si];
    vm_value_t args[NPARAMS] = {tensor(dev, al, n, 1.0f), tensor(dev, al, n, 2.0f),
                                tensor(dev, al, n, 0.0f)};
    vm_executable_t *e = build(n, calls);
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

    bare_t x = {.d = d, .n = (int)n};
    x.a = vmcl_tensor_mem(vm_value_as_tensor(&args[0]));
    x.b = vmcl_tensor_mem(vm_value_as_tensor(&args[1]));
    x.c = vmcl_tensor_mem(vm_value_as_tensor(&args[2]));
    pthread_mutex_lock(&d->lock);
    check(vmcl_family_kernel(d, VMCL_FAM_ELEMENTWISE, "", "binary_add_vec", &x.k), "kernel");
    x.local = vmcl_local_size(d, x.k, 256); /* what cl.binary.add asks for */
    pthread_mutex_unlock(&d->lock);
    size_t items = (size_t)n / 4 + 1;
    x.global = (items + x.local - 1) / x.local * x.local;

    x.queue = d->queue;
    /* the same launches on a queue without profiling, and with the
     * smallest work-group that covers the items (one group) */
    cl_int err = CL_SUCCESS;
    bare_t xn = x, xl = x;
    xn.queue = clCreateCommandQueue(d->context, d->device, 0, &err);
    check_cl(err, "clCreateCommandQueue");
    xl.local = 1;
    while (xl.local < items && xl.local < x.local) xl.local *= 2;
    xl.global = (items + xl.local - 1) / xl.local * xl.local;

    double *t[NVAR], *c[NVAR], *hc[NVAR];
    for (int v = 0; v < NVAR; v++) {
      t[v] = calloc((size_t)runs, sizeof(double));
      c[v] = calloc((size_t)runs, sizeof(double));
      hc[v] = calloc((size_t)runs, sizeof(double));
      if (!t[v] || !c[v] || !hc[v]) exit(1);
    }
    for (int r = -1; r < runs; r++) { /* r = -1: warm-up */
      sample_t s[NVAR];
      s[V_BARE] = bare_us(&x, calls, 0);
      s[V_BARE_ARGS] = bare_us(&x, calls, 1);
      s[V_BARE_NOPROF] = bare_us(&xn, calls, 0);
      s[V_BARE_LOCAL] = bare_us(&xl, calls, 0);
      s[V_VM] = vm_us(m, dev, "chain", args, calls);
      s[V_VIEWS] = vm_us(m, dev, "chain_views", args, calls);
      s[V_KERNEL] = vm_us(m, dev, "chain_kernel", args, calls);
      for (int v = 0; r >= 0 && v < NVAR; v++)
        t[v][r] = s[v].wall, c[v][r] = s[v].cpu, hc[v][r] = s[v].host;
    }
    check_cl(clReleaseCommandQueue(xn.queue), "clReleaseCommandQueue");
    /* the result is checked: c = a + b = 3 + 2i */
    float *h = malloc((size_t)n * sizeof(float));
    if (!h) exit(1);
    vm_tensor_t *ct = vm_value_as_tensor(&args[2]);
    check(dev->ops->copy_to_host(dev, h, ct->storage->buffer, ct->offset, (size_t)n * 4),
          "download");
    for (int64_t i = 0; i < n; i++) {
      if (h[i] != 3.0f + 2.0f * (float)i) {
        fprintf(stderr, "bench_launch: c[%lld] = %g, expected %g\n", (long long)i, h[i],
                3.0 + 2.0 * (double)i);
        return 1;
      }
    }
    free(h);
    double med[NVAR], cmed[NVAR], hmed[NVAR];
    for (int v = 0; v < NVAR; v++)
      med[v] = median(t[v], runs), cmed[v] = median(c[v], runs), hmed[v] = median(hc[v], runs);
    printf("%s{\"elements\": %lld, \"global\": %zu, \"local\": %zu, \"small_local\": %zu",
           si ? ", " : "", (long long)n, x.global, x.local, xl.local);
    for (int v = 0; v < NVAR; v++)
      printf(", \"%s_us\": %.2f, \"%s_cpu_us\": %.2f, \"%s_host_us\": %.2f", VNAMES[v], med[v],
             VNAMES[v], cmed[v], VNAMES[v], hmed[v]);
    printf(", \"overhead_us\": %.2f, \"overhead_host_us\": %.2f, \"ratio\": %.3f, "
           "\"cpu_ratio\": %.3f, \"views_ratio\": %.3f, \"kernel_ratio\": %.3f}",
           med[V_VM] - med[V_BARE], hmed[V_VM] - hmed[V_BARE], med[V_VM] / med[V_BARE],
           cmed[V_VM] / cmed[V_BARE], med[V_VIEWS] / med[V_BARE], med[V_KERNEL] / med[V_BARE]);
    for (int v = 0; v < NVAR; v++) free(t[v]), free(c[v]), free(hc[v]);
    vm_machine_free(m);
    vm_executable_free(e);
    for (int k = 0; k < NPARAMS; k++) vm_value_release(&args[k]);
  }
  printf("]}\n");
  vm_registry_free(reg);
  vm_allocator_destroy(al);
  vm_device_destroy(dev);
  return 0;
}
