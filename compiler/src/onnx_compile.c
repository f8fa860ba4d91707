/* The ONNX front end's driver: parses the model, binds the graph's inputs
 * (parameters, initializers, constants given by the caller), lowers every
 * node in order (folding those whose inputs are constants) and emits main
 * through the graph emitter. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "onnx_internal.h"

/* The largest model file read (protobuf's own limit is 2 GiB). */
#define ONX_MAX_FILE_BYTES (2ull << 30)
#define ONX_OPSET_MIN 1
#define ONX_OPSET_MAX 28
/* Above this no opset of the default domain can be meant (it gains about
 * two a year): the number is refused as malformed, not as unsupported. */
#define ONX_OPSET_BOGUS 1000

/* ---------------------------------------------------------------------------
 * Values
 */

static onx_value_t *find_value(const onx_ctx_t *c, const char *name) {
  const onx_name_t *e = onx_names_find(&c->names, name);
  return e && e->val >= 0 ? &c->vals[e->val] : NULL;
}

/* Values live in an array of fixed capacity (sized from the graph before
 * lowering starts), so pointers to them stay valid. */
vm_status_t onx_add_value(onx_ctx_t *c, const char *name, onx_value_t **out) {
  *out = NULL;
  if (!name || !name[0]) return vm_status_make(VM_INVALID_ARGUMENT, "a value without a name");
  if (find_value(c, name))
    return c->node ? onx_node_err(c, VM_INVALID_ARGUMENT, "value '%.80s' is defined twice", name)
                   : vm_status_make(VM_INVALID_ARGUMENT, "value '%.80s' is defined twice", name);
  if (c->num_vals >= c->cap_vals)
    return vm_status_make(VM_INTERNAL, "onnx: value table full (%u)", c->cap_vals);
  onx_name_t *e = onx_names_add(&c->names, name);
  if (!e) return vm_status_make(VM_RESOURCE_EXHAUSTED, "onnx: out of host memory");
  e->val = (int32_t)c->num_vals;
  onx_value_t *v = &c->vals[c->num_vals++];
  memset(v, 0, sizeof(*v));
  v->name = name;
  v->tid = -1;
  /* uses: decides whether an expression may be fused into its consumer */
  v->uses = e->num_cons + e->outputs;
  *out = v;
  return VM_STATUS_OK;
}

static vm_status_t set_shape(onx_ctx_t *c, onx_value_t *v, vm_dtype_t dt, uint32_t ndim,
                             const int64_t *dims) {
  if (ndim > VMCC_MAX_NDIM)
    return onx_node_err(c, VM_UNIMPLEMENTED, "value '%.80s' would have %u dims, at most %d",
                        v->name, ndim, VMCC_MAX_NDIM);
  char what[100];
  snprintf(what, sizeof(what), "value '%.80s'", v->name);
  vm_status_t st = onx_check_shape(c, what, ndim, dims, &v->numel);
  if (st) return st;
  v->dt = dt;
  v->ndim = ndim;
  if (ndim) memcpy(v->dims, dims, ndim * sizeof(int64_t));
  return VM_STATUS_OK;
}

onx_value_t *onx_in(onx_ctx_t *c, uint32_t i) {
  if (i >= c->node->n_input || !c->node->input[i] || !c->node->input[i][0]) return NULL;
  return find_value(c, c->node->input[i]);
}

vm_status_t onx_in_req(onx_ctx_t *c, uint32_t i, onx_value_t **out) {
  *out = onx_in(c, i);
  if (!*out) return onx_node_err(c, VM_INVALID_ARGUMENT, "input %u is missing", i);
  return VM_STATUS_OK;
}

uint32_t onx_num_outputs(const onx_ctx_t *c) {
  return (uint32_t)c->node->n_output;
}

int onx_out_wanted(const onx_ctx_t *c, uint32_t i) {
  return i < c->node->n_output && c->node->output[i] && c->node->output[i][0];
}

vm_status_t onx_def_out(onx_ctx_t *c, uint32_t i, vm_dtype_t dt, uint32_t ndim, const int64_t *dims,
                        onx_value_t **out) {
  *out = NULL;
  if (!onx_out_wanted(c, i))
    return onx_node_err(c, VM_INTERNAL, "output %u is not wanted", i); /* callers check */
  onx_value_t *v;
  vm_status_t st = onx_add_value(c, c->node->output[i], &v);
  if (!st) st = set_shape(c, v, dt, ndim, dims);
  if (st) return st;
  v->tid = vmcc_graph_tensor(c->g, dt, ndim, v->dims);
  *out = v;
  return VM_STATUS_OK;
}

vm_status_t onx_def_const(onx_ctx_t *c, uint32_t i, vm_dtype_t dt, uint32_t ndim,
                          const int64_t *dims, uint8_t *data) {
  if (!onx_out_wanted(c, i)) {
    free(data);
    return VM_STATUS_OK;
  }
  onx_value_t *v;
  vm_status_t st = onx_add_value(c, c->node->output[i], &v);
  if (!st) st = set_shape(c, v, dt, ndim, dims);
  if (st) {
    free(data);
    return st;
  }
  v->data = data;
  return VM_STATUS_OK;
}

vm_status_t onx_def_view(onx_ctx_t *c, uint32_t i, onx_value_t *src, uint32_t ndim,
                         const int64_t *dims) {
  if (!onx_out_wanted(c, i)) return VM_STATUS_OK;
  int64_t n;
  vm_status_t vst = onx_check_shape(c, "shape", ndim, dims, &n);
  if (vst) return vst;
  if (n != src->numel)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "cannot view %lld elements as %lld",
                        (long long)src->numel, (long long)n);
  if (src->data) {
    uint8_t *d;
    vm_status_t st = onx_alloc_const(c, src->dt, src->numel, &d);
    if (st) return st;
    memcpy(d, src->data, (size_t)onx_nbytes(src->dt, src->numel));
    return onx_def_const(c, i, src->dt, ndim, dims, d);
  }
  if (onx_lt_pending(c, src) && ndim == src->ndim &&
      memcmp(dims, src->dims, ndim * sizeof(int64_t)) == 0) { /* stays pending */
    int64_t perm[VMCC_MAX_NDIM], pads[2 * VMCC_MAX_NDIM];
    for (uint32_t k = 0; k < ndim; k++) perm[k] = src->lt_perm[k];
    for (uint32_t k = 0; k < 2 * ndim; k++) pads[k] = src->lt_pads[k];
    return onx_def_pending(c, c->node->output[i], src->lt_src, ndim, perm, src->lt_pad, pads);
  }
  onx_value_t *v;
  vm_status_t st = onx_add_value(c, c->node->output[i], &v);
  if (!st) st = set_shape(c, v, src->dt, ndim, dims);
  if (st) return st;
  v->tid = vmcc_graph_view(c->g, onx_tid(c, src), ndim, v->dims);
  return VM_STATUS_OK;
}

vm_status_t onx_bind_out(onx_ctx_t *c, uint32_t i, int32_t tid, uint32_t ndim,
                         const int64_t *dims) {
  if (!onx_out_wanted(c, i)) return VM_STATUS_OK;
  return onx_bind_named(c, c->node->output[i], tid, ndim, dims);
}

