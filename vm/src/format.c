/* The .vmx byte format: writer and loader. docs/executable-format.md is the
 * specification; this file follows it field by field.
 *
 * Both directions go byte by byte in little-endian order (no struct dumps,
 * no unaligned pointer casts), so the format is the same on every host.
 *
 * The loader treats its input as hostile: every count, length and offset is
 * checked against the bytes that remain and against vm_limits_t before
 * anything is allocated for it, all arithmetic is overflow-checked, and the
 * result passes vm_executable_verify() before it is handed out. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_internal.h"
#include "vmrpc/checked.h"
#include "vm/executable.h"

/* "VMRPCVMX" as the first eight bytes of the file. */
static const uint8_t k_magic[8] = {'V', 'M', 'R', 'P', 'C', 'V', 'M', 'X'};

enum {
  HEADER_BYTES = 16,        /* magic, major, minor, section count */
  SECTION_ENTRY_BYTES = 24, /* id, flags, offset, size */
  SECTION_ALIGN = 8,        /* every section but DATA starts 8-byte aligned */
};

/* Section ids. 0 is never used. */
typedef enum section_id {
  SEC_FUNCTIONS = 1,
  SEC_CONSTANTS = 2,
  SEC_CODE = 3,
  SEC_KERNELS = 4,
  SEC_METADATA = 5,
  SEC_DATA = 6,
  SEC_COUNT_ = 6, /* sections this build knows, all required */
} section_id_t;

/* Section flag: a reader that does not know this section id must refuse the
 * file instead of skipping it (a later minor version can mark a section
 * whose meaning older readers must not ignore). Other bits are reserved:
 * written as 0, ignored when read. */
#define SECTION_FLAG_REQUIRED 1u

static const char *section_name(uint32_t id) {
  switch (id) {
    case SEC_FUNCTIONS: return "functions";
    case SEC_CONSTANTS: return "constants";
    case SEC_CODE: return "code";
    case SEC_KERNELS: return "kernels";
    case SEC_METADATA: return "metadata";
    case SEC_DATA: return "data";
    default: return "unknown";
  }
}

static uint64_t round_up(uint64_t v, uint64_t a) {
  return (v + a - 1) / a * a;
}

/* ===========================================================================
 * Writer
 *
 * Runs twice: once with buf == NULL to measure, once into an exact-size
 * buffer. The same code producing both passes is what keeps offsets right.
 */

typedef struct wb {
  uint8_t *buf; /* NULL: only count */
  uint64_t len;
} wb_t;

