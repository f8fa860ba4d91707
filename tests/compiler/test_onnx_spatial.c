/* The importer's sampling and spatial operators (onnx_ops_spatial.c) on
 * models built here: what compiles, and each refusal a hostile or
 * unsupported node meets, with its exact status and message. No device
 * (tests/compiler/test_rt_onnx_node.c runs the onnx 1.23 cases of these
 * operators; tests/opencl/test_ops_spatial.c their kernels). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "helper_onnx_model.h"
#include "onnx.pb-c.h"
#include "test_util.h"
#include "vm/executable.h"
#include "vmcompiler/onnx.h"

enum { E_FLOAT = 1, E_INT32 = 6, E_INT64 = 7 };

static vm_status_t compile(mb_t *m) {
  size_t n;
  uint8_t *buf = mb_pack(m, &n);
  vm_executable_t *e = NULL;
  vm_status_t st = vmcc_onnx_compile(buf, n, NULL, NULL, &e, NULL);
  free(buf);
  vm_executable_free(e);
  return st;
}

#define D(...) ((const int64_t[]){__VA_ARGS__})

/* X [1, 2, 4, 5] and grid of dims gd -> GridSample at opset -> Y [1, 2, 3, 3] */
static Onnx__NodeProto *grid_model(mb_t *m, int64_t opset, uint32_t gn, const int64_t *gd) {
  mb_init(m, opset);
  mb_input(m, "x", 4, D(1, 2, 4, 5));
  mb_input(m, "g", gn, gd);
  mb_output(m, "y", 4, D(1, 2, 3, 3));
  return mb_node(m, "GridSample", "gs", "x", "g", "y");
}

static void test_grid_sample(void **state) {
  (void)state;
  mb_t m;
  mb_attrs_t s;
  Onnx__NodeProto *n = grid_model(&m, 20, 4, D(1, 3, 3, 2));
  ASSERT_OK(compile(&m));
  memset(&s, 0, sizeof(s));
  mb_attrs_str(&s, n, "mode", "cubic");
  mb_attrs_str(&s, n, "padding_mode", "reflection");
  mb_attrs_int(&s, n, "align_corners", 1);
  ASSERT_OK(compile(&m));
  /* opset 16's names are not opset 20's */
  n = grid_model(&m, 20, 4, D(1, 3, 3, 2));
  mb_attr_s(&m, n, "mode", "bilinear");
  ASSERT_STATUS(compile(&m), VM_UNIMPLEMENTED,
                "node 'gs' (GridSample): attribute 'mode' = bilinear: supported: linear, "
                "nearest, cubic");
  n = grid_model(&m, 16, 4, D(1, 3, 3, 2));
  mb_attr_s(&m, n, "mode", "bicubic");
  ASSERT_OK(compile(&m));
  mb_attr_s(&m, n, "padding_mode", "wrap");
  ASSERT_STATUS(compile(&m), VM_UNIMPLEMENTED,
                "node 'gs' (GridSample): attribute 'padding_mode' = wrap: supported: zeros, "
                "border, reflection");
  mb_attr_i(&m, n, "align_corners", 2);
  ASSERT_STATUS(compile(&m), VM_UNIMPLEMENTED,
                "node 'gs' (GridSample): attribute 'align_corners' = 2: supported: 0, 1");
  mb_attr_i(&m, n, "antialias", 1);
  ASSERT_STATUS(compile(&m), VM_UNIMPLEMENTED, "antialias");
  /* the grid's last dim must be the spatial rank, its batch X's */
  grid_model(&m, 20, 4, D(1, 3, 3, 3));
  ASSERT_STATUS(compile(&m), VM_INVALID_ARGUMENT,
                "node 'gs' (GridSample): grid [1,3,3,3] does not fit X [1,2,4,5]: expected [1, "
                "..., 2]");
  grid_model(&m, 20, 4, D(2, 3, 3, 2));
  ASSERT_STATUS(compile(&m), VM_INVALID_ARGUMENT, "does not fit X");
  /* 1-D (rank 3) from opset 20 only */
  mb_init(&m, 16);
  mb_input(&m, "x", 3, D(1, 2, 5));
  mb_input(&m, "g", 3, D(1, 4, 1));
  mb_output(&m, "y", 3, D(1, 2, 4));
  mb_node(&m, "GridSample", "gs", "x", "g", "y");
  ASSERT_STATUS(compile(&m), VM_UNIMPLEMENTED,
                "node 'gs' (GridSample): X has rank 3: supported: 4 (opset 16), 3 to 5");
  m.opset.version = 20;
  ASSERT_OK(compile(&m));
  /* an int grid */
  mb_init(&m, 20);
  mb_input(&m, "x", 4, D(1, 2, 4, 5));
  m.graph.input[m.graph.n_input++] = mb_vi(&m, "g", E_INT32, 4, D(1, 3, 3, 2));
  mb_output(&m, "y", 4, D(1, 2, 3, 3));
  mb_node(&m, "GridSample", "gs", "x", "g", "y");
  ASSERT_STATUS(compile(&m), VM_UNIMPLEMENTED,
                "node 'gs' (GridSample): grid has dtype int32: supported: float32 (the dtype of "
                "X)");
}

