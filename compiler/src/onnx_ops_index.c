/* ONNX indexing operators whose indices are constants, lowered as one
 * Gather by constant flat indices (onnx_sub.c's sub-nodes): GatherElements,
 * GatherND, ScatterElements/Scatter and ScatterND (reductions as one
 * elementwise step per repeated index), Compress, ReverseSequence,
 * CenterCropPad, MaxUnpool; and OneHot as an Equal against a range. A
 * map entry picks an element of the concatenated flattened sources, or
 * (-1) the fill value. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_ops.h"

#define MAX_LEVELS ONX_SCATTER_LEVELS

static vm_status_t oom(onx_ctx_t *c) {
  return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
}

/* out (or a fresh name in *res) of shape (nd, od) = the elements map
 * picks from flat(src[0]) ++ flat(src[1]) ... (++ fill when fill_ok). map is
 * taken. */
static vm_status_t gather_flat(onx_ctx_t *c, uint32_t nsrc, onx_value_t **src, int fill_ok,
                               double fill, uint32_t nd, const int64_t *od, int64_t *map,
                               const char *out, const char **res) {
  const char *parts[8];
  uint32_t np = 0;
  int64_t total = 0;
  vm_dtype_t dt = src[0]->dt;
  for (uint32_t i = 0; i < nsrc; i++) {
    int64_t n = src[i]->numel;
    if (!vm_dtype_equal(src[i]->dt, dt)) {
      free(map);
      return onx_node_err(c, VM_INVALID_ARGUMENT, "inputs have different dtypes");
    }
    const char *shape;
    vm_status_t st = onx_sub_ints(c, 1, &n, &shape);
    if (!st) st = onx_sub1(c, "Reshape", NULL, src[i]->name, shape, NULL, 0, NULL, &parts[np]);
    if (st) {
      free(map);
      return st;
    }
    np++;
    total += n;
  }
  if (fill_ok) {
    int64_t one = 1;
    vm_status_t st = onx_sub_const_f(c, dt, 1, &one, &fill, &parts[np]);
    if (st) {
      free(map);
      return st;
    }
    np++;
  }
  int64_t numel = onx_numel(nd, od);
  for (int64_t i = 0; i < numel; i++) {
    if (map[i] < 0) map[i] = total; /* the fill element */
  }
  const char *cat = parts[0];
  if (np > 1) {
    onx_sattr_t ax[1] = {SA_INT("axis", 0)};
    const char *name = onx_sub_name(c);
    if (!name) {
      free(map);
      return oom(c);
    }
    vm_status_t st = onx_sub(c, "Concat", np, parts, 1, &name, 1, ax);
    if (st) {
      free(map);
      return st;
    }
    cat = name;
  }
  const char *ic;
  VM_RETURN_IF_ERROR(onx_sub_const(c, VM_I64, nd, od, (uint8_t *)map, &ic));
  onx_sattr_t a0[1] = {SA_INT("axis", 0)};
  return onx_sub1(c, "Gather", out, cat, ic, NULL, 1, a0, res);
}

/* The strides of a row-major shape. */
static void strides_of(uint32_t nd, const int64_t *d, int64_t *st) {
  int64_t s = 1;
  for (uint32_t i = nd; i-- > 0;) {
    st[i] = s;
    s *= d[i];
  }
}

/* A constant index normalised into [0, n), else INVALID_ARGUMENT. */
static vm_status_t norm_index(onx_ctx_t *c, int64_t v, int64_t n, const char *what, int64_t *out) {
  *out = 0;
  if (v < 0) v += n;
  if (v < 0 || v >= n)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "%s index %lld is outside [-%lld, %lld)", what,
                        (long long)v, (long long)n, (long long)n);
  *out = v;
  return VM_STATUS_OK;
}

