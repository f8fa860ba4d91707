/* ONNX import: turns an ONNX model into an executable (docs/onnx.md).
 *
 * The executable has one function, main, whose parameters are the graph's
 * inputs (those not given as initializers or bound to constants), in the
 * graph's order and with the graph's names; it returns the graph's outputs
 * in order (one tensor, or a tuple of them). Shapes are static: a dynamic
 * dimension of an input must be fixed by an input shape. Shape arithmetic
 * on constants is evaluated here (constant folding); every other operator
 * becomes a call of the cl.* library (docs/operators.md), with memory
 * planned by the graph emitter (vmcompiler/graph.h).
 *
 * The model file is hostile: every length, dim, dtype and index is checked.
 * Errors:
 *   INVALID_ARGUMENT   a malformed model, tensor or attribute (the message
 *                      names the node, op and attribute);
 *   FAILED_PRECONDITION  the caller's options do not fit the model: an input
 *                      shape or constant for an input the graph lacks or that
 *                      disagrees with it, a dynamic dimension left unfixed
 *                      (the message names the input and the dimension);
 *   UNIMPLEMENTED      an operator, attribute value or dtype the compiler
 *                      does not support ("node 'x' (Op): attribute 'a' = v:
 *                      supported: ...");
 *   NOT_FOUND / PERMISSION_DENIED / UNAVAILABLE  a file that cannot be read
 *                      (the model, an external data file);
 *   RESOURCE_EXHAUSTED host memory, or a model over the limits.
 */
#ifndef VMCC_ONNX_H
#define VMCC_ONNX_H

#include <stddef.h>
#include <stdint.h>

#include "vm/executable.h"
#include "vmrpc/status.h"
#include "vmcompiler/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The "producer" metadata of executables made from ONNX models. */
#define VMCC_ONNX_PRODUCER "vmrpc-onnx"

/* A host tensor (dense, row-major). data holds nbytes = numel * dtype
 * bytes; owned by whoever made it (vmcc_tensor_free for those the
 * library returns). */
typedef struct vmcc_tensor {
  vm_dtype_t dtype;
  uint32_t ndim;
  int64_t shape[VMCC_MAX_NDIM];
  void *data;
  uint64_t nbytes;
} vmcc_tensor_t;

void vmcc_tensor_free(vmcc_tensor_t *t);

/* Fixes the shape of graph input name (every dim; must agree with the
 * graph's static dims). */
typedef struct vmcc_input_shape {
  const char *name;
  uint32_t ndim;
  int64_t dims[VMCC_MAX_NDIM];
} vmcc_input_shape_t;

/* Binds graph input name to a constant (borrowed for the call). */
typedef struct vmcc_const_binding {
  const char *name;
  const vmcc_tensor_t *value;
} vmcc_const_binding_t;

typedef struct vmcc_onnx_options {
  uint32_t num_input_shapes;
  const vmcc_input_shape_t *input_shapes;
  uint32_t num_consts;
  const vmcc_const_binding_t *consts;
  uint64_t plan_align; /* byte alignment of planned offsets (0 = 64) */
  /* 1: chains of float elementwise nodes whose intermediates have no other
   * use become one cl.elementwise call each; 0 (default): one call per node
   * (on PoCL the fused kernels are slower than the operators they replace:
   * docs/onnx.md) */
  int fuse_elementwise;
} vmcc_onnx_options_t;

#define VMCC_ONNX_MAX_REPORT_OPS 64

/* What a compilation did. */
typedef struct vmcc_onnx_report {
  int64_t opset;           /* of the default domain */
  uint32_t num_nodes;      /* in the graph */
  uint32_t num_folded;     /* nodes evaluated at compile time */
  uint32_t num_calls;      /* nodes lowered to calls (not folded or fused away) */
  uint32_t num_fused;      /* cl.elementwise calls, each fusing several nodes */
  uint32_t num_consts;     /* tensor constants in the executable */
  uint64_t const_bytes;    /* their bytes */
  vmcc_plan_report_t plan; /* planned vs unplanned memory */
  uint32_t num_ops;        /* distinct ONNX op types in the graph */
  struct {
    char name[32];
    uint32_t count;
  } ops[VMCC_ONNX_MAX_REPORT_OPS];
  uint32_t num_warnings; /* what the compiler accepted leniently (as onnxruntime does) */
  char warning[400];     /* the first of them */
} vmcc_onnx_report_t;

/* Compiles the model file at path (external data files are looked up in
 * its folder). opts and report may be NULL. *out_exec is verified; free
 * it with vm_executable_free(). */
vm_status_t vmcc_onnx_compile_file(const char *path, const vmcc_onnx_options_t *opts,
                                   vm_executable_t **out_exec, vmcc_onnx_report_t *report);
/* The same from bytes in memory; base_dir is the folder external data is
 * read from (NULL: a model with external data is refused). */
vm_status_t vmcc_onnx_compile(const void *data, size_t size, const char *base_dir,
                              const vmcc_onnx_options_t *opts, vm_executable_t **out_exec,
                              vmcc_onnx_report_t *report);

/* The graph's inputs (initializers excluded), outputs and the op types of
 * its nodes, in order. unsupported: NULL, or the status (UNIMPLEMENTED)
 * that vmcc_onnx_compile gives a graph whose inputs, outputs or values are
 * not all tensors (an optional, sequence, map or sparse tensor: their data
 * is no TensorProto); check it before reading data for the inputs. */
typedef struct vmcc_onnx_io {
  uint32_t num_inputs, num_outputs, num_nodes;
  char **inputs;
  char **outputs;
  char **node_ops;
  vm_status_t unsupported;
} vmcc_onnx_io_t;

vm_status_t vmcc_onnx_read_io(const char *path, vmcc_onnx_io_t *out_io);
void vmcc_onnx_io_free(vmcc_onnx_io_t *io);

/* Reads a serialized TensorProto (the .pb files of ONNX test data) into a
 * host tensor. */
vm_status_t vmcc_onnx_read_tensor_file(const char *path, vmcc_tensor_t *out);

#ifdef __cplusplus
}
#endif
#endif /* VMCC_ONNX_H */
