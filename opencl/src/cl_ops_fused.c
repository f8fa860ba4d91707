/* cl.elementwise: a fused elementwise expression given as a small postfix
 * program (docs/operators.md). The agent validates every token against
 * the tables below and writes the OpenCL C itself, so the text that
 * reaches the compiler is always ours: inputs, whitelisted operations and
 * numbers spelt as bit patterns. Safe even where executables may not
 * carry kernels. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cl_ops_internal.h"

#define EW_MAX_INPUTS VMCL_MAX_STRIDES
#define EW_MAX_TOKENS 256
#define EW_MAX_DEPTH 32
#define EW_MAX_PROGRAM 4096

/* An operation: its operand count and its OpenCL C, where %0, %1, %2
 * stand for the operands (always plain variable names, so they may
 * repeat). Computation is in float. */
typedef struct ew_op {
  const char *name;
  int arity;
  const char *code;
} ew_op_t;

static const ew_op_t ew_ops[] = {
    {"neg", 1, "(-%0)"},
    {"abs", 1, "fabs(%0)"},
    {"exp", 1, "exp(%0)"},
    {"log", 1, "log(%0)"},
    {"sqrt", 1, "sqrt(%0)"},
    {"rsqrt", 1, "rsqrt(%0)"},
    {"recip", 1, "(1.0f / %0)"},
    {"square", 1, "(%0 * %0)"},
    {"tanh", 1, "tanh(%0)"},
    {"sigmoid", 1, "(1.0f / (1.0f + exp(-%0)))"},
    {"relu", 1, "(%0 < 0.0f ? (T)(0.0f) : %0)"},
    {"gelu", 1, "(0.5f * %0 * (1.0f + erf(%0 * 0.70710678118654752f)))"},
    {"erf", 1, "erf(%0)"},
    {"floor", 1, "floor(%0)"},
    {"ceil", 1, "ceil(%0)"},
    {"round", 1, "rint(%0)"},
    {"sin", 1, "sin(%0)"},
    {"cos", 1, "cos(%0)"},
    {"sign", 1, "sign(%0)"},
    {"softplus", 1, "(%0 > 0.0f ? %0 + log1p(exp(-%0)) : log1p(exp(%0)))"},
    {"tan", 1, "tan(%0)"},
    {"asin", 1, "asin(%0)"},
    {"acos", 1, "acos(%0)"},
    {"atan", 1, "atan(%0)"},
    {"sinh", 1, "sinh(%0)"},
    {"cosh", 1, "cosh(%0)"},
    {"asinh", 1, "asinh(%0)"},
    {"acosh", 1, "acosh(%0)"},
    {"atanh", 1, "atanh(%0)"},
    {"add", 2, "(%0 + %1)"},
    {"sub", 2, "(%0 - %1)"},
    {"mul", 2, "(%0 * %1)"},
    {"div", 2, "(%0 / %1)"},
    {"pow", 2, "pow(%0, %1)"},
    {"max", 2, "NANMAX(%0, %1)"},
    {"min", 2, "(isnan(%0) || isnan(%1) ? %0 + %1 : fmin(%0, %1))"},
    /* comparisons give 1 or 0 (NaN compares false) */
    {"eq", 2, "(%0 == %1 ? (T)(1.0f) : (T)(0.0f))"},
    {"lt", 2, "(%0 < %1 ? (T)(1.0f) : (T)(0.0f))"},
    {"le", 2, "(%0 <= %1 ? (T)(1.0f) : (T)(0.0f))"},
    {"gt", 2, "(%0 > %1 ? (T)(1.0f) : (T)(0.0f))"},
    {"ge", 2, "(%0 >= %1 ? (T)(1.0f) : (T)(0.0f))"},
    {"select", 3, "(%0 != 0.0f ? %1 : %2)"},
    {"clip", 3, "(isnan(%0) ? %0 : fmin(fmax(%0, %1), %2))"},
    {"fma", 3, "fma(%0, %1, %2)"},
};

/* A growable text buffer; on allocation failure it stops growing and
 * marks itself failed. */
typedef struct ew_buf {
  char *s;
  size_t len, cap;
  int failed;
} ew_buf_t;

static void ew_put(ew_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void ew_put(ew_buf_t *b, const char *fmt, ...) {
  if (b->failed) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->failed = 1;
      return;
    }
    if ((size_t)n < b->cap - b->len) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = b->cap * 2 + (size_t)n;
    char *s = realloc(b->s, cap);
    if (!s) {
      b->failed = 1;
      return;
    }
    b->s = s;
    b->cap = cap;
  }
}

/* Appends op's code with %k replaced by the names t<operand k>; temps
 * have the type T (float, or float4 in the vector body). */
