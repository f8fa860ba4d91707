/* Models whose numbers are hostile: dims, shapes, strides, kernels, pads,
 * groups, steps and ranges at +-2^62, INT64_MIN, 0 and below, and
 * initializers whose dims overflow, are negative or outrun their data.
 * Each is refused by the compiler (vmcc_onnx_compile: the status code and
 * a message naming the node, the op and the value) and by the real
 * `vmclient compile` (exit 3, the same message on one stderr line); none
 * may crash, and the sanitizer build runs them all. A few extreme values
 * are valid ONNX (a Slice step of INT64_MIN): those compile, to the right
 * shape. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "helper_onnx_model.h"
#include "onnx.pb-c.h"
#include "run_proc.h"
#include "test_util.h"
#include "vm/executable.h"
#include "vmcompiler/onnx.h"

#define P62 ((int64_t)1 << 62)
#define I32 ((int64_t)INT32_MAX)

static char g_vmclient[4096];
static char g_dir[4096];

/* Attributes beyond mb_t's one per node: up to 8 on one node. */
typedef struct attrs {
  Onnx__AttributeProto a[8];
  Onnx__AttributeProto *p[8];
  int64_t ints[8][8];
} attrs_t;

static Onnx__AttributeProto *attr_add(attrs_t *s, Onnx__NodeProto *n, const char *name,
                                      Onnx__AttributeProto__AttributeType type) {
  if (n->attribute != s->p) n->n_attribute = 0;
  size_t k = n->n_attribute++;
  assert_true(k < 8);
  Onnx__AttributeProto *a = &s->a[k];
  onnx__attribute_proto__init(a);
  a->name = (char *)name;
  a->has_type = 1;
  a->type = type;
  s->p[k] = a;
  n->attribute = s->p;
  return a;
}

