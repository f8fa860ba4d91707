/* cl.binary.* (NumPy broadcasting) and cl.unary.*: kernels/elementwise.cl. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cl_ops_internal.h"

/* Work-items per group for elementwise kernels: fixed, because PoCL
 * compiles a work-group function per local size (a new size costs a
 * compile), and 256 measured best there; GPUs clamp it via
 * vmcl_local_size. */
#define ELEMENTWISE_LOCAL 256

/* The run kernels (binary_OP_rows_PQ of elementwise.cl) for a collapsed
 * broadcast of rank >= 2: kind names the one for the operands' pattern
 * along the innermost dim (after collapsing, each operand is either dense
 * along it or broadcasts it), NULL when the space does not fit their
 * range (binary_OP_nd then). The range: F4s of a run along dim 0, the
 * next dim's rows along dim 1, the outer dims flattened along dim 2;
 * work-groups of up to ELEMENTWISE_LOCAL work-items span a run's F4s (a
 * power of two, so that a model meets few distinct group shapes: PoCL
 * compiles one per shape; the one that holds them, or a smaller one that
 * leaves fewer idle) and then as many rows as fill the group. */
typedef struct binary_rows {
  const char *kind;
  size_t local[3], global[3];
} binary_rows_t;

/* Most work-groups along range dims 1 and 2 (some GPUs bound a grid's y
 * and z by it). */
#define ROWS_MAX_GROUPS 65535u

static void binary_rows_plan(const vmcl_iter_t *it, binary_rows_t *rows) {
  int r = it->rank;
  rows->kind = NULL;
  if (r < 2) return;
  size_t items0 = (size_t)(it->shape[r - 1] + 3) / 4, n1 = (size_t)it->shape[r - 2], outer = 1;
  for (int i = 0; i < r - 2; i++) outer *= (size_t)it->shape[i];
  size_t l0 = 1, l1 = 1;
  while (l0 < items0 && l0 * 2 <= ELEMENTWISE_LOCAL) l0 *= 2;
  /* smaller groups along the run while over 1/8 of their work-items would
   * idle past its end (a run of 96 F4s: three groups of 32, not one of
   * 128 with 32 idle) */
  while (l0 > 16 && ((items0 + l0 - 1) / l0 * l0 - items0) * 8 > items0) l0 /= 2;
  while (l1 < n1 && l0 * l1 * 2 <= ELEMENTWISE_LOCAL) l1 *= 2;
  /* n1 groups at worst: binary_rows_launch may halve l1 down to 1 */
  if (n1 > ROWS_MAX_GROUPS || outer > ROWS_MAX_GROUPS) return;
  rows->local[0] = l0;
  rows->local[1] = l1;
  rows->local[2] = 1;
  rows->global[0] = (items0 + l0 - 1) / l0 * l0;
  rows->global[1] = (n1 + l1 - 1) / l1 * l1;
  rows->global[2] = outer;
  int av = it->stride[0][r - 1] != 0, bv = it->stride[1][r - 1] != 0;
  rows->kind = av && bv ? "_rows_vv" : av ? "_rows_vs" : "_rows_sv";
}

/* Launches a planned run kernel, its groups halved (rows first) while the
 * kernel or the device takes fewer work-items. */
static vm_status_t binary_rows_launch(vmcl_dev_t *d, cl_kernel k, binary_rows_t *rows) {
  size_t l = vmcl_local_size(d, k, ELEMENTWISE_LOCAL), maxs[3] = {0, 0, 0};
  if (clGetDeviceInfo(d->device, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof(maxs), maxs, NULL) !=
      CL_SUCCESS) {
    maxs[0] = maxs[1] = 1;
  }
  size_t *lo = rows->local, *g = rows->global;
  while (lo[1] > 1 && (lo[0] * lo[1] > l || lo[1] > maxs[1])) lo[1] /= 2;
  while (lo[0] > 1 && (lo[0] * lo[1] > l || lo[0] > maxs[0])) lo[0] /= 2;
  g[0] = (g[0] + lo[0] - 1) / lo[0] * lo[0];
  g[1] = (g[1] + lo[1] - 1) / lo[1] * lo[1];
  return vmcl_launch(d, k, 3, g, lo);
}

