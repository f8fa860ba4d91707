/* Shared machinery of the cl.* operators: program sources, argument
 * checking, kernel-argument and launch helpers, shape collapsing, float16
 * conversion. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cl_ops_internal.h"

/* ---------------------------------------------------------------------------
 * Program sources: common.cl + the family's file, joined once per process.
 */

static const char *const family_files[VMCL_FAM_COUNT] = {
    [VMCL_FAM_ELEMENTWISE] = vmcl_src_elementwise,
    [VMCL_FAM_REDUCE] = vmcl_src_reduce,
    [VMCL_FAM_POOL] = vmcl_src_pool,
    [VMCL_FAM_GEMM] = vmcl_src_gemm,
    [VMCL_FAM_CONV] = vmcl_src_conv,
    [VMCL_FAM_COPY] = vmcl_src_copy,
    [VMCL_FAM_CAST] = vmcl_src_cast,
    [VMCL_FAM_RESIZE] = vmcl_src_resize,
    [VMCL_FAM_INT] = vmcl_src_intops,
    [VMCL_FAM_QUANT] = vmcl_src_quant,
    [VMCL_FAM_RNN] = vmcl_src_rnn,
    [VMCL_FAM_ATTENTION] = vmcl_src_attention,
    [VMCL_FAM_SPATIAL] = vmcl_src_spatial,
    [VMCL_FAM_SELECT] = vmcl_src_select,
};

static char *family_sources[VMCL_FAM_COUNT];
static pthread_once_t family_once = PTHREAD_ONCE_INIT;

/* The joined texts live for the whole process (several devices and threads
 * share them), so they are built once and never freed. */
static void family_init(void) {
  size_t common_len = strlen(vmcl_src_common);
  for (int f = 0; f < VMCL_FAM_COUNT; f++) {
    size_t len = strlen(family_files[f]);
    char *s = malloc(common_len + 1 + len + 1);
    if (!s) continue; /* reported as RESOURCE_EXHAUSTED on use */
    memcpy(s, vmcl_src_common, common_len);
    s[common_len] = '\n';
    memcpy(s + common_len + 1, family_files[f], len + 1);
    family_sources[f] = s;
  }
}

vm_status_t vmcl_family_kernel(vmcl_dev_t *d, vmcl_family_t fam, const char *options,
                               const char *name, cl_kernel *out_kernel) {
  pthread_once(&family_once, family_init);
  if ((unsigned)fam >= VMCL_FAM_COUNT || !family_sources[fam]) {
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory for kernel sources");
  }
  return vmcl_get_kernel(d, family_sources[fam], 1, options, name, out_kernel);
}

vm_status_t vmcl_family_launch(vmcl_dev_t *d, vmcl_family_t fam, const char *options,
                               const char *name, int64_t items, size_t local, vmcl_args_fn set_args,
                               const void *ctx) {
  cl_kernel k;
  pthread_mutex_lock(&d->lock);
  vm_status_t st = vmcl_family_kernel(d, fam, options, name, &k);
  if (!st) {
    vmcl_args_t a = vmcl_args_begin(k);
    set_args(&a, ctx);
    if (a.err != CL_SUCCESS)
      st = vmcl_status(a.err, "clSetKernelArg");
    else
      st = vmcl_launch_1d(d, k, (size_t)items, vmcl_local_size(d, k, local));
  }
  pthread_mutex_unlock(&d->lock);
  return st;
}

const char *vmcl_float_options(vm_dtype_t dt) {
  if (vm_dtype_equal(dt, VM_F64)) return "-DVMCL_F64";
  return dt.code == VM_DTYPE_FLOAT && dt.bits == 16 ? "-DVMCL_F16" : "";
}

size_t vmcl_real_bytes(vm_dtype_t dt) {
  return vm_dtype_equal(dt, VM_F64) ? sizeof(cl_double) : sizeof(cl_float);
}

/* ---------------------------------------------------------------------------
 * Argument checking
 */

void vmcl_op_init(vmcl_op_t *op, const char *name, const char *usage, const vm_value_t *args,
                  uint32_t nargs) {
  memset(op, 0, sizeof(*op));
  op->name = name;
  op->usage = usage;
  /* A leading %vm (what vm.builtin.* and cl.kernel may take) is accepted
   * and skipped, so a compiler can pass it to every call uniformly. */
  if (nargs > 0 && args[0].kind == VM_VAL_OPAQUE) {
    args++;
    nargs--;
  }
  op->args = args;
  op->nargs = nargs;
}

