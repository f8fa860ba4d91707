/* ONNX sampling and spatial operators (docs/onnx.md): GridSample,
 * RoiAlign, DeformConv, MaxPool's Indices output, Det, STFT (one cl.* call
 * each, kernels/spatial.cl) and MelWeightMatrix (folded on the host). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_ops.h"

/* The most samples per bin axis of RoiAlign (cl.roi_align's cap) and the
 * largest matrix of Det (cl.det's). */
#define SP_ROI_MAX_GRID 256
#define SP_DET_MAX_N 256

/* The index of s in names (n of them), or -1. */
static int pick(const char *s, const char *const *names, int n) {
  for (int i = 0; i < n; i++)
    if (strcmp(s, names[i]) == 0) return i;
  return -1;
}

/* A second float operand of x's dtype (run-time operands share one). */
static vm_status_t same_float(onx_ctx_t *c, const onx_value_t *x, const onx_value_t *v,
                              const char *what) {
  if (vm_dtype_equal(v->dt, x->dt)) return VM_STATUS_OK;
  char a[32], b[32];
  return onx_node_err(c, VM_UNIMPLEMENTED, "%s has dtype %s: supported: %s (the dtype of X)", what,
                      dt_name(v->dt, a, sizeof(a)), dt_name(x->dt, b, sizeof(b)));
}

/* An int attribute that must be 0 or 1. */
static vm_status_t attr_flag(onx_ctx_t *c, const char *name, int64_t def, int64_t *out) {
  VM_RETURN_IF_ERROR(onx_attr_int(c, name, def, out));
  if (*out == 0 || *out == 1) return VM_STATUS_OK;
  char v[24];
  snprintf(v, sizeof(v), "%lld", (long long)*out);
  return onx_unsupported_attr(c, name, v, "0, 1");
}

/* ---------------------------------------------------------------------------
 * GridSample (opset 16: 2-D, bilinear/nearest/bicubic; 20: N-D,
 * linear/nearest/cubic): cl.grid_sample on 1 to 3 spatial axes.
 */
vm_status_t onx_op_grid_sample(onx_ctx_t *c) {
  onx_value_t *x, *grid;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &grid));
  VM_RETURN_IF_ERROR(need_float(c, x));
  VM_RETURN_IF_ERROR(same_float(c, x, grid, "grid"));
  int new_names = c->opset >= 20;
  char mode[16], pm[16];
  int64_t align;
  VM_RETURN_IF_ERROR(
      onx_attr_str(c, "mode", new_names ? "linear" : "bilinear", mode, sizeof(mode)));
  VM_RETURN_IF_ERROR(onx_attr_str(c, "padding_mode", "zeros", pm, sizeof(pm)));
  VM_RETURN_IF_ERROR(attr_flag(c, "align_corners", 0, &align));
  static const char *const k_old[] = {"bilinear", "nearest", "bicubic"};
  static const char *const k_new[] = {"linear", "nearest", "cubic"};
  static const char *const k_pad[] = {"zeros", "border", "reflection"};
  int im = pick(mode, new_names ? k_new : k_old, 3);
  if (im < 0)
    return onx_unsupported_attr(
        c, "mode", mode,
        new_names ? "linear, nearest, cubic" : "bilinear, nearest, bicubic (before opset 20)");
  int ip = pick(pm, k_pad, 3);
  if (ip < 0) return onx_unsupported_attr(c, "padding_mode", pm, "zeros, border, reflection");
  /* cl.grid_sample's codes: 0 linear, 1 nearest, 2 cubic */
  int64_t code = im == 0 ? 0 : im == 1 ? 1 : 2;
  uint32_t nd = x->ndim;
  if (nd < 3 || nd > 5 || (!new_names && nd != 4))
    return onx_node_err(c, VM_UNIMPLEMENTED,
                        "X has rank %u: supported: 4 (opset 16), 3 to 5 (1 to 3 spatial axes, "
                        "opset 20)",
                        nd);
  uint32_t r = nd - 2;
  char s1[100], s2[100];
  if (grid->ndim != nd || grid->dims[0] != x->dims[0] || grid->dims[nd - 1] != (int64_t)r)
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "grid %s does not fit X %s: expected [%lld, ..., %u]",
                        onx_dims_str(grid->ndim, grid->dims, s1, sizeof(s1)),
                        onx_dims_str(nd, x->dims, s2, sizeof(s2)), (long long)x->dims[0], r);
  int64_t yd[5] = {x->dims[0], x->dims[1]};
  for (uint32_t d = 0; d < r; d++) yd[2 + d] = grid->dims[1 + d];
  int64_t numel;
  VM_RETURN_IF_ERROR(onx_check_shape(c, "output", nd, yd, &numel));
  for (uint32_t d = 0; d < r && numel; d++)
    if (x->dims[2 + d] == 0)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "X is empty along spatial axis %u", d);
  int32_t y = new_t(c, x->dt, nd, yd);
  vmcc_arg_t a[6] = {A(onx_tid(c, x)), A(onx_tid(c, grid)), I(code), I(ip), I(align), A(y)};
  call(c, "cl.grid_sample", 6, a);
  return onx_bind_out(c, 0, y, nd, yd);
}

