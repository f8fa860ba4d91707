/* The vm.builtin.* functions, run through real executables on a real
 * machine (cpu devices), in the execution mode VMRPC_EXEC_MODE selects.
 * Every error path is checked for its exact code and a message substring. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "test_util.h"
#include "vm/vm.h"

/* ---------------------------------------------------------------------------
 * Fixture: devices, a registry with the builtins (plus test.record), an
 * allocator outside the machine for argument tensors, and the machine of the
 * latest executable.
 */

typedef struct recorder {
  uint64_t bytes[16];
  int n;
} recorder_t;

typedef struct env {
  vm_device_t *devs[2];
  uint32_t ndev;
  vm_allocator_kind_t kinds[2];
  vm_allocator_t *host; /* argument tensors on devs[0], not the machine's */
  vm_registry_t *reg;
  vm_executable_t *exec;
  vm_machine_t *m;
  recorder_t rec;
} env_t;

/* test.record(): notes bytes_in_use of device 0's allocator. */
static vm_status_t rec_fn(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                          void *user) {
  recorder_t *r = user;
  vm_alloc_stats_t s;
  vm_allocator_get_stats(vm_machine_allocator(m, 0), &s);
  if (r->n < 16) r->bytes[r->n++] = s.bytes_in_use;
  return VM_STATUS_OK;
}

static void env_init(env_t *e, uint64_t cap, uint32_t ndev, vm_allocator_kind_t kind) {
  memset(e, 0, sizeof(*e));
  e->ndev = ndev;
  for (uint32_t i = 0; i < ndev; i++) {
    ASSERT_OK(vm_cpu_device_create(i == 0 ? cap : 0, &e->devs[i]));
    e->kinds[i] = kind;
  }
  ASSERT_OK(vm_allocator_create(e->devs[0], VM_ALLOC_NAIVE, &e->host));
  ASSERT_OK(vm_registry_create(&e->reg));
  ASSERT_OK(vm_registry_add_builtins(e->reg));
  ASSERT_OK(vm_registry_add(e->reg, "test.record", rec_fn, &e->rec));
}

static void env_unload(env_t *e) {
  vm_machine_free(e->m);
  vm_executable_free(e->exec);
  e->m = NULL;
  e->exec = NULL;
}

/* Takes exec and makes a machine for it (the previous one is freed: release
 * its values first). */
static void env_load(env_t *e, vm_executable_t *exec) {
  env_unload(e);
  e->exec = exec;
  vm_machine_config_t cfg;
  memset(&cfg, 0, sizeof(cfg));
  cfg.mode = test_exec_mode() ? VM_EXEC_COMPILED : VM_EXEC_BYTECODE;
  cfg.num_devices = e->ndev;
  cfg.devices = e->devs;
  cfg.allocators = e->kinds;
  cfg.registry = e->reg;
  ASSERT_OK(vm_machine_create(exec, &cfg, &e->m));
}

static void env_fini(env_t *e) {
  env_unload(e);
  vm_registry_free(e->reg);
  vm_allocator_destroy(e->host);
  for (uint32_t i = 0; i < e->ndev; i++) vm_device_destroy(e->devs[i]);
}

/* main(p0..pn-1) { r = builtin([%vm,] p0..pn-1); ret r } */
static vm_executable_t *build_single_call(const char *builtin, int with_vm, uint32_t nparams) {
  vm_builder_t *b;
  ASSERT_OK(vm_builder_create(&b));
  uint32_t fn, main_idx;
  ASSERT_OK(vm_builder_declare_packed(b, builtin, &fn));
  ASSERT_OK(vm_builder_declare_function(b, "main", nparams, NULL, &main_idx));
  ASSERT_OK(vm_builder_begin_function(b, main_idx));
  int64_t words[32];
  uint32_t n = 0;
  if (with_vm) words[n++] = VM_REG(VM_REG_VM);
  for (uint32_t i = 0; i < nparams; i++) words[n++] = VM_REG(i);
  ASSERT_OK(vm_builder_emit_call(b, nparams, fn, n, words));
  ASSERT_OK(vm_builder_emit_ret(b, nparams));
  ASSERT_OK(vm_builder_end_function(b, 0));
  vm_executable_t *exec;
  ASSERT_OK(vm_builder_finish(b, &exec));
  vm_builder_free(b);
  return exec;
}

/* Runs builtin(args) through a fresh single-call executable. *out is owned
 * and must be released before the next call. */
static vm_status_t call(env_t *e, const char *builtin, int with_vm, const vm_value_t *args,
                        uint32_t nargs, vm_value_t *out) {
  *out = vm_value_none();
  env_load(e, build_single_call(builtin, with_vm, nargs));
  return vm_machine_invoke(e->m, "main", args, nargs, out);
}

/* ---- value helpers (each returns an owned value) ---- */

static vm_value_t vstr(const char *s) {
  vm_value_t v;
  ASSERT_OK(vm_string_new(s, (uint32_t)strlen(s), &v));
  return v;
}

static vm_value_t vshape(uint32_t ndim, const int64_t *dims) {
  vm_value_t v;
  ASSERT_OK(vm_shape_new(dims, ndim, &v));
  return v;
}

static vm_value_t vtensor(env_t *e, vm_dtype_t dt, uint32_t ndim, const int64_t *dims,
                          const void *data) {
  vm_value_t v;
  ASSERT_OK(vm_tensor_alloc(e->host, dt, dims, ndim, &v));
  vm_tensor_t *t = vm_value_as_tensor(&v);
  if (data) memcpy((char *)t->storage->buffer.handle + t->offset, data, vm_tensor_nbytes_of(t));
  return v;
}

static void *host_data(const vm_value_t *v) {
  vm_tensor_t *t = vm_value_as_tensor(v);
  assert_non_null(t);
  return (char *)t->storage->buffer.handle + t->offset;
}

static void release_all(vm_value_t *v, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) vm_value_release(&v[i]);
}

/* ---------------------------------------------------------------------------
 * Registry
 */

static const char *const k_names[] = {
    "vm.builtin.alloc_storage", "vm.builtin.alloc_tensor",
    "vm.builtin.copy",          "vm.builtin.make_shape",
    "vm.builtin.match_shape",   "vm.builtin.shape_of",
    "vm.builtin.reshape",       "vm.builtin.make_tuple",
    "vm.builtin.tuple_getitem", "vm.builtin.null_value",
    "vm.builtin.kill",          "vm.builtin.read_if_cond",
    "vm.builtin.to_device",     "vm.builtin.check_tensor_info",
    "vm.builtin.trim_dim",      "vm.builtin.raise",
};

static void test_registry_has_every_builtin(void **state) {
  vm_registry_t *reg;
  ASSERT_OK(vm_registry_create(&reg));
  ASSERT_OK(vm_registry_add_builtins(reg));
  for (size_t i = 0; i < sizeof(k_names) / sizeof(k_names[0]); i++) {
    vm_packed_fn fn = NULL;
    void *user = (void *)1;
    assert_int_equal(vm_registry_find(reg, k_names[i], &fn, &user), 0);
    assert_non_null(fn);
  }
  ASSERT_STATUS(vm_registry_add_builtins(reg), VM_ALREADY_EXISTS, "vm.builtin.alloc_storage");
  vm_registry_free(reg);
}

