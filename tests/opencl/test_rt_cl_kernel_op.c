/* cl.kernel (opencl/src/cl_kernel_op.c) called from bytecode on a machine
 * whose device 0 is the OpenCL device: kernels that the executable carries,
 * every kind of argument, work sizes, and each error with its exact code.
 *
 * The executable has two kernel modules ("m", which builds, and "broken",
 * which does not) and functions:
 *   scale(x)                      cl.kernel(%vm, "m", "scale", x, 0, x, 2.5)
 *                                 from constants, as a compiler would emit
 *   run<N>(mod, kern, g, l, a...) cl.kernel(%vm, mod, kern, g, l, a...) with
 *                                 N kernel args passed in by the test
 *   run_novm(mod, kern, g, l, a)  the same without the leading %vm
 *   run_short(mod, kern, g)       too few operator arguments
 * so one program (one build) covers many cases.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cl_internal.h"
#include "test_util.h"
#include "vm/vm.h"
#include "vmcl/vmcl.h"

static const char *k_module_src =
    "__kernel void scale(__global float* x, float a) {\n"
    "  size_t i = get_global_id(0);\n"
    "  x[i] = x[i] * a;\n"
    "}\n"
    "__kernel void fill_i(__global int* x, int v) {\n"
    "  x[get_global_id(0)] = v + (int)get_global_id(0);\n"
    "}\n"
    "__kernel void fill_u(__global uint* x, uint v) { x[get_global_id(0)] = v; }\n"
    "__kernel void fill_l(__global long* x, long v) { x[get_global_id(0)] = v; }\n"
    "__kernel void grid(__global float* x, int w) {\n"
    "  size_t i = get_global_id(0), j = get_global_id(1);\n"
    "  x[j * w + i] = (float)(j * 100 + i);\n"
    "}\n"
    "__kernel void axpy(__global float* y, __global const float* x, float a) {\n"
    "  size_t i = get_global_id(0);\n"
    "  y[i] = a * x[i] + y[i];\n"
    "}\n"
    "__kernel void narrow(__global int* x, char c, ushort s) {\n"
    "  x[0] = c; x[1] = s;\n"
    "}\n"
    "__kernel void with_local(__global float* x, __local float* tmp) {\n"
    "  tmp[0] = x[0]; x[0] = tmp[0];\n"
    "}\n";

static const char *k_broken_src =
    "__kernel void oops(__global float* x) { x[0] = this_is_not_declared; }\n";

typedef struct env {
  vm_device_t *dev;
  vm_registry_t *reg;
  vm_executable_t *exec;
  vm_machine_t *m;
} env_t;

/* name(p0 .. p<np-1>) { cl.kernel([%vm,] p0 .. p<np-1>); ret p0 } */
static void emit_run(vm_builder_t *b, uint32_t clk, const char *name, uint32_t np, int with_vm) {
  static const char *names[] = {"mod", "kern", "g", "l", "a0", "a1", "a2", "a3"};
  uint32_t f;
  ASSERT_OK(vm_builder_declare_function(b, name, np, names, &f));
  ASSERT_OK(vm_builder_begin_function(b, f));
  int64_t args[9];
  uint32_t n = 0;
  if (with_vm) args[n++] = VM_REG(VM_REG_VM);
  for (uint32_t i = 0; i < np; i++) args[n++] = VM_REG(i);
  ASSERT_OK(vm_builder_emit_call(b, VM_REG_VOID, clk, n, args));
  ASSERT_OK(vm_builder_emit_ret(b, 0));
  ASSERT_OK(vm_builder_end_function(b, 0));
}

