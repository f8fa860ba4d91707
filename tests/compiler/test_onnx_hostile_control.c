/* Hostile control flow: If branches nested beyond the bound, a Loop whose
 * static trip count would unroll past the bound, a Loop that could never
 * end, more subgraph nodes in all than the bound, a run-time If whose
 * branches disagree on a shape, a run-time If with branches invalid for
 * the model's shapes, a Scan with a bogus axis. Each is fed to
 * the real `vmclient compile` (exit 3, one line naming the node and the
 * problem) and to the library (the exact status and message), and the
 * compiler stays well within its time (the bounds are checked before the
 * work, or as it goes). */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "onnx_bytes.h"
#include "run_proc.h"
#include "test_util.h"
#include "vm/executable.h"
#include "vmcompiler/onnx.h"

enum { ELEM_FLOAT = 1, ELEM_INT64 = 7, ELEM_BOOL = 9, EXIT_INPUT = 3 };

static char g_vmclient[4096];
static char g_dir[4096];
static const int64_t k_d23[2] = {2, 3};

/* A branch or body graph: y = Identity(x) (names given), x and y [2, 3]. */
static pb_t ident_graph(const char *x, const char *y) {
  pb_t g = {0};
  const char *in[1] = {x};
  onnx_add_node(&g, "Identity", y, in, 1, y);
  pb_str(&g, 2, "g");
  onnx_add_value_info(&g, 12, y, 2, k_d23);
  return g;
}

/* The model of graph g with inputs x (float [2, 3]) and c (bool), output y. */
static pb_t model_xc(pb_t *g, uint64_t opset) {
  onnx_add_value_info(g, 11, "x", 2, k_d23);
  onnx_add_typed_value_info(g, 11, "c", ELEM_BOOL, 0, NULL);
  onnx_add_value_info(g, 12, "y", 2, k_d23);
  return onnx_model_of(g, opset);
}

/* `vmclient compile` exits 3 with one line naming want; the library gives
 * code and the same message. Frees m. */
static void expect_refused(const char *name, pb_t *m, vm_code_t code, const char *want) {
  char path[4200], out[4200];
  snprintf(path, sizeof(path), "%s/%s", g_dir, name);
  snprintf(out, sizeof(out), "%s/out.vmx", g_dir);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(m->d, 1, m->n, f), m->n);
  assert_int_equal(fclose(f), 0);
  const char *args[] = {"compile", "-q", "-o", out, path, NULL};
  run_result_t r;
  run_proc(g_vmclient, args, g_dir, NULL, 0, NULL, 120, &r);
  run_expect_cli_exit(&r, EXIT_INPUT, "compile");
  if (!strstr(r.err, want)) fail_msg("vmclient compile: stderr [%s], expected [%s]", r.err, want);
  run_result_free(&r);
  vm_executable_t *e = NULL;
  ASSERT_STATUS(vmcc_onnx_compile(m->d, m->n, NULL, NULL, &e, NULL), code, want);
  assert_null(e);
  unlink(path);
  free(m->d);
  memset(m, 0, sizeof(*m));
}

/* 17 Ifs within each other (the bound is 16), the innermost branches
 * returning x: refused at the innermost If (a bound is never put off to
 * run time as a branch invalid for its shapes is), whose branch would be the 17th
 * subgraph lowered within the others (the message names every If on the
 * way: "node 'if' (If): then_branch: node 'if' (If): ..."). */
static void test_if_nested_too_deep(void **state) {
  (void)state;
  pb_t inner = ident_graph("x", "y");
  for (int level = 0; level < 17; level++) {
    pb_t g = {0}, attrs = {0}, els = ident_graph("x", "y");
    onnx_attr_graph(&attrs, "then_branch", &inner);
    onnx_attr_graph(&attrs, "else_branch", &els);
    const char *c[1] = {"c"}, *y[1] = {"y"};
    onnx_add_node_attrs(&g, "If", "if", c, 1, y, 1, &attrs);
    pb_str(&g, 2, "g");
    if (level < 16) onnx_add_value_info(&g, 12, "y", 2, k_d23);
    inner = g;
  }
  pb_t m = model_xc(&inner, 17);
  expect_refused("deep.onnx", &m, VM_INVALID_ARGUMENT,
                 "(If): then_branch: subgraphs nest more than 16 deep: at most 16 are lowered "
                 "within each other: flatten the model's control flow");
  /* 16 levels are accepted (and give x back, whatever c is) */
  inner = ident_graph("x", "y");
  for (int level = 0; level < 16; level++) {
    pb_t g = {0}, attrs = {0}, els = ident_graph("x", "y");
    onnx_attr_graph(&attrs, "then_branch", &inner);
    onnx_attr_graph(&attrs, "else_branch", &els);
    const char *c[1] = {"c"}, *y[1] = {"y"};
    onnx_add_node_attrs(&g, "If", "if", c, 1, y, 1, &attrs);
    pb_str(&g, 2, "g");
    if (level < 15) onnx_add_value_info(&g, 12, "y", 2, k_d23);
    inner = g;
  }
  m = model_xc(&inner, 17);
  vm_executable_t *e = NULL;
  ASSERT_OK(vmcc_onnx_compile(m.d, m.n, NULL, NULL, &e, NULL));
  vm_executable_free(e);
  free(m.d);
}

