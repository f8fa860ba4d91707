/* ONNX tensors and attributes: TensorProto (raw, typed and external data)
 * into host tensors, typed attribute readers and the error messages that
 * name the node. Everything read here comes from a hostile file. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "onnx_internal.h"

vm_status_t onx_node_err(const onx_ctx_t *c, vm_code_t code, const char *fmt, ...) {
  char msg[1536];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  const Onnx__NodeProto *n = c->node;
  if (!n) return vm_status_make(code, "%s", msg);
  if (n->name && n->name[0])
    return vm_status_make(code, "node '%.80s' (%.40s): %s", n->name, n->op_type, msg);
  return vm_status_make(code, "node %u (%.40s): %s", c->node_idx, n->op_type, msg);
}

vm_status_t onx_unsupported_attr(const onx_ctx_t *c, const char *attr, const char *what,
                                 const char *supported) {
  return onx_node_err(c, VM_UNIMPLEMENTED, "attribute '%s' = %s: supported: %s", attr, what,
                      supported);
}

typedef struct dtype_map {
  int32_t elem;
  const char *name;
  vm_dtype_t dt;
  int ok;
} dtype_map_t;

static const dtype_map_t k_dtypes[] = {
    {1, "float", VM_F32, 1},
    {2, "uint8", VM_U8, 1},
    {3, "int8", VM_I8, 1},
    {4, "uint16", VM_DTYPE_MAKE(VM_DTYPE_UINT, 16, 1), 1},
    {5, "int16", VM_DTYPE_MAKE(VM_DTYPE_INT, 16, 1), 1},
    {6, "int32", VM_I32, 1},
    {7, "int64", VM_I64, 1},
    {8, "string", VM_F32, 0},
    {9, "bool", VM_BOOL, 1},
    {10, "float16", VM_F16, 1},
    {11, "double", VM_F64, 1},
    {12, "uint32", VM_DTYPE_MAKE(VM_DTYPE_UINT, 32, 1), 1},
    {13, "uint64", VM_DTYPE_MAKE(VM_DTYPE_UINT, 64, 1), 1},
    {14, "complex64", VM_F32, 0},
    {15, "complex128", VM_F32, 0},
    {16, "bfloat16", VM_DTYPE_MAKE(VM_DTYPE_BFLOAT, 16, 1), 1},
    {17, "float8e4m3fn", VM_DTYPE_MAKE(VM_DTYPE_FLOAT8_E4M3FN, 8, 1), 1},
    {18, "float8e4m3fnuz", VM_DTYPE_MAKE(VM_DTYPE_FLOAT8_E4M3FNUZ, 8, 1), 1},
    {19, "float8e5m2", VM_DTYPE_MAKE(VM_DTYPE_FLOAT8_E5M2, 8, 1), 1},
    {20, "float8e5m2fnuz", VM_DTYPE_MAKE(VM_DTYPE_FLOAT8_E5M2FNUZ, 8, 1), 1},
    {21, "uint4", VM_DTYPE_MAKE(VM_DTYPE_UINT, 4, 1), 1},
    {22, "int4", VM_DTYPE_MAKE(VM_DTYPE_INT, 4, 1), 1},
    {23, "float4e2m1", VM_DTYPE_MAKE(VM_DTYPE_FLOAT4_E2M1FN, 4, 1), 1},
    {24, "float8e8m0", VM_DTYPE_MAKE(VM_DTYPE_FLOAT8_E8M0FNU, 8, 1), 1},
    {25, "uint2", VM_DTYPE_MAKE(VM_DTYPE_UINT, 2, 1), 1},
    {26, "int2", VM_DTYPE_MAKE(VM_DTYPE_INT, 2, 1), 1},
};

int onx_dtype_from_onnx(int32_t elem, vm_dtype_t *out) {
  for (size_t i = 0; i < sizeof(k_dtypes) / sizeof(k_dtypes[0]); i++) {
    if (k_dtypes[i].elem == elem && k_dtypes[i].ok) {
      *out = k_dtypes[i].dt;
      return 0;
    }
  }
  return -1;
}

int32_t onx_dtype_to_onnx(vm_dtype_t dt) {
  for (size_t i = 0; i < sizeof(k_dtypes) / sizeof(k_dtypes[0]); i++)
    if (k_dtypes[i].ok && vm_dtype_equal(k_dtypes[i].dt, dt)) return k_dtypes[i].elem;
  return 0;
}

const char *onx_onnx_type_name(int32_t elem) {
  for (size_t i = 0; i < sizeof(k_dtypes) / sizeof(k_dtypes[0]); i++)
    if (k_dtypes[i].elem == elem) return k_dtypes[i].name;
  return "unknown";
}

void vmcc_tensor_free(vmcc_tensor_t *t) {
  if (!t) return;
  free(t->data);
  t->data = NULL;
  t->nbytes = 0;
}

/* external_data: reads length bytes at offset of file location, which must
 * be a relative path inside base_dir (no "..", no absolute path, and its
 * real path under the folder's real path: a symbolic link cannot lead
 * out). */