static vm_executable_t *build_exec(void) {
  vm_builder_t *b = NULL;
  ASSERT_OK(vm_builder_create(&b));
  uint32_t clk;
  ASSERT_OK(vm_builder_declare_packed(b, "cl.kernel", &clk));
  ASSERT_OK(vm_builder_add_kernel(b, "m", k_module_src, "-cl-mad-enable"));
  ASSERT_OK(vm_builder_add_kernel(b, "broken", k_broken_src, ""));

  /* scale(x): everything but x from constants */
  uint32_t c_mod, c_kern, c_a, f;
  ASSERT_OK(vm_builder_const_string(b, "m", 1, &c_mod));
  ASSERT_OK(vm_builder_const_string(b, "scale", 5, &c_kern));
  ASSERT_OK(vm_builder_const_float(b, 2.5, &c_a));
  const char *px[] = {"x"};
  ASSERT_OK(vm_builder_declare_function(b, "scale", 1, px, &f));
  ASSERT_OK(vm_builder_begin_function(b, f));
  int64_t args[] = {VM_REG(VM_REG_VM), VM_CONSTI(c_mod), VM_CONSTI(c_kern), VM_REG(0),
                    VM_IMM(0),         VM_REG(0),        VM_CONSTI(c_a)};
  ASSERT_OK(vm_builder_emit_call(b, VM_REG_VOID, clk, 7, args));
  ASSERT_OK(vm_builder_emit_ret(b, 0));
  ASSERT_OK(vm_builder_end_function(b, 0));

  emit_run(b, clk, "run0", 4, 1);
  emit_run(b, clk, "run1", 5, 1);
  emit_run(b, clk, "run2", 6, 1);
  emit_run(b, clk, "run3", 7, 1);
  emit_run(b, clk, "run_novm", 6, 0);
  emit_run(b, clk, "run_short", 3, 1);

  vm_executable_t *exec = NULL;
  ASSERT_OK(vm_builder_finish(b, &exec));
  vm_builder_free(b);
  return exec;
}

static int setup(void **state) {
  env_t *e = calloc(1, sizeof(*e));
  if (!e) return -1;
  vm_status_t st = vmcl_device_open(NULL, NULL, &e->dev);
  if (!st) st = vm_registry_create(&e->reg);
  if (!st) st = vm_registry_add_builtins(e->reg);
  if (!st) st = vmcl_register_kernel_op(e->reg);
  if (st) {
    fprintf(stderr, "setup: %s\n", vm_status_message(st));
    vm_status_free(st);
    return -1;
  }
  e->exec = build_exec();
  vm_machine_config_t cfg;
  memset(&cfg, 0, sizeof(cfg));
  cfg.mode = test_exec_mode() ? VM_EXEC_COMPILED : VM_EXEC_BYTECODE;
  cfg.num_devices = 1;
  cfg.devices = &e->dev;
  cfg.registry = e->reg;
  st = vm_machine_create(e->exec, &cfg, &e->m);
  if (st) {
    fprintf(stderr, "setup: %s\n", vm_status_message(st));
    vm_status_free(st);
    return -1;
  }
  *state = e;
  return 0;
}

static int teardown(void **state) {
  env_t *e = *state;
  vm_machine_free(e->m);
  vm_executable_free(e->exec);
  vm_registry_free(e->reg);
  vm_device_destroy(e->dev);
  free(e);
  return 0;
}

/* ---- value helpers (each returns an owned value) ---- */

static vm_value_t str(const char *s) {
  vm_value_t v;
  ASSERT_OK(vm_string_new(s, (uint32_t)strlen(s), &v));
  return v;
}

static vm_value_t shape(uint32_t ndim, const int64_t *dims) {
  vm_value_t v;
  ASSERT_OK(vm_shape_new(dims, ndim, &v));
  return v;
}

/* A tensor on the OpenCL device holding data (nbytes of it). */
static vm_value_t cl_tensor(env_t *e, vm_dtype_t dt, uint32_t ndim, const int64_t *dims,
                            const void *data) {
  vm_value_t v;
  ASSERT_OK(vm_tensor_alloc(vm_machine_allocator(e->m, 0), dt, dims, ndim, &v));
  vm_tensor_t *t = vm_value_as_tensor(&v);
  if (data) {
    ASSERT_OK(e->dev->ops->copy_from_host(e->dev, t->storage->buffer, t->offset, data,
                                          vm_tensor_nbytes_of(t)));
  }
  return v;
}