static void put_bytes(wb_t *w, const void *p, uint64_t n) {
  if (w->buf && n) memcpy(w->buf + w->len, p, (size_t)n);
  w->len += n;
}
static void put_zeros(wb_t *w, uint64_t n) {
  if (w->buf && n) memset(w->buf + w->len, 0, (size_t)n);
  w->len += n;
}
static void put_u8(wb_t *w, uint8_t v) {
  put_bytes(w, &v, 1);
}
static void put_u16(wb_t *w, uint16_t v) {
  uint8_t b[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
  put_bytes(w, b, 2);
}
static void put_u32(wb_t *w, uint32_t v) {
  uint8_t b[4];
  for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
  put_bytes(w, b, 4);
}
static void put_u64(wb_t *w, uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
  put_bytes(w, b, 8);
}
static void put_i64(wb_t *w, int64_t v) {
  put_u64(w, (uint64_t)v);
}
static void put_f64(wb_t *w, double v) {
  uint64_t bits;
  memcpy(&bits, &v, sizeof(bits)); /* IEEE-754 bits: NaN payloads and -0.0 survive */
  put_u64(w, bits);
}
static void put_dtype(wb_t *w, vm_dtype_t dt) {
  put_u8(w, dt.code);
  put_u8(w, dt.bits);
  put_u16(w, dt.lanes);
}
/* Strings: u32 length, then the bytes, no terminator. Lengths fit in u32
 * because the writer verified the executable first. */
static void put_str(wb_t *w, const char *s) {
  size_t n = strlen(s);
  put_u32(w, (uint32_t)n);
  put_bytes(w, s, n);
}
static void put_align(wb_t *w, uint64_t a) {
  put_zeros(w, round_up(w->len, a) - w->len);
}

typedef struct sec_layout {
  uint64_t offset, size;
} sec_layout_t;

static void emit_functions(wb_t *w, const vm_executable_t *e) {
  put_u32(w, e->num_functions);
  for (uint32_t i = 0; i < e->num_functions; i++) {
    const vm_function_t *f = &e->functions[i];
    put_u32(w, (uint32_t)f->kind);
    put_str(w, f->name);
    if (f->kind != VM_FUNC_BYTECODE) continue;
    put_u64(w, f->start_instr);
    put_u64(w, f->end_instr);
    put_u32(w, f->num_args);
    put_u32(w, f->num_regs);
    for (uint32_t p = 0; p < f->num_args; p++) {
      const vm_param_t *pa = &f->params[p];
      put_str(w, pa->name);
      put_u8(w, pa->has_type);
      if (!pa->has_type) continue;
      put_dtype(w, pa->dtype);
      put_u32(w, (uint32_t)pa->ndim);
      for (int32_t d = 0; d < pa->ndim; d++) put_i64(w, pa->shape[d]);
    }
  }
}

static void emit_constants(wb_t *w, const vm_executable_t *e) {
  uint64_t data_at = 0; /* offset of the next tensor inside DATA */
  put_u32(w, e->num_constants);
  for (uint32_t i = 0; i < e->num_constants; i++) {
    const vm_constant_t *c = &e->constants[i];
    put_u32(w, (uint32_t)c->kind);
    put_str(w, c->scope);
    switch (c->kind) {
      case VM_CONST_INT: put_i64(w, c->u.i); break;
      case VM_CONST_FLOAT: put_f64(w, c->u.f); break;
      case VM_CONST_STRING:
        put_u32(w, c->u.str.len);
        put_bytes(w, c->u.str.data, c->u.str.len);
        break;
      case VM_CONST_DTYPE: put_dtype(w, c->u.dtype); break;
      case VM_CONST_SHAPE:
        put_u32(w, c->u.shape.ndim);
        for (uint32_t d = 0; d < c->u.shape.ndim; d++) put_i64(w, c->u.shape.dims[d]);
        break;
      case VM_CONST_TENSOR:
        put_dtype(w, c->u.tensor.dtype);
        put_u32(w, c->u.tensor.ndim);
        for (uint32_t d = 0; d < c->u.tensor.ndim; d++) put_i64(w, c->u.tensor.shape[d]);
        put_u64(w, c->u.tensor.nbytes);
        data_at = round_up(data_at, VM_TENSOR_ALIGN);
        put_u64(w, data_at);
        data_at += c->u.tensor.nbytes;
        break;
    }
  }
}

static void emit_code(wb_t *w, const vm_executable_t *e) {
  put_u64(w, e->num_instrs);
  put_u64(w, e->num_words);
  for (uint64_t i = 0; i < e->num_instrs; i++) put_u64(w, e->instr_offset[i]);
  for (uint64_t i = 0; i < e->num_words; i++) put_i64(w, e->instr_data[i]);
}

static void emit_kernels(wb_t *w, const vm_executable_t *e) {
  put_u32(w, e->num_kernels);
  for (uint32_t i = 0; i < e->num_kernels; i++) {
    put_str(w, e->kernels[i].name);
    put_str(w, e->kernels[i].source);
    put_str(w, e->kernels[i].options);
  }
}

static void emit_metadata(wb_t *w, const vm_executable_t *e) {
  put_u32(w, e->num_meta);
  for (uint32_t i = 0; i < e->num_meta; i++) {
    put_str(w, e->meta[i].key);
    put_str(w, e->meta[i].value);
  }
}

/* Tensor payloads in constant order, each at the next 64-byte boundary;
 * the same walk as emit_constants() so the recorded offsets match. */
static void emit_data(wb_t *w, const vm_executable_t *e) {
  uint64_t start = w->len;
  for (uint32_t i = 0; i < e->num_constants; i++) {
    const vm_constant_t *c = &e->constants[i];
    if (c->kind != VM_CONST_TENSOR) continue;
    put_zeros(w, round_up(w->len - start, VM_TENSOR_ALIGN) - (w->len - start));
    put_bytes(w, c->u.tensor.data, c->u.tensor.nbytes);
  }
}

/* Emits the whole file. table holds the section layout to write into the
 * header (from the measuring pass) and receives the layout of this pass. */
static void emit_file(wb_t *w, const vm_executable_t *e, const sec_layout_t in[SEC_COUNT_],
                      sec_layout_t out[SEC_COUNT_]) {
  put_bytes(w, k_magic, sizeof(k_magic));
  put_u16(w, VM_FORMAT_MAJOR);
  put_u16(w, VM_FORMAT_MINOR);
  put_u32(w, SEC_COUNT_);
  for (uint32_t id = 1; id <= SEC_COUNT_; id++) {
    put_u32(w, id);
    put_u32(w, 0); /* flags: every 1.x reader knows these sections */
    put_u64(w, in[id - 1].offset);
    put_u64(w, in[id - 1].size);
  }
  static void (*const emitters[SEC_COUNT_])(wb_t *, const vm_executable_t *) = {
      emit_functions, emit_constants, emit_code, emit_kernels, emit_metadata, emit_data};
  for (uint32_t id = 1; id <= SEC_COUNT_; id++) {
    put_align(w, id == SEC_DATA ? VM_TENSOR_ALIGN : SECTION_ALIGN);
    out[id - 1].offset = w->len;
    emitters[id - 1](w, e);
    out[id - 1].size = w->len - out[id - 1].offset;
  }
}

vm_status_t vm_executable_write(const vm_executable_t *exec, uint8_t **out_data, size_t *out_size) {
  *out_data = NULL;
  *out_size = 0;
  /* The writer trusts nothing it is handed: an executable mutated after it
   * was built could otherwise make us read wild pointers or write a file
   * the loader rejects. Limits are lifted so that anything a caller loaded
   * with raised limits can be written back. */
  vm_limits_t lim = vmi_limits_unbounded();
  VM_RETURN_IF_ERROR(vm_status_annotate(vm_executable_verify(exec, &lim), "write"));

  sec_layout_t zero[SEC_COUNT_], measured[SEC_COUNT_], written[SEC_COUNT_];
  memset(zero, 0, sizeof(zero));
  wb_t w = {NULL, 0};
  emit_file(&w, exec, zero, measured);
  /* Everything counted is already held in memory, so the u64 count is
   * exact; it must still fit size_t on a 32-bit host. */
  uint64_t total = w.len;
  if (total > SIZE_MAX)
    return vm_status_make(VM_RESOURCE_EXHAUSTED,
                          "write: %llu bytes do not fit in this host's address space",
                          (unsigned long long)total);
  uint8_t *buf = malloc(total ? (size_t)total : 1);
  if (!buf)
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "write: out of host memory for %llu bytes",
                          (unsigned long long)total);
  w.buf = buf;
  w.len = 0;
  emit_file(&w, exec, measured, written);
  if (w.len != total || memcmp(measured, written, sizeof(measured)) != 0) {
    free(buf);
    return vm_status_make(VM_INTERNAL, "write: measuring and writing passes disagree");
  }
  *out_data = buf;
  *out_size = (size_t)total;
  return VM_STATUS_OK;
}

