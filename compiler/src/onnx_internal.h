/* Internals of the ONNX front end (prefix onx_): values, the compile
 * context, tensor and attribute readers, host evaluation and the operator
 * lowerings. */
#ifndef ONX_INTERNAL_H
#define ONX_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "onnx.pb-c.h"
#include "vmrpc/checked.h"
#include "vmrpc/dtype.h"
#include "vmrpc/status.h"
#include "vmcompiler/graph.h"
#include "vmcompiler/onnx.h"

/* Limits on what a model may ask for. */
#define ONX_MAX_TENSOR_BYTES (4ull << 30) /* one constant */
/* the element types a tensor may have, for messages */
#define ONX_DTYPES_SUPPORTED                                                             \
  "float, float16, double, bfloat16, bool, int8/16/32/64, uint8/16/32/64, int4, uint4, " \
  "int2, uint2, float8e4m3fn, float8e4m3fnuz, float8e5m2, float8e5m2fnuz, float8e8m0, "  \
  "float4e2m1"
#define ONX_MAX_FOLD_ELEMS (64ll << 20)   /* one folded constant */
#define ONX_MAX_DIM INT32_MAX             /* one dim of any value */
#define ONX_MAX_ELEMS ((int64_t)1 << 40)  /* one value (its nonzero dims' product too) */

/* Bounds on a model's structure, checked on the wire before it is unpacked
 * (onnx_wire.c; docs/onnx.md and docs/security.md list them). */
#define ONX_MAX_DEPTH 100          /* protobuf messages within each other */
#define ONX_MAX_NODES 1000000      /* nodes of every graph and function */
#define ONX_MAX_NODE_IO 4096       /* inputs, and outputs, of one node */
#define ONX_MAX_NODE_ATTRS 1024    /* attributes of one node */
#define ONX_MAX_RANK 64            /* dims of a shape or tensor */
#define ONX_MAX_ELEMENTS (1u << 24) /* messages and repeated strings */

/* A row of the operator registry (onnx_ops.c). */
typedef struct onx_op onx_op_t;

/* A pending fused elementwise expression (onnx_ops_elementwise.c). */
typedef struct onx_expr onx_expr_t;

/* The quantized source of a DequantizeLinear's output (onnx_ops_quant.c). */
typedef struct onx_qdq onx_qdq_t;

/* A value of the graph: a host constant (data), a tensor computed at run
 * time (tid), or a pending elementwise expression (expr) that onx_tid
 * emits when something needs it as a tensor. */
typedef struct onx_value {
  const char *name;
  vm_dtype_t dt;
  uint32_t ndim;
  int64_t dims[VMCC_MAX_NDIM];
  int64_t numel;
  uint8_t *data;    /* host constant (owned), NULL for a run-time tensor */
  int32_t tid;      /* graph tensor; for a constant, its materialisation (-1: none yet) */
  onx_expr_t *expr; /* pending expression (owned), or NULL */
  onx_qdq_t *qdq;   /* a dequantization: its source (owned); with no data and no
                       tid yet, onx_tid emits it (a fused consumer reads the source) */
  uint32_t uses;    /* node inputs and graph outputs naming it */
  /* a pending transpose (onnx_layout.c): the value is transpose(lt_src,
   * lt_perm), lt_src a tensor of the graph lt_g (NULL: none). onx_tid emits
   * the cl.transpose when something needs the value itself; layout-aware
   * lowerings (Transpose, elementwise) work on lt_src instead. */
  vmcc_graph_t *lt_g;
  int32_t lt_src;
  uint8_t lt_perm[VMCC_MAX_NDIM];
  /* then padded (0 no, 1 with zeros, 2 edge) by lt_pads (begins, then ends,
   * of the transposed axes): a Conv or MaxPool takes the pads as its own */
  uint8_t lt_pad;
  int32_t lt_pads[2 * VMCC_MAX_NDIM];
  /* a pending scale product (onnx_ops_quant.c): the value is Mul(ps_a,
   * ps_b) (the names of the Mul's inputs: one a run-time float32 scalar,
   * the other a float32 constant) in the graph ps_g (NULL: none). onx_tid
   * emits the cl.binary.mul when something needs the value itself; a
   * dequantizing cl.qgemm takes the two factors into its store instead. */
  vmcc_graph_t *ps_g;
  const char *ps_a, *ps_b;
  /* DynamicQuantizeLinear's y emitted as int16 less its zero point
   * (onnx_ops_quant.c): only MatMulIntegers with that zero point read it */
  uint8_t centered;
  /* a float32 constant B's cl.gemm_packed panels, made once per graph for
   * every MatMul that reads it: tensor pk_tid of graph pk_g (NULL: none) */
  vmcc_graph_t *pk_g;
  int32_t pk_tid;
} onx_value_t;

