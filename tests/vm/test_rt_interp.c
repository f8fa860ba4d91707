/* The interpreter: control flow, calls, recursion and its limit,
 * cancellation and deadlines, missing builtins, error annotation,
 * instrumentation and argument kinds. Runs once per execution mode
 * (VMRPC_EXEC_MODE), and every test must give the same result in both. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "test_util.h"
#include "vm/vm.h"

/* ------------------------------------------------------------------ builtins */

static vm_status_t need_ints(const vm_value_t *args, uint32_t nargs, uint32_t want,
                             const char *who) {
  if (nargs != want)
    return vm_status_make(VM_INVALID_ARGUMENT, "%s takes %u args, got %u", who, want, nargs);
  for (uint32_t i = 0; i < nargs; i++)
    if (args[i].kind != VM_VAL_INT)
      return vm_status_make(VM_INVALID_ARGUMENT, "%s: arg %u is a %s", who, i,
                            vm_value_kind_name(args[i].kind));
  return VM_STATUS_OK;
}

static vm_status_t b_add(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                         void *user) {
  VM_RETURN_IF_ERROR(need_ints(args, nargs, 2, "test.add"));
  *out = vm_value_int(args[0].u.i + args[1].u.i);
  return VM_STATUS_OK;
}

static vm_status_t b_less(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                          void *user) {
  VM_RETURN_IF_ERROR(need_ints(args, nargs, 2, "test.less"));
  *out = vm_value_bool(args[0].u.i < args[1].u.i);
  return VM_STATUS_OK;
}

static vm_status_t b_noop(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                          void *user) {
  return VM_STATUS_OK;
}

/* Sums any number of ints. */
static vm_status_t b_sum(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                         void *user) {
  int64_t s = 0;
  for (uint32_t i = 0; i < nargs; i++) {
    if (args[i].kind != VM_VAL_INT)
      return vm_status_make(VM_INVALID_ARGUMENT, "test.sum: arg %u is not an int", i);
    s += args[i].u.i * (int64_t)(i + 1);
  }
  *out = vm_value_int(s);
  return VM_STATUS_OK;
}

static vm_status_t b_fail(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                          void *user) {
  return vm_status_make(VM_OUT_OF_RANGE, "boom");
}

/* Returns its argument (a new reference). */
static vm_status_t b_id(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                        void *user) {
  if (nargs != 1) return vm_status_make(VM_INVALID_ARGUMENT, "test.id takes 1 arg");
  *out = args[0];
  vm_value_retain(out);
  return VM_STATUS_OK;
}

static vm_status_t b_string(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                            vm_value_t *out, void *user) {
  return vm_string_new("a fresh string", 14, out);
}

/* 1 if args[0] is %vm, the machine running the call. */
static vm_status_t b_is_vm(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                           void *user) {
  *out = vm_value_int(nargs == 1 && args[0].kind == VM_VAL_OPAQUE && args[0].u.ptr == m);
  return VM_STATUS_OK;
}

/* Calls args[0] (a function value) with the remaining args. */
static vm_status_t b_apply(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                           void *user) {
  if (nargs < 1) return vm_status_make(VM_INVALID_ARGUMENT, "test.apply needs a callee");
  return vm_machine_call_value(m, &args[0], args + 1, nargs - 1, out);
}

/* Describes its args as a string "int:3,float:1.5,string:hi,func:2,dtype,none". */
static vm_status_t b_describe(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                              vm_value_t *out, void *user) {
  char buf[512];
  size_t at = 0;
  buf[0] = '\0';
  for (uint32_t i = 0; i < nargs; i++) {
    const vm_value_t *a = &args[i];
    const char *sep = i ? "," : "";
    switch (a->kind) {
      case VM_VAL_INT:
        at += (size_t)snprintf(buf + at, sizeof(buf) - at, "%sint:%lld", sep, (long long)a->u.i);
        break;
      case VM_VAL_FLOAT:
        at += (size_t)snprintf(buf + at, sizeof(buf) - at, "%sfloat:%g", sep, a->u.f);
        break;
      case VM_VAL_FUNC:
        at += (size_t)snprintf(buf + at, sizeof(buf) - at, "%sfunc:%lld", sep, (long long)a->u.i);
        break;
      case VM_VAL_STRING:
        at += (size_t)snprintf(buf + at, sizeof(buf) - at, "%sstring:%s", sep,
                               vm_value_as_string(a)->data);
        break;
      case VM_VAL_SHAPE:
        at += (size_t)snprintf(buf + at, sizeof(buf) - at, "%sshape:%u", sep,
                               vm_value_as_shape(a)->ndim);
        break;
      case VM_VAL_TENSOR:
        at += (size_t)snprintf(buf + at, sizeof(buf) - at, "%stensor:%u", sep,
                               vm_value_as_tensor(a)->ndim);
        break;
      default:
        at +=
            (size_t)snprintf(buf + at, sizeof(buf) - at, "%s%s", sep, vm_value_kind_name(a->kind));
        break;
    }
  }
  return vm_string_new(buf, (uint32_t)strlen(buf), out);
}

static vm_registry_t *make_registry(void) {
  vm_registry_t *r;
  ASSERT_OK(vm_registry_create(&r));
  ASSERT_OK(vm_registry_add(r, "test.add", b_add, NULL));
  ASSERT_OK(vm_registry_add(r, "test.less", b_less, NULL));
  ASSERT_OK(vm_registry_add(r, "test.noop", b_noop, NULL));
  ASSERT_OK(vm_registry_add(r, "test.sum", b_sum, NULL));
  ASSERT_OK(vm_registry_add(r, "test.fail", b_fail, NULL));
  ASSERT_OK(vm_registry_add(r, "test.id", b_id, NULL));
  ASSERT_OK(vm_registry_add(r, "test.string", b_string, NULL));
  ASSERT_OK(vm_registry_add(r, "test.is_vm", b_is_vm, NULL));
  ASSERT_OK(vm_registry_add(r, "test.apply", b_apply, NULL));
  ASSERT_OK(vm_registry_add(r, "test.describe", b_describe, NULL));
  return r;
}

/* ------------------------------------------------------------------ fixture */

typedef struct fx {
  vm_registry_t *reg;
  vm_builder_t *b;
  vm_executable_t *exec;
  vm_machine_t *m;
  uint32_t p_add, p_less, p_noop, p_sum, p_fail, p_id, p_string, p_is_vm, p_apply, p_describe;
} fx_t;