static void attr_int(attrs_t *s, Onnx__NodeProto *n, const char *name, int64_t v) {
  Onnx__AttributeProto *a = attr_add(s, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
  a->has_i = 1;
  a->i = v;
}

static void attr_ints(attrs_t *s, Onnx__NodeProto *n, const char *name, uint32_t k,
                      const int64_t *v) {
  Onnx__AttributeProto *a = attr_add(s, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
  int64_t *dst = s->ints[n->n_attribute - 1];
  memcpy(dst, v, k * sizeof(int64_t));
  a->n_ints = k;
  a->ints = dst;
}

static void attr_str(attrs_t *s, Onnx__NodeProto *n, const char *name, const char *v) {
  Onnx__AttributeProto *a = attr_add(s, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
  a->has_s = 1;
  a->s.data = (uint8_t *)v;
  a->s.len = strlen(v);
}

/* A 1-D int64 initializer of k values (data borrowed). */
static void ints_init(mb_t *m, const char *name, uint32_t k, const int64_t *v) {
  int64_t d[1] = {k};
  mb_init_raw(m, name, 7, 1, d, v, k * sizeof(int64_t));
}

/* A scalar int64 initializer (data borrowed). */
static void scalar_init(mb_t *m, const char *name, const int64_t *v) {
  mb_init_raw(m, name, 7, 0, NULL, v, sizeof(int64_t));
}

/* The model refused with code and a message holding each of want[] (NULL
 * ends): by vmcc_onnx_compile, and by `vmclient compile` with exit 3. */
static void expect_refused_at(mb_t *m, vm_code_t code, const char *const *want, int line) {
  size_t n;
  uint8_t *buf = mb_pack(m, &n);
  vm_executable_t *e = NULL;
  vm_status_t st = vmcc_onnx_compile(buf, n, NULL, NULL, &e, NULL);
  vm_executable_free(e);
  if (!st) fail_msg("line %d: compiled, expected %s", line, vm_code_name(code));
  char msg[1024];
  snprintf(msg, sizeof(msg), "%s", vm_status_message(st));
  vm_code_t got = vm_status_code(st);
  vm_status_free(st);
  if (got != code)
    fail_msg("line %d: got %s (%s), expected %s", line, vm_code_name(got), msg, vm_code_name(code));
  for (const char *const *w = want; *w; w++)
    if (!strstr(msg, *w)) fail_msg("line %d: message '%s' lacks '%s'", line, msg, *w);

  char path[4200];
  snprintf(path, sizeof(path), "%s/model.onnx", g_dir);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(buf, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
  free(buf);
  const char *args[] = {"compile", "-o", "model.vmx", path, NULL};
  run_result_t r;
  run_proc(g_vmclient, args, g_dir, NULL, 0, NULL, 60, &r);
  if (!WIFEXITED(r.status))
    fail_msg("line %d: vmclient compile killed by signal %d", line, WTERMSIG(r.status));
  if (WEXITSTATUS(r.status) != 3)
    fail_msg("line %d: vmclient compile: exit %d, expected 3; stderr: %s", line,
             WEXITSTATUS(r.status), r.err);
  if (strncmp(r.err, "vmclient: ", 10) != 0 || memchr(r.err, '\n', r.err_n) != r.err + r.err_n - 1)
    fail_msg("line %d: stderr is not one 'vmclient: ' line: [%s]", line, r.err);
  for (const char *const *w = want; *w; w++)
    if (!strstr(r.err, *w)) fail_msg("line %d: stderr '%s' lacks '%s'", line, r.err, *w);
  run_result_free(&r);
}
#define EXPECT_REFUSED(m, code, ...) \
  expect_refused_at((m), (code), (const char *const[]){__VA_ARGS__, NULL}, __LINE__)

static const int64_t k_x4[4] = {1, 3, 8, 8};

/* y = Reshape(x[1,3,8,8], shape). */
static void reshape_model(mb_t *m, const int64_t *shape, uint32_t k) {
  mb_init(m, 13);
  mb_input(m, "x", 4, k_x4);
  mb_output(m, "y", 1, (int64_t[]){192});
  ints_init(m, "shape", k, shape);
  mb_node(m, "Reshape", "r", "x", "shape", "y");
}

static void test_reshape(void **state) {
  mb_t m;
  /* the fuzzer's finding: the product of the dims wrapped (signed overflow) */
  static const int64_t huge[3] = {I32, I32, I32};
  reshape_model(&m, huge, 3);
  EXPECT_REFUSED(&m, VM_INVALID_ARGUMENT,
                 "node 'r' (Reshape): shape [2147483647,2147483647,2147483647]",
                 "overflows 64 bits");
  static const int64_t p62[2] = {P62, 3};
  reshape_model(&m, p62, 2);
  EXPECT_REFUSED(&m, VM_INVALID_ARGUMENT, "node 'r' (Reshape): shape[0] = 4611686018427387904");
  static const int64_t minv[2] = {INT64_MIN, -1};
  reshape_model(&m, minv, 2);
  EXPECT_REFUSED(&m, VM_INVALID_ARGUMENT, "node 'r' (Reshape): shape[0] = -9223372036854775808");
  /* -1 next to dims whose product is 0: nothing to infer from */
  static const int64_t zero[3] = {-1, 0, I32};
  reshape_model(&m, zero, 3);
  Onnx__NodeProto *n = &m.nodes[0];
  attrs_t at;
  attr_int(&at, n, "allowzero", 1);
  m.opset.version = 14;
  EXPECT_REFUSED(&m, VM_INVALID_ARGUMENT, "node 'r' (Reshape): cannot infer the -1 dim");
}

/* y = Expand(x[1,3,8,8], shape). */
static void expand_model(mb_t *m, const int64_t *shape, uint32_t k) {
  mb_init(m, 13);
  mb_input(m, "x", 4, k_x4);
  mb_output(m, "y", 4, k_x4);
  ints_init(m, "shape", k, shape);
  mb_node(m, "Expand", "e", "x", "shape", "y");
}

static void test_expand(void **state) {
  mb_t m;
  /* was exit 1: "output 'y' was not defined" */
  static const int64_t p62[4] = {P62, 3, 8, 8};
  expand_model(&m, p62, 4);
  EXPECT_REFUSED(&m, VM_INVALID_ARGUMENT,
                 "node 'e' (Expand): output [4611686018427387904,3,8,8]: dim 0 is "
                 "4611686018427387904");
  static const int64_t wide[6] = {I32, I32, I32, 3, 8, 8};
  expand_model(&m, wide, 6);
  EXPECT_REFUSED(&m, VM_INVALID_ARGUMENT, "node 'e' (Expand): output [2147483647,2147483647,",
                 "the product of its dims overflows 64 bits");
  static const int64_t neg[4] = {INT64_MIN, 3, 8, 8};
  expand_model(&m, neg, 4);
  EXPECT_REFUSED(&m, VM_INVALID_ARGUMENT,
                 "node 'e' (Expand): shape [-9223372036854775808,3,8,8]: dim 0 is negative");
}

/* Tile (onnx_ops_compose.c): repeats whose product with a dim overflows
 * 64 bits, or gives a dim beyond 2^31-1, are refused at the node. */
static void test_tile(void **state) {
  mb_t m;
  static const int64_t rep[4] = {P62, P62, 1, 1}, rep2[4] = {1, I32, 1, 1};
  expand_model(&m, rep, 4);
  m.nodes[0].op_type = "Tile";
  m.nodes[0].name = "t";
  EXPECT_REFUSED(&m, VM_INVALID_ARGUMENT, "node 't' (Tile): output dim 1 overflows");
  expand_model(&m, rep2, 4);
  m.nodes[0].op_type = "Tile";
  m.nodes[0].name = "t";
  EXPECT_REFUSED(&m, VM_INVALID_ARGUMENT,
                 "node 't' (Tile): output [1,6442450941,8,8]: dim 1 is 6442450941");
}

static void test_constant_of_shape(void **state) {
  mb_t m;
  static const int64_t wide[8] = {I32, I32, I32, I32, I32, I32, I32, I32};
  static const int64_t p62[2] = {P62, 2};
  static const int64_t neg[1] = {INT64_MIN};
  const int64_t *shapes[3] = {wide, p62, neg};
  uint32_t ks[3] = {8, 2, 1};
  const char *want[3] = {"the product of its dims overflows 64 bits",
                         "shape [4611686018427387904,2]: dim 0 is 4611686018427387904",
                         "shape [-9223372036854775808]: dim 0 is -9223372036854775808"};
  for (int i = 0; i < 3; i++) {
    mb_init(&m, 13);
    mb_output(&m, "y", 1, (int64_t[]){1});
    ints_init(&m, "shape", ks[i], shapes[i]);
    mb_node(&m, "ConstantOfShape", "c", "shape", NULL, "y");
    EXPECT_REFUSED(&m, VM_INVALID_ARGUMENT, "node 'c' (ConstantOfShape): ", want[i]);
  }
}

static void range_model(mb_t *m, const int64_t *s, const int64_t *l, const int64_t *d) {
  mb_init(m, 13);
  mb_output(m, "y", 1, (int64_t[]){-1});
  scalar_init(m, "s", s);
  scalar_init(m, "l", l);
  scalar_init(m, "d", d);
  Onnx__NodeProto *n = mb_node(m, "Range", "rg", "s", "l", "y");
  mb_node_input(n, "d");
}

static void test_range(void **state) {
  mb_t m;
  static const int64_t mn = INT64_MIN, mx = INT64_MAX, one = 1, zero = 0, p62 = P62, m62 = -P62;
  /* was RESOURCE_EXHAUSTED "range too long", counted in doubles */
  range_model(&m, &mn, &mx, &one);
  EXPECT_REFUSED(&m, VM_INVALID_ARGUMENT,
                 "node 'rg' (Range): limit 9223372036854775807 - start -9223372036854775808 "
                 "overflows 64 bits");
  range_model(&m, &m62, &p62, &zero);
  EXPECT_REFUSED(&m, VM_INVALID_ARGUMENT, "node 'rg' (Range): delta is 0");
  /* exact, representable, but far too long to fold */
  range_model(&m, &zero, &p62, &one);
  EXPECT_REFUSED(&m, VM_RESOURCE_EXHAUSTED, "node 'rg' (Range): a range of ",
                 "elements (the compiler folds at most");
}

/* y = Resize(x[1,3,8,8], "", "", sizes). */
static void resize_sizes_model(mb_t *m, const int64_t *sizes) {
  mb_init(m, 13);
  mb_input(m, "x", 4, k_x4);
  mb_output(m, "y", 4, k_x4);
  ints_init(m, "sizes", 4, sizes);
  Onnx__NodeProto *n = mb_node(m, "Resize", "rs", "x", "", "y");
  mb_node_input(n, "");
  mb_node_input(n, "sizes");
}

static void test_resize(void **state) {
  mb_t m;
  attrs_t at;
  static const int64_t sizes[4] = {1, 3, P62, 8}, nsz[4] = {1, 3, INT64_MIN, 8};
  resize_sizes_model(&m, sizes);
  EXPECT_REFUSED(&m, VM_INVALID_ARGUMENT, "node 'rs' (Resize): sizes[2] = 4611686018427387904");
  resize_sizes_model(&m, nsz);
  EXPECT_REFUSED(&m, VM_INVALID_ARGUMENT, "node 'rs' (Resize): sizes[2] = -9223372036854775808");
  /* an roi of infinities on an empty axis: 0 x inf is NaN, no size */
  static const int64_t x0[4] = {1, 1, 0, 4};
  static const float roi[8] = {0, 0, 0, 0, 1, 1, INFINITY, 1};
  static const float sc[4] = {1, 1, 2, 1};
  mb_init(&m, 13);
  mb_input(&m, "x", 4, x0);
  mb_output(&m, "y", 4, x0);
  mb_init_raw(&m, "roi", 1, 1, (int64_t[]){8}, roi, sizeof(roi));
  mb_init_raw(&m, "sc", 1, 1, (int64_t[]){4}, sc, sizeof(sc));
  Onnx__NodeProto *n = mb_node(&m, "Resize", "rs", "x", "roi", "y");
  mb_node_input(n, "sc");
  attr_str(&at, n, "coordinate_transformation_mode", "tf_crop_and_resize");
  EXPECT_REFUSED(&m, VM_INVALID_ARGUMENT, "node 'rs' (Resize): axis 2: output size ", "nan");
}

static void pad_model(mb_t *m, const int64_t *pads) {
  mb_init(m, 13);
  mb_input(m, "x", 4, k_x4);
  mb_output(m, "y", 4, k_x4);
  ints_init(m, "pads", 8, pads);
  mb_node(m, "Pad", "p", "x", "pads", "y");
}

static void test_pad(void **state) {
  mb_t m;
  static const int64_t big[8] = {0, 0, 0, 0, 0, 0, P62, 0};
  pad_model(&m, big);
  EXPECT_REFUSED(&m, VM_INVALID_ARGUMENT,
                 "node 'p' (Pad): pads 0 and 4611686018427387904 on axis 2 of size 8");
  static const int64_t neg[8] = {0, 0, INT64_MIN, 0, 0, 0, 0, 0};
  pad_model(&m, neg);
  EXPECT_REFUSED(&m, VM_INVALID_ARGUMENT,
                 "node 'p' (Pad): pads -9223372036854775808 and 0 on axis 2 of size 8");
}

/* y = Slice(x[2,4], starts, ends, axes [1], steps). */
static void slice_model(mb_t *m, const int64_t *se, const int64_t *step, int64_t out1) {
  mb_init(m, 13);
  mb_input(m, "x", 2, (int64_t[]){2, 4});
  mb_output(m, "y", 2, (int64_t[]){2, out1});
  static const int64_t ax[1] = {1};
  ints_init(m, "st", 1, &se[0]);
  ints_init(m, "en", 1, &se[1]);
  ints_init(m, "ax", 1, ax);
  ints_init(m, "sp", 1, step);
  Onnx__NodeProto *n = mb_node(m, "Slice", "sl", "x", "st", "y");
  mb_node_input(n, "en");
  mb_node_input(n, "ax");
  mb_node_input(n, "sp");
}

static void test_slice(void **state) {
  mb_t m;
  static const int64_t se[2] = {0, 4}, zero = 0;
  slice_model(&m, se, &zero, 4);
  EXPECT_REFUSED(&m, VM_INVALID_ARGUMENT, "node 'sl' (Slice): a step is 0");
  /* extreme steps are valid ONNX: one element each, the declared [2, 1] */
  static const int64_t back[2] = {-1, INT64_MIN}, fwd[2] = {INT64_MIN, INT64_MAX};
  static const int64_t smin = INT64_MIN, smax = INT64_MAX, sm62 = -P62, s62 = P62;
  const int64_t *ses[4] = {back, fwd, back, fwd};
  const int64_t *steps[4] = {&smin, &smax, &sm62, &s62};
  for (int i = 0; i < 4; i++) {
    slice_model(&m, ses[i], steps[i], 1);
    size_t n;
    uint8_t *buf = mb_pack(&m, &n);
    vm_executable_t *e = NULL;
    ASSERT_OK(vmcc_onnx_compile(buf, n, NULL, NULL, &e, NULL));
    vm_executable_free(e);
    free(buf);
  }
}

/* y = Conv or ConvTranspose(x, W[co or ci, 4, 3, 3]) with attributes. */
static Onnx__NodeProto *conv_model(mb_t *m, const char *op, int64_t c, const int64_t *wd) {
  mb_init(m, 13);
  mb_input(m, "x", 4, (int64_t[]){1, c, 8, 8});
  mb_input(m, "W", 4, wd);
  mb_output(m, "y", 4, (int64_t[]){-1, -1, -1, -1});
  return mb_node(m, op, "cv", "x", "W", "y");
}

/* One attribute of a node and the message it makes. */
typedef struct attr_case {
  const char *attr;
  int64_t v[4];
  uint32_t k; /* 0: the int v[0] */
  const char *want;
} attr_case_t;

/* Conv or ConvTranspose of x[1, c, 8, 8] and W of dims wd, with one
 * attribute of each case, refused with "node 'cv' (OP): <want>". */
static void conv_cases(const char *op, int64_t c, const int64_t *wd, const attr_case_t *cases,
                       size_t n) {
  for (size_t k = 0; k < n; k++) {
    mb_t m;
    attrs_t at;
    Onnx__NodeProto *nd = conv_model(&m, op, c, wd);
    if (cases[k].k)
      attr_ints(&at, nd, cases[k].attr, cases[k].k, cases[k].v);
    else
      attr_int(&at, nd, cases[k].attr, cases[k].v[0]);
    char pre[64];
    snprintf(pre, sizeof(pre), "node 'cv' (%s): ", op);
    EXPECT_REFUSED(&m, VM_INVALID_ARGUMENT, pre, cases[k].want);
  }
}

static void test_conv(void **state) {
  static const int64_t w0[4] = {0, 4, 3, 3}, w1[4] = {2, 1, 3, 3};
  /* no channels: every group divides them, and group x 4 wrapped */
  static const attr_case_t none[] = {
      {"group", {P62}, 0, "group 4611686018427387904 does not fit C=0"}};
  conv_cases("Conv", 0, w0, none, 1);
  static const attr_case_t two[] = {
      {"group", {0}, 0, "group 0 does not fit"},
      {"group", {-1}, 0, "group -1 does not fit"},
      {"group", {INT64_MIN}, 0, "group -9223372036854775808 does not fit"},
  };
  conv_cases("Conv", 2, w1, two, 3);
  static const attr_case_t one[] = {
      {"strides", {0, 1}, 2, "spatial axis 0: kernel 3, stride 0"},
      {"dilations",
       {1, INT64_MIN},
       2,
       "spatial axis 1: kernel 3, stride 1, dilation -9223372036854775808"},
      {"pads",
       {0, P62, 0, 0},
       4,
       "spatial axis 1: kernel 3, stride 1, dilation 1, pads 4611686018427387904 and 0"},
      {"kernel_shape", {-P62, 3}, 2, "kernel_shape differs"},
  };
  conv_cases("Conv", 1, w1, one, 4);
}

static void test_conv_transpose(void **state) {
  static const int64_t w0[4] = {0, 4, 3, 3}, w1[4] = {1, 2, 3, 3};
  /* ci = C = 0: every group divides them, and group x 4 wrapped */
  static const attr_case_t none[] = {
      {"group",
       {P62},
       0,
       "group 4611686018427387904 times W's 4 output channels per group overflows"}};
  conv_cases("ConvTranspose", 0, w0, none, 1);
  static const attr_case_t one[] = {
      {"group", {0}, 0, "W's 1 input channels do not match C=1 and group 0"},
      {"strides", {-1, 1}, 2, "spatial axis 0: stride -1"},
      {"output_padding",
       {0, P62},
       2,
       "spatial axis 1: stride 1, dilation 1, output_padding 4611686018427387904"},
      {"pads", {INT64_MIN, 0, 0, 0}, 4, "pads -9223372036854775808 and 0 on spatial axis 0"},
      {"output_shape", {8, P62}, 2, "output_shape value 4611686018427387904"},
  };
  conv_cases("ConvTranspose", 1, w1, one, 5);
}

static void test_pooling(void **state) {
  mb_t m;
  attrs_t at;
  static const char *const ops[2] = {"MaxPool", "AveragePool"};
  for (int i = 0; i < 2; i++) {
    char pre[64];
    snprintf(pre, sizeof(pre), "node 'pl' (%s): spatial axis ", ops[i]);
    static const attr_case_t cases[] = {
        {"kernel_shape", {P62, 2}, 2, "0: kernel 4611686018427387904"},
        {"kernel_shape", {2, 0}, 2, "1: kernel 0"},
        {"kernel_shape", {INT64_MIN, 2}, 2, "0: kernel -9223372036854775808"},
        {"strides", {0, 1}, 2, "0: kernel 2, stride 0"},
        {"strides", {1, -P62}, 2, "1: kernel 2, stride -4611686018427387904"},
        {"pads",
         {0, 0, INT64_MIN, 0},
         4,
         "0: kernel 2, stride 1, dilation 1, pads 0 and "
         "-9223372036854775808"},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
      mb_init(&m, 13);
      mb_input(&m, "x", 4, k_x4);
      mb_output(&m, "y", 4, (int64_t[]){-1, -1, -1, -1});
      Onnx__NodeProto *n = mb_node(&m, ops[i], "pl", "x", NULL, "y");
      if (strcmp(cases[k].attr, "kernel_shape") != 0)
        attr_ints(&at, n, "kernel_shape", 2, (int64_t[]){2, 2});
      attr_ints(&at, n, cases[k].attr, cases[k].k, cases[k].v);
      EXPECT_REFUSED(&m, VM_INVALID_ARGUMENT, pre, cases[k].want);
    }
  }
}

/* Initializers: dims whose product overflows, negative dims, data shorter
 * than the dims say. */
static void test_initializers(void **state) {
  mb_t m;
  static const float w[4] = {1, 2, 3, 4};
  mb_init(&m, 13);
  mb_input(&m, "x", 1, (int64_t[]){4});
  mb_output(&m, "y", 1, (int64_t[]){4});
  mb_node(&m, "Add", "a", "x", "w", "y");
  Onnx__TensorProto *t = mb_init_raw(&m, "w", 1, 4, (int64_t[]){I32, I32, I32, I32}, w, 16);
  EXPECT_REFUSED(&m, VM_INVALID_ARGUMENT,
                 "initializer 'w': dims [2147483647,2147483647,2147483647,2147483647]: their "
                 "product overflows 64 bits");
  t->n_dims = 1;
  t->dims[0] = -P62;
  EXPECT_REFUSED(&m, VM_INVALID_ARGUMENT, "initializer 'w': dim 0 is -4611686018427387904");
  t->dims[0] = INT64_MIN;
  EXPECT_REFUSED(&m, VM_INVALID_ARGUMENT, "initializer 'w': dim 0 is -9223372036854775808");
  t->dims[0] = P62;
  EXPECT_REFUSED(&m, VM_INVALID_ARGUMENT, "initializer 'w': dim 0 is 4611686018427387904");
  t->dims[0] = 4;
  t->raw_data.len = 12;
  EXPECT_REFUSED(&m, VM_INVALID_ARGUMENT, "initializer 'w': raw_data has 12 bytes, expected 16");
  t->has_raw_data = 0;
  t->n_float_data = 3;
  t->float_data = (float *)w;
  EXPECT_REFUSED(&m, VM_INVALID_ARGUMENT, "initializer 'w': 3 values for 4 elements");
}

/* y = LSTM(x [5, 1, 3], W, R) with W [1, 4h, 3] and R [1, 4h, h] as
 * run-time inputs (h = 2 unless the test lies), one attribute set. */
static Onnx__NodeProto *lstm_model(mb_t *m, const char *op, const int64_t *xd, const int64_t *wd,
                                   const int64_t *rd) {
  mb_init(m, 14);
  mb_input(m, "x", 3, xd);
  mb_input(m, "w", 3, wd);
  mb_input(m, "r", 3, rd);
  mb_output(m, "y", 4, (int64_t[]){5, 1, 1, 2});
  Onnx__NodeProto *n = mb_node(m, op, "l", "x", "w", "y");
  mb_node_input(n, "r");
  return n;
}

static void test_recurrent(void **state) {
  mb_t m;
  mb_attrs_t at;
  static const int64_t x5[3] = {5, 1, 3}, w8[3] = {1, 8, 3}, r8[3] = {1, 8, 2};
  static const struct {
    int64_t h;
    const char *want;
  } hs[] = {
      {P62, "node 'l' (LSTM): hidden_size 4611686018427387904: expected 1 to 2147483647"},
      {INT64_MIN, "node 'l' (LSTM): hidden_size -9223372036854775808: expected 1 to 2147483647"},
      {0, "node 'l' (LSTM): hidden_size 0: expected 1 to 2147483647"},
      {3, "node 'l' (LSTM): W [1,8,3] and R [1,8,2] do not fit 1 direction(s), hidden_size 3 "
          "and input_size 3"},
  };
  for (size_t i = 0; i < sizeof(hs) / sizeof(hs[0]); i++) {
    Onnx__NodeProto *n = lstm_model(&m, "LSTM", x5, w8, r8);
    mb_attrs_int(&at, n, "hidden_size", hs[i].h);
    EXPECT_REFUSED(&m, VM_INVALID_ARGUMENT, hs[i].want);
  }
  /* X [T, B, 1] with T*B rows: X W^T [1, T*B, 4096] past a dim, then past
   * 2^40 elements */
  static const int64_t xbig[3] = {65536, 32768, 1}, xbig2[3] = {32768, 32768, 1};
  static const int64_t wbig[3] = {1, 4096, 1}, rbig[3] = {1, 4096, 1024};
  lstm_model(&m, "LSTM", xbig, wbig, rbig);
  EXPECT_REFUSED(&m, VM_INVALID_ARGUMENT,
                 "node 'l' (LSTM): X W^T [1,2147483648,4096]: dim 1 is 2147483648");
  lstm_model(&m, "LSTM", xbig2, wbig, rbig);
  EXPECT_REFUSED(&m, VM_RESOURCE_EXHAUSTED,
                 "node 'l' (LSTM): X W^T [1,1073741824,4096]: 4398046511104 elements");
  /* a constant sequence length outside 0..T */
  static const int32_t lens_hi[1] = {7}, lens_neg[1] = {INT32_MIN};
  const int32_t *lens[2] = {lens_hi, lens_neg};
  static const char *const lens_want[2] = {
      "node 'l' (LSTM): sequence_lens[0] is 7: a length is 0 to the 5 time steps",
      "node 'l' (LSTM): sequence_lens[0] is -2147483648: a length is 0 to the 5 time steps"};
  for (int i = 0; i < 2; i++) {
    Onnx__NodeProto *n = lstm_model(&m, "LSTM", x5, w8, r8);
    mb_node_input(n, "");
    mb_node_input(n, "lens");
    mb_init_raw(&m, "lens", 6, 1, (int64_t[]){1}, lens[i], sizeof(int32_t));
    EXPECT_REFUSED(&m, VM_INVALID_ARGUMENT, lens_want[i]);
  }
  /* an initial_h of another shape */
  Onnx__NodeProto *n = lstm_model(&m, "LSTM", x5, w8, r8);
  static const float h0[4] = {0};
  mb_node_input(n, "");
  mb_node_input(n, "");
  mb_node_input(n, "h0");
  mb_init_raw(&m, "h0", 1, 3, (int64_t[]){2, 1, 2}, h0, sizeof(h0));
  EXPECT_REFUSED(&m, VM_INVALID_ARGUMENT,
                 "node 'l' (LSTM): initial_h 'h0' has shape [2,1,2], expected [1,1,2]");
  /* attributes: values outside their meaning */
  static const char *const gelu[3] = {"Gelu", "Tanh", "Tanh"}, *const two[2] = {"Tanh", "Tanh"};
  n = lstm_model(&m, "LSTM", x5, w8, r8);
  mb_attrs_strs(&at, n, "activations", 3, gelu);
  EXPECT_REFUSED(&m, VM_UNIMPLEMENTED,
                 "node 'l' (LSTM): attribute 'activations' = Gelu: supported: Relu, Tanh, "
                 "Sigmoid, Affine");
  n = lstm_model(&m, "LSTM", x5, w8, r8);
  mb_attrs_strs(&at, n, "activations", 2, two);
  EXPECT_REFUSED(&m, VM_INVALID_ARGUMENT,
                 "node 'l' (LSTM): attribute 'activations' has 2 functions, expected 3");
  n = lstm_model(&m, "LSTM", x5, w8, r8);
  mb_attrs_float(&at, n, "clip", -1.0f);
  EXPECT_REFUSED(&m, VM_UNIMPLEMENTED,
                 "node 'l' (LSTM): attribute 'clip' = -1: supported: a threshold above 0");
  n = lstm_model(&m, "LSTM", x5, w8, r8);
  mb_attrs_float(&at, n, "clip", NAN);
  EXPECT_REFUSED(&m, VM_UNIMPLEMENTED, "node 'l' (LSTM): attribute 'clip' = nan");
  n = lstm_model(&m, "LSTM", x5, w8, r8);
  mb_attrs_str(&at, n, "direction", "sideways");
  EXPECT_REFUSED(&m, VM_UNIMPLEMENTED,
                 "node 'l' (LSTM): attribute 'direction' = sideways: supported: forward, "
                 "reverse, bidirectional");
  n = lstm_model(&m, "GRU", x5, (int64_t[]){1, 6, 3}, (int64_t[]){1, 6, 2});
  mb_attrs_int(&at, n, "layout", INT64_MIN);
  EXPECT_REFUSED(&m, VM_UNIMPLEMENTED,
                 "node 'l' (GRU): attribute 'layout' = -9223372036854775808: supported: 0, 1");
  /* DynamicQuantizeLSTM: W [1, 3, 8] at run time; then a constant one
   * whose scale has 3 values for 1 direction */
  n = lstm_model(&m, "DynamicQuantizeLSTM", x5, (int64_t[]){1, 3, 8}, (int64_t[]){1, 2, 8});
  n->domain = "com.microsoft";
  static char *dq_in[12] = {"x", "w", "r", "", "", "", "", "", "ws", "wz", "rs", "rz"};
  n->input = dq_in;
  n->n_input = 12;
  static const float sc[3] = {0.1f, 0.1f, 0.1f};
  static const int8_t zp[3] = {0}, q[24] = {0};
  mb_init_raw(&m, "ws", 1, 1, (int64_t[]){1}, sc, sizeof(float));
  mb_init_raw(&m, "wz", 3, 1, (int64_t[]){1}, zp, 1);
  mb_init_raw(&m, "rs", 1, 1, (int64_t[]){3}, sc, sizeof(sc));
  mb_init_raw(&m, "rz", 3, 1, (int64_t[]){3}, zp, 3);
  EXPECT_REFUSED(&m, VM_UNIMPLEMENTED,
                 "node 'l' (DynamicQuantizeLSTM): W, its scale and its zero point must be "
                 "constants");
  m.graph.n_input = 1; /* w and r become int8 initializers */
  mb_init_raw(&m, "w", 3, 3, (int64_t[]){1, 3, 8}, q, 24);
  mb_init_raw(&m, "r", 3, 3, (int64_t[]){1, 2, 8}, q, 16);
  EXPECT_REFUSED(&m, VM_INVALID_ARGUMENT,
                 "node 'l' (DynamicQuantizeLSTM): R's scale [3] and zero point [3]: expected [1] "
                 "or [1,8] each");
}

static int setup(void **state) {
  (void)state;
  return run_proc_setup("client/vmclient", g_vmclient, sizeof(g_vmclient), "vmrpc_hostile_", g_dir,
                        sizeof(g_dir));
}

static int teardown(void **state) {
  (void)state;
  char p[4200];
  snprintf(p, sizeof(p), "%s/model.onnx", g_dir);
  unlink(p);
  snprintf(p, sizeof(p), "%s/model.vmx", g_dir);
  unlink(p);
  return rmdir(g_dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reshape), cmocka_unit_test(test_expand),
      cmocka_unit_test(test_tile),    cmocka_unit_test(test_constant_of_shape),
      cmocka_unit_test(test_range),   cmocka_unit_test(test_resize),
      cmocka_unit_test(test_pad),     cmocka_unit_test(test_slice),
      cmocka_unit_test(test_conv),    cmocka_unit_test(test_conv_transpose),
      cmocka_unit_test(test_pooling), cmocka_unit_test(test_initializers),
      cmocka_unit_test(test_recurrent),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