/* X [2, 3, 6, 6], rois [2, 4], batch indices (constant) -> RoiAlign */
static Onnx__NodeProto *roi_model(mb_t *m, const int64_t *bidx) {
  static const float boxes[8] = {0, 0, 3, 3, 1, 1, 5, 4};
  mb_init(m, 16);
  mb_input(m, "x", 4, D(2, 3, 6, 6));
  mb_init_raw(m, "r", E_FLOAT, 2, D(2, 4), boxes, sizeof(boxes));
  mb_init_raw(m, "b", E_INT64, 1, D(2), bidx, 2 * sizeof(int64_t));
  mb_output(m, "y", 4, D(2, 3, 1, 1));
  Onnx__NodeProto *n = mb_node(m, "RoiAlign", "ra", "x", "r", "y");
  n->input[n->n_input++] = "b";
  return n;
}

static void test_roi_align(void **state) {
  (void)state;
  mb_t m;
  static const int64_t ok[2] = {0, 1}, bad[2] = {1, 2}, neg[2] = {-1, 0};
  Onnx__NodeProto *n = roi_model(&m, ok);
  ASSERT_OK(compile(&m));
  mb_attr_s(&m, n, "mode", "max");
  ASSERT_OK(compile(&m));
  mb_attr_s(&m, n, "mode", "min");
  ASSERT_STATUS(compile(&m), VM_UNIMPLEMENTED,
                "node 'ra' (RoiAlign): attribute 'mode' = min: supported: avg, max");
  mb_attr_i(&m, n, "sampling_ratio", 1000);
  ASSERT_STATUS(compile(&m), VM_UNIMPLEMENTED,
                "node 'ra' (RoiAlign): attribute 'sampling_ratio' = 1000: supported: 0 "
                "(adaptive) to 256");
  mb_attr_i(&m, n, "output_height", 0);
  ASSERT_STATUS(compile(&m), VM_INVALID_ARGUMENT,
                "node 'ra' (RoiAlign): output_height 0 and output_width 1: at least 1");
  mb_attr_s(&m, n, "coordinate_transformation_mode", "align_corners");
  ASSERT_STATUS(compile(&m), VM_UNIMPLEMENTED,
                "attribute 'coordinate_transformation_mode' = align_corners: supported: "
                "half_pixel, output_half_pixel");
  /* opset 10 has no coordinate_transformation_mode */
  m.opset.version = 10;
  ASSERT_STATUS(compile(&m), VM_UNIMPLEMENTED, "coordinate_transformation_mode");
  roi_model(&m, bad);
  ASSERT_STATUS(compile(&m), VM_INVALID_ARGUMENT,
                "node 'ra' (RoiAlign): batch_indices[1] = 2 is outside the batch of 2 images");
  roi_model(&m, neg);
  ASSERT_STATUS(compile(&m), VM_INVALID_ARGUMENT, "batch_indices[0] = -1 is outside");
}

