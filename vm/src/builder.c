/* Builder: assembles an executable in memory, resolving labels, then hands
 * out a verified deep copy. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_internal.h"
#include "vm/executable.h"

typedef struct fixup {
  uint64_t word;  /* index into instr_data of the offset word to patch */
  uint64_t pc;    /* pc of the jumping instruction */
  vm_label_t label;
} fixup_t;

struct vm_builder {
  vm_status_t err; /* sticky first error */

  vm_function_t *funcs;
  uint8_t *defined;
  size_t nfuncs, cap_funcs;

  vm_constant_t *consts;
  void **const_data; /* tensor data per constant (aligned), else NULL */
  size_t nconsts, cap_consts;

  uint64_t *offsets;
  size_t ninstrs, cap_instrs;
  int64_t *words;
  size_t nwords, cap_words;

  vm_kernel_module_t *kernels;
  size_t nkernels, cap_kernels;
  vm_meta_entry_t *meta;
  size_t nmeta, cap_meta;

  /* current function */
  int64_t cur; /* -1 when none */
  int64_t max_reg;
  int64_t *labels; /* bound pc or -1 */
  size_t nlabels, cap_labels;
  fixup_t *fixups;
  size_t nfixups, cap_fixups;
};

static vm_status_t fail(vm_builder_t *b, vm_status_t st) {
  if (!b->err) b->err = st;
  else vm_status_free(st);
  return vm_status_make(vm_status_code(b->err), "%s", vm_status_message(b->err));
}

#define CHECK_STICKY(b)                                                             \
  do {                                                                              \
    if ((b)->err)                                                                   \
      return vm_status_make(VM_FAILED_PRECONDITION, "builder failed earlier: %s", \
                            vm_status_message((b)->err));                           \
  } while (0)

static vm_status_t oom(vm_builder_t *b) {
  return fail(b, vm_status_make(VM_RESOURCE_EXHAUSTED, "builder: out of host memory"));
}

vm_status_t vm_builder_create(vm_builder_t **out_builder) {
  *out_builder = NULL;
  vm_builder_t *b = calloc(1, sizeof(*b));
  if (!b) return vm_status_make(VM_RESOURCE_EXHAUSTED, "builder: out of host memory");
  b->cur = -1;
  *out_builder = b;
  return VM_STATUS_OK;
}

void vm_builder_free(vm_builder_t *b) {
  if (!b) return;
  vmi_functions_free(b->funcs, b->nfuncs);
  free(b->defined);
  vmi_constants_free(b->consts, b->const_data, b->nconsts);
  free(b->offsets);
  free(b->words);
  vmi_kernels_free(b->kernels, b->nkernels);
  vmi_meta_free(b->meta, b->nmeta);
  free(b->labels);
  free(b->fixups);
  vm_status_free(b->err);
  free(b);
}

static vm_status_t add_function(vm_builder_t *b, vm_func_kind_t kind, const char *name,
                                uint32_t *out_idx) {
  if (!name || !*name)
    return fail(b, vm_status_make(VM_INVALID_ARGUMENT, "builder: function name is empty"));
  if (VMI_GROW(b->funcs, b->cap_funcs, b->nfuncs + 1) != 0) return oom(b);
  uint8_t *d = realloc(b->defined, b->cap_funcs);
  if (!d) return oom(b);
  b->defined = d;
  vm_function_t *f = &b->funcs[b->nfuncs];
  memset(f, 0, sizeof(*f));
  f->kind = kind;
  f->name = strdup(name);
  if (!f->name) return oom(b);
  b->defined[b->nfuncs] = kind == VM_FUNC_PACKED;
  *out_idx = (uint32_t)b->nfuncs++;
  return VM_STATUS_OK;
}

