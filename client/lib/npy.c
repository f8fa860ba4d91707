/* Host tensors and .npy files.
 *
 * The .npy format: "\x93NUMPY", major, minor, a header length (u16 LE for
 * version 1, u32 LE for 2 and 3), then an ASCII Python dict literal
 * {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded with
 * spaces and ending in '\n', then the raw array bytes. Every length and
 * count read from the input is checked before it is used, and data bytes
 * are allocated only once the input is known to contain them.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vmrpc/file.h"
#include "vmrpc/vmclient.h"

/* Headers longer than this are refused (numpy writes < 200 bytes for up to
 * 16 dims; its own reader refuses more than 10000 by default). */
#define NPY_MAX_HEADER 65536u
static const uint8_t npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

/* ------------------------------------------------------------ tensors */

static vm_status_t shape_check(vm_dtype_t dtype, uint32_t ndim, const int64_t *shape,
                               uint64_t *out_nbytes) {
  if (!vm_dtype_valid(dtype))
    return vm_status_make(VM_INVALID_ARGUMENT, "invalid dtype (code %u, %u bits, %u lanes)",
                          dtype.code, dtype.bits, dtype.lanes);
  if (ndim > VMC_MAX_NDIM)
    return vm_status_make(VM_INVALID_ARGUMENT, "tensor has %u dims, at most %d", ndim,
                          VMC_MAX_NDIM);
  if (ndim && !shape) return vm_status_make(VM_INVALID_ARGUMENT, "shape is NULL");
  for (uint32_t i = 0; i < ndim; i++)
    if (shape[i] < 0)
      return vm_status_make(VM_INVALID_ARGUMENT, "dimension %u is negative (%lld)", i,
                            (long long)shape[i]);
  if (vm_tensor_nbytes(dtype, shape, ndim, out_nbytes) != 0)
    return vm_status_make(VM_INVALID_ARGUMENT, "tensor size overflows 64 bits");
  return VM_STATUS_OK;
}

static void tensor_fill(vmc_tensor_t *out, vm_dtype_t dtype, uint32_t ndim, const int64_t *shape,
                        void *data, uint64_t nbytes, int owns_data) {
  memset(out, 0, sizeof(*out));
  out->dtype = dtype;
  out->ndim = ndim;
  for (uint32_t i = 0; i < ndim; i++) out->shape[i] = shape[i];
  out->data = data;
  out->nbytes = nbytes;
  out->owns_data = owns_data;
}

vm_status_t vmc_tensor_alloc(vm_dtype_t dtype, uint32_t ndim, const int64_t *shape,
                             vmc_tensor_t *out) {
  uint64_t nbytes;
  VM_RETURN_IF_ERROR(shape_check(dtype, ndim, shape, &nbytes));
  if (nbytes > SIZE_MAX)
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "%llu bytes do not fit in memory",
                          (unsigned long long)nbytes);
  void *data = calloc(1, nbytes ? (size_t)nbytes : 1);
  if (!data)
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory for a %llu-byte tensor",
                          (unsigned long long)nbytes);
  tensor_fill(out, dtype, ndim, shape, data, nbytes, 1);
  return VM_STATUS_OK;
}

vm_status_t vmc_tensor_wrap(vm_dtype_t dtype, uint32_t ndim, const int64_t *shape, void *data,
                            vmc_tensor_t *out) {
  uint64_t nbytes;
  VM_RETURN_IF_ERROR(shape_check(dtype, ndim, shape, &nbytes));
  if (nbytes && !data)
    return vm_status_make(VM_INVALID_ARGUMENT, "tensor of %llu bytes has no data",
                          (unsigned long long)nbytes);
  tensor_fill(out, dtype, ndim, shape, data, nbytes, 0);
  return VM_STATUS_OK;
}

void vmc_tensor_free(vmc_tensor_t *t) {
  if (!t) return;
  if (t->owns_data) free(t->data);
  memset(t, 0, sizeof(*t));
}

