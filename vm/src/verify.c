/* The verifier: the trust boundary between bytes and the interpreter.
 *
 * Everything here reads an executable that may have been built from hostile
 * bytes, so every index is range-checked before it is used and all
 * arithmetic on counts is done so that it cannot overflow. Checks run in an
 * order where each one may rely on the previous ones (names before messages
 * that print them, instruction layout before decoding). Errors are
 * INVALID_ARGUMENT naming the rule and the place; RESOURCE_EXHAUSTED only
 * when the host runs out of memory for the verifier's scratch arrays. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_internal.h"
#include "vm/executable.h"

/* ---------------------------------------------------------------------------
 * Shared helpers
 */

const char *vmi_show_name(const char *s, char *buf, size_t buflen) {
  if (buflen == 0) return "";
  if (!s) {
    snprintf(buf, buflen, "(null)");
    return buf;
  }
  /* Messages end up on terminals and in logs: cap the length and hide
   * control bytes a hostile file may carry. */
  size_t max = buflen > 4 ? buflen - 4 : buflen - 1;
  size_t i = 0;
  for (; s[i] && i < max; i++) {
    unsigned char ch = (unsigned char)s[i];
    buf[i] = (ch < 0x20 || ch == 0x7f) ? '?' : (char)ch;
  }
  if (s[i] && buflen > 4) {
    memcpy(buf + i, "...", 3);
    i += 3;
  }
  buf[i] = '\0';
  return buf;
}

vm_limits_t vmi_limits_unbounded(void) {
  vm_limits_t l = {
      .max_file_bytes = UINT64_MAX,
      .max_sections = UINT32_MAX,
      .max_functions = UINT32_MAX,
      .max_constants = UINT32_MAX,
      .max_instrs = UINT64_MAX,
      .max_words = UINT64_MAX,
      .max_registers = UINT32_MAX,
      .max_call_args = UINT32_MAX,
      .max_ndim = UINT32_MAX,
      .max_string_bytes = UINT32_MAX,
      .max_kernel_source = UINT32_MAX,
      .max_kernels = UINT32_MAX,
      .max_meta = UINT32_MAX,
      .max_tensor_bytes = UINT64_MAX,
  };
  return l;
}

#define NAME_BUF 80

static vm_status_t no_memory(void) {
  return vm_status_make(VM_RESOURCE_EXHAUSTED, "verifier: out of host memory");
}

/* Checks a NUL-terminated string field. what names it in messages ("function
 * 3 name"). Names must be non-empty; other strings may be empty. */
static vm_status_t check_cstr(const char *s, int is_name, uint32_t max_bytes, const char *what) {
  if (!s) return vmi_invalid("%s is missing", what);
  if (is_name && !*s) return vmi_invalid("%s is empty", what);
  /* strnlen so that a huge string costs at most max_bytes + 1 reads. */
  size_t n = strnlen(s, (size_t)max_bytes + 1);
  if (n > max_bytes) return vmi_invalid("%s is longer than the limit of %u bytes", what, max_bytes);
  return VM_STATUS_OK;
}

/* Sort keys for the uniqueness and overlap checks: sorting keeps them
 * O(n log n) where a pairwise scan would be quadratic in hostile counts. */
typedef struct name_key {
  const char *name;
  uint32_t group; /* function kind, else 0 */
  uint32_t idx;
} name_key_t;

static int cmp_name_key(const void *pa, const void *pb) {
  const name_key_t *a = pa, *b = pb;
  if (a->group != b->group) return a->group < b->group ? -1 : 1;
  int c = strcmp(a->name, b->name);
  if (c) return c;
  return a->idx < b->idx ? -1 : a->idx > b->idx;
}

/* Finds two entries with the same (group, name). Returns 1 and the pair, 0
 * if unique, -1 on no memory. */
static int find_duplicate(name_key_t *keys, uint32_t n, uint32_t *out_a, uint32_t *out_b) {
  if (n < 2) return 0;
  qsort(keys, n, sizeof(*keys), cmp_name_key);
  for (uint32_t i = 1; i < n; i++) {
    if (keys[i].group == keys[i - 1].group && strcmp(keys[i].name, keys[i - 1].name) == 0) {
      *out_a = keys[i - 1].idx;
      *out_b = keys[i].idx;
      return 1;
    }
  }
  return 0;
}

/* ---------------------------------------------------------------------------
 * Functions
 */