vm_status_t vm_builder_declare_packed(vm_builder_t *b, const char *name, uint32_t *out_idx) {
  CHECK_STICKY(b);
  for (size_t i = 0; i < b->nfuncs; i++) {
    if (b->funcs[i].kind == VM_FUNC_PACKED && strcmp(b->funcs[i].name, name ? name : "") == 0) {
      *out_idx = (uint32_t)i;
      return VM_STATUS_OK;
    }
  }
  return add_function(b, VM_FUNC_PACKED, name, out_idx);
}

vm_status_t vm_builder_declare_function(vm_builder_t *b, const char *name, uint32_t num_args,
                                        const char *const *param_names, uint32_t *out_idx) {
  CHECK_STICKY(b);
  if (name && vm_executable_find_function(&(vm_executable_t){.num_functions = (uint32_t)b->nfuncs,
                                                              .functions = b->funcs},
                                          name, VM_FUNC_BYTECODE) >= 0)
    return fail(b, vm_status_make(VM_ALREADY_EXISTS, "builder: function '%s' declared twice",
                                  name));
  uint32_t idx;
  VM_RETURN_IF_ERROR(add_function(b, VM_FUNC_BYTECODE, name, &idx));
  vm_function_t *f = &b->funcs[idx];
  f->params = calloc(num_args ? num_args : 1, sizeof(vm_param_t));
  if (!f->params) return oom(b);
  f->num_args = num_args;
  for (uint32_t i = 0; i < num_args; i++) {
    char tmp[32];
    const char *pn = param_names && param_names[i] ? param_names[i] : NULL;
    if (!pn) {
      snprintf(tmp, sizeof(tmp), "arg%u", i);
      pn = tmp;
    }
    f->params[i].name = strdup(pn);
    f->params[i].ndim = -1;
    if (!f->params[i].name) return oom(b);
  }
  *out_idx = idx;
  return VM_STATUS_OK;
}

static vm_status_t check_bytecode_func(vm_builder_t *b, uint32_t func) {
  if (func >= b->nfuncs || b->funcs[func].kind != VM_FUNC_BYTECODE)
    return fail(b, vm_status_make(VM_INVALID_ARGUMENT,
                                  "builder: function %u is not a declared bytecode function",
                                  func));
  return VM_STATUS_OK;
}

vm_status_t vm_builder_set_param_type(vm_builder_t *b, uint32_t func, uint32_t param,
                                      vm_dtype_t dtype, int32_t ndim, const int64_t *dims) {
  CHECK_STICKY(b);
  VM_RETURN_IF_ERROR(check_bytecode_func(b, func));
  vm_function_t *f = &b->funcs[func];
  if (param >= f->num_args)
    return fail(b, vm_status_make(VM_INVALID_ARGUMENT,
                                  "builder: function '%s' has %u parameters, not %u", f->name,
                                  f->num_args, param + 1));
  if (ndim < -1 || (ndim > 0 && !dims))
    return fail(b, vm_status_make(VM_INVALID_ARGUMENT, "builder: bad ndim %d", ndim));
  vm_param_t *p = &f->params[param];
  free(p->shape);
  p->shape = NULL;
  p->has_type = 1;
  p->dtype = dtype;
  p->ndim = ndim;
  if (ndim > 0) {
    p->shape = malloc((size_t)ndim * sizeof(int64_t));
    if (!p->shape) return oom(b);
    memcpy(p->shape, dims, (size_t)ndim * sizeof(int64_t));
  }
  return VM_STATUS_OK;
}

vm_status_t vm_builder_begin_function(vm_builder_t *b, uint32_t func) {
  CHECK_STICKY(b);
  VM_RETURN_IF_ERROR(check_bytecode_func(b, func));
  if (b->cur >= 0)
    return fail(b, vm_status_make(VM_FAILED_PRECONDITION,
                                  "builder: begin_function('%s') inside function '%s'",
                                  b->funcs[func].name, b->funcs[b->cur].name));
  if (b->defined[func])
    return fail(b, vm_status_make(VM_ALREADY_EXISTS, "builder: function '%s' defined twice",
                                  b->funcs[func].name));
  b->cur = func;
  b->funcs[func].start_instr = b->ninstrs;
  b->max_reg = (int64_t)b->funcs[func].num_args - 1;
  b->nlabels = 0;
  b->nfixups = 0;
  return VM_STATUS_OK;
}