static void ew_emit_op(ew_buf_t *b, int dst, const ew_op_t *op, const int *operands) {
  ew_put(b, "  T t%d = ", dst);
  for (const char *p = op->code; *p; p++) {
    if (p[0] == '%' && p[1] >= '0' && p[1] < '0' + op->arity) {
      ew_put(b, "t%d", operands[p[1] - '0']);
      p++;
    } else {
      ew_put(b, "%c", *p);
    }
  }
  ew_put(b, ";\n");
}

/* How the kernel indexes an input: like y (dense), one element for all
 * (scalar), or through its broadcast strides (general). */
enum { EW_DENSE = 'd', EW_SCALAR = 's', EW_GENERAL = 'g' };

/* One validated token of the program: an operation, input k, or a number
 * (as its float bits). */
typedef struct ew_step {
  const ew_op_t *op;
  int input; /* -1: not an input */
  uint32_t bits;
} ew_step_t;

/* Validates the program into steps (at most EW_MAX_TOKENS); *nsteps and
 * *result (the temp holding y) on success. */
static vm_status_t ew_parse(const vmcl_op_t *op, const char *prog, uint32_t nin, ew_step_t *steps,
                            int *nsteps, int *result) {
  char tok[64];
  int depth = 0, ntok = 0, stack[EW_MAX_DEPTH];
  for (const char *p = prog;;) {
    while (*p == ' ' || *p == '\t' || *p == '\n') p++;
    if (!*p) break;
    size_t len = strcspn(p, " \t\n");
    ntok++;
    if (len >= sizeof(tok)) {
      return vmcl_op_error(op, "program (argument 0) token %d is longer than %zu characters", ntok,
                           sizeof(tok) - 1);
    }
    if (ntok > EW_MAX_TOKENS) {
      return vmcl_op_error(op, "program (argument 0) has more than %d tokens", EW_MAX_TOKENS);
    }
    memcpy(tok, p, len);
    tok[len] = '\0';
    p += len;
    ew_step_t *st = &steps[ntok - 1];
    st->op = NULL;
    st->input = -1;
    st->bits = 0;
    for (size_t k = 0; k < sizeof(ew_ops) / sizeof(ew_ops[0]); k++) {
      if (strcmp(ew_ops[k].name, tok) == 0) st->op = &ew_ops[k];
    }
    if (st->op) {
      if (depth < st->op->arity) {
        return vmcl_op_error(op,
                             "program (argument 0) token %d '%s' needs %d operands, the "
                             "stack holds %d",
                             ntok, tok, st->op->arity, depth);
      }
      depth -= st->op->arity;
    } else if (tok[0] == 'x' && tok[1] >= '0' && tok[1] <= '9' && tok[2] == '\0') {
      uint32_t k = (uint32_t)(tok[1] - '0');
      if (k >= nin) {
        return vmcl_op_error(op,
                             "program (argument 0) token %d '%s' names an input the call "
                             "does not have (it has %u)",
                             ntok, tok, nin);
      }
      st->input = (int)k;
    } else {
      char *end;
      errno = 0;
      double v = strtod(tok, &end);
      if (end == tok || *end != '\0') {
        return vmcl_op_error(op,
                             "program (argument 0) token %d '%s' is not an input (x0 to "
                             "x%u), a number or an operation",
                             ntok, tok, nin ? nin - 1 : 0);
      }
      float f = (float)v;
      if (!isfinite(f)) {
        return vmcl_op_error(op, "program (argument 0) token %d '%s' is not a finite float", ntok,
                             tok);
      }
      memcpy(&st->bits, &f, sizeof(st->bits));
    }
    if (depth == EW_MAX_DEPTH) {
      return vmcl_op_error(op, "program (argument 0) stacks more than %d values", EW_MAX_DEPTH);
    }
    stack[depth++] = ntok - 1;
  }
  if (depth != 1) {
    return vmcl_op_error(op, "program (argument 0) leaves %d values on the stack, expected 1",
                         depth);
  }
  *nsteps = ntok;
  *result = stack[0];
  return VM_STATUS_OK;
}

/* Writes the steps as statements over temps of type T (defined by the
 * caller): temp k is step k's value. Input k's load is loads[k], a format
 * taking k twice (pointer p<k>, offset f<k>). */
static void ew_body(ew_buf_t *b, const ew_step_t *steps, int nsteps, const char *const *loads) {
  int stack[EW_MAX_DEPTH], depth = 0;
  for (int k = 0; k < nsteps; k++) {
    const ew_step_t *st = &steps[k];
    if (st->op) {
      depth -= st->op->arity;
      ew_emit_op(b, k, st->op, stack + depth);
    } else if (st->input >= 0) {
      ew_put(b, "  T t%d = ", k);
      ew_put(b, loads[st->input], st->input, st->input);
      ew_put(b, ";\n");
    } else {
      ew_put(b, "  T t%d = (T)(as_float(0x%08xu));\n", k, st->bits);
    }
    stack[depth++] = k;
  }
}

