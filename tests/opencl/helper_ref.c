/* See helper_ref.h. */
#include "helper_ref.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "test_util.h"
#include "vmcl/vmcl.h"

/* ---------------------------------------------------------------------------
 * Environment
 */

int tops_setup(void **state) {
  tops_env_t *e = calloc(1, sizeof(*e));
  if (!e) return -1;
  vm_status_t st = vmcl_device_open(NULL, NULL, &e->dev);
  if (!st) st = vm_allocator_create(e->dev, VM_ALLOC_NAIVE, &e->alloc);
  if (!st) st = vm_registry_create(&e->reg);
  if (!st) st = vm_registry_add_builtins(e->reg);
  if (!st) st = vmcl_register_ops(e->reg);
  if (st) {
    fprintf(stderr, "tops_setup: %s\n", vm_status_message(st));
    vm_status_free(st);
    *state = e;
    tops_teardown(state);
    return -1;
  }
  *state = e;
  return 0;
}

tops_env_t *tops_setup_with(const char *var, const char *value) {
  setenv(var, value, 1);
  tops_env_t *g = NULL;
  int rc = tops_setup((void **)&g);
  unsetenv(var);
  assert_int_equal(rc, 0);
  return g;
}

int tops_teardown(void **state) {
  tops_env_t *e = *state;
  if (!e) return 0;
  vm_registry_free(e->reg);
  vm_allocator_destroy(e->alloc);
  vm_device_destroy(e->dev);
  free(e);
  *state = NULL;
  return 0;
}

vm_status_t tops_call(tops_env_t *e, const char *op, const vm_value_t *args, uint32_t nargs) {
  vm_packed_fn fn;
  void *user;
  if (vm_registry_find(e->reg, op, &fn, &user) != 0) fail_msg("operator %s not registered", op);
  vm_value_t out = vm_value_none();
  vm_status_t st = fn(NULL, args, nargs, &out, user);
  if (out.kind != VM_VAL_NONE) {
    vm_value_release(&out);
    fail_msg("%s returned a value", op);
  }
  return st;
}

int64_t tops_numel(uint32_t ndim, const int64_t *dims) {
  int64_t n = 1;
  for (uint32_t i = 0; i < ndim; i++) n *= dims[i];
  return n;
}

#define GUARD_BYTE 0xA5
#define PAD_BEFORE 3 /* elements: an odd offset into the storage */
#define PAD_AFTER 5

vm_value_t tops_tensor(tops_env_t *e, vm_dtype_t dt, uint32_t ndim, const int64_t *dims,
                       const void *data) {
  size_t eb = vm_dtype_bytes(dt);
  uint64_t nb64; /* packed types: whole bytes */
  assert_int_equal(vm_tensor_nbytes(dt, dims, ndim, &nb64), 0);
  size_t nbytes = (size_t)nb64;
  size_t total = (PAD_BEFORE + PAD_AFTER) * eb + nbytes;
  uint8_t *host = malloc(total);
  assert_non_null(host);
  memset(host, GUARD_BYTE, total);
  if (data) memcpy(host + PAD_BEFORE * eb, data, nbytes);
  vm_value_t sv, tv;
  ASSERT_OK(vm_storage_alloc(e->alloc, total, &sv));
  vm_storage_t *s = vm_value_as_storage(&sv);
  ASSERT_OK(e->dev->ops->copy_from_host(e->dev, s->buffer, 0, host, total));
  ASSERT_OK(vm_tensor_new(s, PAD_BEFORE * eb, dt, dims, ndim, &tv));
  vm_value_release(&sv); /* the tensor holds the storage */
  free(host);
  return tv;
}

vm_value_t tops_tensor_f(tops_env_t *e, vm_dtype_t dt, uint32_t ndim, const int64_t *dims,
                         const float *data) {
  if (vm_dtype_equal(dt, VM_F32)) return tops_tensor(e, dt, ndim, dims, data);
  assert_true(vm_dtype_equal(dt, VM_F16));
  size_t n = (size_t)tops_numel(ndim, dims);
  uint16_t *h = malloc(n * 2 + 2);
  assert_non_null(h);
  for (size_t i = 0; i < n; i++) h[i] = ref_f32_to_f16(data[i]);
  vm_value_t v = tops_tensor(e, dt, ndim, dims, h);
  free(h);
  return v;
}