vm_status_t onx_bind_named(onx_ctx_t *c, const char *name, int32_t tid, uint32_t ndim,
                           const int64_t *dims) {
  if (tid < 0) return VM_STATUS_OK; /* the graph's sticky error reports it */
  onx_value_t *v;
  vm_status_t st = onx_add_value(c, name, &v);
  if (!st) st = set_shape(c, v, vmcc_graph_dtype(c->g, tid), ndim, dims);
  if (st) return st;
  const int64_t *td = vmcc_graph_shape(c->g, tid);
  uint32_t tn = vmcc_graph_ndim(c->g, tid);
  if (tn == ndim && memcmp(td, dims, ndim * sizeof(int64_t)) == 0)
    v->tid = tid;
  else
    v->tid = vmcc_graph_view(c->g, tid, ndim, v->dims);
  return VM_STATUS_OK;
}

vm_status_t onx_def_pending(onx_ctx_t *c, const char *name, int32_t src, uint32_t ndim,
                            const int64_t *perm, int pad, const int64_t *pads) {
  if (src < 0) return VM_STATUS_OK; /* the graph's sticky error reports it */
  const int64_t *sd = vmcc_graph_shape(c->g, src);
  if (vmcc_graph_ndim(c->g, src) != ndim || ndim > VMCC_MAX_NDIM)
    return onx_node_err(c, VM_INTERNAL, "a transpose of rank %u of a rank %u tensor", ndim,
                        vmcc_graph_ndim(c->g, src));
  int64_t od[VMCC_MAX_NDIM];
  int identity = 1;
  for (uint32_t i = 0; i < ndim; i++) {
    od[i] = sd[perm[i]] + (pad ? pads[i] + pads[ndim + i] : 0);
    identity &= perm[i] == (int64_t)i;
  }
  if (identity && !pad) return onx_bind_named(c, name, src, ndim, od);
  onx_value_t *v;
  vm_status_t st = onx_add_value(c, name, &v);
  if (!st) st = set_shape(c, v, vmcc_graph_dtype(c->g, src), ndim, od);
  if (st) return st;
  v->lt_g = c->g;
  v->lt_src = src;
  for (uint32_t i = 0; i < ndim; i++) v->lt_perm[i] = (uint8_t)perm[i];
  v->lt_pad = (uint8_t)pad;
  for (uint32_t i = 0; pad && i < 2 * ndim; i++) v->lt_pads[i] = (int32_t)pads[i];
  return VM_STATUS_OK;
}

vm_status_t onx_def_transposed(onx_ctx_t *c, const char *name, int32_t src, uint32_t ndim,
                               const int64_t *perm) {
  return onx_def_pending(c, name, src, ndim, perm, 0, NULL);
}

onx_value_t *onx_lookup(onx_ctx_t *c, const char *name) {
  return name && name[0] ? find_value(c, name) : NULL;
}

/* Whether node n may be lowered ahead of its place by onx_lookup_const:
 * a Constant, or a view of constants (its result then is a constant too,
 * onx_def_view). */
static int const_ahead_op(const Onnx__NodeProto *n) {
  static const char *const ops[] = {"Constant", "Reshape",   "Identity",
                                    "Squeeze",  "Unsqueeze", "Flatten"};
  if (!n || !n->op_type || (n->domain && n->domain[0]) || n->n_output != 1 || !n->output[0])
    return 0;
  for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
    if (strcmp(n->op_type, ops[i]) == 0) return i == 0 ? n->n_input == 0 : n->n_input >= 1;
  return 0;
}

static onx_value_t *lookup_const(onx_ctx_t *c, const char *name, int depth) {
  onx_value_t *v = onx_lookup(c, name);
  /* not from a composite's sub-nodes: they lower under their own opset */
  if (v || !name || !name[0] || !c->skip || c->sub_depth || depth > 4)
    return v && v->data ? v : NULL;
  /* a node later in the graph that reads only constants: lowering it now
   * gives the same value; it is then skipped where it stands */
  const onx_name_t *e = onx_names_find(&c->names, name);
  if (!e || e->producer <= (int64_t)c->node_idx) return NULL;
  size_t p = (size_t)e->producer;
  const Onnx__NodeProto *n = c->graph->node[p];
  if (!const_ahead_op(n) || strcmp(n->output[0], name) != 0 || c->skip[p]) return NULL;
  for (size_t k = 0; k < n->n_input; k++)
    if (n->input[k] && n->input[k][0] && !lookup_const(c, n->input[k], depth + 1)) return NULL;
  const onx_op_t *op;
  const Onnx__NodeProto *node = c->node;
  const onx_op_t *cop = c->op;
  uint32_t idx = c->node_idx, before = c->num_vals;
  int fused = c->fused;
  c->node = n;
  c->node_idx = (uint32_t)p;
  vm_status_t st = onx_resolve_op(c, &op);
  if (!st) {
    c->op = op;
    st = onx_lower_node(c, op);
  }
  c->node = node;
  c->node_idx = idx;
  c->op = cop;
  c->fused = fused;
  if (st || vmcc_graph_error(c->g)) {
    /* left for the node's own turn, which reports it: what it defined
     * is taken back */
    vm_status_free(st);
    for (uint32_t i = before; i < c->num_vals; i++) {
      onx_name_t *nm = onx_names_find(&c->names, c->vals[i].name);
      if (nm) nm->val = -1;
      free(c->vals[i].data);
      free(c->vals[i].qdq);
      onx_expr_free(c->vals[i].expr);
    }
    c->num_vals = before;
    return NULL;
  }
  c->skip[p] = 1;
  v = find_value(c, name);
  return v && v->data ? v : NULL;
}

onx_value_t *onx_lookup_const(onx_ctx_t *c, const char *name) {
  onx_value_t *v = onx_lookup(c, name);
  return v ? v : lookup_const(c, name, 0);
}

vm_status_t onx_def_expr(onx_ctx_t *c, uint32_t i, vm_dtype_t dt, uint32_t ndim,
                         const int64_t *dims, onx_expr_t *e) {
  onx_value_t *v;
  vm_status_t st = onx_add_value(c, c->node->output[i], &v);
  if (!st) st = set_shape(c, v, dt, ndim, dims);
  if (st) {
    onx_expr_free(e);
    return st;
  }
  v->expr = e;
  return VM_STATUS_OK;
}

vm_status_t onx_def_lazy(onx_ctx_t *c, uint32_t i, vm_dtype_t dt, uint32_t ndim,
                         const int64_t *dims, onx_qdq_t *q) {
  if (!onx_out_wanted(c, i)) {
    free(q);
    return VM_STATUS_OK;
  }
  onx_value_t *v;
  vm_status_t st = onx_add_value(c, c->node->output[i], &v);
  if (!st) st = set_shape(c, v, dt, ndim, dims);
  if (st) {
    free(q);
    return st;
  }
  v->qdq = q;
  return VM_STATUS_OK;
}

