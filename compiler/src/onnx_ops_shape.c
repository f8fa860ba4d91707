/* ONNX operators on shapes and indices: views (Reshape, Squeeze ...),
 * Transpose, Concat, Slice, Split, Gather, Pad, Expand, Resize, and the
 * constants, casts and shape arithmetic (Cast, Shape, Constant, Range). */

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_ops.h"

/* ---------------------------------------------------------------------------
 * Shapes and views
 */

vm_status_t onx_op_identity(onx_ctx_t *c) {
  onx_value_t *x;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  return onx_def_view(c, 0, x, x->ndim, x->dims);
}

vm_status_t onx_op_dropout(onx_ctx_t *c) {
  onx_value_t *x;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  if (c->opset >= 12) {
    onx_value_t *tm = onx_in(c, 2);
    if (tm) {
      if (!tm->data || tm->numel != 1)
        return onx_node_err(c, VM_UNIMPLEMENTED, "training_mode must be a constant");
      if (onx_ld_i(tm->dt, tm->data, 0))
        return onx_unsupported_attr(c, "training_mode", "true", "false (inference)");
    }
  } else if (c->opset < 7) {
    VM_RETURN_IF_ERROR(onx_need_is_test(c));
  }
  VM_RETURN_IF_ERROR(onx_def_view(c, 0, x, x->ndim, x->dims));
  if (onx_out_wanted(c, 1)) {
    /* the mask keeps every element: bool from opset 10, X's type before */
    vm_dtype_t mdt = c->opset < 10 ? x->dt : VM_BOOL;
    uint8_t *d;
    VM_RETURN_IF_ERROR(onx_alloc_const(c, mdt, x->numel, &d));
    for (int64_t i = 0; i < x->numel; i++) onx_st_f(mdt, d, i, 1.0);
    return onx_def_const(c, 1, mdt, x->ndim, x->dims, d);
  }
  return VM_STATUS_OK;
}

vm_status_t onx_op_reshape(onx_ctx_t *c) {
  onx_value_t *x;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  int64_t sh[MAXD], n;
  if (c->opset < 5) {
    VM_RETURN_IF_ERROR(onx_attr_ints(c, "shape", sh, MAXD, &n));
  } else {
    onx_value_t *s;
    VM_RETURN_IF_ERROR(onx_in_req(c, 1, &s));
    VM_RETURN_IF_ERROR(onx_const_ints(c, s, "shape", sh, MAXD, &n));
  }
  if (n < 0) n = 0;
  int64_t allowzero = 0;
  if (c->opset >= 14) VM_RETURN_IF_ERROR(onx_attr_int(c, "allowzero", 0, &allowzero));
  int64_t known = 1, infer = -1;
  for (int64_t i = 0; i < n; i++) {
    if (sh[i] == 0 && !allowzero) {
      if (i >= x->ndim)
        return onx_node_err(c, VM_INVALID_ARGUMENT, "shape[%lld] = 0 copies a dim X lacks",
                            (long long)i);
      sh[i] = x->dims[i];
    }
    if (sh[i] == -1) {
      if (infer >= 0) return onx_node_err(c, VM_INVALID_ARGUMENT, "two -1 in the shape");
      infer = i;
      continue;
    }
    if (sh[i] < 0 || sh[i] > ONX_MAX_DIM)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "shape[%lld] = %lld (a dim is 0 to %lld)",
                          (long long)i, (long long)sh[i], (long long)ONX_MAX_DIM);
    if (vm_ckd_mul_i64(known, sh[i], &known) != 0) {
      char s[200];
      return onx_node_err(c, VM_INVALID_ARGUMENT,
                          "shape %s: the product of its dims overflows 64 bits at shape[%lld]",
                          onx_dims_str((uint32_t)n, sh, s, sizeof(s)), (long long)i);
    }
  }
  if (infer >= 0) {
    if (known == 0 || x->numel % known != 0)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "cannot infer the -1 dim of %lld elements",
                          (long long)x->numel);
    sh[infer] = x->numel / known;
  } else if (known != x->numel) {
    return onx_node_err(c, VM_INVALID_ARGUMENT, "shape holds %lld elements, X has %lld",
                        (long long)known, (long long)x->numel);
  }
  return onx_def_view(c, 0, x, (uint32_t)n, sh);
}

vm_status_t onx_op_flatten(onx_ctx_t *c) {
  onx_value_t *x;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  int64_t axis;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "axis", 1, &axis));
  if (axis < -(int64_t)x->ndim || axis > (int64_t)x->ndim)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "axis %lld out of range", (long long)axis);
  if (axis < 0) axis += x->ndim;
  int64_t d[2] = {prod(x->dims, (uint32_t)axis), prod(x->dims + axis, x->ndim - (uint32_t)axis)};
  return onx_def_view(c, 0, x, 2, d);
}

/* axes from the attribute (before opset 13) or the second input. */
static vm_status_t read_axes(onx_ctx_t *c, int64_t *axes, int64_t *n) {
  if (c->opset < 13) return onx_attr_ints(c, "axes", axes, MAXD, n);
  onx_value_t *a = onx_in(c, 1);
  *n = -1;
  if (!a) return VM_STATUS_OK;
  return onx_const_ints(c, a, "axes", axes, MAXD, n);
}

vm_status_t onx_op_squeeze(onx_ctx_t *c) {
  onx_value_t *x;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  int64_t axes[MAXD], n;
  VM_RETURN_IF_ERROR(read_axes(c, axes, &n));
  uint8_t drop[MAXD] = {0};
  if (n < 0) {
    for (uint32_t i = 0; i < x->ndim; i++) drop[i] = x->dims[i] == 1;
  } else {
    for (int64_t i = 0; i < n; i++) {
      int64_t a;
      VM_RETURN_IF_ERROR(norm_axis(c, axes[i], x->ndim, "axis", &a));
      if (x->dims[a] != 1)
        return onx_node_err(c, VM_INVALID_ARGUMENT, "axis %lld has size %lld, not 1", (long long)a,
                            (long long)x->dims[a]);
      drop[a] = 1;
    }
  }
  int64_t d[MAXD];
  uint32_t on = 0;
  for (uint32_t i = 0; i < x->ndim; i++)
    if (!drop[i]) d[on++] = x->dims[i];
  return onx_def_view(c, 0, x, on, d);
}

