/* cl.conv2d, cl.conv_transpose2d (kernels/conv.cl) and cl.pool2d.* (kernels/pool.cl, and
 * global_avg through the reduction of cl_ops_reduce.c). NCHW layout. */
#include <limits.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cl_ops_internal.h"
#include "vmrpc/log.h"

/* Largest stride, padding, dilation or window: far beyond any real model,
 * and small enough that the kernels' 32-bit index arithmetic cannot
 * overflow (checked together with the input extent below). */
#define ATTR_MAX (1 << 20)

/* Reads a conv/pool attribute int in [lo, ATTR_MAX]. */
static vm_status_t attr(const vmcl_op_t *op, uint32_t idx, const char *what, int64_t lo,
                        int64_t *out) {
  return vmcl_op_int(op, idx, what, lo, ATTR_MAX, out);
}

/* Strides, begin/end pads and dilations of a conv/pool window, and its
 * dilated extent (eh, ew: set by window_fits). */
typedef struct window {
  int64_t sh, sw, pt, pl, pb, pr, dh, dw, eh, ew;
} window_t;

/* Usage of cl.conv2d's two forms: symmetric pads (11 arguments) and
 * ONNX's begin/end pads (13). */
#define CONV2D_USAGE11 \
  "(x, w, bias|none, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups, y)"
#define CONV2D_USAGE13                                                                      \
  "(x, w, bias|none, stride_h, stride_w, pad_top, pad_left, pad_bottom, pad_right, dil_h, " \
  "dil_w, groups, y)"
#define CONV2D_USAGE16                                                                      \
  "(x, w, bias|none, stride_h, stride_w, pad_top, pad_left, pad_bottom, pad_right, dil_h, " \
  "dil_w, groups, act, act_mul, act_add, y)"
#define CONV2D_USAGE17                                                                      \
  "(x, w, bias|none, stride_h, stride_w, pad_top, pad_left, pad_bottom, pad_right, dil_h, " \
  "dil_w, groups, act, act_mul, act_add, u, y)"
#define CONV2D_USAGE18                                                                      \
  "(x, w, bias|none, stride_h, stride_w, pad_top, pad_left, pad_bottom, pad_right, dil_h, " \
  "dil_w, groups, act, act_mul, act_add, u|none, r, y)"

/* cl.conv2d's activation codes (the 16-argument form; conv.cl's
 * conv_epilogue) */
enum { CONV_ACT_NONE, CONV_ACT_RELU, CONV_ACT_HARD_SWISH };

/* Reads the stride, pad and dilation attributes from argument first on:
 * (stride_h, stride_w, pad_h, pad_w) when !asym, (stride_h, stride_w,
 * pad_top, pad_left, pad_bottom, pad_right) when asym, then (dil_h, dil_w)
 * when has_dil (else 1). Pads lie in [pad_lo, pad_hi_h or pad_hi_w]. */
static vm_status_t window_attrs(const vmcl_op_t *op, uint32_t first, int asym, int has_dil,
                                int64_t pad_lo, int64_t pad_hi_h, int64_t pad_hi_w, window_t *wa) {
  uint32_t i = first;
  VM_RETURN_IF_ERROR(attr(op, i++, "stride_h", 1, &wa->sh));
  VM_RETURN_IF_ERROR(attr(op, i++, "stride_w", 1, &wa->sw));
  if (asym) {
    VM_RETURN_IF_ERROR(vmcl_op_int(op, i++, "pad_top", pad_lo, pad_hi_h, &wa->pt));
    VM_RETURN_IF_ERROR(vmcl_op_int(op, i++, "pad_left", pad_lo, pad_hi_w, &wa->pl));
    VM_RETURN_IF_ERROR(vmcl_op_int(op, i++, "pad_bottom", pad_lo, pad_hi_h, &wa->pb));
    VM_RETURN_IF_ERROR(vmcl_op_int(op, i++, "pad_right", pad_lo, pad_hi_w, &wa->pr));
  } else {
    VM_RETURN_IF_ERROR(vmcl_op_int(op, i++, "pad_h", pad_lo, pad_hi_h, &wa->pt));
    VM_RETURN_IF_ERROR(vmcl_op_int(op, i++, "pad_w", pad_lo, pad_hi_w, &wa->pl));
    wa->pb = wa->pt;
    wa->pr = wa->pl;
  }
  wa->dh = wa->dw = 1;
  if (has_dil) {
    VM_RETURN_IF_ERROR(attr(op, i++, "dil_h", 1, &wa->dh));
    VM_RETURN_IF_ERROR(attr(op, i++, "dil_w", 1, &wa->dw));
  }
  return VM_STATUS_OK;
}

/* The dilated window must fit the padded input, and the padded extent with
 * a window and a stride beyond it must stay in int range for the kernels'
 * index arithmetic (every term is at most 2^40: no int64 overflow). what
 * names the window ("dilated kernel", "window"). */
static vm_status_t window_fits(const vmcl_op_t *op, const char *what, int64_t H, int64_t W,
                               int64_t KH, int64_t KW, window_t *wa) {
  wa->eh = wa->dh * (KH - 1) + 1;
  wa->ew = wa->dw * (KW - 1) + 1;
  int64_t ph = H + wa->pt + wa->pb, pw = W + wa->pl + wa->pr;
  if (ph < wa->eh || pw < wa->ew) {
    return vmcl_op_error(op, "the %s (%lldx%lld) is larger than the padded input (%lldx%lld)", what,
                         (long long)wa->eh, (long long)wa->ew, (long long)ph, (long long)pw);
  }
  if (ph + wa->eh + wa->sh > INT_MAX || pw + wa->ew + wa->sw > INT_MAX) {
    return vmcl_op_error(op, "padded input extent exceeds the 32-bit index range");
  }
  return VM_STATUS_OK;
}

/* The leading kernel arguments of conv2d and conv_transpose2d: x, w, bias
 * (x's buffer stands in when there is none: not read) and y. */
static void conv_tensor_args(vmcl_args_t *a, const vm_tensor_t *x, const vm_tensor_t *w,
                             const vm_tensor_t *bias, const vm_tensor_t *y) {
  vmcl_arg_mem(a, vmcl_tensor_mem(x));
  vmcl_arg_int(a, vmcl_elem_offset(x));
  vmcl_arg_mem(a, vmcl_tensor_mem(w));
  vmcl_arg_int(a, vmcl_elem_offset(w));
  vmcl_arg_mem(a, vmcl_tensor_mem(bias ? bias : x));
  vmcl_arg_int(a, bias ? vmcl_elem_offset(bias) : 0);
  vmcl_arg_int(a, bias != NULL);
  vmcl_arg_mem(a, vmcl_tensor_mem(y));
  vmcl_arg_int(a, vmcl_elem_offset(y));
}

/* The trailing kernel arguments of the conv2d kernels: act, act_mul, act_add. */
static void conv_epilogue_args(vmcl_args_t *a, int64_t act, double am, double aa) {
  vmcl_arg_int(a, act);
  vmcl_arg_float(a, (float)am);
  vmcl_arg_float(a, (float)aa);
}

/* The residual arguments of conv2d_1x1 and conv2d_epilogue: r (y's buffer
 * stands in when there is none: not read), its offset, whether there is one. */
static void conv_res_args(vmcl_args_t *a, const vm_tensor_t *r, const vm_tensor_t *y) {
  vmcl_arg_mem(a, vmcl_tensor_mem(r ? r : y));
  vmcl_arg_int(a, r ? vmcl_elem_offset(r) : 0);
  vmcl_arg_int(a, r != NULL);
}

/* Launches a conv kernel blocked as conv.cl's conv2d: g0 pixel blocks x
 * g1 output-channel blocks x g2 planes, work-groups of up to 8 pixel
 * blocks by the channel blocks that fill the preferred size. */
static vm_status_t launch_blocks(vmcl_dev_t *d, cl_kernel k, size_t g0, size_t g1, size_t g2) {
  size_t l = vmcl_local_size(d, k, 64);
  size_t l0 = l < 8 ? l : 8;
  size_t local[3] = {l0, l / l0, 1};
  size_t global[3] = {(g0 + local[0] - 1) / local[0] * local[0],
                      (g1 + local[1] - 1) / local[1] * local[1], g2};
  return vmcl_launch(d, k, 3, global, local);
}

/* Launches a conv kernel over b0 blocks of a row x rows x planes: a group
 * spans the blocks of a row exactly (no idle work-items past the row's
 * end, unless a row has more blocks than a group holds), then rows. */
static vm_status_t launch_rows(vmcl_dev_t *d, cl_kernel k, size_t b0, size_t rows, size_t planes) {
  size_t l = vmcl_local_size(d, k, 64), l0 = b0 < l ? b0 : l, l1 = 1;
  while (l1 < rows && l0 * l1 * 2 <= l) l1 *= 2;
  size_t local[3] = {l0, l1, 1};
  size_t global[3] = {(b0 + l0 - 1) / l0 * l0, (rows + l1 - 1) / l1 * l1, planes};
  return vmcl_launch(d, k, 3, global, local);
}

/* The shape of a general cl.conv2d call (neither depthwise nor
 * pointwise) and its epilogue, as its formulations take it. */
typedef struct conv_shape {
  int64_t N, C, H, W, O, OH, OW, KH, KW, groups, act;
  double am, aa;
  window_t wa;
  int pw; /* pointwise (1x1, stride 1, no pads): conv2d_1x1 or the GEMM on x */
  /* the 17-argument form's Winograd filter, transformed once by the compiler
   * ([(um + 2)^2, O, C] float32: conv_wino takes it instead of transforming w
   * when its m is um), or NULL */
  const vm_tensor_t *u;
  int um;
  /* the 18-argument form's residual r (y's shape), added before the
   * activation, or NULL */
  const vm_tensor_t *r;
} conv_shape_t;

/* cl.conv2d's formulations of a general convolution; which one runs is
 * measured per device and shape (conv_general). */