vm_status_t onx_def_scale_product(onx_ctx_t *c, uint32_t ndim, const int64_t *dims) {
  onx_value_t *v;
  vm_status_t st = onx_add_value(c, c->node->output[0], &v);
  if (!st) st = set_shape(c, v, VM_F32, ndim, dims);
  if (st) return st;
  v->ps_g = c->g;
  v->ps_a = c->node->input[0];
  v->ps_b = c->node->input[1];
  return VM_STATUS_OK;
}

int32_t onx_tid(onx_ctx_t *c, onx_value_t *v) {
  if (v->lt_g && v->tid < 0 && !v->data && !v->expr && !v->qdq) {
    v->tid = onx_lt_emit(c, v);
    return v->tid;
  }
  if (v->qdq && !v->data && v->tid < 0) {
    v->tid = onx_qdq_emit(c, v);
    return v->tid;
  }
  if (v->ps_g && v->tid < 0) {
    v->tid = onx_ps_emit(c, v);
    return v->tid;
  }
  if (v->expr) {
    v->tid = onx_expr_emit(c, v);
    onx_expr_free(v->expr);
    v->expr = NULL;
    return v->tid;
  }
  if (v->tid >= 0 || !v->data) return v->tid;
  v->tid = vmcc_graph_const(c->g, v->dt, v->data, v->ndim, v->dims);
  if (v->tid >= 0 && c->rep) {
    c->rep->num_consts++;
    c->rep->const_bytes += onx_nbytes(v->dt, v->numel);
  }
  return v->tid;
}

int32_t onx_reshaped(onx_ctx_t *c, onx_value_t *v, uint32_t ndim, const int64_t *dims) {
  if (v->ndim == ndim && memcmp(v->dims, dims, ndim * sizeof(int64_t)) == 0) return onx_tid(c, v);
  if (v->data) {
    int32_t t = vmcc_graph_const(c->g, v->dt, v->data, ndim, dims);
    if (t >= 0 && c->rep) {
      c->rep->num_consts++;
      c->rep->const_bytes += onx_nbytes(v->dt, v->numel);
    }
    return t;
  }
  return vmcc_graph_view(c->g, onx_tid(c, v), ndim, dims);
}

vmcc_arg_t onx_float_arg(onx_ctx_t *c, double v) {
  uint32_t idx = 0;
  vm_status_t st = vm_builder_const_float(c->b, v, &idx);
  vm_status_free(st); /* only out of memory; the builder then fails at finish */
  return vmcc_a_const(idx);
}

int32_t onx_const_tensor_f(onx_ctx_t *c, vm_dtype_t dt, uint32_t ndim, const int64_t *dims,
                           const double *vals) {
  int64_t n = onx_numel(ndim, dims);
  uint8_t *d = n < 0 ? NULL : calloc((size_t)(n ? n : 1), vm_dtype_bytes(dt));
  if (!d) return vmcc_graph_const(c->g, dt, NULL, VMCC_MAX_NDIM + 1, dims); /* sticky error */
  for (int64_t i = 0; i < n; i++) onx_st_f(dt, d, i, vals[i]);
  int32_t t = vmcc_graph_const(c->g, dt, d, ndim, dims);
  if (t >= 0 && c->rep) {
    c->rep->num_consts++;
    c->rep->const_bytes += onx_nbytes(dt, n);
  }
  free(d);
  return t;
}

/* ---------------------------------------------------------------------------
 * Inputs
 */

static void type_str(vm_dtype_t dt, uint32_t ndim, const int64_t *dims, char *buf, size_t n) {
  char d[32];
  size_t used = (size_t)snprintf(buf, n, "%s[", vm_dtype_str(dt, d, sizeof(d)));
  for (uint32_t i = 0; i < ndim && used < n; i++)
    used += (size_t)snprintf(buf + used, n - used, "%s%lld", i ? "," : "", (long long)dims[i]);
  if (used < n) snprintf(buf + used, n - used, "]");
}

/* Refuses (UNIMPLEMENTED) the value vi (what: "input", "output",
 * "value") when its declared type is not a tensor type: a sequence, map,
 * optional or sparse tensor (their data is not a TensorProto). No type at
 * all is accepted. */
static vm_status_t need_tensor_type(const Onnx__ValueInfoProto *vi, const char *what) {
  const Onnx__TypeProto *tp = vi->type;
  if (!tp || (tp->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE && tp->tensor_type))
    return VM_STATUS_OK;
  const char *kind;
  switch (tp->value_case) {
    case ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE: kind = "a sequence type"; break;
    case ONNX__TYPE_PROTO__VALUE_MAP_TYPE: kind = "a map type"; break;
    case ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE: kind = "an optional type"; break;
    case ONNX__TYPE_PROTO__VALUE_SPARSE_TENSOR_TYPE: kind = "a sparse tensor type"; break;
    default: kind = "a type of another kind"; break;
  }
  return vm_status_make(VM_UNIMPLEMENTED, "%s '%.80s' has %s: supported: tensor types only", what,
                        vi->name ? vi->name : "", kind);
}

/* need_tensor_type over the graph's named inputs, outputs and value_info;
 * a sparse initializer is refused too. */
static vm_status_t check_value_types(const Onnx__GraphProto *g) {
  static const char *const what[3] = {"input", "output", "value"};
  Onnx__ValueInfoProto *const *vis[3] = {g->input, g->output, g->value_info};
  size_t nvi[3] = {g->n_input, g->n_output, g->n_value_info};
  for (int k = 0; k < 3; k++)
    for (size_t i = 0; i < nvi[k]; i++) {
      if (!vis[k][i] || !vis[k][i]->name) continue; /* malformed: refused where used */
      vm_status_t st = need_tensor_type(vis[k][i], what[k]);
      if (st) return st;
    }
  if (g->n_sparse_initializer) {
    const Onnx__SparseTensorProto *sp = g->sparse_initializer[0];
    const char *name = sp && sp->values && sp->values->name ? sp->values->name : "";
    return vm_status_make(VM_UNIMPLEMENTED,
                          "initializer '%.80s' is a sparse tensor: supported: dense tensors only",
                          name);
  }
  return VM_STATUS_OK;
}

/* The declared tensor type of a graph input or output: dtype, rank (-1
 * unknown) and dims (-1 where dynamic). */