static vm_status_t check_param(const vm_function_t *f, uint32_t i, const vm_limits_t *lim) {
  const vm_param_t *p = &f->params[i];
  char fn[NAME_BUF], what[160];
  vmi_show_name(f->name, fn, sizeof(fn));
  snprintf(what, sizeof(what), "function '%s' parameter %u name", fn, i);
  VM_RETURN_IF_ERROR(check_cstr(p->name, 1, lim->max_string_bytes, what));
  if (p->has_type > 1)
    return vmi_invalid("function '%s' parameter %u: has_type is %u, not 0 or 1", fn, i,
                       p->has_type);
  if (!p->has_type) return VM_STATUS_OK;
  if (!vm_dtype_valid(p->dtype))
    return vmi_invalid("function '%s' parameter %u: invalid dtype (code %u, bits %u, lanes %u)", fn,
                       i, p->dtype.code, p->dtype.bits, p->dtype.lanes);
  if (p->ndim < -1)
    return vmi_invalid("function '%s' parameter %u: ndim %d is below -1 (any rank)", fn, i,
                       p->ndim);
  if (p->ndim > 0 && (uint32_t)p->ndim > lim->max_ndim)
    return vmi_invalid("function '%s' parameter %u: ndim %d exceeds the limit of %u dims", fn, i,
                       p->ndim, lim->max_ndim);
  if (p->ndim > 0 && !p->shape)
    return vmi_invalid("function '%s' parameter %u: shape of %d dims is missing", fn, i, p->ndim);
  for (int32_t d = 0; d < p->ndim; d++) {
    if (p->shape[d] < -1)
      return vmi_invalid("function '%s' parameter %u: dim %d is %lld (must be >= 0, or -1 = any)",
                         fn, i, d, (long long)p->shape[d]);
  }
  return VM_STATUS_OK;
}

static vm_status_t check_function_entry(const vm_executable_t *e, uint32_t i,
                                        const vm_limits_t *lim) {
  const vm_function_t *f = &e->functions[i];
  char what[48];
  if (f->kind != VM_FUNC_PACKED && f->kind != VM_FUNC_BYTECODE)
    return vmi_invalid("function %u: unknown kind %d", i, (int)f->kind);
  snprintf(what, sizeof(what), "function %u name", i);
  VM_RETURN_IF_ERROR(check_cstr(f->name, 1, lim->max_string_bytes, what));
  if (f->kind == VM_FUNC_PACKED) return VM_STATUS_OK; /* only the name is used */

  char fn[NAME_BUF];
  vmi_show_name(f->name, fn, sizeof(fn));
  if (f->start_instr >= f->end_instr)
    return vmi_invalid("function '%s': empty or reversed instruction range [%llu, %llu)", fn,
                       (unsigned long long)f->start_instr, (unsigned long long)f->end_instr);
  if (f->end_instr > e->num_instrs)
    return vmi_invalid(
        "function '%s': instruction range [%llu, %llu) extends past the %llu "
        "instructions of the code",
        fn, (unsigned long long)f->start_instr, (unsigned long long)f->end_instr,
        (unsigned long long)e->num_instrs);
  if (f->num_regs > lim->max_registers)
    return vmi_invalid("function '%s': register file size %u exceeds the limit of %u", fn,
                       f->num_regs, lim->max_registers);
  if (f->num_args > f->num_regs)
    return vmi_invalid("function '%s': %u parameters > register file size %u", fn, f->num_args,
                       f->num_regs);
  if (f->num_args > 0 && !f->params)
    return vmi_invalid("function '%s': parameter table of %u entries is missing", fn, f->num_args);
  for (uint32_t p = 0; p < f->num_args; p++) VM_RETURN_IF_ERROR(check_param(f, p, lim));
  return VM_STATUS_OK;
}

static int cmp_range(const void *pa, const void *pb) {
  const vm_function_t *a = *(const vm_function_t *const *)pa;
  const vm_function_t *b = *(const vm_function_t *const *)pb;
  if (a->start_instr != b->start_instr) return a->start_instr < b->start_instr ? -1 : 1;
  return 0;
}

/* Checks the function table. On success *out_sorted holds the bytecode
 * functions ordered by start_instr (caller frees) and *out_nsorted their
 * count; the code check walks it to find instructions outside functions. */
