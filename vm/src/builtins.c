/* The vm.builtin.* packed functions: memory, shapes, tuples, control and
 * device moves, named after TVM's Relax VM builtins where the job is the same.
 *
 *   name                          arguments                               result
 *   ----------------------------  --------------------------------------  -----------
 *   vm.builtin.alloc_storage      (vm, shape, device_index:int,           storage
 *                                  dtype_hint:dtype, scope:string)
 *   vm.builtin.alloc_tensor       (storage, offset:int, shape, dtype)     tensor
 *   vm.builtin.copy               (x)                                     x
 *   vm.builtin.make_shape         (d0:int, d1:int, ...)                   shape
 *   vm.builtin.match_shape        (tensor|shape, d0:int, ...) -1 = any    none
 *   vm.builtin.shape_of           (tensor)                                shape
 *   vm.builtin.reshape            (tensor, shape)                         tensor
 *   vm.builtin.make_tuple         (x0, x1, ...)                           tuple
 *   vm.builtin.tuple_getitem      (tuple, index:int)                      field
 *   vm.builtin.null_value         ()                                      none
 *   vm.builtin.kill               (x...)                                  none
 *   vm.builtin.read_if_cond       (int|bool|1-element tensor)             bool
 *   vm.builtin.to_device          (tensor, device_index:int)              tensor
 *   vm.builtin.check_tensor_info  (x, [ndim:int], [dtype|none], err_ctx)  none
 *   vm.builtin.trim_dim           (x, count:int64 tensor, axis:int)       tensor
 *   vm.builtin.raise              (code:int, message:string, x...)        (fails)
 *
 * docs/builtins.md documents each one with its errors. Every builtin checks
 * its argument count and kinds and answers misuse with INVALID_ARGUMENT
 * naming the builtin, the argument and what was expected and given: the
 * arguments come from an executable that arrived over the network, and the
 * verifier cannot know run-time kinds.
 *
 * Only the public API of vm.h, value.h and allocator.h is used here, so the
 * builtins are exactly as capable as any operator library registered later.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vm/allocator.h"
#include "vm/value.h"
#include "vm/vm.h"

/* Bytes moved per step when a tensor crosses between two non-host devices:
 * bounds the host staging buffer whatever the tensor size. */
#define STAGING_CHUNK_BYTES ((uint64_t)4 << 20)

/* ---------------------------------------------------------------------------
 * Argument checking helpers. Each returns an owned status (NULL = OK).
 */

static vm_status_t arity_error(const char *fn, const char *expected, uint32_t nargs) {
  return vm_status_make(VM_INVALID_ARGUMENT, "%s: expected %s, got %u argument%s", fn, expected,
                        nargs, nargs == 1 ? "" : "s");
}

static vm_status_t check_arity(const char *fn, uint32_t nargs, uint32_t want) {
  if (nargs == want) return VM_STATUS_OK;
  char buf[48];
  snprintf(buf, sizeof(buf), "%u argument%s", want, want == 1 ? "" : "s");
  return arity_error(fn, buf, nargs);
}

static vm_status_t kind_error(const char *fn, uint32_t idx, const char *name, const char *expected,
                              const vm_value_t *got) {
  return vm_status_make(VM_INVALID_ARGUMENT, "%s: argument %u (%s): expected %s, got %s", fn, idx,
                        name, expected, vm_value_kind_name(got->kind));
}

static vm_status_t get_int(const char *fn, const vm_value_t *args, uint32_t idx, const char *name,
                           int64_t *out) {
  if (args[idx].kind != VM_VAL_INT) return kind_error(fn, idx, name, "int", &args[idx]);
  *out = args[idx].u.i;
  return VM_STATUS_OK;
}

/* Device index given as an int or a device value, range-checked against the
 * machine's devices. */
static vm_status_t get_device_index(vm_machine_t *m, const char *fn, const vm_value_t *args,
                                    uint32_t idx, uint32_t *out) {
  const vm_value_t *v = &args[idx];
  if (v->kind != VM_VAL_INT && v->kind != VM_VAL_DEVICE)
    return kind_error(fn, idx, "device_index", "int or device", v);
  uint32_t n = vm_machine_num_devices(m);
  if (v->u.i < 0 || (uint64_t)v->u.i >= n)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "%s: argument %u (device_index): device %lld out of range, the machine "
                          "has %u device%s",
                          fn, idx, (long long)v->u.i, n, n == 1 ? "" : "s");
  *out = (uint32_t)v->u.i;
  return VM_STATUS_OK;
}