static vm_status_t declared_type(const Onnx__ValueInfoProto *vi, const char *what, int *has_dt,
                                 vm_dtype_t *dt, int32_t *elem, int32_t *rank, int64_t *dims) {
  *has_dt = 0;
  *rank = -1;
  *elem = 0;
  const Onnx__TypeProto *tp = vi->type;
  if (!tp) return VM_STATUS_OK;
  vm_status_t st = need_tensor_type(vi, what);
  if (st) return st;
  const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
  if (tt->has_elem_type) {
    *elem = tt->elem_type;
    if (onx_dtype_from_onnx(tt->elem_type, dt) != 0)
      return vm_status_make(VM_UNIMPLEMENTED,
                            "%s '%.80s' has data type %s: supported: float, float16, double, "
                            "bool, int8/16/32/64, uint8/16/32/64",
                            what, vi->name, onx_onnx_type_name(tt->elem_type));
    *has_dt = 1;
  }
  if (!tt->shape) return VM_STATUS_OK;
  if (tt->shape->n_dim > VMCC_MAX_NDIM)
    return vm_status_make(VM_UNIMPLEMENTED, "%s '%.80s' has %zu dims, at most %d", what, vi->name,
                          tt->shape->n_dim, VMCC_MAX_NDIM);
  *rank = (int32_t)tt->shape->n_dim;
  for (size_t i = 0; i < tt->shape->n_dim; i++) {
    const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
    dims[i] = -1;
    if (d && d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
      if (d->dim_value > INT32_MAX)
        return vm_status_make(VM_INVALID_ARGUMENT, "%s '%.80s': dim %zu is %lld", what, vi->name, i,
                              (long long)d->dim_value);
      dims[i] = d->dim_value < 0 ? -1 : d->dim_value; /* exporters write -1 for dynamic */
    }
  }
  return VM_STATUS_OK;
}

static const char *dim_name(const Onnx__ValueInfoProto *vi, uint32_t i) {
  const Onnx__TensorShapeProto__Dimension *d = vi->type->tensor_type->shape->dim[i];
  if (d && d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM && d->dim_param)
    return d->dim_param;
  return "?";
}

static int is_initializer(const onx_names_t *names, const char *name) {
  const onx_name_t *e = onx_names_find(names, name);
  return e && e->is_init;
}

/* ---------------------------------------------------------------------------
 * Compile
 */

static void count_op(vmcc_onnx_report_t *rep, const char *op) {
  if (!rep) return;
  for (uint32_t i = 0; i < rep->num_ops; i++) {
    if (strcmp(rep->ops[i].name, op) == 0) {
      rep->ops[i].count++;
      return;
    }
  }
  if (rep->num_ops >= VMCC_ONNX_MAX_REPORT_OPS) return;
  snprintf(rep->ops[rep->num_ops].name, sizeof(rep->ops[0].name), "%s", op);
  rep->ops[rep->num_ops++].count = 1;
}

void onx_count_op(onx_ctx_t *c, const char *op) {
  count_op(c->rep, op);
}

static vm_status_t check_model(const Onnx__ModelProto *m, int64_t *opset) {
  if (!m->graph) return vm_status_make(VM_INVALID_ARGUMENT, "the model has no graph");
  *opset = -1;
  int found = 0;
  for (size_t i = 0; i < m->n_opset_import; i++) {
    const Onnx__OperatorSetIdProto *o = m->opset_import[i];
    if (!o) continue;
    if (!o->domain || !o->domain[0] || strcmp(o->domain, "ai.onnx") == 0) {
      *opset = o->has_version ? o->version : 1;
      found = 1;
    }
  }
  if (!found) {
    if (m->n_opset_import == 0 && m->has_ir_version && m->ir_version < 3) *opset = 1;
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "the model imports no opset of the default ONNX domain");
  }
  if (*opset < ONX_OPSET_MIN || *opset > ONX_OPSET_BOGUS)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "opset %lld is not a valid opset of the default ONNX domain: fix "
                          "the model's opset_import; supported: opsets %d to %d",
                          (long long)*opset, ONX_OPSET_MIN, ONX_OPSET_MAX);
  if (*opset > ONX_OPSET_MAX)
    return vm_status_make(VM_UNIMPLEMENTED, "opset %lld: supported: opsets %d to %d",
                          (long long)*opset, ONX_OPSET_MIN, ONX_OPSET_MAX);
  return VM_STATUS_OK;
}

vm_status_t onx_bind_initializers(onx_ctx_t *c, const Onnx__GraphProto *g) {
  for (size_t i = 0; i < g->n_initializer; i++) {
    const Onnx__TensorProto *tp = g->initializer[i];
    if (!tp || !tp->name || !tp->name[0])
      return vm_status_make(VM_INVALID_ARGUMENT, "initializer %zu has no name", i);
    char what[128];
    snprintf(what, sizeof(what), "initializer '%.80s'", tp->name);
    vmcc_tensor_t t;
    vm_status_t st = onx_tensor_from_proto(tp, c->base_dir, what, &t);
    if (st) return st;
    onx_value_t *v;
    st = onx_add_value(c, tp->name, &v);
    if (!st) st = set_shape(c, v, t.dtype, t.ndim, t.shape);
    if (st) {
      vmcc_tensor_free(&t);
      return st;
    }
    v->data = t.data;
  }
  return VM_STATUS_OK;
}

/* Binds the graph's initializers and inputs. Parameters get registers in
 * graph order. */
