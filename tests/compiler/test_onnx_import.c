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

#include <cmocka.h>

#include "onnx.pb-c.h"
#include "test_util.h"
#include "vm/executable.h"
#include "vmcompiler/onnx.h"

/* ---- a tiny model builder over the generated structs ---- */

#define MAXN 16

typedef struct mb {
  Onnx__ModelProto model;
  Onnx__GraphProto graph;
  Onnx__OperatorSetIdProto opset;
  Onnx__OperatorSetIdProto *opsets[1];
  Onnx__NodeProto nodes[MAXN];
  Onnx__NodeProto *node_ptrs[MAXN];
  char *node_in[MAXN][4];
  char *node_out[MAXN][2];
  Onnx__AttributeProto attrs[MAXN];
  Onnx__AttributeProto *attr_ptrs[MAXN][1];
  Onnx__ValueInfoProto vis[MAXN];
  Onnx__ValueInfoProto *in_ptrs[MAXN], *out_ptrs[MAXN];
  Onnx__TypeProto types[MAXN];
  Onnx__TypeProto__Tensor ttypes[MAXN];
  Onnx__TensorShapeProto shapes[MAXN];
  Onnx__TensorShapeProto__Dimension dims[MAXN][4];
  Onnx__TensorShapeProto__Dimension *dim_ptrs[MAXN][4];
  Onnx__TensorProto inits[MAXN];
  Onnx__TensorProto *init_ptrs[MAXN];
  int64_t init_dims[MAXN][4];
  uint32_t nv;
} mb_t;

static void mb_init(mb_t *m, int64_t opset) {
  memset(m, 0, sizeof(*m));
  onnx__model_proto__init(&m->model);
  onnx__graph_proto__init(&m->graph);
  onnx__operator_set_id_proto__init(&m->opset);
  m->opset.domain = "";
  m->opset.has_version = 1;
  m->opset.version = opset;
  m->opsets[0] = &m->opset;
  m->model.n_opset_import = 1;
  m->model.opset_import = m->opsets;
  m->model.has_ir_version = 1;
  m->model.ir_version = 8;
  m->model.graph = &m->graph;
  m->graph.node = m->node_ptrs;
  m->graph.input = m->in_ptrs;
  m->graph.output = m->out_ptrs;
  m->graph.initializer = m->init_ptrs;
}

/* A float tensor value info; dims < 0 are dynamic ("N"). */
static Onnx__ValueInfoProto *mb_vi(mb_t *m, const char *name, int32_t elem, uint32_t ndim,
                                   const int64_t *dims) {
  uint32_t k = m->nv++;
  Onnx__ValueInfoProto *v = &m->vis[k];
  onnx__value_info_proto__init(v);
  onnx__type_proto__init(&m->types[k]);
  onnx__type_proto__tensor__init(&m->ttypes[k]);
  onnx__tensor_shape_proto__init(&m->shapes[k]);
  v->name = (char *)name;
  v->type = &m->types[k];
  m->types[k].value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  m->types[k].tensor_type = &m->ttypes[k];
  m->ttypes[k].has_elem_type = 1;
  m->ttypes[k].elem_type = elem;
  m->ttypes[k].shape = &m->shapes[k];
  m->shapes[k].n_dim = ndim;
  m->shapes[k].dim = m->dim_ptrs[k];
  for (uint32_t i = 0; i < ndim; i++) {
    Onnx__TensorShapeProto__Dimension *d = &m->dims[k][i];
    onnx__tensor_shape_proto__dimension__init(d);
    if (dims[i] >= 0) {
      d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      d->dim_value = dims[i];
    } else {
      d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      d->dim_param = "N";
    }
    m->dim_ptrs[k][i] = d;
  }
  return v;
}

static void mb_input(mb_t *m, const char *name, uint32_t ndim, const int64_t *dims) {
  m->graph.input[m->graph.n_input++] = mb_vi(m, name, 1, ndim, dims);
}

static void mb_output(mb_t *m, const char *name, uint32_t ndim, const int64_t *dims) {
  m->graph.output[m->graph.n_output++] = mb_vi(m, name, 1, ndim, dims);
}