static void read_back(env_t *e, const vm_value_t *v, void *dst) {
  const vm_tensor_t *t = vm_value_as_tensor(v);
  assert_non_null(t);
  ASSERT_OK(e->dev->ops->copy_to_host(e->dev, dst, t->storage->buffer, t->offset,
                                      vm_tensor_nbytes_of(t)));
}

static void release_all(vm_value_t *vals, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) vm_value_release(&vals[i]);
}

/* Invokes fn with args; on success the result is released. */
static vm_status_t call(env_t *e, const char *fn, vm_value_t *args, uint32_t n) {
  vm_value_t out = vm_value_none();
  vm_status_t st = vm_machine_invoke(e->m, fn, args, n, &out);
  vm_value_release(&out);
  return st;
}

/* ---------------------------------------------------------------------------
 * Tests
 */

static void test_scale_from_constants(void **state) {
  env_t *e = *state;
  enum { N = 100 };
  float host[N], back[N];
  for (int i = 0; i < N; i++) host[i] = (float)i;
  int64_t dims[] = {N};
  vm_value_t x = cl_tensor(e, VM_F32, 1, dims, host);
  vm_value_t out = vm_value_none();
  ASSERT_OK(vm_machine_invoke(e->m, "scale", &x, 1, &out));
  assert_ptr_equal(vm_value_as_tensor(&out), vm_value_as_tensor(&x));
  vm_value_release(&out);
  read_back(e, &x, back);
  for (int i = 0; i < N; i++) assert_true(back[i] == (float)i * 2.5f);

  /* the program was built once; later calls hit the cache */
  vmcl_cache_stats_t s0, s1;
  vmcl_cache_stats(e->dev, &s0);
  ASSERT_OK(vm_machine_invoke(e->m, "scale", &x, 1, &out));
  vm_value_release(&out);
  vmcl_cache_stats(e->dev, &s1);
  assert_int_equal(s1.builds, s0.builds);
  assert_int_equal(s1.memory_hits, s0.memory_hits + 1);
  read_back(e, &x, back);
  for (int i = 0; i < N; i++) assert_true(back[i] == (float)i * 6.25f);
  vm_value_release(&x);
}

static void test_int_uint_long_float_args(void **state) {
  env_t *e = *state;
  enum { N = 8 };
  int64_t dims[] = {N};
  vm_value_t a[6];

  /* int -> int, global size as an int, local as an int */
  a[0] = str("m");
  a[1] = str("fill_i");
  a[2] = vm_value_int(N);
  a[3] = vm_value_int(4);
  a[4] = cl_tensor(e, VM_I32, 1, dims, NULL);
  a[5] = vm_value_int(-7);
  ASSERT_OK(call(e, "run2", a, 6));
  int32_t iv[N];
  read_back(e, &a[4], iv);
  for (int i = 0; i < N; i++) assert_int_equal(iv[i], -7 + i);
  /* a bool is an int too */
  vm_value_release(&a[5]);
  a[5] = vm_value_bool(1);
  ASSERT_OK(call(e, "run2", a, 6));
  read_back(e, &a[4], iv);
  assert_int_equal(iv[3], 4);

  /* uint: the full 32-bit range */
  vm_value_release(&a[1]);
  a[1] = str("fill_u");
  a[5] = vm_value_int(4000000000LL);
  ASSERT_OK(call(e, "run2", a, 6));
  uint32_t uv[N];
  read_back(e, &a[4], uv);
  assert_int_equal(uv[N - 1], 4000000000u);

  /* an int too wide for a 32-bit parameter */
  a[5] = vm_value_int(1LL << 40);
  ASSERT_STATUS(call(e, "run2", a, 6), VM_INVALID_ARGUMENT, "32-bit");
  vm_value_release(&a[4]);

  /* long parameter: the 8-byte form, also for small values */
  vm_value_release(&a[1]);
  a[1] = str("fill_l");
  a[4] = cl_tensor(e, VM_I64, 1, dims, NULL);
  a[5] = vm_value_int(-(1LL << 40));
  ASSERT_OK(call(e, "run2", a, 6));
  int64_t lv[N];
  read_back(e, &a[4], lv);
  for (int i = 0; i < N; i++) assert_true(lv[i] == -(1LL << 40));
  a[5] = vm_value_int(3);
  ASSERT_OK(call(e, "run2", a, 6));
  read_back(e, &a[4], lv);
  assert_true(lv[0] == 3);

  /* a string is no kernel argument */
  a[5] = str("x");
  ASSERT_STATUS(call(e, "run2", a, 6), VM_INVALID_ARGUMENT, "kernel argument 1 is string");
  release_all(a, 6);
}

