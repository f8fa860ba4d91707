/* Layout and type operators: cl.transpose, cl.concat, cl.slice (strided
 * copies, kernels/copy.cl), cl.cast (kernels/cast.cl) and cl.fill
 * (clEnqueueFillBuffer). All work on any dtype of 1, 2, 4 or 8 bytes
 * unless said otherwise. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cl_ops_internal.h"
#include "vmrpc/checked.h"

vm_status_t vmcl_op_transpose(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                              vm_value_t *out, void *user) {
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.transpose", "(x, perm, y)", args, nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 3, 3));
  vm_tensor_t *x, *y;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "x", &x));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 2, "y", &y));
  VM_RETURN_IF_ERROR(vmcl_op_copyable(&op, x, 0, "x"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, y, 2, "y", x->dtype, "x"));
  int64_t perm[VMCL_MAX_RANK];
  uint32_t np;
  VM_RETURN_IF_ERROR(vmcl_op_int_list(&op, 1, "perm", perm, VMCL_MAX_RANK, &np));
  if (np != x->ndim) {
    return vmcl_op_error(&op, "perm (argument 1) has %u entries, expected %u (the dims of x)", np,
                         x->ndim);
  }
  int seen[VMCL_MAX_RANK] = {0};
  for (uint32_t i = 0; i < np; i++) {
    if (perm[i] < -(int64_t)np || perm[i] >= (int64_t)np) {
      return vmcl_op_error(&op, "perm (argument 1) entry %lld is out of range for %u dims",
                           (long long)perm[i], np);
    }
    if (perm[i] < 0) perm[i] += np;
    if (seen[perm[i]]++) {
      return vmcl_op_error(&op, "perm (argument 1) is not a permutation (%lld repeats)",
                           (long long)perm[i]);
    }
  }
  int64_t yshape[VMCL_MAX_RANK], xs[VMCL_MAX_RANK];
  for (uint32_t i = 0; i < np; i++) yshape[i] = x->shape[perm[i]];
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, y, 2, "y", yshape, np));
  if (vm_tensor_numel(y) == 0) return VM_STATUS_OK;
  vmcl_dense_strides(x->shape, x->ndim, xs);
  vmcl_iter_t it;
  it.rank = (int)np;
  memcpy(it.shape, yshape, np * sizeof(int64_t));
  for (uint32_t i = 0; i < np; i++) it.stride[0][i] = xs[perm[i]];
  vmcl_dense_strides(yshape, np, it.stride[1]);
  return vmcl_copy_strided(op.d, vm_dtype_bytes(x->dtype), vmcl_tensor_mem(x), vmcl_elem_offset(x),
                           vmcl_tensor_mem(y), vmcl_elem_offset(y), &it);
}

vm_status_t vmcl_op_concat(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                           void *user) {
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.concat", "(x0, ..., xn, axis, y)", args, nargs);
  uint32_t na = op.nargs;
  if (na < 3) {
    return vmcl_op_error(&op, "expected at least 3 arguments %s, got %u", op.usage, na);
  }
  uint32_t nin = na - 2;
  vm_tensor_t *y;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, na - 1, "y", &y));
  VM_RETURN_IF_ERROR(vmcl_op_copyable(&op, y, na - 1, "y"));
  if (y->ndim == 0) {
    return vmcl_op_error(&op, "y (argument %u) must have at least one dim", na - 1);
  }
  int64_t axis;
  VM_RETURN_IF_ERROR(
      vmcl_op_int(&op, na - 2, "axis", -(int64_t)y->ndim, (int64_t)y->ndim - 1, &axis));
  int ax = (int)(axis < 0 ? axis + y->ndim : axis);
  /* check every input before copying anything */
  int64_t total = 0;
  for (uint32_t i = 0; i < nin; i++) {
    char what[24];
    snprintf(what, sizeof(what), "x%u", i);
    vm_tensor_t *x;
    VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, i, what, &x));
    VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, x, i, what, y->dtype, "y"));
    if (x->ndim != y->ndim) {
      char b[192];
      return vmcl_op_error(&op, "%s (argument %u) has shape %s, expected %u dims like y", what, i,
                           vmcl_shape_str(x->shape, x->ndim, b, sizeof(b)), y->ndim);
    }
    /* every dim but the axis must match y's */
    int64_t want[VMCL_MAX_RANK];
    memcpy(want, y->shape, y->ndim * sizeof(int64_t));
    want[ax] = x->shape[ax];
    VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, x, i, what, want, y->ndim));
    /* empty inputs may each be huge along the axis: a sum that passes y's
     * extent is already wrong */
    if (vm_ckd_add_i64(total, x->shape[ax], &total) != 0 || total > y->shape[ax]) {
      return vmcl_op_error(&op,
                           "y (argument %u) has %lld elements along axis %d, fewer than the "
                           "inputs up to x%u",
                           na - 1, (long long)y->shape[ax], ax, i);
    }
  }
  if (total != y->shape[ax]) {
    return vmcl_op_error(&op,
                         "y (argument %u) has %lld elements along axis %d, expected %lld (the sum "
                         "over the inputs)",
                         na - 1, (long long)y->shape[ax], ax, (long long)total);
  }
  int64_t ys[VMCL_MAX_RANK];
  vmcl_dense_strides(y->shape, y->ndim, ys);
  int64_t at = 0;
  for (uint32_t i = 0; i < nin; i++) {
    vm_tensor_t *x = vm_value_as_tensor(&op.args[i]);
    vmcl_iter_t it;
    it.rank = (int)x->ndim;
    memcpy(it.shape, x->shape, x->ndim * sizeof(int64_t));
    vmcl_dense_strides(x->shape, x->ndim, it.stride[0]);
    memcpy(it.stride[1], ys, y->ndim * sizeof(int64_t));
    VM_RETURN_IF_ERROR(vmcl_copy_strided(op.d, vm_dtype_bytes(y->dtype), vmcl_tensor_mem(x),
                                         vmcl_elem_offset(x), vmcl_tensor_mem(y),
                                         vmcl_elem_offset(y) + at * ys[ax], &it));
    at += x->shape[ax];
  }
  return VM_STATUS_OK;
}

