/* Assembler: the text form (.vmasm) to a verified executable.
 *
 * The input is hostile (it may come from anywhere a user points the CLI),
 * so the assembler is a bounded, non-recursive, line-oriented parser: every
 * count and size is checked against vm_limits_t before it grows, memory
 * grows only with what the text actually contains (never with what it
 * claims), and every error names its line. It builds the executable
 * directly rather than through the builder so that every field printed by
 * disasm.c (table order, code layout, version, dead code) comes back
 * exactly. docs/vmasm.md is the reference for the syntax.
 *
 * Two passes: the first collects the function declarations (.packed, .func,
 * .table) so that calls may refer to functions declared further down; the
 * second parses everything. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_internal.h"
#include "text_internal.h"
#include "vmrpc/checked.h"
#include "vm/executable.h"

/* ---------------------------------------------------------------------------
 * Small containers
 */

/* A byte buffer, kept NUL-terminated. */
typedef struct dbuf {
  char *p;
  size_t n, cap;
} dbuf_t;

static int db_put(dbuf_t *b, const void *s, size_t n) {
  size_t need;
  if (vm_ckd_add_size(b->n, n, &need) != 0 || vm_ckd_add_size(need, 1, &need) != 0) return -1;
  if (VMI_GROW(b->p, b->cap, need) != 0) return -1;
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = '\0';
  return 0;
}

/* Hash map from (namespace, byte string) to a 64-bit value. Keys are not
 * copied: they point into the input text or into names the parser owns,
 * both of which outlive the map. Lookups must stay O(1): a hostile text can
 * declare 65536 functions and make 16M references to them. */
typedef struct sment {
  const char *key;
  size_t len;
  uint32_t ns;
  int used;
  uint64_t val;
} sment_t;

typedef struct smap {
  sment_t *e;
  size_t cap, n;
} smap_t;

static uint64_t sm_hash(uint32_t ns, const char *k, size_t n) {
  uint64_t h = UINT64_C(1469598103934665603) ^ ns;
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)k[i];
    h *= UINT64_C(1099511628211);
  }
  return h;
}

static sment_t *sm_slot(const smap_t *m, uint32_t ns, const char *k, size_t n) {
  size_t mask = m->cap - 1;
  for (size_t i = (size_t)sm_hash(ns, k, n) & mask;; i = (i + 1) & mask) {
    sment_t *s = &m->e[i];
    if (!s->used || (s->ns == ns && s->len == n && memcmp(s->key, k, n) == 0)) return s;
  }
}

/* Returns 1 and the value if present, else 0. */
static int sm_find(const smap_t *m, uint32_t ns, const char *k, size_t n, uint64_t *out) {
  if (m->cap == 0) return 0;
  const sment_t *s = sm_slot(m, ns, k, n);
  if (!s->used) return 0;
  *out = s->val;
  return 1;
}

/* Inserts a key the caller knows to be absent. 0, or -1 on no memory. */
static int sm_put(smap_t *m, uint32_t ns, const char *k, size_t n, uint64_t val) {
  if ((m->n + 1) * 2 > m->cap) {
    size_t nc = 64; /* calloc checks nc * sizeof(sment_t) */
    if (m->cap && vm_ckd_mul_size(m->cap, 2, &nc) != 0) return -1;
    smap_t bigger = {calloc(nc, sizeof(sment_t)), nc, 0};
    if (!bigger.e) return -1;
    for (size_t i = 0; i < m->cap; i++) {
      if (!m->e[i].used) continue;
      *sm_slot(&bigger, m->e[i].ns, m->e[i].key, m->e[i].len) = m->e[i];
      bigger.n++;
    }
    free(m->e);
    *m = bigger;
  }
  sment_t *s = sm_slot(m, ns, k, n);
  *s = (sment_t){k, n, ns, 1, val};
  m->n++;
  return 0;
}

static void sm_free(smap_t *m) {
  free(m->e);
  memset(m, 0, sizeof(*m));
}

/* Namespaces of the parser's name map. Function kinds are 0 and 1. */
enum { NS_PACKED = VM_FUNC_PACKED, NS_BYTECODE = VM_FUNC_BYTECODE, NS_KERNEL = 2, NS_META = 3 };

/* ---------------------------------------------------------------------------
 * Parser state
 */

typedef enum tk {
  TK_EOL,   /* end of line, or a ';' comment */
  TK_WORD,  /* [A-Za-z_.][A-Za-z0-9_.]* : directives, mnemonics, names, dtypes */
  TK_NUM,   /* starts with a digit or a sign: integers, floats, hex */
  TK_STR,   /* "..." (s/n: the raw bytes between the quotes) */
  TK_REG,   /* %name (s/n: after the '%') */
  TK_BCFN,  /* @name or @"name" (s/n: the name, raw if quoted) */
  TK_PKFN,  /* $name or $"name" */
  TK_PUNCT, /* one of ( ) [ ] , : = { } ? * */
} tk_t;

typedef struct tok {
  tk_t kind;
  const char *s; /* payload span, see tk_t */
  size_t n;
  int quoted;      /* TK_BCFN / TK_PKFN: the name is a quoted string */
  const char *raw; /* the whole token, for messages */
  size_t rawn;
} tok_t;

typedef struct decl {
  vm_func_kind_t kind;
  char *name; /* NULL when the pre-pass could not read it (the main pass reports why) */
  uint64_t line;
} decl_t;

typedef struct label_fix {
  uint64_t word; /* index into words of the offset to patch */
  uint64_t rel;  /* pc of the jump, relative to the function start */
  const char *name;
  size_t len;
  uint64_t line;
} label_fix_t;

typedef struct asm_parser {
  const char *text;
  size_t len;
  size_t pos, eol, next; /* cursor in the current line [.., eol); next line start */
  uint64_t line;
  int have_peek;
  tok_t peek;
  vm_limits_t lim;

  smap_t names; /* functions by (kind, name); kernels; meta keys */

  /* Declarations in text order (pre-pass) and the table index of each. */
  decl_t *decls;
  size_t ndecls, cap_decls;
  uint32_t *decl_index;
  size_t decls_seen; /* main pass */

  vm_function_t *funcs; /* table order */
  uint32_t nfuncs;

  int have_version;
  uint16_t major, minor;

  vm_constant_t *consts;
  void **cdata; /* tensor data per constant (plain malloc), else NULL */
  size_t nconsts, cap_consts, cap_cdata;
  int64_t max_const_ref;
  uint64_t max_const_ref_line;

  uint64_t *offsets;
  size_t ninstrs, cap_offsets;
  int64_t *words;
  size_t nwords, cap_words;

  vm_kernel_module_t *kernels;
  size_t nkernels, cap_kernels;
  vm_meta_entry_t *meta;
  size_t nmeta, cap_meta;

  /* current function body */
  smap_t labels;
  label_fix_t *fixes;
  size_t nfixes, cap_fixes;

  /* scratch */
  int64_t *iw; /* words of the instruction being parsed */
  size_t cap_iw;
  dbuf_t tmp;
} asm_parser_t;