static int fx_setup(void **state) {
  fx_t *f = calloc(1, sizeof(*f));
  f->reg = make_registry();
  ASSERT_OK(vm_builder_create(&f->b));
  ASSERT_OK(vm_builder_declare_packed(f->b, "test.add", &f->p_add));
  ASSERT_OK(vm_builder_declare_packed(f->b, "test.less", &f->p_less));
  ASSERT_OK(vm_builder_declare_packed(f->b, "test.noop", &f->p_noop));
  ASSERT_OK(vm_builder_declare_packed(f->b, "test.sum", &f->p_sum));
  ASSERT_OK(vm_builder_declare_packed(f->b, "test.fail", &f->p_fail));
  ASSERT_OK(vm_builder_declare_packed(f->b, "test.id", &f->p_id));
  ASSERT_OK(vm_builder_declare_packed(f->b, "test.string", &f->p_string));
  ASSERT_OK(vm_builder_declare_packed(f->b, "test.is_vm", &f->p_is_vm));
  ASSERT_OK(vm_builder_declare_packed(f->b, "test.apply", &f->p_apply));
  ASSERT_OK(vm_builder_declare_packed(f->b, "test.describe", &f->p_describe));
  *state = f;
  return 0;
}

static int fx_teardown(void **state) {
  fx_t *f = *state;
  vm_machine_free(f->m);
  vm_executable_free(f->exec);
  vm_builder_free(f->b);
  vm_registry_free(f->reg);
  free(f);
  return 0;
}

static vm_machine_config_t config(const vm_registry_t *reg) {
  vm_machine_config_t c;
  memset(&c, 0, sizeof(c));
  c.mode = test_exec_mode() ? VM_EXEC_COMPILED : VM_EXEC_BYTECODE;
  c.registry = reg;
  return c;
}

/* Finishes the builder and creates the machine (default config). */
static void fx_machine(fx_t *f) {
  ASSERT_OK(vm_builder_finish(f->b, &f->exec));
  vm_machine_config_t c = config(f->reg);
  ASSERT_OK(vm_machine_create(f->exec, &c, &f->m));
}

static void call2(vm_builder_t *b, int64_t dst, uint32_t fn, int64_t a0, int64_t a1) {
  int64_t a[2] = {a0, a1};
  ASSERT_OK(vm_builder_emit_call(b, dst, fn, 2, a));
}
static void call1(vm_builder_t *b, int64_t dst, uint32_t fn, int64_t a0) {
  ASSERT_OK(vm_builder_emit_call(b, dst, fn, 1, &a0));
}

static int64_t invoke_int1(vm_machine_t *m, const char *fn, int64_t x) {
  vm_value_t arg = vm_value_int(x), out;
  ASSERT_OK(vm_machine_invoke(m, fn, &arg, 1, &out));
  assert_int_equal(out.kind, VM_VAL_INT);
  return out.u.i;
}

/* sum(n) = 0 + 1 + ... + (n-1) with a backward Goto loop. */
static void emit_sum_loop(fx_t *f) {
  uint32_t fn;
  const char *p[] = {"n"};
  ASSERT_OK(vm_builder_declare_function(f->b, "sum", 1, p, &fn));
  ASSERT_OK(vm_builder_begin_function(f->b, fn));
  vm_label_t head = vm_builder_new_label(f->b), done = vm_builder_new_label(f->b);
  call2(f->b, 1, f->p_add, VM_IMM(0), VM_IMM(0)); /* i = 0 */
  call2(f->b, 2, f->p_add, VM_IMM(0), VM_IMM(0)); /* s = 0 */
  ASSERT_OK(vm_builder_bind_label(f->b, head));
  call2(f->b, 3, f->p_less, VM_REG(1), VM_REG(0));
  ASSERT_OK(vm_builder_emit_if(f->b, 3, done));
  call2(f->b, 2, f->p_add, VM_REG(2), VM_REG(1));
  call2(f->b, 1, f->p_add, VM_REG(1), VM_IMM(1));
  ASSERT_OK(vm_builder_emit_goto(f->b, head));
  ASSERT_OK(vm_builder_bind_label(f->b, done));
  ASSERT_OK(vm_builder_emit_ret(f->b, 2));
  ASSERT_OK(vm_builder_end_function(f->b, 0));
}

/* count(n) = n, recursing n deep: if 0 < n: return count(n - 1) + 1. */
static void emit_countdown(fx_t *f) {
  uint32_t fn;
  ASSERT_OK(vm_builder_declare_function(f->b, "count", 1, NULL, &fn));
  ASSERT_OK(vm_builder_begin_function(f->b, fn));
  vm_label_t base = vm_builder_new_label(f->b);
  call2(f->b, 1, f->p_less, VM_IMM(0), VM_REG(0));
  ASSERT_OK(vm_builder_emit_if(f->b, 1, base));
  call2(f->b, 2, f->p_add, VM_REG(0), VM_IMM(-1));
  call1(f->b, 3, fn, VM_REG(2));
  call2(f->b, 3, f->p_add, VM_REG(3), VM_IMM(1));
  ASSERT_OK(vm_builder_emit_ret(f->b, 3));
  ASSERT_OK(vm_builder_bind_label(f->b, base));
  ASSERT_OK(vm_builder_emit_ret(f->b, 0));
  ASSERT_OK(vm_builder_end_function(f->b, 0));
}

/* fib(n) = n < 2 ? n : fib(n-1) + fib(n-2) */
static void emit_fib(fx_t *f) {
  uint32_t fn;
  ASSERT_OK(vm_builder_declare_function(f->b, "fib", 1, NULL, &fn));
  ASSERT_OK(vm_builder_begin_function(f->b, fn));
  vm_label_t rec = vm_builder_new_label(f->b);
  call2(f->b, 1, f->p_less, VM_REG(0), VM_IMM(2));
  ASSERT_OK(vm_builder_emit_if(f->b, 1, rec));
  ASSERT_OK(vm_builder_emit_ret(f->b, 0));
  ASSERT_OK(vm_builder_bind_label(f->b, rec));
  call2(f->b, 2, f->p_add, VM_REG(0), VM_IMM(-1));
  call1(f->b, 2, fn, VM_REG(2));
  call2(f->b, 3, f->p_add, VM_REG(0), VM_IMM(-2));
  call1(f->b, 3, fn, VM_REG(3));
  call2(f->b, 4, f->p_add, VM_REG(2), VM_REG(3));
  ASSERT_OK(vm_builder_emit_ret(f->b, 4));
  ASSERT_OK(vm_builder_end_function(f->b, 0));
}

/* -------------------------------------------------------------------- tests */

