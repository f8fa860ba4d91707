/* ONNX control flow: If, Loop and Scan (docs/onnx.md, "Control flow").
 *
 * A subgraph is lowered in the context of its node: it gets a name table
 * of its own (its values, and the outer values it reads, linked to theirs),
 * its values are appended to the context's and dropped again after it, so
 * a body lowered once per iteration redefines its names each time.
 *
 *  - If with a condition known at compile time: only the taken branch is
 *    lowered, inline. With a run-time condition each branch becomes a
 *    bytecode function of the run-time outer values it reads, and the node
 *    the VM's If over two calls (vmcc_graph_if).
 *  - Loop with a trip count and a condition known at compile time, and
 *    Scan: the body is lowered once per iteration with the iteration
 *    number a constant (so the index arithmetic of the body folds), the
 *    carried values passed from one iteration to the next, scan outputs
 *    stacked. At most ONX_MAX_UNROLL_NODES nodes an unrolled loop.
 *  - Loop with a run-time condition or trip count (and no scan outputs,
 *    whose length would not be static): a VM loop (vmcc_graph_loop) over a
 *    bytecode function of the body that also computes the next iteration
 *    number and whether to go on.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_ops.h"

/* The dims of a scalar (none; a pointer for the helpers that compare dims) */
static const int64_t k_scalar[1] = {0};

uint64_t onx_graph_values(const Onnx__GraphProto *g, int *has_sub) {
  uint64_t n = (uint64_t)g->n_initializer + g->n_input, sub = 0;
  for (size_t i = 0; i < g->n_node; i++) {
    const Onnx__NodeProto *nd = g->node[i];
    if (!nd) continue;
    n += nd->n_output + onx_sub_budget(nd); /* a composite's sub-node values */
    uint64_t s = 0;
    for (size_t a = 0; a < nd->n_attribute; a++) {
      const Onnx__AttributeProto *at = nd->attribute[a];
      if (!at) continue;
      if (at->g) s += onx_graph_values(at->g, has_sub), *has_sub = 1;
      for (size_t q = 0; q < at->n_graphs; q++)
        if (at->graphs[q]) s += onx_graph_values(at->graphs[q], has_sub), *has_sub = 1;
    }
    if (s > sub) sub = s;
  }
  /* 2 per node output beyond that: an unrolled loop's carried values and
   * scan slices live outside the table, its stacked outputs in it; 8 for
   * the headroom onx_sub keeps */
  return n + sub + 8;
}

/* ---------------------------------------------------------------------------
 * Functions of subgraphs
 */

static vm_status_t push_subfn(onx_ctx_t *c, vmcc_graph_t *g, uint32_t nout, const int32_t *outs) {
  if (c->num_subfns >= c->cap_subfns) {
    uint32_t ncap = c->cap_subfns ? c->cap_subfns * 2 : 8;
    onx_subfn_t *p = realloc(c->subfns, ncap * sizeof(*p));
    if (!p) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory");
    c->subfns = p;
    c->cap_subfns = ncap;
  }
  int32_t *o = malloc((nout ? nout : 1) * sizeof(*o));
  if (!o) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory");
  memcpy(o, outs, nout * sizeof(*o));
  c->subfns[c->num_subfns++] = (onx_subfn_t){g, nout, o};
  return VM_STATUS_OK;
}

vm_status_t onx_emit_subfns(onx_ctx_t *c) {
  for (uint32_t i = 0; i < c->num_subfns; i++) {
    vm_status_t st = vmcc_graph_emit_multi(c->subfns[i].g, c->subfns[i].nout, c->subfns[i].outs,
                                           NULL);
    if (st) return st;
  }
  return VM_STATUS_OK;
}

void onx_free_subfns(onx_ctx_t *c) {
  for (uint32_t i = 0; i < c->num_subfns; i++) {
    vmcc_graph_free(c->subfns[i].g);
    free(c->subfns[i].outs);
  }
  free(c->subfns);
  c->subfns = NULL;
  c->num_subfns = c->cap_subfns = 0;
}

/* ---------------------------------------------------------------------------
 * Scopes
 */

typedef struct scope {
  const Onnx__GraphProto *graph;
  onx_names_t names;
  uint8_t *skip;
  const Onnx__NodeProto *node;
  const onx_op_t *op;
  uint32_t node_idx;
  int fused;
  uint32_t mark; /* c->num_vals on entry */
} scope_t;

/* A detached copy of a value (its data duplicated): what a subgraph
 * gives back, or binds to a subgraph's input. */
static vm_status_t copy_value(const onx_value_t *src, onx_value_t *dst) {
  *dst = *src;
  dst->expr = NULL;
  dst->data = NULL;
  if (src->data) {
    size_t nb = (size_t)onx_nbytes(src->dt, src->numel);
    dst->data = malloc(nb ? nb : 1);
    if (!dst->data) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory");
    if (nb) memcpy(dst->data, src->data, nb);
  }
  return VM_STATUS_OK;
}

static void free_values(onx_value_t *v, uint32_t n) {
  for (uint32_t i = 0; v && i < n; i++) free(v[i].data);
  free(v);
}

/* Calls fn(c, name, v, arg) for every name that the nodes of g and of the
 * subgraphs within it read, and g's outputs name, which is an outer value
 * v of the current scope (a name once per reference). */
typedef vm_status_t (*outer_fn)(onx_ctx_t *c, const char *name, onx_value_t *v, void *arg);

static vm_status_t walk_outer(onx_ctx_t *c, const Onnx__GraphProto *g, uint32_t depth,
                              outer_fn fn, void *arg) {
  if (depth > ONX_MAX_SUB_DEPTH)
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "subgraphs nest more than %d deep: flatten the model's control flow",
                        ONX_MAX_SUB_DEPTH);
  for (size_t i = 0; i < g->n_node; i++) {
    const Onnx__NodeProto *nd = g->node[i];
    if (!nd) continue;
    for (size_t k = 0; k < nd->n_input; k++) {
      onx_value_t *v = onx_lookup(c, nd->input[k]);
      if (v) VM_RETURN_IF_ERROR(fn(c, nd->input[k], v, arg));
    }
    for (size_t a = 0; a < nd->n_attribute; a++) {
      const Onnx__AttributeProto *at = nd->attribute[a];
      if (!at) continue;
      if (at->g) VM_RETURN_IF_ERROR(walk_outer(c, at->g, depth + 1, fn, arg));
      for (size_t q = 0; q < at->n_graphs; q++)
        if (at->graphs[q]) VM_RETURN_IF_ERROR(walk_outer(c, at->graphs[q], depth + 1, fn, arg));
    }
  }
  for (size_t k = 0; k < g->n_output; k++) {
    const char *name = g->output[k] ? g->output[k]->name : NULL;
    onx_value_t *v = onx_lookup(c, name);
    if (v) VM_RETURN_IF_ERROR(fn(c, name, v, arg));
  }
  return VM_STATUS_OK;
}

/* walk_outer's fn: the name in the table arg, pointing at v. */
static vm_status_t link_one(onx_ctx_t *c, const char *name, onx_value_t *v, void *arg) {
  onx_name_t *e = onx_names_add(arg, name);
  if (!e) return vm_status_make(VM_RESOURCE_EXHAUSTED, "onnx: out of host memory");
  e->val = (int32_t)(v - c->vals);
  return VM_STATUS_OK;
}

/* Enters subgraph sub of the current node: a name table of its own, whose
 * names of outer values point at them. */
static vm_status_t scope_enter(onx_ctx_t *c, const Onnx__GraphProto *sub, const char *what,
                               scope_t *s) {
  if (c->depth >= ONX_MAX_SUB_DEPTH || c->sub_nodes + sub->n_node > ONX_MAX_SUB_NODES)
    c->hard_errors++;
  if (c->depth >= ONX_MAX_SUB_DEPTH)
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "%s: subgraphs nest more than %d deep: at most %d are lowered within "
                        "each other: flatten the model's control flow",
                        what, ONX_MAX_SUB_DEPTH, ONX_MAX_SUB_DEPTH);
  if (c->sub_nodes + sub->n_node > ONX_MAX_SUB_NODES)
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "%s: more than %u subgraph nodes to lower (unrolled iterations count "
                        "each time): at most %u are accepted",
                        what, ONX_MAX_SUB_NODES, ONX_MAX_SUB_NODES);
  c->sub_nodes += sub->n_node;
  memset(s, 0, sizeof(*s));
  vm_status_t st = onx_names_build(&s->names, sub);
  if (!st) st = walk_outer(c, sub, c->depth, link_one, &s->names);
  if (st) {
    onx_names_free(&s->names);
    return st;
  }
  s->skip = calloc(sub->n_node + 1, 1);
  if (!s->skip) {
    onx_names_free(&s->names);
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory");
  }
  onx_names_t outer = c->names;
  c->names = s->names;
  s->names = outer;
  s->graph = c->graph;
  s->node = c->node;
  s->op = c->op;
  s->node_idx = c->node_idx;
  s->fused = c->fused;
  uint8_t *sk = c->skip;
  c->skip = s->skip;
  s->skip = sk;
  c->graph = sub;
  s->mark = c->num_vals;
  c->depth++;
  return VM_STATUS_OK;
}

