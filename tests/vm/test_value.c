/* Values: constructors, reference counts, recursive release, tensor views. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "test_util.h"
#include "vm/allocator.h"
#include "vm/device.h"
#include "vm/value.h"

typedef struct fixture {
  vm_device_t *dev;
  vm_allocator_t *alloc;
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof(*f));
  if (!f) return -1;
  if (vm_cpu_device_create(0, &f->dev) != VM_STATUS_OK) return -1;
  if (vm_allocator_create(f->dev, VM_ALLOC_POOLED, &f->alloc) != VM_STATUS_OK) return -1;
  *state = f;
  return 0;
}

/* Also proves that every test returned all its device memory. */
static int teardown(void **state) {
  fixture_t *f = *state;
  vm_alloc_stats_t s;
  vm_allocator_get_stats(f->alloc, &s);
  int leaked = s.bytes_in_use != 0;
  vm_allocator_destroy(f->alloc);
  if (vm_cpu_device_bytes_in_use(f->dev) != 0) leaked = 1;
  vm_device_destroy(f->dev);
  free(f);
  return leaked ? -1 : 0;
}

static void test_scalars(void **state) {
  vm_value_t v = vm_value_int(-7);
  int64_t i = 0;
  ASSERT_OK(vm_value_get_int(&v, "x", &i));
  assert_int_equal(i, -7);
  v = vm_value_bool(5);
  ASSERT_OK(vm_value_get_int(&v, "x", &i));
  assert_int_equal(i, 1);
  v = vm_value_float(1.5);
  ASSERT_STATUS(vm_value_get_int(&v, "argument 2 of vm.builtin.alloc_storage", &i),
                VM_INVALID_ARGUMENT,
                "argument 2 of vm.builtin.alloc_storage: expected an int, got float");
  v = vm_value_none();
  ASSERT_STATUS(vm_value_get_int(&v, "cond", &i), VM_INVALID_ARGUMENT, "got none");
  v = vm_value_dtype(VM_F32);
  assert_int_equal(v.kind, VM_VAL_DTYPE);
  assert_true(vm_dtype_equal(v.u.dtype, VM_F32));
  /* Releasing a scalar is a no-op that resets it. */
  vm_value_release(&v);
  assert_int_equal(v.kind, VM_VAL_NONE);
  vm_value_release(NULL);
}

static void test_kind_names(void **state) {
  assert_string_equal(vm_value_kind_name(VM_VAL_NONE), "none");
  assert_string_equal(vm_value_kind_name(VM_VAL_INT), "int");
  assert_string_equal(vm_value_kind_name(VM_VAL_FLOAT), "float");
  assert_string_equal(vm_value_kind_name(VM_VAL_BOOL), "bool");
  assert_string_equal(vm_value_kind_name(VM_VAL_DTYPE), "dtype");
  assert_string_equal(vm_value_kind_name(VM_VAL_DEVICE), "device");
  assert_string_equal(vm_value_kind_name(VM_VAL_FUNC), "func");
  assert_string_equal(vm_value_kind_name(VM_VAL_OPAQUE), "opaque");
  assert_string_equal(vm_value_kind_name(VM_VAL_STRING), "string");
  assert_string_equal(vm_value_kind_name(VM_VAL_SHAPE), "shape");
  assert_string_equal(vm_value_kind_name(VM_VAL_TENSOR), "tensor");
  assert_string_equal(vm_value_kind_name(VM_VAL_STORAGE), "storage");
  assert_string_equal(vm_value_kind_name(VM_VAL_TUPLE), "tuple");
  assert_string_equal(vm_value_kind_name(VM_VAL_CLOSURE), "closure");
  assert_string_equal(vm_value_kind_name(99), "unknown");
}

static void test_string(void **state) {
  vm_value_t v;
  ASSERT_OK(vm_string_new("hello world", 5, &v));
  vm_string_t *s = vm_value_as_string(&v);
  assert_non_null(s);
  assert_int_equal(s->len, 5);
  assert_string_equal(s->data, "hello"); /* NUL-terminated */
  assert_int_equal(s->hdr.refcount, 1);
  assert_null(vm_value_as_tensor(&v));
  vm_value_release(&v);
  assert_int_equal(v.kind, VM_VAL_NONE);

  ASSERT_OK(vm_string_new(NULL, 0, &v));
  assert_string_equal(vm_value_as_string(&v)->data, "");
  vm_value_release(&v);
}