vm_status_t vmcl_op_binary(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                           void *user) {
  const char *name = user; /* "cl.binary.add" (vmcl_register_ops) */
  const char *opname = strrchr(name, '.') + 1;
  vmcl_op_t op;
  vmcl_op_init(&op, name, "(a, b, c)", args, nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 3, 3));
  vm_tensor_t *a, *b, *c;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "a", &a));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 1, "b", &b));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 2, "c", &c));
  /* integers take the strided kernels of intops.cl */
  int is_int = vmcl_int_type(a->dtype, NULL, NULL, NULL) != NULL;
  if (!is_int && strncmp(opname, "bitwise_", 8) == 0) {
    char buf[24];
    return vmcl_op_error(&op, "a (argument 0) has dtype %s, expected an integer type",
                         vm_dtype_str(a->dtype, buf, sizeof(buf)));
  }
  if (!is_int) {
    if (!vm_dtype_equal(a->dtype, VM_F32) && !vm_dtype_equal(a->dtype, VM_F16) &&
        !vm_dtype_equal(a->dtype, VM_F64)) {
      char buf[24];
      return vmcl_op_error(&op,
                           "a (argument 0) has dtype %s, expected float32, float16, float64 or an "
                           "integer type",
                           vm_dtype_str(a->dtype, buf, sizeof(buf)));
    }
    VM_RETURN_IF_ERROR(vmcl_op_fp64(&op, a, 0, "a"));
  }
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, b, 1, "b", a->dtype, "a"));
  /* comparisons (equal, less, ...) store bool */
  int cmp = strcmp(opname, "equal") == 0 || strncmp(opname, "less", 4) == 0 ||
            strncmp(opname, "greater", 7) == 0;
  if (cmp && !vm_dtype_equal(c->dtype, VM_BOOL)) {
    char buf[24];
    return vmcl_op_error(&op, "c (argument 2) has dtype %s, expected bool",
                         vm_dtype_str(c->dtype, buf, sizeof(buf)));
  }
  if (!cmp) VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, c, 2, "c", a->dtype, "a"));
  int64_t shape[VMCL_MAX_RANK];
  uint32_t nd;
  if (vmcl_broadcast_shape(a->shape, a->ndim, b->shape, b->ndim, shape, &nd) != 0) {
    char b1[192], b2[192];
    return vmcl_op_error(&op, "shapes %s of a and %s of b do not broadcast",
                         vmcl_shape_str(a->shape, a->ndim, b1, sizeof(b1)),
                         vmcl_shape_str(b->shape, b->ndim, b2, sizeof(b2)));
  }
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, c, 2, "c", shape, nd));
  int64_t n = vm_tensor_numel(c);
  if (n == 0) return VM_STATUS_OK;

  vmcl_dev_t *d = op.d;
  int64_t na = vm_tensor_numel(a), nb = vm_tensor_numel(b);
  /* Dense operands (same element count as c, so the same layout) or single
   * elements take the float4 kernel; float broadcasts the run kernels
   * (binary_rows_plan); integers, comparisons and spaces too large for a
   * run kernel's range the strided one (a work-item per element). */
  int vec = !cmp && !is_int && (na == n || na == 1) && (nb == n || nb == 1);
  vmcl_iter_t it;
  binary_rows_t rows = {0};
  if (!vec) {
    it.rank = (int)nd;
    memcpy(it.shape, shape, nd * sizeof(int64_t));
    vmcl_broadcast_strides(a, nd, it.stride[0]);
    vmcl_broadcast_strides(b, nd, it.stride[1]);
    vmcl_collapse(&it, 2);
    if (!cmp && !is_int && !op.d->binary_nd) binary_rows_plan(&it, &rows);
  }
  char kname[48];
  vmcl_join(kname, sizeof(kname), is_int ? "i" : "", cmp ? "cmp_" : "binary_", opname,
            vec ? "_vec" : rows.kind ? rows.kind : "_nd");
  char iopts[48];
  if (is_int) vmcl_int_options(a->dtype, iopts, sizeof(iopts));
  cl_kernel k;
  vm_status_t st;
  pthread_mutex_lock(&d->lock);
  st = vmcl_family_kernel(d, is_int ? VMCL_FAM_INT : VMCL_FAM_ELEMENTWISE,
                          is_int ? iopts : vmcl_float_options(a->dtype), kname, &k);
  if (st) goto done;
  vmcl_args_t ka = vmcl_args_begin(k);
  size_t items;
  if (vec) {
    vmcl_arg_mem(&ka, vmcl_tensor_mem(a));
    vmcl_arg_int(&ka, vmcl_elem_offset(a));
    vmcl_arg_int(&ka, na == 1 && n != 1);
    vmcl_arg_mem(&ka, vmcl_tensor_mem(b));
    vmcl_arg_int(&ka, vmcl_elem_offset(b));
    vmcl_arg_int(&ka, nb == 1 && n != 1);
    vmcl_arg_mem(&ka, vmcl_tensor_mem(c));
    vmcl_arg_int(&ka, vmcl_elem_offset(c));
    vmcl_arg_int(&ka, n);
    items = (size_t)(n / 4 + 1); /* the extra work-item does the tail */
  } else {
    vmcl_arg_mem(&ka, vmcl_tensor_mem(a));
    vmcl_arg_int(&ka, vmcl_elem_offset(a));
    vmcl_arg_mem(&ka, vmcl_tensor_mem(b));
    vmcl_arg_int(&ka, vmcl_elem_offset(b));
    vmcl_arg_mem(&ka, vmcl_tensor_mem(c));
    vmcl_arg_int(&ka, vmcl_elem_offset(c));
    /* the run kernels take the last two dims apart, the rest as _nd all */
    int r = it.rank, outer = rows.kind ? r - 2 : r;
    if (rows.kind) {
      vmcl_arg_int(&ka, it.shape[r - 1]);
      vmcl_arg_int(&ka, it.shape[r - 2]);
      vmcl_arg_int(&ka, it.stride[0][r - 2]);
      vmcl_arg_int(&ka, it.stride[1][r - 2]);
    } else {
      vmcl_arg_int(&ka, n);
    }
    vmcl_arg_int(&ka, outer);
    vmcl_arg_dims(&ka, it.shape, outer, 1);
    vmcl_arg_dims(&ka, it.stride[0], outer, 0);
    vmcl_arg_dims(&ka, it.stride[1], outer, 0);
    items = (size_t)n;
  }
  if (ka.err != CL_SUCCESS) {
    st = vmcl_status(ka.err, "clSetKernelArg");
    goto done;
  }
  st = rows.kind ? binary_rows_launch(d, k, &rows)
                 : vmcl_launch_1d(d, k, items, vmcl_local_size(d, k, ELEMENTWISE_LOCAL));
