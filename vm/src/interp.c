/* The interpreter: one dispatch loop for both execution modes.
 *
 * The loop is written once (interp_loop.h). Its operand macros (VMI_FETCH,
 * CALL_NARGS, LOAD_ARG, ...) take a compile-time constant `compiled`: in
 * bytecode mode they decode instruction words in place, in compiled mode
 * they read the pre-decoded record of the same pc. interp_loop.h is
 * included twice, giving run_bytecode() and run_compiled(), each with the
 * other mode's branches folded away.
 *
 * Calls between bytecode functions do not recurse in C: a Call pushes a
 * frame whose registers come from a chunked register stack owned by the
 * machine, and Ret pops it, so VM recursion depth costs heap, not C stack.
 * C recursion only happens when a builtin calls back into the machine.
 *
 * Everything vm_executable_verify() checked (register numbers, jump
 * targets, indices, VM/VOID placement) is only asserted here.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "exec_internal.h"
#include "vmrpc/checked.h"
#include "machine_internal.h"

/* Arguments of one Call up to this count live in a stack array of the loop;
 * more go on the register stack (the verifier allows up to max_call_args). */
#define VMI_SMALL_ARGS 16
/* Values per register stack chunk (1 MiB); a function with a larger register
 * file gets a chunk of its own size. */
#define VMI_CHUNK_VALUES ((size_t)65536)
/* The deadline clock is read every this many backward jumps. */
#define VMI_DEADLINE_EVERY 1024u

_Static_assert(VMI_OP_CALL_PACKED == (int)VM_FUNC_PACKED, "CALL op decodes from the func kind");
_Static_assert(VMI_OP_CALL_BYTECODE == (int)VM_FUNC_BYTECODE, "CALL op decodes from the func kind");
_Static_assert(sizeof(vmi_crec_t) == 32, "compiled records are meant to be 32 bytes");
_Static_assert(VM_VAL_NONE == 0, "registers are cleared with memset");

/* ---------------------------------------------------------------------------
 * Register stack
 */

static uint64_t chunk_bytes(size_t cap) {
  return sizeof(vmi_regchunk_t) + (uint64_t)cap * sizeof(vm_value_t);
}

/* A chunk of cap values, charged to the machine's host budget; NULL with
 * m->regs_error set when it does not fit. */
static vmi_regchunk_t *chunk_new(vm_machine_t *m, size_t cap) {
  size_t bytes;
  if (vm_ckd_flex_size(sizeof(vmi_regchunk_t), sizeof(vm_value_t), cap, &bytes) != 0) return NULL;
  vm_status_t st = vm_budget_charge(m->budget, bytes, "the register stack");
  if (st) {
    vm_status_free(m->regs_error);
    m->regs_error = st;
    return NULL;
  }
  vmi_regchunk_t *c = malloc(bytes);
  if (!c) {
    vm_budget_release(m->budget, bytes);
    return NULL;
  }
  c->prev = c->next = NULL;
  c->cap = cap;
  c->used = 0;
  return c;
}

static void chunks_free_from(vm_machine_t *m, vmi_regchunk_t *c) {
  while (c) {
    vmi_regchunk_t *n = c->next;
    vm_budget_release(m->budget, chunk_bytes(c->cap));
    free(c);
    c = n;
  }
}

static __attribute__((noinline)) vm_value_t *regs_push_slow(vm_machine_t *m, size_t n,
                                                            vmi_regmark_t *mark) {
  size_t want = n > VMI_CHUNK_VALUES ? n : VMI_CHUNK_VALUES;
  vmi_regchunk_t *c = m->chunk;
  if (!c) {
    c = chunk_new(m, want);
    if (!c) return NULL;
    m->chunk = c;
    mark->chunk = c;
    mark->used = 0;
    c->used = n;
    return c->vals;
  }
  vmi_regchunk_t *next = c->next;
  if (!next || next->cap < n) {
    /* Chunks past the current one are unused: replace them by one big
     * enough. */
    chunks_free_from(m, next); /* first, so that their bytes count no more */
    c->next = NULL;
    vmi_regchunk_t *fresh = chunk_new(m, want);
    if (!fresh) return NULL;
    fresh->prev = c;
    c->next = fresh;
    next = fresh;
  }
  mark->chunk = c;
  mark->used = c->used;
  m->chunk = next;
  next->used = n;
  return next->vals;
}

