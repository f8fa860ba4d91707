/* The ONNX front end on models built here (protobuf-c structs packed to
 * bytes): what compiles and what it reports, and every error path a hostile
 * or unsupported file takes, with its exact status and message. No device:
 * only compilation (test_rt_onnx_node.c runs models). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>

#include <cmocka.h>

#include "helper_onnx_model.h"
#include "onnx.pb-c.h"
#include "test_util.h"
#include "vm/executable.h"
#include "vmcompiler/onnx.h"

static vm_status_t compile(mb_t *m, const vmcc_onnx_options_t *o, vmcc_onnx_report_t *rep,
                           vm_executable_t **out) {
  size_t n;
  uint8_t *buf = mb_pack(m, &n);
  vm_executable_t *e = NULL;
  vm_status_t st = vmcc_onnx_compile(buf, n, NULL, o, &e, rep);
  free(buf);
  if (out)
    *out = e;
  else
    vm_executable_free(e);
  return st;
}

static const int64_t k_d24[2] = {2, 4};

/* x[2,4] -> Relu -> y */
static void relu_model(mb_t *m) {
  mb_init(m, 17);
  mb_input(m, "x", 2, k_d24);
  mb_output(m, "y", 2, k_d24);
  mb_node(m, "Relu", "r", "x", NULL, "y");
}

/* Sets node k's single attribute to the int v. */
static void set_int_attr(mb_t *m, uint32_t k, const char *name, int64_t v) {
  mb_attr_s(m, &m->nodes[k], name, "");
  m->attrs[k].type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
  m->attrs[k].has_s = 0;
  m->attrs[k].has_i = 1;
  m->attrs[k].i = v;
}

static const char *meta(const vm_executable_t *e, const char *key) {
  for (uint32_t i = 0; i < e->num_meta; i++)
    if (strcmp(e->meta[i].key, key) == 0) return e->meta[i].value;
  return NULL;
}

static void test_relu_compiles(void **state) {
  mb_t m;
  relu_model(&m);
  vmcc_onnx_report_t rep;
  vm_executable_t *e;
  ASSERT_OK(compile(&m, NULL, &rep, &e));
  int64_t fi = vm_executable_find_function(e, "main", VM_FUNC_BYTECODE);
  assert_true(fi >= 0);
  assert_int_equal(e->functions[fi].num_args, 1);
  assert_string_equal(e->functions[fi].params[0].name, "x");
  assert_string_equal(meta(e, "producer"), VMCC_ONNX_PRODUCER);
  assert_string_equal(meta(e, "output.0.name"), "y");
  assert_string_equal(meta(e, "input.x"), "float32[2,4]");
  assert_int_equal(rep.opset, 17);
  assert_int_equal(rep.num_nodes, 1);
  assert_int_equal(rep.num_ops, 1);
  assert_string_equal(rep.ops[0].name, "Relu");
  vm_executable_free(e);
}

/* Shape arithmetic on a run-time input folds away: Shape -> Reshape of
 * x[2,4] with the shape computed at compile time; only the Relu runs. */
static void test_shape_arithmetic_folds(void **state) {
  mb_t m;
  mb_init(&m, 13);
  mb_input(&m, "x", 2, k_d24);
  int64_t d8[1] = {8};
  mb_output(&m, "y", 1, d8);
  mb_node(&m, "Shape", "s", "x", NULL, "sh");
  mb_node(&m, "ReduceProd", "p", "sh", NULL, "n"); /* keepdims 1 -> [1] */
  mb_node(&m, "Relu", "r", "x", NULL, "rx");
  mb_node(&m, "Reshape", "f", "rx", "n", "y");
  vmcc_onnx_report_t rep;
  ASSERT_OK(compile(&m, NULL, &rep, NULL));
  assert_int_equal(rep.num_nodes, 4);
  assert_int_equal(rep.num_folded, 2);
}

/* Pow by the constant 2 (a LayerNorm's variance written out) lowers to
 * cl.binary.mul of x by itself, by 3 (GELU's tanh form) to (x * x) * x,
 * as onnxruntime computes it; any other exponent stays cl.binary.pow. */
static void test_pow_two_is_mul(void **state) {
  static const float ex[3] = {2.0f, 3.0f, 2.5f};
  for (int k = 0; k < 3; k++) {
    mb_t m;
    mb_init(&m, 17);
    mb_input(&m, "x", 2, k_d24);
    mb_output(&m, "y", 2, k_d24);
    mb_init_raw(&m, "e", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 0, NULL, &ex[k], sizeof(ex[k]));
    mb_node(&m, "Pow", "p", "x", "e", "y");
    vm_executable_t *e;
    ASSERT_OK(compile(&m, NULL, NULL, &e));
    assert_int_equal(vm_executable_find_function(e, "cl.binary.mul", VM_FUNC_PACKED) >= 0, k < 2);
    assert_int_equal(vm_executable_find_function(e, "cl.binary.pow", VM_FUNC_PACKED) >= 0, k == 2);
    vm_executable_free(e);
  }
}

static void test_not_a_model(void **state) {
  vm_executable_t *e = NULL;
  const char junk[] = "\xff\xff\xff\xff not protobuf";
  ASSERT_STATUS(vmcc_onnx_compile(junk, sizeof(junk), NULL, NULL, &e, NULL), VM_INVALID_ARGUMENT,
                "not an ONNX model");
  assert_null(e);
  mb_t m;
  relu_model(&m);
  m.model.graph = NULL;
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_INVALID_ARGUMENT, "the model has no graph");
}

static void test_opset_range(void **state) {
  mb_t m;
  relu_model(&m);
  m.opset.version = 29;
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED,
                "opset 29: supported: opsets 1 to 28");
  relu_model(&m);
  m.opset.domain = "com.example";
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_INVALID_ARGUMENT,
                "imports no opset of the default ONNX domain");
}

static void test_unsupported_op_and_attribute(void **state) {
  mb_t m;
  relu_model(&m);
  m.nodes[0].op_type = "ImageDecoder";
  ASSERT_STATUS(
      compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED,
      "node 'r' (ImageDecoder): operator ImageDecoder is not supported: supported: Abs, Add,");
  mb_init(&m, 20);
  mb_input(&m, "x", 2, k_d24);
  mb_output(&m, "y", 2, k_d24);
  Onnx__NodeProto *n = mb_node(&m, "Gelu", "g", "x", NULL, "y");
  mb_attr_s(&m, n, "approximate", "fast");
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED,
                "node 'g' (Gelu): attribute 'approximate' = fast: supported: none, tanh");
  relu_model(&m);
  m.nodes[0].domain = "com.example";
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED,
                "node 'r' (Relu): domain 'com.example': supported: the default domain, "
                "com.microsoft, ai.onnx.preview");
  relu_model(&m);
  m.nodes[0].domain = "com.microsoft";
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED,
                "node 'r' (Relu): operator Relu of domain 'com.microsoft' is not supported: "
                "supported: QGemm, QLinearAdd,");
  relu_model(&m);
  m.nodes[0].domain = "org.example";
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED,
                "node 'r' (Relu): domain 'org.example': supported: the default domain, "
                "com.microsoft");
}

/* x [2, 4] int8 (a constant) -> DequantizeLinear(scale, zero point) -> y
 * float [2, 4] at opset 21, the scale and zero point of ns values. */