enum {
  CONV_F_DIRECT = 0,
  CONV_F_GEMM = 1,
  CONV_F_WINO = 2,
  CONV_F_WINO4 = 3,
  CONV_F_DIRECT6 = 4,
  CONV_F_COUNT
};
static const char *const conv_f_name[CONV_F_COUNT] = {"direct", "gemm", "wino", "wino4",
                                                      "direct6"};

/* The columns of the GEMM formulation may take at most this many float32
 * elements (256 MiB); larger calls stay on the direct kernel. */
#define CONV_GEMM_MAX_COLS ((int64_t)64 << 20)

/* conv.cl's conv2d_epilogue over y ([N, O, P]) in place: bias and the
 * residual r (or NULL), then the activation and act * am + aa; nothing to
 * do without any. */
static vm_status_t conv_epilogue_launch(vmcl_dev_t *d, const vm_tensor_t *y,
                                        const vm_tensor_t *bias, const vm_tensor_t *r, int64_t N,
                                        int64_t O, int64_t P, int64_t act, double am, double aa) {
  if (!bias && !r && act == CONV_ACT_NONE && am == 1.0 && aa == 0.0) return VM_STATUS_OK;
  cl_kernel k;
  pthread_mutex_lock(&d->lock);
  vm_status_t st = vmcl_family_kernel(d, VMCL_FAM_CONV, vmcl_float_options(y->dtype),
                                      "conv2d_epilogue", &k);
  if (!st) {
    vmcl_args_t a = vmcl_args_begin(k);
    vmcl_arg_mem(&a, vmcl_tensor_mem(y));
    vmcl_arg_int(&a, vmcl_elem_offset(y));
    vmcl_arg_mem(&a, vmcl_tensor_mem(bias ? bias : y));
    vmcl_arg_int(&a, bias ? vmcl_elem_offset(bias) : 0);
    vmcl_arg_int(&a, bias != NULL);
    vmcl_arg_int(&a, O);
    vmcl_arg_int(&a, P);
    conv_epilogue_args(&a, act, am, aa);
    conv_res_args(&a, r, y);
    size_t global[2] = {(size_t)(P + 7) / 8, (size_t)(N * O)};
    st = a.err != CL_SUCCESS ? vmcl_status(a.err, "clSetKernelArg")
                             : vmcl_launch(d, k, 2, global, NULL);
  }
  pthread_mutex_unlock(&d->lock);
  return st;
}

/* Direct: conv.cl's conv2d, 8 output channels x 8 pixels per work-item,
 * the input gathered on the fly (implicit im2col); six (float32): conv.cl's
 * conv2d_616, 6 channels x 16 pixels of one output row. */
static vm_status_t conv_direct(vmcl_dev_t *d, const vm_tensor_t *x, const vm_tensor_t *w,
                               const vm_tensor_t *bias, const vm_tensor_t *y,
                               const conv_shape_t *s, int six) {
  cl_kernel k;
  pthread_mutex_lock(&d->lock);
  vm_status_t st = vmcl_family_kernel(d, VMCL_FAM_CONV, vmcl_float_options(x->dtype),
                                      six ? "conv2d_616" : "conv2d", &k);
  if (!st) {
    vmcl_args_t a = vmcl_args_begin(k);
    conv_tensor_args(&a, x, w, bias, y);
    const window_t *wa = &s->wa;
    int64_t ints[] = {s->C,   s->H,   s->W,   s->O,   s->OH,  s->OW,  s->KH,    s->KW,
                      wa->sh, wa->sw, wa->pt, wa->pl, wa->dh, wa->dw, s->groups};
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) vmcl_arg_int(&a, ints[i]);
    conv_epilogue_args(&a, s->act, s->am, s->aa);
    if (a.err != CL_SUCCESS)
      st = vmcl_status(a.err, "clSetKernelArg");
    else if (six)
      st = launch_blocks(d, k, (size_t)(s->OW + 15) / 16, (size_t)(s->O / s->groups + 5) / 6,
                         (size_t)(s->N * s->groups * s->OH));
    else
      st = launch_blocks(d, k, (size_t)(s->OH * s->OW + 7) / 8, (size_t)(s->O / s->groups + 7) / 8,
                         (size_t)(s->N * s->groups));
  }
  pthread_mutex_unlock(&d->lock);
  return st;
}

/* GEMM (float32): per image, conv2d_im2col writes the columns of all
 * input channels into a scratch buffer and the device's GEMM (cl.gemm's
 * backend: CLBlast on GPUs, gemm.cl on CPUs) multiplies each group's
 * weights by its rows straight into y; conv2d_epilogue then adds the bias
 * and applies the activation in place when there is any. */
static vm_status_t conv_gemm(vmcl_dev_t *d, const vm_device_t *dev, const vm_tensor_t *x,
                             const vm_tensor_t *w, const vm_tensor_t *bias, const vm_tensor_t *y,
                             const conv_shape_t *s) {
  const window_t *wa = &s->wa;
  int64_t KK = s->KH * s->KW, P = s->OH * s->OW, Cg = s->C / s->groups, Og = s->O / s->groups;
  int64_t rows = s->C * KK, HW = s->H * s->W;
  cl_int err;
  cl_mem cols =
      clCreateBuffer(d->context, CL_MEM_READ_WRITE, (size_t)(rows * P) * sizeof(float), NULL, &err);
  if (err != CL_SUCCESS) return vmcl_status(err, "clCreateBuffer(cl.conv2d columns)");
  vmcl_gemm_shape_t g = {.batch = s->groups,
                         .m = Og,
                         .n = P,
                         .k = Cg * KK,
                         .lda = Cg * KK,
                         .ldb = P,
                         .ldc = P,
                         .sa = Og * Cg * KK,
                         .sb = Cg * KK * P,
                         .sc = Og * P};
  vm_status_t st = VM_STATUS_OK;
  cl_kernel k;
  for (int64_t nb = 0; nb < s->N && !st; nb++) {
    pthread_mutex_lock(&d->lock);
    st = vmcl_family_kernel(d, VMCL_FAM_CONV, vmcl_float_options(VM_F32), "conv2d_im2col", &k);
    if (!st) {
      vmcl_args_t a = vmcl_args_begin(k);
      vmcl_arg_mem(&a, vmcl_tensor_mem(x));
      vmcl_arg_int(&a, vmcl_elem_offset(x) + nb * s->C * HW);
      vmcl_arg_mem(&a, cols);
      int64_t ints[] = {s->H,   s->W,   s->OH,  s->OW,  s->KH,  s->KW,
                        wa->sh, wa->sw, wa->pt, wa->pl, wa->dh, wa->dw};
      for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) vmcl_arg_int(&a, ints[i]);
      st = a.err != CL_SUCCESS
               ? vmcl_status(a.err, "clSetKernelArg")
               : launch_rows(d, k, (size_t)(s->OW + 7) / 8, (size_t)s->OH, (size_t)rows);
    }
    pthread_mutex_unlock(&d->lock);
    if (st) break;
    st = vmcl_gemm_mem(d, dev, &g, VM_F32, vmcl_tensor_mem(w), vmcl_elem_offset(w), cols, 0,
                       vmcl_tensor_mem(y), vmcl_elem_offset(y) + nb * s->O * P, 1.0f, 0.0f);
  }
  if (!st) st = conv_epilogue_launch(d, y, bias, s->r, s->N, s->O, P, s->act, s->am, s->aa);
  /* the queued commands keep the buffer until they finish */
  clReleaseMemObject(cols);
  return st;
}

/* Pointwise, direct: conv.cl's conv2d_1x1 (6 channels x 16 pixels per
 * work-item, the map as one row of P pixels; bias and epilogue in its store). */
static vm_status_t conv_pw_direct(vmcl_dev_t *d, const vm_tensor_t *x, const vm_tensor_t *w,
                                  const vm_tensor_t *bias, const vm_tensor_t *y,
                                  const conv_shape_t *s) {
  int64_t P = s->OH * s->OW, Og = s->O / s->groups;
  cl_kernel k;
  pthread_mutex_lock(&d->lock);
  vm_status_t st =
      vmcl_family_kernel(d, VMCL_FAM_CONV, vmcl_float_options(x->dtype), "conv2d_1x1", &k);
  if (!st) {
    vmcl_args_t a = vmcl_args_begin(k);
    conv_tensor_args(&a, x, w, bias, y);
    int64_t ints[] = {s->C, P, s->O, s->groups};
    for (size_t i = 0; i < 4; i++) vmcl_arg_int(&a, ints[i]);
    conv_epilogue_args(&a, s->act, s->am, s->aa);
    conv_res_args(&a, s->r, y);
    st = a.err != CL_SUCCESS ? vmcl_status(a.err, "clSetKernelArg")
                             : launch_blocks(d, k, (size_t)(P + 15) / 16, (size_t)(Og + 5) / 6,
                                             (size_t)(s->N * s->groups));
  }
  pthread_mutex_unlock(&d->lock);
  return st;
}

/* Pointwise, GEMM (float32): per image and group y = w x straight on the
 * device's GEMM (x is its own im2col), then conv2d_epilogue. */
static vm_status_t conv_pw_gemm(vmcl_dev_t *d, const vm_device_t *dev, const vm_tensor_t *x,
                                const vm_tensor_t *w, const vm_tensor_t *bias, const vm_tensor_t *y,
                                const conv_shape_t *s) {
  int64_t P = s->OH * s->OW, Cg = s->C / s->groups, Og = s->O / s->groups;
  vmcl_gemm_shape_t g = {.batch = s->groups,
                         .m = Og,
                         .n = P,
                         .k = Cg,
                         .lda = Cg,
                         .ldb = P,
                         .ldc = P,
                         .sa = Og * Cg,
                         .sb = Cg * P,
                         .sc = Og * P};
  vm_status_t st = VM_STATUS_OK;
  for (int64_t nb = 0; nb < s->N && !st; nb++) {
    st = vmcl_gemm_mem(d, dev, &g, VM_F32, vmcl_tensor_mem(w), vmcl_elem_offset(w),
                       vmcl_tensor_mem(x), vmcl_elem_offset(x) + nb * s->C * P, vmcl_tensor_mem(y),
                       vmcl_elem_offset(y) + nb * s->O * P, 1.0f, 0.0f);
  }
  if (!st) st = conv_epilogue_launch(d, y, bias, s->r, s->N, s->O, P, s->act, s->am, s->aa);
  return st;
}

