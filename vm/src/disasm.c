/* Disassembler and summary: an executable to its text form (.vmasm) and to a
 * human summary. The text is canonical: the same executable always gives
 * the same bytes, and asm.c reads every construct printed here back into
 * the same fields, so asm(disasm(x)) == x. docs/vmasm.md is the reference
 * for the syntax; any change here needs the matching change in asm.c. */
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
 * Growing output buffer. Allocation failure is sticky and checked once at
 * the end, which keeps the printing code free of error plumbing.
 */
typedef struct sbuf {
  char *p;
  size_t n, cap;
  int oom;
} sbuf_t;

static void sb_reserve(sbuf_t *b, size_t more) {
  if (b->oom) return;
  size_t need;
  if (vm_ckd_add_size(b->n, more, &need) != 0 || vm_ckd_add_size(need, 1, &need) != 0) {
    b->oom = 1;
    return;
  }
  if (need <= b->cap) return;
  size_t nc = b->cap ? b->cap : 256;
  while (nc < need)
    if (vm_ckd_mul_size(nc, 2, &nc) != 0) nc = need;
  char *q = realloc(b->p, nc);
  if (!q) {
    b->oom = 1;
    return;
  }
  b->p = q;
  b->cap = nc;
}

static void sb_putn(sbuf_t *b, const char *s, size_t n) {
  sb_reserve(b, n);
  if (b->oom) return;
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = '\0';
}

static void sb_puts(sbuf_t *b, const char *s) {
  sb_putn(b, s, strlen(s));
}

static void sb_putc(sbuf_t *b, char c) {
  sb_putn(b, &c, 1);
}

static void sb_printf(sbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf_t *b, const char *fmt, ...) {
  char tmp[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
  va_end(ap);
  if (n < 0) {
    b->oom = 1;
    return;
  }
  if ((size_t)n < sizeof(tmp)) {
    sb_putn(b, tmp, (size_t)n);
    return;
  }
  /* Long output (only names are that long): format straight into the buffer. */
  sb_reserve(b, (size_t)n);
  if (b->oom) return;
  va_start(ap, fmt);
  vsnprintf(b->p + b->n, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->n += (size_t)n;
}

/* Quoted string with C-like escapes. Only printable ASCII is written as
 * itself, so the text is 7-bit clean and every byte value round-trips. */
static void sb_quoted(sbuf_t *b, const char *s, size_t n) {
  static const char hex[] = "0123456789abcdef";
  sb_reserve(b, n + 2);
  sb_putc(b, '"');
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    switch (c) {
      case '\n': sb_putn(b, "\\n", 2); break;
      case '\t': sb_putn(b, "\\t", 2); break;
      case '\r': sb_putn(b, "\\r", 2); break;
      case '"': sb_putn(b, "\\\"", 2); break;
      case '\\': sb_putn(b, "\\\\", 2); break;
      default:
        if (c >= 0x20 && c < 0x7f) {
          sb_putc(b, (char)c);
        } else {
          char e[4] = {'\\', 'x', hex[c >> 4], hex[c & 15]};
          sb_putn(b, e, 4);
        }
    }
  }
  sb_putc(b, '"');
}

/* A name: bare when it is an identifier, else quoted. */
static void sb_name(sbuf_t *b, const char *s) {
  size_t n = strlen(s);
  if (vmi_text_is_bare(s, n))
    sb_putn(b, s, n);
  else
    sb_quoted(b, s, n);
}

/* A function reference: '$' for packed and '@' for bytecode functions, so
 * that a packed and a bytecode function of the same name stay distinct. */
static void sb_func_ref(sbuf_t *b, const vm_function_t *f) {
  sb_putc(b, f->kind == VM_FUNC_PACKED ? '$' : '@');
  sb_name(b, f->name);
}

static void sb_reg(sbuf_t *b, int64_t reg) {
  if (reg == VM_REG_VOID)
    sb_puts(b, "%void");
  else if (reg == VM_REG_VM)
    sb_puts(b, "%vm");
  else
    sb_printf(b, "%%%" PRId64, reg);
}

static void sb_dims(sbuf_t *b, const int64_t *dims, uint32_t ndim, int any_marks) {
  sb_putc(b, '[');
  for (uint32_t i = 0; i < ndim; i++) {
    if (i) sb_puts(b, ", ");
    if (any_marks && dims[i] == -1)
      sb_putc(b, '?');
    else
      sb_printf(b, "%" PRId64, dims[i]);
  }
  sb_putc(b, ']');
}

static void sb_dtype(sbuf_t *b, vm_dtype_t dt) {
  char buf[32];
  sb_puts(b, vm_dtype_str(dt, buf, sizeof(buf)));
}

/* The value of a float constant: the shortest %g form that reads back to
 * the same bits; inf/nan by name; any other NaN as its raw bits. */
static void sb_double(sbuf_t *b, double v) {
  uint64_t bits;
  memcpy(&bits, &v, sizeof(bits));
  if (v != v) {
    if (bits == VMI_TEXT_NAN_BITS)
      sb_puts(b, "nan");
    else if (bits == VMI_TEXT_NEG_NAN_BITS)
      sb_puts(b, "-nan");
    else
      sb_printf(b, "bits 0x%016" PRIx64, bits);
    return;
  }
  if (v == 1.0 / 0.0) {
    sb_puts(b, "inf");
    return;
  }
  if (v == -1.0 / 0.0) {
    sb_puts(b, "-inf");
    return;
  }
  char buf[64];
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, sizeof(buf), "%.*g", prec, v);
    double back = strtod(buf, NULL);
    uint64_t bb;
    memcpy(&bb, &back, sizeof(bb));
    if (bb == bits) break; /* %.17g always round-trips, so the loop ends here */
  }
  sb_puts(b, buf);
}