vm_status_t vmc_tensor_check(const vmc_tensor_t *t) {
  if (!t) return vm_status_make(VM_INVALID_ARGUMENT, "tensor is NULL");
  uint64_t nbytes;
  VM_RETURN_IF_ERROR(shape_check(t->dtype, t->ndim, t->shape, &nbytes));
  if (nbytes != t->nbytes)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "tensor says %llu bytes but its shape and dtype need %llu",
                          (unsigned long long)t->nbytes, (unsigned long long)nbytes);
  if (nbytes && !t->data)
    return vm_status_make(VM_INVALID_ARGUMENT, "tensor of %llu bytes has no data",
                          (unsigned long long)nbytes);
  return VM_STATUS_OK;
}

/* ------------------------------------------------------------ dtypes */

typedef struct npy_type {
  char kind; /* 'f', 'i', 'u', 'b' */
  uint8_t bytes;
  vm_dtype_t dtype;
} npy_type_t;

static const npy_type_t npy_types[] = {
    {'f', 2, VM_DTYPE_MAKE(VM_DTYPE_FLOAT, 16, 1)}, {'f', 4, VM_DTYPE_MAKE(VM_DTYPE_FLOAT, 32, 1)},
    {'f', 8, VM_DTYPE_MAKE(VM_DTYPE_FLOAT, 64, 1)}, {'i', 1, VM_DTYPE_MAKE(VM_DTYPE_INT, 8, 1)},
    {'i', 2, VM_DTYPE_MAKE(VM_DTYPE_INT, 16, 1)},   {'i', 4, VM_DTYPE_MAKE(VM_DTYPE_INT, 32, 1)},
    {'i', 8, VM_DTYPE_MAKE(VM_DTYPE_INT, 64, 1)},   {'u', 1, VM_DTYPE_MAKE(VM_DTYPE_UINT, 8, 1)},
    {'u', 2, VM_DTYPE_MAKE(VM_DTYPE_UINT, 16, 1)},  {'u', 4, VM_DTYPE_MAKE(VM_DTYPE_UINT, 32, 1)},
    {'u', 8, VM_DTYPE_MAKE(VM_DTYPE_UINT, 64, 1)},  {'b', 1, VM_DTYPE_MAKE(VM_DTYPE_BOOL, 8, 1)},
};
#define NPY_NUM_TYPES (sizeof(npy_types) / sizeof(npy_types[0]))
#define NPY_SUPPORTED "float16/32/64, int8/16/32/64, uint8/16/32/64, bool"

/* Parses a descr such as "<f4" or "|b1". */
static vm_status_t descr_parse(const char *s, size_t n, vm_dtype_t *out) {
  if (n < 2 || n > 8)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          ".npy dtype '%.*s' is not supported (supported: " NPY_SUPPORTED ")",
                          (int)(n > 32 ? 32 : n), s);
  char order = s[0];
  char kind = s[1];
  int bytes = 0;
  for (size_t i = 2; i < n; i++) {
    if (s[i] < '0' || s[i] > '9' || bytes > 100) {
      bytes = -1;
      break;
    }
    bytes = bytes * 10 + (s[i] - '0');
  }
  if (order != '<' && order != '>' && order != '|' && order != '=')
    return vm_status_make(VM_INVALID_ARGUMENT,
                          ".npy dtype '%.*s' is not supported (supported: " NPY_SUPPORTED ")",
                          (int)n, s);
  const npy_type_t *t = NULL;
  for (size_t i = 0; i < NPY_NUM_TYPES; i++)
    if (npy_types[i].kind == kind && npy_types[i].bytes == bytes) t = &npy_types[i];
  if (!t)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          ".npy dtype '%.*s' is not supported (supported: " NPY_SUPPORTED
                          "); convert it in NumPy, e.g. a.astype(np.float32)",
                          (int)n, s);
  if (order == '>' && t->bytes > 1)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          ".npy data is big-endian ('%.*s'), only little-endian is supported; "
                          "convert it with a.astype(a.dtype.newbyteorder('<'))",
                          (int)n, s);
  if (order == '|' && t->bytes > 1)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          ".npy dtype '%.*s' has no byte order but elements of %d bytes", (int)n, s,
                          t->bytes);
  *out = t->dtype;
  return VM_STATUS_OK;
}