/* n uninitialised values; NULL when host memory runs out. */
static inline vm_value_t *regs_push(vm_machine_t *m, size_t n, vmi_regmark_t *mark) {
  vmi_regchunk_t *c = m->chunk;
  if (VMI_LIKELY(c && c->cap - c->used >= n)) {
    mark->chunk = c;
    mark->used = c->used;
    vm_value_t *r = c->vals + c->used;
    c->used += n;
    return r;
  }
  return regs_push_slow(m, n, mark);
}

static inline void regs_pop(vm_machine_t *m, const vmi_regmark_t *mark) {
  m->chunk = mark->chunk;
  mark->chunk->used = mark->used;
}

static inline void release_regs(vm_value_t *regs, uint32_t n) {
  for (uint32_t i = 0; i < n; i++)
    if (VM_VAL_IS_OBJECT(regs[i].kind)) vm_value_release(&regs[i]);
}

void vmi_stacks_free(vm_machine_t *m) {
  vmi_regchunk_t *c = m->chunk;
  while (c && c->prev) c = c->prev;
  chunks_free_from(m, c);
  m->chunk = NULL;
  vm_budget_release(m->budget, (uint64_t)m->frames_cap * sizeof(vmi_frame_t));
  vm_status_free(m->regs_error);
  m->regs_error = NULL;
  free(m->frames);
  m->frames = NULL;
  m->frames_cap = 0;
  m->depth = 0;
}

/* ---------------------------------------------------------------------------
 * Checks and messages (cold)
 */

static vm_status_t deadline_check(vm_machine_t *m);

/* The cancel flag on every call; the deadline clock at every entry into the
 * machine and on every VMI_DEADLINE_EVERY-th call inside it (a clock read
 * per call would cost more than the call). */
static inline vm_status_t check_interrupt(vm_machine_t *m, int entry) {
  if (VMI_UNLIKELY(atomic_load_explicit(&m->cancel_requested, memory_order_relaxed)))
    return vm_status_make(VM_CANCELLED, "invocation cancelled");
  if (m->active_deadline_ns && (entry || ++m->calls_since_clock % VMI_DEADLINE_EVERY == 0))
    return deadline_check(m);
  return VM_STATUS_OK;
}

/* Pushes a frame for f with cleared registers. entry marks the bottom frame
 * of one run of the loop. The caller fills the arguments. */
static vm_status_t frame_push(vm_machine_t *m, const vmi_func_t *f, uint32_t ret_dst,
                              uint8_t instrumented, uint8_t entry, vm_value_t **out_regs) {
  if (VMI_UNLIKELY(m->depth >= m->max_call_depth))
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "call depth limit of %u exceeded",
                          m->max_call_depth);
  VM_RETURN_IF_ERROR(check_interrupt(m, entry));
  if (VMI_UNLIKELY(m->depth == m->frames_cap)) {
    uint32_t ncap = m->frames_cap ? m->frames_cap * 2 : 16;
    if (ncap > m->max_call_depth || ncap < m->frames_cap) ncap = m->max_call_depth;
    uint64_t grow = (uint64_t)(ncap - m->frames_cap) * sizeof(*m->frames);
    VM_RETURN_IF_ERROR(vm_budget_charge(m->budget, grow, "call frames"));
    vmi_frame_t *nf = realloc(m->frames, (size_t)ncap * sizeof(*nf));
    if (!nf) {
      vm_budget_release(m->budget, grow);
      return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory for call frames");
    }
    m->frames = nf;
    m->frames_cap = ncap;
  }
  vmi_frame_t *fr = &m->frames[m->depth];
  vm_value_t *regs = regs_push(m, f->num_regs, &fr->mark);
  if (VMI_UNLIKELY(!regs)) {
    vm_status_t why = m->regs_error;
    m->regs_error = NULL;
    if (why)
      return vm_status_annotate(why, "%u registers of '%s' at call depth %u", f->num_regs,
                                f->def->name, m->depth);
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory for %u registers of '%s'",
                          f->num_regs, f->def->name);
  }
  memset(regs, 0, (size_t)f->num_regs * sizeof(*regs));
  fr->regs = regs;
  fr->func = f;
  fr->pc = f->start;
  fr->ret_dst = ret_dst;
  fr->instrumented = instrumented;
  fr->entry = entry;
  m->depth++;
  *out_regs = regs;
  return VM_STATUS_OK;
}

