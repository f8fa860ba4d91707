/* The compiler's back end (vmcompiler/graph.h): lifetimes, memory planning
 * and the alloc/call/kill sequence of a function body. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vm/planner.h"
#include "vmcompiler/graph.h"

typedef enum tkind {
  T_PARAM = 0,  /* function parameter: lives in register `index` */
  T_WEIGHT = 1, /* tensor constant `index` */
  T_INTER = 2,  /* intermediate: planned (or the output) */
  T_VIEW = 3,   /* reshape of an intermediate, parameter or view (root) */
  T_RESULT = 4, /* a result of a bytecode function a control call makes (own memory) */
} tkind_t;

typedef struct gtensor {
  tkind_t kind;
  vm_dtype_t dt;
  uint32_t ndim;
  int64_t shape[VMCC_MAX_NDIM];
  uint64_t nbytes;
  uint32_t index;      /* PARAM: register; WEIGHT: constant */
  int32_t root;        /* VIEW: the tensor (not a view) whose memory it shares */
  int64_t produced_at; /* call that writes it (-1: none yet) */
  int64_t last_ref;    /* last call naming this id */
  int64_t last;        /* INTER: last call naming it or one of its views */
  int64_t reg;         /* INTER/VIEW register */
  int64_t plan_idx;    /* INTER: index among planned tensors, -1 if not */
  char name[32];       /* PARAM: its name, for error contexts */
} gtensor_t;

typedef enum gctl { C_CALL = 0, C_IF = 1, C_LOOP = 2 } gctl_t;

typedef struct gcall {
  gctl_t ctl;    /* C_CALL: a packed call; C_IF, C_LOOP: control (vmcc_graph_if/loop) */
  uint32_t func; /* packed function index; C_IF: then, C_LOOP: body (bytecode functions) */
  uint32_t func2; /* C_IF: else */
  int32_t dst;   /* a VIEW id receiving the result, or -1 (void) */
  uint32_t nargs;
  vmcc_arg_t *args; /* C_IF: cond, the functions' arguments; C_LOOP: cond, state, extra */
  uint32_t nouts;   /* C_IF, C_LOOP: result tensors (T_RESULT) */
  int32_t *outs;
} gcall_t;

typedef struct gtrim {
  int32_t t, count; /* the output, its count (an int64 1-element intermediate) */
  int64_t axis;
} gtrim_t;

#define DTYPE_CACHE 16

typedef struct int_list {
  uint32_t n;
  int is_float; /* vals in f (a float list) rather than v */
  int64_t v[VMCC_MAX_INTS];
  double f[VMCC_MAX_INTS];
} int_list_t;

typedef struct shape_const {
  uint32_t ndim;
  int64_t dims[VMCC_MAX_NDIM];
  uint32_t idx;
} shape_const_t;

struct vmcc_graph {
  vm_builder_t *b;
  uint32_t func;
  char func_name[64];
  uint32_t num_params;
  uint64_t align;
  vm_status_t err; /* first error; everything after it is a no-op */

  gtensor_t *tensors;
  uint32_t num_tensors, cap_tensors;
  gcall_t *calls;
  uint32_t num_calls, cap_calls;
  shape_const_t *shapes;
  uint32_t num_shapes, cap_shapes;
  uint32_t *shape_slots; /* hash of shapes: index + 1, 0 free; a power of two */
  uint32_t cap_slots;
  int_list_t *lists;
  uint32_t num_lists, cap_lists;
  vm_dtype_t dtypes[DTYPE_CACHE]; /* dtype constants made so far */
  uint32_t dtype_idx[DTYPE_CACHE], num_dtypes;
  int has_f32_const, has_scope_const;
  uint32_t f32_const, scope_const;
  gtrim_t *trims; /* outputs returned cut to a run-time count (vmcc_graph_trim_dim) */
  uint32_t num_trims, cap_trims;
};

static void set_err(vmcc_graph_t *g, vm_status_t st) {
  if (!st) return;
  if (g->err) {
    vm_status_free(st);
    return;
  }
  g->err = st;
}

/* Grows an array of elem-sized items to hold one more. */
static int grow(void **arr, uint32_t *cap, uint32_t count, size_t elem) {
  if (count < *cap) return 0;
  uint32_t ncap = *cap ? *cap * 2 : 16;
  void *p = realloc(*arr, (size_t)ncap * elem);
  if (!p) return -1;
  *arr = p;
  *cap = ncap;
  return 0;
}

vm_status_t vmcc_graph_create(vm_builder_t *b, uint32_t func, const char *func_name,
                              uint32_t num_params, uint64_t align, vmcc_graph_t **out_g) {
  *out_g = NULL;
  if (!b || !func_name) return vm_status_make(VM_INVALID_ARGUMENT, "graph: no builder or name");
  vmcc_graph_t *g = calloc(1, sizeof(*g));
  if (!g) return vm_status_make(VM_RESOURCE_EXHAUSTED, "graph: out of host memory");
  g->b = b;
  g->func = func;
  snprintf(g->func_name, sizeof(g->func_name), "%s", func_name);
  g->num_params = num_params;
  g->align = align ? align : 64;
  *out_g = g;
  return VM_STATUS_OK;
}

void vmcc_graph_free(vmcc_graph_t *g) {
  if (!g) return;
  for (uint32_t i = 0; i < g->num_calls; i++) {
    free(g->calls[i].args);
    free(g->calls[i].outs);
  }
  free(g->calls);
  free(g->tensors);
  free(g->shapes);
  free(g->shape_slots);
  free(g->lists);
  free(g->trims);
  vm_status_free(g->err);
  free(g);
}