static vm_status_t read_external(const Onnx__TensorProto *tp, const char *base_dir,
                                 const char *what, uint64_t nbytes, uint8_t *dst) {
  const char *loc = NULL;
  uint64_t offset = 0, length = nbytes;
  int has_length = 0;
  for (size_t i = 0; i < tp->n_external_data; i++) {
    const Onnx__StringStringEntryProto *e = tp->external_data[i];
    if (!e || !e->key || !e->value) continue;
    char *end = NULL;
    if (strcmp(e->key, "location") == 0) {
      loc = e->value;
    } else if (strcmp(e->key, "offset") == 0 || strcmp(e->key, "length") == 0) {
      errno = 0;
      unsigned long long v = strtoull(e->value, &end, 10);
      if (errno || end == e->value || *end || e->value[0] == '-')
        return vm_status_make(VM_INVALID_ARGUMENT, "%s: external data %s '%.32s' is not a number",
                              what, e->key, e->value);
      if (e->key[0] == 'o') {
        offset = v;
      } else {
        length = v;
        has_length = 1;
      }
    }
  }
  if (!loc || !loc[0])
    return vm_status_make(VM_INVALID_ARGUMENT, "%s: external data without a location", what);
  if (has_length && length != nbytes)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "%s: external data length %llu, the tensor has %llu bytes", what,
                          (unsigned long long)length, (unsigned long long)nbytes);
  if (!base_dir)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "%s: external data '%.64s' needs the model's folder: compile the "
                          "model from its file",
                          what, loc);
  if (loc[0] == '/' || strstr(loc, "..") || strlen(loc) > 1024)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "%s: external data location '%.64s' must be a relative path inside "
                          "the model's folder",
                          what, loc);
  char path[PATH_MAX], real_dir[PATH_MAX], real_file[PATH_MAX];
  if (snprintf(path, sizeof(path), "%s/%s", base_dir, loc) >= (int)sizeof(path))
    return vm_status_make(VM_INVALID_ARGUMENT, "%s: external data path too long", what);
  if (!realpath(base_dir, real_dir) || !realpath(path, real_file))
    return vm_status_make(VM_NOT_FOUND, "%s: external data file '%.64s': %s", what, loc,
                          strerror(errno));
  size_t dl = strlen(real_dir);
  if (strncmp(real_file, real_dir, dl) != 0 || (real_file[dl] != '/' && dl > 1))
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "%s: external data '%.64s' resolves outside the model's folder", what,
                          loc);
  /* non-blocking: a FIFO or device in the folder is refused below, not
   * waited on; no link followed: the real path has none left, so one now
   * was swapped in after the check */
  int fd = open(real_file, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
  if (fd < 0 && errno == ELOOP)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "%s: external data '%.64s' was replaced by a symbolic link", what, loc);
  if (fd < 0)
    return vm_status_make(errno == EACCES ? VM_PERMISSION_DENIED : VM_NOT_FOUND,
                          "%s: cannot open external data '%.64s': %s", what, loc, strerror(errno));
  struct stat sb;
  vm_status_t st = VM_STATUS_OK;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    st = vm_status_make(VM_INVALID_ARGUMENT,
                        "%s: external data '%.64s' is not a regular file (a FIFO, device or "
                        "folder): put the tensor's bytes in a file",
                        what, loc);
  } else if (offset > (uint64_t)sb.st_size || nbytes > (uint64_t)sb.st_size - offset) {
    st = vm_status_make(VM_INVALID_ARGUMENT,
                        "%s: external data '%.64s' has %lld bytes, the tensor needs %llu at "
                        "offset %llu",
                        what, loc, (long long)sb.st_size, (unsigned long long)nbytes,
                        (unsigned long long)offset);
  } else {
    uint64_t done = 0;
    while (done < nbytes) {
      ssize_t r = pread(fd, dst + done, nbytes - done, (off_t)(offset + done));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        st = vm_status_make(VM_UNAVAILABLE, "%s: reading external data '%.64s': %s", what, loc,
                            r < 0 ? strerror(errno) : "unexpected end of file");
        break;
      }
      done += (uint64_t)r;
    }
  }
  close(fd);
  return st;
}

