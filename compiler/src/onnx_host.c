/* Host-side element access, shapes and broadcasting for constant folding. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_internal.h"

int onx_is_float(vm_dtype_t dt) {
  return dt.code == VM_DTYPE_FLOAT;
}

int onx_is_int(vm_dtype_t dt) {
  return dt.code == VM_DTYPE_INT || dt.code == VM_DTYPE_UINT || dt.code == VM_DTYPE_BOOL;
}

static uint16_t float_to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  if (isnan(f)) return (uint16_t)(sign | 0x7e00);
  float a = fabsf(f);
  if (a >= 65520.0f) return (uint16_t)(sign | 0x7c00);
  if (a < ldexpf(1.0f, -24) / 2) return sign;
  int e;
  frexpf(a, &e); /* a = m * 2^e, m in [0.5, 1) */
  int exp = e - 1 + 15;
  if (exp <= 0) { /* subnormal: units of 2^-24, round half to even */
    float q = nearbyintf(ldexpf(a, 24));
    return (uint16_t)(sign | (uint16_t)q);
  }
  float q = nearbyintf(ldexpf(a, 10 - (e - 1))); /* 1024 .. 2048 */
  uint32_t m = (uint32_t)q;
  if (m >= 2048) {
    m >>= 1;
    exp++;
  }
  if (exp >= 31) return (uint16_t)(sign | 0x7c00);
  return (uint16_t)(sign | (uint16_t)(exp << 10) | (uint16_t)(m & 0x3ff));
}

double onx_ld_f(vm_dtype_t dt, const uint8_t *p, int64_t i) {
  return vm_dtype_load_f64(dt, p, (uint64_t)i);
}

int64_t onx_ld_i(vm_dtype_t dt, const uint8_t *p, int64_t i) {
  return vm_dtype_load_i64(dt, p, (uint64_t)i);
}

/* Element i of a packed array set to the low bits of v. */
static void st_packed(vm_dtype_t dt, uint8_t *p, int64_t i, unsigned v) {
  unsigned per = vm_dtype_per_byte(dt), sh = (unsigned)(i % per) * dt.bits;
  unsigned mask = ((1u << dt.bits) - 1) << sh;
  p[i / per] = (uint8_t)((p[i / per] & ~mask) | ((v << sh) & mask));
}

void onx_st_small(vm_dtype_t dt, uint8_t *p, int64_t i, double x, int saturate, int round_mode) {
  uint8_t b = vm_f32_to_small_float(dt.code, (float)x, saturate, round_mode);
  if (vm_dtype_per_byte(dt) > 1)
    st_packed(dt, p, i, b);
  else
    p[i] = b;
}

void onx_st_f(vm_dtype_t dt, uint8_t *p, int64_t i, double x) {
  if (dt.code >= VM_DTYPE_FLOAT8_E4M3FN) { /* the small floats: ONNX's defaults */
    onx_st_small(dt, p, i, x, 1, 0);
    return;
  }
  if (dt.code == VM_DTYPE_BFLOAT) {
    uint16_t h = vm_f32_to_bf16((float)x);
    memcpy(p + i * 2, &h, 2);
    return;
  }
  if (vm_dtype_per_byte(dt) > 1) { /* float -> int4/int2: truncated, then wraps (as Cast) */
    st_packed(dt, p, i, (unsigned)onx_f64_to_i64(x));
    return;
  }
  if (dt.code == VM_DTYPE_FLOAT) {
    if (dt.bits == 32) {
      float f = (float)x;
      memcpy(p + i * 4, &f, 4);
    } else if (dt.bits == 64) {
      memcpy(p + i * 8, &x, 8);
    } else {
      uint16_t h = float_to_half((float)x);
      memcpy(p + i * 2, &h, 2);
    }
    return;
  }
  if (dt.code == VM_DTYPE_BOOL) {
    p[i] = x != 0;
    return;
  }
  /* float -> int: truncation, saturating, NaN -> 0 (as cl.cast) */
  int64_t v = onx_f64_to_i64(x);
  if (dt.bits < 64) {
    int64_t lo = dt.code == VM_DTYPE_UINT ? 0 : -(1ll << (dt.bits - 1));
    int64_t hi = dt.code == VM_DTYPE_UINT ? (1ll << dt.bits) - 1 : (1ll << (dt.bits - 1)) - 1;
    if (v < lo) v = lo;
    if (v > hi) v = hi;
  } else if (dt.code == VM_DTYPE_UINT && v < 0) {
    v = 0;
  }
  onx_st_i(dt, p, i, v);
}

int64_t onx_f64_to_i64(double x) {
  if (isnan(x)) return 0;
  if (x >= 9.2e18) return INT64_MAX;
  if (x <= -9.2e18) return INT64_MIN;
  return (int64_t)x;
}

void onx_st_i(vm_dtype_t dt, uint8_t *p, int64_t i, int64_t x) {
  if (vm_dtype_is_floating(dt)) {
    onx_st_f(dt, p, i, (double)x);
    return;
  }
  if (dt.code == VM_DTYPE_BOOL) {
    p[i] = x != 0;
    return;
  }
  /* integer -> integer wraps (two's complement) */
  switch (dt.bits) {
    case 4:
    case 2: st_packed(dt, p, i, (unsigned)(uint64_t)x); break;
    case 8: p[i] = (uint8_t)x; break;
    case 16: {
      uint16_t v = (uint16_t)x;
      memcpy(p + i * 2, &v, 2);
      break;
    }
    case 32: {
      uint32_t v = (uint32_t)x;
      memcpy(p + i * 4, &v, 4);
      break;
    }
    default: memcpy(p + i * 8, &x, 8);
  }
}