static void test_shape(void **state) {
  const int64_t dims[] = {2, 3, 4};
  vm_value_t v;
  ASSERT_OK(vm_shape_new(dims, 3, &v));
  vm_shape_t *sh = vm_value_as_shape(&v);
  assert_non_null(sh);
  assert_int_equal(sh->ndim, 3);
  assert_memory_equal(sh->dims, dims, sizeof(dims));
  vm_value_release(&v);

  ASSERT_OK(vm_shape_new(NULL, 0, &v)); /* a scalar's shape */
  assert_int_equal(vm_value_as_shape(&v)->ndim, 0);
  vm_value_release(&v);
}

static void test_refcount(void **state) {
  vm_value_t a;
  ASSERT_OK(vm_string_new("x", 1, &a));
  vm_value_t b = a;
  vm_value_retain(&b);
  assert_int_equal(a.u.obj->refcount, 2);
  vm_value_release(&b);
  assert_int_equal(b.kind, VM_VAL_NONE);
  assert_int_equal(a.u.obj->refcount, 1);
  vm_object_retain(a.u.obj);
  vm_object_release(a.u.obj);
  assert_int_equal(a.u.obj->refcount, 1);
  vm_value_release(&a);
}

static void test_tuple_retains_fields(void **state) {
  vm_value_t s, sh;
  ASSERT_OK(vm_string_new("a", 1, &s));
  const int64_t d[] = {1};
  ASSERT_OK(vm_shape_new(d, 1, &sh));
  vm_value_t fields[] = {s, vm_value_int(3), sh, vm_value_float(2.0)};
  vm_value_t t;
  ASSERT_OK(vm_tuple_new(fields, 4, &t));
  vm_tuple_t *tp = vm_value_as_tuple(&t);
  assert_non_null(tp);
  assert_int_equal(tp->size, 4);
  assert_int_equal(tp->fields[1].u.i, 3);
  assert_int_equal(s.u.obj->refcount, 2);
  assert_int_equal(sh.u.obj->refcount, 2);
  /* The caller's references are its own: dropping them leaves the tuple's. */
  vm_value_release(&s);
  vm_value_release(&sh);
  assert_int_equal(tp->fields[0].u.obj->refcount, 1);
  assert_string_equal(vm_value_as_string(&tp->fields[0])->data, "a");
  vm_value_release(&t);

  ASSERT_OK(vm_tuple_new(NULL, 0, &t));
  assert_int_equal(vm_value_as_tuple(&t)->size, 0);
  vm_value_release(&t);
}

static void test_nested_tuple_release(void **state) {
  fixture_t *f = *state;
  /* ((tensor, "s"), (tensor,), tensor) with the tensor shared three ways. */
  const int64_t shape[] = {4};
  vm_value_t tensor, str, inner1, inner2, outer;
  ASSERT_OK(vm_tensor_alloc(f->alloc, VM_F32, shape, 1, &tensor));
  ASSERT_OK(vm_string_new("s", 1, &str));
  vm_value_t f1[] = {tensor, str};
  ASSERT_OK(vm_tuple_new(f1, 2, &inner1));
  ASSERT_OK(vm_tuple_new(&tensor, 1, &inner2));
  vm_value_t f3[] = {inner1, inner2, tensor};
  ASSERT_OK(vm_tuple_new(f3, 3, &outer));
  vm_value_release(&tensor);
  vm_value_release(&str);
  vm_value_release(&inner1);
  vm_value_release(&inner2);
  vm_tuple_t *o = vm_value_as_tuple(&outer);
  assert_int_equal(o->fields[2].u.obj->refcount, 3);
  vm_alloc_stats_t s;
  vm_allocator_get_stats(f->alloc, &s);
  assert_int_equal(s.bytes_in_use, 16);
  vm_value_release(&outer);
  vm_allocator_get_stats(f->alloc, &s);
  assert_int_equal(s.bytes_in_use, 0);
  assert_int_equal(s.frees, 1);
}