vm_status_t onx_op_unsqueeze(onx_ctx_t *c) {
  onx_value_t *x;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  int64_t axes[MAXD], n;
  VM_RETURN_IF_ERROR(read_axes(c, axes, &n));
  if (n < 0) return onx_node_err(c, VM_INVALID_ARGUMENT, "axes are missing");
  uint32_t on = x->ndim + (uint32_t)n;
  if (on > MAXD) return onx_node_err(c, VM_UNIMPLEMENTED, "rank %u: at most %d", on, MAXD);
  uint8_t ins[MAXD] = {0};
  for (int64_t i = 0; i < n; i++) {
    int64_t a;
    VM_RETURN_IF_ERROR(norm_axis(c, axes[i], on, "axis", &a));
    if (ins[a]) return onx_node_err(c, VM_INVALID_ARGUMENT, "axis %lld repeated", (long long)a);
    ins[a] = 1;
  }
  int64_t d[MAXD];
  uint32_t k = 0;
  for (uint32_t i = 0; i < on; i++) d[i] = ins[i] ? 1 : x->dims[k++];
  return onx_def_view(c, 0, x, on, d);
}

vm_status_t onx_op_transpose(onx_ctx_t *c) {
  onx_value_t *x;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  int64_t perm[MAXD], n;
  VM_RETURN_IF_ERROR(onx_attr_ints(c, "perm", perm, MAXD, &n));
  if (n < 0) {
    n = x->ndim;
    for (uint32_t i = 0; i < x->ndim; i++) perm[i] = x->ndim - 1 - i;
  }
  if (n != (int64_t)x->ndim)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "perm has %lld values for rank %u", (long long)n,
                        x->ndim);
  uint8_t seen[MAXD] = {0};
  int64_t od[MAXD];
  for (int64_t i = 0; i < n; i++) {
    int64_t p;
    VM_RETURN_IF_ERROR(norm_axis(c, perm[i], x->ndim, "perm value", &p));
    if (seen[p]) return onx_node_err(c, VM_INVALID_ARGUMENT, "perm is not a permutation");
    seen[p] = 1;
    perm[i] = p;
    od[i] = x->dims[p];
  }
  if (x->data) {
    uint8_t *d;
    VM_RETURN_IF_ERROR(onx_alloc_const(c, x->dt, x->numel, &d));
    size_t es = esize(x->dt);
    int64_t stride[MAXD], idx[MAXD] = {0};
    int64_t s = 1;
    for (int32_t i = (int32_t)x->ndim - 1; i >= 0; i--) {
      stride[i] = s;
      s *= x->dims[i];
    }
    for (int64_t i = 0; i < x->numel; i++) {
      int64_t off = 0;
      for (uint32_t k = 0; k < x->ndim; k++) off += idx[k] * stride[perm[k]];
      memcpy(d + i * es, x->data + off * es, es);
      onx_next_index(x->ndim, od, idx);
    }
    return onx_def_const(c, 0, x->dt, x->ndim, od, d);
  }
  /* left pending: it may cancel with another or move past elementwise ops */
  return onx_lt_transpose(c, x, perm);
}

vm_status_t onx_op_concat(onx_ctx_t *c) {
  uint32_t n = (uint32_t)c->node->n_input;
  if (n < 1) return onx_node_err(c, VM_INVALID_ARGUMENT, "no inputs");
  if (n > 64) return onx_node_err(c, VM_UNIMPLEMENTED, "%u inputs: at most 64", n);
  onx_value_t *x0;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x0));
  int64_t axis;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "axis", c->opset < 4 ? 1 : 0, &axis));
  if (x0->ndim == 0) return onx_node_err(c, VM_INVALID_ARGUMENT, "inputs are 0-d");
  int64_t ax;
  VM_RETURN_IF_ERROR(norm_axis(c, axis, x0->ndim, "axis", &ax));
  int64_t od[MAXD];
  memcpy(od, x0->dims, sizeof(od));
  od[ax] = 0;
  onx_value_t *xs[64];
  for (uint32_t i = 0; i < n; i++) {
    VM_RETURN_IF_ERROR(onx_in_req(c, i, &xs[i]));
    onx_value_t *x = xs[i];
    if (x->ndim != x0->ndim || !vm_dtype_equal(x->dt, x0->dt))
      return onx_node_err(c, VM_INVALID_ARGUMENT, "input %u differs in rank or dtype", i);
    for (uint32_t k = 0; k < x->ndim; k++)
      if (k != ax && x->dims[k] != x0->dims[k])
        return onx_node_err(c, VM_INVALID_ARGUMENT, "input %u differs in dim %u", i, k);
    if (vm_ckd_add_i64(od[ax], x->dims[ax], &od[ax]) != 0) /* at most 64 x 2^31: kept for form */
      return onx_node_err(c, VM_INVALID_ARGUMENT, "the inputs' dims on axis %lld overflow",
                          (long long)ax);
  }
  int64_t numel;
  VM_RETURN_IF_ERROR(onx_check_shape(c, "output", x0->ndim, od, &numel));
  if (all_const(c)) {
    uint8_t *d;
    VM_RETURN_IF_ERROR(onx_alloc_const(c, x0->dt, numel, &d));
    size_t es = esize(x0->dt);
    int64_t outer = prod(od, (uint32_t)ax), inner = prod(od + ax + 1, x0->ndim - (uint32_t)ax - 1);
    int64_t pos = 0;
    for (int64_t o = 0; o < outer; o++)
      for (uint32_t i = 0; i < n; i++) {
        int64_t chunk = xs[i]->dims[ax] * inner;
        memcpy(d + pos * es, xs[i]->data + o * chunk * es, (size_t)chunk * es);
        pos += chunk;
      }
    return onx_def_const(c, 0, x0->dt, x0->ndim, od, d);
  }
  /* one input (a decoder's key/value cache without a past, as T5 exports
   * write it): the input itself, a pending transpose left pending */
  if (n == 1) return onx_def_view(c, 0, x0, x0->ndim, x0->dims);
  int32_t y = new_t(c, x0->dt, x0->ndim, od);
  vmcc_arg_t a[66];
  for (uint32_t i = 0; i < n; i++) a[i] = A(onx_tid(c, xs[i]));
  a[n] = I(ax);
  a[n + 1] = A(y);
  call(c, "cl.concat", n + 2, a);
  return onx_bind_out(c, 0, y, x0->ndim, od);
}

/* Slices x along every axis with (start, step, count) and defines output
 * oi: a host copy for constants, cl.slice otherwise. */