static vm_status_t get_dtype(const char *fn, const vm_value_t *args, uint32_t idx, const char *name,
                             vm_dtype_t *out) {
  if (args[idx].kind != VM_VAL_DTYPE) return kind_error(fn, idx, name, "dtype", &args[idx]);
  vm_dtype_t dt = args[idx].u.dtype;
  if (!vm_dtype_valid(dt))
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "%s: argument %u (%s): unsupported dtype (code %u, bits %u, lanes %u)",
                          fn, idx, name, dt.code, dt.bits, dt.lanes);
  *out = dt;
  return VM_STATUS_OK;
}

static vm_status_t get_shape(const char *fn, const vm_value_t *args, uint32_t idx, const char *name,
                             vm_shape_t **out) {
  vm_shape_t *s = vm_value_as_shape(&args[idx]);
  if (!s) return kind_error(fn, idx, name, "shape", &args[idx]);
  *out = s;
  return VM_STATUS_OK;
}

static vm_status_t get_tensor(const char *fn, const vm_value_t *args, uint32_t idx,
                              const char *name, vm_tensor_t **out) {
  vm_tensor_t *t = vm_value_as_tensor(&args[idx]);
  if (!t) return kind_error(fn, idx, name, "tensor", &args[idx]);
  *out = t;
  return VM_STATUS_OK;
}

static vm_status_t need_machine(vm_machine_t *m, const char *fn) {
  if (m) return VM_STATUS_OK;
  return vm_status_make(VM_FAILED_PRECONDITION, "%s: must be called by a machine", fn);
}

/* Writes "(2, ?, 4)" into buf (always terminated; "...)" when cut).
 * any_minus_one: print -1 as "?" (a pattern rather than a shape). */
static const char *format_dims(const int64_t *dims, uint32_t ndim, int any_minus_one, char *buf,
                               size_t buflen) {
  size_t len = 0;
  int cut = 0;
  len += (size_t)snprintf(buf, buflen, "(");
  for (uint32_t i = 0; i < ndim; i++) {
    char item[32];
    if (any_minus_one && dims[i] == -1)
      snprintf(item, sizeof(item), "%s?", i ? ", " : "");
    else
      snprintf(item, sizeof(item), "%s%lld", i ? ", " : "", (long long)dims[i]);
    size_t il = strlen(item);
    if (len + il + 5 >= buflen) { /* room for "...)" + NUL */
      cut = 1;
      break;
    }
    memcpy(buf + len, item, il + 1);
    len += il;
  }
  snprintf(buf + len, buflen - len, "%s)", !cut ? "" : len > 1 ? ", ..." : "...");
  return buf;
}

/* ---------------------------------------------------------------------------
 * Memory
 */

/* alloc_storage(vm, shape, device_index, dtype_hint, scope) -> storage of
 * numel(shape) * bytes(dtype_hint) bytes from that device's allocator. */
