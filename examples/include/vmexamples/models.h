/* Example models built with the builder API: a small MLP and a small CNN.
 *
 * Each generator makes an executable with one function `main(x)` from
 * weights drawn from a seeded PRNG, so the same (seed, config) always gives
 * the same bytes and nothing binary needs to be checked in. Intermediate
 * tensors are placed by the static memory planner (vm/planner.h) into one
 * shared storage; the returned tensor gets a storage of its own so it
 * outlives the call. Each model has a plain C reference that recomputes its
 * output on the host from the same seed and config, for tests and for the
 * demo's expected output.
 *
 * Executables carry metadata:
 *   producer   VMEX_PRODUCER
 *   model      "mlp" | "cnn"
 *   seed       decimal
 *   config     "batch=8 in=256 hidden=512,512,256 out=10" (per model)
 *   input.x    "float32[8,256]"
 *   output.0   "float32[8,10]"
 *   plan.planned_bytes, plan.unplanned_bytes, plan.live_peak_bytes
 * and the parameter x is typed, so set_input checks dtype and shape; main
 * also checks x at entry (check_tensor_info + match_shape) for plain
 * invocations.
 */
#ifndef VMEXAMPLES_MODELS_H
#define VMEXAMPLES_MODELS_H

#include <stddef.h>
#include <stdint.h>

#include "vm/executable.h"
#include "vmcompiler/graph.h"
#include "vmrpc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The value of the "producer" metadata key of every example executable. */
#define VMEX_PRODUCER "vmrpc-examples"

#define VMEX_MAX_NDIM 4

/* What the memory planner did for a model's intermediates (the returned
 * tensor is not planned and is counted in output_bytes only). */
typedef vmcc_plan_report_t vmex_plan_report_t;

typedef enum vmex_model {
  VMEX_MODEL_MLP = 0,
  VMEX_MODEL_CNN = 1,
} vmex_model_t;

/* "mlp" / "cnn" <-> model. parse returns 0 or -1. */
const char *vmex_model_name(vmex_model_t model);
int vmex_model_parse(const char *name, vmex_model_t *out_model);

/* ---------------------------------------------------------------------------
 * MLP: main(x: float32[batch, in]) ->
 *   softmax(relu(relu(relu(x W1 + b1) W2 + b2) W3 + b3) W4 + b4, axis -1)
 * i.e. num_hidden layers of gemm + bias (broadcast add) + relu, then a
 * final gemm + bias and a softmax over the classes.
 */
#define VMEX_MLP_MAX_HIDDEN 8

typedef struct vmex_mlp_config {
  int64_t batch;
  int64_t in;
  uint32_t num_hidden;                 /* 1 .. VMEX_MLP_MAX_HIDDEN */
  int64_t hidden[VMEX_MLP_MAX_HIDDEN]; /* widths of the hidden layers */
  int64_t out;                         /* classes */
} vmex_mlp_config_t;

/* batch 8, in 256, hidden 512, 512, 256, out 10. */
vmex_mlp_config_t vmex_mlp_config_default(void);

/* ---------------------------------------------------------------------------
 * CNN: main(x: float32[n, c, h, w]) ->
 *   conv3x3(pad 1) -> bias + relu (a kernel carried by the executable,
 *   launched with cl.kernel) -> maxpool 2x2,
 *   conv3x3(pad 1, bias) -> relu -> maxpool 2x2,
 *   global average pool -> reshape (n, c2) -> gemm + bias -> softmax.
 * h and w must be multiples of 4.
 */
typedef struct vmex_cnn_config {
  int64_t n, c, h, w;
  int64_t c1, c2; /* channels of the two convolutions */
  int64_t classes;
  /* Byte alignment of planned offsets (power of two). cl.kernel passes a
   * tensor at a nonzero storage offset as a sub-buffer, which OpenCL only
   * allows at multiples of CL_DEVICE_MEM_BASE_ADDR_ALIGN (128 bytes on
   * PoCL, up to 512 on common GPUs), so the default is 512. */
  uint64_t plan_align;
} vmex_cnn_config_t;

/* n 2, c 3, h w 32, c1 8, c2 16, classes 10, plan_align 512. */
vmex_cnn_config_t vmex_cnn_config_default(void);

/* The name of the kernel module the CNN carries, and of its kernel. */
#define VMEX_CNN_KERNEL_MODULE "vmex_cnn"
#define VMEX_CNN_KERNEL_BIAS_RELU "bias_relu_nchw"

/* ---------------------------------------------------------------------------
 * Generators. cfg NULL = the default. *out_exec is verified (builder
 * finish); free with vm_executable_free(). out_report may be NULL.
 * INVALID_ARGUMENT for a config out of range.
 */
vm_status_t vmex_build_mlp(uint64_t seed, const vmex_mlp_config_t *cfg, vm_executable_t **out_exec,
                           vmex_plan_report_t *out_report);
vm_status_t vmex_build_cnn(uint64_t seed, const vmex_cnn_config_t *cfg, vm_executable_t **out_exec,
                           vmex_plan_report_t *out_report);
/* Either model with its default config. */
vm_status_t vmex_build(vmex_model_t model, uint64_t seed, vm_executable_t **out_exec,
                       vmex_plan_report_t *out_report);

/* Input and output shapes of a model with its default config (ndim up to
 * VMEX_MAX_NDIM). */
typedef struct vmex_io_shape {
  uint32_t in_ndim;
  int64_t in_shape[VMEX_MAX_NDIM];
  uint32_t out_ndim;
  int64_t out_shape[VMEX_MAX_NDIM];
  size_t in_numel, out_numel;
} vmex_io_shape_t;

void vmex_mlp_io_shape(const vmex_mlp_config_t *cfg, vmex_io_shape_t *out);
void vmex_cnn_io_shape(const vmex_cnn_config_t *cfg, vmex_io_shape_t *out);
void vmex_io_shape(vmex_model_t model, vmex_io_shape_t *out);

/* ---------------------------------------------------------------------------
 * Host side: deterministic inputs and references.
 */

/* Fills x[0..n) with the deterministic input for seed: uniform in [-1, 1),
 * from a PRNG stream distinct from the weights' stream of the same seed. */
void vmex_make_input(uint64_t seed, float *x, size_t n);

/* Recompute a model's output on the host (float32 data, double
 * accumulation): x has in_numel floats, out receives out_numel floats.
 * cfg NULL = the default. INVALID_ARGUMENT for a bad config,
 * RESOURCE_EXHAUSTED for host memory. */
vm_status_t vmex_reference_mlp(uint64_t seed, const vmex_mlp_config_t *cfg, const float *x,
                               float *out);
vm_status_t vmex_reference_cnn(uint64_t seed, const vmex_cnn_config_t *cfg, const float *x,
                               float *out);
vm_status_t vmex_reference(vmex_model_t model, uint64_t seed, const float *x, float *out);

/* Writes n floats as raw little-endian float32, atomically (temp file +
 * rename). A small function of its own so a .npy writer can replace it.
 * UNAVAILABLE / NOT_FOUND for I/O errors. */
vm_status_t vmex_write_f32_raw(const char *path, const float *data, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* VMEXAMPLES_MODELS_H */