static void test_deep_nesting_releases_without_recursion(void **state) {
  /* A loop `t = (t,)` a million times: release must not overflow the stack
   * (ASan's larger frames would make a recursive release crash here). */
  vm_value_t t = vm_value_none();
  for (int i = 0; i < 1000000; i++) {
    vm_value_t next;
    ASSERT_OK(vm_tuple_new(&t, 1, &next));
    vm_value_release(&t);
    t = next;
  }
  vm_value_release(&t);
  /* Wide as well as deep: many dead children pending at once. */
  vm_value_t leaf;
  ASSERT_OK(vm_tuple_new(NULL, 0, &leaf));
  vm_value_t *many = calloc(1000, sizeof(*many));
  assert_non_null(many);
  for (int i = 0; i < 1000; i++) ASSERT_OK(vm_tuple_new(&leaf, 1, &many[i]));
  vm_value_t wide;
  ASSERT_OK(vm_tuple_new(many, 1000, &wide));
  for (int i = 0; i < 1000; i++) vm_value_release(&many[i]);
  vm_value_release(&leaf);
  free(many);
  vm_value_release(&wide);
}

static void test_closure(void **state) {
  vm_value_t s;
  ASSERT_OK(vm_string_new("bound", 5, &s));
  vm_value_t bound[] = {vm_value_int(1), s};
  vm_value_t c;
  ASSERT_OK(vm_closure_new(7, bound, 2, &c));
  vm_closure_t *cl = vm_value_as_closure(&c);
  assert_non_null(cl);
  assert_int_equal(cl->func_idx, 7);
  assert_int_equal(cl->num_bound, 2);
  assert_int_equal(s.u.obj->refcount, 2);
  vm_value_release(&s);
  /* A closure inside a tuple inside a closure. */
  vm_value_t t, c2;
  ASSERT_OK(vm_tuple_new(&c, 1, &t));
  ASSERT_OK(vm_closure_new(0, &t, 1, &c2));
  vm_value_release(&c);
  vm_value_release(&t);
  vm_value_release(&c2);

  ASSERT_OK(vm_closure_new(3, NULL, 0, &c));
  assert_int_equal(vm_value_as_closure(&c)->num_bound, 0);
  vm_value_release(&c);
}

static void test_storage_alloc(void **state) {
  fixture_t *f = *state;
  vm_value_t v;
  ASSERT_OK(vm_storage_alloc(f->alloc, 1000, &v));
  vm_storage_t *s = vm_value_as_storage(&v);
  assert_non_null(s);
  assert_ptr_equal(s->device, f->dev);
  assert_ptr_equal(s->allocator, f->alloc);
  assert_int_equal(s->nbytes, 1000);
  assert_true(s->alloc_size >= 1000);
  assert_non_null(s->buffer.handle);
  assert_int_equal((uintptr_t)s->buffer.handle % 64, 0);
  vm_alloc_stats_t st;
  vm_allocator_get_stats(f->alloc, &st);
  assert_int_equal(st.bytes_in_use, 1000);
  vm_value_release(&v);
  vm_allocator_get_stats(f->alloc, &st);
  assert_int_equal(st.bytes_in_use, 0);
  assert_int_equal(st.frees, 1);

  ASSERT_STATUS(vm_storage_alloc(NULL, 8, &v), VM_INVALID_ARGUMENT, "no allocator");
}

typedef struct borrow_user {
  int calls;
} borrow_user_t;

static void count_release(void *user) {
  ((borrow_user_t *)user)->calls++;
}

static void test_borrowed_storage(void **state) {
  fixture_t *f = *state;
  static char data[256] __attribute__((aligned(64)));
  borrow_user_t user = {0};
  vm_value_t sv;
  vm_buffer_t buf = {data};
  ASSERT_OK(vm_storage_borrow(f->dev, buf, sizeof(data), &user, count_release, &sv));
  vm_storage_t *s = vm_value_as_storage(&sv);
  assert_null(s->allocator);
  assert_int_equal(s->nbytes, 256);
  /* Two tensor views keep it alive; the callback runs once, at the end. */
  const int64_t shape[] = {8};
  vm_value_t t1, t2;
  ASSERT_OK(vm_tensor_new(s, 0, VM_F32, shape, 1, &t1));
  ASSERT_OK(vm_tensor_new(s, 32, VM_F32, shape, 1, &t2));
  vm_value_release(&sv);
  assert_int_equal(user.calls, 0);
  vm_value_release(&t1);
  assert_int_equal(user.calls, 0);
  vm_value_release(&t2);
  assert_int_equal(user.calls, 1);
  vm_alloc_stats_t st;
  vm_allocator_get_stats(f->alloc, &st);
  assert_int_equal(st.allocs, 0); /* borrowed memory never touches the allocator */

  /* No callback at all is fine too. */
  ASSERT_OK(vm_storage_borrow(f->dev, buf, sizeof(data), NULL, NULL, &sv));
  vm_value_release(&sv);
  ASSERT_STATUS(vm_storage_borrow(NULL, buf, 1, NULL, NULL, &sv), VM_INVALID_ARGUMENT, "no device");
}