static vm_status_t slice_out(onx_ctx_t *c, uint32_t oi, onx_value_t *x, const int64_t *start,
                             const int64_t *step, const int64_t *count) {
  if (!onx_out_wanted(c, oi)) return VM_STATUS_OK;
  int64_t od[MAXD];
  for (uint32_t i = 0; i < x->ndim; i++) od[i] = count[i];
  if (x->data) {
    int64_t numel = onx_numel(x->ndim, od);
    uint8_t *d;
    VM_RETURN_IF_ERROR(onx_alloc_const(c, x->dt, numel, &d));
    size_t es = esize(x->dt);
    int64_t idx[MAXD] = {0};
    for (int64_t i = 0; i < numel; i++) {
      int64_t off = 0;
      for (uint32_t k = 0; k < x->ndim; k++) off = off * x->dims[k] + start[k] + idx[k] * step[k];
      memcpy(d + i * es, x->data + off * es, es);
      onx_next_index(x->ndim, od, idx);
    }
    return onx_def_const(c, oi, x->dt, x->ndim, od, d);
  }
  /* the whole tensor: a view */
  int whole = 1;
  for (uint32_t i = 0; i < x->ndim; i++)
    if (start[i] != 0 || step[i] != 1 || count[i] != x->dims[i]) whole = 0;
  if (whole) return onx_def_view(c, oi, x, x->ndim, x->dims);
  int64_t b[MAXD], e[MAXD];
  uint32_t last = 0;
  for (uint32_t i = 0; i < x->ndim; i++) {
    b[i] = start[i];
    /* count * |step| stays within the axis (a step past it takes one
     * element and is 1 then, see onx_op_slice) */
    if (vm_ckd_mul_i64(count[i], step[i], &e[i]) != 0 || vm_ckd_add_i64(e[i], start[i], &e[i]) != 0)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "slice of axis %u: %lld steps of %lld overflow",
                          i, (long long)count[i], (long long)step[i]);
    if (step[i] < 0 && e[i] < 0) e[i] = -x->dims[i] - 1; /* through index 0 */
    if (count[i] == 0) e[i] = b[i];
    if (start[i] != 0 || step[i] != 1 || count[i] != x->dims[i]) last = i + 1;
  }
  int32_t y = new_t(c, x->dt, x->ndim, od);
  vmcc_arg_t a[5] = {A(onx_tid(c, x)), vmcc_graph_ints(c->g, last, b),
                     vmcc_graph_ints(c->g, last, e), vmcc_graph_ints(c->g, last, step), A(y)};
  call(c, "cl.slice", 5, a);
  return onx_bind_out(c, oi, y, x->ndim, od);
}

vm_status_t onx_op_slice(onx_ctx_t *c) {
  onx_value_t *x;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  int64_t st[MAXD], en[MAXD], ax[MAXD], sp[MAXD], ns, ne, na = -1, np = -1;
  if (c->opset < 10) {
    VM_RETURN_IF_ERROR(onx_attr_ints(c, "starts", st, MAXD, &ns));
    VM_RETURN_IF_ERROR(onx_attr_ints(c, "ends", en, MAXD, &ne));
    VM_RETURN_IF_ERROR(onx_attr_ints(c, "axes", ax, MAXD, &na));
  } else {
    onx_value_t *vs, *ve, *va = onx_in(c, 3), *vp = onx_in(c, 4);
    VM_RETURN_IF_ERROR(onx_in_req(c, 1, &vs));
    VM_RETURN_IF_ERROR(onx_in_req(c, 2, &ve));
    VM_RETURN_IF_ERROR(onx_const_ints(c, vs, "starts", st, MAXD, &ns));
    VM_RETURN_IF_ERROR(onx_const_ints(c, ve, "ends", en, MAXD, &ne));
    if (va) VM_RETURN_IF_ERROR(onx_const_ints(c, va, "axes", ax, MAXD, &na));
    if (vp) VM_RETURN_IF_ERROR(onx_const_ints(c, vp, "steps", sp, MAXD, &np));
  }
  if (ns < 0 || ne != ns || (na >= 0 && na != ns) || (np >= 0 && np != ns))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "starts, ends, axes and steps differ in length");
  int64_t start[MAXD], step[MAXD], count[MAXD];
  uint8_t seen[MAXD] = {0};
  for (uint32_t i = 0; i < x->ndim; i++) start[i] = 0, step[i] = 1, count[i] = x->dims[i];
  for (int64_t i = 0; i < ns; i++) {
    int64_t a = na >= 0 ? ax[i] : i;
    VM_RETURN_IF_ERROR(norm_axis(c, a, x->ndim, "axis", &a));
    if (seen[a]) return onx_node_err(c, VM_INVALID_ARGUMENT, "axis %lld repeated", (long long)a);
    seen[a] = 1;
    int64_t d = x->dims[a], s = st[i], e = en[i], p = np >= 0 ? sp[i] : 1;
    if (p == 0) return onx_node_err(c, VM_INVALID_ARGUMENT, "a step is 0");
    /* NumPy's rules (the reference the ONNX tests come from) */
    if (s < 0) s += d;
    if (e < 0) e += d;
    if (p > 0) {
      s = s < 0 ? 0 : s > d ? d : s;
      e = e < 0 ? 0 : e > d ? d : e;
    } else {
      s = s < -1 ? -1 : s > d - 1 ? d - 1 : s;
      e = e < -1 ? -1 : e > d - 1 ? d - 1 : e;
    }
    /* s and e are clamped to [-1, d], so their distance fits; a step of
     * any size (INT64_MIN too) takes ceil(distance / |step|) elements */
    int64_t span = p > 0 ? e - s : s - e;
    int64_t mag = p; /* |p|; for INT64_MIN, INT64_MAX does as well */
    if (p < 0 && vm_ckd_neg_i64(p, &mag) != 0) mag = INT64_MAX;
    int64_t cnt = span > 0 ? (span - 1) / mag + 1 : 0;
    start[a] = cnt ? s : 0;
    /* one element or none: the step no longer matters, and 1 keeps the
     * end that cl.slice gets (start + count * step) in range */
    step[a] = cnt > 1 ? p : 1;
    count[a] = cnt;
  }
  return slice_out(c, 0, x, start, step, count);
}