/* A Loop with trip count M (an initializer), no condition and a scan
 * output (so it must unroll): body y_out = Identity(y_in), z = y_out. */
static pb_t loop_model(int64_t trip, int with_m) {
  pb_t g = {0}, body = {0}, attrs = {0};
  const char *yi[1] = {"y_in"}, *yo[1] = {"y_out"}, *ci[1] = {"c_in"}, *co[1] = {"c_out"},
             *z[1] = {"z"};
  onnx_add_node(&body, "Identity", "cy", yi, 1, "y_out");
  onnx_add_node(&body, "Identity", "cc", ci, 1, "c_out");
  onnx_add_node(&body, "Identity", "cz", yo, 1, "z");
  (void)co;
  (void)z;
  pb_str(&body, 2, "body");
  onnx_add_typed_value_info(&body, 11, "i", ELEM_INT64, 0, NULL);
  onnx_add_typed_value_info(&body, 11, "c_in", ELEM_BOOL, 0, NULL);
  onnx_add_value_info(&body, 11, "y_in", 2, k_d23);
  onnx_add_typed_value_info(&body, 12, "c_out", ELEM_BOOL, 0, NULL);
  onnx_add_value_info(&body, 12, "y_out", 2, k_d23);
  onnx_add_value_info(&body, 12, "z", 2, k_d23);
  onnx_attr_graph(&attrs, "body", &body);
  const char *in[3] = {with_m ? "M" : "", "", "x"}, *out[2] = {"y", "zs"};
  onnx_add_node_attrs(&g, "Loop", "loop", in, 3, out, 2, &attrs);
  if (with_m) onnx_add_initializer(&g, "M", ELEM_INT64, 0, NULL, &trip, sizeof(trip));
  pb_str(&g, 2, "g");
  onnx_add_value_info(&g, 11, "x", 2, k_d23);
  onnx_add_value_info(&g, 12, "y", 2, k_d23);
  return onnx_model_of(&g, 17);
}

/* while (c) y = Identity(y), c = c_in: without M the condition stays
 * true once the loop runs. */
static pb_t endless_model(void) {
  pb_t g = {0}, body = {0}, attrs = {0};
  const char *yi[1] = {"y_in"}, *ci[1] = {"c_in"};
  onnx_add_node(&body, "Identity", "cy", yi, 1, "y_out");
  onnx_add_node(&body, "Identity", "cc", ci, 1, "c_out");
  pb_str(&body, 2, "body");
  onnx_add_typed_value_info(&body, 11, "i", ELEM_INT64, 0, NULL);
  onnx_add_typed_value_info(&body, 11, "c_in", ELEM_BOOL, 0, NULL);
  onnx_add_value_info(&body, 11, "y_in", 2, k_d23);
  onnx_add_typed_value_info(&body, 12, "c_out", ELEM_BOOL, 0, NULL);
  onnx_add_value_info(&body, 12, "y_out", 2, k_d23);
  onnx_attr_graph(&attrs, "body", &body);
  const char *in[3] = {"", "c", "x"}, *out[1] = {"y"};
  onnx_add_node_attrs(&g, "Loop", "loop", in, 3, out, 1, &attrs);
  pb_str(&g, 2, "g");
  return model_xc(&g, 17);
}

static void test_loop_bounds(void **state) {
  (void)state;
  /* 2^40 iterations of 3 nodes would unroll into 3 * 2^40 */
  pb_t m = loop_model((int64_t)1 << 40, 1);
  expect_refused("long.onnx", &m, VM_UNIMPLEMENTED,
                 "node 'loop' (Loop): 1099511627776 iterations of a body of 3 nodes: at most "
                 "65536 nodes are lowered for one loop");
  m = loop_model(INT64_MAX, 1);
  expect_refused("longest.onnx", &m, VM_UNIMPLEMENTED,
                 "node 'loop' (Loop): 9223372036854775807 iterations of a body of 3 nodes");
  /* neither M nor a condition: it would never end */
  m = loop_model(0, 0);
  expect_refused("endless.onnx", &m, VM_INVALID_ARGUMENT,
                 "node 'loop' (Loop): neither M nor cond is given: the loop would never end");
  m = endless_model();
  expect_refused("while_true.onnx", &m, VM_INVALID_ARGUMENT,
                 "node 'loop' (Loop): no trip count M is given and the body's condition is "
                 "always true: the loop would never end");
}