/* A node of up to 4 inputs ("" = absent) and one output. */
static Onnx__NodeProto *mb_node(mb_t *m, const char *op, const char *name, const char *in0,
                                const char *in1, const char *out) {
  uint32_t k = (uint32_t)m->graph.n_node++;
  Onnx__NodeProto *n = &m->nodes[k];
  onnx__node_proto__init(n);
  n->op_type = (char *)op;
  n->name = (char *)name;
  n->input = m->node_in[k];
  n->output = m->node_out[k];
  if (in0) n->input[n->n_input++] = (char *)in0;
  if (in1) n->input[n->n_input++] = (char *)in1;
  n->output[n->n_output++] = (char *)out;
  m->node_ptrs[k] = n;
  return n;
}

static void mb_attr_s(mb_t *m, Onnx__NodeProto *n, const char *name, const char *s) {
  uint32_t k = (uint32_t)(n - m->nodes);
  Onnx__AttributeProto *a = &m->attrs[k];
  onnx__attribute_proto__init(a);
  a->name = (char *)name;
  a->has_type = 1;
  a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
  a->has_s = 1;
  a->s.data = (uint8_t *)s;
  a->s.len = strlen(s);
  m->attr_ptrs[k][0] = a;
  n->n_attribute = 1;
  n->attribute = m->attr_ptrs[k];
}

/* An initializer with raw data (nbytes given, so tests can lie). */
static Onnx__TensorProto *mb_init_raw(mb_t *m, const char *name, int32_t elem, uint32_t ndim,
                                      const int64_t *dims, const void *data, size_t nbytes) {
  uint32_t k = (uint32_t)m->graph.n_initializer++;
  Onnx__TensorProto *t = &m->inits[k];
  onnx__tensor_proto__init(t);
  t->name = (char *)name;
  t->has_data_type = 1;
  t->data_type = elem;
  t->n_dims = ndim;
  t->dims = m->init_dims[k];
  for (uint32_t i = 0; i < ndim; i++) t->dims[i] = dims[i];
  t->has_raw_data = 1;
  t->raw_data.data = (uint8_t *)data;
  t->raw_data.len = nbytes;
  m->init_ptrs[k] = t;
  return t;
}

static uint8_t *mb_pack(mb_t *m, size_t *n) {
  *n = onnx__model_proto__get_packed_size(&m->model);
  uint8_t *buf = malloc(*n ? *n : 1);
  assert_non_null(buf);
  onnx__model_proto__pack(&m->model, buf);
  return buf;
}

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
  m.opset.version = 22;
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED,
                "opset 22: supported: opsets 1 to 21");
  relu_model(&m);
  m.opset.domain = "com.example";
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_INVALID_ARGUMENT,
                "imports no opset of the default ONNX domain");
}

static void test_unsupported_op_and_attribute(void **state) {
  mb_t m;
  relu_model(&m);
  m.nodes[0].op_type = "Einsum";
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED,
                "node 'r' (Einsum): operator Einsum is not supported: supported: Abs, Add,");
  mb_init(&m, 20);
  mb_input(&m, "x", 2, k_d24);
  mb_output(&m, "y", 2, k_d24);
  Onnx__NodeProto *n = mb_node(&m, "Gelu", "g", "x", NULL, "y");
  mb_attr_s(&m, n, "approximate", "fast");
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED,
                "node 'g' (Gelu): attribute 'approximate' = fast: supported: none, tanh");
  relu_model(&m);
  m.nodes[0].domain = "com.microsoft";
  ASSERT_STATUS(compile(&m, NULL, NULL, NULL), VM_UNIMPLEMENTED,
                "node 'r' (Relu): domain 'com.microsoft': supported: the default domain");
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
  vmcc_onnx_options_t o = {1, &s, 0, NULL, 0};
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
  vmcc_onnx_options_t o = {0, NULL, 1, &cb, 0};
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
                "node 'r2' (Relu): input 't' is not defined before the node");
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
  relu_model(&m);
  m.dims[1][1].dim_value = 5;
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_relu_compiles),
      cmocka_unit_test(test_shape_arithmetic_folds),
      cmocka_unit_test(test_not_a_model),
      cmocka_unit_test(test_opset_range),
      cmocka_unit_test(test_unsupported_op_and_attribute),
      cmocka_unit_test(test_input_shapes),
      cmocka_unit_test(test_const_binding),
      cmocka_unit_test(test_hostile_initializers),
      cmocka_unit_test(test_external_data),
      cmocka_unit_test(test_graph_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