static vm_status_t b_alloc_storage(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                   vm_value_t *out, void *user) {
  static const char fn[] = "vm.builtin.alloc_storage";
  VM_RETURN_IF_ERROR(check_arity(fn, nargs, 5));
  VM_RETURN_IF_ERROR(need_machine(m, fn));
  if (args[0].kind != VM_VAL_OPAQUE) return kind_error(fn, 0, "vm", "the VM (%vm)", &args[0]);
  vm_shape_t *shape = NULL;
  uint32_t dev_idx = 0;
  vm_dtype_t dt = VM_F32;
  VM_RETURN_IF_ERROR(get_shape(fn, args, 1, "shape", &shape));
  VM_RETURN_IF_ERROR(get_device_index(m, fn, args, 2, &dev_idx));
  VM_RETURN_IF_ERROR(get_dtype(fn, args, 3, "dtype_hint", &dt));
  const vm_string_t *scope = vm_value_as_string(&args[4]);
  if (!scope) return kind_error(fn, 4, "scope", "string", &args[4]);
  /* Only linear memory exists in this VM; an image scope such as "texture"
   * would need a different allocation path, so refuse it rather than hand out
   * memory of the wrong layout. */
  if (scope->len != 0 && !(scope->len == 6 && memcmp(scope->data, "global", 6) == 0))
    return vm_status_make(VM_UNIMPLEMENTED,
                          "%s: argument 4 (scope): memory scope '%.64s' is not supported "
                          "(use \"global\" or \"\")",
                          fn, scope->data);
  uint64_t nbytes;
  if (vm_tensor_nbytes(dt, shape->dims, shape->ndim, &nbytes) != 0) {
    char sbuf[160];
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "%s: argument 1 (shape): %s has a negative dim or its byte size "
                          "overflows",
                          fn, format_dims(shape->dims, shape->ndim, 0, sbuf, sizeof(sbuf)));
  }
  vm_allocator_t *alloc = vm_machine_allocator(m, dev_idx);
  if (!alloc) return vm_status_make(VM_INTERNAL, "%s: device %u has no allocator", fn, dev_idx);
  return vm_status_annotate(vm_storage_alloc(alloc, nbytes, out), "%s", fn);
}

/* alloc_tensor(storage, offset, shape, dtype) -> a tensor view at offset.
 * The view retains the storage. */
static vm_status_t b_alloc_tensor(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                  vm_value_t *out, void *user) {
  static const char fn[] = "vm.builtin.alloc_tensor";
  VM_RETURN_IF_ERROR(check_arity(fn, nargs, 4));
  vm_storage_t *st = vm_value_as_storage(&args[0]);
  if (!st) return kind_error(fn, 0, "storage", "storage", &args[0]);
  int64_t offset = 0;
  vm_shape_t *shape = NULL;
  vm_dtype_t dt = VM_F32;
  VM_RETURN_IF_ERROR(get_int(fn, args, 1, "offset", &offset));
  VM_RETURN_IF_ERROR(get_shape(fn, args, 2, "shape", &shape));
  VM_RETURN_IF_ERROR(get_dtype(fn, args, 3, "dtype", &dt));
  if (offset < 0)
    return vm_status_make(VM_INVALID_ARGUMENT, "%s: argument 1 (offset): %lld is negative", fn,
                          (long long)offset);
  char sbuf[160], dbuf[24];
  uint64_t nbytes;
  if (vm_tensor_nbytes(dt, shape->dims, shape->ndim, &nbytes) != 0)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "%s: argument 2 (shape): %s has a negative dim or its byte size "
                          "overflows",
                          fn, format_dims(shape->dims, shape->ndim, 0, sbuf, sizeof(sbuf)));
  /* Checked here (not only in vm_tensor_new) so the message names this
   * builtin and the sizes the program asked for. */
  if ((uint64_t)offset > st->nbytes || nbytes > st->nbytes - (uint64_t)offset)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "%s: storage too small: offset %llu + %llu bytes of %s %s > storage "
                          "size %llu bytes",
                          fn, (unsigned long long)offset, (unsigned long long)nbytes,
                          vm_dtype_str(dt, dbuf, sizeof(dbuf)),
                          format_dims(shape->dims, shape->ndim, 0, sbuf, sizeof(sbuf)),
                          (unsigned long long)st->nbytes);
  return vm_status_annotate(vm_tensor_new(st, (uint64_t)offset, dt, shape->dims, shape->ndim, out),
                            "%s", fn);
}

/* ---------------------------------------------------------------------------
 * Values, shapes and tuples
 */

/* copy(x) -> x, with one more reference (objects are immutable views). */
static vm_status_t b_copy(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                          void *user) {
  VM_RETURN_IF_ERROR(check_arity("vm.builtin.copy", nargs, 1));
  vm_value_retain(&args[0]);
  *out = args[0];
  return VM_STATUS_OK;
}