static vm_status_t perr_line(uint64_t line, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static vm_status_t perr_line(uint64_t line, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  return vm_status_make(VM_INVALID_ARGUMENT, "line %" PRIu64 ": %s", line, msg);
}
#define PERR(p, ...) perr_line((p)->line, __VA_ARGS__)

static vm_status_t oom(void) {
  return vm_status_make(VM_RESOURCE_EXHAUSTED, "asm: out of host memory");
}

/* A token (or any span of the text) made safe for a one-line message:
 * capped, control bytes shown as '?'. */
static const char *show(const char *s, size_t n, char *buf, size_t buflen) {
  size_t max = buflen - 4, i = 0;
  for (; i < n && i < max; i++) {
    unsigned char c = (unsigned char)s[i];
    buf[i] = (c < 0x20 || c >= 0x7f) ? '?' : (char)c;
  }
  if (i < n) {
    memcpy(buf + i, "...", 3);
    i += 3;
  }
  buf[i] = '\0';
  return buf;
}

static const char *show_tok(const tok_t *t, char *buf, size_t buflen) {
  switch (t->kind) {
    case TK_EOL: snprintf(buf, buflen, "end of line"); return buf;
    case TK_STR: snprintf(buf, buflen, "a string"); return buf;
    default: {
      char inner[64];
      snprintf(buf, buflen, "'%s'", show(t->raw, t->rawn, inner, sizeof(inner)));
      return buf;
    }
  }
}

/* ---------------------------------------------------------------------------
 * Lexer
 */

/* Moves to the next line. Returns 0 at the end of the text. */
static int next_line(asm_parser_t *p) {
  if (p->next >= p->len) return 0;
  p->pos = p->next;
  const char *nl = memchr(p->text + p->pos, '\n', p->len - p->pos);
  p->eol = nl ? (size_t)(nl - p->text) : p->len;
  p->next = nl ? p->eol + 1 : p->len;
  p->line++;
  p->have_peek = 0;
  return 1;
}

/* Finds the closing quote of a string that opens at text[at]. */
static vm_status_t scan_string(asm_parser_t *p, size_t at, size_t *out_close) {
  size_t i = at + 1;
  while (i < p->eol) {
    if (p->text[i] == '\\')
      i += 2;
    else if (p->text[i] == '"')
      break;
    else
      i++;
  }
  if (i >= p->eol) return PERR(p, "unterminated string (strings end on the line they start)");
  *out_close = i;
  return VM_STATUS_OK;
}

static int is_digit(int c) {
  return c >= '0' && c <= '9';
}

static vm_status_t lex(asm_parser_t *p, tok_t *t) {
  const char *x = p->text;
  while (p->pos < p->eol && (x[p->pos] == ' ' || x[p->pos] == '\t' || x[p->pos] == '\r')) p->pos++;
  memset(t, 0, sizeof(*t));
  if (p->pos >= p->eol || x[p->pos] == ';') {
    t->kind = TK_EOL;
    t->raw = x + p->eol;
    return VM_STATUS_OK;
  }
  size_t start = p->pos, i = p->pos;
  unsigned char c = (unsigned char)x[i];
  if (c == '"') {
    size_t close = 0;
    VM_RETURN_IF_ERROR(scan_string(p, i, &close));
    t->kind = TK_STR;
    t->s = x + i + 1;
    t->n = close - i - 1;
    i = close + 1;
  } else if (c == '%') {
    i++;
    while (i < p->eol && (vmi_text_ident_start((unsigned char)x[i]) || is_digit(x[i]))) i++;
    if (i == start + 1) return PERR(p, "expected a register after '%%' (%%0, %%void, %%vm)");
    t->kind = TK_REG;
    t->s = x + start + 1;
    t->n = i - start - 1;
  } else if (c == '@' || c == '$') {
    t->kind = c == '@' ? TK_BCFN : TK_PKFN;
    i++;
    if (i < p->eol && x[i] == '"') {
      size_t close = 0;
      VM_RETURN_IF_ERROR(scan_string(p, i, &close));
      t->quoted = 1;
      t->s = x + i + 1;
      t->n = close - i - 1;
      i = close + 1;
    } else {
      if (i >= p->eol || !vmi_text_ident_start((unsigned char)x[i]))
        return PERR(p, "expected a function name after '%c'", c);
      while (i < p->eol && vmi_text_ident_char((unsigned char)x[i])) i++;
      t->s = x + start + 1;
      t->n = i - start - 1;
    }
  } else if (vmi_text_ident_start(c) || c == '.') {
    while (i < p->eol && vmi_text_ident_char((unsigned char)x[i])) i++;
    t->kind = TK_WORD;
    t->s = x + start;
    t->n = i - start;
  } else if (is_digit(c) || c == '-' || c == '+') {
    if (c == '-' || c == '+') i++;
    int numeric = i < p->eol && is_digit(x[i]);
    size_t body = i;
    while (i < p->eol) {
      unsigned char d = (unsigned char)x[i];
      if (vmi_text_ident_char(d)) {
        i++;
      } else if ((d == '+' || d == '-') && numeric && i > body &&
                 (x[i - 1] == 'e' || x[i - 1] == 'E')) {
        i++; /* exponent sign: 1e-310 */
      } else {
        break;
      }
    }
    if (i == body) return PERR(p, "stray '%c'", c);
    t->kind = TK_NUM;
    t->s = x + start;
    t->n = i - start;
  } else if (strchr("()[],:={}?*", c) && c != '\0') {
    t->kind = TK_PUNCT;
    t->s = x + start;
    t->n = 1;
    i++;
  } else if (c >= 0x20 && c < 0x7f) {
    return PERR(p, "unexpected character '%c'", c);
  } else {
    return PERR(p, "unexpected byte 0x%02x", c);
  }
  p->pos = i;
  t->raw = x + start;
  t->rawn = i - start;
  return VM_STATUS_OK;
}

static vm_status_t next_tok(asm_parser_t *p, tok_t *t) {
  if (p->have_peek) {
    *t = p->peek;
    p->have_peek = 0;
    return VM_STATUS_OK;
  }
  return lex(p, t);
}

static vm_status_t peek_tok(asm_parser_t *p, tok_t *t) {
  if (!p->have_peek) {
    VM_RETURN_IF_ERROR(lex(p, &p->peek));
    p->have_peek = 1;
  }
  *t = p->peek;
  return VM_STATUS_OK;
}

static int is_punct(const tok_t *t, char c) {
  return t->kind == TK_PUNCT && t->s[0] == c;
}

static int is_word(const tok_t *t, const char *w) {
  return t->kind == TK_WORD && t->n == strlen(w) && memcmp(t->s, w, t->n) == 0;
}

static vm_status_t expect_punct(asm_parser_t *p, char c, const char *where) {
  tok_t t;
  VM_RETURN_IF_ERROR(next_tok(p, &t));
  if (is_punct(&t, c)) return VM_STATUS_OK;
  char b[96];
  return PERR(p, "expected '%c' %s, found %s", c, where, show_tok(&t, b, sizeof(b)));
}

static vm_status_t expect_word(asm_parser_t *p, const char *w, const char *where) {
  tok_t t;
  VM_RETURN_IF_ERROR(next_tok(p, &t));
  if (is_word(&t, w)) return VM_STATUS_OK;
  char b[96];
  return PERR(p, "expected '%s' %s, found %s", w, where, show_tok(&t, b, sizeof(b)));
}

static vm_status_t expect_eol(asm_parser_t *p) {
  tok_t t;
  VM_RETURN_IF_ERROR(next_tok(p, &t));
  if (t.kind == TK_EOL) return VM_STATUS_OK;
  char b[96];
  return PERR(p, "unexpected %s at the end of the line", show_tok(&t, b, sizeof(b)));
}

/* ---------------------------------------------------------------------------
 * Values
 */

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Appends the bytes of a string literal's raw span s[0..n) to b, decoding
 * escapes; fails if b would exceed max bytes. what names the string. */
static vm_status_t decode_append(asm_parser_t *p, const char *s, size_t n, dbuf_t *b, uint64_t max,
                                 const char *what) {
  size_t i = 0;
  while (i < n) {
    /* Copy a run of plain bytes at once. */
    size_t j = i;
    while (j < n && s[j] != '\\' && ((unsigned char)s[j] >= 0x20 || s[j] == '\t') && s[j] != 0x7f)
      j++;
    if (j > i) {
      if ((uint64_t)(b->n + (j - i)) > max)
        return PERR(p, "%s is longer than the limit of %" PRIu64 " bytes", what, max);
      if (db_put(b, s + i, j - i) != 0) return oom();
      i = j;
      continue;
    }
    char ch;
    if (s[i] != '\\')
      return PERR(p, "control byte 0x%02x in a string: write it as \\x%02x", (unsigned char)s[i],
                  (unsigned char)s[i]);
    if (i + 1 >= n) return PERR(p, "string ends with a lone '\\'");
    switch (s[i + 1]) {
      case 'n':
        ch = '\n';
        i += 2;
        break;
      case 't':
        ch = '\t';
        i += 2;
        break;
      case 'r':
        ch = '\r';
        i += 2;
        break;
      case '"':
        ch = '"';
        i += 2;
        break;
      case '\\':
        ch = '\\';
        i += 2;
        break;
      case 'x': {
        int hi = i + 2 < n ? hexval((unsigned char)s[i + 2]) : -1;
        int lo = i + 3 < n ? hexval((unsigned char)s[i + 3]) : -1;
        if (hi < 0 || lo < 0) return PERR(p, "\\x needs two hex digits");
        ch = (char)(hi * 16 + lo);
        i += 4;
        break;
      }
      default: {
        unsigned char e = (unsigned char)s[i + 1];
        if (e >= 0x20 && e < 0x7f)
          return PERR(p, "unknown escape '\\%c' (use \\n \\t \\r \\\" \\\\ \\xNN)", e);
        return PERR(p, "unknown escape: '\\' followed by byte 0x%02x", e);
      }
    }
    if ((uint64_t)b->n + 1 > max)
      return PERR(p, "%s is longer than the limit of %" PRIu64 " bytes", what, max);
    if (db_put(b, &ch, 1) != 0) return oom();
  }
  return VM_STATUS_OK;
}

/* A string token's bytes, as a new NUL-terminated buffer. With no_nul, the
 * value must not contain NUL (it is stored as a C string). */
static vm_status_t decode_string(asm_parser_t *p, const tok_t *t, uint64_t max, int no_nul,
                                 const char *what, char **out, size_t *out_len) {
  dbuf_t b = {0};
  vm_status_t st = decode_append(p, t->s, t->n, &b, max, what);
  if (!st && !b.p && db_put(&b, "", 0) != 0) st = oom();
  if (!st && no_nul && memchr(b.p, '\0', b.n)) st = PERR(p, "%s contains a NUL byte", what);
  if (st) {
    free(b.p);
    return st;
  }
  *out = b.p;
  if (out_len) *out_len = b.n;
  return VM_STATUS_OK;
}

/* A name: a bare word or a quoted string; non-empty, no NUL. */
static vm_status_t decode_name(asm_parser_t *p, const tok_t *t, const char *what, char **out) {
  *out = NULL;
  if (t->kind == TK_WORD) {
    if (t->n > p->lim.max_string_bytes)
      return PERR(p, "%s is longer than the limit of %u bytes", what, p->lim.max_string_bytes);
    *out = vmi_strndup(t->s, t->n);
    return *out ? VM_STATUS_OK : oom();
  }
  if (t->kind == TK_STR || t->kind == TK_BCFN || t->kind == TK_PKFN) {
    if (t->kind != TK_STR && !t->quoted) {
      if (t->n > p->lim.max_string_bytes)
        return PERR(p, "%s is longer than the limit of %u bytes", what, p->lim.max_string_bytes);
      *out = vmi_strndup(t->s, t->n);
      return *out ? VM_STATUS_OK : oom();
    }
    VM_RETURN_IF_ERROR(decode_string(p, t, p->lim.max_string_bytes, 1, what, out, NULL));
    if (!**out) {
      free(*out);
      *out = NULL;
      return PERR(p, "%s is empty", what);
    }
    return VM_STATUS_OK;
  }
  char b[96];
  return PERR(p, "expected %s, found %s", what, show_tok(t, b, sizeof(b)));
}

/* Decimal int64 with an optional sign. 0, or -1 if malformed / out of range. */
static int parse_i64(const char *s, size_t n, int64_t *out) {
  size_t i = 0;
  int neg = 0;
  if (i < n && (s[i] == '-' || s[i] == '+')) neg = s[i++] == '-';
  if (i == n) return -1;
  uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX, v = 0;
  for (; i < n; i++) {
    if (!is_digit(s[i])) return -1;
    uint64_t d = (uint64_t)(s[i] - '0');
    if (v > (limit - d) / 10) return -1;
    v = v * 10 + d;
  }
  if (!neg)
    *out = (int64_t)v;
  else
    *out = v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v;
  return 0;
}

/* Unsigned decimal at most max. 0, or -1. */
static int parse_u64(const char *s, size_t n, uint64_t max, uint64_t *out) {
  if (n == 0) return -1;
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    if (!is_digit(s[i])) return -1;
    uint64_t d = (uint64_t)(s[i] - '0');
    if (d > max || v > (max - d) / 10) return -1;
    v = v * 10 + d;
  }
  *out = v;
  return 0;
}