static vm_status_t need_const_ints(onx_ctx_t *c, const onx_value_t *v, const char *what) {
  if (!v->data)
    return onx_node_err(c, VM_UNIMPLEMENTED, "%s must be a constant (bind it with --const)", what);
  if (!onx_is_int(v->dt) || vm_dtype_equal(v->dt, VM_BOOL))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "%s must be an integer tensor", what);
  return VM_STATUS_OK;
}

static vm_status_t alloc_map(onx_ctx_t *c, int64_t n, int64_t **map) {
  uint8_t *d;
  VM_RETURN_IF_ERROR(onx_alloc_const(c, VM_I64, n, &d));
  *map = (int64_t *)(void *)d;
  return VM_STATUS_OK;
}

/* ---------------------------------------------------------------------------
 * GatherElements, GatherND
 */
vm_status_t onx_op_gather_elements(onx_ctx_t *c) {
  onx_value_t *x, *iv;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &iv));
  VM_RETURN_IF_ERROR(need_const_ints(c, iv, "indices"));
  int64_t axis;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "axis", 0, &axis));
  if (x->ndim == 0 || iv->ndim != x->ndim)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "indices must have data's rank (at least 1)");
  VM_RETURN_IF_ERROR(norm_axis(c, axis, x->ndim, "axis", &axis));
  for (uint32_t i = 0; i < x->ndim; i++)
    if ((int64_t)i != axis && iv->dims[i] > x->dims[i])
      return onx_node_err(c, VM_INVALID_ARGUMENT, "indices dim %u exceeds data's", i);
  int64_t xs[MAXD], idx[MAXD] = {0}, *map;
  strides_of(x->ndim, x->dims, xs);
  VM_RETURN_IF_ERROR(alloc_map(c, iv->numel, &map));
  for (int64_t i = 0; i < iv->numel; i++) {
    int64_t off = 0, a;
    vm_status_t st = norm_index(c, onx_ld_i(iv->dt, iv->data, i), x->dims[axis], "an", &a);
    if (st) {
      free(map);
      return st;
    }
    for (uint32_t k = 0; k < x->ndim; k++) off += ((int64_t)k == axis ? a : idx[k]) * xs[k];
    map[i] = off;
    onx_next_index(iv->ndim, iv->dims, idx);
  }
  return gather_flat(c, 1, &x, 0, 0, iv->ndim, iv->dims, map, c->node->output[0], NULL);
}

vm_status_t onx_op_gather_nd(onx_ctx_t *c) {
  onx_value_t *x, *iv;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &iv));
  VM_RETURN_IF_ERROR(need_const_ints(c, iv, "indices"));
  int64_t b;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "batch_dims", 0, &b));
  if (iv->ndim < 1 || b < 0 || b >= (int64_t)iv->ndim || b >= (int64_t)x->ndim)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "batch_dims %lld does not fit the ranks",
                        (long long)b);
  int64_t k = iv->dims[iv->ndim - 1];
  if (k < 1 || b + k > (int64_t)x->ndim)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "indices' last dim %lld does not fit data's rank",
                        (long long)k);
  for (int64_t i = 0; i < b; i++)
    if (iv->dims[i] != x->dims[i]) return onx_node_err(c, VM_INVALID_ARGUMENT, "batch dims differ");
  int64_t od[MAXD], xs[MAXD];
  uint32_t on = 0;
  for (uint32_t i = 0; i + 1 < iv->ndim; i++) od[on++] = iv->dims[i];
  int64_t inner = 1;
  for (uint32_t i = (uint32_t)(b + k); i < x->ndim; i++) {
    if (on == MAXD)
      return onx_node_err(c, VM_UNIMPLEMENTED, "the output has more than %d dims", MAXD);
    od[on++] = x->dims[i];
    inner *= x->dims[i];
  }
  VM_RETURN_IF_ERROR(onx_check_shape(c, "output", on, od, NULL));
  strides_of(x->ndim, x->dims, xs);
  int64_t tuples = iv->numel / k, per_batch = 1, *map;
  for (int64_t i = b; i + 1 < (int64_t)iv->ndim; i++) per_batch *= iv->dims[i];
  VM_RETURN_IF_ERROR(alloc_map(c, tuples * inner, &map));
  for (int64_t t = 0; t < tuples; t++) {
    int64_t bi = per_batch ? t / per_batch : 0, off = 0, rem = bi;
    for (int64_t d = b - 1; d >= 0; d--) { /* the batch coordinates */
      off += (rem % x->dims[d]) * xs[d];
      rem /= x->dims[d];
    }
    for (int64_t j = 0; j < k; j++) {
      int64_t a;
      vm_status_t st =
          norm_index(c, onx_ld_i(iv->dt, iv->data, t * k + j), x->dims[b + j], "an", &a);
      if (st) {
        free(map);
        return st;
      }
      off += a * xs[b + j];
    }
    for (int64_t r = 0; r < inner; r++) map[t * inner + r] = off + r;
  }
  return gather_flat(c, 1, &x, 0, 0, on, od, map, c->node->output[0], NULL);
}

