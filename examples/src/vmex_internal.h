/* Internals of the example models: the seeded PRNG and helpers shared by
 * the generators, which write their models with the compiler's graph
 * emitter (compiler/include/vmcompiler/graph.h). */
#ifndef VMEX_INTERNAL_H
#define VMEX_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "vm/executable.h"
#include "vmrpc/status.h"
#include "vmcompiler/graph.h"
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

/* Shared by the generators: "float32[8,256]" into buf. */
void vmex_type_str(vm_dtype_t dt, uint32_t ndim, const int64_t *shape, char *buf, size_t len);

/* Adds the metadata every example carries (producer, model, seed, config,
 * input.x, output.0, plan.*). */
vm_status_t vmex_add_common_meta(vm_builder_t *b, const char *model, uint64_t seed,
                                 const char *config, const vmex_io_shape_t *io,
                                 const vmex_plan_report_t *rep);

#endif /* VMEX_INTERNAL_H */