vm_value_t tops_plain(tops_env_t *e, vm_dtype_t dt, uint32_t ndim, const int64_t *dims) {
  vm_value_t v;
  ASSERT_OK(vm_tensor_alloc(e->alloc, dt, dims, ndim, &v));
  return v;
}

void tops_read(tops_env_t *e, const vm_value_t *v, void *dst) {
  const vm_tensor_t *t = vm_value_as_tensor(v);
  assert_non_null(t);
  ASSERT_OK(e->dev->ops->copy_to_host(e->dev, dst, t->storage->buffer, t->offset,
                                      vm_tensor_nbytes_of(t)));
}

void tops_read_f(tops_env_t *e, const vm_value_t *v, float *dst) {
  const vm_tensor_t *t = vm_value_as_tensor(v);
  assert_non_null(t);
  if (vm_dtype_equal(t->dtype, VM_F32)) {
    tops_read(e, v, dst);
    return;
  }
  assert_true(vm_dtype_equal(t->dtype, VM_F16));
  size_t n = (size_t)vm_tensor_numel(t);
  uint16_t *h = malloc(n * 2 + 2);
  assert_non_null(h);
  tops_read(e, v, h);
  for (size_t i = 0; i < n; i++) dst[i] = ref_f16_to_f32(h[i]);
  free(h);
}

void tops_check_guard(tops_env_t *e, const vm_value_t *v) {
  const vm_tensor_t *t = vm_value_as_tensor(v);
  assert_non_null(t);
  size_t total = (size_t)t->storage->nbytes;
  uint8_t *host = malloc(total + 1);
  assert_non_null(host);
  ASSERT_OK(e->dev->ops->copy_to_host(e->dev, host, t->storage->buffer, 0, total));
  size_t begin = (size_t)t->offset, end = begin + (size_t)vm_tensor_nbytes_of(t);
  for (size_t i = 0; i < total; i++) {
    if ((i < begin || i >= end) && host[i] != GUARD_BYTE) {
      free(host);
      fail_msg("byte %zu of the storage (tensor spans [%zu, %zu)) was overwritten", i, begin, end);
    }
  }
  free(host);
}

void tops_assert_close(const float *got, const float *want, size_t n, double atol, double rtol,
                       const char *what) {
  for (size_t i = 0; i < n; i++) {
    double g = got[i], w = want[i];
    if (isnan(w) && isnan(g)) continue;
    if (isinf(w) && g == w) continue;
    if (!(fabs(g - w) <= atol + rtol * fabs(w))) {
      fail_msg("%s: element %zu is %.9g, expected %.9g (atol %g, rtol %g)", what, i, g, w, atol,
               rtol);
    }
  }
}

float *tops_rand(size_t n, uint32_t seed, float lo, float hi) {
  float *v = malloc(n * sizeof(float) + sizeof(float));
  assert_non_null(v);
  uint32_t s = seed * 2654435761u + 12345u;
  for (size_t i = 0; i < n; i++) {
    s = s * 1664525u + 1013904223u; /* LCG: deterministic across platforms */
    v[i] = lo + (hi - lo) * (float)(s >> 8) / (float)(1u << 24);
  }
  return v;
}

void tops_round_f16(float *v, size_t n) {
  for (size_t i = 0; i < n; i++) v[i] = ref_f16_to_f32(ref_f32_to_f16(v[i]));
}

vm_value_t tops_shape(uint32_t ndim, const int64_t *dims) {
  vm_value_t v;
  ASSERT_OK(vm_shape_new(dims, ndim, &v));
  return v;
}