/* ---------------------------------------------------------------------------
 * ScatterElements / Scatter / ScatterND: for each element of data, the
 * updates that land on it, in order
 */
static vm_status_t scatter_lower(onx_ctx_t *c, onx_value_t *x, onx_value_t *u,
                                 const int64_t *dest) {
  char red[8] = "none";
  if (c->opset >= 16 || onx_attr(c->node, "reduction"))
    VM_RETURN_IF_ERROR(onx_attr_str(c, "reduction", "none", red, sizeof(red)));
  int op = strcmp(red, "none") == 0  ? 0
           : strcmp(red, "add") == 0 ? 1
           : strcmp(red, "mul") == 0 ? 2
           : strcmp(red, "max") == 0 ? 3
           : strcmp(red, "min") == 0 ? 4
                                     : -1;
  if (op < 0) return onx_unsupported_attr(c, "reduction", red, "none, add, mul, max, min");
  if (op >= 3 && !onx_is_float(x->dt))
    return onx_node_err(c, VM_UNIMPLEMENTED, "reduction %s on integers: supported: float types",
                        red);
  int64_t n = x->numel, nu = u->numel, *map;
  if (n > ONX_MAX_FOLD_ELEMS || nu > ONX_MAX_FOLD_ELEMS)
    return onx_node_err(c, VM_RESOURCE_EXHAUSTED,
                        "data or updates of more than %lld elements: too large for an index map",
                        (long long)ONX_MAX_FOLD_ELEMS);
  /* level of each update: how many earlier updates hit its element */
  int64_t *cnt = calloc((size_t)(n ? n : 1), sizeof(int64_t)), levels = 0;
  if (!cnt) return oom(c);
  for (int64_t j = 0; j < nu; j++) {
    int64_t l = ++cnt[dest[j]];
    if (l > levels) levels = l;
  }
  if (op == 0) { /* the last write wins */
    vm_status_t st = alloc_map(c, n, &map);
    if (st) {
      free(cnt);
      return st;
    }
    for (int64_t i = 0; i < n; i++) map[i] = i;
    for (int64_t j = 0; j < nu; j++) map[dest[j]] = n + j;
    free(cnt);
    onx_value_t *src[2] = {x, u};
    return gather_flat(c, 2, src, 0, 0, x->ndim, x->dims, map, c->node->output[0], NULL);
  }
  if (levels > MAX_LEVELS) {
    free(cnt);
    return onx_node_err(c, VM_UNIMPLEMENTED, "%lld updates of one element: supported: at most %d",
                        (long long)levels, MAX_LEVELS);
  }
  static const char *const k_ops[] = {"", "Add", "Mul", "Max", "Min"};
  double fill = op == 1 ? 0 : op == 2 ? 1 : op == 3 ? -INFINITY : INFINITY;
  const char *acc = x->name;
  memset(cnt, 0, (size_t)(n ? n : 1) * sizeof(int64_t));
  int64_t *lev = malloc((size_t)(nu ? nu : 1) * sizeof(int64_t));
  if (!lev) {
    free(cnt);
    return oom(c);
  }
  for (int64_t j = 0; j < nu; j++) lev[j] = cnt[dest[j]]++;
  free(cnt);
  for (int64_t l = 0; l < levels; l++) {
    vm_status_t st = alloc_map(c, n, &map);
    if (st) {
      free(lev);
      return st;
    }
    for (int64_t i = 0; i < n; i++) map[i] = -1;
    for (int64_t j = 0; j < nu; j++)
      if (lev[j] == l) map[dest[j]] = j;
    const char *g;
    st = gather_flat(c, 1, &u, 1, fill, x->ndim, x->dims, map, NULL, &g);
    if (!st)
      st = onx_sub1(c, k_ops[op], l + 1 == levels ? c->node->output[0] : NULL, acc, g, NULL, 0,
                    NULL, &acc);
    if (st) {
      free(lev);
      return st;
    }
  }
  free(lev);
  if (levels == 0)
    return onx_sub1(c, "Identity", c->node->output[0], x->name, NULL, NULL, 0, NULL, NULL);
  return VM_STATUS_OK;
}