/* ===========================================================================
 * Loader
 */

static vm_status_t no_memory(const char *what) {
  return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory for %s", what);
}

static uint16_t le16(const uint8_t *p) {
  return (uint16_t)(p[0] | (p[1] << 8));
}
static uint32_t le32(const uint8_t *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t le64(const uint8_t *p) {
  return (uint64_t)le32(p) | ((uint64_t)le32(p + 4) << 32);
}

/* A cursor over one section. */
typedef struct rd {
  const uint8_t *p; /* section bytes */
  uint64_t len;
  uint64_t pos;
  uint64_t base; /* file offset of p, for messages */
} rd_t;

static uint64_t rd_left(const rd_t *r) {
  return r->len - r->pos;
}

static vm_status_t rd_need(const rd_t *r, uint64_t n, const char *what) {
  if (n > rd_left(r))
    return vmi_invalid(
        "%s is truncated at file offset %llu: needs %llu bytes, %llu remain in the "
        "section",
        what, (unsigned long long)(r->base + r->pos), (unsigned long long)n,
        (unsigned long long)rd_left(r));
  return VM_STATUS_OK;
}

static vm_status_t rd_u8(rd_t *r, uint8_t *out, const char *what) {
  VM_RETURN_IF_ERROR(rd_need(r, 1, what));
  *out = r->p[r->pos++];
  return VM_STATUS_OK;
}
static vm_status_t rd_u32(rd_t *r, uint32_t *out, const char *what) {
  VM_RETURN_IF_ERROR(rd_need(r, 4, what));
  *out = le32(r->p + r->pos);
  r->pos += 4;
  return VM_STATUS_OK;
}
static vm_status_t rd_u64(rd_t *r, uint64_t *out, const char *what) {
  VM_RETURN_IF_ERROR(rd_need(r, 8, what));
  *out = le64(r->p + r->pos);
  r->pos += 8;
  return VM_STATUS_OK;
}
static vm_status_t rd_i64(rd_t *r, int64_t *out, const char *what) {
  uint64_t v;
  VM_RETURN_IF_ERROR(rd_u64(r, &v, what));
  *out = (int64_t)v;
  return VM_STATUS_OK;
}
static vm_status_t rd_dtype(rd_t *r, vm_dtype_t *out, const char *what) {
  VM_RETURN_IF_ERROR(rd_need(r, 4, what));
  const uint8_t *b = r->p + r->pos;
  *out = VM_DTYPE_MAKE(b[0], b[1], le16(b + 2));
  r->pos += 4;
  return VM_STATUS_OK;
}

/* A u32-length string, copied NUL-terminated. allow_nul: string constants
 * carry their length and may hold NUL; every other string is used as a C
 * string, where an embedded NUL would silently cut it. out_len may be NULL. */
static vm_status_t rd_str(rd_t *r, uint32_t max, int allow_nul, char **out, uint32_t *out_len,
                          const char *what) {
  uint32_t n;
  VM_RETURN_IF_ERROR(rd_u32(r, &n, what));
  VM_RETURN_IF_ERROR(rd_need(r, n, what));
  if (n > max)
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "%s is %u bytes, over the limit of %u bytes", what,
                          n, max);
  const char *s = (const char *)(r->p + r->pos);
  if (!allow_nul && memchr(s, 0, n)) return vmi_invalid("%s contains a NUL byte", what);
  char *d = vmi_strndup(s, n);
  if (!d) return no_memory(what);
  r->pos += n;
  *out = d;
  if (out_len) *out_len = n;
  return VM_STATUS_OK;
}