static vm_status_t parse_u32_tok(asm_parser_t *p, const tok_t *t, uint32_t max, const char *what,
                                 uint32_t *out) {
  uint64_t v;
  char b[96];
  if (t->kind != TK_NUM || parse_u64(t->s, t->n, max, &v) != 0)
    return PERR(p, "bad %s %s (expected a number from 0 to %u)", what, show_tok(t, b, sizeof(b)),
                max);
  *out = (uint32_t)v;
  return VM_STATUS_OK;
}

/* A float constant's value: decimal (as printed by %g), inf, nan, with an
 * optional sign. Hex floats and other strtod extensions are refused so that
 * the accepted language is exactly documented. */
static vm_status_t parse_double(asm_parser_t *p, const tok_t *t, double *out) {
  char b[96];
  const char *s = t->s;
  size_t n = t->n, i = 0;
  if (t->kind != TK_NUM && t->kind != TK_WORD) goto bad;
  int neg = 0;
  if (i < n && (s[i] == '-' || s[i] == '+')) neg = s[i++] == '-';
  if (n - i == 3 && memcmp(s + i, "inf", 3) == 0) {
    *out = neg ? -1.0 / 0.0 : 1.0 / 0.0;
    return VM_STATUS_OK;
  }
  if (n - i == 3 && memcmp(s + i, "nan", 3) == 0) {
    uint64_t bits = neg ? VMI_TEXT_NEG_NAN_BITS : VMI_TEXT_NAN_BITS;
    memcpy(out, &bits, sizeof(*out));
    return VM_STATUS_OK;
  }
  size_t digits = 0;
  while (i < n && is_digit(s[i])) i++, digits++;
  if (i < n && s[i] == '.') {
    i++;
    while (i < n && is_digit(s[i])) i++, digits++;
  }
  if (digits == 0) goto bad;
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    i++;
    if (i < n && (s[i] == '-' || s[i] == '+')) i++;
    size_t ed = 0;
    while (i < n && is_digit(s[i])) i++, ed++;
    if (ed == 0) goto bad;
  }
  if (i != n || n > 400) goto bad;
  char buf[401];
  memcpy(buf, s, n);
  buf[n] = '\0';
  char *end;
  double v = strtod(buf, &end);
  if (end != buf + n) goto bad;
  if (v == 1.0 / 0.0 || v == -1.0 / 0.0)
    return PERR(p, "float %s is out of range (write inf for infinity)", show_tok(t, b, sizeof(b)));
  *out = v;
  return VM_STATUS_OK;
bad:
  return PERR(p, "bad float %s (expected e.g. 0.5, -1e-300, inf, nan, or bits 0x...)",
              show_tok(t, b, sizeof(b)));
}

/* "bits 0x" + 1..16 hex digits: a double given by its bit pattern. */
static vm_status_t parse_bits(asm_parser_t *p, const tok_t *t, double *out) {
  char b[96];
  if (t->kind != TK_NUM || t->n < 3 || t->n > 18 || t->s[0] != '0' || t->s[1] != 'x')
    return PERR(p, "bad bit pattern %s (expected 0x and up to 16 hex digits)",
                show_tok(t, b, sizeof(b)));
  uint64_t v = 0;
  for (size_t i = 2; i < t->n; i++) {
    int h = hexval((unsigned char)t->s[i]);
    if (h < 0)
      return PERR(p, "bad bit pattern %s (expected 0x and up to 16 hex digits)",
                  show_tok(t, b, sizeof(b)));
    v = v * 16 + (uint64_t)h;
  }
  memcpy(out, &v, sizeof(*out));
  return VM_STATUS_OK;
}

static vm_status_t parse_dtype_tok(asm_parser_t *p, const tok_t *t, vm_dtype_t *out) {
  char b[96];
  if (t->kind != TK_WORD || vm_dtype_parse(t->s, t->n, out) != 0)
    return PERR(p,
                "unknown dtype %s (expected e.g. float32, int8, uint16, bfloat16, bool, "
                "float32x4)",
                show_tok(t, b, sizeof(b)));
  return VM_STATUS_OK;
}

/* "[d, d, ...]" after the '['. With any_ok (parameter types), '?' is an
 * unknown extent (-1) and "[*]" any rank (*out_ndim = -1). */
static vm_status_t parse_dims(asm_parser_t *p, int any_ok, int64_t **out_dims, int32_t *out_ndim) {
  *out_dims = NULL;
  *out_ndim = 0;
  int64_t *dims = NULL;
  size_t n = 0, cap = 0;
  tok_t t;
  char b[96];
  vm_status_t st = peek_tok(p, &t);
  if (st) return st;
  if (any_ok && is_punct(&t, '*')) {
    (void)next_tok(p, &t);
    VM_RETURN_IF_ERROR(expect_punct(p, ']', "after '[*'"));
    *out_ndim = -1;
    return VM_STATUS_OK;
  }
  if (is_punct(&t, ']')) {
    (void)next_tok(p, &t);
    return VM_STATUS_OK;
  }
  for (;;) {
    if ((st = next_tok(p, &t))) goto fail;
    int64_t d;
    if (any_ok && is_punct(&t, '?')) {
      d = -1;
    } else if (t.kind != TK_NUM || parse_i64(t.s, t.n, &d) != 0 || d < 0) {
      st = PERR(p, "bad dimension %s (expected a number >= 0%s)", show_tok(&t, b, sizeof(b)),
                any_ok ? " or ?" : "");
      goto fail;
    }
    if (n >= p->lim.max_ndim) {
      st = PERR(p, "more than %u dimensions (limit)", p->lim.max_ndim);
      goto fail;
    }
    if (VMI_GROW(dims, cap, n + 1) != 0) {
      st = oom();
      goto fail;
    }
    dims[n++] = d;
    if ((st = next_tok(p, &t))) goto fail;
    if (is_punct(&t, ']')) break;
    if (!is_punct(&t, ',')) {
      st = PERR(p, "expected ',' or ']' in a shape, found %s", show_tok(&t, b, sizeof(b)));
      goto fail;
    }
  }
  *out_dims = dims;
  *out_ndim = (int32_t)n;
  return VM_STATUS_OK;
fail:
  free(dims);
  return st;
}

/* Hex data token(s) appended to b, which must not pass want bytes. */
static vm_status_t append_hex(asm_parser_t *p, const tok_t *t, dbuf_t *b, uint64_t want) {
  char sb[96];
  if ((t->kind != TK_WORD && t->kind != TK_NUM) || t->n % 2 != 0)
    return PERR(p, "bad hex data %s (expected pairs of hex digits)", show_tok(t, sb, sizeof(sb)));
  if ((uint64_t)b->n + t->n / 2 > want)
    return PERR(p,
                "hex data is longer than the %" PRIu64
                " bytes the tensor's shape and dtype "
                "need",
                want);
  for (size_t i = 0; i < t->n; i += 2) {
    int hi = hexval((unsigned char)t->s[i]), lo = hexval((unsigned char)t->s[i + 1]);
    if (hi < 0 || lo < 0)
      return PERR(p, "bad hex data %s (expected pairs of hex digits)", show_tok(t, sb, sizeof(sb)));
    char byte = (char)(hi * 16 + lo);
    if (db_put(b, &byte, 1) != 0) return oom();
  }
  return VM_STATUS_OK;
}