/* Leaves the subgraph: drops its values and restores the outer scope. */
static void scope_leave(onx_ctx_t *c, scope_t *s) {
  for (uint32_t i = s->mark; i < c->num_vals; i++) {
    free(c->vals[i].data);
    onx_expr_free(c->vals[i].expr);
    memset(&c->vals[i], 0, sizeof(c->vals[i]));
  }
  c->num_vals = s->mark;
  onx_names_free(&c->names);
  free(c->skip);
  c->names = s->names;
  c->skip = s->skip;
  c->graph = s->graph;
  c->node = s->node;
  c->op = s->op;
  c->node_idx = s->node_idx;
  c->fused = s->fused;
  c->depth--;
}

/* A subgraph's error, said at the control node: "node 'n' (If):
 * then_branch: node 'a' (Add): ...". */
static vm_status_t sub_err(onx_ctx_t *c, const char *what, vm_status_t st) {
  vm_code_t code = vm_status_code(st);
  vm_status_t e = onx_node_err(c, code == VM_INTERNAL ? VM_INVALID_ARGUMENT : code, "%s: %s", what,
                               vm_status_message(st));
  vm_status_free(st);
  return e;
}

/* Lowers subgraph sub in the current graph: its inputs bound to in[0..nin)
 * (copies; fewer than its inputs is an error), then its nodes; its outputs
 * come back as detached copies in *outs (sub->n_output of them). */
static vm_status_t lower_sub(onx_ctx_t *c, const Onnx__GraphProto *sub, const char *what,
                             uint32_t nin, const onx_value_t *in, onx_value_t **outs) {
  *outs = NULL;
  if (sub->n_input != nin)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "%s has %zu inputs, the node gives it %u", what,
                        sub->n_input, nin);
  if (sub->n_output == 0)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "%s has no outputs", what);
  scope_t s;
  VM_RETURN_IF_ERROR(scope_enter(c, sub, what, &s));
  vm_status_t st = VM_STATUS_OK;
  for (uint32_t k = 0; k < nin && !st; k++) {
    const Onnx__ValueInfoProto *vi = sub->input[k];
    if (!vi || !vi->name || !vi->name[0]) {
      st = vm_status_make(VM_INVALID_ARGUMENT, "input %u has no name", k);
      break;
    }
    onx_value_t *v;
    st = onx_add_value(c, vi->name, &v);
    if (st) break;
    uint32_t uses = v->uses;
    onx_value_t tmp;
    st = copy_value(&in[k], &tmp);
    if (st) break;
    *v = tmp;
    v->name = vi->name;
    v->uses = uses;
  }
  if (!st) st = onx_bind_initializers(c, sub);
  if (!st) st = onx_lower_graph(c);
  onx_value_t *o = NULL;
  if (!st) {
    o = calloc(sub->n_output, sizeof(*o));
    if (!o) st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory");
  }
  for (size_t k = 0; !st && k < sub->n_output; k++) {
    const Onnx__ValueInfoProto *vi = sub->output[k];
    onx_value_t *v = vi && vi->name ? onx_lookup(c, vi->name) : NULL;
    if (!v) {
      st = vm_status_make(VM_INVALID_ARGUMENT, "output %zu ('%.80s') is never computed", k,
                          vi && vi->name ? vi->name : "");
      break;
    }
    if (v->expr || v->lt_g) onx_tid(c, v); /* pending work: done in this graph */
    st = copy_value(v, &o[k]);
  }
  scope_leave(c, &s);
  if (st) {
    free_values(o, (uint32_t)sub->n_output);
    return sub_err(c, what, st);
  }
  if (vmcc_graph_error(c->g)) {
    free_values(o, (uint32_t)sub->n_output);
    return VM_STATUS_OK; /* the driver reports the graph's error at this node */
  }
  *outs = o;
  return VM_STATUS_OK;
}

vm_status_t onx_inline_graph(onx_ctx_t *c, const Onnx__GraphProto *g, const char *what,
                             const char *in, const char **out) {
  *out = NULL;
  onx_value_t *v = onx_lookup(c, in);
  if (!v) return onx_node_err(c, VM_INTERNAL, "%s: value '%.80s' is not defined", what, in);
  if (g->n_output != 1)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "%s has %zu outputs: it must have 1", what,
                        g->n_output);
  if (!v->data && onx_tid(c, v) < 0) return VM_STATUS_OK; /* the graph's error says why */
  onx_value_t *o;
  VM_RETURN_IF_ERROR(lower_sub(c, g, what, 1, v, &o));
  if (!o) return VM_STATUS_OK;
  vm_status_t st = VM_STATUS_OK;
  if (!vm_dtype_equal(o->dt, v->dt) || o->ndim != v->ndim ||
      memcmp(o->dims, v->dims, v->ndim * sizeof(int64_t)) != 0) {
    char a[32], b[32], da[96], db[96];
    st = onx_node_err(c, VM_INVALID_ARGUMENT, "%s gives %s%s for its input's %s%s: they must match",
                      what, dt_name(o->dt, a, sizeof(a)),
                      onx_dims_str(o->ndim, o->dims, da, sizeof(da)), dt_name(v->dt, b, sizeof(b)),
                      onx_dims_str(v->ndim, v->dims, db, sizeof(db)));
  } else if (o->data) {
    st = onx_sub_const(c, o->dt, o->ndim, o->dims, o->data, out);
    o->data = NULL;
  } else {
    const char *name = onx_sub_name(c);
    st = name ? onx_bind_named(c, name, o->tid, o->ndim, o->dims)
              : onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
    if (!st) *out = name;
  }
  free_values(o, 1);
  return st;
}

/* Defines output i of the node as the detached value v (its data taken). */
static vm_status_t def_from(onx_ctx_t *c, uint32_t i, onx_value_t *v) {
  if (!onx_out_wanted(c, i)) return VM_STATUS_OK;
  if (v->data) {
    uint8_t *d = v->data;
    v->data = NULL;
    return onx_def_const(c, i, v->dt, v->ndim, v->dims, d);
  }
  return onx_bind_out(c, i, v->tid, v->ndim, v->dims);
}

static const Onnx__GraphProto *graph_attr(onx_ctx_t *c, const char *name) {
  const Onnx__AttributeProto *a = onx_attr(c->node, name);
  return a && a->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH ? a->g : NULL;
}

static vm_status_t need_graph(onx_ctx_t *c, const char *name, const Onnx__GraphProto **out) {
  *out = graph_attr(c, name);
  if (!*out) return onx_node_err(c, VM_INVALID_ARGUMENT, "attribute '%s' (a graph) is missing", name);
  return VM_STATUS_OK;
}

/* ---------------------------------------------------------------------------
 * Run-time subgraphs: bytecode functions
 */

/* walk_outer's fn: v appended to the list arg (duplicates removed after). */
typedef struct capture_list {
  onx_value_t **list;
  uint32_t n, cap;
} capture_list_t;

static vm_status_t capture_one(onx_ctx_t *c, const char *name, onx_value_t *v, void *arg) {
  (void)c;
  (void)name;
  capture_list_t *l = arg;
  if (l->n == l->cap) {
    uint32_t ncap = l->cap ? l->cap * 2 : 16;
    onx_value_t **p = ncap > l->cap ? realloc(l->list, ncap * sizeof(*p)) : NULL;
    if (!p) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory");
    l->list = p;
    l->cap = ncap;
  }
  l->list[l->n++] = v;
  return VM_STATUS_OK;
}

static int cmp_value_ptr(const void *a, const void *b) {
  const onx_value_t *x = *(onx_value_t *const *)a, *y = *(onx_value_t *const *)b;
  return x < y ? -1 : x > y;
}

/* The outer values that graphs g0 and g1 (may be NULL) read, each once, in
 * a fresh array (*out, *n): the run-time ones first (*nrt of them, the
 * functions' parameters), then the constants (made again inside). Its cost
 * follows the subgraphs' references, not the size of the outer graph. */