/* Every builtin with a fixed count refuses another count, naming itself. */
static void test_arity_errors(void **state) {
  static const struct {
    const char *name;
    int with_vm;
    uint32_t nparams;
    const char *msg;
  } cases[] = {
      {"vm.builtin.alloc_storage", 1, 3, "vm.builtin.alloc_storage: expected 5 arguments, got 4"},
      {"vm.builtin.alloc_tensor", 0, 5, "vm.builtin.alloc_tensor: expected 4 arguments, got 5"},
      {"vm.builtin.copy", 0, 2, "vm.builtin.copy: expected 1 argument, got 2"},
      {"vm.builtin.match_shape", 0, 0, "vm.builtin.match_shape: expected at least 1 argument"},
      {"vm.builtin.shape_of", 0, 0, "vm.builtin.shape_of: expected 1 argument, got 0"},
      {"vm.builtin.reshape", 0, 1, "vm.builtin.reshape: expected 2 arguments, got 1"},
      {"vm.builtin.tuple_getitem", 0, 3, "vm.builtin.tuple_getitem: expected 2 arguments"},
      {"vm.builtin.null_value", 0, 1, "vm.builtin.null_value: expected 0 arguments, got 1"},
      {"vm.builtin.read_if_cond", 0, 2, "vm.builtin.read_if_cond: expected 1 argument, got 2"},
      {"vm.builtin.to_device", 0, 1, "vm.builtin.to_device: expected 2 arguments, got 1"},
      {"vm.builtin.check_tensor_info", 0, 1, "check_tensor_info: expected 2 to 4 arguments, got 1"},
      {"vm.builtin.check_tensor_info", 0, 5, "check_tensor_info: expected 2 to 4 arguments, got 5"},
      {"vm.builtin.trim_dim", 0, 2, "vm.builtin.trim_dim: expected 3 arguments, got 2"},
      {"vm.builtin.raise", 0, 1, "vm.builtin.raise: expected at least 2 arguments, got 1"},
  };
  env_t e;
  env_init(&e, 0, 1, VM_ALLOC_POOLED);
  vm_value_t args[8];
  for (int i = 0; i < 8; i++) args[i] = vm_value_none();
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    vm_value_t out;
    ASSERT_STATUS(call(&e, cases[i].name, cases[i].with_vm, args, cases[i].nparams, &out),
                  VM_INVALID_ARGUMENT, cases[i].msg);
    assert_int_equal(out.kind, VM_VAL_NONE);
  }
  env_fini(&e);
}

/* ---------------------------------------------------------------------------
 * alloc_storage / alloc_tensor
 */

static void test_alloc_storage(void **state) {
  env_t e;
  env_init(&e, 0, 1, VM_ALLOC_POOLED);
  const int64_t dims[] = {2, 3};
  vm_value_t args[4] = {vshape(2, dims), vm_value_int(0), vm_value_dtype(VM_F32), vstr("global")};
  vm_value_t out;
  ASSERT_OK(call(&e, "vm.builtin.alloc_storage", 1, args, 4, &out));
  vm_storage_t *st = vm_value_as_storage(&out);
  assert_non_null(st);
  assert_int_equal(st->nbytes, 24);
  assert_ptr_equal(st->device, e.devs[0]);
  assert_ptr_equal(st->allocator, vm_machine_allocator(e.m, 0));
  vm_value_release(&out);

  /* "" is the default scope; a device value works as well as an int */
  vm_value_release(&args[3]);
  args[3] = vstr("");
  args[1].kind = VM_VAL_DEVICE;
  ASSERT_OK(call(&e, "vm.builtin.alloc_storage", 1, args, 4, &out));
  assert_int_equal(vm_value_as_storage(&out)->nbytes, 24);
  vm_value_release(&out);

  /* an empty shape still gets a valid storage */
  vm_value_release(&args[0]);
  args[0] = vshape(1, (const int64_t[]){0});
  ASSERT_OK(call(&e, "vm.builtin.alloc_storage", 1, args, 4, &out));
  assert_int_equal(vm_value_as_storage(&out)->nbytes, 0);
  vm_value_release(&out);
  release_all(args, 4);
  env_fini(&e);
}

static void test_alloc_storage_errors(void **state) {
  env_t e;
  env_init(&e, 0, 1, VM_ALLOC_POOLED);
  const int64_t dims[] = {4};
  const int64_t huge[] = {(int64_t)1 << 40, (int64_t)1 << 40};
  vm_value_t good[4] = {vshape(1, dims), vm_value_int(0), vm_value_dtype(VM_F32), vstr("global")};
  vm_value_t out, a[5];
  static const char fn[] = "vm.builtin.alloc_storage";

  /* the first argument must be the VM register */
  a[0] = vm_value_int(1);
  memcpy(a + 1, good, sizeof(good));
  ASSERT_STATUS(call(&e, fn, 0, a, 5, &out), VM_INVALID_ARGUMENT,
                "vm.builtin.alloc_storage: argument 0 (vm): expected the VM (%vm), got int");

  memcpy(a, good, sizeof(good));
  a[0] = vm_value_int(4);
  ASSERT_STATUS(call(&e, fn, 1, a, 4, &out), VM_INVALID_ARGUMENT,
                "argument 1 (shape): expected shape, got int");

  memcpy(a, good, sizeof(good));
  a[1] = vm_value_int(1);
  ASSERT_STATUS(call(&e, fn, 1, a, 4, &out), VM_INVALID_ARGUMENT,
                "argument 2 (device_index): device 1 out of range, the machine has 1 device");
  a[1] = vm_value_int(-1);
  ASSERT_STATUS(call(&e, fn, 1, a, 4, &out), VM_INVALID_ARGUMENT, "device -1 out of range");
  a[1] = good[3];
  ASSERT_STATUS(call(&e, fn, 1, a, 4, &out), VM_INVALID_ARGUMENT,
                "argument 2 (device_index): expected int or device, got string");

  memcpy(a, good, sizeof(good));
  a[2] = vm_value_int(2);
  ASSERT_STATUS(call(&e, fn, 1, a, 4, &out), VM_INVALID_ARGUMENT,
                "argument 3 (dtype_hint): expected dtype, got int");
  a[2] = vm_value_dtype(VM_DTYPE_MAKE(VM_DTYPE_FLOAT, 7, 1));
  ASSERT_STATUS(call(&e, fn, 1, a, 4, &out), VM_INVALID_ARGUMENT,
                "argument 3 (dtype_hint): unsupported dtype");

  memcpy(a, good, sizeof(good));
  a[3] = vm_value_int(0);
  ASSERT_STATUS(call(&e, fn, 1, a, 4, &out), VM_INVALID_ARGUMENT,
                "argument 4 (scope): expected string, got int");
  vm_value_t tex = vstr("texture");
  a[3] = tex;
  ASSERT_STATUS(call(&e, fn, 1, a, 4, &out), VM_UNIMPLEMENTED, "memory scope 'texture'");

  vm_value_t big = vshape(2, huge);
  memcpy(a, good, sizeof(good));
  a[0] = big;
  ASSERT_STATUS(call(&e, fn, 1, a, 4, &out), VM_INVALID_ARGUMENT, "overflows");

  vm_value_release(&big);
  vm_value_release(&tex);
  release_all(good, 4);
  env_fini(&e);
}

static void test_alloc_storage_out_of_memory(void **state) {
  env_t e;
  env_init(&e, 1024, 1, VM_ALLOC_POOLED); /* a device with 1 KiB */
  const int64_t dims[] = {1024};
  vm_value_t args[4] = {vshape(1, dims), vm_value_int(0), vm_value_dtype(VM_F32), vstr("global")};
  vm_value_t out;
  ASSERT_STATUS(call(&e, "vm.builtin.alloc_storage", 1, args, 4, &out), VM_RESOURCE_EXHAUSTED,
                "vm.builtin.alloc_storage");
  assert_int_equal(out.kind, VM_VAL_NONE);
  /* what fits still works */
  vm_value_release(&args[0]);
  args[0] = vshape(1, (const int64_t[]){256});
  ASSERT_OK(call(&e, "vm.builtin.alloc_storage", 1, args, 4, &out));
  vm_value_release(&out);
  release_all(args, 4);
  env_fini(&e);
}