/* ---------------------------------------------------------------------------
 * Pre-pass: function declarations
 */

/* Reads the table line ".table $a @b ..." (already past ".table"). */
static vm_status_t parse_table_line(asm_parser_t *p, decl_t **out, size_t *out_n) {
  decl_t *list = NULL;
  size_t n = 0, cap = 0;
  vm_status_t st = VM_STATUS_OK;
  for (;;) {
    tok_t t;
    if ((st = next_tok(p, &t))) break;
    if (t.kind == TK_EOL) break;
    if (t.kind != TK_BCFN && t.kind != TK_PKFN) {
      char b[96];
      st = PERR(p, "expected @name or $name in .table, found %s", show_tok(&t, b, sizeof(b)));
      break;
    }
    if (n >= p->lim.max_functions) {
      st = PERR(p, "more than %u functions (limit)", p->lim.max_functions);
      break;
    }
    if (VMI_GROW(list, cap, n + 1) != 0) {
      st = oom();
      break;
    }
    list[n].kind = t.kind == TK_BCFN ? VM_FUNC_BYTECODE : VM_FUNC_PACKED;
    list[n].line = p->line;
    if ((st = decode_name(p, &t, "function name", &list[n].name))) break;
    n++;
  }
  if (st) {
    for (size_t i = 0; i < n; i++) free(list[i].name);
    free(list);
    return st;
  }
  *out = list;
  *out_n = n;
  return VM_STATUS_OK;
}

static vm_status_t prepass(asm_parser_t *p) {
  decl_t *table = NULL;
  size_t ntable = 0;
  uint64_t table_line = 0;
  vm_status_t st = VM_STATUS_OK;
  while (next_line(p)) {
    tok_t t;
    /* Lines the pre-pass cannot read are left to the main pass to report. */
    vm_status_t lst = lex(p, &t);
    if (lst) {
      vm_status_free(lst);
      continue;
    }
    if (is_word(&t, ".table")) {
      if (table_line) {
        st = PERR(p, "second .table (the first is on line %" PRIu64 ")", table_line);
        goto done;
      }
      table_line = p->line;
      if ((st = parse_table_line(p, &table, &ntable))) goto done;
      continue;
    }
    int packed = is_word(&t, ".packed");
    if (!packed && !is_word(&t, ".func")) continue;
    if (p->ndecls >= p->lim.max_functions) {
      st = PERR(p, "more than %u functions (limit)", p->lim.max_functions);
      goto done;
    }
    if (VMI_GROW(p->decls, p->cap_decls, p->ndecls + 1) != 0) {
      st = oom();
      goto done;
    }
    decl_t *d = &p->decls[p->ndecls++];
    d->kind = packed ? VM_FUNC_PACKED : VM_FUNC_BYTECODE;
    d->line = p->line;
    lst = lex(p, &t);
    if (!lst && t.kind == (packed ? TK_PKFN : TK_BCFN))
      lst = decode_name(p, &t, "function name", &d->name);
    vm_status_free(lst);
  }

  /* Index every declaration: text order, or the order .table gives. */
  p->nfuncs = (uint32_t)p->ndecls;
  p->funcs = calloc(p->ndecls ? p->ndecls : 1, sizeof(vm_function_t));
  p->decl_index = calloc(p->ndecls ? p->ndecls : 1, sizeof(uint32_t));
  if (!p->funcs || !p->decl_index) {
    st = oom();
    goto done;
  }
  for (size_t i = 0; i < p->ndecls; i++) {
    decl_t *d = &p->decls[i];
    if (!d->name) continue;
    uint64_t prev;
    if (sm_find(&p->names, d->kind, d->name, strlen(d->name), &prev)) {
      char b[96];
      st = perr_line(d->line, "%s function %c%s is declared twice (first on line %" PRIu64 ")",
                     d->kind == VM_FUNC_PACKED ? "packed" : "bytecode",
                     d->kind == VM_FUNC_PACKED ? '$' : '@',
                     show(d->name, strlen(d->name), b, sizeof(b)), p->decls[prev].line);
      goto done;
    }
    if (sm_put(&p->names, d->kind, d->name, strlen(d->name), (uint32_t)i) != 0) {
      st = oom();
      goto done;
    }
  }
  if (table_line) {
    /* The map now gives declaration numbers; turn them into table indices. */
    uint8_t *listed = calloc(p->ndecls ? p->ndecls : 1, 1);
    if (!listed) {
      st = oom();
      goto done;
    }
    for (size_t k = 0; k < ntable && !st; k++) {
      uint64_t di;
      char b[96];
      const char *nm = table[k].name;
      char sig = table[k].kind == VM_FUNC_PACKED ? '$' : '@';
      if (!sm_find(&p->names, table[k].kind, nm, strlen(nm), &di))
        st = perr_line(table_line, "%c%s in .table is not declared", sig,
                       show(nm, strlen(nm), b, sizeof(b)));
      else if (listed[di])
        st = perr_line(table_line, "%c%s is listed twice in .table", sig,
                       show(nm, strlen(nm), b, sizeof(b)));
      else {
        listed[di] = 1;
        p->decl_index[di] = (uint32_t)k;
      }
    }
    for (size_t i = 0; i < p->ndecls && !st; i++) {
      if (listed[i] || !p->decls[i].name) continue;
      char b[96];
      st = perr_line(table_line, "function %c%s (line %" PRIu64 ") is missing from .table",
                     p->decls[i].kind == VM_FUNC_PACKED ? '$' : '@',
                     show(p->decls[i].name, strlen(p->decls[i].name), b, sizeof(b)),
                     p->decls[i].line);
    }
    free(listed);
    if (st) goto done;
    if (ntable != p->ndecls) {
      /* Only possible when a declaration could not be read; its own line
       * reports it in the main pass. */
      for (size_t i = 0; i < p->ndecls; i++) p->decl_index[i] = (uint32_t)i;
    }
  } else {
    for (size_t i = 0; i < p->ndecls; i++) p->decl_index[i] = (uint32_t)i;
  }
  /* Rebuild the function map with table indices. */
  sm_free(&p->names);
  for (size_t i = 0; i < p->ndecls; i++) {
    decl_t *d = &p->decls[i];
    if (!d->name) continue;
    vm_function_t *f = &p->funcs[p->decl_index[i]];
    f->kind = d->kind;
    f->name = d->name;
    d->name = NULL; /* now owned by the function */
    if (sm_put(&p->names, f->kind, f->name, strlen(f->name), p->decl_index[i]) != 0) {
      st = oom();
      goto done;
    }
  }
done:
  for (size_t i = 0; i < ntable; i++) free(table[i].name);
  free(table);
  /* Rewind for the main pass. */
  p->pos = p->eol = p->next = 0;
  p->line = 0;
  p->have_peek = 0;
  return st;
}

/* The table index of a function reference token, or an error. */
static vm_status_t resolve_func(asm_parser_t *p, const tok_t *t, uint32_t *out) {
  vm_func_kind_t kind = t->kind == TK_BCFN ? VM_FUNC_BYTECODE : VM_FUNC_PACKED;
  const char *name = t->s;
  size_t n = t->n;
  if (t->quoted) {
    p->tmp.n = 0;
    VM_RETURN_IF_ERROR(
        decode_append(p, t->s, t->n, &p->tmp, p->lim.max_string_bytes, "function name"));
    name = p->tmp.p ? p->tmp.p : "";
    n = p->tmp.n;
  }
  uint64_t idx;
  if (sm_find(&p->names, kind, name, n, &idx)) {
    *out = (uint32_t)idx;
    return VM_STATUS_OK;
  }
  char b[96], r[80];
  snprintf(r, sizeof(r), "%s", show_tok(t, b, sizeof(b)));
  return PERR(p, "unknown function %s (no %s with that name is declared)", r,
              kind == VM_FUNC_PACKED ? ".packed" : ".func");
}

/* The next declaration of the main pass: it must be the one the pre-pass
 * recorded for this line. */
static vm_status_t take_decl(asm_parser_t *p, vm_func_kind_t kind, vm_function_t **out) {
  tok_t t;
  VM_RETURN_IF_ERROR(next_tok(p, &t));
  char b[96];
  if (t.kind != (kind == VM_FUNC_PACKED ? TK_PKFN : TK_BCFN))
    return PERR(p, "expected %s after %s, found %s", kind == VM_FUNC_PACKED ? "$name" : "@name",
                kind == VM_FUNC_PACKED ? ".packed" : ".func", show_tok(&t, b, sizeof(b)));
  char *name;
  VM_RETURN_IF_ERROR(decode_name(p, &t, "function name", &name));
  free(name);
  size_t k = p->decls_seen++;
  if (k >= p->ndecls || p->decls[k].line != p->line)
    return vm_status_make(VM_INTERNAL, "line %" PRIu64 ": asm: declarations out of step", p->line);
  *out = &p->funcs[p->decl_index[k]];
  return VM_STATUS_OK;
}