/* A u32 entry count. min_entry is the fewest bytes one entry can take, so
 * a count that cannot fit in the bytes left is refused before anything is
 * allocated for it. */
static vm_status_t rd_count(rd_t *r, uint64_t min_entry, uint32_t limit, uint32_t *out,
                            const char *what) {
  uint32_t n;
  VM_RETURN_IF_ERROR(rd_u32(r, &n, what));
  if (n > rd_left(r) / min_entry)
    return vmi_invalid("%s of %u cannot fit in the %llu bytes left in the section", what, n,
                       (unsigned long long)rd_left(r));
  if (n > limit)
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "%s of %u exceeds the limit of %u", what, n,
                          limit);
  *out = n;
  return VM_STATUS_OK;
}

/* ndim i64 dims into a fresh array (at least one element so that NULL
 * means failure). */
static vm_status_t rd_dims(rd_t *r, uint32_t ndim, int64_t **out, const char *what) {
  VM_RETURN_IF_ERROR(rd_need(r, (uint64_t)ndim * 8, what));
  int64_t *d = malloc((ndim ? ndim : 1) * sizeof(int64_t));
  if (!d) return no_memory(what);
  for (uint32_t i = 0; i < ndim; i++) {
    d[i] = (int64_t)le64(r->p + r->pos);
    r->pos += 8;
  }
  *out = d;
  return VM_STATUS_OK;
}

static vm_status_t rd_end(const rd_t *r) {
  if (r->pos != r->len)
    return vmi_invalid("%llu trailing bytes after the last field (file offset %llu)",
                       (unsigned long long)rd_left(r), (unsigned long long)(r->base + r->pos));
  return VM_STATUS_OK;
}

static vm_status_t load_param(rd_t *r, vm_param_t *p, const vm_limits_t *lim) {
  VM_RETURN_IF_ERROR(rd_str(r, lim->max_string_bytes, 0, &p->name, NULL, "name"));
  p->ndim = -1;
  VM_RETURN_IF_ERROR(rd_u8(r, &p->has_type, "has_type"));
  if (p->has_type > 1) return vmi_invalid("has_type is %u, not 0 or 1", p->has_type);
  if (!p->has_type) return VM_STATUS_OK;
  VM_RETURN_IF_ERROR(rd_dtype(r, &p->dtype, "dtype"));
  uint32_t nd;
  VM_RETURN_IF_ERROR(rd_u32(r, &nd, "ndim"));
  p->ndim = (int32_t)nd;
  if (p->ndim < -1) return vmi_invalid("ndim %d is below -1 (any rank)", p->ndim);
  if (p->ndim > 0 && nd > lim->max_ndim)
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "ndim %u exceeds the limit of %u", nd,
                          lim->max_ndim);
  if (p->ndim > 0) VM_RETURN_IF_ERROR(rd_dims(r, nd, &p->shape, "dims"));
  return VM_STATUS_OK;
}

static vm_status_t load_function(rd_t *r, vm_function_t *f, const vm_limits_t *lim) {
  uint32_t kind;
  VM_RETURN_IF_ERROR(rd_u32(r, &kind, "kind"));
  if (kind != VM_FUNC_PACKED && kind != VM_FUNC_BYTECODE)
    return vmi_invalid("unknown function kind %u", kind);
  f->kind = (vm_func_kind_t)kind;
  VM_RETURN_IF_ERROR(rd_str(r, lim->max_string_bytes, 0, &f->name, NULL, "name"));
  if (f->kind != VM_FUNC_BYTECODE) return VM_STATUS_OK;
  uint32_t nargs, nregs;
  VM_RETURN_IF_ERROR(rd_u64(r, &f->start_instr, "start_instr"));
  VM_RETURN_IF_ERROR(rd_u64(r, &f->end_instr, "end_instr"));
  VM_RETURN_IF_ERROR(rd_u32(r, &nargs, "num_args"));
  VM_RETURN_IF_ERROR(rd_u32(r, &nregs, "num_regs"));
  f->num_regs = nregs;
  /* A parameter takes at least its name length and has_type: 5 bytes. */
  if (nargs > rd_left(r) / 5)
    return vmi_invalid("%u parameters cannot fit in the %llu bytes left in the section", nargs,
                       (unsigned long long)rd_left(r));
  if (nregs > lim->max_registers || nargs > lim->max_registers)
    return vm_status_make(VM_RESOURCE_EXHAUSTED,
                          "%u parameters / %u registers exceed the limit of %u registers", nargs,
                          nregs, lim->max_registers);
  f->params = calloc(nargs ? nargs : 1, sizeof(vm_param_t));
  if (!f->params) return no_memory("parameters");
  f->num_args = nargs; /* entries are zeroed, so a partial load frees cleanly */
  for (uint32_t i = 0; i < nargs; i++)
    VM_RETURN_IF_ERROR(vm_status_annotate(load_param(r, &f->params[i], lim), "parameter %u", i));
  return VM_STATUS_OK;
}