static void test_tensor_alloc(void **state) {
  fixture_t *f = *state;
  const int64_t shape[] = {2, 3, 5};
  vm_value_t v;
  ASSERT_OK(vm_tensor_alloc(f->alloc, VM_F16, shape, 3, &v));
  vm_tensor_t *t = vm_value_as_tensor(&v);
  assert_non_null(t);
  assert_int_equal(t->ndim, 3);
  assert_memory_equal(t->shape, shape, sizeof(shape));
  assert_int_equal(t->offset, 0);
  assert_int_equal(vm_tensor_numel(t), 30);
  assert_int_equal(vm_tensor_nbytes_of(t), 60);
  assert_int_equal(t->storage->nbytes, 60);
  assert_int_equal(t->storage->hdr.refcount, 1); /* only the tensor holds it */
  vm_value_release(&v);

  /* Scalars and empty tensors. */
  ASSERT_OK(vm_tensor_alloc(f->alloc, VM_I64, NULL, 0, &v));
  assert_int_equal(vm_tensor_numel(vm_value_as_tensor(&v)), 1);
  assert_int_equal(vm_tensor_nbytes_of(vm_value_as_tensor(&v)), 8);
  vm_value_release(&v);
  const int64_t empty[] = {4, 0};
  ASSERT_OK(vm_tensor_alloc(f->alloc, VM_F32, empty, 2, &v));
  assert_int_equal(vm_tensor_nbytes_of(vm_value_as_tensor(&v)), 0);
  vm_value_release(&v);
  /* Vector lanes count in the byte size. */
  const int64_t four[] = {4};
  ASSERT_OK(vm_tensor_alloc(f->alloc, VM_DTYPE_MAKE(VM_DTYPE_FLOAT, 32, 4), four, 1, &v));
  assert_int_equal(vm_tensor_nbytes_of(vm_value_as_tensor(&v)), 64);
  vm_value_release(&v);
}

static void test_tensor_alloc_errors(void **state) {
  fixture_t *f = *state;
  vm_value_t v;
  const int64_t neg[] = {2, -1};
  ASSERT_STATUS(vm_tensor_alloc(f->alloc, VM_F32, neg, 2, &v), VM_INVALID_ARGUMENT,
                "shape [2, -1] has negative dimension 1");
  const int64_t huge[] = {INT64_MAX, 2};
  ASSERT_STATUS(vm_tensor_alloc(f->alloc, VM_F32, huge, 2, &v), VM_INVALID_ARGUMENT,
                "byte size of shape [9223372036854775807, 2] x float32 overflows");
  /* numel fits int64 but the bytes do not. */
  const int64_t big[] = {INT64_MAX / 2};
  ASSERT_STATUS(vm_tensor_alloc(f->alloc, VM_F32, big, 1, &v), VM_INVALID_ARGUMENT, "overflows");
  ASSERT_STATUS(vm_tensor_alloc(f->alloc, VM_DTYPE_MAKE(VM_DTYPE_FLOAT, 8, 1), neg, 0, &v),
                VM_INVALID_ARGUMENT, "invalid dtype float8");
  int64_t many[40];
  for (int i = 0; i < 40; i++) many[i] = 1;
  ASSERT_STATUS(vm_tensor_alloc(f->alloc, VM_F32, many, 40, &v), VM_INVALID_ARGUMENT,
                "tensor rank 40 exceeds the maximum of 32");
  ASSERT_OK(vm_tensor_alloc(f->alloc, VM_F32, many, 32, &v));
  vm_value_release(&v);
  /* Valid shape, but more than any device holds: the allocator says so. */
  const int64_t tb[] = {INT64_C(1) << 50};
  ASSERT_STATUS(vm_tensor_alloc(f->alloc, VM_F32, tb, 1, &v), VM_RESOURCE_EXHAUSTED, NULL);
  vm_alloc_stats_t st;
  vm_allocator_get_stats(f->alloc, &st);
  assert_int_equal(st.bytes_in_use, 0);
}