/* A float32 pointwise convolution of one pixel per image (the squeeze-
 * excitation blocks' and a classifier head's 1x1 convolutions after a
 * global pooling), groups 1: per image y[n] = w x[n], the M = 1 product
 * of cl.gemm's gemv_t (w is [O, C]: B transposed), then the epilogue. The
 * 16-pixel blocks of conv2d_1x1 would compute 15 masked pixels. */
static vm_status_t conv_one_pixel(vmcl_dev_t *d, const vm_device_t *dev, const vm_tensor_t *x,
                                  const vm_tensor_t *w, const vm_tensor_t *bias,
                                  const vm_tensor_t *y, const vm_tensor_t *r, int64_t N,
                                  int64_t C, int64_t O, int64_t act, double am, double aa) {
  vmcl_gemm_shape_t g = {.batch = N,
                         .m = 1,
                         .n = O,
                         .k = C,
                         .tb = 1,
                         .lda = C,
                         .ldb = C,
                         .ldc = O,
                         .sa = C,
                         .sb = 0,
                         .sc = O};
  VM_RETURN_IF_ERROR(vmcl_gemm_mem(d, dev, &g, VM_F32, vmcl_tensor_mem(x), vmcl_elem_offset(x),
                                   vmcl_tensor_mem(w), vmcl_elem_offset(w), vmcl_tensor_mem(y),
                                   vmcl_elem_offset(y), 1.0f, 0.0f));
  return conv_epilogue_launch(d, y, bias, r, N, O, 1, act, am, aa);
}

/* Whether the Winograd formulations apply: float32, a 3x3 kernel at
 * stride 1 and dilation 1, one group, at least 8 input and output channels
 * (fewer are not worth the three extra launches: the shape is then not
 * measured on them), and scratch buffers (36 transformed elements per tile
 * and channel at most: F(4x4, 3x3)'s 4x4 tiles; F(2x2, 3x3) has 16 per 2x2
 * tile) within CONV_GEMM_MAX_COLS elements each. */
static int conv_wino_ok(const conv_shape_t *s) {
  const window_t *wa = &s->wa;
  if (s->KH != 3 || s->KW != 3 || wa->sh != 1 || wa->sw != 1 || wa->dh != 1 || wa->dw != 1 ||
      s->groups != 1 || s->C < 8 || s->O < 8)
    return 0;
  int64_t NT2 = s->N * ((s->OH + 1) / 2) * ((s->OW + 1) / 2);
  int64_t NT4 = s->N * ((s->OH + 3) / 4) * ((s->OW + 3) / 4);
  int64_t most = s->C > s->O ? s->C : s->O;
  return 16 * most * NT2 <= CONV_GEMM_MAX_COLS && 36 * most * NT4 <= CONV_GEMM_MAX_COLS &&
         36 * s->O * s->C <= CONV_GEMM_MAX_COLS;
}

/* Sets a Winograd step's kernel arguments (ints after the buffers) and
 * launches it over (g0, g1, g2) work-items; under d->lock. */
static vm_status_t wino_launch(vmcl_dev_t *d, cl_kernel k, vmcl_args_t *a, size_t dims, size_t g0,
                               size_t g1, size_t g2) {
  if (a->err != CL_SUCCESS) return vmcl_status(a->err, "clSetKernelArg");
  size_t global[3] = {g0, g1, g2};
  return vmcl_launch(d, k, (cl_uint)dims, global, NULL);
}

/* Winograd F(m x m, 3x3), m 2 or 4 (float32; conv.cl's conv2d_wino_* and
 * conv2d_wino4_*): the filter transform U (A x O x C, A = (m + 2)^2
 * planes), the input transform V (A x C x T over all N images' T tiles of
 * m x m output pixels), the A GEMMs M[b] = U[b] V[b] as one batched call of
 * the device's GEMM, then the output transform with the bias and the
 * epilogue. The filter transform runs on every call unless the call brings
 * U for this m (s->u, the 17-argument form: the compiler transformed the
 * constant weights once). On PoCL it is no small share: A * O * C elements
 * written at stride O * C cost more than the GEMMs on 7x7 and 14x14 maps,
 * where T is 4 to 49 tiles (docs/performance.md). */
static vm_status_t conv_wino(vmcl_dev_t *d, const vm_device_t *dev, const vm_tensor_t *x,
                             const vm_tensor_t *w, const vm_tensor_t *bias, const vm_tensor_t *y,
                             const conv_shape_t *s, int m) {
  int64_t TH = (s->OH + m - 1) / m, TW = (s->OW + m - 1) / m, NT = s->N * TH * TW;
  int64_t OC = s->O * s->C, A = (m + 2) * (m + 2);
  const char *kf = m == 4 ? "conv2d_wino4_filter" : "conv2d_wino_filter";
  const char *ki = m == 4 ? "conv2d_wino4_in" : "conv2d_wino_in";
  const char *ko = m == 4 ? "conv2d_wino4_out" : "conv2d_wino_out";
  size_t fl = sizeof(float);
  cl_int err = CL_SUCCESS;
  /* the given U, or a scratch buffer the filter transform fills */
  int given = s->u && s->um == m;
  cl_mem u = given ? vmcl_tensor_mem(s->u)
                   : clCreateBuffer(d->context, CL_MEM_READ_WRITE, (size_t)(A * OC) * fl, NULL,
                                    &err);
  int64_t uo = given ? vmcl_elem_offset(s->u) : 0;
  if (err != CL_SUCCESS) return vmcl_status(err, "clCreateBuffer(cl.conv2d Winograd filter)");
  if (given) clRetainMemObject(u); /* released below as the scratch one is */
  cl_mem v =
      clCreateBuffer(d->context, CL_MEM_READ_WRITE, (size_t)(A * s->C * NT) * fl, NULL, &err);
  if (err != CL_SUCCESS) {
    clReleaseMemObject(u);
    return vmcl_status(err, "clCreateBuffer(cl.conv2d Winograd input)");
  }
  cl_mem mm =
      clCreateBuffer(d->context, CL_MEM_READ_WRITE, (size_t)(A * s->O * NT) * fl, NULL, &err);
  if (err != CL_SUCCESS) {
    clReleaseMemObject(u);
    clReleaseMemObject(v);
    return vmcl_status(err, "clCreateBuffer(cl.conv2d Winograd products)");
  }
  cl_kernel k;
  pthread_mutex_lock(&d->lock);
  vm_status_t st = VM_STATUS_OK;
  if (!given) st = vmcl_family_kernel(d, VMCL_FAM_CONV, vmcl_float_options(VM_F32), kf, &k);
  if (!st && !given) {
    vmcl_args_t a = vmcl_args_begin(k);
    vmcl_arg_mem(&a, vmcl_tensor_mem(w));
    vmcl_arg_int(&a, vmcl_elem_offset(w));
    vmcl_arg_mem(&a, u);
    vmcl_arg_int(&a, OC);
    st = wino_launch(d, k, &a, 1, (size_t)OC, 1, 1);
  }
  if (!st) st = vmcl_family_kernel(d, VMCL_FAM_CONV, vmcl_float_options(VM_F32), ki, &k);
  if (!st) {
    vmcl_args_t a = vmcl_args_begin(k);
    vmcl_arg_mem(&a, vmcl_tensor_mem(x));
    vmcl_arg_int(&a, vmcl_elem_offset(x));
    vmcl_arg_mem(&a, v);
    int64_t ints[] = {s->C, s->H, s->W, TH, TW, s->wa.pt, s->wa.pl, NT};
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) vmcl_arg_int(&a, ints[i]);
    st = wino_launch(d, k, &a, 3, (size_t)(TW + 3) / 4, (size_t)TH, (size_t)(s->N * s->C));
  }
  pthread_mutex_unlock(&d->lock);
  vmcl_gemm_shape_t g = {.batch = A,
                         .m = s->O,
                         .n = NT,
                         .k = s->C,
                         .lda = s->C,
                         .ldb = NT,
                         .ldc = NT,
                         .sa = OC,
                         .sb = s->C * NT,
                         .sc = s->O * NT};
  if (!st) st = vmcl_gemm_mem(d, dev, &g, VM_F32, u, uo, v, 0, mm, 0, 1.0f, 0.0f);
  if (!st) {
    pthread_mutex_lock(&d->lock);
    st = vmcl_family_kernel(d, VMCL_FAM_CONV, vmcl_float_options(VM_F32), ko, &k);
    if (!st) {
      vmcl_args_t a = vmcl_args_begin(k);
      vmcl_arg_mem(&a, mm);
      vmcl_arg_mem(&a, vmcl_tensor_mem(bias ? bias : y));
      vmcl_arg_int(&a, bias ? vmcl_elem_offset(bias) : 0);
      vmcl_arg_int(&a, bias != NULL);
      vmcl_arg_mem(&a, vmcl_tensor_mem(y));
      vmcl_arg_int(&a, vmcl_elem_offset(y));
      int64_t ints[] = {s->O, s->OH, s->OW, TH, TW, NT};
      for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) vmcl_arg_int(&a, ints[i]);
      conv_epilogue_args(&a, s->act, s->am, s->aa);
      st = wino_launch(d, k, &a, 3, (size_t)(TW + 3) / 4, (size_t)TH, (size_t)(s->N * s->O));
    }
    pthread_mutex_unlock(&d->lock);
  }
  /* the queued commands keep the buffers until they finish */
  clReleaseMemObject(u);
  clReleaseMemObject(v);
  clReleaseMemObject(mm);
  return st;
}