/* ---------------------------------------------------------------------------
 * RoiAlign (opset 10; coordinate_transformation_mode from 16, whose
 * default half_pixel differs from opset 10's output_half_pixel)
 */
vm_status_t onx_op_roi_align(onx_ctx_t *c) {
  onx_value_t *x, *rois, *bi;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &rois));
  VM_RETURN_IF_ERROR(onx_in_req(c, 2, &bi));
  VM_RETURN_IF_ERROR(need_float(c, x));
  VM_RETURN_IF_ERROR(same_float(c, x, rois, "rois"));
  char ctm[32], mode[8];
  int64_t oh, ow, ratio;
  float scale;
  VM_RETURN_IF_ERROR(onx_attr_str(c, "coordinate_transformation_mode",
                                  c->opset >= 16 ? "half_pixel" : "output_half_pixel", ctm,
                                  sizeof(ctm)));
  VM_RETURN_IF_ERROR(onx_attr_str(c, "mode", "avg", mode, sizeof(mode)));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "output_height", 1, &oh));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "output_width", 1, &ow));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "sampling_ratio", 0, &ratio));
  VM_RETURN_IF_ERROR(onx_attr_float(c, "spatial_scale", 1.0f, &scale));
  static const char *const k_ctm[] = {"output_half_pixel", "half_pixel"};
  static const char *const k_mode[] = {"avg", "max"};
  int half = pick(ctm, k_ctm, 2), im = pick(mode, k_mode, 2);
  if (half < 0)
    return onx_unsupported_attr(c, "coordinate_transformation_mode", ctm,
                                "half_pixel, output_half_pixel");
  if (im < 0) return onx_unsupported_attr(c, "mode", mode, "avg, max");
  if (ratio < 0 || ratio > SP_ROI_MAX_GRID) {
    char v[24];
    snprintf(v, sizeof(v), "%lld", (long long)ratio);
    return onx_unsupported_attr(c, "sampling_ratio", v, "0 (adaptive) to 256");
  }
  if (oh < 1 || ow < 1)
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "output_height %lld and output_width %lld: at least 1", (long long)oh,
                        (long long)ow);
  if (!(scale > 0) || isinf(scale))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "spatial_scale %g: a positive number",
                        (double)scale);
  char s1[100];
  if (x->ndim != 4)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "X %s: expected [N, C, H, W]",
                        onx_dims_str(x->ndim, x->dims, s1, sizeof(s1)));
  if (rois->ndim != 2 || rois->dims[1] != 4)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "rois %s: expected [num_rois, 4]",
                        onx_dims_str(rois->ndim, rois->dims, s1, sizeof(s1)));
  int64_t R = rois->dims[0];
  if (!vm_dtype_equal(bi->dt, VM_I64) || bi->ndim != 1 || bi->dims[0] != R)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "batch_indices must be int64 [%lld]", (long long)R);
  for (int64_t i = 0; bi->data && i < R; i++) {
    int64_t b = onx_ld_i(bi->dt, bi->data, i);
    if (b < 0 || b >= x->dims[0])
      return onx_node_err(c, VM_INVALID_ARGUMENT,
                          "batch_indices[%lld] = %lld is outside the batch of %lld images",
                          (long long)i, (long long)b, (long long)x->dims[0]);
  }
  int64_t yd[4] = {R, x->dims[1], oh, ow}, numel;
  VM_RETURN_IF_ERROR(onx_check_shape(c, "output", 4, yd, &numel));
  if (numel && (x->dims[2] == 0 || x->dims[3] == 0))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "X has an empty image");
  int32_t y = new_t(c, x->dt, 4, yd);
  vmcc_arg_t a[8] = {A(onx_tid(c, x)), A(onx_tid(c, rois)),     A(onx_tid(c, bi)), I(im),
                     I(ratio),         onx_float_arg(c, scale), I(half),           A(y)};
  call(c, "cl.roi_align", 8, a);
  return onx_bind_out(c, 0, y, 4, yd);
}

