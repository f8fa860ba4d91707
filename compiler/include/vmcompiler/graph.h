/* The compiler's back end: a graph emitter that turns a list of
 * destination-passing operator calls over tensor ids into planned bytecode.
 *
 * A function body is written as calls over tensor ids in program order:
 *
 *   t_x = vmcc_graph_param(g, 0, "x", VM_F32, 2, xs);
 *   t_w = vmcc_graph_weight(g, w, 2, ws);               // tensor constant
 *   t_y = vmcc_graph_tensor(g, VM_F32, 2, ys);          // intermediate
 *   vmcc_graph_call(g, "cl.gemm", 7, (vmcc_arg_t[]){A(t_x), A(t_w), ..., A(t_y)});
 *   vmcc_graph_emit(g, t_y, &report);
 *
 * An intermediate is produced by the first call that names it (operators
 * are destination-passing) and dies after the last call that names it,
 * directly or through a view. vmcc_graph_emit plans the intermediates
 * (vm_plan_memory) and writes the function body:
 *
 *   entry: check_tensor_info + match_shape per typed parameter,
 *          alloc_storage per planned storage (device 0, float32, "global"),
 *          null_value if some call passes none;
 *   per call: alloc_tensor(storage, offset, shape, dtype) for each tensor
 *          it produces, make_tuple for each int-list argument, the call,
 *          then kill of each tensor (and storage) whose last use it was;
 *   each output gets alloc_storage of its own right before its producer
 *   and is never killed: it is (part of) the function's result. Several
 *   outputs are returned as one tuple, in the order given.
 *
 * Errors are sticky: tensor constructors return -1 after the first error
 * and vmcc_graph_emit reports it.
 */
#ifndef VMCC_GRAPH_H
#define VMCC_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "vm/executable.h"
#include "vmrpc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most dims of a graph tensor (the cl.* operators' limit). */
#define VMCC_MAX_NDIM 8
/* Most entries of an int-list argument (vmcc_graph_ints). */
#define VMCC_MAX_INTS 16

/* What the memory planner did for a function's intermediates (the returned
 * tensors are not planned and are counted in output_bytes only). */
typedef struct vmcc_plan_report {
  uint64_t planned_bytes;   /* sum of the shared storages' sizes */
  uint64_t unplanned_bytes; /* one storage per intermediate, none reused */
  uint64_t live_peak_bytes; /* most intermediate bytes live at one step */
  uint32_t num_storages;    /* shared storages allocated at function entry */
  uint32_t num_tensors;     /* planned intermediates */
  uint64_t output_bytes;    /* the returned tensors' own storages */
} vmcc_plan_report_t;

typedef enum vmcc_arg_kind {
  VMCC_ARG_TENSOR = 0, /* a tensor id */
  VMCC_ARG_IMM = 1,    /* an integer immediate */
  VMCC_ARG_CONST = 2,  /* a constant-pool index (floats, strings, ...) */
  VMCC_ARG_VM = 3,     /* the %vm register */
  VMCC_ARG_NONE = 4,   /* a none value (e.g. an absent bias) */
  VMCC_ARG_INTS = 5,   /* an int or float list (vmcc_graph_ints/floats: a tuple at run time) */
} vmcc_arg_kind_t;

typedef struct vmcc_arg {
  vmcc_arg_kind_t kind;
  int64_t v;
} vmcc_arg_t;

static inline vmcc_arg_t vmcc_a_t(int32_t tid) {
  vmcc_arg_t a = {VMCC_ARG_TENSOR, tid};
  return a;
}
static inline vmcc_arg_t vmcc_a_imm(int64_t v) {
  vmcc_arg_t a = {VMCC_ARG_IMM, v};
  return a;
}
static inline vmcc_arg_t vmcc_a_const(uint32_t idx) {
  vmcc_arg_t a = {VMCC_ARG_CONST, (int64_t)idx};
  return a;
}
static inline vmcc_arg_t vmcc_a_vm(void) {
  vmcc_arg_t a = {VMCC_ARG_VM, 0};
  return a;
}
static inline vmcc_arg_t vmcc_a_none(void) {
  vmcc_arg_t a = {VMCC_ARG_NONE, 0};
  return a;
}

typedef struct vmcc_graph vmcc_graph_t;

/* A graph for the body of bytecode function func, named func_name for
 * error contexts (declared on b with num_params parameters). align: byte
 * alignment of planned offsets (0 = 64). b is borrowed. */
vm_status_t vmcc_graph_create(vm_builder_t *b, uint32_t func, const char *func_name,
                              uint32_t num_params, uint64_t align, vmcc_graph_t **out_g);
void vmcc_graph_free(vmcc_graph_t *g);

/* Parameter index (register index) as a typed tensor; also annotates the
 * parameter type on the builder so set_input checks it. */
int32_t vmcc_graph_param(vmcc_graph_t *g, uint32_t index, const char *name, vm_dtype_t dt,
                         uint32_t ndim, const int64_t *shape);