/* Python slice semantics for one axis of size dim: normalises begin/end
 * (negative counts from the end; out of range clamps) and returns the
 * number of elements taken. */
static int64_t slice_axis(int64_t dim, int64_t step, int64_t *begin, int64_t end) {
  int64_t b = *begin, e = end;
  if (b < 0) b = b < -dim ? -1 : b + dim; /* -1 marks "before the start" */
  if (e < 0) e = e < -dim ? -1 : e + dim;
  if (step > 0) {
    if (b < 0) b = 0;
    if (e < 0) e = 0;
    if (b > dim) b = dim;
    if (e > dim) e = dim;
    *begin = b;
    return e > b ? (e - b - 1) / step + 1 : 0; /* no overflow for any dim and step */
  }
  if (b > dim - 1) b = dim - 1;
  if (e > dim - 1) e = dim - 1;
  *begin = b;
  return b > e ? (b - e - 1) / (-step) + 1 : 0;
}

vm_status_t vmcl_op_slice(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                          void *user) {
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.slice", "(x, begin, end, step|none, y)", args, nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 5, 5));
  vm_tensor_t *x, *y;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "x", &x));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 4, "y", &y));
  VM_RETURN_IF_ERROR(vmcl_op_copyable(&op, x, 0, "x"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, y, 4, "y", x->dtype, "x"));
  int64_t begin[VMCL_MAX_RANK], end[VMCL_MAX_RANK], step[VMCL_MAX_RANK];
  uint32_t nb, ne, ns;
  VM_RETURN_IF_ERROR(vmcl_op_int_list(&op, 1, "begin", begin, VMCL_MAX_RANK, &nb));
  VM_RETURN_IF_ERROR(vmcl_op_int_list(&op, 2, "end", end, VMCL_MAX_RANK, &ne));
  if (op.args[3].kind == VM_VAL_NONE) {
    ns = nb;
    for (uint32_t i = 0; i < ns; i++) step[i] = 1;
  } else {
    VM_RETURN_IF_ERROR(vmcl_op_int_list(&op, 3, "step", step, VMCL_MAX_RANK, &ns));
  }
  if (nb > x->ndim || ne != nb || ns != nb) {
    return vmcl_op_error(&op,
                         "begin, end and step have %u, %u and %u entries, expected the same "
                         "count, at most %u (the dims of x)",
                         nb, ne, ns, x->ndim);
  }
  int64_t yshape[VMCL_MAX_RANK], xs[VMCL_MAX_RANK];
  vmcl_dense_strides(x->shape, x->ndim, xs);
  int64_t src_off = vmcl_elem_offset(x);
  vmcl_iter_t it;
  it.rank = (int)x->ndim;
  for (uint32_t i = 0; i < x->ndim; i++) {
    int64_t b = 0, s = 1, len = x->shape[i];
    if (i < nb) {
      s = step[i];
      if (s == 0) return vmcl_op_error(&op, "step (argument 3) entry %u is 0", i);
      if (s < -(int64_t)INT_MAX || s > INT_MAX) {
        return vmcl_op_error(&op, "step (argument 3) entry %u is out of range", i);
      }
      b = begin[i];
      len = slice_axis(x->shape[i], s, &b, end[i]);
    }
    yshape[i] = len;
    it.shape[i] = len;
    /* a step that overflows the stride takes at most one element (s > 1
     * and |s| * xs[i] past INT64_MAX means it leaves x at once) */
    if (vm_ckd_mul_i64(xs[i], s, &it.stride[0][i]) != 0) it.stride[0][i] = 0;
    if (len > 0) src_off += b * xs[i];
  }
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, y, 4, "y", yshape, x->ndim));
  if (vm_tensor_numel(y) == 0) return VM_STATUS_OK;
  /* a stride beyond the int range cannot be passed; only a huge step on a
   * huge axis gets here, and then its single element needs no stride */
  for (int i = 0; i < it.rank; i++) {
    if (it.shape[i] == 1) it.stride[0][i] = 0;
  }
  vmcl_dense_strides(yshape, x->ndim, it.stride[1]);
  return vmcl_copy_strided(op.d, vm_dtype_bytes(x->dtype), vmcl_tensor_mem(x), src_off,
                           vmcl_tensor_mem(y), vmcl_elem_offset(y), &it);
}

