/* The example CNN: two conv3x3 + relu + maxpool stages, global average
 * pool, a classifier gemm + bias and a softmax. The first stage's bias +
 * relu is a kernel the executable carries (cl.kernel), so the model also
 * exercises kernel modules end to end. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmex_internal.h"

#define CNN_DIM_MAX 4096

/* Fused bias + relu over an NCHW tensor: one work-item per element. n is
 * passed because the driver may round the global size up. */
static const char k_cnn_source[] =
    "__kernel void bias_relu_nchw(__global const float* x, __global const float* bias,\n"
    "                             __global float* y, int hw, int channels, int n) {\n"
    "  int i = (int)get_global_id(0);\n"
    "  if (i >= n) return;\n"
    "  int ch = (i / hw) % channels;\n"
    "  y[i] = fmax(x[i] + bias[ch], 0.0f);\n"
    "}\n";

typedef struct cnn_weights {
  float *w1, *b1; /* [c1, c, 3, 3], [c1] */
  float *w2, *b2; /* [c2, c1, 3, 3], [c2] */
  float *wf, *bf; /* [c2, classes], [classes] */
} cnn_weights_t;

vmex_cnn_config_t vmex_cnn_config_default(void) {
  vmex_cnn_config_t c;
  memset(&c, 0, sizeof(c));
  c.n = 2;
  c.c = 3;
  c.h = 32;
  c.w = 32;
  c.c1 = 8;
  c.c2 = 16;
  c.classes = 10;
  c.plan_align = 512;
  return c;
}

static int dim_ok(int64_t d) {
  return d >= 1 && d <= CNN_DIM_MAX;
}

static vm_status_t cnn_check(const vmex_cnn_config_t *c) {
  if (!dim_ok(c->n) || !dim_ok(c->c) || !dim_ok(c->c1) || !dim_ok(c->c2) || !dim_ok(c->classes))
    return vm_status_make(VM_INVALID_ARGUMENT, "cnn: n, c, c1, c2 and classes must be 1 to %d",
                          CNN_DIM_MAX);
  /* two 2x2 pools must divide evenly */
  if (!dim_ok(c->h) || !dim_ok(c->w) || c->h % 4 || c->w % 4)
    return vm_status_make(VM_INVALID_ARGUMENT, "cnn: h and w must be multiples of 4 up to %d",
                          CNN_DIM_MAX);
  /* the kernel indexes with int */
  if (c->n * c->c1 * c->h * c->w > INT32_MAX)
    return vm_status_make(VM_INVALID_ARGUMENT, "cnn: first feature map too large");
  if (c->plan_align < 4 || (c->plan_align & (c->plan_align - 1)))
    return vm_status_make(VM_INVALID_ARGUMENT, "cnn: plan_align %llu is not a power of two >= 4",
                          (unsigned long long)c->plan_align);
  return VM_STATUS_OK;
}

static void cnn_weights_free(cnn_weights_t *cw) {
  free(cw->w1);
  free(cw->b1);
  free(cw->w2);
  free(cw->b2);
  free(cw->wf);
  free(cw->bf);
  memset(cw, 0, sizeof(*cw));
}

/* One stream, fixed order (w1 b1 w2 b2 wf bf); He-uniform weights. */
static vm_status_t cnn_weights_make(uint64_t seed, const vmex_cnn_config_t *c, cnn_weights_t *cw) {
  memset(cw, 0, sizeof(*cw));
  size_t n1 = (size_t)(c->c1 * c->c * 9), n2 = (size_t)(c->c2 * c->c1 * 9);
  size_t nf = (size_t)(c->c2 * c->classes);
  cw->w1 = malloc(n1 * sizeof(float));
  cw->b1 = malloc((size_t)c->c1 * sizeof(float));
  cw->w2 = malloc(n2 * sizeof(float));
  cw->b2 = malloc((size_t)c->c2 * sizeof(float));
  cw->wf = malloc(nf * sizeof(float));
  cw->bf = malloc((size_t)c->classes * sizeof(float));
  if (!cw->w1 || !cw->b1 || !cw->w2 || !cw->b2 || !cw->wf || !cw->bf) {
    cnn_weights_free(cw);
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "cnn: out of host memory for weights");
  }
  vmex_rng_t r;
  vmex_rng_seed(&r, seed, VMEX_STREAM_WEIGHTS);
  vmex_fill_uniform(&r, cw->w1, n1, (float)sqrt(6.0 / (double)(c->c * 9)));
  vmex_fill_uniform(&r, cw->b1, (size_t)c->c1, 0.1f);
  vmex_fill_uniform(&r, cw->w2, n2, (float)sqrt(6.0 / (double)(c->c1 * 9)));
  vmex_fill_uniform(&r, cw->b2, (size_t)c->c2, 0.1f);
  vmex_fill_uniform(&r, cw->wf, nf, (float)sqrt(6.0 / (double)c->c2));
  vmex_fill_uniform(&r, cw->bf, (size_t)c->classes, 0.1f);
  return VM_STATUS_OK;
}

