/* Models whose structure is hostile: nested 200,000 If levels deep (the
 * protobuf runtime recurses), a shape of rank 1,000, a node of 100,000
 * inputs, a graph with a cycle or a missing input, opsets 0 and 2^62,
 * external data outside the model's folder, at a huge offset or in a FIFO.
 * Each is fed to the real `vmclient compile` (exit 3, one line naming the
 * problem, never a signal or a hang) and to the library (INVALID_ARGUMENT
 * with the same message). And a chain of 200,000 Relu nodes compiles in
 * well under a minute (compile time grows linearly with the graph). The
 * models are written as protobuf bytes here. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "onnx_bytes.h"
#include "run_proc.h"
#include "test_util.h"
#include "vm/executable.h"
#include "vmcompiler/onnx.h"

enum { EXIT_INPUT = 3 };

static char g_vmclient[4096];
static char g_dir[4096]; /* scratch directory, removed at the end */

static const int64_t k_d24[2] = {2, 4};

/* The model of graph g with its input x and output y, float [2, 4], at
 * opset 17; frees g. */
static pb_t xy_model(pb_t *g) {
  onnx_add_value_info(g, 11, "x", 2, k_d24);
  onnx_add_value_info(g, 12, "y", 2, k_d24);
  return onnx_model_of(g, 17);
}

/* y = Relu(x), x and y float [2, 4], with the graph's inputs and outputs. */
static pb_t relu_graph(void) {
  pb_t g = {0};
  const char *in[1] = {"x"};
  onnx_add_node(&g, "Relu", "r", in, 1, "y");
  pb_str(&g, 2, "g");
  onnx_add_value_info(&g, 11, "x", 2, k_d24);
  onnx_add_value_info(&g, 12, "y", 2, k_d24);
  return g;
}

/* A model whose graph holds an If node whose then_branch holds an If
 * node ... `levels` deep (three messages per level: graph, node,
 * attribute). Written outside in, from the lengths computed inside out. */
static pb_t nested_if_model(uint32_t levels) {
  size_t *glen = calloc(levels + 1, sizeof(size_t)); /* graph content at each level */
  size_t *nlen = calloc(levels + 1, sizeof(size_t));
  size_t *alen = calloc(levels + 1, sizeof(size_t));
  assert_true(glen && nlen && alen);
  static const char attr_name[] = "then_branch";
  const size_t name_field = 2 + sizeof(attr_name) - 1, type_field = 3, op_field = 4;
  for (uint32_t k = 1; k <= levels; k++) {
    alen[k] = name_field + type_field + 1 + pb_varint_len(glen[k - 1]) + glen[k - 1];
    nlen[k] = op_field + 1 + pb_varint_len(alen[k]) + alen[k];
    glen[k] = 1 + pb_varint_len(nlen[k]) + nlen[k];
  }
  pb_t m = {0};
  pb_int(&m, 1, 7);
  pb_varint(&m, 7 << 3 | 2); /* graph */
  pb_varint(&m, glen[levels]);
  for (uint32_t k = levels; k >= 1; k--) {
    pb_varint(&m, 1 << 3 | 2); /* GraphProto.node */
    pb_varint(&m, nlen[k]);
    pb_str(&m, 4, "If"); /* NodeProto.op_type */
    pb_varint(&m, 5 << 3 | 2); /* NodeProto.attribute */
    pb_varint(&m, alen[k]);
    pb_str(&m, 1, attr_name);
    pb_int(&m, 20, 5);         /* type GRAPH */
    pb_varint(&m, 6 << 3 | 2); /* AttributeProto.g */
    pb_varint(&m, glen[k - 1]);
  }
  pb_t os = {0};
  pb_int(&os, 2, 17);
  pb_msg(&m, 8, &os);
  free(glen);
  free(nlen);
  free(alen);
  return m;
}

/* A Relu model whose input x is declared with a type nested `levels`
 * sequences deep (TypeProto.sequence_type.elem_type ...), written like
 * nested_if_model. */