done:
  pthread_mutex_unlock(&d->lock);
  return st;
}

/* Unary operations with float attributes, passed to the kernel as pa, pb
 * (elementwise.cl); every other operation takes none. */
typedef struct unary_attrs {
  const char *op;
  const char *usage;
  uint32_t n;
  const char *names[2];
} unary_attrs_t;

static const unary_attrs_t unary_attr_table[] = {
    {"leaky_relu", "(x, alpha, y)", 1, {"alpha", NULL}},
    {"hard_sigmoid", "(x, alpha, beta, y)", 2, {"alpha", "beta"}},
    {"clip", "(x, lo, hi, y)", 2, {"lo", "hi"}},
    {"elu", "(x, alpha, y)", 1, {"alpha", NULL}},
    {"selu", "(x, alpha, gamma, y)", 2, {"alpha", "gamma"}},
};

/* v rounded up (up) or down into [lo, hi]; infinities clamp. */
static int64_t int_bound(double v, int64_t lo, int64_t hi, int up) {
  if (!(v > (double)lo)) return lo;
  if (!(v < (double)hi)) return hi;
  return (int64_t)(up ? ceil(v) : floor(v));
}

vm_status_t vmcl_op_unary(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                          void *user) {
  const char *name = user; /* "cl.unary.relu" (vmcl_register_ops) */
  const char *opname = strrchr(name, '.') + 1;
  const unary_attrs_t *ua = NULL;
  for (size_t i = 0; i < sizeof(unary_attr_table) / sizeof(unary_attr_table[0]); i++) {
    if (strcmp(unary_attr_table[i].op, opname) == 0) ua = &unary_attr_table[i];
  }
  uint32_t na = ua ? ua->n : 0;
  vmcl_op_t op;
  vmcl_op_init(&op, name, ua ? ua->usage : "(x, y)", args, nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 2 + na, 2 + na));
  vm_tensor_t *x, *y;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "x", &x));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 1 + na, "y", &y));
  int64_t tmin, tmax;
  int int_clip = strcmp(opname, "clip") == 0 && vmcl_int_type(x->dtype, NULL, &tmin, &tmax);
  if (!int_clip) VM_RETURN_IF_ERROR(vmcl_op_real_dtype(&op, x, 0, "x"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, y, 1 + na, "y", x->dtype, "x"));
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, y, 1 + na, "y", x->shape, x->ndim));
  double p[2] = {0.0, 0.0};
  for (uint32_t i = 0; i < na; i++) {
    VM_RETURN_IF_ERROR(vmcl_op_float(&op, 1 + i, ua->names[i], &p[i]));
    /* infinite bounds are meaningful for clip; NaN never is */
    if (isnan(p[i])) {
      return vmcl_op_error(&op, "%s (argument %u) is NaN, expected a number", ua->names[i], 1 + i);
    }
  }
  int64_t n = vm_tensor_numel(x);
  if (n == 0) return VM_STATUS_OK;
  /* integer clip (intops.cl) takes the bounds as the dtype's integers: lo
   * rounds up, hi down; uint64 past int64 is all ones once the kernel casts */
  char iopts[48], kname[48];
  const char *opts = vmcl_float_options(x->dtype);
  if (int_clip) {
    vmcl_int_options(x->dtype, iopts, sizeof(iopts));
    opts = iopts;
    vmcl_join(kname, sizeof(kname), "iunary_clip", "", "", "");
  } else {
    vmcl_join(kname, sizeof(kname), "unary_", opname, "", "");
  }
  vmcl_dev_t *d = op.d;
  cl_kernel k;
  vm_status_t st;
  pthread_mutex_lock(&d->lock);
  st = vmcl_family_kernel(d, int_clip ? VMCL_FAM_INT : VMCL_FAM_ELEMENTWISE, opts, kname, &k);
  if (st) goto done;
  vmcl_args_t ka = vmcl_args_begin(k);
  vmcl_arg_mem(&ka, vmcl_tensor_mem(x));
  vmcl_arg_int(&ka, vmcl_elem_offset(x));
  vmcl_arg_mem(&ka, vmcl_tensor_mem(y));
  vmcl_arg_int(&ka, vmcl_elem_offset(y));
  vmcl_arg_int(&ka, n);
  if (int_clip) {
    int u64 = vm_dtype_equal(x->dtype, VM_DTYPE_MAKE(VM_DTYPE_UINT, 64, 1));
    vmcl_arg_long(&ka, int_bound(p[0], tmin, tmax, 1));
    vmcl_arg_long(&ka, u64 && p[1] >= 9.2e18 ? -1 : int_bound(p[1], tmin, tmax, 0));
  } else {
    vmcl_arg_real(&ka, x->dtype, p[0]);
    vmcl_arg_real(&ka, x->dtype, p[1]);
  }
  if (ka.err != CL_SUCCESS) {
    st = vmcl_status(ka.err, "clSetKernelArg");
    goto done;
  }
  /* float kernels take a float4 per work-item */
  st = vmcl_launch_1d(d, k, int_clip ? (size_t)n : (size_t)(n / 4 + 1),
                      vmcl_local_size(d, k, ELEMENTWISE_LOCAL));
done:
  pthread_mutex_unlock(&d->lock);
  return st;
}