vm_status_t onx_op_split(onx_ctx_t *c) {
  onx_value_t *x;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  int64_t axis, sz[64], nsz = -1, num_out = -1;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "axis", 0, &axis));
  int64_t ax;
  VM_RETURN_IF_ERROR(norm_axis(c, axis, x->ndim, "axis", &ax));
  uint32_t no = onx_num_outputs(c);
  if (no < 1 || no > 64) return onx_node_err(c, VM_UNIMPLEMENTED, "%u outputs: 1 to 64", no);
  if (c->opset < 13) {
    VM_RETURN_IF_ERROR(onx_attr_ints(c, "split", sz, 64, &nsz));
  } else {
    onx_value_t *sv = onx_in(c, 1);
    if (sv) VM_RETURN_IF_ERROR(onx_const_ints(c, sv, "split", sz, 64, &nsz));
    if (c->opset >= 18) VM_RETURN_IF_ERROR(onx_attr_int(c, "num_outputs", -1, &num_out));
  }
  int64_t d = x->dims[ax];
  if (nsz < 0) {
    nsz = no;
    int64_t each = num_out > 0 ? (d + no - 1) / no : d / no;
    if (num_out <= 0 && d % no != 0)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "dim %lld does not split into %u equal parts",
                          (long long)d, no);
    int64_t left = d;
    for (uint32_t i = 0; i < no; i++) {
      sz[i] = left < each ? left : each;
      left -= sz[i];
    }
  }
  if (nsz != no)
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "split has %lld values for %u "
                        "outputs",
                        (long long)nsz, no);
  int64_t total = 0;
  for (uint32_t i = 0; i < no; i++) {
    if (sz[i] < 0)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "split[%u] = %lld is negative", i,
                          (long long)sz[i]);
    if (vm_ckd_add_i64(total, sz[i], &total) != 0)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "the splits overflow 64 bits at split[%u] = %lld",
                          i, (long long)sz[i]);
  }
  if (total != d)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "splits add up to %lld, the axis has %lld",
                        (long long)total, (long long)d);
  int64_t start[MAXD], step[MAXD], count[MAXD], pos = 0;
  for (uint32_t i = 0; i < x->ndim; i++) start[i] = 0, step[i] = 1, count[i] = x->dims[i];
  for (uint32_t i = 0; i < no; i++) {
    start[ax] = pos;
    count[ax] = sz[i];
    VM_RETURN_IF_ERROR(slice_out(c, i, x, start, step, count));
    pos += sz[i];
  }
  return VM_STATUS_OK;
}

vm_status_t onx_op_gather(onx_ctx_t *c) {
  onx_value_t *x, *ind;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &ind));
  int64_t axis;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "axis", 0, &axis));
  if (x->ndim == 0) return onx_node_err(c, VM_INVALID_ARGUMENT, "data is 0-d");
  int64_t ax;
  VM_RETURN_IF_ERROR(norm_axis(c, axis, x->ndim, "axis", &ax));
  if (!onx_is_int(ind->dt) || ind->dt.code == VM_DTYPE_BOOL)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "indices must be integers");
  uint32_t on = x->ndim - 1 + ind->ndim;
  if (on > MAXD) return onx_node_err(c, VM_UNIMPLEMENTED, "output rank %u: at most %d", on, MAXD);
  int64_t od[MAXD];
  uint32_t k = 0;
  for (uint32_t i = 0; i < ax; i++) od[k++] = x->dims[i];
  for (uint32_t i = 0; i < ind->ndim; i++) od[k++] = ind->dims[i];
  for (uint32_t i = (uint32_t)ax + 1; i < x->ndim; i++) od[k++] = x->dims[i];
  int64_t numel;
  VM_RETURN_IF_ERROR(onx_check_shape(c, "output", on, od, &numel));
  int64_t d = x->dims[ax];
  int64_t *iv = NULL;
  if (ind->data) {
    iv = malloc((size_t)(ind->numel ? ind->numel : 1) * sizeof(int64_t));
    if (!iv) return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
    for (int64_t i = 0; i < ind->numel; i++) {
      int64_t v = onx_ld_i(ind->dt, ind->data, i);
      if (v < -d || v >= d) {
        free(iv);
        return onx_node_err(c, VM_INVALID_ARGUMENT, "index %lld is out of range for dim %lld",
                            (long long)v, (long long)d);
      }
      iv[i] = v < 0 ? v + d : v;
    }
  }
  vm_status_t st = VM_STATUS_OK;
  if (x->data && iv) {
    uint8_t *o;
    st = onx_alloc_const(c, x->dt, numel, &o);
    if (!st) {
      size_t es = esize(x->dt);
      int64_t outer = prod(x->dims, (uint32_t)ax),
              inner = prod(x->dims + ax + 1, x->ndim - (uint32_t)ax - 1);
      int64_t pos = 0;
      for (int64_t oo = 0; oo < outer; oo++)
        for (int64_t j = 0; j < ind->numel; j++) {
          memcpy(o + pos * es, x->data + ((oo * d) + iv[j]) * inner * es, (size_t)inner * es);
          pos += inner;
        }
      st = onx_def_const(c, 0, x->dt, on, od, o);
    }
    free(iv);
    return st;
  }
  if (iv && ind->numel == 1) {
    /* one index: a slice, seen without the axis (or with it for [1]) */
    int64_t start[MAXD], count[MAXD];
    for (uint32_t i = 0; i < x->ndim; i++) start[i] = 0, count[i] = x->dims[i];
    start[ax] = iv[0];
    count[ax] = 1;
    free(iv);
    int64_t b[MAXD], e[MAXD];
    for (uint32_t i = 0; i <= ax; i++) b[i] = start[i], e[i] = start[i] + count[i];
    int64_t sd[MAXD];
    memcpy(sd, x->dims, sizeof(sd));
    sd[ax] = 1;
    int32_t y = new_t(c, x->dt, x->ndim, sd);
    vmcc_arg_t a[5] = {A(onx_tid(c, x)), vmcc_graph_ints(c->g, (uint32_t)ax + 1, b),
                       vmcc_graph_ints(c->g, (uint32_t)ax + 1, e), vmcc_a_none(), A(y)};
    call(c, "cl.slice", 5, a);
    return onx_bind_out(c, 0, y, on, od);
  }
  int32_t ti;
  if (iv) {
    int32_t t = vmcc_graph_const(c->g, VM_I64, iv, ind->ndim, ind->dims);
    free(iv);
    ti = t;
  } else {
    ti = onx_tid(c, ind);
  }
  int32_t y = new_t(c, x->dt, on, od);
  vmcc_arg_t a[4] = {A(onx_tid(c, x)), A(ti), I(ax), A(y)};
  call(c, "cl.gather", 4, a);
  return onx_bind_out(c, 0, y, on, od);
}

