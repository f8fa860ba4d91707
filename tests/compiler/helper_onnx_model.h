/* A tiny ONNX model builder over the structs protoc-c generates, shared by
 * the compiler suites. Strings and data are borrowed, not copied. */
#ifndef VMRPC_TEST_HELPER_ONNX_MODEL_H
#define VMRPC_TEST_HELPER_ONNX_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "onnx.pb-c.h"

#define MAXN 64 /* an unrolled 3-step LSTM has ~60 nodes */

typedef struct mb {
  Onnx__ModelProto model;
  Onnx__GraphProto graph;
  Onnx__OperatorSetIdProto opset;
  Onnx__OperatorSetIdProto *opsets[1];
  Onnx__NodeProto nodes[MAXN];
  Onnx__NodeProto *node_ptrs[MAXN];
  char *node_in[MAXN][6];
  char *node_out[MAXN][4];
  Onnx__AttributeProto attrs[MAXN];
  Onnx__AttributeProto *attr_ptrs[MAXN][1];
  Onnx__ValueInfoProto vis[MAXN];
  Onnx__ValueInfoProto *in_ptrs[MAXN], *out_ptrs[MAXN];
  Onnx__TypeProto types[MAXN];
  Onnx__TypeProto__Tensor ttypes[MAXN];
  Onnx__TensorShapeProto shapes[MAXN];
  Onnx__TensorShapeProto__Dimension dims[MAXN][4];
  Onnx__TensorShapeProto__Dimension *dim_ptrs[MAXN][4];
  Onnx__TensorProto inits[MAXN];
  Onnx__TensorProto attr_tensors[MAXN];
  Onnx__TensorProto *init_ptrs[MAXN];
  int64_t init_dims[MAXN][4];
  int64_t attr_dims[MAXN][4];
  uint32_t nv;
} mb_t;

/* Initialises an empty model of the default domain at opset. */
void mb_init(mb_t *m, int64_t opset);
/* A tensor value info of ONNX elem type; dims < 0 are dynamic ("N"). */
Onnx__ValueInfoProto *mb_vi(mb_t *m, const char *name, int32_t elem, uint32_t ndim,
                            const int64_t *dims);
/* Graph inputs and outputs (float). */
void mb_input(mb_t *m, const char *name, uint32_t ndim, const int64_t *dims);
void mb_output(mb_t *m, const char *name, uint32_t ndim, const int64_t *dims);
/* A node of up to 2 inputs (NULL = none) and one output. */
Onnx__NodeProto *mb_node(mb_t *m, const char *op, const char *name, const char *in0,
                         const char *in1, const char *out);
/* Adds input name to node n (for nodes of more than 2 inputs). */
void mb_node_input(Onnx__NodeProto *n, const char *name);
/* Adds output name to node n (for nodes of up to 4 outputs). */
void mb_node_output(Onnx__NodeProto *n, const char *name);
/* Sets n's single attribute to a string. */
void mb_attr_s(mb_t *m, Onnx__NodeProto *n, const char *name, const char *s);
/* n's single attribute: an int, or a list of ints (v must outlive m). */
void mb_attr_i(mb_t *m, Onnx__NodeProto *n, const char *name, int64_t v);
void mb_attr_ints(mb_t *m, Onnx__NodeProto *n, const char *name, const int64_t *v, size_t count);
/* Sets n's single attribute to a scalar tensor of ONNX elem type with raw
 * data (a Constant node's value). */
void mb_attr_scalar(mb_t *m, Onnx__NodeProto *n, const char *name, int32_t elem, const void *data,
                    size_t nbytes);
/* mb_attr_scalar with dims (ndim <= 4): a Constant node's tensor value. */
void mb_attr_tensor(mb_t *m, Onnx__NodeProto *n, const char *name, int32_t elem, uint32_t ndim,
                    const int64_t *dims, const void *data, size_t nbytes);
/* An initializer with raw data (nbytes given, so tests can lie). */
Onnx__TensorProto *mb_init_raw(mb_t *m, const char *name, int32_t elem, uint32_t ndim,
                               const int64_t *dims, const void *data, size_t nbytes);
/* Attributes beyond mb_t's one per node: up to MB_MAX_ATTRS on one node,
 * held in s (each list of at most MB_MAX_ATTRS values, copied). */
#define MB_MAX_ATTRS 8
typedef struct mb_attrs {
  Onnx__AttributeProto a[MB_MAX_ATTRS];
  Onnx__AttributeProto *p[MB_MAX_ATTRS];
  float floats[MB_MAX_ATTRS][MB_MAX_ATTRS];
  ProtobufCBinaryData strs[MB_MAX_ATTRS][MB_MAX_ATTRS];
} mb_attrs_t;
void mb_attrs_int(mb_attrs_t *s, Onnx__NodeProto *n, const char *name, int64_t v);
/* an INTS attribute: v is kept, not copied (it must outlive the packing) */
void mb_attrs_ints(mb_attrs_t *s, Onnx__NodeProto *n, const char *name, const int64_t *v,
                   size_t count);
void mb_attrs_float(mb_attrs_t *s, Onnx__NodeProto *n, const char *name, float v);
void mb_attrs_floats(mb_attrs_t *s, Onnx__NodeProto *n, const char *name, uint32_t k,
                     const float *v);
void mb_attrs_str(mb_attrs_t *s, Onnx__NodeProto *n, const char *name, const char *v);
void mb_attrs_strs(mb_attrs_t *s, Onnx__NodeProto *n, const char *name, uint32_t k,
                   const char *const *v);
/* The packed bytes (malloc'ed). */
uint8_t *mb_pack(mb_t *m, size_t *n);

#endif