static vm_status_t conv_run(int f, vmcl_dev_t *d, const vm_device_t *dev, const vm_tensor_t *x,
                            const vm_tensor_t *w, const vm_tensor_t *bias, const vm_tensor_t *y,
                            const conv_shape_t *s) {
  if (s->pw)
    return f == CONV_F_GEMM ? conv_pw_gemm(d, dev, x, w, bias, y, s)
                            : conv_pw_direct(d, x, w, bias, y, s);
  if (f == CONV_F_GEMM) return conv_gemm(d, dev, x, w, bias, y, s);
  if (s->r) {
    /* a residual on a kernel without one in its store: the convolution
     * with its bias, then conv2d_epilogue adds r and applies the rest */
    conv_shape_t b = *s;
    b.act = CONV_ACT_NONE, b.am = 1.0, b.aa = 0.0, b.r = NULL;
    VM_RETURN_IF_ERROR(conv_run(f, d, dev, x, w, bias, y, &b));
    return conv_epilogue_launch(d, y, NULL, s->r, s->N, s->O, s->OH * s->OW, s->act, s->am,
                                s->aa);
  }
  if (f == CONV_F_WINO || f == CONV_F_WINO4)
    return conv_wino(d, dev, x, w, bias, y, s, f == CONV_F_WINO4 ? 4 : 2);
  return conv_direct(d, x, w, bias, y, s, f == CONV_F_DIRECT6);
}

/* Seconds of one run of formulation f, waited for. */
static vm_status_t conv_time(int f, vmcl_dev_t *d, const vm_device_t *dev, const vm_tensor_t *x,
                             const vm_tensor_t *w, const vm_tensor_t *bias, const vm_tensor_t *y,
                             const conv_shape_t *s, double *out) {
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  VM_RETURN_IF_ERROR(conv_run(f, d, dev, x, w, bias, y, s));
  cl_int err = clFinish(d->queue);
  if (err != CL_SUCCESS) return vmcl_status(err, "clFinish(cl.conv2d tuning)");
  clock_gettime(CLOCK_MONOTONIC, &t1);
  *out = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  return VM_STATUS_OK;
}

/* A general convolution on the formulation the device's tuning table names
 * for its shape. A shape not in the table yet is measured now: each
 * formulation once to build its kernels, then three interleaved timed
 * runs each; the one with the shortest fastest run is recorded (cl_tune.c) and y holds
 * its result (they sum in different orders, so a first call must leave what every
 * later call computes: a run is bit for bit the same from the first). VMCL_CONV=direct,
 * direct6, gemm, wino or wino4 overrides the table (benchmarks and tests compare them;
 * wino only where conv_wino_ok, direct6 not for pointwise shapes, else the table decides);
 * only float32 has the row-blocked direct6, GEMM and Winograd formulations, the GEMM
 * within CONV_GEMM_MAX_COLS. Shapes Winograd applies to carry " wino" in their key, so
 * that tables measured before it existed measure them again; pointwise ones " pw6"
 * (conv2d_1x1's 6-channel blocks: measured again against the GEMM), the others " d6"
 * (measured again against conv2d_616); calls that bring a transformed filter " wu2"
 * or " wu4" (its m: that Winograd formulation is then cheaper than the same shape
 * without). */
static vm_status_t conv_general(vmcl_dev_t *d, const vm_device_t *dev, const vm_tensor_t *x,
                                const vm_tensor_t *w, const vm_tensor_t *bias, const vm_tensor_t *y,
                                const conv_shape_t *s) {
  int64_t rows = s->C * s->KH * s->KW, P = s->OH * s->OW;
  if (!vm_dtype_equal(x->dtype, VM_F32)) return conv_run(CONV_F_DIRECT, d, dev, x, w, bias, y, s);
  int wino = !s->pw && conv_wino_ok(s), gemm = s->pw || rows * P <= CONV_GEMM_MAX_COLS;
  const char *env = getenv("VMCL_CONV");
  if (env && strcmp(env, "direct") == 0) return conv_run(CONV_F_DIRECT, d, dev, x, w, bias, y, s);
  if (env && strcmp(env, "direct6") == 0 && !s->pw)
    return conv_run(CONV_F_DIRECT6, d, dev, x, w, bias, y, s);
  if (env && strcmp(env, "gemm") == 0 && gemm)
    return conv_run(CONV_F_GEMM, d, dev, x, w, bias, y, s);
  if (env && strcmp(env, "wino") == 0 && wino) return conv_run(CONV_F_WINO, d, dev, x, w, bias, y, s);
  if (env && strcmp(env, "wino4") == 0 && wino)
    return conv_run(CONV_F_WINO4, d, dev, x, w, bias, y, s);
  const window_t *wa = &s->wa;
  char key[160];
  snprintf(key, sizeof(key),
           "conv2d f32 n%lld c%lld h%lld w%lld o%lld k%lldx%lld s%lldx%lld p%lld-%lld-%lld-%lld "
           "d%lldx%lld g%lld%s%s%s%s",
           (long long)s->N, (long long)s->C, (long long)s->H, (long long)s->W, (long long)s->O,
           (long long)s->KH, (long long)s->KW, (long long)wa->sh, (long long)wa->sw,
           (long long)wa->pt, (long long)wa->pl, (long long)wa->pb, (long long)wa->pr,
           (long long)wa->dh, (long long)wa->dw, (long long)s->groups, wino ? " wino" : "",
           s->pw ? " pw6" : "", s->pw ? "" : " d6",
           !wino || !s->u ? "" : s->um == 4 ? " wu4" : " wu2");
  int ok[CONV_F_COUNT] = {1, gemm, wino, wino, !s->pw};
  int f = vmcl_tune_lookup(d, key);
  if (f >= CONV_F_DIRECT && f < CONV_F_COUNT && ok[f]) return conv_run(f, d, dev, x, w, bias, y, s);
  /* the fastest of the runs: load on a shared machine only adds time */
  double best[CONV_F_COUNT] = {0};
  int last = CONV_F_DIRECT;
  for (int r = -1; r < 3; r++) {
    for (int i = 0; i < CONV_F_COUNT; i++) {
      if (!ok[i]) continue;
      double dt = 0;
      VM_RETURN_IF_ERROR(conv_time(i, d, dev, x, w, bias, y, s, &dt));
      if (r == 0 || (r > 0 && dt < best[i])) best[i] = dt;
      last = i;
    }
  }
  f = CONV_F_DIRECT;
  for (int i = 1; i < CONV_F_COUNT; i++)
    if (ok[i] && best[i] < best[f]) f = i;
  char detail[128];
  snprintf(detail, sizeof(detail),
           "direct %.3f ms, gemm %.3f ms, wino %.3f ms, wino4 %.3f ms, direct6 %.3f ms",
           best[0] * 1e3, best[1] * 1e3, best[2] * 1e3, best[3] * 1e3, best[4] * 1e3);
  vmcl_tune_record(d, key, f, detail);
  VM_LOGD("cl.conv2d %s: %s (%s)", key, conv_f_name[f], detail);
  /* y holds the last timed run's result */
  if (f != last) return conv_run(f, d, dev, x, w, bias, y, s);
  return VM_STATUS_OK;
}

/* conv.cl's DW_R: output rows per work-item of conv2d_dw<K>s<SH><SW> */
#define CONV_DW_ROWS 4

/* Whether a convolution with one output channel per group runs on
 * conv.cl's conv2d_dw<K>s<SH><SW> (depthwise: one input channel per group
 * too, a 3x3 or 5x5 kernel, strides 1 or 2 each way, dilation 1) rather than
 * conv2d_og1. VMCL_CONV_DW=og1 keeps conv2d_og1 (benchmarks and tests
 * compare the two). */
static int conv_dw_ok(int64_t C, int64_t O, int64_t KH, int64_t KW, const window_t *wa) {
  if (C != O || KH != KW || (KH != 3 && KH != 5) || wa->sh < 1 || wa->sh > 2 || wa->sw < 1 ||
      wa->sw > 2 || wa->dh != 1 || wa->dw != 1)
    return 0;
  const char *env = getenv("VMCL_CONV_DW");
  return !(env && strcmp(env, "og1") == 0);
}

/* Depthwise on conv2d_dw<K>s<SH><SW> (conv_dw_ok): blocks of 8 pixels of a row
 * x blocks of CONV_DW_ROWS rows x (n, c). */
static vm_status_t conv_dw(vmcl_dev_t *d, const vm_tensor_t *x, const vm_tensor_t *w,
                           const vm_tensor_t *bias, const vm_tensor_t *y, int64_t N, int64_t C,
                           int64_t H, int64_t W, int64_t OH, int64_t OW, int64_t K,
                           const window_t *wa, int64_t act, double am, double aa) {
  char name[24];
  snprintf(name, sizeof(name), "conv2d_dw%llds%lld%lld", (long long)K, (long long)wa->sh,
           (long long)wa->sw);
  cl_kernel k;
  pthread_mutex_lock(&d->lock);
  vm_status_t st = vmcl_family_kernel(d, VMCL_FAM_CONV, vmcl_float_options(x->dtype), name, &k);
  if (!st) {
    vmcl_args_t a = vmcl_args_begin(k);
    conv_tensor_args(&a, x, w, bias, y);
    int64_t ints[] = {C, H, W, OH, OW, wa->pt, wa->pl};
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) vmcl_arg_int(&a, ints[i]);
    conv_epilogue_args(&a, act, am, aa);
    st = a.err != CL_SUCCESS ? vmcl_status(a.err, "clSetKernelArg")
                             : launch_rows(d, k, (size_t)(OW + 7) / 8,
                                           (size_t)(OH + CONV_DW_ROWS - 1) / CONV_DW_ROWS,
                                           (size_t)(N * C));
  }
  pthread_mutex_unlock(&d->lock);
  return st;
}

/* Checks the 17-argument form's u (argument 15): float32 [16, O, C]
 * (F(2x2, 3x3)'s U, *um = 2) or [36, O, C] (F(4x4, 3x3)'s, *um = 4) for a
 * float32 3x3 convolution at stride 1 and dilation 1 of one group. The
 * values are the caller's: a u that is not w's transform gives another
 * (wrong) result wherever the device's tuning picks that formulation. */