/* A float32 tensor constant holding data (numel(shape) floats, copied). */
int32_t vmcc_graph_weight(vmcc_graph_t *g, const float *data, uint32_t ndim, const int64_t *shape);
/* A tensor constant of any dtype (nbytes = numel * dtype bytes, copied). */
int32_t vmcc_graph_const(vmcc_graph_t *g, vm_dtype_t dt, const void *data, uint32_t ndim,
                         const int64_t *shape);
/* An intermediate tensor, produced by the first call that names it. */
int32_t vmcc_graph_tensor(vmcc_graph_t *g, vm_dtype_t dt, uint32_t ndim, const int64_t *shape);
/* A reshape view (vm.builtin.reshape, recorded as a call) of an
 * intermediate, a parameter or another view: it shares src's memory, so an
 * intermediate src stays live while the view is. */
int32_t vmcc_graph_view(vmcc_graph_t *g, int32_t src, uint32_t ndim, const int64_t *shape);
/* An int-list argument (any values, negative too; at most VMCC_MAX_INTS),
 * passed as a tuple of ints built right before the call that names it. */
vmcc_arg_t vmcc_graph_ints(vmcc_graph_t *g, uint32_t n, const int64_t *vals);
/* A float-list argument (at most VMCC_MAX_INTS), a tuple of floats at run
 * time, built like an int list. */
vmcc_arg_t vmcc_graph_floats(vmcc_graph_t *g, uint32_t n, const double *vals);
/* Records a call of packed function name whose result is discarded. */
void vmcc_graph_call(vmcc_graph_t *g, const char *name, uint32_t nargs, const vmcc_arg_t *args);

/* A data-dependent output shape: output t (an intermediate the function
 * returns, of the largest shape) is returned as vm.builtin.trim_dim(t,
 * count, axis), the dense view of its first elements with dim axis cut to
 * the run-time count (an int64 one-element intermediate the same calls
 * write; it stays live to the return). The operator writing t writes its
 * result densely in that smaller shape. */
void vmcc_graph_trim_dim(vmcc_graph_t *g, int32_t t, int32_t count, uint32_t axis);
/* Control flow over bytecode functions (each declared on the builder and
 * emitted from a graph of its own, which returns its results: one tensor,
 * or a tuple when there are several).
 *
 * A result: a tensor that a control call below makes (it has memory of its
 * own, returned by the function), used afterwards like an intermediate. */
int32_t vmcc_graph_result(vmcc_graph_t *g, vm_dtype_t dt, uint32_t ndim, const int64_t *shape);
/* outs = cond ? then_func(args) : else_func(args): cond is a 1-element
 * tensor read back with vm.builtin.read_if_cond, the branch is the VM's
 * If and Goto; outs are fresh results (vmcc_graph_result). */
void vmcc_graph_if(vmcc_graph_t *g, int32_t cond, uint32_t then_func, uint32_t else_func,
                   uint32_t nargs, const int32_t *args, uint32_t nouts, const int32_t *outs);
/* A while loop: state = init; c = cond; while (c) (c, state...) =
 * body_func(state..., extra...); outs (fresh results) get the final state.
 * The body returns a tuple of 1 + nstate values. */
void vmcc_graph_loop(vmcc_graph_t *g, int32_t cond, uint32_t body_func, uint32_t nstate,
                     const int32_t *init, uint32_t nextra, const int32_t *extra,
                     const int32_t *outs);

/* The tensor's dtype, dims and kind (for front ends). */
vm_dtype_t vmcc_graph_dtype(const vmcc_graph_t *g, int32_t tid);
uint32_t vmcc_graph_ndim(const vmcc_graph_t *g, int32_t tid);
const int64_t *vmcc_graph_shape(const vmcc_graph_t *g, int32_t tid);
/* 1 for an intermediate (not a parameter, constant or view). */
int vmcc_graph_is_intermediate(const vmcc_graph_t *g, int32_t tid);
/* The tensor whose memory tid shares (tid itself unless a view), or -1. */
int32_t vmcc_graph_root(const vmcc_graph_t *g, int32_t tid);
/* 1 where tid can be a function's output without a copy: an intermediate,
 * or a view of an intermediate or of a control call's result (returned as
 * is, its root written in the output's own storage). */
int vmcc_graph_is_returnable(const vmcc_graph_t *g, int32_t tid);
/* The first error recorded so far (still owned by g; vmcc_graph_emit
 * returns it), or NULL: a front end checks it after each node so that it
 * reports the error where the node made it. */
vm_status_t vmcc_graph_error(const vmcc_graph_t *g);

/* Plans, emits the body (begin_function .. end_function) returning output
 * (vmcc_graph_is_returnable) and fills *report (may be NULL). */
vm_status_t vmcc_graph_emit(vmcc_graph_t *g, int32_t output, vmcc_plan_report_t *report);
/* The same for num_outputs such tensors (no two sharing memory), returned as a tuple
 * when there are several. */
vm_status_t vmcc_graph_emit_multi(vmcc_graph_t *g, uint32_t num_outputs, const int32_t *outputs,
                                  vmcc_plan_report_t *report);

#ifdef __cplusplus
}
#endif
#endif /* VMCC_GRAPH_H */