static void test_mode_names(void **state) {
  vm_exec_mode_t mode;
  assert_string_equal(vm_exec_mode_name(VM_EXEC_BYTECODE), "bytecode");
  assert_string_equal(vm_exec_mode_name(VM_EXEC_COMPILED), "compiled");
  assert_int_equal(vm_exec_mode_parse("compiled", &mode), 0);
  assert_int_equal(mode, VM_EXEC_COMPILED);
  assert_int_equal(vm_exec_mode_parse("bytecode", &mode), 0);
  assert_int_equal(mode, VM_EXEC_BYTECODE);
  assert_int_equal(vm_exec_mode_parse("jit", &mode), -1);
}

static void test_registry(void **state) {
  vm_registry_t *r;
  ASSERT_OK(vm_registry_create(&r));
  char name[32];
  for (int i = 0; i < 500; i++) {
    snprintf(name, sizeof(name), "fn.%d", i);
    ASSERT_OK(vm_registry_add(r, name, b_noop, (void *)(intptr_t)(i + 1)));
  }
  ASSERT_STATUS(vm_registry_add(r, "fn.7", b_add, NULL), VM_ALREADY_EXISTS, "fn.7");
  for (int i = 0; i < 500; i++) {
    snprintf(name, sizeof(name), "fn.%d", i);
    vm_packed_fn fn = NULL;
    void *user = NULL;
    assert_int_equal(vm_registry_find(r, name, &fn, &user), 0);
    assert_ptr_equal(fn, b_noop);
    assert_int_equal((intptr_t)user, i + 1);
  }
  assert_int_equal(vm_registry_find(r, "fn.500", NULL, NULL), -1);
  vm_registry_free(r);
}

static void test_machine_basics(void **state) {
  fx_t *f = *state;
  emit_sum_loop(f);
  fx_machine(f);
  assert_int_equal(vm_machine_mode(f->m), test_exec_mode() ? VM_EXEC_COMPILED : VM_EXEC_BYTECODE);
  assert_ptr_equal(vm_machine_executable(f->m), f->exec);
  /* no device given: a cpu device is appended, with an allocator */
  assert_int_equal(vm_machine_num_devices(f->m), 1);
  assert_int_equal(vm_machine_cpu_device_index(f->m), 0);
  assert_non_null(vm_machine_device(f->m, 0));
  assert_int_equal(vm_machine_device(f->m, 0)->type, VM_DEVICE_CPU);
  assert_non_null(vm_machine_allocator(f->m, 0));
  assert_int_equal(vm_allocator_kind(vm_machine_allocator(f->m, 0)), VM_ALLOC_POOLED);
  assert_null(vm_machine_device(f->m, 1));
  assert_null(vm_machine_allocator(f->m, 1));
}

static void test_given_cpu_device_and_naive_allocator(void **state) {
  fx_t *f = *state;
  emit_sum_loop(f);
  ASSERT_OK(vm_builder_finish(f->b, &f->exec));
  vm_device_t *dev;
  ASSERT_OK(vm_cpu_device_create(0, &dev));
  vm_device_t *devs[1] = {dev};
  vm_allocator_kind_t kinds[1] = {VM_ALLOC_NAIVE};
  vm_machine_config_t c = config(f->reg);
  c.num_devices = 1;
  c.devices = devs;
  c.allocators = kinds;
  ASSERT_OK(vm_machine_create(f->exec, &c, &f->m));
  assert_int_equal(vm_machine_num_devices(f->m), 1);
  assert_ptr_equal(vm_machine_device(f->m, 0), dev);
  assert_int_equal(vm_allocator_kind(vm_machine_allocator(f->m, 0)), VM_ALLOC_NAIVE);
  assert_int_equal(invoke_int1(f->m, "sum", 10), 45);
  vm_machine_free(f->m);
  f->m = NULL;
  vm_device_destroy(dev);
}

static void test_arith_loop(void **state) {
  fx_t *f = *state;
  emit_sum_loop(f);
  fx_machine(f);
  assert_int_equal(invoke_int1(f->m, "sum", 0), 0);
  assert_int_equal(invoke_int1(f->m, "sum", 1), 0);
  assert_int_equal(invoke_int1(f->m, "sum", 100), 4950);
  assert_int_equal(invoke_int1(f->m, "sum", 100000), (int64_t)100000 * 99999 / 2);
}

static void test_recursion(void **state) {
  fx_t *f = *state;
  emit_countdown(f);
  emit_fib(f);
  fx_machine(f);
  assert_int_equal(invoke_int1(f->m, "fib", 0), 0);
  assert_int_equal(invoke_int1(f->m, "fib", 1), 1);
  assert_int_equal(invoke_int1(f->m, "fib", 20), 6765);
  assert_int_equal(invoke_int1(f->m, "count", 10), 10);
  /* 1001 frames fit the default limit of 1024 */
  assert_int_equal(invoke_int1(f->m, "count", 1000), 1000);
  assert_int_equal(invoke_int1(f->m, "count", 1023), 1023);
  vm_value_t arg = vm_value_int(1024), out;
  ASSERT_STATUS(vm_machine_invoke(f->m, "count", &arg, 1, &out), VM_RESOURCE_EXHAUSTED,
                "call depth limit of 1024 exceeded");
  assert_int_equal(out.kind, VM_VAL_NONE);
  arg = vm_value_int(100000);
  ASSERT_STATUS(vm_machine_invoke(f->m, "count", &arg, 1, &out), VM_RESOURCE_EXHAUSTED,
                "in function 'count' at pc 3 (call count): call depth limit of 1024 exceeded");
  /* the machine is usable after the unwind */
  assert_int_equal(invoke_int1(f->m, "count", 500), 500);
}

static void test_depth_limit_config(void **state) {
  fx_t *f = *state;
  emit_countdown(f);
  ASSERT_OK(vm_builder_finish(f->b, &f->exec));
  vm_machine_config_t c = config(f->reg);
  c.max_call_depth = 10;
  ASSERT_OK(vm_machine_create(f->exec, &c, &f->m));
  assert_int_equal(invoke_int1(f->m, "count", 9), 9);
  vm_value_t arg = vm_value_int(10), out;
  ASSERT_STATUS(vm_machine_invoke(f->m, "count", &arg, 1, &out), VM_RESOURCE_EXHAUSTED,
                "call depth limit of 10 exceeded");
}

/* A function with the largest register file the default limits allow (a
 * whole register stack chunk), recursing, so frames span several chunks. */
