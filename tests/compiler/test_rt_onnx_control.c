/* Control flow of the ONNX importer end to end: models with If, Loop and
 * Scan (written here as protobuf bytes) compiled by the real `vmclient
 * compile` and run by `vmclient run` on a real vmagent's opencl:0 (PoCL in
 * CI), in this run's execution mode; outputs compare with values computed
 * here. Covers an If whose condition is computed at run time (the VM's
 * If over two branch functions), the same If folded when its condition is
 * bound with --const (only the taken branch is compiled), a nested If, a
 * run-time If whose then_branch cannot run with the model's shapes (a 5-D
 * LSTM input: compiled with a warning, failing only when taken), a Loop
 * with a run-time trip count and condition (a VM loop), a Loop with scan
 * outputs (unrolled), a reversed Scan stacking on axis 1, and a graph
 * output declared with another shape (compiled with a warning). */
#include <math.h>
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

#include "agent_proc.h"
#include "onnx_bytes.h"
#include "run_proc.h"
#include "test_util.h"

enum { ELEM_FLOAT = 1, ELEM_INT64 = 7, ELEM_BOOL = 9 };

static char g_vmclient[4096];
static char g_dir[4096];
static agent_proc_t g_agent;

/* ---------------------------------------------------------------------------
 * Models as protobuf bytes (field numbers of onnx.proto)
 */

#define vi onnx_add_typed_value_info
#define attr_graph onnx_attr_graph
#define attr_int(a, name, v) onnx_attr_int(a, name, 0, v)
#define attr_ints(a, name, v) onnx_attr_int(a, name, 1, v)

static void node(pb_t *g, const char *op, const char *const *in, size_t nin,
                 const char *const *out, size_t nout, pb_t *attrs) {
  onnx_add_node_attrs(g, op, op, in, nin, out, nout, attrs);
}

static void init_f(pb_t *g, const char *name, uint32_t ndim, const int64_t *dims, const float *v,
                   size_t n) {
  onnx_add_initializer(g, name, ELEM_FLOAT, ndim, dims, v, n * sizeof(float));
}

/* ---------------------------------------------------------------------------
 * Files and programs
 */

/* Writes a little-endian .npy of dtype descr ('<f4', '<i8', '|b1'). */
static void write_npy(const char *name, const char *descr, uint32_t ndim, const int64_t *dims,
                      const void *data, size_t nbytes) {
  char shape[128] = "", hdr[256], path[4200];
  for (uint32_t i = 0; i < ndim; i++)
    snprintf(shape + strlen(shape), sizeof(shape) - strlen(shape), "%lld,", (long long)dims[i]);
  int n = snprintf(hdr, sizeof(hdr), "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
                   descr, shape);
  while ((n + 11) % 64 != 0) hdr[n++] = ' ';
  hdr[n++] = '\n';
  snprintf(path, sizeof(path), "%s/%s", g_dir, name);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  uint8_t pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (uint8_t)n, (uint8_t)(n >> 8)};
  assert_int_equal(fwrite(pre, 1, 10, f), 10);
  assert_int_equal(fwrite(hdr, 1, (size_t)n, f), (size_t)n);
  if (nbytes) assert_int_equal(fwrite(data, 1, nbytes, f), nbytes);
  assert_int_equal(fclose(f), 0);
}

/* Reads n floats of the .npy file out/output_NAME.npy. */
static void read_out(const char *name, float *v, size_t n) {
  char path[4200];
  snprintf(path, sizeof(path), "%s/out/output_%s.npy", g_dir, name);
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("no output file %s", path);
  uint8_t pre[10];
  assert_int_equal(fread(pre, 1, 10, f), 10);
  size_t hl = (size_t)pre[8] | (size_t)pre[9] << 8;
  assert_int_equal(fseek(f, (long)(10 + hl), SEEK_SET), 0);
  size_t got = fread(v, sizeof(float), n, f);
  char extra;
  size_t more = fread(&extra, 1, 1, f);
  fclose(f);
  if (got != n || more) fail_msg("%s: %zu floats and more %zu, expected %zu", path, got, more, n);
}

static void write_model(const char *name, pb_t *m) {
  char path[4200];
  snprintf(path, sizeof(path), "%s/%s", g_dir, name);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(m->d, 1, m->n, f), m->n);
  assert_int_equal(fclose(f), 0);
  free(m->d);
  memset(m, 0, sizeof(*m));
}

/* vmclient ARGS... in the scratch folder: exit 0, or fails the test. */
static void vmclient_ok(const char *const *args, run_result_t *r) {
  run_proc(g_vmclient, args, g_dir, NULL, 0, NULL, 300, r);
  if (!WIFEXITED(r->status) || WEXITSTATUS(r->status) != 0)
    fail_msg("vmclient %s %s: status %d, stderr [%s]", args[0], args[1], r->status, r->err);
}