/* OpenCL C type and cast.cl kind of a dtype, with its -D options (prefix
 * "SRC" or "DST") appended to opts; -1 if cl.cast cannot handle it. */
static int cast_type(vm_dtype_t dt, const char *pre, char *opts, size_t optlen) {
  if (dt.lanes != 1) return -1;
  const char *type = NULL;
  int kind = -1;
  char extra[64] = "";
  if (vm_dtype_is_small_float(dt)) {
    type = "uchar", kind = dt.bits == 4 ? 7 : 5;
    snprintf(extra, sizeof(extra), " -D%s_MF=%u", pre, dt.code);
  }
  switch (vm_dtype_is_small_float(dt) ? 255 : dt.code) {
    case VM_DTYPE_FLOAT:
      if (dt.bits == 32) type = "float", kind = 1;
      if (dt.bits == 16) type = "half", kind = 2;
      if (dt.bits == 64) type = "double", kind = 1; /* needs fp64: vmcl_op_cast */
      break;
    case VM_DTYPE_BOOL: type = "uchar", kind = 3; break;
    case VM_DTYPE_BFLOAT: type = "ushort", kind = 4; break;
    case VM_DTYPE_INT:
    case VM_DTYPE_UINT: {
      int u = dt.code == VM_DTYPE_UINT;
      kind = 0;
      switch (dt.bits) {
        case 2:
        case 4:
          type = "uchar", kind = 6;
          snprintf(extra, sizeof(extra), " -D%s_BITS=%u -D%s_SIGNED=%d", pre, dt.bits, pre, !u);
          break;
        case 8: type = u ? "uchar" : "char"; break;
        case 16: type = u ? "ushort" : "short"; break;
        case 32: type = u ? "uint" : "int"; break;
        case 64: type = u ? "ulong" : "long"; break;
        default: kind = -1;
      }
      break;
    }
    default: break;
  }
  if (kind < 0 || !type) return -1;
  size_t used = strlen(opts);
  snprintf(opts + used, optlen - used, " -D%s_T=%s -D%s_KIND=%d%s", pre, type, pre, kind, extra);
  return kind;
}