static vm_status_t bind_inputs(onx_ctx_t *c, const vmcc_onnx_options_t *o, const char ***names,
                               uint32_t *num_params) {
  const Onnx__GraphProto *g = c->graph;
  vm_status_t st = VM_STATUS_OK;
  *names = calloc(g->n_input ? g->n_input : 1, sizeof(char *));
  if (!*names) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory");
  *num_params = 0;
  st = onx_bind_initializers(c, g);
  if (st) return st;
  for (uint32_t k = 0; o && k < o->num_input_shapes; k++) {
    int found = 0;
    for (size_t i = 0; i < g->n_input; i++)
      if (g->input[i] && g->input[i]->name && o->input_shapes[k].name &&
          strcmp(g->input[i]->name, o->input_shapes[k].name) == 0 &&
          !is_initializer(&c->names, g->input[i]->name))
        found = 1;
    if (!found)
      return vm_status_make(VM_FAILED_PRECONDITION,
                            "input shape for '%.80s': the graph has no such input",
                            o->input_shapes[k].name ? o->input_shapes[k].name : "");
  }
  for (uint32_t k = 0; o && k < o->num_consts; k++) {
    int found = 0;
    for (size_t i = 0; i < g->n_input; i++)
      if (g->input[i] && g->input[i]->name && o->consts[k].name &&
          strcmp(g->input[i]->name, o->consts[k].name) == 0)
        found = 1;
    if (!found)
      return vm_status_make(VM_FAILED_PRECONDITION,
                            "constant for '%.80s': the graph has no such input",
                            o->consts[k].name ? o->consts[k].name : "");
  }
  for (size_t i = 0; i < g->n_input; i++) {
    const Onnx__ValueInfoProto *vi = g->input[i];
    if (!vi || !vi->name || !vi->name[0])
      return vm_status_make(VM_INVALID_ARGUMENT, "graph input %zu has no name", i);
    const vmcc_tensor_t *cv = NULL;
    const vmcc_input_shape_t *is = NULL;
    for (uint32_t k = 0; o && k < o->num_consts; k++)
      if (strcmp(o->consts[k].name, vi->name) == 0) cv = o->consts[k].value;
    for (uint32_t k = 0; o && k < o->num_input_shapes; k++)
      if (strcmp(o->input_shapes[k].name, vi->name) == 0) is = &o->input_shapes[k];
    int has_dt;
    vm_dtype_t dt = VM_F32;
    int32_t rank, elem;
    int64_t dims[VMCC_MAX_NDIM];
    st = declared_type(vi, "input", &has_dt, &dt, &elem, &rank, dims);
    if (st) return st;
    if (is_initializer(&c->names, vi->name) && !cv) continue; /* IR < 4 lists initializers as inputs */
    if (cv) {
      if (!cv->data && cv->nbytes)
        return vm_status_make(VM_FAILED_PRECONDITION, "constant for '%.80s' has no data", vi->name);
      uint64_t nb;
      if (cv->ndim > VMCC_MAX_NDIM || vm_tensor_nbytes(cv->dtype, cv->shape, cv->ndim, &nb) != 0 ||
          nb != cv->nbytes)
        return vm_status_make(VM_FAILED_PRECONDITION,
                              "constant for '%.80s': its size does not match its shape", vi->name);
      if (has_dt && !vm_dtype_equal(dt, cv->dtype)) {
        char a[32], b[32];
        return vm_status_make(
            VM_FAILED_PRECONDITION, "constant for '%.80s' has dtype %s, the graph declares %s",
            vi->name, vm_dtype_str(cv->dtype, a, sizeof(a)), vm_dtype_str(dt, b, sizeof(b)));
      }
      if (rank >= 0) {
        int ok = rank == (int32_t)cv->ndim;
        for (int32_t d = 0; ok && d < rank; d++)
          if (dims[d] >= 0 && dims[d] != cv->shape[d]) ok = 0;
        if (!ok)
          return vm_status_make(VM_FAILED_PRECONDITION,
                                "constant for '%.80s' has a shape the graph does not declare",
                                vi->name);
      }
      /* a bound constant replaces an initializer of the same name */
      onx_value_t *old = find_value(c, vi->name);
      if (old) {
        free(old->data);
        old->data = NULL;
        old->name = "";
        onx_names_find(&c->names, vi->name)->val = -1;
      }
      onx_value_t *v;
      st = onx_add_value(c, vi->name, &v);
      if (!st) st = set_shape(c, v, cv->dtype, cv->ndim, cv->shape);
      if (st) return st;
      uint8_t *d = malloc(cv->nbytes ? cv->nbytes : 1);
      if (!d) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory");
      if (cv->nbytes) memcpy(d, cv->data, cv->nbytes);
      v->data = d;
      continue;
    }
    if (!has_dt)
      return vm_status_make(VM_INVALID_ARGUMENT, "input '%.80s' declares no data type", vi->name);
    if (is) {
      if (rank >= 0 && (uint32_t)rank != is->ndim)
        return vm_status_make(VM_FAILED_PRECONDITION,
                              "input shape for '%.80s' has %u dims, the graph declares %d",
                              vi->name, is->ndim, rank);
      if (is->ndim > VMCC_MAX_NDIM)
        return vm_status_make(VM_FAILED_PRECONDITION, "input shape for '%.80s': too many dims",
                              vi->name);
      for (uint32_t d = 0; d < is->ndim; d++) {
        if (is->dims[d] < 0 || is->dims[d] > INT32_MAX)
          return vm_status_make(VM_FAILED_PRECONDITION, "input shape for '%.80s': dim %u is %lld",
                                vi->name, d, (long long)is->dims[d]);
        if (rank >= 0 && dims[d] >= 0 && dims[d] != is->dims[d])
          return vm_status_make(VM_FAILED_PRECONDITION,
                                "input shape for '%.80s': dim %u is %lld, the graph fixes it "
                                "to %lld",
                                vi->name, d, (long long)is->dims[d], (long long)dims[d]);
      }
      rank = (int32_t)is->ndim;
      memcpy(dims, is->dims, is->ndim * sizeof(int64_t));
    } else {
      if (rank < 0)
        return vm_status_make(VM_FAILED_PRECONDITION,
                              "input '%.80s' has no declared shape: fix it with an input shape "
                              "(--input-shape %.80s=D0,D1,...)",
                              vi->name, vi->name);
      for (int32_t d = 0; d < rank; d++)
        if (dims[d] < 0)
          return vm_status_make(VM_FAILED_PRECONDITION,
                                "input '%.80s': dim %d ('%.40s') is dynamic: fix it with an "
                                "input shape (--input-shape %.80s=D0,D1,...)",
                                vi->name, d, dim_name(vi, (uint32_t)d), vi->name);
    }
    onx_value_t *v;
    st = onx_add_value(c, vi->name, &v);
    if (!st) st = set_shape(c, v, dt, (uint32_t)rank, dims);
    if (st) return st;
    v->tid = -2 - (int32_t)*num_params; /* parameter index, made a tensor below */
    (*names)[(*num_params)++] = vi->name;
  }
  return VM_STATUS_OK;
}

/* Whether node `to` reads, through any chain of nodes, what node `from`
 * writes (breadth first over the readers of each output). -1: out of
 * memory. */
static int depends_on(const onx_ctx_t *c, size_t from, size_t to) {
  const Onnx__GraphProto *g = c->graph;
  uint8_t *seen = calloc(g->n_node, 1);
  uint32_t *queue = malloc(g->n_node * sizeof(uint32_t));
  int found = 0;
  if (!seen || !queue) {
    free(seen);
    free(queue);
    return -1;
  }
  size_t head = 0, tail = 0;
  queue[tail++] = (uint32_t)from;
  seen[from] = 1;
  while (head < tail && !found) {
    const Onnx__NodeProto *n = g->node[queue[head++]];
    for (size_t k = 0; n && k < n->n_output && !found; k++) {
      const onx_name_t *e = onx_names_find(&c->names, n->output[k]);
      for (uint32_t u = 0; e && u < e->num_cons; u++) {
        uint32_t w = c->names.uses[e->cons_off + u].node;
        if (w == to) found = 1;
        if (!seen[w]) {
          seen[w] = 1;
          queue[tail++] = w;
        }
      }
    }
  }
  free(seen);
  free(queue);
  return found;
}

/* Why input `name` of the current node is not defined before it: no node
 * writes it, a later node writes it (out of order), or a later node that
 * depends on this one writes it (a cycle). */
static vm_status_t undefined_input(onx_ctx_t *c, const char *name) {
  const onx_name_t *e = onx_names_find(&c->names, name);
  if (!e || e->producer < 0)
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "input '%.80s' is never defined: no graph input, initializer or node "
                        "output has that name",
                        name);
  size_t p = (size_t)e->producer;
  if (p == c->node_idx)
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "input '%.80s' is the node's own output: the graph has a cycle", name);
  if (p < c->node_idx)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "input '%.80s' is not defined before the node",
                        name);
  const Onnx__NodeProto *pn = c->graph->node[p];
  char who[160];
  if (pn->name && pn->name[0])
    snprintf(who, sizeof(who), "node '%.80s' (%.40s)", pn->name, pn->op_type ? pn->op_type : "");
  else
    snprintf(who, sizeof(who), "node %zu (%.40s)", p, pn->op_type ? pn->op_type : "");
  int dep = depends_on(c, c->node_idx, p);
  if (dep < 0) return vm_status_make(VM_RESOURCE_EXHAUSTED, "onnx: out of host memory");
  if (dep)
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "input '%.80s' is computed by %s, which depends on this node: the graph "
                        "has a cycle",
                        name, who);
  return onx_node_err(c, VM_INVALID_ARGUMENT,
                      "input '%.80s' is computed by %s, later in the graph: nodes must be in "
                      "topological order",
                      name, who);
}