/* Validates the program and writes the kernel "vmcl_elementwise" for nin
 * inputs into b (after the common.cl prelude). kinds[i] is input i's
 * EW_*: when none is general, work-item i computes elements 4i .. 4i + 3
 * as float4s (dense inputs by vector loads, scalars broadcast), like the
 * cl.binary kernels, and the work-item after the last full float4 the
 * 0-3 leftover elements; otherwise each work-item one element, its
 * inputs' offsets found by dividing through the broadcast shape. */
static vm_status_t ew_compile(const vmcl_op_t *op, const char *prog, uint32_t nin,
                              const char *kinds, ew_buf_t *b) {
  ew_step_t steps[EW_MAX_TOKENS];
  int nsteps = 0, res = 0;
  VM_RETURN_IF_ERROR(ew_parse(op, prog, nin, steps, &nsteps, &res));
  int general = memchr(kinds, EW_GENERAL, nin) != NULL;
  const char *one[EW_MAX_INPUTS];
  for (uint32_t i = 0; i < nin; i++) one[i] = "LD(p%d, f%d)";
  ew_put(b, "%s\n__kernel void vmcl_elementwise(", vmcl_src_common);
  for (uint32_t i = 0; i < nin; i++) ew_put(b, "__global const S *p%u, int o%u, ", i, i);
  ew_put(b, "__global S *y, int yo, int n, int rank, int8 shape8");
  for (uint32_t i = 0; i < nin; i++) ew_put(b, ", int8 st%u", i);
  ew_put(b, ") {\n  int i = get_global_id(0);\n");
  if (general) {
    ew_put(b, "  if (i >= n) return;\n");
    ew_put(b, "  int sh[8], rem = i;\n  vstore8(shape8, 0, sh);\n");
    for (uint32_t i = 0; i < nin; i++) {
      ew_put(b, "  int s%u[8], f%u = o%u;\n  vstore8(st%u, 0, s%u);\n", i, i, i, i, i);
    }
    ew_put(b,
           "  for (int d = 0; d < rank; d++) {\n    int q = rem / sh[d], r = rem - q * sh[d];\n"
           "    rem = q;\n");
    for (uint32_t i = 0; i < nin; i++) ew_put(b, "    f%u += r * s%u[d];\n", i, i);
    ew_put(b, "  }\n#define T float\n");
    ew_body(b, steps, nsteps, one);
    ew_put(b, "  ST(t%d, yo + i, y);\n#undef T\n}\n", res);
  } else {
    ew_put(b, "  int n4 = n >> 2;\n  if (i < n4) {\n");
    for (uint32_t i = 0; i < nin; i++) {
      ew_put(b, "  int f%u = o%u%s;\n", i, i, kinds[i] == EW_DENSE ? " + 4 * i" : "");
    }
    /* a scalar input is one element broadcast, a dense one a vector load */
    const char *vec[EW_MAX_INPUTS];
    for (uint32_t i = 0; i < nin; i++)
      vec[i] = kinds[i] == EW_SCALAR ? "(T)(LD(p%d, f%d))" : "LD4(p%d + f%d, 0)";
    ew_put(b, "#define T float4\n");
    ew_body(b, steps, nsteps, vec);
    ew_put(b, "  ST4(t%d, 0, y + yo + 4 * i);\n#undef T\n", res);
    ew_put(b, "  } else if (i == n4) {\n    for (int j = 4 * n4; j < n; j++) {\n");
    for (uint32_t i = 0; i < nin; i++) {
      ew_put(b, "  int f%u = o%u%s;\n", i, i, kinds[i] == EW_DENSE ? " + j" : "");
    }
    ew_put(b, "#define T float\n");
    ew_body(b, steps, nsteps, one);
    ew_put(b, "  ST(t%d, yo + j, y);\n#undef T\n    }\n  }\n}\n", res);
  }
  if (b->failed) return vm_status_make(VM_RESOURCE_EXHAUSTED, "%s: out of host memory", op->name);
  return VM_STATUS_OK;
}