static vm_status_t load_functions(rd_t *r, vm_executable_t *e, const vm_limits_t *lim) {
  uint32_t n;
  /* kind + name length */
  VM_RETURN_IF_ERROR(rd_count(r, 8, lim->max_functions, &n, "function count"));
  e->functions = calloc(n ? n : 1, sizeof(vm_function_t));
  if (!e->functions) return no_memory("the function table");
  e->num_functions = n;
  for (uint32_t i = 0; i < n; i++)
    VM_RETURN_IF_ERROR(
        vm_status_annotate(load_function(r, &e->functions[i], lim), "function %u", i));
  return rd_end(r);
}

/* Where tensor payloads are, for the constant section to check against. */
typedef struct data_ctx {
  const uint8_t *bytes; /* DATA section in the file */
  uint64_t size;
  uint8_t *blob; /* its aligned in-memory copy */
  uint64_t next; /* first DATA byte not yet claimed by a tensor */
} data_ctx_t;

/* Checks that the bytes in [from, to) of DATA are zero padding. */
static vm_status_t check_zero(const data_ctx_t *d, uint64_t from, uint64_t to) {
  for (uint64_t i = from; i < to; i++) {
    if (d->bytes[i])
      return vmi_invalid("section data: padding byte %llu is 0x%02x, not zero",
                         (unsigned long long)i, d->bytes[i]);
  }
  return VM_STATUS_OK;
}

static vm_status_t load_tensor(rd_t *r, vm_constant_t *c, const vm_limits_t *lim, data_ctx_t *d) {
  VM_RETURN_IF_ERROR(rd_dtype(r, &c->u.tensor.dtype, "dtype"));
  uint32_t nd;
  VM_RETURN_IF_ERROR(rd_u32(r, &nd, "ndim"));
  if (nd > lim->max_ndim)
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "ndim %u exceeds the limit of %u", nd,
                          lim->max_ndim);
  VM_RETURN_IF_ERROR(rd_dims(r, nd, &c->u.tensor.shape, "shape"));
  c->u.tensor.ndim = nd;
  uint64_t nbytes, off, want;
  VM_RETURN_IF_ERROR(rd_u64(r, &nbytes, "nbytes"));
  VM_RETURN_IF_ERROR(rd_u64(r, &off, "data offset"));
  if (!vm_dtype_valid(c->u.tensor.dtype))
    return vmi_invalid("invalid dtype (code %u, bits %u, lanes %u)", c->u.tensor.dtype.code,
                       c->u.tensor.dtype.bits, c->u.tensor.dtype.lanes);
  if (vm_tensor_nbytes(c->u.tensor.dtype, c->u.tensor.shape, nd, &want) != 0)
    return vmi_invalid("shape has a negative dim or its byte size overflows");
  if (nbytes != want)
    return vmi_invalid("nbytes %llu != shape x dtype size %llu", (unsigned long long)nbytes,
                       (unsigned long long)want);
  if (nbytes > lim->max_tensor_bytes)
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "%llu bytes exceed the limit of %llu",
                          (unsigned long long)nbytes, (unsigned long long)lim->max_tensor_bytes);
  if (off % VM_TENSOR_ALIGN != 0)
    return vmi_invalid("data offset %llu is not a multiple of %d", (unsigned long long)off,
                       VM_TENSOR_ALIGN);
  if (off < d->next)
    return vmi_invalid("data offset %llu is before the end of the previous tensor (%llu)",
                       (unsigned long long)off, (unsigned long long)d->next);
  if (off > d->size || nbytes > d->size - off)
    return vmi_invalid("data [%llu, +%llu) is outside the %llu-byte data section",
                       (unsigned long long)off, (unsigned long long)nbytes,
                       (unsigned long long)d->size);
  VM_RETURN_IF_ERROR(check_zero(d, d->next, off));
  c->u.tensor.nbytes = nbytes;
  c->u.tensor.data = d->blob + off;
  d->next = off + nbytes;
  return VM_STATUS_OK;
}