static int32_t add_tensor(vmcc_graph_t *g, tkind_t kind, vm_dtype_t dt, uint32_t ndim,
                          const int64_t *shape) {
  if (g->err) return -1;
  if (ndim > VMCC_MAX_NDIM || (ndim && !shape)) {
    set_err(g, vm_status_make(VM_INVALID_ARGUMENT, "graph: tensor of %u dims (at most %d)", ndim,
                              VMCC_MAX_NDIM));
    return -1;
  }
  gtensor_t t;
  memset(&t, 0, sizeof(t));
  t.kind = kind;
  t.dt = dt;
  t.ndim = ndim;
  if (ndim) memcpy(t.shape, shape, ndim * sizeof(int64_t));
  if (!vm_dtype_valid(dt) || vm_tensor_nbytes(dt, shape, ndim, &t.nbytes) != 0) {
    char dts[24], dims[200];
    size_t used = 0;
    dims[0] = 0;
    for (uint32_t i = 0; i < ndim && used < sizeof(dims); i++)
      used += (size_t)snprintf(dims + used, sizeof(dims) - used, "%s%lld", i ? "," : "",
                               (long long)shape[i]);
    set_err(g, vm_status_make(VM_INVALID_ARGUMENT,
                              "graph: tensor %s[%s]: a bad dtype, a negative dim or a byte size "
                              "that overflows",
                              vm_dtype_str(dt, dts, sizeof(dts)), dims));
    return -1;
  }
  t.root = -1;
  t.produced_at = -1;
  t.last_ref = -1;
  t.last = -1;
  t.reg = -1;
  t.plan_idx = -1;
  if (grow((void **)&g->tensors, &g->cap_tensors, g->num_tensors, sizeof(t)) != 0) {
    set_err(g, vm_status_make(VM_RESOURCE_EXHAUSTED, "graph: out of host memory"));
    return -1;
  }
  if (g->num_tensors >= INT32_MAX) {
    set_err(g, vm_status_make(VM_RESOURCE_EXHAUSTED, "graph: too many tensors"));
    return -1;
  }
  g->tensors[g->num_tensors] = t;
  return (int32_t)g->num_tensors++;
}

static int valid_tid(const vmcc_graph_t *g, int64_t tid) {
  return tid >= 0 && tid < (int64_t)g->num_tensors;
}

int32_t vmcc_graph_param(vmcc_graph_t *g, uint32_t index, const char *name, vm_dtype_t dt,
                         uint32_t ndim, const int64_t *shape) {
  if (g->err) return -1;
  if (index >= g->num_params || !name) {
    set_err(g,
            vm_status_make(VM_INVALID_ARGUMENT, "graph: parameter %u of %u", index, g->num_params));
    return -1;
  }
  int32_t tid = add_tensor(g, T_PARAM, dt, ndim, shape);
  if (tid < 0) return -1;
  g->tensors[tid].index = index;
  snprintf(g->tensors[tid].name, sizeof(g->tensors[tid].name), "%s", name);
  /* set_input checks the annotation; the entry checks emitted by
   * vmcc_graph_emit cover direct invocations too. */
  set_err(g, vm_builder_set_param_type(g->b, g->func, index, dt, (int32_t)ndim, shape));
  return g->err ? -1 : tid;
}

int32_t vmcc_graph_weight(vmcc_graph_t *g, const float *data, uint32_t ndim, const int64_t *shape) {
  return vmcc_graph_const(g, VM_F32, data, ndim, shape);
}

int32_t vmcc_graph_const(vmcc_graph_t *g, vm_dtype_t dt, const void *data, uint32_t ndim,
                         const int64_t *shape) {
  int32_t tid = add_tensor(g, T_WEIGHT, dt, ndim, shape);
  if (tid < 0) return -1;
  uint32_t idx;
  set_err(g, vm_builder_const_tensor(g->b, dt, ndim, shape, data, g->tensors[tid].nbytes, "global",
                                     &idx));
  if (g->err) return -1;
  g->tensors[tid].index = idx;
  return tid;
}

int32_t vmcc_graph_tensor(vmcc_graph_t *g, vm_dtype_t dt, uint32_t ndim, const int64_t *shape) {
  return add_tensor(g, T_INTER, dt, ndim, shape);
}

static void add_call(vmcc_graph_t *g, const char *name, int32_t dst, uint32_t nargs,
                     const vmcc_arg_t *args) {
  if (g->err) return;
  gcall_t c;
  memset(&c, 0, sizeof(c));
  c.dst = dst;
  set_err(g, vm_builder_declare_packed(g->b, name, &c.func));
  if (g->err) return;
  for (uint32_t i = 0; i < nargs; i++) {
    if (args[i].kind == VMCC_ARG_INTS && (args[i].v < 0 || args[i].v >= (int64_t)g->num_lists)) {
      set_err(g, vm_status_make(VM_INVALID_ARGUMENT, "graph: %s argument %u: no int list %lld",
                                name, i, (long long)args[i].v));
      return;
    }
    if (args[i].kind == VMCC_ARG_TENSOR && !valid_tid(g, args[i].v)) {
      set_err(g, vm_status_make(VM_INVALID_ARGUMENT, "graph: %s argument %u: no tensor %lld", name,
                                i, (long long)args[i].v));
      return;
    }
  }
  c.nargs = nargs;
  c.args = malloc((nargs ? nargs : 1) * sizeof(*c.args));
  if (!c.args || grow((void **)&g->calls, &g->cap_calls, g->num_calls, sizeof(c)) != 0) {
    free(c.args);
    set_err(g, vm_status_make(VM_RESOURCE_EXHAUSTED, "graph: out of host memory"));
    return;
  }
  if (nargs) memcpy(c.args, args, nargs * sizeof(*args));
  g->calls[g->num_calls++] = c;
}

int32_t vmcc_graph_view(vmcc_graph_t *g, int32_t src, uint32_t ndim, const int64_t *shape) {
  if (g->err) return -1;
  if (!valid_tid(g, src) || g->tensors[src].kind == T_WEIGHT) {
    set_err(g, vm_status_make(VM_INVALID_ARGUMENT,
                              "graph: only intermediates and parameters can be viewed (tensor %d)",
                              src));
    return -1;
  }
  int32_t tid = add_tensor(g, T_VIEW, g->tensors[src].dt, ndim, shape);
  if (tid < 0) return -1;
  if (g->tensors[tid].nbytes != g->tensors[src].nbytes) {
    set_err(g,
            vm_status_make(VM_INVALID_ARGUMENT, "graph: view of tensor %d changes its size", src));
    return -1;
  }
  /* A view of a view shares the first tensor's memory. */
  g->tensors[tid].root = g->tensors[src].kind == T_VIEW ? g->tensors[src].root : src;
  /* The second argument is a placeholder: emission passes a shape
   * constant made from the view's dims. */
  vmcc_arg_t a[2] = {vmcc_a_t(src), {VMCC_ARG_IMM, 0}};
  add_call(g, "vm.builtin.reshape", tid, 2, a);
  return g->err ? -1 : tid;
}

void vmcc_graph_call(vmcc_graph_t *g, const char *name, uint32_t nargs, const vmcc_arg_t *args) {
  add_call(g, name, -1, nargs, args);
}