static vm_status_t captures(onx_ctx_t *c, const Onnx__GraphProto *g0, const Onnx__GraphProto *g1,
                            onx_value_t ***out, uint32_t *n, uint32_t *nrt) {
  *out = NULL;
  *n = *nrt = 0;
  capture_list_t l = {NULL, 0, 0};
  vm_status_t st = walk_outer(c, g0, c->depth, capture_one, &l);
  if (!st && g1) st = walk_outer(c, g1, c->depth, capture_one, &l);
  if (st) {
    free(l.list);
    return st;
  }
  if (l.n) qsort(l.list, l.n, sizeof(*l.list), cmp_value_ptr);
  uint32_t m = 0;
  for (uint32_t i = 0; i < l.n; i++)
    if (!m || l.list[m - 1] != l.list[i]) l.list[m++] = l.list[i];
  /* run-time values first, in the order of the values */
  onx_value_t **sorted = malloc((m ? m : 1) * sizeof(*sorted));
  if (!sorted) {
    free(l.list);
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory");
  }
  uint32_t k = 0;
  for (int pass = 0; pass < 2; pass++)
    for (uint32_t i = 0; i < m; i++) {
      if (pass == 0 && (l.list[i]->expr || l.list[i]->lt_g)) onx_tid(c, l.list[i]);
      if ((pass == 0) == !l.list[i]->data) sorted[k++] = l.list[i];
      if (pass == 0 && !l.list[i]->data) (*nrt)++;
    }
  free(l.list);
  *out = sorted;
  *n = m;
  return VM_STATUS_OK;
}

/* A function being lowered: its graph, and the outer values whose tensors
 * it replaced (restored by fn_end). */
typedef struct fn {
  vmcc_graph_t *outer;
  vmcc_graph_t *g;
  const char *name;
  uint32_t idx;
  uint32_t nsaved;
  onx_value_t **saved; /* every value of the context, with its outer tid */
  int32_t *saved_tid;
} fn_t;

/* Starts function `name` of nparams parameters of the types of pv (the
 * run-time values the caller passes, whose tensors inside become the
 * parameters); the constants in consts (the outer ones the function
 * reads) are materialised again inside. */
static vm_status_t fn_begin(onx_ctx_t *c, const char *name, uint32_t nparams,
                            onx_value_t *const *pv, uint32_t nconsts, onx_value_t *const *consts,
                            fn_t *f) {
  memset(f, 0, sizeof(*f));
  const char **names = calloc(nparams + 1, sizeof(*names));
  size_t ns = (size_t)nparams + nconsts + 1;
  f->saved = calloc(ns, sizeof(*f->saved));
  f->saved_tid = calloc(ns, sizeof(*f->saved_tid));
  if (!names || !f->saved || !f->saved_tid) {
    free(names);
    free(f->saved);
    free(f->saved_tid);
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory");
  }
  for (uint32_t k = 0; k < nparams; k++) names[k] = pv[k]->name;
  vm_status_t st = vm_builder_declare_function(c->b, name, nparams, names, &f->idx);
  free(names);
  f->name = name;
  if (!st) st = vmcc_graph_create(c->b, f->idx, name, nparams, 0, &f->g);
  if (st) {
    free(f->saved);
    free(f->saved_tid);
    return st;
  }
  /* the outer tensors of what the function reads, restored by fn_end */
  for (uint32_t k = 0; k < nparams + nconsts; k++) {
    onx_value_t *v = k < nparams ? pv[k] : consts[k - nparams];
    f->saved[f->nsaved] = v;
    f->saved_tid[f->nsaved++] = v->tid;
    v->tid = -1;
  }
  for (uint32_t k = 0; k < nparams; k++)
    pv[k]->tid = vmcc_graph_param(f->g, k, pv[k]->name, pv[k]->dt, pv[k]->ndim, pv[k]->dims);
  f->outer = c->g;
  c->g = f->g;
  return VM_STATUS_OK;
}

/* Ends the function returning outs (their tensors inside it) and restores
 * the outer graph; the function is emitted after main. */
static vm_status_t fn_end(onx_ctx_t *c, fn_t *f, uint32_t nout, onx_value_t *outs, int ok) {
  vm_status_t st = VM_STATUS_OK;
  int32_t *t = NULL;
  if (ok) {
    t = calloc(nout + 1, sizeof(*t));
    if (!t) st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory");
    for (uint32_t k = 0; !st && k < nout; k++) {
      int32_t x = onx_tid(c, &outs[k]);
      int dup = 0;
      for (uint32_t j = 0; j < k; j++) /* the same memory returned already */
        dup |= t[j] >= 0 && vmcc_graph_root(f->g, t[j]) == vmcc_graph_root(f->g, x);
      t[k] = onx_returned(c, &outs[k], x, dup);
    }
    if (!st && vmcc_graph_error(f->g)) ok = 0; /* reported by the caller */
  }
  /* backwards: a value saved twice gets its first (outer) tensor back */
  for (uint32_t i = f->nsaved; i-- > 0;) f->saved[i]->tid = f->saved_tid[i];
  free(f->saved);
  free(f->saved_tid);
  c->g = f->outer;
  if (!st && ok) st = push_subfn(c, f->g, nout, t);
  else if (!st && !ok && vmcc_graph_error(f->g)) {
    vm_status_t ge = vmcc_graph_error(f->g);
    st = vm_status_make(vm_status_code(ge) == VM_INTERNAL ? VM_INVALID_ARGUMENT : vm_status_code(ge),
                        "%s", vm_status_message(ge));
  }
  if (st || !ok) vmcc_graph_free(f->g);
  free(t);
  f->g = NULL;
  return st;
}

/* What a branch put off to run time says after its error. */
static const char k_raise_note[] =
    " (this branch of a run-time If cannot run with the input shapes the model was compiled for: "
    "taking it fails)";

/* Defines function f (declared by fn_begin, its lowering failed with why)
 * as one that fails with why's code and message when it runs: a call of
 * vm.builtin.raise and nout one-element placeholders, never returned. Its
 * parameters are the nparams values pv, as fn_begin declared them. */
static vm_status_t fn_raise(onx_ctx_t *c, const fn_t *f, uint32_t nparams,
                            onx_value_t *const *pv, uint32_t nout, vm_status_t why) {
  vmcc_graph_t *g;
  VM_RETURN_IF_ERROR(vmcc_graph_create(c->b, f->idx, f->name, nparams, 0, &g));
  for (uint32_t k = 0; k < nparams; k++)
    vmcc_graph_param(g, k, pv[k]->name, pv[k]->dt, pv[k]->ndim, pv[k]->dims);
  char *msg = NULL;
  size_t nmsg = strlen(vm_status_message(why)) + sizeof(k_raise_note);
  uint32_t cmsg = 0;
  vm_status_t st = VM_STATUS_OK;
  if (!(msg = malloc(nmsg))) st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory");
  if (!st) {
    snprintf(msg, nmsg, "%s%s", vm_status_message(why), k_raise_note);
    st = vm_builder_const_string(c->b, msg, strlen(msg), &cmsg);
  }
  free(msg);
  vmcc_arg_t *a = st ? NULL : calloc(2 + nout, sizeof(*a));
  int32_t *outs = st ? NULL : calloc(nout + 1, sizeof(*outs));
  if (!st && (!a || !outs)) st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory");
  if (!st) {
    static const int64_t one[1] = {1};
    a[0] = vmcc_a_imm(vm_status_code(why));
    a[1] = vmcc_a_const(cmsg);
    for (uint32_t k = 0; k < nout; k++) {
      outs[k] = vmcc_graph_tensor(g, VM_F32, 1, one);
      a[2 + k] = vmcc_a_t(outs[k]);
    }
    vmcc_graph_call(g, "vm.builtin.raise", 2 + nout, a);
    st = vmcc_graph_error(g) ? vm_status_make(vm_status_code(vmcc_graph_error(g)), "%s",
                                              vm_status_message(vmcc_graph_error(g)))
                             : push_subfn(c, g, nout, outs);
  }
  if (st) vmcc_graph_free(g);
  free(a);
  free(outs);
  return st;
}

/* ---------------------------------------------------------------------------
 * If
 */

static int same_type(const onx_value_t *a, const onx_value_t *b) {
  return vm_dtype_equal(a->dt, b->dt) && a->ndim == b->ndim &&
         memcmp(a->dims, b->dims, a->ndim * sizeof(int64_t)) == 0;
}