vm_value_t tops_int_tuple(uint32_t n, const int64_t *vals) {
  vm_value_t fields[16], v;
  assert_true(n <= 16);
  for (uint32_t i = 0; i < n; i++) fields[i] = vm_value_int(vals[i]);
  ASSERT_OK(vm_tuple_new(fields, n, &v));
  return v;
}

/* ---------------------------------------------------------------------------
 * cl.gemm against ref_gemm
 */

void tops_check_gemm(tops_env_t *e, vm_dtype_t dt, const tops_gemm_case_t *g) {
  tops_check_gemm_bias(e, dt, g, 0);
}

void tops_check_gemm_bias(tops_env_t *e, vm_dtype_t dt, const tops_gemm_case_t *g, int with_bias) {
  int64_t batch = g->ba > g->bb ? g->ba : g->bb;
  if (batch == 0) batch = 1;
  int batched = g->ba || g->bb;
  int64_t adims[3] = {g->ba, g->ta ? g->k : g->m, g->ta ? g->m : g->k};
  int64_t bdims[3] = {g->bb, g->tb ? g->n : g->k, g->tb ? g->k : g->n};
  int64_t cdims[3] = {batch, g->m, g->n};
  size_t na = (size_t)((g->ba ? g->ba : 1) * g->m * g->k);
  size_t nb = (size_t)((g->bb ? g->bb : 1) * g->k * g->n);
  size_t nc = (size_t)(batch * g->m * g->n);
  float *a = tops_rand(na, 21, -1, 1), *b = tops_rand(nb, 22, -1, 1);
  float *c0 = tops_rand(nc, 23, -1, 1);
  float *want = malloc(nc * sizeof(float) + 4), *got = malloc(nc * sizeof(float) + 4);
  int f16 = vm_dtype_equal(dt, VM_F16);
  if (f16) {
    tops_round_f16(a, na);
    tops_round_f16(b, nb);
    tops_round_f16(c0, nc);
  }
  memcpy(want, c0, nc * sizeof(float));
  ref_gemm(batch, g->m, g->n, g->k, g->ta, g->tb, g->alpha, a, g->ba > 1 ? g->m * g->k : 0, b,
           g->bb > 1 ? g->k * g->n : 0, g->beta, want);
  float *bias = tops_rand((size_t)(g->n ? g->n : 1), 24, -1, 1);
  if (f16) tops_round_f16(bias, (size_t)g->n);
  if (with_bias) {
    for (size_t i = 0; i < nc; i++) want[i] += bias[i % (size_t)g->n];
  }
  vm_value_t args[8] = {
      tops_tensor_f(e, dt, g->ba ? 3 : 2, g->ba ? adims : adims + 1, a),
      tops_tensor_f(e, dt, g->bb ? 3 : 2, g->bb ? bdims : bdims + 1, b), vm_value_int(g->ta),
      vm_value_int(g->tb), vm_value_float(g->alpha), vm_value_float(g->beta),
      /* beta == 0: C starts as the sentinel (a tiny negative float, or NaN
       * in half) and must not leak into the result */
      g->beta != 0.0f ? tops_tensor_f(e, dt, batched ? 3 : 2, batched ? cdims : cdims + 1, c0)
                      : tops_tensor(e, dt, batched ? 3 : 2, batched ? cdims : cdims + 1, NULL),
      with_bias ? tops_tensor_f(e, dt, 1, &g->n, bias) : vm_value_none()};
  ASSERT_OK(tops_call(e, "cl.gemm", args, with_bias ? 8 : 7));
  tops_read_f(e, &args[6], got);
  char what[128];
  snprintf(what, sizeof(what), "gemm %s b%lld/%lld m%lld n%lld k%lld t%d%d%s", f16 ? "f16" : "f32",
           (long long)g->ba, (long long)g->bb, (long long)g->m, (long long)g->n, (long long)g->k,
           g->ta, g->tb, with_bias ? " bias" : "");
  double sk = sqrt((double)g->k + 1);
  tops_assert_close(got, want, nc, (f16 ? 2e-3 : 1e-4) * sk, f16 ? 2e-3 : 1e-4, what);
  tops_check_guard(e, &args[6]);
  for (int i = 0; i < 8; i++) vm_value_release(&args[i]);
  free(a);
  free(b);
  free(bias);
  free(c0);
  free(want);
  free(got);
}

