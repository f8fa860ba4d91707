/* ONNX models written as protobuf bytes (field numbers of onnx.proto), for
 * suites and benchmarks that need models the protoc-c structs cannot hold
 * (nested 200,000 deep, 100,000 inputs to a node) or need many of them.
 * Out of memory aborts. */
#ifndef VMRPC_TEST_ONNX_BYTES_H
#define VMRPC_TEST_ONNX_BYTES_H

#include <stddef.h>
#include <stdint.h>

typedef struct pb {
  uint8_t *d;
  size_t n, cap;
} pb_t;

/* ---- protobuf ---- */
void pb_raw(pb_t *b, const void *p, size_t n);
void pb_varint(pb_t *b, uint64_t v);
size_t pb_varint_len(uint64_t v);
void pb_int(pb_t *b, uint32_t field, uint64_t v);
void pb_bytes(pb_t *b, uint32_t field, const void *p, size_t n);
void pb_str(pb_t *b, uint32_t field, const char *s);
/* Appends sub as message field `field` and frees it. */
void pb_msg(pb_t *b, uint32_t field, pb_t *sub);

/* ---- ONNX ---- */
/* A float tensor ValueInfoProto of ndim dims (each 1 when dims is NULL) as
 * graph field `field` (11 input, 12 output). */
void onnx_add_value_info(pb_t *graph, uint32_t field, const char *name, uint32_t ndim,
                         const int64_t *dims);
/* The same of an ONNX elem type (1 float, 7 int64, 9 bool ...). */
void onnx_add_typed_value_info(pb_t *graph, uint32_t field, const char *name, int elem,
                               uint32_t ndim, const int64_t *dims);
/* A NodeProto of nin inputs and one output as graph field 1. */
void onnx_add_node(pb_t *graph, const char *op, const char *name, const char *const *in,
                   size_t nin, const char *out);
/* The same with nout outputs and the attributes in attrs (AttributeProto
 * messages as node field 5, written by onnx_attr_*; freed; may be NULL). */
void onnx_add_node_attrs(pb_t *graph, const char *op, const char *name, const char *const *in,
                         size_t nin, const char *const *out, size_t nout, pb_t *attrs);
/* Attributes: a graph (If's branches, Loop's and Scan's body; frees
 * graph), an int (list 0) or a list of one int (list 1). */
void onnx_attr_graph(pb_t *attrs, const char *name, pb_t *graph);
void onnx_attr_int(pb_t *attrs, const char *name, int list, int64_t v);
/* A list of n ints. */
void onnx_attr_ints(pb_t *attrs, const char *name, const int64_t *v, size_t n);
/* An initializer of elem type with raw data as graph field 5. */
void onnx_add_initializer(pb_t *graph, const char *name, int elem, uint32_t ndim,
                          const int64_t *dims, const void *raw, size_t nbytes);
/* A ModelProto (IR 7) of graph at opset; frees graph. */
pb_t onnx_model_of(pb_t *graph, uint64_t opset);
/* A chain of n Relu nodes x -> t1 -> ... -> y, x and y float [2, 4]. */
pb_t onnx_relu_chain(uint32_t n);

#endif