void vmex_cnn_io_shape(const vmex_cnn_config_t *cfg, vmex_io_shape_t *out) {
  vmex_cnn_config_t d = vmex_cnn_config_default();
  const vmex_cnn_config_t *c = cfg ? cfg : &d;
  memset(out, 0, sizeof(*out));
  out->in_ndim = 4;
  out->in_shape[0] = c->n;
  out->in_shape[1] = c->c;
  out->in_shape[2] = c->h;
  out->in_shape[3] = c->w;
  out->out_ndim = 2;
  out->out_shape[0] = c->n;
  out->out_shape[1] = c->classes;
  out->in_numel = (size_t)(c->n * c->c * c->h * c->w);
  out->out_numel = (size_t)(c->n * c->classes);
}

/* conv2d(x, w, bias|none, stride 1, pad 1, dilation 1, groups 1, y) */
static void conv3x3(vmcc_graph_t *g, int32_t x, int32_t w, int32_t bias, int32_t y) {
  vmcc_arg_t a[11] = {vmcc_a_t(x),   vmcc_a_t(w),   bias >= 0 ? vmcc_a_t(bias) : vmcc_a_none(),
                      vmcc_a_imm(1), vmcc_a_imm(1), vmcc_a_imm(1),
                      vmcc_a_imm(1), vmcc_a_imm(1), vmcc_a_imm(1),
                      vmcc_a_imm(1), vmcc_a_t(y)};
  vmcc_graph_call(g, "cl.conv2d", 11, a);
}

/* pool2d.max(x, 2, 2, 2, 2, 0, 0, y) */
static void maxpool2(vmcc_graph_t *g, int32_t x, int32_t y) {
  vmcc_arg_t a[8] = {vmcc_a_t(x),   vmcc_a_imm(2), vmcc_a_imm(2), vmcc_a_imm(2),
                     vmcc_a_imm(2), vmcc_a_imm(0), vmcc_a_imm(0), vmcc_a_t(y)};
  vmcc_graph_call(g, "cl.pool2d.max", 8, a);
}