vm_label_t vm_builder_new_label(vm_builder_t *b) {
  if (b->err) return 0;
  if (VMI_GROW(b->labels, b->cap_labels, b->nlabels + 1) != 0) {
    vm_status_free(oom(b));
    return 0;
  }
  b->labels[b->nlabels] = -1;
  return (vm_label_t)b->nlabels++;
}

static vm_status_t need_function(vm_builder_t *b, const char *what) {
  if (b->cur < 0)
    return fail(b, vm_status_make(VM_FAILED_PRECONDITION, "builder: %s outside a function", what));
  return VM_STATUS_OK;
}

vm_status_t vm_builder_bind_label(vm_builder_t *b, vm_label_t label) {
  CHECK_STICKY(b);
  VM_RETURN_IF_ERROR(need_function(b, "bind_label"));
  if (label >= b->nlabels)
    return fail(b, vm_status_make(VM_INVALID_ARGUMENT, "builder: unknown label %u", label));
  if (b->labels[label] >= 0)
    return fail(b, vm_status_make(VM_ALREADY_EXISTS, "builder: label %u bound twice", label));
  b->labels[label] = (int64_t)b->ninstrs;
  return VM_STATUS_OK;
}

/* Appends one instruction of n words. */
static vm_status_t emit(vm_builder_t *b, const int64_t *w, size_t n) {
  if (VMI_GROW(b->offsets, b->cap_instrs, b->ninstrs + 1) != 0 ||
      VMI_GROW(b->words, b->cap_words, b->nwords + n) != 0)
    return oom(b);
  b->offsets[b->ninstrs++] = b->nwords;
  memcpy(b->words + b->nwords, w, n * sizeof(int64_t));
  b->nwords += n;
  return VM_STATUS_OK;
}

static void note_reg(vm_builder_t *b, int64_t reg) {
  if (reg >= 0 && reg < VM_REG_SPECIAL_BEGIN && reg > b->max_reg) b->max_reg = reg;
}

vm_status_t vm_builder_emit_call(vm_builder_t *b, int64_t dst, uint32_t func_idx,
                                 uint32_t num_args, const int64_t *args) {
  CHECK_STICKY(b);
  VM_RETURN_IF_ERROR(need_function(b, "emit_call"));
  if (num_args > 0 && !args)
    return fail(b, vm_status_make(VM_INVALID_ARGUMENT, "builder: call with NULL args"));
  size_t n = 4 + (size_t)num_args;
  int64_t *w = malloc(n * sizeof(int64_t));
  if (!w) return oom(b);
  w[0] = VM_OP_CALL;
  w[1] = dst;
  w[2] = func_idx;
  w[3] = num_args;
  for (uint32_t i = 0; i < num_args; i++) {
    w[4 + i] = args[i];
    if (vm_arg_kind(args[i]) == VM_ARG_REG) note_reg(b, vm_arg_value(args[i]));
  }
  note_reg(b, dst);
  vm_status_t st = emit(b, w, n);
  free(w);
  return st;
}

vm_status_t vm_builder_emit_ret(vm_builder_t *b, int64_t result_reg) {
  CHECK_STICKY(b);
  VM_RETURN_IF_ERROR(need_function(b, "emit_ret"));
  note_reg(b, result_reg);
  int64_t w[2] = {VM_OP_RET, result_reg};
  return emit(b, w, 2);
}

static vm_status_t add_fixup(vm_builder_t *b, uint64_t word, vm_label_t label) {
  if (label >= b->nlabels)
    return fail(b, vm_status_make(VM_INVALID_ARGUMENT, "builder: unknown label %u", label));
  if (VMI_GROW(b->fixups, b->cap_fixups, b->nfixups + 1) != 0) return oom(b);
  b->fixups[b->nfixups++] = (fixup_t){word, b->ninstrs - 1, label};
  return VM_STATUS_OK;
}