void vmcc_graph_trim_dim(vmcc_graph_t *g, int32_t t, int32_t count, uint32_t axis) {
  if (g->err) return;
  if (!valid_tid(g, t) || !valid_tid(g, count) || g->tensors[t].kind != T_INTER ||
      g->tensors[count].kind != T_INTER || axis >= g->tensors[t].ndim ||
      !vm_dtype_equal(g->tensors[count].dt, VM_I64) || g->tensors[count].nbytes != 8) {
    set_err(g, vm_status_make(VM_INVALID_ARGUMENT,
                              "graph: trim of tensor %d by %d along axis %u: expected two "
                              "intermediates, the count int64 of one element",
                              t, count, axis));
    return;
  }
  for (uint32_t i = 0; i < g->num_trims; i++)
    if (g->trims[i].t == t) {
      set_err(g, vm_status_make(VM_INVALID_ARGUMENT, "graph: tensor %d is trimmed twice", t));
      return;
    }
  if (grow((void **)&g->trims, &g->cap_trims, g->num_trims, sizeof(gtrim_t)) != 0) {
    set_err(g, vm_status_make(VM_RESOURCE_EXHAUSTED, "graph: out of host memory"));
    return;
  }
  g->trims[g->num_trims++] = (gtrim_t){.t = t, .count = count, .axis = axis};
}

int32_t vmcc_graph_result(vmcc_graph_t *g, vm_dtype_t dt, uint32_t ndim, const int64_t *shape) {
  return add_tensor(g, T_RESULT, dt, ndim, shape);
}

/* Records a control call: args (tensor ids), then the result tensors. */
static void add_ctl(vmcc_graph_t *g, gctl_t ctl, uint32_t f1, uint32_t f2, uint32_t nargs,
                    const int32_t *args, uint32_t nouts, const int32_t *outs) {
  if (g->err) return;
  for (uint32_t i = 0; i < nargs; i++)
    if (!valid_tid(g, args[i])) {
      set_err(g, vm_status_make(VM_INVALID_ARGUMENT, "graph: control argument %u: no tensor %d",
                                i, args[i]));
      return;
    }
  for (uint32_t i = 0; i < nouts; i++)
    if (!valid_tid(g, outs[i]) || g->tensors[outs[i]].kind != T_RESULT ||
        g->tensors[outs[i]].produced_at != -1) {
      set_err(g, vm_status_make(VM_INVALID_ARGUMENT,
                                "graph: control result %u: tensor %d is no fresh result", i,
                                outs[i]));
      return;
    }
  gcall_t c;
  memset(&c, 0, sizeof(c));
  c.ctl = ctl;
  c.func = f1;
  c.func2 = f2;
  c.dst = -1;
  c.nargs = nargs;
  c.nouts = nouts;
  c.args = malloc((nargs ? nargs : 1) * sizeof(*c.args));
  c.outs = malloc((nouts ? nouts : 1) * sizeof(*c.outs));
  if (!c.args || !c.outs || grow((void **)&g->calls, &g->cap_calls, g->num_calls, sizeof(c)) != 0) {
    free(c.args);
    free(c.outs);
    set_err(g, vm_status_make(VM_RESOURCE_EXHAUSTED, "graph: out of host memory"));
    return;
  }
  for (uint32_t i = 0; i < nargs; i++) c.args[i] = vmcc_a_t(args[i]);
  if (nouts) memcpy(c.outs, outs, nouts * sizeof(*outs));
  /* marks the results as made, so that no other call claims them */
  for (uint32_t i = 0; i < nouts; i++) g->tensors[outs[i]].produced_at = -2;
  g->calls[g->num_calls++] = c;
}

void vmcc_graph_if(vmcc_graph_t *g, int32_t cond, uint32_t then_func, uint32_t else_func,
                   uint32_t nargs, const int32_t *args, uint32_t nouts, const int32_t *outs) {
  if (g->err) return;
  int32_t *a = malloc(((size_t)nargs + 1) * sizeof(*a));
  if (!a) {
    set_err(g, vm_status_make(VM_RESOURCE_EXHAUSTED, "graph: out of host memory"));
    return;
  }
  a[0] = cond;
  if (nargs) memcpy(a + 1, args, nargs * sizeof(*args));
  add_ctl(g, C_IF, then_func, else_func, nargs + 1, a, nouts, outs);
  free(a);
}

void vmcc_graph_loop(vmcc_graph_t *g, int32_t cond, uint32_t body_func, uint32_t nstate,
                     const int32_t *init, uint32_t nextra, const int32_t *extra,
                     const int32_t *outs) {
  if (g->err) return;
  if (nstate == 0) {
    set_err(g, vm_status_make(VM_INVALID_ARGUMENT, "graph: a loop without state"));
    return;
  }
  size_t n = 1 + (size_t)nstate + nextra;
  int32_t *a = n <= UINT32_MAX ? malloc(n * sizeof(*a)) : NULL;
  if (!a) {
    set_err(g, vm_status_make(VM_RESOURCE_EXHAUSTED, "graph: out of host memory"));
    return;
  }
  a[0] = cond;
  memcpy(a + 1, init, nstate * sizeof(*init));
  if (nextra) memcpy(a + 1 + nstate, extra, nextra * sizeof(*extra));
  add_ctl(g, C_LOOP, body_func, 0, (uint32_t)n, a, nstate, outs);
  free(a);
}

static vmcc_arg_t add_list(vmcc_graph_t *g, uint32_t n, const int64_t *vals, const double *fvals) {
  vmcc_arg_t a = {VMCC_ARG_INTS, -1};
  if (g->err) return a;
  if (n > VMCC_MAX_INTS || (n && !vals && !fvals)) {
    set_err(g, vm_status_make(VM_INVALID_ARGUMENT, "graph: int list of %u values (at most %d)", n,
                              VMCC_MAX_INTS));
    return a;
  }
  if (grow((void **)&g->lists, &g->cap_lists, g->num_lists, sizeof(int_list_t)) != 0) {
    set_err(g, vm_status_make(VM_RESOURCE_EXHAUSTED, "graph: out of host memory"));
    return a;
  }
  int_list_t *l = &g->lists[g->num_lists];
  memset(l, 0, sizeof(*l));
  l->n = n;
  l->is_float = fvals != NULL;
  if (n && vals) memcpy(l->v, vals, n * sizeof(int64_t));
  if (n && fvals) memcpy(l->f, fvals, n * sizeof(double));
  a.v = g->num_lists++;
  return a;
}

vmcc_arg_t vmcc_graph_ints(vmcc_graph_t *g, uint32_t n, const int64_t *vals) {
  return add_list(g, n, vals, NULL);
}