vm_status_t onx_op_if(onx_ctx_t *c) {
  onx_value_t *cond;
  const Onnx__GraphProto *gt, *ge;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &cond));
  VM_RETURN_IF_ERROR(need_graph(c, "then_branch", &gt));
  VM_RETURN_IF_ERROR(need_graph(c, "else_branch", &ge));
  if (cond->numel != 1)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "the condition has %lld elements, not 1",
                        (long long)cond->numel);
  if (gt->n_output != c->node->n_output || ge->n_output != c->node->n_output)
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "the branches have %zu and %zu outputs, the node %zu", gt->n_output,
                        ge->n_output, c->node->n_output);
  uint32_t nout = (uint32_t)c->node->n_output;
  if (cond->data) {
    /* known at compile time: the taken branch only, inline */
    int taken = onx_is_float(cond->dt) ? onx_ld_f(cond->dt, cond->data, 0) != 0
                                       : onx_ld_i(cond->dt, cond->data, 0) != 0;
    onx_value_t *o;
    VM_RETURN_IF_ERROR(
        lower_sub(c, taken ? gt : ge, taken ? "then_branch" : "else_branch", 0, NULL, &o));
    vm_status_t st = VM_STATUS_OK;
    for (uint32_t k = 0; o && k < nout && !st; k++) st = def_from(c, k, &o[k]);
    free_values(o, nout);
    return st;
  }
  /* at run time: a function per branch, taking the run-time values both read */
  onx_value_t **pv;
  uint32_t ncap, np;
  VM_RETURN_IF_ERROR(captures(c, gt, ge, &pv, &ncap, &np));
  onx_value_t *outs[2] = {NULL, NULL};
  uint32_t fidx[2] = {0, 0};
  vm_status_t st = VM_STATUS_OK;
  vm_status_t invalid[2] = {NULL, NULL}; /* why a branch cannot run with these shapes */
  uint32_t seq = c->fn_seq++;
  for (int b = 0; b < 2 && !st; b++) {
    char name[64];
    snprintf(name, sizeof(name), "if%u.%s", seq, b ? "else" : "then");
    fn_t f;
    st = fn_begin(c, name, np, pv, ncap - np, pv + np, &f);
    if (st) break;
    fidx[b] = f.idx;
    uint32_t hard = c->hard_errors;
    st = lower_sub(c, b ? ge : gt, b ? "else_branch" : "then_branch", 0, NULL, &outs[b]);
    vm_status_t fe = fn_end(c, &f, nout, outs[b], !st && outs[b]);
    if (!st) st = fe;
    else vm_status_free(fe);
    if (!st && !outs[b]) st = onx_node_err(c, VM_INVALID_ARGUMENT, "a branch failed");
    if (st && vm_status_code(st) == VM_INVALID_ARGUMENT && c->hard_errors == hard) {
      /* Invalid for the shapes the model is compiled for (silero-vad's
       * 8 kHz branch given a 16 kHz chunk): onnxruntime fails only when
       * it runs such a branch, and so does its function here. A bound
       * (nesting, nodes lowered) is refused at once all the same. */
      invalid[b] = st;
      st = fn_raise(c, &f, np, pv, nout, invalid[b]);
    }
  }
  if (!st && invalid[0] && invalid[1]) { /* neither can run: refused as before */
    st = invalid[0];
    invalid[0] = NULL;
  }
  int tb = invalid[0] ? 1 : 0; /* the branch that gives the outputs' types */
  if (!st && (invalid[0] || invalid[1]) && c->rep) {
    if (!c->rep->num_warnings)
      snprintf(c->rep->warning, sizeof(c->rep->warning), "%s%s", vm_status_message(invalid[!tb]),
               k_raise_note);
    c->rep->num_warnings++;
  }
  vm_status_free(invalid[0]);
  vm_status_free(invalid[1]);
  for (uint32_t k = 0; !st && outs[0] && outs[1] && k < nout; k++)
    if (!same_type(&outs[0][k], &outs[1][k])) {
      char a[32], b2[32], da[96], db[96];
      st = onx_node_err(
          c, VM_UNIMPLEMENTED,
          "output %u is %s%s in then_branch and %s%s in else_branch: a run-time condition needs "
          "one static type from both branches (bind the condition's inputs with --const to "
          "choose the branch at compile time)",
          k, dt_name(outs[0][k].dt, a, sizeof(a)),
          onx_dims_str(outs[0][k].ndim, outs[0][k].dims, da, sizeof(da)),
          dt_name(outs[1][k].dt, b2, sizeof(b2)),
          onx_dims_str(outs[1][k].ndim, outs[1][k].dims, db, sizeof(db)));
    }
  int32_t *args = NULL, *res = NULL;
  if (!st) {
    args = calloc(np + 1, sizeof(*args));
    res = calloc(nout + 1, sizeof(*res));
    if (!args || !res) st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory");
  }
  if (!st) {
    for (uint32_t k = 0; k < np; k++) args[k] = onx_tid(c, pv[k]);
    const onx_value_t *o = outs[tb];
    for (uint32_t k = 0; k < nout; k++)
      res[k] = vmcc_graph_result(c->g, o[k].dt, o[k].ndim, o[k].dims);
    vmcc_graph_if(c->g, onx_reshaped(c, cond, 0, k_scalar), fidx[0], fidx[1], np, args, nout, res);
    for (uint32_t k = 0; k < nout && !st; k++) st = onx_bind_out(c, k, res[k], o[k].ndim, o[k].dims);
  }
  free(args);
  free(res);
  free(pv);
  free_values(outs[0], nout);
  free_values(outs[1], nout);
  return st;
}

/* ---------------------------------------------------------------------------
 * Loop and Scan, unrolled
 */

/* A constant scalar value (detached) of dtype dt holding x. */
static vm_status_t scalar_const(vm_dtype_t dt, int64_t x, onx_value_t *out) {
  memset(out, 0, sizeof(*out));
  out->dt = dt;
  out->numel = 1;
  out->tid = -1;
  out->data = calloc(1, vm_dtype_bytes(dt));
  if (!out->data) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory");
  onx_st_i(dt, out->data, 0, x);
  return VM_STATUS_OK;
}

/* v's element idx along axis ax (that axis removed), detached: a host
 * copy of a constant, else cl.slice and a view. */
static vm_status_t take(onx_ctx_t *c, const onx_value_t *v, uint32_t ax, int64_t idx,
                        onx_value_t *out) {
  memset(out, 0, sizeof(*out));
  out->name = v->name;
  out->dt = v->dt;
  out->ndim = v->ndim - 1;
  out->tid = -1;
  for (uint32_t i = 0, j = 0; i < v->ndim; i++)
    if (i != ax) out->dims[j++] = v->dims[i];
  out->numel = onx_numel(out->ndim, out->dims);
  int64_t outer = prod(v->dims, ax), inner = prod(v->dims + ax + 1, v->ndim - ax - 1);
  if (v->data) {
    size_t es = esize(v->dt);
    out->data = malloc(out->numel ? (size_t)out->numel * es : 1);
    if (!out->data) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory");
    for (int64_t o = 0; o < outer; o++)
      memcpy(out->data + o * inner * es, v->data + ((o * v->dims[ax] + idx) * inner) * es,
             (size_t)inner * es);
    return VM_STATUS_OK;
  }
  int64_t b[MAXD], e[MAXD], st[MAXD], d1[MAXD];
  for (uint32_t i = 0; i < v->ndim; i++) {
    b[i] = i == ax ? idx : 0;
    e[i] = i == ax ? idx + 1 : v->dims[i];
    st[i] = 1;
    d1[i] = i == ax ? 1 : v->dims[i];
  }
  int32_t y = new_t(c, v->dt, v->ndim, d1);
  vmcc_arg_t a[5] = {A(onx_tid(c, (onx_value_t *)v)), vmcc_graph_ints(c->g, ax + 1, b),
                     vmcc_graph_ints(c->g, ax + 1, e), vmcc_graph_ints(c->g, ax + 1, st), A(y)};
  call(c, "cl.slice", 5, a);
  out->tid = y < 0 ? -1 : vmcc_graph_view(c->g, y, out->ndim, out->dims);
  return VM_STATUS_OK;
}

/* The n values of parts (each of one shape) stacked along a new axis ax
 * (reversed when rev), detached into *out. */