vm_status_t onx_op_pad(onx_ctx_t *c) {
  onx_value_t *x;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  char mode[16];
  VM_RETURN_IF_ERROR(onx_attr_str(c, "mode", "constant", mode, sizeof(mode)));
  int m = strcmp(mode, "constant") == 0                 ? 0
          : strcmp(mode, "reflect") == 0                ? 1
          : strcmp(mode, "edge") == 0                   ? 2
          : strcmp(mode, "wrap") == 0 && c->opset >= 19 ? 3
                                                        : -1;
  if (m < 0) return onx_unsupported_attr(c, "mode", mode, "constant, reflect, edge, wrap");
  int64_t pads[2 * MAXD], np, axes[MAXD], nax = -1;
  double value = 0;
  if (c->opset < 11) {
    VM_RETURN_IF_ERROR(onx_attr_ints(c, c->opset < 2 ? "paddings" : "pads", pads, 2 * MAXD, &np));
    float v;
    VM_RETURN_IF_ERROR(onx_attr_float(c, "value", 0.0f, &v));
    value = v;
  } else {
    onx_value_t *pv, *cv = onx_in(c, 2), *av = onx_in(c, 3);
    VM_RETURN_IF_ERROR(onx_in_req(c, 1, &pv));
    VM_RETURN_IF_ERROR(onx_const_ints(c, pv, "pads", pads, 2 * MAXD, &np));
    if (cv) {
      if (!cv->data) return onx_node_err(c, VM_UNIMPLEMENTED, "constant_value must be a constant");
      if (cv->numel != 1)
        return onx_node_err(c, VM_INVALID_ARGUMENT, "constant_value must hold one value");
      value = onx_ld_f(cv->dt, cv->data, 0);
    }
    if (av) VM_RETURN_IF_ERROR(onx_const_ints(c, av, "axes", axes, MAXD, &nax));
  }
  int64_t full[2 * MAXD] = {0};
  if (nax >= 0) {
    if (np != 2 * nax) return onx_node_err(c, VM_INVALID_ARGUMENT, "pads do not match axes");
    for (int64_t i = 0; i < nax; i++) {
      int64_t a;
      VM_RETURN_IF_ERROR(norm_axis(c, axes[i], x->ndim, "axis", &a));
      full[a] = pads[i];
      full[a + x->ndim] = pads[i + nax];
    }
  } else {
    if (np != 2 * (int64_t)x->ndim)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "pads has %lld values for rank %u", (long long)np,
                          x->ndim);
    memcpy(full, pads, (size_t)np * sizeof(int64_t));
  }
  int64_t od[MAXD];
  for (uint32_t i = 0; i < x->ndim; i++) {
    if (full[i] > (1 << 24) || full[i + x->ndim] > (1 << 24) || full[i] < -x->dims[i] ||
        full[i + x->ndim] < -x->dims[i])
      return onx_node_err(c, VM_INVALID_ARGUMENT,
                          "pads %lld and %lld on axis %u of size %lld: a pad is -size to 2^24",
                          (long long)full[i], (long long)full[i + x->ndim], i,
                          (long long)x->dims[i]);
    od[i] = x->dims[i] + full[i] + full[i + x->ndim];
    if (od[i] < 0) return onx_node_err(c, VM_INVALID_ARGUMENT, "pads crop below zero");
    if (m == 1 && (full[i] >= x->dims[i] || full[i + x->ndim] >= x->dims[i]) &&
        (full[i] > 0 || full[i + x->ndim] > 0))
      return onx_node_err(c, VM_INVALID_ARGUMENT, "reflect pads must be smaller than the dim");
  }
  VM_RETURN_IF_ERROR(onx_check_shape(c, "output", x->ndim, od, NULL));
  /* by zeros or edge values, growing only: left pending (onnx_layout.c), a
   * Conv or MaxPool after it takes the pads as its own */
  int lm = m == 0 && value == 0.0 ? 1 : m == 2 ? 2 : 0, grows = 1;
  for (uint32_t i = 0; i < 2 * x->ndim; i++) grows &= full[i] >= 0;
  if (lm && grows && !x->data) return onx_lt_pad(c, x, lm, full);
  int32_t y = new_t(c, x->dt, x->ndim, od);
  vmcc_arg_t a[5] = {A(onx_tid(c, x)), vmcc_graph_ints(c->g, 2 * x->ndim, full), I(m),
                     onx_float_arg(c, value), A(y)};
  call(c, "cl.pad", 5, a);
  return onx_bind_out(c, 0, y, x->ndim, od);
}

vm_status_t onx_op_expand(onx_ctx_t *c) {
  onx_value_t *x, *sv;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &sv));
  int64_t sh[MAXD], n;
  VM_RETURN_IF_ERROR(onx_const_ints(c, sv, "shape", sh, MAXD, &n));
  uint32_t on;
  int64_t od[MAXD];
  char s[200];
  for (int64_t i = 0; i < n; i++)
    if (sh[i] < 0)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "shape %s: dim %lld is negative",
                          onx_dims_str((uint32_t)n, sh, s, sizeof(s)), (long long)i);
  if (onx_broadcast(x->ndim, x->dims, (uint32_t)n, sh, &on, od) != 0)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "X %s does not broadcast to shape %s",
                        onx_dims_str(x->ndim, x->dims, s, sizeof(s)),
                        onx_dims_str((uint32_t)n, sh, s + 100, sizeof(s) - 100));
  int64_t numel;
  VM_RETURN_IF_ERROR(onx_check_shape(c, "output", on, od, &numel));
  if (x->data) {
    uint8_t *d;
    VM_RETURN_IF_ERROR(onx_alloc_const(c, x->dt, numel, &d));
    size_t es = esize(x->dt);
    int64_t idx[MAXD] = {0};
    for (int64_t i = 0; i < numel; i++) {
      memcpy(d + i * es, x->data + onx_bcast_offset(x->ndim, x->dims, on, idx) * es, es);
      onx_next_index(on, od, idx);
    }
    return onx_def_const(c, 0, x->dt, on, od, d);
  }
  if (numel == x->numel) return onx_def_view(c, 0, x, on, od);
  int32_t y = new_t(c, x->dt, on, od);
  vmcc_arg_t a[2] = {A(onx_tid(c, x)), A(y)};
  call(c, "cl.broadcast_to", 2, a);
  return onx_bind_out(c, 0, y, on, od);
}