static vm_status_t check_functions(const vm_executable_t *e, const vm_limits_t *lim,
                                   const vm_function_t ***out_sorted, uint32_t *out_nsorted) {
  *out_sorted = NULL;
  *out_nsorted = 0;
  if (e->num_functions > lim->max_functions)
    return vmi_invalid("function table: %u functions exceed the limit of %u", e->num_functions,
                       lim->max_functions);
  if (e->num_functions > 0 && !e->functions)
    return vmi_invalid("function table: %u entries but no table", e->num_functions);
  for (uint32_t i = 0; i < e->num_functions; i++)
    VM_RETURN_IF_ERROR(check_function_entry(e, i, lim));

  uint32_t n = e->num_functions;
  name_key_t *keys = malloc((n ? n : 1) * sizeof(*keys));
  const vm_function_t **sorted = malloc((n ? n : 1) * sizeof(*sorted));
  if (!keys || !sorted) {
    free(keys);
    free(sorted);
    return no_memory();
  }
  uint32_t nb = 0;
  for (uint32_t i = 0; i < n; i++) {
    keys[i] = (name_key_t){e->functions[i].name, (uint32_t)e->functions[i].kind, i};
    if (e->functions[i].kind == VM_FUNC_BYTECODE) sorted[nb++] = &e->functions[i];
  }
  uint32_t a, b;
  vm_status_t st = VM_STATUS_OK;
  if (find_duplicate(keys, n, &a, &b)) {
    char fn[NAME_BUF];
    st = vmi_invalid(
        "function table: duplicate %s function name: functions %u and %u are both "
        "named '%s'",
        e->functions[a].kind == VM_FUNC_PACKED ? "packed" : "bytecode", a, b,
        vmi_show_name(e->functions[a].name, fn, sizeof(fn)));
    goto fail;
  }
  if (nb > 1) qsort(sorted, nb, sizeof(*sorted), cmp_range);
  for (uint32_t i = 1; i < nb; i++) {
    if (sorted[i]->start_instr < sorted[i - 1]->end_instr) {
      char fa[NAME_BUF], fb[NAME_BUF];
      st = vmi_invalid(
          "function table: instruction ranges overlap: '%s' [%llu, %llu) and '%s' "
          "[%llu, %llu)",
          vmi_show_name(sorted[i - 1]->name, fa, sizeof(fa)),
          (unsigned long long)sorted[i - 1]->start_instr,
          (unsigned long long)sorted[i - 1]->end_instr,
          vmi_show_name(sorted[i]->name, fb, sizeof(fb)),
          (unsigned long long)sorted[i]->start_instr, (unsigned long long)sorted[i]->end_instr);
      goto fail;
    }
  }
  free(keys);
  *out_sorted = sorted;
  *out_nsorted = nb;
  return VM_STATUS_OK;
fail:
  free(keys);
  free(sorted);
  return st;
}

/* ---------------------------------------------------------------------------
 * Code
 */

/* Error at an instruction: "function 'main' pc 7: <msg>". f NULL for an
 * instruction outside every function. */