static vm_status_t load_constant(rd_t *r, vm_constant_t *c, const vm_limits_t *lim, data_ctx_t *d) {
  uint32_t kind;
  VM_RETURN_IF_ERROR(rd_u32(r, &kind, "kind"));
  if (kind > VM_CONST_TENSOR) return vmi_invalid("unknown constant kind %u", kind);
  c->kind = (vm_const_kind_t)kind; /* u is zeroed: a partial load frees cleanly */
  VM_RETURN_IF_ERROR(rd_str(r, lim->max_string_bytes, 0, &c->scope, NULL, "scope"));
  switch (c->kind) {
    case VM_CONST_INT: return rd_i64(r, &c->u.i, "value");
    case VM_CONST_FLOAT: {
      uint64_t bits;
      VM_RETURN_IF_ERROR(rd_u64(r, &bits, "value"));
      memcpy(&c->u.f, &bits, sizeof(bits));
      return VM_STATUS_OK;
    }
    case VM_CONST_STRING:
      return rd_str(r, lim->max_string_bytes, 1, &c->u.str.data, &c->u.str.len, "string");
    case VM_CONST_DTYPE: return rd_dtype(r, &c->u.dtype, "dtype");
    case VM_CONST_SHAPE: {
      uint32_t nd;
      VM_RETURN_IF_ERROR(rd_u32(r, &nd, "ndim"));
      if (nd > lim->max_ndim)
        return vm_status_make(VM_RESOURCE_EXHAUSTED, "ndim %u exceeds the limit of %u", nd,
                              lim->max_ndim);
      VM_RETURN_IF_ERROR(rd_dims(r, nd, &c->u.shape.dims, "dims"));
      c->u.shape.ndim = nd;
      return VM_STATUS_OK;
    }
    case VM_CONST_TENSOR: return load_tensor(r, c, lim, d);
  }
  return VM_STATUS_OK;
}

static vm_status_t load_constants(rd_t *r, vm_executable_t *e, const vm_limits_t *lim,
                                  data_ctx_t *d) {
  uint32_t n;
  /* kind + scope length + the smallest payload (u32 length / dtype / ndim) */
  VM_RETURN_IF_ERROR(rd_count(r, 12, lim->max_constants, &n, "constant count"));
  e->constants = calloc(n ? n : 1, sizeof(vm_constant_t));
  if (!e->constants) return no_memory("the constant pool");
  e->num_constants = n;
  for (uint32_t i = 0; i < n; i++)
    VM_RETURN_IF_ERROR(
        vm_status_annotate(load_constant(r, &e->constants[i], lim, d), "constant %u", i));
  return rd_end(r);
}

static vm_status_t load_code(rd_t *r, vm_executable_t *e, const vm_limits_t *lim) {
  uint64_t ni, nw;
  VM_RETURN_IF_ERROR(rd_u64(r, &ni, "instruction count"));
  VM_RETURN_IF_ERROR(rd_u64(r, &nw, "word count"));
  /* The section holds exactly the two arrays; comparing counts with the
   * bytes left (divided, never multiplied) cannot overflow. */
  uint64_t left = rd_left(r);
  if (left % 8 != 0 || ni > left / 8 || nw != left / 8 - ni)
    return vmi_invalid(
        "%llu instructions and %llu words do not match the %llu bytes of the "
        "section's arrays",
        (unsigned long long)ni, (unsigned long long)nw, (unsigned long long)left);
  if (ni > lim->max_instrs)
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "%llu instructions exceed the limit of %llu",
                          (unsigned long long)ni, (unsigned long long)lim->max_instrs);
  if (nw > lim->max_words)
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "%llu words exceed the limit of %llu",
                          (unsigned long long)nw, (unsigned long long)lim->max_words);
  size_t ni_bytes, nw_bytes;
  if ((uint64_t)(size_t)ni != ni || (uint64_t)(size_t)nw != nw ||
      vm_ckd_mul_size((size_t)ni, 8, &ni_bytes) != 0 ||
      vm_ckd_mul_size((size_t)nw, 8, &nw_bytes) != 0)
    return no_memory("the code");
  e->instr_offset = malloc(ni ? ni_bytes : 1);
  e->instr_data = malloc(nw ? nw_bytes : 1);
  if (!e->instr_offset || !e->instr_data) return no_memory("the code");
  e->num_instrs = ni;
  e->num_words = nw;
  for (uint64_t i = 0; i < ni; i++, r->pos += 8) e->instr_offset[i] = le64(r->p + r->pos);
  for (uint64_t i = 0; i < nw; i++, r->pos += 8) e->instr_data[i] = (int64_t)le64(r->p + r->pos);
  return rd_end(r);
}

static vm_status_t load_kernels(rd_t *r, vm_executable_t *e, const vm_limits_t *lim) {
  uint32_t n;
  /* three string lengths */
  VM_RETURN_IF_ERROR(rd_count(r, 12, lim->max_kernels, &n, "kernel count"));
  e->kernels = calloc(n ? n : 1, sizeof(vm_kernel_module_t));
  if (!e->kernels) return no_memory("the kernel table");
  e->num_kernels = n;
  for (uint32_t i = 0; i < n; i++) {
    vm_kernel_module_t *k = &e->kernels[i];
    vm_status_t st = rd_str(r, lim->max_string_bytes, 0, &k->name, NULL, "name");
    if (!st) st = rd_str(r, lim->max_kernel_source, 0, &k->source, NULL, "source");
    if (!st) st = rd_str(r, lim->max_string_bytes, 0, &k->options, NULL, "options");
    VM_RETURN_IF_ERROR(vm_status_annotate(st, "kernel %u", i));
  }
  return rd_end(r);
}