static void sb_hex_bytes(sbuf_t *b, const uint8_t *p, size_t n) {
  static const char hex[] = "0123456789abcdef";
  sb_reserve(b, 2 * n);
  for (size_t i = 0; i < n; i++) {
    char e[2] = {hex[p[i] >> 4], hex[p[i] & 15]};
    sb_putn(b, e, 2);
  }
}

/* ---------------------------------------------------------------------------
 * Sections
 */

static void print_meta(sbuf_t *b, const vm_executable_t *e) {
  if (e->num_meta == 0) return;
  sb_putc(b, '\n');
  for (uint32_t i = 0; i < e->num_meta; i++) {
    sb_puts(b, ".meta ");
    sb_name(b, e->meta[i].key);
    sb_putc(b, ' ');
    sb_quoted(b, e->meta[i].value, strlen(e->meta[i].value));
    sb_putc(b, '\n');
  }
}

static void print_kernels(sbuf_t *b, const vm_executable_t *e) {
  if (e->num_kernels == 0) return;
  sb_putc(b, '\n');
  for (uint32_t i = 0; i < e->num_kernels; i++) {
    const vm_kernel_module_t *k = &e->kernels[i];
    sb_puts(b, ".kernel ");
    sb_name(b, k->name);
    if (k->options[0]) {
      sb_puts(b, " options ");
      sb_quoted(b, k->options, strlen(k->options));
    }
    sb_puts(b, " {\n");
    /* One quoted piece per source line (split after each newline), so the
     * kernel reads like the source it is. */
    const char *s = k->source;
    while (*s) {
      const char *nl = strchr(s, '\n');
      size_t n = nl ? (size_t)(nl - s) + 1 : strlen(s);
      sb_puts(b, "  ");
      sb_quoted(b, s, n);
      sb_putc(b, '\n');
      s += n;
    }
    sb_puts(b, "}\n");
  }
}

static void print_constants(sbuf_t *b, const vm_executable_t *e) {
  if (e->num_constants == 0) return;
  sb_putc(b, '\n');
  for (uint32_t i = 0; i < e->num_constants; i++) {
    const vm_constant_t *c = &e->constants[i];
    sb_printf(b, ".const c%" PRIu32 " ", i);
    switch (c->kind) {
      case VM_CONST_INT: sb_printf(b, "int %" PRId64, c->u.i); break;
      case VM_CONST_FLOAT:
        sb_puts(b, "float ");
        sb_double(b, c->u.f);
        break;
      case VM_CONST_STRING:
        sb_puts(b, "string ");
        sb_quoted(b, c->u.str.data, c->u.str.len);
        break;
      case VM_CONST_DTYPE:
        sb_puts(b, "dtype ");
        sb_dtype(b, c->u.dtype);
        break;
      case VM_CONST_SHAPE:
        sb_puts(b, "shape ");
        sb_dims(b, c->u.shape.dims, c->u.shape.ndim, 0);
        break;
      case VM_CONST_TENSOR:
        sb_puts(b, "tensor ");
        sb_dtype(b, c->u.tensor.dtype);
        sb_dims(b, c->u.tensor.shape, c->u.tensor.ndim, 0);
        break;
    }
    if (c->scope[0]) {
      sb_puts(b, " scope ");
      sb_quoted(b, c->scope, strlen(c->scope));
    }
    if (c->kind == VM_CONST_TENSOR && c->u.tensor.nbytes > 0) {
      const uint8_t *d = c->u.tensor.data;
      size_t n = (size_t)c->u.tensor.nbytes;
      if (n <= VMI_TEXT_HEX_INLINE) {
        sb_puts(b, " data ");
        sb_hex_bytes(b, d, n);
      } else {
        sb_puts(b, " data {\n");
        for (size_t at = 0; at < n; at += VMI_TEXT_HEX_PER_LINE) {
          size_t k = n - at < VMI_TEXT_HEX_PER_LINE ? n - at : VMI_TEXT_HEX_PER_LINE;
          sb_puts(b, "  ");
          sb_hex_bytes(b, d + at, k);
          sb_putc(b, '\n');
        }
        sb_putc(b, '}');
      }
    }
    sb_putc(b, '\n');
  }
}