/* X [1, 3, 4, 4] (rank 4) or [1, 3, 4] (rank 3), W [2, 3, 2, 2], offset
 * of dims od -> DeformConv */
static Onnx__NodeProto *deform_model(mb_t *m, int rank3, const int64_t *od) {
  static float w[2 * 3 * 2 * 2];
  mb_init(m, 19);
  if (rank3)
    mb_input(m, "x", 3, D(1, 3, 4));
  else
    mb_input(m, "x", 4, D(1, 3, 4, 4));
  mb_init_raw(m, "w", E_FLOAT, 4, D(2, 3, 2, 2), w, sizeof(w));
  mb_input(m, "o", 4, od);
  mb_output(m, "y", 4, D(1, 2, 3, 3));
  Onnx__NodeProto *n = mb_node(m, "DeformConv", "dc", "x", "w", "y");
  n->input[n->n_input++] = "o";
  return n;
}

static void test_deform_conv(void **state) {
  (void)state;
  mb_t m;
  Onnx__NodeProto *n = deform_model(&m, 0, D(1, 8, 3, 3));
  ASSERT_OK(compile(&m));
  mb_attr_i(&m, n, "offset_group", 2);
  ASSERT_STATUS(compile(&m), VM_INVALID_ARGUMENT,
                "node 'dc' (DeformConv): group 1, offset_group 2: X's 3 channels and W [2,3,2,2] "
                "do not fit");
  deform_model(&m, 0, D(1, 4, 3, 3));
  ASSERT_STATUS(compile(&m), VM_INVALID_ARGUMENT,
                "node 'dc' (DeformConv): offset [1,4,3,3]: expected [1,8,3,3]");
  deform_model(&m, 1, D(1, 8, 3, 3));
  ASSERT_STATUS(compile(&m), VM_UNIMPLEMENTED,
                "node 'dc' (DeformConv): X has rank 3: supported: 4 (2-D)");
}