static vm_status_t pc_error(const vm_function_t *f, uint64_t pc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static vm_status_t pc_error(const vm_function_t *f, uint64_t pc, const char *fmt, ...) {
  char msg[256], fn[NAME_BUF];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (f)
    return vmi_invalid("function '%s' pc %llu: %s", vmi_show_name(f->name, fn, sizeof(fn)),
                       (unsigned long long)pc, msg);
  return vmi_invalid("pc %llu (outside any function): %s", (unsigned long long)pc, msg);
}

/* instr_offset is strictly increasing from 0 and the last instruction ends
 * at num_words, so instruction pc spans [offset[pc], next) with at least one
 * word. Everything below relies on this. */
static vm_status_t check_layout(const vm_executable_t *e, const vm_limits_t *lim) {
  if (e->num_instrs > lim->max_instrs)
    return vmi_invalid("code: %llu instructions exceed the limit of %llu",
                       (unsigned long long)e->num_instrs, (unsigned long long)lim->max_instrs);
  if (e->num_words > lim->max_words)
    return vmi_invalid("code: %llu words exceed the limit of %llu",
                       (unsigned long long)e->num_words, (unsigned long long)lim->max_words);
  if (e->num_instrs > 0 && !e->instr_offset)
    return vmi_invalid("code: %llu instructions but no instr_offset table",
                       (unsigned long long)e->num_instrs);
  if (e->num_words > 0 && !e->instr_data)
    return vmi_invalid("code: %llu words but no instr_data", (unsigned long long)e->num_words);
  if (e->num_instrs == 0) {
    if (e->num_words != 0)
      return vmi_invalid("code: %llu words but no instructions", (unsigned long long)e->num_words);
    return VM_STATUS_OK;
  }
  if (e->instr_offset[0] != 0)
    return vmi_invalid("code: instr_offset[0] is %llu, not 0 (words before the first instruction)",
                       (unsigned long long)e->instr_offset[0]);
  for (uint64_t pc = 0; pc < e->num_instrs; pc++) {
    uint64_t next = pc + 1 < e->num_instrs ? e->instr_offset[pc + 1] : e->num_words;
    if (e->instr_offset[pc] >= next) {
      if (pc + 1 < e->num_instrs)
        return vmi_invalid(
            "code: instr_offset not strictly increasing: instr_offset[%llu] = %llu, "
            "instr_offset[%llu] = %llu",
            (unsigned long long)pc, (unsigned long long)e->instr_offset[pc],
            (unsigned long long)(pc + 1), (unsigned long long)next);
      return vmi_invalid(
          "code: instruction %llu starts at word %llu, outside the %llu words of "
          "instr_data",
          (unsigned long long)pc, (unsigned long long)e->instr_offset[pc],
          (unsigned long long)e->num_words);
    }
  }
  return VM_STATUS_OK;
}

/* A register operand: a real register below num_regs, or one of the special
 * registers where allowed. what names the operand for messages. */
static vm_status_t check_reg(const vm_function_t *f, uint64_t pc, int64_t reg, int allow_void,
                             int allow_vm, const char *what) {
  if (reg == VM_REG_VOID) {
    if (allow_void) return VM_STATUS_OK;
    return pc_error(f, pc,
                    "%s is the void register (void is only allowed as a call "
                    "destination)",
                    what);
  }
  if (reg == VM_REG_VM) {
    if (allow_vm) return VM_STATUS_OK;
    return pc_error(f, pc, "%s is the vm register (vm is only allowed as a call argument)", what);
  }
  if (reg < 0) return pc_error(f, pc, "%s: register %lld is negative", what, (long long)reg);
  if (reg >= VM_REG_SPECIAL_BEGIN)
    return pc_error(f, pc, "%s: register %lld is not a known special register", what,
                    (long long)reg);
  if ((uint64_t)reg >= f->num_regs)
    return pc_error(f, pc, "%s: register %lld >= register file size %u", what, (long long)reg,
                    f->num_regs);
  return VM_STATUS_OK;
}

/* A relative jump from pc by off must land inside [start, end) of f. */
static vm_status_t check_target(const vm_function_t *f, uint64_t pc, int64_t off,
                                const char *what) {
  /* Compare distances rather than forming pc + off, which could wrap for a
   * hostile offset. start <= pc < end holds here. */
  int ok;
  if (off >= 0)
    ok = (uint64_t)off < f->end_instr - pc; /* pc < end_instr here */
  else
    ok = (uint64_t)0 - (uint64_t)off <= pc - f->start_instr;
  if (!ok)
    return pc_error(f, pc, "%s offset %lld jumps outside the function's instructions [%llu, %llu)",
                    what, (long long)off, (unsigned long long)f->start_instr,
                    (unsigned long long)f->end_instr);
  return VM_STATUS_OK;
}

/* Checks instruction pc: its shape (opcode and word count) always, its
 * operands when f is the function that owns it. */
static vm_status_t check_instr(const vm_executable_t *e, const vm_function_t *f, uint64_t pc,
                               const vm_limits_t *lim) {
  uint64_t at = e->instr_offset[pc];
  uint64_t next = pc + 1 < e->num_instrs ? e->instr_offset[pc + 1] : e->num_words;
  uint64_t span = next - at; /* >= 1 by check_layout */
  const int64_t *w = e->instr_data + at;
  uint64_t want;
  switch (w[0]) {
    case VM_OP_CALL:
      if (span < 4)
        return pc_error(f, pc, "call has %llu words, needs at least 4", (unsigned long long)span);
      if (w[3] < 0 || (uint64_t)w[3] > lim->max_call_args)
        return pc_error(f, pc, "call with %lld arguments (limit %u)", (long long)w[3],
                        lim->max_call_args);
      want = 4 + (uint64_t)w[3];
      break;
    case VM_OP_RET:
    case VM_OP_GOTO: want = 2; break;
    case VM_OP_IF: want = 3; break;
    default: return pc_error(f, pc, "unknown opcode %lld", (long long)w[0]);
  }
  if (span != want)
    return pc_error(f, pc, "%s occupies %llu words, its operands need %llu", vm_opcode_name(w[0]),
                    (unsigned long long)span, (unsigned long long)want);
  if (!f) return VM_STATUS_OK;

  switch (w[0]) {
    case VM_OP_CALL: {
      VM_RETURN_IF_ERROR(check_reg(f, pc, w[1], 1, 0, "call destination"));
      if (w[2] < 0 || (uint64_t)w[2] >= e->num_functions)
        return pc_error(f, pc, "call of function index %lld, the table has %u functions",
                        (long long)w[2], e->num_functions);
      uint64_t nargs = (uint64_t)w[3];
      for (uint64_t i = 0; i < nargs; i++) {
        int64_t word = w[4 + i];
        int64_t v = vm_arg_value(word);
        char what[48];
        switch (vm_arg_kind(word)) {
          case VM_ARG_REG:
            snprintf(what, sizeof(what), "argument %llu", (unsigned long long)i);
            VM_RETURN_IF_ERROR(check_reg(f, pc, v, 0, 1, what));
            break;
          case VM_ARG_IMM: break;
          case VM_ARG_CONST:
            if (v < 0 || (uint64_t)v >= e->num_constants)
              return pc_error(f, pc,
                              "argument %llu: constant index %lld out of range (%u "
                              "constants)",
                              (unsigned long long)i, (long long)v, e->num_constants);
            break;
          case VM_ARG_FUNC:
            if (v < 0 || (uint64_t)v >= e->num_functions)
              return pc_error(f, pc,
                              "argument %llu: function index %lld out of range (%u "
                              "functions)",
                              (unsigned long long)i, (long long)v, e->num_functions);
            break;
          default:
            return pc_error(f, pc, "argument %llu: unknown argument kind %u", (unsigned long long)i,
                            (unsigned)vm_arg_kind(word));
        }
      }
      break;
    }
    case VM_OP_RET: VM_RETURN_IF_ERROR(check_reg(f, pc, w[1], 0, 0, "ret result")); break;
    case VM_OP_GOTO: VM_RETURN_IF_ERROR(check_target(f, pc, w[1], "goto")); break;
    case VM_OP_IF:
      VM_RETURN_IF_ERROR(check_reg(f, pc, w[1], 0, 0, "if condition"));
      VM_RETURN_IF_ERROR(check_target(f, pc, w[2], "if false"));
      break;
  }
  return VM_STATUS_OK;
}

static vm_status_t check_code(const vm_executable_t *e, const vm_limits_t *lim,
                              const vm_function_t **sorted, uint32_t nsorted) {
  /* Bytecode functions, in table order so messages are stable. */
  for (uint32_t i = 0; i < e->num_functions; i++) {
    const vm_function_t *f = &e->functions[i];
    if (f->kind != VM_FUNC_BYTECODE) continue;
    for (uint64_t pc = f->start_instr; pc < f->end_instr; pc++)
      VM_RETURN_IF_ERROR(check_instr(e, f, pc, lim));
    int64_t last = e->instr_data[e->instr_offset[f->end_instr - 1]];
    if (last != VM_OP_RET && last != VM_OP_GOTO)
      return pc_error(f, f->end_instr - 1,
                      "last instruction is %s: control falls off the end of the function "
                      "(must be ret or goto)",
                      vm_opcode_name(last));
  }
  /* Instructions outside every function can never run (jumps stay inside
   * their function) but must still decode, so tools can walk the code. */
  uint64_t pc = 0;
  for (uint32_t i = 0; i <= nsorted; i++) {
    uint64_t stop = i < nsorted ? sorted[i]->start_instr : e->num_instrs;
    for (; pc < stop; pc++) VM_RETURN_IF_ERROR(check_instr(e, NULL, pc, lim));
    if (i < nsorted) pc = sorted[i]->end_instr;
  }
  return VM_STATUS_OK;
}

/* ---------------------------------------------------------------------------
 * Constants, kernels, metadata
 */

static vm_status_t check_dims(const int64_t *dims, uint32_t ndim, const vm_limits_t *lim,
                              uint32_t idx, const char *kind) {
  if (ndim > lim->max_ndim)
    return vmi_invalid("constant %u (%s): %u dims exceed the limit of %u", idx, kind, ndim,
                       lim->max_ndim);
  if (ndim > 0 && !dims) return vmi_invalid("constant %u (%s): dims are missing", idx, kind);
  for (uint32_t d = 0; d < ndim; d++) {
    if (dims[d] < 0)
      return vmi_invalid("constant %u (%s): dim %u is negative (%lld)", idx, kind, d,
                         (long long)dims[d]);
  }
  return VM_STATUS_OK;
}

static vm_status_t check_constant(const vm_executable_t *e, uint32_t i, const vm_limits_t *lim) {
  const vm_constant_t *c = &e->constants[i];
  char what[48];
  snprintf(what, sizeof(what), "constant %u scope", i);
  VM_RETURN_IF_ERROR(check_cstr(c->scope, 0, lim->max_string_bytes, what));
  switch (c->kind) {
    case VM_CONST_INT:
    case VM_CONST_FLOAT: return VM_STATUS_OK;
    case VM_CONST_STRING:
      if (!c->u.str.data) return vmi_invalid("constant %u (string): data is missing", i);
      if (c->u.str.len > lim->max_string_bytes)
        return vmi_invalid("constant %u (string): %u bytes exceed the limit of %u", i, c->u.str.len,
                           lim->max_string_bytes);
      return VM_STATUS_OK;
    case VM_CONST_DTYPE:
      if (!vm_dtype_valid(c->u.dtype))
        return vmi_invalid("constant %u (dtype): invalid dtype (code %u, bits %u, lanes %u)", i,
                           c->u.dtype.code, c->u.dtype.bits, c->u.dtype.lanes);
      return VM_STATUS_OK;
    case VM_CONST_SHAPE: return check_dims(c->u.shape.dims, c->u.shape.ndim, lim, i, "shape");
    case VM_CONST_TENSOR: {
      const vm_dtype_t dt = c->u.tensor.dtype;
      if (!vm_dtype_valid(dt))
        return vmi_invalid("constant %u (tensor): invalid dtype (code %u, bits %u, lanes %u)", i,
                           dt.code, dt.bits, dt.lanes);
      VM_RETURN_IF_ERROR(check_dims(c->u.tensor.shape, c->u.tensor.ndim, lim, i, "tensor"));
      uint64_t want;
      if (vm_tensor_nbytes(dt, c->u.tensor.shape, c->u.tensor.ndim, &want) != 0)
        return vmi_invalid("constant %u (tensor): byte size of the shape overflows", i);
      if (c->u.tensor.nbytes != want)
        return vmi_invalid("constant %u (tensor): nbytes %llu != shape x dtype size %llu", i,
                           (unsigned long long)c->u.tensor.nbytes, (unsigned long long)want);
      if (c->u.tensor.nbytes > lim->max_tensor_bytes)
        return vmi_invalid("constant %u (tensor): %llu bytes exceed the limit of %llu", i,
                           (unsigned long long)c->u.tensor.nbytes,
                           (unsigned long long)lim->max_tensor_bytes);
      if (!c->u.tensor.data) return vmi_invalid("constant %u (tensor): data is missing", i);
      if ((uintptr_t)c->u.tensor.data % VM_TENSOR_ALIGN != 0)
        return vmi_invalid("constant %u (tensor): data at %p is not aligned to %d bytes", i,
                           c->u.tensor.data, VM_TENSOR_ALIGN);
      return VM_STATUS_OK;
    }
  }
  return vmi_invalid("constant %u: unknown kind %d", i, (int)c->kind);
}

static vm_status_t check_constants(const vm_executable_t *e, const vm_limits_t *lim) {
  if (e->num_constants > lim->max_constants)
    return vmi_invalid("constant pool: %u constants exceed the limit of %u", e->num_constants,
                       lim->max_constants);
  if (e->num_constants > 0 && !e->constants)
    return vmi_invalid("constant pool: %u entries but no table", e->num_constants);
  for (uint32_t i = 0; i < e->num_constants; i++) VM_RETURN_IF_ERROR(check_constant(e, i, lim));
  return VM_STATUS_OK;
}

static vm_status_t check_kernels(const vm_executable_t *e, const vm_limits_t *lim) {
  if (e->num_kernels > lim->max_kernels)
    return vmi_invalid("kernels: %u modules exceed the limit of %u", e->num_kernels,
                       lim->max_kernels);
  if (e->num_kernels > 0 && !e->kernels)
    return vmi_invalid("kernels: %u entries but no table", e->num_kernels);
  char what[48];
  for (uint32_t i = 0; i < e->num_kernels; i++) {
    const vm_kernel_module_t *k = &e->kernels[i];
    snprintf(what, sizeof(what), "kernel %u name", i);
    VM_RETURN_IF_ERROR(check_cstr(k->name, 1, lim->max_string_bytes, what));
    snprintf(what, sizeof(what), "kernel %u source", i);
    VM_RETURN_IF_ERROR(check_cstr(k->source, 0, lim->max_kernel_source, what));
    snprintf(what, sizeof(what), "kernel %u options", i);
    VM_RETURN_IF_ERROR(check_cstr(k->options, 0, lim->max_string_bytes, what));
  }
  name_key_t *keys = malloc((e->num_kernels ? e->num_kernels : 1) * sizeof(*keys));
  if (!keys) return no_memory();
  for (uint32_t i = 0; i < e->num_kernels; i++) keys[i] = (name_key_t){e->kernels[i].name, 0, i};
  uint32_t a, b;
  vm_status_t st = VM_STATUS_OK;
  if (find_duplicate(keys, e->num_kernels, &a, &b)) {
    char kn[NAME_BUF];
    st = vmi_invalid("kernels: duplicate kernel name: modules %u and %u are both named '%s'", a, b,
                     vmi_show_name(e->kernels[a].name, kn, sizeof(kn)));
  }
  free(keys);
  return st;
}

static vm_status_t check_meta(const vm_executable_t *e, const vm_limits_t *lim) {
  if (e->num_meta > lim->max_meta)
    return vmi_invalid("metadata: %u entries exceed the limit of %u", e->num_meta, lim->max_meta);
  if (e->num_meta > 0 && !e->meta)
    return vmi_invalid("metadata: %u entries but no table", e->num_meta);
  char what[48];
  for (uint32_t i = 0; i < e->num_meta; i++) {
    snprintf(what, sizeof(what), "metadata entry %u key", i);
    VM_RETURN_IF_ERROR(check_cstr(e->meta[i].key, 1, lim->max_string_bytes, what));
    snprintf(what, sizeof(what), "metadata entry %u value", i);
    VM_RETURN_IF_ERROR(check_cstr(e->meta[i].value, 0, lim->max_string_bytes, what));
  }
  name_key_t *keys = malloc((e->num_meta ? e->num_meta : 1) * sizeof(*keys));
  if (!keys) return no_memory();
  for (uint32_t i = 0; i < e->num_meta; i++) keys[i] = (name_key_t){e->meta[i].key, 0, i};
  uint32_t a, b;
  vm_status_t st = VM_STATUS_OK;
  if (find_duplicate(keys, e->num_meta, &a, &b)) {
    char kn[NAME_BUF];
    st = vmi_invalid("metadata: duplicate key: entries %u and %u are both '%s'", a, b,
                     vmi_show_name(e->meta[a].key, kn, sizeof(kn)));
  }
  free(keys);
  return st;
}

/* ---------------------------------------------------------------------------
 * Entry point
 */

vm_status_t vm_executable_verify(const vm_executable_t *exec, const vm_limits_t *limits) {
  if (!exec) return vmi_invalid("verify: no executable");
  vm_limits_t lim = limits ? *limits : vm_limits_default();
  const vm_function_t **sorted = NULL;
  uint32_t nsorted = 0;
  /* Layout first: function ranges are checked against num_instrs and the
   * code walk decodes through instr_offset. Constants before code so that a
   * constant index error is reported against a sane pool. */
  VM_RETURN_IF_ERROR(check_layout(exec, &lim));
  VM_RETURN_IF_ERROR(check_constants(exec, &lim));
  VM_RETURN_IF_ERROR(check_kernels(exec, &lim));
  VM_RETURN_IF_ERROR(check_meta(exec, &lim));
  VM_RETURN_IF_ERROR(check_functions(exec, &lim, &sorted, &nsorted));
  vm_status_t st = check_code(exec, &lim, sorted, nsorted);
  free(sorted);
  return st;
}