static void test_alloc_tensor(void **state) {
  env_t e;
  env_init(&e, 0, 1, VM_ALLOC_POOLED);
  vm_value_t storage;
  ASSERT_OK(vm_storage_alloc(e.host, 64, &storage));
  const int64_t dims[] = {4};
  vm_value_t args[4] = {storage, vm_value_int(16), vshape(1, dims), vm_value_dtype(VM_F32)};
  vm_value_t out;
  ASSERT_OK(call(&e, "vm.builtin.alloc_tensor", 0, args, 4, &out));
  vm_tensor_t *t = vm_value_as_tensor(&out);
  assert_non_null(t);
  assert_ptr_equal(t->storage, vm_value_as_storage(&storage));
  assert_int_equal(t->offset, 16);
  assert_int_equal(t->ndim, 1);
  assert_int_equal(t->shape[0], 4);
  assert_true(vm_dtype_equal(t->dtype, VM_F32));
  assert_int_equal(storage.u.obj->refcount, 2); /* the view holds the storage */
  vm_value_release(&out);
  assert_int_equal(storage.u.obj->refcount, 1);

  /* exactly filling the storage is fine, one byte more is not */
  args[1] = vm_value_int(48);
  ASSERT_OK(call(&e, "vm.builtin.alloc_tensor", 0, args, 4, &out));
  vm_value_release(&out);
  args[1] = vm_value_int(56);
  ASSERT_STATUS(call(&e, "vm.builtin.alloc_tensor", 0, args, 4, &out), VM_INVALID_ARGUMENT,
                "vm.builtin.alloc_tensor: storage too small: offset 56 + 16 bytes of float32 (4) > "
                "storage size 64 bytes");
  args[1] = vm_value_int(INT64_MAX);
  ASSERT_STATUS(call(&e, "vm.builtin.alloc_tensor", 0, args, 4, &out), VM_INVALID_ARGUMENT,
                "storage too small");
  args[1] = vm_value_int(-8);
  ASSERT_STATUS(call(&e, "vm.builtin.alloc_tensor", 0, args, 4, &out), VM_INVALID_ARGUMENT,
                "argument 1 (offset): -8 is negative");
  args[1] = vm_value_float(1.0);
  ASSERT_STATUS(call(&e, "vm.builtin.alloc_tensor", 0, args, 4, &out), VM_INVALID_ARGUMENT,
                "argument 1 (offset): expected int, got float");
  args[1] = vm_value_int(0);

  vm_value_t a2[4];
  memcpy(a2, args, sizeof(args));
  a2[0] = vm_value_int(0);
  ASSERT_STATUS(call(&e, "vm.builtin.alloc_tensor", 0, a2, 4, &out), VM_INVALID_ARGUMENT,
                "argument 0 (storage): expected storage, got int");
  memcpy(a2, args, sizeof(args));
  a2[2] = vm_value_int(4);
  ASSERT_STATUS(call(&e, "vm.builtin.alloc_tensor", 0, a2, 4, &out), VM_INVALID_ARGUMENT,
                "argument 2 (shape): expected shape");
  memcpy(a2, args, sizeof(args));
  a2[3] = vm_value_none();
  ASSERT_STATUS(call(&e, "vm.builtin.alloc_tensor", 0, a2, 4, &out), VM_INVALID_ARGUMENT,
                "argument 3 (dtype): expected dtype, got none");
  vm_value_t big = vshape(2, (const int64_t[]){INT64_MAX, 4});
  a2[3] = args[3];
  a2[2] = big;
  ASSERT_STATUS(call(&e, "vm.builtin.alloc_tensor", 0, a2, 4, &out), VM_INVALID_ARGUMENT,
                "overflows");
  vm_value_release(&big);
  release_all(args, 4);
  env_fini(&e);
}

/* A function that allocates a storage and a tensor on it and returns the
 * tensor (what a compiler emits for an intermediate). */
static vm_executable_t *build_alloc_program(void) {
  vm_builder_t *b;
  ASSERT_OK(vm_builder_create(&b));
  uint32_t alloc_storage, alloc_tensor, main_idx, c_shape, c_dtype, c_scope;
  ASSERT_OK(vm_builder_declare_packed(b, "vm.builtin.alloc_storage", &alloc_storage));
  ASSERT_OK(vm_builder_declare_packed(b, "vm.builtin.alloc_tensor", &alloc_tensor));
  const int64_t dims[] = {16, 16};
  ASSERT_OK(vm_builder_const_shape(b, 2, dims, &c_shape));
  ASSERT_OK(vm_builder_const_dtype(b, VM_F32, &c_dtype));
  ASSERT_OK(vm_builder_const_string(b, "global", 6, &c_scope));
  ASSERT_OK(vm_builder_declare_function(b, "main", 0, NULL, &main_idx));
  ASSERT_OK(vm_builder_begin_function(b, main_idx));
  const int64_t a1[] = {VM_REG(VM_REG_VM), VM_CONSTI(c_shape), VM_IMM(0), VM_CONSTI(c_dtype),
                        VM_CONSTI(c_scope)};
  ASSERT_OK(vm_builder_emit_call(b, 0, alloc_storage, 5, a1));
  const int64_t a2[] = {VM_REG(0), VM_IMM(0), VM_CONSTI(c_shape), VM_CONSTI(c_dtype)};
  ASSERT_OK(vm_builder_emit_call(b, 1, alloc_tensor, 4, a2));
  ASSERT_OK(vm_builder_emit_ret(b, 1));
  ASSERT_OK(vm_builder_end_function(b, 0));
  vm_executable_t *exec;
  ASSERT_OK(vm_builder_finish(b, &exec));
  vm_builder_free(b);
  return exec;
}

static uint64_t device_allocs(env_t *e) {
  vm_alloc_stats_t s;
  vm_allocator_get_stats(vm_machine_allocator(e->m, 0), &s);
  return s.device_allocs;
}

static void test_pooled_steady_state_allocates_nothing(void **state) {
  env_t e;
  env_init(&e, 0, 1, VM_ALLOC_POOLED);
  env_load(&e, build_alloc_program());
  vm_value_t out;
  ASSERT_OK(vm_machine_invoke(e.m, "main", NULL, 0, &out));
  assert_int_equal(vm_tensor_nbytes_of(vm_value_as_tensor(&out)), 1024);
  vm_value_release(&out);
  uint64_t after_first = device_allocs(&e);
  assert_true(after_first >= 1);
  for (int i = 0; i < 10; i++) {
    ASSERT_OK(vm_machine_invoke(e.m, "main", NULL, 0, &out));
    vm_value_release(&out);
  }
  assert_int_equal(device_allocs(&e), after_first);
  env_fini(&e);

  /* naive goes to the device on every invoke */
  env_init(&e, 0, 1, VM_ALLOC_NAIVE);
  env_load(&e, build_alloc_program());
  ASSERT_OK(vm_machine_invoke(e.m, "main", NULL, 0, &out));
  vm_value_release(&out);
  after_first = device_allocs(&e);
  for (int i = 0; i < 10; i++) {
    ASSERT_OK(vm_machine_invoke(e.m, "main", NULL, 0, &out));
    vm_value_release(&out);
  }
  assert_int_equal(device_allocs(&e), after_first + 10);
  env_fini(&e);
}