static void test_work_sizes(void **state) {
  env_t *e = *state;
  enum { W = 8, H = 4 };
  int64_t dims[] = {H, W};
  vm_value_t a[6];
  int64_t g[] = {W, H}, l[] = {4, 2};
  a[0] = str("m");
  a[1] = str("grid");
  a[2] = shape(2, g);
  a[3] = shape(2, l);
  a[4] = cl_tensor(e, VM_F32, 2, dims, NULL);
  a[5] = vm_value_int(W);
  ASSERT_OK(call(e, "run2", a, 6));
  float back[H * W];
  read_back(e, &a[4], back);
  for (int j = 0; j < H; j++)
    for (int i = 0; i < W; i++) assert_true(back[j * W + i] == (float)(j * 100 + i));

  /* none as local size: the driver picks */
  vm_value_release(&a[3]);
  ASSERT_OK(call(e, "run2", a, 6));

  /* local dims must match global dims */
  int64_t l1[] = {4};
  a[3] = shape(1, l1);
  ASSERT_STATUS(call(e, "run2", a, 6), VM_INVALID_ARGUMENT,
                "local_size has 1 dims, global_size has 2");
  vm_value_release(&a[3]);
  /* a local size that does not divide the global size: the launch fails */
  int64_t l3[] = {3, 3};
  a[3] = shape(2, l3);
  ASSERT_STATUS(call(e, "run2", a, 6), VM_INVALID_ARGUMENT, "clEnqueueNDRangeKernel");
  vm_value_release(&a[3]);
  a[3] = vm_value_int(0);

  /* 4 dims are too many; a string is no size */
  int64_t g4[] = {1, 1, 1, 1};
  vm_value_release(&a[2]);
  a[2] = shape(4, g4);
  ASSERT_STATUS(call(e, "run2", a, 6), VM_INVALID_ARGUMENT, "global_size has 4 dims");
  vm_value_release(&a[2]);
  a[2] = str("big");
  ASSERT_STATUS(call(e, "run2", a, 6), VM_INVALID_ARGUMENT, "global_size must be");
  vm_value_release(&a[2]);
  a[2] = vm_value_int(-1);
  ASSERT_STATUS(call(e, "run2", a, 6), VM_INVALID_ARGUMENT, "global_size dim 0 is -1");
  /* an empty range runs nothing and is fine */
  a[2] = vm_value_int(0);
  ASSERT_OK(call(e, "run2", a, 6));
  release_all(a, 6);

  /* the global size taken from an output tensor's shape */
  enum { N = 32 };
  float ones[N], xs[N];
  for (int i = 0; i < N; i++) {
    ones[i] = 1.0f;
    xs[i] = (float)i;
  }
  int64_t n1[] = {N};
  vm_value_t b[7];
  b[0] = str("m");
  b[1] = str("axpy");
  b[4] = cl_tensor(e, VM_F32, 1, n1, ones);
  b[2] = b[4];
  vm_value_retain(&b[2]);
  b[3] = vm_value_none();
  b[5] = cl_tensor(e, VM_F32, 1, n1, xs);
  b[6] = vm_value_float(3.0);
  ASSERT_OK(call(e, "run3", b, 7));
  float y[N];
  read_back(e, &b[4], y);
  for (int i = 0; i < N; i++) assert_true(y[i] == 3.0f * (float)i + 1.0f);

  /* and without the leading %vm */
  vm_value_t c[6] = {b[0], b[1], b[2], b[3], b[4], b[6]};
  vm_value_release(&c[1]);
  c[1] = str("scale");
  b[1] = c[1];
  ASSERT_OK(call(e, "run_novm", c, 6));
  read_back(e, &b[4], y);
  for (int i = 0; i < N; i++) assert_true(y[i] == 3.0f * (3.0f * (float)i + 1.0f));
  release_all(b, 7);
}

