#include "vmrpc/dtype.h"

#include "vmrpc/checked.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

int vm_dtype_valid(vm_dtype_t dt) {
  if (dt.lanes < 1 || dt.lanes > 64) return 0;
  switch (dt.code) {
    case VM_DTYPE_INT:
    case VM_DTYPE_UINT:
      return dt.bits == 8 || dt.bits == 16 || dt.bits == 32 || dt.bits == 64;
    case VM_DTYPE_FLOAT:
      return dt.bits == 16 || dt.bits == 32 || dt.bits == 64;
    case VM_DTYPE_BFLOAT:
      return dt.bits == 16;
    case VM_DTYPE_BOOL:
      return dt.bits == 8;
    default:
      return 0;
  }
}

size_t vm_dtype_bytes(vm_dtype_t dt) { return ((size_t)dt.bits * dt.lanes + 7) / 8; }

int vm_dtype_equal(vm_dtype_t a, vm_dtype_t b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

static const char *code_prefix(uint8_t code) {
  switch (code) {
    case VM_DTYPE_INT: return "int";
    case VM_DTYPE_UINT: return "uint";
    case VM_DTYPE_FLOAT: return "float";
    case VM_DTYPE_BFLOAT: return "bfloat";
    case VM_DTYPE_BOOL: return "bool";
    default: return NULL;
  }
}

char *vm_dtype_str(vm_dtype_t dt, char *buf, size_t buflen) {
  const char *p = code_prefix(dt.code);
  if (!p) {
    snprintf(buf, buflen, "dtype(%u,%u,%u)", dt.code, dt.bits, dt.lanes);
  } else if (dt.code == VM_DTYPE_BOOL) {
    if (dt.lanes == 1)
      snprintf(buf, buflen, "bool");
    else
      snprintf(buf, buflen, "boolx%u", dt.lanes);
  } else if (dt.lanes == 1) {
    snprintf(buf, buflen, "%s%u", p, dt.bits);
  } else {
    snprintf(buf, buflen, "%s%ux%u", p, dt.bits, dt.lanes);
  }
  return buf;
}

/* Parses a decimal number of at most 3 digits from s[*i..len). */
static int parse_small(const char *s, size_t len, size_t *i, unsigned *out) {
  unsigned v = 0;
  size_t start = *i;
  while (*i < len && s[*i] >= '0' && s[*i] <= '9' && *i - start < 3) {
    v = v * 10 + (unsigned)(s[*i] - '0');
    (*i)++;
  }
  if (*i == start) return -1;
  *out = v;
  return 0;
}

int vm_dtype_parse(const char *s, size_t len, vm_dtype_t *out_dt) {
  static const struct {
    const char *name;
    uint8_t code;
  } prefixes[] = {{"bfloat", VM_DTYPE_BFLOAT}, {"float", VM_DTYPE_FLOAT},
                  {"uint", VM_DTYPE_UINT},     {"int", VM_DTYPE_INT},
                  {"bool", VM_DTYPE_BOOL}};
  for (size_t k = 0; k < sizeof(prefixes) / sizeof(prefixes[0]); k++) {
    size_t pl = strlen(prefixes[k].name);
    if (len < pl || memcmp(s, prefixes[k].name, pl) != 0) continue;
    size_t i = pl;
    unsigned bits = 8, lanes = 1;
    if (prefixes[k].code != VM_DTYPE_BOOL) {
      if (parse_small(s, len, &i, &bits) != 0) return -1;
    }
    if (i < len) {
      if (s[i] != 'x') return -1;
      i++;
      if (parse_small(s, len, &i, &lanes) != 0) return -1;
    }
    if (i != len || bits > 255 || lanes > 0xffff) return -1;
    vm_dtype_t dt = VM_DTYPE_MAKE(prefixes[k].code, bits, lanes);
    if (!vm_dtype_valid(dt)) return -1;
    *out_dt = dt;
    return 0;
  }
  return -1;
}

int vm_shape_numel(const int64_t *dims, uint32_t ndim, int64_t *out_numel) {
  int64_t extent, n; /* extent: the product of the nonzero dims */
  if (vm_ckd_extent_i64(dims, ndim, &extent) != 0) return -1;
  if (vm_ckd_prod_i64(dims, ndim, &n) != 0) return -1; /* fits: |n| <= extent */
  *out_numel = n;
  return 0;
}

int vm_tensor_nbytes(vm_dtype_t dt, const int64_t *dims, uint32_t ndim, uint64_t *out_nbytes) {
  int64_t n, extent;
  if (vm_shape_numel(dims, ndim, &n) != 0) return -1;
  /* byte strides of an empty tensor must fit as well */
  if (vm_ckd_extent_i64(dims, ndim, &extent) != 0 ||
      vm_ckd_mul_i64(extent, (int64_t)vm_dtype_bytes(dt), &extent) != 0)
    return -1;
  uint64_t b;
  if (vm_ckd_mul_u64((uint64_t)n, (uint64_t)vm_dtype_bytes(dt), &b) != 0) return -1;
  if (b > (uint64_t)INT64_MAX) return -1;
  *out_nbytes = b;
  return 0;
}

static double half_bits_to_f64(uint16_t h) {
  int s = h >> 15, e = (h >> 10) & 0x1f, f = h & 0x3ff;
  double v;
  if (e == 0)
    v = ldexp((double)f, -24);
  else if (e == 31)
    v = f ? NAN : INFINITY;
  else
    v = ldexp((double)(f | 0x400), e - 25);
  return s ? -v : v;
}

/* Integer element of 1, 2, 4 or 8 bytes, sign- or zero-extended. */
static int64_t load_int(const uint8_t *p, uint64_t i, unsigned bits, int is_signed) {
  switch (bits) {
    case 8: return is_signed ? (int8_t)p[i] : p[i];
    case 16: {
      uint16_t v;
      memcpy(&v, p + i * 2, 2);
      return is_signed ? (int16_t)v : v;
    }
    case 32: {
      uint32_t v;
      memcpy(&v, p + i * 4, 4);
      return is_signed ? (int32_t)v : (int64_t)v;
    }
    default: {
      uint64_t v;
      memcpy(&v, p + i * 8, 8);
      return (int64_t)v;
    }
  }
}

double vm_dtype_load_f64(vm_dtype_t dt, const void *data, uint64_t i) {
  const uint8_t *p = data;
  switch (dt.code) {
    case VM_DTYPE_FLOAT:
      if (dt.bits == 16) {
        uint16_t h;
        memcpy(&h, p + i * 2, 2);
        return half_bits_to_f64(h);
      }
      if (dt.bits == 32) {
        float f;
        memcpy(&f, p + i * 4, 4);
        return f;
      }
      if (dt.bits == 64) {
        double d;
        memcpy(&d, p + i * 8, 8);
        return d;
      }
      return NAN;
    case VM_DTYPE_BFLOAT: {
      uint16_t h;
      memcpy(&h, p + i * 2, 2);
      uint32_t w = (uint32_t)h << 16;
      float f;
      memcpy(&f, &w, 4);
      return f;
    }
    case VM_DTYPE_INT: return (double)load_int(p, i, dt.bits, 1);
    case VM_DTYPE_UINT:
      if (dt.bits == 64) return (double)(uint64_t)load_int(p, i, 64, 0);
      return (double)load_int(p, i, dt.bits, 0);
    case VM_DTYPE_BOOL: return p[i] ? 1.0 : 0.0;
  }
  return NAN;
}

int64_t vm_dtype_load_i64(vm_dtype_t dt, const void *data, uint64_t i) {
  const uint8_t *p = data;
  switch (dt.code) {
    case VM_DTYPE_INT: return load_int(p, i, dt.bits, 1);
    case VM_DTYPE_UINT: return load_int(p, i, dt.bits, 0);
    case VM_DTYPE_BOOL: return p[i] != 0;
    case VM_DTYPE_FLOAT:
    case VM_DTYPE_BFLOAT: {
      double d = vm_dtype_load_f64(dt, data, i);
      if (isnan(d)) return 0;
      if (d >= 9.2e18) return INT64_MAX;
      if (d <= -9.2e18) return INT64_MIN;
      return (int64_t)d;
    }
  }
  return 0;
}