/* Compiles model (with up to two --const NAME=FILE) into m.vmx; stderr of
 * the compile in *err_out when given (malloc'ed). */
static void compile(const char *model, const char *c1, const char *c2, char **err_out) {
  const char *args[12] = {"compile", "-q", model, "-o", "m.vmx"};
  int n = 5;
  if (c1) args[n++] = "--const", args[n++] = c1;
  if (c2) args[n++] = "--const", args[n++] = c2;
  args[n] = NULL;
  run_result_t r;
  vmclient_ok(args, &r);
  if (err_out) *err_out = strdup(r.err);
  run_result_free(&r);
}

/* `vmclient run` of m.vmx on the agent's opencl:0 in this run's mode with
 * inputs (NAME=FILE, NULL-terminated), outputs into out/: its result in *r. */
static void run_args(const char *const *inputs, run_result_t *r) {
  char host[300];
  snprintf(host, sizeof(host), "%s", g_agent.url);
  const char *args[40] = {"--host", host,          "run",      "-d", "opencl:0", "--exec-mode",
                          test_exec_mode() ? "compiled" : "bytecode", "m.vmx", "-o", "out"};
  int n = 10;
  for (size_t i = 0; inputs[i] && n < 36; i++) args[n++] = "--input", args[n++] = inputs[i];
  args[n] = NULL;
  run_proc(g_vmclient, args, g_dir, NULL, 0, NULL, 300, r);
}

/* The same, which must succeed. */
static void run(const char *const *inputs) {
  run_result_t r;
  run_args(inputs, &r);
  if (!WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0)
    fail_msg("vmclient run: status %d, stderr [%s]", r.status, r.err);
  run_result_free(&r);
}

/* The text form of m.vmx (malloc'ed). */
static char *disasm(void) {
  const char *args[] = {"disasm", "m.vmx", NULL};
  run_result_t r;
  vmclient_ok(args, &r);
  char *t = strdup(r.out);
  run_result_free(&r);
  return t;
}

static void expect_close(const float *got, const float *want, size_t n, const char *what) {
  for (size_t i = 0; i < n; i++)
    if (!(fabsf(got[i] - want[i]) <= 1e-5f + 1e-3f * fabsf(want[i])))
      fail_msg("%s: element %zu is %g, expected %g", what, i, got[i], want[i]);
}

/* ---------------------------------------------------------------------------
 * If
 */

static const int64_t k_d23[2] = {2, 3};
static const float k_w[6] = {0, 0.5f, 1, 1.5f, 2, 2.5f};

/* y = c ? relu(x) * w : x - w with w an initializer the branches read from
 * the outer scope; c = sum(x) > 0 when cond_input is 0, else a graph input. */
static pb_t if_model(int cond_input) {
  pb_t g = {0}, then = {0}, els = {0}, attrs = {0};
  const char *x[1] = {"x"}, *r[1] = {"r"}, *rw[2] = {"r", "w"}, *t[1] = {"t"}, *xw[2] = {"x", "w"},
             *e[1] = {"e"};
  node(&then, "Relu", x, 1, r, 1, NULL);
  node(&then, "Mul", rw, 2, t, 1, NULL);
  pb_str(&then, 2, "then");
  vi(&then, 12, "t", ELEM_FLOAT, 2, k_d23);
  node(&els, "Sub", xw, 2, e, 1, NULL);
  pb_str(&els, 2, "else");
  vi(&els, 12, "e", ELEM_FLOAT, 2, k_d23);
  if (!cond_input) {
    const char *s[1] = {"s"}, *sz[2] = {"s", "zero"}, *cc[1] = {"c"};
    pb_t ka = {0};
    attr_int(&ka, "keepdims", 0);
    node(&g, "ReduceSum", x, 1, s, 1, &ka);
    node(&g, "Greater", sz, 2, cc, 1, NULL);
    float zero = 0;
    init_f(&g, "zero", 0, NULL, &zero, 1);
  }
  attr_graph(&attrs, "then_branch", &then);
  attr_graph(&attrs, "else_branch", &els);
  const char *c[1] = {"c"}, *y[1] = {"y"};
  node(&g, "If", c, 1, y, 1, &attrs);
  init_f(&g, "w", 2, k_d23, k_w, 6);
  pb_str(&g, 2, "if");
  vi(&g, 11, "x", ELEM_FLOAT, 2, k_d23);
  if (cond_input) vi(&g, 11, "c", ELEM_BOOL, 0, NULL);
  vi(&g, 12, "y", ELEM_FLOAT, 2, k_d23);
  return onnx_model_of(&g, 17);
}