static const int8_t k_q8[8] = {1, -2, 3, -4, 5, -6, 7, -8};
static const float k_scales[4] = {0.5f, 0.25f, 2.0f, 1.0f};
static const int8_t k_zps[4] = {0, 1, 2, 3};

static Onnx__NodeProto *dq_model(mb_t *m, int64_t ns, int64_t nz) {
  mb_init(m, 21);
  mb_output(m, "y", 2, k_d24);
  mb_init_raw(m, "x", ONNX__TENSOR_PROTO__DATA_TYPE__INT8, 2, k_d24, k_q8, 8);
  int64_t sd[1] = {ns}, zd[1] = {nz};
  mb_init_raw(m, "s", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1, sd, k_scales, (size_t)ns * 4);
  mb_init_raw(m, "z", ONNX__TENSOR_PROTO__DATA_TYPE__INT8, 1, zd, k_zps, (size_t)nz);
  Onnx__NodeProto *n = mb_node(m, "DequantizeLinear", "dq", "x", "s", "y");
  mb_node_input(n, "z");
  return n;
}

/* Quantization parameters are checked against x and the axis: a scale of
 * another length, a zero point of another shape, a negative block size
 * and run-time scales of the QLinear operators are refused at the node. */
static void test_quant_params(void **state) {
  (void)state;
  mb_t m;
  dq_model(&m, 4, 4);
  ASSERT_OK(compile(&m, NULL, NULL, NULL));
  dq_model(&m, 3, 3);
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_INVALID_ARGUMENT,
                "node 'dq' (DequantizeLinear): scale [3]: expected one value or [4] (axis 1 of "
                "x [2,4])");
  dq_model(&m, 4, 2);
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_INVALID_ARGUMENT,
                "node 'dq' (DequantizeLinear): zero point [2] and scale [4] have different "
                "shapes");
  dq_model(&m, 4, 4);
  set_int_attr(&m, 0, "block_size", -2);
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_INVALID_ARGUMENT,
                "node 'dq' (DequantizeLinear): block_size -2: it must be 0 or positive");
  dq_model(&m, 4, 4);
  set_int_attr(&m, 0, "axis", 2);
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_INVALID_ARGUMENT,
                "node 'dq' (DequantizeLinear): axis 2 is out of range for rank 2");
  dq_model(&m, 2, 2);
  set_int_attr(&m, 0, "block_size", 2);
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_INVALID_ARGUMENT,
                "node 'dq' (DequantizeLinear): scale [2]: blocks of 2 along axis 1 of x [2,4] "
                "need 2 there and x's other dims");
  /* QLinearMatMul with its a_scale a run-time input */
  mb_init(&m, 21);
  mb_input(&m, "as", 0, NULL);
  mb_output(&m, "y", 2, k_d24);
  int64_t d22[2] = {2, 2}, d24b[2] = {2, 4};
  mb_init_raw(&m, "a", ONNX__TENSOR_PROTO__DATA_TYPE__INT8, 2, d22, k_q8, 4);
  mb_init_raw(&m, "b", ONNX__TENSOR_PROTO__DATA_TYPE__INT8, 2, d24b, k_q8, 8);
  mb_init_raw(&m, "k", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 0, NULL, k_scales, 4);
  mb_init_raw(&m, "zq", ONNX__TENSOR_PROTO__DATA_TYPE__INT8, 0, NULL, k_zps, 1);
  Onnx__NodeProto *n = mb_node(&m, "QLinearMatMul", "qm", "a", "as", "y");
  const char *rest[6] = {"zq", "b", "k", "zq", "k", "zq"};
  for (int i = 0; i < 6; i++) mb_node_input(n, rest[i]);
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED,
                "node 'qm' (QLinearMatMul): a_scale is computed at run time: supported: "
                "constants");
}

/* The composites of onnx_ops_compose.c and onnx_ops_index.c refuse what
 * they cannot lower, naming the node; a refusal inside a sub-node names the
 * composite node and the inner operator. */
static void test_composite_refusals(void **state) {
  (void)state;
  mb_t m;
  static const int64_t d3[1] = {3}, d1[1] = {1}, d24[2] = {2, 4}, d124[3] = {1, 2, 4};
  /* BitShift: the shift amounts must be constant */
  mb_init(&m, 11);
  m.graph.input[m.graph.n_input++] = mb_vi(&m, "x", 12, 1, d3);
  m.graph.input[m.graph.n_input++] = mb_vi(&m, "s", 12, 1, d3);
  m.graph.output[m.graph.n_output++] = mb_vi(&m, "y", 12, 1, d3);
  Onnx__NodeProto *n = mb_node(&m, "BitShift", "b", "x", "s", "y");
  mb_attr_s(&m, n, "direction", "LEFT");
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED,
                "node 'b' (BitShift): the shift amounts Y must be constant");
  mb_attr_s(&m, n, "direction", "UP");
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED,
                "node 'b' (BitShift): attribute 'direction' = UP: supported: LEFT, RIGHT");
  /* GatherElements: constant indices are range-checked here */
  static const int64_t idx[8] = {0, 1, 2, 3, 0, 1, 2, 9};
  mb_init(&m, 13);
  mb_input(&m, "x", 2, d24);
  mb_output(&m, "y", 2, d24);
  mb_init_raw(&m, "i", 7, 2, d24, idx, sizeof(idx));
  n = mb_node(&m, "GatherElements", "g", "x", "i", "y");
  set_int_attr(&m, 0, "axis", 1);
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_INVALID_ARGUMENT,
                "node 'g' (GatherElements): an index 9 is outside [-4, 4)");
  /* RMSNormalization computes in float: stash_type 1 only */
  static const float ones[4] = {1, 1, 1, 1};
  mb_init(&m, 23);
  mb_input(&m, "x", 2, d24);
  mb_output(&m, "y", 2, d24);
  mb_init_raw(&m, "w", 1, 1, d24 + 1, ones, sizeof(ones));
  mb_node(&m, "RMSNormalization", "r", "x", "w", "y");
  set_int_attr(&m, 0, "stash_type", 11);
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED,
                "node 'r' (RMSNormalization): attribute 'stash_type' = not 1: supported: 1 "
                "(float)");
  /* Attention: 3-D inputs need the head counts */
  mb_init(&m, 23);
  m.graph.input[m.graph.n_input++] = mb_vi(&m, "q", 1, 3, d124);
  m.graph.output[m.graph.n_output++] = mb_vi(&m, "y", 1, 3, d124);
  n = mb_node(&m, "Attention", "a", "q", "q", "y");
  mb_node_input(n, "q");
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_INVALID_ARGUMENT,
                "node 'a' (Attention): 3-D inputs need q_num_heads and kv_num_heads");
  /* a sub-node's refusal: ReduceLogSumExp's ReduceMax on a run-time int tensor */
  mb_init(&m, 18);
  m.graph.input[m.graph.n_input++] = mb_vi(&m, "x", 6, 1, d3);
  m.graph.output[m.graph.n_output++] = mb_vi(&m, "y", 6, 1, d1);
  mb_node(&m, "ReduceLogSumExp", "l", "x", NULL, "y");
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED,
                "node 'l' (ReduceMax): input 'x' has dtype int32: supported: float, float16, "
                "double (at run time)");
}