static vm_status_t descr_write(vm_dtype_t dt, char *buf, size_t cap) {
  for (size_t i = 0; i < NPY_NUM_TYPES; i++) {
    if (vm_dtype_equal(npy_types[i].dtype, dt)) {
      snprintf(buf, cap, "%c%c%u", npy_types[i].bytes == 1 ? '|' : '<', npy_types[i].kind,
               npy_types[i].bytes);
      return VM_STATUS_OK;
    }
  }
  char name[24];
  vm_dtype_str(dt, name, sizeof(name));
  return vm_status_make(VM_INVALID_ARGUMENT,
                        "dtype %s cannot be stored in .npy (supported: " NPY_SUPPORTED ")", name);
}

/* ------------------------------------------------------------ header */

typedef struct npy_lexer {
  const char *p, *end;
} npy_lexer_t;

static void skip_ws(npy_lexer_t *l) {
  while (l->p < l->end && (*l->p == ' ' || *l->p == '\t' || *l->p == '\n' || *l->p == '\r')) l->p++;
}

static int eat(npy_lexer_t *l, char ch) {
  skip_ws(l);
  if (l->p < l->end && *l->p == ch) {
    l->p++;
    return 1;
  }
  return 0;
}

/* A quoted string: sets *s, *n (without quotes). */
static int lex_string(npy_lexer_t *l, const char **s, size_t *n) {
  skip_ws(l);
  if (l->p >= l->end || (*l->p != '\'' && *l->p != '"')) return 0;
  char q = *l->p++;
  const char *start = l->p;
  while (l->p < l->end && *l->p != q) {
    if (*l->p == '\\') return 0; /* no escapes in a numpy header */
    l->p++;
  }
  if (l->p >= l->end) return 0;
  *s = start;
  *n = (size_t)(l->p - start);
  l->p++;
  return 1;
}

static int lex_word(npy_lexer_t *l, const char *w) {
  skip_ws(l);
  size_t n = strlen(w);
  if ((size_t)(l->end - l->p) < n || memcmp(l->p, w, n) != 0) return 0;
  l->p += n;
  return 1;
}

/* A non-negative integer (a trailing 'L' of old Python 2 files allowed). */
static int lex_dim(npy_lexer_t *l, int64_t *out) {
  skip_ws(l);
  if (l->p >= l->end || *l->p < '0' || *l->p > '9') return 0;
  uint64_t v = 0;
  while (l->p < l->end && *l->p >= '0' && *l->p <= '9') {
    uint64_t d = (uint64_t)(*l->p - '0');
    if (v > (uint64_t)(INT64_MAX - d) / 10) return -1; /* overflow */
    v = v * 10 + d;
    l->p++;
  }
  if (l->p < l->end && *l->p == 'L') l->p++;
  *out = (int64_t)v;
  return 1;
}

#define HDR_ERR(...) vm_status_make(VM_INVALID_ARGUMENT, __VA_ARGS__)