static void if_want(const float *x, int taken, float *y) {
  for (int i = 0; i < 6; i++) y[i] = taken ? (x[i] > 0 ? x[i] : 0) * k_w[i] : x[i] - k_w[i];
}

static void test_if_run_time(void **state) {
  (void)state;
  pb_t m = if_model(0);
  write_model("if.onnx", &m);
  compile("if.onnx", NULL, NULL, NULL);
  char *text = disasm();
  /* both branches are functions, main branches with the VM's if */
  assert_non_null(strstr(text, "call $vm.builtin.read_if_cond("));
  assert_non_null(strstr(text, "  if %"));
  assert_non_null(strstr(text, ".func @if0.then("));
  assert_non_null(strstr(text, ".func @if0.else("));
  free(text);
  static const float xs[2][6] = {{1, -2, 3, 0.5f, -1, 2}, {-1, 2, -3, -0.5f, 1, -2}};
  for (int k = 0; k < 2; k++) {
    write_npy("x.npy", "<f4", 2, k_d23, xs[k], sizeof(xs[k]));
    const char *in[] = {"x=x.npy", NULL};
    run(in);
    float got[6], want[6];
    read_out("y", got, 6);
    if_want(xs[k], k == 0, want); /* sums 3.5 and -3.5 */
    expect_close(got, want, 6, k ? "else branch" : "then branch");
  }
}

/* Returned views are not copied: each branch returns its value reshaped
 * to 3x2 (a view), main returns the If's result reshaped to 6 (y) and to
 * 1x6 (y2). Only y2 is a copy (one cl.cast), as it shares y's memory. */
static void test_if_returns_views(void **state) {
  (void)state;
  pb_t g = {0}, then = {0}, els = {0}, attrs = {0};
  const char *x[1] = {"x"}, *r[1] = {"r"}, *rw[2] = {"r", "w"}, *t[1] = {"t"},
             *ts[2] = {"t", "s32"}, *tv[1] = {"tv"}, *xw[2] = {"x", "w"}, *e[1] = {"e"},
             *es[2] = {"e", "s32"}, *ev[1] = {"ev"};
  const int64_t d32[2] = {3, 2}, d6[1] = {6}, d16[2] = {1, 6}, two = 2;
  const int64_t s32[2] = {3, 2}, s6[1] = {6}, s16[2] = {1, 6};
  node(&then, "Relu", x, 1, r, 1, NULL);
  node(&then, "Mul", rw, 2, t, 1, NULL);
  node(&then, "Reshape", ts, 2, tv, 1, NULL);
  pb_str(&then, 2, "then");
  vi(&then, 12, "tv", ELEM_FLOAT, 2, d32);
  node(&els, "Sub", xw, 2, e, 1, NULL);
  node(&els, "Reshape", es, 2, ev, 1, NULL);
  pb_str(&els, 2, "else");
  vi(&els, 12, "ev", ELEM_FLOAT, 2, d32);
  attr_graph(&attrs, "then_branch", &then);
  attr_graph(&attrs, "else_branch", &els);
  const char *c[1] = {"c"}, *o[1] = {"o"}, *o6[2] = {"o", "s6"}, *y[1] = {"y"},
             *o16[2] = {"o", "s16"}, *y2[1] = {"y2"};
  node(&g, "If", c, 1, o, 1, &attrs);
  node(&g, "Reshape", o6, 2, y, 1, NULL);
  node(&g, "Reshape", o16, 2, y2, 1, NULL);
  init_f(&g, "w", 2, k_d23, k_w, 6);
  onnx_add_initializer(&g, "s32", ELEM_INT64, 1, &two, s32, sizeof(s32));
  const int64_t one = 1, n2 = 2;
  onnx_add_initializer(&g, "s6", ELEM_INT64, 1, &one, s6, sizeof(s6));
  onnx_add_initializer(&g, "s16", ELEM_INT64, 1, &n2, s16, sizeof(s16));
  pb_str(&g, 2, "ifv");
  vi(&g, 11, "x", ELEM_FLOAT, 2, k_d23);
  vi(&g, 11, "c", ELEM_BOOL, 0, NULL);
  vi(&g, 12, "y", ELEM_FLOAT, 1, d6);
  vi(&g, 12, "y2", ELEM_FLOAT, 2, d16);
  pb_t m = onnx_model_of(&g, 17);
  write_model("ifv.onnx", &m);
  compile("ifv.onnx", NULL, NULL, NULL);
  char *text = disasm();
  int casts = 0;
  for (const char *p = text; (p = strstr(p, "$cl.cast(")) != NULL; p++) casts++;
  assert_int_equal(casts, 1);
  assert_non_null(strstr(text, ".func @if0.then("));
  free(text);
  static const float xs[6] = {1, -2, 3, 0.5f, -1, 2};
  write_npy("x.npy", "<f4", 2, k_d23, xs, sizeof(xs));
  for (int k = 0; k < 2; k++) {
    const uint8_t cv = (uint8_t)(k == 0);
    write_npy("c.npy", "|b1", 0, NULL, &cv, 1);
    const char *in[] = {"x=x.npy", "c=c.npy", NULL};
    run(in);
    float got[6], got2[6], want[6];
    read_out("y", got, 6);
    read_out("y2", got2, 6);
    if_want(xs, k == 0, want);
    expect_close(got, want, 6, k ? "else branch, y" : "then branch, y");
    expect_close(got2, want, 6, k ? "else branch, y2" : "then branch, y2");
  }
}