/* ---------------------------------------------------------------------------
 * Directives
 */

static vm_status_t parse_version(asm_parser_t *p) {
  tok_t t;
  char b[96];
  if (p->have_version) return PERR(p, "second .version");
  VM_RETURN_IF_ERROR(next_tok(p, &t));
  const char *dot = t.kind == TK_NUM ? memchr(t.s, '.', t.n) : NULL;
  uint64_t major, minor;
  if (!dot || parse_u64(t.s, (size_t)(dot - t.s), 0xffff, &major) != 0 ||
      parse_u64(dot + 1, t.n - (size_t)(dot - t.s) - 1, 0xffff, &minor) != 0)
    return PERR(p, "bad version %s (expected MAJOR.MINOR, e.g. 1.0)", show_tok(&t, b, sizeof(b)));
  p->have_version = 1;
  p->major = (uint16_t)major;
  p->minor = (uint16_t)minor;
  return expect_eol(p);
}

static vm_status_t parse_meta(asm_parser_t *p) {
  tok_t t;
  char b[96];
  if (p->nmeta >= p->lim.max_meta)
    return PERR(p, "more than %u .meta entries (limit)", p->lim.max_meta);
  if (VMI_GROW(p->meta, p->cap_meta, p->nmeta + 1) != 0) return oom();
  vm_meta_entry_t *m = &p->meta[p->nmeta];
  VM_RETURN_IF_ERROR(next_tok(p, &t));
  VM_RETURN_IF_ERROR(decode_name(p, &t, "metadata key", &m->key));
  p->nmeta++; /* owns key from here, so the cleanup frees it */
  uint64_t prev;
  if (sm_find(&p->names, NS_META, m->key, strlen(m->key), &prev))
    return PERR(p, "duplicate metadata key '%s'", show(m->key, strlen(m->key), b, sizeof(b)));
  if (sm_put(&p->names, NS_META, m->key, strlen(m->key), 0) != 0) return oom();
  VM_RETURN_IF_ERROR(next_tok(p, &t));
  if (t.kind != TK_STR)
    return PERR(p, "expected the metadata value as a string, found %s", show_tok(&t, b, sizeof(b)));
  VM_RETURN_IF_ERROR(
      decode_string(p, &t, p->lim.max_string_bytes, 1, "metadata value", &m->value, NULL));
  return expect_eol(p);
}

static vm_status_t parse_kernel(asm_parser_t *p) {
  tok_t t;
  char b[96];
  if (p->nkernels >= p->lim.max_kernels)
    return PERR(p, "more than %u kernels (limit)", p->lim.max_kernels);
  if (VMI_GROW(p->kernels, p->cap_kernels, p->nkernels + 1) != 0) return oom();
  vm_kernel_module_t *k = &p->kernels[p->nkernels++];
  VM_RETURN_IF_ERROR(next_tok(p, &t));
  VM_RETURN_IF_ERROR(decode_name(p, &t, "kernel name", &k->name));
  if (sm_find(&p->names, NS_KERNEL, k->name, strlen(k->name), &(uint64_t){0}))
    return PERR(p, "duplicate kernel name '%s'", show(k->name, strlen(k->name), b, sizeof(b)));
  if (sm_put(&p->names, NS_KERNEL, k->name, strlen(k->name), 0) != 0) return oom();
  VM_RETURN_IF_ERROR(next_tok(p, &t));
  if (is_word(&t, "options")) {
    VM_RETURN_IF_ERROR(next_tok(p, &t));
    if (t.kind != TK_STR)
      return PERR(p, "expected the options as a string, found %s", show_tok(&t, b, sizeof(b)));
    VM_RETURN_IF_ERROR(
        decode_string(p, &t, p->lim.max_string_bytes, 1, "kernel options", &k->options, NULL));
    VM_RETURN_IF_ERROR(next_tok(p, &t));
  } else {
    k->options = strdup("");
    if (!k->options) return oom();
  }
  if (!is_punct(&t, '{'))
    return PERR(p, "expected '{' to open the kernel source, found %s", show_tok(&t, b, sizeof(b)));
  VM_RETURN_IF_ERROR(expect_eol(p));
  uint64_t open_line = p->line;
  dbuf_t src = {0};
  vm_status_t st = VM_STATUS_OK;
  for (;;) {
    if (!next_line(p)) {
      st = PERR(p, "end of input inside .kernel (opened on line %" PRIu64 "): missing '}'",
                open_line);
      break;
    }
    if ((st = next_tok(p, &t))) break;
    if (is_punct(&t, '}')) {
      st = expect_eol(p);
      break;
    }
    while (!st && t.kind == TK_STR) {
      st = decode_append(p, t.s, t.n, &src, p->lim.max_kernel_source, "kernel source");
      if (!st) st = next_tok(p, &t);
    }
    if (st) break;
    if (t.kind != TK_EOL) {
      st = PERR(p, "expected source lines as strings or '}' in .kernel, found %s",
                show_tok(&t, b, sizeof(b)));
      break;
    }
  }
  if (!st && src.p && memchr(src.p, '\0', src.n)) st = PERR(p, "kernel source contains a NUL byte");
  if (!st && !src.p && db_put(&src, "", 0) != 0) st = oom();
  if (st) {
    free(src.p);
    return st;
  }
  k->source = src.p;
  return VM_STATUS_OK;
}

static vm_status_t parse_const(asm_parser_t *p) {
  tok_t t;
  char b[96];
  VM_RETURN_IF_ERROR(next_tok(p, &t));
  uint64_t idx;
  if (t.kind != TK_WORD || t.n < 2 || t.s[0] != 'c' ||
      parse_u64(t.s + 1, t.n - 1, UINT32_MAX, &idx) != 0)
    return PERR(p, "expected a constant number like c0 after .const, found %s",
                show_tok(&t, b, sizeof(b)));
  if (idx != p->nconsts)
    return PERR(p, "constant c%" PRIu64 " out of order: the next one must be c%zu", idx,
                p->nconsts);
  if (p->nconsts >= p->lim.max_constants)
    return PERR(p, "more than %u constants (limit)", p->lim.max_constants);
  if (VMI_GROW(p->consts, p->cap_consts, p->nconsts + 1) != 0 ||
      VMI_GROW(p->cdata, p->cap_cdata, p->nconsts + 1) != 0)
    return oom();
  vm_constant_t *c = &p->consts[p->nconsts];
  memset(c, 0, sizeof(*c));
  c->kind = VM_CONST_INT; /* owns nothing until the kind is known */
  c->scope = strdup("");
  if (!c->scope) return oom();
  p->nconsts++; /* owned from here: the cleanup frees a partial constant */

  VM_RETURN_IF_ERROR(next_tok(p, &t));
  if (is_word(&t, "int")) {
    VM_RETURN_IF_ERROR(next_tok(p, &t));
    if (t.kind != TK_NUM || parse_i64(t.s, t.n, &c->u.i) != 0)
      return PERR(p, "bad integer %s (expected a decimal int64)", show_tok(&t, b, sizeof(b)));
  } else if (is_word(&t, "float")) {
    c->kind = VM_CONST_FLOAT;
    VM_RETURN_IF_ERROR(next_tok(p, &t));
    if (is_word(&t, "bits")) {
      VM_RETURN_IF_ERROR(next_tok(p, &t));
      VM_RETURN_IF_ERROR(parse_bits(p, &t, &c->u.f));
    } else {
      VM_RETURN_IF_ERROR(parse_double(p, &t, &c->u.f));
    }
  } else if (is_word(&t, "string")) {
    VM_RETURN_IF_ERROR(next_tok(p, &t));
    if (t.kind != TK_STR)
      return PERR(p, "expected a quoted string, found %s", show_tok(&t, b, sizeof(b)));
    size_t len;
    VM_RETURN_IF_ERROR(
        decode_string(p, &t, p->lim.max_string_bytes, 0, "string constant", &c->u.str.data, &len));
    c->kind = VM_CONST_STRING;
    c->u.str.len = (uint32_t)len;
  } else if (is_word(&t, "dtype")) {
    VM_RETURN_IF_ERROR(next_tok(p, &t));
    VM_RETURN_IF_ERROR(parse_dtype_tok(p, &t, &c->u.dtype));
    c->kind = VM_CONST_DTYPE;
  } else if (is_word(&t, "shape")) {
    int32_t nd;
    VM_RETURN_IF_ERROR(expect_punct(p, '[', "to open the shape"));
    c->kind = VM_CONST_SHAPE;
    VM_RETURN_IF_ERROR(parse_dims(p, 0, &c->u.shape.dims, &nd));
    c->u.shape.ndim = (uint32_t)nd;
  } else if (is_word(&t, "tensor")) {
    vm_dtype_t dt;
    int32_t nd;
    VM_RETURN_IF_ERROR(next_tok(p, &t));
    VM_RETURN_IF_ERROR(parse_dtype_tok(p, &t, &dt));
    VM_RETURN_IF_ERROR(expect_punct(p, '[', "after the tensor dtype"));
    c->kind = VM_CONST_TENSOR;
    c->u.tensor.dtype = dt;
    VM_RETURN_IF_ERROR(parse_dims(p, 0, &c->u.tensor.shape, &nd));
    c->u.tensor.ndim = (uint32_t)nd;
  } else {
    return PERR(p,
                "unknown constant kind %s (expected int, float, string, dtype, shape or "
                "tensor)",
                show_tok(&t, b, sizeof(b)));
  }

  VM_RETURN_IF_ERROR(next_tok(p, &t));
  if (is_word(&t, "scope")) {
    VM_RETURN_IF_ERROR(next_tok(p, &t));
    if (t.kind != TK_STR)
      return PERR(p, "expected the scope as a string, found %s", show_tok(&t, b, sizeof(b)));
    char *scope;
    VM_RETURN_IF_ERROR(decode_string(p, &t, p->lim.max_string_bytes, 1, "scope", &scope, NULL));
    free(c->scope);
    c->scope = scope;
    VM_RETURN_IF_ERROR(next_tok(p, &t));
  }
  if (c->kind != VM_CONST_TENSOR) {
    if (t.kind != TK_EOL)
      return PERR(p, "unexpected %s at the end of the line", show_tok(&t, b, sizeof(b)));
    return VM_STATUS_OK;
  }

  /* Tensor data: hex on the line or in a block. Memory grows with the hex
   * actually present, never with what the shape claims. */
  uint64_t want;
  char dts[32];
  vm_dtype_str(c->u.tensor.dtype, dts, sizeof(dts));
  if (vm_tensor_nbytes(c->u.tensor.dtype, c->u.tensor.shape, c->u.tensor.ndim, &want) != 0)
    return PERR(p, "tensor %s shape is too large (its byte size overflows)", dts);
  if (want > p->lim.max_tensor_bytes || want > SIZE_MAX / 2)
    return PERR(p, "tensor of %" PRIu64 " bytes exceeds the limit of %" PRIu64 " bytes", want,
                p->lim.max_tensor_bytes);
  dbuf_t data = {0};
  vm_status_t st = VM_STATUS_OK;
  uint64_t data_line = p->line;
  if (is_word(&t, "data")) {
    if ((st = next_tok(p, &t))) goto data_done;
    if (is_punct(&t, '{')) {
      if ((st = expect_eol(p))) goto data_done;
      uint64_t open_line = p->line;
      for (;;) {
        if (!next_line(p)) {
          st = PERR(p, "end of input inside tensor data (opened on line %" PRIu64 "): missing '}'",
                    open_line);
          goto data_done;
        }
        if ((st = next_tok(p, &t))) goto data_done;
        if (is_punct(&t, '}')) break;
        while (!st && t.kind != TK_EOL) {
          st = append_hex(p, &t, &data, want);
          if (!st) st = next_tok(p, &t);
        }
        if (st) goto data_done;
      }
    } else {
      if ((st = append_hex(p, &t, &data, want))) goto data_done;
    }
    data_line = p->line;
    st = expect_eol(p);
  } else if (t.kind != TK_EOL) {
    st = PERR(p, "unexpected %s at the end of the line (tensor data starts with 'data')",
              show_tok(&t, b, sizeof(b)));
  }
data_done:
  if (!st && data.n != want)
    st = perr_line(data_line,
                   "tensor data is %zu bytes but %s with this shape needs %" PRIu64 " bytes",
                   data.n, dts, want);
  if (st) {
    free(data.p);
    return st;
  }
  p->cdata[p->nconsts - 1] = data.p;
  c->u.tensor.nbytes = want;
  return VM_STATUS_OK;
}