/* ---------------------------------------------------------------------------
 * CausalConvWithState, LinearAttention, FlexAttention (ai.onnx.preview) and
 * TfIdfVectorizer: what they refuse, each with its exact error.
 */

/* An ints attribute appended to n's attributes in s (v outlives the model). */
static void attrs_ints(mb_attrs_t *s, Onnx__NodeProto *n, const char *name, const int64_t *v,
                       size_t k) {
  mb_attrs_int(s, n, name, 0);
  Onnx__AttributeProto *a = s->p[n->n_attribute - 1];
  a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
  a->has_i = 0;
  a->ints = (int64_t *)v;
  a->n_ints = k;
}

/* A graph attribute appended to n's attributes in s. */
static void attrs_graph(mb_attrs_t *s, Onnx__NodeProto *n, const char *name, Onnx__GraphProto *g) {
  mb_attrs_int(s, n, name, 0);
  Onnx__AttributeProto *a = s->p[n->n_attribute - 1];
  a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH;
  a->has_i = 0;
  a->g = g;
}

/* x [1, 2, 4] through CausalConvWithState 'c' with zero weights of wd at opset. */
static Onnx__NodeProto *causal_conv_model(mb_t *m, int64_t opset, const int64_t *wd) {
  static const float w[12] = {0};
  static const int64_t d124[3] = {1, 2, 4};
  mb_init(m, opset);
  mb_input(m, "x", 3, d124);
  mb_output(m, "y", 3, d124);
  mb_init_raw(m, "w", 1, 3, wd, w, (size_t)(wd[0] * wd[1] * wd[2]) * sizeof(float));
  return mb_node(m, "CausalConvWithState", "c", "x", "w", "y");
}

static void test_sequence_op_refusals(void **state) {
  (void)state;
  mb_t m;
  mb_attrs_t s;
  Onnx__NodeProto *n;
  static const int64_t d124[3] = {1, 2, 4}, d213[3] = {2, 1, 3}, d223[3] = {2, 2, 3};
  /* CausalConvWithState */
  n = causal_conv_model(&m, 27, d213);
  mb_attr_s(&m, n, "activation", "relu");
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED,
                "node 'c' (CausalConvWithState): attribute 'activation' = relu: supported: none, "
                "silu, swish");
  causal_conv_model(&m, 27, d223);
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_INVALID_ARGUMENT,
                "node 'c' (CausalConvWithState): weight must be [2, 1, k] with k >= 1");
  causal_conv_model(&m, 26, d213);
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED,
                "node 'c' (CausalConvWithState): operator CausalConvWithState at opset 26 is not "
                "supported: supported: opsets 27 to the newest");
  /* LinearAttention */
  mb_init(&m, 27);
  mb_input(&m, "q", 3, d124);
  mb_output(&m, "y", 3, d124);
  n = mb_node(&m, "LinearAttention", "l", "q", "q", "y");
  mb_node_input(n, "q");
  memset(&s, 0, sizeof(s));
  mb_attrs_int(&s, n, "q_num_heads", 2);
  mb_attrs_int(&s, n, "kv_num_heads", 2);
  mb_attrs_str(&s, n, "update_rule", "mamba");
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED,
                "node 'l' (LinearAttention): attribute 'update_rule' = mamba: supported: linear, "
                "gated, delta, gated_delta");
  s.a[2].s.data = (uint8_t *)"gated";
  s.a[2].s.len = 5;
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_INVALID_ARGUMENT,
                "node 'l' (LinearAttention): update_rule 'gated' takes a decay and no beta");
  s.a[2].s.data = (uint8_t *)"linear";
  s.a[2].s.len = 6;
  s.a[1].i = 3;
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_INVALID_ARGUMENT,
                "node 'l' (LinearAttention): q_num_heads (2) must be a positive multiple of "
                "kv_num_heads (3)");
  /* a head count past 32 bits (nothing else bounds it when the head size
   * is 0) */
  s.a[0].i = INT64_C(1) << 32;
  s.a[1].i = 2;
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_INVALID_ARGUMENT,
                "node 'l' (LinearAttention): q_num_heads 4294967296: expected at most 2147483647");
  s.a[0].i = 2;
  ASSERT_OK(compile(&m, NULL, NULL, NULL));
  /* FlexAttention: its domain, softmax_precision, its modifier graphs */
  static const int64_t d1224[4] = {1, 2, 2, 4}, d1222[4] = {1, 2, 2, 2};
  mb_init(&m, 26);
  mb_input(&m, "q", 4, d1224);
  mb_output(&m, "y", 4, d1224);
  n = mb_node(&m, "FlexAttention", "f", "q", "q", "y");
  mb_node_input(n, "q");
  n->domain = "ai.onnx.preview";
  ASSERT_OK(compile(&m, NULL, NULL, NULL));
  memset(&s, 0, sizeof(s));
  mb_attrs_int(&s, n, "softmax_precision", 11);
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED,
                "node 'f' (FlexAttention): attribute 'softmax_precision' = that type: supported: "
                "float (1) and float16 (10)");
  /* score_mod: a ReduceSum (over every axis) changes the scores' shape */
  mb_t g;
  mb_init(&g, 26);
  g.graph.input[g.graph.n_input++] = mb_vi(&g, "sc", 1, 4, d1222);
  g.graph.output[g.graph.n_output++] = mb_vi(&g, "so", 1, 4, (const int64_t[]){1, 1, 1, 1});
  mb_node(&g, "ReduceSum", "r", "sc", NULL, "so");
  n->n_attribute = 0;
  attrs_graph(&s, n, "score_mod", &g.graph);
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_INVALID_ARGUMENT,
                "node 'f' (FlexAttention): score_mod gives float32[1,1,1,1] for its input's "
                "float32[1,2,2,2]: they must match");
  g.graph.output[g.graph.n_output++] = mb_vi(&g, "so", 1, 4, d1222);
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_INVALID_ARGUMENT,
                "node 'f' (FlexAttention): score_mod has 2 outputs: it must have 1");
  /* TfIdfVectorizer */
  static const int64_t d16[2] = {1, 6}, d17[2] = {1, 7}, counts[2] = {0, 2}, idx[3] = {0, 1, 6},
                       bad_idx[3] = {0, -1, 2}, pool[4] = {1, 2, 3, 4};
  mb_init(&m, 9);
  m.graph.input[m.graph.n_input++] = mb_vi(&m, "x", 6, 2, d16);
  mb_output(&m, "y", 2, d17);
  n = mb_node(&m, "TfIdfVectorizer", "t", "x", NULL, "y");
  memset(&s, 0, sizeof(s));
  mb_attrs_str(&s, n, "mode", "TF");
  mb_attrs_int(&s, n, "min_gram_length", 1);
  mb_attrs_int(&s, n, "max_gram_length", 2);
  mb_attrs_int(&s, n, "max_skip_count", 1);
  attrs_ints(&s, n, "ngram_counts", counts, 2);
  attrs_ints(&s, n, "ngram_indexes", idx, 3);
  attrs_ints(&s, n, "pool_int64s", pool, 4);
  ASSERT_OK(compile(&m, NULL, NULL, NULL));
  s.a[0].s.data = (uint8_t *)"BM25";
  s.a[0].s.len = 4;
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED,
                "node 't' (TfIdfVectorizer): attribute 'mode' = BM25: supported: TF, IDF, TFIDF");
  s.a[0].s.data = (uint8_t *)"TF";
  s.a[0].s.len = 2;
  s.a[5].ints = (int64_t *)bad_idx;
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_INVALID_ARGUMENT,
                "node 't' (TfIdfVectorizer): ngram_indexes[1] = -1 is out of range");
  s.a[5].ints = (int64_t *)idx;
  s.a[5].n_ints = 2; /* three grams: the third has no output column */
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_INVALID_ARGUMENT,
                "node 't' (TfIdfVectorizer): n-gram 3 has no entry in ngram_indexes (2 entries)");
  s.a[5].n_ints = 3;
  s.a[4].ints = (int64_t *)(const int64_t[]){0, 5};
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_INVALID_ARGUMENT,
                "node 't' (TfIdfVectorizer): ngram_counts must rise within the pool's 4 values");
  s.a[4].ints = (int64_t *)counts;
  mb_attrs_strs(&s, n, "pool_strings", 1, (const char *const[]){"a"});
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED,
                "node 't' (TfIdfVectorizer): attribute 'pool_strings' = a string pool: supported: "
                "pool_int64s (string tensors are not supported)");
  n->n_attribute--;
  /* a hostile size: every skip of a long row against 2000 distinct bigrams */
  static int64_t big_pool[4000], big_idx[2000];
  for (int i = 0; i < 4000; i++) big_pool[i] = i;
  for (int i = 0; i < 2000; i++) big_idx[i] = i;
  static const int64_t big_counts[2] = {0, 0}, big_x[2] = {1, 4096}, big_y[2] = {1, 2000};
  m.graph.input[0] = mb_vi(&m, "x", 6, 2, big_x);
  m.graph.output[0] = mb_vi(&m, "y", 1, 2, big_y);
  s.a[3].i = 4095;
  s.a[4].ints = (int64_t *)big_counts;
  s.a[5].ints = big_idx;
  s.a[5].n_ints = 2000;
  s.a[6].ints = big_pool;
  s.a[6].n_ints = 4000;
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_RESOURCE_EXHAUSTED,
                "node 't' (TfIdfVectorizer): comparing 8386560 windows of 1 rows with 2000 "
                "2-grams: more than 67108864 elements");
  /* a row of 2^30 tokens: refused at the first skip, without walking the others */
  static const int64_t huge_x[2] = {1, 1 << 30};
  m.graph.input[0] = mb_vi(&m, "x", 6, 2, huge_x);
  s.a[3].i = 1 << 30;
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_RESOURCE_EXHAUSTED,
                "node 't' (TfIdfVectorizer): comparing over 1073741823 windows of 1 rows with 2000 "
                "2-grams: more than 67108864 elements");
}