static void test_if_folded_by_const(void **state) {
  (void)state;
  pb_t m = if_model(1);
  write_model("ifc.onnx", &m);
  static const float x[6] = {1, -2, 3, 0.5f, -1, 2};
  write_npy("x.npy", "<f4", 2, k_d23, x, sizeof(x));
  for (int taken = 0; taken < 2; taken++) {
    uint8_t c = (uint8_t)taken;
    write_npy("c.npy", "|b1", 0, NULL, &c, 1);
    compile("ifc.onnx", "c=c.npy", NULL, NULL);
    char *text = disasm();
    /* no branch left: only the taken branch's operators */
    assert_null(strstr(text, "read_if_cond"));
    assert_null(strstr(text, ".func @if"));
    assert_true((strstr(text, "cl.binary.sub") != NULL) == !taken);
    assert_true((strstr(text, "cl.unary.relu") != NULL) == taken);
    free(text);
    const char *in[] = {"x=x.npy", NULL};
    run(in);
    float got[6], want[6];
    read_out("y", got, 6);
    if_want(x, taken, want);
    expect_close(got, want, 6, taken ? "then" : "else");
  }
}

/* The model z = c ? (d ? in_then : in_else) : els, x [2, 3] and w (an
 * initializer) read from the outer scopes, c and d run-time inputs; the
 * then_branch's output is u. Takes the three graphs. */
static pb_t nested_if_model(pb_t *in_then, pb_t *in_else, pb_t *els, const char *name) {
  pb_t g = {0}, then = {0}, a1 = {0}, a2 = {0};
  const char *d[1] = {"d"}, *u[1] = {"u"}, *c[1] = {"c"}, *z[1] = {"z"};
  attr_graph(&a1, "then_branch", in_then);
  attr_graph(&a1, "else_branch", in_else);
  node(&then, "If", d, 1, u, 1, &a1);
  pb_str(&then, 2, "then");
  vi(&then, 12, "u", ELEM_FLOAT, 2, k_d23);
  attr_graph(&a2, "then_branch", &then);
  attr_graph(&a2, "else_branch", els);
  node(&g, "If", c, 1, z, 1, &a2);
  init_f(&g, "w", 2, k_d23, k_w, 6);
  pb_str(&g, 2, name);
  vi(&g, 11, "x", ELEM_FLOAT, 2, k_d23);
  vi(&g, 11, "c", ELEM_BOOL, 0, NULL);
  vi(&g, 11, "d", ELEM_BOOL, 0, NULL);
  vi(&g, 12, "z", ELEM_FLOAT, 2, k_d23);
  return onnx_model_of(&g, 17);
}

/* z = c ? (d ? x + w : x * w) : -x, c and d run-time conditions: the inner
 * If is lowered inside the then function and reads x and w from two
 * scopes out. */