vm_status_t onx_tensor_from_proto(const Onnx__TensorProto *tp, const char *base_dir,
                                  const char *what, vmcc_tensor_t *out) {
  memset(out, 0, sizeof(*out));
  if (!tp) return vm_status_make(VM_INVALID_ARGUMENT, "%s: no tensor", what);
  int32_t elem = tp->has_data_type ? tp->data_type : 0;
  vm_dtype_t dt;
  if (onx_dtype_from_onnx(elem, &dt) != 0)
    return vm_status_make(VM_UNIMPLEMENTED, "%s: data type %d (%s) is not supported: supported: %s",
                          what, elem, onx_onnx_type_name(elem), ONX_DTYPES_SUPPORTED);
  unsigned per = vm_dtype_per_byte(dt);
  if (tp->n_dims > VMCC_MAX_NDIM)
    return vm_status_make(VM_UNIMPLEMENTED, "%s: %zu dims, at most %d are supported", what,
                          tp->n_dims, VMCC_MAX_NDIM);
  if (tp->segment)
    return vm_status_make(VM_UNIMPLEMENTED, "%s: segmented tensors are not supported", what);
  out->dtype = dt;
  out->ndim = (uint32_t)tp->n_dims;
  for (size_t i = 0; i < tp->n_dims; i++) {
    if (tp->dims[i] < 0 || tp->dims[i] > INT32_MAX)
      return vm_status_make(VM_INVALID_ARGUMENT, "%s: dim %zu is %lld", what, i,
                            (long long)tp->dims[i]);
    out->shape[i] = tp->dims[i];
  }
  uint64_t nbytes;
  int64_t extent;
  if (vm_ckd_extent_i64(out->shape, out->ndim, &extent) != 0) {
    char s[200];
    return vm_status_make(VM_INVALID_ARGUMENT, "%s: dims %s: their product overflows 64 bits", what,
                          onx_dims_str(out->ndim, out->shape, s, sizeof(s)));
  }
  if (vm_tensor_nbytes(dt, out->shape, out->ndim, &nbytes) != 0 || nbytes > ONX_MAX_TENSOR_BYTES)
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "%s: tensor larger than %llu bytes", what,
                          (unsigned long long)ONX_MAX_TENSOR_BYTES);
  int64_t numel = onx_numel(out->ndim, out->shape);
  uint8_t *data = malloc(nbytes ? nbytes : 1);
  if (!data) return vm_status_make(VM_RESOURCE_EXHAUSTED, "%s: out of host memory", what);
  vm_status_t st = VM_STATUS_OK;
  size_t esz = vm_dtype_bytes(dt);
  if (tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) {
    st = read_external(tp, base_dir, what, nbytes, data);
  } else if (tp->has_raw_data) {
    if (tp->raw_data.len != nbytes)
      st = vm_status_make(VM_INVALID_ARGUMENT, "%s: raw_data has %zu bytes, expected %llu", what,
                          tp->raw_data.len, (unsigned long long)nbytes);
    else if (nbytes)
      memcpy(data, tp->raw_data.data, nbytes);
  } else if (per > 1) {
    /* packed types: one packed byte in each int32 */
    if (tp->n_int32_data != nbytes)
      st = vm_status_make(VM_INVALID_ARGUMENT,
                          "%s: %zu int32 values for %lld packed %u-bit elements (%llu bytes)", what,
                          tp->n_int32_data, (long long)numel, dt.bits, (unsigned long long)nbytes);
    for (uint64_t i = 0; !st && i < nbytes; i++) {
      if (tp->int32_data[i] < 0 || tp->int32_data[i] > 255)
        st = vm_status_make(VM_INVALID_ARGUMENT, "%s: packed byte %llu is %d, not 0..255", what,
                            (unsigned long long)i, tp->int32_data[i]);
      else
        data[i] = (uint8_t)tp->int32_data[i];
    }
  } else {
    /* typed fields, by the dtype's storage rule */
    size_t n = 0;
    int kind = 0; /* 1 float, 2 int32, 3 int64, 4 double, 5 uint64 */
    if (vm_dtype_equal(dt, VM_F32)) {
      n = tp->n_float_data, kind = 1;
    } else if (vm_dtype_equal(dt, VM_I64)) {
      n = tp->n_int64_data, kind = 3;
    } else if (vm_dtype_equal(dt, VM_F64)) {
      n = tp->n_double_data, kind = 4;
    } else if (dt.code == VM_DTYPE_UINT && dt.bits >= 32) {
      n = tp->n_uint64_data, kind = 5;
    } else {
      n = tp->n_int32_data, kind = 2; /* int32 and narrower, bool, float16 bits */
    }
    if (n != (size_t)numel) {
      st = vm_status_make(VM_INVALID_ARGUMENT, "%s: %zu values for %lld elements", what, n,
                          (long long)numel);
    } else {
      for (int64_t i = 0; i < numel; i++) {
        switch (kind) {
          case 1: memcpy(data + i * 4, &tp->float_data[i], 4); break;
          case 3: memcpy(data + i * 8, &tp->int64_data[i], 8); break;
          case 4: memcpy(data + i * 8, &tp->double_data[i], 8); break;
          case 5: onx_st_i(dt, data, i, (int64_t)tp->uint64_data[i]); break;
          default:
            if (vm_dtype_equal(dt, VM_F16) || dt.code == VM_DTYPE_BFLOAT) {
              uint16_t h = (uint16_t)tp->int32_data[i]; /* the bits */
              memcpy(data + i * 2, &h, 2);
            } else if (dt.code >= VM_DTYPE_FLOAT8_E4M3FN) {
              data[i] = (uint8_t)tp->int32_data[i]; /* float8: the bits */
            } else {
              onx_st_i(dt, data, i, tp->int32_data[i]);
            }
        }
      }
      (void)esz;
    }
  }
  /* the padding bits of a packed tensor's last byte read as zero, so that
   * equal tensors have equal bytes */
  if (!st && per > 1 && numel % per)
    data[nbytes - 1] &= (uint8_t)((1u << ((unsigned)(numel % per) * dt.bits)) - 1);
  if (st) {
    free(data);
    return st;
  }
  out->data = data;
  out->nbytes = nbytes;
  return VM_STATUS_OK;
}