vm_status_t onx_lower_graph(onx_ctx_t *c) {
  const Onnx__GraphProto *g = c->graph;
  for (size_t i = 0; i < g->n_node; i++) {
    const Onnx__NodeProto *n = g->node[i];
    c->node = n;
    c->node_idx = (uint32_t)i;
    if (!n || !n->op_type || !n->op_type[0]) {
      c->node = NULL;
      return vm_status_make(VM_INVALID_ARGUMENT, "node %zu has no op_type", i);
    }
    /* before the skip: a node fused into an earlier one is checked too */
    const onx_op_t *op;
    vm_status_t st = onx_resolve_op(c, &op);
    if (st) return st;
    int has_out = n->n_output > 0 && n->output[0] && n->output[0][0];
    for (size_t k = 1; onx_op_any_output(op) && !has_out && k < n->n_output; k++)
      has_out = n->output[k] && n->output[k][0];
    if (!has_out)
      return onx_node_err(c, VM_INVALID_ARGUMENT,
                          onx_op_any_output(op) ? "the node has no output" : "the node has no output 0");
    c->op = op;
    if (c->skip && c->skip[i]) { /* fused into an earlier node */
      if (c->rep && !c->depth) {
        count_op(c->rep, n->op_type);
        c->rep->num_folded++;
      }
      if (c->skip[i] == ONX_SKIP_IDENTITY) {
        /* its constant factor is in the producer's weights: the output is
         * the run-time input as it is (a view; a pending transpose stays so) */
        onx_value_t *x = NULL;
        for (size_t k = 0; k < n->n_input && !x; k++) {
          onx_value_t *v = n->input[k] && n->input[k][0] ? find_value(c, n->input[k]) : NULL;
          if (v && !v->data) x = v;
        }
        if (!x) return undefined_input(c, n->input[0]);
        st = onx_def_view(c, 0, x, x->ndim, x->dims);
        if (st) return st;
      }
      continue;
    }
    for (size_t k = 0; k < n->n_input; k++) {
      if (!n->input[k] || !n->input[k][0]) continue;
      if (!find_value(c, n->input[k])) return undefined_input(c, n->input[k]);
    }
    if (c->rep && !c->depth) count_op(c->rep, n->op_type);
    uint32_t before = c->num_vals;
    c->fused = 0;
    st = onx_lower_node(c, op);
    if (!st && vmcc_graph_error(c->g)) {
      /* a tensor or call the graph refused (a shape the model made
       * impossible): reported at this node, not as an undefined output */
      vm_status_t ge = vmcc_graph_error(c->g);
      vm_code_t code = vm_status_code(ge);
      st = onx_node_err(c, code == VM_INTERNAL ? VM_INVALID_ARGUMENT : code, "%s",
                        vm_status_message(ge));
    }
    if (st) return st;
    int folded = 1;
    for (uint32_t v = before; v < c->num_vals; v++)
      if (!c->vals[v].data) folded = 0;
    if (folded && c->rep && !c->depth) c->rep->num_folded++;
    for (size_t k = 0; k < n->n_output; k++) {
      if (!n->output[k] || !n->output[k][0] || c->fused) continue;
      if (!find_value(c, n->output[k]))
        return onx_node_err(c, VM_INVALID_ARGUMENT, "output '%.80s' was not defined", n->output[k]);
    }
  }
  c->node = NULL;
  c->op = NULL;
  return VM_STATUS_OK;
}

/* Adds tid to the set (open addressing over cap, a power of two, of
 * tid + 1; 0 free): 1 when it was there already. */
static int tid_seen(int64_t *set, uint32_t cap, int32_t tid) {
  for (uint32_t i = ((uint32_t)tid * 2654435761u) & (cap - 1);; i = (i + 1) & (cap - 1)) {
    if (set[i] == (int64_t)tid + 1) return 1;
    if (!set[i]) {
      set[i] = (int64_t)tid + 1;
      return 0;
    }
  }
}

/* Binds graph output i: checks its declared type against the inferred
 * one and gives it a tensor of its own (seen: the tensors bound so far). */
static vm_status_t bind_output(onx_ctx_t *c, int32_t *outs, uint32_t i, int64_t *seen,
                               uint32_t cap) {
  const Onnx__ValueInfoProto *vi = c->graph->output[i];
  if (!vi || !vi->name || !vi->name[0])
    return vm_status_make(VM_INVALID_ARGUMENT, "graph output %u has no name", i);
  onx_value_t *v = find_value(c, vi->name);
  if (!v)
    return vm_status_make(VM_INVALID_ARGUMENT, "graph output '%.80s' is never computed",
                          vi->name);
  int has_dt;
  vm_dtype_t dt;
  int32_t rank, elem;
  int64_t dims[VMCC_MAX_NDIM];
  vm_status_t st = declared_type(vi, "output", &has_dt, &dt, &elem, &rank, dims);
  if (st) return st;
  if (has_dt && !vm_dtype_equal(dt, v->dt)) {
    char got[128];
    type_str(v->dt, v->ndim, v->dims, got, sizeof(got));
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "graph output '%.80s': the model declares another type than the "
                          "inferred %s",
                          vi->name, got);
  }
  int same = rank < 0 || (uint32_t)rank == v->ndim;
  for (int32_t d = 0; same && d < rank; d++)
    if (dims[d] >= 0 && dims[d] != v->dims[d]) same = 0;
  if (!same && c->rep) {
    /* onnxruntime ignores the declared shape of a graph output: so does
     * the compiler, with a warning (the computed shape is the output's) */
    char got[128], decl[128] = "[";
    onx_dims_str(v->ndim, v->dims, got, sizeof(got));
    for (int32_t d = 0; d < rank; d++) { /* a dynamic dim as ? */
      size_t u = strlen(decl);
      if (dims[d] < 0)
        snprintf(decl + u, sizeof(decl) - u, "%s?", d ? "," : "");
      else
        snprintf(decl + u, sizeof(decl) - u, "%s%lld", d ? "," : "", (long long)dims[d]);
    }
    size_t u = strlen(decl);
    snprintf(decl + u, sizeof(decl) - u, "]");
    if (!c->rep->num_warnings)
      snprintf(c->rep->warning, sizeof(c->rep->warning),
               "graph output '%.80s': the model declares shape %.96s, the graph computes %.96s: "
               "the computed shape is used, as onnxruntime does",
               vi->name, decl, got);
    c->rep->num_warnings++;
  }
  int32_t t = onx_tid(c, v);
  /* a view shares its root's memory: one output per root is returned as is */
  outs[i] = onx_returned(c, v, t, t >= 0 && tid_seen(seen, cap, vmcc_graph_root(c->g, t)));
  return VM_STATUS_OK;
}