/* Appends one instruction (p->iw, n words) to the code. */
static vm_status_t emit(asm_parser_t *p, size_t n) {
  if ((uint64_t)p->ninstrs + 1 > p->lim.max_instrs)
    return PERR(p, "more than %" PRIu64 " instructions (limit)", p->lim.max_instrs);
  if ((uint64_t)p->nwords + n > p->lim.max_words)
    return PERR(p, "more than %" PRIu64 " code words (limit)", p->lim.max_words);
  if (VMI_GROW(p->offsets, p->cap_offsets, p->ninstrs + 1) != 0 ||
      VMI_GROW(p->words, p->cap_words, p->nwords + n) != 0)
    return oom();
  p->offsets[p->ninstrs++] = p->nwords;
  memcpy(p->words + p->nwords, p->iw, n * sizeof(int64_t));
  p->nwords += n;
  return VM_STATUS_OK;
}

static vm_status_t need_iw(asm_parser_t *p, size_t n) {
  return VMI_GROW(p->iw, p->cap_iw, n) == 0 ? VM_STATUS_OK : oom();
}

static vm_status_t parse_orphan(asm_parser_t *p) {
  tok_t t;
  char b[96];
  VM_RETURN_IF_ERROR(expect_punct(p, '{', "after .orphan"));
  VM_RETURN_IF_ERROR(expect_eol(p));
  uint64_t open_line = p->line;
  size_t first = p->ninstrs;
  for (;;) {
    if (!next_line(p))
      return PERR(p, "end of input inside .orphan (opened on line %" PRIu64 "): missing '}'",
                  open_line);
    VM_RETURN_IF_ERROR(next_tok(p, &t));
    if (t.kind == TK_EOL) continue;
    if (is_punct(&t, '}')) break;
    if (!is_word(&t, "raw"))
      return PERR(p, "expected 'raw' words or '}' in .orphan, found %s",
                  show_tok(&t, b, sizeof(b)));
    size_t n = 0;
    for (;;) {
      VM_RETURN_IF_ERROR(next_tok(p, &t));
      if (t.kind == TK_EOL) break;
      int64_t w;
      if (t.kind != TK_NUM || parse_i64(t.s, t.n, &w) != 0)
        return PERR(p, "bad instruction word %s (expected a decimal int64)",
                    show_tok(&t, b, sizeof(b)));
      if (n >= (uint64_t)p->lim.max_call_args + 4)
        return PERR(p, "instruction longer than %" PRIu64 " words (limit)",
                    (uint64_t)p->lim.max_call_args + 4);
      VM_RETURN_IF_ERROR(need_iw(p, n + 1));
      p->iw[n++] = w;
    }
    /* Even dead code must decode, so tools can walk it. */
    size_t want;
    switch (n ? p->iw[0] : 0) {
      case VM_OP_CALL:
        if (n < 4 || p->iw[3] < 0 || (uint64_t)p->iw[3] > p->lim.max_call_args)
          return PERR(p, "raw call: word 3 must be the argument count (0 to %u)",
                      p->lim.max_call_args);
        want = 4 + (size_t)p->iw[3];
        break;
      case VM_OP_RET:
      case VM_OP_GOTO: want = 2; break;
      case VM_OP_IF: want = 3; break;
      default:
        return PERR(p, "raw instruction must start with an opcode (1 call, 2 ret, 3 goto, 4 if)");
    }
    if (n != want)
      return PERR(p, "raw %s has %zu words, needs %zu", vm_opcode_name(p->iw[0]), n, want);
    VM_RETURN_IF_ERROR(emit(p, n));
  }
  if (p->ninstrs == first) return PERR(p, "empty .orphan block");
  return expect_eol(p);
}

/* ---------------------------------------------------------------------------
 * Functions
 */

/* A register operand. allow_void / allow_vm follow the verifier's rules, so
 * the error comes with a line number instead of a pc. */
static vm_status_t parse_reg(asm_parser_t *p, const tok_t *t, const vm_function_t *f,
                             int allow_void, int allow_vm, const char *what, int64_t *out) {
  char b[96];
  if (t->kind != TK_REG)
    return PERR(p, "expected a register as %s, found %s", what, show_tok(t, b, sizeof(b)));
  if (t->n == 4 && memcmp(t->s, "void", 4) == 0) {
    if (!allow_void) return PERR(p, "%%void cannot be %s (only a call destination)", what);
    *out = VM_REG_VOID;
    return VM_STATUS_OK;
  }
  if (t->n == 2 && memcmp(t->s, "vm", 2) == 0) {
    if (!allow_vm) return PERR(p, "%%vm cannot be %s (only a call argument)", what);
    *out = VM_REG_VM;
    return VM_STATUS_OK;
  }
  uint64_t r;
  if (parse_u64(t->s, t->n, UINT64_MAX, &r) != 0)
    return PERR(p, "bad register %s (expected %%N, %%void or %%vm)", show_tok(t, b, sizeof(b)));
  if (r >= f->num_regs)
    return PERR(p, "register %%%" PRIu64 " is out of range: the function has regs %u", r,
                f->num_regs);
  *out = (int64_t)r;
  return VM_STATUS_OK;
}

static vm_status_t add_label_fix(asm_parser_t *p, const tok_t *t, uint64_t word, uint64_t rel) {
  char b[96];
  if (t->kind != TK_WORD) return PERR(p, "expected a label, found %s", show_tok(t, b, sizeof(b)));
  if (VMI_GROW(p->fixes, p->cap_fixes, p->nfixes + 1) != 0) return oom();
  p->fixes[p->nfixes++] = (label_fix_t){word, rel, t->s, t->n, p->line};
  return VM_STATUS_OK;
}