vm_status_t onx_op_scatter_elements(onx_ctx_t *c) {
  onx_value_t *x, *iv, *u;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &iv));
  VM_RETURN_IF_ERROR(onx_in_req(c, 2, &u));
  VM_RETURN_IF_ERROR(need_const_ints(c, iv, "indices"));
  int64_t axis;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "axis", 0, &axis));
  if (x->ndim == 0 || iv->ndim != x->ndim || u->ndim != iv->ndim ||
      memcmp(u->dims, iv->dims, iv->ndim * sizeof(int64_t)) != 0)
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "indices and updates must have one shape of data's rank");
  VM_RETURN_IF_ERROR(norm_axis(c, axis, x->ndim, "axis", &axis));
  for (uint32_t i = 0; i < x->ndim; i++)
    if ((int64_t)i != axis && iv->dims[i] > x->dims[i])
      return onx_node_err(c, VM_INVALID_ARGUMENT, "indices dim %u exceeds data's", i);
  int64_t xs[MAXD], idx[MAXD] = {0};
  strides_of(x->ndim, x->dims, xs);
  int64_t *dest = malloc((size_t)(iv->numel ? iv->numel : 1) * sizeof(int64_t));
  if (!dest) return oom(c);
  for (int64_t i = 0; i < iv->numel; i++) {
    int64_t off = 0, a;
    vm_status_t st = norm_index(c, onx_ld_i(iv->dt, iv->data, i), x->dims[axis], "an", &a);
    if (st) {
      free(dest);
      return st;
    }
    for (uint32_t k = 0; k < x->ndim; k++) off += ((int64_t)k == axis ? a : idx[k]) * xs[k];
    dest[i] = off;
    onx_next_index(iv->ndim, iv->dims, idx);
  }
  vm_status_t st = scatter_lower(c, x, u, dest);
  free(dest);
  return st;
}