int32_t onx_returned(onx_ctx_t *c, const onx_value_t *v, int32_t t, int dup) {
  if (t >= 0 && vmcc_graph_is_returnable(c->g, t) && !dup) return t;
  /* a parameter, constant, view of one, result or repeated output (its
   * memory returned already): returned as a copy */
  int32_t y = vmcc_graph_tensor(c->g, v->dt, v->ndim, v->dims);
  vmcc_arg_t a[2] = {vmcc_a_t(t), vmcc_a_t(y)};
  vmcc_graph_call(c->g, "cl.cast", 2, a);
  return y;
}

static vm_status_t bind_outputs(onx_ctx_t *c, int32_t *outs, uint32_t n) {
  uint32_t cap = 16;
  while (cap < 2 * (uint64_t)n) cap *= 2;
  int64_t *seen = calloc(cap, sizeof(*seen));
  if (!seen) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory");
  vm_status_t st = VM_STATUS_OK;
  for (uint32_t i = 0; i < n && !st; i++) st = bind_output(c, outs, i, seen, cap);
  free(seen);
  return st;
}

static vm_status_t add_meta(onx_ctx_t *c, uint32_t num_params, const char **names,
                            const vmcc_plan_report_t *plan) {
  const Onnx__GraphProto *g = c->graph;
  char key[160], val[256];
  vm_status_t st = vm_builder_add_meta(c->b, "producer", VMCC_ONNX_PRODUCER);
  snprintf(val, sizeof(val), "%lld", (long long)c->opset);
  if (!st) st = vm_builder_add_meta(c->b, "onnx.opset", val);
  for (uint32_t i = 0; !st && i < num_params; i++) {
    onx_value_t *v = find_value(c, names[i]);
    snprintf(key, sizeof(key), "input.%.100s", names[i]);
    type_str(v->dt, v->ndim, v->dims, val, sizeof(val));
    st = vm_builder_add_meta(c->b, key, val);
  }
  for (size_t i = 0; !st && i < g->n_output; i++) {
    onx_value_t *v = find_value(c, g->output[i]->name);
    snprintf(key, sizeof(key), "output.%zu", i);
    type_str(v->dt, v->ndim, v->dims, val, sizeof(val));
    st = vm_builder_add_meta(c->b, key, val);
    snprintf(key, sizeof(key), "output.%zu.name", i);
    if (!st) st = vm_builder_add_meta(c->b, key, g->output[i]->name);
  }
  snprintf(val, sizeof(val), "%llu", (unsigned long long)plan->planned_bytes);
  if (!st) st = vm_builder_add_meta(c->b, "plan.planned_bytes", val);
  snprintf(val, sizeof(val), "%llu", (unsigned long long)plan->unplanned_bytes);
  if (!st) st = vm_builder_add_meta(c->b, "plan.unplanned_bytes", val);
  snprintf(val, sizeof(val), "%llu", (unsigned long long)plan->live_peak_bytes);
  if (!st) st = vm_builder_add_meta(c->b, "plan.live_peak_bytes", val);
  return st;
}

vm_status_t vmcc_onnx_compile(const void *data, size_t size, const char *base_dir,
                              const vmcc_onnx_options_t *opts, vm_executable_t **out_exec,
                              vmcc_onnx_report_t *report) {
  *out_exec = NULL;
  vmcc_onnx_report_t local_rep;
  if (!report) report = &local_rep;
  memset(report, 0, sizeof(*report));
  if (!data && size) return vm_status_make(VM_INVALID_ARGUMENT, "onnx: no data");
  if (size > ONX_MAX_FILE_BYTES)
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "onnx: model over %llu bytes",
                          (unsigned long long)ONX_MAX_FILE_BYTES);
  static const char k_not_model[] =
      "not an ONNX model: the protobuf does not parse as a ModelProto";
  vm_status_t wst = onx_wire_check(&onnx__model_proto__descriptor, data, size, k_not_model);
  if (wst) return wst;
  Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, size, data);
  if (!m) return vm_status_make(VM_INVALID_ARGUMENT, "%s", k_not_model);
  onx_ctx_t c;
  memset(&c, 0, sizeof(c));
  c.rep = report;
  c.base_dir = base_dir;
  c.fuse = opts ? opts->fuse_elementwise : 0;
  const char **names = NULL;
  int32_t *outs = NULL;
  uint32_t num_params = 0;
  vm_status_t st = check_model(m, &c.opset);
  if (!st) st = check_value_types(m->graph);
  if (st) goto done;
  c.graph = m->graph;
  report->opset = c.opset;
  report->num_nodes = (uint32_t)m->graph->n_node;
  {
    int has_sub = 0;
    uint64_t cap = onx_graph_values(m->graph, &has_sub);
    if (has_sub) c.fuse = 0; /* subgraph readers are not fusion's uses */
    if (cap > (1u << 24)) {
      st = vm_status_make(VM_RESOURCE_EXHAUSTED, "onnx: %llu values (at most %u)",
                          (unsigned long long)cap, 1u << 24);
      goto done;
    }
    st = onx_names_build(&c.names, m->graph);
    if (st) goto done;
    c.cap_vals = (uint32_t)cap + 1;
    c.vals = calloc(c.cap_vals, sizeof(*c.vals));
    c.skip = calloc(m->graph->n_node + 1, 1);
    if (!c.vals || !c.skip) {
      st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory");
      goto done;
    }
  }
  if (m->graph->n_output == 0) {
    st = vm_status_make(VM_INVALID_ARGUMENT, "the graph has no outputs");
    goto done;
  }
  st = bind_inputs(&c, opts, &names, &num_params);
  if (st) goto done;

  uint32_t fmain;
  st = vm_builder_create(&c.b);
  if (!st) st = vm_builder_declare_function(c.b, "main", num_params, names, &fmain);
  if (!st) st = vm_builder_const_float(c.b, 1.0, &c.c_one);
  if (!st) st = vm_builder_const_float(c.b, 0.0, &c.c_zero);
  if (!st)
    st = vmcc_graph_create(c.b, fmain, "main", num_params, opts ? opts->plan_align : 0, &c.g);
  if (st) goto done;
  for (uint32_t i = 0; i < c.num_vals; i++) {
    onx_value_t *v = &c.vals[i];
    if (v->tid > -2) continue;
    uint32_t p = (uint32_t)(-2 - v->tid);
    v->tid = vmcc_graph_param(c.g, p, v->name, v->dt, v->ndim, v->dims);
  }
  st = onx_lower_graph(&c);
  if (st) goto done;
  uint32_t nout = (uint32_t)m->graph->n_output;
  outs = calloc(nout, sizeof(*outs));
  if (!outs) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory");
    goto done;
  }
  st = bind_outputs(&c, outs, nout);
  if (!st) st = vmcc_graph_emit_multi(c.g, nout, outs, &report->plan);
  if (!st) st = onx_emit_subfns(&c);
  if (!st) st = add_meta(&c, num_params, names, &report->plan);
  if (!st) st = vm_builder_finish(c.b, out_exec);
  if (st) goto done;
  /* calls emitted: not exposed by the emitter; count of nodes lowered */
  report->num_calls = report->num_nodes - report->num_folded;