/* ---------------------------------------------------------------------------
 * Values, shapes, tuples
 */

static void test_copy_returns_same_value(void **state) {
  env_t e;
  env_init(&e, 0, 1, VM_ALLOC_POOLED);
  vm_value_t s = vshape(1, (const int64_t[]){3});
  vm_value_t out;
  ASSERT_OK(call(&e, "vm.builtin.copy", 0, &s, 1, &out));
  assert_ptr_equal(out.u.obj, s.u.obj);
  assert_int_equal(s.u.obj->refcount, 2);
  vm_value_release(&out);
  vm_value_t i = vm_value_int(42);
  ASSERT_OK(call(&e, "vm.builtin.copy", 0, &i, 1, &out));
  assert_int_equal(out.kind, VM_VAL_INT);
  assert_int_equal(out.u.i, 42);
  vm_value_release(&s);
  env_fini(&e);
}

static void test_make_shape(void **state) {
  env_t e;
  env_init(&e, 0, 1, VM_ALLOC_POOLED);
  vm_value_t args[20];
  for (int i = 0; i < 20; i++) args[i] = vm_value_int(i + 1);
  vm_value_t out;
  ASSERT_OK(call(&e, "vm.builtin.make_shape", 0, args, 3, &out));
  vm_shape_t *s = vm_value_as_shape(&out);
  assert_non_null(s);
  assert_int_equal(s->ndim, 3);
  assert_int_equal(s->dims[0], 1);
  assert_int_equal(s->dims[2], 3);
  vm_value_release(&out);
  /* many dims (past the builtin's stack buffer) */
  ASSERT_OK(call(&e, "vm.builtin.make_shape", 0, args, 20, &out));
  assert_int_equal(vm_value_as_shape(&out)->ndim, 20);
  assert_int_equal(vm_value_as_shape(&out)->dims[19], 20);
  vm_value_release(&out);
  /* no dims: a scalar shape */
  ASSERT_OK(call(&e, "vm.builtin.make_shape", 0, args, 0, &out));
  assert_int_equal(vm_value_as_shape(&out)->ndim, 0);
  vm_value_release(&out);

  args[1] = vm_value_int(-1);
  ASSERT_STATUS(call(&e, "vm.builtin.make_shape", 0, args, 3, &out), VM_INVALID_ARGUMENT,
                "vm.builtin.make_shape: argument 1 (dim): -1 is negative");
  args[1] = vm_value_float(2.0);
  ASSERT_STATUS(call(&e, "vm.builtin.make_shape", 0, args, 3, &out), VM_INVALID_ARGUMENT,
                "argument 1 (dim): expected int, got float");
  args[17] = vm_value_bool(1);
  args[1] = vm_value_int(2);
  ASSERT_STATUS(call(&e, "vm.builtin.make_shape", 0, args, 20, &out), VM_INVALID_ARGUMENT,
                "argument 17 (dim): expected int, got bool");
  env_fini(&e);
}

static void test_match_shape(void **state) {
  env_t e;
  env_init(&e, 0, 1, VM_ALLOC_POOLED);
  const int64_t d234[] = {2, 3, 4}, d235[] = {2, 3, 5};
  vm_value_t t = vtensor(&e, VM_F32, 3, d234, NULL);
  vm_value_t s = vshape(3, d235);
  vm_value_t args[4] = {t, vm_value_int(2), vm_value_int(-1), vm_value_int(4)};
  vm_value_t out;
  ASSERT_OK(call(&e, "vm.builtin.match_shape", 0, args, 4, &out));
  assert_int_equal(out.kind, VM_VAL_NONE);
  args[0] = s;
  ASSERT_STATUS(call(&e, "vm.builtin.match_shape", 0, args, 4, &out), VM_INVALID_ARGUMENT,
                "vm.builtin.match_shape: shape mismatch: expected (2, ?, 4), got (2, 3, 5)");
  args[3] = vm_value_int(5);
  ASSERT_OK(call(&e, "vm.builtin.match_shape", 0, args, 4, &out));
  /* rank differs */
  ASSERT_STATUS(call(&e, "vm.builtin.match_shape", 0, args, 3, &out), VM_INVALID_ARGUMENT,
                "shape mismatch: expected (2, ?), got (2, 3, 5)");
  args[0] = t;
  ASSERT_STATUS(call(&e, "vm.builtin.match_shape", 0, args, 1, &out), VM_INVALID_ARGUMENT,
                "shape mismatch: expected (), got (2, 3, 4)");
  args[2] = vm_value_int(-2);
  ASSERT_STATUS(call(&e, "vm.builtin.match_shape", 0, args, 4, &out), VM_INVALID_ARGUMENT,
                "argument 2 (dim): expected a dim >= 0 or -1 (any), got -2");
  args[2] = vm_value_none();
  ASSERT_STATUS(call(&e, "vm.builtin.match_shape", 0, args, 4, &out), VM_INVALID_ARGUMENT,
                "argument 2 (dim): expected int, got none");
  args[0] = vm_value_int(3);
  ASSERT_STATUS(call(&e, "vm.builtin.match_shape", 0, args, 4, &out), VM_INVALID_ARGUMENT,
                "argument 0 (x): expected tensor or shape, got int");
  vm_value_release(&t);
  vm_value_release(&s);
  env_fini(&e);
}

static void test_shape_of_and_reshape(void **state) {
  env_t e;
  env_init(&e, 0, 1, VM_ALLOC_POOLED);
  const int64_t d23[] = {2, 3}, d32[] = {3, 2}, d6[] = {6}, d4[] = {4};
  vm_value_t t = vtensor(&e, VM_F32, 2, d23, NULL);
  vm_value_t out;
  ASSERT_OK(call(&e, "vm.builtin.shape_of", 0, &t, 1, &out));
  vm_shape_t *s = vm_value_as_shape(&out);
  assert_non_null(s);
  assert_int_equal(s->ndim, 2);
  assert_int_equal(s->dims[0], 2);
  assert_int_equal(s->dims[1], 3);
  vm_value_release(&out);
  vm_value_t i = vm_value_int(1);
  ASSERT_STATUS(call(&e, "vm.builtin.shape_of", 0, &i, 1, &out), VM_INVALID_ARGUMENT,
                "vm.builtin.shape_of: argument 0 (tensor): expected tensor, got int");

  vm_value_t s32 = vshape(2, d32), s6 = vshape(1, d6), s4 = vshape(1, d4);
  vm_value_t args[2] = {t, s32};
  ASSERT_OK(call(&e, "vm.builtin.reshape", 0, args, 2, &out));
  vm_tensor_t *r = vm_value_as_tensor(&out);
  assert_non_null(r);
  assert_ptr_equal(r->storage, vm_value_as_tensor(&t)->storage); /* a view, no copy */
  assert_int_equal(r->offset, vm_value_as_tensor(&t)->offset);
  assert_int_equal(r->shape[0], 3);
  assert_int_equal(r->shape[1], 2);
  vm_value_release(&out);
  args[1] = s6;
  ASSERT_OK(call(&e, "vm.builtin.reshape", 0, args, 2, &out));
  assert_int_equal(vm_value_as_tensor(&out)->ndim, 1);
  vm_value_release(&out);
  args[1] = s4;
  ASSERT_STATUS(call(&e, "vm.builtin.reshape", 0, args, 2, &out), VM_INVALID_ARGUMENT,
                "vm.builtin.reshape: cannot reshape (2, 3) (6 elements) to (4) (4 elements)");
  args[1] = i;
  ASSERT_STATUS(call(&e, "vm.builtin.reshape", 0, args, 2, &out), VM_INVALID_ARGUMENT,
                "argument 1 (shape): expected shape, got int");
  args[0] = s4;
  args[1] = s4;
  ASSERT_STATUS(call(&e, "vm.builtin.reshape", 0, args, 2, &out), VM_INVALID_ARGUMENT,
                "argument 0 (tensor): expected tensor, got shape");
  vm_value_release(&s32);
  vm_value_release(&s6);
  vm_value_release(&s4);
  vm_value_release(&t);
  env_fini(&e);
}