static vm_status_t b_make_shape(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                vm_value_t *out, void *user) {
  static const char fn[] = "vm.builtin.make_shape";
  int64_t small[16];
  int64_t *dims = small;
  if (nargs > 16) {
    dims = malloc((size_t)nargs * sizeof(*dims));
    if (!dims) return vm_status_make(VM_RESOURCE_EXHAUSTED, "%s: out of host memory", fn);
  }
  vm_status_t st = VM_STATUS_OK;
  for (uint32_t i = 0; i < nargs; i++) {
    if (args[i].kind != VM_VAL_INT) {
      st = kind_error(fn, i, "dim", "int", &args[i]);
      goto done;
    }
    if (args[i].u.i < 0) {
      st = vm_status_make(VM_INVALID_ARGUMENT, "%s: argument %u (dim): %lld is negative", fn, i,
                          (long long)args[i].u.i);
      goto done;
    }
    dims[i] = args[i].u.i;
  }
  st = vm_shape_new(dims, nargs, out);
done:
  if (dims != small) free(dims);
  return st;
}

/* match_shape(x, d0, ...): asserts x's shape against a pattern where -1
 * matches any extent. */
static vm_status_t b_match_shape(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                 vm_value_t *out, void *user) {
  static const char fn[] = "vm.builtin.match_shape";
  if (nargs < 1) return arity_error(fn, "at least 1 argument", nargs);
  const int64_t *dims;
  uint32_t ndim;
  if (args[0].kind == VM_VAL_TENSOR) {
    const vm_tensor_t *t = vm_value_as_tensor(&args[0]);
    dims = t->shape;
    ndim = t->ndim;
  } else if (args[0].kind == VM_VAL_SHAPE) {
    const vm_shape_t *s = vm_value_as_shape(&args[0]);
    dims = s->dims;
    ndim = s->ndim;
  } else {
    return kind_error(fn, 0, "x", "tensor or shape", &args[0]);
  }
  uint32_t want = nargs - 1;
  int mismatch = want != ndim;
  for (uint32_t i = 0; i < want; i++) {
    const vm_value_t *d = &args[1 + i];
    if (d->kind != VM_VAL_INT) return kind_error(fn, 1 + i, "dim", "int", d);
    if (d->u.i < -1)
      return vm_status_make(VM_INVALID_ARGUMENT,
                            "%s: argument %u (dim): expected a dim >= 0 or -1 (any), got %lld", fn,
                            1 + i, (long long)d->u.i);
    if (!mismatch && d->u.i != -1 && d->u.i != dims[i]) mismatch = 1;
  }
  if (!mismatch) return VM_STATUS_OK;
  /* Rebuild the pattern as plain dims for the message. */
  int64_t pat_small[16] = {0};
  int64_t *pat = pat_small;
  if (want > 16) {
    pat = malloc((size_t)want * sizeof(*pat));
    if (!pat) return vm_status_make(VM_INVALID_ARGUMENT, "%s: shape mismatch", fn);
  }
  for (uint32_t i = 0; i < want; i++) pat[i] = args[1 + i].u.i;
  char ebuf[160], gbuf[160];
  vm_status_t st = vm_status_make(VM_INVALID_ARGUMENT, "%s: shape mismatch: expected %s, got %s",
                                  fn, format_dims(pat, want, 1, ebuf, sizeof(ebuf)),
                                  format_dims(dims, ndim, 0, gbuf, sizeof(gbuf)));
  if (pat != pat_small) free(pat);
  return st;
}

static vm_status_t b_shape_of(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                              vm_value_t *out, void *user) {
  static const char fn[] = "vm.builtin.shape_of";
  VM_RETURN_IF_ERROR(check_arity(fn, nargs, 1));
  vm_tensor_t *t = NULL;
  VM_RETURN_IF_ERROR(get_tensor(fn, args, 0, "tensor", &t));
  return vm_shape_new(t->shape, t->ndim, out);
}

/* reshape(tensor, shape) -> a view of the same bytes (same storage and
 * offset) with another shape of equal element count. */