static void test_tensor_offsets(void **state) {
  env_t *e = *state;
  vmcl_dev_t *d = vmcl_get(e->dev);
  cl_uint align_bits = 0;
  assert_int_equal(clGetDeviceInfo(d->device, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof(align_bits),
                                   &align_bits, NULL),
                   CL_SUCCESS);
  uint64_t align = align_bits / 8;
  enum { N = 16 };
  uint64_t total = align + N * sizeof(float) * 2;
  vm_value_t sv;
  ASSERT_OK(vm_storage_alloc(vm_machine_allocator(e->m, 0), total, &sv));
  vm_storage_t *storage = vm_value_as_storage(&sv);
  float *init = calloc(1, total);
  assert_non_null(init);
  for (uint64_t i = 0; i < total / sizeof(float); i++) init[i] = 1.0f;
  ASSERT_OK(e->dev->ops->copy_from_host(e->dev, storage->buffer, 0, init, total));

  /* a view at an aligned offset goes in as a sub-buffer */
  int64_t dims[] = {N};
  vm_value_t a[6];
  a[0] = str("m");
  a[1] = str("scale");
  a[2] = vm_value_int(N);
  a[3] = vm_value_none();
  ASSERT_OK(vm_tensor_new(storage, align, VM_F32, dims, 1, &a[4]));
  a[5] = vm_value_float(4.0);
  ASSERT_OK(call(e, "run2", a, 6));
  float *back = calloc(1, total);
  assert_non_null(back);
  ASSERT_OK(e->dev->ops->copy_to_host(e->dev, back, storage->buffer, 0, total));
  for (uint64_t i = 0; i < total / sizeof(float); i++) {
    uint64_t byte = i * sizeof(float);
    float want = byte >= align && byte < align + N * sizeof(float) ? 4.0f : 1.0f;
    assert_true(back[i] == want);
  }
  vm_value_release(&a[4]);

  /* an unaligned view is refused, naming the alignment */
  ASSERT_OK(vm_tensor_new(storage, 4, VM_F32, dims, 1, &a[4]));
  char want[64];
  snprintf(want, sizeof(want), "(%llu bytes)", (unsigned long long)align);
  ASSERT_STATUS(call(e, "run2", a, 6), VM_INVALID_ARGUMENT, want);
  release_all(a, 6);
  vm_value_release(&sv);
  free(back);
  free(init);
}