static void print_params(sbuf_t *b, const vm_function_t *f) {
  sb_putc(b, '(');
  for (uint32_t i = 0; i < f->num_args; i++) {
    const vm_param_t *p = &f->params[i];
    if (i) sb_puts(b, ", ");
    sb_name(b, p->name);
    if (!p->has_type) continue;
    sb_puts(b, ": ");
    sb_dtype(b, p->dtype);
    if (p->ndim < 0)
      sb_puts(b, "[*]");
    else
      sb_dims(b, p->shape, (uint32_t)p->ndim, 1);
  }
  sb_putc(b, ')');
}

static void print_arg(sbuf_t *b, const vm_executable_t *e, int64_t word) {
  int64_t v = vm_arg_value(word);
  switch (vm_arg_kind(word)) {
    case VM_ARG_REG: sb_reg(b, v); break;
    case VM_ARG_IMM: sb_printf(b, "%" PRId64, v); break;
    case VM_ARG_CONST: sb_printf(b, "c%" PRId64, v); break;
    case VM_ARG_FUNC: sb_func_ref(b, &e->functions[v]); break;
  }
}

/* Prints a bytecode function's body. Jump targets get labels named by their
 * pc relative to the function start ("L7"), so they are deterministic and
 * survive the function moving in the code. */
static int print_function(sbuf_t *b, const vm_executable_t *e, const vm_function_t *f) {
  uint64_t n = f->end_instr - f->start_instr;
  uint8_t *target = calloc((size_t)n, 1);
  if (!target) return -1;
  for (uint64_t pc = f->start_instr; pc < f->end_instr; pc++) {
    vm_instr_t in = vm_executable_instr(e, pc);
    /* Verified: start <= pc + offset < end, so the sums below stay in range. */
    if (in.op == VM_OP_GOTO) target[pc - f->start_instr + (uint64_t)in.pc_offset] = 1;
    if (in.op == VM_OP_IF) target[pc - f->start_instr + (uint64_t)in.false_offset] = 1;
  }
  sb_puts(b, ".func ");
  sb_func_ref(b, f);
  print_params(b, f);
  sb_printf(b, " regs %" PRIu32 " {\n", f->num_regs);
  for (uint64_t pc = f->start_instr; pc < f->end_instr; pc++) {
    uint64_t rel = pc - f->start_instr;
    if (target[rel]) sb_printf(b, "L%" PRIu64 ":\n", rel);
    vm_instr_t in = vm_executable_instr(e, pc);
    sb_puts(b, "  ");
    switch (in.op) {
      case VM_OP_CALL:
        if (in.dst != VM_REG_VOID) {
          sb_reg(b, in.dst);
          sb_puts(b, " = ");
        }
        sb_puts(b, "call ");
        sb_func_ref(b, &e->functions[in.func_idx]);
        sb_putc(b, '(');
        for (uint32_t a = 0; a < in.num_args; a++) {
          if (a) sb_puts(b, ", ");
          print_arg(b, e, in.args[a]);
        }
        sb_putc(b, ')');
        break;
      case VM_OP_RET:
        sb_puts(b, "ret ");
        sb_reg(b, in.result);
        break;
      case VM_OP_GOTO: sb_printf(b, "goto L%" PRIu64, rel + (uint64_t)in.pc_offset); break;
      case VM_OP_IF:
        sb_puts(b, "if ");
        sb_reg(b, in.cond);
        sb_printf(b, " else L%" PRIu64, rel + (uint64_t)in.false_offset);
        break;
    }
    sb_putc(b, '\n');
  }
  sb_puts(b, "}\n");
  free(target);
  return 0;
}