vmcc_arg_t vmcc_graph_floats(vmcc_graph_t *g, uint32_t n, const double *vals) {
  return add_list(g, n, NULL, vals);
}

vm_dtype_t vmcc_graph_dtype(const vmcc_graph_t *g, int32_t tid) {
  return valid_tid(g, tid) ? g->tensors[tid].dt : VM_F32;
}

uint32_t vmcc_graph_ndim(const vmcc_graph_t *g, int32_t tid) {
  return valid_tid(g, tid) ? g->tensors[tid].ndim : 0;
}

const int64_t *vmcc_graph_shape(const vmcc_graph_t *g, int32_t tid) {
  return valid_tid(g, tid) ? g->tensors[tid].shape : NULL;
}

int vmcc_graph_is_intermediate(const vmcc_graph_t *g, int32_t tid) {
  return valid_tid(g, tid) && g->tensors[tid].kind == T_INTER;
}

int32_t vmcc_graph_root(const vmcc_graph_t *g, int32_t tid) {
  if (!valid_tid(g, tid)) return -1;
  return g->tensors[tid].kind == T_VIEW ? g->tensors[tid].root : tid;
}

int vmcc_graph_is_returnable(const vmcc_graph_t *g, int32_t tid) {
  if (!valid_tid(g, tid)) return 0;
  const gtensor_t *t = &g->tensors[tid];
  if (t->kind == T_INTER) return 1;
  if (t->kind != T_VIEW) return 0;
  tkind_t rk = g->tensors[t->root].kind;
  return rk == T_INTER || rk == T_RESULT;
}

vm_status_t vmcc_graph_error(const vmcc_graph_t *g) {
  return g ? g->err : NULL;
}

/* ---------------------------------------------------------------------------
 * Emission
 */

static uint64_t shape_hash(uint32_t ndim, const int64_t *dims) {
  uint64_t h = 1469598103934665603ull ^ ndim;
  for (uint32_t i = 0; i < ndim; i++) h = (h ^ (uint64_t)dims[i]) * 1099511628211ull;
  return h ^ (h >> 29);
}

/* The hash slot of a shape: its entry (index + 1), or the free slot (0). */
static uint32_t *shape_slot(const vmcc_graph_t *g, uint32_t ndim, const int64_t *dims) {
  uint32_t mask = g->cap_slots - 1;
  for (uint32_t i = (uint32_t)shape_hash(ndim, dims) & mask;; i = (i + 1) & mask) {
    uint32_t *slot = &g->shape_slots[i];
    if (!*slot) return slot;
    const shape_const_t *s = &g->shapes[*slot - 1];
    if (s->ndim == ndim && (ndim == 0 || memcmp(s->dims, dims, ndim * sizeof(int64_t)) == 0))
      return slot;
  }
}

/* The shape constant of (ndim, dims), made once per distinct shape. */
static uint32_t shape_const(vmcc_graph_t *g, uint32_t ndim, const int64_t *dims) {
  if (g->err) return 0;
  if ((uint64_t)(g->num_shapes + 1) * 2 > g->cap_slots) {
    uint32_t ncap = g->cap_slots ? g->cap_slots * 2 : 64;
    uint32_t *slots = ncap > g->cap_slots ? calloc(ncap, sizeof(uint32_t)) : NULL;
    if (!slots) {
      set_err(g, vm_status_make(VM_RESOURCE_EXHAUSTED, "graph: out of host memory"));
      return 0;
    }
    free(g->shape_slots);
    g->shape_slots = slots;
    g->cap_slots = ncap;
    for (uint32_t i = 0; i < g->num_shapes; i++)
      *shape_slot(g, g->shapes[i].ndim, g->shapes[i].dims) = i + 1;
  }
  uint32_t *slot = shape_slot(g, ndim, dims);
  if (*slot) return g->shapes[*slot - 1].idx;
  shape_const_t s;
  memset(&s, 0, sizeof(s));
  s.ndim = ndim;
  if (ndim) memcpy(s.dims, dims, ndim * sizeof(int64_t));
  set_err(g, vm_builder_const_shape(g->b, ndim, dims, &s.idx));
  if (g->err) return 0;
  if (grow((void **)&g->shapes, &g->cap_shapes, g->num_shapes, sizeof(s)) != 0) {
    set_err(g, vm_status_make(VM_RESOURCE_EXHAUSTED, "graph: out of host memory"));
    return 0;
  }
  g->shapes[g->num_shapes++] = s;
  *slot = g->num_shapes;
  return s.idx;
}

static uint32_t f32_const(vmcc_graph_t *g) {
  if (!g->has_f32_const && !g->err) {
    set_err(g, vm_builder_const_dtype(g->b, VM_F32, &g->f32_const));
    g->has_f32_const = 1;
  }
  return g->f32_const;
}

static uint32_t dtype_const(vmcc_graph_t *g, vm_dtype_t dt) {
  if (vm_dtype_equal(dt, VM_F32)) return f32_const(g);
  for (uint32_t i = 0; i < g->num_dtypes; i++)
    if (vm_dtype_equal(g->dtypes[i], dt)) return g->dtype_idx[i];
  uint32_t idx = 0;
  set_err(g, vm_builder_const_dtype(g->b, dt, &idx));
  if (!g->err && g->num_dtypes < DTYPE_CACHE) {
    g->dtypes[g->num_dtypes] = dt;
    g->dtype_idx[g->num_dtypes++] = idx;
  }
  return idx;
}

static uint32_t scope_const(vmcc_graph_t *g) {
  if (!g->has_scope_const && !g->err) {
    set_err(g, vm_builder_const_string(g->b, "global", 6, &g->scope_const));
    g->has_scope_const = 1;
  }
  return g->scope_const;
}

static uint32_t packed(vmcc_graph_t *g, const char *name) {
  uint32_t idx = 0;
  if (!g->err) set_err(g, vm_builder_declare_packed(g->b, name, &idx));
  return idx;
}

static void emit(vmcc_graph_t *g, int64_t dst, uint32_t func, uint32_t nargs,
                 const int64_t *words) {
  if (!g->err) set_err(g, vm_builder_emit_call(g->b, dst, func, nargs, words));
}

/* %dst = vm.builtin.alloc_storage(%vm, (elems,), 0, float32, "global") for
 * nbytes rounded up to whole floats (the hint only sizes the storage). */