static vm_status_t b_reshape(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                             vm_value_t *out, void *user) {
  static const char fn[] = "vm.builtin.reshape";
  VM_RETURN_IF_ERROR(check_arity(fn, nargs, 2));
  vm_tensor_t *t = NULL;
  vm_shape_t *s = NULL;
  VM_RETURN_IF_ERROR(get_tensor(fn, args, 0, "tensor", &t));
  VM_RETURN_IF_ERROR(get_shape(fn, args, 1, "shape", &s));
  int64_t numel;
  char sbuf[160], tbuf[160];
  if (vm_shape_numel(s->dims, s->ndim, &numel) != 0)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "%s: argument 1 (shape): %s has a negative dim or overflows", fn,
                          format_dims(s->dims, s->ndim, 0, sbuf, sizeof(sbuf)));
  if (numel != vm_tensor_numel(t))
    return vm_status_make(
        VM_INVALID_ARGUMENT, "%s: cannot reshape %s (%lld elements) to %s (%lld elements)", fn,
        format_dims(t->shape, t->ndim, 0, tbuf, sizeof(tbuf)), (long long)vm_tensor_numel(t),
        format_dims(s->dims, s->ndim, 0, sbuf, sizeof(sbuf)), (long long)numel);
  return vm_status_annotate(vm_tensor_new(t->storage, t->offset, t->dtype, s->dims, s->ndim, out),
                            "%s", fn);
}

static vm_status_t b_make_tuple(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                vm_value_t *out, void *user) {
  return vm_tuple_new(args, nargs, out);
}

/* tuple_getitem(tuple, index): OUT_OF_RANGE for a bad index, like
 * vm_machine_get_output, so a client sees one code for "no such field". */
static vm_status_t b_tuple_getitem(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                   vm_value_t *out, void *user) {
  static const char fn[] = "vm.builtin.tuple_getitem";
  VM_RETURN_IF_ERROR(check_arity(fn, nargs, 2));
  vm_tuple_t *tup = vm_value_as_tuple(&args[0]);
  if (!tup) return kind_error(fn, 0, "tuple", "tuple", &args[0]);
  int64_t idx = 0;
  VM_RETURN_IF_ERROR(get_int(fn, args, 1, "index", &idx));
  if (idx < 0 || (uint64_t)idx >= tup->size)
    return vm_status_make(VM_OUT_OF_RANGE, "%s: index %lld out of range for a tuple of %u fields",
                          fn, (long long)idx, tup->size);
  vm_value_retain(&tup->fields[idx]);
  *out = tup->fields[idx];
  return VM_STATUS_OK;
}

static vm_status_t b_null_value(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                vm_value_t *out, void *user) {
  return check_arity("vm.builtin.null_value", nargs, 0);
}

/* kill(x...) -> none. The work is done by the caller: written as
 * `call %r = vm.builtin.kill(%r)`, storing the none result into %r drops the
 * register's reference now instead of when the frame ends, so its memory
 * returns to the allocator early. */
static vm_status_t b_kill(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                          void *user) {
  return VM_STATUS_OK;
}

/* ---------------------------------------------------------------------------
 * Control and devices
 */

/* Truth of one element: non-zero bits of the value, ignoring the sign bit
 * for floats so that -0.0 is false like 0.0 (NaN is true, as in C). */
static int element_truth(vm_dtype_t dt, const uint8_t *p) {
  size_t n = vm_dtype_bytes(dt);
  uint64_t bits = 0;
  memcpy(&bits, p, n); /* little-endian hosts only, as the whole format */
  if (dt.bits < 8) bits &= (1u << dt.bits) - 1; /* a packed element: the first, low bits */
  if (dt.code == VM_DTYPE_FLOAT || dt.code == VM_DTYPE_BFLOAT) {
    uint64_t sign = (uint64_t)1 << (dt.bits - 1);
    bits &= ~sign;
  }
  return bits != 0;
}