static void test_errors(void **state) {
  env_t *e = *state;
  int64_t dims[] = {4};
  vm_value_t a[6];
  a[0] = str("no_such_module");
  a[1] = str("scale");
  a[2] = vm_value_int(4);
  a[3] = vm_value_none();
  a[4] = cl_tensor(e, VM_F32, 1, dims, NULL);
  a[5] = vm_value_float(1.0);
  ASSERT_STATUS(call(e, "run2", a, 6), VM_NOT_FOUND,
                "executable carries no kernel module 'no_such_module'");

  /* unknown kernel in a module that builds */
  vm_value_release(&a[0]);
  a[0] = str("m");
  vm_value_release(&a[1]);
  a[1] = str("no_such_kernel");
  ASSERT_STATUS(call(e, "run2", a, 6), VM_NOT_FOUND, "no kernel 'no_such_kernel'");

  /* a module that does not build: the build log is in the message */
  vm_value_release(&a[0]);
  a[0] = str("broken");
  vm_value_release(&a[1]);
  a[1] = str("oops");
  ASSERT_STATUS(call(e, "run2", a, 6), VM_INVALID_ARGUMENT, "this_is_not_declared");

  /* wrong number of kernel arguments */
  vm_value_release(&a[0]);
  a[0] = str("m");
  vm_value_release(&a[1]);
  a[1] = str("scale");
  ASSERT_STATUS(call(e, "run1", a, 5), VM_INVALID_ARGUMENT, "takes 2 arguments, got 1");
  ASSERT_STATUS(call(e, "run3", (vm_value_t[]){a[0], a[1], a[2], a[3], a[4], a[5], a[5]}, 7),
                VM_INVALID_ARGUMENT, "takes 2 arguments, got 3");
  /* no kernel arguments at all (fine for the operator, not for the kernel);
   * names that are not strings */
  ASSERT_STATUS(call(e, "run0", (vm_value_t[]){a[0], a[1], a[2], a[2]}, 4), VM_INVALID_ARGUMENT,
                "takes 2 arguments, got 0");
  ASSERT_STATUS(call(e, "run_short", a, 3), VM_INVALID_ARGUMENT,
                "cl.kernel takes (module, kernel, global_size, local_size, args...), got 3");
  ASSERT_STATUS(call(e, "run2", (vm_value_t[]){a[2], a[1], a[2], a[3], a[4], a[5]}, 6),
                VM_INVALID_ARGUMENT, "must be strings");

  /* a tensor on the cpu device */
  vm_value_t host_t;
  uint32_t cpu = vm_machine_cpu_device_index(e->m);
  ASSERT_OK(vm_tensor_alloc(vm_machine_allocator(e->m, cpu), VM_F32, dims, 1, &host_t));
  vm_value_t b[6] = {a[0], a[1], a[2], a[3], host_t, a[5]};
  ASSERT_STATUS(call(e, "run2", b, 6), VM_INVALID_ARGUMENT, "OpenCL device");
  vm_value_t b2[7] = {a[0], str("axpy"), a[2], a[3], a[4], host_t, a[5]};
  ASSERT_STATUS(call(e, "run3", b2, 7), VM_INVALID_ARGUMENT,
                "kernel argument 1 is a tensor on cpu");
  vm_value_release(&b2[1]);
  vm_value_release(&host_t);

  /* the machine still works after every failure */
  vm_value_t ok[6] = {a[0], a[1], a[2], a[3], a[4], a[5]};
  ASSERT_OK(call(e, "run2", ok, 6));
  release_all(a, 6);
}

/* Every value must match what the kernel's parameter is, as the driver
 * reports it: a number where a kernel wants a buffer would otherwise reach
 * the driver as a cl_mem (a crash inside the OpenCL library). */