vm_status_t onx_op_scatter_nd(onx_ctx_t *c) {
  onx_value_t *x, *iv, *u;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &iv));
  VM_RETURN_IF_ERROR(onx_in_req(c, 2, &u));
  VM_RETURN_IF_ERROR(need_const_ints(c, iv, "indices"));
  if (iv->ndim < 1) return onx_node_err(c, VM_INVALID_ARGUMENT, "indices must have rank >= 1");
  int64_t k = iv->dims[iv->ndim - 1];
  if (k < 1 || k > (int64_t)x->ndim)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "indices' last dim %lld does not fit data's rank",
                        (long long)k);
  /* updates: indices.shape[:-1] + data.shape[k:] */
  uint32_t un = iv->ndim - 1 + x->ndim - (uint32_t)k;
  int ok = u->ndim == un;
  for (uint32_t i = 0; ok && i + 1 < iv->ndim; i++) ok = u->dims[i] == iv->dims[i];
  for (uint32_t i = (uint32_t)k; ok && i < x->ndim; i++)
    ok = u->dims[iv->ndim - 1 + i - k] == x->dims[i];
  if (!ok)
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "updates must be indices.shape[:-1] + data.shape[k:]");
  int64_t xs[MAXD], inner = 1, tuples = iv->numel / k;
  strides_of(x->ndim, x->dims, xs);
  for (uint32_t i = (uint32_t)k; i < x->ndim; i++) inner *= x->dims[i];
  int64_t *dest = malloc((size_t)(u->numel ? u->numel : 1) * sizeof(int64_t));
  if (!dest) return oom(c);
  for (int64_t t = 0; t < tuples; t++) {
    int64_t off = 0;
    for (int64_t j = 0; j < k; j++) {
      int64_t a;
      vm_status_t st = norm_index(c, onx_ld_i(iv->dt, iv->data, t * k + j), x->dims[j], "an", &a);
      if (st) {
        free(dest);
        return st;
      }
      off += a * xs[j];
    }
    for (int64_t r = 0; r < inner; r++) dest[t * inner + r] = off + r;
  }
  vm_status_t st = scatter_lower(c, x, u, dest);
  free(dest);
  return st;
}

/* ---------------------------------------------------------------------------
 * Compress, ReverseSequence, CenterCropPad, MaxUnpool
 */
vm_status_t onx_op_compress(onx_ctx_t *c) {
  onx_value_t *x, *cv;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &cv));
  if (!cv->data)
    return onx_node_err(c, VM_UNIMPLEMENTED, "condition must be a constant (bind it with --const)");
  if (cv->ndim != 1) return onx_node_err(c, VM_INVALID_ARGUMENT, "condition must be 1-D");
  int has_axis = onx_attr(c->node, "axis") != NULL;
  int64_t axis = 0;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "axis", 0, &axis));
  uint32_t nd = has_axis ? x->ndim : 1;
  int64_t dims[MAXD], xs[MAXD];
  if (has_axis) {
    VM_RETURN_IF_ERROR(norm_axis(c, axis, x->ndim, "axis", &axis));
    memcpy(dims, x->dims, x->ndim * sizeof(int64_t));
  } else {
    dims[0] = x->numel;
  }
  if (cv->numel > dims[axis])
    return onx_node_err(c, VM_INVALID_ARGUMENT, "condition is longer than the axis");
  int64_t sel = 0;
  for (int64_t i = 0; i < cv->numel; i++) sel += onx_ld_i(cv->dt, cv->data, i) != 0;
  int64_t od[MAXD], idx[MAXD] = {0}, *pick, *map;
  memcpy(od, dims, nd * sizeof(int64_t));
  od[axis] = sel;
  strides_of(nd, dims, xs);
  pick = malloc((size_t)(sel ? sel : 1) * sizeof(int64_t));
  if (!pick) return oom(c);
  for (int64_t i = 0, k = 0; i < cv->numel; i++)
    if (onx_ld_i(cv->dt, cv->data, i)) pick[k++] = i;
  int64_t on = onx_numel(nd, od);
  vm_status_t st = alloc_map(c, on, &map);
  if (st) {
    free(pick);
    return st;
  }
  for (int64_t i = 0; i < on; i++) {
    int64_t off = 0;
    for (uint32_t k = 0; k < nd; k++) off += ((int64_t)k == axis ? pick[idx[k]] : idx[k]) * xs[k];
    map[i] = off;
    onx_next_index(nd, od, idx);
  }
  free(pick);
  return gather_flat(c, 1, &x, 0, 0, nd, od, map, c->node->output[0], NULL);
}