static void test_tuples(void **state) {
  env_t e;
  env_init(&e, 0, 1, VM_ALLOC_POOLED);
  vm_value_t s = vshape(1, (const int64_t[]){7});
  vm_value_t fields[2] = {vm_value_int(1), s};
  vm_value_t tup;
  ASSERT_OK(call(&e, "vm.builtin.make_tuple", 0, fields, 2, &tup));
  vm_tuple_t *t = vm_value_as_tuple(&tup);
  assert_non_null(t);
  assert_int_equal(t->size, 2);
  assert_int_equal(t->fields[0].u.i, 1);
  assert_ptr_equal(t->fields[1].u.obj, s.u.obj);

  vm_value_t empty;
  ASSERT_OK(call(&e, "vm.builtin.make_tuple", 0, NULL, 0, &empty));
  assert_int_equal(vm_value_as_tuple(&empty)->size, 0);
  vm_value_release(&empty);

  vm_value_t args[2] = {tup, vm_value_int(1)};
  vm_value_t out;
  ASSERT_OK(call(&e, "vm.builtin.tuple_getitem", 0, args, 2, &out));
  assert_ptr_equal(out.u.obj, s.u.obj);
  vm_value_release(&out);
  args[1] = vm_value_int(0);
  ASSERT_OK(call(&e, "vm.builtin.tuple_getitem", 0, args, 2, &out));
  assert_int_equal(out.kind, VM_VAL_INT);

  args[1] = vm_value_int(2);
  ASSERT_STATUS(call(&e, "vm.builtin.tuple_getitem", 0, args, 2, &out), VM_OUT_OF_RANGE,
                "vm.builtin.tuple_getitem: index 2 out of range for a tuple of 2 fields");
  args[1] = vm_value_int(-1);
  ASSERT_STATUS(call(&e, "vm.builtin.tuple_getitem", 0, args, 2, &out), VM_OUT_OF_RANGE,
                "index -1 out of range");
  args[1] = s;
  ASSERT_STATUS(call(&e, "vm.builtin.tuple_getitem", 0, args, 2, &out), VM_INVALID_ARGUMENT,
                "argument 1 (index): expected int, got shape");
  args[0] = s;
  args[1] = vm_value_int(0);
  ASSERT_STATUS(call(&e, "vm.builtin.tuple_getitem", 0, args, 2, &out), VM_INVALID_ARGUMENT,
                "argument 0 (tuple): expected tuple, got shape");
  vm_value_release(&tup);
  vm_value_release(&s);
  env_fini(&e);
}

static void test_null_value_and_kill_results(void **state) {
  env_t e;
  env_init(&e, 0, 1, VM_ALLOC_POOLED);
  vm_value_t out = vm_value_int(5);
  ASSERT_OK(call(&e, "vm.builtin.null_value", 0, NULL, 0, &out));
  assert_int_equal(out.kind, VM_VAL_NONE);
  vm_value_t args[3] = {vshape(1, (const int64_t[]){1}), vm_value_int(1), vm_value_none()};
  ASSERT_OK(call(&e, "vm.builtin.kill", 0, args, 3, &out));
  assert_int_equal(out.kind, VM_VAL_NONE);
  assert_int_equal(args[0].u.obj->refcount, 1); /* kill itself takes nothing */
  ASSERT_OK(call(&e, "vm.builtin.kill", 0, NULL, 0, &out));
  release_all(args, 3);
  env_fini(&e);
}

/* r0 = alloc_storage(1 KiB); record; [r0 = kill(r0)]; record; ret */
static vm_executable_t *build_kill_program(int with_kill) {
  vm_builder_t *b;
  ASSERT_OK(vm_builder_create(&b));
  uint32_t alloc_storage, kill, rec, main_idx, c_shape, c_dtype, c_scope;
  ASSERT_OK(vm_builder_declare_packed(b, "vm.builtin.alloc_storage", &alloc_storage));
  ASSERT_OK(vm_builder_declare_packed(b, "vm.builtin.kill", &kill));
  ASSERT_OK(vm_builder_declare_packed(b, "test.record", &rec));
  ASSERT_OK(vm_builder_const_shape(b, 1, (const int64_t[]){256}, &c_shape));
  ASSERT_OK(vm_builder_const_dtype(b, VM_F32, &c_dtype));
  ASSERT_OK(vm_builder_const_string(b, "global", 6, &c_scope));
  ASSERT_OK(vm_builder_declare_function(b, "main", 0, NULL, &main_idx));
  ASSERT_OK(vm_builder_begin_function(b, main_idx));
  ASSERT_OK(vm_builder_emit_call(b, VM_REG_VOID, rec, 0, NULL));
  const int64_t a1[] = {VM_REG(VM_REG_VM), VM_CONSTI(c_shape), VM_IMM(0), VM_CONSTI(c_dtype),
                        VM_CONSTI(c_scope)};
  ASSERT_OK(vm_builder_emit_call(b, 0, alloc_storage, 5, a1));
  ASSERT_OK(vm_builder_emit_call(b, VM_REG_VOID, rec, 0, NULL));
  if (with_kill) {
    const int64_t a2[] = {VM_REG(0)};
    ASSERT_OK(vm_builder_emit_call(b, 0, kill, 1, a2));
  }
  ASSERT_OK(vm_builder_emit_call(b, 1, rec, 0, NULL));
  ASSERT_OK(vm_builder_emit_ret(b, 1));
  ASSERT_OK(vm_builder_end_function(b, 0));
  vm_executable_t *exec;
  ASSERT_OK(vm_builder_finish(b, &exec));
  vm_builder_free(b);
  return exec;
}

static void test_kill_releases_early(void **state) {
  env_t e;
  env_init(&e, 0, 1, VM_ALLOC_POOLED);
  env_load(&e, build_kill_program(1));
  vm_value_t out;
  ASSERT_OK(vm_machine_invoke(e.m, "main", NULL, 0, &out));
  assert_int_equal(e.rec.n, 3);
  assert_int_equal(e.rec.bytes[1], e.rec.bytes[0] + 1024);
  assert_int_equal(e.rec.bytes[2], e.rec.bytes[0]); /* freed mid-function */
  vm_value_release(&out);

  /* without kill the storage lives until the frame ends */
  e.rec.n = 0;
  env_load(&e, build_kill_program(0));
  ASSERT_OK(vm_machine_invoke(e.m, "main", NULL, 0, &out));
  assert_int_equal(e.rec.n, 3);
  assert_int_equal(e.rec.bytes[2], e.rec.bytes[0] + 1024);
  vm_value_release(&out);
  env_fini(&e);
}

/* ---------------------------------------------------------------------------
 * trim_dim
 */