/* Parses the dict. */
static vm_status_t header_parse(const char *h, size_t n, vm_dtype_t *out_dt, uint32_t *out_ndim,
                                int64_t *out_shape) {
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)h[i];
    if (ch >= 0x80 || (ch < 0x20 && ch != '\n' && ch != '\t' && ch != '\r'))
      return HDR_ERR(
          "corrupt .npy header: byte 0x%02x at header offset %zu is not printable "
          "ASCII (is this an .npy file?)",
          ch, i);
  }
  npy_lexer_t l = {h, h + n};
  if (!eat(&l, '{'))
    return HDR_ERR("corrupt .npy header: expected a dict starting with '{', got '%.*s'",
                   (int)(n < 20 ? n : 20), h); /* h is not NUL-terminated */
  int have_descr = 0, have_order = 0, have_shape = 0;
  int fortran = 0;
  const char *descr = NULL;
  size_t descr_n = 0;
  uint32_t ndim = 0;
  for (;;) {
    if (eat(&l, '}')) break;
    const char *key;
    size_t key_n;
    if (!lex_string(&l, &key, &key_n))
      return HDR_ERR("corrupt .npy header: expected a quoted key or '}' at offset %zu",
                     (size_t)(l.p - h));
    if (!eat(&l, ':'))
      return HDR_ERR("corrupt .npy header: expected ':' after key '%.*s'", (int)key_n, key);
    if (key_n == 5 && memcmp(key, "descr", 5) == 0) {
      skip_ws(&l);
      if (l.p < l.end && *l.p == '[')
        return HDR_ERR(
            ".npy files of structured dtypes are not supported (supported: " NPY_SUPPORTED ")");
      if (!lex_string(&l, &descr, &descr_n))
        return HDR_ERR("corrupt .npy header: 'descr' is not a quoted string");
      have_descr = 1;
    } else if (key_n == 13 && memcmp(key, "fortran_order", 13) == 0) {
      if (lex_word(&l, "True"))
        fortran = 1;
      else if (lex_word(&l, "False"))
        fortran = 0;
      else
        return HDR_ERR("corrupt .npy header: 'fortran_order' is neither True nor False");
      have_order = 1;
    } else if (key_n == 5 && memcmp(key, "shape", 5) == 0) {
      if (!eat(&l, '(')) return HDR_ERR("corrupt .npy header: 'shape' is not a tuple");
      ndim = 0;
      for (;;) {
        if (eat(&l, ')')) break;
        int64_t d;
        int r = lex_dim(&l, &d);
        if (r < 0) return HDR_ERR(".npy shape has a dimension larger than 2^63 - 1");
        if (r == 0)
          return HDR_ERR(
              "corrupt .npy header: shape entries must be non-negative integers "
              "(at offset %zu)",
              (size_t)(l.p - h));
        if (ndim >= VMC_MAX_NDIM)
          return HDR_ERR(".npy array has more than %d dimensions (the most vmrpc supports)",
                         VMC_MAX_NDIM);
        out_shape[ndim++] = d;
        if (eat(&l, ')')) break;
        if (!eat(&l, ',')) return HDR_ERR("corrupt .npy header: expected ',' or ')' in the shape");
      }
      have_shape = 1;
    } else {
      return HDR_ERR("corrupt .npy header: unknown key '%.*s'", (int)(key_n > 32 ? 32 : key_n),
                     key);
    }
    if (eat(&l, '}')) break;
    if (!eat(&l, ','))
      return HDR_ERR("corrupt .npy header: expected ',' or '}' at offset %zu", (size_t)(l.p - h));
  }
  skip_ws(&l);
  if (l.p != l.end)
    return HDR_ERR("corrupt .npy header: unexpected text after the dict at offset %zu",
                   (size_t)(l.p - h));
  if (!have_descr || !have_order || !have_shape)
    return HDR_ERR("corrupt .npy header: missing key '%s'", !have_descr   ? "descr"
                                                            : !have_order ? "fortran_order"
                                                                          : "shape");
  VM_RETURN_IF_ERROR(descr_parse(descr, descr_n, out_dt));
  /* A 0-d or 1-d array has the same bytes in either order. */
  if (fortran && ndim > 1)
    return HDR_ERR(
        ".npy array is in Fortran order, only C order is supported; save it with "
        "np.save(path, np.ascontiguousarray(a))");
  *out_ndim = ndim;
  return VM_STATUS_OK;
}

/* Parses the preamble (magic, version, header length) from the first
 * bytes of the input: the dict starts at *out_dict_off and the data at
 * *out_header_end. */
static vm_status_t preamble_parse(const uint8_t *p, size_t avail, size_t *out_header_end,
                                  size_t *out_dict_off) {
  if (avail < 10)
    return HDR_ERR("not an .npy file: %zu bytes, shorter than the 10-byte preamble", avail);
  if (memcmp(p, npy_magic, 6) != 0)
    return HDR_ERR("not an .npy file: the magic string \\x93NUMPY is missing");
  uint8_t major = p[6], minor = p[7];
  size_t hlen, off;
  if (major == 1) {
    hlen = (size_t)p[8] | (size_t)p[9] << 8;
    off = 10;
  } else if (major == 2 || major == 3) {
    if (avail < 12)
      return HDR_ERR("truncated .npy file: version %u.%u preamble needs 12 bytes", major, minor);
    hlen = (size_t)p[8] | (size_t)p[9] << 8 | (size_t)p[10] << 16 | (size_t)p[11] << 24;
    off = 12;
  } else {
    return HDR_ERR(".npy format version %u.%u is not supported (1.0, 2.0, 3.0 are)", major, minor);
  }
  if (minor != 0)
    return HDR_ERR(".npy format version %u.%u is not supported (1.0, 2.0, 3.0 are)", major, minor);
  if (hlen > NPY_MAX_HEADER)
    return HDR_ERR(".npy header of %zu bytes exceeds the limit of %u bytes", hlen, NPY_MAX_HEADER);
  /* Also what lets a reader holding the first 12 bytes trust that they
   * all belong to the preamble and header. */
  if (hlen < 2)
    return HDR_ERR("corrupt .npy file: a header of %zu bytes cannot hold its dictionary", hlen);
  *out_dict_off = off;
  *out_header_end = off + hlen;
  return VM_STATUS_OK;
}