/* ---------------------------------------------------------------------------
 * DeformConv (opset 19): 2-D
 */
vm_status_t onx_op_deform_conv(onx_ctx_t *c) {
  onx_value_t *x, *w, *off, *b, *mask;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &w));
  VM_RETURN_IF_ERROR(onx_in_req(c, 2, &off));
  b = onx_in(c, 3);
  mask = onx_in(c, 4);
  VM_RETURN_IF_ERROR(need_float(c, x));
  VM_RETURN_IF_ERROR(same_float(c, x, w, "W"));
  VM_RETURN_IF_ERROR(same_float(c, x, off, "offset"));
  if (b) VM_RETURN_IF_ERROR(same_float(c, x, b, "B"));
  if (mask) VM_RETURN_IF_ERROR(same_float(c, x, mask, "mask"));
  if (x->ndim != 4)
    return onx_node_err(c, VM_UNIMPLEMENTED, "X has rank %u: supported: 4 (2-D)", x->ndim);
  char s1[100], s2[100];
  if (w->ndim != 4)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "W %s: expected [M, C / group, kH, kW]",
                        onx_dims_str(w->ndim, w->dims, s1, sizeof(s1)));
  int64_t G, OG;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "group", 1, &G));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "offset_group", 1, &OG));
  int64_t C = x->dims[1], M = w->dims[0];
  if (G < 1 || OG < 1 || C % G || M % G || w->dims[1] != C / G || C % OG)
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "group %lld, offset_group %lld: X's %lld channels and W %s do not fit",
                        (long long)G, (long long)OG, (long long)C,
                        onx_dims_str(w->ndim, w->dims, s1, sizeof(s1)));
  win2d_t win;
  VM_RETURN_IF_ERROR(onx_read_window(c, 2, x->dims + 2, w->dims + 2, 0, 1, &win));
  int64_t yd[4] = {x->dims[0], M, win.out[1], win.out[2]};
  int64_t kk = w->dims[2] * w->dims[3]; /* W's dims: the product fits */
  int64_t od[4] = {x->dims[0], 0, yd[2], yd[3]}, md[4] = {x->dims[0], 0, yd[2], yd[3]};
  if (vm_ckd_mul_i64(OG, kk, &md[1]) || vm_ckd_mul_i64(md[1], 2, &od[1]) || off->ndim != 4 ||
      memcmp(off->dims, od, sizeof(od)) != 0)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "offset %s: expected %s",
                        onx_dims_str(off->ndim, off->dims, s1, sizeof(s1)),
                        onx_dims_str(4, od, s2, sizeof(s2)));
  if (mask && (mask->ndim != 4 || memcmp(mask->dims, md, sizeof(md)) != 0))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "mask %s: expected %s",
                        onx_dims_str(mask->ndim, mask->dims, s1, sizeof(s1)),
                        onx_dims_str(4, md, s2, sizeof(s2)));
  if (b && (b->ndim != 1 || b->dims[0] != M))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "B %s: expected [%lld]",
                        onx_dims_str(b->ndim, b->dims, s1, sizeof(s1)), (long long)M);
  VM_RETURN_IF_ERROR(onx_check_shape(c, "output", 4, yd, NULL));
  int32_t y = new_t(c, x->dt, 4, yd);
  vmcc_arg_t a[14] = {A(onx_tid(c, x)),
                      A(onx_tid(c, w)),
                      A(onx_tid(c, off)),
                      b ? A(onx_tid(c, b)) : vmcc_a_none(),
                      mask ? A(onx_tid(c, mask)) : vmcc_a_none(),
                      I(win.s[1]),
                      I(win.s[2]),
                      I(win.pb[1]),
                      I(win.pb[2]),
                      I(win.d[1]),
                      I(win.d[2]),
                      I(G),
                      I(OG),
                      A(y)};
  call(c, "cl.deform_conv2d", 14, a);
  return onx_bind_out(c, 0, y, 4, yd);
}