static void test_tensor_view_bounds(void **state) {
  fixture_t *f = *state;
  vm_value_t sv;
  ASSERT_OK(vm_storage_alloc(f->alloc, 100, &sv));
  vm_storage_t *s = vm_value_as_storage(&sv);
  const int64_t five[] = {5};
  vm_value_t v;
  /* Exactly to the end is fine. */
  ASSERT_OK(vm_tensor_new(s, 80, VM_F32, five, 1, &v));
  assert_int_equal(s->hdr.refcount, 2);
  assert_int_equal(vm_value_as_tensor(&v)->offset, 80);
  vm_value_release(&v);
  assert_int_equal(s->hdr.refcount, 1);
  ASSERT_OK(vm_tensor_new(s, 100, VM_F32, (const int64_t[]){0}, 1, &v));
  vm_value_release(&v);
  /* One byte past. */
  ASSERT_STATUS(
      vm_tensor_new(s, 81, VM_F32, five, 1, &v), VM_INVALID_ARGUMENT,
      "tensor view [5] float32 of 20 bytes at offset 81 exceeds its storage of 100 bytes");
  const int64_t big[] = {26};
  ASSERT_STATUS(vm_tensor_new(s, 0, VM_F32, big, 1, &v), VM_INVALID_ARGUMENT,
                "of 104 bytes at offset 0 exceeds its storage of 100 bytes");
  /* offset + bytes wraps around uint64. */
  ASSERT_STATUS(vm_tensor_new(s, UINT64_MAX - 4, VM_F32, five, 1, &v), VM_INVALID_ARGUMENT,
                "exceeds its storage of 100 bytes");
  ASSERT_STATUS(vm_tensor_new(s, UINT64_MAX, VM_F32, (const int64_t[]){0}, 1, &v),
                VM_INVALID_ARGUMENT, "exceeds its storage");
  const int64_t ovf[] = {INT64_MAX, 2};
  ASSERT_STATUS(vm_tensor_new(s, 0, VM_I8, ovf, 2, &v), VM_INVALID_ARGUMENT, "overflows");
  const int64_t neg[] = {-3};
  ASSERT_STATUS(vm_tensor_new(s, 0, VM_I8, neg, 1, &v), VM_INVALID_ARGUMENT,
                "negative dimension 0");
  ASSERT_STATUS(vm_tensor_new(s, 0, VM_DTYPE_MAKE(VM_DTYPE_INT, 32, 0), five, 1, &v),
                VM_INVALID_ARGUMENT, "invalid dtype");
  ASSERT_STATUS(vm_tensor_new(NULL, 0, VM_I8, five, 1, &v), VM_INVALID_ARGUMENT, "no storage");
  /* A long shape is cut in the message rather than overflowing it. */
  int64_t longshape[32];
  for (int i = 0; i < 32; i++) longshape[i] = 1000000000000 + i;
  ASSERT_STATUS(vm_tensor_new(s, 0, VM_I8, longshape, 32, &v), VM_INVALID_ARGUMENT, "...]");
  assert_int_equal(s->hdr.refcount, 1); /* failures retain nothing */
  vm_value_release(&sv);
}

static void test_typed_access(void **state) {
  vm_value_t v = vm_value_int(1);
  assert_null(vm_value_as_tensor(&v));
  assert_null(vm_value_as_shape(&v));
  assert_null(vm_value_as_storage(&v));
  assert_null(vm_value_as_tuple(&v));
  assert_null(vm_value_as_string(&v));
  assert_null(vm_value_as_closure(&v));
}

/* vm_dtype_load_*: every storable single-lane dtype read from unaligned
 * bytes, as the CLI prints outputs and the compiler folds constants. */