/* From a complete header (preamble + dict) to dtype/shape/nbytes. */
static vm_status_t header_decode(const uint8_t *p, size_t dict_off, size_t header_end,
                                 vmc_tensor_t *meta) {
  memset(meta, 0, sizeof(*meta));
  VM_RETURN_IF_ERROR(header_parse((const char *)p + dict_off, header_end - dict_off, &meta->dtype,
                                  &meta->ndim, meta->shape));
  if (vm_tensor_nbytes(meta->dtype, meta->shape, meta->ndim, &meta->nbytes) != 0)
    return HDR_ERR(".npy shape is too large: its byte size overflows 64 bits");
  return VM_STATUS_OK;
}

static vm_status_t data_size_check(uint64_t have, uint64_t need) {
  if (have < need)
    return HDR_ERR("truncated .npy file: the shape needs %llu data bytes, only %llu present",
                   (unsigned long long)need, (unsigned long long)have);
  if (have > need)
    return HDR_ERR("corrupt .npy file: %llu bytes follow the %llu data bytes the shape needs",
                   (unsigned long long)(have - need), (unsigned long long)need);
  return VM_STATUS_OK;
}

vm_status_t vmc_npy_read_memory(const void *data, size_t size, vmc_tensor_t *out) {
  if (!data && size) return HDR_ERR("vmc_npy_read_memory: data is NULL");
  const uint8_t *p = data;
  size_t header_end = 0, dict_off = 0;
  VM_RETURN_IF_ERROR(preamble_parse(p, size, &header_end, &dict_off));
  if (header_end > size)
    return HDR_ERR("truncated .npy file: the header claims %zu bytes, the file has %zu",
                   header_end - dict_off, size - dict_off);
  vmc_tensor_t t;
  VM_RETURN_IF_ERROR(header_decode(p, dict_off, header_end, &t));
  VM_RETURN_IF_ERROR(data_size_check(size - header_end, t.nbytes));
  t.data = malloc(t.nbytes ? (size_t)t.nbytes : 1);
  if (!t.data)
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory for %llu bytes of .npy data",
                          (unsigned long long)t.nbytes);
  if (t.nbytes) memcpy(t.data, p + header_end, (size_t)t.nbytes);
  t.owns_data = 1;
  *out = t;
  return VM_STATUS_OK;
}

static vm_status_t read_full(int fd, void *buf, size_t n, const char *path) {
  uint8_t *b = buf;
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, b + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return vm_status_make(VM_UNAVAILABLE, "reading '%s': %s", path, strerror(errno));
    if (r == 0)
      return vm_status_make(VM_UNAVAILABLE, "reading '%s': the file shrank while reading", path);
    got += (size_t)r;
  }
  return VM_STATUS_OK;
}

vm_status_t vmc_npy_read_file(const char *path, vmc_tensor_t *out) {
  if (!path) return HDR_ERR("no .npy path given");
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    return vm_status_make(e == ENOENT ? VM_NOT_FOUND : VM_UNAVAILABLE, "cannot open '%s': %s", path,
                          strerror(e));
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    close(fd);
    return HDR_ERR("'%s' is not a regular file", path);
  }
  uint64_t fsize = (uint64_t)sb.st_size;
  uint8_t *hdr = NULL;
  vmc_tensor_t t;
  memset(&t, 0, sizeof(t));
  vm_status_t st;
  uint8_t pre[12];
  size_t pre_n = fsize < sizeof(pre) ? (size_t)fsize : sizeof(pre);
  if ((st = read_full(fd, pre, pre_n, path))) goto fail;
  size_t header_end = 0, dict_off = 0;
  if ((st = preamble_parse(pre, pre_n, &header_end, &dict_off))) goto fail;
  if (header_end > fsize) {
    st = HDR_ERR("truncated .npy file: the header claims %zu bytes, the file has %llu",
                 header_end - dict_off, (unsigned long long)(fsize - dict_off));
    goto fail;
  }
  hdr = malloc(header_end);
  if (!hdr) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
    goto fail;
  }
  memcpy(hdr, pre, pre_n);
  if ((st = read_full(fd, hdr + pre_n, header_end - pre_n, path))) goto fail;
  if ((st = header_decode(hdr, dict_off, header_end, &t))) goto fail;
  if ((st = data_size_check(fsize - header_end, t.nbytes))) goto fail;
  if (t.nbytes > SIZE_MAX) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "%llu bytes do not fit in memory",
                        (unsigned long long)t.nbytes);
    goto fail;
  }
  t.data = malloc(t.nbytes ? (size_t)t.nbytes : 1);
  if (!t.data) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory for %llu bytes of .npy data",
                        (unsigned long long)t.nbytes);
    goto fail;
  }
  t.owns_data = 1;
  if ((st = read_full(fd, t.data, (size_t)t.nbytes, path))) goto fail;
  free(hdr);
  close(fd);
  *out = t;
  return VM_STATUS_OK;