done:
  if (st && vm_status_code(st) == VM_INTERNAL) {
    /* an inconsistency the model led the compiler into is a refusal of
     * the model (exit 3 from vmclient compile), not an internal failure */
    vm_status_t inv = vm_status_make(VM_INVALID_ARGUMENT, "%s", vm_status_message(st));
    vm_status_free(st);
    st = inv;
  }
  onx_free_subfns(&c);
  vmcc_graph_free(c.g);
  vm_builder_free(c.b);
  for (uint32_t i = 0; i < c.num_vals; i++) {
    free(c.vals[i].data);
    free(c.vals[i].qdq);
    onx_expr_free(c.vals[i].expr);
  }
  free(c.vals);
  onx_names_free(&c.names);
  onx_scratch_free(c.scratch);
  free(c.skip);
  free(names);
  free(outs);
  onnx__model_proto__free_unpacked(m, NULL);
  return st;
}

/* Reads a whole regular file of at most max bytes. Opened non-blocking, so
 * that a FIFO or device in its place is refused instead of waited on. */
static vm_status_t read_file(const char *path, uint64_t max, uint8_t **out, size_t *out_n) {
  *out = NULL;
  *out_n = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return vm_status_make(errno == EACCES ? VM_PERMISSION_DENIED : VM_NOT_FOUND,
                          "cannot open '%.200s': %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    close(fd);
    return vm_status_make(VM_INVALID_ARGUMENT, "'%.200s' is not a regular file", path);
  }
  if ((uint64_t)sb.st_size > max) {
    close(fd);
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "'%.200s' is over %llu bytes", path,
                          (unsigned long long)max);
  }
  size_t n = (size_t)sb.st_size;
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) {
    close(fd);
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory reading '%.200s'", path);
  }
  size_t done = 0;
  while (done < n) {
    ssize_t r = read(fd, buf + done, n - done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      int e = errno;
      close(fd);
      free(buf);
      return vm_status_make(VM_UNAVAILABLE, "reading '%.200s': %s", path,
                            r < 0 ? strerror(e) : "the file shrank");
    }
    done += (size_t)r;
  }
  close(fd);
  *out = buf;
  *out_n = n;
  return VM_STATUS_OK;
}

/* read_file, then onx_wire_check of a message of type d; bad gets the
 * message for bytes that do not parse ("'path' is not <kind>"). */
static vm_status_t read_message_file(const char *path, uint64_t max,
                                     const ProtobufCMessageDescriptor *d, const char *kind,
                                     uint8_t **buf, size_t *n, char *bad, size_t badlen) {
  snprintf(bad, badlen, "'%.200s' is not %s", path, kind);
  vm_status_t st = read_file(path, max, buf, n);
  if (!st) st = onx_wire_check(d, *buf, *n, bad);
  if (st) {
    free(*buf);
    *buf = NULL;
  }
  return st;
}

vm_status_t vmcc_onnx_compile_file(const char *path, const vmcc_onnx_options_t *opts,
                                   vm_executable_t **out_exec, vmcc_onnx_report_t *report) {
  *out_exec = NULL;
  uint8_t *buf;
  size_t n;
  vm_status_t st = read_file(path, ONX_MAX_FILE_BYTES, &buf, &n);
  if (st) return st;
  char *copy = strdup(path);
  if (!copy) {
    free(buf);
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory");
  }
  st = vmcc_onnx_compile(buf, n, dirname(copy), opts, out_exec, report);
  free(copy);
  free(buf);
  return st;
}

vm_status_t vmcc_onnx_read_io(const char *path, vmcc_onnx_io_t *io) {
  memset(io, 0, sizeof(*io));
  uint8_t *buf;
  size_t n;
  char bad[256];
  vm_status_t st = read_message_file(path, ONX_MAX_FILE_BYTES, &onnx__model_proto__descriptor,
                                     "an ONNX model", &buf, &n, bad, sizeof(bad));
  if (st) return st;
  Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, n, buf);
  free(buf);
  if (!m || !m->graph) {
    if (m) onnx__model_proto__free_unpacked(m, NULL);
    return vm_status_make(VM_INVALID_ARGUMENT, "%s", bad);
  }
  const Onnx__GraphProto *g = m->graph;
  onx_names_t names;
  st = onx_names_build(&names, g);
  io->inputs = calloc(g->n_input + 1, sizeof(char *));
  io->outputs = calloc(g->n_output + 1, sizeof(char *));
  io->node_ops = calloc(g->n_node + 1, sizeof(char *));
  if (!st && (!io->inputs || !io->outputs || !io->node_ops))
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  for (size_t i = 0; !st && i < g->n_input; i++) {
    if (!g->input[i] || !g->input[i]->name) continue;
    if (is_initializer(&names, g->input[i]->name)) continue;
    io->inputs[io->num_inputs] = strdup(g->input[i]->name);
    if (!io->inputs[io->num_inputs++]) st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (size_t i = 0; !st && i < g->n_output; i++) {
    if (!g->output[i] || !g->output[i]->name) continue;
    io->outputs[io->num_outputs] = strdup(g->output[i]->name);
    if (!io->outputs[io->num_outputs++])
      st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (size_t i = 0; !st && i < g->n_node; i++) {
    const char *op = g->node[i] && g->node[i]->op_type ? g->node[i]->op_type : "";
    io->node_ops[io->num_nodes] = strdup(op);
    if (!io->node_ops[io->num_nodes++]) st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  }
  if (!st) io->unsupported = check_value_types(g);
  onx_names_free(&names);
  onnx__model_proto__free_unpacked(m, NULL);
  if (st) vmcc_onnx_io_free(io);
  return st;
}

void vmcc_onnx_io_free(vmcc_onnx_io_t *io) {
  if (!io) return;
  for (uint32_t i = 0; io->inputs && i < io->num_inputs; i++) free(io->inputs[i]);
  for (uint32_t i = 0; io->outputs && i < io->num_outputs; i++) free(io->outputs[i]);
  for (uint32_t i = 0; io->node_ops && i < io->num_nodes; i++) free(io->node_ops[i]);
  free(io->inputs);
  free(io->outputs);
  free(io->node_ops);
  vm_status_free(io->unsupported);
  memset(io, 0, sizeof(*io));
}

vm_status_t vmcc_onnx_read_tensor_file(const char *path, vmcc_tensor_t *out) {
  memset(out, 0, sizeof(*out));
  uint8_t *buf;
  size_t n;
  char bad[256];
  vm_status_t st =
      read_message_file(path, ONX_MAX_TENSOR_BYTES + (1u << 20), &onnx__tensor_proto__descriptor,
                        "a TensorProto", &buf, &n, bad, sizeof(bad));
  if (st) return st;
  Onnx__TensorProto *tp = onnx__tensor_proto__unpack(NULL, n, buf);
  free(buf);
  if (!tp) return vm_status_make(VM_INVALID_ARGUMENT, "%s", bad);
  char what[256];
  snprintf(what, sizeof(what), "tensor file '%.200s'", path);
  st = onx_tensor_from_proto(tp, NULL, what, out);
  onnx__tensor_proto__free_unpacked(tp, NULL);
  return st;
}