vm_status_t onx_op_resize(onx_ctx_t *c) {
  onx_value_t *x;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(need_float(c, x));
  char mode[16], ctm[32], nm[32], kar[16];
  VM_RETURN_IF_ERROR(onx_attr_str(c, "mode", "nearest", mode, sizeof(mode)));
  VM_RETURN_IF_ERROR(onx_attr_str(c, "coordinate_transformation_mode",
                                  c->opset < 11 ? "asymmetric" : "half_pixel", ctm, sizeof(ctm)));
  VM_RETURN_IF_ERROR(onx_attr_str(c, "nearest_mode", c->opset < 11 ? "floor" : "round_prefer_floor",
                                  nm, sizeof(nm)));
  VM_RETURN_IF_ERROR(onx_attr_str(c, "keep_aspect_ratio_policy", "stretch", kar, sizeof(kar)));
  float cubic_a, extrap;
  int64_t excl, antialias = 0;
  VM_RETURN_IF_ERROR(onx_attr_float(c, "cubic_coeff_a", -0.75f, &cubic_a));
  VM_RETURN_IF_ERROR(onx_attr_float(c, "extrapolation_value", 0.0f, &extrap));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "exclude_outside", 0, &excl));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "antialias", 0, &antialias));
  if (antialias != 0 && antialias != 1) {
    char v[24];
    snprintf(v, sizeof(v), "%lld", (long long)antialias);
    return onx_unsupported_attr(c, "antialias", v, "0, 1");
  }
  int kp = strcmp(kar, "stretch") == 0       ? 0
           : strcmp(kar, "not_larger") == 0  ? 1
           : strcmp(kar, "not_smaller") == 0 ? 2
                                             : -1;
  if (kp < 0)
    return onx_unsupported_attr(c, "keep_aspect_ratio_policy", kar,
                                "stretch, not_larger, not_smaller");
  int im = strcmp(mode, "nearest") == 0  ? 0
           : strcmp(mode, "linear") == 0 ? 1
           : strcmp(mode, "cubic") == 0  ? 2
                                         : -1;
  if (im < 0) return onx_unsupported_attr(c, "mode", mode, "nearest, linear, cubic");
  /* the spec defines antialias for linear and cubic only */
  if (antialias && im == 0)
    return onx_unsupported_attr(c, "antialias", "1 with mode nearest",
                                "0 with nearest (antialias applies to linear and cubic)");
  static const char *k_ctm[] = {"half_pixel",         "asymmetric",    "pytorch_half_pixel",
                                "tf_crop_and_resize", "align_corners", "half_pixel_symmetric"};
  int ic = -1;
  for (int i = 0; i < 6; i++)
    if (strcmp(ctm, k_ctm[i]) == 0) ic = i;
  if (ic < 0 || (ic == 5 && c->opset < 19))
    return onx_unsupported_attr(c, "coordinate_transformation_mode", ctm,
                                "half_pixel, asymmetric, pytorch_half_pixel, tf_crop_and_resize, "
                                "align_corners, half_pixel_symmetric");
  static const char *k_nm[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
  int in = -1;
  for (int i = 0; i < 4; i++)
    if (strcmp(nm, k_nm[i]) == 0) in = i;
  if (in < 0)
    return onx_unsupported_attr(c, "nearest_mode", nm,
                                "round_prefer_floor, round_prefer_ceil, floor, ceil");
  uint32_t r = x->ndim;
  double scales[MAXD], roi[2 * MAXD];
  int64_t od[MAXD], axes[MAXD], nax = -1;
  VM_RETURN_IF_ERROR(onx_attr_ints(c, "axes", axes, MAXD, &nax));
  uint32_t na = nax >= 0 ? (uint32_t)nax : r;
  int64_t axl[MAXD];
  for (uint32_t i = 0; i < na; i++) {
    int64_t a = i;
    if (nax >= 0) VM_RETURN_IF_ERROR(norm_axis(c, axes[i], r, "axis", &a));
    axl[i] = a;
  }
  for (uint32_t i = 0; i < r; i++) {
    scales[i] = 1, od[i] = x->dims[i];
    roi[i] = 0, roi[i + r] = 1;
  }
  onx_value_t *vroi = NULL, *vsc, *vsz = NULL;
  if (c->opset < 11) {
    VM_RETURN_IF_ERROR(onx_in_req(c, 1, &vsc));
  } else {
    vroi = onx_in(c, 1);
    vsc = onx_in(c, 2);
    vsz = onx_in(c, 3);
  }
  if (vsc && vsc->numel == 0) vsc = NULL;
  if (vroi && vroi->numel == 0) vroi = NULL;
  if ((vsc != NULL) == (vsz != NULL))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "exactly one of scales and sizes must be given");
  if (vroi && ic == 3) {
    if (!vroi->data) return onx_node_err(c, VM_UNIMPLEMENTED, "roi must be a constant");
    if (vroi->numel != 2 * (int64_t)na)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "roi has %lld values", (long long)vroi->numel);
    for (uint32_t i = 0; i < na; i++) {
      roi[axl[i]] = onx_ld_f(vroi->dt, vroi->data, i);
      roi[axl[i] + r] = onx_ld_f(vroi->dt, vroi->data, i + na);
    }
  }
  if (vsc) {
    if (!vsc->data) return onx_node_err(c, VM_UNIMPLEMENTED, "scales must be a constant");
    if (vsc->numel != (int64_t)na || !onx_is_float(vsc->dt))
      return onx_node_err(c, VM_INVALID_ARGUMENT, "scales must be %u floats", na);
    for (uint32_t i = 0; i < na; i++) {
      double s = onx_ld_f(vsc->dt, vsc->data, i);
      if (!(s > 0) || s > 1e6)
        return onx_node_err(c, VM_INVALID_ARGUMENT, "scales[%u] = %g: above 0, at most 1e6", i, s);
      /* Resize-10 (Upsample's semantics) is pinned down for upsampling only */
      if (c->opset < 11 && s < 1)
        return onx_unsupported_attr(c, "scales", "< 1 (opset 10)", "scales >= 1 before opset 11");
      int64_t a = axl[i];
      scales[a] = s;
      double span = ic == 3 ? (roi[a + r] - roi[a]) : 1.0;
      double o = floor((double)x->dims[a] * span * s);
      if (!(o >= 0 && o <= (1 << 24))) /* NaN too (an roi of infinities) */
        return onx_node_err(c, VM_INVALID_ARGUMENT,
                            "axis %lld: output size %g (dim %lld x roi span %g x scale %g): 0 "
                            "to 2^24",
                            (long long)a, o, (long long)x->dims[a], span, s);
      od[a] = (int64_t)o;
    }
  } else {
    int64_t sz[MAXD], nsz;
    VM_RETURN_IF_ERROR(onx_const_ints(c, vsz, "sizes", sz, MAXD, &nsz));
    if (nsz != (int64_t)na)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "sizes has %lld values", (long long)nsz);
    for (uint32_t i = 0; i < na; i++) {
      if (sz[i] < 0 || sz[i] > (1 << 24))
        return onx_node_err(c, VM_INVALID_ARGUMENT, "sizes[%u] = %lld: 0 to 2^24", i,
                            (long long)sz[i]);
      int64_t a = axl[i];
      od[a] = sz[i];
      scales[a] = x->dims[a] ? (double)sz[i] / (double)x->dims[a] : 1.0;
    }
    if (kp && na) {
      /* one scale for every resized axis, the smallest (not_larger) or the
       * largest (not_smaller) of out / in; each size is then that scale
       * times the input extent, rounded half up */
      double k = scales[axl[0]];
      for (uint32_t i = 1; i < na; i++)
        k = kp == 1 ? fmin(k, scales[axl[i]]) : fmax(k, scales[axl[i]]);
      if (!(k > 0)) return onx_node_err(c, VM_INVALID_ARGUMENT, "a size of 0 keeps no aspect");
      for (uint32_t i = 0; i < na; i++) {
        int64_t a = axl[i];
        double o = floor(k * (double)x->dims[a] + 0.5);
        if (!(o >= 0 && o <= (1 << 24)))
          return onx_node_err(c, VM_INVALID_ARGUMENT, "axis %lld: output size %g: 0 to 2^24",
                              (long long)a, o);
        scales[a] = k;
        od[a] = (int64_t)o;
      }
    }
  }
  /* tuples of numbers: cl.resize reads them on the host, no device transfer */
  vmcc_arg_t tsc = vmcc_graph_floats(c->g, r, scales);
  vmcc_arg_t troi = ic == 3 ? vmcc_graph_floats(c->g, 2 * r, roi) : vmcc_a_none();
  int32_t y = new_t(c, x->dt, r, od);
  /* antialias (linear and cubic) widens downscales: the 10-argument form
   * otherwise, as executables had it before */
  int aa = antialias != 0;
  vmcc_arg_t a[11] = {A(onx_tid(c, x)),
                      I(im),
                      I(ic),
                      I(in),
                      onx_float_arg(c, cubic_a),
                      I(excl),
                      onx_float_arg(c, extrap),
                      tsc,
                      troi,
                      aa ? I(1) : A(y),
                      A(y)};
  call(c, "cl.resize", aa ? 11 : 10, a);
  return onx_bind_out(c, 0, y, r, od);
}