static vm_status_t parse_call(asm_parser_t *p, const vm_function_t *f, int64_t dst) {
  tok_t t;
  char b[96];
  VM_RETURN_IF_ERROR(next_tok(p, &t));
  if (t.kind != TK_BCFN && t.kind != TK_PKFN)
    return PERR(p, "expected the callee ($packed or @function) after 'call', found %s",
                show_tok(&t, b, sizeof(b)));
  uint32_t callee;
  VM_RETURN_IF_ERROR(resolve_func(p, &t, &callee));
  VM_RETURN_IF_ERROR(expect_punct(p, '(', "after the callee"));
  VM_RETURN_IF_ERROR(need_iw(p, 4));
  p->iw[0] = VM_OP_CALL;
  p->iw[1] = dst;
  p->iw[2] = callee;
  size_t n = 0;
  VM_RETURN_IF_ERROR(peek_tok(p, &t));
  if (is_punct(&t, ')')) {
    (void)next_tok(p, &t);
  } else {
    for (;;) {
      VM_RETURN_IF_ERROR(next_tok(p, &t));
      int64_t word, v;
      uint32_t fi;
      uint64_t ci;
      if (t.kind == TK_REG) {
        VM_RETURN_IF_ERROR(parse_reg(p, &t, f, 0, 1, "an argument", &v));
        word = VM_REG(v);
      } else if (t.kind == TK_NUM) {
        if (parse_i64(t.s, t.n, &v) != 0 || v < VM_ARG_VALUE_MIN || v > VM_ARG_VALUE_MAX)
          return PERR(
              p, "bad immediate %s (expected a decimal integer from %" PRId64 " to %" PRId64 ")",
              show_tok(&t, b, sizeof(b)), VM_ARG_VALUE_MIN, VM_ARG_VALUE_MAX);
        word = VM_IMM(v);
      } else if (t.kind == TK_WORD && t.n >= 2 && t.s[0] == 'c' &&
                 parse_u64(t.s + 1, t.n - 1, UINT32_MAX, &ci) == 0) {
        if ((int64_t)ci > p->max_const_ref) {
          p->max_const_ref = (int64_t)ci;
          p->max_const_ref_line = p->line;
        }
        word = VM_CONSTI((int64_t)ci);
      } else if (t.kind == TK_BCFN || t.kind == TK_PKFN) {
        VM_RETURN_IF_ERROR(resolve_func(p, &t, &fi));
        word = VM_FUNCI(fi);
      } else {
        return PERR(p, "bad argument %s (expected %%reg, an integer, cN, @function or $packed)",
                    show_tok(&t, b, sizeof(b)));
      }
      if (n >= p->lim.max_call_args)
        return PERR(p, "more than %u call arguments (limit)", p->lim.max_call_args);
      VM_RETURN_IF_ERROR(need_iw(p, 4 + n + 1));
      p->iw[4 + n++] = word;
      VM_RETURN_IF_ERROR(next_tok(p, &t));
      if (is_punct(&t, ')')) break;
      if (!is_punct(&t, ','))
        return PERR(p, "expected ',' or ')' in the argument list, found %s",
                    show_tok(&t, b, sizeof(b)));
    }
  }
  p->iw[3] = (int64_t)n;
  VM_RETURN_IF_ERROR(expect_eol(p));
  return emit(p, 4 + n);
}

/* One instruction; t is its first token. start is the function's first pc. */
static vm_status_t parse_instr(asm_parser_t *p, const vm_function_t *f, size_t start,
                               const tok_t *first) {
  tok_t t = *first;
  char b[96];
  uint64_t rel = p->ninstrs - start;
  if (t.kind == TK_REG) {
    int64_t dst;
    VM_RETURN_IF_ERROR(parse_reg(p, &t, f, 1, 0, "a call destination", &dst));
    VM_RETURN_IF_ERROR(expect_punct(p, '=', "after the destination register"));
    VM_RETURN_IF_ERROR(expect_word(p, "call", "after '='"));
    return parse_call(p, f, dst);
  }
  if (t.kind != TK_WORD)
    return PERR(p, "expected an instruction, found %s", show_tok(&t, b, sizeof(b)));
  /* Mnemonics come from the opcode list, like everything else about opcodes. */
  int op = 0;
#define VM_OPCODE_MATCH_(name, value, mnem, words) \
  if (is_word(&t, mnem)) op = value;
  VM_OPCODE_LIST(VM_OPCODE_MATCH_)
#undef VM_OPCODE_MATCH_
  int64_t r;
  switch (op) {
    case VM_OP_CALL: return parse_call(p, f, VM_REG_VOID);
    case VM_OP_RET:
      VM_RETURN_IF_ERROR(next_tok(p, &t));
      VM_RETURN_IF_ERROR(parse_reg(p, &t, f, 0, 0, "the ret result", &r));
      VM_RETURN_IF_ERROR(expect_eol(p));
      VM_RETURN_IF_ERROR(need_iw(p, 2));
      p->iw[0] = VM_OP_RET;
      p->iw[1] = r;
      return emit(p, 2);
    case VM_OP_GOTO:
      VM_RETURN_IF_ERROR(next_tok(p, &t));
      VM_RETURN_IF_ERROR(add_label_fix(p, &t, p->nwords + 1, rel));
      VM_RETURN_IF_ERROR(expect_eol(p));
      VM_RETURN_IF_ERROR(need_iw(p, 2));
      p->iw[0] = VM_OP_GOTO;
      p->iw[1] = 0;
      return emit(p, 2);
    case VM_OP_IF:
      VM_RETURN_IF_ERROR(next_tok(p, &t));
      VM_RETURN_IF_ERROR(parse_reg(p, &t, f, 0, 0, "the if condition", &r));
      VM_RETURN_IF_ERROR(expect_word(p, "else", "after the if condition"));
      VM_RETURN_IF_ERROR(next_tok(p, &t));
      VM_RETURN_IF_ERROR(add_label_fix(p, &t, p->nwords + 2, rel));
      VM_RETURN_IF_ERROR(expect_eol(p));
      VM_RETURN_IF_ERROR(need_iw(p, 3));
      p->iw[0] = VM_OP_IF;
      p->iw[1] = r;
      p->iw[2] = 0;
      return emit(p, 3);
    default:
      return PERR(p, "unknown mnemonic %s (expected call, ret, goto or if)",
                  show_tok(&t, b, sizeof(b)));
  }
}

static vm_status_t parse_params(asm_parser_t *p, vm_function_t *f) {
  tok_t t;
  char b[96];
  size_t cap = 0;
  VM_RETURN_IF_ERROR(expect_punct(p, '(', "to open the parameter list"));
  VM_RETURN_IF_ERROR(peek_tok(p, &t));
  if (is_punct(&t, ')')) {
    (void)next_tok(p, &t);
  } else {
    for (;;) {
      if (f->num_args >= p->lim.max_registers)
        return PERR(p, "more than %u parameters (limit)", p->lim.max_registers);
      if (VMI_GROW(f->params, cap, (size_t)f->num_args + 1) != 0) return oom();
      vm_param_t *pa = &f->params[f->num_args++]; /* zeroed: the cleanup frees it */
      pa->ndim = -1;
      VM_RETURN_IF_ERROR(next_tok(p, &t));
      VM_RETURN_IF_ERROR(decode_name(p, &t, "parameter name", &pa->name));
      VM_RETURN_IF_ERROR(next_tok(p, &t));
      if (is_punct(&t, ':')) {
        VM_RETURN_IF_ERROR(next_tok(p, &t));
        VM_RETURN_IF_ERROR(parse_dtype_tok(p, &t, &pa->dtype));
        VM_RETURN_IF_ERROR(expect_punct(p, '[', "after the parameter dtype ([*] = any rank)"));
        pa->has_type = 1;
        VM_RETURN_IF_ERROR(parse_dims(p, 1, &pa->shape, &pa->ndim));
        VM_RETURN_IF_ERROR(next_tok(p, &t));
      }
      if (is_punct(&t, ')')) break;
      if (!is_punct(&t, ','))
        return PERR(p, "expected ',' or ')' in the parameter list, found %s",
                    show_tok(&t, b, sizeof(b)));
    }
  }
  if (!f->params) {
    /* Like the loader: a table of at least one entry, even with no params. */
    f->params = calloc(1, sizeof(vm_param_t));
    if (!f->params) return oom();
  }
  return VM_STATUS_OK;
}