static const float k_three = 3.0f, k_zero = 0.0f, k_six = 6.0f;

/* x * clip(x + 3, 0, 6) / 6 at opset 13: one cl.unary.hard_swish call (the
 * Clip, Mul and Div nodes skipped). */
static void hard_swish_model(mb_t *m) {
  mb_init(m, 13);
  mb_input(m, "x", 2, k_d24);
  mb_output(m, "y", 2, k_d24);
  mb_init_raw(m, "k3", 1, 0, NULL, &k_three, 4);
  mb_init_raw(m, "k0", 1, 0, NULL, &k_zero, 4);
  mb_init_raw(m, "k6", 1, 0, NULL, &k_six, 4);
  mb_node(m, "Add", "a", "x", "k3", "t");
  Onnx__NodeProto *clip = mb_node(m, "Clip", "c", "t", "k0", "cl");
  mb_node_input(clip, "k6");
  mb_node(m, "Mul", "m", "x", "cl", "p");
  mb_node(m, "Div", "d", "p", "k6", "y");
}

/* Every op lists the attributes it understands, per opset: anything else is
 * refused with the list, never ignored; a duplicate or nameless attribute
 * is malformed. */
static void test_unknown_attributes(void **state) {
  mb_t m;
  relu_model(&m);
  mb_attr_s(&m, &m.nodes[0], "alpha", "0.1");
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED,
                "node 'r' (Relu): attribute 'alpha' is not supported at opset 17: supported: none");
  /* consumed_inputs (a legacy hint) is known through opset 5 only */
  relu_model(&m);
  m.opset.version = 5;
  mb_attr_s(&m, &m.nodes[0], "consumed_inputs", "");
  m.attrs[0].type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
  ASSERT_OK(compile(&m, NULL, NULL, NULL));
  m.opset.version = 6;
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED,
                "node 'r' (Relu): attribute 'consumed_inputs' is not supported at opset 6: "
                "supported: none");
  /* Gemm at opset 28 (its latest version is 13: unchanged since) */
  int64_t d44[2] = {4, 4};
  float w[16] = {0};
  mb_init(&m, 28);
  mb_input(&m, "x", 2, k_d24);
  mb_output(&m, "y", 2, k_d24);
  mb_init_raw(&m, "w", 1, 2, d44, w, sizeof(w));
  Onnx__NodeProto *n = mb_node(&m, "Gemm", "g", "x", "w", "y");
  ASSERT_OK(compile(&m, NULL, NULL, NULL));
  mb_attr_s(&m, n, "transC", "1");
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED,
                "node 'g' (Gemm): attribute 'transC' is not supported at opset 28: supported: "
                "alpha, beta, transA, transB");
  /* Clip's bounds are inputs from opset 11: attributes then are refused */
  relu_model(&m);
  m.opset.version = 13;
  m.nodes[0].op_type = "Clip";
  mb_attr_s(&m, &m.nodes[0], "min", "");
  m.attrs[0].type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
  m.attrs[0].has_f = 1;
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED,
                "node 'r' (Clip): attribute 'min' is not supported at opset 13: supported: none");
  m.opset.version = 10;
  ASSERT_OK(compile(&m, NULL, NULL, NULL));
  /* Resize's attributes by opset */
  relu_model(&m);
  m.opset.version = 10;
  m.nodes[0].op_type = "Resize";
  mb_attr_s(&m, &m.nodes[0], "antialias", "");
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED,
                "node 'r' (Resize): attribute 'antialias' is not supported at opset 10: "
                "supported: mode");
  m.opset.version = 11;
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED,
                "node 'r' (Resize): attribute 'antialias' is not supported at opset 11: "
                "supported: mode, coordinate_transformation_mode, cubic_coeff_a, "
                "exclude_outside, extrapolation_value, nearest_mode");
  m.opset.version = 19;
  mb_attr_s(&m, &m.nodes[0], "keep_aspect_ratio_policy", "fit");
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED,
                "node 'r' (Resize): attribute 'keep_aspect_ratio_policy' = fit: supported: "
                "stretch, not_larger, not_smaller");
  /* antialias is defined for linear and cubic: with nearest (the default
   * mode) it is refused */
  m.opset.version = 18;
  set_int_attr(&m, 0, "antialias", 1);
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED,
                "node 'r' (Resize): attribute 'antialias' = 1 with mode nearest: supported: 0 "
                "with nearest (antialias applies to linear and cubic)");
  /* an attribute in a node fused into an earlier one is checked too */
  hard_swish_model(&m);
  vmcc_onnx_report_t rep;
  ASSERT_OK(compile(&m, NULL, &rep, NULL));
  assert_int_equal(rep.num_folded, 3);
  mb_attr_s(&m, &m.nodes[3], "scale", "1");
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED,
                "node 'd' (Div): attribute 'scale' is not supported at opset 13: supported: none");
  /* malformed: twice, or without a name */
  relu_model(&m);
  mb_attr_s(&m, &m.nodes[0], "alpha", "");
  Onnx__AttributeProto *two[2] = {&m.attrs[0], &m.attrs[0]};
  m.nodes[0].n_attribute = 2;
  m.nodes[0].attribute = two;
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_INVALID_ARGUMENT,
                "node 'r' (Relu): attribute 'alpha' is given twice");
  m.nodes[0].n_attribute = 1;
  m.attrs[0].name = "";
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_INVALID_ARGUMENT,
                "node 'r' (Relu): attribute 0 has no name");
}