static void test_big_register_files(void **state) {
  fx_t *f = *state;
  uint32_t fn;
  ASSERT_OK(vm_builder_declare_function(f->b, "big", 1, NULL, &fn));
  ASSERT_OK(vm_builder_begin_function(f->b, fn));
  vm_label_t base = vm_builder_new_label(f->b);
  call2(f->b, 1, f->p_less, VM_IMM(0), VM_REG(0));
  ASSERT_OK(vm_builder_emit_if(f->b, 1, base));
  call2(f->b, 2, f->p_add, VM_REG(0), VM_IMM(-1));
  call1(f->b, 65535, f->p_string, VM_REG(2)); /* an object in the last register */
  call1(f->b, 3, fn, VM_REG(2));
  call2(f->b, 3, f->p_add, VM_REG(3), VM_IMM(1));
  ASSERT_OK(vm_builder_emit_ret(f->b, 3));
  ASSERT_OK(vm_builder_bind_label(f->b, base));
  ASSERT_OK(vm_builder_emit_ret(f->b, 0));
  ASSERT_OK(vm_builder_end_function(f->b, 65536));
  emit_countdown(f);
  fx_machine(f);
  assert_int_equal(invoke_int1(f->m, "big", 5), 5);
  /* small frames after big ones reuse the chunks */
  assert_int_equal(invoke_int1(f->m, "count", 300), 300);
  assert_int_equal(invoke_int1(f->m, "big", 3), 3);
}

/* ---- cancellation and deadline ---- */

static void emit_endless_goto(fx_t *f) {
  uint32_t fn;
  ASSERT_OK(vm_builder_declare_function(f->b, "spin", 0, NULL, &fn));
  ASSERT_OK(vm_builder_begin_function(f->b, fn));
  vm_label_t l = vm_builder_new_label(f->b);
  ASSERT_OK(vm_builder_bind_label(f->b, l));
  ASSERT_OK(vm_builder_emit_goto(f->b, l));
  ASSERT_OK(vm_builder_end_function(f->b, 1));
}

/* spin_if(): r0 = 0; L: if r0 else L; ret r0 — the false branch is the loop */
static void emit_endless_if(fx_t *f) {
  uint32_t fn;
  ASSERT_OK(vm_builder_declare_function(f->b, "spin_if", 0, NULL, &fn));
  ASSERT_OK(vm_builder_begin_function(f->b, fn));
  vm_label_t l = vm_builder_new_label(f->b);
  call2(f->b, 0, f->p_add, VM_IMM(0), VM_IMM(0));
  ASSERT_OK(vm_builder_bind_label(f->b, l));
  call2(f->b, 1, f->p_add, VM_REG(0), VM_IMM(0));
  ASSERT_OK(vm_builder_emit_if(f->b, 0, l));
  ASSERT_OK(vm_builder_emit_ret(f->b, 0));
  ASSERT_OK(vm_builder_end_function(f->b, 0));
}

typedef struct canceller {
  vm_machine_t *m;
  atomic_int done;
} canceller_t;

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Cancels every millisecond until told to stop. */
static void *cancel_thread(void *arg) {
  canceller_t *c = arg;
  sleep_ms(5);
  for (int i = 0; i < 20000 && !atomic_load(&c->done); i++) {
    vm_machine_cancel(c->m);
    sleep_ms(1);
  }
  return NULL;
}

static void run_cancelled(vm_machine_t *m, const char *fn) {
  canceller_t c = {m, 0};
  pthread_t th;
  /* a safety net so a broken cancel fails the test instead of hanging it */
  vm_machine_set_deadline(m, vm_now_ns() + UINT64_C(20000000000));
  assert_int_equal(pthread_create(&th, NULL, cancel_thread, &c), 0);
  vm_value_t out;
  ASSERT_STATUS(vm_machine_invoke(m, fn, NULL, 0, &out), VM_CANCELLED, "cancelled");
  atomic_store(&c.done, 1);
  pthread_join(th, NULL);
  vm_machine_set_deadline(m, 0);
}

static void test_cancel_endless_goto(void **state) {
  fx_t *f = *state;
  emit_endless_goto(f);
  emit_endless_if(f);
  emit_sum_loop(f);
  fx_machine(f);
  run_cancelled(f->m, "spin");
  vm_machine_cancel_reset(f->m);
  run_cancelled(f->m, "spin_if");
  vm_machine_cancel_reset(f->m);
  assert_int_equal(invoke_int1(f->m, "sum", 10), 45);
}

/* The cancel token is sticky: a cancel that lands before an invocation
 * starts stops it (the machine used to clear the flag at the start, so such
 * a cancel was lost and an endless loop ran on), and every later one, until
 * the caller resets the token. */
static void test_cancel_before_invoke(void **state) {
  fx_t *f = *state;
  emit_endless_goto(f);
  emit_sum_loop(f);
  fx_machine(f);
  assert_false(vm_machine_cancel_requested(f->m));
  vm_machine_cancel(f->m);
  assert_true(vm_machine_cancel_requested(f->m));
  /* a safety net so a lost cancel fails the test instead of hanging it */
  vm_machine_set_deadline(f->m, vm_now_ns() + UINT64_C(20000000000));
  vm_value_t out;
  ASSERT_STATUS(vm_machine_invoke(f->m, "spin", NULL, 0, &out), VM_CANCELLED,
                "invocation cancelled");
  ASSERT_STATUS(vm_machine_invoke(f->m, "sum", (vm_value_t[]){vm_value_int(10)}, 1, &out),
                VM_CANCELLED, "invocation cancelled");
  assert_true(vm_machine_cancel_requested(f->m));
  vm_machine_set_deadline(f->m, 0);
  vm_machine_cancel_reset(f->m);
  assert_false(vm_machine_cancel_requested(f->m));
  assert_int_equal(invoke_int1(f->m, "sum", 10), 45);
}

static void test_deadline_endless_loop(void **state) {
  fx_t *f = *state;
  emit_endless_goto(f);
  emit_endless_if(f);
  emit_sum_loop(f);
  fx_machine(f);
  vm_value_t out;
  uint64_t t0 = vm_now_ns();
  vm_machine_set_deadline(f->m, t0 + 20 * 1000000ull);
  ASSERT_STATUS(vm_machine_invoke(f->m, "spin", NULL, 0, &out), VM_DEADLINE_EXCEEDED,
                "in function 'spin' at pc");
  uint64_t took = vm_now_ns() - t0;
  assert_true(took >= 20 * 1000000ull);
  assert_true(took < 5000 * 1000000ull);
  vm_machine_set_deadline(f->m, vm_now_ns() + 20 * 1000000ull);
  ASSERT_STATUS(vm_machine_invoke(f->m, "spin_if", NULL, 0, &out), VM_DEADLINE_EXCEEDED,
                "deadline");
  /* a deadline in the past stops at function entry */
  vm_machine_set_deadline(f->m, 1);
  vm_value_t arg = vm_value_int(3);
  ASSERT_STATUS(vm_machine_invoke(f->m, "sum", &arg, 1, &out), VM_DEADLINE_EXCEEDED, "deadline");
  /* 0 clears it */
  vm_machine_set_deadline(f->m, 0);
  assert_int_equal(invoke_int1(f->m, "sum", 3), 3);
}