/* ---------------------------------------------------------------------------
 * float16 by arithmetic (frexp/ldexp), not bit tricks, so it checks the
 * library's bit-level conversion independently.
 */

uint16_t ref_f32_to_f16(float f) {
  uint16_t sign = signbit(f) ? 0x8000 : 0;
  if (isnan(f)) return 0x7e00;
  double a = fabs((double)f);
  if (isinf(f)) return sign | 0x7c00;
  if (a == 0.0) return sign;
  /* round to a multiple of the half ULP at a's binade, ties to even */
  int e;
  frexp(a, &e);                     /* a = m * 2^e, m in [0.5, 1) */
  int ulp_exp = e - 11;             /* 11 significant bits */
  if (ulp_exp < -24) ulp_exp = -24; /* subnormals */
  double q = a / ldexp(1.0, ulp_exp);
  double r = nearbyint(q); /* default rounding: to nearest even */
  double v = r * ldexp(1.0, ulp_exp);
  if (v >= 65520.0) return sign | 0x7c00;
  if (v == 0.0) return sign;
  int ve;
  frexp(v, &ve);
  if (ve - 1 < -14) { /* subnormal: v = mant * 2^-24 */
    return sign | (uint16_t)(v / ldexp(1.0, -24));
  }
  uint16_t exp = (uint16_t)(ve - 1 + 15);
  uint16_t man = (uint16_t)((v / ldexp(1.0, ve - 1) - 1.0) * 1024.0);
  return sign | (uint16_t)(exp << 10) | man;
}

float ref_f16_to_f32(uint16_t h) {
  int sign = h & 0x8000 ? -1 : 1;
  int exp = (h >> 10) & 0x1f;
  int man = h & 0x3ff;
  if (exp == 31) return man ? NAN : sign * INFINITY;
  if (exp == 0) return (float)(sign * ldexp(man, -24));
  return (float)(sign * ldexp(1024 + man, exp - 25));
}

/* ---------------------------------------------------------------------------
 * References
 */

static float bin_op(const char *op, float a, float b) {
  if (!strcmp(op, "add")) return a + b;
  if (!strcmp(op, "sub")) return a - b;
  if (!strcmp(op, "mul")) return a * b;
  if (!strcmp(op, "div")) return a / b;
  if (!strcmp(op, "max")) return isnan(a) || isnan(b) ? NAN : (a > b ? a : b);
  if (!strcmp(op, "min")) return isnan(a) || isnan(b) ? NAN : (a < b ? a : b);
  if (!strcmp(op, "pow")) return powf(a, b);
  fail_msg("unknown binary op %s", op);
  return 0;
}

/* Offset in a broadcast operand of the output element with index idx. */
static int64_t bcast_offset(const int64_t *idx, uint32_t ndc, uint32_t nd, const int64_t *d) {
  int64_t off = 0;
  for (uint32_t i = 0; i < nd; i++) {
    int64_t ix = idx[ndc - nd + i];
    off = off * d[i] + (d[i] == 1 ? 0 : ix);
  }
  return off;
}

void ref_binary(const char *op, const float *a, uint32_t nda, const int64_t *da, const float *b,
                uint32_t ndb, const int64_t *db, float *c, uint32_t ndc, const int64_t *dc) {
  int64_t n = tops_numel(ndc, dc);
  int64_t idx[16];
  for (int64_t i = 0; i < n; i++) {
    int64_t r = i;
    for (uint32_t k = ndc; k-- > 0;) {
      idx[k] = r % dc[k];
      r /= dc[k];
    }
    c[i] = bin_op(op, a[bcast_offset(idx, ndc, nda, da)], b[bcast_offset(idx, ndc, ndb, db)]);
  }
}