/* Levels of "in function ..." context kept in one message. An error deep in
 * a recursion through builtins passes every level on its way out; past
 * this many the outer ones collapse into one "...". */
#define VMI_MAX_ANNOTATIONS 8

/* Adds "in function 'f' at pc N (what): " to a failing status. */
static __attribute__((noinline, cold)) vm_status_t annotate_at(vm_machine_t *m, vm_status_t st,
                                                               uint64_t pc) {
  const char *msg = vm_status_message(st);
  if (strncmp(msg, "...: ", 5) == 0) return st;
  int levels = 0;
  for (const char *p = msg; (p = strstr(p, "in function '")) != NULL; p++)
    if (++levels >= VMI_MAX_ANNOTATIONS) return vm_status_annotate(st, "...");
  const vm_executable_t *e = m->exec;
  const vmi_func_t *f = m->frames[m->depth - 1].func;
  char fname[96], cname[96];
  vmi_show_name(f->def->name, fname, sizeof(fname));
  vm_instr_t in = vm_executable_instr(e, pc);
  if (in.op == VM_OP_CALL) {
    vmi_show_name(e->functions[in.func_idx].name, cname, sizeof(cname));
    return vm_status_annotate(st, "in function '%s' at pc %llu (call %s)", fname,
                              (unsigned long long)pc, cname);
  }
  return vm_status_annotate(st, "in function '%s' at pc %llu (%s)", fname, (unsigned long long)pc,
                            vm_opcode_name(in.op));
}

static __attribute__((noinline, cold)) vm_status_t if_cond_error(const vm_value_t *c) {
  if (c->kind == VM_VAL_TENSOR)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "if condition is a tensor: read it on the host with "
                          "vm.builtin.read_if_cond first");
  return vm_status_make(VM_INVALID_ARGUMENT, "if condition is a %s, expected an int or bool",
                        vm_value_kind_name(c->kind));
}

static __attribute__((noinline, cold)) vm_status_t arity_error(const vmi_func_t *f, uint32_t n) {
  char fname[96];
  return vm_status_make(VM_INVALID_ARGUMENT, "function '%s' takes %u argument%s, %u given",
                        vmi_show_name(f->def->name, fname, sizeof(fname)), f->num_args,
                        f->num_args == 1 ? "" : "s", n);
}

static __attribute__((noinline, cold)) vm_status_t deadline_check(vm_machine_t *m) {
  if (m->active_deadline_ns && vm_now_ns() >= m->active_deadline_ns)
    return vm_status_make(VM_DEADLINE_EXCEEDED, "invocation deadline exceeded");
  return VM_STATUS_OK;
}

/* ---------------------------------------------------------------------------
 * Operands
 */

/* Values move field by field (a 4-byte kind, an 8-byte payload) in the hot
 * path, never as one 16-byte block: builtins write *out that way, and a
 * 16-byte load of bytes written by two narrower stores cannot be forwarded
 * from the store buffer, which stalls for about as long as a whole call.
 * Copying the 8-byte union copies every member. */