static void test_if_nested(void **state) {
  (void)state;
  pb_t els = {0}, in_then = {0}, in_else = {0};
  const char *xw[2] = {"x", "w"}, *p[1] = {"p"}, *q[1] = {"q"}, *x[1] = {"x"}, *nx[1] = {"nx"};
  node(&in_then, "Add", xw, 2, p, 1, NULL);
  pb_str(&in_then, 2, "in_then");
  vi(&in_then, 12, "p", ELEM_FLOAT, 2, k_d23);
  node(&in_else, "Mul", xw, 2, q, 1, NULL);
  pb_str(&in_else, 2, "in_else");
  vi(&in_else, 12, "q", ELEM_FLOAT, 2, k_d23);
  node(&els, "Neg", x, 1, nx, 1, NULL);
  pb_str(&els, 2, "else");
  vi(&els, 12, "nx", ELEM_FLOAT, 2, k_d23);
  pb_t m = nested_if_model(&in_then, &in_else, &els, "nested");
  write_model("nested.onnx", &m);
  compile("nested.onnx", NULL, NULL, NULL);
  static const float xv[6] = {1, -2, 3, 0.5f, -1, 2};
  write_npy("x.npy", "<f4", 2, k_d23, xv, sizeof(xv));
  for (int k = 0; k < 3; k++) {
    uint8_t cv = k < 2, dv = k == 0;
    write_npy("c.npy", "|b1", 0, NULL, &cv, 1);
    write_npy("d.npy", "|b1", 0, NULL, &dv, 1);
    const char *in[] = {"x=x.npy", "c=c.npy", "d=d.npy", NULL};
    run(in);
    float got[6], want[6];
    read_out("z", got, 6);
    for (int i = 0; i < 6; i++) want[i] = !cv ? -xv[i] : dv ? xv[i] + k_w[i] : xv[i] * k_w[i];
    expect_close(got, want, 6, k == 0 ? "x + w" : k == 1 ? "x * w" : "-x");
  }
}

/* A branch that cannot run with the model's fixed shapes, as silero-vad's
 * 8 kHz branch given a 16 kHz chunk: y = Unsqueeze(x, [0, 1, 2]) (5-D)
 * fed to an LSTM (hidden 2), whose X must be 3-D. */
static pb_t lstm_5d_branch(const char *name) {
  pb_t b = {0}, la = {0};
  static const int64_t axes[3] = {0, 1, 2}, d3[1] = {3}, dw[3] = {1, 8, 3}, dr[3] = {1, 8, 2};
  static const float w[24] = {0}, r[16] = {0};
  const char *xa[2] = {"x", "axes"}, *u[1] = {"u"}, *uwr[3] = {"u", "W", "R"},
             *yh[2] = {"ys", "h"};
  node(&b, "Unsqueeze", xa, 2, u, 1, NULL);
  attr_int(&la, "hidden_size", 2);
  node(&b, "LSTM", uwr, 3, yh, 2, &la);
  onnx_add_initializer(&b, "axes", ELEM_INT64, 1, d3, axes, sizeof(axes));
  init_f(&b, "W", 3, dw, w, 24);
  init_f(&b, "R", 3, dr, r, 16);
  pb_str(&b, 2, name);
  static const int64_t dh[3] = {1, 1, 2};
  vi(&b, 12, "h", ELEM_FLOAT, 3, dh);
  return b;
}

/* z = c ? (d ? LSTM(5-D x) : LSTM(5-D x)) : relu(x), c and d run-time
 * inputs: the inner If has no branch that can run, so the outer then_branch
 * cannot either: it compiles (with a warning) into a function that fails
 * with the lowering's error when taken; with c false the model runs. */
static void test_if_branch_invalid_for_shapes(void **state) {
  (void)state;
  pb_t els = {0};
  const char *x[1] = {"x"}, *r[1] = {"r"};
  pb_t in_then = lstm_5d_branch("in_then"), in_else = lstm_5d_branch("in_else");
  node(&els, "Relu", x, 1, r, 1, NULL);
  pb_str(&els, 2, "else");
  vi(&els, 12, "r", ELEM_FLOAT, 2, k_d23);
  pb_t m = nested_if_model(&in_then, &in_else, &els, "invalid_branch");
  write_model("invalid_branch.onnx", &m);
  static const char why[] =
      "node 'If' (If): then_branch: node 'If' (If): then_branch: node 'LSTM' (LSTM): input X 'u' "
      "has 5 dims, expected 3 (this branch of a run-time If cannot run with the input shapes the "
      "model was compiled for: taking it fails)";
  char *err = NULL;
  compile("invalid_branch.onnx", NULL, NULL, &err);
  if (!strstr(err, "warning: ") || !strstr(err, why))
    fail_msg("compile: stderr [%s], expected the warning [%s]", err, why);
  free(err);
  static const float xv[6] = {1, -2, 3, 0.5f, -1, 2};
  write_npy("x.npy", "<f4", 2, k_d23, xv, sizeof(xv));
  const char *in[] = {"x=x.npy", "c=c.npy", "d=d.npy", NULL};
  for (int k = 0; k < 3; k++) {
    uint8_t cv = k == 0, dv = k == 1;
    write_npy("c.npy", "|b1", 0, NULL, &cv, 1);
    write_npy("d.npy", "|b1", 0, NULL, &dv, 1);
    if (!cv) {
      run(in);
      float got[6], want[6];
      read_out("z", got, 6);
      for (int i = 0; i < 6; i++) want[i] = xv[i] > 0 ? xv[i] : 0;
      expect_close(got, want, 6, "relu");
      continue;
    }
    /* the taken branch fails, naming the node and why; the agent serves on */
    run_result_t rr;
    run_args(in, &rr);
    if (!WIFEXITED(rr.status) || WEXITSTATUS(rr.status) != 6 ||
        !strstr(rr.err, "INVALID_ARGUMENT: in function 'if0.then'") || !strstr(rr.err, why))
      fail_msg("run with c true: status %d, stderr [%s], expected exit 6 and [%s]", rr.status,
               rr.err, why);
    run_result_free(&rr);
  }
}