static vm_status_t wino_filter_arg(vmcl_op_t *op, const vm_tensor_t *x, const vm_tensor_t *u,
                                   int64_t C, int64_t O, int64_t KH, int64_t KW, int64_t groups,
                                   const window_t *wa, int *um) {
  char buf[96];
  if (!vm_dtype_equal(x->dtype, VM_F32) || !vm_dtype_equal(u->dtype, VM_F32))
    return vmcl_op_error(op, "u (argument 15) has dtype %s and x %s; u applies to float32 only",
                         vm_dtype_str(u->dtype, buf, 32), vm_dtype_str(x->dtype, buf + 32, 32));
  if (KH != 3 || KW != 3 || wa->sh != 1 || wa->sw != 1 || wa->dh != 1 || wa->dw != 1 ||
      groups != 1)
    return vmcl_op_error(op,
                         "u (argument 15) applies to 3x3 convolutions at stride 1, dilation 1 "
                         "and one group only");
  if (u->ndim != 3 || (u->shape[0] != 16 && u->shape[0] != 36) || u->shape[1] != O ||
      u->shape[2] != C) {
    return vmcl_op_error(op,
                         "u (argument 15) is %s; expected [16, %lld, %lld] or [36, %lld, %lld]",
                         vmcl_shape_str(u->shape, u->ndim, buf, sizeof(buf)), (long long)O,
                         (long long)C, (long long)O, (long long)C);
  }
  *um = u->shape[0] == 16 ? 2 : 4;
  return VM_STATUS_OK;
}

static vm_status_t conv_og1_run(vmcl_dev_t *d, const vm_tensor_t *x, const vm_tensor_t *w,
                                const vm_tensor_t *bias, const vm_tensor_t *y, int64_t N,
                                int64_t C, int64_t H, int64_t W, int64_t O, int64_t OH,
                                int64_t OW, int64_t KH, int64_t KW, const window_t *wp,
                                int pointwise, int64_t act, double am, double aa);

vm_status_t vmcl_op_conv2d(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                           void *user) {
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.conv2d", CONV2D_USAGE11, args, nargs);
  int asym = op.nargs == 13 || op.nargs >= 16, epi = op.nargs >= 16, has_u = op.nargs >= 17,
      has_r = op.nargs == 18;
  if (asym)
    op.usage = has_r   ? CONV2D_USAGE18
               : has_u ? CONV2D_USAGE17
               : epi   ? CONV2D_USAGE16
                       : CONV2D_USAGE13;
  if (op.nargs != 11 && op.nargs != 13 && op.nargs != 16 && op.nargs != 17 && op.nargs != 18) {
    return vmcl_op_error(&op,
                         "expected 11 arguments %s, 13 arguments %s, 16 arguments %s, 17 "
                         "arguments %s or 18 arguments %s, got %u",
                         CONV2D_USAGE11, CONV2D_USAGE13, CONV2D_USAGE16, CONV2D_USAGE17,
                         CONV2D_USAGE18, op.nargs);
  }
  uint32_t iy = op.nargs - 1, ig = epi ? 11 : op.nargs - 2;
  /* the epilogue: y = act(conv + bias) * act_mul + act_add */
  int64_t act = CONV_ACT_NONE;
  double am = 1.0, aa = 0.0;
  if (epi) {
    const vm_value_t *v = &op.args[12];
    if (v->kind != VM_VAL_INT) {
      return vmcl_op_error(&op, "act (argument 12) must be an int, got %s",
                           vm_value_kind_name(v->kind));
    }
    act = v->u.i;
    if (act < CONV_ACT_NONE || act > CONV_ACT_HARD_SWISH) {
      return vmcl_op_error(&op,
                           "act (argument 12) is %lld; expected 0 (none), 1 (relu) or 2 "
                           "(hard_swish)",
                           (long long)act);
    }
    VM_RETURN_IF_ERROR(vmcl_op_float(&op, 13, "act_mul", &am));
    VM_RETURN_IF_ERROR(vmcl_op_float(&op, 14, "act_add", &aa));
  }
  vm_tensor_t *x, *w, *bias, *y, *u = NULL, *r = NULL;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "x", &x));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 1, "w", &w));
  VM_RETURN_IF_ERROR(vmcl_op_opt_tensor(&op, 2, "bias", &bias));
  if (has_r) {
    VM_RETURN_IF_ERROR(vmcl_op_opt_tensor(&op, 15, "u", &u));
    VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 16, "r", &r));
  } else if (has_u) {
    VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 15, "u", &u));
  }
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, iy, "y", &y));
  VM_RETURN_IF_ERROR(vmcl_op_float_dtype(&op, x, 0, "x"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, w, 1, "w", x->dtype, "x"));
  if (bias) VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, bias, 2, "bias", x->dtype, "x"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, y, iy, "y", x->dtype, "x"));
  window_t wa;
  int64_t groups;
  VM_RETURN_IF_ERROR(window_attrs(&op, 3, asym, 1, 0, ATTR_MAX, ATTR_MAX, &wa));
  VM_RETURN_IF_ERROR(attr(&op, ig, "groups", 1, &groups));
  if (x->ndim != 4) {
    return vmcl_op_error(&op, "x (argument 0) must be 4-D (N, C, H, W), got %u dims", x->ndim);
  }
  if (w->ndim != 4) {
    return vmcl_op_error(&op, "w (argument 1) must be 4-D (O, C/groups, KH, KW), got %u dims",
                         w->ndim);
  }
  int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
  int64_t O = w->shape[0], KH = w->shape[2], KW = w->shape[3];
  if (C % groups != 0 || O % groups != 0) {
    return vmcl_op_error(&op,
                         "groups (argument %u) is %lld, which must divide the %lld input and "
                         "%lld output channels",
                         ig, (long long)groups, (long long)C, (long long)O);
  }
  if (w->shape[1] != C / groups) {
    return vmcl_op_error(&op,
                         "w (argument 1) has %lld input channels per group, expected %lld "
                         "(C %lld / groups %lld)",
                         (long long)w->shape[1], (long long)(C / groups), (long long)C,
                         (long long)groups);
  }
  if (KH < 1 || KW < 1) {
    return vmcl_op_error(&op, "w (argument 1) has an empty %lldx%lld kernel", (long long)KH,
                         (long long)KW);
  }
  if (bias) VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, bias, 2, "bias", &O, 1));
  VM_RETURN_IF_ERROR(window_fits(&op, "dilated kernel", H, W, KH, KW, &wa));
  int64_t OH = (H + wa.pt + wa.pb - wa.eh) / wa.sh + 1,
          OW = (W + wa.pl + wa.pr - wa.ew) / wa.sw + 1;
  int64_t yshape[4] = {N, O, OH, OW};
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, y, iy, "y", yshape, 4));
  int um = 0;
  if (u) VM_RETURN_IF_ERROR(wino_filter_arg(&op, x, u, C, O, KH, KW, groups, &wa, &um));
  if (r) {
    VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, r, 16, "r", x->dtype, "x"));
    VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, r, 16, "r", yshape, 4));
    /* r is read after y is written where the epilogue runs apart */
    VM_RETURN_IF_ERROR(vmcl_op_disjoint(&op, r, 16, "r", y, 17, "y", 0));
  }
  if (vm_tensor_numel(y) == 0) return VM_STATUS_OK;

  vmcl_dev_t *d = op.d;
  /* A map one pixel wide under a kernel one tap wide and no column pads
   * (a 1-D convolution along H, as Conv1d exports as [C, L, 1]) is the same
   * convolution along W of the map seen as [C, 1, H] (x, w and y lie in
   * memory alike): the kernels' 8-pixel blocks then run along a row, where
   * a tap's pixels are one vector load, instead of across 8 rows, where
   * each is gathered. */
  if (W == 1 && KW == 1 && OW == 1 && H > 1 && wa.pl == 0 && wa.pr == 0) {
    window_t t = wa;
    wa.sh = t.sw, wa.sw = t.sh, wa.pt = t.pl, wa.pl = t.pt, wa.pb = t.pr, wa.pr = t.pb;
    wa.dh = t.dw, wa.dw = t.dh, wa.eh = t.ew, wa.ew = t.eh;
    W = H, H = 1, KW = KH, KH = 1, OW = OH, OH = 1;
  }
  int64_t P = OH * OW, Og = O / groups;
  /* one output channel per group (depthwise): conv2d_og1, whose work-items
   * each compute 8 pixels of one channel; pointwise: conv2d_1x1; otherwise
   * conv2d's 8 channel x 8 pixel blocks (see conv.cl) */
  int og1 = Og == 1;
  /* A 1x1 kernel at stride 1 without padding maps output pixel p to input
   * pixel p: the kernels see the map as one row of H*W pixels, so every
   * full block is one vector load, also across row ends. With more than
   * one output channel per group it runs on conv2d_1x1 (6 channels x 16
   * pixels per work-item) or, float32, as the GEMM y = w x itself, which one
   * measured faster for the shape (conv_general's tuning table); else on
   * conv2d_og1 as one row. */
  int pointwise = KH == 1 && KW == 1 && wa.sh == 1 && wa.sw == 1 && wa.pt == 0 && wa.pl == 0 &&
                  wa.pb == 0 && wa.pr == 0;
  int pw16 = pointwise && !og1;
  if (pw16 && P == 1 && groups == 1 && vm_dtype_equal(x->dtype, VM_F32) &&
      (!bias || vm_dtype_equal(bias->dtype, VM_F32)))
    return conv_one_pixel(d, op.dev, x, w, bias, y, r, N, C, O, act, am, aa);
  if (!og1) {
    conv_shape_t s = {N, C, H, W, O, OH, OW, KH, KW, groups, act, am, aa, wa, pw16, u, um, r};
    return conv_general(d, op.dev, x, w, bias, y, &s);
  }
  if (r) {
    /* one output channel per group: the kernels' store has no residual; the
     * convolution with its bias, then conv2d_epilogue adds r and the rest */
    int64_t fa = act;
    double fm = am, fd = aa;
    act = CONV_ACT_NONE, am = 1.0, aa = 0.0;
    vm_status_t st = conv_og1_run(d, x, w, bias, y, N, C, H, W, O, OH, OW, KH, KW, &wa,
                                  pointwise, act, am, aa);
    return st ? st : conv_epilogue_launch(d, y, NULL, r, N, O, P, fa, fm, fd);
  }
  return conv_og1_run(d, x, w, bias, y, N, C, H, W, O, OH, OW, KH, KW, &wa, pointwise, act, am,
                      aa);
}