static void test_dtype_load(void **state) {
  (void)state;
  uint8_t buf[1 + 8];
  uint8_t *p = buf + 1; /* unaligned on purpose */
  float f = -2.75f;
  memcpy(p, &f, 4);
  assert_true(vm_dtype_load_f64(VM_F32, p, 0) == -2.75);
  assert_int_equal(vm_dtype_load_i64(VM_F32, p, 0), -2);
  uint16_t h[2] = {0x3e00, 0xfc00}; /* 1.5, -inf */
  memcpy(p, h, 4);
  assert_true(vm_dtype_load_f64(VM_F16, p, 0) == 1.5);
  assert_true(isinf(vm_dtype_load_f64(VM_F16, p, 1)) && vm_dtype_load_f64(VM_F16, p, 1) < 0);
  assert_int_equal(vm_dtype_load_i64(VM_F16, p, 1), INT64_MIN);
  uint16_t bf = 0x4049; /* bfloat16 3.140625 */
  memcpy(p, &bf, 2);
  assert_true(vm_dtype_load_f64(VM_DTYPE_MAKE(VM_DTYPE_BFLOAT, 16, 1), p, 0) == 3.140625);
  double d = NAN;
  memcpy(p, &d, 8);
  assert_true(isnan(vm_dtype_load_f64(VM_DTYPE_MAKE(VM_DTYPE_FLOAT, 64, 1), p, 0)));
  assert_int_equal(vm_dtype_load_i64(VM_DTYPE_MAKE(VM_DTYPE_FLOAT, 64, 1), p, 0), 0);
  memset(p, 0xff, 8);
  assert_int_equal(vm_dtype_load_i64(VM_DTYPE_MAKE(VM_DTYPE_INT, 8, 1), p, 0), -1);
  assert_int_equal(vm_dtype_load_i64(VM_DTYPE_MAKE(VM_DTYPE_UINT, 8, 1), p, 0), 255);
  assert_int_equal(vm_dtype_load_i64(VM_DTYPE_MAKE(VM_DTYPE_INT, 16, 1), p, 0), -1);
  assert_int_equal(vm_dtype_load_i64(VM_DTYPE_MAKE(VM_DTYPE_UINT, 16, 1), p, 0), 65535);
  assert_int_equal(vm_dtype_load_i64(VM_DTYPE_MAKE(VM_DTYPE_INT, 32, 1), p, 0), -1);
  assert_int_equal(vm_dtype_load_i64(VM_DTYPE_MAKE(VM_DTYPE_UINT, 32, 1), p, 0), 4294967295LL);
  assert_int_equal(vm_dtype_load_i64(VM_DTYPE_MAKE(VM_DTYPE_INT, 64, 1), p, 0), -1);
  assert_true(vm_dtype_load_f64(VM_DTYPE_MAKE(VM_DTYPE_UINT, 64, 1), p, 0) == 18446744073709551615.0);
  int64_t big = INT64_MAX;
  memcpy(p, &big, 8);
  assert_true(vm_dtype_load_i64(VM_DTYPE_MAKE(VM_DTYPE_INT, 64, 1), p, 0) == INT64_MAX);
  p[1] = 7;
  assert_int_equal(vm_dtype_load_i64(VM_DTYPE_MAKE(VM_DTYPE_BOOL, 8, 1), p, 1), 1);
  assert_true(vm_dtype_load_f64(VM_DTYPE_MAKE(VM_DTYPE_BOOL, 8, 1), p, 1) == 1.0);
  assert_true(isnan(vm_dtype_load_f64(VM_DTYPE_MAKE(9, 8, 1), p, 0)));
  assert_int_equal(vm_dtype_load_i64(VM_DTYPE_MAKE(9, 8, 1), p, 0), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_scalars),
      cmocka_unit_test(test_dtype_load),
      cmocka_unit_test(test_kind_names),
      cmocka_unit_test(test_string),
      cmocka_unit_test(test_shape),
      cmocka_unit_test(test_refcount),
      cmocka_unit_test(test_tuple_retains_fields),
      cmocka_unit_test_setup_teardown(test_nested_tuple_release, setup, teardown),
      cmocka_unit_test(test_deep_nesting_releases_without_recursion),
      cmocka_unit_test(test_closure),
      cmocka_unit_test_setup_teardown(test_storage_alloc, setup, teardown),
      cmocka_unit_test_setup_teardown(test_borrowed_storage, setup, teardown),
      cmocka_unit_test_setup_teardown(test_tensor_alloc, setup, teardown),
      cmocka_unit_test_setup_teardown(test_tensor_alloc_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_tensor_view_bounds, setup, teardown),
      cmocka_unit_test(test_typed_access),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