const Onnx__AttributeProto *onx_attr(const Onnx__NodeProto *n, const char *name) {
  for (size_t i = 0; i < n->n_attribute; i++)
    if (n->attribute[i] && n->attribute[i]->name && strcmp(n->attribute[i]->name, name) == 0)
      return n->attribute[i];
  return NULL;
}

/* Whether token tok ("name" or "name:LO-HI", either bound optional) of an
 * attribute spec names `name` at this opset; the name's length in *len. */
static int spec_token_matches(const char *tok, size_t toklen, const char *name, int64_t opset,
                              size_t *len) {
  const char *colon = memchr(tok, ':', toklen);
  *len = colon ? (size_t)(colon - tok) : toklen;
  if (!name || strlen(name) != *len || strncmp(tok, name, *len) != 0) return 0;
  if (!colon) return 1;
  const char *p = colon + 1, *end = tok + toklen;
  int64_t lo = 1, hi = INT64_MAX;
  if (p < end && *p != '-') lo = strtoll(p, NULL, 10);
  const char *dash = memchr(p, '-', (size_t)(end - p));
  if (dash && dash + 1 < end) hi = strtoll(dash + 1, NULL, 10);
  return opset >= lo && opset <= hi;
}

/* The names of spec valid at opset, comma-separated, into buf ("none"). */
static void spec_names(const char *spec, int64_t opset, char *buf, size_t n) {
  size_t used = 0;
  buf[0] = 0;
  for (const char *p = spec; *p;) {
    while (*p == ' ') p++;
    size_t tl = strcspn(p, " ");
    if (!tl) break;
    size_t nl;
    const char *colon = memchr(p, ':', tl);
    nl = colon ? (size_t)(colon - p) : tl;
    char name[64];
    snprintf(name, sizeof(name), "%.*s", (int)(nl < 63 ? nl : 63), p);
    if (spec_token_matches(p, tl, name, opset, &nl) && used < n)
      used += (size_t)snprintf(buf + used, n - used, "%s%s", used ? ", " : "", name);
    p += tl;
  }
  if (!buf[0]) snprintf(buf, n, "none");
}