static vm_status_t b_read_if_cond(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                  vm_value_t *out, void *user) {
  static const char fn[] = "vm.builtin.read_if_cond";
  VM_RETURN_IF_ERROR(check_arity(fn, nargs, 1));
  if (args[0].kind == VM_VAL_INT || args[0].kind == VM_VAL_BOOL) {
    *out = vm_value_bool(args[0].u.i != 0);
    return VM_STATUS_OK;
  }
  vm_tensor_t *t = vm_value_as_tensor(&args[0]);
  if (!t) return kind_error(fn, 0, "cond", "int, bool or a 1-element tensor", &args[0]);
  char dbuf[24], sbuf[160];
  if (t->dtype.lanes != 1 || (t->dtype.code != VM_DTYPE_INT && t->dtype.code != VM_DTYPE_UINT &&
                              t->dtype.code != VM_DTYPE_BOOL && t->dtype.code != VM_DTYPE_FLOAT &&
                              t->dtype.code != VM_DTYPE_BFLOAT))
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "%s: argument 0 (cond): expected an int, uint, bool or float tensor, "
                          "got %s",
                          fn, vm_dtype_str(t->dtype, dbuf, sizeof(dbuf)));
  if (vm_tensor_numel(t) != 1)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "%s: argument 0 (cond): expected a 1-element tensor, got shape %s", fn,
                          format_dims(t->shape, t->ndim, 0, sbuf, sizeof(sbuf)));
  uint8_t elem[8] = {0};
  vm_storage_t *st = t->storage;
  vm_device_t *dev = st->device;
  VM_RETURN_IF_ERROR(vm_status_annotate(
      dev->ops->copy_to_host(dev, elem, st->buffer, t->offset, vm_dtype_bytes(t->dtype)), "%s",
      fn));
  *out = vm_value_bool(element_truth(t->dtype, elem));
  return VM_STATUS_OK;
}

/* trim_dim(x, count, axis) -> the dense view of x's first elements shaped
 * as x with dim axis cut to count (0 <= count <= that dim): the result of
 * an operator with a data-dependent output shape, which writes it densely
 * in that smaller shape into a buffer of the largest one, and the count
 * (a 1-element int64 tensor on any device, read back here) beside it. */
static vm_status_t b_trim_dim(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                              vm_value_t *out, void *user) {
  static const char fn[] = "vm.builtin.trim_dim";
  VM_RETURN_IF_ERROR(check_arity(fn, nargs, 3));
  vm_tensor_t *x = NULL, *c = NULL;
  int64_t axis = 0;
  VM_RETURN_IF_ERROR(get_tensor(fn, args, 0, "x", &x));
  VM_RETURN_IF_ERROR(get_tensor(fn, args, 1, "count", &c));
  VM_RETURN_IF_ERROR(get_int(fn, args, 2, "axis", &axis));
  char buf[160];
  if (axis < 0 || axis >= (int64_t)x->ndim)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "%s: argument 2 (axis): %lld is out of range for x of shape %s", fn,
                          (long long)axis, format_dims(x->shape, x->ndim, 0, buf, sizeof(buf)));
  if (!vm_dtype_equal(c->dtype, VM_I64) || vm_tensor_numel(c) != 1)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "%s: argument 1 (count): expected a 1-element int64 tensor, got %s %s",
                          fn, vm_dtype_str(c->dtype, buf, 24),
                          format_dims(c->shape, c->ndim, 0, buf + 24, sizeof(buf) - 24));
  int64_t n = 0;
  vm_device_t *dev = c->storage->device;
  VM_RETURN_IF_ERROR(vm_status_annotate(
      dev->ops->copy_to_host(dev, &n, c->storage->buffer, c->offset, sizeof(n)), "%s", fn));
  if (n < 0 || n > x->shape[axis])
    return vm_status_make(VM_OUT_OF_RANGE,
                          "%s: count %lld is out of range: 0 to %lld (dim %lld of x)", fn,
                          (long long)n, (long long)x->shape[axis], (long long)axis);
  int64_t *dims = malloc(x->ndim * sizeof(int64_t)); /* ndim >= 1: axis is in range */
  if (!dims) return vm_status_make(VM_RESOURCE_EXHAUSTED, "%s: out of host memory", fn);
  memcpy(dims, x->shape, x->ndim * sizeof(int64_t));
  dims[axis] = n;
  vm_status_t st = vm_tensor_new(x->storage, x->offset, x->dtype, dims, x->ndim, out);
  free(dims);
  return vm_status_annotate(st, "%s", fn);
}

/* Copies nbytes from (src, src_off) on sdev to (dst, dst_off) on ddev, two
 * different devices. A cpu side is used in place (its handles are host
 * pointers); between two non-host devices the bytes go through a bounded
 * host staging buffer. */