static void test_trim_dim(void **state) {
  env_t e;
  env_init(&e, 0, 1, VM_ALLOC_POOLED);
  const int64_t d23[] = {2, 3}, one[] = {1};
  const float x[6] = {1, 2, 3, 4, 5, 6};
  int64_t n = 2;
  vm_value_t args[3] = {vtensor(&e, VM_F32, 2, d23, x), vtensor(&e, VM_I64, 1, one, &n),
                        vm_value_int(1)};
  vm_value_t out;
  /* [2, 3] cut to [2, 2] along axis 1: the first 4 elements, same storage */
  ASSERT_OK(call(&e, "vm.builtin.trim_dim", 0, args, 3, &out));
  vm_tensor_t *t = vm_value_as_tensor(&out);
  assert_non_null(t);
  assert_int_equal(t->ndim, 2);
  assert_int_equal(t->shape[0], 2);
  assert_int_equal(t->shape[1], 2);
  assert_ptr_equal(t->storage, vm_value_as_tensor(&args[0])->storage);
  assert_memory_equal(host_data(&out), x, 4 * sizeof(float));
  vm_value_release(&out);
  /* 0 rows along axis 0: an empty view */
  *(int64_t *)host_data(&args[1]) = 0;
  args[2] = vm_value_int(0);
  ASSERT_OK(call(&e, "vm.builtin.trim_dim", 0, args, 3, &out));
  assert_int_equal(vm_value_as_tensor(&out)->shape[0], 0);
  assert_int_equal(vm_value_as_tensor(&out)->shape[1], 3);
  vm_value_release(&out);
  /* a count past the dim, a negative one, a bad axis, a count of another dtype */
  *(int64_t *)host_data(&args[1]) = 3;
  ASSERT_STATUS(call(&e, "vm.builtin.trim_dim", 0, args, 3, &out), VM_OUT_OF_RANGE,
                "vm.builtin.trim_dim: count 3 is out of range: 0 to 2 (dim 0 of x)");
  *(int64_t *)host_data(&args[1]) = -1;
  ASSERT_STATUS(call(&e, "vm.builtin.trim_dim", 0, args, 3, &out), VM_OUT_OF_RANGE,
                "count -1 is out of range");
  args[2] = vm_value_int(2);
  ASSERT_STATUS(call(&e, "vm.builtin.trim_dim", 0, args, 3, &out), VM_INVALID_ARGUMENT,
                "vm.builtin.trim_dim: argument 2 (axis): 2 is out of range for x of shape (2, 3)");
  args[2] = vm_value_int(0);
  vm_value_release(&args[1]);
  int32_t n32 = 1;
  args[1] = vtensor(&e, VM_I32, 1, one, &n32);
  ASSERT_STATUS(call(&e, "vm.builtin.trim_dim", 0, args, 3, &out), VM_INVALID_ARGUMENT,
                "argument 1 (count): expected a 1-element int64 tensor, got int32 (1)");
  vm_value_release(&args[1]);
  args[1] = vm_value_int(1);
  ASSERT_STATUS(call(&e, "vm.builtin.trim_dim", 0, args, 3, &out), VM_INVALID_ARGUMENT,
                "argument 1 (count): expected tensor, got int");
  release_all(args, 3);
  env_fini(&e);
}

/* ---------------------------------------------------------------------------
 * raise
 */

/* raise(code, message, x...) fails with that code and message whatever
 * follows; a code out of 1..16 or a message that is no string is a misuse. */
static void test_raise(void **state) {
  (void)state;
  env_t e;
  env_init(&e, 0, 1, VM_ALLOC_POOLED);
  const int64_t one[] = {1};
  float x = 1;
  vm_value_t args[3] = {vm_value_int(VM_INVALID_ARGUMENT), vstr("branch 'b' cannot run"),
                        vtensor(&e, VM_F32, 1, one, &x)};
  vm_value_t out;
  ASSERT_STATUS(call(&e, "vm.builtin.raise", 0, args, 2, &out), VM_INVALID_ARGUMENT,
                "branch 'b' cannot run");
  args[0] = vm_value_int(VM_UNIMPLEMENTED);
  ASSERT_STATUS(call(&e, "vm.builtin.raise", 0, args, 3, &out), VM_UNIMPLEMENTED,
                "branch 'b' cannot run");
  assert_int_equal(out.kind, VM_VAL_NONE);
  args[0] = vm_value_int(0);
  ASSERT_STATUS(call(&e, "vm.builtin.raise", 0, args, 2, &out), VM_INVALID_ARGUMENT,
                "vm.builtin.raise: argument 0 (code): expected a status code from 1 to 16, got 0");
  args[0] = vm_value_int(17);
  ASSERT_STATUS(call(&e, "vm.builtin.raise", 0, args, 2, &out), VM_INVALID_ARGUMENT,
                "vm.builtin.raise: argument 0 (code): expected a status code from 1 to 16, got 17");
  args[0] = vm_value_int(VM_INTERNAL);
  ASSERT_STATUS(call(&e, "vm.builtin.raise", 0, (vm_value_t[]){args[0], args[2]}, 2, &out),
                VM_INVALID_ARGUMENT,
                "vm.builtin.raise: argument 1 (message): expected string, got tensor");
  release_all(args, 3);
  env_fini(&e);
}

/* ---------------------------------------------------------------------------
 * read_if_cond
 */

static void expect_cond(env_t *e, vm_value_t v, int want) {
  vm_value_t out;
  ASSERT_OK(call(e, "vm.builtin.read_if_cond", 0, &v, 1, &out));
  assert_int_equal(out.kind, VM_VAL_BOOL);
  assert_int_equal(out.u.i, want);
}

static void expect_tensor_cond(env_t *e, vm_dtype_t dt, const void *elem, int want) {
  const int64_t one[] = {1};
  vm_value_t t = vtensor(e, dt, 1, one, elem);
  expect_cond(e, t, want);
  vm_value_release(&t);
}