static void emit_alloc_storage(vmcc_graph_t *g, int64_t dst, uint64_t nbytes) {
  int64_t elems = (int64_t)((nbytes + 3) / 4);
  int64_t w[5] = {VM_REG(VM_REG_VM), VM_CONSTI(shape_const(g, 1, &elems)), VM_IMM(0),
                  VM_CONSTI(f32_const(g)), VM_CONSTI(scope_const(g))};
  emit(g, dst, packed(g, "vm.builtin.alloc_storage"), 5, w);
}

static void emit_alloc_tensor(vmcc_graph_t *g, const gtensor_t *t, int64_t storage_reg,
                              uint64_t offset) {
  int64_t w[4] = {VM_REG(storage_reg), VM_IMM((int64_t)offset),
                  VM_CONSTI(shape_const(g, t->ndim, t->shape)), VM_CONSTI(dtype_const(g, t->dt))};
  emit(g, t->reg, packed(g, "vm.builtin.alloc_tensor"), 4, w);
}

static void emit_kill(vmcc_graph_t *g, int64_t reg) {
  int64_t w[1] = {VM_REG(reg)};
  emit(g, reg, packed(g, "vm.builtin.kill"), 1, w);
}

/* check_tensor_info(x, ndim, dtype, ctx) and match_shape(x, dims...) for a
 * typed parameter, as TVM emits them: invoke() with a wrong tensor then
 * fails with a clear message instead of inside an operator. */
static void emit_param_checks(vmcc_graph_t *g, const gtensor_t *t, const char *pname) {
  char ctx[160];
  snprintf(ctx, sizeof(ctx), "%s: parameter %s", g->func_name, pname);
  uint32_t cctx = 0;
  if (!g->err) set_err(g, vm_builder_const_string(g->b, ctx, strlen(ctx), &cctx));
  int64_t w1[4] = {VM_REG(t->index), VM_IMM(t->ndim), VM_CONSTI(dtype_const(g, t->dt)),
                   VM_CONSTI(cctx)};
  emit(g, VM_REG_VOID, packed(g, "vm.builtin.check_tensor_info"), 4, w1);
  int64_t w2[1 + VMCC_MAX_NDIM];
  w2[0] = VM_REG(t->index);
  for (uint32_t i = 0; i < t->ndim; i++) w2[1 + i] = VM_IMM(t->shape[i]);
  emit(g, VM_REG_VOID, packed(g, "vm.builtin.match_shape"), 1 + t->ndim, w2);
}

/* Walks the calls: who produces each intermediate, and its last use
 * (through views too). */
static vm_status_t compute_lifetimes(vmcc_graph_t *g) {
  for (uint32_t i = 0; i < g->num_tensors; i++)
    if (g->tensors[i].kind == T_RESULT) g->tensors[i].produced_at = -1;
  for (uint32_t i = 0; i < g->num_calls; i++) {
    const gcall_t *c = &g->calls[i];
    /* a control call's results first: they are made by it (and their
     * registers must differ from its arguments', which it reads first) */
    for (uint32_t k = 0; k < c->nouts; k++) {
      gtensor_t *t = &g->tensors[c->outs[k]];
      t->produced_at = i;
      t->last_ref = i;
    }
    for (uint32_t k = 0; k <= c->nargs; k++) {
      int64_t tid;
      if (k < c->nargs) {
        if (c->args[k].kind != VMCC_ARG_TENSOR) continue;
        tid = c->args[k].v;
      } else {
        if (c->dst < 0) continue;
        tid = c->dst;
      }
      gtensor_t *t = &g->tensors[tid];
      if (t->kind == T_RESULT) {
        if (t->produced_at < 0)
          return vm_status_make(VM_INTERNAL, "graph: result %lld used before its call",
                                (long long)tid);
        t->last_ref = i;
        continue;
      }
      if (t->kind != T_INTER && t->kind != T_VIEW) continue;
      /* Destination passing: the first call naming an intermediate writes
       * it; a view is produced by its reshape (dst). */
      if (t->produced_at < 0) {
        if (t->kind == T_VIEW && tid != c->dst) {
          return vm_status_make(VM_INTERNAL, "graph: view %lld used before its reshape",
                                (long long)tid);
        }
        t->produced_at = i;
      }
      t->last_ref = i;
    }
  }
  for (uint32_t i = 0; i < g->num_tensors; i++) {
    gtensor_t *t = &g->tensors[i];
    if ((t->kind == T_INTER || t->kind == T_VIEW) && t->produced_at < 0) {
      return vm_status_make(VM_INVALID_ARGUMENT, "graph: intermediate %u is never used", i);
    }
    if (t->kind == T_RESULT && t->produced_at < 0)
      return vm_status_make(VM_INVALID_ARGUMENT, "graph: result %u has no call", i);
    if (t->kind == T_INTER && t->last < t->last_ref) t->last = t->last_ref;
    if (t->kind == T_VIEW) {
      gtensor_t *r = &g->tensors[t->root];
      if (r->last < t->last_ref) r->last = t->last_ref;
    }
  }
  return VM_STATUS_OK;
}

/* The register a call argument reads. */
static int64_t arg_word(vmcc_graph_t *g, const vmcc_arg_t *a, int64_t null_reg) {
  switch (a->kind) {
    case VMCC_ARG_TENSOR: {
      const gtensor_t *t = &g->tensors[a->v];
      if (t->kind == T_PARAM) return VM_REG(t->index);
      if (t->kind == T_WEIGHT) return VM_CONSTI(t->index);
      return VM_REG(t->reg);
    }
    case VMCC_ARG_IMM: return VM_IMM(a->v);
    case VMCC_ARG_CONST: return VM_CONSTI(a->v);
    case VMCC_ARG_VM: return VM_REG(VM_REG_VM);
    case VMCC_ARG_NONE: return VM_REG(null_reg);
    case VMCC_ARG_INTS: break; /* a register of the call, set by the caller */
  }
  return VM_IMM(0);
}

/* Gives every intermediate and view a register from `base` on, in call
 * order: a tensor takes a free register before the call that produces it,
 * and its register is free again after the call that releases it
 * (kill_off/kills: each call's releases, see vmcc_graph_emit_multi).
 * Returns the first register after those used, -1 when out of memory. */