vm_status_t vmcl_op_error(const vmcl_op_t *op, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  return vm_status_make(VM_INVALID_ARGUMENT, "%s: %s", op->name, msg);
}

vm_status_t vmcl_op_arity(const vmcl_op_t *op, uint32_t min, uint32_t max) {
  if (op->nargs >= min && op->nargs <= max) return VM_STATUS_OK;
  if (min == max) {
    return vmcl_op_error(op, "expected %u arguments %s, got %u", min, op->usage, op->nargs);
  }
  return vmcl_op_error(op, "expected %u to %u arguments %s, got %u", min, max, op->usage,
                       op->nargs);
}

void vmcl_join(char *buf, size_t len, const char *a, const char *b, const char *c, const char *d) {
  const char *parts[4] = {a, b, c, d};
  size_t n = 0;
  if (len == 0) return;
  for (int i = 0; i < 4; i++) {
    size_t k = strlen(parts[i]);
    if (k > len - 1 - n) k = len - 1 - n;
    memcpy(buf + n, parts[i], k);
    n += k;
  }
  buf[n] = '\0';
}

char *vmcl_shape_str(const int64_t *shape, uint32_t ndim, char *buf, size_t len) {
  size_t n = 0;
  if (len == 0) return buf;
  buf[0] = '\0';
  n += (size_t)snprintf(buf, len, "[");
  for (uint32_t i = 0; i < ndim && n < len; i++) {
    n += (size_t)snprintf(buf + n, len - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
  }
  if (n < len) snprintf(buf + n, len - n, "]");
  return buf;
}

static vm_status_t check_tensor(vmcl_op_t *op, uint32_t idx, const char *what, vm_tensor_t *t) {
  char dbuf[32], dbuf2[32];
  const vm_device_t *dev = t->storage ? t->storage->device : NULL;
  vmcl_dev_t *d = dev ? vmcl_get(dev) : NULL;
  if (!d) {
    return vmcl_op_error(op, "%s (argument %u) is on %s, expected an OpenCL device", what, idx,
                         vm_device_str(dev, dbuf, sizeof(dbuf)));
  }
  if (op->dev && op->dev != dev) {
    return vmcl_op_error(op, "%s (argument %u) is on %s, expected %s (the device of %s)", what, idx,
                         vm_device_str(dev, dbuf, sizeof(dbuf)),
                         vm_device_str(op->dev, dbuf2, sizeof(dbuf2)), op->dev_what);
  }
  if (t->ndim > VMCL_MAX_RANK) {
    return vmcl_op_error(op, "%s (argument %u) has %u dims, at most %d are supported", what, idx,
                         t->ndim, VMCL_MAX_RANK);
  }
  /* a packed tensor (4- or 2-bit elements) has fewer bytes than elements:
   * only the operators that index it by its packing may touch it */
  if (vm_dtype_per_byte(t->dtype) > 1 && strcmp(op->name, "cl.cast") != 0 &&
      strcmp(op->name, "cl.bitcast") != 0) {
    return vmcl_op_error(op,
                         "%s (argument %u) has the packed dtype %s: supported: cl.cast and "
                         "cl.bitcast (cast it to an 8-bit type first)",
                         what, idx, vm_dtype_str(t->dtype, dbuf, sizeof(dbuf)));
  }
  size_t eb = vm_dtype_bytes(t->dtype);
  if (eb == 0 || t->offset % eb != 0) {
    return vmcl_op_error(op,
                         "%s (argument %u) starts at byte offset %llu, not a multiple of its "
                         "element size %zu",
                         what, idx, (unsigned long long)t->offset, eb);
  }
  /* Kernels index with 32-bit ints (fast on every GPU), and 1-D launches
   * round the global size up to a whole work-group, so the last element
   * must stay a margin below 2^31 for get_global_id to fit an int. */
  uint64_t end = t->offset / eb + (uint64_t)vm_tensor_numel(t);
  if (end > VMCL_MAX_ELEMENTS) {
    return vmcl_op_error(op,
                         "%s (argument %u) ends at element %llu of its storage, more than the "
                         "%llu that operators address",
                         what, idx, (unsigned long long)end, (unsigned long long)VMCL_MAX_ELEMENTS);
  }
  if (!op->dev) {
    op->dev = dev;
    vmcl_join(op->dev_what, sizeof(op->dev_what), what, "", "", "");
    op->d = d;
  }
  return VM_STATUS_OK;
}

vm_status_t vmcl_op_tensor(vmcl_op_t *op, uint32_t idx, const char *what, vm_tensor_t **out) {
  *out = NULL;
  if (idx >= op->nargs) return vmcl_op_error(op, "missing %s (argument %u)", what, idx);
  vm_tensor_t *t = vm_value_as_tensor(&op->args[idx]);
  if (!t) {
    return vmcl_op_error(op, "%s (argument %u) must be a tensor, got %s", what, idx,
                         vm_value_kind_name(op->args[idx].kind));
  }
  VM_RETURN_IF_ERROR(check_tensor(op, idx, what, t));
  *out = t;
  return VM_STATUS_OK;
}

vm_status_t vmcl_op_opt_tensor(vmcl_op_t *op, uint32_t idx, const char *what, vm_tensor_t **out) {
  *out = NULL;
  if (idx < op->nargs && op->args[idx].kind == VM_VAL_NONE) return VM_STATUS_OK;
  if (idx < op->nargs && !vm_value_as_tensor(&op->args[idx])) {
    return vmcl_op_error(op, "%s (argument %u) must be a tensor or none, got %s", what, idx,
                         vm_value_kind_name(op->args[idx].kind));
  }
  return vmcl_op_tensor(op, idx, what, out);
}

vm_status_t vmcl_op_int(const vmcl_op_t *op, uint32_t idx, const char *what, int64_t lo, int64_t hi,
                        int64_t *out) {
  if (idx >= op->nargs) return vmcl_op_error(op, "missing %s (argument %u)", what, idx);
  const vm_value_t *v = &op->args[idx];
  if (v->kind != VM_VAL_INT && v->kind != VM_VAL_BOOL) {
    return vmcl_op_error(op, "%s (argument %u) must be an int, got %s", what, idx,
                         vm_value_kind_name(v->kind));
  }
  if (v->u.i < lo || v->u.i > hi) {
    return vmcl_op_error(op, "%s (argument %u) is %lld, expected %lld to %lld", what, idx,
                         (long long)v->u.i, (long long)lo, (long long)hi);
  }
  *out = v->u.i;
  return VM_STATUS_OK;
}

vm_status_t vmcl_op_float(const vmcl_op_t *op, uint32_t idx, const char *what, double *out) {
  if (idx >= op->nargs) return vmcl_op_error(op, "missing %s (argument %u)", what, idx);
  const vm_value_t *v = &op->args[idx];
  if (v->kind == VM_VAL_FLOAT) {
    *out = v->u.f;
  } else if (v->kind == VM_VAL_INT) {
    *out = (double)v->u.i;
  } else {
    return vmcl_op_error(op, "%s (argument %u) must be a float, got %s", what, idx,
                         vm_value_kind_name(v->kind));
  }
  return VM_STATUS_OK;
}

vm_status_t vmcl_op_int_list(const vmcl_op_t *op, uint32_t idx, const char *what, int64_t *out,
                             uint32_t max, uint32_t *out_n) {
  if (idx >= op->nargs) return vmcl_op_error(op, "missing %s (argument %u)", what, idx);
  const vm_value_t *v = &op->args[idx];
  const vm_shape_t *sh = vm_value_as_shape(v);
  const vm_tuple_t *tu = vm_value_as_tuple(v);
  if (v->kind == VM_VAL_INT) {
    if (max < 1) return vmcl_op_error(op, "%s (argument %u) has too many values", what, idx);
    out[0] = v->u.i;
    *out_n = 1;
  } else if (sh) {
    if (sh->ndim > max) {
      return vmcl_op_error(op, "%s (argument %u) has %u values, at most %u allowed", what, idx,
                           sh->ndim, max);
    }
    memcpy(out, sh->dims, sh->ndim * sizeof(int64_t));
    *out_n = sh->ndim;
  } else if (tu) {
    if (tu->size > max) {
      return vmcl_op_error(op, "%s (argument %u) has %u values, at most %u allowed", what, idx,
                           tu->size, max);
    }
    for (uint32_t i = 0; i < tu->size; i++) {
      if (tu->fields[i].kind != VM_VAL_INT) {
        return vmcl_op_error(op, "%s (argument %u) field %u must be an int, got %s", what, idx, i,
                             vm_value_kind_name(tu->fields[i].kind));
      }
      out[i] = tu->fields[i].u.i;
    }
    *out_n = tu->size;
  } else {
    return vmcl_op_error(op, "%s (argument %u) must be an int, a shape or a tuple of ints, got %s",
                         what, idx, vm_value_kind_name(v->kind));
  }
  return VM_STATUS_OK;
}

const char *vmcl_int_type(vm_dtype_t dt, const char **utype, int64_t *lo, int64_t *hi) {
  static const char *const s[] = {"char", "short", "int", "long"};
  static const char *const u[] = {"uchar", "ushort", "uint", "ulong"};
  if (dt.lanes != 1 || (dt.code != VM_DTYPE_INT && dt.code != VM_DTYPE_UINT)) return NULL;
  int k = dt.bits == 8 ? 0 : dt.bits == 16 ? 1 : dt.bits == 32 ? 2 : dt.bits == 64 ? 3 : -1;
  if (k < 0) return NULL;
  int is_signed = dt.code == VM_DTYPE_INT;
  if (utype) *utype = u[k];
  if (lo) *lo = is_signed ? (k == 3 ? INT64_MIN : -(INT64_C(1) << (dt.bits - 1))) : 0;
  /* uint64's top half is out of int64's range: its bounds stop at INT64_MAX */
  if (hi) {
    *hi = k == 3      ? INT64_MAX
          : is_signed ? (INT64_C(1) << (dt.bits - 1)) - 1
                      : (INT64_C(1) << dt.bits) - 1;
  }
  return is_signed ? s[k] : u[k];
}

void vmcl_int_options(vm_dtype_t dt, char *buf, size_t len) {
  const char *ut = "";
  const char *t = vmcl_int_type(dt, &ut, NULL, NULL);
  snprintf(buf, len, "-DT=%s -DU=%s -DSIGNED=%d", t ? t : "int", ut, dt.code == VM_DTYPE_INT);
}

vm_status_t vmcl_op_float_dtype(const vmcl_op_t *op, const vm_tensor_t *t, uint32_t idx,
                                const char *what) {
  if (vm_dtype_equal(t->dtype, VM_F32) || vm_dtype_equal(t->dtype, VM_F16)) {
    return VM_STATUS_OK;
  }
  char buf[24];
  return vmcl_op_error(op, "%s (argument %u) has dtype %s, expected float32 or float16", what, idx,
                       vm_dtype_str(t->dtype, buf, sizeof(buf)));
}

vm_status_t vmcl_op_fp64(const vmcl_op_t *op, const vm_tensor_t *t, uint32_t idx,
                         const char *what) {
  if (!vm_dtype_equal(t->dtype, VM_F64) || (op->d && op->d->fp64)) return VM_STATUS_OK;
  char dbuf[32];
  return vm_status_make(VM_UNIMPLEMENTED,
                        "%s: %s (argument %u) is float64, and %s (%s) lacks fp64 (no cl_khr_fp64): "
                        "cast the model to float32 or run it on a device with double precision",
                        op->name, what, idx, vm_device_str(op->dev, dbuf, sizeof(dbuf)),
                        op->dev ? op->dev->props.name : "?");
}

vm_status_t vmcl_op_real_dtype(const vmcl_op_t *op, const vm_tensor_t *t, uint32_t idx,
                               const char *what) {
  if (vm_dtype_equal(t->dtype, VM_F64)) return vmcl_op_fp64(op, t, idx, what);
  if (vm_dtype_equal(t->dtype, VM_F32) || vm_dtype_equal(t->dtype, VM_F16)) return VM_STATUS_OK;
  char buf[24];
  return vmcl_op_error(op, "%s (argument %u) has dtype %s, expected float32, float16 or float64",
                       what, idx, vm_dtype_str(t->dtype, buf, sizeof(buf)));
}

vm_status_t vmcl_op_dtype_eq(const vmcl_op_t *op, const vm_tensor_t *t, uint32_t idx,
                             const char *what, vm_dtype_t dt, const char *from_what) {
  if (vm_dtype_equal(t->dtype, dt)) return VM_STATUS_OK;
  char b1[24], b2[24];
  return vmcl_op_error(op, "%s (argument %u) has dtype %s, expected %s (the dtype of %s)", what,
                       idx, vm_dtype_str(t->dtype, b1, sizeof(b1)),
                       vm_dtype_str(dt, b2, sizeof(b2)), from_what);
}

vm_status_t vmcl_op_disjoint(const vmcl_op_t *op, const vm_tensor_t *a, uint32_t ia,
                             const char *aname, const vm_tensor_t *b, uint32_t ib,
                             const char *bname, int exact_ok) {
  if (vmcl_tensor_mem(a) != vmcl_tensor_mem(b)) return VM_STATUS_OK;
  int64_t ao = vmcl_elem_offset(a), bo = vmcl_elem_offset(b), n = vm_tensor_numel(b);
  if (n == 0 || ao >= bo + n || bo >= ao + n || (exact_ok && ao == bo)) return VM_STATUS_OK;
  return vmcl_op_error(op, "%s (argument %u) overlaps %s (argument %u); give %s its own memory",
                       aname, ia, bname, ib, bname);
}

vm_status_t vmcl_op_shape_eq(const vmcl_op_t *op, const vm_tensor_t *t, uint32_t idx,
                             const char *what, const int64_t *shape, uint32_t ndim) {
  int same = t->ndim == ndim;
  for (uint32_t i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
  if (same) return VM_STATUS_OK;
  char b1[192], b2[192];
  return vmcl_op_error(op, "%s (argument %u) has shape %s, expected %s", what, idx,
                       vmcl_shape_str(t->shape, t->ndim, b1, sizeof(b1)),
                       vmcl_shape_str(shape, ndim, b2, sizeof(b2)));
}

vm_status_t vmcl_op_want(const vmcl_op_t *op, const vm_tensor_t *t, uint32_t idx, const char *what,
                         vm_dtype_t dt, uint32_t ndim, const int64_t *shape) {
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(op, t, idx, what, dt, "the operator"));
  return vmcl_op_shape_eq(op, t, idx, what, shape, ndim);
}

vm_status_t vmcl_op_copyable(const vmcl_op_t *op, const vm_tensor_t *t, uint32_t idx,
                             const char *what) {
  size_t eb = vm_dtype_bytes(t->dtype);
  if (t->dtype.lanes == 1 && (eb == 1 || eb == 2 || eb == 4 || eb == 8)) return VM_STATUS_OK;
  char buf[24];
  return vmcl_op_error(op, "%s (argument %u) has dtype %s, expected one of 1, 2, 4 or 8 bytes",
                       what, idx, vm_dtype_str(t->dtype, buf, sizeof(buf)));
}

vm_status_t vmcl_value_pattern(const vmcl_op_t *op, uint32_t vidx, vm_dtype_t dt, uint32_t yidx,
                               uint8_t *pattern, size_t *size) {
  *size = 0;
  if (vidx >= op->nargs) return vmcl_op_error(op, "missing value (argument %u)", vidx);
  const vm_value_t *v = &op->args[vidx];
  if (v->kind != VM_VAL_FLOAT && v->kind != VM_VAL_INT && v->kind != VM_VAL_BOOL) {
    return vmcl_op_error(op, "value (argument %u) must be a float, int or bool, got %s", vidx,
                         vm_value_kind_name(v->kind));
  }
  int is_int = v->kind != VM_VAL_FLOAT;
  int64_t iv = is_int ? v->u.i : 0;
  double fv = is_int ? (double)v->u.i : v->u.f;
  char buf[24];
  if (dt.lanes != 1) goto unsupported;
  switch (dt.code) {
    case VM_DTYPE_FLOAT:
      if (dt.bits == 32) {
        float f = (float)fv;
        memcpy(pattern, &f, 4);
        *size = 4;
        return VM_STATUS_OK;
      }
      if (dt.bits == 16) {
        uint16_t h = vmcl_f32_to_f16((float)fv);
        memcpy(pattern, &h, 2);
        *size = 2;
        return VM_STATUS_OK;
      }
      if (dt.bits == 64) {
        memcpy(pattern, &fv, 8);
        *size = 8;
        return VM_STATUS_OK;
      }
      goto unsupported;
    case VM_DTYPE_BFLOAT: {
      /* bfloat16 is the top half of a float32, rounded to nearest even */
      float f = (float)fv;
      uint32_t bits;
      memcpy(&bits, &f, 4);
      uint16_t h = isnan(f) ? (uint16_t)((bits >> 16) | 0x40u)
                            : (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
      memcpy(pattern, &h, 2);
      *size = 2;
      return VM_STATUS_OK;
    }
    case VM_DTYPE_BOOL:
      pattern[0] = fv != 0.0;
      *size = 1;
      return VM_STATUS_OK;
    case VM_DTYPE_INT:
    case VM_DTYPE_UINT: {
      if (!is_int) {
        if (!(fv == floor(fv))) {
          return vmcl_op_error(op, "value (argument %u) %g is not an integer, y has dtype %s", vidx,
                               fv, vm_dtype_str(dt, buf, sizeof(buf)));
        }
        /* within int64 (the conversion of anything beyond is undefined) */
        if (!(fv >= -9.2e18 && fv <= 9.2e18)) {
          return vmcl_op_error(op, "value (argument %u) %g does not fit dtype %s of y", vidx, fv,
                               vm_dtype_str(dt, buf, sizeof(buf)));
        }
        iv = (int64_t)fv;
      }
      int bits = dt.bits;
      if (bits != 8 && bits != 16 && bits != 32 && bits != 64) goto unsupported;
      int ok;
      if (dt.code == VM_DTYPE_INT) {
        ok = bits == 64 || (iv >= -(INT64_C(1) << (bits - 1)) && iv < (INT64_C(1) << (bits - 1)));
      } else {
        ok = iv >= 0 && (bits == 64 || iv < (INT64_C(1) << bits));
      }
      if (!ok) {
        return vmcl_op_error(op, "value (argument %u) %lld does not fit dtype %s of y", vidx,
                             (long long)iv, vm_dtype_str(dt, buf, sizeof(buf)));
      }
      uint64_t u = (uint64_t)iv; /* two's complement: the low bytes are the value */
      /* i < 8 restates bits <= 64 for GCC's overflow analysis */
      for (int i = 0; i < bits / 8 && i < 8; i++) pattern[i] = (uint8_t)(u >> (8 * i));
      *size = (size_t)bits / 8;
      return VM_STATUS_OK;
    }
    default: break;
  }
unsupported:
  return vmcl_op_error(op, "y (argument %u) has dtype %s, which %s does not support", yidx,
                       vm_dtype_str(dt, buf, sizeof(buf)), op->name);
}

/* ---------------------------------------------------------------------------
 * Broadcasting
 */

int vmcl_broadcast_shape(const int64_t *a, uint32_t na, const int64_t *b, uint32_t nb, int64_t *out,
                         uint32_t *out_ndim) {
  uint32_t nd = na > nb ? na : nb;
  int64_t r[VMCL_MAX_RANK];
  if (nd > VMCL_MAX_RANK) return -1;
  for (uint32_t i = 0; i < nd; i++) {
    /* i counts from the last dim */
    int64_t da = i < na ? a[na - 1 - i] : 1;
    int64_t db = i < nb ? b[nb - 1 - i] : 1;
    if (da != db && da != 1 && db != 1) return -1;
    r[nd - 1 - i] = da == 1 ? db : da;
  }
  memcpy(out, r, nd * sizeof(int64_t));
  *out_ndim = nd;
  return 0;
}

void vmcl_broadcast_strides(const vm_tensor_t *t, uint32_t nd, int64_t *out) {
  int64_t dense[VMCL_MAX_RANK];
  vmcl_dense_strides(t->shape, t->ndim, dense);
  for (uint32_t i = 0; i < nd; i++) {
    uint32_t back = nd - 1 - i;
    if (back >= t->ndim) {
      out[i] = 0;
    } else {
      uint32_t ti = t->ndim - 1 - back;
      out[i] = t->shape[ti] == 1 ? 0 : dense[ti];
    }
  }
}

/* ---------------------------------------------------------------------------
 * Kernel arguments and launches
 */

void vmcl_arg_mem(vmcl_args_t *a, cl_mem m) {
  cl_int err = clSetKernelArg(a->k, a->next++, sizeof(cl_mem), &m);
  if (a->err == CL_SUCCESS) a->err = err;
}

void vmcl_arg_int(vmcl_args_t *a, int64_t v) {
  cl_int x = (cl_int)v;
  cl_int err = clSetKernelArg(a->k, a->next++, sizeof(x), &x);
  if (a->err == CL_SUCCESS) a->err = err;
}

void vmcl_arg_long(vmcl_args_t *a, int64_t v) {
  cl_long x = v;
  cl_int err = clSetKernelArg(a->k, a->next++, sizeof(x), &x);
  if (a->err == CL_SUCCESS) a->err = err;
}

void vmcl_arg_float(vmcl_args_t *a, float v) {
  cl_float x = v;
  cl_int err = clSetKernelArg(a->k, a->next++, sizeof(x), &x);
  if (a->err == CL_SUCCESS) a->err = err;
}

void vmcl_arg_real(vmcl_args_t *a, vm_dtype_t dt, double v) {
  if (!vm_dtype_equal(dt, VM_F64)) {
    vmcl_arg_float(a, (float)v);
    return;
  }
  cl_double x = v;
  cl_int err = clSetKernelArg(a->k, a->next++, sizeof(x), &x);
  if (a->err == CL_SUCCESS) a->err = err;
}

void vmcl_arg_dims(vmcl_args_t *a, const int64_t *v, int rank, int fill) {
  cl_int8 x;
  for (int i = 0; i < 8; i++) x.s[i] = i < rank ? (cl_int)v[rank - 1 - i] : fill;
  cl_int err = clSetKernelArg(a->k, a->next++, sizeof(x), &x);
  if (a->err == CL_SUCCESS) a->err = err;
}

void vmcl_arg_local(vmcl_args_t *a, size_t bytes) {
  cl_int err = clSetKernelArg(a->k, a->next++, bytes, NULL);
  if (a->err == CL_SUCCESS) a->err = err;
}

cl_uint vmcl_cpu_units(vmcl_dev_t *d) {
  cl_uint cu = 0;
  if (!(d->type & CL_DEVICE_TYPE_CPU) ||
      clGetDeviceInfo(d->device, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof(cu), &cu, NULL) != CL_SUCCESS)
    return 0;
  return cu;
}

size_t vmcl_local_size(vmcl_dev_t *d, cl_kernel k, size_t want) {
  size_t max = 0;
  if (clGetKernelWorkGroupInfo(k, d->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof(max), &max, NULL) !=
          CL_SUCCESS ||
      max == 0) {
    max = 1;
  }
  size_t l = 1;
  while (l * 2 <= want && l * 2 <= max) l *= 2;
  return l;
}

vm_status_t vmcl_launch_1d(vmcl_dev_t *d, cl_kernel k, size_t items, size_t local) {
  if (items == 0) return VM_STATUS_OK;
  size_t global = (items + local - 1) / local * local;
  return vmcl_launch(d, k, 1, &global, &local);
}

/* ---------------------------------------------------------------------------
 * Shapes
 */

void vmcl_dense_strides(const int64_t *shape, uint32_t ndim, int64_t *strides) {
  int64_t s = 1;
  for (uint32_t i = ndim; i-- > 0;) {
    strides[i] = s;
    s *= shape[i];
  }
}

void vmcl_collapse(vmcl_iter_t *it, int nstr) {
  int r = 0;
  for (int i = 0; i < it->rank; i++) {
    if (it->shape[i] == 1) continue; /* contributes nothing to any offset */
    if (r > 0) {
      int merge = 1;
      for (int s = 0; s < nstr; s++) {
        if (it->stride[s][r - 1] != it->stride[s][i] * it->shape[i]) merge = 0;
      }
      if (merge) {
        it->shape[r - 1] *= it->shape[i];
        for (int s = 0; s < nstr; s++) it->stride[s][r - 1] = it->stride[s][i];
        continue;
      }
    }
    it->shape[r] = it->shape[i];
    for (int s = 0; s < nstr; s++) it->stride[s][r] = it->stride[s][i];
    r++;
  }
  it->rank = r;
}

const char *vmcl_copy_type(size_t elem_bytes) {
  switch (elem_bytes) {
    case 1: return "uchar";
    case 2: return "ushort";
    case 4: return "uint";
    case 8: return "ulong";
    default: return NULL;
  }
}

/* The longest innermost run copy_rows gives one work-item. */
#define COPY_ROW_MAX 4096

vm_status_t vmcl_copy_strided(vmcl_dev_t *d, size_t elem_bytes, cl_mem src, int64_t src_off,
                              cl_mem dst, int64_t dst_off, vmcl_iter_t *it) {
  int64_t n = 1;
  for (int i = 0; i < it->rank; i++) n *= it->shape[i];
  if (n == 0) return VM_STATUS_OK;
  vmcl_collapse(it, 2);
  /* A plain block copy needs no kernel (concat along the first axis,
   * contiguous slices). */
  if (it->rank == 0 || (it->rank == 1 && it->stride[0][0] == 1 && it->stride[1][0] == 1)) {
    cl_event ev = NULL;
    cl_int err = clEnqueueCopyBuffer(d->queue, src, dst, (size_t)src_off * elem_bytes,
                                     (size_t)dst_off * elem_bytes, (size_t)n * elem_bytes, 0, NULL,
                                     vmcl_event_slot(d, &ev));
    if (err != CL_SUCCESS) return vmcl_status(err, "clEnqueueCopyBuffer");
    vmcl_track_event(d, ev);
    return VM_STATUS_OK;
  }
  const char *type = vmcl_copy_type(elem_bytes);
  if (!type) {
    return vm_status_make(VM_INVALID_ARGUMENT, "copy of %zu-byte elements is not supported",
                          elem_bytes);
  }
  char opts[32];
  snprintf(opts, sizeof(opts), "-DT=%s", type);
  /* On CPU devices, runs of the innermost dim take a work-item each
   * (copy_rows): copy_nd's divisions per element cost more than the copy
   * (bench_kernels rows: an attention's head split). */
  int64_t inner = it->shape[it->rank - 1];
  int rows = it->rank >= 2 && inner >= 8 && inner <= COPY_ROW_MAX && !d->row_groups &&
             vmcl_cpu_units(d) > 0;
  cl_kernel k;
  vm_status_t st;
  pthread_mutex_lock(&d->lock);
  st = vmcl_family_kernel(d, VMCL_FAM_COPY, opts, rows ? "copy_rows" : "copy_nd", &k);
  if (st) goto done;
  vmcl_args_t a = vmcl_args_begin(k);
  vmcl_arg_mem(&a, src);
  vmcl_arg_int(&a, src_off);
  vmcl_arg_mem(&a, dst);
  vmcl_arg_int(&a, dst_off);
  if (rows) n /= inner;
  vmcl_arg_int(&a, n);
  vmcl_arg_int(&a, it->rank);
  vmcl_arg_dims(&a, it->shape, it->rank, 1);
  vmcl_arg_dims(&a, it->stride[0], it->rank, 0);
  vmcl_arg_dims(&a, it->stride[1], it->rank, 0);
  if (a.err != CL_SUCCESS) {
    st = vmcl_status(a.err, "clSetKernelArg(copy_nd)");
    goto done;
  }
  st = vmcl_launch_1d(d, k, (size_t)n, vmcl_local_size(d, k, rows ? 16 : 256));
done:
  pthread_mutex_unlock(&d->lock);
  return st;
}

/* ---------------------------------------------------------------------------
 * float16 on the host (IEEE 754 binary16)
 */

uint16_t vmcl_f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof(x));
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t exp = (x >> 23) & 0xffu;
  uint32_t man = x & 0x7fffffu;
  if (exp == 0xffu) { /* inf, nan (keep a quiet nan) */
    return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0));
  }
  int32_t e = (int32_t)exp - 127 + 15;
  if (e >= 31) return (uint16_t)(sign | 0x7c00u); /* overflow -> inf */
  if (e <= 0) {                                   /* subnormal or zero */
    if (e < -10) return (uint16_t)sign;
    man |= 0x800000u;
    uint32_t shift = (uint32_t)(14 - e);
    uint32_t h = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) h++;
    return (uint16_t)(sign | h);
  }
  uint32_t h = ((uint32_t)e << 10) | (man >> 13);
  uint32_t rem = man & 0x1fffu;
  /* round to nearest even; a carry into the exponent is still correct
   * (up to inf) */
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
  return (uint16_t)(sign | h);
}