static vm_status_t parse_func(asm_parser_t *p) {
  tok_t t;
  char b[96];
  vm_function_t *f = NULL;
  VM_RETURN_IF_ERROR(take_decl(p, VM_FUNC_BYTECODE, &f));
  VM_RETURN_IF_ERROR(parse_params(p, f));
  VM_RETURN_IF_ERROR(expect_word(p, "regs", "after the parameter list"));
  VM_RETURN_IF_ERROR(next_tok(p, &t));
  VM_RETURN_IF_ERROR(parse_u32_tok(p, &t, p->lim.max_registers, "register count", &f->num_regs));
  if (f->num_regs < f->num_args)
    return PERR(p, "regs %u is less than the %u parameters", f->num_regs, f->num_args);
  VM_RETURN_IF_ERROR(expect_punct(p, '{', "to open the function body"));
  VM_RETURN_IF_ERROR(expect_eol(p));

  uint64_t open_line = p->line;
  size_t start = p->ninstrs;
  sm_free(&p->labels);
  p->nfixes = 0;
  for (;;) {
    if (!next_line(p)) {
      char nb[96];
      return PERR(p, "end of input inside .func @%s (opened on line %" PRIu64 "): missing '}'",
                  show(f->name, strlen(f->name), nb, sizeof(nb)), open_line);
    }
    VM_RETURN_IF_ERROR(next_tok(p, &t));
    if (t.kind == TK_EOL) continue;
    if (is_punct(&t, '}')) break;
    tok_t t2;
    VM_RETURN_IF_ERROR(peek_tok(p, &t2));
    if (t.kind == TK_WORD && is_punct(&t2, ':')) {
      (void)next_tok(p, &t2);
      uint64_t prev;
      if (sm_find(&p->labels, 0, t.s, t.n, &prev))
        return PERR(p, "duplicate label '%s'", show(t.s, t.n, b, sizeof(b)));
      if (sm_put(&p->labels, 0, t.s, t.n, p->ninstrs - start) != 0) return oom();
      VM_RETURN_IF_ERROR(next_tok(p, &t));
      if (t.kind == TK_EOL) continue;
    }
    VM_RETURN_IF_ERROR(parse_instr(p, f, start, &t));
  }
  VM_RETURN_IF_ERROR(expect_eol(p));
  size_t n = p->ninstrs - start;
  char nb[96];
  show(f->name, strlen(f->name), nb, sizeof(nb));
  if (n == 0) return PERR(p, "function @%s has no instructions", nb);
  int64_t last = p->words[p->offsets[p->ninstrs - 1]];
  if (last != VM_OP_RET && last != VM_OP_GOTO)
    return PERR(p, "function @%s must end with ret or goto (control would fall off the end)", nb);
  /* Labels bind to the next instruction; one after the last has none. */
  for (size_t i = 0; i < p->nfixes; i++) {
    const label_fix_t *fx = &p->fixes[i];
    uint64_t target;
    if (!sm_find(&p->labels, 0, fx->name, fx->len, &target))
      return perr_line(fx->line, "undefined label '%s'", show(fx->name, fx->len, b, sizeof(b)));
    if (target >= n)
      return perr_line(fx->line,
                       "label '%s' is at the end of the function, after the last "
                       "instruction",
                       show(fx->name, fx->len, b, sizeof(b)));
    p->words[fx->word] = (int64_t)target - (int64_t)fx->rel;
  }
  sm_free(&p->labels);
  p->nfixes = 0;
  f->start_instr = start;
  f->end_instr = p->ninstrs;
  return VM_STATUS_OK;
}

/* ---------------------------------------------------------------------------
 * Driver
 */

static vm_status_t parse_all(asm_parser_t *p) {
  while (next_line(p)) {
    tok_t t;
    char b[96];
    VM_RETURN_IF_ERROR(next_tok(p, &t));
    if (t.kind == TK_EOL) continue;
    if (is_word(&t, ".version")) {
      VM_RETURN_IF_ERROR(parse_version(p));
    } else if (is_word(&t, ".meta")) {
      VM_RETURN_IF_ERROR(parse_meta(p));
    } else if (is_word(&t, ".kernel")) {
      VM_RETURN_IF_ERROR(parse_kernel(p));
    } else if (is_word(&t, ".const")) {
      VM_RETURN_IF_ERROR(parse_const(p));
    } else if (is_word(&t, ".packed")) {
      vm_function_t *f;
      VM_RETURN_IF_ERROR(take_decl(p, VM_FUNC_PACKED, &f));
      VM_RETURN_IF_ERROR(expect_eol(p));
    } else if (is_word(&t, ".func")) {
      VM_RETURN_IF_ERROR(parse_func(p));
    } else if (is_word(&t, ".orphan")) {
      VM_RETURN_IF_ERROR(parse_orphan(p));
    } else if (is_word(&t, ".table")) {
      continue; /* read by the pre-pass */
    } else if (t.kind == TK_WORD && t.s[0] == '.') {
      return PERR(p, "unknown directive %s", show_tok(&t, b, sizeof(b)));
    } else {
      return PERR(p,
                  "expected a directive (.version, .meta, .kernel, .const, .packed, .func, "
                  ".orphan, .table), found %s",
                  show_tok(&t, b, sizeof(b)));
    }
  }
  if (p->max_const_ref >= 0 && (uint64_t)p->max_const_ref >= p->nconsts)
    return perr_line(p->max_const_ref_line, "constant c%" PRId64 " is not defined (%zu constants)",
                     p->max_const_ref, p->nconsts);
  return VM_STATUS_OK;
}

static void parser_free(asm_parser_t *p) {
  sm_free(&p->names);
  sm_free(&p->labels);
  for (size_t i = 0; i < p->ndecls; i++) free(p->decls[i].name);
  free(p->decls);
  free(p->decl_index);
  vmi_functions_free(p->funcs, p->nfuncs);
  vmi_constants_free(p->consts, p->cdata, p->nconsts);
  free(p->offsets);
  free(p->words);
  vmi_kernels_free(p->kernels, p->nkernels);
  vmi_meta_free(p->meta, p->nmeta);
  free(p->fixes);
  free(p->iw);
  free(p->tmp.p);
}

/* Moves the parsed pieces into a new executable. Tensor data goes into one
 * aligned blob, as the loader and the builder lay it out. */
static vm_status_t build(asm_parser_t *p, vm_executable_t **out) {
  vm_executable_t *e = calloc(1, sizeof(*e));
  if (!e) return oom();
  e->blob_ = vmi_tensor_blob(p->consts, p->nconsts, &e->blob_size_);
  if (!e->blob_) goto nomem;
  size_t at = 0;
  /* Arrays of at least one element, as the loader makes them. */
#define ENSURE(arr, n) \
  if (!(arr) && !((arr) = calloc(1, sizeof(*(arr))))) goto nomem
  ENSURE(p->funcs, 1);
  ENSURE(p->consts, 1);
  ENSURE(p->offsets, 1);
  ENSURE(p->words, 1);
  ENSURE(p->kernels, 1);
  ENSURE(p->meta, 1);
#undef ENSURE
  for (size_t i = 0; i < p->nconsts; i++) {
    vm_constant_t *c = &p->consts[i];
    if (c->kind != VM_CONST_TENSOR) continue;
    char *dst = (char *)e->blob_ + at;
    if (c->u.tensor.nbytes) memcpy(dst, p->cdata[i], (size_t)c->u.tensor.nbytes);
    c->u.tensor.data = dst;
    at += ((size_t)c->u.tensor.nbytes + VM_TENSOR_ALIGN - 1) / VM_TENSOR_ALIGN * VM_TENSOR_ALIGN;
    free(p->cdata[i]);
    p->cdata[i] = NULL;
  }
  e->version_major = p->have_version ? p->major : VM_FORMAT_MAJOR;
  e->version_minor = p->have_version ? p->minor : VM_FORMAT_MINOR;
  e->functions = p->funcs;
  e->num_functions = p->nfuncs;
  p->funcs = NULL;
  p->nfuncs = 0;
  e->constants = p->consts;
  e->num_constants = (uint32_t)p->nconsts;
  p->consts = NULL;
  p->nconsts = 0;
  e->instr_offset = p->offsets;
  e->num_instrs = p->ninstrs;
  p->offsets = NULL;
  e->instr_data = p->words;
  e->num_words = p->nwords;
  p->words = NULL;
  e->kernels = p->kernels;
  e->num_kernels = (uint32_t)p->nkernels;
  p->kernels = NULL;
  p->nkernels = 0;
  e->meta = p->meta;
  e->num_meta = (uint32_t)p->nmeta;
  p->meta = NULL;
  p->nmeta = 0;
  *out = e;
  return VM_STATUS_OK;
nomem:
  vm_executable_free(e);
  return oom();
}

vm_status_t vm_executable_asm(const char *text, size_t len, const vm_limits_t *limits,
                              vm_executable_t **out_exec) {
  *out_exec = NULL;
  asm_parser_t p;
  memset(&p, 0, sizeof(p));
  p.text = text ? text : "";
  p.len = text ? len : 0;
  p.lim = limits ? *limits : vm_limits_default();
  p.max_const_ref = -1;
  vm_executable_t *e = NULL;
  vm_status_t st = prepass(&p);
  if (!st) st = parse_all(&p);
  if (!st) st = build(&p, &e);
  uint64_t last_line = p.line;
  parser_free(&p);
  if (st) return st;
  /* The parser enforces the verifier's rules with line numbers; this is the
   * backstop that makes "every executable handed out is verified" true. */
  st = vm_executable_verify(e, limits);
  if (st) {
    vm_executable_free(e);
    return vm_status_annotate(st, "line %" PRIu64, last_line);
  }
  *out_exec = e;
  return VM_STATUS_OK;
}