vm_status_t vmcl_op_cast(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                         void *user) {
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.cast", "(x, y[, saturate[, round_mode]])", args, nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 2, 4));
  vm_tensor_t *x, *y;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "x", &x));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 1, "y", &y));
  int64_t sat = 1, rmode = 0;
  if (nargs > 2) VM_RETURN_IF_ERROR(vmcl_op_int(&op, 2, "saturate", 0, 1, &sat));
  if (nargs > 3) VM_RETURN_IF_ERROR(vmcl_op_int(&op, 3, "round_mode", 0, 2, &rmode));
  char opts[256];
  snprintf(opts, sizeof(opts), "-DSAT=%d -DRMODE=%d", (int)sat, (int)rmode);
  int sk = cast_type(x->dtype, "SRC", opts, sizeof(opts));
  int dk = cast_type(y->dtype, "DST", opts, sizeof(opts));
  char buf[24];
  static const char *const k_types =
      "float32, float16, float64, bfloat16, bool, an integer type (int4/uint4/int2/uint2 too), "
      "float8_e4m3fn, float8_e4m3fnuz, float8_e5m2, float8_e5m2fnuz, float8_e8m0fnu or "
      "float4_e2m1fn";
  if (sk < 0) {
    return vmcl_op_error(&op, "x (argument 0) has dtype %s, expected %s",
                         vm_dtype_str(x->dtype, buf, sizeof(buf)), k_types);
  }
  if (dk < 0) {
    return vmcl_op_error(&op, "y (argument 1) has dtype %s, expected %s",
                         vm_dtype_str(y->dtype, buf, sizeof(buf)), k_types);
  }
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, y, 1, "y", x->shape, x->ndim));
  int64_t n = vm_tensor_numel(x);
  if (n == 0) return VM_STATUS_OK;
  /* a packed tensor's offset is in bytes (its first element starts a
   * byte); its element count must fit the kernel's int indices */
  unsigned xper = vm_dtype_per_byte(x->dtype), yper = vm_dtype_per_byte(y->dtype);
  if (n > INT32_MAX - 8)
    return vmcl_op_error(&op, "x has %lld elements, at most %d are supported", (long long)n,
                         INT32_MAX - 8);
  vmcl_dev_t *d = op.d;
  if (vm_dtype_equal(x->dtype, y->dtype)) { /* a plain copy */
    uint64_t nb = vm_tensor_nbytes_of(x);
    vmcl_iter_t it = {.rank = 1, .shape = {xper > 1 ? (int64_t)nb : n}, .stride = {{1}, {1}}};
    return vmcl_copy_strided(d, vm_dtype_bytes(x->dtype), vmcl_tensor_mem(x), vmcl_elem_offset(x),
                             vmcl_tensor_mem(y), vmcl_elem_offset(y), &it);
  }
  /* float64 on either side: the device must have fp64, and the program
   * (only it) enables cl_khr_fp64 through common.cl's VMCL_F64 */
  VM_RETURN_IF_ERROR(vmcl_op_fp64(&op, x, 0, "x"));
  VM_RETURN_IF_ERROR(vmcl_op_fp64(&op, y, 1, "y"));
  if (vm_dtype_equal(x->dtype, VM_F64) || vm_dtype_equal(y->dtype, VM_F64)) {
    size_t used = strlen(opts);
    snprintf(opts + used, sizeof(opts) - used, " -DVMCL_F64");
  }
  cl_kernel k;
  vm_status_t st;
  pthread_mutex_lock(&d->lock);
  st = vmcl_family_kernel(d, VMCL_FAM_CAST, opts, "cast", &k);
  if (st) goto done;
  vmcl_args_t a = vmcl_args_begin(k);
  vmcl_arg_mem(&a, vmcl_tensor_mem(x));
  vmcl_arg_int(&a, vmcl_elem_offset(x));
  vmcl_arg_mem(&a, vmcl_tensor_mem(y));
  vmcl_arg_int(&a, vmcl_elem_offset(y));
  vmcl_arg_int(&a, n);
  if (a.err != CL_SUCCESS) {
    st = vmcl_status(a.err, "clSetKernelArg");
    goto done;
  }
  size_t units = (size_t)((n + yper - 1) / yper);
  st = vmcl_launch_1d(d, k, units, vmcl_local_size(d, k, 256));