static vm_status_t stack_value(onx_ctx_t *c, const onx_value_t *parts, uint32_t n, uint32_t ax,
                               int rev, onx_value_t *out) {
  memset(out, 0, sizeof(*out));
  out->tid = -1;
  uint32_t oi = 0;
  if (n == 0) return onx_node_err(c, VM_UNIMPLEMENTED, "nothing to stack");
  const onx_value_t *p0 = &parts[0];
  if (p0->ndim + 1 > MAXD)
    return onx_node_err(c, VM_UNIMPLEMENTED, "scan output %u would have %u dims, at most %d", oi,
                        p0->ndim + 1, MAXD);
  if (ax > p0->ndim)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "scan output axis %u is out of range for rank %u",
                        ax, p0->ndim + 1);
  int64_t od[MAXD], vd[MAXD];
  for (uint32_t i = 0, j = 0; i <= p0->ndim; i++) {
    od[i] = i == ax ? n : p0->dims[j];
    vd[i] = i == ax ? 1 : p0->dims[j];
    if (i != ax) j++;
  }
  VM_RETURN_IF_ERROR(onx_check_shape(c, "scan output", p0->ndim + 1, od, NULL));
  int all = 1;
  for (uint32_t k = 0; k < n; k++) {
    if (!same_type(&parts[k], p0))
      return onx_node_err(c, VM_UNIMPLEMENTED,
                          "scan output %u changes its type between iterations: supported: one "
                          "static type",
                          oi);
    if (!parts[k].data) all = 0;
  }
  int64_t outer = prod(p0->dims, ax), inner = prod(p0->dims + ax, p0->ndim - ax);
  if (all) {
    uint8_t *d;
    int64_t numel = onx_numel(p0->ndim + 1, od);
    VM_RETURN_IF_ERROR(onx_alloc_const(c, p0->dt, numel, &d));
    size_t es = esize(p0->dt);
    for (uint32_t k = 0; k < n; k++) {
      uint32_t at = rev ? n - 1 - k : k;
      for (int64_t o = 0; o < outer; o++)
        memcpy(d + ((o * n + at) * inner) * es, parts[k].data + o * inner * es, (size_t)inner * es);
    }
    out->data = d;
    goto shape;
  }
  /* concatenations of at most 64 (cl.concat's operands), level by level:
   * the parts (views with the new axis), then the pieces of those */
  int32_t *cur = malloc(n * sizeof(*cur));
  int64_t *len = malloc(n * sizeof(*len));
  if (!cur || !len) {
    free(cur);
    free(len);
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory");
  }
  for (uint32_t k = 0; k < n; k++) {
    onx_value_t *pk = (onx_value_t *)&parts[rev ? n - 1 - k : k];
    cur[k] = onx_reshaped(c, pk, p0->ndim + 1, vd);
    len[k] = 1;
  }
  uint32_t m = n;
  while (m > 1) {
    uint32_t nm = 0;
    for (uint32_t s = 0; s < m; s += 64) {
      uint32_t q = m - s < 64 ? m - s : 64;
      int64_t cd[MAXD];
      memcpy(cd, od, sizeof(cd));
      cd[ax] = 0;
      vmcc_arg_t a[66];
      for (uint32_t k = 0; k < q; k++) {
        a[k] = A(cur[s + k]);
        cd[ax] += len[s + k];
      }
      int32_t y = new_t(c, p0->dt, p0->ndim + 1, cd);
      a[q] = I(ax);
      a[q + 1] = A(y);
      call(c, "cl.concat", q + 2, a);
      cur[nm] = y;
      len[nm++] = cd[ax];
    }
    m = nm;
  }
  int32_t y = cur[0];
  if (n == 1) { /* one part: a copy of its own */
    y = new_t(c, p0->dt, p0->ndim + 1, od);
    vmcc_arg_t a[2] = {A(cur[0]), A(y)};
    call(c, "cl.cast", 2, a);
  }
  free(cur);
  free(len);
  out->tid = y;
shape:
  out->dt = p0->dt;
  out->ndim = p0->ndim + 1;
  memcpy(out->dims, od, sizeof(od));
  out->numel = onx_numel(out->ndim, out->dims);
  return VM_STATUS_OK;
}

/* Defines output oi as stack_value of parts. */
static vm_status_t stack_out(onx_ctx_t *c, uint32_t oi, const onx_value_t *parts, uint32_t n,
                             uint32_t ax, int rev) {
  if (!onx_out_wanted(c, oi)) return VM_STATUS_OK;
  onx_value_t v;
  VM_RETURN_IF_ERROR(stack_value(c, parts, n, ax, rev, &v));
  vm_status_t st = def_from(c, oi, &v);
  free(v.data);
  return st;
}

static void free_detached(onx_value_t *v, uint32_t n) {
  for (uint32_t i = 0; v && i < n; i++) {
    free(v[i].data);
    v[i].data = NULL;
  }
}

/* An unrolled loop's iterations: the body's inputs are nfix given per
 * iteration by the caller and nc carried, its outputs (after a head the
 * caller reads) the carried ones and nscan stacked ones. */
typedef struct unroll {
  const Onnx__GraphProto *body;
  const char *what;
  uint32_t nc, nscan;
  int fix_last;         /* the per-iteration inputs after the carried ones (Scan) */
  onx_value_t *carried; /* nc */
  onx_value_t *scans;   /* nscan * iterations, iteration major */
  uint32_t iters, cap_iters;
} unroll_t;

/* One iteration: body(fix..., carried...) -> (skip head outputs), carried,
 * scans. head: outputs before the carried ones (Loop's cond: 1). *head_out
 * gets them (detached, the caller frees). */
static vm_status_t unroll_step(onx_ctx_t *c, unroll_t *u, uint32_t nfix, const onx_value_t *fix,
                               uint32_t head, onx_value_t *head_out) {
  uint32_t nin = nfix + u->nc;
  onx_value_t *in = calloc(nin + 1, sizeof(*in));
  if (!in) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory");
  /* Loop's body takes (iteration, cond, carried...), Scan's (carried...,
   * scan slices...) */
  uint32_t f0 = u->fix_last ? u->nc : 0, c0 = u->fix_last ? 0 : nfix;
  for (uint32_t k = 0; k < nfix; k++) in[f0 + k] = fix[k];
  for (uint32_t k = 0; k < u->nc; k++) in[c0 + k] = u->carried[k];
  onx_value_t *o = NULL;
  vm_status_t st = lower_sub(c, u->body, u->what, nin, in, &o);
  free(in);
  if (st || !o) return st;
  if (u->body->n_output != head + u->nc + u->nscan) {
    free_values(o, (uint32_t)u->body->n_output);
    return onx_node_err(c, VM_INVALID_ARGUMENT, "%s has %zu outputs, the node needs %u", u->what,
                        u->body->n_output, head + u->nc + u->nscan);
  }
  if (u->nscan && u->iters >= u->cap_iters) {
    uint32_t ncap = u->cap_iters ? u->cap_iters * 2 : 16;
    onx_value_t *p = realloc(u->scans, (size_t)ncap * u->nscan * sizeof(*p));
    if (!p) {
      free_values(o, (uint32_t)u->body->n_output);
      return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory");
    }
    u->scans = p;
    u->cap_iters = ncap;
  }
  for (uint32_t k = 0; k < head; k++) head_out[k] = o[k];
  free_detached(u->carried, u->nc);
  for (uint32_t k = 0; k < u->nc; k++) {
    if (!same_type(&o[head + k], &u->carried[k])) {
      char a[96], b[96];
      st = onx_node_err(c, VM_UNIMPLEMENTED,
                        "carried value %u changes its shape from %s to %s in an iteration: "
                        "supported: one static shape",
                        k, onx_dims_str(u->carried[k].ndim, u->carried[k].dims, a, sizeof(a)),
                        onx_dims_str(o[head + k].ndim, o[head + k].dims, b, sizeof(b)));
    }
    u->carried[k] = o[head + k];
  }
  for (uint32_t k = 0; k < u->nscan; k++) u->scans[(size_t)u->iters * u->nscan + k] = o[head + u->nc + k];
  if (u->nscan) u->iters++;
  free(o);
  return st;
}

static void unroll_free(unroll_t *u) {
  free_values(u->carried, u->nc);
  if (u->scans) free_detached(u->scans, u->iters * u->nscan);
  free(u->scans);
}

/* Stacks the scan outputs into node outputs first..first+nscan. */
static vm_status_t unroll_outputs(onx_ctx_t *c, unroll_t *u, uint32_t first, const int64_t *axes,
                                  const int64_t *rev) {
  vm_status_t st = VM_STATUS_OK;
  for (uint32_t k = 0; k < u->nc && !st; k++) st = def_from(c, first + k, &u->carried[k]);
  onx_value_t *parts = calloc(u->iters + 1, sizeof(*parts));
  if (!parts && !st) st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory");
  for (uint32_t s = 0; s < u->nscan && !st; s++) {
    if (!u->iters) {
      st = onx_node_err(c, VM_UNIMPLEMENTED,
                        "zero iterations with scan outputs: their shape is unknown");
      break;
    }
    for (uint32_t i = 0; i < u->iters; i++) parts[i] = u->scans[(size_t)i * u->nscan + s];
    st = stack_out(c, first + u->nc + s, parts, u->iters, axes ? (uint32_t)axes[s] : 0,
                   rev ? (int)rev[s] : 0);
  }
  free(parts);
  return st;
}