vm_status_t onx_op_reverse_sequence(onx_ctx_t *c) {
  onx_value_t *x, *lv;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &lv));
  VM_RETURN_IF_ERROR(need_const_ints(c, lv, "sequence_lens"));
  int64_t ba, ta;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "batch_axis", 1, &ba));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "time_axis", 0, &ta));
  if (x->ndim < 2 || !((ba == 0 && ta == 1) || (ba == 1 && ta == 0)))
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "batch_axis and time_axis must be 0 and 1 of a tensor of rank >= 2");
  if (lv->ndim != 1 || lv->dims[0] != x->dims[ba])
    return onx_node_err(c, VM_INVALID_ARGUMENT, "sequence_lens must hold one length per batch");
  int64_t xs[MAXD], idx[MAXD] = {0}, *map;
  strides_of(x->ndim, x->dims, xs);
  VM_RETURN_IF_ERROR(alloc_map(c, x->numel, &map));
  for (int64_t i = 0; i < x->numel; i++) {
    int64_t len = onx_ld_i(lv->dt, lv->data, idx[ba]), t = idx[ta], off = 0;
    if (len < 0 || len > x->dims[ta]) {
      free(map);
      return onx_node_err(c, VM_INVALID_ARGUMENT, "sequence length %lld is outside [0, %lld]",
                          (long long)len, (long long)x->dims[ta]);
    }
    if (t < len) t = len - 1 - t;
    for (uint32_t k = 0; k < x->ndim; k++) off += ((int64_t)k == ta ? t : idx[k]) * xs[k];
    map[i] = off;
    onx_next_index(x->ndim, x->dims, idx);
  }
  return gather_flat(c, 1, &x, 0, 0, x->ndim, x->dims, map, c->node->output[0], NULL);
}

vm_status_t onx_op_center_crop_pad(onx_ctx_t *c) {
  onx_value_t *x, *sv;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &sv));
  int64_t sh[MAXD], ns, axes[MAXD], na;
  VM_RETURN_IF_ERROR(onx_const_ints(c, sv, "shape", sh, MAXD, &ns));
  VM_RETURN_IF_ERROR(onx_attr_ints(c, "axes", axes, MAXD, &na));
  if (na < 0) {
    na = x->ndim;
    for (uint32_t i = 0; i < x->ndim; i++) axes[i] = i;
  }
  if (ns != na)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "shape has %lld values for %lld axes",
                        (long long)ns, (long long)na);
  int64_t od[MAXD], shift[MAXD] = {0};
  memcpy(od, x->dims, x->ndim * sizeof(int64_t));
  for (int64_t i = 0; i < na; i++) {
    int64_t a;
    VM_RETURN_IF_ERROR(norm_axis(c, axes[i], x->ndim, "axis", &a));
    if (sh[i] < 0 || sh[i] > ONX_MAX_DIM)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "shape[%lld] is out of range", (long long)i);
    od[a] = sh[i];
    /* source = output + shift: crop from the middle, pad around it */
    shift[a] = sh[i] <= x->dims[a] ? (x->dims[a] - sh[i]) / 2 : -((sh[i] - x->dims[a]) / 2);
  }
  int64_t on;
  VM_RETURN_IF_ERROR(onx_check_shape(c, "output", x->ndim, od, &on));
  if (on > ONX_MAX_FOLD_ELEMS)
    return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "the output is too large for an index map");
  int64_t xs[MAXD], idx[MAXD] = {0}, *map;
  strides_of(x->ndim, x->dims, xs);
  VM_RETURN_IF_ERROR(alloc_map(c, on, &map));
  for (int64_t i = 0; i < on; i++) {
    int64_t off = 0;
    for (uint32_t k = 0; k < x->ndim && off >= 0; k++) {
      int64_t s = idx[k] + shift[k];
      off = s < 0 || s >= x->dims[k] ? -1 : off + s * xs[k];
    }
    map[i] = off;
    onx_next_index(x->ndim, od, idx);
  }
  return gather_flat(c, 1, &x, 1, 0, x->ndim, od, map, c->node->output[0], NULL);
}