static void test_argument_types(void **state) {
  env_t *e = *state;
  int64_t dims[] = {4};
  vm_value_t a[6];
  a[0] = str("m");
  a[1] = str("fill_i");
  a[2] = vm_value_int(4);
  a[3] = vm_value_none();
  a[4] = vm_value_int(0x4141414141LL); /* a number for __global int* */
  a[5] = vm_value_int(1);
  ASSERT_STATUS(call(e, "run2", a, 6), VM_INVALID_ARGUMENT,
                "cl.kernel 'm.fill_i' argument 0 is int, the kernel's parameter is int*; pass a "
                "tensor");
  a[4] = vm_value_int(7);
  ASSERT_STATUS(call(e, "run2", a, 6), VM_INVALID_ARGUMENT, "argument 0 is int");
  a[4] = vm_value_float(1e300);
  ASSERT_STATUS(call(e, "run2", a, 6), VM_INVALID_ARGUMENT,
                "argument 0 is float, the kernel's parameter is int*");
  a[4] = vm_value_bool(1);
  ASSERT_STATUS(call(e, "run2", a, 6), VM_INVALID_ARGUMENT, "argument 0 is bool");

  /* a tensor where the kernel wants a number */
  a[4] = cl_tensor(e, VM_I32, 1, dims, NULL);
  vm_value_t t2 = cl_tensor(e, VM_I32, 1, dims, NULL);
  vm_value_t b[6] = {a[0], a[1], a[2], a[3], a[4], t2};
  ASSERT_STATUS(call(e, "run2", b, 6), VM_INVALID_ARGUMENT,
                "cl.kernel 'm.fill_i' argument 1 is tensor, the kernel's parameter is int; "
                "pass a number");
  /* a float for an integer parameter */
  a[5] = vm_value_float(2.5);
  ASSERT_STATUS(call(e, "run2", a, 6), VM_INVALID_ARGUMENT,
                "argument 1 is a float, the kernel's parameter is int; pass an int");

  /* narrow parameters take exactly their width */
  vm_value_release(&a[1]);
  a[1] = str("narrow");
  vm_value_t n[7] = {a[0], a[1], a[2], a[3], a[4], vm_value_int(-5), vm_value_int(65535)};
  ASSERT_OK(call(e, "run3", n, 7));
  int32_t back[4];
  read_back(e, &a[4], back);
  assert_int_equal(back[0], -5);
  assert_int_equal(back[1], 65535);
  n[5] = vm_value_int(300);
  ASSERT_STATUS(call(e, "run3", n, 7), VM_INVALID_ARGUMENT,
                "argument 1: 300 does not fit the kernel's 8-bit parameter (char)");
  n[5] = vm_value_int(1);
  n[6] = vm_value_int(70000);
  ASSERT_STATUS(call(e, "run3", n, 7), VM_INVALID_ARGUMENT,
                "argument 2: 70000 does not fit the kernel's 16-bit parameter (ushort)");

  /* parameters cl.kernel cannot fill */
  vm_value_t f = cl_tensor(e, VM_F32, 1, dims, NULL);
  vm_value_t l[6] = {a[0], str("with_local"), a[2], a[3], f, t2};
  ASSERT_STATUS(call(e, "run2", l, 6), VM_INVALID_ARGUMENT,
                "cl.kernel 'm.with_local' argument 1 is a parameter of type float*; cl.kernel "
                "passes only __global or __constant pointers (tensors) and scalar numbers");
  l[5] = vm_value_int(64);
  ASSERT_STATUS(call(e, "run2", l, 6), VM_INVALID_ARGUMENT, "argument 1 is a parameter of type");
  vm_value_release(&l[1]);

  /* an int for a float parameter is converted */
  vm_value_t sc[6] = {a[0], str("scale"), a[2], a[3], f, vm_value_int(3)};
  ASSERT_OK(call(e, "run2", sc, 6));
  vm_value_release(&sc[1]);

  /* the machine still works after every refusal */
  vm_value_t ok[6] = {a[0], str("fill_i"), a[2], a[3], a[4], vm_value_int(9)};
  ASSERT_OK(call(e, "run2", ok, 6));
  read_back(e, &a[4], back);
  assert_int_equal(back[3], 12);
  vm_value_release(&ok[1]);
  vm_value_release(&f);
  vm_value_release(&t2);
  release_all(a, 6);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_argument_types),           cmocka_unit_test(test_scale_from_constants),
      cmocka_unit_test(test_int_uint_long_float_args), cmocka_unit_test(test_work_sizes),
      cmocka_unit_test(test_tensor_offsets),           cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