/* ---- resolution and errors ---- */

static void test_missing_builtins_listed(void **state) {
  fx_t *f = *state;
  uint32_t p1, p2, fn;
  ASSERT_OK(vm_builder_declare_packed(f->b, "cl.foo", &p1));
  ASSERT_OK(vm_builder_declare_packed(f->b, "vm.builtin.bar", &p2));
  ASSERT_OK(vm_builder_declare_function(f->b, "main", 0, NULL, &fn));
  ASSERT_OK(vm_builder_begin_function(f->b, fn));
  ASSERT_OK(vm_builder_emit_call(f->b, 0, p1, 0, NULL));
  ASSERT_OK(vm_builder_emit_call(f->b, 0, p2, 0, NULL));
  ASSERT_OK(vm_builder_emit_call(f->b, 0, f->p_add, 0, NULL));
  ASSERT_OK(vm_builder_emit_ret(f->b, 0));
  ASSERT_OK(vm_builder_end_function(f->b, 0));
  ASSERT_OK(vm_builder_finish(f->b, &f->exec));
  vm_machine_config_t c = config(f->reg);
  vm_machine_t *m = (vm_machine_t *)0x1;
  ASSERT_STATUS(vm_machine_create(f->exec, &c, &m), VM_NOT_FOUND,
                "executable needs functions missing from this agent: cl.foo, vm.builtin.bar");
  assert_null(m);
  /* no registry at all: every packed name is missing */
  c.registry = NULL;
  ASSERT_STATUS(vm_machine_create(f->exec, &c, &m), VM_NOT_FOUND, "test.fail");
}

static void test_builtin_error_annotated(void **state) {
  fx_t *f = *state;
  uint32_t inner, outer;
  ASSERT_OK(vm_builder_declare_function(f->b, "inner", 1, NULL, &inner));
  ASSERT_OK(vm_builder_declare_function(f->b, "main", 0, NULL, &outer));
  ASSERT_OK(vm_builder_begin_function(f->b, inner));
  ASSERT_OK(vm_builder_emit_call(f->b, 1, f->p_string, 0, NULL)); /* an object to release */
  ASSERT_OK(vm_builder_emit_call(f->b, 2, f->p_fail, 0, NULL));
  ASSERT_OK(vm_builder_emit_ret(f->b, 2));
  ASSERT_OK(vm_builder_end_function(f->b, 0));
  ASSERT_OK(vm_builder_begin_function(f->b, outer));
  ASSERT_OK(vm_builder_emit_call(f->b, 0, f->p_string, 0, NULL));
  call1(f->b, 1, inner, VM_REG(0));
  ASSERT_OK(vm_builder_emit_ret(f->b, 1));
  ASSERT_OK(vm_builder_end_function(f->b, 0));
  fx_machine(f);
  vm_value_t out, s;
  /* inner occupies pc 0..2, main starts at pc 3 */
  ASSERT_STATUS(vm_machine_invoke(f->m, "main", NULL, 0, &out), VM_OUT_OF_RANGE,
                "in function 'inner' at pc 1 (call test.fail): boom");
  ASSERT_OK(vm_string_new("x", 1, &s));
  ASSERT_STATUS(vm_machine_invoke(f->m, "inner", &s, 1, &out), VM_OUT_OF_RANGE,
                "in function 'inner' at pc 1 (call test.fail): boom");
  /* the caller's reference survives the unwind */
  assert_int_equal(s.u.obj->refcount, 1);
  vm_value_release(&s);
}

static void test_invoke_errors(void **state) {
  fx_t *f = *state;
  uint32_t two, main;
  ASSERT_OK(vm_builder_declare_function(f->b, "two", 2, NULL, &two));
  ASSERT_OK(vm_builder_declare_function(f->b, "main", 0, NULL, &main));
  ASSERT_OK(vm_builder_begin_function(f->b, two));
  call2(f->b, 2, f->p_add, VM_REG(0), VM_REG(1));
  ASSERT_OK(vm_builder_emit_ret(f->b, 2));
  ASSERT_OK(vm_builder_end_function(f->b, 0));
  ASSERT_OK(vm_builder_begin_function(f->b, main));
  call1(f->b, 0, two, VM_IMM(1)); /* wrong arity, found at run time */
  ASSERT_OK(vm_builder_emit_ret(f->b, 0));
  ASSERT_OK(vm_builder_end_function(f->b, 0));
  fx_machine(f);
  vm_value_t out, args[2] = {vm_value_int(1), vm_value_int(2)};
  ASSERT_STATUS(vm_machine_invoke(f->m, "nope", NULL, 0, &out), VM_NOT_FOUND, "nope");
  ASSERT_STATUS(vm_machine_invoke(f->m, "test.add", args, 2, &out), VM_NOT_FOUND, "test.add");
  ASSERT_STATUS(vm_machine_invoke(f->m, "two", args, 1, &out), VM_INVALID_ARGUMENT,
                "function 'two' takes 2 arguments, 1 given");
  ASSERT_STATUS(vm_machine_invoke(f->m, "main", NULL, 0, &out), VM_INVALID_ARGUMENT,
                "in function 'main' at pc 2 (call two): function 'two' takes 2 arguments, 1 given");
  ASSERT_OK(vm_machine_invoke(f->m, "two", args, 2, &out));
  assert_int_equal(out.u.i, 3);
  /* a builtin's own argument error keeps its code */
  args[1] = vm_value_float(1.0);
  ASSERT_STATUS(vm_machine_invoke(f->m, "two", args, 2, &out), VM_INVALID_ARGUMENT,
                "in function 'two' at pc 0 (call test.add): test.add: arg 1 is a float");
}

/* ---- If ---- */

/* pick(c): if c then 1 else 2 */
static void emit_pick(fx_t *f) {
  uint32_t fn;
  ASSERT_OK(vm_builder_declare_function(f->b, "pick", 1, NULL, &fn));
  ASSERT_OK(vm_builder_begin_function(f->b, fn));
  vm_label_t no = vm_builder_new_label(f->b);
  ASSERT_OK(vm_builder_emit_if(f->b, 0, no));
  call2(f->b, 1, f->p_add, VM_IMM(1), VM_IMM(0));
  ASSERT_OK(vm_builder_emit_ret(f->b, 1));
  ASSERT_OK(vm_builder_bind_label(f->b, no));
  call2(f->b, 1, f->p_add, VM_IMM(2), VM_IMM(0));
  ASSERT_OK(vm_builder_emit_ret(f->b, 1));
  ASSERT_OK(vm_builder_end_function(f->b, 0));
}