vm_status_t onx_check_attrs(const onx_ctx_t *c, const char *spec) {
  const Onnx__NodeProto *n = c->node;
  for (size_t i = 0; i < n->n_attribute; i++) {
    const Onnx__AttributeProto *a = n->attribute[i];
    if (!a || !a->name || !a->name[0])
      return onx_node_err(c, VM_INVALID_ARGUMENT, "attribute %zu has no name", i);
    for (size_t j = 0; j < i; j++)
      if (n->attribute[j] && n->attribute[j]->name && strcmp(n->attribute[j]->name, a->name) == 0)
        return onx_node_err(c, VM_INVALID_ARGUMENT, "attribute '%.60s' is given twice", a->name);
  }
  for (size_t i = 0; i < n->n_attribute; i++) {
    const Onnx__AttributeProto *a = n->attribute[i];
    int known = 0;
    for (const char *p = spec; *p && !known;) {
      while (*p == ' ') p++;
      size_t tl = strcspn(p, " "), nl;
      if (!tl) break;
      known = spec_token_matches(p, tl, a->name, c->opset, &nl);
      p += tl;
    }
    if (!known) {
      char sup[512];
      spec_names(spec, c->opset, sup, sizeof(sup));
      return onx_node_err(c, VM_UNIMPLEMENTED,
                          "attribute '%.60s' is not supported at opset %lld: supported: %s",
                          a->name, (long long)c->opset, sup);
    }
  }
  return VM_STATUS_OK;
}

static vm_status_t attr_type_err(const onx_ctx_t *c, const char *name, const char *want) {
  return onx_node_err(c, VM_INVALID_ARGUMENT, "attribute '%s' is not %s", name, want);
}

vm_status_t onx_attr_int(const onx_ctx_t *c, const char *name, int64_t def, int64_t *out) {
  const Onnx__AttributeProto *a = onx_attr(c->node, name);
  *out = def;
  if (!a) return VM_STATUS_OK;
  if (a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT && !a->has_i)
    return attr_type_err(c, name, "an int");
  *out = a->i;
  return VM_STATUS_OK;
}

vm_status_t onx_attr_float(const onx_ctx_t *c, const char *name, float def, float *out) {
  const Onnx__AttributeProto *a = onx_attr(c->node, name);
  *out = def;
  if (!a) return VM_STATUS_OK;
  if (a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT && !a->has_f)
    return attr_type_err(c, name, "a float");
  *out = a->f;
  return VM_STATUS_OK;
}

vm_status_t onx_attr_str(const onx_ctx_t *c, const char *name, const char *def, char *buf,
                         size_t len) {
  const Onnx__AttributeProto *a = onx_attr(c->node, name);
  snprintf(buf, len, "%s", def);
  if (!a) return VM_STATUS_OK;
  if (a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING && !a->has_s)
    return attr_type_err(c, name, "a string");
  if (a->s.len >= len || (a->s.len && (!a->s.data || memchr(a->s.data, 0, a->s.len))))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "attribute '%s' is too long or holds a NUL", name);
  if (a->s.len) memcpy(buf, a->s.data, a->s.len);
  buf[a->s.len] = 0;
  return VM_STATUS_OK;
}

vm_status_t onx_attr_ints(const onx_ctx_t *c, const char *name, int64_t *out, int64_t max,
                          int64_t *out_n) {
  const Onnx__AttributeProto *a = onx_attr(c->node, name);
  *out_n = -1;
  if (!a) return VM_STATUS_OK;
  if (a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS && a->n_ints == 0)
    return attr_type_err(c, name, "a list of ints");
  if ((int64_t)a->n_ints > max)
    return onx_node_err(c, VM_UNIMPLEMENTED, "attribute '%s' has %zu values, at most %lld", name,
                        a->n_ints, (long long)max);
  for (size_t i = 0; i < a->n_ints; i++) out[i] = a->ints[i];
  *out_n = (int64_t)a->n_ints;
  return VM_STATUS_OK;
}

vm_status_t onx_attr_floats(const onx_ctx_t *c, const char *name, float *out, int64_t max,
                            int64_t *out_n) {
  const Onnx__AttributeProto *a = onx_attr(c->node, name);
  *out_n = -1;
  if (!a) return VM_STATUS_OK;
  if (a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS && a->n_floats == 0)
    return attr_type_err(c, name, "a list of floats");
  if ((int64_t)a->n_floats > max)
    return onx_node_err(c, VM_UNIMPLEMENTED, "attribute '%s' has %zu values, at most %lld", name,
                        a->n_floats, (long long)max);
  for (size_t i = 0; i < a->n_floats; i++) out[i] = a->floats[i];
  *out_n = (int64_t)a->n_floats;
  return VM_STATUS_OK;
}