/* ---------------------------------------------------------------------------
 * MaxPool with its Indices output (onnx_ops_nn.c's pooling hands it over):
 * 1-D and 2-D
 */
vm_status_t onx_maxpool_indices(onx_ctx_t *c) {
  onx_value_t *x;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(need_float(c, x));
  if (x->ndim != 3 && x->ndim != 4)
    return onx_node_err(c, VM_UNIMPLEMENTED,
                        "output Indices with input rank %u: supported: 1-D and 2-D pooling (rank "
                        "3 or 4)",
                        x->ndim);
  int64_t ceil_mode = 0, so = 0;
  if (c->opset >= 10) VM_RETURN_IF_ERROR(attr_flag(c, "ceil_mode", 0, &ceil_mode));
  VM_RETURN_IF_ERROR(attr_flag(c, "storage_order", 0, &so));
  uint32_t nsp = x->ndim - 2;
  win2d_t w;
  VM_RETURN_IF_ERROR(
      onx_read_window(c, nsp, x->dims + 2, NULL, (int)ceil_mode, c->opset >= 10, &w));
  const int64_t *xd = x->dims;
  int64_t yd[4] = {xd[0], xd[1], w.out[3 - nsp], w.out[2]};
  int64_t x4[4] = {xd[0], xd[1], nsp == 2 ? xd[2] : 1, xd[nsp + 1]};
  int64_t y4[4] = {xd[0], xd[1], w.out[1], w.out[2]};
  VM_RETURN_IF_ERROR(onx_check_shape(c, "output", x->ndim, yd, NULL));
  int32_t y = new_t(c, x->dt, 4, y4), ind = new_t(c, VM_I64, 4, y4);
  vmcc_arg_t a[12] = {A(onx_reshaped(c, x, 4, x4)),
                      I(w.k[1]),
                      I(w.k[2]),
                      I(w.s[1]),
                      I(w.s[2]),
                      I(w.pb[1]),
                      I(w.pb[2]),
                      I(w.d[1]),
                      I(w.d[2]),
                      I(so),
                      A(y),
                      A(ind)};
  call(c, "cl.pool2d.max_indices", 12, a);
  VM_RETURN_IF_ERROR(onx_bind_out(c, 0, y, x->ndim, yd));
  return onx_bind_out(c, 1, ind, x->ndim, yd);
}

/* ---------------------------------------------------------------------------
 * Det (opset 11)
 */