/* One output channel per group: conv2d_dw<K>s<SH><SW> where conv_dw_ok, else
 * conv2d_og1 (8-pixel blocks of a row x rows x (n, o): conv.cl). */
static vm_status_t conv_og1_run(vmcl_dev_t *d, const vm_tensor_t *x, const vm_tensor_t *w,
                                const vm_tensor_t *bias, const vm_tensor_t *y, int64_t N,
                                int64_t C, int64_t H, int64_t W, int64_t O, int64_t OH,
                                int64_t OW, int64_t KH, int64_t KW, const window_t *wp,
                                int pointwise, int64_t act, double am, double aa) {
  window_t wa = *wp;
  int64_t P = OH * OW;
  if (conv_dw_ok(C, O, KH, KW, &wa)) return conv_dw(d, x, w, bias, y, N, C, H, W, OH, OW, KH, &wa,
                                                    act, am, aa);
  cl_kernel k;
  vm_status_t st;
  pthread_mutex_lock(&d->lock);
  /* one output channel per group: conv2d_og1, 8-pixel blocks of a row x
   * rows x (n, o) (conv.cl) */
  st = vmcl_family_kernel(d, VMCL_FAM_CONV, vmcl_float_options(x->dtype), "conv2d_og1", &k);
  if (st) goto done;
  vmcl_args_t a = vmcl_args_begin(k);
  conv_tensor_args(&a, x, w, bias, y);
  if (pointwise) {
    W = OW = P;
    H = OH = 1;
  }
  /* the end pads only shape the output; conv2d_og1 takes groups as O */
  int64_t ints[] = {C, H, W, O, OH, OW, KH, KW, wa.sh, wa.sw, wa.pt, wa.pl, wa.dh, wa.dw};
  for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) vmcl_arg_int(&a, ints[i]);
  conv_epilogue_args(&a, act, am, aa);
  if (a.err != CL_SUCCESS) {
    st = vmcl_status(a.err, "clSetKernelArg");
    goto done;
  }
  st = launch_rows(d, k, (size_t)(OW + 7) / 8, (size_t)OH, (size_t)(N * O));
done:
  pthread_mutex_unlock(&d->lock);
  return st;
}

/* cl.conv_transpose2d's GEMM path: the columns (W^T X per group, float32)
 * may hold at most this many times y's elements (a 4x4 kernel at stride 2
 * needs 4): large kernels whose outputs the pads crop away stay on the
 * direct kernel instead of taking a scratch buffer far larger than y. */
#define CONV_T_COLS_PER_Y 8

/* Whether cl.conv_transpose2d takes the GEMM path: float32 on a device
 * whose GEMM is the tiled kernel (CPU devices; measured faster there:
 * docs/performance.md), with columns of cols elements. VMCL_CONV_T=direct
 * or gemm overrides the device choice (benchmarks and tests compare the
 * two on one device); the limits hold either way. ny: y's elements per
 * image. */
static int conv_t_use_gemm(vmcl_dev_t *d, const vm_device_t *dev, vm_dtype_t dt, int64_t cols,
                           int64_t ny) {
  if (!vm_dtype_equal(dt, VM_F32) || cols > (int64_t)VMCL_MAX_ELEMENTS ||
      cols > CONV_T_COLS_PER_Y * ny) {
    return 0;
  }
  const char *env = getenv("VMCL_CONV_T");
  if (env && strcmp(env, "direct") == 0) return 0;
  if (env && strcmp(env, "gemm") == 0) return 1;
  return vmcl_gemm_is_tiled(d, dev, dt);
}

/* The shape of a conv_transpose2d call, as the kernels take it. */
typedef struct conv_t_shape {
  int64_t N, C, H, W, O, OH, OW, KH, KW, groups, nrh, nrw;
  window_t wa;
} conv_t_shape_t;

/* cl.conv_transpose2d as, per image, one GEMM per group into a scratch
 * buffer of columns, cols[o * KK + tap][ih * W + iw] = sum over the
 * group's c of w[c, o, tap] x[c, ih, iw] (w read transposed in place),
 * then conv_transpose2d_col2im (conv.cl) gathering the columns of the
 * taps that reach each output element, with the bias. */
static vm_status_t conv_t_gemm(vmcl_dev_t *d, const vm_tensor_t *x, const vm_tensor_t *w,
                               const vm_tensor_t *bias, const vm_tensor_t *y,
                               const conv_t_shape_t *s) {
  int64_t KK = s->KH * s->KW, HW = s->H * s->W, Cg = s->C / s->groups, Og = s->O / s->groups;
  /* col2im: blocks of 8 of a column phase x rows x (o, column phase) */
  size_t b0 = (size_t)((s->OW + s->wa.sw - 1) / s->wa.sw + 7) / 8;
  cl_int err;
  cl_mem cols = clCreateBuffer(d->context, CL_MEM_READ_WRITE,
                               (size_t)(s->O * KK * HW) * sizeof(float), NULL, &err);
  if (err != CL_SUCCESS) return vmcl_status(err, "clCreateBuffer(cl.conv_transpose2d columns)");
  vmcl_gemm_shape_t g = {.batch = s->groups,
                         .m = Og * KK,
                         .n = HW,
                         .k = Cg,
                         .ta = 1,
                         .tb = 0,
                         .lda = Og * KK,
                         .ldb = HW,
                         .ldc = HW,
                         .sa = Cg * Og * KK,
                         .sb = Cg * HW,
                         .sc = Og * KK * HW};
  vm_status_t st = VM_STATUS_OK;
  for (int64_t nb = 0; nb < s->N && !st; nb++) {
    st = vmcl_gemm_tiled(d, &g, VM_F32, vmcl_tensor_mem(w), vmcl_elem_offset(w), vmcl_tensor_mem(x),
                         vmcl_elem_offset(x) + nb * s->C * HW, cols, 0, 1.0f, 0.0f);
    if (st) break;
    cl_kernel k;
    pthread_mutex_lock(&d->lock);
    st = vmcl_family_kernel(d, VMCL_FAM_CONV, vmcl_float_options(VM_F32), "conv_transpose2d_col2im",
                            &k);
    if (!st) {
      vmcl_args_t a = vmcl_args_begin(k);
      vmcl_arg_mem(&a, cols);
      vmcl_arg_mem(&a, vmcl_tensor_mem(bias ? bias : x));
      vmcl_arg_int(&a, bias ? vmcl_elem_offset(bias) : 0);
      vmcl_arg_int(&a, bias != NULL);
      vmcl_arg_mem(&a, vmcl_tensor_mem(y));
      vmcl_arg_int(&a, vmcl_elem_offset(y) + nb * s->O * s->OH * s->OW);
      int64_t ints[] = {s->O,     s->H,     s->W,     s->OH,    s->OW,    s->KH,    s->KW,
                        s->wa.sh, s->wa.sw, s->wa.pt, s->wa.pl, s->wa.dh, s->wa.dw, s->nrw};
      for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) vmcl_arg_int(&a, ints[i]);
      st = a.err != CL_SUCCESS ? vmcl_status(a.err, "clSetKernelArg")
                               : launch_rows(d, k, b0, (size_t)s->OH, (size_t)(s->O * s->nrw));
    }
    pthread_mutex_unlock(&d->lock);
  }
  /* the queued GEMMs and gathers keep the buffer until they finish */
  clReleaseMemObject(cols);
  return st;
}

/* Whether cl.conv_transpose2d takes conv_transpose2d_ks (conv.cl): the
 * kernel equals the stride (each output pixel from one input pixel), no
 * dilation, pads that only crop (no output_padding: every output row and
 * column then has its input pixel). VMCL_CONV_T=direct or gemm turns it
 * off (benchmarks compare the formulations on one shape). */
static int conv_t_use_ks(int64_t KH, int64_t KW, const window_t *wa) {
  const char *env = getenv("VMCL_CONV_T");
  if (env && (strcmp(env, "direct") == 0 || strcmp(env, "gemm") == 0)) return 0;
  return KH == wa->sh && KW == wa->sw && (wa->dh == 1 || KH == 1) && (wa->dw == 1 || KW == 1) &&
         wa->pt >= 0 && wa->pl >= 0 && wa->pb >= 0 && wa->pr >= 0;
}

/* Launches conv_transpose2d_ks over g0 pixel blocks x g1 row blocks x
 * g2 planes: work-groups of the largest power of two up to 8 that divides
 * g1 row blocks (few rows, as a one-channel output has, leave no idle
 * work-items) by pixel blocks that fill the preferred size. */
static vm_status_t launch_ks(vmcl_dev_t *d, cl_kernel k, size_t g0, size_t g1, size_t g2) {
  size_t l = vmcl_local_size(d, k, 64), l1 = 1;
  while (l1 < 8 && g1 % (l1 * 2) == 0 && l1 * 2 <= l) l1 *= 2;
  size_t local[3] = {l / l1, l1, 1};
  size_t global[3] = {(g0 + local[0] - 1) / local[0] * local[0], g1, g2};
  return vmcl_launch(d, k, 3, global, local);
}

/* cl.conv_transpose2d on conv_transpose2d_ks: 8-pixel blocks of the input
 * rows x blocks of 8 rows (o, kh, kw) x (n, group); the caller checked
 * that N * groups fits the kernel's index. */