/* ---------------------------------------------------------------------------
 * Loop and Scan
 */

/* y = y0; for i < M while sum(y) < lim: y += x (the condition is
 * computed in the body: a run-time condition and trip count). */
static void test_loop_run_time(void **state) {
  (void)state;
  pb_t g = {0}, body = {0}, attrs = {0}, ka = {0};
  const char *yx[2] = {"y_in", "x"}, *yo[1] = {"y_out"}, *s[1] = {"s"}, *sl[2] = {"s", "lim"},
             *co[1] = {"c_out"};
  node(&body, "Add", yx, 2, yo, 1, NULL);
  attr_int(&ka, "keepdims", 0);
  node(&body, "ReduceSum", yo, 1, s, 1, &ka);
  node(&body, "Less", sl, 2, co, 1, NULL);
  pb_str(&body, 2, "body");
  vi(&body, 11, "i", ELEM_INT64, 0, NULL);
  vi(&body, 11, "c_in", ELEM_BOOL, 0, NULL);
  vi(&body, 11, "y_in", ELEM_FLOAT, 2, k_d23);
  vi(&body, 12, "c_out", ELEM_BOOL, 0, NULL);
  vi(&body, 12, "y_out", ELEM_FLOAT, 2, k_d23);
  attr_graph(&attrs, "body", &body);
  const char *in[3] = {"M", "c0", "y0"}, *out[1] = {"y"};
  node(&g, "Loop", in, 3, out, 1, &attrs);
  pb_str(&g, 2, "loop");
  vi(&g, 11, "M", ELEM_INT64, 0, NULL);
  vi(&g, 11, "c0", ELEM_BOOL, 0, NULL);
  vi(&g, 11, "y0", ELEM_FLOAT, 2, k_d23);
  vi(&g, 11, "x", ELEM_FLOAT, 2, k_d23);
  vi(&g, 11, "lim", ELEM_FLOAT, 0, NULL);
  vi(&g, 12, "y", ELEM_FLOAT, 2, k_d23);
  pb_t m = onnx_model_of(&g, 17);
  write_model("loop.onnx", &m);
  compile("loop.onnx", NULL, NULL, NULL);
  char *text = disasm();
  assert_non_null(strstr(text, "call @loop0.body("));
  assert_non_null(strstr(text, "  goto L"));
  free(text);
  static const float x[6] = {0.5f, 1, 0.25f, 0.75f, 0.5f, 1}; /* sum 4 */
  static const float y0[6] = {0};
  float lim = 10;
  write_npy("x.npy", "<f4", 2, k_d23, x, sizeof(x));
  write_npy("y0.npy", "<f4", 2, k_d23, y0, sizeof(y0));
  write_npy("lim.npy", "<f4", 0, NULL, &lim, sizeof(lim));
  /* M 0: no iteration; M 2: two; M 9 and a true condition: three (sums 4,
   * 8, 12, which is not below 10); a false initial condition: none */
  static const struct { int64_t m; uint8_t c0; int iters; } k_cases[] = {
      {0, 1, 0}, {2, 1, 2}, {9, 1, 3}, {9, 0, 0}};
  for (size_t k = 0; k < sizeof(k_cases) / sizeof(k_cases[0]); k++) {
    write_npy("M.npy", "<i8", 0, NULL, &k_cases[k].m, sizeof(int64_t));
    write_npy("c0.npy", "|b1", 0, NULL, &k_cases[k].c0, 1);
    const char *inputs[] = {"M=M.npy", "c0=c0.npy", "y0=y0.npy", "x=x.npy", "lim=lim.npy", NULL};
    run(inputs);
    float got[6], want[6];
    read_out("y", got, 6);
    for (int i = 0; i < 6; i++) want[i] = (float)k_cases[k].iters * x[i];
    char what[64];
    snprintf(what, sizeof(what), "M %lld, cond %d", (long long)k_cases[k].m, k_cases[k].c0);
    expect_close(got, want, 6, what);
  }
}

