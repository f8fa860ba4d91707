/* ONNX models as protobuf bytes. See onnx_bytes.h. */
#include "onnx_bytes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pb_raw(pb_t *b, const void *p, size_t n) {
  if (b->n + n > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + n) cap *= 2;
    b->d = realloc(b->d, cap);
    if (!b->d) abort();
    b->cap = cap;
  }
  if (n) memcpy(b->d + b->n, p, n);
  b->n += n;
}

void pb_varint(pb_t *b, uint64_t v) {
  uint8_t tmp[10];
  size_t n = 0;
  do {
    tmp[n] = (uint8_t)(v & 0x7f);
    v >>= 7;
    if (v) tmp[n] |= 0x80;
    n++;
  } while (v);
  pb_raw(b, tmp, n);
}

size_t pb_varint_len(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) v >>= 7, n++;
  return n;
}

void pb_int(pb_t *b, uint32_t field, uint64_t v) {
  pb_varint(b, (uint64_t)field << 3);
  pb_varint(b, v);
}

void pb_bytes(pb_t *b, uint32_t field, const void *p, size_t n) {
  pb_varint(b, (uint64_t)field << 3 | 2);
  pb_varint(b, n);
  pb_raw(b, p, n);
}

void pb_str(pb_t *b, uint32_t field, const char *s) {
  pb_bytes(b, field, s, strlen(s));
}

void pb_msg(pb_t *b, uint32_t field, pb_t *sub) {
  pb_bytes(b, field, sub->d, sub->n);
  free(sub->d);
  memset(sub, 0, sizeof(*sub));
}

/* A float tensor ValueInfoProto of ndim dims (each 1 when dims is NULL)
 * as graph field `field` (11 input, 12 output). */
void onnx_add_value_info(pb_t *graph, uint32_t field, const char *name, uint32_t ndim,
                         const int64_t *dims) {
  onnx_add_typed_value_info(graph, field, name, 1, ndim, dims);
}

void onnx_add_typed_value_info(pb_t *graph, uint32_t field, const char *name, int elem,
                               uint32_t ndim, const int64_t *dims) {
  pb_t shape = {0}, tensor = {0}, type = {0}, vi = {0};
  for (uint32_t i = 0; i < ndim; i++) {
    pb_t dim = {0};
    pb_int(&dim, 1, (uint64_t)(dims ? dims[i] : 1));
    pb_msg(&shape, 1, &dim);
  }
  pb_int(&tensor, 1, (uint64_t)elem);
  pb_msg(&tensor, 2, &shape);
  pb_msg(&type, 1, &tensor); /* tensor_type */
  pb_str(&vi, 1, name);
  pb_msg(&vi, 2, &type);
  pb_msg(graph, field, &vi);
}

void onnx_add_node(pb_t *graph, const char *op, const char *name, const char *const *in,
                   size_t nin, const char *out) {
  onnx_add_node_attrs(graph, op, name, in, nin, &out, 1, NULL);
}

void onnx_add_node_attrs(pb_t *graph, const char *op, const char *name, const char *const *in,
                         size_t nin, const char *const *out, size_t nout, pb_t *attrs) {
  pb_t node = {0};
  for (size_t i = 0; i < nin; i++) pb_str(&node, 1, in[i]);
  for (size_t i = 0; i < nout; i++) pb_str(&node, 2, out[i]);
  pb_str(&node, 3, name);
  pb_str(&node, 4, op);
  if (attrs) {
    if (attrs->n) pb_raw(&node, attrs->d, attrs->n);
    free(attrs->d);
    memset(attrs, 0, sizeof(*attrs));
  }
  pb_msg(graph, 1, &node);
}

void onnx_attr_graph(pb_t *attrs, const char *name, pb_t *graph) {
  pb_t a = {0};
  pb_str(&a, 1, name);
  pb_msg(&a, 6, graph);
  pb_int(&a, 20, 5); /* GRAPH */
  pb_msg(attrs, 5, &a);
}

void onnx_attr_int(pb_t *attrs, const char *name, int list, int64_t v) {
  pb_t a = {0};
  pb_str(&a, 1, name);
  pb_int(&a, list ? 8 : 3, (uint64_t)v); /* ints, i */
  pb_int(&a, 20, list ? 7 : 2);          /* INTS, INT */
  pb_msg(attrs, 5, &a);
}

void onnx_attr_ints(pb_t *attrs, const char *name, const int64_t *v, size_t n) {
  pb_t a = {0};
  pb_str(&a, 1, name);
  for (size_t i = 0; i < n; i++) pb_int(&a, 8, (uint64_t)v[i]); /* ints */
  pb_int(&a, 20, 7);                                             /* INTS */
  pb_msg(attrs, 5, &a);
}

void onnx_add_initializer(pb_t *graph, const char *name, int elem, uint32_t ndim,
                          const int64_t *dims, const void *raw, size_t nbytes) {
  pb_t t = {0};
  for (uint32_t i = 0; i < ndim; i++) pb_int(&t, 1, (uint64_t)dims[i]);
  pb_int(&t, 2, (uint64_t)elem);
  pb_str(&t, 8, name);
  pb_bytes(&t, 9, raw, nbytes);
  pb_msg(graph, 5, &t);
}

pb_t onnx_model_of(pb_t *graph, uint64_t opset) {
  pb_t m = {0}, os = {0};
  pb_int(&m, 1, 7);
  pb_msg(&m, 7, graph);
  pb_int(&os, 2, opset);
  pb_msg(&m, 8, &os);
  return m;
}


/* A chain of n Relu nodes x -> t1 -> ... -> y over [2, 4]. */
pb_t onnx_relu_chain(uint32_t n) {
  static const int64_t d24[2] = {2, 4};
  pb_t g = {0};
  char a[32], b[32];
  for (uint32_t i = 0; i < n; i++) {
    snprintf(a, sizeof(a), "t%u", i);
    snprintf(b, sizeof(b), "t%u", i + 1);
    const char *in[1] = {i ? a : "x"};
    char name[32];
    snprintf(name, sizeof(name), "r%u", i);
    onnx_add_node(&g, "Relu", name, in, 1, i + 1 < n ? b : "y");
  }
  onnx_add_value_info(&g, 11, "x", 2, d24);
  onnx_add_value_info(&g, 12, "y", 2, d24);
  return onnx_model_of(&g, 17);
}