static vm_status_t copy_across(vm_device_t *ddev, vm_buffer_t dst, uint64_t dst_off,
                               vm_device_t *sdev, vm_buffer_t src, uint64_t src_off,
                               uint64_t nbytes) {
  if (nbytes == 0) return VM_STATUS_OK;
  if (sdev->type == VM_DEVICE_CPU)
    return ddev->ops->copy_from_host(ddev, dst, dst_off, (const char *)src.handle + src_off,
                                     nbytes);
  if (ddev->type == VM_DEVICE_CPU)
    return sdev->ops->copy_to_host(sdev, (char *)dst.handle + dst_off, src, src_off, nbytes);
  uint64_t chunk = nbytes < STAGING_CHUNK_BYTES ? nbytes : STAGING_CHUNK_BYTES;
  void *stage = malloc((size_t)chunk);
  if (!stage)
    return vm_status_make(VM_RESOURCE_EXHAUSTED,
                          "out of host memory for a %llu-byte staging "
                          "buffer",
                          (unsigned long long)chunk);
  vm_status_t st = VM_STATUS_OK;
  for (uint64_t done = 0; done < nbytes && !st; done += chunk) {
    uint64_t n = nbytes - done < chunk ? nbytes - done : chunk;
    st = sdev->ops->copy_to_host(sdev, stage, src, src_off + done, n);
    if (!st) st = ddev->ops->copy_from_host(ddev, dst, dst_off + done, stage, n);
  }
  free(stage);
  return st;
}

/* to_device(tensor, device_index) -> the tensor on that device: the same
 * tensor (retained) when it is there already, else a fresh copy allocated
 * from that device's allocator. */
static vm_status_t b_to_device(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                               vm_value_t *out, void *user) {
  static const char fn[] = "vm.builtin.to_device";
  VM_RETURN_IF_ERROR(check_arity(fn, nargs, 2));
  VM_RETURN_IF_ERROR(need_machine(m, fn));
  vm_tensor_t *t = NULL;
  uint32_t dev_idx = 0;
  VM_RETURN_IF_ERROR(get_tensor(fn, args, 0, "tensor", &t));
  VM_RETURN_IF_ERROR(get_device_index(m, fn, args, 1, &dev_idx));
  vm_device_t *ddev = vm_machine_device(m, dev_idx);
  vm_storage_t *sst = t->storage;
  if (sst->device == ddev) {
    vm_value_retain(&args[0]);
    *out = args[0];
    return VM_STATUS_OK;
  }
  vm_allocator_t *alloc = vm_machine_allocator(m, dev_idx);
  if (!alloc) return vm_status_make(VM_INTERNAL, "%s: device %u has no allocator", fn, dev_idx);
  vm_value_t res = vm_value_none();
  vm_status_t st = vm_tensor_alloc(alloc, t->dtype, t->shape, t->ndim, &res);
  if (st) goto fail;
  vm_tensor_t *rt = vm_value_as_tensor(&res);
  st = copy_across(ddev, rt->storage->buffer, rt->offset, sst->device, sst->buffer, t->offset,
                   vm_tensor_nbytes_of(t));
  if (st) goto fail;
  *out = res;
  return VM_STATUS_OK;
fail:
  vm_value_release(&res);
  {
    char dbuf[32];
    return vm_status_annotate(st, "%s to %s", fn,
                              vm_device_str(ddev, dbuf, (unsigned)sizeof(dbuf)));
  }
}

/* check_tensor_info(x, [ndim], [dtype], err_ctx): TVM's argument check for
 * function parameters. The 2- and 3-argument forms omit dtype, then ndim. */