/* The carried inputs of the node from input `from` on (nc of them). */
static vm_status_t carried_in(onx_ctx_t *c, uint32_t from, unroll_t *u) {
  u->carried = calloc(u->nc + 1, sizeof(*u->carried));
  if (!u->carried) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory");
  for (uint32_t k = 0; k < u->nc; k++) {
    onx_value_t *v;
    VM_RETURN_IF_ERROR(onx_in_req(c, from + k, &v));
    VM_RETURN_IF_ERROR(copy_value(v, &u->carried[k]));
  }
  return VM_STATUS_OK;
}

static vm_status_t check_unroll(onx_ctx_t *c, const Onnx__GraphProto *body, int64_t iters) {
  uint64_t nodes = body->n_node ? body->n_node : 1;
  if (iters > 0 && (uint64_t)iters > ONX_MAX_UNROLL_NODES / nodes)
    return onx_node_err(c, VM_UNIMPLEMENTED,
                        "%lld iterations of a body of %zu nodes: at most %d nodes are lowered "
                        "for one loop",
                        (long long)iters, body->n_node, ONX_MAX_UNROLL_NODES);
  return VM_STATUS_OK;
}

/* Whether trip iterations of body are beyond what one loop unrolls. */
static int check_unroll_fits(const Onnx__GraphProto *body, int64_t trip) {
  uint64_t nodes = body->n_node ? body->n_node : 1;
  return trip > 0 && (uint64_t)trip > ONX_MAX_UNROLL_NODES / nodes;
}

static int truthy(const onx_value_t *v) {
  return onx_is_float(v->dt) ? onx_ld_f(v->dt, v->data, 0) != 0 : onx_ld_i(v->dt, v->data, 0) != 0;
}


/* A detached run-time value of tensor t (of the current graph). */
static onx_value_t tensor_value(onx_ctx_t *c, int32_t t) {
  onx_value_t v;
  memset(&v, 0, sizeof(v));
  v.tid = t;
  v.dt = vmcc_graph_dtype(c->g, t);
  v.ndim = vmcc_graph_ndim(c->g, t);
  if (v.ndim) memcpy(v.dims, vmcc_graph_shape(c->g, t), v.ndim * sizeof(int64_t));
  v.numel = onx_numel(v.ndim, v.dims);
  return v;
}

/* A bool scalar tensor: a && b, each a tensor or (-1) true. */
static int32_t and_t(onx_ctx_t *c, int32_t a, int32_t b) {
  if (a < 0) return b;
  if (b < 0) return a;
  int32_t y = new_t(c, VM_BOOL, 0, k_scalar);
  double f = 0;
  int32_t no = onx_const_tensor_f(c, VM_BOOL, 0, k_scalar, &f);
  vmcc_arg_t w[4] = {A(a), A(b), A(no), A(y)};
  call(c, "cl.where", 4, w);
  return y;
}

/* iter < m as a bool scalar tensor (iter an int64 scalar tensor, m a value). */
static int32_t less_t(onx_ctx_t *c, int32_t iter, onx_value_t *m) {
  int32_t y = new_t(c, VM_BOOL, 0, k_scalar);
  int32_t mt = onx_reshaped(c, m, 0, k_scalar);
  if (!vm_dtype_equal(m->dt, VM_I64)) {
    int32_t t = new_t(c, VM_I64, 0, k_scalar);
    vmcc_arg_t a[2] = {A(mt), A(t)};
    call(c, "cl.cast", 2, a);
    mt = t;
  }
  vmcc_arg_t a[3] = {A(iter), A(mt), A(y)};
  call(c, "cl.binary.less", 3, a);
  return y;
}

/* Loop with a run-time trip count or condition (or too long to unroll): a
 * VM loop over a function of the body. Its state is the iteration number
 * and the carried values; it also returns whether to go on (the body's
 * condition, and the next iteration number below M). */
static vm_status_t loop_vm(onx_ctx_t *c, const Onnx__GraphProto *body, onx_value_t *m,
                           onx_value_t *cond) {
  uint32_t nc = (uint32_t)c->node->n_input - 2;
  if (body->n_input != 2u + nc)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "body has %zu inputs, the node gives it %u",
                        body->n_input, 2 + nc);
  if (body->n_output != 1u + nc)
    return onx_node_err(c, VM_UNIMPLEMENTED,
                        "%zu scan outputs in a loop whose trip count or condition is known at "
                        "run time only: their length would not be static: supported: a trip "
                        "count and a condition known at compile time (bind their inputs with "
                        "--const)",
                        body->n_output - 1 - nc);
  if (c->node->n_output != nc)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "the node has %zu outputs for %u carried values",
                        c->node->n_output, nc);
  /* zero iterations known at compile time: the initial values */
  int64_t trip = m && m->data ? onx_ld_i(m->dt, m->data, 0) : 1;
  if (trip <= 0 || (cond && cond->data && !truthy(cond))) {
    vm_status_t st = VM_STATUS_OK;
    for (uint32_t k = 0; k < nc && !st; k++) {
      onx_value_t *v, d;
      st = onx_in_req(c, 2 + k, &v);
      if (!st) st = copy_value(v, &d);
      if (!st) st = def_from(c, k, &d);
      free(d.data);
    }
    return st;
  }
  /* params: the iteration number, the carried values, M (at run time),
   * then the run-time values the body reads */
  onx_value_t **cap;
  uint32_t nall, ncap;
  VM_RETURN_IF_ERROR(captures(c, body, NULL, &cap, &nall, &ncap));
  uint32_t np = 1 + nc + (m && !m->data ? 1 : 0) + ncap;
  onx_value_t *pvals = calloc(np + 1, sizeof(*pvals));   /* the params' types */
  onx_value_t **pv = calloc(np + 1, sizeof(*pv));
  int32_t *init = calloc(np + 1, sizeof(*init)), *res = calloc(np + 1, sizeof(*res));
  vm_status_t st = VM_STATUS_OK;
  if (!pvals || !pv || !init || !res) st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory");
  const char *iname = body->input[0] && body->input[0]->name ? body->input[0]->name : "iter";
  for (uint32_t k = 0; !st && k < 1 + nc; k++) {
    onx_value_t *p = &pvals[k];
    if (k == 0) {
      p->dt = VM_I64;
      p->name = iname;
      p->numel = 1;
    } else {
      onx_value_t *v;
      st = onx_in_req(c, 1 + k, &v);
      if (st) break;
      p->name = v->name;
      p->dt = v->dt;
      p->ndim = v->ndim;
      memcpy(p->dims, v->dims, sizeof(p->dims));
      p->numel = v->numel;
    }
    p->tid = -1;
    pv[k] = p;
  }
  uint32_t k0 = 1 + nc;
  if (!st && m && !m->data) pv[k0++] = m;
  for (uint32_t k = 0; !st && k < ncap; k++) pv[k0 + k] = cap[k];
  /* initial values, in the outer graph (before the function takes over
   * the tensors of the values it reads) */
  int32_t cond0 = -1;
  if (!st) {
    double zero = 0;
    init[0] = onx_const_tensor_f(c, VM_I64, 0, k_scalar, &zero);
    for (uint32_t k = 0; k < nc; k++) init[1 + k] = onx_tid(c, onx_in(c, 2 + k));
    for (uint32_t k = 1 + nc; k < np; k++) init[k] = onx_tid(c, pv[k]);
    int32_t cc = cond && !cond->data ? onx_reshaped(c, cond, 0, k_scalar) : -1;
    int32_t cm = m && !m->data ? less_t(c, init[0], m) : -1;
    cond0 = and_t(c, cc, cm);
    if (cond0 < 0) { /* both known and true: go */
      double one = 1;
      cond0 = onx_const_tensor_f(c, VM_BOOL, 0, k_scalar, &one);
    }
  }
  fn_t f;
  memset(&f, 0, sizeof(f));
  onx_value_t *o = NULL;
  onx_value_t fo[2];
  onx_value_t *fouts = NULL;
  char name[64];
  snprintf(name, sizeof(name), "loop%u.body", c->fn_seq++);
  if (!st) st = fn_begin(c, name, np, pv, nall - ncap, cap + ncap, &f);
  if (!st) {
    /* the body's inputs: the iteration number, cond (true: the loop goes
     * on only while it is), the carried values */
    onx_value_t *in = calloc(2 + nc, sizeof(*in));
    if (!in) st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory");
    if (!st) {
      in[0] = *pv[0];
      st = scalar_const(VM_BOOL, 1, &in[1]);
      for (uint32_t k = 0; k < nc; k++) in[2 + k] = *pv[1 + k];
    }
    if (!st) st = lower_sub(c, body, "body", 2 + nc, in, &o);
    if (in) free(in[1].data);
    free(in);
    if (!st && !o) st = onx_node_err(c, VM_INVALID_ARGUMENT, "the body failed");
    for (uint32_t k = 0; !st && k < nc; k++)
      if (!same_type(&o[1 + k], pv[1 + k])) {
        char a[96], b[96];
        st = onx_node_err(c, VM_UNIMPLEMENTED,
                          "carried value %u changes its shape from %s to %s in an iteration: "
                          "supported: one static shape",
                          k, onx_dims_str(pv[1 + k]->ndim, pv[1 + k]->dims, a, sizeof(a)),
                          onx_dims_str(o[1 + k].ndim, o[1 + k].dims, b, sizeof(b)));
      }
    if (!st) {
      /* next = iter + 1; go on = cond_out && next < M */
      double one = 1;
      int32_t next = new_t(c, VM_I64, 0, k_scalar);
      vmcc_arg_t a[3] = {A(pv[0]->tid), A(onx_const_tensor_f(c, VM_I64, 0, k_scalar, &one)),
                         A(next)};
      call(c, "cl.binary.add", 3, a);
      int32_t cc = -1;
      if (cond && o[0].numel != 1) {
        st = onx_node_err(c, VM_INVALID_ARGUMENT, "the body's condition has %lld elements",
                          (long long)o[0].numel);
      } else if (cond && o[0].data && !truthy(&o[0])) {
        double zero = 0;
        cc = onx_const_tensor_f(c, VM_BOOL, 0, k_scalar, &zero);
      } else if (cond && !o[0].data) {
        cc = onx_reshaped(c, &o[0], 0, k_scalar);
      }
      onx_value_t mv;
      int32_t cm = -1;
      if (m) {
        mv = *m;
        if (m->data) mv.tid = -1; /* made again in the function */
        cm = less_t(c, next, m->data ? &mv : pv[1 + nc]);
      }
      int32_t go = and_t(c, cc, cm);
      if (go < 0) /* no M, and a condition that stays true */
        st = onx_node_err(c, VM_INVALID_ARGUMENT,
                          "no trip count M is given and the body's condition is always true: "
                          "the loop would never end");
      if (!st) {
        fouts = calloc(2 + nc, sizeof(*fouts));
        if (!fouts) st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory");
      }
      if (!st) {
        fo[0] = tensor_value(c, go);
        fo[1] = tensor_value(c, next);
        fouts[0] = fo[0];
        fouts[1] = fo[1];
        for (uint32_t k = 0; k < nc; k++) fouts[2 + k] = o[1 + k];
      }
    }
  }
  if (f.g) {
    vm_status_t fe = fn_end(c, &f, 2 + nc, fouts, !st);
    if (!st) st = fe;
    else vm_status_free(fe);
  }
  if (!st) {
    for (uint32_t k = 0; k < 1 + nc; k++) {
      const onx_value_t *p = k ? pv[k] : &pvals[0];
      res[k] = vmcc_graph_result(c->g, p->dt, p->ndim, p->dims);
    }
    vmcc_graph_loop(c->g, cond0, f.idx, 1 + nc, init, np - 1 - nc, init + 1 + nc, res);
    for (uint32_t k = 0; k < nc && !st; k++)
      st = onx_bind_out(c, k, res[1 + k], pv[1 + k]->ndim, pv[1 + k]->dims);
  }
  free(fouts);
  free_values(o, (uint32_t)body->n_output);
  free(pvals);
  free(pv);
  free(init);
  free(res);
  free(cap);
  return st;
}

