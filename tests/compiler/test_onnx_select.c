/* The importer's refusals for the selection operators (onnx_ops_select.c),
 * with their exact codes and messages: an output of a data-dependent shape
 * anywhere but as a graph output no node reads, a K or axis computed at
 * run time, out-of-range attributes. Compilation only (no device): the
 * node cases of scripts/onnx-node-1.23.sh run the ops in both modes. */
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

#define ONNX_INT64 7

static const int64_t k_d24[2] = {2, 4};

static vm_status_t compile(mb_t *m) {
  size_t n;
  uint8_t *buf = mb_pack(m, &n);
  vm_executable_t *e = NULL;
  vm_status_t st = vmcc_onnx_compile(buf, n, NULL, NULL, &e, NULL);
  free(buf);
  vm_executable_free(e);
  return st;
}

static void int64_output(mb_t *m, const char *name, uint32_t ndim, const int64_t *dims) {
  m->graph.output[m->graph.n_output++] = mb_vi(m, name, ONNX_INT64, ndim, dims);
}

/* x[2,4] -> NonZero -> nz [2, ?] as the graph output: compiles */
static void test_nonzero_output_compiles(void **state) {
  mb_t m;
  mb_init(&m, 13);
  mb_input(&m, "x", 2, k_d24);
  int64_t d[2] = {2, -1};
  int64_output(&m, "nz", 2, d);
  mb_node(&m, "NonZero", "n", "x", NULL, "nz");
  ASSERT_OK(compile(&m));
}

/* Unique with four named outputs of which the graph returns Y and the
 * inverse: the other two are computed, unread and not returned */
static void test_unique_unread_outputs_compile(void **state) {
  mb_t m;
  mb_init(&m, 11);
  mb_input(&m, "x", 1, (const int64_t[]){6});
  mb_output(&m, "y", 1, (const int64_t[]){-1});
  int64_output(&m, "inv", 1, (const int64_t[]){6});
  Onnx__NodeProto *n = mb_node(&m, "Unique", "u", "x", NULL, "y");
  char *outs[4] = {"y", "idx", "inv", "counts"};
  n->output = outs;
  n->n_output = 4;
  ASSERT_OK(compile(&m));
}

/* a node reading NonZero's output: its shape is unknown until run time */
static void test_nonzero_consumed_refused(void **state) {
  mb_t m;
  mb_init(&m, 13);
  mb_input(&m, "x", 2, k_d24);
  int64_t d[2] = {-1, 2};
  int64_output(&m, "t", 2, d);
  mb_node(&m, "NonZero", "n", "x", NULL, "nz");
  int64_t perm[2] = {1, 0};
  Onnx__NodeProto *t = mb_node(&m, "Transpose", "t", "nz", NULL, "t");
  mb_attr_ints(&m, t, "perm", perm, 2);
  ASSERT_STATUS(compile(&m), VM_UNIMPLEMENTED,
                "node 'n' (NonZero): output 'nz' has a data-dependent shape: supported: as an "
                "output of the main graph that no node reads");
}

/* the same output named twice among the graph's outputs */
static void test_nonzero_output_twice_refused(void **state) {
  mb_t m;
  mb_init(&m, 13);
  mb_input(&m, "x", 2, k_d24);
  int64_t d[2] = {2, -1};
  int64_output(&m, "nz", 2, d);
  int64_output(&m, "nz", 2, d);
  mb_node(&m, "NonZero", "n", "x", NULL, "nz");
  ASSERT_STATUS(compile(&m), VM_UNIMPLEMENTED, "output 'nz' has a data-dependent shape");
}