static int64_t pick(vm_machine_t *m, vm_value_t v) {
  vm_value_t out;
  ASSERT_OK(vm_machine_invoke(m, "pick", &v, 1, &out));
  return out.u.i;
}

static void test_if_int_bool(void **state) {
  fx_t *f = *state;
  emit_pick(f);
  fx_machine(f);
  assert_int_equal(pick(f->m, vm_value_int(1)), 1);
  assert_int_equal(pick(f->m, vm_value_int(-7)), 1);
  assert_int_equal(pick(f->m, vm_value_int(INT64_MIN)), 1);
  assert_int_equal(pick(f->m, vm_value_int(0)), 2);
  assert_int_equal(pick(f->m, vm_value_bool(1)), 1);
  assert_int_equal(pick(f->m, vm_value_bool(0)), 2);
}

static void test_if_bad_cond(void **state) {
  fx_t *f = *state;
  emit_pick(f);
  fx_machine(f);
  vm_value_t t, out, s;
  int64_t shape[1] = {1};
  ASSERT_OK(vm_tensor_alloc(vm_machine_allocator(f->m, 0), VM_BOOL, shape, 1, &t));
  ASSERT_STATUS(vm_machine_invoke(f->m, "pick", &t, 1, &out), VM_INVALID_ARGUMENT,
                "in function 'pick' at pc 0 (if): if condition is a tensor: read it on the host "
                "with vm.builtin.read_if_cond first");
  vm_value_release(&t);
  ASSERT_OK(vm_string_new("yes", 3, &s));
  ASSERT_STATUS(vm_machine_invoke(f->m, "pick", &s, 1, &out), VM_INVALID_ARGUMENT,
                "if condition is a string");
  vm_value_release(&s);
  ASSERT_STATUS(vm_machine_invoke(f->m, "pick", &(vm_value_t){.kind = VM_VAL_FLOAT}, 1, &out),
                VM_INVALID_ARGUMENT, "if condition is a float");
}

/* ---- instrumentation ---- */

typedef struct probe {
  int before[16], after[16];
  int skip_idx; /* function index to skip, -1 none */
  char log[1024];
  vm_machine_t *m;
} probe_t;

static vm_instrument_action_t probe_fn(vm_machine_t *m, vm_instrument_phase_t phase,
                                       uint32_t func_idx, const char *name, const vm_value_t *args,
                                       uint32_t nargs, void *user) {
  probe_t *p = user;
  assert_ptr_equal(m, p->m);
  if (phase == VM_INSTRUMENT_BEFORE)
    p->before[func_idx]++;
  else
    p->after[func_idx]++;
  size_t at = strlen(p->log);
  snprintf(p->log + at, sizeof(p->log) - at, "%s%s(%u", phase == VM_INSTRUMENT_BEFORE ? "<" : ">",
           name, nargs);
  at = strlen(p->log);
  for (uint32_t i = 0; i < nargs; i++) {
    at = strlen(p->log);
    if (args[i].kind == VM_VAL_INT)
      snprintf(p->log + at, sizeof(p->log) - at, ",%lld", (long long)args[i].u.i);
  }
  at = strlen(p->log);
  snprintf(p->log + at, sizeof(p->log) - at, ") ");
  if (phase == VM_INSTRUMENT_BEFORE && (int)func_idx == p->skip_idx) return VM_INSTRUMENT_SKIP;
  return VM_INSTRUMENT_CONTINUE;
}

static void test_instrument(void **state) {
  fx_t *f = *state;
  uint32_t helper, main;
  ASSERT_OK(vm_builder_declare_function(f->b, "helper", 1, NULL, &helper));
  ASSERT_OK(vm_builder_declare_function(f->b, "main", 0, NULL, &main));
  ASSERT_OK(vm_builder_begin_function(f->b, helper));
  call2(f->b, 1, f->p_add, VM_REG(0), VM_IMM(10));
  ASSERT_OK(vm_builder_emit_ret(f->b, 1));
  ASSERT_OK(vm_builder_end_function(f->b, 0));
  ASSERT_OK(vm_builder_begin_function(f->b, main));
  call2(f->b, 0, f->p_add, VM_IMM(1), VM_IMM(2));
  call1(f->b, 1, helper, VM_REG(0));
  ASSERT_OK(vm_builder_emit_call(f->b, VM_REG_VOID, f->p_noop, 0, NULL));
  ASSERT_OK(vm_builder_emit_ret(f->b, 1));
  ASSERT_OK(vm_builder_end_function(f->b, 0));
  fx_machine(f);

  probe_t p;
  memset(&p, 0, sizeof(p));
  p.skip_idx = -1;
  p.m = f->m;
  vm_machine_set_instrument(f->m, probe_fn, &p);
  vm_value_t out;
  ASSERT_OK(vm_machine_invoke(f->m, "main", NULL, 0, &out));
  assert_int_equal(out.u.i, 13);
  assert_int_equal(p.before[f->p_add], 2);
  assert_int_equal(p.after[f->p_add], 2);
  assert_int_equal(p.before[helper], 1);
  assert_int_equal(p.after[helper], 1);
  assert_int_equal(p.before[f->p_noop], 1);
  assert_int_equal(p.after[f->p_noop], 1);
  assert_string_equal(p.log,
                      "<test.add(2,1,2) >test.add(2,1,2) <helper(1,3) <test.add(2,3,10) "
                      ">test.add(2,3,10) >helper(1,3) <test.noop(0) >test.noop(0) ");

  /* SKIP of a bytecode call: dst left none, no AFTER, callee not run */
  memset(&p, 0, sizeof(p));
  p.m = f->m;
  p.skip_idx = (int)helper;
  ASSERT_OK(vm_machine_invoke(f->m, "main", NULL, 0, &out));
  assert_int_equal(out.kind, VM_VAL_NONE);
  assert_int_equal(p.before[helper], 1);
  assert_int_equal(p.after[helper], 0);
  assert_int_equal(p.before[f->p_add], 1);

  /* SKIP of a packed call */
  memset(&p, 0, sizeof(p));
  p.m = f->m;
  p.skip_idx = (int)f->p_add;
  vm_value_t arg = vm_value_int(5);
  ASSERT_OK(vm_machine_invoke(f->m, "helper", &arg, 1, &out));
  assert_int_equal(out.kind, VM_VAL_NONE);
  assert_int_equal(p.before[f->p_add], 1);
  assert_int_equal(p.after[f->p_add], 0);

  /* removed: nothing is called */
  vm_machine_set_instrument(f->m, NULL, NULL);
  memset(&p, 0, sizeof(p));
  ASSERT_OK(vm_machine_invoke(f->m, "main", NULL, 0, &out));
  assert_int_equal(out.u.i, 13);
  assert_int_equal(p.before[f->p_add], 0);
}