vm_status_t vmcl_op_elementwise(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                vm_value_t *out, void *user) {
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.elementwise", "(program, x0, ..., y)", args, nargs);
  if (op.nargs < 2 || op.nargs > EW_MAX_INPUTS + 2) {
    return vmcl_op_error(&op, "expected 2 to %d arguments %s (at most %d inputs), got %u",
                         EW_MAX_INPUTS + 2, op.usage, EW_MAX_INPUTS, op.nargs);
  }
  const vm_string_t *prog = vm_value_as_string(&op.args[0]);
  if (!prog) {
    return vmcl_op_error(&op, "program (argument 0) must be a string, got %s",
                         vm_value_kind_name(op.args[0].kind));
  }
  if (prog->len > EW_MAX_PROGRAM || strlen(prog->data) != prog->len) {
    return vmcl_op_error(&op, "program (argument 0) must be text of at most %d characters",
                         EW_MAX_PROGRAM);
  }
  uint32_t nin = op.nargs - 2, iy = op.nargs - 1;
  vm_tensor_t *y, *x[EW_MAX_INPUTS];
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, iy, "y", &y));
  VM_RETURN_IF_ERROR(vmcl_op_float_dtype(&op, y, iy, "y"));
  int64_t shape[VMCL_MAX_RANK];
  uint32_t nd = 0;
  for (uint32_t i = 0; i < nin; i++) {
    char what[16];
    snprintf(what, sizeof(what), "x%u", i);
    VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 1 + i, what, &x[i]));
    VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, x[i], 1 + i, what, y->dtype, "y"));
    if (vmcl_broadcast_shape(shape, nd, x[i]->shape, x[i]->ndim, shape, &nd) != 0) {
      char b1[192];
      return vmcl_op_error(&op,
                           "%s (argument %u) of shape %s does not broadcast with the inputs "
                           "before it",
                           what, 1 + i, vmcl_shape_str(x[i]->shape, x[i]->ndim, b1, sizeof(b1)));
    }
  }
  /* y has the inputs' broadcast shape (or, with inputs of fewer dims, more) */
  int64_t want[VMCL_MAX_RANK];
  uint32_t wnd;
  if (vmcl_broadcast_shape(shape, nd, y->shape, y->ndim, want, &wnd) != 0 || wnd != y->ndim ||
      memcmp(want, y->shape, wnd * sizeof(int64_t)) != 0) {
    char b1[192], b2[192];
    return vmcl_op_error(&op, "y (argument %u) has shape %s, but the inputs broadcast to %s", iy,
                         vmcl_shape_str(y->shape, y->ndim, b1, sizeof(b1)),
                         vmcl_shape_str(shape, nd, b2, sizeof(b2)));
  }
  /* y is dense, so dims the inputs all step through contiguously merge */
  vmcl_iter_t it;
  it.rank = (int)y->ndim;
  memcpy(it.shape, y->shape, y->ndim * sizeof(int64_t));
  for (uint32_t i = 0; i < nin; i++) vmcl_broadcast_strides(x[i], y->ndim, it.stride[i]);
  vmcl_collapse(&it, (int)nin);
  char kinds[EW_MAX_INPUTS];
  for (uint32_t i = 0; i < nin; i++) {
    int scalar = 1;
    for (int dd = 0; dd < it.rank; dd++) scalar &= it.stride[i][dd] == 0;
    kinds[i] = scalar ? EW_SCALAR : it.rank == 1 && it.stride[i][0] == 1 ? EW_DENSE : EW_GENERAL;
  }
  ew_buf_t b = {malloc(8192), 0, 8192, 0};
  if (!b.s) return vm_status_make(VM_RESOURCE_EXHAUSTED, "cl.elementwise: out of host memory");
  vm_status_t st = ew_compile(&op, prog->data, nin, kinds, &b);
  int64_t n = vm_tensor_numel(y);
  if (st || n == 0) {
    free(b.s);
    return st;
  }
  vmcl_dev_t *d = op.d;
  cl_kernel k;
  pthread_mutex_lock(&d->lock);
  st = vmcl_get_kernel(d, b.s, 0, vmcl_float_options(y->dtype), "vmcl_elementwise", &k);
  if (!st) {
    vmcl_args_t a = vmcl_args_begin(k);
    for (uint32_t i = 0; i < nin; i++) {
      vmcl_arg_mem(&a, vmcl_tensor_mem(x[i]));
      vmcl_arg_int(&a, vmcl_elem_offset(x[i]));
    }
    vmcl_arg_mem(&a, vmcl_tensor_mem(y));
    vmcl_arg_int(&a, vmcl_elem_offset(y));
    vmcl_arg_int(&a, n);
    vmcl_arg_int(&a, it.rank);
    vmcl_arg_dims(&a, it.shape, it.rank, 1);
    for (uint32_t i = 0; i < nin; i++) vmcl_arg_dims(&a, it.stride[i], it.rank, 0);
    if (a.err != CL_SUCCESS) {
      st = vmcl_status(a.err, "clSetKernelArg");
    } else {
      /* dense and scalar inputs: a float4 per work-item and one for the tail */
      size_t items = memchr(kinds, EW_GENERAL, nin) ? (size_t)n : (size_t)(n / 4 + 1);
      st = vmcl_launch_1d(d, k, items, vmcl_local_size(d, k, 256));
    }
  }
  pthread_mutex_unlock(&d->lock);
  free(b.s);
  return st;
}