vm_status_t vm_builder_emit_goto(vm_builder_t *b, vm_label_t target) {
  CHECK_STICKY(b);
  VM_RETURN_IF_ERROR(need_function(b, "emit_goto"));
  int64_t w[2] = {VM_OP_GOTO, 0};
  VM_RETURN_IF_ERROR(emit(b, w, 2));
  return add_fixup(b, b->nwords - 1, target);
}

vm_status_t vm_builder_emit_if(vm_builder_t *b, int64_t cond_reg, vm_label_t false_target) {
  CHECK_STICKY(b);
  VM_RETURN_IF_ERROR(need_function(b, "emit_if"));
  note_reg(b, cond_reg);
  int64_t w[3] = {VM_OP_IF, cond_reg, 0};
  VM_RETURN_IF_ERROR(emit(b, w, 3));
  return add_fixup(b, b->nwords - 1, false_target);
}

vm_status_t vm_builder_end_function(vm_builder_t *b, uint32_t num_regs) {
  CHECK_STICKY(b);
  VM_RETURN_IF_ERROR(need_function(b, "end_function"));
  vm_function_t *f = &b->funcs[b->cur];
  for (size_t i = 0; i < b->nfixups; i++) {
    const fixup_t *fx = &b->fixups[i];
    if (b->labels[fx->label] < 0)
      return fail(b, vm_status_make(VM_INVALID_ARGUMENT,
                                    "builder: function '%s': label %u used but never bound",
                                    f->name, fx->label));
    b->words[fx->word] = b->labels[fx->label] - (int64_t)fx->pc;
  }
  uint64_t needed = (uint64_t)(b->max_reg + 1);
  if (needed < f->num_args) needed = f->num_args;
  if (num_regs == 0) {
    num_regs = (uint32_t)(needed ? needed : 1);
  } else if (num_regs < needed) {
    return fail(b, vm_status_make(VM_INVALID_ARGUMENT,
                                  "builder: function '%s' uses %llu registers but declares %u",
                                  f->name, (unsigned long long)needed, num_regs));
  }
  f->num_regs = num_regs;
  f->end_instr = b->ninstrs;
  b->defined[b->cur] = 1;
  b->cur = -1;
  return VM_STATUS_OK;
}

static vm_status_t add_const(vm_builder_t *b, vm_const_kind_t kind, vm_constant_t **out,
                             uint32_t *out_idx) {
  if (VMI_GROW(b->consts, b->cap_consts, b->nconsts + 1) != 0) return oom(b);
  void **cd = realloc(b->const_data, b->cap_consts * sizeof(void *));
  if (!cd) return oom(b);
  b->const_data = cd;
  b->const_data[b->nconsts] = NULL;
  vm_constant_t *c = &b->consts[b->nconsts];
  memset(c, 0, sizeof(*c));
  c->kind = kind;
  c->scope = strdup("");
  if (!c->scope) return oom(b);
  *out = c;
  *out_idx = (uint32_t)b->nconsts++;
  return VM_STATUS_OK;
}

vm_status_t vm_builder_const_int(vm_builder_t *b, int64_t v, uint32_t *out_idx) {
  CHECK_STICKY(b);
  vm_constant_t *c;
  VM_RETURN_IF_ERROR(add_const(b, VM_CONST_INT, &c, out_idx));
  c->u.i = v;
  return VM_STATUS_OK;
}

vm_status_t vm_builder_const_float(vm_builder_t *b, double v, uint32_t *out_idx) {
  CHECK_STICKY(b);
  vm_constant_t *c;
  VM_RETURN_IF_ERROR(add_const(b, VM_CONST_FLOAT, &c, out_idx));
  c->u.f = v;
  return VM_STATUS_OK;
}