/* ---- arguments and results ---- */

static void test_void_dst_and_vm_arg(void **state) {
  fx_t *f = *state;
  uint32_t fn;
  ASSERT_OK(vm_builder_declare_function(f->b, "main", 0, NULL, &fn));
  ASSERT_OK(vm_builder_begin_function(f->b, fn));
  /* an owned object into void must be released (ASan checks) */
  ASSERT_OK(vm_builder_emit_call(f->b, VM_REG_VOID, f->p_string, 0, NULL));
  int64_t a = VM_REG(VM_REG_VM);
  ASSERT_OK(vm_builder_emit_call(f->b, 0, f->p_is_vm, 1, &a));
  ASSERT_OK(vm_builder_emit_call(f->b, VM_REG_VOID, f->p_is_vm, 1, &a));
  ASSERT_OK(vm_builder_emit_ret(f->b, 0));
  ASSERT_OK(vm_builder_end_function(f->b, 0));
  fx_machine(f);
  vm_value_t out;
  ASSERT_OK(vm_machine_invoke(f->m, "main", NULL, 0, &out));
  assert_int_equal(out.kind, VM_VAL_INT);
  assert_int_equal(out.u.i, 1);
}

static void test_arg_kinds(void **state) {
  fx_t *f = *state;
  uint32_t c_int, c_float, c_str, c_shape, c_tensor, c_dt, fn, other;
  ASSERT_OK(vm_builder_const_int(f->b, 42, &c_int));
  ASSERT_OK(vm_builder_const_float(f->b, 1.5, &c_float));
  ASSERT_OK(vm_builder_const_string(f->b, "hi", 2, &c_str));
  int64_t dims[3] = {2, 3, 4};
  ASSERT_OK(vm_builder_const_shape(f->b, 3, dims, &c_shape));
  float data[6] = {1, 2, 3, 4, 5, 6};
  ASSERT_OK(vm_builder_const_tensor(f->b, VM_F32, 2, dims, data, sizeof(data), NULL, &c_tensor));
  ASSERT_OK(vm_builder_const_dtype(f->b, VM_F16, &c_dt));
  ASSERT_OK(vm_builder_declare_function(f->b, "other", 0, NULL, &other));
  ASSERT_OK(vm_builder_declare_function(f->b, "main", 1, NULL, &fn));
  ASSERT_OK(vm_builder_begin_function(f->b, other));
  call2(f->b, 0, f->p_add, VM_IMM(0), VM_IMM(0));
  ASSERT_OK(vm_builder_emit_ret(f->b, 0));
  ASSERT_OK(vm_builder_end_function(f->b, 0));
  ASSERT_OK(vm_builder_begin_function(f->b, fn));
  int64_t a[9] = {VM_REG(0),          VM_IMM(-5),          VM_IMM(VM_ARG_VALUE_MAX),
                  VM_CONSTI(c_int),   VM_CONSTI(c_float),  VM_CONSTI(c_str),
                  VM_CONSTI(c_shape), VM_CONSTI(c_tensor), VM_FUNCI(other)};
  ASSERT_OK(vm_builder_emit_call(f->b, 1, f->p_describe, 9, a));
  int64_t d = VM_CONSTI(c_dt);
  ASSERT_OK(vm_builder_emit_call(f->b, 0, f->p_describe, 1, &d)); /* dst is also an arg */
  ASSERT_OK(vm_builder_emit_ret(f->b, 1));
  ASSERT_OK(vm_builder_end_function(f->b, 0));
  fx_machine(f);
  vm_value_t out, arg;
  ASSERT_OK(vm_string_new("in", 2, &arg));
  ASSERT_OK(vm_machine_invoke(f->m, "main", &arg, 1, &out));
  char want[256];
  snprintf(want, sizeof(want),
           "string:in,int:-5,int:%lld,int:42,float:1.5,string:hi,shape:3,tensor:2,func:%u",
           (long long)VM_ARG_VALUE_MAX, other);
  assert_non_null(vm_value_as_string(&out));
  assert_string_equal(vm_value_as_string(&out)->data, want);
  assert_int_equal(arg.u.obj->refcount, 1);
  vm_value_release(&out);
  vm_value_release(&arg);
}

static void test_many_args(void **state) {
  fx_t *f = *state;
  /* wide(a0..a19) = sum of (i+1) * ai via a packed call with 40 args */
  uint32_t wide, main;
  ASSERT_OK(vm_builder_declare_function(f->b, "wide", 20, NULL, &wide));
  ASSERT_OK(vm_builder_declare_function(f->b, "main", 0, NULL, &main));
  ASSERT_OK(vm_builder_begin_function(f->b, wide));
  int64_t a[40];
  for (int i = 0; i < 40; i++) a[i] = i < 20 ? VM_REG(i) : VM_IMM(0);
  ASSERT_OK(vm_builder_emit_call(f->b, 20, f->p_sum, 40, a));
  ASSERT_OK(vm_builder_emit_ret(f->b, 20));
  ASSERT_OK(vm_builder_end_function(f->b, 0));
  ASSERT_OK(vm_builder_begin_function(f->b, main));
  for (int i = 0; i < 20; i++) a[i] = VM_IMM(i);
  ASSERT_OK(vm_builder_emit_call(f->b, 0, wide, 20, a));
  ASSERT_OK(vm_builder_emit_ret(f->b, 0));
  ASSERT_OK(vm_builder_end_function(f->b, 0));
  fx_machine(f);
  int64_t want = 0;
  for (int i = 0; i < 20; i++) want += (int64_t)i * (i + 1);
  vm_value_t out;
  ASSERT_OK(vm_machine_invoke(f->m, "main", NULL, 0, &out));
  assert_int_equal(out.u.i, want);
  /* instrumentation sees the 40 args too */
  probe_t p;
  memset(&p, 0, sizeof(p));
  p.skip_idx = -1;
  p.m = f->m;
  vm_machine_set_instrument(f->m, probe_fn, &p);
  ASSERT_OK(vm_machine_invoke(f->m, "main", NULL, 0, &out));
  assert_int_equal(out.u.i, want);
  assert_int_equal(p.before[f->p_sum], 1);
  assert_non_null(strstr(p.log, "<wide(20,0,1,2,3"));
  assert_non_null(strstr(p.log, "<test.sum(40,0,1,2"));
}