static void test_read_if_cond(void **state) {
  env_t e;
  env_init(&e, 0, 1, VM_ALLOC_POOLED);
  expect_cond(&e, vm_value_int(0), 0);
  expect_cond(&e, vm_value_int(-3), 1);
  expect_cond(&e, vm_value_bool(1), 1);
  expect_cond(&e, vm_value_bool(0), 0);

  int32_t i32 = 7, z32 = 0;
  expect_tensor_cond(&e, VM_I32, &i32, 1);
  expect_tensor_cond(&e, VM_I32, &z32, 0);
  int64_t i64 = (int64_t)1 << 40; /* only high bits set */
  expect_tensor_cond(&e, VM_I64, &i64, 1);
  uint8_t u8 = 200, b1 = 1, b0 = 0;
  expect_tensor_cond(&e, VM_U8, &u8, 1);
  expect_tensor_cond(&e, VM_BOOL, &b1, 1);
  expect_tensor_cond(&e, VM_BOOL, &b0, 0);
  float f = 0.5f, fz = 0.0f, fnz = -0.0f;
  expect_tensor_cond(&e, VM_F32, &f, 1);
  expect_tensor_cond(&e, VM_F32, &fz, 0);
  expect_tensor_cond(&e, VM_F32, &fnz, 0); /* -0.0 is false */
  double d = -2.0;
  expect_tensor_cond(&e, VM_F64, &d, 1);
  uint16_t h1 = 0x3c00, hnz = 0x8000; /* 1.0 and -0.0 in float16 */
  expect_tensor_cond(&e, VM_F16, &h1, 1);
  expect_tensor_cond(&e, VM_F16, &hnz, 0);
  /* a packed element: its own low bits only, not the byte's padding */
  uint8_t i4pad = 0xf0, i4one = 0x01;
  expect_tensor_cond(&e, VM_DTYPE_MAKE(VM_DTYPE_INT, 4, 1), &i4pad, 0);
  expect_tensor_cond(&e, VM_DTYPE_MAKE(VM_DTYPE_INT, 4, 1), &i4one, 1);
  uint8_t u2pad = 0xfc;
  expect_tensor_cond(&e, VM_DTYPE_MAKE(VM_DTYPE_UINT, 2, 1), &u2pad, 0);

  /* any rank with one element; a view at an offset reads its own element */
  const int64_t d11[] = {1, 1};
  vm_value_t t = vtensor(&e, VM_I32, 2, d11, &i32);
  expect_cond(&e, t, 1);
  vm_value_release(&t);
  vm_value_t st;
  ASSERT_OK(vm_storage_alloc(e.host, 8, &st));
  int32_t pair[2] = {0, 9};
  memcpy(vm_value_as_storage(&st)->buffer.handle, pair, 8);
  ASSERT_OK(vm_tensor_new(vm_value_as_storage(&st), 4, VM_I32, NULL, 0, &t));
  expect_cond(&e, t, 1);
  vm_value_release(&t);
  vm_value_release(&st);

  vm_value_t out;
  const int64_t two[] = {2};
  t = vtensor(&e, VM_I32, 1, two, NULL);
  ASSERT_STATUS(call(&e, "vm.builtin.read_if_cond", 0, &t, 1, &out), VM_INVALID_ARGUMENT,
                "vm.builtin.read_if_cond: argument 0 (cond): expected a 1-element tensor, got "
                "shape (2)");
  vm_value_release(&t);
  const int64_t one[] = {1};
  t = vtensor(&e, VM_DTYPE_MAKE(VM_DTYPE_FLOAT, 32, 4), 1, one, NULL);
  ASSERT_STATUS(call(&e, "vm.builtin.read_if_cond", 0, &t, 1, &out), VM_INVALID_ARGUMENT,
                "expected an int, uint, bool or float tensor, got float32x4");
  vm_value_release(&t);
  vm_value_t s = vstr("yes");
  ASSERT_STATUS(call(&e, "vm.builtin.read_if_cond", 0, &s, 1, &out), VM_INVALID_ARGUMENT,
                "argument 0 (cond): expected int, bool or a 1-element tensor, got string");
  vm_value_release(&s);
  env_fini(&e);
}

/* main(x) { c = read_if_cond(x); if c { ret copy(1) } else { ret copy(0) } } */
static void test_read_if_cond_drives_if(void **state) {
  env_t e;
  env_init(&e, 0, 1, VM_ALLOC_POOLED);
  vm_builder_t *b;
  ASSERT_OK(vm_builder_create(&b));
  uint32_t rif, copy, main_idx;
  ASSERT_OK(vm_builder_declare_packed(b, "vm.builtin.read_if_cond", &rif));
  ASSERT_OK(vm_builder_declare_packed(b, "vm.builtin.copy", &copy));
  ASSERT_OK(vm_builder_declare_function(b, "main", 1, NULL, &main_idx));
  ASSERT_OK(vm_builder_begin_function(b, main_idx));
  vm_label_t lfalse = vm_builder_new_label(b);
  ASSERT_OK(vm_builder_emit_call(b, 1, rif, 1, (const int64_t[]){VM_REG(0)}));
  ASSERT_OK(vm_builder_emit_if(b, 1, lfalse));
  ASSERT_OK(vm_builder_emit_call(b, 2, copy, 1, (const int64_t[]){VM_IMM(1)}));
  ASSERT_OK(vm_builder_emit_ret(b, 2));
  ASSERT_OK(vm_builder_bind_label(b, lfalse));
  ASSERT_OK(vm_builder_emit_call(b, 2, copy, 1, (const int64_t[]){VM_IMM(0)}));
  ASSERT_OK(vm_builder_emit_ret(b, 2));
  ASSERT_OK(vm_builder_end_function(b, 0));
  vm_executable_t *exec;
  ASSERT_OK(vm_builder_finish(b, &exec));
  vm_builder_free(b);
  env_load(&e, exec);

  const int64_t one[] = {1};
  int32_t vals[] = {3, 0};
  for (int i = 0; i < 2; i++) {
    vm_value_t t = vtensor(&e, VM_I32, 1, one, &vals[i]);
    vm_value_t out;
    ASSERT_OK(vm_machine_invoke(e.m, "main", &t, 1, &out));
    assert_int_equal(out.kind, VM_VAL_INT);
    assert_int_equal(out.u.i, i == 0 ? 1 : 0);
    vm_value_release(&t);
  }
  env_fini(&e);
}

/* ---------------------------------------------------------------------------
 * to_device
 */

static void check_copy(const vm_value_t *src, const vm_value_t *dst, vm_device_t *dev) {
  vm_tensor_t *s = vm_value_as_tensor(src), *d = vm_value_as_tensor(dst);
  assert_non_null(d);
  assert_ptr_not_equal(d, s);
  assert_ptr_equal(d->storage->device, dev);
  assert_int_equal(d->ndim, s->ndim);
  for (uint32_t i = 0; i < s->ndim; i++) assert_int_equal(d->shape[i], s->shape[i]);
  assert_true(vm_dtype_equal(d->dtype, s->dtype));
  assert_memory_equal(host_data(dst), host_data(src), vm_tensor_nbytes_of(s));
}

static void test_to_device(void **state) {
  env_t e;
  env_init(&e, 0, 2, VM_ALLOC_POOLED);
  const int64_t dims[] = {3, 5};
  float data[15];
  for (int i = 0; i < 15; i++) data[i] = (float)i * 1.5f;
  vm_value_t t = vtensor(&e, VM_F32, 2, dims, data);
  vm_value_t args[2] = {t, vm_value_int(0)};
  vm_value_t out;
  /* already there: the same tensor */
  ASSERT_OK(call(&e, "vm.builtin.to_device", 0, args, 2, &out));
  assert_ptr_equal(out.u.obj, t.u.obj);
  vm_value_release(&out);
  /* another device: a copy there */
  args[1] = vm_value_int(1);
  ASSERT_OK(call(&e, "vm.builtin.to_device", 0, args, 2, &out));
  check_copy(&t, &out, e.devs[1]);
  assert_ptr_equal(vm_value_as_tensor(&out)->storage->allocator, vm_machine_allocator(e.m, 1));
  vm_value_release(&out);

  args[1] = vm_value_int(2);
  ASSERT_STATUS(call(&e, "vm.builtin.to_device", 0, args, 2, &out), VM_INVALID_ARGUMENT,
                "vm.builtin.to_device: argument 1 (device_index): device 2 out of range, the "
                "machine has 2 devices");
  args[1] = vm_value_float(0);
  ASSERT_STATUS(call(&e, "vm.builtin.to_device", 0, args, 2, &out), VM_INVALID_ARGUMENT,
                "argument 1 (device_index): expected int or device, got float");
  args[0] = vm_value_int(0);
  args[1] = vm_value_int(0);
  ASSERT_STATUS(call(&e, "vm.builtin.to_device", 0, args, 2, &out), VM_INVALID_ARGUMENT,
                "argument 0 (tensor): expected tensor, got int");
  vm_value_release(&t);
  env_fini(&e);
}

/* Both given devices pose as non-host devices (their ops still work on host
 * memory), so the machine appends a cpu device (index 2) and
 *   main(x) { a = to_device(x, 1); b = to_device(a, 2); ret (a, b) }
 * copies device to device through the bounded host staging buffer (several
 * chunks for 5 MiB), then device to host directly. */