static vm_status_t conv_t_ks(vmcl_dev_t *d, const vm_tensor_t *x, const vm_tensor_t *w,
                             const vm_tensor_t *bias, const vm_tensor_t *y,
                             const conv_t_shape_t *s) {
  cl_kernel k;
  pthread_mutex_lock(&d->lock);
  vm_status_t st = vmcl_family_kernel(d, VMCL_FAM_CONV, vmcl_float_options(x->dtype),
                                      "conv_transpose2d_ks", &k);
  if (!st) {
    vmcl_args_t a = vmcl_args_begin(k);
    conv_tensor_args(&a, x, w, bias, y);
    int64_t ints[] = {s->C,  s->H,  s->W,     s->O,     s->OH,    s->OW,
                      s->KH, s->KW, s->wa.pt, s->wa.pl, s->groups};
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) vmcl_arg_int(&a, ints[i]);
    st = a.err != CL_SUCCESS
             ? vmcl_status(a.err, "clSetKernelArg")
             : launch_ks(d, k, (size_t)(s->H * ((s->W + 7) / 8)),
                         (size_t)((s->O / s->groups * s->KH * s->KW + 7) / 8),
                         (size_t)(s->N * s->groups));
  }
  pthread_mutex_unlock(&d->lock);
  return st;
}

#define CONV_T_USAGE                                                                        \
  "(x, w, bias|none, stride_h, stride_w, pad_top, pad_left, pad_bottom, pad_right, dil_h, " \
  "dil_w, groups, y)"

vm_status_t vmcl_op_conv_transpose2d(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                     vm_value_t *out, void *user) {
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.conv_transpose2d", CONV_T_USAGE, args, nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 13, 13));
  vm_tensor_t *x, *w, *bias, *y;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "x", &x));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 1, "w", &w));
  VM_RETURN_IF_ERROR(vmcl_op_opt_tensor(&op, 2, "bias", &bias));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 12, "y", &y));
  VM_RETURN_IF_ERROR(vmcl_op_float_dtype(&op, x, 0, "x"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, w, 1, "w", x->dtype, "x"));
  if (bias) VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, bias, 2, "bias", x->dtype, "x"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, y, 12, "y", x->dtype, "x"));
  window_t wa;
  int64_t groups;
  /* negative pads enlarge the output (ONNX's output_padding is a negative
   * end pad) */
  VM_RETURN_IF_ERROR(window_attrs(&op, 3, 1, 1, -ATTR_MAX, ATTR_MAX, ATTR_MAX, &wa));
  VM_RETURN_IF_ERROR(attr(&op, 11, "groups", 1, &groups));
  if (x->ndim != 4) {
    return vmcl_op_error(&op, "x (argument 0) must be 4-D (N, C, H, W), got %u dims", x->ndim);
  }
  if (w->ndim != 4) {
    return vmcl_op_error(&op, "w (argument 1) must be 4-D (C, O/groups, KH, KW), got %u dims",
                         w->ndim);
  }
  int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
  int64_t KH = w->shape[2], KW = w->shape[3], O = w->shape[1] * groups;
  if (C % groups != 0) {
    return vmcl_op_error(&op,
                         "groups (argument 11) is %lld, which must divide the %lld input "
                         "channels",
                         (long long)groups, (long long)C);
  }
  if (w->shape[0] != C) {
    return vmcl_op_error(&op,
                         "w (argument 1) has %lld input channels, expected %lld (the "
                         "channels of x)",
                         (long long)w->shape[0], (long long)C);
  }
  if (KH < 1 || KW < 1) {
    return vmcl_op_error(&op, "w (argument 1) has an empty %lldx%lld kernel", (long long)KH,
                         (long long)KW);
  }
  if (bias) VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, bias, 2, "bias", &O, 1));
  /* every term is below 2^52: no int64 overflow */
  int64_t eh = wa.dh * (KH - 1) + 1, ew = wa.dw * (KW - 1) + 1;
  int64_t OH = (H - 1) * wa.sh + eh - wa.pt - wa.pb, OW = (W - 1) * wa.sw + ew - wa.pl - wa.pr;
  if (H > 0 && W > 0 && (OH < 1 || OW < 1)) {
    return vmcl_op_error(&op, "the pads leave an output of %lldx%lld", (long long)OH,
                         (long long)OW);
  }
  if (H == 0 || W == 0) OH = OW = 0; /* nothing scatters: y must be empty too */
  int64_t yshape[4] = {N, O, OH, OW};
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, y, 12, "y", yshape, 4));
  /* the kernel's oh + pad - kh * dil stays in int range either way */
  if (OH + llabs(wa.pt) + eh + wa.sh > INT_MAX || OW + llabs(wa.pl) + ew + wa.sw > INT_MAX) {
    return vmcl_op_error(&op, "output extent exceeds the 32-bit index range");
  }
  if (vm_tensor_numel(y) == 0) return VM_STATUS_OK;
  /* per stride phase (conv.cl), blocks of 8 pixels of the phase's grid x
   * blocks of 8 output channels x (n, group, phase); phases past the
   * output have no pixels and are not launched */
  int64_t Og = O / groups, nrh = wa.sh < OH ? wa.sh : OH, nrw = wa.sw < OW ? wa.sw : OW;
  int64_t qh = (OH + wa.sh - 1) / wa.sh, qw = (OW + wa.sw - 1) / wa.sw;
  int64_t nz = N * groups * nrh * nrw;
  if (nz > (int64_t)VMCL_MAX_ELEMENTS) {
    return vmcl_op_error(&op,
                         "y (argument 12) needs %lld work-groups of phases, more than the %lld "
                         "that the kernel indexes",
                         (long long)nz, (long long)VMCL_MAX_ELEMENTS);
  }

  vmcl_dev_t *d = op.d;
  if (conv_t_use_ks(KH, KW, &wa)) {
    conv_t_shape_t s = {N, C, H, W, O, OH, OW, KH, KW, groups, nrh, nrw, wa};
    return conv_t_ks(d, x, w, bias, y, &s);
  }
  if (conv_t_use_gemm(d, op.dev, x->dtype, O * KH * KW * H * W, vm_tensor_numel(y) / N)) {
    conv_t_shape_t s = {N, C, H, W, O, OH, OW, KH, KW, groups, nrh, nrw, wa};
    return conv_t_gemm(d, x, w, bias, y, &s);
  }
  cl_kernel k;
  vm_status_t st;
  pthread_mutex_lock(&d->lock);
  st = vmcl_family_kernel(d, VMCL_FAM_CONV, vmcl_float_options(x->dtype), "conv_transpose2d", &k);
  if (st) goto done;
  vmcl_args_t a = vmcl_args_begin(k);
  conv_tensor_args(&a, x, w, bias, y);
  int64_t ints[] = {C,     H,     W,     O,     OH,    OW,     KH,  KW, wa.sh,
                    wa.sw, wa.pt, wa.pl, wa.dh, wa.dw, groups, nrh, nrw};
  for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) vmcl_arg_int(&a, ints[i]);
  if (a.err != CL_SUCCESS) {
    st = vmcl_status(a.err, "clSetKernelArg");
    goto done;
  }
  st = launch_blocks(d, k, (size_t)(qh * qw + 7) / 8, (size_t)(Og + 7) / 8, (size_t)nz);
done:
  pthread_mutex_unlock(&d->lock);
  return st;
}

#define POOL2D_USAGE8 "(x, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, y)"
#define POOL2D_USAGE14                                                                     \
  "(x, kernel_h, kernel_w, stride_h, stride_w, pad_top, pad_left, pad_bottom, pad_right, " \
  "dil_h, dil_w, ceil_mode, count_include_pad, y)"

/* ONNX's pooled extent of one axis: in padded by pb and pe, a window of
 * dilated extent e, stride s; with ceil a last partial window counts
 * unless it starts in the end padding. window_fits bounds the terms. */
static int64_t pool_extent(int64_t in, int64_t pb, int64_t pe, int64_t e, int64_t s, int ceil) {
  int64_t span = in + pb + pe - e;
  int64_t out = (ceil ? (span + s - 1) / s : span / s) + 1;
  if (ceil && (out - 1) * s >= in + pb) out--;
  return out;
}

/* pool.cl's pool2d_max3s2 over nc maps of H x W into OH x OW: one
 * work-item per eight outputs of a row. */
static vm_status_t pool_max3s2(vmcl_dev_t *d, const vm_tensor_t *x, const vm_tensor_t *y,
                               int64_t nc, int64_t H, int64_t W, int64_t OH, int64_t OW,
                               const window_t *wa) {
  cl_kernel k;
  pthread_mutex_lock(&d->lock);
  vm_status_t st =
      vmcl_family_kernel(d, VMCL_FAM_POOL, vmcl_float_options(x->dtype), "pool2d_max3s2", &k);
  if (!st) {
    vmcl_args_t a = vmcl_args_begin(k);
    vmcl_arg_mem(&a, vmcl_tensor_mem(x));
    vmcl_arg_int(&a, vmcl_elem_offset(x));
    vmcl_arg_mem(&a, vmcl_tensor_mem(y));
    vmcl_arg_int(&a, vmcl_elem_offset(y));
    int64_t items = nc * OH * ((OW + 7) / 8);
    int64_t ints[] = {items, H, W, OH, OW, wa->pt, wa->pl};
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) vmcl_arg_int(&a, ints[i]);
    st = a.err != CL_SUCCESS ? vmcl_status(a.err, "clSetKernelArg")
                             : vmcl_launch_1d(d, k, (size_t)items, vmcl_local_size(d, k, 256));
  }
  pthread_mutex_unlock(&d->lock);
  return st;
}