vm_status_t vm_builder_const_string(vm_builder_t *b, const char *s, size_t len,
                                    uint32_t *out_idx) {
  CHECK_STICKY(b);
  if (len > UINT32_MAX)
    return fail(b, vm_status_make(VM_INVALID_ARGUMENT, "builder: string of %zu bytes", len));
  vm_constant_t *c;
  VM_RETURN_IF_ERROR(add_const(b, VM_CONST_STRING, &c, out_idx));
  c->u.str.data = vmi_strndup(s ? s : "", len);
  if (!c->u.str.data) return oom(b);
  c->u.str.len = (uint32_t)len;
  return VM_STATUS_OK;
}

vm_status_t vm_builder_const_dtype(vm_builder_t *b, vm_dtype_t dt, uint32_t *out_idx) {
  CHECK_STICKY(b);
  vm_constant_t *c;
  VM_RETURN_IF_ERROR(add_const(b, VM_CONST_DTYPE, &c, out_idx));
  c->u.dtype = dt;
  return VM_STATUS_OK;
}

static int64_t *copy_dims(uint32_t ndim, const int64_t *dims) {
  int64_t *d = malloc((ndim ? ndim : 1) * sizeof(int64_t));
  if (d && ndim) memcpy(d, dims, ndim * sizeof(int64_t));
  return d;
}

vm_status_t vm_builder_const_shape(vm_builder_t *b, uint32_t ndim, const int64_t *dims,
                                   uint32_t *out_idx) {
  CHECK_STICKY(b);
  if (ndim > 0 && !dims)
    return fail(b, vm_status_make(VM_INVALID_ARGUMENT, "builder: shape with NULL dims"));
  vm_constant_t *c;
  VM_RETURN_IF_ERROR(add_const(b, VM_CONST_SHAPE, &c, out_idx));
  c->u.shape.dims = copy_dims(ndim, dims);
  if (!c->u.shape.dims) return oom(b);
  c->u.shape.ndim = ndim;
  return VM_STATUS_OK;
}

vm_status_t vm_builder_const_tensor(vm_builder_t *b, vm_dtype_t dt, uint32_t ndim,
                                    const int64_t *shape, const void *data, uint64_t nbytes,
                                    const char *scope, uint32_t *out_idx) {
  CHECK_STICKY(b);
  uint64_t want;
  if (!vm_dtype_valid(dt) || (ndim > 0 && !shape) || vm_tensor_nbytes(dt, shape, ndim, &want) != 0)
    return fail(b, vm_status_make(VM_INVALID_ARGUMENT, "builder: invalid tensor type or shape"));
  if (want != nbytes || (nbytes > 0 && !data))
    return fail(b, vm_status_make(VM_INVALID_ARGUMENT,
                                  "builder: tensor data is %llu bytes, shape and dtype need %llu",
                                  (unsigned long long)nbytes, (unsigned long long)want));
  if (nbytes > SIZE_MAX) return oom(b);
  vm_constant_t *c;
  VM_RETURN_IF_ERROR(add_const(b, VM_CONST_TENSOR, &c, out_idx));
  c->u.tensor.dtype = dt;
  c->u.tensor.shape = copy_dims(ndim, shape);
  if (!c->u.tensor.shape) return oom(b);
  c->u.tensor.ndim = ndim;
  void *d = vmi_aligned_alloc((size_t)nbytes);
  if (!d) return oom(b);
  if (nbytes) memcpy(d, data, (size_t)nbytes);
  b->const_data[*out_idx] = d;
  c->u.tensor.data = d;
  c->u.tensor.nbytes = nbytes;
  if (scope) return vm_builder_set_const_scope(b, *out_idx, scope);
  return VM_STATUS_OK;
}