static void test_to_device_staged(void **state) {
  env_t e;
  env_init(&e, 0, 2, VM_ALLOC_POOLED);
  e.devs[0]->type = VM_DEVICE_OPENCL;
  e.devs[1]->type = VM_DEVICE_OPENCL;

  vm_builder_t *b;
  ASSERT_OK(vm_builder_create(&b));
  uint32_t to_dev, tuple, main_idx;
  ASSERT_OK(vm_builder_declare_packed(b, "vm.builtin.to_device", &to_dev));
  ASSERT_OK(vm_builder_declare_packed(b, "vm.builtin.make_tuple", &tuple));
  ASSERT_OK(vm_builder_declare_function(b, "main", 1, NULL, &main_idx));
  ASSERT_OK(vm_builder_begin_function(b, main_idx));
  ASSERT_OK(vm_builder_emit_call(b, 1, to_dev, 2, (const int64_t[]){VM_REG(0), VM_IMM(1)}));
  ASSERT_OK(vm_builder_emit_call(b, 2, to_dev, 2, (const int64_t[]){VM_REG(1), VM_IMM(2)}));
  ASSERT_OK(vm_builder_emit_call(b, 3, tuple, 2, (const int64_t[]){VM_REG(1), VM_REG(2)}));
  ASSERT_OK(vm_builder_emit_ret(b, 3));
  ASSERT_OK(vm_builder_end_function(b, 0));
  vm_executable_t *exec;
  ASSERT_OK(vm_builder_finish(b, &exec));
  vm_builder_free(b);
  env_load(&e, exec);
  assert_int_equal(vm_machine_num_devices(e.m), 3);
  assert_int_equal(vm_machine_cpu_device_index(e.m), 2);

  const int64_t dims[] = {5 * 1024 * 1024 / 4 + 3};
  uint32_t *data = malloc((size_t)dims[0] * 4);
  assert_non_null(data);
  for (int64_t i = 0; i < dims[0]; i++) data[i] = (uint32_t)i * 2654435761u;
  vm_value_t t = vtensor(&e, VM_DTYPE_MAKE(VM_DTYPE_UINT, 32, 1), 1, dims, data);
  free(data);
  vm_value_t out;
  ASSERT_OK(vm_machine_invoke(e.m, "main", &t, 1, &out));
  vm_tuple_t *tup = vm_value_as_tuple(&out);
  assert_non_null(tup);
  check_copy(&t, &tup->fields[0], e.devs[1]);
  check_copy(&t, &tup->fields[1], vm_machine_device(e.m, 2));
  vm_value_release(&out);
  vm_value_release(&t);
  env_unload(&e);
  e.devs[0]->type = VM_DEVICE_CPU;
  e.devs[1]->type = VM_DEVICE_CPU;
  env_fini(&e);
}

/* ---------------------------------------------------------------------------
 * check_tensor_info
 */

static void test_check_tensor_info(void **state) {
  env_t e;
  env_init(&e, 0, 1, VM_ALLOC_POOLED);
  const int64_t dims[] = {2, 3};
  vm_value_t t = vtensor(&e, VM_F32, 2, dims, NULL);
  vm_value_t ctx = vstr("main: parameter x");
  static const char fn[] = "vm.builtin.check_tensor_info";
  vm_value_t out;
  vm_value_t a[4] = {t, vm_value_int(2), vm_value_dtype(VM_F32), ctx};
  ASSERT_OK(call(&e, fn, 0, a, 4, &out));
  assert_int_equal(out.kind, VM_VAL_NONE);
  a[1] = vm_value_int(-1);
  a[2] = vm_value_none();
  ASSERT_OK(call(&e, fn, 0, a, 4, &out));
  /* shorter forms: (x, ndim, err_ctx) and (x, err_ctx) */
  vm_value_t a3[3] = {t, vm_value_int(2), ctx};
  ASSERT_OK(call(&e, fn, 0, a3, 3, &out));
  vm_value_t a2[2] = {t, ctx};
  ASSERT_OK(call(&e, fn, 0, a2, 2, &out));

  a[1] = vm_value_int(3);
  ASSERT_STATUS(call(&e, fn, 0, a, 4, &out), VM_INVALID_ARGUMENT,
                "main: parameter x: expected a tensor of ndim 3, got ndim 2");
  a3[1] = vm_value_int(1);
  ASSERT_STATUS(call(&e, fn, 0, a3, 3, &out), VM_INVALID_ARGUMENT,
                "main: parameter x: expected a tensor of ndim 1");
  a[1] = vm_value_int(2);
  a[2] = vm_value_dtype(VM_I32);
  ASSERT_STATUS(call(&e, fn, 0, a, 4, &out), VM_INVALID_ARGUMENT,
                "main: parameter x: expected dtype int32, got float32");
  a[0] = vm_value_int(1);
  ASSERT_STATUS(call(&e, fn, 0, a, 4, &out), VM_INVALID_ARGUMENT,
                "main: parameter x: expected a tensor, got int");
  a2[0] = vm_value_none();
  ASSERT_STATUS(call(&e, fn, 0, a2, 2, &out), VM_INVALID_ARGUMENT,
                "main: parameter x: expected a tensor, got none");

  /* malformed checks are the program's fault, named as such */
  a[0] = t;
  a[3] = vm_value_int(0);
  ASSERT_STATUS(call(&e, fn, 0, a, 4, &out), VM_INVALID_ARGUMENT,
                "vm.builtin.check_tensor_info: argument 3 (err_ctx): expected string, got int");
  a[3] = ctx;
  a[1] = vm_value_int(-2);
  ASSERT_STATUS(call(&e, fn, 0, a, 4, &out), VM_INVALID_ARGUMENT,
                "argument 1 (ndim): expected >= 0 or -1 (any), got -2");
  a[1] = vm_value_float(2);
  ASSERT_STATUS(call(&e, fn, 0, a, 4, &out), VM_INVALID_ARGUMENT,
                "argument 1 (ndim): expected int, got float");
  a[1] = vm_value_int(2);
  a[2] = vm_value_int(5);
  ASSERT_STATUS(call(&e, fn, 0, a, 4, &out), VM_INVALID_ARGUMENT,
                "argument 2 (dtype): expected dtype, got int");
  vm_value_release(&t);
  vm_value_release(&ctx);
  env_fini(&e);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_registry_has_every_builtin),
      cmocka_unit_test(test_arity_errors),
      cmocka_unit_test(test_alloc_storage),
      cmocka_unit_test(test_alloc_storage_errors),
      cmocka_unit_test(test_alloc_storage_out_of_memory),
      cmocka_unit_test(test_alloc_tensor),
      cmocka_unit_test(test_pooled_steady_state_allocates_nothing),
      cmocka_unit_test(test_copy_returns_same_value),
      cmocka_unit_test(test_make_shape),
      cmocka_unit_test(test_match_shape),
      cmocka_unit_test(test_shape_of_and_reshape),
      cmocka_unit_test(test_tuples),
      cmocka_unit_test(test_null_value_and_kill_results),
      cmocka_unit_test(test_kill_releases_early),
      cmocka_unit_test(test_trim_dim),
      cmocka_unit_test(test_raise),
      cmocka_unit_test(test_read_if_cond),
      cmocka_unit_test(test_read_if_cond_drives_if),
      cmocka_unit_test(test_to_device),
      cmocka_unit_test(test_to_device_staged),
      cmocka_unit_test(test_check_tensor_info),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