vm_status_t onx_op_det(onx_ctx_t *c) {
  onx_value_t *x;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(need_float(c, x));
  char s1[100];
  if (x->ndim < 2 || x->dims[x->ndim - 1] != x->dims[x->ndim - 2])
    return onx_node_err(c, VM_INVALID_ARGUMENT, "X %s: expected [..., M, M]",
                        onx_dims_str(x->ndim, x->dims, s1, sizeof(s1)));
  if (x->dims[x->ndim - 1] > SP_DET_MAX_N)
    return onx_node_err(c, VM_UNIMPLEMENTED, "%lld x %lld matrices: supported: up to %d x %d",
                        (long long)x->dims[x->ndim - 1], (long long)x->dims[x->ndim - 1],
                        SP_DET_MAX_N, SP_DET_MAX_N);
  uint32_t on = x->ndim - 2;
  int32_t y = new_t(c, x->dt, on, x->dims);
  vmcc_arg_t a[2] = {A(onx_tid(c, x)), A(y)};
  call(c, "cl.det", 2, a);
  return onx_bind_out(c, 0, y, on, x->dims);
}

/* ---------------------------------------------------------------------------
 * STFT (opset 17): frame_step and frame_length constants
 */
vm_status_t onx_op_stft(onx_ctx_t *c) {
  onx_value_t *x, *vstep, *win = onx_in(c, 2), *vlen = onx_in(c, 3);
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &vstep));
  VM_RETURN_IF_ERROR(need_float(c, x));
  if (win) VM_RETURN_IF_ERROR(same_float(c, x, win, "window"));
  int64_t onesided;
  VM_RETURN_IF_ERROR(attr_flag(c, "onesided", 1, &onesided));
  char s1[100];
  if (x->ndim != 3 || x->dims[2] < 1 || x->dims[2] > 2)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "signal %s: expected [batch, length, 1 or 2]",
                        onx_dims_str(x->ndim, x->dims, s1, sizeof(s1)));
  int64_t step, L, n;
  if (!vstep->data) return onx_node_err(c, VM_UNIMPLEMENTED, "frame_step must be a constant");
  VM_RETURN_IF_ERROR(onx_const_ints(c, vstep, "frame_step", &step, 1, &n));
  if (n != 1 || step < 1 || step > INT32_MAX)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "frame_step must be one positive int");
  if (vlen) {
    if (!vlen->data) return onx_node_err(c, VM_UNIMPLEMENTED, "frame_length must be a constant");
    VM_RETURN_IF_ERROR(onx_const_ints(c, vlen, "frame_length", &L, 1, &n));
    if (n != 1) return onx_node_err(c, VM_INVALID_ARGUMENT, "frame_length must be one int");
  } else {
    L = win ? (win->ndim == 1 ? win->dims[0] : -1) : x->dims[1];
  }
  if (L < 1 || L > x->dims[1])
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "frame_length %lld: 1 to the signal's length (%lld)", (long long)L,
                        (long long)x->dims[1]);
  if (win && (win->ndim != 1 || win->dims[0] != L))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "window %s: expected [%lld]",
                        onx_dims_str(win->ndim, win->dims, s1, sizeof(s1)), (long long)L);
  int64_t yd[4] = {x->dims[0], (x->dims[1] - L) / step + 1, onesided ? L / 2 + 1 : L, 2};
  VM_RETURN_IF_ERROR(onx_check_shape(c, "output", 4, yd, NULL));
  int32_t y = new_t(c, x->dt, 4, yd);
  vmcc_arg_t a[5] = {A(onx_tid(c, x)), win ? A(onx_tid(c, win)) : vmcc_a_none(), I(step), I(L),
                     A(y)};
  call(c, "cl.stft", 5, a);
  return onx_bind_out(c, 0, y, 4, yd);
}

/* ---------------------------------------------------------------------------
 * MelWeightMatrix (opset 17): every input a constant, folded on the host
 * as the specification's triangles (in double precision)
 */
