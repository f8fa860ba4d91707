/* The example MLP: gemm + bias + relu per hidden layer, then gemm + bias
 * and a softmax over the classes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmex_internal.h"

/* Large enough for any demo, small enough that sizes cannot overflow. */
#define MLP_DIM_MAX (1 << 16)

typedef struct mlp_weights {
  uint32_t layers;                       /* num_hidden + 1 */
  int64_t dims[VMEX_MLP_MAX_HIDDEN + 2]; /* in, hidden..., out */
  float *w[VMEX_MLP_MAX_HIDDEN + 1];     /* [dims[l], dims[l+1]] */
  float *b[VMEX_MLP_MAX_HIDDEN + 1];     /* [dims[l+1]] */
} mlp_weights_t;

vmex_mlp_config_t vmex_mlp_config_default(void) {
  vmex_mlp_config_t c;
  memset(&c, 0, sizeof(c));
  c.batch = 8;
  c.in = 256;
  c.num_hidden = 3;
  c.hidden[0] = 512;
  c.hidden[1] = 512;
  c.hidden[2] = 256;
  c.out = 10;
  return c;
}

static int dim_ok(int64_t d) {
  return d >= 1 && d <= MLP_DIM_MAX;
}

static vm_status_t mlp_check(const vmex_mlp_config_t *c) {
  if (!dim_ok(c->batch) || !dim_ok(c->in) || !dim_ok(c->out))
    return vm_status_make(VM_INVALID_ARGUMENT, "mlp: batch, in and out must be 1 to %d",
                          MLP_DIM_MAX);
  if (c->num_hidden < 1 || c->num_hidden > VMEX_MLP_MAX_HIDDEN)
    return vm_status_make(VM_INVALID_ARGUMENT, "mlp: num_hidden %u, expected 1 to %d",
                          c->num_hidden, VMEX_MLP_MAX_HIDDEN);
  for (uint32_t i = 0; i < c->num_hidden; i++)
    if (!dim_ok(c->hidden[i]))
      return vm_status_make(VM_INVALID_ARGUMENT, "mlp: hidden[%u] must be 1 to %d", i, MLP_DIM_MAX);
  return VM_STATUS_OK;
}

static void mlp_weights_free(mlp_weights_t *mw) {
  for (uint32_t l = 0; l < VMEX_MLP_MAX_HIDDEN + 1; l++) {
    free(mw->w[l]);
    free(mw->b[l]);
  }
  memset(mw, 0, sizeof(*mw));
}

/* The weights of (seed, cfg), in one fixed order from one stream, so the
 * generator and the reference agree. He-uniform scale sqrt(6 / fan_in)
 * keeps activations of the order of 1 through the relus, so the softmax is
 * far from flat and a wrong weight shows in the output. */
static vm_status_t mlp_weights_make(uint64_t seed, const vmex_mlp_config_t *c, mlp_weights_t *mw) {
  memset(mw, 0, sizeof(*mw));
  mw->layers = c->num_hidden + 1;
  mw->dims[0] = c->in;
  for (uint32_t i = 0; i < c->num_hidden; i++) mw->dims[1 + i] = c->hidden[i];
  mw->dims[mw->layers] = c->out;
  vmex_rng_t r;
  vmex_rng_seed(&r, seed, VMEX_STREAM_WEIGHTS);
  for (uint32_t l = 0; l < mw->layers; l++) {
    size_t fi = (size_t)mw->dims[l], fo = (size_t)mw->dims[l + 1];
    mw->w[l] = malloc(fi * fo * sizeof(float));
    mw->b[l] = malloc(fo * sizeof(float));
    if (!mw->w[l] || !mw->b[l]) {
      mlp_weights_free(mw);
      return vm_status_make(VM_RESOURCE_EXHAUSTED, "mlp: out of host memory for weights");
    }
    vmex_fill_uniform(&r, mw->w[l], fi * fo, (float)sqrt(6.0 / (double)fi));
    vmex_fill_uniform(&r, mw->b[l], fo, 0.1f);
  }
  return VM_STATUS_OK;
}

void vmex_mlp_io_shape(const vmex_mlp_config_t *cfg, vmex_io_shape_t *out) {
  vmex_mlp_config_t d = vmex_mlp_config_default();
  const vmex_mlp_config_t *c = cfg ? cfg : &d;
  memset(out, 0, sizeof(*out));
  out->in_ndim = 2;
  out->in_shape[0] = c->batch;
  out->in_shape[1] = c->in;
  out->out_ndim = 2;
  out->out_shape[0] = c->batch;
  out->out_shape[1] = c->out;
  out->in_numel = (size_t)(c->batch * c->in);
  out->out_numel = (size_t)(c->batch * c->out);
}

static void mlp_config_str(const vmex_mlp_config_t *c, char *buf, size_t len) {
  size_t used = (size_t)snprintf(buf, len, "batch=%lld in=%lld hidden=", (long long)c->batch,
                                 (long long)c->in);
  for (uint32_t i = 0; i < c->num_hidden && used < len; i++)
    used +=
        (size_t)snprintf(buf + used, len - used, "%s%lld", i ? "," : "", (long long)c->hidden[i]);
  if (used < len) snprintf(buf + used, len - used, " out=%lld", (long long)c->out);
}