/* Instructions [from, to) that belong to no function: the verifier lets
 * them exist (they can never run) without checking their operands, so they
 * are printed as raw words. */
static void print_orphans(sbuf_t *b, const vm_executable_t *e, uint64_t from, uint64_t to) {
  sb_puts(b, ".orphan {\n");
  for (uint64_t pc = from; pc < to; pc++) {
    uint64_t end = pc + 1 < e->num_instrs ? e->instr_offset[pc + 1] : e->num_words;
    sb_puts(b, "  raw");
    for (uint64_t w = e->instr_offset[pc]; w < end; w++)
      sb_printf(b, " %" PRId64, e->instr_data[w]);
    sb_putc(b, '\n');
  }
  sb_puts(b, "}\n");
}

static int cmp_start(const void *pa, const void *pb) {
  const vm_function_t *a = *(const vm_function_t *const *)pa;
  const vm_function_t *b = *(const vm_function_t *const *)pb;
  return a->start_instr < b->start_instr ? -1 : a->start_instr > b->start_instr;
}

/* The function table and the code. The text lists code blocks (.func and
 * .orphan) in pc order; the table order is the order of .packed and .func
 * lines unless a .table line gives it. .table is printed only when the two
 * orders cannot be interleaved, so ordinary executables never show it. */
static int print_functions(sbuf_t *b, const vm_executable_t *e) {
  uint32_t nb = 0;
  for (uint32_t i = 0; i < e->num_functions; i++) nb += e->functions[i].kind == VM_FUNC_BYTECODE;
  const vm_function_t **code = malloc((nb ? nb : 1) * sizeof(*code));
  if (!code) return -1;
  uint32_t k = 0;
  for (uint32_t i = 0; i < e->num_functions; i++)
    if (e->functions[i].kind == VM_FUNC_BYTECODE) code[k++] = &e->functions[i];
  int same_order = 1;
  for (uint32_t i = 1; i < nb; i++) same_order &= code[i - 1]->start_instr < code[i]->start_instr;
  if (!same_order) qsort(code, nb, sizeof(*code), cmp_start);
  if (e->num_functions == 0 && e->num_instrs == 0) {
    free(code);
    return 0;
  }
  sb_putc(b, '\n');

  int first = 1, prev_packed = 0;
  /* A blank line between items, except between consecutive .packed lines. */
#define SEPARATE(is_packed)                                        \
  do {                                                             \
    if (!first && !((is_packed) && prev_packed)) sb_putc(b, '\n'); \
    first = 0;                                                     \
    prev_packed = (is_packed);                                     \
  } while (0)

  if (!same_order) {
    SEPARATE(0);
    sb_puts(b, ".table");
    for (uint32_t i = 0; i < e->num_functions; i++) {
      sb_putc(b, ' ');
      sb_func_ref(b, &e->functions[i]);
    }
    sb_putc(b, '\n');
  }
  uint64_t pc = 0; /* next instruction not yet printed */
  uint32_t next_code = 0;
  for (uint32_t i = 0; i < e->num_functions; i++) {
    const vm_function_t *f = &e->functions[i];
    if (f->kind != VM_FUNC_PACKED && same_order) {
      if (f->start_instr > pc) {
        SEPARATE(0);
        print_orphans(b, e, pc, f->start_instr);
      }
      SEPARATE(0);
      if (print_function(b, e, f) != 0) goto nomem;
      pc = f->end_instr;
    } else if (f->kind == VM_FUNC_PACKED) {
      SEPARATE(1);
      sb_puts(b, ".packed ");
      sb_func_ref(b, f);
      sb_putc(b, '\n');
    }
  }
  if (!same_order) {
    for (; next_code < nb; next_code++) {
      const vm_function_t *f = code[next_code];
      if (f->start_instr > pc) {
        SEPARATE(0);
        print_orphans(b, e, pc, f->start_instr);
      }
      SEPARATE(0);
      if (print_function(b, e, f) != 0) goto nomem;
      pc = f->end_instr;
    }
  }
  if (pc < e->num_instrs) {
    SEPARATE(0);
    print_orphans(b, e, pc, e->num_instrs);
  }
#undef SEPARATE
  free(code);
  return 0;
nomem:
  free(code);
  return -1;
}

/* Both entry points accept any executable pointer, but only a verified one
 * can be printed safely (indices are followed without further checks), so
 * they verify first. Unbounded limits: printing must work for an executable
 * loaded with raised limits too. */
static vm_status_t verify_for_print(const vm_executable_t *exec, const char *what) {
  vm_limits_t lim = vmi_limits_unbounded();
  return vm_status_annotate(vm_executable_verify(exec, &lim), "%s", what);
}

