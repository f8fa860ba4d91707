/* The ONNX model builder of the compiler suites (helper_onnx_model.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "helper_onnx_model.h"

void mb_init(mb_t *m, int64_t opset) {
  memset(m, 0, sizeof(*m));
  onnx__model_proto__init(&m->model);
  onnx__graph_proto__init(&m->graph);
  onnx__operator_set_id_proto__init(&m->opset);
  m->opset.domain = "";
  m->opset.has_version = 1;
  m->opset.version = opset;
  m->opsets[0] = &m->opset;
  m->model.n_opset_import = 1;
  m->model.opset_import = m->opsets;
  m->model.has_ir_version = 1;
  m->model.ir_version = 8;
  m->model.graph = &m->graph;
  m->graph.node = m->node_ptrs;
  m->graph.input = m->in_ptrs;
  m->graph.output = m->out_ptrs;
  m->graph.initializer = m->init_ptrs;
}

/* A float tensor value info; dims < 0 are dynamic ("N"). */
Onnx__ValueInfoProto *mb_vi(mb_t *m, const char *name, int32_t elem, uint32_t ndim,
                            const int64_t *dims) {
  uint32_t k = m->nv++;
  Onnx__ValueInfoProto *v = &m->vis[k];
  onnx__value_info_proto__init(v);
  onnx__type_proto__init(&m->types[k]);
  onnx__type_proto__tensor__init(&m->ttypes[k]);
  onnx__tensor_shape_proto__init(&m->shapes[k]);
  v->name = (char *)name;
  v->type = &m->types[k];
  m->types[k].value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  m->types[k].tensor_type = &m->ttypes[k];
  m->ttypes[k].has_elem_type = 1;
  m->ttypes[k].elem_type = elem;
  m->ttypes[k].shape = &m->shapes[k];
  m->shapes[k].n_dim = ndim;
  m->shapes[k].dim = m->dim_ptrs[k];
  for (uint32_t i = 0; i < ndim; i++) {
    Onnx__TensorShapeProto__Dimension *d = &m->dims[k][i];
    onnx__tensor_shape_proto__dimension__init(d);
    if (dims[i] >= 0) {
      d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      d->dim_value = dims[i];
    } else {
      d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      d->dim_param = "N";
    }
    m->dim_ptrs[k][i] = d;
  }
  return v;
}

void mb_input(mb_t *m, const char *name, uint32_t ndim, const int64_t *dims) {
  m->graph.input[m->graph.n_input++] = mb_vi(m, name, 1, ndim, dims);
}

void mb_output(mb_t *m, const char *name, uint32_t ndim, const int64_t *dims) {
  m->graph.output[m->graph.n_output++] = mb_vi(m, name, 1, ndim, dims);
}

/* A node of up to 4 inputs ("" = absent) and one output. */
Onnx__NodeProto *mb_node(mb_t *m, const char *op, const char *name, const char *in0,
                         const char *in1, const char *out) {
  uint32_t k = (uint32_t)m->graph.n_node++;
  Onnx__NodeProto *n = &m->nodes[k];
  onnx__node_proto__init(n);
  n->op_type = (char *)op;
  n->name = (char *)name;
  n->input = m->node_in[k];
  n->output = m->node_out[k];
  if (in0) n->input[n->n_input++] = (char *)in0;
  if (in1) n->input[n->n_input++] = (char *)in1;
  n->output[n->n_output++] = (char *)out;
  m->node_ptrs[k] = n;
  return n;
}

/* n's single attribute, of the given name and type (the caller fills its
 * value). */
static Onnx__AttributeProto *attr_slot(mb_t *m, Onnx__NodeProto *n, const char *name,
                                       Onnx__AttributeProto__AttributeType type) {
  uint32_t k = (uint32_t)(n - m->nodes);
  Onnx__AttributeProto *a = &m->attrs[k];
  onnx__attribute_proto__init(a);
  a->name = (char *)name;
  a->has_type = 1;
  a->type = type;
  m->attr_ptrs[k][0] = a;
  n->n_attribute = 1;
  n->attribute = m->attr_ptrs[k];
  return a;
}

