/* Lowering an operator as a small graph of other operators (its ONNX
 * function body, written in C): sub-nodes that the composite lowerings
 * (onnx_ops_compose.c, onnx_ops_index.c) build and run through the
 * registry's own lowerings, so every check, fold and refusal those make
 * holds for the composite too. A sub-node is lowered at opset
 * ONX_SUB_OPSET whatever the model's (the bodies are written for its
 * definitions); its values get fresh names owned by the context. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_ops.h"

struct onx_scratch {
  char **names;
  uint32_t n, cap;
};

void onx_scratch_free(struct onx_scratch *s) {
  if (!s) return;
  for (uint32_t i = 0; i < s->n; i++) free(s->names[i]);
  free(s->names);
  free(s);
}

/* Keeps name (malloc'ed) until the compile ends; NULL when out of memory
 * (name freed). */
static char *keep_name(onx_ctx_t *c, char *name) {
  if (!name) return NULL;
  struct onx_scratch *s = c->scratch;
  if (!s && !(s = c->scratch = calloc(1, sizeof(*s)))) {
    free(name);
    return NULL;
  }
  if (s->n == s->cap) {
    uint32_t cap = s->cap ? s->cap * 2 : 32;
    char **nn = realloc(s->names, cap * sizeof(*nn));
    if (!nn) {
      free(name);
      return NULL;
    }
    s->names = nn;
    s->cap = cap;
  }
  s->names[s->n++] = name;
  return name;
}

const char *onx_sub_name(onx_ctx_t *c) {
  static const char fmt[] = "%s::sub%u";
  const char *base = c->node && c->node->n_output && c->node->output[0] ? c->node->output[0] : "";
  uint32_t k = c->scratch ? c->scratch->n : 0;
  size_t len = strlen(base) + 32;
  char *s = malloc(len);
  if (s) snprintf(s, len, fmt, base, k);
  return keep_name(c, s);
}

/* Sub-nodes may add this many values per composite node, and two more
 * per input (onnx_compile.c sizes the value table with it). */
#define SUB_VALUES 64

uint32_t onx_sub_budget(const Onnx__NodeProto *n) {
  static const onx_lower_fn k_sub_fns[] = {
      onx_op_attention,
      onx_op_bitwise,
      onx_op_rotary,
      onx_op_col2im,
      onx_op_affine_grid,
      onx_op_lrn,
      onx_op_upsample,
      onx_op_dft,
      onx_op_group_norm,
      onx_op_cast_like,
      onx_op_lp_pool,
      onx_op_bitshift,
      onx_op_cumulative, /* a float CumSum: onx_op_cumsum */
      onx_op_einsum,
      onx_op_depth_space,
      onx_op_hardmax,
      onx_op_instance_norm,
      onx_op_lp_norm,
      onx_op_mvn,
      onx_op_nll,
      onx_op_reduce_composite,
      onx_op_rms_norm,
      onx_op_tile,
      onx_op_trilu,
      onx_op_variadic,
      onx_op_center_crop_pad,
      onx_op_compress,
      onx_op_gather_elements,
      onx_op_gather_nd,
      onx_op_max_unpool,
      onx_op_one_hot,
      onx_op_reverse_sequence,
      onx_op_causal_conv,
      onx_op_flex_attention,
      onx_op_linear_attention,
      onx_op_quantize, /* the storage types: float32 operators around a Cast */
      onx_op_dequantize,
  };
  const onx_op_t *op = n ? onx_find_node_op(n) : NULL;
  if (op && (op->fn == onx_op_scatter_elements || op->fn == onx_op_scatter_nd))
    return SUB_VALUES + 8 * ONX_SCATTER_LEVELS; /* a Gather and a step per level */
  /* a bfloat16 node computed in float32: a Cast per input, a fresh value
   * and a Cast per output */
  uint32_t around = n ? (uint32_t)(n->n_input + 2 * n->n_output) : 0;
  if (op && op->fn == onx_op_tfidf) /* per gram size */
    return SUB_VALUES + 16 * ONX_TFIDF_MAX_SIZES + around;
  for (size_t i = 0; op && i < sizeof(k_sub_fns) / sizeof(k_sub_fns[0]); i++)
    if (op->fn == k_sub_fns[i]) return SUB_VALUES + 2 * (uint32_t)n->n_input + around;
  return around;
}

static vm_status_t no_room(onx_ctx_t *c) {
  return onx_node_err(c, VM_RESOURCE_EXHAUSTED,
                      "its sub-nodes need more values than the compiler set aside (or out of "
                      "host memory)");
}