float ref_unary(const char *op, float x) {
  if (!strcmp(op, "relu")) return x < 0 ? 0.0f : x;
  if (!strcmp(op, "gelu")) return (float)(0.5 * x * (1.0 + erf(x / sqrt(2.0))));
  if (!strcmp(op, "sigmoid")) return (float)(1.0 / (1.0 + exp(-(double)x)));
  if (!strcmp(op, "tanh")) return tanhf(x);
  if (!strcmp(op, "exp")) return expf(x);
  if (!strcmp(op, "log")) return logf(x);
  if (!strcmp(op, "sqrt")) return sqrtf(x);
  if (!strcmp(op, "neg")) return -x;
  if (!strcmp(op, "abs")) return fabsf(x);
  fail_msg("unknown unary op %s", op);
  return 0;
}

void ref_gemm(int64_t batch, int64_t m, int64_t n, int64_t k, int ta, int tb, float alpha,
              const float *A, int64_t sa, const float *B, int64_t sb, float beta, float *C) {
  for (int64_t bt = 0; bt < batch; bt++) {
    const float *a = A + bt * sa, *b = B + bt * sb;
    float *c = C + bt * m * n;
    for (int64_t i = 0; i < m; i++) {
      for (int64_t j = 0; j < n; j++) {
        double s = 0;
        for (int64_t p = 0; p < k; p++) {
          double av = ta ? a[p * m + i] : a[i * k + p];
          double bv = tb ? b[j * k + p] : b[p * n + j];
          s += av * bv;
        }
        double v = alpha * s;
        if (beta != 0.0f) v += (double)beta * c[i * n + j];
        c[i * n + j] = (float)v;
      }
    }
  }
}

void ref_conv2d(const float *x, const float *w, const float *bias, float *y, int64_t N, int64_t C,
                int64_t H, int64_t W, int64_t O, int64_t KH, int64_t KW, int64_t sh, int64_t sw,
                int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t groups, int64_t OH,
                int64_t OW) {
  int64_t Cg = C / groups, Og = O / groups;
  for (int64_t n = 0; n < N; n++)
    for (int64_t o = 0; o < O; o++) {
      int64_t g = o / Og;
      for (int64_t oh = 0; oh < OH; oh++)
        for (int64_t ow = 0; ow < OW; ow++) {
          double s = bias ? bias[o] : 0.0;
          for (int64_t c = 0; c < Cg; c++)
            for (int64_t kh = 0; kh < KH; kh++)
              for (int64_t kw = 0; kw < KW; kw++) {
                int64_t ih = oh * sh - ph + kh * dh, iw = ow * sw - pw + kw * dw;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                s += (double)x[((n * C + g * Cg + c) * H + ih) * W + iw] *
                     w[((o * Cg + c) * KH + kh) * KW + kw];
              }
          y[((n * O + o) * OH + oh) * OW + ow] = (float)s;
        }
    }
}

void ref_softmax(const float *x, uint32_t ndim, const int64_t *dims, int axis, float *y) {
  int64_t outer = 1, len = dims[axis], inner = 1;
  for (int i = 0; i < axis; i++) outer *= dims[i];
  for (uint32_t i = (uint32_t)axis + 1; i < ndim; i++) inner *= dims[i];
  for (int64_t o = 0; o < outer; o++)
    for (int64_t in = 0; in < inner; in++) {
      const float *xp = x + o * len * inner + in;
      float *yp = y + o * len * inner + in;
      double m = -INFINITY, s = 0;
      for (int64_t j = 0; j < len; j++) m = fmax(m, xp[j * inner]);
      for (int64_t j = 0; j < len; j++) s += exp(xp[j * inner] - m);
      for (int64_t j = 0; j < len; j++) yp[j * inner] = (float)(exp(xp[j * inner] - m) / s);
    }
}