done:
  pthread_mutex_unlock(&d->lock);
  return st;
}

/* cl.bitcast(x, y): y gets x's bytes; the two dtypes have one element
 * size (ONNX's BitCast: the same bit width) and the shapes agree. */
vm_status_t vmcl_op_bitcast(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                            vm_value_t *out, void *user) {
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.bitcast", "(x, y)", args, nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 2, 2));
  vm_tensor_t *x, *y;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "x", &x));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 1, "y", &y));
  if (x->dtype.bits * x->dtype.lanes != y->dtype.bits * y->dtype.lanes) {
    char a[24], b[24];
    return vmcl_op_error(&op, "x is %s, y is %s: a bit cast needs the same bit width",
                         vm_dtype_str(x->dtype, a, sizeof(a)),
                         vm_dtype_str(y->dtype, b, sizeof(b)));
  }
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, y, 1, "y", x->shape, x->ndim));
  uint64_t nb = vm_tensor_nbytes_of(x);
  if (nb == 0) return VM_STATUS_OK;
  /* whole bytes: a packed tensor's offset is in bytes as well */
  size_t esz = vm_dtype_per_byte(x->dtype) > 1 ? 1 : vm_dtype_bytes(x->dtype);
  vmcl_iter_t it = {.rank = 1, .shape = {(int64_t)(nb / esz)}, .stride = {{1}, {1}}};
  return vmcl_copy_strided(op.d, esz, vmcl_tensor_mem(x), vmcl_elem_offset(x), vmcl_tensor_mem(y),
                           vmcl_elem_offset(y), &it);
}

vm_status_t vmcl_op_fill(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                         void *user) {
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.fill", "(value, y)", args, nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 2, 2));
  vm_tensor_t *y;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 1, "y", &y));
  uint8_t pattern[8];
  size_t psize;
  VM_RETURN_IF_ERROR(vmcl_value_pattern(&op, 0, y->dtype, 1, pattern, &psize));
  uint64_t nbytes = vm_tensor_nbytes_of(y);
  if (nbytes == 0) return VM_STATUS_OK;
  vmcl_dev_t *d = op.d;
  cl_event ev = NULL;
  cl_int e = clEnqueueFillBuffer(d->queue, vmcl_tensor_mem(y), pattern, psize, (size_t)y->offset,
                                 (size_t)nbytes, 0, NULL, vmcl_event_slot(d, &ev));
  if (e != CL_SUCCESS) return vmcl_status(e, "clEnqueueFillBuffer");
  vmcl_track_event(d, ev);
  return VM_STATUS_OK;
}