vm_status_t vmex_build_cnn(uint64_t seed, const vmex_cnn_config_t *cfg, vm_executable_t **out_exec,
                           vmex_plan_report_t *out_report) {
  vmex_cnn_config_t d = vmex_cnn_config_default();
  const vmex_cnn_config_t *c = cfg ? cfg : &d;
  vm_builder_t *b = NULL;
  vmcc_graph_t *g = NULL;
  cnn_weights_t cw;
  memset(&cw, 0, sizeof(cw));
  *out_exec = NULL;
  vm_status_t st = cnn_check(c);
  if (st) return st;
  st = cnn_weights_make(seed, c, &cw);
  if (st) return st;

  st = vm_builder_create(&b);
  if (st) goto fail;
  const char *params[] = {"x"};
  uint32_t fmain, c_one, c_zero, c_mod, c_kern;
  st = vm_builder_declare_function(b, "main", 1, params, &fmain);
  if (!st) st = vm_builder_add_kernel(b, VMEX_CNN_KERNEL_MODULE, k_cnn_source, "");
  if (!st) st = vm_builder_const_float(b, 1.0, &c_one);
  if (!st) st = vm_builder_const_float(b, 0.0, &c_zero);
  if (!st)
    st = vm_builder_const_string(b, VMEX_CNN_KERNEL_MODULE, strlen(VMEX_CNN_KERNEL_MODULE), &c_mod);
  if (!st)
    st = vm_builder_const_string(b, VMEX_CNN_KERNEL_BIAS_RELU, strlen(VMEX_CNN_KERNEL_BIAS_RELU),
                                 &c_kern);
  if (!st) st = vmcc_graph_create(b, fmain, "main", 1, c->plan_align, &g);
  if (st) goto fail;

  vmex_io_shape_t io;
  vmex_cnn_io_shape(c, &io);
  int64_t N = c->n, H = c->h, W = c->w;
  int64_t s_w1[4] = {c->c1, c->c, 3, 3}, s_w2[4] = {c->c2, c->c1, 3, 3};
  int64_t s_wf[2] = {c->c2, c->classes};
  int64_t s_f1[4] = {N, c->c1, H, W}, s_p1[4] = {N, c->c1, H / 2, W / 2};
  int64_t s_f2[4] = {N, c->c2, H / 2, W / 2}, s_p2[4] = {N, c->c2, H / 4, W / 4};
  int64_t s_gp[4] = {N, c->c2, 1, 1}, s_gv[2] = {N, c->c2};

  int32_t x = vmcc_graph_param(g, 0, "x", VM_F32, io.in_ndim, io.in_shape);
  int32_t w1 = vmcc_graph_weight(g, cw.w1, 4, s_w1);
  int32_t b1 = vmcc_graph_weight(g, cw.b1, 1, &c->c1);
  int32_t w2 = vmcc_graph_weight(g, cw.w2, 4, s_w2);
  int32_t b2 = vmcc_graph_weight(g, cw.b2, 1, &c->c2);
  int32_t wf = vmcc_graph_weight(g, cw.wf, 2, s_wf);
  int32_t bf = vmcc_graph_weight(g, cw.bf, 1, &c->classes);

  /* stage 1: conv without bias, then the carried bias + relu kernel */
  int32_t f1 = vmcc_graph_tensor(g, VM_F32, 4, s_f1);
  conv3x3(g, x, w1, -1, f1);
  int32_t r1 = vmcc_graph_tensor(g, VM_F32, 4, s_f1);
  int64_t n1 = N * c->c1 * H * W;
  vmcc_arg_t k[11] = {vmcc_a_vm(),       vmcc_a_const(c_mod), vmcc_a_const(c_kern), vmcc_a_imm(n1),
                      vmcc_a_imm(0),     vmcc_a_t(f1),        vmcc_a_t(b1),         vmcc_a_t(r1),
                      vmcc_a_imm(H * W), vmcc_a_imm(c->c1),   vmcc_a_imm(n1)};
  vmcc_graph_call(g, "cl.kernel", 11, k);
  int32_t p1 = vmcc_graph_tensor(g, VM_F32, 4, s_p1);
  maxpool2(g, r1, p1);

  /* stage 2: conv with its bias, relu operator */
  int32_t f2 = vmcc_graph_tensor(g, VM_F32, 4, s_f2);
  conv3x3(g, p1, w2, b2, f2);
  int32_t r2 = vmcc_graph_tensor(g, VM_F32, 4, s_f2);
  vmcc_arg_t relu[2] = {vmcc_a_t(f2), vmcc_a_t(r2)};
  vmcc_graph_call(g, "cl.unary.relu", 2, relu);
  int32_t p2 = vmcc_graph_tensor(g, VM_F32, 4, s_p2);
  maxpool2(g, r2, p2);

  /* head: global average pool, (n, c2, 1, 1) viewed as (n, c2), classifier */
  int32_t gp = vmcc_graph_tensor(g, VM_F32, 4, s_gp);
  vmcc_arg_t gap[2] = {vmcc_a_t(p2), vmcc_a_t(gp)};
  vmcc_graph_call(g, "cl.pool2d.global_avg", 2, gap);
  int32_t gv = vmcc_graph_view(g, gp, 2, s_gv);
  int32_t fc = vmcc_graph_tensor(g, VM_F32, 2, io.out_shape);
  vmcc_arg_t gemm[7] = {vmcc_a_t(gv),        vmcc_a_t(wf),         vmcc_a_imm(0), vmcc_a_imm(0),
                        vmcc_a_const(c_one), vmcc_a_const(c_zero), vmcc_a_t(fc)};
  vmcc_graph_call(g, "cl.gemm", 7, gemm);
  int32_t logits = vmcc_graph_tensor(g, VM_F32, 2, io.out_shape);
  vmcc_arg_t add[3] = {vmcc_a_t(fc), vmcc_a_t(bf), vmcc_a_t(logits)};
  vmcc_graph_call(g, "cl.binary.add", 3, add);
  int32_t y = vmcc_graph_tensor(g, VM_F32, 2, io.out_shape);
  vmcc_arg_t sm[3] = {vmcc_a_t(logits), vmcc_a_imm(-1), vmcc_a_t(y)};
  vmcc_graph_call(g, "cl.softmax", 3, sm);

  vmex_plan_report_t rep;
  st = vmcc_graph_emit(g, y, &rep);
  if (st) goto fail;
  char cfgs[160];
  snprintf(cfgs, sizeof(cfgs), "n=%lld c=%lld h=%lld w=%lld c1=%lld c2=%lld classes=%lld",
           (long long)c->n, (long long)c->c, (long long)c->h, (long long)c->w, (long long)c->c1,
           (long long)c->c2, (long long)c->classes);
  st = vmex_add_common_meta(b, "cnn", seed, cfgs, &io, &rep);
  if (!st) st = vm_builder_finish(b, out_exec);
  if (st) goto fail;
  if (out_report) *out_report = rep;
  vmcc_graph_free(g);
  vm_builder_free(b);
  cnn_weights_free(&cw);
  return VM_STATUS_OK;

fail:
  vmcc_graph_free(g);
  vm_builder_free(b);
  cnn_weights_free(&cw);
  return vm_status_annotate(st, "building the cnn");
}