vm_status_t vmcl_op_pool2d(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                           void *user) {
  const char *opname = user;
  char name[32];
  snprintf(name, sizeof(name), "cl.pool2d.%s", opname);
  vmcl_op_t op;
  vmcl_op_init(&op, name, POOL2D_USAGE8, args, nargs);
  int full = op.nargs == 14;
  if (full) op.usage = POOL2D_USAGE14;
  if (op.nargs != 8 && op.nargs != 14) {
    return vmcl_op_error(&op, "expected 8 arguments %s or 14 arguments %s, got %u", POOL2D_USAGE8,
                         POOL2D_USAGE14, op.nargs);
  }
  uint32_t iy = op.nargs - 1;
  vm_tensor_t *x, *y;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "x", &x));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, iy, "y", &y));
  VM_RETURN_IF_ERROR(vmcl_op_float_dtype(&op, x, 0, "x"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, y, iy, "y", x->dtype, "x"));
  if (x->ndim != 4) {
    return vmcl_op_error(&op, "x (argument 0) must be 4-D (N, C, H, W), got %u dims", x->ndim);
  }
  int64_t kh, kw, ceil_mode = 0, include_pad = 0;
  VM_RETURN_IF_ERROR(attr(&op, 1, "kernel_h", 1, &kh));
  VM_RETURN_IF_ERROR(attr(&op, 2, "kernel_w", 1, &kw));
  window_t wa;
  if (full) {
    VM_RETURN_IF_ERROR(window_attrs(&op, 3, 1, 1, 0, ATTR_MAX, ATTR_MAX, &wa));
    VM_RETURN_IF_ERROR(vmcl_op_int(&op, 11, "ceil_mode", 0, 1, &ceil_mode));
    VM_RETURN_IF_ERROR(vmcl_op_int(&op, 12, "count_include_pad", 0, 1, &include_pad));
  } else {
    /* the short form keeps every window on the input: pad < kernel */
    VM_RETURN_IF_ERROR(window_attrs(&op, 3, 0, 0, 0, kh - 1, kw - 1, &wa));
  }
  int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
  VM_RETURN_IF_ERROR(window_fits(&op, "window", H, W, kh, kw, &wa));
  int64_t OH = pool_extent(H, wa.pt, wa.pb, wa.eh, wa.sh, (int)ceil_mode);
  int64_t OW = pool_extent(W, wa.pl, wa.pr, wa.ew, wa.sw, (int)ceil_mode);
  int64_t yshape[4] = {N, C, OH, OW};
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, y, iy, "y", yshape, 4));
  int64_t n = vm_tensor_numel(y);
  if (n == 0) return VM_STATUS_OK;

  vmcl_dev_t *d = op.d;
  /* max over 3x3 at stride 2, dilation 1: pool.cl's pool2d_max3s2, eight
   * outputs of a row per work-item from whole-row loads; VMCL_POOL=generic
   * keeps pool2d_max (benchmarks and tests compare the two). Its int
   * column arithmetic runs up to 2 x (OW + 8) - PW + 17: rows so wide that
   * this nears 2^31 take the general kernel */
  const char *env = getenv("VMCL_POOL");
  if (strcmp(opname, "max") == 0 && kh == 3 && kw == 3 && wa.sh == 2 && wa.sw == 2 &&
      wa.dh == 1 && wa.dw == 1 && !(env && strcmp(env, "generic") == 0) &&
      W + wa.pl + wa.pr + 64 <= INT_MAX && 2 * (OW + 8) + 32 <= INT_MAX)
    return pool_max3s2(d, x, y, N * C, H, W, OH, OW, &wa);
  char kname[24];
  snprintf(kname, sizeof(kname), "pool2d_%s", opname);
  cl_kernel k;
  vm_status_t st;
  pthread_mutex_lock(&d->lock);
  st = vmcl_family_kernel(d, VMCL_FAM_POOL, vmcl_float_options(x->dtype), kname, &k);
  if (st) goto done;
  vmcl_args_t a = vmcl_args_begin(k);
  vmcl_arg_mem(&a, vmcl_tensor_mem(x));
  vmcl_arg_int(&a, vmcl_elem_offset(x));
  vmcl_arg_mem(&a, vmcl_tensor_mem(y));
  vmcl_arg_int(&a, vmcl_elem_offset(y));
  int64_t items = n / OW * ((OW + 3) / 4); /* four outputs of a row each (pool.cl) */
  int64_t ints[] = {items, H,     W,     OH,        OW,        kh,    kw,    wa.sh,
                    wa.sw, wa.pt, wa.pl, H + wa.pb, W + wa.pr, wa.dh, wa.dw, include_pad};
  for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) vmcl_arg_int(&a, ints[i]);
  if (a.err != CL_SUCCESS) {
    st = vmcl_status(a.err, "clSetKernelArg");
    goto done;
  }
  st = vmcl_launch_1d(d, k, (size_t)items, vmcl_local_size(d, k, 256));
done:
  pthread_mutex_unlock(&d->lock);
  return st;
}

vm_status_t vmcl_op_global_avg_pool2d(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                      vm_value_t *out, void *user) {
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.pool2d.global_avg", "(x, y)", args, nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 2, 2));
  vm_tensor_t *x, *y;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "x", &x));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 1, "y", &y));
  VM_RETURN_IF_ERROR(vmcl_op_float_dtype(&op, x, 0, "x"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, y, 1, "y", x->dtype, "x"));
  if (x->ndim != 4) {
    return vmcl_op_error(&op, "x (argument 0) must be 4-D (N, C, H, W), got %u dims", x->ndim);
  }
  int64_t yshape[4] = {x->shape[0], x->shape[1], 1, 1};
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, y, 1, "y", yshape, 4));
  if (vm_tensor_numel(y) == 0) return VM_STATUS_OK;
  static const int reduce[4] = {0, 0, 1, 1};
  return vmcl_reduce_launch(op.d, VMCL_REDUCE_MEAN, x, reduce, y);
}

/* Most C + R of cl.squeeze_excite: its pooled means and hidden values sit
 * in local memory (16 KiB as float, within OpenCL's 32 KiB minimum), and
 * no more than the device has (checked in bytes below). */
#define SE_MAX_LOCAL 4096

vm_status_t vmcl_op_squeeze_excite(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                   vm_value_t *out, void *user) {
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.squeeze_excite", "(x, w1, b1, w2, b2, gate, alpha, beta, y)", args, nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 9, 9));
  vm_tensor_t *x, *w1, *b1, *w2, *b2, *y;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "x", &x));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 1, "w1", &w1));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 2, "b1", &b1));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 3, "w2", &w2));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 4, "b2", &b2));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 8, "y", &y));
  VM_RETURN_IF_ERROR(vmcl_op_float_dtype(&op, x, 0, "x"));
  vm_tensor_t *same[] = {w1, b1, w2, b2, y};
  static const char *const what[] = {"w1", "b1", "w2", "b2", "y"};
  static const uint32_t idx[] = {1, 2, 3, 4, 8};
  for (int i = 0; i < 5; i++)
    VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, same[i], idx[i], what[i], x->dtype, "x"));
  if (x->ndim != 4) {
    return vmcl_op_error(&op, "x (argument 0) must be 4-D (N, C, H, W), got %u dims", x->ndim);
  }
  if (w1->ndim != 2) {
    return vmcl_op_error(&op, "w1 (argument 1) must be 2-D (R, C), got %u dims", w1->ndim);
  }
  int64_t N = x->shape[0], C = x->shape[1], HW = x->shape[2] * x->shape[3], R = w1->shape[0];
  int64_t s_w1[2] = {R, C}, s_b1[1] = {R}, s_w2[2] = {C, R}, s_b2[1] = {C};
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, w1, 1, "w1", s_w1, 2));
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, b1, 2, "b1", s_b1, 1));
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, w2, 3, "w2", s_w2, 2));
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, b2, 4, "b2", s_b2, 1));
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, y, 8, "y", x->shape, 4));
  int64_t gate;
  double alpha, beta;
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 5, "gate", 0, 1, &gate));
  VM_RETURN_IF_ERROR(vmcl_op_float(&op, 6, "alpha", &alpha));
  VM_RETURN_IF_ERROR(vmcl_op_float(&op, 7, "beta", &beta));
  if (C + R > SE_MAX_LOCAL) {
    return vmcl_op_error(&op, "C + R = %lld: at most %d (channels and hidden values are kept in "
                         "local memory); write the block as separate operators",
                         (long long)(C + R), SE_MAX_LOCAL);
  }
  uint64_t lbytes = (uint64_t)(C + R) * vmcl_real_bytes(x->dtype);
  if (lbytes > op.dev->props.local_mem_bytes) {
    return vmcl_op_error(&op,
                         "C + R = %lld needs %llu bytes of local memory, the device has %llu; "
                         "write the block as separate operators",
                         (long long)(C + R), (unsigned long long)lbytes,
                         (unsigned long long)op.dev->props.local_mem_bytes);
  }
  /* each element of y is written by the work-item that reads it there,
   * after the means: x itself is fine, a shifted view of it is not */
  VM_RETURN_IF_ERROR(vmcl_op_disjoint(&op, x, 0, "x", y, 8, "y", 1));
  if (vm_tensor_numel(y) == 0) return VM_STATUS_OK;
  if (R == 0) {
    return vmcl_op_error(&op, "w1 (argument 1) has no rows (R = 0)");
  }
  vmcl_dev_t *d = op.d;
  cl_kernel k;
  vm_status_t st;
  pthread_mutex_lock(&d->lock);
  st = vmcl_family_kernel(d, VMCL_FAM_REDUCE, vmcl_float_options(x->dtype), "squeeze_excite", &k);
  if (st) goto done;
  /* one work-group per image: its work-items share the channels */
  size_t local = vmcl_local_size(d, k, 64);
  vmcl_args_t a = vmcl_args_begin(k);
  vm_tensor_t *in[] = {x, w1, b1, w2, b2, y};
  for (int i = 0; i < 6; i++) {
    vmcl_arg_mem(&a, vmcl_tensor_mem(in[i]));
    vmcl_arg_int(&a, vmcl_elem_offset(in[i]));
  }
  vmcl_arg_int(&a, C);
  vmcl_arg_int(&a, R);
  vmcl_arg_int(&a, HW);
  vmcl_arg_int(&a, gate);
  vmcl_arg_real(&a, x->dtype, alpha);
  vmcl_arg_real(&a, x->dtype, beta);
  vmcl_arg_real(&a, x->dtype, 1.0 / (double)HW);
  vmcl_arg_local(&a, (size_t)C * vmcl_real_bytes(x->dtype));
  vmcl_arg_local(&a, (size_t)R * vmcl_real_bytes(x->dtype));
  if (a.err != CL_SUCCESS) {
    st = vmcl_status(a.err, "clSetKernelArg");
    goto done;
  }
  st = vmcl_launch_1d(d, k, (size_t)N * local, local);
done:
  pthread_mutex_unlock(&d->lock);
  return st;
}