vm_status_t vm_builder_set_const_scope(vm_builder_t *b, uint32_t idx, const char *scope) {
  CHECK_STICKY(b);
  if (idx >= b->nconsts)
    return fail(b, vm_status_make(VM_INVALID_ARGUMENT, "builder: no constant %u", idx));
  char *s = strdup(scope ? scope : "");
  if (!s) return oom(b);
  free(b->consts[idx].scope);
  b->consts[idx].scope = s;
  return VM_STATUS_OK;
}

vm_status_t vm_builder_add_kernel(vm_builder_t *b, const char *name, const char *source,
                                  const char *options) {
  CHECK_STICKY(b);
  if (VMI_GROW(b->kernels, b->cap_kernels, b->nkernels + 1) != 0) return oom(b);
  vm_kernel_module_t *k = &b->kernels[b->nkernels];
  k->name = strdup(name ? name : "");
  k->source = strdup(source ? source : "");
  k->options = strdup(options ? options : "");
  b->nkernels++;
  if (!k->name || !k->source || !k->options) return oom(b);
  return VM_STATUS_OK;
}

vm_status_t vm_builder_add_meta(vm_builder_t *b, const char *key, const char *value) {
  CHECK_STICKY(b);
  if (VMI_GROW(b->meta, b->cap_meta, b->nmeta + 1) != 0) return oom(b);
  vm_meta_entry_t *m = &b->meta[b->nmeta];
  m->key = strdup(key ? key : "");
  m->value = strdup(value ? value : "");
  b->nmeta++;
  if (!m->key || !m->value) return oom(b);
  return VM_STATUS_OK;
}