vm_status_t onx_const_ints(const onx_ctx_t *c, const onx_value_t *v, const char *what, int64_t *out,
                           int64_t max, int64_t *out_n) {
  if (!v->data)
    return onx_node_err(c, VM_UNIMPLEMENTED,
                        "input '%s' (%s) must be a constant (computed at compile time)", v->name,
                        what);
  if (!onx_is_int(v->dt) || v->dt.code == VM_DTYPE_BOOL)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "input '%s' (%s) must hold integers", v->name,
                        what);
  if (v->ndim > 1)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "input '%s' (%s) must be 1-D", v->name, what);
  if (v->numel > max)
    return onx_node_err(c, VM_UNIMPLEMENTED, "input '%s' (%s) has %lld values, at most %lld",
                        v->name, what, (long long)v->numel, (long long)max);
  for (int64_t i = 0; i < v->numel; i++) out[i] = onx_ld_i(v->dt, v->data, i);
  *out_n = v->numel;
  return VM_STATUS_OK;
}

int onx_broadcast(uint32_t na, const int64_t *a, uint32_t nb, const int64_t *b, uint32_t *nout,
                  int64_t *out) {
  uint32_t n = na > nb ? na : nb;
  if (n > VMCC_MAX_NDIM) return -1;
  for (uint32_t i = 0; i < n; i++) {
    int64_t da = i < n - na ? 1 : a[i - (n - na)];
    int64_t db = i < n - nb ? 1 : b[i - (n - nb)];
    if (da != db && da != 1 && db != 1) return -1;
    out[i] = da == 1 ? db : da;
  }
  *nout = n;
  return 0;
}

int64_t onx_bcast_offset(uint32_t n, const int64_t *dims, uint32_t nout, const int64_t *idx) {
  int64_t off = 0;
  for (uint32_t i = 0; i < n; i++) {
    int64_t d = dims[i];
    int64_t k = idx[nout - n + i];
    off = off * d + (d == 1 ? 0 : k);
  }
  return off;
}

int onx_next_index(uint32_t ndim, const int64_t *dims, int64_t *idx) {
  for (int32_t i = (int32_t)ndim - 1; i >= 0; i--) {
    if (++idx[i] < dims[i]) return 1;
    idx[i] = 0;
  }
  return 0;
}

int64_t onx_numel(uint32_t ndim, const int64_t *dims) {
  int64_t n;
  if (vm_ckd_extent_i64(dims, ndim, &n) != 0 || vm_ckd_prod_i64(dims, ndim, &n) != 0) return -1;
  return n;
}

const char *onx_dims_str(uint32_t ndim, const int64_t *dims, char *buf, size_t len) {
  size_t used = (size_t)snprintf(buf, len, "[");
  for (uint32_t i = 0; i < ndim && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s%lld", i ? "," : "", (long long)dims[i]);
  if (used + 1 < len)
    snprintf(buf + used, len - used, "]");
  else if (len > 4)
    snprintf(buf + len - 5, 5, "...]");
  return buf;
}

vm_status_t onx_check_shape(const onx_ctx_t *c, const char *what, uint32_t ndim,
                            const int64_t *dims, int64_t *numel) {
  char s[200];
  for (uint32_t i = 0; i < ndim; i++)
    if (dims[i] < 0 || dims[i] > ONX_MAX_DIM)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "%s %s: dim %u is %lld (a dim is 0 to %lld)",
                          what, onx_dims_str(ndim, dims, s, sizeof(s)), i, (long long)dims[i],
                          (long long)ONX_MAX_DIM);
  int64_t extent, n;
  if (vm_ckd_extent_i64(dims, ndim, &extent) != 0)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "%s %s: the product of its dims overflows 64 bits",
                        what, onx_dims_str(ndim, dims, s, sizeof(s)));
  if (extent > ONX_MAX_ELEMS)
    return onx_node_err(c, VM_RESOURCE_EXHAUSTED,
                        "%s %s: %lld elements (the product of its nonzero dims), at most %lld",
                        what, onx_dims_str(ndim, dims, s, sizeof(s)), (long long)extent,
                        (long long)ONX_MAX_ELEMS);
  n = onx_numel(ndim, dims); /* fits: at most extent */
  if (numel) *numel = n;
  return VM_STATUS_OK;
}

uint64_t onx_nbytes(vm_dtype_t dt, int64_t numel) {
  uint64_t n = numel > 0 ? (uint64_t)numel : 0;
  unsigned per = vm_dtype_per_byte(dt);
  return per > 1 ? n / per + (n % per != 0) : n * vm_dtype_bytes(dt);
}

vm_status_t onx_alloc_const(const onx_ctx_t *c, vm_dtype_t dt, int64_t numel, uint8_t **out) {
  *out = NULL;
  if (numel < 0)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "a constant whose element count overflows");
  if (numel > ONX_MAX_FOLD_ELEMS)
    return onx_node_err(c, VM_RESOURCE_EXHAUSTED,
                        "a constant of %lld elements (the compiler folds at most %lld)",
                        (long long)numel, (long long)ONX_MAX_FOLD_ELEMS);
  size_t n = (size_t)numel * vm_dtype_bytes(dt);
  *out = calloc(n ? n : 1, 1);
  if (!*out) return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
  return VM_STATUS_OK;
}