vm_status_t onx_op_mel_weight_matrix(onx_ctx_t *c) {
  onx_value_t *v[5];
  static const char *const names[5] = {"num_mel_bins", "dft_length", "sample_rate",
                                       "lower_edge_hertz", "upper_edge_hertz"};
  double f[5];
  for (uint32_t i = 0; i < 5; i++) {
    VM_RETURN_IF_ERROR(onx_in_req(c, i, &v[i]));
    if (!v[i]->data)
      return onx_node_err(c, VM_UNIMPLEMENTED,
                          "%s must be a constant (the output's shape "
                          "depends on it)",
                          names[i]);
    if (v[i]->numel != 1)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "%s must be a scalar", names[i]);
    f[i] = onx_is_float(v[i]->dt) ? onx_ld_f(v[i]->dt, v[i]->data, 0)
                                  : (double)onx_ld_i(v[i]->dt, v[i]->data, 0);
  }
  int64_t odt_code;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "output_datatype", 1, &odt_code));
  vm_dtype_t odt;
  if (onx_dtype_from_onnx((int32_t)odt_code, &odt) < 0 ||
      !(vm_dtype_equal(odt, VM_F32) || vm_dtype_equal(odt, VM_F16) || vm_dtype_equal(odt, VM_F64)))
    return onx_unsupported_attr(c, "output_datatype", "that type", "float, float16, double");
  double bins = f[0], dft = f[1], rate = f[2], lo = f[3], hi = f[4];
  if (!(bins >= 1 && bins <= 65536 && dft >= 1 && dft <= (1 << 24) && rate > 0 && isfinite(rate) &&
        lo >= 0 && hi >= lo && isfinite(hi)))
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "num_mel_bins %g (1 to 65536), dft_length %g (1 to 2^24), sample_rate "
                        "%g (positive), edges %g and %g (0 <= lower <= upper)",
                        bins, dft, rate, lo, hi);
  int64_t nb = (int64_t)bins, spec = (int64_t)dft / 2 + 1;
  int64_t yd[2] = {spec, nb}, numel;
  VM_RETURN_IF_ERROR(onx_check_shape(c, "output", 2, yd, &numel));
  int64_t *fb = calloc((size_t)nb + 2, sizeof(int64_t));
  if (!fb) return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
  double mlo = 2595 * log10(1 + lo / 700), mhi = 2595 * log10(1 + hi / 700);
  double step = (mhi - mlo) / (double)(nb + 2);
  for (int64_t i = 0; i < nb + 2; i++) {
    double hz = 700 * (pow(10, ((double)i * step + mlo) / 2595) - 1);
    /* the edge is checked as a double: a huge one (or inf) never reaches
     * the int64 conversion */
    double e = floor(((double)(int64_t)dft + 1) * hz / (double)(int64_t)rate);
    if (!(e >= 0 && e < (double)spec)) {
      long long at = isfinite(e) && fabs(e) < 9e18 ? (long long)e : -1;
      free(fb);
      return onx_node_err(c, VM_INVALID_ARGUMENT,
                          "mel bin edge %lld falls on spectrogram bin %lld, outside 0 to %lld",
                          (long long)i, at, (long long)(spec - 1));
    }
    fb[i] = (int64_t)e;
  }
  uint8_t *d;
  vm_status_t st = onx_alloc_const(c, odt, numel, &d);
  if (st) {
    free(fb);
    return st;
  }
  for (int64_t i = 0; i < numel; i++) onx_st_f(odt, d, i, 0.0);
  for (int64_t i = 0; i < nb; i++) {
    int64_t l = fb[i], m = fb[i + 1], h = fb[i + 2];
    if (m == l) {
      onx_st_f(odt, d, m * nb + i, 1.0);
    } else {
      for (int64_t j = l; j <= m; j++)
        onx_st_f(odt, d, j * nb + i, (double)(j - l) / (double)(m - l));
    }
    for (int64_t j = m; j < h; j++) onx_st_f(odt, d, j * nb + i, (double)(h - j) / (double)(h - m));
  }
  free(fb);
  return onx_def_const(c, 0, odt, 2, yd, d);
}