static inline void value_copy(vm_value_t *d, const vm_value_t *s) {
  d->kind = s->kind;
  d->u.i = s->u.i;
}

/* Bytecode mode: stores the borrowed value of an argument word in *d. */
static inline void decode_arg(vm_machine_t *m, const vm_value_t *regs, int64_t w, vm_value_t *d) {
  int64_t v = vm_arg_value(w);
  switch (vm_arg_kind(w)) {
    case VM_ARG_REG:
      if (VMI_LIKELY(v < VM_REG_SPECIAL_BEGIN)) {
        value_copy(d, &regs[v]);
      } else {
        assert(v == VM_REG_VM);
        value_copy(d, &m->vm_val);
      }
      return;
    case VM_ARG_IMM:
      d->kind = VM_VAL_INT;
      d->u.i = v;
      return;
    case VM_ARG_CONST: value_copy(d, &m->consts[v]); return;
    default:
      assert(vm_arg_kind(w) == VM_ARG_FUNC);
      d->kind = VM_VAL_FUNC;
      d->u.i = v;
      return;
  }
}

/* Compiled mode: the borrowed value of a pre-resolved argument. */
static inline const vm_value_t *carg_ptr(vmi_carg_t a, const vm_value_t *regs) {
  return (a & 1) ? &regs[a >> 1] : (const vm_value_t *)a;
}

/* dst takes ownership of *res; the old value goes after the store, since it
 * may have been an argument of the call that produced res. */
static inline void store_result(vm_value_t *regs, uint32_t dst, const vm_value_t *res) {
  const uint32_t kind = res->kind;
  if (dst == VMI_REG_NONE) {
    if (VM_VAL_IS_OBJECT(kind)) vm_object_release(res->u.obj);
    return;
  }
  vm_value_t *d = &regs[dst];
  const uint32_t old_kind = d->kind;
  vm_object_t *const old_obj = d->u.obj;
  d->kind = kind;
  d->u.i = res->u.i;
  if (VM_VAL_IS_OBJECT(old_kind)) vm_object_release(old_obj);
}

/* ---------------------------------------------------------------------------
 * Instrumentation (slow path: only when a callback is installed)
 */

/* Runs the callback for the Call at pc of the frame whose registers are
 * regs, assembling its arguments from the bytecode (same in both modes). */
static __attribute__((noinline)) vm_instrument_action_t instrument_at(vm_machine_t *m,
                                                                      vm_value_t *regs, uint64_t pc,
                                                                      vm_instrument_phase_t ph) {
  vm_instrument_fn fn = m->instrument_fn;
  if (!fn) return VM_INSTRUMENT_CONTINUE;
  vm_instr_t in = vm_executable_instr(m->exec, pc);
  vm_value_t small[VMI_SMALL_ARGS];
  vm_value_t *args = small;
  vmi_regmark_t mark;
  if (in.num_args > VMI_SMALL_ARGS) {
    args = regs_push(m, in.num_args, &mark);
    /* Without memory the callback sees no arguments rather than failing
     * the call it observes. */
    if (!args) {
      return fn(m, ph, (uint32_t)in.func_idx, m->exec->functions[in.func_idx].name, NULL, 0,
                m->instrument_user);
    }
  }
  for (uint32_t i = 0; i < in.num_args; i++) decode_arg(m, regs, in.args[i], &args[i]);
  vm_instrument_action_t act =
      fn(m, ph, (uint32_t)in.func_idx, m->exec->functions[in.func_idx].name, args, in.num_args,
         m->instrument_user);
  if (in.num_args > VMI_SMALL_ARGS) regs_pop(m, &mark);
  return act;
}