/* What opsets 22-28 changed for the supported ops: Cast-24's round_mode
 * (checked, float8e8m0 only), Range-27's stash_type (float16 precision) and
 * Mod-28's fmod=0 on floats (floor semantics: the divisor's sign). */
static void test_opset_28_changes(void **state) {
  mb_t m;
  relu_model(&m);
  m.nodes[0].op_type = "Cast";
  mb_attr_s(&m, &m.nodes[0], "round_mode", "sideways");
  m.opset.version = 23;
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED,
                "node 'r' (Cast): attribute 'round_mode' is not supported at opset 23: supported: "
                "to, saturate");
  m.opset.version = 24;
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED,
                "node 'r' (Cast): attribute 'round_mode' = sideways: supported: up, down, nearest");
  /* Mod on floats with fmod=0: an error before 28, folded at 28 (the onnx 1.23
   * node cases mod_*_fmod_0 check the values) */
  static const float ka[3] = {-7, 7, 6}, kb[3] = {2, -2, -2};
  int64_t d3[1] = {3};
  mb_init(&m, 13);
  mb_output(&m, "y", 1, d3);
  mb_init_raw(&m, "a", 1, 1, d3, ka, sizeof(ka));
  mb_init_raw(&m, "b", 1, 1, d3, kb, sizeof(kb));
  mb_node(&m, "Mod", "md", "a", "b", "y");
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_INVALID_ARGUMENT,
                "node 'md' (Mod): fmod must be 1 for floating-point inputs before opset 28");
  m.opset.version = 28;
  vm_executable_t *e;
  vmcc_onnx_report_t rep;
  ASSERT_OK(compile(&m, NULL, &rep, &e));
  assert_int_equal(rep.num_folded, 1);
  vm_executable_free(e);
  /* Range: stash_type 1 or 11 for float16; another value is refused */
  static const uint16_t h0 = 0x0000, h4 = 0x4400, h1 = 0x3c00; /* 0, 4, 1 */
  int64_t d4[1] = {4};
  mb_init(&m, 27);
  mb_output(&m, "y", 1, d4);
  m.ttypes[0].elem_type = 10;
  mb_init_raw(&m, "s", 10, 0, NULL, &h0, 2);
  mb_init_raw(&m, "l", 10, 0, NULL, &h4, 2);
  mb_init_raw(&m, "d", 10, 0, NULL, &h1, 2);
  Onnx__NodeProto *rg = mb_node(&m, "Range", "rg", "s", "l", "y");
  mb_node_input(rg, "d");
  ASSERT_OK(compile(&m, NULL, NULL, NULL));
  mb_attr_s(&m, rg, "stash_type", "");
  m.attrs[0].type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
  m.attrs[0].has_i = 1;
  m.attrs[0].i = 10;
  ASSERT_STATUS(
      compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED,
      "node 'rg' (Range): attribute 'stash_type' = 10: supported: 1 (float), 11 (double)");
  m.attrs[0].i = 11;
  ASSERT_OK(compile(&m, NULL, NULL, NULL));
  m.opset.version = 26;
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED,
                "node 'rg' (Range): attribute 'stash_type' is not supported at opset 26: "
                "supported: none");
}

static void test_input_shapes(void **state) {
  mb_t m;
  int64_t dyn[2] = {-1, 4};
  mb_init(&m, 17);
  mb_input(&m, "x", 2, dyn);
  mb_output(&m, "y", 2, dyn);
  mb_node(&m, "Relu", "r", "x", NULL, "y");
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_FAILED_PRECONDITION,
                "input 'x': dim 0 ('N') is dynamic: fix it with an input shape (--input-shape "
                "x=D0,D1,...)");
  vmcc_input_shape_t s = {"x", 2, {3, 4}};
  vmcc_onnx_options_t o = {1, &s, 0, NULL, 0, 0};
  vmcc_onnx_report_t rep;
  ASSERT_OK(compile(&m, &o, &rep, NULL));
  s.dims[1] = 5;
  ASSERT_STATUS(compile(&m, &o, NULL, NULL), VM_FAILED_PRECONDITION,
                "input shape for 'x': dim 1 is 5, the graph fixes it to 4");
  s.name = "z";
  ASSERT_STATUS(compile(&m, &o, NULL, NULL), VM_FAILED_PRECONDITION,
                "input shape for 'z': the graph has no such input");
}

static void test_const_binding(void **state) {
  /* y = x + b with b bound to a constant: main takes x only */
  mb_t m;
  mb_init(&m, 17);
  mb_input(&m, "x", 2, k_d24);
  mb_input(&m, "b", 2, k_d24);
  mb_output(&m, "y", 2, k_d24);
  mb_node(&m, "Add", "a", "x", "b", "y");
  float bv[8] = {0};
  vmcc_tensor_t b = {VM_F32, 2, {2, 4}, bv, sizeof(bv)};
  vmcc_const_binding_t cb = {"b", &b};
  vmcc_onnx_options_t o = {0, NULL, 1, &cb, 0, 0};
  vm_executable_t *e;
  vmcc_onnx_report_t rep;
  ASSERT_OK(compile(&m, &o, &rep, &e));
  int64_t fi = vm_executable_find_function(e, "main", VM_FUNC_BYTECODE);
  assert_int_equal(e->functions[fi].num_args, 1);
  assert_int_equal(rep.num_consts, 1);
  assert_int_equal(rep.const_bytes, sizeof(bv));
  vm_executable_free(e);
  b.dtype = VM_I64;
  b.nbytes = 64;
  ASSERT_STATUS(compile(&m, &o, NULL, NULL), VM_FAILED_PRECONDITION,
                "constant for 'b' has dtype int64, the graph declares float32");
  b.dtype = VM_F32;
  b.nbytes = 16;
  b.shape[1] = 2;
  ASSERT_STATUS(compile(&m, &o, NULL, NULL), VM_FAILED_PRECONDITION,
                "constant for 'b' has a shape the graph does not declare");
  b.nbytes = 4;
  ASSERT_STATUS(compile(&m, &o, NULL, NULL), VM_FAILED_PRECONDITION,
                "constant for 'b': its size does not match its shape");
}