vm_status_t onx_op_loop(onx_ctx_t *c) {
  const Onnx__GraphProto *body;
  VM_RETURN_IF_ERROR(need_graph(c, "body", &body));
  onx_value_t *m = onx_in(c, 0), *cond = onx_in(c, 1);
  if (c->node->n_input < 2)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "Loop needs inputs M and cond (\"\" when absent)");
  if (m && m->numel != 1)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "M has %lld elements, not 1", (long long)m->numel);
  if (cond && cond->numel != 1)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "cond has %lld elements, not 1",
                        (long long)cond->numel);
  if (!m && !cond)
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "neither M nor cond is given: the loop would never end");
  if (body->n_input < 2 || body->n_output < 1 || c->node->n_input - 2 > body->n_output - 1)
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "body has %zu inputs and %zu outputs for %zu carried values", body->n_input,
                        body->n_output, c->node->n_input - 2);
  int has_scan = body->n_output - 1 > c->node->n_input - 2;
  if ((m && !m->data) || (cond && !cond->data)) return loop_vm(c, body, m, cond);
  int64_t trip = m ? onx_ld_i(m->dt, m->data, 0) : -1; /* -1: unbounded */
  if (m && trip < 0) trip = 0;
  /* a loop too long to unroll runs in the VM, when its results' shapes
   * do not depend on the count */
  if (!has_scan && (trip < 0 || check_unroll_fits(body, trip))) return loop_vm(c, body, m, cond);
  VM_RETURN_IF_ERROR(check_unroll(c, body, trip));
  unroll_t u;
  memset(&u, 0, sizeof(u));
  u.body = body;
  u.what = "body";
  u.nc = (uint32_t)c->node->n_input - 2;
  if (body->n_output < 1 + (size_t)u.nc) {
    return onx_node_err(c, VM_INVALID_ARGUMENT, "body has %zu outputs, the node needs at least %u",
                        body->n_output, 1 + u.nc);
  }
  u.nscan = (uint32_t)body->n_output - 1 - u.nc;
  if (c->node->n_output != (size_t)u.nc + u.nscan)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "the node has %zu outputs, its body gives %u",
                        c->node->n_output, u.nc + u.nscan);
  vm_status_t st = carried_in(c, 2, &u);
  int go = !cond || truthy(cond);
  uint64_t nodes = 0;
  for (int64_t it = 0; !st && go && (trip < 0 || it < trip); it++) {
    nodes += body->n_node ? body->n_node : 1;
    if (nodes > ONX_MAX_UNROLL_NODES) {
      st = onx_node_err(c, VM_UNIMPLEMENTED,
                        "the loop goes on for more than %lld iterations of a body of %zu nodes: "
                        "at most %d nodes are lowered for one loop",
                        (long long)it, body->n_node, ONX_MAX_UNROLL_NODES);
      break;
    }
    onx_value_t fix[2], head[1];
    memset(fix, 0, sizeof(fix));
    memset(head, 0, sizeof(head));
    st = scalar_const(VM_I64, it, &fix[0]);
    if (!st) st = scalar_const(VM_BOOL, 1, &fix[1]);
    if (!st) st = unroll_step(c, &u, 2, fix, 1, head);
    free(fix[0].data);
    free(fix[1].data);
    if (st) {
      free(head[0].data);
      break;
    }
    if (cond) {
      if (!head[0].data) {
        st = onx_node_err(c, VM_UNIMPLEMENTED,
                          "the body's condition is computed at run time while the loop has "
                          "scan outputs or a trip count the compiler unrolls: supported: a "
                          "condition known at compile time there");
      } else if (head[0].numel != 1) {
        st = onx_node_err(c, VM_INVALID_ARGUMENT, "the body's condition has %lld elements",
                          (long long)head[0].numel);
      } else {
        go = truthy(&head[0]);
      }
    }
    free(head[0].data);
  }
  if (!st) st = unroll_outputs(c, &u, 0, NULL, NULL);
  unroll_free(&u);
  return st;
}

/* Scan's integer list attribute name (n entries, default def). */
static vm_status_t scan_ints(onx_ctx_t *c, const char *name, uint32_t n, int64_t def, int64_t *out,
                             uint32_t rank_of_each, const uint32_t *ranks) {
  int64_t got = -1;
  VM_RETURN_IF_ERROR(onx_attr_ints(c, name, out, n, &got));
  if (got < 0) {
    for (uint32_t i = 0; i < n; i++) out[i] = def;
    return VM_STATUS_OK;
  }
  if (got != n)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "attribute '%s' has %lld values, expected %u",
                        name, (long long)got, n);
  for (uint32_t i = 0; i < n; i++) {
    if (rank_of_each) {
      VM_RETURN_IF_ERROR(norm_axis(c, out[i], ranks[i], name, &out[i]));
    } else if (out[i] != 0 && out[i] != 1) {
      return onx_node_err(c, VM_INVALID_ARGUMENT, "attribute '%s' = %lld: supported: 0, 1", name,
                          (long long)out[i]);
    }
  }
  return VM_STATUS_OK;
}