static __attribute__((noinline)) vm_status_t call_packed_instrumented(vm_machine_t *m,
                                                                      const vmi_func_t *callee,
                                                                      const vm_value_t *args,
                                                                      uint32_t n, vm_value_t *res) {
  vm_instrument_fn fn = m->instrument_fn;
  if (fn(m, VM_INSTRUMENT_BEFORE, callee->idx, callee->def->name, args, n, m->instrument_user) ==
      VM_INSTRUMENT_SKIP)
    return VM_STATUS_OK;
  VM_RETURN_IF_ERROR(callee->fn(m, args, n, res, callee->user));
  fn = m->instrument_fn; /* the callback may have been changed meanwhile */
  if (fn) fn(m, VM_INSTRUMENT_AFTER, callee->idx, callee->def->name, args, n, m->instrument_user);
  return VM_STATUS_OK;
}

/* ---------------------------------------------------------------------------
 * The dispatch loop
 */

/* Dispatch in the style of Lua's lvm.c/ljumptab.h: with GCC or clang each
 * handler ends by fetching and jumping to the next one through a table of
 * label addresses (one indirect jump per handler, each predicted on its
 * own); elsewhere it is a plain switch in a loop. */
#if defined(__GNUC__) && !defined(VMI_NO_COMPUTED_GOTO)
#define VMI_JUMPTABLE 1
#define vmdispatch(o) goto *disptab[o];
#define vmcase(l) L_##l:
#define vmbreak \
  VMI_FETCH();  \
  goto *disptab[op]
#else
#define VMI_JUMPTABLE 0
#define vmdispatch(o) switch (o)
#define vmcase(l) case l:
#define vmbreak continue
#endif

/* Operand access: decode in place (bytecode) or read the record (compiled). */
#define VMI_FETCH()                                 \
  do {                                              \
    if (compiled) {                                 \
      rp = &recs[pc];                               \
      op = rp->op;                                  \
    } else {                                        \
      ip = code + offs[pc];                         \
      op = (uint32_t)ip[0];                         \
      if (op == VM_OP_CALL) op = funcs[ip[2]].kind; \
    }                                               \
  } while (0)
#define CALL_NARGS() (compiled ? rp->nargs : (uint32_t)ip[3])
#define CALL_CALLEE() (compiled ? rp->u.callee : &funcs[ip[2]])
#define CALL_DST() (compiled ? rp->a : (ip[1] == VM_REG_VOID ? VMI_REG_NONE : (uint32_t)ip[1]))
#define LOAD_ARG(d, i)                              \
  do {                                              \
    if (compiled)                                   \
      value_copy((d), carg_ptr(rp->args[i], regs)); \
    else                                            \
      decode_arg(m, regs, ip[4 + (i)], (d));        \
  } while (0)
#define RET_REG() (compiled ? rp->a : (uint32_t)ip[1])
#define GOTO_BACKWARD() (compiled ? rp->backward : ip[1] <= 0)
#define GOTO_TARGET() (compiled ? rp->u.target : pc + (uint64_t)ip[1])
#define IF_COND() (compiled ? rp->a : (uint32_t)ip[1])
#define IF_BACKWARD() (compiled ? rp->backward : ip[2] <= 0)
#define IF_TARGET() (compiled ? rp->u.target : pc + (uint64_t)ip[2])

/* A backward jump is a cancellation point; the deadline clock is read on
 * every VMI_DEADLINE_EVERY-th one. */
#define BACKJUMP_CHECK()                                                                  \
  do {                                                                                    \
    if (VMI_UNLIKELY(atomic_load_explicit(&m->cancel_requested, memory_order_relaxed))) { \
      st = vm_status_make(VM_CANCELLED, "invocation cancelled");                          \
      goto op_fail;                                                                       \
    }                                                                                     \
    if (VMI_UNLIKELY(++backjumps % VMI_DEADLINE_EVERY == 0) &&                            \
        (st = deadline_check(m)) != VM_STATUS_OK)                                         \
      goto op_fail;                                                                       \
  } while (0)

/* The loop itself is written once, in interp_loop.h, and instantiated here
 * per mode: `compiled` is a constant in each copy, so the operand macros
 * fold to plain decoding or plain record reads. */