vm_status_t onx_sub(onx_ctx_t *c, const char *op_type, uint32_t nin, const char *const *ins,
                    uint32_t nout, const char *const *outs, uint32_t nattr,
                    const onx_sattr_t *attrs) {
  if (nin > 16 || nout > 4 || nattr > 8)
    return onx_node_err(c, VM_INTERNAL, "sub-node %s: too many inputs, outputs or attributes",
                        op_type);
  if (c->num_vals + nout + 8 > c->cap_vals) return no_room(c);
  Onnx__AttributeProto ab[8], *ap[8];
  for (uint32_t i = 0; i < nattr; i++) {
    Onnx__AttributeProto a = ONNX__ATTRIBUTE_PROTO__INIT;
    a.name = (char *)attrs[i].name;
    a.has_type = 1;
    switch (attrs[i].kind) {
      case ONX_SA_INT:
        a.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
        a.has_i = 1;
        a.i = attrs[i].i;
        break;
      case ONX_SA_FLOAT:
        a.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
        a.has_f = 1;
        a.f = attrs[i].f;
        break;
      case ONX_SA_INTS:
        a.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
        a.n_ints = attrs[i].n;
        a.ints = (int64_t *)attrs[i].ints;
        break;
      default:
        a.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
        a.has_s = 1;
        a.s.data = (uint8_t *)attrs[i].s;
        a.s.len = strlen(attrs[i].s);
        break;
    }
    ab[i] = a;
    ap[i] = &ab[i];
  }
  Onnx__NodeProto n = ONNX__NODE_PROTO__INIT;
  n.n_input = nin;
  n.input = (char **)ins;
  n.n_output = nout;
  n.output = (char **)outs;
  n.name = c->node->name;
  n.op_type = (char *)op_type;
  n.n_attribute = nattr;
  n.attribute = ap;
  for (uint32_t i = 0; i < nin; i++)
    if (ins[i] && ins[i][0] && !onx_lookup(c, ins[i]))
      return onx_node_err(c, VM_INTERNAL, "sub-node %s: input '%.80s' is not defined", op_type,
                          ins[i]);
  const Onnx__NodeProto *saved = c->node;
  const onx_op_t *saved_op = c->op;
  int64_t saved_opset = c->opset;
  int saved_fused = c->fused;
  c->node = &n;
  c->opset = ONX_SUB_OPSET;
  c->sub_depth++;
  const onx_op_t *op;
  vm_status_t st = onx_resolve_op(c, &op);
  if (!st) {
    c->op = op;
    st = op->fn(c);
  }
  c->sub_depth--;
  c->node = saved;
  c->op = saved_op;
  c->opset = saved_opset;
  c->fused = saved_fused;
  if (st) return st;
  for (uint32_t i = 0; i < nout; i++)
    if (outs[i] && outs[i][0] && !onx_lookup(c, outs[i]))
      return onx_node_err(c, VM_INTERNAL, "sub-node %s: output %u was not defined", op_type, i);
  return VM_STATUS_OK;
}

vm_status_t onx_sub1(onx_ctx_t *c, const char *op_type, const char *out, const char *in0,
                     const char *in1, const char *in2, uint32_t nattr, const onx_sattr_t *attrs,
                     const char **out_name) {
  const char *ins[3] = {in0, in1, in2};
  uint32_t nin = in2 ? 3 : in1 ? 2 : 1;
  if (!out && !(out = onx_sub_name(c))) return no_room(c);
  if (out_name) *out_name = out;
  return onx_sub(c, op_type, nin, ins, 1, &out, nattr, attrs);
}

vm_status_t onx_sub_const(onx_ctx_t *c, vm_dtype_t dt, uint32_t ndim, const int64_t *dims,
                          uint8_t *data, const char **out_name) {
  *out_name = NULL;
  const char *name = onx_sub_name(c);
  if (!name || c->num_vals + 1 > c->cap_vals) {
    free(data);
    return no_room(c);
  }
  Onnx__NodeProto n = ONNX__NODE_PROTO__INIT;
  char *outs[1] = {(char *)name};
  n.n_output = 1;
  n.output = outs;
  n.name = c->node->name;
  n.op_type = c->node->op_type;
  const Onnx__NodeProto *saved = c->node;
  c->node = &n;
  vm_status_t st = onx_def_const(c, 0, dt, ndim, dims, data);
  c->node = saved;
  if (!st) *out_name = name;
  return st;
}

vm_status_t onx_sub_const_f(onx_ctx_t *c, vm_dtype_t dt, uint32_t ndim, const int64_t *dims,
                            const double *vals, const char **out_name) {
  int64_t n = onx_numel(ndim, dims);
  uint8_t *d;
  *out_name = NULL;
  if (n < 0) return onx_node_err(c, VM_INVALID_ARGUMENT, "a constant's shape overflows");
  VM_RETURN_IF_ERROR(onx_alloc_const(c, dt, n, &d));
  for (int64_t i = 0; i < n; i++) {
    if (onx_is_float(dt))
      onx_st_f(dt, d, i, vals[i]);
    else
      onx_st_i(dt, d, i, (int64_t)vals[i]);
  }
  return onx_sub_const(c, dt, ndim, dims, d, out_name);
}

vm_status_t onx_sub_scalar(onx_ctx_t *c, vm_dtype_t dt, double v, const char **out_name) {
  return onx_sub_const_f(c, dt, 0, NULL, &v, out_name);
}

vm_status_t onx_sub_ints(onx_ctx_t *c, uint32_t n, const int64_t *vals, const char **out_name) {
  uint8_t *d;
  int64_t dim = n;
  *out_name = NULL;
  VM_RETURN_IF_ERROR(onx_alloc_const(c, VM_I64, n, &d));
  if (n) memcpy(d, vals, n * sizeof(int64_t));
  return onx_sub_const(c, VM_I64, 1, &dim, d, out_name);
}