/* ---------------------------------------------------------------------------
 * Constants, casts and shape arithmetic
 */

vm_status_t onx_cast_attrs(const onx_ctx_t *c, int *sat, int *rmode) {
  /* opset 19: saturate (float8 targets); opset 24: the rounding of casts
   * to float8e8m0 */
  int64_t s;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "saturate", 1, &s));
  *sat = s != 0;
  char rm[16];
  VM_RETURN_IF_ERROR(onx_attr_str(c, "round_mode", "up", rm, sizeof(rm)));
  *rmode = strcmp(rm, "up") == 0 ? 0 : strcmp(rm, "down") == 0 ? 1 : 2;
  if (*rmode == 2 && strcmp(rm, "nearest") != 0)
    return onx_unsupported_attr(c, "round_mode", rm, "up, down, nearest");
  return VM_STATUS_OK;
}

vm_status_t onx_op_cast(onx_ctx_t *c) {
  onx_value_t *x;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  int64_t to;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "to", 0, &to));
  int sat, rmode;
  VM_RETURN_IF_ERROR(onx_cast_attrs(c, &sat, &rmode));
  vm_dtype_t dt;
  if (to < INT32_MIN || to > INT32_MAX || onx_dtype_from_onnx((int32_t)to, &dt) != 0) {
    char v[32];
    snprintf(v, sizeof(v), "%lld (%s)", (long long)to, onx_onnx_type_name((int32_t)to));
    return onx_unsupported_attr(c, "to", v, ONX_DTYPES_SUPPORTED);
  }
  return onx_cast_to(c, x, dt, sat, rmode);
}

vm_status_t onx_cast_to(onx_ctx_t *c, onx_value_t *x, vm_dtype_t dt, int sat, int rmode) {
  if (x->data) {
    uint8_t *d;
    VM_RETURN_IF_ERROR(onx_alloc_const(c, dt, x->numel, &d));
    for (int64_t i = 0; i < x->numel; i++) {
      if (dt.code >= VM_DTYPE_FLOAT8_E4M3FN) /* through float32, as cl.cast */
        onx_st_small(dt, d, i, (float)onx_ld_f(x->dt, x->data, i), sat, rmode);
      else if (vm_dtype_is_floating(x->dt))
        onx_st_f(dt, d, i, onx_ld_f(x->dt, x->data, i));
      else
        onx_st_i(dt, d, i, onx_ld_i(x->dt, x->data, i));
    }
    return onx_def_const(c, 0, dt, x->ndim, x->dims, d);
  }
  if (vm_dtype_equal(dt, x->dt)) return onx_def_view(c, 0, x, x->ndim, x->dims);
  /* float64 on either side: cl.cast converts in double where the device
   * has fp64 and refuses at run time elsewhere (docs/onnx.md, "float64") */
  int32_t y = new_t(c, dt, x->ndim, x->dims);
  vmcc_arg_t a[4] = {A(onx_tid(c, x)), A(y), vmcc_a_imm(sat), vmcc_a_imm(rmode)};
  /* the two scalars only where they matter: the plain form otherwise */
  call(c, "cl.cast", dt.code >= VM_DTYPE_FLOAT8_E4M3FN && dt.bits == 8 ? 4 : 2, a);
  return onx_bind_out(c, 0, y, x->ndim, x->dims);
}

vm_status_t onx_op_shape(onx_ctx_t *c) {
  onx_value_t *x;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  int64_t start = 0, end = x->ndim;
  if (c->opset >= 15) {
    VM_RETURN_IF_ERROR(onx_attr_int(c, "start", 0, &start));
    VM_RETURN_IF_ERROR(onx_attr_int(c, "end", x->ndim, &end));
  }
  int64_t r = x->ndim;
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = start < 0 ? 0 : start > r ? r : start;
  end = end < 0 ? 0 : end > r ? r : end;
  int64_t n = end > start ? end - start : 0;
  uint8_t *d;
  VM_RETURN_IF_ERROR(onx_alloc_const(c, VM_I64, n, &d));
  for (int64_t i = 0; i < n; i++) onx_st_i(VM_I64, d, i, x->dims[start + i]);
  int64_t dd[1] = {n};
  return onx_def_const(c, 0, VM_I64, 1, dd, d);
}

vm_status_t onx_op_size(onx_ctx_t *c) {
  onx_value_t *x;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  uint8_t *d;
  VM_RETURN_IF_ERROR(onx_alloc_const(c, VM_I64, 1, &d));
  onx_st_i(VM_I64, d, 0, x->numel);
  return onx_def_const(c, 0, VM_I64, 0, NULL, d);
}

static vm_status_t def_from_proto(onx_ctx_t *c, const Onnx__TensorProto *tp) {
  vmcc_tensor_t t;
  VM_RETURN_IF_ERROR(onx_tensor_from_proto(tp, c->base_dir, "attribute 'value'", &t));
  return onx_def_const(c, 0, t.dtype, t.ndim, t.shape, t.data);
}