#define VMI_LOOP_NAME run_bytecode
#define VMI_LOOP_COMPILED 0
#include "interp_loop.h"
#undef VMI_LOOP_NAME
#undef VMI_LOOP_COMPILED

#define VMI_LOOP_NAME run_compiled
#define VMI_LOOP_COMPILED 1
#include "interp_loop.h"
#undef VMI_LOOP_NAME
#undef VMI_LOOP_COMPILED

/* ---------------------------------------------------------------------------
 * Entry
 */

vm_status_t vmi_call_function(vm_machine_t *m, uint32_t func_idx, const vm_value_t *args,
                              uint32_t nargs, vm_value_t *out) {
  *out = vm_value_none();
  if (func_idx >= m->exec->num_functions)
    return vm_status_make(VM_NOT_FOUND, "function index %u out of range (%u functions)", func_idx,
                          m->exec->num_functions);
  if (nargs && !args)
    return vm_status_make(VM_INVALID_ARGUMENT, "%u arguments but no array", nargs);
  const vmi_func_t *f = &m->funcs[func_idx];
  if (m->nesting == 0) {
    /* A new top-level invocation takes the deadline set for invocations
     * from now on. The cancel token is the caller's to reset, never ours:
     * a cancel that came before this point must still stop the run. */
    m->active_deadline_ns = m->deadline_ns;
  }
  vm_status_t st;
  m->nesting++;
  if (f->kind == VM_FUNC_PACKED) {
    st = check_interrupt(m, 1);
    if (!st) st = f->fn(m, args, nargs, out, f->user);
  } else if (nargs != f->num_args) {
    st = arity_error(f, nargs);
  } else {
    vm_value_t *regs;
    st = frame_push(m, f, VMI_REG_NONE, 0, 1, &regs);
    if (!st) {
      for (uint32_t i = 0; i < nargs; i++) {
        regs[i] = args[i];
        vm_value_retain(&regs[i]);
      }
      st = m->mode == VM_EXEC_COMPILED ? run_compiled(m, out) : run_bytecode(m, out);
    }
  }
  m->nesting--;
  if (m->nesting == 0 && m->chunk && m->chunk->next) {
    /* The invocation is over: register chunks beyond the first (a deep
     * recursion's) go back, with their bytes in the host budget. */
    vmi_regchunk_t *base = m->chunk;
    while (base->prev) base = base->prev;
    chunks_free_from(m, base->next);
    base->next = NULL;
    m->chunk = base;
  }
  if (st) vm_value_release(out);
  return st;
}

/* ---------------------------------------------------------------------------
 * Compiled mode: translation
 */