static void test_hostile_initializers(void **state) {
  mb_t m;
  float w[4] = {1, 2, 3, 4};
  int64_t d4[1] = {4};
  mb_init(&m, 17);
  mb_input(&m, "x", 1, d4);
  mb_output(&m, "y", 1, d4);
  mb_node(&m, "Add", "a", "x", "w", "y");
  Onnx__TensorProto *t = mb_init_raw(&m, "w", 1, 1, d4, w, 3);
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_INVALID_ARGUMENT,
                "initializer 'w': raw_data has 3 bytes, expected 16");
  t->raw_data.len = 16;
  t->dims[0] = -1;
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_INVALID_ARGUMENT, "initializer 'w': dim 0 is -1");
  t->dims[0] = 4;
  t->data_type = 8;
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED,
                "initializer 'w': data type 8 (string) is not supported");
  t->data_type = 1;
  t->dims[0] = (int64_t)1 << 31;
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_INVALID_ARGUMENT, "dim 0 is 2147483648");
  t->dims[0] = 4;
  t->n_dims = 9;
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED, "9 dims, at most 8");
  t->n_dims = 1;
  /* typed fields: the count must match */
  t->has_raw_data = 0;
  t->n_float_data = 2;
  t->float_data = w;
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_INVALID_ARGUMENT,
                "initializer 'w': 2 values for 4 elements");
  t->n_float_data = 4;
  ASSERT_OK(compile(&m, NULL, NULL, NULL));
}

static void test_external_data(void **state) {
  char dir[] = "/tmp/vmrpc-onnx-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char sub[64], data[96], model[96], link[96];
  snprintf(sub, sizeof(sub), "%s/m", dir);
  assert_int_equal(mkdir(sub, 0700), 0);
  snprintf(data, sizeof(data), "%s/w.bin", sub);
  float w[4] = {1, 2, 3, 4};
  FILE *f = fopen(data, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(w, 1, sizeof(w), f), sizeof(w));
  fclose(f);
  /* a secret outside the model's folder, and a link to it inside */
  char secret[96];
  snprintf(secret, sizeof(secret), "%s/secret.bin", dir);
  f = fopen(secret, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(w, 1, sizeof(w), f), sizeof(w));
  fclose(f);
  snprintf(link, sizeof(link), "%s/link.bin", sub);
  assert_int_equal(symlink(secret, link), 0);

  mb_t m;
  int64_t d4[1] = {4};
  mb_init(&m, 17);
  mb_input(&m, "x", 1, d4);
  mb_output(&m, "y", 1, d4);
  mb_node(&m, "Add", "a", "x", "w", "y");
  Onnx__TensorProto *t = mb_init_raw(&m, "w", 1, 1, d4, NULL, 0);
  t->has_raw_data = 0;
  t->has_data_location = 1;
  t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  Onnx__StringStringEntryProto loc, *ents[1] = {&loc};
  onnx__string_string_entry_proto__init(&loc);
  loc.key = "location";
  t->n_external_data = 1;
  t->external_data = ents;
  snprintf(model, sizeof(model), "%s/model.onnx", sub);
  const char *cases[][2] = {
      {"w.bin", NULL},
      {"../secret.bin", "must be a relative path inside the model's folder"},
      {"/etc/passwd", "must be a relative path inside the model's folder"},
      {"link.bin", "resolves outside the model's folder"},
      {"missing.bin", "external data file 'missing.bin'"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    loc.value = (char *)cases[i][0];
    size_t n;
    uint8_t *buf = mb_pack(&m, &n);
    f = fopen(model, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, n, f), n);
    fclose(f);
    vm_executable_t *e = NULL;
    vmcc_onnx_report_t rep;
    vm_status_t st = vmcc_onnx_compile_file(model, NULL, &e, &rep);
    if (!cases[i][1]) {
      ASSERT_OK(st);
      assert_int_equal(rep.const_bytes, sizeof(w));
      vm_executable_free(e);
      e = NULL;
      /* from bytes, without the folder, it is refused */
      ASSERT_STATUS(vmcc_onnx_compile(buf, n, NULL, NULL, &e, NULL), VM_INVALID_ARGUMENT,
                    "needs the model's folder");
    } else {
      vm_code_t want = strstr(cases[i][0], "missing") ? VM_NOT_FOUND : VM_INVALID_ARGUMENT;
      ASSERT_STATUS(st, want, cases[i][1]);
    }
    vm_executable_free(e);
    free(buf);
  }
  unlink(model);
  unlink(link);
  unlink(data);
  unlink(secret);
  rmdir(sub);
  rmdir(dir);
}

static void test_graph_errors(void **state) {
  mb_t m;
  /* not in topological order */
  mb_init(&m, 17);
  mb_input(&m, "x", 2, k_d24);
  mb_output(&m, "y", 2, k_d24);
  mb_node(&m, "Relu", "r2", "t", NULL, "y");
  mb_node(&m, "Relu", "r1", "x", NULL, "t");
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_INVALID_ARGUMENT,
                "node 'r2' (Relu): input 't' is computed by node 'r1' (Relu), later in the "
                "graph: nodes must be in topological order");
  /* a value defined twice */
  mb_init(&m, 17);
  mb_input(&m, "x", 2, k_d24);
  mb_output(&m, "y", 2, k_d24);
  mb_node(&m, "Relu", "r1", "x", NULL, "y");
  mb_node(&m, "Relu", "r2", "x", NULL, "y");
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_INVALID_ARGUMENT,
                "node 'r2' (Relu): value 'y' is defined twice");
  /* an output never computed; an output declared with another shape */
  relu_model(&m);
  m.vis[1].name = "z";
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_INVALID_ARGUMENT,
                "graph output 'z' is never computed");
  /* another declared shape compiles with a warning (onnxruntime ignores
   * the declaration); another declared dtype is refused */
  relu_model(&m);
  m.dims[1][1].dim_value = 5;
  vmcc_onnx_report_t rep;
  ASSERT_OK(compile(&m, NULL, &rep, NULL));
  assert_int_equal(rep.num_warnings, 1);
  assert_string_equal(rep.warning,
                      "graph output 'y': the model declares shape [2,5], the graph computes "
                      "[2,4]: the computed shape is used, as onnxruntime does");
  relu_model(&m);
  m.ttypes[1].elem_type = 7;
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_INVALID_ARGUMENT,
                "graph output 'y': the model declares another type than the inferred "
                "float32[2,4]");
  /* a shape operand computed at run time */
  mb_init(&m, 17);
  mb_input(&m, "x", 2, k_d24);
  int64_t d2[1] = {2};
  mb_input(&m, "s", 1, d2);
  m.ttypes[1].elem_type = 7;
  mb_output(&m, "y", 2, k_d24);
  mb_node(&m, "Reshape", "re", "x", "s", "y");
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED,
                "node 're' (Reshape): input 's' (shape) must be a constant");
  /* a gather index out of range in constants */
  mb_init(&m, 17);
  int64_t d3[1] = {3}, d1[1] = {1};
  mb_input(&m, "x", 1, d3);
  mb_output(&m, "y", 1, d1);
  int64_t idx = 5;
  mb_init_raw(&m, "i", 7, 1, d1, &idx, 8);
  mb_node(&m, "Gather", "g", "x", "i", "y");
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_INVALID_ARGUMENT,
                "node 'g' (Gather): index 5 is out of range for dim 3");
  /* a run-time integer input of an arithmetic op */
  mb_init(&m, 17);
  mb_input(&m, "x", 2, k_d24);
  m.ttypes[0].elem_type = 7;
  mb_output(&m, "y", 2, k_d24);
  m.ttypes[1].elem_type = 7;
  mb_node(&m, "Relu", "r", "x", NULL, "y");
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED,
                "node 'r' (Relu): input 'x' has dtype int64: supported: float, float16");
}

