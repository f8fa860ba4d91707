/* Shared pieces of the example models: PRNG, inputs, metadata, dispatch by
 * model kind and the raw float32 writer. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmex_internal.h"

/* ---- PRNG ---- */

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += UINT64_C(0x9E3779B97F4A7C15));
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

void vmex_rng_seed(vmex_rng_t *r, uint64_t seed, uint64_t stream) {
  uint64_t x = seed ^ (stream * UINT64_C(0xD1B54A32D192ED03));
  r->s = splitmix64(&x);
  /* xorshift's only fixed point is 0 */
  if (r->s == 0) r->s = UINT64_C(0x9E3779B97F4A7C15);
}

uint64_t vmex_rng_next(vmex_rng_t *r) {
  uint64_t x = r->s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  r->s = x;
  return x * UINT64_C(0x2545F4914F6CDD1D);
}

float vmex_rng_sym(vmex_rng_t *r) {
  /* 24 random bits: k / 2^23 - 1 is exact in float32 */
  uint32_t k = (uint32_t)(vmex_rng_next(r) >> 40);
  return (float)k * (1.0f / 8388608.0f) - 1.0f;
}

void vmex_fill_uniform(vmex_rng_t *r, float *dst, size_t n, float scale) {
  for (size_t i = 0; i < n; i++) dst[i] = vmex_rng_sym(r) * scale;
}

void vmex_make_input(uint64_t seed, float *x, size_t n) {
  vmex_rng_t r;
  vmex_rng_seed(&r, seed, VMEX_STREAM_INPUT);
  vmex_fill_uniform(&r, x, n, 1.0f);
}

void vmex_softmax_rows(const float *x, float *y, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = x + r * n;
    double mx = xr[0], sum = 0;
    for (int64_t j = 1; j < n; j++)
      if (xr[j] > mx) mx = xr[j];
    for (int64_t j = 0; j < n; j++) sum += exp((double)xr[j] - mx);
    for (int64_t j = 0; j < n; j++) y[r * n + j] = (float)(exp((double)xr[j] - mx) / sum);
  }
}

/* ---- names and dispatch ---- */

const char *vmex_model_name(vmex_model_t model) {
  switch (model) {
    case VMEX_MODEL_MLP: return "mlp";
    case VMEX_MODEL_CNN: return "cnn";
  }
  return "unknown";
}

int vmex_model_parse(const char *name, vmex_model_t *out_model) {
  if (!name) return -1;
  if (strcmp(name, "mlp") == 0) {
    *out_model = VMEX_MODEL_MLP;
    return 0;
  }
  if (strcmp(name, "cnn") == 0) {
    *out_model = VMEX_MODEL_CNN;
    return 0;
  }
  return -1;
}

vm_status_t vmex_build(vmex_model_t model, uint64_t seed, vm_executable_t **out_exec,
                       vmex_plan_report_t *out_report) {
  switch (model) {
    case VMEX_MODEL_MLP: return vmex_build_mlp(seed, NULL, out_exec, out_report);
    case VMEX_MODEL_CNN: return vmex_build_cnn(seed, NULL, out_exec, out_report);
  }
  return vm_status_make(VM_INVALID_ARGUMENT, "unknown model %d", (int)model);
}

void vmex_io_shape(vmex_model_t model, vmex_io_shape_t *out) {
  if (model == VMEX_MODEL_CNN) {
    vmex_cnn_io_shape(NULL, out);
  } else {
    vmex_mlp_io_shape(NULL, out);
  }
}

vm_status_t vmex_reference(vmex_model_t model, uint64_t seed, const float *x, float *out) {
  switch (model) {
    case VMEX_MODEL_MLP: return vmex_reference_mlp(seed, NULL, x, out);
    case VMEX_MODEL_CNN: return vmex_reference_cnn(seed, NULL, x, out);
  }
  return vm_status_make(VM_INVALID_ARGUMENT, "unknown model %d", (int)model);
}

/* ---- metadata ---- */

void vmex_type_str(vm_dtype_t dt, uint32_t ndim, const int64_t *shape, char *buf, size_t len) {
  char dts[24];
  vm_dtype_str(dt, dts, sizeof(dts));
  size_t used = (size_t)snprintf(buf, len, "%s[", dts);
  for (uint32_t i = 0; i < ndim && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s%lld", i ? "," : "", (long long)shape[i]);
  if (used < len) snprintf(buf + used, len - used, "]");
}

vm_status_t vmex_add_common_meta(vm_builder_t *b, const char *model, uint64_t seed,
                                 const char *config, const vmex_io_shape_t *io,
                                 const vmex_plan_report_t *rep) {
  char buf[160];
  VM_RETURN_IF_ERROR(vm_builder_add_meta(b, "producer", VMEX_PRODUCER));
  VM_RETURN_IF_ERROR(vm_builder_add_meta(b, "model", model));
  snprintf(buf, sizeof(buf), "%" PRIu64, seed);
  VM_RETURN_IF_ERROR(vm_builder_add_meta(b, "seed", buf));
  VM_RETURN_IF_ERROR(vm_builder_add_meta(b, "config", config));
  vmex_type_str(VM_F32, io->in_ndim, io->in_shape, buf, sizeof(buf));
  VM_RETURN_IF_ERROR(vm_builder_add_meta(b, "input.x", buf));
  vmex_type_str(VM_F32, io->out_ndim, io->out_shape, buf, sizeof(buf));
  VM_RETURN_IF_ERROR(vm_builder_add_meta(b, "output.0", buf));
  snprintf(buf, sizeof(buf), "%" PRIu64, rep->planned_bytes);
  VM_RETURN_IF_ERROR(vm_builder_add_meta(b, "plan.planned_bytes", buf));
  snprintf(buf, sizeof(buf), "%" PRIu64, rep->unplanned_bytes);
  VM_RETURN_IF_ERROR(vm_builder_add_meta(b, "plan.unplanned_bytes", buf));
  snprintf(buf, sizeof(buf), "%" PRIu64, rep->live_peak_bytes);
  return vm_builder_add_meta(b, "plan.live_peak_bytes", buf);
}

/* ---- raw float32 output ---- */

vm_status_t vmex_write_f32_raw(const char *path, const float *data, size_t n) {
  if (!path || (n && !data)) return vm_status_make(VM_INVALID_ARGUMENT, "write: no path or data");
  if (n > SIZE_MAX / 4) return vm_status_make(VM_INVALID_ARGUMENT, "write: %zu floats", n);
  uint8_t *bytes = malloc(n ? n * 4 : 1);
  if (!bytes) return vm_status_make(VM_RESOURCE_EXHAUSTED, "write: out of host memory");
  /* Little-endian whatever the host: byte by byte from the bit pattern. */
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &data[i], 4);
    bytes[4 * i + 0] = (uint8_t)u;
    bytes[4 * i + 1] = (uint8_t)(u >> 8);
    bytes[4 * i + 2] = (uint8_t)(u >> 16);
    bytes[4 * i + 3] = (uint8_t)(u >> 24);
  }
  vm_status_t st = vm_write_file_atomic(path, bytes, n * 4);
  free(bytes);
  return st;
}