vm_status_t onx_op_scan(onx_ctx_t *c) {
  const Onnx__GraphProto *body;
  VM_RETURN_IF_ERROR(need_graph(c, "body", &body));
  int64_t nsi;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "num_scan_inputs", -1, &nsi));
  int batch = c->opset < 9; /* opset 8: sequence_lens first, axis 0 a batch */
  uint32_t first = batch ? 1 : 0;
  uint32_t nin = (uint32_t)c->node->n_input;
  if (nsi < 1 || nsi > (int64_t)nin - first)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "num_scan_inputs = %lld with %u inputs",
                        (long long)nsi, nin - first);
  unroll_t u;
  memset(&u, 0, sizeof(u));
  u.body = body;
  u.what = "body";
  u.nc = nin - first - (uint32_t)nsi;
  u.fix_last = 1;
  if (body->n_output < u.nc)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "body has %zu outputs, fewer than the %u states",
                        body->n_output, u.nc);
  u.nscan = (uint32_t)body->n_output - u.nc;
  if (c->node->n_output != body->n_output)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "the node has %zu outputs, its body %zu",
                        c->node->n_output, body->n_output);
  onx_value_t *xs[ONX_MAX_NODE_IO];
  uint32_t ranks[ONX_MAX_NODE_IO], oranks[ONX_MAX_NODE_IO];
  for (uint32_t k = 0; k < (uint32_t)nsi; k++) {
    VM_RETURN_IF_ERROR(onx_in_req(c, first + u.nc + k, &xs[k]));
    ranks[k] = xs[k]->ndim;
    if (xs[k]->ndim < 1u + batch)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "scan input %u has rank %u", k, xs[k]->ndim);
  }
  for (uint32_t k = 0; k < u.nscan; k++) oranks[k] = MAXD; /* checked when stacked */
  int64_t in_ax[ONX_MAX_NODE_IO], in_rev[ONX_MAX_NODE_IO], out_ax[ONX_MAX_NODE_IO],
      out_rev[ONX_MAX_NODE_IO];
  if (batch) {
    VM_RETURN_IF_ERROR(scan_ints(c, "directions", (uint32_t)nsi, 0, in_rev, 0, NULL));
    for (uint32_t k = 0; k < (uint32_t)nsi; k++) in_ax[k] = 1;
    for (uint32_t k = 0; k < u.nscan; k++) out_ax[k] = 0, out_rev[k] = 0;
  } else {
    VM_RETURN_IF_ERROR(scan_ints(c, "scan_input_directions", (uint32_t)nsi, 0, in_rev, 0, NULL));
    VM_RETURN_IF_ERROR(scan_ints(c, "scan_output_directions", u.nscan, 0, out_rev, 0, NULL));
    VM_RETURN_IF_ERROR(scan_ints(c, "scan_input_axes", (uint32_t)nsi, 0, in_ax, 1, ranks));
    int64_t got = -1;
    VM_RETURN_IF_ERROR(onx_attr_ints(c, "scan_output_axes", out_ax, u.nscan, &got));
    if (got >= 0 && got != u.nscan)
      return onx_node_err(c, VM_INVALID_ARGUMENT,
                          "attribute 'scan_output_axes' has %lld values, expected %u",
                          (long long)got, u.nscan);
    if (got < 0)
      for (uint32_t k = 0; k < u.nscan; k++) out_ax[k] = 0;
    (void)oranks;
  }
  int64_t len = xs[0]->dims[in_ax[0]];
  for (uint32_t k = 1; k < (uint32_t)nsi; k++)
    if (xs[k]->dims[in_ax[k]] != len)
      return onx_node_err(c, VM_INVALID_ARGUMENT,
                          "scan inputs 0 and %u have %lld and %lld iterations", k, (long long)len,
                          (long long)xs[k]->dims[in_ax[k]]);
  int64_t nb = batch ? xs[0]->dims[0] : 1;
  if (nb < 1) return onx_node_err(c, VM_UNIMPLEMENTED, "a batch of 0: supported: 1 or more");
  if (batch) {
    onx_value_t *sl = onx_in(c, 0);
    if (sl) {
      if (!sl->data)
        return onx_node_err(c, VM_UNIMPLEMENTED,
                            "sequence_lens is computed at run time: supported: a constant");
      for (int64_t i = 0; i < sl->numel; i++)
        if (onx_ld_i(sl->dt, sl->data, i) != len)
          return onx_node_err(c, VM_UNIMPLEMENTED,
                              "sequence_lens[%lld] = %lld, the sequence has %lld: supported: "
                              "every sequence whole",
                              (long long)i, (long long)onx_ld_i(sl->dt, sl->data, i),
                              (long long)len);
    }
    for (uint32_t k = 0; k < (uint32_t)nsi; k++)
      if (xs[k]->dims[0] != nb)
        return onx_node_err(c, VM_INVALID_ARGUMENT, "scan input %u has batch %lld, not %lld", k,
                            (long long)xs[k]->dims[0], (long long)nb);
  }
  int64_t total;
  if (vm_ckd_mul_i64(len, nb, &total) != 0) total = INT64_MAX;
  VM_RETURN_IF_ERROR(check_unroll(c, body, total));
  vm_status_t st = VM_STATUS_OK;
  /* opset 8: one scan per batch entry, the results stacked on axis 0 */
  onx_value_t *bouts = calloc((size_t)nb * body->n_output + 1, sizeof(*bouts));
  if (!bouts) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory");
  onx_value_t *fix = calloc((size_t)nsi + 1, sizeof(*fix));
  if (!fix) st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory");
  for (int64_t b = 0; b < nb && !st; b++) {
    unroll_t ub = u;
    ub.carried = calloc(u.nc + 1, sizeof(*ub.carried));
    if (!ub.carried) {
      st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory");
      break;
    }
    for (uint32_t k = 0; k < u.nc && !st; k++) {
      onx_value_t *v;
      st = onx_in_req(c, first + k, &v);
      if (!st && batch && (v->ndim < 1 || v->dims[0] != nb))
        st = onx_node_err(c, VM_INVALID_ARGUMENT, "state %u has no batch of %lld", k,
                          (long long)nb);
      if (!st) st = batch ? take(c, v, 0, b, &ub.carried[k]) : copy_value(v, &ub.carried[k]);
    }
    for (int64_t t = 0; t < len && !st; t++) {
      for (uint32_t k = 0; k < (uint32_t)nsi && !st; k++) {
        int64_t at = in_rev[k] ? len - 1 - t : t;
        if (batch) {
          onx_value_t row;
          st = take(c, xs[k], 0, b, &row);
          if (!st) st = take(c, &row, (uint32_t)in_ax[k] - 1, at, &fix[k]);
          free(row.data);
        } else {
          st = take(c, xs[k], (uint32_t)in_ax[k], at, &fix[k]);
        }
      }
      if (!st) st = unroll_step(c, &ub, (uint32_t)nsi, fix, 0, NULL);
      free_detached(fix, (uint32_t)nsi);
    }
    if (!st && !batch) {
      st = unroll_outputs(c, &ub, 0, out_ax, out_rev);
    } else if (!st) {
      /* this batch entry's states and stacked scans, detached */
      for (uint32_t k = 0; k < u.nc; k++) {
        bouts[(size_t)b * body->n_output + k] = ub.carried[k];
        ub.carried[k].data = NULL;
      }
      for (uint32_t s = 0; s < u.nscan && !st; s++) {
        if (!ub.iters) {
          st = onx_node_err(c, VM_UNIMPLEMENTED,
                            "zero iterations with scan outputs: their shape is unknown");
          break;
        }
        onx_value_t *parts = calloc(ub.iters, sizeof(*parts));
        if (!parts) {
          st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory");
          break;
        }
        for (uint32_t i = 0; i < ub.iters; i++) parts[i] = ub.scans[(size_t)i * u.nscan + s];
        /* stack into a detached value through a temporary output name */
        st = stack_value(c, parts, ub.iters, (uint32_t)out_ax[s], (int)out_rev[s],
                         &bouts[(size_t)b * body->n_output + u.nc + s]);
        free(parts);
      }
    }
    unroll_free(&ub);
  }
  if (!st && batch) {
    for (uint32_t o = 0; o < body->n_output && !st; o++) {
      onx_value_t *parts = calloc((size_t)nb + 1, sizeof(*parts));
      if (!parts) {
        st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory");
        break;
      }
      for (int64_t b = 0; b < nb; b++) parts[b] = bouts[(size_t)b * body->n_output + o];
      st = stack_out(c, o, parts, (uint32_t)nb, 0, 0);
      free(parts);
    }
  }
  if (bouts) free_values(bouts, (uint32_t)(nb * (int64_t)body->n_output));
  free(fix);
  return st;
}