static const float k_ones4[4] = {1, 1, 1, 1}, k_zeros4[4] = {0};
static const int64_t k_d4[1] = {4};

/* x[2,4] -> BatchNormalization (constant parameters) -> y at opset, after a
 * 1x1 Conv when conv (x[1,4,1,2]: the BN could fold into it). */
static Onnx__NodeProto *bn_model(mb_t *m, int64_t opset, int conv) {
  static const int64_t dx[4] = {1, 4, 1, 2}, dw[4] = {4, 4, 1, 1};
  static float w[16];
  mb_init(m, opset);
  mb_input(m, "x", conv ? 4 : 2, conv ? dx : k_d24);
  mb_output(m, "y", conv ? 4 : 2, conv ? dx : k_d24);
  mb_init_raw(m, "s", 1, 1, k_d4, k_ones4, sizeof(k_ones4));
  mb_init_raw(m, "b", 1, 1, k_d4, k_zeros4, sizeof(k_zeros4));
  mb_init_raw(m, "mean", 1, 1, k_d4, k_zeros4, sizeof(k_zeros4));
  mb_init_raw(m, "var", 1, 1, k_d4, k_ones4, sizeof(k_ones4));
  if (conv) {
    mb_init_raw(m, "w", 1, 4, dw, w, sizeof(w));
    mb_node(m, "Conv", "c", "x", "w", "t");
  }
  Onnx__NodeProto *n = mb_node(m, "BatchNormalization", "bn", conv ? "t" : "x", "s", "y");
  mb_node_input(n, "b");
  mb_node_input(n, "mean");
  mb_node_input(n, "var");
  return n;
}

/* Before opset 7, BatchNormalization and Dropout train unless is_test is
 * nonzero (0 is the default): training is refused, also for a BN that
 * would fold into a Conv; a BN of opsets 7-13 with training outputs is not
 * folded either. Dropout's mask has X's type before opset 10. */
static void test_legacy_training_modes(void **state) {
  const char *refused =
      "attribute 'is_test' = 0 (training mode): supported: nonzero (inference; "
      "absent means 0)";
  char want[256];
  mb_t m;
  for (int conv = 0; conv < 2; conv++) {
    uint32_t k = (uint32_t)conv; /* the BN node */
    snprintf(want, sizeof(want), "node 'bn' (BatchNormalization): %s", refused);
    bn_model(&m, 6, conv);
    ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED, want);
    set_int_attr(&m, k, "is_test", 0);
    ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED, want);
    set_int_attr(&m, k, "is_test", 1);
    vmcc_onnx_report_t rep;
    ASSERT_OK(compile(&m, NULL, &rep, NULL));
    assert_int_equal(rep.num_folded, conv ? 1 : 0);
    /* at opset 9, a second output (the running mean) means training */
    bn_model(&m, 9, conv);
    m.nodes[k].output[m.nodes[k].n_output++] = "rm";
    ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED,
                  "node 'bn' (BatchNormalization): training outputs: supported: Y only");
  }
  /* Dropout */
  relu_model(&m);
  m.opset.version = 6;
  m.nodes[0].op_type = "Dropout";
  m.nodes[0].name = "d";
  snprintf(want, sizeof(want), "node 'd' (Dropout): %s", refused);
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED, want);
  set_int_attr(&m, 0, "is_test", 0);
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED, want);
  set_int_attr(&m, 0, "is_test", 1);
  ASSERT_OK(compile(&m, NULL, NULL, NULL));
  /* the mask as a graph output declared float32: its type through opset 9 */
  for (int64_t opset = 7; opset <= 10; opset += 3) {
    relu_model(&m);
    m.opset.version = opset;
    m.nodes[0].op_type = "Dropout";
    m.nodes[0].output[m.nodes[0].n_output++] = "mask";
    mb_output(&m, "mask", 2, k_d24);
    if (opset < 10) {
      ASSERT_OK(compile(&m, NULL, NULL, NULL));
    } else {
      ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_INVALID_ARGUMENT,
                    "graph output 'mask': the model declares another type than the inferred "
                    "bool[2,4]");
    }
  }
}

/* Before opset 7 the arithmetic operators broadcast only with
 * broadcast=1, and only B to A's shape (Gemm: C to [M, N]): another shape
 * is malformed rather than broadcast the NumPy way. */
static void test_legacy_broadcast(void **state) {
  static const float c8[8] = {0};
  static const int64_t d24x[3] = {1, 2, 4};
  mb_t m;
  for (int wide = 0; wide < 2; wide++) {
    mb_init(&m, 6);
    mb_input(&m, "x", 2, k_d24);
    mb_output(&m, "y", wide ? 3 : 2, wide ? d24x : k_d24);
    if (wide)
      mb_init_raw(&m, "c", 1, 3, d24x, c8, sizeof(c8));
    else
      mb_init_raw(&m, "c", 1, 1, k_d4, k_zeros4, sizeof(k_zeros4));
    mb_node(&m, "Add", "a", "x", "c", "y");
    ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_INVALID_ARGUMENT,
                  "node 'a' (Add): B must have A's shape (broadcast = 0) before opset 7");
    set_int_attr(&m, 0, "broadcast", 1);
    if (wide)
      ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_INVALID_ARGUMENT,
                    "node 'a' (Add): B must have A's shape, a suffix of it or one element "
                    "before opset 7");
    else
      ASSERT_OK(compile(&m, NULL, NULL, NULL));
  }
  /* Gemm's C likewise */
  static const float w16[16] = {0};
  static const int64_t d44[2] = {4, 4};
  mb_init(&m, 6);
  mb_input(&m, "x", 2, k_d24);
  mb_output(&m, "y", 2, k_d24);
  mb_init_raw(&m, "w", 1, 2, d44, w16, sizeof(w16));
  mb_init_raw(&m, "c", 1, 1, k_d4, k_zeros4, sizeof(k_zeros4));
  mb_node_input(mb_node(&m, "Gemm", "g", "x", "w", "y"), "c");
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_INVALID_ARGUMENT,
                "node 'g' (Gemm): C must be [2, 4] (broadcast = 0) before opset 7");
  set_int_attr(&m, 0, "broadcast", 1);
  ASSERT_OK(compile(&m, NULL, NULL, NULL));
}

/* m packed into the file at path. */
static void write_model(mb_t *m, const char *path) {
  size_t n;
  uint8_t *buf = mb_pack(m, &n);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(buf, 1, n, f), n);
  fclose(f);
  free(buf);
}

/* Graph inputs, outputs and value_info entries of a type other than a
 * tensor (their data is no TensorProto), and sparse initializers, are
 * refused naming the value, by the compiler and in vmcc_onnx_read_io's
 * unsupported (so that a caller reads no data for them). */