static int64_t assign_registers(vmcc_graph_t *g, const uint32_t *kill_off, const uint32_t *kills,
                                int64_t base) {
  uint32_t *born_off = calloc((size_t)g->num_calls + 1, sizeof(*born_off));
  uint32_t *born = malloc((g->num_tensors ? g->num_tensors : 1) * sizeof(*born));
  int64_t *free_regs = malloc((g->num_tensors ? g->num_tensors : 1) * sizeof(*free_regs));
  int64_t next = base;
  if (!born_off || !born || !free_regs) {
    next = -1;
    goto out;
  }
  /* the tensors each call produces, in index order (counts, then starts) */
  for (uint32_t t = 0; t < g->num_tensors; t++) {
    const gtensor_t *x = &g->tensors[t];
    if ((x->kind == T_INTER || x->kind == T_VIEW || x->kind == T_RESULT) && x->produced_at >= 0)
      born_off[x->produced_at + 1]++;
  }
  for (uint32_t i = 0; i < g->num_calls; i++) born_off[i + 1] += born_off[i];
  for (uint32_t t = 0; t < g->num_tensors; t++) {
    gtensor_t *x = &g->tensors[t];
    if ((x->kind == T_INTER || x->kind == T_VIEW || x->kind == T_RESULT) && x->produced_at >= 0)
      born[born_off[x->produced_at]++] = t; /* ends at the next call's start */
  }
  size_t nfree = 0;
  for (uint32_t i = 0; i < g->num_calls; i++) {
    for (uint32_t q = i ? born_off[i - 1] : 0; q < born_off[i]; q++)
      g->tensors[born[q]].reg = nfree ? free_regs[--nfree] : next++;
    for (uint32_t q = i ? kill_off[i - 1] : 0; q < kill_off[i]; q++)
      if (!(kills[q] & 0x80000000u)) free_regs[nfree++] = g->tensors[kills[q]].reg;
  }
out:
  free(born_off);
  free(born);
  free(free_regs);
  return next;
}

/* The result registers of a control call's function: one result
 * straight into its register, several through a tuple. */
static void emit_fn_call(vmcc_graph_t *g, const gcall_t *c, uint32_t func, uint32_t first_arg,
                         const int64_t *words, int64_t tup) {
  uint32_t n = c->nargs - first_arg;
  if (c->nouts == 1) {
    emit(g, g->tensors[c->outs[0]].reg, func, n, words + first_arg);
    return;
  }
  emit(g, tup, func, n, words + first_arg);
  for (uint32_t k = 0; k < c->nouts; k++) {
    int64_t w[2] = {VM_REG(tup), VM_IMM(k)};
    emit(g, g->tensors[c->outs[k]].reg, packed(g, "vm.builtin.tuple_getitem"), 2, w);
  }
  emit_kill(g, tup);
}

/* A control call (vmcc_graph_if / vmcc_graph_loop) with Goto and If:
 *
 *   if:   %f = read_if_cond(cond); if %f else L1; outs = then(args); goto L2;
 *         L1: outs = else(args); L2:
 *   loop: %c = copy(cond); outs = copy(init);
 *         L0: %f = read_if_cond(%c); if %f else L1;
 *         %t = body(outs, extra); %c = %t[0]; outs = %t[1..]; goto L0; L1:
 */
static void emit_ctl(vmcc_graph_t *g, const gcall_t *c, int64_t *words, int64_t null_reg,
                     int64_t ctl_reg) {
  int64_t cond = ctl_reg, flag = ctl_reg + 1, tup = ctl_reg + 2;
  for (uint32_t k = 0; k < c->nargs; k++) words[k] = arg_word(g, &c->args[k], null_reg);
  uint32_t rd = packed(g, "vm.builtin.read_if_cond");
  if (g->err) return;
  if (c->ctl == C_IF) {
    vm_label_t l_else = vm_builder_new_label(g->b), l_end = vm_builder_new_label(g->b);
    emit(g, flag, rd, 1, words);
    if (!g->err) set_err(g, vm_builder_emit_if(g->b, flag, l_else));
    emit_fn_call(g, c, c->func, 1, words, tup);
    if (!g->err) set_err(g, vm_builder_emit_goto(g->b, l_end));
    if (!g->err) set_err(g, vm_builder_bind_label(g->b, l_else));
    emit_fn_call(g, c, c->func2, 1, words, tup);
    if (!g->err) set_err(g, vm_builder_bind_label(g->b, l_end));
    emit_kill(g, flag);
    return;
  }
  /* C_LOOP: args are cond, the state's initial values, then the extra
   * arguments; the body takes the state and the extra arguments and
   * returns (cond, state...) */
  uint32_t cp = packed(g, "vm.builtin.copy"), gi = packed(g, "vm.builtin.tuple_getitem");
  emit(g, cond, cp, 1, words);
  for (uint32_t k = 0; k < c->nouts; k++)
    emit(g, g->tensors[c->outs[k]].reg, cp, 1, words + 1 + k);
  for (uint32_t k = 0; k < c->nouts; k++) words[1 + k] = VM_REG(g->tensors[c->outs[k]].reg);
  vm_label_t l_top = vm_builder_new_label(g->b), l_end = vm_builder_new_label(g->b);
  if (!g->err) set_err(g, vm_builder_bind_label(g->b, l_top));
  int64_t wc[1] = {VM_REG(cond)};
  emit(g, flag, rd, 1, wc);
  if (!g->err) set_err(g, vm_builder_emit_if(g->b, flag, l_end));
  emit(g, tup, c->func, c->nargs - 1, words + 1);
  int64_t w[2] = {VM_REG(tup), VM_IMM(0)};
  emit(g, cond, gi, 2, w);
  for (uint32_t k = 0; k < c->nouts; k++) {
    w[1] = VM_IMM(k + 1);
    emit(g, g->tensors[c->outs[k]].reg, gi, 2, w);
  }
  emit_kill(g, tup);
  if (!g->err) set_err(g, vm_builder_emit_goto(g->b, l_top));
  if (!g->err) set_err(g, vm_builder_bind_label(g->b, l_end));
  emit_kill(g, flag);
  emit_kill(g, cond);
}

vm_status_t vmcc_graph_emit(vmcc_graph_t *g, int32_t output, vmcc_plan_report_t *report) {
  return vmcc_graph_emit_multi(g, 1, &output, report);
}