/* A builtin calls back into the machine with a FUNC value; closures too. */
static void test_call_value_and_reentry(void **state) {
  fx_t *f = *state;
  emit_fib(f);
  uint32_t main;
  ASSERT_OK(vm_builder_declare_function(f->b, "main", 1, NULL, &main));
  ASSERT_OK(vm_builder_begin_function(f->b, main));
  /* fib is function 10: it is declared after the 10 packed functions */
  call2(f->b, 1, f->p_apply, VM_FUNCI(10), VM_REG(0));
  call2(f->b, 2, f->p_apply, VM_FUNCI(f->p_add), VM_REG(1));
  ASSERT_OK(vm_builder_emit_ret(f->b, 1));
  ASSERT_OK(vm_builder_end_function(f->b, 0));
  fx_machine(f);
  assert_int_equal(vm_executable_find_function(f->exec, "fib", VM_FUNC_BYTECODE), 10);
  vm_value_t out;
  /* main's second call passes 1 arg to test.add: its error passes through
   * both levels of annotation */
  vm_value_t arg = vm_value_int(10);
  ASSERT_STATUS(vm_machine_invoke(f->m, "main", &arg, 1, &out), VM_INVALID_ARGUMENT,
                "in function 'main' at pc 10 (call test.apply): test.add takes 2 args, got 1");

  vm_value_t fv = {.kind = VM_VAL_FUNC, .u.i = 10};
  ASSERT_OK(vm_machine_call_value(f->m, &fv, &arg, 1, &out));
  assert_int_equal(out.u.i, 55);
  vm_value_t addv = {.kind = VM_VAL_FUNC, .u.i = f->p_add},
             two[2] = {vm_value_int(4), vm_value_int(5)};
  ASSERT_OK(vm_machine_call_value(f->m, &addv, two, 2, &out));
  assert_int_equal(out.u.i, 9);
  vm_value_t clo;
  ASSERT_OK(vm_closure_new(f->p_add, two, 1, &clo));
  ASSERT_OK(vm_machine_call_value(f->m, &clo, &two[1], 1, &out));
  assert_int_equal(out.u.i, 9);
  vm_value_release(&clo);
  ASSERT_OK(vm_closure_new(10, &arg, 1, &clo));
  ASSERT_OK(vm_machine_call_value(f->m, &clo, NULL, 0, &out));
  assert_int_equal(out.u.i, 55);
  vm_value_release(&clo);
  vm_value_t bad = vm_value_int(3);
  ASSERT_STATUS(vm_machine_call_value(f->m, &bad, NULL, 0, &out), VM_INVALID_ARGUMENT,
                "int value cannot be called");
  fv.u.i = 999;
  ASSERT_STATUS(vm_machine_call_value(f->m, &fv, NULL, 0, &out), VM_INVALID_ARGUMENT,
                "out of range");
}

/* Recursion through a builtin that calls back into the machine: every level
 * nests the C stack (loop, builtin, call_value), and the depth limit bounds
 * it before the C stack runs out, even under ASan. */
static void test_deep_reentry(void **state) {
  fx_t *f = *state;
  /* down(n) = 0 < n ? apply(down, n - 1) : n */
  uint32_t fn;
  ASSERT_OK(vm_builder_declare_function(f->b, "down", 1, NULL, &fn));
  ASSERT_OK(vm_builder_begin_function(f->b, fn));
  vm_label_t base = vm_builder_new_label(f->b);
  call2(f->b, 1, f->p_less, VM_IMM(0), VM_REG(0));
  ASSERT_OK(vm_builder_emit_if(f->b, 1, base));
  call2(f->b, 2, f->p_add, VM_REG(0), VM_IMM(-1));
  call2(f->b, 3, f->p_apply, VM_FUNCI(fn), VM_REG(2));
  ASSERT_OK(vm_builder_emit_ret(f->b, 3));
  ASSERT_OK(vm_builder_bind_label(f->b, base));
  ASSERT_OK(vm_builder_emit_ret(f->b, 0));
  ASSERT_OK(vm_builder_end_function(f->b, 0));
  fx_machine(f);
  assert_int_equal(invoke_int1(f->m, "down", 1023), 0);
  vm_value_t arg = vm_value_int(5000), out;
  vm_status_t st = vm_machine_invoke(f->m, "down", &arg, 1, &out);
  assert_int_equal(vm_status_code(st), VM_RESOURCE_EXHAUSTED);
  /* the context is capped: the innermost levels and a "..." */
  const char *msg = vm_status_message(st);
  assert_true(strncmp(msg, "...: in function 'down' at pc 3 (call test.apply): ", 51) == 0);
  assert_non_null(strstr(msg, "(call test.apply): call depth limit of 1024 exceeded"));
  assert_true(strlen(msg) < 1024);
  vm_status_free(st);
  assert_int_equal(invoke_int1(f->m, "down", 10), 0);
}

/* Constants are values made once at creation and shared by every use. */
static void test_constants_materialised_once(void **state) {
  fx_t *f = *state;
  uint32_t c_str, fn;
  ASSERT_OK(vm_builder_const_string(f->b, "const", 5, &c_str));
  ASSERT_OK(vm_builder_declare_function(f->b, "main", 0, NULL, &fn));
  ASSERT_OK(vm_builder_begin_function(f->b, fn));
  call1(f->b, 0, f->p_id, VM_CONSTI(c_str));
  ASSERT_OK(vm_builder_emit_ret(f->b, 0));
  ASSERT_OK(vm_builder_end_function(f->b, 0));
  fx_machine(f);
  vm_value_t a, b;
  ASSERT_OK(vm_machine_invoke(f->m, "main", NULL, 0, &a));
  ASSERT_OK(vm_machine_invoke(f->m, "main", NULL, 0, &b));
  assert_ptr_equal(a.u.obj, b.u.obj); /* the same constant object each time */
  assert_int_equal(a.u.obj->refcount, 3);
  vm_value_release(&a);
  vm_value_release(&b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mode_names),
      cmocka_unit_test(test_registry),
      cmocka_unit_test_setup_teardown(test_machine_basics, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_given_cpu_device_and_naive_allocator, fx_setup,
                                      fx_teardown),
      cmocka_unit_test_setup_teardown(test_arith_loop, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_recursion, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_depth_limit_config, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_big_register_files, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_cancel_endless_goto, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_cancel_before_invoke, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_deadline_endless_loop, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_missing_builtins_listed, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_builtin_error_annotated, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_invoke_errors, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_if_int_bool, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_if_bad_cond, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_instrument, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_void_dst_and_vm_arg, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_arg_kinds, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_many_args, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_call_value_and_reentry, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_deep_reentry, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_constants_materialised_once, fx_setup, fx_teardown),
  };
  return cmocka_run_group_tests_name(test_exec_mode() ? "rt_interp.compiled" : "rt_interp.bytecode",
                                     tests, NULL, NULL);
}