static void test_det_stft_mel(void **state) {
  (void)state;
  mb_t m;
  mb_init(&m, 11);
  mb_input(&m, "x", 3, D(2, 3, 4));
  mb_output(&m, "y", 1, D(2));
  mb_node(&m, "Det", "d", "x", NULL, "y");
  ASSERT_STATUS(compile(&m), VM_INVALID_ARGUMENT,
                "node 'd' (Det): X [2,3,4]: expected [..., M, M]");
  mb_init(&m, 11);
  mb_input(&m, "x", 2, D(300, 300));
  mb_output(&m, "y", 0, NULL);
  mb_node(&m, "Det", "d", "x", NULL, "y");
  ASSERT_STATUS(compile(&m), VM_UNIMPLEMENTED,
                "node 'd' (Det): 300 x 300 matrices: supported: up to 256 x 256");
  m.opset.version = 10;
  ASSERT_STATUS(compile(&m), VM_UNIMPLEMENTED,
                "operator Det at opset 10 is not supported: supported: opsets 11 to the newest");

  /* STFT: frame_step must be known when compiling */
  mb_init(&m, 17);
  mb_input(&m, "s", 3, D(1, 64, 1));
  m.graph.input[m.graph.n_input++] = mb_vi(&m, "step", E_INT64, 0, NULL);
  mb_output(&m, "y", 4, D(1, 7, 9, 2));
  mb_node(&m, "STFT", "st", "s", "step", "y");
  ASSERT_STATUS(compile(&m), VM_UNIMPLEMENTED, "node 'st' (STFT): frame_step must be a constant");
  static const int64_t eight = 8, big = 65;
  mb_init(&m, 17);
  mb_input(&m, "s", 3, D(1, 64, 1));
  mb_init_raw(&m, "step", E_INT64, 0, NULL, &eight, sizeof(eight));
  mb_init_raw(&m, "len", E_INT64, 0, NULL, &big, sizeof(big));
  mb_output(&m, "y", 4, D(1, 7, 9, 2));
  Onnx__NodeProto *n = mb_node(&m, "STFT", "st", "s", "step", "y");
  n->input[n->n_input++] = "";
  n->input[n->n_input++] = "len";
  ASSERT_STATUS(compile(&m), VM_INVALID_ARGUMENT,
                "node 'st' (STFT): frame_length 65: 1 to the signal's length (64)");
  mb_attr_i(&m, n, "onesided", 3);
  ASSERT_STATUS(compile(&m), VM_UNIMPLEMENTED,
                "node 'st' (STFT): attribute 'onesided' = 3: supported: 0, 1");

  /* MelWeightMatrix: its shape comes from its inputs, so they are constants */
  static const int32_t bins = 8, no_bins = 0, dft = 16, rate = 8192;
  static const float lo = 0, hi = 4096, far = 1e9f;
  const char *names[5] = {"n", "d", "r", "l", "h"};
  for (int k = 0; k < 4; k++) {
    mb_init(&m, 17);
    if (k == 0)
      m.graph.input[m.graph.n_input++] = mb_vi(&m, "n", E_INT32, 0, NULL);
    else
      mb_init_raw(&m, "n", E_INT32, 0, NULL, k == 3 ? &no_bins : &bins, sizeof(bins));
    mb_init_raw(&m, "d", E_INT32, 0, NULL, &dft, sizeof(dft));
    mb_init_raw(&m, "r", E_INT32, 0, NULL, &rate, sizeof(rate));
    mb_init_raw(&m, "l", E_FLOAT, 0, NULL, &lo, sizeof(lo));
    mb_init_raw(&m, "h", E_FLOAT, 0, NULL, k == 2 ? &far : &hi, sizeof(hi));
    mb_output(&m, "y", 2, D(9, 8));
    n = mb_node(&m, "MelWeightMatrix", "mw", names[0], names[1], "y");
    for (int i = 2; i < 5; i++) n->input[n->n_input++] = (char *)names[i];
    if (k == 0)
      ASSERT_STATUS(compile(&m), VM_UNIMPLEMENTED,
                    "node 'mw' (MelWeightMatrix): num_mel_bins must be a constant");
    else if (k == 1)
      ASSERT_OK(compile(&m));
    else if (k == 2) /* an upper edge far past the Nyquist frequency */
      ASSERT_STATUS(compile(&m), VM_INVALID_ARGUMENT,
                    "node 'mw' (MelWeightMatrix): mel bin edge 2 falls on spectrogram bin 23, "
                    "outside 0 to 8");
    else
      ASSERT_STATUS(compile(&m), VM_INVALID_ARGUMENT,
                    "node 'mw' (MelWeightMatrix): num_mel_bins 0 (1 to 65536), dft_length 16 (1 "
                    "to 2^24), sample_rate 8192 (positive), edges 0 and 4096 (0 <= lower <= "
                    "upper)");
  }
}

static void test_maxpool_indices(void **state) {
  (void)state;
  mb_t m;
  mb_attrs_t s;
  static const int64_t k2[2] = {2, 2};
  mb_init(&m, 12);
  mb_input(&m, "x", 4, D(1, 2, 4, 4));
  mb_output(&m, "y", 4, D(1, 2, 3, 3));
  m.graph.output[m.graph.n_output++] = mb_vi(&m, "i", E_INT64, 4, D(1, 2, 3, 3));
  Onnx__NodeProto *n = mb_node(&m, "MaxPool", "mp", "x", NULL, "y");
  n->output[n->n_output++] = "i";
  memset(&s, 0, sizeof(s));
  mb_attrs_int(&s, n, "kernel_shape", 0); /* made a list of ints below */
  s.a[0].type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
  s.a[0].has_i = 0;
  s.a[0].n_ints = 2;
  s.a[0].ints = (int64_t *)k2;
  ASSERT_OK(compile(&m));
  mb_attrs_int(&s, n, "storage_order", 2);
  ASSERT_STATUS(compile(&m), VM_UNIMPLEMENTED,
                "node 'mp' (MaxPool): attribute 'storage_order' = 2: supported: 0, 1");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_grid_sample),     cmocka_unit_test(test_roi_align),
      cmocka_unit_test(test_deform_conv),     cmocka_unit_test(test_det_stft_mel),
      cmocka_unit_test(test_maxpool_indices),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