/* TopK of x[2,4] with K from an initializer (k_val) or a run-time input */
static void topk_model(mb_t *m, const int64_t *k_val, int64_t axis) {
  mb_init(m, 11);
  mb_input(m, "x", 2, k_d24);
  int64_t one = 1;
  if (k_val)
    mb_init_raw(m, "k", ONNX_INT64, 1, &one, k_val, sizeof(int64_t));
  else
    m->graph.input[m->graph.n_input++] = mb_vi(m, "k", ONNX_INT64, 1, &one);
  int64_t d[2] = {2, -1};
  mb_output(m, "v", 2, d);
  Onnx__NodeProto *n = mb_node(m, "TopK", "tk", "x", "k", "v");
  mb_attr_i(m, n, "axis", axis);
}

static void test_topk_refusals(void **state) {
  mb_t m;
  const int64_t k3 = 3, k5 = 5;
  topk_model(&m, &k3, 1);
  ASSERT_OK(compile(&m));
  topk_model(&m, &k5, 1);
  ASSERT_STATUS(compile(&m), VM_INVALID_ARGUMENT,
                "node 'tk' (TopK): K = 5 is out of range: 0 to 4 (axis 1)");
  topk_model(&m, &k3, 2);
  ASSERT_STATUS(compile(&m), VM_INVALID_ARGUMENT,
                "node 'tk' (TopK): axis 2 is out of range for rank 2");
  topk_model(&m, NULL, 1);
  ASSERT_STATUS(compile(&m), VM_UNIMPLEMENTED,
                "node 'tk' (TopK): K 'k' is computed at run time: supported: a constant K");
}

/* TensorScatter of past [2, 4] and update [2, 1]: axis 0 is the batch */
static void test_tensor_scatter_refusals(void **state) {
  mb_t m;
  mb_init(&m, 24);
  mb_input(&m, "past", 2, k_d24);
  int64_t du[2] = {2, 1};
  mb_input(&m, "upd", 2, du);
  mb_output(&m, "y", 2, k_d24);
  Onnx__NodeProto *n = mb_node(&m, "TensorScatter", "ts", "past", "upd", "y");
  mb_attr_i(&m, n, "axis", 0);
  ASSERT_STATUS(compile(&m), VM_INVALID_ARGUMENT,
                "node 'ts' (TensorScatter): axis is the batch axis: expected 1 to 1");
  mb_attr_s(&m, n, "mode", "ring");
  ASSERT_STATUS(compile(&m), VM_UNIMPLEMENTED,
                "node 'ts' (TensorScatter): attribute 'mode' = ring: supported: linear, circular");
  mb_attr_i(&m, n, "axis", 1);
  ASSERT_OK(compile(&m));
}

/* Einsum of x [2, 3] and y [3, 4] by equation eq */
static vm_status_t einsum(const char *eq, int two) {
  mb_t m;
  mb_init(&m, 13);
  mb_input(&m, "x", 2, (const int64_t[]){2, 3});
  if (two) mb_input(&m, "y", 2, (const int64_t[]){3, 4});
  mb_output(&m, "z", 2, (const int64_t[]){2, 4});
  Onnx__NodeProto *n = mb_node(&m, "Einsum", "ein", "x", two ? "y" : NULL, "z");
  mb_attr_s(&m, n, "equation", eq);
  return compile(&m);
}