/* ---- value names (onnx_names.c) ---- */
typedef struct onx_use {
  uint32_t node, slot; /* node index, and which of its inputs */
} onx_use_t;

typedef struct onx_name {
  const char *name; /* borrowed from the model; NULL: a free slot */
  uint32_t hash;
  int32_t val;      /* index in onx_ctx_t.vals of its value so far, -1 none */
  int32_t producer; /* first node writing it, -1 none */
  uint32_t cons_off, num_cons; /* its readers: uses[cons_off ...], node order */
  uint32_t outputs; /* times the graph's outputs name it */
  uint8_t is_init;  /* an initializer's name */
} onx_name_t;

typedef struct onx_names {
  onx_name_t *tab; /* open addressing, cap a power of two */
  uint32_t cap, n;
  onx_use_t *uses;
} onx_names_t;

/* Indexes every name the graph's initializers, outputs and nodes use. */
vm_status_t onx_names_build(onx_names_t *t, const Onnx__GraphProto *g);
void onx_names_free(onx_names_t *t);
/* The entry of name; NULL when absent (or name NULL or ""). */
onx_name_t *onx_names_find(const onx_names_t *t, const char *name);
/* The entry of name, added when absent; NULL for no name or out of memory.
 * Entries move when the table grows: keep no pointer across an add. */
onx_name_t *onx_names_add(onx_names_t *t, const char *name);

enum { ONX_SKIP_FOLDED = 1, ONX_SKIP_IDENTITY = 2 };

typedef struct onx_ctx {
  const Onnx__GraphProto *graph;
  int64_t opset;
  const char *base_dir;
  vm_builder_t *b;
  vmcc_graph_t *g;
  onx_value_t *vals;
  uint32_t num_vals, cap_vals;
  onx_names_t names; /* every value name of the graph */
  const Onnx__NodeProto *node; /* the node being lowered */
  const onx_op_t *op; /* its registry row */
  uint32_t node_idx;
  vmcc_onnx_report_t *rep;
  uint32_t c_one, c_zero; /* float constants 1.0 and 0.0 */
  uint8_t *skip;          /* per node: fused into an earlier one (ONX_SKIP_FOLDED), or a
                             Mul by a constant folded into an earlier node's weights whose
                             output is its run-time input as it is (ONX_SKIP_IDENTITY) */
  int fused;              /* the current node fused a later one (its output is that one's) */
  int fuse;               /* fuse elementwise chains into cl.elementwise */
  /* control flow (onnx_ops_control.c) */
  uint32_t depth;          /* subgraphs (If/Loop/Scan bodies) being lowered within each other */
  uint64_t sub_nodes;      /* subgraph nodes lowered so far (unrolled iterations count each) */
  struct onx_subfn *subfns; /* bytecode functions of run-time branches and loop bodies */
  uint32_t num_subfns, cap_subfns;
  uint32_t fn_seq; /* numbers the functions' names */
  uint32_t hard_errors; /* refusals a run-time If never puts off to run time (bounds) */
  int sub_depth;          /* lowering a composite's sub-node (onnx_sub.c) */
  struct onx_scratch *scratch; /* the sub-nodes' value names */
} onx_ctx_t;

/* A bytecode function lowered from a subgraph, emitted after main. */
typedef struct onx_subfn {
  vmcc_graph_t *g;
  uint32_t nout;
  int32_t *outs;
} onx_subfn_t;

/* Bounds on control flow (docs/onnx.md, docs/security.md). */
#define ONX_MAX_SUB_DEPTH 16          /* subgraphs lowered within each other */
#define ONX_MAX_SUB_NODES (1u << 20)  /* subgraph nodes lowered, unrolled iterations included */
#define ONX_MAX_UNROLL_NODES 65536    /* nodes one unrolled Loop or Scan lowers */