vm_status_t vmcc_graph_emit_multi(vmcc_graph_t *g, uint32_t num_outputs, const int32_t *outputs,
                                  vmcc_plan_report_t *report) {
  vm_plan_tensor_t *pt = NULL;
  int64_t *storage_reg = NULL, *storage_last = NULL, *words = NULL, *out_storage_reg = NULL;
  int32_t *out_of = NULL;     /* per tensor: its index among the outputs, or -1 */
  int32_t *own_of = NULL;     /* per tensor: the output whose storage it is written in, or -1 */
  uint32_t *kill_off = NULL;  /* per call: start of what it releases in kills */
  uint32_t *kills = NULL;     /* tensors, then storages (bit 31), by call */
  vm_plan_t plan;
  memset(&plan, 0, sizeof(plan));
  vm_status_t st = VM_STATUS_OK;
  if (g->err) {
    st = g->err;
    g->err = NULL;
    return st;
  }
  if (num_outputs == 0 || !outputs)
    return vm_status_make(VM_INVALID_ARGUMENT, "graph: a function needs an output");
  out_of = malloc((g->num_tensors ? g->num_tensors : 1) * sizeof(*out_of));
  own_of = malloc((g->num_tensors ? g->num_tensors : 1) * sizeof(*own_of));
  if (!out_of || !own_of) goto nomem;
  for (uint32_t i = 0; i < g->num_tensors; i++) out_of[i] = own_of[i] = -1;
  /* An output is an intermediate or a view of one (or of a control call's
   * result): a view is returned as is, its root written in the output's
   * storage. Two outputs never share memory. */
  for (uint32_t i = 0; i < num_outputs; i++) {
    if (!vmcc_graph_is_returnable(g, outputs[i])) {
      st = vm_status_make(VM_INVALID_ARGUMENT,
                          "graph: output %d is not an intermediate or a view of one",
                          outputs[i]);
      goto fail;
    }
    int32_t r = vmcc_graph_root(g, outputs[i]);
    if (out_of[outputs[i]] >= 0 || own_of[r] >= 0) {
      st = vm_status_make(VM_INVALID_ARGUMENT, "graph: output %d is returned twice", outputs[i]);
      goto fail;
    }
    out_of[outputs[i]] = (int32_t)i;
    own_of[r] = (int32_t)i;
  }
  st = compute_lifetimes(g);
  if (st) goto fail;
  /* a trimmed output's count lives to the return (never released) */
  for (uint32_t i = 0; i < g->num_trims; i++) {
    if (out_of[g->trims[i].t] < 0) {
      st = vm_status_make(VM_INVALID_ARGUMENT, "graph: trimmed tensor %d is not returned",
                          g->trims[i].t);
      goto fail;
    }
    gtensor_t *ct = &g->tensors[g->trims[i].count];
    ct->last_ref = ct->last = g->num_calls;
  }

  /* Plan every intermediate but the outputs: an output must survive the
   * return, so it cannot share memory that later calls reuse. */
  pt = calloc(g->num_tensors ? g->num_tensors : 1, sizeof(*pt));
  if (!pt) goto nomem;
  uint32_t np = 0;
  uint32_t max_args = 4;
  for (uint32_t i = 0; i < g->num_tensors; i++) {
    gtensor_t *t = &g->tensors[i];
    if (t->kind != T_INTER || own_of[i] >= 0) continue;
    t->plan_idx = np;
    pt[np].nbytes = t->nbytes;
    pt[np].first_step = (uint32_t)t->produced_at;
    pt[np].last_step = (uint32_t)t->last;
    pt[np].device = 0;
    np++;
  }
  st = vm_plan_memory(pt, np, g->align, &plan);
  if (st) goto fail;

  /* Registers: parameters, then one per storage, the intermediates and
   * views (a register is reused once the tensor in it is released), the
   * none register, the outputs' storages, the int lists of one call and
   * the result tuple. */
  int64_t next = g->num_params;
  storage_reg = calloc(plan.num_storages ? plan.num_storages : 1, sizeof(*storage_reg));
  storage_last = calloc(plan.num_storages ? plan.num_storages : 1, sizeof(*storage_last));
  out_storage_reg = calloc(num_outputs, sizeof(*out_storage_reg));
  if (!storage_reg || !storage_last || !out_storage_reg) goto nomem;
  for (uint32_t s = 0; s < plan.num_storages; s++) {
    storage_reg[s] = next++;
    storage_last[s] = -1;
  }
  int needs_null = 0;
  uint32_t max_lists = 0;
  for (uint32_t i = 0; i < g->num_tensors; i++) {
    gtensor_t *t = &g->tensors[i];
    if (t->plan_idx >= 0) {
      uint32_t s = plan.storage_of[t->plan_idx];
      if (storage_last[s] < t->last) storage_last[s] = t->last;
    }
  }
  /* what each call releases: intermediates and views whose last use it is
   * (the outputs are returned), then storages, each in index order */
  kill_off = calloc((size_t)g->num_calls + 1, sizeof(*kill_off));
  if (!kill_off) goto nomem;
  for (int pass = 0; pass < 2; pass++) {
    for (uint32_t t = 0; t < g->num_tensors; t++) {
      const gtensor_t *x = &g->tensors[t];
      if ((x->kind != T_INTER && x->kind != T_VIEW && x->kind != T_RESULT) || out_of[t] >= 0 ||
          x->last_ref < 0)
        continue;
      if (pass) kills[kill_off[x->last_ref]++] = t;
      else kill_off[x->last_ref]++;
    }
    for (uint32_t s = 0; s < plan.num_storages; s++) {
      if (storage_last[s] < 0) continue;
      if (pass) kills[kill_off[storage_last[s]]++] = s | 0x80000000u;
      else kill_off[storage_last[s]]++;
    }
    if (pass) break;
    /* counts to starts, shifted by one call: pass 1 moves each start to the
     * next call's */
    uint64_t total = 0;
    for (uint32_t i = 0; i <= g->num_calls; i++) {
      uint32_t n = kill_off[i];
      kill_off[i] = (uint32_t)total;
      total += n;
    }
    if (total >= 0x80000000u) goto nomem;
    kills = malloc((total ? total : 1) * sizeof(*kills));
    if (!kills) goto nomem;
  }
  next = assign_registers(g, kill_off, kills, next);
  if (next < 0) goto nomem;
  for (uint32_t i = 0; i < g->num_calls; i++) {
    if (g->calls[i].nargs > max_args) max_args = g->calls[i].nargs;
    uint32_t lists = 0;
    for (uint32_t k = 0; k < g->calls[i].nargs; k++) {
      if (g->calls[i].args[k].kind == VMCC_ARG_NONE) needs_null = 1;
      if (g->calls[i].args[k].kind == VMCC_ARG_INTS) lists++;
    }
    if (lists > max_lists) max_lists = lists;
  }
  if (num_outputs > max_args) max_args = num_outputs;
  if (VMCC_MAX_INTS > max_args) max_args = VMCC_MAX_INTS;
  int64_t null_reg = needs_null ? next++ : -1;
  for (uint32_t o = 0; o < num_outputs; o++) out_storage_reg[o] = next++;
  int64_t list_reg0 = next;
  next += max_lists;
  int64_t tuple_reg = next++;
  int64_t trim_reg0 = next; /* the trimmed views returned */
  next += g->num_trims;
  int64_t ctl_reg = next; /* control calls: the condition, the flag read, the tuple */
  next += 3;
  words = malloc(max_args * sizeof(*words));
  if (!words) goto nomem;

  set_err(g, vm_builder_begin_function(g->b, g->func));

  /* entry: parameter checks, shared storages, the none value */
  for (uint32_t i = 0; i < g->num_tensors; i++) {
    const gtensor_t *t = &g->tensors[i];
    if (t->kind != T_PARAM) continue;
    emit_param_checks(g, t, t->name);
  }
  for (uint32_t s = 0; s < plan.num_storages; s++)
    emit_alloc_storage(g, storage_reg[s], plan.storage_bytes[s]);
  if (needs_null) emit(g, null_reg, packed(g, "vm.builtin.null_value"), 0, NULL);

  for (uint32_t i = 0; i < g->num_calls && !g->err; i++) {
    const gcall_t *c = &g->calls[i];
    if (c->ctl != C_CALL) {
      emit_ctl(g, c, words, null_reg, ctl_reg);
      goto release;
    }
    /* allocate what this call produces, right before it */
    for (uint32_t k = 0; k < c->nargs; k++) {
      if (c->args[k].kind != VMCC_ARG_TENSOR) continue;
      const gtensor_t *t = &g->tensors[c->args[k].v];
      if (t->kind != T_INTER || t->produced_at != (int64_t)i) continue;
      /* the same tensor named twice in one call is allocated once */
      int dup = 0;
      for (uint32_t j = 0; j < k; j++)
        if (c->args[j].kind == VMCC_ARG_TENSOR && c->args[j].v == c->args[k].v) dup = 1;
      if (dup) continue;
      int32_t out_idx = own_of[c->args[k].v];
      if (out_idx >= 0) {
        emit_alloc_storage(g, out_storage_reg[out_idx], t->nbytes);
        emit_alloc_tensor(g, t, out_storage_reg[out_idx], 0);
      } else {
        emit_alloc_tensor(g, t, storage_reg[plan.storage_of[t->plan_idx]],
                          plan.offset_of[t->plan_idx]);
      }
    }
    /* int lists: tuples of immediates, built right before the call */
    uint32_t nl = 0;
    for (uint32_t k = 0; k < c->nargs; k++) {
      if (c->args[k].kind != VMCC_ARG_INTS) continue;
      const int_list_t *l = &g->lists[c->args[k].v];
      int64_t lw[VMCC_MAX_INTS];
      for (uint32_t j = 0; j < l->n; j++) {
        if (!l->is_float) {
          lw[j] = VM_IMM(l->v[j]);
          continue;
        }
        uint32_t fc = 0;
        if (!g->err) set_err(g, vm_builder_const_float(g->b, l->f[j], &fc));
        lw[j] = VM_CONSTI(fc);
      }
      emit(g, list_reg0 + nl, packed(g, "vm.builtin.make_tuple"), l->n, lw);
      nl++;
    }
    nl = 0;
    for (uint32_t k = 0; k < c->nargs; k++) {
      if (c->args[k].kind == VMCC_ARG_INTS)
        words[k] = VM_REG(list_reg0 + nl++);
      else
        words[k] = arg_word(g, &c->args[k], null_reg);
    }
    int64_t dst = VM_REG_VOID;
    if (c->dst >= 0) {
      const gtensor_t *v = &g->tensors[c->dst];
      dst = v->reg;
      /* the reshape's second argument is the view's shape */
      words[1] = VM_CONSTI(shape_const(g, v->ndim, v->shape));
    }
    emit(g, dst, c->func, c->nargs, words);
    for (uint32_t j = 0; j < nl; j++) emit_kill(g, list_reg0 + j);
  release:
    /* release registers whose last use this was (after pass 1 above,
     * call i's kills end where call i + 1's start) */
    for (uint32_t q = i ? kill_off[i - 1] : 0; q < kill_off[i]; q++)
      emit_kill(g, kills[q] & 0x80000000u ? storage_reg[kills[q] & 0x7fffffffu]
                                          : g->tensors[kills[q]].reg);
  }
  /* each trimmed output returns as vm.builtin.trim_dim(output, count, axis) */
  int64_t *ret_reg = out_storage_reg; /* reused: the storages' registers are done with */
  for (uint32_t o = 0; o < num_outputs; o++) ret_reg[o] = g->tensors[outputs[o]].reg;
  for (uint32_t i = 0; i < g->num_trims; i++) {
    const gtrim_t *tr = &g->trims[i];
    int64_t w[3] = {VM_REG(g->tensors[tr->t].reg), VM_REG(g->tensors[tr->count].reg),
                    VM_IMM(tr->axis)};
    emit(g, trim_reg0 + i, packed(g, "vm.builtin.trim_dim"), 3, w);
    ret_reg[out_of[tr->t]] = trim_reg0 + i;
  }
  if (num_outputs == 1) {
    if (!g->err) set_err(g, vm_builder_emit_ret(g->b, ret_reg[0]));
  } else {
    for (uint32_t o = 0; o < num_outputs; o++) words[o] = VM_REG(ret_reg[o]);
    emit(g, tuple_reg, packed(g, "vm.builtin.make_tuple"), num_outputs, words);
    if (!g->err) set_err(g, vm_builder_emit_ret(g->b, tuple_reg));
  }
  if (!g->err) set_err(g, vm_builder_end_function(g->b, 0));
  if (g->err) {
    st = g->err;
    g->err = NULL;
    goto fail;
  }

  if (report) {
    memset(report, 0, sizeof(*report));
    report->planned_bytes = plan.planned_bytes;
    report->unplanned_bytes = plan.unplanned_bytes;
    report->live_peak_bytes = plan.live_peak_bytes;
    report->num_storages = plan.num_storages;
    report->num_tensors = np;
    for (uint32_t o = 0; o < num_outputs; o++)
      report->output_bytes += g->tensors[outputs[o]].nbytes;
  }
  st = VM_STATUS_OK;
  goto done;

nomem:
  st = vm_status_make(VM_RESOURCE_EXHAUSTED, "graph: out of host memory");
fail:
done:
  vm_plan_free(&plan);
  free(pt);
  free(out_of);
  free(own_of);
  free(kill_off);
  free(kills);
  free(storage_reg);
  free(storage_last);
  free(out_storage_reg);
  free(words);
  return st;
}