vm_status_t onx_op_max_unpool(onx_ctx_t *c) {
  onx_value_t *x, *iv, *osv = onx_in(c, 2);
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &iv));
  VM_RETURN_IF_ERROR(need_const_ints(c, iv, "I"));
  int64_t ks[MAXD], nk, st_[MAXD], nst, pads[2 * MAXD], np;
  VM_RETURN_IF_ERROR(onx_attr_ints(c, "kernel_shape", ks, MAXD, &nk));
  VM_RETURN_IF_ERROR(onx_attr_ints(c, "strides", st_, MAXD, &nst));
  VM_RETURN_IF_ERROR(onx_attr_ints(c, "pads", pads, 2 * MAXD, &np));
  if (x->ndim < 3 || nk != (int64_t)x->ndim - 2 || iv->numel != x->numel)
    return onx_node_err(
        c, VM_INVALID_ARGUMENT,
        "X must be [N, C, ...] with kernel_shape per spatial axis and I of X's shape");
  int64_t od[MAXD], on;
  od[0] = x->dims[0];
  od[1] = x->dims[1];
  for (int64_t i = 0; i < nk; i++) {
    int64_t s = nst > 0 ? st_[i] : 1, pb = np > 0 ? pads[i] : 0, pe = np > 0 ? pads[i + nk] : 0;
    if (ks[i] < 1 || s < 1 || ks[i] > (1 << 20) || s > (1 << 20) || pb < 0 || pe < 0)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "kernel, strides and pads out of range");
    od[i + 2] = (x->dims[i + 2] - 1) * s - pb - pe + ks[i];
  }
  int64_t dd[MAXD], dn, dst[MAXD], ost[MAXD];
  memcpy(dd, od, x->ndim * sizeof(int64_t));
  VM_RETURN_IF_ERROR(onx_check_shape(c, "output", x->ndim, dd, &dn));
  if (osv) { /* I counts in the default shape; the rest is zeros after it */
    int64_t n;
    VM_RETURN_IF_ERROR(onx_const_ints(c, osv, "output_shape", od, MAXD, &n));
    if (n != (int64_t)x->ndim)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "output_shape must have X's rank");
    for (uint32_t i = 0; i < x->ndim; i++)
      if (od[i] < dd[i])
        return onx_node_err(c, VM_INVALID_ARGUMENT, "output_shape dim %u is smaller than %lld", i,
                            (long long)dd[i]);
  }
  VM_RETURN_IF_ERROR(onx_check_shape(c, "output", x->ndim, od, &on));
  if (on > ONX_MAX_FOLD_ELEMS)
    return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "the output is too large for an index map");
  int64_t *map;
  VM_RETURN_IF_ERROR(alloc_map(c, on, &map));
  for (int64_t i = 0; i < on; i++) map[i] = -1;
  strides_of(x->ndim, dd, dst);
  strides_of(x->ndim, od, ost);
  for (int64_t j = 0; j < iv->numel; j++) {
    int64_t t = onx_ld_i(iv->dt, iv->data, j), o = 0;
    if (t < 0 || t >= dn) {
      free(map);
      return onx_node_err(c, VM_INVALID_ARGUMENT,
                          "I holds %lld, outside the output's %lld elements", (long long)t,
                          (long long)dn);
    }
    for (uint32_t k = 0; k < x->ndim; k++) o += (t / dst[k] % dd[k]) * ost[k];
    map[o] = j;
  }
  return gather_flat(c, 1, &x, 1, 0, x->ndim, od, map, c->node->output[0], NULL);
}

/* ---------------------------------------------------------------------------
 * OneHot: Equal(indices (negatives + depth), a range along the new axis)
 */