/* Loop with M = 4 bound by --const and scan outputs: s_{i+1} = s_i * 2 +
 * x, scan output s_{i+1} + i (the iteration number folds in each unrolled
 * iteration). */
static void test_loop_scan_outputs(void **state) {
  (void)state;
  pb_t g = {0}, body = {0}, attrs = {0};
  const char *sx[2] = {"s2", "x"}, *ss[2] = {"s_in", "s_in"}, *s2[1] = {"s2"}, *so[1] = {"s_out"},
             *ci[1] = {"c_in"}, *co[1] = {"c_out"}, *fo[1] = {"f"}, *ii[1] = {"i"},
             *sc[2] = {"s_out", "f"}, *z[1] = {"z"};
  pb_t ca = {0};
  attr_int(&ca, "to", ELEM_FLOAT);
  node(&body, "Add", ss, 2, s2, 1, NULL);
  node(&body, "Add", sx, 2, so, 1, NULL);
  node(&body, "Identity", ci, 1, co, 1, NULL);
  node(&body, "Cast", ii, 1, fo, 1, &ca);
  node(&body, "Add", sc, 2, z, 1, NULL);
  pb_str(&body, 2, "body");
  vi(&body, 11, "i", ELEM_INT64, 0, NULL);
  vi(&body, 11, "c_in", ELEM_BOOL, 0, NULL);
  vi(&body, 11, "s_in", ELEM_FLOAT, 1, k_d23 + 1);
  vi(&body, 12, "c_out", ELEM_BOOL, 0, NULL);
  vi(&body, 12, "s_out", ELEM_FLOAT, 1, k_d23 + 1);
  vi(&body, 12, "z", ELEM_FLOAT, 1, k_d23 + 1);
  attr_graph(&attrs, "body", &body);
  const char *in[3] = {"M", "", "s0"}, *out[2] = {"s", "zs"};
  node(&g, "Loop", in, 3, out, 2, &attrs);
  pb_str(&g, 2, "loop_scan");
  vi(&g, 11, "M", ELEM_INT64, 0, NULL);
  vi(&g, 11, "s0", ELEM_FLOAT, 1, k_d23 + 1);
  vi(&g, 11, "x", ELEM_FLOAT, 1, k_d23 + 1);
  vi(&g, 12, "s", ELEM_FLOAT, 1, k_d23 + 1);
  const int64_t zd[2] = {4, 3};
  vi(&g, 12, "zs", ELEM_FLOAT, 2, zd);
  pb_t m = onnx_model_of(&g, 17);
  write_model("loops.onnx", &m);
  int64_t mv = 4;
  write_npy("M.npy", "<i8", 0, NULL, &mv, sizeof(mv));
  compile("loops.onnx", "M=M.npy", NULL, NULL);
  char *text = disasm();
  assert_null(strstr(text, "read_if_cond")); /* unrolled */
  free(text);
  static const float s0[3] = {1, -1, 0.5f}, x[3] = {0.25f, 2, -1};
  write_npy("s0.npy", "<f4", 1, k_d23 + 1, s0, sizeof(s0));
  write_npy("x.npy", "<f4", 1, k_d23 + 1, x, sizeof(x));
  const char *inputs[] = {"s0=s0.npy", "x=x.npy", NULL};
  run(inputs);
  float s[3], zs[12], ws[3], wz[12];
  memcpy(ws, s0, sizeof(ws));
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 3; j++) {
      ws[j] = ws[j] * 2 + x[j];
      wz[i * 3 + j] = ws[j] + (float)i;
    }
  read_out("s", s, 3);
  read_out("zs", zs, 12);
  expect_close(s, ws, 3, "final state");
  expect_close(zs, wz, 12, "scan output");
}

/* Scan (opset 11) over x [4, 3] in reverse, the scan output stacked on
 * axis 1: s += x_t, z_t = s * x_t. */