vm_status_t onx_op_constant(onx_ctx_t *c) {
  const Onnx__AttributeProto *a;
  if ((a = onx_attr(c->node, "value")) && a->t) return def_from_proto(c, a->t);
  if ((a = onx_attr(c->node, "value_float"))) {
    uint8_t *d;
    VM_RETURN_IF_ERROR(onx_alloc_const(c, VM_F32, 1, &d));
    onx_st_f(VM_F32, d, 0, a->f);
    return onx_def_const(c, 0, VM_F32, 0, NULL, d);
  }
  if ((a = onx_attr(c->node, "value_int"))) {
    uint8_t *d;
    VM_RETURN_IF_ERROR(onx_alloc_const(c, VM_I64, 1, &d));
    onx_st_i(VM_I64, d, 0, a->i);
    return onx_def_const(c, 0, VM_I64, 0, NULL, d);
  }
  if ((a = onx_attr(c->node, "value_floats"))) {
    uint8_t *d;
    VM_RETURN_IF_ERROR(onx_alloc_const(c, VM_F32, (int64_t)a->n_floats, &d));
    for (size_t i = 0; i < a->n_floats; i++) onx_st_f(VM_F32, d, (int64_t)i, a->floats[i]);
    int64_t dd[1] = {(int64_t)a->n_floats};
    return onx_def_const(c, 0, VM_F32, 1, dd, d);
  }
  if ((a = onx_attr(c->node, "value_ints"))) {
    uint8_t *d;
    VM_RETURN_IF_ERROR(onx_alloc_const(c, VM_I64, (int64_t)a->n_ints, &d));
    for (size_t i = 0; i < a->n_ints; i++) onx_st_i(VM_I64, d, (int64_t)i, a->ints[i]);
    int64_t dd[1] = {(int64_t)a->n_ints};
    return onx_def_const(c, 0, VM_I64, 1, dd, d);
  }
  return onx_node_err(c, VM_UNIMPLEMENTED,
                      "no supported value: supported: value, value_float(s), value_int(s)");
}

vm_status_t onx_op_constant_of_shape(onx_ctx_t *c) {
  onx_value_t *s;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &s));
  int64_t sh[MAXD], n;
  VM_RETURN_IF_ERROR(onx_const_ints(c, s, "shape", sh, MAXD, &n));
  int64_t numel;
  VM_RETURN_IF_ERROR(onx_check_shape(c, "shape", (uint32_t)n, sh, &numel));
  vm_dtype_t dt = VM_F32;
  uint8_t val[8] = {0};
  const Onnx__AttributeProto *a = onx_attr(c->node, "value");
  if (a && a->t) {
    vmcc_tensor_t t;
    VM_RETURN_IF_ERROR(onx_tensor_from_proto(a->t, NULL, "attribute 'value'", &t));
    if (onx_numel(t.ndim, t.shape) != 1) {
      vmcc_tensor_free(&t);
      return onx_node_err(c, VM_INVALID_ARGUMENT, "value must hold one element");
    }
    dt = t.dtype;
    memcpy(val, t.data, vm_dtype_bytes(dt));
    vmcc_tensor_free(&t);
    if (vm_dtype_per_byte(dt) > 1) { /* the fill below copies whole bytes */
      char b[32];
      return onx_node_err(c, VM_UNIMPLEMENTED,
                          "value of the packed dtype %s: supported: a value of whole bytes "
                          "(Cast the result to it)",
                          vm_dtype_str(dt, b, sizeof(b)));
    }
  }
  uint8_t *d;
  VM_RETURN_IF_ERROR(onx_alloc_const(c, dt, numel, &d));
  size_t es = esize(dt);
  for (int64_t i = 0; i < numel; i++) memcpy(d + i * es, val, es);
  return onx_def_const(c, 0, dt, (uint32_t)n, sh, d);
}

vm_status_t onx_op_range(onx_ctx_t *c) {
  onx_value_t *s, *l, *dl;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &s));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &l));
  VM_RETURN_IF_ERROR(onx_in_req(c, 2, &dl));
  if (!s->data || !l->data || !dl->data)
    return onx_node_err(c, VM_UNIMPLEMENTED, "start, limit and delta must be constants");
  if (s->numel != 1 || l->numel != 1 || dl->numel != 1)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "start, limit and delta must be scalars");
  /* opset 27: the precision of float16 ranges (computed in double here,
   * which rounds as float32 or double would) */
  int64_t stash;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "stash_type", 1, &stash));
  if (stash != 1 && stash != 11 && vm_dtype_equal(s->dt, VM_F16)) {
    char v[24];
    snprintf(v, sizeof(v), "%lld", (long long)stash);
    return onx_unsupported_attr(c, "stash_type", v, "1 (float), 11 (double)");
  }
  if (!vm_dtype_equal(s->dt, l->dt) || !vm_dtype_equal(s->dt, dl->dt))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "start, limit and delta must have one dtype");
  int is_int = onx_is_int(s->dt);
  double a = onx_ld_f(s->dt, s->data, 0), b = onx_ld_f(l->dt, l->data, 0),
         d = onx_ld_f(dl->dt, dl->data, 0);
  int64_t ai = onx_ld_i(s->dt, s->data, 0), li = onx_ld_i(l->dt, l->data, 0),
          di = onx_ld_i(dl->dt, dl->data, 0);
  if (is_int ? di == 0 : d == 0) return onx_node_err(c, VM_INVALID_ARGUMENT, "delta is 0");
  double cnt;
  if (is_int) {
    /* exactly, in integers: ceil((limit - start) / delta), 0 when the
     * signs differ; every element then lies between start and limit */
    int64_t dist;
    if (vm_ckd_sub_i64(li, ai, &dist) != 0)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "limit %lld - start %lld overflows 64 bits",
                          (long long)li, (long long)ai);
    uint64_t ud = dist < 0 ? 0 - (uint64_t)dist : (uint64_t)dist;
    uint64_t um = di < 0 ? 0 - (uint64_t)di : (uint64_t)di;
    cnt = (dist > 0) == (di > 0) && dist != 0 ? (double)((ud - 1) / um + 1) : 0;
  } else {
    cnt = ceil((b - a) / d);
    if (!(cnt >= 0)) cnt = 0;
  }
  if (cnt > (double)ONX_MAX_FOLD_ELEMS)
    return onx_node_err(c, VM_RESOURCE_EXHAUSTED,
                        "a range of %.0f elements (the compiler folds at most %lld)", cnt,
                        (long long)ONX_MAX_FOLD_ELEMS);
  int64_t n = (int64_t)cnt;
  uint8_t *o;
  VM_RETURN_IF_ERROR(onx_alloc_const(c, s->dt, n, &o));
  for (int64_t i = 0; i < n; i++) {
    int64_t v;
    if (!is_int) {
      onx_st_f(s->dt, o, i, a + (double)i * d);
    } else if (vm_ckd_mul_i64(i, di, &v) == 0 && vm_ckd_add_i64(ai, v, &v) == 0) {
      onx_st_i(s->dt, o, i, v);
    } else { /* cannot happen: i * delta stays below limit - start */
      free(o);
      return onx_node_err(c, VM_INVALID_ARGUMENT, "element %lld overflows 64 bits", (long long)i);
    }
  }
  int64_t dd[1] = {n};
  return onx_def_const(c, 0, s->dt, 1, dd, o);
}