static pb_t nested_type_model(uint32_t levels) {
  size_t *tlen = calloc(levels + 1, sizeof(size_t)); /* TypeProto content at each level */
  size_t *slen = calloc(levels + 1, sizeof(size_t)); /* Sequence content */
  assert_true(tlen && slen);
  static const uint8_t tensor_type[4] = {1 << 3 | 2, 2, 1 << 3, 1}; /* tensor_type{float} */
  tlen[0] = sizeof(tensor_type);
  for (uint32_t k = 1; k <= levels; k++) {
    slen[k] = 1 + pb_varint_len(tlen[k - 1]) + tlen[k - 1];
    tlen[k] = 1 + pb_varint_len(slen[k]) + slen[k];
  }
  pb_t g = {0};
  const char *in[1] = {"x"};
  onnx_add_node(&g, "Relu", "r", in, 1, "y");
  pb_varint(&g, 11 << 3 | 2); /* GraphProto.input */
  pb_varint(&g, 3 + 1 + pb_varint_len(tlen[levels]) + tlen[levels]);
  pb_str(&g, 1, "x");
  pb_varint(&g, 2 << 3 | 2); /* ValueInfoProto.type */
  pb_varint(&g, tlen[levels]);
  for (uint32_t k = levels; k >= 1; k--) {
    pb_varint(&g, 4 << 3 | 2); /* TypeProto.sequence_type */
    pb_varint(&g, slen[k]);
    pb_varint(&g, 1 << 3 | 2); /* Sequence.elem_type */
    pb_varint(&g, tlen[k - 1]);
  }
  pb_raw(&g, tensor_type, sizeof(tensor_type));
  onnx_add_value_info(&g, 12, "y", 2, k_d24);
  free(tlen);
  free(slen);
  return onnx_model_of(&g, 17);
}

/* ---------------------------------------------------------------------------
 * Checks
 */