static void test_einsum_equations(void **state) {
  ASSERT_OK(einsum("ij,jk->ik", 1));
  ASSERT_OK(einsum(" i j , j k ", 1)); /* implicit output, spaces */
  ASSERT_OK(einsum("...j,jk->...k", 1));
  ASSERT_OK(einsum("ij->ji", 0));
  static const struct {
    const char *eq;
    int two;
    const char *msg;
  } bad[] = {
      {"ij,jk->ik->i", 1, "node 'ein' (Einsum): equation 'ij,jk->ik->i': more than one '->'"},
      {"ij,jk,kl->il", 1, "equation 'ij,jk,kl->il' has more terms than the 2 inputs"},
      {"ij->ij", 1, "equation 'ij->ij' has 1 terms for 2 inputs"},
      {"ijk,jk->ik", 1, "term 0: a term of 3 labels for an input of rank 2"},
      {"i,jk->ik", 1, "term 0: a term of 1 labels for an input of rank 2"},
      {"i1,jk->ik", 1, "term 0: character '1' is not a letter, ',', '->' or '...'"},
      {"..i,jk->ik", 1, "term 0: '.' outside a single '...'"},
      {"......,jk->k", 1, "term 0: '.' outside a single '...'"},
      {"ij,jk->iq", 1, "equation 'ij,jk->iq': output label 1 is in no input"},
      {"ij,jk->ii", 1, "equation 'ij,jk->ii': output label 1 is repeated"},
      {"ij,ik->jk", 1, "equation 'ij,ik->jk': a label has dims 2 and 3"},
      {"ii->i", 0, "equation 'ii->i': a label has dims 2 and 3"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    ASSERT_STATUS(einsum(bad[i].eq, bad[i].two), VM_INVALID_ARGUMENT, bad[i].msg);
  /* bounded: an equation of more than 256 characters */
  char longeq[300];
  memset(longeq, 'i', sizeof(longeq) - 1);
  longeq[sizeof(longeq) - 1] = 0;
  ASSERT_STATUS(einsum(longeq, 0), VM_INVALID_ARGUMENT,
                "node 'ein' (Einsum): equation is longer than 256 characters");
}

/* The bounds on one work-item's work (docs/security.md), on shapes alone */
static void test_work_bounds(void **state) {
  mb_t m;
  const int64_t k = 70000;
  mb_init(&m, 11);
  mb_input(&m, "x", 2, (const int64_t[]){1, 70000});
  mb_init_raw(&m, "k", ONNX_INT64, 1, (const int64_t[]){1}, &k, sizeof(k));
  mb_output(&m, "v", 2, (const int64_t[]){1, 70000});
  mb_node(&m, "TopK", "tk", "x", "k", "v");
  ASSERT_STATUS(compile(&m), VM_UNIMPLEMENTED,
                "node 'tk' (TopK): K = 70000 of 70000 elements a row: supported: K x elements at "
                "most 2^32");
  mb_init(&m, 13);
  mb_input(&m, "x", 2, (const int64_t[]){8193, 8192});
  int64_output(&m, "nz", 2, (const int64_t[]){2, -1});
  mb_node(&m, "NonZero", "n", "x", NULL, "nz");
  ASSERT_STATUS(compile(&m), VM_UNIMPLEMENTED,
                "node 'n' (NonZero): NonZero of 67117056 elements: supported: at most 2^26");
  mb_init(&m, 11);
  mb_input(&m, "x", 1, (const int64_t[]){70000});
  mb_output(&m, "y", 1, (const int64_t[]){-1});
  mb_node(&m, "Unique", "u", "x", NULL, "y");
  ASSERT_STATUS(compile(&m), VM_UNIMPLEMENTED,
                "node 'u' (Unique): Unique of 70000 slices of 1 elements: supported: slices^2 x "
                "elements at most 2^32");
  mb_init(&m, 11);
  mb_input(&m, "boxes", 3, (const int64_t[]){1, 70000, 4});
  mb_input(&m, "scores", 3, (const int64_t[]){1, 1, 70000});
  int64_output(&m, "sel", 2, (const int64_t[]){-1, 3});
  mb_node(&m, "NonMaxSuppression", "nms", "boxes", "scores", "sel");
  ASSERT_STATUS(compile(&m), VM_UNIMPLEMENTED,
                "node 'nms' (NonMaxSuppression): 70000 boxes: supported: at most 65536 a batch");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_nonzero_output_compiles),
      cmocka_unit_test(test_nonzero_consumed_refused),
      cmocka_unit_test(test_unique_unread_outputs_compile),
      cmocka_unit_test(test_nonzero_output_twice_refused),
      cmocka_unit_test(test_topk_refusals),
      cmocka_unit_test(test_tensor_scatter_refusals),
      cmocka_unit_test(test_einsum_equations),
      cmocka_unit_test(test_work_bounds),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