vm_status_t vmi_compile(vm_machine_t *m) {
  const vm_executable_t *e = m->exec;
  size_t total_args = 0, total_imms = 0;
  for (uint32_t fi = 0; fi < e->num_functions; fi++) {
    const vm_function_t *f = &e->functions[fi];
    if (f->kind != VM_FUNC_BYTECODE) continue;
    for (uint64_t pc = f->start_instr; pc < f->end_instr; pc++) {
      vm_instr_t in = vm_executable_instr(e, pc);
      if (in.op != VM_OP_CALL) continue;
      total_args += in.num_args;
      for (uint32_t i = 0; i < in.num_args; i++)
        if (vm_arg_kind(in.args[i]) == VM_ARG_IMM) total_imms++;
    }
  }
  size_t rec_bytes, arg_bytes, imm_bytes, bytes;
  if (vm_ckd_mul_size((size_t)e->num_instrs, sizeof(vmi_crec_t), &rec_bytes) != 0 ||
      (uint64_t)(size_t)e->num_instrs != e->num_instrs ||
      vm_ckd_mul_size(total_args ? total_args : 1, sizeof(vmi_carg_t), &arg_bytes) != 0 ||
      vm_ckd_mul_size(total_imms ? total_imms : 1, sizeof(vm_value_t), &imm_bytes) != 0 ||
      vm_ckd_add_size(rec_bytes, arg_bytes, &bytes) != 0 ||
      vm_ckd_add_size(bytes, imm_bytes, &bytes) != 0)
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "too many instructions to compile");
  VM_RETURN_IF_ERROR(vm_budget_charge(m->budget, bytes, "compiled records"));
  m->compiled_bytes = bytes;
  m->crecs = vmi_aligned_alloc(rec_bytes);
  m->cargs = malloc(arg_bytes);
  m->cimms = malloc(imm_bytes);
  if (!m->crecs || !m->cargs || !m->cimms)
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory compiling %llu instructions",
                          (unsigned long long)e->num_instrs);
  size_t ai = 0, ii = 0;
  for (uint32_t fi = 0; fi < e->num_functions; fi++) {
    const vm_function_t *f = &e->functions[fi];
    if (f->kind != VM_FUNC_BYTECODE) continue;
    for (uint64_t pc = f->start_instr; pc < f->end_instr; pc++) {
      vm_instr_t in = vm_executable_instr(e, pc);
      vmi_crec_t *r = &m->crecs[pc];
      switch (in.op) {
        case VM_OP_CALL: {
          assert(in.func_idx >= 0 && (uint64_t)in.func_idx < e->num_functions);
          assert(in.dst == VM_REG_VOID || (in.dst >= 0 && in.dst < (int64_t)f->num_regs));
          const vmi_func_t *callee = &m->funcs[in.func_idx];
          r->op = (uint8_t)callee->kind;
          r->nargs = in.num_args;
          r->a = in.dst == VM_REG_VOID ? VMI_REG_NONE : (uint32_t)in.dst;
          r->u.callee = callee;
          r->args = m->cargs + ai;
          for (uint32_t i = 0; i < in.num_args; i++) {
            int64_t w = in.args[i], v = vm_arg_value(w);
            vmi_carg_t c;
            switch (vm_arg_kind(w)) {
              case VM_ARG_REG:
                if (v < VM_REG_SPECIAL_BEGIN) {
                  assert(v >= 0 && v < (int64_t)f->num_regs);
                  c = ((vmi_carg_t)v << 1) | 1;
                } else {
                  assert(v == VM_REG_VM);
                  c = (vmi_carg_t)&m->vm_val;
                }
                break;
              case VM_ARG_IMM:
                m->cimms[ii] = vm_value_int(v);
                c = (vmi_carg_t)&m->cimms[ii++];
                break;
              case VM_ARG_CONST:
                assert(v >= 0 && (uint64_t)v < e->num_constants);
                c = (vmi_carg_t)&m->consts[v];
                break;
              default:
                assert(vm_arg_kind(w) == VM_ARG_FUNC && v >= 0 && (uint64_t)v < e->num_functions);
                c = (vmi_carg_t)&m->func_vals[v];
                break;
            }
            m->cargs[ai++] = c;
          }
          break;
        }
        case VM_OP_RET:
          r->op = VMI_OP_RET;
          r->a = (uint32_t)in.result;
          break;
        case VM_OP_GOTO:
          r->op = VMI_OP_GOTO;
          r->backward = in.pc_offset <= 0;
          r->u.target = pc + (uint64_t)in.pc_offset;
          break;
        case VM_OP_IF:
          r->op = VMI_OP_IF;
          r->a = (uint32_t)in.cond;
          r->backward = in.false_offset <= 0;
          r->u.target = pc + (uint64_t)in.false_offset;
          break;
      }
    }
  }
  return VM_STATUS_OK;
}

void vmi_compiled_free(vm_machine_t *m) {
  vm_budget_release(m->budget, m->compiled_bytes);
  m->compiled_bytes = 0;
  free(m->crecs);
  free(m->cargs);
  free(m->cimms);
  m->crecs = NULL;
  m->cargs = NULL;
  m->cimms = NULL;
}