static void test_non_tensor_types(void **state) {
  Onnx__TypeProto__Sequence seq;
  Onnx__TypeProto__Map map;
  Onnx__TypeProto__Optional opt;
  Onnx__TypeProto__SparseTensor sparse;
  onnx__type_proto__sequence__init(&seq);
  onnx__type_proto__map__init(&map);
  onnx__type_proto__optional__init(&opt);
  onnx__type_proto__sparse_tensor__init(&sparse);
  /* [which vi: 0 input x, 1 output y, 2 value_info t] */
  const struct {
    int vi;
    Onnx__TypeProto__ValueCase kind;
    const char *want;
  } cases[] = {
      {0, ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE,
       "input 'x' has an optional type: supported: tensor types only"},
      {0, ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE,
       "input 'x' has a sequence type: supported: tensor types only"},
      {0, ONNX__TYPE_PROTO__VALUE_SPARSE_TENSOR_TYPE,
       "input 'x' has a sparse tensor type: supported: tensor types only"},
      {0, ONNX__TYPE_PROTO__VALUE__NOT_SET,
       "input 'x' has a type of another kind: supported: tensor types only"},
      {1, ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE,
       "output 'y' has a sequence type: supported: tensor types only"},
      {1, ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE,
       "output 'y' has an optional type: supported: tensor types only"},
      {2, ONNX__TYPE_PROTO__VALUE_MAP_TYPE,
       "value 't' has a map type: supported: tensor types only"},
  };
  char dir[] = "/tmp/vmrpc-onnx-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[96];
  snprintf(path, sizeof(path), "%s/model.onnx", dir);
  mb_t m;
  Onnx__ValueInfoProto *vinfo[1];
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    mb_init(&m, 17);
    mb_input(&m, "x", 2, k_d24);
    mb_output(&m, "y", 2, k_d24);
    mb_node(&m, "Relu", "r1", "x", NULL, "t");
    mb_node(&m, "Relu", "r2", "t", NULL, "y");
    vinfo[0] = mb_vi(&m, "t", 1, 2, k_d24);
    m.graph.n_value_info = 1;
    m.graph.value_info = vinfo;
    ASSERT_OK(compile(&m, NULL, NULL, NULL));
    Onnx__TypeProto *tp = &m.types[cases[i].vi];
    tp->value_case = cases[i].kind;
    switch (cases[i].kind) {
      case ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE: tp->sequence_type = &seq; break;
      case ONNX__TYPE_PROTO__VALUE_MAP_TYPE: tp->map_type = &map; break;
      case ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE: tp->optional_type = &opt; break;
      case ONNX__TYPE_PROTO__VALUE_SPARSE_TENSOR_TYPE: tp->sparse_tensor_type = &sparse; break;
      default: tp->tensor_type = NULL; break;
    }
    ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED, cases[i].want);
    /* read_io lists the names and says why it would not compile */
    write_model(&m, path);
    vmcc_onnx_io_t io;
    ASSERT_OK(vmcc_onnx_read_io(path, &io));
    assert_int_equal(io.num_inputs, 1);
    assert_string_equal(io.inputs[0], "x");
    assert_int_equal(io.num_nodes, 2);
    ASSERT_STATUS(io.unsupported, VM_UNIMPLEMENTED, cases[i].want);
    io.unsupported = NULL;
    vmcc_onnx_io_free(&io);
  }
  /* a tensor model: nothing unsupported */
  relu_model(&m);
  write_model(&m, path);
  vmcc_onnx_io_t io;
  ASSERT_OK(vmcc_onnx_read_io(path, &io));
  assert_null(io.unsupported);
  vmcc_onnx_io_free(&io);
  unlink(path);
  rmdir(dir);
  /* a sparse initializer */
  Onnx__SparseTensorProto sp, *sps[1] = {&sp};
  Onnx__TensorProto vals;
  onnx__sparse_tensor_proto__init(&sp);
  onnx__tensor_proto__init(&vals);
  vals.name = "w";
  sp.values = &vals;
  relu_model(&m);
  m.graph.n_sparse_initializer = 1;
  m.graph.sparse_initializer = sps;
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED,
                "initializer 'w' is a sparse tensor: supported: dense tensors only");
}

/* Every input the ONNX fuzzer (tests/fuzz/fuzz_onnx.c) ever crashed on
 * (tests/fuzz/regressions/fuzz_onnx/) compiles to a status or an
 * executable; the sanitizer build catches a memory error. */
static void test_fuzz_regressions(void **state) {
  const char *src = getenv("VMRPC_SOURCE_DIR");
  assert_non_null(src);
  char dir[1024];
  snprintf(dir, sizeof(dir), "%s/tests/fuzz/regressions/fuzz_onnx", src);
  DIR *d = opendir(dir);
  assert_non_null(d);
  int n = 0;
  for (struct dirent *de; (de = readdir(d)) != NULL;) {
    if (de->d_name[0] == '.') continue;
    char path[1300];
    snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
    uint8_t *data = NULL;
    size_t len = 0;
    ASSERT_OK(vm_read_file(path, 16u << 20, &data, &len));
    vm_executable_t *e = NULL;
    vm_status_free(vmcc_onnx_compile(data, len, NULL, NULL, &e, NULL));
    vm_executable_free(e);
    free(data);
    n++;
  }
  closedir(d);
  print_message("%d fuzz regression inputs replayed\n", n);
  assert_true(n > 0);
}

/* The committed fuzz_onnx seeds beyond Debian's node models
 * (tests/fuzz/gen_onnx_seeds.py) compile: the fuzzer starts from inside
 * the lowerings they were written for, not from a refusal. */
static void test_fuzz_seeds_compile(void **state) {
  const char *src = getenv("VMRPC_SOURCE_DIR");
  assert_non_null(src);
  char dir[1024];
  snprintf(dir, sizeof(dir), "%s/tests/fuzz/corpus/fuzz_onnx", src);
  DIR *d = opendir(dir);
  assert_non_null(d);
  int n = 0;
  for (struct dirent *de; (de = readdir(d)) != NULL;) {
    if (de->d_name[0] == '.') continue;
    char path[1300];
    snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
    vm_executable_t *e = NULL;
    vm_status_t st = vmcc_onnx_compile_file(path, NULL, &e, NULL);
    if (st) fail_msg("%s: %s", de->d_name, vm_status_message(st));
    vm_executable_free(e);
    n++;
  }
  closedir(d);
  print_message("%d fuzz seeds compiled\n", n);
  assert_true(n >= 5);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_relu_compiles),
      cmocka_unit_test(test_shape_arithmetic_folds),
      cmocka_unit_test(test_pow_two_is_mul),
      cmocka_unit_test(test_not_a_model),
      cmocka_unit_test(test_quant_params),
      cmocka_unit_test(test_opset_range),
      cmocka_unit_test(test_unsupported_op_and_attribute),
      cmocka_unit_test(test_composite_refusals),
      cmocka_unit_test(test_sequence_op_refusals),
      cmocka_unit_test(test_unknown_attributes),
      cmocka_unit_test(test_opset_28_changes),
      cmocka_unit_test(test_input_shapes),
      cmocka_unit_test(test_const_binding),
      cmocka_unit_test(test_hostile_initializers),
      cmocka_unit_test(test_external_data),
      cmocka_unit_test(test_graph_errors),
      cmocka_unit_test(test_legacy_training_modes),
      cmocka_unit_test(test_legacy_broadcast),
      cmocka_unit_test(test_non_tensor_types),
      cmocka_unit_test(test_fuzz_regressions),
      cmocka_unit_test(test_fuzz_seeds_compile),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