vm_status_t vmex_build_mlp(uint64_t seed, const vmex_mlp_config_t *cfg, vm_executable_t **out_exec,
                           vmex_plan_report_t *out_report) {
  vmex_mlp_config_t d = vmex_mlp_config_default();
  const vmex_mlp_config_t *c = cfg ? cfg : &d;
  vm_builder_t *b = NULL;
  vmcc_graph_t *g = NULL;
  mlp_weights_t mw;
  memset(&mw, 0, sizeof(mw));
  *out_exec = NULL;
  vm_status_t st = mlp_check(c);
  if (st) return st;
  st = mlp_weights_make(seed, c, &mw);
  if (st) return st;

  st = vm_builder_create(&b);
  if (st) goto fail;
  const char *params[] = {"x"};
  uint32_t fmain, c_one, c_zero;
  st = vm_builder_declare_function(b, "main", 1, params, &fmain);
  if (!st) st = vm_builder_const_float(b, 1.0, &c_one);
  if (!st) st = vm_builder_const_float(b, 0.0, &c_zero);
  if (!st) st = vmcc_graph_create(b, fmain, "main", 1, 0, &g);
  if (st) goto fail;

  vmex_io_shape_t io;
  vmex_mlp_io_shape(c, &io);
  int32_t cur = vmcc_graph_param(g, 0, "x", VM_F32, io.in_ndim, io.in_shape);
  for (uint32_t l = 0; l < mw.layers; l++) {
    int64_t ws[2] = {mw.dims[l], mw.dims[l + 1]};
    int64_t ys[2] = {c->batch, mw.dims[l + 1]};
    int32_t w = vmcc_graph_weight(g, mw.w[l], 2, ws);
    int32_t bias = vmcc_graph_weight(g, mw.b[l], 1, ws + 1);
    /* y = x W (alpha 1, beta 0), then + b broadcast over the batch */
    int32_t mm = vmcc_graph_tensor(g, VM_F32, 2, ys);
    vmcc_arg_t gemm[7] = {vmcc_a_t(cur),       vmcc_a_t(w),          vmcc_a_imm(0), vmcc_a_imm(0),
                          vmcc_a_const(c_one), vmcc_a_const(c_zero), vmcc_a_t(mm)};
    vmcc_graph_call(g, "cl.gemm", 7, gemm);
    int32_t biased = vmcc_graph_tensor(g, VM_F32, 2, ys);
    vmcc_arg_t add[3] = {vmcc_a_t(mm), vmcc_a_t(bias), vmcc_a_t(biased)};
    vmcc_graph_call(g, "cl.binary.add", 3, add);
    cur = biased;
    if (l + 1 < mw.layers) {
      int32_t act = vmcc_graph_tensor(g, VM_F32, 2, ys);
      vmcc_arg_t relu[2] = {vmcc_a_t(biased), vmcc_a_t(act)};
      vmcc_graph_call(g, "cl.unary.relu", 2, relu);
      cur = act;
    }
  }
  int32_t y = vmcc_graph_tensor(g, VM_F32, io.out_ndim, io.out_shape);
  vmcc_arg_t sm[3] = {vmcc_a_t(cur), vmcc_a_imm(-1), vmcc_a_t(y)};
  vmcc_graph_call(g, "cl.softmax", 3, sm);

  vmex_plan_report_t rep;
  st = vmcc_graph_emit(g, y, &rep);
  if (st) goto fail;
  char cfgs[160];
  mlp_config_str(c, cfgs, sizeof(cfgs));
  st = vmex_add_common_meta(b, "mlp", seed, cfgs, &io, &rep);
  if (!st) st = vm_builder_finish(b, out_exec);
  if (st) goto fail;
  if (out_report) *out_report = rep;
  vmcc_graph_free(g);
  vm_builder_free(b);
  mlp_weights_free(&mw);
  return VM_STATUS_OK;

fail:
  vmcc_graph_free(g);
  vm_builder_free(b);
  mlp_weights_free(&mw);
  return vm_status_annotate(st, "building the mlp");
}

vm_status_t vmex_reference_mlp(uint64_t seed, const vmex_mlp_config_t *cfg, const float *x,
                               float *out) {
  vmex_mlp_config_t d = vmex_mlp_config_default();
  const vmex_mlp_config_t *c = cfg ? cfg : &d;
  VM_RETURN_IF_ERROR(mlp_check(c));
  mlp_weights_t mw;
  VM_RETURN_IF_ERROR(mlp_weights_make(seed, c, &mw));
  int64_t widest = c->in;
  for (uint32_t l = 0; l <= mw.layers; l++)
    if (mw.dims[l] > widest) widest = mw.dims[l];
  float *a = malloc((size_t)(c->batch * widest) * sizeof(float));
  float *t = malloc((size_t)(c->batch * widest) * sizeof(float));
  if (!a || !t) {
    free(a);
    free(t);
    mlp_weights_free(&mw);
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "mlp reference: out of host memory");
  }
  memcpy(a, x, (size_t)(c->batch * c->in) * sizeof(float));
  for (uint32_t l = 0; l < mw.layers; l++) {
    int64_t fi = mw.dims[l], fo = mw.dims[l + 1];
    /* Each step rounds to float32 as the device's tensors do. */
    for (int64_t i = 0; i < c->batch; i++) {
      for (int64_t j = 0; j < fo; j++) {
        double acc = 0;
        for (int64_t k = 0; k < fi; k++) acc += (double)a[i * fi + k] * mw.w[l][k * fo + j];
        float v = (float)acc + mw.b[l][j];
        if (l + 1 < mw.layers && v < 0) v = 0;
        t[i * fo + j] = v;
      }
    }
    float *sw = a;
    a = t;
    t = sw;
  }
  vmex_softmax_rows(a, out, c->batch, c->out);
  free(a);
  free(t);
  mlp_weights_free(&mw);
  return VM_STATUS_OK;
}