vm_status_t onx_op_one_hot(onx_ctx_t *c) {
  onx_value_t *ind, *dv, *vv;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &ind));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &dv));
  VM_RETURN_IF_ERROR(onx_in_req(c, 2, &vv));
  int64_t axis;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "axis", -1, &axis));
  if (!dv->data || dv->numel != 1)
    return onx_node_err(c, VM_UNIMPLEMENTED, "depth must be a constant of one value");
  if (!vv->data || vv->numel != 2)
    return onx_node_err(c, VM_UNIMPLEMENTED, "values must be a constant [off, on]");
  double dd =
      onx_is_float(dv->dt) ? onx_ld_f(dv->dt, dv->data, 0) : (double)onx_ld_i(dv->dt, dv->data, 0);
  if (!(dd >= 1 && dd <= (1 << 24)))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "depth must be 1 to 2^24");
  int64_t depth = (int64_t)dd;
  uint32_t r = ind->ndim + 1;
  if (r > MAXD) return onx_node_err(c, VM_UNIMPLEMENTED, "the output has more than %d dims", MAXD);
  VM_RETURN_IF_ERROR(norm_axis(c, axis, r, "axis", &axis));
  const char *i64 = ind->name, *zero, *dep, *neg, *wrapped, *u, *range, *eq, *off, *on;
  if (!vm_dtype_equal(ind->dt, VM_I64)) {
    onx_sattr_t to[1] = {SA_INT("to", 7)};
    VM_RETURN_IF_ERROR(onx_sub1(c, "Cast", NULL, ind->name, NULL, NULL, 1, to, &i64));
  }
  VM_RETURN_IF_ERROR(onx_sub_scalar(c, VM_I64, 0, &zero));
  VM_RETURN_IF_ERROR(onx_sub_scalar(c, VM_I64, (double)depth, &dep));
  VM_RETURN_IF_ERROR(onx_sub1(c, "Less", NULL, i64, zero, NULL, 0, NULL, &neg));
  VM_RETURN_IF_ERROR(onx_sub1(c, "Add", NULL, i64, dep, NULL, 0, NULL, &wrapped));
  VM_RETURN_IF_ERROR(onx_sub1(c, "Where", NULL, neg, wrapped, i64, 0, NULL, &i64));
  VM_RETURN_IF_ERROR(onx_sub_ints(c, 1, &axis, &u));
  VM_RETURN_IF_ERROR(onx_sub1(c, "Unsqueeze", NULL, i64, u, NULL, 0, NULL, &u));
  int64_t rd[MAXD];
  double *rv = malloc((size_t)depth * sizeof(double));
  if (!rv) return oom(c);
  for (int64_t i = 0; i < depth; i++) rv[i] = (double)i;
  for (uint32_t i = 0; i < r; i++) rd[i] = (int64_t)i == axis ? depth : 1;
  vm_status_t st = onx_sub_const_f(c, VM_I64, r, rd, rv, &range);
  free(rv);
  VM_RETURN_IF_ERROR(st);
  VM_RETURN_IF_ERROR(onx_sub1(c, "Equal", NULL, u, range, NULL, 0, NULL, &eq));
  uint8_t *o0, *o1;
  size_t es = esize(vv->dt);
  VM_RETURN_IF_ERROR(onx_alloc_const(c, vv->dt, 1, &o0));
  memcpy(o0, vv->data, es);
  VM_RETURN_IF_ERROR(onx_sub_const(c, vv->dt, 0, NULL, o0, &off));
  VM_RETURN_IF_ERROR(onx_alloc_const(c, vv->dt, 1, &o1));
  memcpy(o1, vv->data + es, es);
  VM_RETURN_IF_ERROR(onx_sub_const(c, vv->dt, 0, NULL, o1, &on));
  return onx_sub1(c, "Where", c->node->output[0], eq, on, off, 0, NULL, NULL);
}