static void write_file(const char *path, const void *d, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  if (n) assert_int_equal(fwrite(d, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}

/* `vmclient compile PATH` exits 3 with one line on stderr naming want. */
static void expect_cli_refuses(const char *path, const char *want) {
  char out[4200];
  snprintf(out, sizeof(out), "%s/out.vmx", g_dir);
  const char *args[] = {"compile", "-q", "-o", out, path, NULL};
  run_result_t r;
  run_proc(g_vmclient, args, g_dir, NULL, 0, NULL, 120, &r);
  if (!WIFEXITED(r.status)) fail_msg("vmclient compile %s: killed by signal %d", path,
                                     WTERMSIG(r.status));
  if (WEXITSTATUS(r.status) != EXIT_INPUT || !strstr(r.err, want) ||
      strncmp(r.err, "vmclient: ", 10) != 0 || memchr(r.err, '\n', r.err_n) != r.err + r.err_n - 1)
    fail_msg("vmclient compile %s: exit %d, stderr [%s]; expected exit 3 and one line with [%s]",
             path, WEXITSTATUS(r.status), r.err, want);
  run_result_free(&r);
}

/* Writes the model as NAME in the scratch folder; the CLI and the library
 * (from the file, and from the bytes unless from_file_only) refuse it
 * with INVALID_ARGUMENT naming want. Frees m. */
static void expect_refused(const char *name, pb_t *m, const char *want, int from_file_only) {
  char path[4200];
  snprintf(path, sizeof(path), "%s/%s", g_dir, name);
  write_file(path, m->d, m->n);
  expect_cli_refuses(path, want);
  vm_executable_t *e = NULL;
  ASSERT_STATUS(vmcc_onnx_compile_file(path, NULL, &e, NULL), VM_INVALID_ARGUMENT, want);
  if (!from_file_only)
    ASSERT_STATUS(vmcc_onnx_compile(m->d, m->n, NULL, NULL, &e, NULL), VM_INVALID_ARGUMENT, want);
  assert_null(e);
  unlink(path);
  free(m->d);
  memset(m, 0, sizeof(*m));
}

/* ---------------------------------------------------------------------------
 * Tests
 */

static void test_deep_nesting(void **state) {
  (void)state;
  /* 200,000 If levels: 600,000 nested messages */
  pb_t m = nested_if_model(200000);
  expect_refused("deep_if.onnx", &m,
                 "onnx: messages nest more than 100 levels deep (in attribute 'then_branch'): at "
                 "most 100 are accepted",
                 0);
  /* types nest too */
  m = nested_type_model(200000);
  expect_refused("deep_type.onnx", &m, "onnx: messages nest more than 100 levels deep (in a", 0);
  /* 30 If levels (90 messages) are within the bound: what refuses them is
   * the operator, after parsing */
  m = nested_if_model(30);
  vm_executable_t *e = NULL;
  ASSERT_STATUS(vmcc_onnx_compile(m.d, m.n, NULL, NULL, &e, NULL), VM_INVALID_ARGUMENT,
                "the graph has no outputs");
  free(m.d);
}

static void test_rank_and_width(void **state) {
  (void)state;
  /* a graph input of rank 1,000 */
  pb_t g = {0};
  const char *in[1] = {"x"};
  onnx_add_node(&g, "Relu", "r", in, 1, "y");
  onnx_add_value_info(&g, 11, "x", 1000, NULL);
  onnx_add_value_info(&g, 12, "y", 2, k_d24);
  pb_t m = onnx_model_of(&g, 17);
  expect_refused("rank1000.onnx", &m,
                 "onnx: a shape in value 'x' has 1000 dims, at most 64 are accepted", 0);
  /* an initializer of rank 1,000 */
  g = relu_graph();
  pb_t t = {0};
  for (int i = 0; i < 1000; i++) pb_int(&t, 1, 1);
  pb_int(&t, 2, 1);
  pb_str(&t, 8, "w");
  pb_msg(&g, 5, &t);
  m = onnx_model_of(&g, 17);
  expect_refused("init_rank1000.onnx", &m,
                 "onnx: tensor 'w' has 1000 dims, at most 64 are accepted", 0);
  /* 100,000 inputs to one node */
  g = (pb_t){0};
  const char **many = malloc(100000 * sizeof(char *));
  assert_non_null(many);
  for (int i = 0; i < 100000; i++) many[i] = "x";
  onnx_add_node(&g, "Concat", "cat", many, 100000, "y");
  free(many);
  m = xy_model(&g);
  expect_refused("wide.onnx", &m,
                 "onnx: node 'cat' has 100000 inputs, at most 4096 are accepted: split the node",
                 0);
  /* 4,096 inputs parse; the operator then says what it supports */
  g = (pb_t){0};
  const char *some[4096];
  for (int i = 0; i < 4096; i++) some[i] = "x";
  onnx_add_node(&g, "Concat", "cat", some, 4096, "y");
  m = xy_model(&g);
  vm_executable_t *e = NULL;
  ASSERT_STATUS(vmcc_onnx_compile(m.d, m.n, NULL, NULL, &e, NULL), VM_UNIMPLEMENTED,
                "node 'cat' (Concat): 4096 inputs: at most 64");
  free(m.d);
}

/* pb of `count` copies of an empty message as field `field`, then y =
 * Relu(x) */
static pb_t many_empty(uint32_t field, uint32_t count) {
  pb_t g = {0};
  const uint8_t empty[2] = {(uint8_t)(field << 3 | 2), 0};
  for (uint32_t i = 0; i < count; i++) pb_raw(&g, empty, sizeof(empty));
  const char *in[1] = {"x"};
  onnx_add_node(&g, "Relu", "r", in, 1, "y");
  return g;
}

static void test_counts(void **state) {
  (void)state;
  /* 1,000,001 nodes (empty ones) */
  pb_t g = many_empty(1, 1000000);
  pb_t m = xy_model(&g);
  expect_refused("nodes.onnx", &m,
                 "onnx: the model has 1000001 nodes, at most 1000000 are accepted: split it", 0);
  /* 2^24 + 1 messages (empty value_info entries), library only */
  g = many_empty(13, 1u << 24);
  m = xy_model(&g);
  vm_executable_t *e = NULL;
  ASSERT_STATUS(vmcc_onnx_compile(m.d, m.n, NULL, NULL, &e, NULL), VM_INVALID_ARGUMENT,
                "messages and repeated strings, at most 16777216 are accepted");
  free(m.d);
  /* 1,025 attributes on one node */
  g = (pb_t){0};
  pb_t node = {0};
  pb_str(&node, 1, "x");
  pb_str(&node, 2, "y");
  pb_str(&node, 3, "r");
  pb_str(&node, 4, "Relu");
  for (int i = 0; i < 1025; i++) {
    pb_t a = {0};
    char name[16];
    snprintf(name, sizeof(name), "a%d", i);
    pb_str(&a, 1, name);
    pb_msg(&node, 5, &a);
  }
  pb_msg(&g, 1, &node);
  m = xy_model(&g);
  expect_refused("attrs.onnx", &m,
                 "onnx: node 'r' has 1025 attributes, at most 1024 are accepted", 0);
}

static void test_cycle_and_missing_input(void **state) {
  (void)state;
  /* t1 = Add(x, t2); t2 = Relu(t1); y = Relu(t2) */
  pb_t g = {0};
  const char *in1[2] = {"x", "t2"}, *in2[1] = {"t1"}, *in3[1] = {"t2"};
  onnx_add_node(&g, "Add", "n1", in1, 2, "t1");
  onnx_add_node(&g, "Relu", "n2", in2, 1, "t2");
  onnx_add_node(&g, "Relu", "n3", in3, 1, "y");
  pb_t m = xy_model(&g);
  expect_refused("cycle.onnx", &m,
                 "node 'n1' (Add): input 't2' is computed by node 'n2' (Relu), which depends on "
                 "this node: the graph has a cycle",
                 0);
  /* a node reading its own output */
  g = (pb_t){0};
  const char *self[2] = {"x", "y"};
  onnx_add_node(&g, "Add", "me", self, 2, "y");
  m = xy_model(&g);
  expect_refused("self.onnx", &m,
                 "node 'me' (Add): input 'y' is the node's own output: the graph has a cycle", 0);
  /* an input nothing defines */
  g = (pb_t){0};
  const char *ghost[1] = {"ghost"};
  onnx_add_node(&g, "Relu", "r", ghost, 1, "y");
  m = xy_model(&g);
  expect_refused("missing.onnx", &m,
                 "node 'r' (Relu): input 'ghost' is never defined: no graph input, initializer "
                 "or node output has that name",
                 0);
}

static void test_bogus_opsets(void **state) {
  (void)state;
  pb_t g = relu_graph();
  pb_t m = onnx_model_of(&g, 0);
  expect_refused("opset0.onnx", &m,
                 "opset 0 is not a valid opset of the default ONNX domain: fix the model's "
                 "opset_import; supported: opsets 1 to 28",
                 0);
  g = relu_graph();
  m = onnx_model_of(&g, (uint64_t)1 << 62);
  expect_refused("opset2p62.onnx", &m,
                 "opset 4611686018427387904 is not a valid opset of the default ONNX domain", 0);
  /* negative, as int64 on the wire */
  g = relu_graph();
  m = onnx_model_of(&g, (uint64_t)-5);
  expect_refused("opset_neg.onnx", &m, "opset -5 is not a valid opset of the default ONNX domain", 0);
}

/* A model y = Add(x, w) whose w [4] lives in external data at location,
 * with offset (NULL: none). */
static pb_t external_model(const char *location, const char *offset) {
  pb_t g = {0}, t = {0}, e = {0};
  const char *in[2] = {"x", "w"};
  static const int64_t d4[1] = {4};
  onnx_add_node(&g, "Add", "a", in, 2, "y");
  pb_int(&t, 1, 4);
  pb_int(&t, 2, 1);
  pb_str(&t, 8, "w");
  pb_str(&e, 1, "location");
  pb_str(&e, 2, location);
  pb_msg(&t, 13, &e);
  if (offset) {
    pb_str(&e, 1, "offset");
    pb_str(&e, 2, offset);
    pb_msg(&t, 13, &e);
  }
  pb_int(&t, 14, 1); /* EXTERNAL */
  pb_msg(&g, 5, &t);
  onnx_add_value_info(&g, 11, "x", 1, d4);
  onnx_add_value_info(&g, 12, "y", 1, d4);
  return onnx_model_of(&g, 17);
}

static void test_external_data(void **state) {
  (void)state;
  char sub[4200], path[4300], secret[4300];
  snprintf(sub, sizeof(sub), "%s/ext", g_dir);
  assert_int_equal(mkdir(sub, 0700), 0);
  float w[4] = {1, 2, 3, 4};
  snprintf(path, sizeof(path), "%s/w.bin", sub);
  write_file(path, w, sizeof(w));
  snprintf(secret, sizeof(secret), "%s/secret.bin", g_dir);
  write_file(secret, w, sizeof(w));
  snprintf(path, sizeof(path), "%s/link.bin", sub);
  assert_int_equal(symlink(secret, path), 0);
  snprintf(path, sizeof(path), "%s/w.fifo", sub);
  assert_int_equal(mkfifo(path, 0600), 0);

  /* the folder's own file is read */
  pb_t m = external_model("w.bin", NULL);
  snprintf(path, sizeof(path), "%s/ok.onnx", sub);
  write_file(path, m.d, m.n);
  vm_executable_t *e = NULL;
  ASSERT_OK(vmcc_onnx_compile_file(path, NULL, &e, NULL));
  vm_executable_free(e);
  e = NULL;
  unlink(path);
  free(m.d);

  static const struct {
    const char *location, *offset, *want;
  } cases[] = {
      {"../secret.bin", NULL, "must be a relative path inside the model's folder"},
      {"/etc/passwd", NULL, "must be a relative path inside the model's folder"},
      {"link.bin", NULL, "external data 'link.bin' resolves outside the model's folder"},
      {"w.fifo", NULL,
       "external data 'w.fifo' is not a regular file (a FIFO, device or folder)"},
      {"w.bin", "9223372036854775808",
       "external data 'w.bin' has 16 bytes, the tensor needs 16 at offset 9223372036854775808"},
      {"w.bin", "18446744073709551615",
       "has 16 bytes, the tensor needs 16 at offset 18446744073709551615"},
      {"w.bin", "8", "has 16 bytes, the tensor needs 16 at offset 8"},
      {"w.bin", "99999999999999999999", "external data offset '99999999999999999999' is not a "
                                        "number"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    m = external_model(cases[i].location, cases[i].offset);
    char name[64];
    snprintf(name, sizeof(name), "ext/m%zu.onnx", i);
    expect_refused(name, &m, cases[i].want, 1);
  }
  /* a FIFO as the model itself */
  snprintf(path, sizeof(path), "%s/model.fifo", sub);
  assert_int_equal(mkfifo(path, 0600), 0);
  expect_cli_refuses(path, "is not a regular file");
  ASSERT_STATUS(vmcc_onnx_compile_file(path, NULL, &e, NULL), VM_INVALID_ARGUMENT,
                "is not a regular file");
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A guard, not a measurement (bench/bench_onnx_compile.c measures): the
 * compile of a 200,000-node chain took over a minute when the importer,
 * the emitter and the planner were quadratic; it takes about a second. */
static void test_long_chain_compiles(void **state) {
  (void)state;
  uint32_t n = 200000;
  pb_t m = onnx_relu_chain(n);
  vm_executable_t *e = NULL;
  vmcc_onnx_report_t rep;
  double t0 = now_s();
  ASSERT_OK(vmcc_onnx_compile(m.d, m.n, NULL, NULL, &e, &rep));
  double dt = now_s() - t0;
  assert_int_equal(rep.num_nodes, n);
  assert_non_null(e);
  vm_executable_free(e);
  free(m.d);
  print_message("chain of %u Relu nodes: compiled in %.2f s\n", n, dt);
  if (dt > 60) fail_msg("a chain of %u nodes took %.1f s to compile (bound 60 s)", n, dt);
}

static int setup(void **state) {
  (void)state;
  if (run_proc_program("client/vmclient", g_vmclient, sizeof(g_vmclient)) != 0) return -1;
  return run_proc_mkdtemp("vmrpc_hostile_", g_dir, sizeof(g_dir));
}

static int teardown(void **state) {
  (void)state;
  return run_proc_rmdir(g_dir); /* our own scratch folder */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_deep_nesting),
      cmocka_unit_test(test_rank_and_width),
      cmocka_unit_test(test_counts),
      cmocka_unit_test(test_cycle_and_missing_input),
      cmocka_unit_test(test_bogus_opsets),
      cmocka_unit_test(test_external_data),
      cmocka_unit_test(test_long_chain_compiles),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