vm_status_t vm_executable_disasm(const vm_executable_t *exec, char **out_text) {
  *out_text = NULL;
  VM_RETURN_IF_ERROR(verify_for_print(exec, "disasm"));
  sbuf_t b = {0};
  sb_puts(&b, "; vmrpc executable, text form (docs/vmasm.md)\n");
  sb_printf(&b, ".version %u.%u\n", exec->version_major, exec->version_minor);
  print_meta(&b, exec);
  print_kernels(&b, exec);
  print_constants(&b, exec);
  if (print_functions(&b, exec) != 0) b.oom = 1;
  if (b.oom) {
    free(b.p);
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "disasm: out of host memory");
  }
  *out_text = b.p;
  return VM_STATUS_OK;
}

/* ---------------------------------------------------------------------------
 * Summary
 */

vm_status_t vm_executable_stats(const vm_executable_t *exec, size_t file_size, char **out_text) {
  *out_text = NULL;
  VM_RETURN_IF_ERROR(verify_for_print(exec, "stats"));
  const vm_executable_t *e = exec;
  sbuf_t b = {0};

  uint32_t npacked = 0, nbc = 0;
  uint64_t in_funcs = 0;
  for (uint32_t i = 0; i < e->num_functions; i++) {
    if (e->functions[i].kind == VM_FUNC_PACKED) {
      npacked++;
    } else {
      nbc++;
      in_funcs += e->functions[i].end_instr - e->functions[i].start_instr;
    }
  }
  uint32_t per_kind[6] = {0};
  uint64_t tensor_bytes = 0;
  for (uint32_t i = 0; i < e->num_constants; i++) {
    const vm_constant_t *c = &e->constants[i];
    if ((unsigned)c->kind < 6) per_kind[c->kind]++;
    if (c->kind == VM_CONST_TENSOR) tensor_bytes += c->u.tensor.nbytes;
  }
  uint64_t source_bytes = 0;
  for (uint32_t i = 0; i < e->num_kernels; i++) source_bytes += strlen(e->kernels[i].source);

  sb_printf(&b, "version:      %u.%u\n", e->version_major, e->version_minor);
  if (file_size) sb_printf(&b, "file size:    %zu bytes\n", file_size);
  sb_printf(&b, "functions:    %" PRIu32 " (%" PRIu32 " packed, %" PRIu32 " bytecode)\n",
            e->num_functions, npacked, nbc);
  sb_printf(&b,
            "constants:    %" PRIu32 " (%" PRIu32 " int, %" PRIu32 " float, %" PRIu32
            " string, %" PRIu32 " dtype, %" PRIu32 " shape, %" PRIu32 " tensor)\n",
            e->num_constants, per_kind[VM_CONST_INT], per_kind[VM_CONST_FLOAT],
            per_kind[VM_CONST_STRING], per_kind[VM_CONST_DTYPE], per_kind[VM_CONST_SHAPE],
            per_kind[VM_CONST_TENSOR]);
  sb_printf(&b, "tensor data:  %" PRIu64 " bytes\n", tensor_bytes);
  sb_printf(&b, "code:         %" PRIu64 " instructions, %" PRIu64 " words", e->num_instrs,
            e->num_words);
  if (in_funcs < e->num_instrs)
    sb_printf(&b, " (%" PRIu64 " instructions outside functions)", e->num_instrs - in_funcs);
  sb_putc(&b, '\n');
  sb_printf(&b, "kernels:      %" PRIu32 " (%" PRIu64 " source bytes)\n", e->num_kernels,
            source_bytes);
  sb_printf(&b, "metadata:     %" PRIu32 " entries\n", e->num_meta);
  if (e->num_functions) {
    sb_puts(&b, "\n  index  kind      args  regs  instrs  name\n");
    for (uint32_t i = 0; i < e->num_functions; i++) {
      const vm_function_t *f = &e->functions[i];
      if (f->kind == VM_FUNC_PACKED)
        sb_printf(&b, "  %5" PRIu32 "  packed       -     -       -  ", i);
      else
        sb_printf(&b, "  %5" PRIu32 "  bytecode %5" PRIu32 " %5" PRIu32 " %7" PRIu64 "  ", i,
                  f->num_args, f->num_regs, f->end_instr - f->start_instr);
      sb_func_ref(&b, f);
      sb_putc(&b, '\n');
    }
  }
  if (b.oom) {
    free(b.p);
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "stats: out of host memory");
  }
  *out_text = b.p;
  return VM_STATUS_OK;
}
