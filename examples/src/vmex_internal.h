/* Internals of the example models: the seeded PRNG and a tiny graph
 * emitter that turns a list of destination-passing operator calls over
 * tensor ids into planned bytecode. */
#ifndef VMEX_INTERNAL_H
#define VMEX_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "vm/executable.h"
#include "vm/status.h"
#include "vmexamples/models.h"

/* ---------------------------------------------------------------------------
 * PRNG: xorshift64* seeded through splitmix64 (so seed 0 and nearby seeds
 * give unrelated streams). Fixed forever: executables, inputs and expected
 * outputs of a seed must stay reproducible across versions.
 */
typedef struct vmex_rng {
  uint64_t s;
} vmex_rng_t;

void vmex_rng_seed(vmex_rng_t *r, uint64_t seed, uint64_t stream);
uint64_t vmex_rng_next(vmex_rng_t *r);
/* Uniform in [-1, 1), exactly representable in float32. */
float vmex_rng_sym(vmex_rng_t *r);

/* Stream ids: weights and inputs of one seed must not share values. */
#define VMEX_STREAM_WEIGHTS 1u
#define VMEX_STREAM_INPUT 2u

/* Fills n floats uniform in [-scale, scale). */
void vmex_fill_uniform(vmex_rng_t *r, float *dst, size_t n, float scale);

/* Softmax of each row of x[rows, n] into y (double inside): the
 * references' last step. */
void vmex_softmax_rows(const float *x, float *y, int64_t rows, int64_t n);

/* ---------------------------------------------------------------------------
 * Graph emitter.
 *
 * A model is written as calls over tensor ids in program order:
 *
 *   t_x = vmex_graph_param(g, 0, "x", VM_F32, 2, xs);
 *   t_w = vmex_graph_weight(g, w, 2, ws);              // tensor constant
 *   t_y = vmex_graph_tensor(g, VM_F32, 2, ys);         // intermediate
 *   vmex_graph_call(g, "cl.gemm", 7, (vmex_arg_t[]){A(t_x), A(t_w), ..., A(t_y)});
 *   vmex_graph_emit(g, t_out, &report);
 *
 * An intermediate is produced by the first call that names it (operators
 * are destination-passing) and dies after the last call that names it,
 * directly or through a view. vmex_graph_emit plans the intermediates
 * (vm_plan_memory) and writes the function body:
 *
 *   entry: check_tensor_info + match_shape per typed parameter,
 *          alloc_storage per planned storage (device 0, float32, "global"),
 *          null_value if some call passes none;
 *   per call: alloc_tensor(storage, offset, shape, dtype) for each tensor
 *          it produces, the call, then kill of each tensor (and storage)
 *          whose last use it was;
 *   the output gets alloc_storage of its own right before its producer and
 *   is never killed: it is the function's result.
 *
 * Errors are sticky: tensor constructors return -1 after the first error
 * and vmex_graph_emit reports it.
 */
typedef enum vmex_arg_kind {
  VMEX_ARG_TENSOR = 0, /* a tensor id */
  VMEX_ARG_IMM = 1,    /* an integer immediate */
  VMEX_ARG_CONST = 2,  /* a constant-pool index (floats, strings, ...) */
  VMEX_ARG_VM = 3,     /* the %vm register */
  VMEX_ARG_NONE = 4,   /* a none value (e.g. an absent bias) */
} vmex_arg_kind_t;

typedef struct vmex_arg {
  vmex_arg_kind_t kind;
  int64_t v;
} vmex_arg_t;

static inline vmex_arg_t vmex_a_t(int32_t tid) {
  vmex_arg_t a = {VMEX_ARG_TENSOR, tid};
  return a;
}
static inline vmex_arg_t vmex_a_imm(int64_t v) {
  vmex_arg_t a = {VMEX_ARG_IMM, v};
  return a;
}
static inline vmex_arg_t vmex_a_const(uint32_t idx) {
  vmex_arg_t a = {VMEX_ARG_CONST, (int64_t)idx};
  return a;
}
static inline vmex_arg_t vmex_a_vm(void) {
  vmex_arg_t a = {VMEX_ARG_VM, 0};
  return a;
}
static inline vmex_arg_t vmex_a_none(void) {
  vmex_arg_t a = {VMEX_ARG_NONE, 0};
  return a;
}

typedef struct vmex_graph vmex_graph_t;

/* A graph for the body of bytecode function func, named func_name for
 * error contexts (declared on b with num_params parameters). align: byte
 * alignment of planned offsets (0 = 64). b is borrowed. */
vm_status_t vmex_graph_create(vm_builder_t *b, uint32_t func, const char *func_name,
                              uint32_t num_params, uint64_t align, vmex_graph_t **out_g);
void vmex_graph_free(vmex_graph_t *g);

/* Parameter index (register index) as a typed tensor; also annotates the
 * parameter type on the builder so set_input checks it. */
int32_t vmex_graph_param(vmex_graph_t *g, uint32_t index, const char *name, vm_dtype_t dt,
                         uint32_t ndim, const int64_t *shape);
/* A float32 tensor constant holding data (numel(shape) floats, copied). */
int32_t vmex_graph_weight(vmex_graph_t *g, const float *data, uint32_t ndim, const int64_t *shape);
/* An intermediate tensor, produced by the first call that names it. */
int32_t vmex_graph_tensor(vmex_graph_t *g, vm_dtype_t dt, uint32_t ndim, const int64_t *shape);
/* A reshape view of an intermediate (vm.builtin.reshape, recorded as a
 * call): it shares src's memory, so src stays live while the view is. */
int32_t vmex_graph_view(vmex_graph_t *g, int32_t src, uint32_t ndim, const int64_t *shape);
/* Records a call of packed function name whose result is discarded. */
void vmex_graph_call(vmex_graph_t *g, const char *name, uint32_t nargs, const vmex_arg_t *args);

/* Plans, emits the body (begin_function .. end_function) returning output
 * (an intermediate) and fills *report (may be NULL). */
vm_status_t vmex_graph_emit(vmex_graph_t *g, int32_t output, vmex_plan_report_t *report);

/* Shared by the generators: "float32[8,256]" into buf. */
void vmex_type_str(vm_dtype_t dt, uint32_t ndim, const int64_t *shape, char *buf, size_t len);

/* Adds the metadata every example carries (producer, model, seed, config,
 * input.x, output.0, plan.*). */
vm_status_t vmex_add_common_meta(vm_builder_t *b, const char *model, uint64_t seed,
                                 const char *config, const vmex_io_shape_t *io,
                                 const vmex_plan_report_t *rep);

#endif /* VMEX_INTERNAL_H */