static void test_scan_reverse_axis(void **state) {
  (void)state;
  pb_t g = {0}, body = {0}, attrs = {0};
  const char *sx[2] = {"s_in", "xt"}, *so[1] = {"s_out"}, *sz[2] = {"s_out", "xt"}, *z[1] = {"z"};
  node(&body, "Add", sx, 2, so, 1, NULL);
  node(&body, "Mul", sz, 2, z, 1, NULL);
  pb_str(&body, 2, "body");
  vi(&body, 11, "s_in", ELEM_FLOAT, 1, k_d23 + 1);
  vi(&body, 11, "xt", ELEM_FLOAT, 1, k_d23 + 1);
  vi(&body, 12, "s_out", ELEM_FLOAT, 1, k_d23 + 1);
  vi(&body, 12, "z", ELEM_FLOAT, 1, k_d23 + 1);
  attr_graph(&attrs, "body", &body);
  attr_int(&attrs, "num_scan_inputs", 1);
  attr_ints(&attrs, "scan_input_directions", 1);
  attr_ints(&attrs, "scan_output_axes", 1);
  const char *in[2] = {"s0", "x"}, *out[2] = {"s", "zs"};
  node(&g, "Scan", in, 2, out, 2, &attrs);
  pb_str(&g, 2, "scan");
  const int64_t xd[2] = {4, 3}, zd[2] = {3, 4};
  vi(&g, 11, "s0", ELEM_FLOAT, 1, k_d23 + 1);
  vi(&g, 11, "x", ELEM_FLOAT, 2, xd);
  vi(&g, 12, "s", ELEM_FLOAT, 1, k_d23 + 1);
  vi(&g, 12, "zs", ELEM_FLOAT, 2, zd);
  pb_t m = onnx_model_of(&g, 11);
  write_model("scan.onnx", &m);
  compile("scan.onnx", NULL, NULL, NULL);
  static const float s0[3] = {1, 2, 3}, x[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  write_npy("s0.npy", "<f4", 1, k_d23 + 1, s0, sizeof(s0));
  write_npy("x.npy", "<f4", 2, xd, x, sizeof(x));
  const char *inputs[] = {"s0=s0.npy", "x=x.npy", NULL};
  run(inputs);
  float s[3], zs[12], ws[3], wz[12];
  memcpy(ws, s0, sizeof(ws));
  for (int t = 0; t < 4; t++) {
    int row = 3 - t; /* reversed */
    for (int j = 0; j < 3; j++) {
      ws[j] += x[row * 3 + j];
      wz[j * 4 + t] = ws[j] * x[row * 3 + j]; /* axis 1: [3, 4] */
    }
  }
  read_out("s", s, 3);
  read_out("zs", zs, 12);
  expect_close(s, ws, 3, "final state");
  expect_close(zs, wz, 12, "scan output on axis 1");
}

/* ---------------------------------------------------------------------------
 * Leniency
 */

/* y = Relu(x) declared [3, 2] while it is [2, 3]: onnxruntime ignores the
 * declaration, so does the compiler, with a warning. */
static void test_declared_output_shape(void **state) {
  (void)state;
  pb_t g = {0};
  const char *x[1] = {"x"}, *y[1] = {"y"};
  node(&g, "Relu", x, 1, y, 1, NULL);
  pb_str(&g, 2, "decl");
  const int64_t d32[2] = {3, 2};
  vi(&g, 11, "x", ELEM_FLOAT, 2, k_d23);
  vi(&g, 12, "y", ELEM_FLOAT, 2, d32);
  pb_t m = onnx_model_of(&g, 17);
  write_model("decl.onnx", &m);
  char *err = NULL;
  compile("decl.onnx", NULL, NULL, &err);
  const char *want =
      "vmclient: compile: compiling 'decl.onnx': warning: graph output 'y': the model declares "
      "shape [3,2], the graph computes [2,3]: the computed shape is used, as onnxruntime does\n";
  if (strcmp(err, want) != 0) fail_msg("stderr [%s], expected [%s]", err, want);
  free(err);
  static const float xv[6] = {1, -2, 3, -4, 5, -6}, wv[6] = {1, 0, 3, 0, 5, 0};
  write_npy("x.npy", "<f4", 2, k_d23, xv, sizeof(xv));
  const char *in[] = {"x=x.npy", NULL};
  run(in);
  float got[6];
  read_out("y", got, 6);
  expect_close(got, wv, 6, "relu");
}

static int setup(void **state) {
  (void)state;
  if (run_proc_setup("client/vmclient", g_vmclient, sizeof(g_vmclient), "vmrpc-onnx-ctl-", g_dir,
                     sizeof(g_dir)) != 0)
    return -1;
  return agent_proc_start(&g_agent, NULL);
}

static int teardown(void **state) {
  (void)state;
  agent_proc_stop(&g_agent);
  run_proc_rmdir(g_dir);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_if_run_time),         cmocka_unit_test(test_if_folded_by_const),
      cmocka_unit_test(test_if_returns_views),
      cmocka_unit_test(test_if_nested),           cmocka_unit_test(test_if_branch_invalid_for_shapes),
      cmocka_unit_test(test_loop_run_time),
      cmocka_unit_test(test_loop_scan_outputs),   cmocka_unit_test(test_scan_reverse_axis),
      cmocka_unit_test(test_declared_output_shape),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