static vm_status_t load_metadata(rd_t *r, vm_executable_t *e, const vm_limits_t *lim) {
  uint32_t n;
  VM_RETURN_IF_ERROR(rd_count(r, 8, lim->max_meta, &n, "entry count"));
  e->meta = calloc(n ? n : 1, sizeof(vm_meta_entry_t));
  if (!e->meta) return no_memory("the metadata");
  e->num_meta = n;
  for (uint32_t i = 0; i < n; i++) {
    vm_status_t st = rd_str(r, lim->max_string_bytes, 0, &e->meta[i].key, NULL, "key");
    if (!st) st = rd_str(r, lim->max_string_bytes, 0, &e->meta[i].value, NULL, "value");
    VM_RETURN_IF_ERROR(vm_status_annotate(st, "entry %u", i));
  }
  return rd_end(r);
}

typedef struct sec_entry {
  uint32_t id, flags;
  uint64_t offset, size;
} sec_entry_t;

static int cmp_sec_offset(const void *pa, const void *pb) {
  const sec_entry_t *a = pa, *b = pb;
  if (a->offset != b->offset) return a->offset < b->offset ? -1 : 1;
  if (a->size != b->size) return a->size < b->size ? -1 : 1;
  return 0;
}

/* Reads and checks the header and section table. On success known[id-1]
 * holds each known section. */
static vm_status_t load_header(const uint8_t *b, uint64_t size, const vm_limits_t *lim,
                               uint16_t *out_major, uint16_t *out_minor,
                               sec_entry_t known[SEC_COUNT_]) {
  if (size < sizeof(k_magic) || memcmp(b, k_magic, sizeof(k_magic)) != 0)
    return vmi_invalid(
        "not a vmrpc executable: the file does not start with the magic \"VMRPCVMX\"");
  if (size < HEADER_BYTES)
    return vmi_invalid("header is truncated: %llu bytes, needs %d", (unsigned long long)size,
                       HEADER_BYTES);
  uint16_t major = le16(b + 8), minor = le16(b + 10);
  if (major != VM_FORMAT_MAJOR)
    return vm_status_make(VM_FAILED_PRECONDITION,
                          "file format version %u.%u is not supported by this build (%d.%d); "
                          "rebuild the executable with a vmrpc that writes format %d.x, or "
                          "use a vmrpc build that reads %u.x",
                          major, minor, VM_FORMAT_MAJOR, VM_FORMAT_MINOR, VM_FORMAT_MAJOR, major);
  *out_major = major;
  *out_minor = minor;
  uint32_t nsec = le32(b + 12);
  if (nsec > (size - HEADER_BYTES) / SECTION_ENTRY_BYTES)
    return vmi_invalid("section table of %u entries does not fit in the %llu-byte file", nsec,
                       (unsigned long long)size);
  if (nsec > lim->max_sections)
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "%u sections exceed the limit of %u", nsec,
                          lim->max_sections);
  uint64_t table_end = HEADER_BYTES + (uint64_t)nsec * SECTION_ENTRY_BYTES;
  sec_entry_t *secs = malloc((nsec ? nsec : 1) * sizeof(*secs));
  if (!secs) return no_memory("the section table");
  vm_status_t st = VM_STATUS_OK;
  memset(known, 0, SEC_COUNT_ * sizeof(*known));
  uint8_t seen[SEC_COUNT_] = {0};
  for (uint32_t i = 0; i < nsec; i++) {
    const uint8_t *p = b + HEADER_BYTES + (uint64_t)i * SECTION_ENTRY_BYTES;
    sec_entry_t s = {le32(p), le32(p + 4), le64(p + 8), le64(p + 16)};
    secs[i] = s;
    if (s.offset < table_end || s.offset > size || s.size > size - s.offset) {
      st = vmi_invalid(
          "section %u (id %u, %s): [%llu, +%llu) is outside the file's %llu bytes "
          "after the %llu-byte header",
          i, s.id, section_name(s.id), (unsigned long long)s.offset, (unsigned long long)s.size,
          (unsigned long long)size, (unsigned long long)table_end);
      goto fail;
    }
    if (s.id >= 1 && s.id <= SEC_COUNT_) {
      if (seen[s.id - 1]) {
        st = vmi_invalid("section id %u (%s) appears twice", s.id, section_name(s.id));
        goto fail;
      }
      seen[s.id - 1] = 1;
      known[s.id - 1] = s;
    } else if (s.flags & SECTION_FLAG_REQUIRED) {
      st = vm_status_make(VM_FAILED_PRECONDITION,
                          "section %u has id %u, which this build (format %d.%d) does not "
                          "know, and it is marked required (file version %u.%u)",
                          i, s.id, VM_FORMAT_MAJOR, VM_FORMAT_MINOR, major, minor);
      goto fail;
    }
  }
  /* Unknown ids may repeat among themselves, but no two sections may
   * share bytes, and every byte outside the sections is zero padding. */
  if (nsec > 1) qsort(secs, nsec, sizeof(*secs), cmp_sec_offset);
  uint64_t at = table_end;
  for (uint32_t i = 0; i < nsec; i++) {
    if (secs[i].offset < at) {
      st = vmi_invalid("section id %u (%s) at [%llu, +%llu) overlaps another section", secs[i].id,
                       section_name(secs[i].id), (unsigned long long)secs[i].offset,
                       (unsigned long long)secs[i].size);
      goto fail;
    }
    for (uint64_t k = at; k < secs[i].offset; k++) {
      if (b[k]) {
        st = vmi_invalid("padding byte at file offset %llu is 0x%02x, not zero",
                         (unsigned long long)k, b[k]);
        goto fail;
      }
    }
    at = secs[i].offset + secs[i].size;
  }
  if (at != size) {
    st = vmi_invalid("%llu trailing bytes after the last section (file offset %llu)",
                     (unsigned long long)(size - at), (unsigned long long)at);
    goto fail;
  }
  for (uint32_t id = 1; id <= SEC_COUNT_; id++) {
    if (!seen[id - 1]) {
      st = vmi_invalid("required section id %u (%s) is missing", id, section_name(id));
      goto fail;
    }
  }
  if (known[SEC_DATA - 1].offset % VM_TENSOR_ALIGN != 0) {
    st = vmi_invalid("section data starts at file offset %llu, not a multiple of %d",
                     (unsigned long long)known[SEC_DATA - 1].offset, VM_TENSOR_ALIGN);
    goto fail;
  }