/* Deep copy of the builder's state into a fresh executable. */
static vm_status_t build_copy(const vm_builder_t *b, vm_executable_t **out) {
  vm_executable_t *e = calloc(1, sizeof(*e));
  if (!e) goto nomem;
  e->version_major = VM_FORMAT_MAJOR;
  e->version_minor = VM_FORMAT_MINOR;

  e->functions = calloc(b->nfuncs ? b->nfuncs : 1, sizeof(vm_function_t));
  if (!e->functions) goto nomem;
  e->num_functions = (uint32_t)b->nfuncs;
  for (size_t i = 0; i < b->nfuncs; i++) {
    const vm_function_t *s = &b->funcs[i];
    vm_function_t *d = &e->functions[i];
    *d = *s;
    d->name = NULL;
    d->params = NULL;
    d->num_args = 0; /* so a partial copy frees only what it holds */
    if (!(d->name = strdup(s->name))) goto nomem;
    if (s->kind == VM_FUNC_BYTECODE) {
      d->params = calloc(s->num_args ? s->num_args : 1, sizeof(vm_param_t));
      if (!d->params) goto nomem;
      d->num_args = s->num_args;
      for (uint32_t p = 0; p < s->num_args; p++) {
        d->params[p] = s->params[p];
        d->params[p].shape = NULL;
        if (!(d->params[p].name = strdup(s->params[p].name))) goto nomem;
        if (s->params[p].has_type && s->params[p].ndim > 0) {
          d->params[p].shape = copy_dims((uint32_t)s->params[p].ndim, s->params[p].shape);
          if (!d->params[p].shape) goto nomem;
        }
      }
    }
  }

  /* One aligned blob holds every tensor constant, as a loaded file does. */
  e->blob_ = vmi_tensor_blob(b->consts, b->nconsts, &e->blob_size_);
  if (!e->blob_) goto nomem;

  e->constants = calloc(b->nconsts ? b->nconsts : 1, sizeof(vm_constant_t));
  if (!e->constants) goto nomem;
  e->num_constants = (uint32_t)b->nconsts;
  size_t at = 0;
  for (size_t i = 0; i < b->nconsts; i++) {
    const vm_constant_t *s = &b->consts[i];
    vm_constant_t *d = &e->constants[i];
    d->kind = s->kind; /* u is zeroed: a partial copy frees only what it holds */
    if (!(d->scope = strdup(s->scope))) goto nomem;
    switch (s->kind) {
      case VM_CONST_STRING:
        if (!(d->u.str.data = vmi_strndup(s->u.str.data, s->u.str.len))) goto nomem;
        d->u.str.len = s->u.str.len;
        break;
      case VM_CONST_SHAPE:
        if (!(d->u.shape.dims = copy_dims(s->u.shape.ndim, s->u.shape.dims))) goto nomem;
        d->u.shape.ndim = s->u.shape.ndim;
        break;
      case VM_CONST_TENSOR: {
        d->u.tensor = s->u.tensor;
        d->u.tensor.shape = NULL;
        d->u.tensor.data = NULL;
        if (!(d->u.tensor.shape = copy_dims(s->u.tensor.ndim, s->u.tensor.shape))) goto nomem;
        size_t n = (size_t)s->u.tensor.nbytes;
        char *dst = (char *)e->blob_ + at;
        if (n) memcpy(dst, s->u.tensor.data, n);
        d->u.tensor.data = dst;
        at += (n + VM_TENSOR_ALIGN - 1) / VM_TENSOR_ALIGN * VM_TENSOR_ALIGN;
        break;
      }
      default:
        d->u = s->u;
        break;
    }
  }

  e->instr_offset = malloc((b->ninstrs ? b->ninstrs : 1) * sizeof(uint64_t));
  e->instr_data = malloc((b->nwords ? b->nwords : 1) * sizeof(int64_t));
  if (!e->instr_offset || !e->instr_data) goto nomem;
  if (b->ninstrs) memcpy(e->instr_offset, b->offsets, b->ninstrs * sizeof(uint64_t));
  if (b->nwords) memcpy(e->instr_data, b->words, b->nwords * sizeof(int64_t));
  e->num_instrs = b->ninstrs;
  e->num_words = b->nwords;

  e->kernels = calloc(b->nkernels ? b->nkernels : 1, sizeof(vm_kernel_module_t));
  if (!e->kernels) goto nomem;
  e->num_kernels = (uint32_t)b->nkernels;
  for (size_t i = 0; i < b->nkernels; i++) {
    e->kernels[i].name = strdup(b->kernels[i].name);
    e->kernels[i].source = strdup(b->kernels[i].source);
    e->kernels[i].options = strdup(b->kernels[i].options);
    if (!e->kernels[i].name || !e->kernels[i].source || !e->kernels[i].options) goto nomem;
  }
  e->meta = calloc(b->nmeta ? b->nmeta : 1, sizeof(vm_meta_entry_t));
  if (!e->meta) goto nomem;
  e->num_meta = (uint32_t)b->nmeta;
  for (size_t i = 0; i < b->nmeta; i++) {
    e->meta[i].key = strdup(b->meta[i].key);
    e->meta[i].value = strdup(b->meta[i].value);
    if (!e->meta[i].key || !e->meta[i].value) goto nomem;
  }
  *out = e;
  return VM_STATUS_OK;
nomem:
  vm_executable_free(e);
  return vm_status_make(VM_RESOURCE_EXHAUSTED, "builder: out of host memory");
}

vm_status_t vm_builder_finish(vm_builder_t *b, vm_executable_t **out_exec) {
  *out_exec = NULL;
  CHECK_STICKY(b);
  if (b->cur >= 0)
    return vm_status_make(VM_FAILED_PRECONDITION, "builder: function '%s' was not ended",
                          b->funcs[b->cur].name);
  for (size_t i = 0; i < b->nfuncs; i++) {
    if (!b->defined[i])
      return vm_status_make(VM_FAILED_PRECONDITION,
                            "builder: function '%s' was declared but has no body",
                            b->funcs[i].name);
  }
  vm_executable_t *e = NULL;
  VM_RETURN_IF_ERROR(build_copy(b, &e));
  vm_status_t st = vm_executable_verify(e, NULL);
  if (st) {
    vm_executable_free(e);
    return vm_status_annotate(st, "builder");
  }
  *out_exec = e;
  return VM_STATUS_OK;
}