/* ---------------------------------------------------------------------------
 * Reference
 */

/* 3x3 convolution, stride 1, pad 1, NCHW; bias may be NULL. */
static void ref_conv3x3(const float *x, const float *w, const float *bias, float *y, int64_t n,
                        int64_t ci, int64_t co, int64_t h, int64_t wd) {
  for (int64_t b = 0; b < n; b++)
    for (int64_t o = 0; o < co; o++)
      for (int64_t i = 0; i < h; i++)
        for (int64_t j = 0; j < wd; j++) {
          double acc = 0;
          for (int64_t c = 0; c < ci; c++)
            for (int64_t ky = 0; ky < 3; ky++) {
              int64_t yy = i + ky - 1;
              if (yy < 0 || yy >= h) continue;
              for (int64_t kx = 0; kx < 3; kx++) {
                int64_t xx = j + kx - 1;
                if (xx < 0 || xx >= wd) continue;
                acc += (double)x[((b * ci + c) * h + yy) * wd + xx] *
                       w[((o * ci + c) * 3 + ky) * 3 + kx];
              }
            }
          if (bias) acc += bias[o];
          y[((b * co + o) * h + i) * wd + j] = (float)acc;
        }
}

/* y = max(x + bias[channel], 0) over NCHW; bias may be NULL. */
static void ref_bias_relu(const float *x, const float *bias, float *y, int64_t n, int64_t ch,
                          int64_t hw) {
  for (int64_t i = 0; i < n * ch * hw; i++) {
    float v = x[i] + (bias ? bias[(i / hw) % ch] : 0.0f);
    y[i] = v > 0 ? v : 0;
  }
}

static void ref_maxpool2(const float *x, float *y, int64_t nc, int64_t h, int64_t w) {
  for (int64_t p = 0; p < nc; p++)
    for (int64_t i = 0; i < h / 2; i++)
      for (int64_t j = 0; j < w / 2; j++) {
        const float *s = x + (p * h + 2 * i) * w + 2 * j;
        float m = s[0];
        if (s[1] > m) m = s[1];
        if (s[w] > m) m = s[w];
        if (s[w + 1] > m) m = s[w + 1];
        y[(p * (h / 2) + i) * (w / 2) + j] = m;
      }
}

vm_status_t vmex_reference_cnn(uint64_t seed, const vmex_cnn_config_t *cfg, const float *x,
                               float *out) {
  vmex_cnn_config_t d = vmex_cnn_config_default();
  const vmex_cnn_config_t *c = cfg ? cfg : &d;
  VM_RETURN_IF_ERROR(cnn_check(c));
  cnn_weights_t cw;
  VM_RETURN_IF_ERROR(cnn_weights_make(seed, c, &cw));
  int64_t N = c->n, H = c->h, W = c->w;
  size_t big = (size_t)(N * (c->c1 > c->c2 ? c->c1 : c->c2) * H * W);
  float *a = calloc(big, sizeof(float)), *t = calloc(big, sizeof(float));
  float *gp = malloc((size_t)(N * c->c2) * sizeof(float));
  float *logits = malloc((size_t)(N * c->classes) * sizeof(float));
  vm_status_t st = VM_STATUS_OK;
  if (!a || !t || !gp || !logits) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "cnn reference: out of host memory");
    goto done;
  }
  ref_conv3x3(x, cw.w1, NULL, a, N, c->c, c->c1, H, W);
  ref_bias_relu(a, cw.b1, t, N, c->c1, H * W);
  ref_maxpool2(t, a, N * c->c1, H, W);
  ref_conv3x3(a, cw.w2, cw.b2, t, N, c->c1, c->c2, H / 2, W / 2);
  ref_bias_relu(t, NULL, a, N, c->c2, (H / 2) * (W / 2));
  ref_maxpool2(a, t, N * c->c2, H / 2, W / 2);
  int64_t hw = (H / 4) * (W / 4);
  for (int64_t p = 0; p < N * c->c2; p++) {
    double s = 0;
    for (int64_t i = 0; i < hw; i++) s += t[p * hw + i];
    gp[p] = (float)(s / (double)hw);
  }
  for (int64_t b = 0; b < N; b++)
    for (int64_t k = 0; k < c->classes; k++) {
      double acc = 0;
      for (int64_t j = 0; j < c->c2; j++)
        acc += (double)gp[b * c->c2 + j] * cw.wf[j * c->classes + k];
      logits[b * c->classes + k] = (float)acc + cw.bf[k];
    }
  vmex_softmax_rows(logits, out, N, c->classes);
done:
  free(a);
  free(t);
  free(gp);
  free(logits);
  cnn_weights_free(&cw);
  return st;
}