/* 17 Scans of 1,024 iterations of a body of 64 nodes: 1,114,112 subgraph
 * nodes in all, beyond the bound of 2^20; refused at the 17th. */
static void test_total_subgraph_nodes(void **state) {
  (void)state;
  enum { T = 1024, N = 64 };
  float *x = calloc(T, sizeof(float));
  assert_non_null(x);
  pb_t g = {0};
  const int64_t xd[2] = {T, 1}, d1[1] = {1};
  onnx_add_initializer(&g, "xs", ELEM_FLOAT, 2, xd, x, T * sizeof(float));
  free(x);
  char names[17][16], chain[N + 1][8];
  for (int j = 0; j <= N; j++) snprintf(chain[j], sizeof(chain[j]), "t%d", j);
  for (int k = 0; k < 17; k++) {
    pb_t body = {0}, attrs = {0};
    for (int j = 0; j < N; j++) {
      const char *in[1] = {chain[j]};
      onnx_add_node(&body, "Identity", chain[j + 1], in, 1, chain[j + 1]);
    }
    pb_str(&body, 2, "body");
    onnx_add_value_info(&body, 11, chain[0], 1, d1);
    onnx_add_value_info(&body, 12, chain[N], 1, d1);
    onnx_attr_graph(&attrs, "body", &body);
    onnx_attr_int(&attrs, "num_scan_inputs", 0, 1);
    snprintf(names[k], sizeof(names[k]), "z%d", k);
    const char *sin[1] = {"xs"}, *sout[1] = {names[k]};
    onnx_add_node_attrs(&g, "Scan", names[k], sin, 1, sout, 1, &attrs);
  }
  pb_str(&g, 2, "g");
  onnx_add_value_info(&g, 12, "z16", 2, xd);
  pb_t m = onnx_model_of(&g, 17);
  expect_refused("many.onnx", &m, VM_INVALID_ARGUMENT,
                 "node 'z16' (Scan): body: more than 1048576 subgraph nodes to lower (unrolled "
                 "iterations count each time): at most 1048576 are accepted");
}

/* The model y = If(c) {then} else {els} of model_xc (takes the graphs). */
static pb_t if_xc(pb_t *then, pb_t *els) {
  pb_t g = {0}, attrs = {0};
  onnx_attr_graph(&attrs, "then_branch", then);
  onnx_attr_graph(&attrs, "else_branch", els);
  const char *c[1] = {"c"}, *y[1] = {"y"};
  onnx_add_node_attrs(&g, "If", "if", c, 1, y, 1, &attrs);
  pb_str(&g, 2, "g");
  return model_xc(&g, 17);
}

/* A run-time If whose branches give [2, 3] and [3, 2]. */
static void test_if_branch_shapes_differ(void **state) {
  (void)state;
  pb_t then = ident_graph("x", "y"), els = {0};
  const int64_t d32[2] = {3, 2};
  const char *sh[2] = {"x", "shape"};
  int64_t shape[2] = {3, 2};
  onnx_add_node(&els, "Reshape", "r", sh, 2, "y2");
  onnx_add_initializer(&els, "shape", ELEM_INT64, 1, (int64_t[]){2}, shape, sizeof(shape));
  pb_str(&els, 2, "else");
  onnx_add_value_info(&els, 12, "y2", 2, d32);
  pb_t m = if_xc(&then, &els);
  expect_refused("shapes.onnx", &m, VM_UNIMPLEMENTED,
                 "node 'if' (If): output 0 is float32[2,3] in then_branch and float32[3,2] in "
                 "else_branch: a run-time condition needs one static type from both branches "
                 "(bind the condition's inputs with --const to choose the branch at compile "
                 "time)");
}

/* A branch y = MatMul(x, x) of x [2, 3]: invalid for that shape. */
static pb_t matmul_graph(void) {
  pb_t g = {0};
  const char *xx[2] = {"x", "x"};
  onnx_add_node(&g, "MatMul", "mm", xx, 2, "y");
  pb_str(&g, 2, "mm");
  onnx_add_value_info(&g, 12, "y", 2, k_d23);
  return g;
}