fail:
  free(secs);
  return st;
}

static rd_t section_reader(const uint8_t *b, const sec_entry_t *s) {
  rd_t r = {b + s->offset, s->size, 0, s->offset};
  return r;
}

vm_status_t vm_executable_load(const void *data, size_t size, const vm_limits_t *limits,
                               vm_executable_t **out_exec) {
  *out_exec = NULL;
  vm_limits_t lim = limits ? *limits : vm_limits_default();
  const uint8_t *b = data;
  if ((uint64_t)size > lim.max_file_bytes)
    return vm_status_make(VM_RESOURCE_EXHAUSTED,
                          "executable of %zu bytes exceeds the limit of %llu bytes", size,
                          (unsigned long long)lim.max_file_bytes);
  if (!b && size) return vmi_invalid("no data");

  sec_entry_t sec[SEC_COUNT_];
  uint16_t major = 0, minor = 0;
  VM_RETURN_IF_ERROR(load_header(b, size, &lim, &major, &minor, sec));

  vm_status_t st = VM_STATUS_OK;
  vm_executable_t *e = calloc(1, sizeof(*e));
  if (!e) return no_memory("the executable");
  e->version_major = major;
  e->version_minor = minor;

  /* Tensor payloads are copied once into an aligned blob that the tensor
   * constants point into, so they can be used in place. The data section's
   * bytes are really there (checked above), so this allocation is bounded
   * by the input size. */
  const sec_entry_t *ds = &sec[SEC_DATA - 1];
  if (ds->size > SIZE_MAX) {
    st = no_memory("tensor data");
    goto fail;
  }
  e->blob_ = vmi_aligned_alloc((size_t)ds->size);
  if (!e->blob_) {
    st = no_memory("tensor data");
    goto fail;
  }
  e->blob_size_ = (size_t)ds->size;
  if (ds->size) memcpy(e->blob_, b + ds->offset, (size_t)ds->size);
  data_ctx_t dctx = {b + ds->offset, ds->size, e->blob_, 0};

  rd_t r = section_reader(b, &sec[SEC_FUNCTIONS - 1]);
  if ((st = vm_status_annotate(load_functions(&r, e, &lim), "section functions"))) goto fail;
  r = section_reader(b, &sec[SEC_CONSTANTS - 1]);
  if ((st = vm_status_annotate(load_constants(&r, e, &lim, &dctx), "section constants"))) goto fail;
  /* Whatever follows the last tensor is padding too. */
  if ((st = check_zero(&dctx, dctx.next, dctx.size))) goto fail;
  r = section_reader(b, &sec[SEC_CODE - 1]);
  if ((st = vm_status_annotate(load_code(&r, e, &lim), "section code"))) goto fail;
  r = section_reader(b, &sec[SEC_KERNELS - 1]);
  if ((st = vm_status_annotate(load_kernels(&r, e, &lim), "section kernels"))) goto fail;
  r = section_reader(b, &sec[SEC_METADATA - 1]);
  if ((st = vm_status_annotate(load_metadata(&r, e, &lim), "section metadata"))) goto fail;

  if ((st = vm_status_annotate(vm_executable_verify(e, &lim), "verify"))) goto fail;
  *out_exec = e;
  return VM_STATUS_OK;
fail:
  vm_executable_free(e);
  return st;
}