fail:
  vmc_tensor_free(&t);
  free(hdr);
  close(fd);
  return vm_status_annotate(st, "'%s'", path);
}

/* ------------------------------------------------------------ writing */

/* Writes the header into buf (256 bytes are enough: 16 dims of at most 19
 * digits), padded so that the data starts at a multiple of 64. */
static vm_status_t header_build(const vmc_tensor_t *t, char *buf, size_t cap, size_t *out_len) {
  VM_RETURN_IF_ERROR(vmc_tensor_check(t));
  char descr[8];
  VM_RETURN_IF_ERROR(descr_write(t->dtype, descr, sizeof(descr)));
  char dict[512];
  int n = snprintf(dict, sizeof(dict), "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
  for (uint32_t i = 0; i < t->ndim; i++)
    n += snprintf(dict + n, sizeof(dict) - (size_t)n, "%lld%s", (long long)t->shape[i],
                  t->ndim == 1      ? ","
                  : i + 1 < t->ndim ? ", "
                                    : "");
  n += snprintf(dict + n, sizeof(dict) - (size_t)n, "), }");
  size_t total = 10 + (size_t)n + 1; /* + '\n' */
  size_t padded = (total + 63) / 64 * 64;
  if (padded > cap) return HDR_ERR(".npy header too long");
  memcpy(buf, npy_magic, 6);
  buf[6] = 1;
  buf[7] = 0;
  size_t hlen = padded - 10;
  buf[8] = (char)(hlen & 0xff);
  buf[9] = (char)(hlen >> 8);
  memcpy(buf + 10, dict, (size_t)n);
  memset(buf + 10 + n, ' ', padded - 10 - (size_t)n - 1);
  buf[padded - 1] = '\n';
  *out_len = padded;
  return VM_STATUS_OK;
}

vm_status_t vmc_npy_write_memory(const vmc_tensor_t *t, uint8_t **out_data, size_t *out_size) {
  char hdr[640];
  size_t hlen;
  VM_RETURN_IF_ERROR(header_build(t, hdr, sizeof(hdr), &hlen));
  if (t->nbytes > SIZE_MAX - hlen)
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "tensor too large for memory");
  uint8_t *buf = malloc(hlen + (size_t)t->nbytes);
  if (!buf) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory for the .npy image");
  memcpy(buf, hdr, hlen);
  if (t->nbytes) memcpy(buf + hlen, t->data, (size_t)t->nbytes);
  *out_data = buf;
  *out_size = hlen + (size_t)t->nbytes;
  return VM_STATUS_OK;
}

vm_status_t vmc_npy_write_file(const char *path, const vmc_tensor_t *t) {
  if (!path) return HDR_ERR("no .npy path given");
  char hdr[640];
  size_t hlen;
  VM_RETURN_IF_ERROR(header_build(t, hdr, sizeof(hdr), &hlen));
  if ((size_t)t->nbytes != t->nbytes)
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "tensor too large for memory");
  const void *parts[2] = {hdr, t->data};
  size_t sizes[2] = {hlen, (size_t)t->nbytes};
  return vm_write_file_atomic_parts(path, parts, sizes, t->nbytes ? 2 : 1);
}