/* A run-time If with a branch that cannot run with the model's shapes: one
 * such branch compiles into a function that fails when taken (with the
 * warning saying so, exactly); both such branches are refused with the
 * then_branch's error. */
static void test_if_branch_invalid_for_shapes(void **state) {
  (void)state;
  static const char why[] =
      "node 'if' (If): else_branch: node 'mm' (MatMul): inner dims differ: 3 and 2";
  for (int both = 0; both < 2; both++) {
    pb_t then = both ? matmul_graph() : ident_graph("x", "y"), els = matmul_graph();
    pb_t m = if_xc(&then, &els);
    if (both) {
      expect_refused("invalid2.onnx", &m, VM_INVALID_ARGUMENT,
                     "node 'if' (If): then_branch: node 'mm' (MatMul): inner dims differ: 3 and 2");
      continue;
    }
    vm_executable_t *e = NULL;
    vmcc_onnx_report_t rep;
    ASSERT_OK(vmcc_onnx_compile(m.d, m.n, NULL, NULL, &e, &rep));
    vm_executable_free(e);
    free(m.d);
    assert_int_equal(rep.num_warnings, 1);
    char want[400];
    snprintf(want, sizeof(want),
             "%s (this branch of a run-time If cannot run with the input shapes the model was "
             "compiled for: taking it fails)",
             why);
    assert_string_equal(rep.warning, want);
  }
}

/* Scan with scan_input_axes 5 on a rank-2 input; an If without its
 * else_branch. */
static void test_malformed_attributes(void **state) {
  (void)state;
  pb_t g = {0}, body = {0}, attrs = {0};
  const int64_t d3[1] = {3};
  const char *in[1] = {"xt"};
  onnx_add_node(&body, "Identity", "zt", in, 1, "zt");
  pb_str(&body, 2, "body");
  onnx_add_value_info(&body, 11, "xt", 1, d3);
  onnx_add_value_info(&body, 12, "zt", 1, d3);
  onnx_attr_graph(&attrs, "body", &body);
  onnx_attr_int(&attrs, "num_scan_inputs", 0, 1);
  onnx_attr_int(&attrs, "scan_input_axes", 1, 5);
  const char *sin[1] = {"x"}, *sout[1] = {"y"};
  onnx_add_node_attrs(&g, "Scan", "scan", sin, 1, sout, 1, &attrs);
  pb_str(&g, 2, "g");
  onnx_add_value_info(&g, 11, "x", 2, k_d23);
  onnx_add_value_info(&g, 12, "y", 2, k_d23);
  pb_t m = onnx_model_of(&g, 17);
  expect_refused("axis.onnx", &m, VM_INVALID_ARGUMENT,
                 "node 'scan' (Scan): scan_input_axes 5 is out of range for rank 2");
  pb_t g2 = {0}, a2 = {0}, then = ident_graph("x", "y");
  onnx_attr_graph(&a2, "then_branch", &then);
  const char *c[1] = {"c"}, *y[1] = {"y"};
  onnx_add_node_attrs(&g2, "If", "if", c, 1, y, 1, &a2);
  pb_str(&g2, 2, "g");
  m = model_xc(&g2, 17);
  expect_refused("noelse.onnx", &m, VM_INVALID_ARGUMENT,
                 "node 'if' (If): attribute 'else_branch' (a graph) is missing");
}

/* The control-flow seeds of fuzz_onnx (tests/fuzz/corpus/fuzz_onnx,
 * tests/fuzz/gen_onnx_control_seeds.py) compile without options: the fuzzer starts
 * from models that reach the lowering of If, Loop and Scan. */
static void test_fuzz_seeds_compile(void **state) {
  (void)state;
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
    vmcc_onnx_report_t rep;
    vm_status_t st = vmcc_onnx_compile_file(path, NULL, &e, &rep);
    if (st) fail_msg("%s: %s", de->d_name, vm_status_message(st));
    vm_executable_free(e);
    n++;
  }
  closedir(d);
  assert_true(n >= 6);
}

static int setup(void **state) {
  (void)state;
  return run_proc_setup("client/vmclient", g_vmclient, sizeof(g_vmclient), "vmrpc-onnx-hctl-",
                        g_dir, sizeof(g_dir));
}

static int teardown(void **state) {
  (void)state;
  run_proc_rmdir(g_dir);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_if_nested_too_deep),      cmocka_unit_test(test_loop_bounds),
      cmocka_unit_test(test_total_subgraph_nodes),    cmocka_unit_test(test_if_branch_shapes_differ),
      cmocka_unit_test(test_if_branch_invalid_for_shapes),
      cmocka_unit_test(test_malformed_attributes),   cmocka_unit_test(test_fuzz_seeds_compile),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