void ref_layer_norm(const float *x, int64_t rows, int64_t len, const float *gamma,
                    const float *beta, float eps, float *y) {
  for (int64_t r = 0; r < rows; r++) {
    const float *xp = x + r * len;
    double mean = 0, var = 0;
    for (int64_t j = 0; j < len; j++) mean += xp[j];
    mean /= (double)len;
    for (int64_t j = 0; j < len; j++) var += (xp[j] - mean) * (xp[j] - mean);
    var /= (double)len;
    double rstd = 1.0 / sqrt(var + eps);
    for (int64_t j = 0; j < len; j++) {
      double t = (xp[j] - mean) * rstd;
      if (gamma) t *= gamma[j];
      if (beta) t += beta[j];
      y[r * len + j] = (float)t;
    }
  }
}

void ref_reduce(int kind, const float *x, uint32_t ndim, const int64_t *dims, const int *reduce,
                float *y) {
  /* output index of each input element: drop the reduced coordinates */
  int64_t nout = 1, nin = tops_numel(ndim, dims), rcount = 1;
  for (uint32_t i = 0; i < ndim; i++) {
    if (reduce[i]) {
      rcount *= dims[i];
    } else {
      nout *= dims[i];
    }
  }
  double *acc = malloc((size_t)nout * sizeof(double) + sizeof(double));
  assert_non_null(acc);
  for (int64_t i = 0; i < nout; i++) {
    acc[i] = kind == 2 ? -INFINITY : kind == 3 ? INFINITY : kind == 4 ? 1.0 : 0.0;
  }
  for (int64_t i = 0; i < nin; i++) {
    int64_t r = i, o = 0, mul = 1;
    for (uint32_t k = ndim; k-- > 0;) {
      int64_t ix = r % dims[k];
      r /= dims[k];
      if (!reduce[k]) {
        o += ix * mul;
        mul *= dims[k];
      }
    }
    acc[o] = kind == 2   ? fmax(acc[o], x[i])
             : kind == 3 ? fmin(acc[o], x[i])
             : kind == 4 ? acc[o] * x[i]
                         : acc[o] + x[i];
  }
  for (int64_t i = 0; i < nout; i++) {
    y[i] = (float)(kind == 1 ? acc[i] / (double)rcount : acc[i]);
  }
  free(acc);
}

void ref_pool2d(int is_max, const float *x, int64_t N, int64_t C, int64_t H, int64_t W, int64_t kh,
                int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t OH, int64_t OW,
                float *y) {
  for (int64_t nc = 0; nc < N * C; nc++)
    for (int64_t oh = 0; oh < OH; oh++)
      for (int64_t ow = 0; ow < OW; ow++) {
        double acc = is_max ? -INFINITY : 0.0;
        int64_t cnt = 0;
        for (int64_t i = 0; i < kh; i++)
          for (int64_t j = 0; j < kw; j++) {
            int64_t h = oh * sh - ph + i, w = ow * sw - pw + j;
            if (h < 0 || h >= H || w < 0 || w >= W) continue;
            double v = x[(nc * H + h) * W + w];
            acc = is_max ? fmax(acc, v) : acc + v;
            cnt++;
          }
        y[(nc * OH + oh) * OW + ow] = (float)(is_max ? acc : acc / (double)cnt);
      }
}

void ref_transpose(size_t eb, const void *x, uint32_t ndim, const int64_t *dims,
                   const int64_t *perm, void *y) {
  int64_t n = tops_numel(ndim, dims), xs[16], ydims[16], idx[16];
  int64_t s = 1;
  for (uint32_t i = ndim; i-- > 0;) {
    xs[i] = s;
    s *= dims[i];
  }
  for (uint32_t i = 0; i < ndim; i++) ydims[i] = dims[perm[i]];
  for (int64_t i = 0; i < n; i++) {
    int64_t r = i, off = 0;
    for (uint32_t k = ndim; k-- > 0;) {
      idx[k] = r % ydims[k];
      r /= ydims[k];
    }
    for (uint32_t k = 0; k < ndim; k++) off += idx[k] * xs[perm[k]];
    memcpy((uint8_t *)y + i * eb, (const uint8_t *)x + off * eb, eb);
  }
}