/* ---- messages ---- */
/* "node 'name' (Op): <fmt>" with code. */
vm_status_t onx_node_err(const onx_ctx_t *c, vm_code_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* UNIMPLEMENTED "node 'n' (Op): attribute 'a' = <what>: supported: <sup>". */
vm_status_t onx_unsupported_attr(const onx_ctx_t *c, const char *attr, const char *what,
                                 const char *supported);

/* ---- structure (onnx_wire.c) ---- */
/* Walks the protobuf bytes of a message of type desc without unpacking
 * them and refuses (INVALID_ARGUMENT, naming the bound, the value and the
 * place) a structure beyond the bounds above; bytes that are not protobuf
 * are refused with the message `malformed`. */
vm_status_t onx_wire_check(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t n,
                           const char *malformed);

/* ---- dtypes and tensors (onnx_tensor.c) ---- */
/* ONNX TensorProto.DataType -> dtype; -1 if unsupported. */
/* The ONNX TensorProto data type of dt; 0 if it has none. */
int32_t onx_dtype_to_onnx(vm_dtype_t dt);
int onx_dtype_from_onnx(int32_t elem, vm_dtype_t *out);
const char *onx_onnx_type_name(int32_t elem);
/* Parses a TensorProto into a host tensor (data malloc'ed, even for
 * numel 0). base_dir: folder of external data (NULL: refused). what names
 * the tensor in messages. */
vm_status_t onx_tensor_from_proto(const Onnx__TensorProto *tp, const char *base_dir,
                                  const char *what, vmcc_tensor_t *out);

/* ---- attributes (onnx_tensor.c) ---- */
const Onnx__AttributeProto *onx_attr(const Onnx__NodeProto *n, const char *name);
/* Refuses an attribute of the current node that spec does not list for the
 * model's opset (UNIMPLEMENTED, naming what is supported), a duplicate or
 * a nameless one (INVALID_ARGUMENT). spec: space-separated names, each
 * optionally limited to opsets "name:LO-HI" (either bound may be left
 * out: "axis:-6", "dilations:19-"). */
vm_status_t onx_check_attrs(const onx_ctx_t *c, const char *spec);
/* Typed readers: the default when absent, INVALID_ARGUMENT for another type. */
vm_status_t onx_attr_int(const onx_ctx_t *c, const char *name, int64_t def, int64_t *out);
vm_status_t onx_attr_float(const onx_ctx_t *c, const char *name, float def, float *out);
/* The string (NUL-terminated copy into buf; def when absent). */
vm_status_t onx_attr_str(const onx_ctx_t *c, const char *name, const char *def, char *buf,
                         size_t len);
/* ints: *out_n = -1 when absent; at most max values. */
vm_status_t onx_attr_ints(const onx_ctx_t *c, const char *name, int64_t *out, int64_t max,
                          int64_t *out_n);
vm_status_t onx_attr_floats(const onx_ctx_t *c, const char *name, float *out, int64_t max,
                            int64_t *out_n);

/* ---- values (onnx_compile.c) ---- */
/* Input i of the current node; NULL when absent (index out of range or ""). */
onx_value_t *onx_in(onx_ctx_t *c, uint32_t i);
/* Same, but an absent input is an error naming it. */
vm_status_t onx_in_req(onx_ctx_t *c, uint32_t i, onx_value_t **out);
uint32_t onx_num_outputs(const onx_ctx_t *c);
/* 1 when output i is wanted (exists and is not ""). */
int onx_out_wanted(const onx_ctx_t *c, uint32_t i);
/* Defines output i as a new run-time intermediate; returns its tid (-1 on
 * error, with the graph's sticky error set) — or NULL value if the output is
 * not wanted. */
vm_status_t onx_def_out(onx_ctx_t *c, uint32_t i, vm_dtype_t dt, uint32_t ndim, const int64_t *dims,
                        onx_value_t **out);
/* Defines output i as a host constant taking ownership of data. */
vm_status_t onx_def_const(onx_ctx_t *c, uint32_t i, vm_dtype_t dt, uint32_t ndim,
                          const int64_t *dims, uint8_t *data);
/* Defines output i as src with another shape (same numel): a view. */
vm_status_t onx_def_view(onx_ctx_t *c, uint32_t i, onx_value_t *src, uint32_t ndim,
                         const int64_t *dims);
/* Defines output i as a pending expression (taking ownership of e). */
vm_status_t onx_def_expr(onx_ctx_t *c, uint32_t i, vm_dtype_t dt, uint32_t ndim,
                         const int64_t *dims, onx_expr_t *e);
/* Defines output i as the dequantization q, emitted when first needed as
 * a tensor (taking ownership of q). */
vm_status_t onx_def_lazy(onx_ctx_t *c, uint32_t i, vm_dtype_t dt, uint32_t ndim,
                         const int64_t *dims, onx_qdq_t *q);
/* Emits v's dequantization (onnx_ops_quant.c): its tensor, -1 on error. */
int32_t onx_qdq_emit(onx_ctx_t *c, onx_value_t *v);
/* Defines output 0 of the current Mul as its pending scale product
 * (float32, shape (ndim, dims)). */
vm_status_t onx_def_scale_product(onx_ctx_t *c, uint32_t ndim, const int64_t *dims);
/* Emits v's pending scale product (onnx_ops_quant.c): its tensor, -1 on error. */
int32_t onx_ps_emit(onx_ctx_t *c, onx_value_t *v);
/* Emits v's pending expression (onnx_ops_elementwise.c): its tensor, -1 on error. */
int32_t onx_expr_emit(onx_ctx_t *c, onx_value_t *v);
void onx_expr_free(onx_expr_t *e);
/* The graph tensor of v (materialising a constant or an expression). -1 on error. */
int32_t onx_tid(onx_ctx_t *c, onx_value_t *v);
/* A graph tensor holding v with another shape (same numel). */
int32_t onx_reshaped(onx_ctx_t *c, onx_value_t *v, uint32_t ndim, const int64_t *dims);
/* A float constant for an operator argument. */
vmcc_arg_t onx_float_arg(onx_ctx_t *c, double v);
/* A graph tensor constant (a scalar or small tensor of dt made from
 * doubles). */
int32_t onx_const_tensor_f(onx_ctx_t *c, vm_dtype_t dt, uint32_t ndim, const int64_t *dims,
                           const double *vals);
/* The value of that name defined so far, or NULL. */
onx_value_t *onx_lookup(onx_ctx_t *c, const char *name);
/* onx_lookup, or where `name` is the output of a node later in the graph
 * that reads only constants (a Constant, or a Reshape, Identity, Squeeze,
 * Unsqueeze or Flatten of such), those nodes lowered now (and skipped where
 * they stand): for folds that look ahead of the current node at constant
 * operands, which exporters often place just before their consumer. NULL
 * when neither. */
onx_value_t *onx_lookup_const(onx_ctx_t *c, const char *name);
/* onx_bind_out for a value of any name (a fused node's output). */
vm_status_t onx_bind_named(onx_ctx_t *c, const char *name, int32_t tid, uint32_t ndim,
                           const int64_t *dims);
/* Defines output i as graph tensor tid (an intermediate the caller has
 * passed to an operator call already) seen with shape (ndim, dims): tid
 * itself, or a view of it when the shapes differ. */
vm_status_t onx_bind_out(onx_ctx_t *c, uint32_t i, int32_t tid, uint32_t ndim, const int64_t *dims);

/* ---- layout propagation (onnx_layout.c) ---- */
/* Whether v is a pending transpose (maybe padded) of a tensor of the graph
 * being built; _active: one without padding. */
int onx_lt_pending(const onx_ctx_t *c, const onx_value_t *v);
int onx_lt_active(const onx_ctx_t *c, const onx_value_t *v);
/* The tensor of a pending v before its padding (its transpose emitted when
 * not the identity); -1 when v is not pending. */
int32_t onx_lt_inner(onx_ctx_t *c, onx_value_t *v);
/* Pad(x, pads) of a run-time x by zeros (mode 1) or edge values (2), every
 * pad >= 0, left pending for a Conv or MaxPool to take as its own. */
vm_status_t onx_lt_pad(onx_ctx_t *c, onx_value_t *x, int mode, const int64_t *pads);
/* Emits v's pending transpose: its tensor, -1 on error. */
int32_t onx_lt_emit(onx_ctx_t *c, onx_value_t *v);
/* Defines `name` as transpose(src, perm) (rank ndim), left pending; src
 * itself when perm is the identity. */
vm_status_t onx_def_transposed(onx_ctx_t *c, const char *name, int32_t src, uint32_t ndim,
                               const int64_t *perm);
/* The same, then padded (pad 0: not) by pads (rank ndim, of the transposed
 * axes). */
vm_status_t onx_def_pending(onx_ctx_t *c, const char *name, int32_t src, uint32_t ndim,
                            const int64_t *perm, int pad, const int64_t *pads);
/* Transpose(x, perm) of a run-time x, left pending: composed with x's own
 * pending transpose, the two cancel when they undo each other. */
vm_status_t onx_lt_transpose(onx_ctx_t *c, onx_value_t *x, const int64_t *perm);
/* The elementwise clname (args: the input, np float scalars p, the output)
 * of a pending transpose, computed before it: *done 1 when it applied. */
vm_status_t onx_lt_unary(onx_ctx_t *c, onx_value_t *x, const char *clname, uint32_t np,
                         const double *p, int *done);
/* The binary clname of a and b where one is a pending transpose and the
 * other a pending transpose by the same permutation of the same shape, or
 * a float constant that broadcasts to it without changing its shape
 * (permuted on the host): computed before the transpose, *done 1. */
vm_status_t onx_lt_binary(onx_ctx_t *c, const char *clname, onx_value_t *a, onx_value_t *b,
                          int *done);
/* MatMul (the current node) of float32 operands of equal batch dims where
 * one is a pending transpose or the product is read by a Transpose alone:
 * one cl.gemm_strided reading the operands in place and writing the
 * product in the Transpose's layout, *done 1. */
vm_status_t onx_lt_matmul(onx_ctx_t *c, int *done);

/* ---- graphs (onnx_compile.c) ---- */
/* Lowers every node of c->graph in order (names: c->names, fused nodes:
 * c->skip). */
vm_status_t onx_lower_graph(onx_ctx_t *c);
/* A new value named name (unique in the current scope). */
vm_status_t onx_add_value(onx_ctx_t *c, const char *name, onx_value_t **out);
/* Parses the initializers of g into constant values. */
vm_status_t onx_bind_initializers(onx_ctx_t *c, const Onnx__GraphProto *g);
/* Counts op in the report. */
void onx_count_op(onx_ctx_t *c, const char *op);
/* The tensor a function returns for v, whose tensor is t: t itself when
 * it is an intermediate not returned already (dup 0), else a copy. */
int32_t onx_returned(onx_ctx_t *c, const onx_value_t *v, int32_t t, int dup);

/* ---- control flow (onnx_ops_control.c) ---- */
/* The values lowering g may hold at once, its subgraphs' included (each
 * lowered and dropped in turn); *has_sub is set when g has subgraphs. */
uint64_t onx_graph_values(const Onnx__GraphProto *g, int *has_sub);
/* Emits the bytecode functions of c->subfns (after main), and frees them. */
vm_status_t onx_emit_subfns(onx_ctx_t *c);
void onx_free_subfns(onx_ctx_t *c);

/* ---- host helpers (onnx_host.c) ---- */
int onx_is_float(vm_dtype_t dt);
int onx_is_int(vm_dtype_t dt); /* int, uint or bool */
double onx_ld_f(vm_dtype_t dt, const uint8_t *data, int64_t i);
int64_t onx_ld_i(vm_dtype_t dt, const uint8_t *data, int64_t i);
void onx_st_f(vm_dtype_t dt, uint8_t *data, int64_t i, double x);
void onx_st_i(vm_dtype_t dt, uint8_t *data, int64_t i, int64_t x);
/* Lowers the current node with op (onnx_ops_dtypes.c): a bfloat16 input
 * is computed in float32 with casts around; a float8, float4, int4/uint4 or
 * int2/uint2 input is refused (UNIMPLEMENTED, naming it) unless the
 * operator takes the storage types (casts, quantization, views). */
vm_status_t onx_lower_node(onx_ctx_t *c, const onx_op_t *op);
/* Bytes of numel elements of dt (packed types: whole bytes). */
uint64_t onx_nbytes(vm_dtype_t dt, int64_t numel);
/* A small float (float8/float4 code) element from x with Cast's saturate
 * and round_mode (0 up, 1 down, 2 nearest; float8e8m0 only). */
void onx_st_small(vm_dtype_t dt, uint8_t *data, int64_t i, double x, int saturate, int round_mode);
/* Reads a constant int tensor (any int dtype) into out (at most max). */
vm_status_t onx_const_ints(const onx_ctx_t *c, const onx_value_t *v, const char *what, int64_t *out,
                           int64_t max, int64_t *out_n);
/* NumPy broadcast of two shapes; -1 if they do not broadcast. */
int onx_broadcast(uint32_t na, const int64_t *a, uint32_t nb, const int64_t *b, uint32_t *nout,
                  int64_t *out);
/* Offset into a tensor of shape (n, dims) broadcast to out shape, for the
 * out multi-index idx (right-aligned). */
int64_t onx_bcast_offset(uint32_t n, const int64_t *dims, uint32_t nout, const int64_t *idx);
/* Advances a multi-index over dims; returns 0 after the last. */
int onx_next_index(uint32_t ndim, const int64_t *dims, int64_t *idx);
/* The element count of dims; -1 when a dim is negative or the product
 * overflows (callers refuse it: onx_check_shape says why). */
int64_t onx_numel(uint32_t ndim, const int64_t *dims);
/* Checks a shape the current node computed from the model (what names it
 * in the message: "output", "shape" ...): every dim in 0..ONX_MAX_DIM and
 * the product of the nonzero dims within 64 bits (else INVALID_ARGUMENT
 * naming the node, the op and the shape) and within ONX_MAX_ELEMS (else
 * RESOURCE_EXHAUSTED). Sets *numel (may be NULL). Every value's shape
 * passes it, so any product of some of a value's dims fits in int64. */
vm_status_t onx_check_shape(const onx_ctx_t *c, const char *what, uint32_t ndim,
                            const int64_t *dims, int64_t *numel);
/* "[d0,d1,...]" into buf (cut with "...]" when long). */
const char *onx_dims_str(uint32_t ndim, const int64_t *dims, char *buf, size_t len);
/* A double as int64: truncated toward zero, saturated, NaN gives 0. */
int64_t onx_f64_to_i64(double x);
/* malloc for a folded constant of numel elements of dt (checked size). */
vm_status_t onx_alloc_const(const onx_ctx_t *c, vm_dtype_t dt, int64_t numel, uint8_t **out);

/* ---- operators (onnx_ops.c) ---- */
typedef vm_status_t (*onx_lower_fn)(onx_ctx_t *c);
struct onx_op {
  const char *name;           /* op_type */
  const char *domain;         /* "" the default domain (a node's "" or "ai.onnx") */
  int16_t opset_lo, opset_hi; /* the opsets it lowers; 0: no bound that side */
  const char *attrs;          /* the attributes it understands (onx_check_attrs' spec) */
  onx_lower_fn fn;            /* the lowering */
  int32_t arg;                /* for fn, which of its family's operations (c->op->arg) */
};
/* The default domain's row named op_type, or NULL. */
const onx_op_t *onx_find_op(const char *op_type);
/* The row of node n's op_type in its own domain, or NULL. */
const onx_op_t *onx_find_node_op(const Onnx__NodeProto *n);
/* The values a node of op_type may add beyond its outputs (sub-nodes). */
uint32_t onx_sub_budget(const Onnx__NodeProto *n);
void onx_scratch_free(struct onx_scratch *s);
/* The row for the current node (c->node, at c->opset) into *out, after
 * checking its domain, its opset and its attributes: the one place a node
 * meets the registry. UNIMPLEMENTED (naming what is supported) for an
 * operator, a domain or an opset without a row, an attribute the row does
 * not list; INVALID_ARGUMENT for a duplicate or nameless attribute. */
vm_status_t onx_resolve_op(const onx_ctx_t *c, const onx_op_t **out);
/* 1 when op's output 0 may be absent ("") as long as another is named
 * (the recurrent operators: Y_h alone is common). */
int onx_op_any_output(const onx_op_t *op);

#endif /* ONX_INTERNAL_H */