static vm_status_t b_check_tensor_info(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                       vm_value_t *out, void *user) {
  static const char fn[] = "vm.builtin.check_tensor_info";
  if (nargs < 2 || nargs > 4) return arity_error(fn, "2 to 4 arguments", nargs);
  const vm_string_t *ctx = vm_value_as_string(&args[nargs - 1]);
  if (!ctx) return kind_error(fn, nargs - 1, "err_ctx", "string", &args[nargs - 1]);
  int64_t ndim = -1;
  int has_dtype = 0;
  vm_dtype_t dt = VM_F32;
  if (nargs >= 3) VM_RETURN_IF_ERROR(get_int(fn, args, 1, "ndim", &ndim));
  if (ndim < -1)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "%s: argument 1 (ndim): expected >= 0 or -1 (any), got %lld", fn,
                          (long long)ndim);
  if (nargs == 4 && args[2].kind != VM_VAL_NONE) {
    VM_RETURN_IF_ERROR(get_dtype(fn, args, 2, "dtype", &dt));
    has_dtype = 1;
  }
  const vm_tensor_t *t = vm_value_as_tensor(&args[0]);
  if (!t)
    return vm_status_make(VM_INVALID_ARGUMENT, "%s: expected a tensor, got %s", ctx->data,
                          vm_value_kind_name(args[0].kind));
  if (ndim != -1 && (int64_t)t->ndim != ndim)
    return vm_status_make(VM_INVALID_ARGUMENT, "%s: expected a tensor of ndim %lld, got ndim %u",
                          ctx->data, (long long)ndim, t->ndim);
  if (has_dtype && !vm_dtype_equal(dt, t->dtype)) {
    char want[24], got[24];
    return vm_status_make(VM_INVALID_ARGUMENT, "%s: expected dtype %s, got %s", ctx->data,
                          vm_dtype_str(dt, want, sizeof(want)),
                          vm_dtype_str(t->dtype, got, sizeof(got)));
  }
  return VM_STATUS_OK;
}

/* raise(code, message, x...): fails with status `code` and `message`. The
 * compiler calls it where a function can only fail when it runs (a branch
 * of a run-time If that is invalid for the model's fixed shapes); the x
 * are what the function would return, never written. */
static vm_status_t b_raise(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                           vm_value_t *out, void *user) {
  static const char fn[] = "vm.builtin.raise";
  (void)m;
  (void)out;
  (void)user;
  if (nargs < 2) return arity_error(fn, "at least 2 arguments", nargs);
  int64_t code = 0;
  VM_RETURN_IF_ERROR(get_int(fn, args, 0, "code", &code));
  if (code < VM_CANCELLED || code > VM_UNAUTHENTICATED)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "%s: argument 0 (code): expected a status code from 1 to 16, got %lld",
                          fn, (long long)code);
  const vm_string_t *msg = vm_value_as_string(&args[1]);
  if (!msg) return kind_error(fn, 1, "message", "string", &args[1]);
  return vm_status_make((vm_code_t)code, "%.*s", (int)msg->len, msg->data);
}

/* ---------------------------------------------------------------------------
 * Registration
 */

static const struct {
  const char *name;
  vm_packed_fn fn;
} k_builtins[] = {
    {"vm.builtin.alloc_storage", b_alloc_storage},
    {"vm.builtin.alloc_tensor", b_alloc_tensor},
    {"vm.builtin.copy", b_copy},
    {"vm.builtin.make_shape", b_make_shape},
    {"vm.builtin.match_shape", b_match_shape},
    {"vm.builtin.shape_of", b_shape_of},
    {"vm.builtin.reshape", b_reshape},
    {"vm.builtin.make_tuple", b_make_tuple},
    {"vm.builtin.tuple_getitem", b_tuple_getitem},
    {"vm.builtin.null_value", b_null_value},
    {"vm.builtin.kill", b_kill},
    {"vm.builtin.read_if_cond", b_read_if_cond},
    {"vm.builtin.to_device", b_to_device},
    {"vm.builtin.check_tensor_info", b_check_tensor_info},
    {"vm.builtin.trim_dim", b_trim_dim},
    {"vm.builtin.raise", b_raise},
};

/* Stops at the first failure (e.g. ALREADY_EXISTS when called twice on one
 * registry); names registered before it stay registered. */
vm_status_t vm_registry_add_builtins(vm_registry_t *reg) {
  for (size_t i = 0; i < sizeof(k_builtins) / sizeof(k_builtins[0]); i++)
    VM_RETURN_IF_ERROR(vm_status_annotate(
        vm_registry_add(reg, k_builtins[i].name, k_builtins[i].fn, NULL), "registering builtins"));
  return VM_STATUS_OK;
}