void mb_attr_s(mb_t *m, Onnx__NodeProto *n, const char *name, const char *s) {
  Onnx__AttributeProto *a = attr_slot(m, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
  a->has_s = 1;
  a->s.data = (uint8_t *)s;
  a->s.len = strlen(s);
}

void mb_attr_i(mb_t *m, Onnx__NodeProto *n, const char *name, int64_t v) {
  Onnx__AttributeProto *a = attr_slot(m, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
  a->has_i = 1;
  a->i = v;
}

void mb_attr_ints(mb_t *m, Onnx__NodeProto *n, const char *name, const int64_t *v, size_t count) {
  Onnx__AttributeProto *a = attr_slot(m, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
  a->n_ints = count;
  a->ints = (int64_t *)v;
}

/* Sets n's single attribute to a scalar tensor (a Constant node's value). */
void mb_attr_scalar(mb_t *m, Onnx__NodeProto *n, const char *name, int32_t elem, const void *data,
                    size_t nbytes) {
  Onnx__TensorProto *t = &m->attr_tensors[n - m->nodes];
  onnx__tensor_proto__init(t);
  t->has_data_type = 1;
  t->data_type = elem;
  t->has_raw_data = 1;
  t->raw_data.data = (uint8_t *)data;
  t->raw_data.len = nbytes;
  attr_slot(m, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR)->t = t;
}

void mb_attr_tensor(mb_t *m, Onnx__NodeProto *n, const char *name, int32_t elem, uint32_t ndim,
                    const int64_t *dims, const void *data, size_t nbytes) {
  mb_attr_scalar(m, n, name, elem, data, nbytes);
  Onnx__TensorProto *t = &m->attr_tensors[n - m->nodes];
  t->n_dims = ndim;
  t->dims = m->attr_dims[n - m->nodes];
  for (uint32_t i = 0; i < ndim; i++) t->dims[i] = dims[i];
}

/* An initializer with raw data (nbytes given, so tests can lie). */
Onnx__TensorProto *mb_init_raw(mb_t *m, const char *name, int32_t elem, uint32_t ndim,
                               const int64_t *dims, const void *data, size_t nbytes) {
  uint32_t k = (uint32_t)m->graph.n_initializer++;
  Onnx__TensorProto *t = &m->inits[k];
  onnx__tensor_proto__init(t);
  t->name = (char *)name;
  t->has_data_type = 1;
  t->data_type = elem;
  t->n_dims = ndim;
  t->dims = m->init_dims[k];
  for (uint32_t i = 0; i < ndim; i++) t->dims[i] = dims[i];
  t->has_raw_data = 1;
  t->raw_data.data = (uint8_t *)data;
  t->raw_data.len = nbytes;
  m->init_ptrs[k] = t;
  return t;
}

uint8_t *mb_pack(mb_t *m, size_t *n) {
  *n = onnx__model_proto__get_packed_size(&m->model);
  uint8_t *buf = malloc(*n ? *n : 1);
  assert_non_null(buf);
  onnx__model_proto__pack(&m->model, buf);
  return buf;
}

void mb_node_input(Onnx__NodeProto *n, const char *name) {
  n->input[n->n_input++] = (char *)name;
}

void mb_node_output(Onnx__NodeProto *n, const char *name) {
  assert_true(n->n_output < 4);
  n->output[n->n_output++] = (char *)name;
}

static Onnx__AttributeProto *attrs_add(mb_attrs_t *s, Onnx__NodeProto *n, const char *name,
                                       Onnx__AttributeProto__AttributeType type) {
  if (n->attribute != s->p) n->n_attribute = 0;
  size_t k = n->n_attribute++;
  assert_true(k < MB_MAX_ATTRS);
  Onnx__AttributeProto *a = &s->a[k];
  onnx__attribute_proto__init(a);
  a->name = (char *)name;
  a->has_type = 1;
  a->type = type;
  s->p[k] = a;
  n->attribute = s->p;
  return a;
}

void mb_attrs_int(mb_attrs_t *s, Onnx__NodeProto *n, const char *name, int64_t v) {
  Onnx__AttributeProto *a = attrs_add(s, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
  a->has_i = 1;
  a->i = v;
}

void mb_attrs_ints(mb_attrs_t *s, Onnx__NodeProto *n, const char *name, const int64_t *v,
                   size_t count) {
  Onnx__AttributeProto *a = attrs_add(s, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
  a->n_ints = count;
  a->ints = (int64_t *)v;
}

void mb_attrs_float(mb_attrs_t *s, Onnx__NodeProto *n, const char *name, float v) {
  Onnx__AttributeProto *a = attrs_add(s, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
  a->has_f = 1;
  a->f = v;
}

void mb_attrs_floats(mb_attrs_t *s, Onnx__NodeProto *n, const char *name, uint32_t k,
                     const float *v) {
  Onnx__AttributeProto *a = attrs_add(s, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS);
  assert_true(k <= MB_MAX_ATTRS);
  float *dst = s->floats[n->n_attribute - 1];
  memcpy(dst, v, k * sizeof(float));
  a->n_floats = k;
  a->floats = dst;
}

void mb_attrs_str(mb_attrs_t *s, Onnx__NodeProto *n, const char *name, const char *v) {
  Onnx__AttributeProto *a = attrs_add(s, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
  a->has_s = 1;
  a->s.data = (uint8_t *)v;
  a->s.len = strlen(v);
}

void mb_attrs_strs(mb_attrs_t *s, Onnx__NodeProto *n, const char *name, uint32_t k,
                   const char *const *v) {
  Onnx__AttributeProto *a = attrs_add(s, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS);
  assert_true(k <= MB_MAX_ATTRS);
  ProtobufCBinaryData *dst = s->strs[n->n_attribute - 1];
  for (uint32_t i = 0; i < k; i++) {
    dst[i].data = (uint8_t *)v[i];
    dst[i].len = strlen(v[i]);
  }
  a->n_strings = k;
  a->strings = dst;
}
