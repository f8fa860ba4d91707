/* The ONNX node test cases (Debian libonnx-testdata: one model of a single
 * node, its inputs and expected outputs as TensorProto files) compiled with
 * the ONNX front end and run in-process on the OpenCL device (PoCL in CI),
 * in the execution mode of this run. Every single-node case of the ops the
 * importer supports runs; a case may fail only if it is listed with its
 * reason in tests/compiler/onnx_node_known_failures.txt (docs/onnx.md
 * carries the same table). Prints a table of op, cases and passes.
 *
 * As the cases feed every operand as a graph input, input 0 is the run-time
 * input and the others are bound as constants (what vmclient compile
 * --const does). Outputs compare as onnxruntime's test runner does: rtol
 * 1e-3, atol 1e-5, NaN equal to NaN; integers and bools exactly.
 *
 * VMRPC_ONNX_TESTDATA overrides the folder (default
 * /usr/share/libonnx-testdata/data/node) and VMRPC_ONNX_KNOWN_FAILURES the
 * list (scripts/onnx-node-1.23.sh runs the onnx 1.23 cases with
 * tests/compiler/onnx123_node_known_failures.txt); VMRPC_ONNX_CASE runs the cases
 * whose name contains it and prints why each fails. One OpenCL device for
 * the whole suite: programs are built once per kernel family.
 */
#include <dirent.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "helper_exec.h"
#include "helper_onnx_model.h"
#include "test_util.h"
#include "vm/allocator.h"
#include "vm/vm.h"
#include "vmcl/vmcl.h"
#include "vmcompiler/onnx.h"

#define RTOL 1e-3
#define ATOL 1e-5
#define MAX_CASES 2048
#define MAX_IO 16

/* Every op the importer supports (docs/onnx.md). */
static const char *const k_ops[] = {
    "Gemm",
    "MatMul",
    "Conv",
    "ConvTranspose",
    "BatchNormalization",
    "Relu",
    "LeakyRelu",
    "Sigmoid",
    "Tanh",
    "HardSigmoid",
    "HardSwish",
    "Clip",
    "Erf",
    "Gelu",
    "Elu",
    "Selu",
    "Softplus",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Max",
    "Min",
    "Mod",
    "Sqrt",
    "Exp",
    "Log",
    "Neg",
    "Abs",
    "Reciprocal",
    "Floor",
    "Ceil",
    "Round",
    "Sin",
    "Cos",
    "Equal",
    "Less",
    "Greater",
    "LessOrEqual",
    "GreaterOrEqual",
    "And",
    "Or",
    "Xor",
    "Not",
    "Where",
    "MaxPool",
    "AveragePool",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "Softmax",
    "LogSoftmax",
    "LayerNormalization",
    "ReduceMean",
    "ReduceSum",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "Reshape",
    "Flatten",
    "Transpose",
    "Concat",
    "Split",
    "Slice",
    "Squeeze",
    "Unsqueeze",
    "Gather",
    "Pad",
    "Resize",
    "Expand",
    "Cast",
    "Identity",
    "Dropout",
    "Shape",
    "Size",
    "Constant",
    "ConstantOfShape",
    "Range",
    /* quantization (onnx_ops_quant.c) */
    "QuantizeLinear",
    "DequantizeLinear",
    "DynamicQuantizeLinear",
    "MatMulInteger",
    "ConvInteger",
    "QLinearConv",
    "QLinearMatMul",
    "RNN",
    "GRU",
    "LSTM",
    "If",
    "Loop",
    "Scan",
    /* onnx_ops_index.c */
    "CenterCropPad",
    "Compress",
    "GatherElements",
    "GatherND",
    "MaxUnpool",
    "OneHot",
    "ReverseSequence",
    "Scatter",
    "ScatterElements",
    "ScatterND",
    /* onnx_ops_compose.c */
    "Acos",
    "AffineGrid",
    "Acosh",
    "ArgMax",
    "ArgMin",
    "Attention",
    "Asin",
    "Asinh",
    "Atan",
    "Atanh",
    "BitShift",
    "BitwiseAnd",
    "BitwiseNot",
    "BitwiseOr",
    "BitwiseXor",
    "BlackmanWindow",
    "CastLike",
    "Celu",
    "Col2Im",
    "Cosh",
    "CumSum",
    "DepthToSpace",
    "DFT",
    "EyeLike",
    "GroupNormalization",
    "HammingWindow",
    "HannWindow",
    "Hardmax",
    "InstanceNormalization",
    "IsInf",
    "IsNaN",
    "LpNormalization",
    "LRN",
    "LpPool",
    "Mean",
    "MeanVarianceNormalization",
    "Mish",
    "NegativeLogLikelihoodLoss",
    "PRelu",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceSumSquare",
    "RMSNormalization",
    "RotaryEmbedding",
    "Shrink",
    "Sign",
    "Sinh",
    "SoftmaxCrossEntropyLoss",
    "Softsign",
    "SpaceToDepth",
    "Sum",
    "Swish",
    "SwiGLU",
    "Tan",
    "ThresholdedRelu",
    "Tile",
    "Trilu",
    "Upsample",
    /* onnx_ops_attention.c */
    "CausalConvWithState",
    "FlexAttention",
    "LinearAttention",
    "TfIdfVectorizer",
    /* onnx_ops_spatial.c */
    "DeformConv",
    "Det",
    "GridSample",
    "MelWeightMatrix",
    "RoiAlign",
    "STFT",
    /* onnx_ops_select.c */
    "CumProd",
    "TensorScatter",
    "TopK",
    "NonZero",
    "Unique",
    "NonMaxSuppression",
    "Einsum",
    /* the storage types */
    "BitCast",
};
#define NUM_OPS (sizeof(k_ops) / sizeof(k_ops[0]))

/* The 30 ops of issue 13's bar (docs/onnx.md): onnxruntime passes all
 * their cases but two. */
static const char *const k_bar_ops[] = {
    "Gemm",
    "MatMul",
    "Conv",
    "Relu",
    "Sigmoid",
    "Tanh",
    "Add",
    "Mul",
    "Sub",
    "Div",
    "MaxPool",
    "AveragePool",
    "GlobalAveragePool",
    "Softmax",
    "Reshape",
    "Flatten",
    "Transpose",
    "Concat",
    "BatchNormalization",
    "LayerNormalization",
    "Gelu",
    "Erf",
    "Clip",
    "Pad",
    "Gather",
    "Slice",
    "Squeeze",
    "Unsqueeze",
    "ReduceMean",
    "Resize",
};

static int is_bar_op(const char *op) {
  for (size_t i = 0; i < sizeof(k_bar_ops) / sizeof(k_bar_ops[0]); i++)
    if (strcmp(k_bar_ops[i], op) == 0) return 1;
  return 0;
}

typedef struct env {
  vm_device_t *dev;
  vm_device_t *cpu;
  vm_allocator_t *cpu_alloc;
  vm_registry_t *reg;
  char dir[512];
  int have_data;
  char *known; /* the known-failures file */
  char *excluded; /* VMRPC_ONNX_EXCLUDED: every case runs; the families it lists do not count */
} env_t;

static int fail_setup(vm_status_t st) {
  fprintf(stderr, "setup: %s\n", vm_status_message(st));
  vm_status_free(st);
  return -1;
}

static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
    free(s);
    s = NULL;
  }
  if (s) s[n] = 0;
  fclose(f);
  return s;
}

static int group_setup(void **state) {
  env_t *e = calloc(1, sizeof(*e));
  if (!e) return -1;
  *state = e;
  const char *d = getenv("VMRPC_ONNX_TESTDATA");
  snprintf(e->dir, sizeof(e->dir), "%s", d ? d : "/usr/share/libonnx-testdata/data/node");
  struct stat sb;
  e->have_data = stat(e->dir, &sb) == 0 && S_ISDIR(sb.st_mode);
  const char *src = getenv("VMRPC_SOURCE_DIR");
  char path[1024];
  const char *kf = getenv("VMRPC_ONNX_KNOWN_FAILURES");
  if (kf)
    snprintf(path, sizeof(path), "%s", kf);
  else
    snprintf(path, sizeof(path), "%s/tests/compiler/onnx_node_known_failures.txt", src ? src : ".");
  e->known = read_text(path);
  if (!e->known) {
    fprintf(stderr, "setup: cannot read %s\n", path);
    return -1;
  }
  const char *xf = getenv("VMRPC_ONNX_EXCLUDED");
  if (xf && !(e->excluded = read_text(xf))) {
    fprintf(stderr, "setup: cannot read %s\n", xf);
    return -1;
  }
  vm_status_t st = vmcl_device_open(NULL, NULL, &e->dev);
  if (!st) st = vm_cpu_device_create(0, &e->cpu);
  if (!st) st = vm_allocator_create(e->cpu, VM_ALLOC_NAIVE, &e->cpu_alloc);
  if (!st) st = vm_registry_create(&e->reg);
  if (!st) st = vm_registry_add_builtins(e->reg);
  if (!st) st = vmcl_register_ops(e->reg);
  if (st) return fail_setup(st);
  return 0;
}

static int group_teardown(void **state) {
  env_t *e = *state;
  if (!e) return 0;
  vm_registry_free(e->reg);
  vm_allocator_destroy(e->cpu_alloc);
  vm_device_destroy(e->cpu);
  vm_device_destroy(e->dev);
  free(e->known);
  free(e->excluded);
  free(e);
  return 0;
}

/* The reason a case is listed with in list, or NULL. Lines: "test_name:
 * reason" (the excluded families' list also "Op: reason"). */
static const char *known_reason(const char *list, const char *name, char *buf, size_t n) {
  size_t len = strlen(name);
  for (const char *p = list; p && *p;) {
    const char *eol = strchr(p, '\n');
    size_t ll = eol ? (size_t)(eol - p) : strlen(p);
    if (ll > len && strncmp(p, name, len) == 0 && p[len] == ':') {
      size_t rl = ll - len - 1;
      if (rl >= n) rl = n - 1;
      memcpy(buf, p + len + 1, rl);
      buf[rl] = 0;
      return buf;
    }
    p = eol ? eol + 1 : NULL;
  }
  return NULL;
}

/* VMRPC_ONNX_EXCLUDED's census: every case of every op, one line each
 * ("case PASS|FAIL|EXCL name (Op): why"), counted unless its case or its
 * op is in the excluded families' list (training, strings, sequences,
 * maps, optionals and the families other work owns; the list says which). */
static void all_case(const env_t *e, const char *name, const char *op, int ok, const char *why,
                     int *cases, int *passed, int *excluded) {
  char reason[256];
  const char *xr = known_reason(e->excluded, name, reason, sizeof(reason));
  if (!xr) xr = known_reason(e->excluded, op, reason, sizeof(reason));
  if (xr) {
    (*excluded)++;
    print_message("case EXCL %s (%s):%s\n", name, op, xr);
    return;
  }
  (*cases)++;
  if (ok) (*passed)++;
  print_message("case %s %s (%s)%s%s\n", ok ? "PASS" : "FAIL", name, op, ok ? "" : ": ",
                ok ? "" : why);
}

static int cmp_names(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Ops the importer evaluates at compile time only: their cases bind every
 * input as a constant. Loop too: its cases' input 0 is the trip count,
 * which must be known at compile time when the loop has scan outputs (their
 * length is a static dim). */
static int is_fold_only(const char *op) {
  static const char *const k_fold[] = {"And",           "Or",         "Xor",
                                       "Not",           "Mod",        "Constant",
                                       "Range",         "ConstantOfShape", "BlackmanWindow",
                                       "HammingWindow", "HannWindow", "Loop",
                                       "MelWeightMatrix"};
  for (size_t i = 0; i < sizeof(k_fold) / sizeof(k_fold[0]); i++)
    if (strcmp(k_fold[i], op) == 0) return 1;
  return 0;
}

static int op_index(const char *op) {
  for (size_t i = 0; i < NUM_OPS; i++)
    if (strcmp(k_ops[i], op) == 0) return (int)i;
  return -1;
}

/* Compares a device tensor with the expected one; 0 or -1 with why. */
static int compare(env_t *e, const vm_tensor_t *t, const vmcc_tensor_t *want, char *why, size_t n) {
  char a[32], b[32];
  if (!vm_dtype_equal(t->dtype, want->dtype)) {
    snprintf(why, n, "dtype %s, expected %s", vm_dtype_str(t->dtype, a, sizeof(a)),
             vm_dtype_str(want->dtype, b, sizeof(b)));
    return -1;
  }
  int same = t->ndim == want->ndim;
  for (uint32_t i = 0; same && i < t->ndim; i++)
    if (t->shape[i] != want->shape[i]) same = 0;
  if (!same) {
    snprintf(why, n, "shape differs (rank %u, expected %u)", t->ndim, want->ndim);
    return -1;
  }
  uint64_t nb = vm_tensor_nbytes_of(t);
  if (nb != want->nbytes) {
    snprintf(why, n, "size differs");
    return -1;
  }
  uint8_t *got = malloc(nb ? nb : 1);
  if (!got) return -1;
  vm_status_t st =
      nb ? e->dev->ops->copy_to_host(e->dev, got, t->storage->buffer, t->offset, nb) : VM_STATUS_OK;
  if (st) {
    snprintf(why, n, "copy back: %s", vm_status_message(st));
    vm_status_free(st);
    free(got);
    return -1;
  }
  int64_t numel = 1;
  for (uint32_t i = 0; i < t->ndim; i++) numel *= t->shape[i];
  int rc = 0;
  const uint8_t *w = want->data;
  if (vm_dtype_is_floating(t->dtype)) {
    /* float16, bfloat16, float8 and float4 too: NaNs compare equal
     * whatever their payload (a float8 step is far above the tolerance) */
    for (int64_t i = 0; i < numel; i++) {
      double g = vm_dtype_load_f64(t->dtype, got, (uint64_t)i);
      double x = vm_dtype_load_f64(t->dtype, w, (uint64_t)i);
      if (isnan(g) && isnan(x)) continue;
      if (isinf(x) && g == x) continue;
      if (!(fabs(g - x) <= ATOL + RTOL * fabs(x))) {
        snprintf(why, n, "element %lld is %.7g, expected %.7g", (long long)i, g, x);
        rc = -1;
        break;
      }
    }
  } else if (memcmp(got, w, nb) != 0) {
    snprintf(why, n, "values differ");
    rc = -1;
  }
  free(got);
  return rc;
}

/* A machine for exec on the OpenCL device in this run's mode; sets main's
 * input 0 from the host tensor in (none when NULL), invokes and gets the
 * result. */
static vm_status_t run_exec(env_t *e, const vm_executable_t *exec, const vmcc_tensor_t *in,
                            vm_machine_t **m, vm_value_t *x, vm_value_t *res) {
  vm_machine_config_t cfg;
  memset(&cfg, 0, sizeof(cfg));
  vm_allocator_kind_t kind = VM_ALLOC_POOLED;
  cfg.mode = test_exec_mode() ? VM_EXEC_COMPILED : VM_EXEC_BYTECODE;
  cfg.num_devices = 1;
  cfg.devices = &e->dev;
  cfg.allocators = &kind;
  cfg.registry = e->reg;
  vm_status_t st = vm_machine_create(exec, &cfg, m);
  if (!in) {
    if (!st) st = vm_machine_invoke_stateful(*m, "main");
    if (!st) st = vm_machine_get_output(*m, "main", NULL, 0, res);
    return st;
  }
  if (!st) st = vm_tensor_alloc(e->cpu_alloc, in->dtype, in->shape, in->ndim, x);
  if (!st && in->nbytes) {
    vm_tensor_t *t = vm_value_as_tensor(x);
    st = e->cpu->ops->copy_from_host(e->cpu, t->storage->buffer, t->offset, in->data, in->nbytes);
  }
  if (!st) st = vm_machine_set_input(*m, "main", 0, x);
  if (!st) st = vm_machine_invoke_stateful(*m, "main");
  if (!st) st = vm_machine_get_output(*m, "main", NULL, 0, res);
  return st;
}

/* Runs one case: 0 passed, -1 failed (why says it). */
static int run_case(env_t *e, const char *case_dir, int all_const, char *why, size_t n) {
  char path[1200];
  vmcc_onnx_io_t io;
  vmcc_tensor_t ins[MAX_IO], outs[MAX_IO];
  memset(ins, 0, sizeof(ins));
  memset(outs, 0, sizeof(outs));
  vm_executable_t *exec = NULL;
  vm_machine_t *m = NULL;
  vm_value_t x = vm_value_none(), res = vm_value_none();
  int rc = -1;
  snprintf(path, sizeof(path), "%s/model.onnx", case_dir);
  vm_status_t st = vmcc_onnx_read_io(path, &io);
  if (st) goto status;
  /* an optional, sequence or map: its data is no TensorProto */
  if (io.unsupported) {
    st = io.unsupported;
    io.unsupported = NULL;
    goto status_io;
  }
  if (io.num_inputs > MAX_IO || io.num_outputs > MAX_IO || (io.num_inputs == 0 && !all_const)) {
    snprintf(why, n, "%u inputs, %u outputs", io.num_inputs, io.num_outputs);
    goto out_io;
  }
  for (uint32_t i = 0; i < io.num_inputs; i++) {
    snprintf(path, sizeof(path), "%s/test_data_set_0/input_%u.pb", case_dir, i);
    st = vmcc_onnx_read_tensor_file(path, &ins[i]);
    if (st) goto status_io;
  }
  for (uint32_t i = 0; i < io.num_outputs; i++) {
    snprintf(path, sizeof(path), "%s/test_data_set_0/output_%u.pb", case_dir, i);
    st = vmcc_onnx_read_tensor_file(path, &outs[i]);
    if (st) goto status_io;
  }
  /* input 0 at run time (its shape fixed by its data), the rest constants;
   * everything constant for the ops that only fold */
  uint32_t first = all_const ? 0 : 1;
  vmcc_input_shape_t shape;
  memset(&shape, 0, sizeof(shape));
  if (!all_const) {
    shape.name = io.inputs[0];
    shape.ndim = ins[0].ndim;
    memcpy(shape.dims, ins[0].shape, sizeof(shape.dims));
  }
  vmcc_const_binding_t consts[MAX_IO];
  for (uint32_t i = first; i < io.num_inputs; i++) {
    consts[i - first].name = io.inputs[i];
    consts[i - first].value = &ins[i];
  }
  vmcc_onnx_options_t opts;
  memset(&opts, 0, sizeof(opts));
  opts.num_input_shapes = all_const ? 0 : 1;
  opts.input_shapes = &shape;
  opts.num_consts = io.num_inputs - first;
  opts.consts = consts;
  snprintf(path, sizeof(path), "%s/model.onnx", case_dir);
  st = vmcc_onnx_compile_file(path, &opts, &exec, NULL);
  if (st) goto status_io;

  st = run_exec(e, exec, all_const ? NULL : &ins[0], &m, &x, &res);
  if (st) goto status_io;
  for (uint32_t i = 0; i < io.num_outputs; i++) {
    const vm_value_t *v = &res;
    if (io.num_outputs > 1) {
      vm_tuple_t *tu = vm_value_as_tuple(&res);
      if (!tu || tu->size != io.num_outputs) {
        snprintf(why, n, "the result is not a tuple of %u", io.num_outputs);
        goto out_io;
      }
      v = &tu->fields[i];
    }
    vm_tensor_t *t = vm_value_as_tensor(v);
    if (!t) {
      snprintf(why, n, "output %u is not a tensor", i);
      goto out_io;
    }
    char w2[200];
    if (compare(e, t, &outs[i], w2, sizeof(w2)) != 0) {
      snprintf(why, n, "output %u: %s", i, w2);
      goto out_io;
    }
  }
  rc = 0;
  goto out_io;

status_io:
status:
  snprintf(why, n, "%s: %s", vm_code_name(vm_status_code(st)), vm_status_message(st));
  vm_status_free(st);
out_io:
  vm_value_release(&res);
  vm_value_release(&x);
  vm_machine_free(m);
  vm_executable_free(exec);
  for (uint32_t i = 0; i < MAX_IO; i++) {
    vmcc_tensor_free(&ins[i]);
    vmcc_tensor_free(&outs[i]);
  }
  vmcc_onnx_io_free(&io);
  return rc;
}

static void test_node_cases(void **state) {
  env_t *e = *state;
  if (!e->have_data) {
    print_message("skipped: no ONNX test data at %s (Debian package libonnx-testdata)\n", e->dir);
    return;
  }
  const char *filter = getenv("VMRPC_ONNX_CASE");
  DIR *d = opendir(e->dir);
  assert_non_null(d);
  char **names = calloc(MAX_CASES, sizeof(char *));
  assert_non_null(names);
  size_t nn = 0;
  struct dirent *de;
  while ((de = readdir(d)) && nn < MAX_CASES) {
    if (strncmp(de->d_name, "test_", 5) != 0 || strstr(de->d_name, "_expanded")) continue;
    if (filter && !strstr(de->d_name, filter)) continue;
    names[nn] = strdup(de->d_name);
    assert_non_null(names[nn]);
    nn++;
  }
  closedir(d);
  qsort(names, nn, sizeof(char *), cmp_names);
  int cases[NUM_OPS] = {0}, passed[NUM_OPS] = {0}, listed_fail[NUM_OPS] = {0};
  int unexpected = 0, stale = 0;
  int all = e->excluded != NULL, all_cases = 0, all_passed = 0, all_excluded = 0;
  for (size_t i = 0; i < nn; i++) {
    char dir[1024], path[1100];
    snprintf(dir, sizeof(dir), "%s/%s", e->dir, names[i]);
    snprintf(path, sizeof(path), "%s/model.onnx", dir);
    vmcc_onnx_io_t io;
    char op[64] = "?", why[512] = "", reason[256];
    vm_status_t st = vmcc_onnx_read_io(path, &io);
    if (st) {
      snprintf(why, sizeof(why), "%s", vm_status_message(st));
      vm_status_free(st);
      if (all) all_case(e, names[i], op, 0, why, &all_cases, &all_passed, &all_excluded);
      continue;
    }
    if (io.num_nodes == 1) snprintf(op, sizeof(op), "%s", io.node_ops[0]);
    int oi = io.num_nodes == 1 ? op_index(op) : -1;
    vmcc_onnx_io_free(&io);
    if (oi < 0) {
      if (all) {
        int ok = run_case(e, dir, 0, why, sizeof(why)) == 0;
        all_case(e, names[i], op, ok, why, &all_cases, &all_passed, &all_excluded);
      }
      continue;
    }
    int ok = run_case(e, dir, is_fold_only(k_ops[oi]), why, sizeof(why)) == 0;
    if (all) all_case(e, names[i], op, ok, why, &all_cases, &all_passed, &all_excluded);
    const char *kr = known_reason(e->known, names[i], reason, sizeof(reason));
    cases[oi]++;
    if (ok) passed[oi]++;
    if (!ok && kr) listed_fail[oi]++;
    if (!ok && !kr) {
      unexpected++;
      print_message("FAIL %s (%s): %s\n", names[i], k_ops[oi], why);
    } else if (ok && kr) {
      stale++;
      print_message("note: %s passes now: remove it from onnx_node_known_failures.txt\n", names[i]);
    } else if (filter && !ok) {
      print_message("known failure %s:%s -- %s\n", names[i], reason, why);
    }
  }
  int tc = 0, tp = 0, bc = 0, bp = 0;
  print_message("%-20s %6s %6s %6s\n", "op", "cases", "passed", "listed");
  for (size_t i = 0; i < NUM_OPS; i++) {
    if (!cases[i]) continue;
    print_message("%-20s %6d %6d %6d\n", k_ops[i], cases[i], passed[i], listed_fail[i]);
    tc += cases[i];
    tp += passed[i];
    if (is_bar_op(k_ops[i])) bc += cases[i], bp += passed[i];
  }
  print_message("%-20s %6d %6d (%s mode)\n", "total", tc, tp,
                test_exec_mode() ? "compiled" : "bytecode");
  print_message("%-20s %6d %6d (the 30 ops of the bar)\n", "bar", bc, bp);
  if (all)
    print_message("%-20s %6d %6d (%.1f %% of every case outside the excluded families; %d "
                  "excluded)\n",
                  "all", all_cases, all_passed,
                  all_cases ? 100.0 * all_passed / all_cases : 0.0, all_excluded);
  for (size_t i = 0; i < nn; i++) free(names[i]);
  free(names);
  (void)stale;
  if (unexpected)
    fail_msg("%d case(s) failed that onnx_node_known_failures.txt does not list", unexpected);
}

/* Packs m, compiles it (report in rep), runs it on xin and copies its one
 * output's first n bytes to got; the calls of the operators ops[0..nops)
 * in the executable go to counts. */
static void compile_run_counts_i8(env_t *e, mb_t *m, vmcc_tensor_t *xin,
                                  vmcc_onnx_report_t *rep, void *got, size_t n,
                                  const char *const *ops, uint32_t nops, uint32_t *counts,
                                  uint64_t *i8_bytes, uint64_t *f32_bytes) {
  size_t nbytes;
  uint8_t *bytes = mb_pack(m, &nbytes);
  vm_executable_t *exec = NULL;
  ASSERT_OK(vmcc_onnx_compile(bytes, nbytes, NULL, NULL, &exec, rep));
  free(bytes);
  for (uint32_t i = 0; i < nops; i++) counts[i] = count_calls(exec, ops[i]);
  if (i8_bytes) *i8_bytes = tensor_const_bytes(exec, VM_I8);
  if (f32_bytes) *f32_bytes = tensor_const_bytes(exec, VM_F32);
  vm_machine_t *vm = NULL;
  vm_value_t xv = vm_value_none(), res = vm_value_none();
  ASSERT_OK(run_exec(e, exec, xin, &vm, &xv, &res));
  vm_tensor_t *yt = vm_value_as_tensor(&res);
  assert_non_null(yt);
  ASSERT_OK(e->dev->ops->copy_to_host(e->dev, got, yt->storage->buffer, yt->offset, n));
  vm_value_release(&res);
  vm_value_release(&xv);
  vm_machine_free(vm);
  vm_executable_free(exec);
}

static void compile_run_counts(env_t *e, mb_t *m, vmcc_tensor_t *xin, vmcc_onnx_report_t *rep,
                               void *got, size_t n, const char *const *ops, uint32_t nops,
                               uint32_t *counts) {
  compile_run_counts_i8(e, m, xin, rep, got, n, ops, nops, counts, NULL, NULL);
}

/* The same with the calls of one operator op (NULL: none) in *count. */
static void compile_run_t(env_t *e, mb_t *m, vmcc_tensor_t *xin, vmcc_onnx_report_t *rep,
                          void *got, size_t n, const char *op, uint32_t *count) {
  compile_run_counts(e, m, xin, rep, got, n, &op, op ? 1 : 0, count);
}

static void compile_run(env_t *e, mb_t *m, vmcc_tensor_t *xin, vmcc_onnx_report_t *rep, void *got,
                        size_t n) {
  compile_run_t(e, m, xin, rep, got, n, NULL, NULL);
}

/* Output (o, i, j) of the valid, stride-1 convolution of x [C, H, W] with
 * w [O, C, K, K] (no bias), in double on the host. */
static double host_conv_at(const float *x, const float *w, int C, int H, int W, int K, int o, int i,
                           int j) {
  double acc = 0;
  for (int ci = 0; ci < C; ci++)
    for (int ki = 0; ki < K; ki++)
      for (int kj = 0; kj < K; kj++)
        acc += (double)x[(ci * H + i + ki) * W + j + kj] * w[((o * C + ci) * K + ki) * K + kj];
  return acc;
}

/* A Linear layer's bias: MatMul then Add of a constant row vector goes
 * into cl.gemm's bias (no cl.binary.add; the Add skipped): 0 Add(mm, b[N])
 * over a 3-D input, 1 Add(b[1, 1, N], mm); not folded: 2 a full [M, N]
 * addend, 3 the product read twice, 5 a float64 model (the fold keeps
 * float32's bits only). 4 Gemm with C [N] and alpha 0.5: one cl.gemm with
 * the bias. Every result matches the host. */
static void matmul_bias_case(env_t *e, int variant) {
  enum { B = 2, M = 3, K = 5, N = 7 };
  int gemm = variant == 4, f64 = variant == 5;
  static float x[B * M * K], w[K * N], bias[M * N];
  static double xd[B * M * K], wd[K * N], biasd[N];
  for (int i = 0; i < B * M * K; i++) xd[i] = x[i] = (float)((i * 7) % 11) * 0.25f - 1.0f;
  for (int i = 0; i < K * N; i++) wd[i] = w[i] = (float)((i * 5) % 9) * 0.125f - 0.5f;
  for (int i = 0; i < M * N; i++) bias[i] = (float)i * 0.5f - 3.0f;
  for (int i = 0; i < N; i++) biasd[i] = bias[i];
  mb_t m;
  mb_init(&m, 13);
  int64_t x3[3] = {B, M, K}, x2[2] = {B * M, K}, y3[3] = {B, M, N}, y2[2] = {B * M, N};
  int64_t wdims[2] = {K, N}, b1[1] = {N}, b3[3] = {1, 1, N}, bf[2] = {M, N};
  int32_t et = f64 ? 11 : 1; /* ONNX DOUBLE or FLOAT */
  if (gemm) {
    mb_input(&m, "x", 2, x2);
    mb_output(&m, "y", 2, y2);
  } else {
    m.graph.input[m.graph.n_input++] = mb_vi(&m, "x", et, 3, x3);
    m.graph.output[m.graph.n_output++] = mb_vi(&m, "y", et, 3, y3);
  }
  mb_init_raw(&m, "w", et, 2, wdims, f64 ? (const void *)wd : (const void *)w,
              (size_t)(K * N) * (f64 ? 8 : 4));
  if (variant == 1)
    mb_init_raw(&m, "b", 1, 3, b3, bias, N * 4);
  else if (variant == 2)
    mb_init_raw(&m, "b", 1, 2, bf, bias, M * N * 4);
  else
    mb_init_raw(&m, "b", et, 1, b1, f64 ? (const void *)biasd : (const void *)bias,
                (size_t)N * (f64 ? 8 : 4));
  mb_attrs_t at;
  memset(&at, 0, sizeof(at));
  if (gemm) {
    Onnx__NodeProto *g = mb_node(&m, "Gemm", "gemm", "x", "w", "y");
    mb_node_input(g, "b");
    mb_attrs_float(&at, g, "alpha", 0.5f);
  } else {
    mb_node(&m, "MatMul", "mm", "x", "w", "p");
    if (variant == 3) {
      mb_node(&m, "Add", "add", "p", "b", "s");
      mb_node(&m, "Add", "add2", "s", "p", "y");
    } else {
      mb_node(&m, "Add", "add", variant == 1 ? "b" : "p", variant == 1 ? "p" : "b", "y");
    }
  }
  vmcc_onnx_report_t rep;
  vmcc_tensor_t xin = {f64 ? VM_F64 : VM_F32,
                       gemm ? 2u : 3u,
                       {B, M, K},
                       f64 ? (void *)xd : (void *)x,
                       (size_t)(B * M * K) * (f64 ? 8 : 4)};
  if (gemm) {
    xin.shape[0] = B * M;
    xin.shape[1] = K;
  }
  double got[B * M * N];
  uint32_t adds = 0;
  compile_run_t(e, &m, &xin, &rep, got, (size_t)(B * M * N) * (f64 ? 8 : 4), "cl.binary.add",
                &adds);
  int folded = variant <= 1 || gemm;
  assert_int_equal(adds, folded ? 0 : variant == 3 ? 2 : 1);
  assert_int_equal(rep.num_folded, variant <= 1 ? 1 : 0);
  for (int r = 0; r < B * M; r++)
    for (int j = 0; j < N; j++) {
      double p = 0;
      for (int k = 0; k < K; k++) p += (double)x[r * K + k] * w[k * N + j];
      double bv = variant == 2 ? bias[(r % M) * N + j] : bias[j];
      double want = gemm ? 0.5 * p + bv : variant == 3 ? 2 * p + bv : p + bv;
      double g = f64 ? got[r * N + j] : ((float *)got)[r * N + j];
      if (!(fabs(g - want) <= 1e-5 + 1e-5 * fabs(want)))
        fail_msg("variant %d, [%d, %d]: %.7g, expected %.7g", variant, r, j, g, want);
    }
}

static void test_matmul_bias_folded(void **state) {
  for (int v = 0; v < 6; v++) matmul_bias_case(*state, v);
}

/* A Linear layer's output scaled by a constant folds into its weights and
 * bias (x W + b) s = x (W s) + b s: 0 Mul by a per-column ls[N] (a ViT's
 * layer scale): no cl.binary.mul; 1 Reshape to heads, Transpose, Mul by a
 * rank-0 scalar (attention's query scaled), a Shape node also reading the
 * Add's output: no cl.binary.mul, the Mul becomes its input as it is; not
 * folded: 2 a [M, N] factor (not a row), 3 in variant 1's chain a scalar
 * of shape [1] (rank 1 may broadcast the shape after the Reshape). Every
 * result matches the host. (N = 16 and 6 rows: the folded weights run
 * packed, as cl.gemm_packed's panels.) */
static void linear_scale_case(env_t *e, int variant) {
  enum { B = 2, M = 3, K = 5, N = 16, H = 2 };
  static float x[B * M * K], w[K * N], bias[N], ls[M * N];
  for (int i = 0; i < B * M * K; i++) x[i] = (float)((i * 7) % 11) * 0.25f - 1.0f;
  for (int i = 0; i < K * N; i++) w[i] = (float)((i * 5) % 9) * 0.125f - 0.5f;
  for (int i = 0; i < N; i++) bias[i] = (float)i * 0.5f - 1.5f;
  for (int i = 0; i < M * N; i++) ls[i] = variant == 1 || variant == 3 ? 0.35f : 0.1f + 0.05f * i;
  int heads = variant == 1 || variant == 3;
  mb_t m;
  mb_init(&m, 13);
  int64_t x3[3] = {B, M, K}, y3[3] = {B, M, N}, y4[4] = {B, H, M, N / H};
  int64_t wd[2] = {K, N}, b1[1] = {N}, l2[2] = {M, N}, one[1] = {1}, shp[4] = {B, M, H, N / H};
  static const int64_t perm[4] = {0, 2, 1, 3};
  mb_input(&m, "x", 3, x3);
  mb_output(&m, "y", heads ? 4 : 3, heads ? y4 : y3);
  mb_init_raw(&m, "w", 1, 2, wd, w, sizeof(w));
  mb_init_raw(&m, "b", 1, 1, b1, bias, sizeof(bias));
  if (variant == 0)
    mb_init_raw(&m, "ls", 1, 1, b1, ls, N * 4);
  else if (variant == 2)
    mb_init_raw(&m, "ls", 1, 2, l2, ls, sizeof(ls));
  else
    mb_init_raw(&m, "ls", 1, variant == 3 ? 1 : 0, one, ls, 4);
  mb_init_raw(&m, "shp", 7, 1, (int64_t[]){4}, shp, sizeof(shp));
  mb_node(&m, "MatMul", "mm", "x", "w", "p");
  mb_node(&m, "Add", "add", "p", "b", "q");
  if (heads) {
    mb_node(&m, "Shape", "sh", "q", NULL, "qs");
    mb_node(&m, "Reshape", "rs", "q", "shp", "r");
    mb_attr_ints(&m, mb_node(&m, "Transpose", "tr", "r", NULL, "t"), "perm", perm, 4);
    mb_node(&m, "Mul", "mul", "ls", "t", "y");
  } else {
    mb_node(&m, "Mul", "mul", "q", "ls", "y");
  }
  vmcc_onnx_report_t rep;
  vmcc_tensor_t xin = {VM_F32, 3, {B, M, K}, x, sizeof(x)};
  float got[B * M * N];
  uint32_t muls = 0;
  compile_run_t(e, &m, &xin, &rep, got, sizeof(got), "cl.binary.mul", &muls);
  assert_int_equal(muls, variant < 2 ? 0 : 1);
  for (int bb = 0; bb < B; bb++)
    for (int r = 0; r < M; r++)
      for (int j = 0; j < N; j++) {
        double p = bias[j];
        for (int k = 0; k < K; k++) p += (double)x[(bb * M + r) * K + k] * w[k * N + j];
        double want = p * (heads ? ls[0] : variant == 0 ? ls[j] : ls[r * N + j]);
        /* heads: y[b][h][m][d] = q[b][m][h * N / H + d] */
        int at = heads ? ((bb * H + j / (N / H)) * M + r) * (N / H) + j % (N / H)
                       : (bb * M + r) * N + j;
        if (!(fabs(got[at] - want) <= 1e-5 + 1e-5 * fabs(want)))
          fail_msg("variant %d, [%d, %d, %d]: %.7g, expected %.7g", variant, bb, r, j, got[at],
                   want);
      }
}

static void test_linear_scale_folded(void **state) {
  for (int v = 0; v < 4; v++) linear_scale_case(*state, v);
}

/* The scale fold must leave a weight that another MatMul also reads as
 * it is, and stop where a value on the way has another reader than a
 * Shape node: 0 w shared: mm (with bias b, scaled by ls[N]) folds, mm2
 * reads the same w unscaled (no cl.binary.mul left); 1 heads chain whose
 * Add output is also reshaped and transposed by a second chain (y the sum
 * of the scaled and the unscaled heads): not folded (one cl.binary.mul).
 * Both match the host. */
static void linear_scale_shared_case(env_t *e, int variant) {
  enum { B = 2, M = 3, K = 5, N = 16, H = 2 };
  static float x[B * M * K], w[K * N], bias[N], ls[N];
  for (int i = 0; i < B * M * K; i++) x[i] = (float)((i * 7) % 11) * 0.25f - 1.0f;
  for (int i = 0; i < K * N; i++) w[i] = (float)((i * 5) % 9) * 0.125f - 0.5f;
  for (int i = 0; i < N; i++) {
    bias[i] = (float)i * 0.5f - 1.5f;
    ls[i] = variant ? 0.35f : 0.1f + 0.05f * i;
  }
  mb_t m;
  mb_init(&m, 13);
  int64_t x3[3] = {B, M, K}, y3[3] = {B, M, N}, y4[4] = {B, H, M, N / H};
  int64_t wd[2] = {K, N}, b1[1] = {N}, shp[4] = {B, M, H, N / H};
  static const int64_t perm[4] = {0, 2, 1, 3};
  mb_input(&m, "x", 3, x3);
  mb_output(&m, "y", variant ? 4 : 3, variant ? y4 : y3);
  mb_init_raw(&m, "w", 1, 2, wd, w, sizeof(w));
  mb_init_raw(&m, "b", 1, 1, b1, bias, sizeof(bias));
  mb_init_raw(&m, "ls", 1, variant ? 0 : 1, b1, ls, variant ? 4 : sizeof(ls));
  mb_init_raw(&m, "shp", 7, 1, (int64_t[]){4}, shp, sizeof(shp));
  mb_node(&m, "MatMul", "mm", "x", "w", "p");
  mb_node(&m, "Add", "add", "p", "b", "q");
  if (variant == 0) {
    mb_node(&m, "Mul", "mul", "q", "ls", "s");
    mb_node(&m, "MatMul", "mm2", "x", "w", "p2");
    mb_node(&m, "Add", "sum", "s", "p2", "y");
  } else {
    mb_node(&m, "Shape", "sh", "q", NULL, "qs");
    mb_node(&m, "Reshape", "rs", "q", "shp", "r");
    mb_node(&m, "Reshape", "rs2", "q", "shp", "r2");
    mb_attr_ints(&m, mb_node(&m, "Transpose", "tr", "r", NULL, "t"), "perm", perm, 4);
    mb_attr_ints(&m, mb_node(&m, "Transpose", "tr2", "r2", NULL, "t2"), "perm", perm, 4);
    mb_node(&m, "Mul", "mul", "ls", "t", "s");
    mb_node(&m, "Add", "sum", "s", "t2", "y");
  }
  vmcc_onnx_report_t rep;
  vmcc_tensor_t xin = {VM_F32, 3, {B, M, K}, x, sizeof(x)};
  float got[B * M * N];
  uint32_t muls = 0;
  compile_run_t(e, &m, &xin, &rep, got, sizeof(got), "cl.binary.mul", &muls);
  assert_int_equal(muls, variant ? 1 : 0);
  for (int bb = 0; bb < B; bb++)
    for (int r = 0; r < M; r++)
      for (int j = 0; j < N; j++) {
        double p = 0;
        for (int k = 0; k < K; k++) p += (double)x[(bb * M + r) * K + k] * w[k * N + j];
        double want = variant ? (p + bias[j]) * ls[0] + p + bias[j] : (p + bias[j]) * ls[j] + p;
        int at = variant ? ((bb * H + j / (N / H)) * M + r) * (N / H) + j % (N / H)
                         : (bb * M + r) * N + j;
        if (!(fabs(got[at] - want) <= 1e-5 + 1e-5 * fabs(want)))
          fail_msg("variant %d, [%d, %d, %d]: %.7g, expected %.7g", variant, bb, r, j, got[at],
                   want);
      }
}

static void test_linear_scale_shared(void **state) {
  for (int v = 0; v < 2; v++) linear_scale_shared_case(*state, v);
}

/* A Conv followed by an inference BatchNormalization: the BN is folded
 * into the convolution (no node of its own) and the result matches the
 * two computed in turn on the host. */
static void test_conv_bn_folded(void **state) {
  env_t *e = *state;
  enum { N = 1, C = 2, H = 5, W = 5, O = 3, K = 3, OH = H - K + 1, OW = W - K + 1 };
  static float x[N * C * H * W], w[O * C * K * K], b[O], sc[O], bb[O], mn[O], vr[O];
  for (int i = 0; i < N * C * H * W; i++) x[i] = (float)((i * 37) % 11) / 5.0f - 1.0f;
  for (int i = 0; i < O * C * K * K; i++) w[i] = (float)((i * 13) % 7) / 7.0f - 0.4f;
  for (int o = 0; o < O; o++) {
    b[o] = 0.1f * (float)o - 0.1f;
    sc[o] = 1.5f - 0.5f * (float)o;
    bb[o] = 0.25f * (float)o;
    mn[o] = 0.2f - 0.1f * (float)o;
    vr[o] = 0.5f + (float)o;
  }
  mb_t m;
  mb_init(&m, 13);
  int64_t xd[4] = {N, C, H, W}, wd[4] = {O, C, K, K}, od[1] = {O}, yd[4] = {N, O, OH, OW};
  mb_input(&m, "x", 4, xd);
  mb_output(&m, "y", 4, yd);
  mb_init_raw(&m, "w", 1, 4, wd, w, sizeof(w));
  mb_init_raw(&m, "b", 1, 1, od, b, sizeof(b));
  mb_init_raw(&m, "s", 1, 1, od, sc, sizeof(sc));
  mb_init_raw(&m, "bb", 1, 1, od, bb, sizeof(bb));
  mb_init_raw(&m, "m", 1, 1, od, mn, sizeof(mn));
  mb_init_raw(&m, "v", 1, 1, od, vr, sizeof(vr));
  Onnx__NodeProto *conv = mb_node(&m, "Conv", "conv", "x", "w", "c");
  mb_node_input(conv, "b");
  Onnx__NodeProto *bn = mb_node(&m, "BatchNormalization", "bn", "c", "s", "y");
  mb_node_input(bn, "bb");
  mb_node_input(bn, "m");
  mb_node_input(bn, "v");
  vmcc_onnx_report_t rep;
  vmcc_tensor_t xin = {VM_F32, 4, {N, C, H, W}, x, sizeof(x)};
  float got[N * O * OH * OW];
  compile_run(e, &m, &xin, &rep, got, sizeof(got));
  assert_int_equal(rep.num_folded, 1); /* the BN */
  assert_int_equal(rep.num_consts, 2); /* W' and b' only */
  double max_err = 0;
  for (int o = 0; o < O; o++)
    for (int i = 0; i < OH; i++)
      for (int j = 0; j < OW; j++) {
        double acc = b[o] + host_conv_at(x, w, C, H, W, K, o, i, j);
        double want = (acc - mn[o]) / sqrt((double)vr[o] + 1e-5) * sc[o] + bb[o];
        double d = fabs(want - got[(o * OH + i) * OW + j]);
        if (d > max_err) max_err = d;
      }
  if (max_err > 1e-5) fail_msg("conv+bn: max abs error %g", max_err);
}

/* A ConvTranspose (2 groups, stride 2) followed by an inference
 * BatchNormalization: the BN folds into its weights and bias per output
 * channel (no cl.binary.*; one folded node). The result matches the host's
 * transposed convolution then batch norm. */
static void test_conv_transpose_bn_folded(void **state) {
  env_t *e = *state;
  enum { C = 4, H = 3, W = 2, G = 2, CO = 6, K = 3, S = 2 };
  enum { OG = CO / G, CG = C / G, OH = (H - 1) * S + K, OW = (W - 1) * S + K };
  static float x[C * H * W], w[C * OG * K * K], b[CO], sc[CO], bb[CO], mn[CO], vr[CO];
  for (int i = 0; i < C * H * W; i++) x[i] = (float)((i * 37) % 11) / 5.0f - 1.0f;
  for (int i = 0; i < C * OG * K * K; i++) w[i] = (float)((i * 13) % 7) / 7.0f - 0.4f;
  for (int o = 0; o < CO; o++) {
    b[o] = 0.1f * (float)o - 0.2f;
    sc[o] = 1.5f - 0.4f * (float)o;
    bb[o] = 0.25f * (float)o;
    mn[o] = 0.2f - 0.1f * (float)o;
    vr[o] = 0.5f + (float)o;
  }
  mb_t m;
  mb_init(&m, 13);
  int64_t xd[4] = {1, C, H, W}, wd[4] = {C, OG, K, K}, od[1] = {CO}, yd[4] = {1, CO, OH, OW};
  static const int64_t st[2] = {S, S};
  mb_input(&m, "x", 4, xd);
  mb_output(&m, "y", 4, yd);
  mb_init_raw(&m, "w", 1, 4, wd, w, sizeof(w));
  mb_init_raw(&m, "b", 1, 1, od, b, sizeof(b));
  mb_init_raw(&m, "s", 1, 1, od, sc, sizeof(sc));
  mb_init_raw(&m, "bb", 1, 1, od, bb, sizeof(bb));
  mb_init_raw(&m, "m", 1, 1, od, mn, sizeof(mn));
  mb_init_raw(&m, "v", 1, 1, od, vr, sizeof(vr));
  Onnx__NodeProto *ct = mb_node(&m, "ConvTranspose", "ct", "x", "w", "c");
  mb_node_input(ct, "b");
  mb_attrs_t at;
  memset(&at, 0, sizeof(at));
  mb_attrs_int(&at, ct, "group", G);
  mb_attrs_int(&at, ct, "strides", 0); /* then made the list (S, S) */
  Onnx__AttributeProto *sa = ct->attribute[1];
  sa->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
  sa->has_i = 0;
  sa->n_ints = 2;
  sa->ints = (int64_t *)st;
  Onnx__NodeProto *bn = mb_node(&m, "BatchNormalization", "bn", "c", "s", "y");
  mb_node_input(bn, "bb");
  mb_node_input(bn, "m");
  mb_node_input(bn, "v");
  vmcc_onnx_report_t rep;
  vmcc_tensor_t xin = {VM_F32, 4, {1, C, H, W}, x, sizeof(x)};
  float got[CO * OH * OW];
  static const char *const ops[2] = {"cl.binary.mul", "cl.binary.add"};
  uint32_t counts[2];
  compile_run_counts(e, &m, &xin, &rep, got, sizeof(got), ops, 2, counts);
  assert_int_equal(counts[0] + counts[1], 0);
  assert_int_equal(rep.num_folded, 1); /* the BN */
  double max_err = 0;
  for (int o = 0; o < CO; o++)
    for (int i = 0; i < OH; i++)
      for (int j = 0; j < OW; j++) {
        double acc = b[o];
        int g = o / OG, oj = o % OG;
        for (int ci = g * CG; ci < (g + 1) * CG; ci++)
          for (int ih = 0; ih < H; ih++)
            for (int iw = 0; iw < W; iw++) {
              int kh = i - ih * S, kw = j - iw * S;
              if (kh < 0 || kh >= K || kw < 0 || kw >= K) continue;
              acc += (double)x[(ci * H + ih) * W + iw] * w[((ci * OG + oj) * K + kh) * K + kw];
            }
        double want = (acc - mn[o]) / sqrt((double)vr[o] + 1e-5) * sc[o] + bb[o];
        double d = fabs(want - got[(o * OH + i) * OW + j]);
        if (d > max_err) max_err = d;
      }
  if (max_err > 1e-5) fail_msg("conv_transpose+bn: max abs error %g", max_err);
}

/* A hostile ConvTranspose of 0 input channels (X [1, 0, H, W], an empty
 * W [0, 3, K, K]) before a BatchNormalization: the batch norm fold's
 * per-channel loop must not divide by the 0 channels; the model compiles
 * (the fold skipped) and gives the batch norm of the bias alone. */
static void test_conv_transpose_bn_zero_channels(void **state) {
  env_t *e = *state;
  enum { H = 2, W = 2, CO = 3, K = 2, OH = H - 1 + K, OW = W - 1 + K };
  static float b[CO] = {0.5f, -1.0f, 2.0f}, sc[CO] = {1.5f, 0.5f, -1.0f}, bb[CO] = {0, 0.25f, 1},
               mn[CO] = {0.1f, 0, -0.2f}, vr[CO] = {1, 2, 0.5f}, x[1];
  mb_t m;
  mb_init(&m, 13);
  int64_t xd[4] = {1, 0, H, W}, wd[4] = {0, CO, K, K}, od[1] = {CO}, yd[4] = {1, CO, OH, OW};
  mb_input(&m, "x", 4, xd);
  mb_output(&m, "y", 4, yd);
  mb_init_raw(&m, "w", 1, 4, wd, x, 0);
  mb_init_raw(&m, "b", 1, 1, od, b, sizeof(b));
  mb_init_raw(&m, "s", 1, 1, od, sc, sizeof(sc));
  mb_init_raw(&m, "bb", 1, 1, od, bb, sizeof(bb));
  mb_init_raw(&m, "m", 1, 1, od, mn, sizeof(mn));
  mb_init_raw(&m, "v", 1, 1, od, vr, sizeof(vr));
  mb_node_input(mb_node(&m, "ConvTranspose", "ct", "x", "w", "c"), "b");
  Onnx__NodeProto *bn = mb_node(&m, "BatchNormalization", "bn", "c", "s", "y");
  mb_node_input(bn, "bb");
  mb_node_input(bn, "m");
  mb_node_input(bn, "v");
  vmcc_onnx_report_t rep;
  vmcc_tensor_t xin = {VM_F32, 4, {1, 0, H, W}, x, 0};
  float got[CO * OH * OW];
  compile_run(e, &m, &xin, &rep, got, sizeof(got));
  for (int o = 0; o < CO; o++) {
    double want = (b[o] - mn[o]) / sqrt((double)vr[o] + 1e-5) * sc[o] + bb[o];
    for (int i = 0; i < OH * OW; i++)
      if (!(fabs(got[o * OH * OW + i] - want) <= 1e-5 + 1e-5 * fabs(want)))
        fail_msg("channel %d, [%d]: %.7g, expected %.7g", o, i, got[o * OH * OW + i], want);
  }
}

static int64_t sat_i8(double v) {
  return v < -128 ? -128 : v > 127 ? 127 : (int64_t)v;
}

/* A QDQ convolution as quantize_static writes it: x -> QuantizeLinear ->
 * DequantizeLinear -> Conv (weights DequantizeLinear of int8 constants, per
 * output channel; a float bias) -> QuantizeLinear -> DequantizeLinear. It
 * runs as one cl.qconv2d with the requantize in its store: the weights'
 * DequantizeLinear folds and the last QuantizeLinear is fused (2 folded
 * nodes; unfused it would be 1). The result is the standard's integer
 * arithmetic computed here on the host, within one output step. */
static void test_qdq_conv_fused(void **state) {
  env_t *e = *state;
  enum { C = 2, H = 5, W = 5, O = 3, K = 3, OH = H - K + 1, OW = W - K + 1 };
  static float x[C * H * W], b[O];
  static int8_t wq[O * C * K * K];
  static const float sx = 0.02f, sw[O] = {0.01f, 0.02f, 0.005f}, sy = 0.05f;
  static const int8_t zx = 3, zy = -4;
  for (int i = 0; i < C * H * W; i++) x[i] = (float)((i * 37) % 11) / 5.0f - 1.0f;
  for (int i = 0; i < O * C * K * K; i++) wq[i] = (int8_t)((i * 29) % 255 - 127);
  for (int o = 0; o < O; o++) b[o] = 0.1f * (float)o - 0.1f;
  mb_t m;
  mb_init(&m, 21);
  int64_t xd[4] = {1, C, H, W}, wd[4] = {O, C, K, K}, od[1] = {O}, yd[4] = {1, O, OH, OW};
  mb_input(&m, "x", 4, xd);
  mb_output(&m, "y", 4, yd);
  mb_init_raw(&m, "sx", 1, 0, NULL, &sx, 4);
  mb_init_raw(&m, "zx", 3, 0, NULL, &zx, 1);
  mb_init_raw(&m, "wq", 3, 4, wd, wq, sizeof(wq));
  mb_init_raw(&m, "sw", 1, 1, od, sw, sizeof(sw));
  mb_init_raw(&m, "b", 1, 1, od, b, sizeof(b));
  mb_init_raw(&m, "sy", 1, 0, NULL, &sy, 4);
  mb_init_raw(&m, "zy", 3, 0, NULL, &zy, 1);
  mb_node_input(mb_node(&m, "QuantizeLinear", "qx", "x", "sx", "xq"), "zx");
  mb_node_input(mb_node(&m, "DequantizeLinear", "dqx", "xq", "sx", "xd"), "zx");
  Onnx__NodeProto *dqw = mb_node(&m, "DequantizeLinear", "dqw", "wq", "sw", "wd");
  mb_attr_s(&m, dqw, "axis", "");
  m.attrs[dqw - m.nodes].type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
  m.attrs[dqw - m.nodes].has_s = 0;
  m.attrs[dqw - m.nodes].has_i = 1;
  m.attrs[dqw - m.nodes].i = 0;
  mb_node_input(mb_node(&m, "Conv", "conv", "xd", "wd", "c"), "b");
  mb_node_input(mb_node(&m, "QuantizeLinear", "qy", "c", "sy", "yq"), "zy");
  mb_node_input(mb_node(&m, "DequantizeLinear", "dqy", "yq", "sy", "y"), "zy");
  vmcc_onnx_report_t rep;
  vmcc_tensor_t xin = {VM_F32, 4, {1, C, H, W}, x, sizeof(x)};
  float got[O * OH * OW];
  compile_run(e, &m, &xin, &rep, got, sizeof(got));
  assert_int_equal(rep.num_folded, 2); /* dqw, and qy fused into the convolution */
  double max_err = 0;
  for (int o = 0; o < O; o++)
    for (int i = 0; i < OH; i++)
      for (int j = 0; j < OW; j++) {
        int64_t acc = 0;
        for (int c = 0; c < C; c++)
          for (int u = 0; u < K; u++)
            for (int v = 0; v < K; v++) {
              int64_t q = sat_i8(rint(x[(c * H + i + u) * W + j + v] / sx) + zx);
              acc += (q - zx) * wq[((o * C + c) * K + u) * K + v];
            }
        double s = (double)sx * sw[o];
        acc += (int64_t)rint(b[o] / s);
        int64_t yq = sat_i8(rint((double)acc * s / sy) + zy);
        double d = fabs((double)(yq - zy) * sy - got[(o * OH + i) * OW + j]);
        if (d > max_err) max_err = d;
      }
  if (max_err > sy * 1.001) fail_msg("qdq conv: max abs error %g (one step is %g)", max_err, sy);
}

/* Conv (3 output channels, 3x3 map) then Mul by ms and Add of as, in six
 * variants: 0 ms [3, 1, 1] and as [1, 3, 1, 1], both folded into the
 * convolution; 1 the Conv's output also feeds a final Add (another
 * consumer); 2 ms is [3, 1], which broadcasts along the rows, not the
 * channels; 3 Mul by a second Conv's output (not a constant); 4 as 0, but
 * ms and as are Constant nodes placed after the Conv, as exporters write
 * them (each just before its consumer): folded too; 5 ms is a Reshape of
 * a [3] initializer placed after the Conv (as Paddle's exporter writes a
 * bias): folded. Variants 0, 4 and 5 fold; every variant's result matches
 * the host. */
static void conv_affine_case(env_t *e, int variant) {
  enum { C = 2, H = 5, W = 5, O = 3, K = 3, OH = H - K + 1, OW = W - K + 1 };
  static float x[C * H * W], w[O * C * K * K], b[O], ms[O], as[O];
  for (int i = 0; i < C * H * W; i++) x[i] = (float)((i * 37) % 11) / 5.0f - 1.0f;
  for (int i = 0; i < O * C * K * K; i++) w[i] = (float)((i * 13) % 7) / 7.0f - 0.4f;
  for (int o = 0; o < O; o++) {
    b[o] = 0.1f * (float)o - 0.1f;
    ms[o] = 1.5f - 0.75f * (float)o;
    as[o] = 0.25f * (float)o - 0.3f;
  }
  mb_t m;
  mb_init(&m, 13);
  int64_t xd[4] = {1, C, H, W}, wd[4] = {O, C, K, K}, od[1] = {O}, yd[4] = {1, O, OH, OW};
  int64_t md3[3] = {O, 1, 1}, md2[2] = {O, 1}, ad[4] = {1, O, 1, 1};
  mb_input(&m, "x", 4, xd);
  mb_output(&m, "y", 4, yd);
  mb_init_raw(&m, "w", 1, 4, wd, w, sizeof(w));
  mb_init_raw(&m, "b", 1, 1, od, b, sizeof(b));
  static const int64_t shp[4] = {1, O, 1, 1};
  int64_t sd[1] = {4};
  if (variant == 2)
    mb_init_raw(&m, "ms", 1, 2, md2, ms, sizeof(ms));
  else if (variant == 5)
    mb_init_raw(&m, "msf", 1, 1, od, ms, sizeof(ms));
  else if (variant != 4)
    mb_init_raw(&m, "ms", 1, 3, md3, ms, sizeof(ms));
  if (variant == 5) mb_init_raw(&m, "shp", 7, 1, sd, shp, sizeof(shp));
  if (variant != 4) mb_init_raw(&m, "as", 1, 4, ad, as, sizeof(as));
  Onnx__NodeProto *conv = mb_node(&m, "Conv", "conv", "x", "w", "c");
  mb_node_input(conv, "b");
  if (variant == 3) mb_node(&m, "Conv", "conv2", "x", "w", "c2");
  if (variant == 4)
    mb_attr_tensor(&m, mb_node(&m, "Constant", "kms", NULL, NULL, "ms"), "value", 1, 4, ad, ms,
                   sizeof(ms));
  if (variant == 5) mb_node(&m, "Reshape", "rs", "msf", "shp", "ms");
  mb_node(&m, "Mul", "mul", "c", variant == 3 ? "c2" : "ms", "t");
  if (variant == 4)
    mb_attr_tensor(&m, mb_node(&m, "Constant", "kas", NULL, NULL, "as"), "value", 1, 3, md3, as,
                   sizeof(as));
  mb_node(&m, "Add", "add", "t", "as", variant == 1 ? "t2" : "y");
  if (variant == 1) mb_node(&m, "Add", "add2", "t2", "c", "y");
  vmcc_onnx_report_t rep;
  vmcc_tensor_t xin = {VM_F32, 4, {1, C, H, W}, x, sizeof(x)};
  float got[O * OH * OW];
  compile_run(e, &m, &xin, &rep, got, sizeof(got));
  /* variants 4 and 5: the Constants and the Reshape count as folded too */
  assert_int_equal(rep.num_folded, variant == 0 ? 2 : variant == 4 ? 4 : variant == 5 ? 3 : 0);
  double max_err = 0;
  for (int o = 0; o < O; o++)
    for (int i = 0; i < OH; i++)
      for (int j = 0; j < OW; j++) {
        double acc = host_conv_at(x, w, C, H, W, K, o, i, j);
        double c = acc + b[o];
        double want = variant == 3   ? c * acc + as[o]
                      : variant == 2 ? c * ms[i] + as[o]
                                     : c * ms[o] + as[o];
        if (variant == 1) want += c;
        double d = fabs(want - got[(o * OH + i) * OW + j]);
        if (d > max_err) max_err = d;
      }
  if (max_err > 1e-5) fail_msg("conv, mul, add (variant %d): max abs error %g", variant, max_err);
}

static void test_conv_affine_folded(void **state) {
  for (int v = 0; v < 6; v++) conv_affine_case(*state, v);
}

/* A MatMul as onnxruntime's quantize_dynamic writes it: x ->
 * DynamicQuantizeLinear -> (xq, xs, xz); s = Mul(xs, w_scale); acc =
 * MatMulInteger(xq, W int8, xz, wz); y = Mul(Cast(acc, float), s). x is 9 x
 * 40, W 40 x 12 (edge rows and columns beside whole 8 x 8 blocks). Four
 * variants: 0 one w_scale: the scale Mul is left pending and cl.qgemm's
 * store multiplies xs and w_scale itself, with the Cast and the last Mul
 * folded: no cl.binary.mul at all; 1 w_scale per column [12]: the same; 2
 * s is also added to the result (y + s, another reader): the scale Mul
 * runs (one cl.binary.mul), the Cast and the last Mul still fold; 3 the
 * Cast's output is also added (y + float(acc)): nothing folds into the
 * qgemm, the pending scale Mul is emitted where the last Mul reads it (two
 * cl.binary.mul). Then a residual Add after the last Mul, r = x[:, :12]
 * (a Slice: a run-time float32 of the product's shape): 4 Add(y, r) and
 * 5 Add(r, y) fold into cl.qgemm_packed's store (no cl.binary.add); it
 * runs on its own where 6 the product has another reader (Add(Add(d, r),
 * d)), 7 r broadcasts (x[:1, :12]), 8 r is defined after the product
 * (the Slice placed after the MatMulInteger). 9: variant 0 with x [1, 9,
 * 40]: the product writes y [1, 9, 12] itself, no view of a 2-D result, so
 * the graph output needs no cl.cast copy (as no variant but 3, where the
 * Cast runs). Every result equals, bit for bit, the nodes' float32
 * arithmetic done here on the host. */
static void dynamic_matmul_case(env_t *e, int variant) {
  enum { M = 9, K = 40, N = 12 };
  static float x[M * K], ws[N];
  static int8_t w[K * N];
  static const int8_t wz = 3;
  for (int i = 0; i < M * K; i++) x[i] = (float)((i * 37) % 23) / 7.0f - 1.3f;
  x[11] = 4.25f; /* the range's ends */
  x[20] = -2.5f;
  for (int i = 0; i < K * N; i++) w[i] = (int8_t)((i * 29) % 255 - 127);
  for (int j = 0; j < N; j++) ws[j] = 0.0123f + 0.001f * (float)(variant == 1 ? j : 0);
  mb_t m;
  mb_init(&m, 13);
  int64_t xd[3] = {1, M, K}, wd[2] = {K, N}, sd[1] = {N}, yd[3] = {1, M, N};
  uint32_t nd = variant == 9 ? 3 : 2;
  mb_input(&m, "x", nd, xd + 3 - nd);
  mb_output(&m, "y", nd, yd + 3 - nd);
  mb_init_raw(&m, "W", 3, 2, wd, w, sizeof(w));
  mb_init_raw(&m, "wz", 3, 0, NULL, &wz, 1);
  if (variant == 1)
    mb_init_raw(&m, "ws", 1, 1, sd, ws, sizeof(ws));
  else
    mb_init_raw(&m, "ws", 1, 0, NULL, ws, 4);
  int res = variant >= 4 && variant <= 8;
  static const int64_t st[2] = {0, 0}, en[2] = {M, N}, en1[2] = {1, N};
  int64_t d2[1] = {2};
  if (res) {
    mb_init_raw(&m, "st", 7, 1, d2, st, sizeof(st));
    mb_init_raw(&m, "en", 7, 1, d2, variant == 7 ? en1 : en, sizeof(en));
  }
  if (res && variant != 8) mb_node_input(mb_node(&m, "Slice", "sl", "x", "st", "r"), "en");
  Onnx__NodeProto *dq = mb_node(&m, "DynamicQuantizeLinear", "dq", "x", NULL, "xq");
  mb_node_output(dq, "xs");
  mb_node_output(dq, "xz");
  mb_node(&m, "Mul", "smul", "xs", "ws", "s");
  Onnx__NodeProto *mm = mb_node(&m, "MatMulInteger", "mm", "xq", "W", "acc");
  mb_node_input(mm, "xz");
  mb_node_input(mm, "wz");
  mb_attr_i(&m, mb_node(&m, "Cast", "cast", "acc", NULL, "accf"), "to", 1);
  int extra = variant >= 2 && variant != 9;
  if (variant == 8) mb_node_input(mb_node(&m, "Slice", "sl", "x", "st", "r"), "en");
  mb_node(&m, "Mul", "deq", "accf", "s", extra ? "d" : "y");
  if (variant == 2 || variant == 3) mb_node(&m, "Add", "add", "d", variant == 2 ? "s" : "accf", "y");
  if (variant == 5) mb_node(&m, "Add", "add", "r", "d", "y");
  if (variant == 6) mb_node(&m, "Add", "add2", mb_node(&m, "Add", "add", "d", "r", "e")->output[0], "d", "y");
  if (variant == 4 || variant == 7 || variant == 8) mb_node(&m, "Add", "add", "d", "r", "y");
  static const char *const ops[4] = {"cl.binary.mul", "cl.qgemm_packed", "cl.binary.add",
                                     "cl.cast"};
  uint32_t cnt[4];
  vmcc_tensor_t xin = {VM_F32, 2, {M, K}, x, sizeof(x)};
  if (nd == 3) xin = (vmcc_tensor_t){VM_F32, 3, {1, M, K}, x, sizeof(x)};
  float got[M * N];
  vmcc_onnx_report_t rep;
  compile_run_counts(e, &m, &xin, &rep, got, sizeof(got), ops, 4, cnt);
  assert_int_equal(cnt[3], variant == 3 ? 1 : 0);
  assert_int_equal(cnt[0], variant == 2 ? 1 : variant == 3 ? 2 : 0);
  assert_int_equal(cnt[1], 1);
  /* the Cast and the last Mul (and the residual Add) */
  assert_int_equal(rep.num_folded, variant == 3 ? 0 : variant == 4 || variant == 5 ? 3 : 2);
  assert_int_equal(cnt[2], variant == 2 || variant == 3 || variant == 7 || variant == 8 ? 1
                           : variant == 6                              ? 2
                                                                       : 0);
  /* DynamicQuantizeLinear, then the product, in the nodes' float32 steps */
  float mn = 0.0f, mx = 0.0f;
  for (int i = 0; i < M * K; i++) {
    mn = fminf(mn, x[i]);
    mx = fmaxf(mx, x[i]);
  }
  float xs = (mx - mn) / 255.0f;
  float zp = rintf(fminf(fmaxf(0.0f - mn / xs, 0.0f), 255.0f));
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      int32_t acc = 0;
      for (int k = 0; k < K; k++) {
        float q = fminf(fmaxf(rintf(x[i * K + k] / xs) + zp, 0.0f), 255.0f);
        acc += ((int32_t)q - (int32_t)zp) * ((int32_t)w[k * N + j] - wz);
      }
      float sc = xs * ws[j];
      /* volatile: the reference rounds the product before the adds, as the
       * kernel does (gnu11 lets the compiler contract into an fma) */
      volatile float prod = (float)acc * sc;
      float want = prod;
      if (variant == 2) want += sc;
      if (variant == 3) want += (float)acc;
      float r = x[(variant == 7 ? 0 : i) * K + j];
      if (res) want = variant == 6 ? (want + r) + want : want + r;
      if (memcmp(&want, &got[i * N + j], 4) != 0)
        fail_msg("dynamic matmul (variant %d) at %d,%d: %.9g, expected %.9g", variant, i, j,
                 (double)got[i * N + j], (double)want);
    }
}

static void test_dynamic_matmul_scale_folded(void **state) {
  for (int v = 0; v < 10; v++) dynamic_matmul_case(*state, v);
}

/* A MatMul by a constant float32 B [K, N] packs B at compile time into
 * cl.gemm_packed's panels (docs/operators.md): 0 A [2, 17, 40] by W [40,
 * 50] then Add of a bias [50] (one cl.gemm_packed with the bias, no
 * cl.gemm, no cl.binary.add), 1 the same without the Add; kept as cl.gemm:
 * 2 N = 15 (most of a panel would be pad), 3 one row of A (M = 1: gemv);
 * 4 B an Add of two constants (W + 0, folded by the compiler): packed too.
 * (A B computed at run time keeps cl.gemm: the attention cases below.)
 * Every result matches the host. */
static void matmul_packed_case(env_t *e, int variant) {
  enum { B = 2, M = 17, K = 40, NMAX = 50 };
  int n = variant == 2 ? 15 : NMAX, rows = variant == 3 ? 1 : B * M;
  static float x[B * M * K], w[K * NMAX], bias[NMAX], got[B * M * NMAX];
  for (int i = 0; i < B * M * K; i++) x[i] = (float)((i * 7) % 11) * 0.25f - 1.0f;
  for (int i = 0; i < K * NMAX; i++) w[i] = (float)((i * 5) % 9) * 0.125f - 0.5f;
  for (int i = 0; i < NMAX; i++) bias[i] = (float)i * 0.5f - 3.0f;
  mb_t m;
  mb_init(&m, 13);
  int64_t x3[3] = {B, M, K}, x2[2] = {1, K}, y3[3] = {B, M, n}, y2[2] = {1, n};
  int64_t wdims[2] = {K, n}, b1[1] = {n};
  mb_input(&m, "x", variant == 3 ? 2 : 3, variant == 3 ? x2 : x3);
  mb_output(&m, "y", variant == 3 ? 2 : 3, variant == 3 ? y2 : y3);
  mb_init_raw(&m, "w", 1, 2, wdims, w, (size_t)(K * n) * 4);
  mb_init_raw(&m, "b", 1, 1, b1, bias, (size_t)n * 4);
  const char *wname = "w";
  if (variant == 4) {
    static const float zero = 0.0f;
    mb_init_raw(&m, "z", 1, 0, NULL, &zero, 4);
    mb_node(&m, "Add", "wz", "w", "z", "wr");
    wname = "wr";
  }
  int with_bias = variant != 1;
  mb_node(&m, "MatMul", "mm", "x", wname, with_bias ? "p" : "y");
  if (with_bias) mb_node(&m, "Add", "add", "p", "b", "y");
  static const char *const ops[3] = {"cl.gemm_packed", "cl.gemm", "cl.binary.add"};
  uint32_t cnt[3];
  vmcc_tensor_t xin = {VM_F32, variant == 3 ? 2u : 3u, {B, M, K}, x, (size_t)(rows * K) * 4};
  if (variant == 3) {
    xin.shape[0] = 1;
    xin.shape[1] = K;
  }
  vmcc_onnx_report_t rep;
  compile_run_counts(e, &m, &xin, &rep, got, (size_t)(rows * n) * 4, ops, 3, cnt);
  int packed = variant <= 1 || variant == 4;
  if (cnt[0] != (packed ? 1u : 0u) || cnt[1] != (packed ? 0u : 1u) || cnt[2] != 0)
    fail_msg("packed matmul (variant %d): %u cl.gemm_packed, %u cl.gemm, %u cl.binary.add", variant,
             cnt[0], cnt[1], cnt[2]);
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < n; j++) {
      double want = with_bias ? bias[j] : 0.0;
      for (int k = 0; k < K; k++) want += (double)x[r * K + k] * w[k * n + j];
      if (fabs(want - got[r * n + j]) > 1e-4 * (1 + fabs(want)))
        fail_msg("packed matmul (variant %d) at %d,%d: %g, expected %g", variant, r, j,
                 (double)got[r * n + j], want);
    }
}

static void test_matmul_packed_b(void **state) {
  for (int v = 0; v < 5; v++) matmul_packed_case(*state, v);
}

/* Two MatMuls of x by one constant W [40, 50] (shared weights), summed:
 * both run as cl.gemm_packed on one packed copy of W (3 panels of 24
 * columns: 11,520 bytes), not one copy per MatMul; y = 2 x W. */
static void test_matmul_packed_shared(void **state) {
  enum { M = 6, K = 40, N = 50, PANELS_BYTES = 3 * K * 24 * 4 };
  static float x[M * K], w[K * N], got[M * N];
  for (int i = 0; i < M * K; i++) x[i] = (float)((i * 7) % 11) * 0.25f - 1.0f;
  for (int i = 0; i < K * N; i++) w[i] = (float)((i * 5) % 9) * 0.125f - 0.5f;
  mb_t m;
  mb_init(&m, 13);
  int64_t xd[2] = {M, K}, wd[2] = {K, N}, yd[2] = {M, N};
  mb_input(&m, "x", 2, xd);
  mb_output(&m, "y", 2, yd);
  mb_init_raw(&m, "w", 1, 2, wd, w, sizeof(w));
  mb_node(&m, "MatMul", "mm0", "x", "w", "p");
  mb_node(&m, "MatMul", "mm1", "x", "w", "q");
  mb_node(&m, "Add", "add", "p", "q", "y");
  static const char *const ops[2] = {"cl.gemm_packed", "cl.gemm"};
  uint32_t cnt[2];
  uint64_t f32;
  vmcc_tensor_t xin = {VM_F32, 2, {M, K}, x, sizeof(x)};
  vmcc_onnx_report_t rep;
  compile_run_counts_i8(*state, &m, &xin, &rep, got, sizeof(got), ops, 2, cnt, NULL, &f32);
  assert_int_equal(cnt[0], 2);
  assert_int_equal(cnt[1], 0);
  if (f32 < PANELS_BYTES || f32 >= 2 * PANELS_BYTES)
    fail_msg("float32 constants: %llu bytes, want one packed W (%d) and scalars",
             (unsigned long long)f32, PANELS_BYTES);
  for (int r = 0; r < M; r++)
    for (int j = 0; j < N; j++) {
      double want = 0;
      for (int k = 0; k < K; k++) want += (double)x[r * K + k] * w[k * N + j];
      want *= 2;
      if (fabs(want - got[r * N + j]) > 1e-4 * (1 + fabs(want)))
        fail_msg("shared packed W at %d,%d: %g, expected %g", r, j, (double)got[r * N + j], want);
    }
}

/* Three MatMuls of one x as quantize_dynamic writes attention's Q, K and
 * V: one DynamicQuantizeLinear, three scale Muls, three MatMulIntegers
 * (W 40 x 16 each, zero point 0) each ending in Cast and Mul, y = (d0 +
 * d1) + d2. The quantized x is emitted once as int16 less its zero point
 * and the three products run as one cl.qgemm_packed with three outputs;
 * variant 1 gives the third W a zero point of 3: it runs alone (two
 * calls). Each W is in the executable once (no unused packed copy of the
 * first part's). Bit for bit the nodes' float32 arithmetic on the host. */
static void dynamic_matmul_siblings_case(env_t *e, int variant) {
  enum { M = 9, K = 40, N = 16, P = 3 };
  static float x[M * K], ws[P][N];
  static int8_t w[P][K * N];
  const int8_t wz[P] = {0, 0, (int8_t)(variant ? 3 : 0)};
  for (int i = 0; i < M * K; i++) x[i] = (float)((i * 41) % 29) / 9.0f - 1.1f;
  for (int p = 0; p < P; p++) {
    for (int i = 0; i < K * N; i++) w[p][i] = (int8_t)((i * (29 + 2 * p)) % 255 - 127);
    for (int j = 0; j < N; j++) ws[p][j] = 0.0117f + 0.0009f * (float)(p == 1 ? j : p);
  }
  mb_t m;
  mb_init(&m, 13);
  int64_t xd[2] = {M, K}, wd[2] = {K, N}, sd[1] = {N}, yd[2] = {M, N};
  mb_input(&m, "x", 2, xd);
  mb_output(&m, "y", 2, yd);
  Onnx__NodeProto *dq = mb_node(&m, "DynamicQuantizeLinear", "dq", "x", NULL, "xq");
  mb_node_output(dq, "xs");
  mb_node_output(dq, "xz");
  static const char *const wn[P] = {"W0", "W1", "W2"}, *const wzn[P] = {"wz0", "wz1", "wz2"},
                           *const wsn[P] = {"ws0", "ws1", "ws2"}, *const sn[P] = {"s0", "s1", "s2"},
                           *const an[P] = {"a0", "a1", "a2"}, *const fn[P] = {"f0", "f1", "f2"},
                           *const dn[P] = {"d0", "d1", "d2"};
  for (int p = 0; p < P; p++) {
    mb_init_raw(&m, wn[p], 3, 2, wd, w[p], sizeof(w[p]));
    mb_init_raw(&m, wzn[p], 3, 0, NULL, &wz[p], 1);
    if (p == 1)
      mb_init_raw(&m, wsn[p], 1, 1, sd, ws[p], sizeof(ws[p]));
    else
      mb_init_raw(&m, wsn[p], 1, 0, NULL, ws[p], 4);
    mb_node(&m, "Mul", sn[p], "xs", wsn[p], sn[p]);
  }
  for (int p = 0; p < P; p++) {
    Onnx__NodeProto *mm = mb_node(&m, "MatMulInteger", an[p], "xq", wn[p], an[p]);
    mb_node_input(mm, "xz");
    mb_node_input(mm, wzn[p]);
  }
  for (int p = 0; p < P; p++) mb_attr_i(&m, mb_node(&m, "Cast", fn[p], an[p], NULL, fn[p]), "to", 1);
  for (int p = 0; p < P; p++) mb_node(&m, "Mul", dn[p], fn[p], sn[p], dn[p]);
  mb_node(&m, "Add", "add01", "d0", "d1", "d01");
  mb_node(&m, "Add", "add012", "d01", "d2", "y");
  static const char *const ops[3] = {"cl.binary.mul", "cl.qgemm_packed", "cl.dynamic_quantize"};
  uint32_t cnt[3];
  vmcc_tensor_t xin = {VM_F32, 2, {M, K}, x, sizeof(x)};
  float got[M * N];
  vmcc_onnx_report_t rep;
  uint64_t i8;
  compile_run_counts_i8(e, &m, &xin, &rep, got, sizeof(got), ops, 3, cnt, &i8, NULL);
  assert_int_equal(cnt[0], 0);
  assert_int_equal(cnt[1], variant ? 2 : 1);
  assert_int_equal(cnt[2], 1);
  /* the int8 constants: each W once, packed (K even, N a multiple of 8: no
   * padding), plus variant 1's one-byte zero point of W2 */
  assert_int_equal(i8, (uint64_t)(P * K * N) + (variant ? 1 : 0));
  float mn = 0.0f, mx = 0.0f;
  for (int i = 0; i < M * K; i++) mn = fminf(mn, x[i]), mx = fmaxf(mx, x[i]);
  float xs = (mx - mn) / 255.0f;
  float zp = rintf(fminf(fmaxf(0.0f - mn / xs, 0.0f), 255.0f));
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      float d[P];
      for (int p = 0; p < P; p++) {
        int32_t acc = 0;
        for (int k = 0; k < K; k++) {
          float q = fminf(fmaxf(rintf(x[i * K + k] / xs) + zp, 0.0f), 255.0f);
          acc += ((int32_t)q - (int32_t)zp) * ((int32_t)w[p][k * N + j] - wz[p]);
        }
        d[p] = (float)acc * (xs * ws[p][p == 1 ? j : 0]);
      }
      float want = (d[0] + d[1]) + d[2];
      if (memcmp(&want, &got[i * N + j], 4) != 0)
        fail_msg("sibling products (variant %d) at %d,%d: %.9g, expected %.9g", variant, i, j,
                 (double)got[i * N + j], (double)want);
    }
}

static void test_dynamic_matmul_siblings(void **state) {
  for (int v = 0; v < 2; v++) dynamic_matmul_siblings_case(*state, v);
}

/* Attention's transposes as T5-style exports write them, on x [B, S, H, D]
 * (the heads of a projection): q = Transpose(x, 0213), kt = Transpose(x,
 * 0231), a = MatMul(q, kt) [B, H, S, S], o = MatMul(a, Transpose(x,
 * 0213)) [B, H, S, D], y = Transpose(o, 0213) (the heads merged back).
 * Variants: 0 B = 1: both MatMuls read x in place (cl.gemm_strided) and the
 * second writes y's layout: no cl.transpose; 1 B = 2 (two batch dims that do
 * not merge: one launch per outer batch): the same; 2 y = Transpose(o,
 * 0132), which moves the last axis: the products still read x in place,
 * one cl.transpose makes y; 3 y = MatMul(q, W) with W a constant: no
 * strided product (cl.gemm after the transpose); 4 as T5's decoder writes
 * it: K and V each through a Concat of one input (axis -2, a cache without
 * a past), K^T as Transpose(that, 0132): the Concats are the inputs
 * themselves, still pending, so as variant 0 (no cl.concat either). Every
 * result matches the host within float rounding. */
static void attention_transpose_case(env_t *e, int variant) {
  enum { S = 5, H = 3, D = 4 };
  int B = variant == 1 ? 2 : 1;
  static float x[2 * S * H * D], wc[D * D], a[2 * H * S * S];
  for (int i = 0; i < B * S * H * D; i++) x[i] = (float)((i * 37) % 19) / 9.0f - 1.0f;
  for (int i = 0; i < D * D; i++) wc[i] = (float)((i * 13) % 7) / 7.0f - 0.4f;
  static const int64_t p0213[4] = {0, 2, 1, 3}, p0231[4] = {0, 2, 3, 1}, p0132[4] = {0, 1, 3, 2};
  mb_t m;
  mb_init(&m, 13);
  int64_t xd[4] = {B, S, H, D}, wd[2] = {D, D}, ymerge[4] = {B, S, H, D},
          ylast[4] = {B, H, D, S}, yq[4] = {B, H, S, D};
  mb_input(&m, "x", 4, xd);
  mb_output(&m, "y", 4, variant == 2 ? ylast : variant == 3 ? yq : ymerge);
  mb_init_raw(&m, "W", 1, 2, wd, wc, sizeof(wc));
  mb_attr_ints(&m, mb_node(&m, "Transpose", "tq", "x", NULL, "q"), "perm", p0213, 4);
  if (variant == 3) {
    mb_node(&m, "MatMul", "mw", "q", "W", "y");
  } else if (variant == 4) {
    mb_attr_ints(&m, mb_node(&m, "Transpose", "tk", "x", NULL, "k"), "perm", p0213, 4);
    mb_attr_ints(&m, mb_node(&m, "Transpose", "tv", "x", NULL, "v0"), "perm", p0213, 4);
    mb_attr_i(&m, mb_node(&m, "Concat", "ck", "k", NULL, "kc"), "axis", -2);
    mb_attr_i(&m, mb_node(&m, "Concat", "cv", "v0", NULL, "v"), "axis", -2);
    mb_attr_ints(&m, mb_node(&m, "Transpose", "tkt", "kc", NULL, "kt"), "perm", p0132, 4);
  } else {
    mb_attr_ints(&m, mb_node(&m, "Transpose", "tk", "x", NULL, "kt"), "perm", p0231, 4);
    mb_attr_ints(&m, mb_node(&m, "Transpose", "tv", "x", NULL, "v"), "perm", p0213, 4);
  }
  if (variant != 3) {
    mb_node(&m, "MatMul", "qk", "q", "kt", "a");
    mb_node(&m, "MatMul", "av", "a", "v", "o");
    mb_attr_ints(&m, mb_node(&m, "Transpose", "to", "o", NULL, "y"), "perm",
                 variant == 2 ? p0132 : p0213, 4);
  }
  static const char *const ops[4] = {"cl.transpose", "cl.gemm_strided", "cl.gemm", "cl.concat"};
  uint32_t cnt[4];
  vmcc_tensor_t xin = {VM_F32, 4, {B, S, H, D}, x, (size_t)(B * S * H * D) * 4};
  float got[2 * S * H * D];
  vmcc_onnx_report_t rep;
  compile_run_counts(e, &m, &xin, &rep, got, (size_t)(B * S * H * D) * 4, ops, 4, cnt);
  assert_int_equal(cnt[0], variant == 2 || variant == 3 ? 1 : 0);
  assert_int_equal(cnt[1], variant == 3 ? 0 : 2);
  assert_int_equal(cnt[2], variant == 3 ? 1 : 0);
  assert_int_equal(cnt[3], 0);
#define X(b, s, h, d) x[(((b) * S + (s)) * H + (h)) * D + (d)]
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++)
      for (int i = 0; i < S; i++)
        for (int j = 0; j < S; j++) {
          double acc = 0;
          for (int d = 0; d < D; d++) acc += (double)X(b, i, h, d) * X(b, j, h, d);
          a[((b * H + h) * S + i) * S + j] = (float)acc;
        }
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++)
      for (int i = 0; i < S; i++)
        for (int d = 0; d < D; d++) {
          double want = 0;
          if (variant == 3)
            for (int k = 0; k < D; k++) want += (double)X(b, i, h, k) * wc[k * D + d];
          else
            for (int j = 0; j < S; j++) want += (double)a[((b * H + h) * S + i) * S + j] * X(b, j, h, d);
          size_t at = variant == 2   ? (size_t)(((b * H + h) * D + d) * S + i)
                      : variant == 3 ? (size_t)(((b * H + h) * S + i) * D + d)
                                     : (size_t)(((b * S + i) * H + h) * D + d);
          if (fabs(want - got[at]) > 1e-4 * (1 + fabs(want)))
            fail_msg("attention (variant %d) at %d,%d,%d,%d: %g, expected %g", variant, b, h, i,
                     d, (double)got[at], want);
        }
#undef X
}

static void test_attention_transposes_strided(void **state) {
  for (int v = 0; v < 5; v++) attention_transpose_case(*state, v);
}

/* An NHWC model as TensorFlow converters write it: x [1, H, W, C] ->
 * Transpose to NCHW -> Conv (bias) -> Transpose to NHWC -> Cast to float ->
 * Sub mean [O] -> Mul scale [1, 1, 1, O] -> Add offset [O] -> Relu, in five
 * variants: 0 then Transpose back to NCHW (the output): all seven nodes
 * after the Conv fold into it; 1 the NHWC Relu output is the output: six
 * fold and one cl.transpose makes it; 2 the Sub's output is also added to
 * the result (another consumer): the fold stops after the Sub (three); 3
 * the scale is [1, 1, OW, 1] (along W, not the channels): the same; 4 the
 * Transpose's output is added to the result: nothing folds. Every result
 * matches the host. */
static void nhwc_conv_case(env_t *e, int variant) {
  enum { C = 2, H = 5, W = 4, O = 3, K = 3, OH = H - K + 1, OW = W - K + 1 };
  static float x[H * W * C], w[O * C * K * K], b[O], mn[O], sc[O], of[O];
  static const int64_t to_nchw[4] = {0, 3, 1, 2}, to_nhwc[4] = {0, 2, 3, 1};
  for (int i = 0; i < H * W * C; i++) x[i] = (float)((i * 37) % 11) / 5.0f - 1.0f;
  for (int i = 0; i < O * C * K * K; i++) w[i] = (float)((i * 13) % 7) / 7.0f - 0.4f;
  for (int o = 0; o < O; o++) {
    b[o] = 0.1f * (float)o - 0.1f;
    mn[o] = 0.2f - 0.15f * (float)o;
    sc[o] = 1.5f - 0.75f * (float)o;
    of[o] = 0.25f * (float)o - 0.1f;
  }
  mb_t m;
  mb_init(&m, 13);
  int64_t xd[4] = {1, H, W, C}, wd[4] = {O, C, K, K}, od[1] = {O}, sd[4] = {1, 1, 1, O};
  int64_t ynchw[4] = {1, O, OH, OW}, ynhwc[4] = {1, OH, OW, O}, swd[4] = {1, 1, OW, 1};
  static float scw[OW];
  for (int j = 0; j < OW; j++) scw[j] = 0.5f + (float)j;
  mb_input(&m, "x", 4, xd);
  mb_output(&m, "y", 4, variant == 0 ? ynchw : ynhwc);
  mb_init_raw(&m, "w", 1, 4, wd, w, sizeof(w));
  mb_init_raw(&m, "b", 1, 1, od, b, sizeof(b));
  mb_init_raw(&m, "mn", 1, 1, od, mn, sizeof(mn));
  if (variant == 3)
    mb_init_raw(&m, "sc", 1, 4, swd, scw, sizeof(scw));
  else
    mb_init_raw(&m, "sc", 1, 4, sd, sc, sizeof(sc));
  mb_init_raw(&m, "of", 1, 1, od, of, sizeof(of));
  mb_attr_ints(&m, mb_node(&m, "Transpose", "t0", "x", NULL, "xc"), "perm", to_nchw, 4);
  Onnx__NodeProto *conv = mb_node(&m, "Conv", "conv", "xc", "w", "c");
  mb_node_input(conv, "b");
  mb_attr_ints(&m, mb_node(&m, "Transpose", "t1", "c", NULL, "t"), "perm", to_nhwc, 4);
  mb_attr_i(&m, mb_node(&m, "Cast", "cast", "t", NULL, "tc"), "to", 1);
  mb_node(&m, "Sub", "sub", "tc", "mn", "s");
  mb_node(&m, "Mul", "mul", "s", "sc", "p");
  mb_node(&m, "Add", "add", "p", "of", "q");
  int extra = variant == 2 || variant == 4;
  mb_node(&m, "Relu", "relu", "q", NULL, variant == 0 || extra ? "r" : "y");
  if (variant == 0) mb_attr_ints(&m, mb_node(&m, "Transpose", "t2", "r", NULL, "y"), "perm", to_nchw, 4);
  if (extra) mb_node(&m, "Add", "add2", "r", variant == 2 ? "s" : "t", "y");
  vmcc_onnx_report_t rep;
  vmcc_tensor_t xin = {VM_F32, 4, {1, H, W, C}, x, sizeof(x)};
  float got[O * OH * OW];
  compile_run(e, &m, &xin, &rep, got, sizeof(got));
  assert_int_equal(rep.num_folded, variant == 0 ? 7 : variant == 1 ? 6 : variant == 4 ? 0 : 3);
  double max_err = 0;
  for (int o = 0; o < O; o++)
    for (int i = 0; i < OH; i++)
      for (int j = 0; j < OW; j++) {
        /* x is NHWC: the conv reads x[i][j][c] as the NCHW map's [c][i][j] */
        double acc = b[o];
        for (int ci = 0; ci < C; ci++)
          for (int ki = 0; ki < K; ki++)
            for (int kj = 0; kj < K; kj++)
              acc += (double)x[((i + ki) * W + j + kj) * C + ci] * w[((o * C + ci) * K + ki) * K + kj];
        double s = variant == 3 ? scw[j] : sc[o];
        double want = fmax((acc - mn[o]) * s + of[o], 0);
        if (variant == 2) want += acc - mn[o];
        if (variant == 4) want += acc;
        float g = variant == 0 ? got[(o * OH + i) * OW + j] : got[(i * OW + j) * O + o];
        double d = fabs(want - g);
        if (d > max_err) max_err = d;
      }
  if (max_err > 1e-5) fail_msg("nhwc conv (variant %d): max abs error %g", variant, max_err);
}

static void test_nhwc_conv_folded(void **state) {
  for (int v = 0; v < 5; v++) nhwc_conv_case(*state, v);
}

/* Transposes of run-time tensors are left pending (onnx_layout.c), on
 * x [1, H, W, C] in four variants: 0 Transpose to NCHW, Transpose back,
 * Relu: the two cancel, no cl.transpose; 1 Transpose to NCHW, Relu, Mul by
 * a per-channel [C, 1, 1], Transpose back: the Relu and the Mul run on x's
 * layout (the constant permuted on the host), no cl.transpose; 2 Transpose
 * (0, 2, 3, 1) twice: one cl.transpose of the composed permutation; 3 (a
 * cube, H = W = C) Add of x's Transposes (0, 3, 1, 2) and (0, 2, 3, 1): the
 * permutations differ, both run (two). Every result matches the host. */
static void transpose_case(env_t *e, int variant) {
  enum { H = 3, W = 4, C = 5, S = 3 };
  static const int64_t to_nchw[4] = {0, 3, 1, 2}, to_nhwc[4] = {0, 2, 3, 1};
  int h = variant == 3 ? S : H, w = variant == 3 ? S : W, ch = variant == 3 ? S : C;
  static float x[H * W * C], sc[C];
  for (int i = 0; i < h * w * ch; i++) x[i] = (float)((i * 37) % 11) / 5.0f - 1.0f;
  for (int i = 0; i < C; i++) sc[i] = 0.5f + 0.25f * (float)i;
  mb_t m;
  mb_init(&m, 13);
  int64_t xd[4] = {1, h, w, ch}, yd[4] = {1, ch, h, w}, sd[3] = {C, 1, 1};
  mb_input(&m, "x", 4, xd);
  mb_output(&m, "y", 4, variant == 2 || variant == 3 ? yd : xd);
  mb_init_raw(&m, "sc", 1, 3, sd, sc, sizeof(sc));
  if (variant == 0) {
    mb_attr_ints(&m, mb_node(&m, "Transpose", "t0", "x", NULL, "a"), "perm", to_nchw, 4);
    mb_attr_ints(&m, mb_node(&m, "Transpose", "t1", "a", NULL, "b"), "perm", to_nhwc, 4);
    mb_node(&m, "Relu", "r", "b", NULL, "y");
  } else if (variant == 1) {
    mb_attr_ints(&m, mb_node(&m, "Transpose", "t0", "x", NULL, "a"), "perm", to_nchw, 4);
    mb_node(&m, "Relu", "r", "a", NULL, "b");
    mb_node(&m, "Mul", "m", "b", "sc", "c");
    mb_attr_ints(&m, mb_node(&m, "Transpose", "t1", "c", NULL, "y"), "perm", to_nhwc, 4);
  } else if (variant == 2) {
    mb_attr_ints(&m, mb_node(&m, "Transpose", "t0", "x", NULL, "a"), "perm", to_nhwc, 4);
    mb_attr_ints(&m, mb_node(&m, "Transpose", "t1", "a", NULL, "y"), "perm", to_nhwc, 4);
  } else {
    mb_attr_ints(&m, mb_node(&m, "Transpose", "t0", "x", NULL, "a"), "perm", to_nchw, 4);
    mb_attr_ints(&m, mb_node(&m, "Transpose", "t1", "x", NULL, "b"), "perm", to_nhwc, 4);
    mb_node(&m, "Add", "add", "a", "b", "y");
  }
  vmcc_onnx_report_t rep;
  vmcc_tensor_t xin = {VM_F32, 4, {1, h, w, ch}, x, (size_t)(h * w * ch) * 4};
  float got[H * W * C];
  uint32_t nt;
  compile_run_t(e, &m, &xin, &rep, got, (size_t)(h * w * ch) * 4, "cl.transpose", &nt);
  assert_int_equal(nt, variant < 2 ? 0 : variant == 2 ? 1 : 2);
  for (int i = 0; i < h; i++)
    for (int j = 0; j < w; j++)
      for (int k = 0; k < ch; k++) {
        double v = x[(i * w + j) * ch + k], want, g;
        if (variant == 0 || variant == 1) {
          want = fmax(v, 0) * (variant == 1 ? sc[k] : 1);
          g = got[(i * w + j) * ch + k];
        } else if (variant == 2) {
          want = v;
          g = got[(k * h + i) * w + j]; /* y[c][h][w] = x[h][w][c] */
        } else {
          /* y[a][b][d] = x[b][d][a] + x[d][a][b]: at (a, b, d) = (k, i, j) */
          want = x[(i * w + j) * ch + k] + x[(j * w + k) * ch + i];
          g = got[(k * h + i) * w + j];
        }
        if (fabs(want - g) > 1e-6)
          fail_msg("transposes (variant %d) at %d,%d,%d: %g, expected %g", variant, i, j, k, g,
                   want);
      }
}

static void test_transposes_cancel(void **state) {
  for (int v = 0; v < 4; v++) transpose_case(*state, v);
}

/* A residual block of an NHWC ResNet as converters write it: x [1, H, W, C]
 * -> Transpose to NCHW -> Conv 1x1 -> Transpose to NHWC -> Cast -> Sub,
 * Mul, Add (batch norm on the last axis) -> Relu = r; r -> Transpose ->
 * Conv 1x1 -> Transpose -> Mul, Add (batch norm) -> Add r -> Relu = y
 * (variant 0, NHWC) or y's Transpose to NCHW (variant 1). The batch norms
 * fold into the convolutions across the transposes, r stays NCHW (its
 * Transpose before the second Conv cancels), the residual Add and Relu run
 * in NCHW: one cl.transpose for x, and one for y in variant 0 (before: 4).
 * The result matches the host's unfolded computation. */
static void nhwc_residual_case(env_t *e, int variant) {
  enum { H = 3, W = 4, C = 3, O = 3 };
  static const int64_t to_nchw[4] = {0, 3, 1, 2}, to_nhwc[4] = {0, 2, 3, 1};
  static float x[H * W * C], w1[O * C], w2[O * O], mn[O], sc[O], of[O], sc2[O], of2[O];
  for (int i = 0; i < H * W * C; i++) x[i] = (float)((i * 37) % 11) / 5.0f - 1.0f;
  for (int i = 0; i < O * C; i++) w1[i] = (float)((i * 13) % 7) / 7.0f - 0.4f;
  for (int i = 0; i < O * O; i++) w2[i] = (float)((i * 5) % 9) / 9.0f - 0.45f;
  for (int o = 0; o < O; o++) {
    mn[o] = 0.2f - 0.15f * (float)o;
    sc[o] = 1.5f - 0.5f * (float)o;
    of[o] = 0.25f * (float)o - 0.1f;
    sc2[o] = 0.75f + 0.25f * (float)o;
    of2[o] = -0.3f + 0.2f * (float)o;
  }
  mb_t m;
  mb_init(&m, 13);
  int64_t xd[4] = {1, H, W, C}, w1d[4] = {O, C, 1, 1}, w2d[4] = {O, O, 1, 1};
  int64_t cd[4] = {1, 1, 1, O}, od[1] = {O}, ynhwc[4] = {1, H, W, O}, ynchw[4] = {1, O, H, W};
  mb_input(&m, "x", 4, xd);
  mb_output(&m, "y", 4, variant == 0 ? ynhwc : ynchw);
  mb_init_raw(&m, "w1", 1, 4, w1d, w1, sizeof(w1));
  mb_init_raw(&m, "w2", 1, 4, w2d, w2, sizeof(w2));
  mb_init_raw(&m, "mn", 1, 4, cd, mn, sizeof(mn));
  mb_init_raw(&m, "sc", 1, 1, od, sc, sizeof(sc));
  mb_init_raw(&m, "of", 1, 4, cd, of, sizeof(of));
  mb_init_raw(&m, "sc2", 1, 4, cd, sc2, sizeof(sc2));
  mb_init_raw(&m, "of2", 1, 1, od, of2, sizeof(of2));
  mb_attr_ints(&m, mb_node(&m, "Transpose", "t0", "x", NULL, "xc"), "perm", to_nchw, 4);
  mb_node(&m, "Conv", "conv1", "xc", "w1", "c1");
  mb_attr_ints(&m, mb_node(&m, "Transpose", "t1", "c1", NULL, "n1"), "perm", to_nhwc, 4);
  mb_attr_i(&m, mb_node(&m, "Cast", "cast", "n1", NULL, "n1c"), "to", 1);
  mb_node(&m, "Sub", "sub", "n1c", "mn", "s1");
  mb_node(&m, "Mul", "mul", "s1", "sc", "p1");
  mb_node(&m, "Add", "add", "p1", "of", "q1");
  mb_node(&m, "Relu", "relu", "q1", NULL, "r");
  mb_attr_ints(&m, mb_node(&m, "Transpose", "t2", "r", NULL, "rc"), "perm", to_nchw, 4);
  mb_node(&m, "Conv", "conv2", "rc", "w2", "c2");
  mb_attr_ints(&m, mb_node(&m, "Transpose", "t3", "c2", NULL, "n2"), "perm", to_nhwc, 4);
  mb_node(&m, "Mul", "mul2", "n2", "sc2", "p2");
  mb_node(&m, "Add", "add2", "p2", "of2", "q2");
  mb_node(&m, "Add", "res", "q2", "r", "z");
  mb_node(&m, "Relu", "relu2", "z", NULL, variant == 0 ? "y" : "yn");
  if (variant == 1)
    mb_attr_ints(&m, mb_node(&m, "Transpose", "t4", "yn", NULL, "y"), "perm", to_nchw, 4);
  vmcc_onnx_report_t rep;
  vmcc_tensor_t xin = {VM_F32, 4, {1, H, W, C}, x, sizeof(x)};
  float got[H * W * O];
  uint32_t nt;
  compile_run_t(e, &m, &xin, &rep, got, sizeof(got), "cl.transpose", &nt);
  assert_int_equal(nt, variant == 0 ? 2 : 1);
  double max_err = 0;
  for (int i = 0; i < H; i++)
    for (int j = 0; j < W; j++) {
      double r[O];
      for (int o = 0; o < O; o++) {
        double acc = 0;
        for (int ci = 0; ci < C; ci++) acc += (double)x[(i * W + j) * C + ci] * w1[o * C + ci];
        r[o] = fmax((acc - mn[o]) * sc[o] + of[o], 0);
      }
      for (int o = 0; o < O; o++) {
        double acc = 0;
        for (int ci = 0; ci < O; ci++) acc += r[ci] * w2[o * O + ci];
        double want = fmax(acc * sc2[o] + of2[o] + r[o], 0);
        float g = variant == 0 ? got[(i * W + j) * O + o] : got[(o * H + i) * W + j];
        double d = fabs(want - g);
        if (d > max_err) max_err = d;
      }
    }
  if (max_err > 1e-5) fail_msg("nhwc residual (variant %d): max abs error %g", variant, max_err);
}

static void test_nhwc_residual_block(void **state) {
  for (int v = 0; v < 2; v++) nhwc_residual_case(*state, v);
}

/* A Pad before a Conv or MaxPool is left pending and taken as the
 * operator's own padding, on x [1, C, H, W] in four variants: 0 Pad by
 * zeros (top 1, left 2, bottom 2, right 1) then a 3x3 Conv: no cl.pad;
 * 1 Pad by edge values (1 each side) then a 3x3 stride-2 MaxPool: no
 * cl.pad; 2 the same edge Pad then an AveragePool (edge copies would be
 * averaged): one cl.pad; 3 Pad by 0.5 then the Conv: one cl.pad. Every
 * result matches the host's padded computation. */
static void pad_fold_case(env_t *e, int variant) {
  enum { C = 2, H = 5, W = 6, O = 2, K = 3 };
  static float x[C * H * W], w[O * C * K * K];
  for (int i = 0; i < C * H * W; i++) x[i] = (float)((i * 37) % 11) / 5.0f - 1.0f;
  for (int i = 0; i < O * C * K * K; i++) w[i] = (float)((i * 13) % 7) / 7.0f - 0.4f;
  static const int64_t pz[8] = {0, 0, 1, 2, 0, 0, 2, 1}, pe[8] = {0, 0, 1, 1, 0, 0, 1, 1};
  static const int64_t ks[2] = {K, K}, st[2] = {2, 2};
  const int64_t *pads = variant == 1 || variant == 2 ? pe : pz;
  int64_t ph = H + pads[2] + pads[6], pw = W + pads[3] + pads[7];
  int conv = variant == 0 || variant == 3;
  int64_t oh = conv ? ph - K + 1 : (ph - K) / 2 + 1, ow = conv ? pw - K + 1 : (pw - K) / 2 + 1;
  int64_t oc = conv ? O : C;
  float half = 0.5f;
  mb_t m;
  mb_init(&m, 13);
  int64_t xd[4] = {1, C, H, W}, wd[4] = {O, C, K, K}, pd[1] = {8}, yd[4] = {1, oc, oh, ow};
  mb_input(&m, "x", 4, xd);
  mb_output(&m, "y", 4, yd);
  mb_init_raw(&m, "w", 1, 4, wd, w, sizeof(w));
  mb_init_raw(&m, "pads", 7, 1, pd, pads, 8 * sizeof(int64_t));
  mb_init_raw(&m, "cv", 1, 0, NULL, &half, sizeof(half));
  Onnx__NodeProto *pad = mb_node(&m, "Pad", "pad", "x", "pads", "xp");
  if (variant == 3) mb_node_input(pad, "cv");
  if (variant == 1 || variant == 2) mb_attr_s(&m, pad, "mode", "edge");
  mb_attrs_t as;
  memset(&as, 0, sizeof(as));
  if (conv) {
    mb_node(&m, "Conv", "conv", "xp", "w", "y");
  } else {
    Onnx__NodeProto *pool =
        mb_node(&m, variant == 1 ? "MaxPool" : "AveragePool", "pool", "xp", NULL, "y");
    mb_attrs_int(&as, pool, "kernel_shape", 0); /* made lists below */
    mb_attrs_int(&as, pool, "strides", 0);
    for (int k = 0; k < 2; k++) {
      as.a[k].type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
      as.a[k].has_i = 0;
      as.a[k].n_ints = 2;
      as.a[k].ints = (int64_t *)(k == 0 ? ks : st);
    }
  }
  vmcc_onnx_report_t rep;
  vmcc_tensor_t xin = {VM_F32, 4, {1, C, H, W}, x, sizeof(x)};
  float got[O * (H + 3) * (W + 3)];
  uint32_t np;
  compile_run_t(e, &m, &xin, &rep, got, (size_t)(oc * oh * ow) * 4, "cl.pad", &np);
  assert_int_equal(np, variant == 0 || variant == 1 ? 0 : 1);
  /* the padded input on the host */
  double xp[C][H + 3][W + 3];
  for (int ci = 0; ci < C; ci++)
    for (int i = 0; i < ph; i++)
      for (int j = 0; j < pw; j++) {
        int si = i - (int)pads[2], sj = j - (int)pads[3];
        int in = si >= 0 && si < H && sj >= 0 && sj < W;
        if (variant == 1 || variant == 2) {
          si = si < 0 ? 0 : si >= H ? H - 1 : si;
          sj = sj < 0 ? 0 : sj >= W ? W - 1 : sj;
          in = 1;
        }
        xp[ci][i][j] = in ? x[(ci * H + si) * W + sj] : variant == 3 ? 0.5 : 0.0;
      }
  double max_err = 0;
  for (int o = 0; o < oc; o++)
    for (int i = 0; i < oh; i++)
      for (int j = 0; j < ow; j++) {
        double want = conv ? 0 : variant == 1 ? -1e30 : 0;
        for (int ki = 0; ki < K; ki++)
          for (int kj = 0; kj < K; kj++) {
            if (conv) {
              for (int ci = 0; ci < C; ci++)
                want += xp[ci][i + ki][j + kj] * w[((o * C + ci) * K + ki) * K + kj];
            } else {
              double v = xp[o][2 * i + ki][2 * j + kj];
              want = variant == 1 ? fmax(want, v) : want + v / (K * K);
            }
          }
        double d = fabs(want - got[(o * oh + i) * ow + j]);
        if (d > max_err) max_err = d;
      }
  if (max_err > 1e-5) fail_msg("pad fold (variant %d): max abs error %g", variant, max_err);
}

static void test_pad_folded(void **state) {
  for (int v = 0; v < 4; v++) pad_fold_case(*state, v);
}

/* x * clip(x + 3, 0, 6) / 6 and clip(x + 3, 0, 6) / 6 (Clip bounds from
 * Constant nodes placed after the Add, as exporters write them) in five
 * variants: 0 HardSwish, 1 HardSigmoid, each one cl.unary call (the three or
 * two nodes after the Add skipped); 2 HardSwish with 2.5 instead of 3; 3 its
 * Clip output also feeds the final Add (another consumer); 4 Div by [L] 6s
 * (a per-element operand): none of those is rewritten. Every result matches
 * the host. */
static void hard_act_case(env_t *e, int variant) {
  enum { N = 2, L = 8 };
  static float x[N * L], six[L];
  for (int i = 0; i < N * L; i++) x[i] = (float)i * 0.75f - 5.0f;
  for (int i = 0; i < L; i++) six[i] = 6.0f;
  float k3 = variant == 2 ? 2.5f : 3.0f, k0 = 0.0f, k6 = 6.0f;
  mb_t m;
  mb_init(&m, 13);
  int64_t xd[2] = {N, L}, ld[1] = {L};
  mb_input(&m, "x", 2, xd);
  mb_output(&m, "y", 2, xd);
  mb_init_raw(&m, "k3", 1, 0, NULL, &k3, 4);
  mb_init_raw(&m, "six", 1, 1, ld, six, sizeof(six));
  mb_node(&m, "Add", "add", "x", "k3", "a");
  Onnx__NodeProto *lo = mb_node(&m, "Constant", "lo", NULL, NULL, "k0");
  mb_attr_scalar(&m, lo, "value", 1, &k0, 4);
  Onnx__NodeProto *hi = mb_node(&m, "Constant", "hi", NULL, NULL, "k6");
  mb_attr_scalar(&m, hi, "value", 1, &k6, 4);
  Onnx__NodeProto *clip = mb_node(&m, "Clip", "clip", "a", "k0", "cl");
  mb_node_input(clip, "k6");
  const char *dv = variant == 4 ? "six" : "k6";
  if (variant == 1) {
    mb_node(&m, "Div", "div", "cl", dv, "y");
  } else {
    mb_node(&m, "Mul", "mul", "x", "cl", "p");
    mb_node(&m, "Div", "div", "p", dv, variant == 3 ? "q" : "y");
    if (variant == 3) mb_node(&m, "Add", "add2", "q", "cl", "y");
  }
  vmcc_onnx_report_t rep;
  vmcc_tensor_t xin = {VM_F32, 2, {N, L}, x, sizeof(x)};
  float got[N * L];
  compile_run(e, &m, &xin, &rep, got, sizeof(got));
  /* the two Constant nodes fold always */
  assert_int_equal(rep.num_folded, 2 + (variant == 0 ? 3 : variant == 1 ? 2 : 0));
  for (int i = 0; i < N * L; i++) {
    double v = x[i], c = fmin(fmax(v + k3, 0), 6);
    double want = variant == 1 ? c / 6 : v * c / 6;
    if (variant == 3) want += c;
    if (fabs(got[i] - want) > 1e-6)
      fail_msg("variant %d, x %g: %.7g, expected %.7g", variant, v, got[i], want);
  }
}

static void test_hard_act_rewritten(void **state) {
  for (int v = 0; v < 5; v++) hard_act_case(*state, v);
}

/* Conv (3 output channels, bias) then an activation folded into its
 * epilogue (cl.conv2d's 16-argument form), in five variants: 0 hard_swish
 * spelled out (Add 3, Clip, Mul by the Conv's output, Div 6) then Mul and
 * Add by scalars; 1 Relu; 2 HardSwish then Mul by a scalar; 3 hard_swish
 * spelled out then Mul by a per-channel [3, 1, 1] (not a scalar: stays a
 * cl.binary.mul); 4 Relu whose input also feeds the final Add (another
 * consumer: nothing folded). Every result matches the host. */
static void conv_epilogue_case(env_t *e, int variant) {
  enum { C = 2, H = 5, W = 6, O = 3, K = 3, OH = H - K + 1, OW = W - K + 1 };
  static float x[C * H * W], w[O * C * K * K], b[O], mc[O];
  for (int i = 0; i < C * H * W; i++) x[i] = (float)((i * 37) % 11) / 2.0f - 2.5f;
  for (int i = 0; i < O * C * K * K; i++) w[i] = (float)((i * 13) % 7) / 7.0f - 0.4f;
  for (int o = 0; o < O; o++) {
    b[o] = 0.5f * (float)o - 0.5f;
    mc[o] = 1.5f - 0.75f * (float)o;
  }
  float k3 = 3.0f, k0 = 0.0f, k6 = 6.0f, sm = 0.75f, sa = -0.25f;
  mb_t m;
  mb_init(&m, 14);
  int64_t xd[4] = {1, C, H, W}, wd[4] = {O, C, K, K}, od[1] = {O}, yd[4] = {1, O, OH, OW};
  int64_t md3[3] = {O, 1, 1};
  mb_input(&m, "x", 4, xd);
  mb_output(&m, "y", 4, yd);
  mb_init_raw(&m, "w", 1, 4, wd, w, sizeof(w));
  mb_init_raw(&m, "b", 1, 1, od, b, sizeof(b));
  mb_init_raw(&m, "k3", 1, 0, NULL, &k3, 4);
  mb_init_raw(&m, "k0", 1, 0, NULL, &k0, 4);
  mb_init_raw(&m, "k6", 1, 0, NULL, &k6, 4);
  mb_init_raw(&m, "sm", 1, 0, NULL, &sm, 4);
  mb_init_raw(&m, "sa", 1, 0, NULL, &sa, 4);
  mb_init_raw(&m, "mc", 1, 3, md3, mc, sizeof(mc));
  Onnx__NodeProto *conv = mb_node(&m, "Conv", "conv", "x", "w", "c");
  mb_node_input(conv, "b");
  if (variant == 0 || variant == 3) {
    mb_node(&m, "Add", "add3", "c", "k3", "a");
    Onnx__NodeProto *clip = mb_node(&m, "Clip", "clip", "a", "k0", "cl");
    mb_node_input(clip, "k6");
    mb_node(&m, "Mul", "mulx", "cl", "c", "p");
    mb_node(&m, "Div", "div", "p", "k6", "h");
    if (variant == 0) {
      mb_node(&m, "Mul", "mul", "h", "sm", "t");
      mb_node(&m, "Add", "add", "sa", "t", "y");
    } else {
      mb_node(&m, "Mul", "mul", "h", "mc", "y");
    }
  } else if (variant == 2) {
    mb_node(&m, "HardSwish", "hs", "c", NULL, "h");
    mb_node(&m, "Mul", "mul", "sm", "h", "y");
  } else {
    mb_node(&m, "Relu", "relu", "c", NULL, variant == 4 ? "r" : "y");
    if (variant == 4) mb_node(&m, "Add", "add", "r", "c", "y");
  }
  vmcc_onnx_report_t rep;
  vmcc_tensor_t xin = {VM_F32, 4, {1, C, H, W}, x, sizeof(x)};
  float got[O * OH * OW];
  compile_run(e, &m, &xin, &rep, got, sizeof(got));
  static const int folded[5] = {6, 1, 2, 4, 0};
  assert_int_equal(rep.num_folded, folded[variant]);
  double max_err = 0;
  for (int o = 0; o < O; o++)
    for (int i = 0; i < OH; i++)
      for (int j = 0; j < OW; j++) {
        double acc = b[o] + host_conv_at(x, w, C, H, W, K, o, i, j);
        double hs = acc * fmin(fmax(acc + 3, 0), 6) / 6, relu = acc > 0 ? acc : 0;
        double want = variant == 0   ? hs * sm + sa
                      : variant == 1 ? relu
                      : variant == 2 ? hs * sm
                      : variant == 3 ? hs * mc[o]
                                     : relu + acc;
        double d = fabs(want - got[(o * OH + i) * OW + j]);
        if (d > max_err) max_err = d;
      }
  if (max_err > 1e-5) fail_msg("conv epilogue (variant %d): max abs error %g", variant, max_err);
}

static void test_conv_epilogue_folded(void **state) {
  for (int v = 0; v < 5; v++) conv_epilogue_case(*state, v);
}

/* A residual Add after a Conv goes into the convolution's store (cl.conv2d's
 * 18-argument form: y = act(conv + bias + r)): two 1x1 Convs of x, a (w1)
 * and c (w2 and bias b), then Add(c, a) and maybe Relu, in four variants:
 * 0 Add(c, a) then Relu; 1 Add(a, c), no Relu; 2 the NHWC form converters
 * of TensorFlow models write (x NHWC, Transposes to NCHW before and to NHWC
 * after each Conv, a per-channel Mul between the Conv and the Add, y NHWC);
 * 3 Add(c, GlobalAveragePool(a)), a broadcast: not a residual, the Add
 * stays a cl.binary.add. Every result matches the host. */
static void conv_residual_case(env_t *e, int variant) {
  enum { C = 4, H = 5, W = 6, O = 7 };
  static float x[C * H * W], xc[C * H * W], w1[O * C], w2[O * C], b[O], sc[O];
  for (int i = 0; i < C * H * W; i++) x[i] = (float)((i * 37) % 11) / 4.0f - 1.25f;
  for (int i = 0; i < O * C; i++) {
    w1[i] = (float)((i * 13) % 7) / 7.0f - 0.4f;
    w2[i] = (float)((i * 5) % 9) / 9.0f - 0.45f;
  }
  for (int o = 0; o < O; o++) {
    b[o] = 0.25f * (float)o - 0.75f;
    sc[o] = variant == 2 ? 0.5f + 0.125f * (float)o : 1.0f;
  }
  int nhwc = variant == 2;
  /* x as [C, H, W] for the host */
  for (int c = 0; c < C; c++)
    for (int p = 0; p < H * W; p++) xc[c * H * W + p] = nhwc ? x[p * C + c] : x[c * H * W + p];
  mb_t m;
  mb_init(&m, 13);
  int64_t xd[4] = {1, C, H, W}, xn[4] = {1, H, W, C}, wd[4] = {O, C, 1, 1}, od[1] = {O};
  int64_t yd[4] = {1, O, H, W}, yn[4] = {1, H, W, O}, to_nchw[4] = {0, 3, 1, 2},
          to_nhwc[4] = {0, 2, 3, 1};
  mb_input(&m, "x", 4, nhwc ? xn : xd);
  mb_output(&m, "y", 4, nhwc ? yn : yd);
  mb_init_raw(&m, "w1", 1, 4, wd, w1, sizeof(w1));
  mb_init_raw(&m, "w2", 1, 4, wd, w2, sizeof(w2));
  mb_init_raw(&m, "b", 1, 1, od, b, sizeof(b));
  const char *xin_name = "x";
  if (nhwc) {
    Onnx__NodeProto *t = mb_node(&m, "Transpose", "tx", "x", NULL, "xt");
    mb_attr_ints(&m, t, "perm", to_nchw, 4);
    xin_name = "xt";
  }
  mb_node(&m, "Conv", "conv1", xin_name, "w1", "a");
  if (nhwc) {
    Onnx__NodeProto *t = mb_node(&m, "Transpose", "ta", "a", NULL, "an");
    mb_attr_ints(&m, t, "perm", to_nhwc, 4);
  }
  Onnx__NodeProto *conv = mb_node(&m, "Conv", "conv2", xin_name, "w2", "c");
  mb_node_input(conv, "b");
  if (variant == 0) {
    mb_node(&m, "Add", "add", "c", "a", "s");
    mb_node(&m, "Relu", "relu", "s", NULL, "y");
  } else if (variant == 1) {
    mb_node(&m, "Add", "add", "a", "c", "y");
  } else if (variant == 2) {
    mb_init_raw(&m, "sc", 1, 1, od, sc, sizeof(sc));
    Onnx__NodeProto *t = mb_node(&m, "Transpose", "tc", "c", NULL, "cn");
    mb_attr_ints(&m, t, "perm", to_nhwc, 4);
    mb_node(&m, "Mul", "bn", "cn", "sc", "cs");
    mb_node(&m, "Add", "add", "cs", "an", "s");
    mb_node(&m, "Relu", "relu", "s", NULL, "y");
  } else {
    mb_node(&m, "GlobalAveragePool", "gap", "a", NULL, "g");
    mb_node(&m, "Add", "add", "c", "g", "s");
    mb_node(&m, "Relu", "relu", "s", NULL, "y");
  }
  vmcc_onnx_report_t rep;
  vmcc_tensor_t xin = {VM_F32, 4, {1, C, H, W}, x, sizeof(x)};
  if (nhwc) memcpy(xin.shape, xn, sizeof(xn));
  float got[O * H * W];
  static const char *const ops[3] = {"cl.binary.add", "cl.unary.relu", "cl.conv2d"};
  uint32_t counts[3];
  compile_run_counts(e, &m, &xin, &rep, got, sizeof(got), ops, 3, counts);
  assert_int_equal(counts[0], variant == 3);
  assert_int_equal(counts[1], variant == 3);
  assert_int_equal(counts[2], 2);
  double max_err = 0;
  for (int o = 0; o < O; o++) {
    double gap = 0;
    for (int p = 0; p < H * W; p++) gap += host_conv_at(xc, w1, C, H, W, 1, o, p / W, p % W);
    gap /= H * W;
    for (int i = 0; i < H; i++)
      for (int j = 0; j < W; j++) {
        double cv = sc[o] * (b[o] + host_conv_at(xc, w2, C, H, W, 1, o, i, j));
        double av = variant == 3 ? gap : host_conv_at(xc, w1, C, H, W, 1, o, i, j);
        double want = cv + av;
        if (variant != 1 && want < 0) want = 0;
        double d = fabs(want - got[nhwc ? (i * W + j) * O + o : (o * H + i) * W + j]);
        if (d > max_err) max_err = d;
      }
  }
  if (max_err > 1e-5) fail_msg("conv residual (variant %d): max abs error %g", variant, max_err);
}

static void test_conv_residual_folded(void **state) {
  for (int v = 0; v < 4; v++) conv_residual_case(*state, v);
}

/* A squeeze-excitation block as PaddleOCR's exports write it:
 * GlobalAveragePool, 1x1 Conv (no bias), Add of a [1, R, 1, 1] constant,
 * Identity, Relu, 1x1 Conv (bias), Add of a [C, 1, 1] constant, then
 * HardSigmoid (alpha 0.2, beta 0.5) or Sigmoid, Mul by x, in four
 * variants: 0 HardSigmoid and 1 Sigmoid, each lowered to one
 * cl.squeeze_excite (no cl.pool2d.global_avg); 2 the gate read by a second
 * Mul too and 3 the Relu a Tanh: neither fits, so the nodes stay separate
 * calls; 4 a map of 66000 elements (past 65536: one work-group per image
 * would be one core) stays separate too. Every result matches the host. */
static void se_case(env_t *e, int variant) {
  enum { C = 6, R = 2 };
  /* variant 4: 66000 elements, past the one-work-group limit */
  int H = variant == 4 ? 110 : 3, W = variant == 4 ? 100 : 5;
  size_t nx = (size_t)(C * H * W);
  static float w1[R * C], a1[R], w2[C * R], b2[C], a2[C];
  float *x = malloc(sizeof(float) * nx), *got = malloc(sizeof(float) * nx);
  assert_true(x && got);
  for (int i = 0; i < C * H * W; i++) x[i] = (float)((i * 37) % 11) / 2.0f - 2.5f;
  for (int i = 0; i < R * C; i++) w1[i] = (float)((i * 13) % 7) / 7.0f - 0.4f;
  for (int i = 0; i < C * R; i++) w2[i] = (float)((i * 5) % 9) / 3.0f - 1.3f;
  for (int r = 0; r < R; r++) a1[r] = 0.25f * (float)r + 0.1f;
  for (int c = 0; c < C; c++) {
    b2[c] = 0.5f * (float)c - 1.0f;
    a2[c] = 0.125f * (float)c - 0.2f;
  }
  mb_t m;
  mb_init(&m, 13);
  int64_t xd[4] = {1, C, H, W}, w1d[4] = {R, C, 1, 1}, w2d[4] = {C, R, 1, 1}, cd[1] = {C};
  int64_t a1d[4] = {1, R, 1, 1}, a2d[3] = {C, 1, 1};
  mb_input(&m, "x", 4, xd);
  mb_output(&m, "y", 4, xd);
  mb_init_raw(&m, "w1", 1, 4, w1d, w1, sizeof(w1));
  mb_init_raw(&m, "a1", 1, 4, a1d, a1, sizeof(a1));
  mb_init_raw(&m, "w2", 1, 4, w2d, w2, sizeof(w2));
  mb_init_raw(&m, "b2", 1, 1, cd, b2, sizeof(b2));
  mb_init_raw(&m, "a2", 1, 3, a2d, a2, sizeof(a2));
  mb_node(&m, "GlobalAveragePool", "gap", "x", NULL, "p");
  Onnx__NodeProto *c1 = mb_node(&m, "Conv", "c1", "p", "w1", "q");
  mb_node(&m, "Add", "add1", "q", "a1", "q1");
  mb_node(&m, "Identity", "id", "q1", NULL, "q2");
  mb_node(&m, variant == 3 ? "Tanh" : "Relu", "relu", "q2", NULL, "r");
  Onnx__NodeProto *c2 = mb_node(&m, "Conv", "c2", "r", "w2", "s");
  mb_node_input(c2, "b2");
  mb_node(&m, "Add", "add2", "a2", "s", "s1");
  mb_attrs_t at;
  memset(&at, 0, sizeof(at));
  Onnx__NodeProto *gn = mb_node(&m, variant == 1 ? "Sigmoid" : "HardSigmoid", "gate", "s1", NULL, "g");
  if (variant != 1) {
    mb_attrs_float(&at, gn, "alpha", 0.2f);
    mb_attrs_float(&at, gn, "beta", 0.5f);
  }
  mb_node(&m, "Mul", "mul", "x", "g", variant == 2 ? "y0" : "y");
  if (variant == 2) mb_node(&m, "Mul", "mul2", "y0", "g", "y");
  if (variant >= 5) {
    /* hostile: a nameless attribute on the first Conv (5) or the gate (6),
     * seen by the block's matcher before the node's own checks: the
     * node's error, no crash */
    mb_attrs_t at2;
    memset(&at2, 0, sizeof(at2));
    Onnx__NodeProto *bad = variant == 5 ? c1 : gn;
    mb_attrs_int(&at2, bad, "group", 1);
    bad->attribute[bad->n_attribute - 1]->name = NULL;
    size_t nbytes;
    uint8_t *bytes = mb_pack(&m, &nbytes);
    vm_executable_t *exec = NULL;
    ASSERT_STATUS(vmcc_onnx_compile(bytes, nbytes, NULL, NULL, &exec, NULL), VM_INVALID_ARGUMENT,
                  variant == 5 ? "node 'c1' (Conv): attribute 0 has no name"
                               : "node 'gate' (HardSigmoid): attribute 0 has no name");
    assert_null(exec);
    free(bytes);
    free(x);
    free(got);
    return;
  }
  vmcc_onnx_report_t rep;
  vmcc_tensor_t xin = {VM_F32, 4, {1, C, H, W}, x, sizeof(float) * nx};
  static const char *const ops[2] = {"cl.squeeze_excite", "cl.pool2d.global_avg"};
  uint32_t counts[2];
  compile_run_counts(e, &m, &xin, &rep, got, sizeof(float) * nx, ops, 2, counts);
  int fused = variant < 2;
  assert_int_equal(counts[0], fused ? 1 : 0);
  assert_int_equal(counts[1], fused ? 0 : 1);
  double pool[C], hid[R], max_err = 0;
  for (int c = 0; c < C; c++) {
    double t = 0;
    for (int i = 0; i < H * W; i++) t += x[c * H * W + i];
    pool[c] = t / (H * W);
  }
  for (int r = 0; r < R; r++) {
    double t = a1[r];
    for (int c = 0; c < C; c++) t += w1[r * C + c] * pool[c];
    hid[r] = variant == 3 ? tanh(t) : t > 0 ? t : 0;
  }
  for (int c = 0; c < C; c++) {
    double t = b2[c] + a2[c];
    for (int r = 0; r < R; r++) t += w2[c * R + r] * hid[r];
    double g = variant == 1 ? 1 / (1 + exp(-t)) : fmin(fmax(0.2 * t + 0.5, 0), 1);
    for (int i = 0; i < H * W; i++) {
      double want = x[c * H * W + i] * g * (variant == 2 ? g : 1);
      double d = fabs(want - got[c * H * W + i]);
      if (d > max_err) max_err = d;
    }
  }
  free(x);
  free(got);
  if (max_err > 1e-5) fail_msg("squeeze-excite (variant %d): max abs error %g", variant, max_err);
}

static void test_squeeze_excite_fused(void **state) {
  for (int v = 0; v < 7; v++) se_case(*state, v);
}

/* A 1-D convolution as jax2tf writes one (magika): Conv over [1, C, L, 1]
 * with a [O, C, K, 1] kernel and no bias, its output through views that
 * keep the channel axis, then the bias Add [1, O, 1] on the rank-3 value.
 * Variants: 0 Slice (whole: ends past the extents, the last one 1) then
 * Squeeze(3) then Add: all three fold into the convolution (no
 * cl.binary.add); 1 Squeeze, Add, then Relu (the epilogue after the view):
 * three folded; 2 a Slice that cuts the last position off, then Squeeze and
 * Add: nothing folds (one cl.binary.add); 3 Squeeze(3) alone, no Add after
 * it: nothing folds. Every result matches the host. */
static void conv_view_bias_case(env_t *e, int variant) {
  enum { C = 3, L = 9, O = 4, K = 3, OL = L - K + 1 };
  static float x[C * L], w[O * C * K], b[O];
  for (int i = 0; i < C * L; i++) x[i] = (float)((i * 37) % 11) / 2.0f - 2.5f;
  for (int i = 0; i < O * C * K; i++) w[i] = (float)((i * 13) % 7) / 7.0f - 0.4f;
  for (int o = 0; o < O; o++) b[o] = 0.75f * (float)o - 1.5f;
  int64_t starts[4] = {0, 0, 0, 0}, ends[4] = {1000000000, 1000000000, 1000000000, 1};
  int64_t axes[4] = {0, 1, 2, 3}, sq[1] = {3}, four[1] = {4}, one[1] = {1};
  if (variant == 2) ends[2] = OL - 1;
  int ol = variant == 2 ? OL - 1 : OL;
  mb_t m;
  mb_init(&m, 13);
  int64_t xd[4] = {1, C, L, 1}, wd[4] = {O, C, K, 1}, bd[3] = {1, O, 1};
  int64_t yd3[3] = {1, O, ol};
  mb_input(&m, "x", 4, xd);
  mb_output(&m, "y", 3, yd3);
  mb_init_raw(&m, "w", 1, 4, wd, w, sizeof(w));
  mb_init_raw(&m, "b", 1, 3, bd, b, sizeof(b));
  mb_init_raw(&m, "st", 7, 1, four, starts, sizeof(starts));
  mb_init_raw(&m, "en", 7, 1, four, ends, sizeof(ends));
  mb_init_raw(&m, "ax", 7, 1, four, axes, sizeof(axes));
  mb_init_raw(&m, "sq", 7, 1, one, sq, sizeof(sq));
  mb_node(&m, "Conv", "conv", "x", "w", "c");
  const char *v = "c";
  if (variant == 0 || variant == 2) {
    Onnx__NodeProto *sl = mb_node(&m, "Slice", "slice", "c", "st", "s");
    mb_node_input(sl, "en");
    mb_node_input(sl, "ax");
    v = "s";
  }
  mb_node(&m, "Squeeze", "squeeze", v, "sq", variant == 3 ? "y" : "q");
  if (variant == 1) {
    mb_node(&m, "Add", "add", "b", "q", "a");
    mb_node(&m, "Relu", "relu", "a", NULL, "y");
  } else if (variant != 3) {
    mb_node(&m, "Add", "add", "q", "b", "y");
  }
  vmcc_onnx_report_t rep;
  vmcc_tensor_t xin = {VM_F32, 4, {1, C, L, 1}, x, sizeof(x)};
  float got[O * OL];
  uint32_t adds = 0;
  compile_run_t(e, &m, &xin, &rep, got, sizeof(float) * (size_t)(O * ol), "cl.binary.add", &adds);
  static const int folded[4] = {3, 3, 0, 0};
  assert_int_equal(rep.num_folded, folded[variant]);
  assert_int_equal(adds, variant == 2 ? 1 : 0);
  double max_err = 0;
  for (int o = 0; o < O; o++)
    for (int l = 0; l < ol; l++) {
      double acc = variant == 3 ? 0 : b[o];
      for (int ci = 0; ci < C; ci++)
        for (int k = 0; k < K; k++) acc += (double)x[ci * L + l + k] * w[(o * C + ci) * K + k];
      if (variant == 1 && acc < 0) acc = 0;
      double d = fabs(acc - got[o * ol + l]);
      if (d > max_err) max_err = d;
    }
  if (max_err > 1e-5) fail_msg("conv view bias (variant %d): max abs error %g", variant, max_err);
}

static void test_conv_view_bias_folded(void **state) {
  for (int v = 0; v < 4; v++) conv_view_bias_case(*state, v);
}

/* Softmax over the last axis spelled out (opset 15, x [R, N]): m =
 * ReduceMax(x, axes [1]), Sub(x, m), Exp, s = ReduceSum(e, [-1]), Div(e,
 * s). Variants: 0 as jax2tf writes it (magika's head): keepdims 0, Max(-inf,
 * m), m and s through Reshape [R, 1] and Expand [R, 1]: one cl.softmax, no
 * cl.unary.exp, nine nodes folded; 1 keepdims 1 and no views: one
 * cl.softmax, four folded; 2 Max(0, m) (not m itself): node by node; 3 the
 * ReduceSum over axis 0 (keepdims 1: a column sum): node by node. Every
 * result matches the host. */
static void softmax_chain_case(env_t *e, int variant) {
  enum { R = 3, N = 5 };
  static float x[R * N];
  for (int i = 0; i < R * N; i++) x[i] = (float)((i * 37) % 11) / 2.0f - 2.5f;
  float ninf = -INFINITY, zero = 0.0f;
  int64_t rs[2] = {R, 1}, two[1] = {2}, one[1] = {1}, last[1] = {-1}, first[1] = {0};
  int keep = variant != 0, mx = variant == 0 || variant == 2;
  mb_t m;
  mb_init(&m, 15);
  int64_t xd[2] = {R, N};
  mb_input(&m, "x", 2, xd);
  mb_output(&m, "y", 2, xd);
  mb_init_raw(&m, "k", 1, 0, NULL, variant == 2 ? &zero : &ninf, 4);
  mb_init_raw(&m, "rs", 7, 1, two, rs, sizeof(rs));
  mb_init_raw(&m, "ax", 7, 1, one, variant == 3 ? first : last, 8);
  Onnx__NodeProto *rm = mb_node(&m, "ReduceMax", "rmax", "x", NULL, "m");
  static const int64_t ax1[1] = {1};
  mb_attrs_t at;
  memset(&at, 0, sizeof(at));
  mb_attrs_ints(&at, rm, "axes", ax1, 1);
  mb_attrs_int(&at, rm, "keepdims", keep);
  const char *mv = "m";
  if (mx) {
    mb_node(&m, "Max", "max", "k", "m", "mm");
    mv = "mm";
  }
  if (!keep) {
    mb_node(&m, "Reshape", "rsm", mv, "rs", "mr");
    mb_node(&m, "Expand", "exm", "mr", "rs", "me");
    mv = "me";
  }
  mb_node(&m, "Sub", "sub", "x", mv, "d");
  mb_node(&m, "Exp", "exp", "d", NULL, "ex");
  Onnx__NodeProto *rsum = mb_node(&m, "ReduceSum", "rsum", "ex", "ax", "s");
  mb_attr_i(&m, rsum, "keepdims", keep);
  const char *sv = "s";
  if (!keep) {
    mb_node(&m, "Reshape", "rss", "s", "rs", "sr");
    mb_node(&m, "Expand", "exs", "sr", "rs", "se");
    sv = "se";
  }
  mb_node(&m, "Div", "div", "ex", sv, "y");
  vmcc_onnx_report_t rep;
  vmcc_tensor_t xin = {VM_F32, 2, {R, N}, x, sizeof(x)};
  float got[R * N];
  static const char *const ops[2] = {"cl.softmax", "cl.unary.exp"};
  uint32_t counts[2];
  compile_run_counts(e, &m, &xin, &rep, got, sizeof(got), ops, 2, counts);
  int fused = variant <= 1;
  assert_int_equal(counts[0], fused ? 1 : 0);
  assert_int_equal(counts[1], fused ? 0 : 1);
  static const int folded[4] = {9, 4, 0, 0};
  assert_int_equal(rep.num_folded, folded[variant]);
  double want[R * N], max_err = 0;
  for (int r = 0; r < R; r++) {
    double mr = -INFINITY;
    for (int j = 0; j < N; j++) mr = fmax(mr, x[r * N + j]);
    if (variant == 2) mr = fmax(mr, 0.0);
    for (int j = 0; j < N; j++) want[r * N + j] = exp(x[r * N + j] - mr);
  }
  for (int r = 0; r < R; r++)
    for (int j = 0; j < N; j++) {
      double sum = 0;
      for (int t = 0; t < (variant == 3 ? R : N); t++)
        sum += variant == 3 ? want[t * N + j] : want[r * N + t];
      double d = fabs(want[r * N + j] / sum - got[r * N + j]);
      if (d > max_err) max_err = d;
    }
  if (max_err > 1e-6) fail_msg("softmax chain (variant %d): max abs error %g", variant, max_err);
}

static void test_softmax_chain_rewritten(void **state) {
  for (int v = 0; v < 4; v++) softmax_chain_case(*state, v);
}

/* LayerNormalization over the last axis written with the moments E[x^2] -
 * E[x]^2 (opset 15, x [R, N]): m = E[x], v = Max(0, Sub(E[x * x], m * m)),
 * s = Sqrt(Add(v, eps)), y = (x - m) / s * scale + bias. Variants: 0 as
 * jax2tf writes it (magika's second LayerNorm): ReduceSum then Mul by 1/N,
 * keepdims 0, m and v through Reshape [R, 1] and Expand [R, 1],
 * Reciprocal(s) * scale, then Mul(x - m, that), Add bias: one
 * cl.layer_norm and no cl.unary.sqrt; 1 ReduceMean keepdims 1, no views,
 * Div(x - m, s), Mul scale, Add bias: one cl.layer_norm; 2 as 1 but E[x *
 * x] over axis 0 (a column mean): node by node; 3 as 0 without the Max:
 * node by node; 4 as 1 with eps a [R, 1] constant (not one scalar): node by
 * node. Every result matches the host's computation of what the graph
 * says (for 0 and 1 the variance as E[(x - m)^2]). */
static void layer_norm_moments_case(env_t *e, int variant) {
  enum { R = 3, N = 8 };
  static float x[R * N], sc[N], bi[N];
  for (int i = 0; i < R * N; i++)
    x[i] = (float)((i * 37) % 11) / 2.0f - 2.5f + 0.1f * (float)(i / N);
  for (int j = 0; j < N; j++) {
    sc[j] = 0.5f + 0.125f * (float)j;
    bi[j] = 0.25f * (float)j - 1.0f;
  }
  float inv = 1.0f / N, zero = 0.0f, eps = 1e-5f, epsr[R] = {1e-5f, 1e-3f, 1e-1f};
  int64_t rs[2] = {R, 1}, two[1] = {2}, one[1] = {1}, last[1] = {-1}, first[1] = {0};
  int64_t sd[2] = {1, N}, nd[1] = {N};
  int jax = variant == 0 || variant == 3;
  mb_t m;
  mb_init(&m, 15);
  int64_t xd[2] = {R, N};
  mb_input(&m, "x", 2, xd);
  mb_output(&m, "y", 2, xd);
  mb_init_raw(&m, "inv", 1, 0, NULL, &inv, 4);
  mb_init_raw(&m, "zero", 1, 0, NULL, &zero, 4);
  mb_init_raw(&m, "eps", 1, variant == 4 ? 2 : 0, variant == 4 ? rs : NULL,
              variant == 4 ? (void *)epsr : (void *)&eps, variant == 4 ? sizeof(epsr) : 4);
  mb_init_raw(&m, "sc", 1, jax ? 2 : 1, jax ? sd : nd, sc, sizeof(sc));
  mb_init_raw(&m, "bi", 1, 1, nd, bi, sizeof(bi));
  mb_init_raw(&m, "rs", 7, 1, two, rs, sizeof(rs));
  mb_init_raw(&m, "ax", 7, 1, one, last, 8);
  mb_init_raw(&m, "ax0", 7, 1, one, first, 8);
  static const int64_t ax1[1] = {1}, ax0[1] = {0};
  if (jax) { /* ReduceSum(x) * 1/N, ReduceSum(x * x) * 1/N, keepdims 0 */
    Onnx__NodeProto *r1 = mb_node(&m, "ReduceSum", "sum1", "x", "ax", "s1");
    mb_attr_i(&m, r1, "keepdims", 0);
    mb_node(&m, "Mul", "mean1", "s1", "inv", "m");
    mb_node(&m, "Mul", "msq", "m", "m", "m2");
    mb_node(&m, "Reshape", "rsm", "m", "rs", "mr");
    mb_node(&m, "Expand", "exm", "mr", "rs", "me");
    mb_node(&m, "Sub", "dx", "x", "me", "d");
    mb_node(&m, "Mul", "xsq", "x", "x", "xx");
    Onnx__NodeProto *r2 = mb_node(&m, "ReduceSum", "sum2", "xx", "ax", "s2");
    mb_attr_i(&m, r2, "keepdims", 0);
    mb_node(&m, "Mul", "mean2", "s2", "inv", "ex2");
    mb_node(&m, "Sub", "var", "ex2", "m2", "v");
    if (variant == 0) mb_node(&m, "Max", "clamp", "zero", "v", "vc");
    mb_node(&m, "Reshape", "rsv", variant == 0 ? "vc" : "v", "rs", "vr");
    mb_node(&m, "Expand", "exv", "vr", "rs", "ve");
    mb_node(&m, "Add", "addeps", "ve", "eps", "ve2");
    mb_node(&m, "Sqrt", "sqrt", "ve2", NULL, "sd");
    mb_node(&m, "Reciprocal", "rcp", "sd", NULL, "rsd");
    mb_node(&m, "Mul", "rscale", "rsd", "sc", "rss");
    mb_node(&m, "Mul", "norm", "d", "rss", "yn");
    mb_node(&m, "Add", "bias", "yn", "bi", "y");
  } else { /* ReduceMean keepdims 1, Div */
    Onnx__NodeProto *r1 = mb_node(&m, "ReduceMean", "mean1", "x", NULL, "m");
    mb_attr_ints(&m, r1, "axes", ax1, 1);
    mb_node(&m, "Mul", "msq", "m", "m", "m2");
    mb_node(&m, "Sub", "dx", "x", "m", "d");
    mb_node(&m, "Mul", "xsq", "x", "x", "xx");
    Onnx__NodeProto *r2 = mb_node(&m, "ReduceMean", "mean2", "xx", NULL, "ex2");
    mb_attr_ints(&m, r2, "axes", variant == 2 ? ax0 : ax1, 1);
    mb_node(&m, "Sub", "var", "ex2", "m2", "v");
    mb_node(&m, "Max", "clamp", "v", "zero", "vc");
    mb_node(&m, "Add", "addeps", "vc", "eps", "ve2");
    mb_node(&m, "Sqrt", "sqrt", "ve2", NULL, "sd");
    mb_node(&m, "Div", "norm", "d", "sd", "yn");
    mb_node(&m, "Mul", "scale", "yn", "sc", "ys");
    mb_node(&m, "Add", "bias", "ys", "bi", "y");
  }
  vmcc_onnx_report_t rep;
  vmcc_tensor_t xin = {VM_F32, 2, {R, N}, x, sizeof(x)};
  float got[R * N];
  static const char *const ops[2] = {"cl.layer_norm", "cl.unary.sqrt"};
  uint32_t counts[2];
  compile_run_counts(e, &m, &xin, &rep, got, sizeof(got), ops, 2, counts);
  int fused = variant <= 1;
  if (counts[0] != (fused ? 1u : 0u) || counts[1] != (fused ? 0u : 1u))
    fail_msg("layer norm moments (variant %d): %u cl.layer_norm, %u cl.unary.sqrt", variant,
             counts[0], counts[1]);
  double max_err = 0;
  for (int r = 0; r < R; r++) {
    double mr = 0;
    for (int j = 0; j < N; j++) mr += x[r * N + j];
    mr /= N;
    for (int j = 0; j < N; j++) {
      double v = 0;
      if (fused) { /* E[(x - m)^2] */
        for (int t = 0; t < N; t++) v += (x[r * N + t] - mr) * (x[r * N + t] - mr);
        v /= N;
      } else {
        int col = variant == 2;
        for (int t = 0; t < (col ? R : N); t++) {
          double xt = col ? x[t * N + j] : x[r * N + t];
          v += xt * xt;
        }
        v = v / (col ? R : N) - mr * mr;
        if (variant != 3) v = fmax(v, 0.0);
      }
      double ep = variant == 4 ? epsr[r] : eps;
      double want = (x[r * N + j] - mr) / sqrt(v + ep) * sc[j] + bi[j];
      double d = fabs(want - got[r * N + j]);
      if (!(d <= max_err)) max_err = isnan(d) ? INFINITY : d;
    }
  }
  if (max_err > 1e-4)
    fail_msg("layer norm moments (variant %d): max abs error %g", variant, max_err);
}

static void test_layer_norm_moments_rewritten(void **state) {
  for (int v = 0; v < 5; v++) layer_norm_moments_case(*state, v);
}

/* The tensor constants of x shaped [a, o, c]. */
static int count_consts3(const vm_executable_t *x, int64_t a, int64_t o, int64_t c) {
  int n = 0;
  for (uint32_t i = 0; i < x->num_constants; i++) {
    const vm_constant_t *k = &x->constants[i];
    if (k->kind == VM_CONST_TENSOR && k->u.tensor.ndim == 3 && k->u.tensor.shape[0] == a &&
        k->u.tensor.shape[1] == o && k->u.tensor.shape[2] == c)
      n++;
  }
  return n;
}

/* A float32 3x3 Conv (same padding, bias) then Relu, C input and O output
 * channels on an H x H map: with 8+ channels each way its Winograd filter is
 * transformed at compile time (one [36, O, C] constant where the output has
 * 16+ tiles of 4x4, else one [16, O, C]) and passed to cl.conv2d's
 * 17-argument form; with 7 input channels none. Run with that m's Winograd
 * formulation forced (VMCL_CONV, so the compiled u is what multiplies) and
 * the result matches the host. With affine, a per-channel Mul by s [O, 1,
 * 1] between the Conv and the Relu folds into the weights and bias first:
 * u must be the folded weights' transform. */
static void conv_wino_case(env_t *e, int C, int H, int O, int affine) {
  enum { K = 3 };
  int HP = H + 2;
  float *x = calloc((size_t)(C * H * H), sizeof(float));
  float *xp = calloc((size_t)(C * HP * HP), sizeof(float));
  float *w = calloc((size_t)(O * C * K * K), sizeof(float)), *b = calloc((size_t)O, sizeof(float));
  float *got = calloc((size_t)(O * H * H), sizeof(float));
  assert_true(x && xp && w && b && got);
  for (int i = 0; i < C * H * H; i++) x[i] = (float)((i * 37) % 11) / 4.0f - 1.25f;
  for (int c = 0; c < C; c++)
    for (int i = 0; i < H; i++)
      for (int j = 0; j < H; j++) xp[(c * HP + i + 1) * HP + j + 1] = x[(c * H + i) * H + j];
  for (int i = 0; i < O * C * K * K; i++) w[i] = (float)((i * 13) % 7) / 7.0f - 0.4f;
  for (int o = 0; o < O; o++) b[o] = 0.25f * (float)o - 1.0f;
  float s[16];
  assert_true(O <= 16);
  for (int o = 0; o < O; o++) s[o] = affine ? 0.5f + 0.125f * (float)o : 1.0f;
  mb_t m;
  mb_init(&m, 13);
  int64_t xd[4] = {1, C, H, H}, wd[4] = {O, C, K, K}, od[1] = {O}, yd[4] = {1, O, H, H};
  int64_t sd[3] = {O, 1, 1};
  int64_t pads[4] = {1, 1, 1, 1};
  mb_input(&m, "x", 4, xd);
  mb_output(&m, "y", 4, yd);
  mb_init_raw(&m, "w", 1, 4, wd, w, (size_t)(O * C * K * K) * 4);
  mb_init_raw(&m, "b", 1, 1, od, b, (size_t)O * 4);
  Onnx__NodeProto *conv = mb_node(&m, "Conv", "conv", "x", "w", "c");
  mb_node_input(conv, "b");
  mb_attr_ints(&m, conv, "pads", pads, 4);
  if (affine) {
    mb_init_raw(&m, "s", 1, 3, sd, s, (size_t)O * 4);
    mb_node(&m, "Mul", "scale", "c", "s", "cs");
  }
  mb_node(&m, "Relu", "relu", affine ? "cs" : "c", NULL, "y");
  size_t nbytes;
  uint8_t *bytes = mb_pack(&m, &nbytes);
  vm_executable_t *exec = NULL;
  vmcc_onnx_report_t rep;
  ASSERT_OK(vmcc_onnx_compile(bytes, nbytes, NULL, NULL, &exec, &rep));
  free(bytes);
  int m4 = ((H + 3) / 4) * ((H + 3) / 4) >= 16, wino = C >= 8 && O >= 8;
  assert_int_equal(count_consts3(exec, 36, O, C), wino && m4);
  assert_int_equal(count_consts3(exec, 16, O, C), wino && !m4);
  assert_int_equal(count_calls(exec, "cl.binary.mul"), 0); /* the scale folded */
  setenv("VMCL_CONV", m4 ? "wino4" : "wino", 1);
  vm_machine_t *vm = NULL;
  vm_value_t xv = vm_value_none(), res = vm_value_none();
  vmcc_tensor_t xin = {VM_F32, 4, {1, C, H, H}, x, (size_t)(C * H * H) * 4};
  ASSERT_OK(run_exec(e, exec, &xin, &vm, &xv, &res));
  unsetenv("VMCL_CONV");
  vm_tensor_t *yt = vm_value_as_tensor(&res);
  assert_non_null(yt);
  ASSERT_OK(e->dev->ops->copy_to_host(e->dev, got, yt->storage->buffer, yt->offset,
                                      (size_t)(O * H * H) * 4));
  double max_err = 0;
  for (int o = 0; o < O; o++)
    for (int i = 0; i < H; i++)
      for (int j = 0; j < H; j++) {
        double acc = s[o] * (b[o] + host_conv_at(xp, w, C, HP, HP, K, o, i, j));
        double d = fabs((acc > 0 ? acc : 0) - got[(o * H + i) * H + j]);
        if (d > max_err) max_err = d;
      }
  if (max_err > 1e-4) fail_msg("conv wino C%d H%d O%d: max abs error %g", C, H, O, max_err);
  vm_value_release(&res);
  vm_value_release(&xv);
  vm_machine_free(vm);
  vm_executable_free(exec);
  free(x);
  free(xp);
  free(w);
  free(b);
  free(got);
}

static void test_conv_wino_filter(void **state) {
  conv_wino_case(*state, 8, 16, 9, 0); /* 16 tiles of 4x4: F(4x4)'s u */
  conv_wino_case(*state, 9, 7, 8, 0);  /* 4 tiles: F(2x2)'s */
  conv_wino_case(*state, 7, 16, 8, 0); /* 7 channels: none */
  conv_wino_case(*state, 8, 16, 9, 1); /* a channel scale folded first, each u */
  conv_wino_case(*state, 9, 7, 8, 1);
}

/* A chain of float elementwise nodes (Add of a bias, Relu, Mul by a
 * scalar, Sigmoid, Clip, Add of the input again) becomes one cl.elementwise
 * call whose result equals the unfused one, node by node. */
static void test_elementwise_fusion(void **state) {
  env_t *e = *state;
  enum { N = 2, C = 3, L = 5 };
  static float x[N * C * L], bias[L];
  for (int i = 0; i < N * C * L; i++) x[i] = (float)((i * 29) % 17) / 4.0f - 2.0f;
  for (int i = 0; i < L; i++) bias[i] = 0.3f * (float)i - 0.5f;
  float half = 0.5f, lo = 0.1f, hi = 0.9f;
  mb_t m;
  mb_init(&m, 13);
  int64_t xd[3] = {N, C, L}, bd[1] = {L};
  mb_input(&m, "x", 3, xd);
  mb_output(&m, "y", 3, xd);
  mb_init_raw(&m, "b", 1, 1, bd, bias, sizeof(bias));
  mb_init_raw(&m, "h", 1, 0, NULL, &half, 4);
  mb_init_raw(&m, "lo", 1, 0, NULL, &lo, 4);
  mb_init_raw(&m, "hi", 1, 0, NULL, &hi, 4);
  mb_node(&m, "Add", "a1", "x", "b", "t1");
  mb_node(&m, "Relu", "r", "t1", NULL, "t2");
  mb_node(&m, "Mul", "m", "t2", "h", "t3");
  mb_node(&m, "Sigmoid", "s", "t3", NULL, "t4");
  Onnx__NodeProto *clip = mb_node(&m, "Clip", "c", "t4", "lo", "t5");
  mb_node_input(clip, "hi");
  mb_node(&m, "Add", "a2", "t5", "x", "y");
  size_t nbytes;
  uint8_t *bytes = mb_pack(&m, &nbytes);
  float out[2][N * C * L];
  for (int fuse = 0; fuse < 2; fuse++) {
    vmcc_onnx_options_t o;
    memset(&o, 0, sizeof(o));
    o.fuse_elementwise = fuse;
    vm_executable_t *exec = NULL;
    vmcc_onnx_report_t rep;
    ASSERT_OK(vmcc_onnx_compile(bytes, nbytes, NULL, &o, &exec, &rep));
    assert_int_equal(rep.num_fused, fuse ? 1 : 0);
    vm_machine_t *vm = NULL;
    vm_value_t xv = vm_value_none(), res = vm_value_none();
    vmcc_tensor_t xin = {VM_F32, 3, {N, C, L}, x, sizeof(x)};
    ASSERT_OK(run_exec(e, exec, &xin, &vm, &xv, &res));
    vm_tensor_t *yt = vm_value_as_tensor(&res);
    assert_non_null(yt);
    ASSERT_OK(e->dev->ops->copy_to_host(e->dev, out[fuse], yt->storage->buffer, yt->offset,
                                        sizeof(out[fuse])));
    vm_value_release(&res);
    vm_value_release(&xv);
    vm_machine_free(vm);
    vm_executable_free(exec);
  }
  free(bytes);
  for (int i = 0; i < N * C * L; i++) {
    double t = x[i] + bias[i % L];
    t = (t > 0 ? t : 0) * 0.5;
    t = 1.0 / (1.0 + exp(-t));
    t = t < 0.1 ? 0.1 : t > 0.9 ? 0.9 : t;
    double want = t + x[i];
    if (fabs(out[0][i] - want) > 1e-5 || fabs(out[1][i] - want) > 1e-5)
      fail_msg("element %d: unfused %.7g, fused %.7g, expected %.7g", i, out[0][i], out[1][i],
               want);
  }
}

/* Gelu (opset 20: no case in libonnx-testdata 1.12), exact and tanh, on
 * the device against the host. */
/* The model built in m, compiled (failing the test otherwise). */
static vm_executable_t *compile_model(mb_t *m) {
  size_t nbytes;
  uint8_t *bytes = mb_pack(m, &nbytes);
  vm_executable_t *exec = NULL;
  ASSERT_OK(vmcc_onnx_compile(bytes, nbytes, NULL, NULL, &exec, NULL));
  free(bytes);
  return exec;
}

/* LayerNormalization over the last axis spelled out as exporters write it
 * before opset 17, in five variants: 0 with scale and bias (opset 13, axes
 * attributes): one cl.layer_norm, the eight nodes after the first
 * ReduceMean skipped; 1 without scale and bias (opset 18, axes inputs): six
 * skipped; 2 the centred value also read by the output (another consumer):
 * not a layer norm, but from its Pow on an RMS norm of the centred value
 * (cl.rms_norm, five skipped); 3 the mean over axis 0: not rewritten; 4 a scale per row ([N, 1], not the
 * normalised axis'): the six skipped, Mul and Add run as they are. Every
 * result matches the host. */
static void layer_norm_chain_case(env_t *e, int variant) {
  enum { N = 3, L = 8 };
  static float x[N * L], g[L], b[L], gr[N];
  for (int i = 0; i < N * L; i++) x[i] = (float)((i * 7) % 11) * 0.5f - 2.0f + (float)(i / L);
  for (int i = 0; i < L; i++) g[i] = 0.5f + 0.25f * (float)i, b[i] = (float)i * 0.1f - 0.3f;
  for (int i = 0; i < N; i++) gr[i] = 1.5f - 0.5f * (float)i;
  float two = 2.0f, eps = 1e-5f;
  int64_t last = variant == 3 ? 0 : -1;
  mb_t m;
  mb_init(&m, variant == 1 ? 18 : 13);
  int64_t xd[2] = {N, L}, ld[1] = {L}, one[1] = {1}, rd[2] = {N, 1};
  mb_input(&m, "x", 2, xd);
  mb_output(&m, "y", 2, xd);
  mb_init_raw(&m, "two", 1, 0, NULL, &two, 4);
  mb_init_raw(&m, "eps", 1, 0, NULL, &eps, 4);
  if (variant == 4)
    mb_init_raw(&m, "g", 1, 2, rd, gr, sizeof(gr));
  else
    mb_init_raw(&m, "g", 1, 1, ld, g, sizeof(g));
  mb_init_raw(&m, "b", 1, 1, ld, b, sizeof(b));
  mb_init_raw(&m, "axes", 7, 1, one, &last, sizeof(last));
  const char *ax = variant == 1 ? "axes" : NULL;
  Onnx__NodeProto *r1 = mb_node(&m, "ReduceMean", "rm1", "x", ax, "m");
  mb_node(&m, "Sub", "sub", "x", "m", "d");
  mb_node(&m, "Pow", "pow", "d", "two", "p");
  Onnx__NodeProto *r2 = mb_node(&m, "ReduceMean", "rm2", "p", ax, "v");
  if (variant != 1) {
    mb_attr_ints(&m, r1, "axes", &last, 1);
    mb_attr_ints(&m, r2, "axes", &last, 1);
  }
  mb_node(&m, "Add", "add", "v", "eps", "ve");
  mb_node(&m, "Sqrt", "sqrt", "ve", NULL, "s");
  mb_node(&m, "Div", "div", "d", "s", variant == 1 ? "y" : "n");
  if (variant != 1) {
    mb_node(&m, "Mul", "mul", "n", "g", "ng");
    mb_node(&m, "Add", "addb", "ng", "b", variant == 2 ? "nb" : "y");
    if (variant == 2) mb_node(&m, "Add", "add2", "nb", "d", "y");
  }
  vmcc_onnx_report_t rep;
  vmcc_tensor_t xin = {VM_F32, 2, {N, L}, x, sizeof(x)};
  float got[N * L];
  compile_run(e, &m, &xin, &rep, got, sizeof(got));
  assert_int_equal(rep.num_folded,
                   variant == 0 ? 8 : variant == 1 || variant == 4 ? 6 : variant == 2 ? 5 : 0);
  for (int r = 0; r < N; r++)
    for (int i = 0; i < L; i++) {
      double mean = 0, var = 0, d, want;
      if (variant == 3) { /* over the rows instead */
        for (int k = 0; k < N; k++) mean += x[k * L + i] / (double)N;
        for (int k = 0; k < N; k++) var += pow(x[k * L + i] - mean, two) / (double)N;
      } else {
        for (int k = 0; k < L; k++) mean += x[r * L + k] / (double)L;
        for (int k = 0; k < L; k++) var += pow(x[r * L + k] - mean, two) / (double)L;
      }
      d = x[r * L + i] - mean;
      want = d / sqrt(var + eps);
      if (variant != 1) want = want * (variant == 4 ? gr[r] : g[i]) + b[i];
      if (variant == 2) want += d;
      double v = got[r * L + i];
      if (!(fabs(v - want) <= 1e-4 + 1e-4 * fabs(want)))
        fail_msg("variant %d, [%d, %d]: %.7g, expected %.7g", variant, r, i, v, want);
    }
}

static void test_layer_norm_rewritten(void **state) {
  for (int v = 0; v < 5; v++) layer_norm_chain_case(*state, v);
}

/* Gelu spelled out (0.5 * x * (1 + erf(x / sqrt 2)), BERT's export): 0 one
 * cl.unary.gelu, the four nodes after the Div skipped; 1 a divisor of 1.5;
 * 2 the Erf also read by the output: neither rewritten. Every result
 * matches the host. */
static void gelu_chain_case(env_t *e, int variant) {
  enum { N = 48 };
  static float x[N];
  for (int i = 0; i < N; i++) x[i] = (float)i / 6.0f - 4.0f;
  float k = variant == 1 ? 1.5f : 1.41421356f, one = 1.0f, half = 0.5f;
  mb_t m;
  mb_init(&m, 13);
  int64_t xd[1] = {N};
  mb_input(&m, "x", 1, xd);
  mb_output(&m, "y", 1, xd);
  mb_init_raw(&m, "k", 1, 0, NULL, &k, 4);
  mb_init_raw(&m, "one", 1, 0, NULL, &one, 4);
  mb_init_raw(&m, "half", 1, 0, NULL, &half, 4);
  mb_node(&m, "Div", "div", "x", "k", "q");
  mb_node(&m, "Erf", "erf", "q", NULL, "f");
  mb_node(&m, "Add", "add", "f", "one", "a");
  mb_node(&m, "Mul", "mul", "x", "a", "p");
  mb_node(&m, "Mul", "mul2", "p", "half", variant == 2 ? "h" : "y");
  if (variant == 2) mb_node(&m, "Add", "add2", "h", "f", "y");
  vmcc_onnx_report_t rep;
  vmcc_tensor_t xin = {VM_F32, 1, {N}, x, sizeof(x)};
  float got[N];
  compile_run(e, &m, &xin, &rep, got, sizeof(got));
  assert_int_equal(rep.num_folded, variant == 0 ? 4 : 0);
  for (int i = 0; i < N; i++) {
    double v = x[i], f = erf(v / k), want = 0.5 * v * (1 + f) + (variant == 2 ? f : 0);
    if (!(fabs(got[i] - want) <= 1e-5 + 1e-4 * fabs(want)))
      fail_msg("variant %d, x %g: %.7g, expected %.7g", variant, v, got[i], want);
  }
}

static void test_gelu_rewritten(void **state) {
  for (int v = 0; v < 3; v++) gelu_chain_case(*state, v);
}

/* RMSNormalization spelled out as T5-style models export it, in three
 * variants: 0 Mul(x, Div(1, s)) then a scale: one cl.rms_norm, the six
 * nodes after the Pow skipped; 1 Div(x, s), no scale: four skipped; 2
 * Div(2, s): not rewritten. Every result matches the host. */
static void rms_norm_chain_case(env_t *e, int variant) {
  enum { N = 3, L = 16 };
  static float x[N * L], g[L];
  for (int i = 0; i < N * L; i++) x[i] = (float)((i * 5) % 13) * 0.25f - 1.5f;
  for (int i = 0; i < L; i++) g[i] = 0.75f + 0.125f * (float)i;
  float two = 2.0f, eps = 1e-6f, num = variant == 2 ? 2.0f : 1.0f;
  int64_t last = -1;
  mb_t m;
  mb_init(&m, 13);
  int64_t xd[2] = {N, L}, ld[1] = {L};
  mb_input(&m, "x", 2, xd);
  mb_output(&m, "y", 2, xd);
  mb_init_raw(&m, "two", 1, 0, NULL, &two, 4);
  mb_init_raw(&m, "eps", 1, 0, NULL, &eps, 4);
  mb_init_raw(&m, "num", 1, 0, NULL, &num, 4);
  mb_init_raw(&m, "g", 1, 1, ld, g, sizeof(g));
  mb_node(&m, "Pow", "pow", "x", "two", "p");
  mb_attr_ints(&m, mb_node(&m, "ReduceMean", "rm", "p", NULL, "v"), "axes", &last, 1);
  mb_node(&m, "Add", "add", "v", "eps", "ve");
  mb_node(&m, "Sqrt", "sqrt", "ve", NULL, "s");
  if (variant == 1) {
    mb_node(&m, "Div", "div", "x", "s", "y");
  } else {
    mb_node(&m, "Div", "div", "num", "s", "r");
    mb_node(&m, "Mul", "mul", "x", "r", "n");
    mb_node(&m, "Mul", "mulg", "g", "n", "y");
  }
  vmcc_onnx_report_t rep;
  vmcc_tensor_t xin = {VM_F32, 2, {N, L}, x, sizeof(x)};
  float got[N * L];
  compile_run(e, &m, &xin, &rep, got, sizeof(got));
  assert_int_equal(rep.num_folded, variant == 0 ? 6 : variant == 1 ? 4 : 0);
  for (int r = 0; r < N; r++) {
    double ms = 0;
    for (int k = 0; k < L; k++) ms += (double)x[r * L + k] * x[r * L + k] / L;
    for (int i = 0; i < L; i++) {
      double want = x[r * L + i] * (variant == 1 ? 1 : num) / sqrt(ms + eps);
      if (variant != 1) want *= g[i];
      double v = got[r * L + i];
      if (!(fabs(v - want) <= 1e-5 + 1e-4 * fabs(want)))
        fail_msg("variant %d, [%d, %d]: %.7g, expected %.7g", variant, r, i, v, want);
    }
  }
}

static void test_rms_norm_rewritten(void **state) {
  for (int v = 0; v < 3; v++) rms_norm_chain_case(*state, v);
}

/* Gelu (tanh) spelled out as T5-style models export it ("gelu_new"): 0 one
 * cl.unary.gelu_tanh, the seven nodes after the Mul by 0.5 skipped; 1 a
 * cubic coefficient of 0.05: not rewritten; 2 as jax2tf exports it
 * (magika: x^3 as three Muls from the constant, 0.5 applied to the Add
 * before the x multiply), the eight nodes after the first skipped; 3 x^3 as
 * Mul(Mul(x, x), x), 0.5 applied last: eight skipped; 4 variant 2 with x^2
 * in place of x^3: not rewritten. Every result matches the host. */
static void gelu_tanh_chain_case(env_t *e, int variant) {
  enum { N = 40 };
  static float x[N];
  for (int i = 0; i < N; i++) x[i] = (float)i / 5.0f - 4.0f;
  float half = 0.5f, three = 3.0f, cub = variant == 1 ? 0.05f : 0.044715f, sq = 0.7978846f,
        one = 1.0f;
  mb_t m;
  mb_init(&m, 13);
  int64_t xd[1] = {N};
  mb_input(&m, "x", 1, xd);
  mb_output(&m, "y", 1, xd);
  mb_init_raw(&m, "half", 1, 0, NULL, &half, 4);
  mb_init_raw(&m, "three", 1, 0, NULL, &three, 4);
  mb_init_raw(&m, "cub", 1, 0, NULL, &cub, 4);
  mb_init_raw(&m, "sq", 1, 0, NULL, &sq, 4);
  mb_init_raw(&m, "one", 1, 0, NULL, &one, 4);
  /* per variant: op, in0, in1, out (name and output alike) of each node */
  static const char *const gelu_new[][4] = {
      {"Mul", "x", "half", "h"}, {"Pow", "x", "three", "p"}, {"Mul", "p", "cub", "w"},
      {"Add", "x", "w", "v"},    {"Mul", "v", "sq", "u"},    {"Tanh", "u", NULL, "t"},
      {"Add", "t", "one", "a"},  {"Mul", "h", "a", "y"},     {NULL}};
  static const char *const jax[][4] = {
      {"Mul", "cub", "x", "w1"}, {"Mul", "x", "w1", "w2"},  {"Mul", "x", "w2", "w"},
      {"Add", "x", "w", "v"},    {"Mul", "sq", "v", "u"},   {"Tanh", "u", NULL, "t"},
      {"Add", "one", "t", "a"},  {"Mul", "half", "a", "h"}, {"Mul", "x", "h", "y"},
      {NULL}};
  static const char *const cubed[][4] = {
      {"Mul", "x", "x", "x2"},  {"Mul", "x2", "x", "x3"}, {"Mul", "x3", "cub", "w"},
      {"Add", "w", "x", "v"},   {"Mul", "v", "sq", "u"},  {"Tanh", "u", NULL, "t"},
      {"Add", "t", "one", "a"}, {"Mul", "x", "a", "p"},   {"Mul", "p", "half", "y"},
      {NULL}};
  static const char *const squared[][4] = {
      {"Mul", "cub", "x", "w1"}, {"Mul", "x", "w1", "w"},   {"Add", "x", "w", "v"},
      {"Mul", "sq", "v", "u"},   {"Tanh", "u", NULL, "t"},  {"Add", "one", "t", "a"},
      {"Mul", "half", "a", "h"}, {"Mul", "x", "h", "y"},    {NULL}};
  const char *const(*nodes)[4] =
      variant == 2 ? jax : variant == 3 ? cubed : variant == 4 ? squared : gelu_new;
  for (int i = 0; nodes[i][0]; i++)
    mb_node(&m, nodes[i][0], nodes[i][3], nodes[i][1], nodes[i][2], nodes[i][3]);
  vmcc_onnx_report_t rep;
  vmcc_tensor_t xin = {VM_F32, 1, {N}, x, sizeof(x)};
  float got[N];
  compile_run(e, &m, &xin, &rep, got, sizeof(got));
  assert_int_equal(rep.num_folded, variant == 0 ? 7 : variant == 2 || variant == 3 ? 8 : 0);
  for (int i = 0; i < N; i++) {
    double v = x[i], c3 = variant == 4 ? cub * v * v : cub * v * v * v;
    double want = 0.5 * v * (1 + tanh(sq * (v + c3)));
    if (!(fabs(got[i] - want) <= 1e-5 + 1e-4 * fabs(want)))
      fail_msg("variant %d, x %g: %.7g, expected %.7g", variant, v, got[i], want);
  }
}

static void test_gelu_tanh_rewritten(void **state) {
  for (int v = 0; v < 5; v++) gelu_tanh_chain_case(*state, v);
}

/* A one-hot MatMul (jax2tf's embedding, magika): MatMul(Cast(Equal(ids
 * [2, 6, 1], K [1, 1, 8]), float), W [8, 5]). 0 int32 ids, K 0..7: one
 * cl.embedding, the Cast and MatMul skipped, ids matching no class (-1, 8,
 * 100) give zero rows; 1 int64 ids, K 3..10 (an offset run); 2 K distinct
 * but in no order (a table built with zero rows between): rewritten; 3 K
 * with a repeated class (a sum of two rows) and 4 K spanning 10^6 for 8
 * classes: not rewritten, each still exact. Every result equals the
 * one-hot product computed on the host (W's entries are eighths: sums are
 * exact). */
static void one_hot_matmul_case(env_t *e, int variant) {
  enum { B = 2, L = 6, C = 8, D = 5 };
  static const int64_t ks[5][C] = {
      {0, 1, 2, 3, 4, 5, 6, 7},       {3, 4, 5, 6, 7, 8, 9, 10},      {5, 2, 9, 0, 7, 1, 3, 4},
      {0, 1, 1, 2, 3, 4, 5, 6},       {0, 1, 2, 3, 4, 5, 6, 1000000},
  };
  static const int64_t ids[B * L] = {0, 7, -1, 8, 100, 3, 9, 2, 5, 1000000, 1, -5};
  float w[C * D];
  for (int i = 0; i < C * D; i++) w[i] = (float)((i * 7) % 17) * 0.125f - 1.0f;
  int i64 = variant == 1;
  int32_t ki[C], xi[B * L];
  for (int i = 0; i < C; i++) ki[i] = (int32_t)ks[variant][i];
  for (int i = 0; i < B * L; i++) xi[i] = (int32_t)ids[i];
  mb_t m;
  mb_init(&m, 13);
  int64_t xd[3] = {B, L, 1}, kd[3] = {1, 1, C}, wd[2] = {C, D}, yd[3] = {B, L, D};
  int32_t elem = i64 ? 7 : 6;
  m.graph.input[m.graph.n_input++] = mb_vi(&m, "ids", elem, 3, xd);
  mb_output(&m, "y", 3, yd);
  if (i64)
    mb_init_raw(&m, "k", 7, 3, kd, ks[variant], sizeof(ks[variant]));
  else
    mb_init_raw(&m, "k", 6, 3, kd, ki, sizeof(ki));
  mb_init_raw(&m, "w", 1, 2, wd, w, sizeof(w));
  mb_node(&m, "Equal", "eq", variant == 2 ? "k" : "ids", variant == 2 ? "ids" : "k", "oh");
  mb_attr_i(&m, mb_node(&m, "Cast", "cast", "oh", NULL, "ohf"), "to", 1);
  mb_node(&m, "MatMul", "mm", "ohf", "w", "y");
  vmcc_onnx_report_t rep;
  vmcc_tensor_t xin = {i64 ? VM_I64 : VM_I32, 3, {B, L, 1}, NULL, 0};
  if (i64) {
    xin.data = (void *)ids;
    xin.nbytes = sizeof(ids);
  } else {
    xin.data = xi;
    xin.nbytes = sizeof(xi);
  }
  float got[B * L * D];
  uint32_t ne = 0;
  compile_run_t(e, &m, &xin, &rep, got, sizeof(got), "cl.embedding", &ne);
  assert_int_equal(ne, variant <= 2 ? 1 : 0);
  assert_int_equal(rep.num_folded, variant <= 2 ? 2 : 0);
  for (int r = 0; r < B * L; r++)
    for (int j = 0; j < D; j++) {
      double want = 0;
      for (int k = 0; k < C; k++)
        if ((i64 ? ids[r] : xi[r]) == (i64 ? ks[variant][k] : ki[k])) want += w[k * D + j];
      if (got[r * D + j] != want)
        fail_msg("variant %d, id %lld, column %d: %.7g, expected %.7g", variant,
                 (long long)ids[r], j, got[r * D + j], want);
    }
}

static void test_one_hot_matmul_rewritten(void **state) {
  for (int v = 0; v < 5; v++) one_hot_matmul_case(*state, v);
}

static void test_gelu(void **state) {
  env_t *e = *state;
  enum { N = 64 };
  float x[N], got[N];
  for (int i = 0; i < N; i++) x[i] = (float)i / 8.0f - 4.0f;
  for (int approx = 0; approx < 2; approx++) {
    mb_t m;
    mb_init(&m, 20);
    int64_t xd[1] = {N};
    mb_input(&m, "x", 1, xd);
    mb_output(&m, "y", 1, xd);
    Onnx__NodeProto *n = mb_node(&m, "Gelu", "g", "x", NULL, "y");
    if (approx) mb_attr_s(&m, n, "approximate", "tanh");
    vm_executable_t *exec = compile_model(&m);
    vm_machine_t *vm = NULL;
    vm_value_t xv = vm_value_none(), res = vm_value_none();
    vmcc_tensor_t xin = {VM_F32, 1, {N}, x, sizeof(x)};
    ASSERT_OK(run_exec(e, exec, &xin, &vm, &xv, &res));
    vm_tensor_t *yt = vm_value_as_tensor(&res);
    assert_non_null(yt);
    ASSERT_OK(e->dev->ops->copy_to_host(e->dev, got, yt->storage->buffer, yt->offset, sizeof(got)));
    for (int i = 0; i < N; i++) {
      double v = x[i];
      double want = approx ? 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)))
                           : 0.5 * v * (1 + erf(v / sqrt(2.0)));
      if (fabs(got[i] - want) > 1e-5 + 1e-4 * fabs(want))
        fail_msg("gelu (approximate %s) of %g: %.7g, expected %.7g", approx ? "tanh" : "none", v,
                 got[i], want);
    }
    vm_value_release(&res);
    vm_value_release(&xv);
    vm_machine_free(vm);
    vm_executable_free(exec);
  }
}

/* ---- recurrent layers: what the node cases leave out ----
 * LSTM, GRU and RNN with the features onnx's cases do not cover (layout 1,
 * reverse and bidirectional with sequence_lens, activations with alpha and
 * beta, clip, input_forget, peepholes, both linear_before_reset, an R
 * computed at run time, so the compiler transposes it on the device),
 * on the device against a double-precision host reference. */
typedef struct rnn_case {
  const char *op, *dir;
  int kind, T, B, I, H, layout, lens, runtime_r, input_forget, lbr;
  float clip;
  uint32_t nact, nalpha, nbeta;
  const char *acts[6];
  float alpha[6], beta[6];
} rnn_case_t;

static double ref_act(const char *name, double x, double a, double b) {
  if (!strcmp(name, "Relu")) return x > 0 ? x : 0;
  if (!strcmp(name, "Tanh")) return tanh(x);
  if (!strcmp(name, "Sigmoid")) return 1 / (1 + exp(-x));
  if (!strcmp(name, "Affine")) return a * x + b;
  if (!strcmp(name, "LeakyRelu")) return x >= 0 ? x : a * x;
  if (!strcmp(name, "ThresholdedRelu")) return x > a ? x : 0;
  if (!strcmp(name, "ScaledTanh")) return a * tanh(b * x);
  if (!strcmp(name, "HardSigmoid")) return fmin(1, fmax(0, a * x + b));
  if (!strcmp(name, "Elu")) return x >= 0 ? x : a * (exp(x) - 1);
  if (!strcmp(name, "Softsign")) return x / (1 + fabs(x));
  return log1p(exp(x)); /* Softplus */
}

/* The case's recurrence on the host: y [T, D, B, H] (layout 0 order) and
 * yh [D, B, H], yc [D, B, H]. Gate pre-activations are clipped (not the
 * cell state before h); the activations take the case's alphas and betas
 * in order. */
static void ref_rnn(const rnn_case_t *k, int D, const float *x, const float *w, const float *r,
                    const float *bias, const float *p, const int32_t *lens, const float *h0,
                    const float *c0, double *y, double *yh, double *yc) {
  int G = k->kind == 0 ? 1 : k->kind == 1 ? 3 : 4, H = k->H, I = k->I, nact = (int)k->nact / D;
  double al[6], be[6];
  int ia = 0, ib = 0;
  for (int s = 0; s < D * nact; s++) {
    const char *n = k->acts[s];
    int ta = strcmp(n, "Affine") == 0 || strcmp(n, "LeakyRelu") == 0 || strcmp(n, "ThresholdedRelu") == 0 ||
             strcmp(n, "ScaledTanh") == 0 || strcmp(n, "HardSigmoid") == 0 || strcmp(n, "Elu") == 0;
    int tb = strcmp(n, "Affine") == 0 || strcmp(n, "ScaledTanh") == 0 || strcmp(n, "HardSigmoid") == 0;
    al[s] = ia < (int)k->nalpha && ta ? k->alpha[ia++] : 0;
    be[s] = ib < (int)k->nbeta && tb ? k->beta[ib++] : 0;
  }
#define CL(v) (k->clip > 0 ? fmin(k->clip, fmax(-k->clip, (v))) : (v))
#define F(s, v) ref_act(k->acts[d * nact + (s)], CL(v), al[d * nact + (s)], be[d * nact + (s)])
  memset(y, 0, sizeof(double) * (size_t)(k->T * D * k->B * H));
  for (int d = 0; d < D; d++) {
    int rev = strcmp(k->dir, "reverse") == 0 || d == 1;
    for (int b = 0; b < k->B; b++) {
      double h[40], c[40], g[160], hn[40];
      int st = k->layout ? (b * D + d) * H : (d * k->B + b) * H;
      for (int j = 0; j < H; j++) h[j] = h0[st + j], c[j] = c0 ? c0[st + j] : 0;
      int len = lens ? lens[b] : k->T;
      for (int s = 0; s < len; s++) {
        int t = rev ? len - 1 - s : s;
        const float *xt = x + (k->layout ? (b * k->T + t) : (t * k->B + b)) * I;
        for (int q = 0; q < G * H; q++) {
          double a = 0, rr = 0;
          for (int i = 0; i < I; i++) a += xt[i] * w[(d * G * H + q) * I + i];
          for (int i = 0; i < H; i++) rr += h[i] * r[(d * G * H + q) * H + i];
          const float *bw = bias + d * 2 * G * H;
          g[q] = a + bw[q];
          if (k->kind == 1 && q >= 2 * H) { /* GRU's candidate: its two parts apart */
            g[q + G * H - 2 * H] = rr + bw[G * H + q];
          } else {
            g[q] += rr + bw[G * H + q];
          }
        }
        for (int j = 0; j < H; j++) {
          if (k->kind == 0) {
            hn[j] = F(0, g[j]);
          } else if (k->kind == 1) {
            double z = F(0, g[j]), rg = F(0, g[H + j]), cand;
            if (k->lbr) {
              cand = g[2 * H + j] + rg * g[G * H + j];
            } else {
              double a = g[2 * H + j] + bias[d * 2 * G * H + G * H + 2 * H + j];
              for (int i = 0; i < H; i++) {
                double ri = F(0, g[H + i]);
                a += ri * h[i] * r[(d * G * H + 2 * H + j) * H + i];
              }
              cand = a;
            }
            hn[j] = (1 - z) * F(1, cand) + z * h[j];
          } else {
            const float *pp = p ? p + d * 3 * H : NULL;
            double ig = F(0, g[j] + (pp ? pp[j] * c[j] : 0));
            double fg = k->input_forget ? 1 - ig : F(0, g[2 * H + j] + (pp ? pp[2 * H + j] * c[j] : 0));
            double cn = fg * c[j] + ig * F(1, g[3 * H + j]);
            double og = F(0, g[H + j] + (pp ? pp[H + j] * cn : 0));
            c[j] = cn;
            /* the cell state is not clipped before h (as onnxruntime) */
            hn[j] = og * ref_act(k->acts[d * nact + 2], cn, al[d * nact + 2], be[d * nact + 2]);
          }
        }
        for (int j = 0; j < H; j++) h[j] = hn[j], y[((t * D + d) * k->B + b) * H + j] = h[j];
      }
      for (int j = 0; j < H; j++) yh[(d * k->B + b) * H + j] = h[j], yc[(d * k->B + b) * H + j] = c[j];
    }
  }
#undef F
#undef CL
}

static void rnn_run_case(env_t *e, const rnn_case_t *k) {
  int D = strcmp(k->dir, "bidirectional") == 0 ? 2 : 1;
  int G = k->kind == 0 ? 1 : k->kind == 1 ? 3 : 4, H = k->H, GH = G * H;
  enum { MAXE = 2 * 4 * 40 * 40 };
  static float x[256], w[MAXE], r[MAXE], bias[2 * 2 * 160], p[2 * 120], h0[256], c0[256], zero[1];
  static int32_t lens[4];
  static double y[4096], yh[256], yc[256];
  static float got[4096];
  unsigned seed = 7u + (unsigned)k->kind * 13u + (unsigned)k->T;
#define RND() ((seed = seed * 1103515245u + 12345u), (float)((seed >> 16) & 0x7fff) / 16384.0f - 1.0f)
  int nx = k->T * k->B * k->I;
  for (int i = 0; i < nx; i++) x[i] = RND();
  for (int i = 0; i < D * GH * k->I; i++) w[i] = 0.6f * RND();
  for (int i = 0; i < D * GH * H; i++) r[i] = 0.5f * RND();
  for (int i = 0; i < D * 2 * GH; i++) bias[i] = 0.3f * RND();
  for (int i = 0; i < D * 3 * H; i++) p[i] = 0.4f * RND();
  for (int i = 0; i < D * k->B * H; i++) h0[i] = 0.5f * RND(), c0[i] = 0.5f * RND();
  for (int b = 0; b < k->B; b++) lens[b] = k->lens ? (b == 0 ? k->T : 1 + (b * 3) % k->T) : k->T;
  ref_rnn(k, D, x, w, r, bias, k->kind == 2 ? p : NULL, k->lens ? lens : NULL, h0,
          k->kind == 2 ? c0 : NULL, y, yh, yc);

  mb_t m;
  mb_attrs_t at;
  mb_init(&m, 14);
  int64_t xd[3] = {k->layout ? k->B : k->T, k->layout ? k->T : k->B, k->I};
  int64_t wd[3] = {D, GH, k->I}, rd[3] = {D, GH, H}, bd[2] = {D, 2 * GH}, ld[1] = {k->B};
  int64_t sd[3] = {k->layout ? k->B : D, k->layout ? D : k->B, H}, pd[2] = {D, 3 * H};
  int64_t yd[4] = {k->T, D, k->B, H}, yd1[4] = {k->B, k->T, D, H};
  mb_input(&m, "x", 3, xd);
  mb_output(&m, "y", 4, k->layout ? yd1 : yd);
  mb_output(&m, "yh", 3, sd);
  if (k->kind == 2) mb_output(&m, "yc", 3, sd);
  /* initial states in the layout's order (the reference reads them so) */
  mb_init_raw(&m, "w", 1, 3, wd, w, sizeof(float) * (size_t)(D * GH * k->I));
  mb_init_raw(&m, "b", 1, 2, bd, bias, sizeof(float) * (size_t)(D * 2 * GH));
  mb_init_raw(&m, "lens", 6, 1, ld, lens, sizeof(int32_t) * (size_t)k->B);
  mb_init_raw(&m, "h0", 1, 3, sd, h0, sizeof(float) * (size_t)(D * k->B * H));
  mb_init_raw(&m, "c0", 1, 3, sd, c0, sizeof(float) * (size_t)(D * k->B * H));
  mb_init_raw(&m, "p", 1, 2, pd, p, sizeof(float) * (size_t)(D * 3 * H));
  mb_init_raw(&m, k->runtime_r ? "rc" : "r", 1, 3, rd, r, sizeof(float) * (size_t)(D * GH * H));
  if (k->runtime_r) { /* r = rc + 0 * sum(x): known only at run time */
    mb_init_raw(&m, "zero", 1, 0, NULL, zero, sizeof(float));
    mb_node(&m, "ReduceSum", "sum", "x", NULL, "s");
    mb_node(&m, "Mul", "mul", "s", "zero", "z");
    mb_node(&m, "Add", "add", "rc", "z", "r");
  }
  Onnx__NodeProto *n = mb_node(&m, k->op, "rec", "x", "w", "y");
  static char *outs[3] = {"y", "yh", "yc"};
  n->output = outs;
  n->n_output = k->kind == 2 ? 3 : 2;
  mb_node_input(n, "r");
  mb_node_input(n, "b");
  mb_node_input(n, k->lens ? "lens" : "");
  mb_node_input(n, "h0");
  static char *more[2] = {"c0", "p"};
  if (k->kind == 2) { /* inputs 6 and 7: past mb_t's six */
    static char *ins[8];
    memcpy(ins, n->input, 6 * sizeof(char *));
    ins[6] = more[0];
    ins[7] = more[1];
    n->input = ins;
    n->n_input = 8;
  }
  mb_attrs_str(&at, n, "direction", k->dir);
  mb_attrs_int(&at, n, "hidden_size", H);
  mb_attrs_int(&at, n, "layout", k->layout);
  mb_attrs_strs(&at, n, "activations", k->nact, k->acts);
  if (k->nalpha) mb_attrs_floats(&at, n, "activation_alpha", k->nalpha, k->alpha);
  if (k->nbeta) mb_attrs_floats(&at, n, "activation_beta", k->nbeta, k->beta);
  if (k->clip > 0) mb_attrs_float(&at, n, "clip", k->clip);
  if (k->kind == 2) mb_attrs_int(&at, n, "input_forget", k->input_forget);
  if (k->kind == 1) mb_attrs_int(&at, n, "linear_before_reset", k->lbr);

  vm_executable_t *exec = compile_model(&m);
  vm_machine_t *vm = NULL;
  vm_value_t xv = vm_value_none(), res = vm_value_none();
  vmcc_tensor_t xin = {VM_F32, 3, {xd[0], xd[1], xd[2]}, x, sizeof(float) * (size_t)nx};
  ASSERT_OK(run_exec(e, exec, &xin, &vm, &xv, &res));
  const vm_tuple_t *tu = vm_value_as_tuple(&res);
  assert_non_null(tu);
  for (uint32_t o = 0; o < tu->size; o++) {
    vm_tensor_t *t = vm_value_as_tensor(&tu->fields[o]);
    assert_non_null(t);
    int64_t numel = vm_tensor_numel(t);
    ASSERT_OK(e->dev->ops->copy_to_host(e->dev, got, t->storage->buffer, t->offset,
                                        (uint64_t)numel * sizeof(float)));
    for (int64_t i = 0; i < numel; i++) {
      /* i in the output's layout -> the reference's [T, D, B, H] / [D, B, H] */
      int64_t hh = i % H, q = i / H, want_i;
      if (o == 0) {
        int64_t tt, dd, bb;
        if (k->layout)
          dd = q % D, tt = (q / D) % k->T, bb = q / D / k->T;
        else
          bb = q % k->B, dd = (q / k->B) % D, tt = q / k->B / D;
        want_i = ((tt * D + dd) * k->B + bb) * H + hh;
      } else {
        int64_t dd = k->layout ? q % D : q / k->B, bb = k->layout ? q / D : q % k->B;
        want_i = (dd * k->B + bb) * H + hh;
      }
      double want = o == 0 ? y[want_i] : o == 1 ? yh[want_i] : yc[want_i];
      if (!(fabs(got[i] - want) <= 1e-5 + 1e-4 * fabs(want)))
        fail_msg("%s %s layout %d: output %u element %lld is %.7g, expected %.7g", k->op, k->dir,
                 k->layout, o, (long long)i, got[i], want);
    }
  }
  vm_value_release(&res);
  vm_value_release(&xv);
  vm_machine_free(vm);
  vm_executable_free(exec);
#undef RND
}

static void test_recurrent_features(void **state) {
  static const rnn_case_t cases[] = {
      {"LSTM", "bidirectional", 2, 5, 3, 4, 6, 1, 1, 1, 1, 0, 0.3f, 6, 4, 3,
       {"HardSigmoid", "Elu", "Softsign", "Sigmoid", "ScaledTanh", "Affine"},
       {0.3f, 0.9f, 0.8f, 1.2f}, {0.45f, 0.7f, 0.1f}},
      {"LSTM", "reverse", 2, 4, 2, 3, 5, 0, 1, 0, 0, 0, 0.0f, 3, 0, 0,
       {"Sigmoid", "Tanh", "Relu"}, {0}, {0}},
      {"GRU", "reverse", 1, 6, 2, 3, 5, 0, 1, 0, 0, 0, 0.0f, 2, 1, 0,
       {"Sigmoid", "ThresholdedRelu"}, {0.05f}, {0}},
      {"GRU", "bidirectional", 1, 4, 2, 3, 4, 1, 0, 1, 0, 1, 1.5f, 4, 2, 1,
       {"HardSigmoid", "LeakyRelu", "Sigmoid", "Tanh"}, {0.25f, 0.1f}, {0.5f}},
      {"RNN", "bidirectional", 0, 7, 2, 3, 8, 0, 1, 1, 0, 0, 0.0f, 2, 0, 0,
       {"Relu", "Softplus"}, {0}, {0}},
      /* H past 16: cl.rnn's sixteen-unit blocks (two float8s a gate), then
       * the units past the last sixteen */
      {"GRU", "bidirectional", 1, 3, 2, 3, 20, 0, 1, 0, 0, 1, 0.0f, 4, 0, 0,
       {"Sigmoid", "Tanh", "Sigmoid", "Tanh"}, {0}, {0}},
      {"GRU", "forward", 1, 3, 1, 3, 37, 1, 0, 0, 0, 0, 0.0f, 2, 0, 0, {"Sigmoid", "Tanh"}, {0}, {0}},
      {"LSTM", "forward", 2, 3, 2, 3, 24, 0, 1, 0, 0, 0, 2.5f, 3, 0, 0,
       {"Sigmoid", "Tanh", "Tanh"}, {0}, {0}},
      {"RNN", "reverse", 0, 4, 2, 3, 33, 0, 1, 0, 0, 0, 0.0f, 1, 0, 0, {"Tanh"}, {0}, {0}},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) rnn_run_case(*state, &cases[i]);
}

/* ---- Einsum in float32 (the node cases are float64 and bfloat16) ---- */

/* The reference: z[out labels] = sum over the other labels of x[...] *
 * y[...] (y optional), labels single letters, no ellipsis. */
static void einsum_ref(const char *tx, const int64_t *dx, const float *x, const char *ty,
                       const int64_t *dy, const float *y, const char *to, double *z) {
  int64_t size[26] = {0}, idx[26] = {0};
  char labels[26];
  int nl = 0;
  for (int k = 0; k < 2; k++) {
    const char *t = k ? ty : tx;
    const int64_t *d = k ? dy : dx;
    for (int i = 0; t && t[i]; i++) {
      if (!size[t[i] - 'a']) labels[nl++] = t[i];
      size[t[i] - 'a'] = d[i];
    }
  }
  int64_t nz = 1;
  for (int i = 0; to[i]; i++) nz *= size[to[i] - 'a'];
  for (int64_t i = 0; i < nz; i++) z[i] = 0;
  for (;;) {
    int64_t ox = 0, oy = 0, oz = 0;
    for (int i = 0; tx[i]; i++) ox = ox * dx[i] + idx[tx[i] - 'a'];
    for (int i = 0; ty && ty[i]; i++) oy = oy * dy[i] + idx[ty[i] - 'a'];
    for (int i = 0; to[i]; i++) oz = oz * size[to[i] - 'a'] + idx[to[i] - 'a'];
    z[oz] += (double)x[ox] * (ty ? y[oy] : 1.0);
    int k = nl - 1;
    while (k >= 0 && ++idx[labels[k] - 'a'] == size[labels[k] - 'a']) idx[labels[k--] - 'a'] = 0;
    if (k < 0) break;
  }
}

static void test_einsum_float32(void **state) {
  env_t *e = *state;
  static const struct {
    const char *eq, *tx, *ty, *to; /* the equation, and its terms for the reference */
    uint32_t nx, ny;
    int64_t dx[4], dy[4];
  } cases[] = {
      {"bij,bjk->bik", "bij", "bjk", "bik", 3, 3, {2, 2, 3}, {2, 3, 4}},
      {"abc,cd->dba", "abc", "cd", "dba", 3, 2, {2, 3, 4}, {4, 5}},
      {"i,j", "i", "j", "ij", 1, 1, {3}, {4}},
      {"ij,ij->", "ij", "ij", "", 2, 2, {3, 4}, {3, 4}},
      {"iij,jk->ik", "iij", "jk", "ik", 3, 2, {3, 3, 2}, {2, 4}},
      {"bii->bi", "bii", NULL, "bi", 3, 0, {2, 4, 4}, {0}},
      {"ijk->kj", "ijk", NULL, "kj", 3, 0, {2, 3, 4}, {0}},
  };
  float x[64], y[64], got[64];
  double want[64];
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
    int64_t nx = 1, ny = 1;
    for (uint32_t i = 0; i < cases[c].nx; i++) nx *= cases[c].dx[i];
    for (uint32_t i = 0; i < cases[c].ny; i++) ny *= cases[c].dy[i];
    for (int64_t i = 0; i < nx; i++) x[i] = (float)((i * 7 + c) % 11) / 4.0f - 1.0f;
    for (int64_t i = 0; i < ny; i++) y[i] = (float)((i * 5 + c) % 13) / 6.0f - 1.0f;
    einsum_ref(cases[c].tx, cases[c].dx, x, cases[c].ty, cases[c].dy, y, cases[c].to, want);
    int64_t zd[4];
    uint32_t nzd = 0;
    int64_t nz = 1;
    for (int i = 0; cases[c].to[i]; i++) {
      const char *p = strchr(cases[c].tx, cases[c].to[i]);
      zd[nzd] = p ? cases[c].dx[p - cases[c].tx]
                  : cases[c].dy[strchr(cases[c].ty, cases[c].to[i]) - cases[c].ty];
      nz *= zd[nzd++];
    }
    mb_t m;
    mb_init(&m, 13);
    mb_input(&m, "x", cases[c].nx, cases[c].dx);
    if (cases[c].ty)
      mb_init_raw(&m, "y", 1, cases[c].ny, cases[c].dy, y, (size_t)ny * sizeof(float));
    mb_output(&m, "z", nzd, zd);
    Onnx__NodeProto *n = mb_node(&m, "Einsum", "ein", "x", cases[c].ty ? "y" : NULL, "z");
    mb_attr_s(&m, n, "equation", cases[c].eq);
    vm_executable_t *exec = compile_model(&m);
    vm_machine_t *vm = NULL;
    vm_value_t xv = vm_value_none(), res = vm_value_none();
    vmcc_tensor_t xin = {VM_F32, cases[c].nx, {0}, x, sizeof(float) * (size_t)nx};
    memcpy(xin.shape, cases[c].dx, cases[c].nx * sizeof(int64_t));
    ASSERT_OK(run_exec(e, exec, &xin, &vm, &xv, &res));
    vm_tensor_t *zt = vm_value_as_tensor(&res);
    assert_non_null(zt);
    assert_int_equal(vm_tensor_numel(zt), nz);
    ASSERT_OK(e->dev->ops->copy_to_host(e->dev, got, zt->storage->buffer, zt->offset,
                                        (uint64_t)nz * sizeof(float)));
    for (int64_t i = 0; i < nz; i++)
      if (fabs(got[i] - want[i]) > 1e-5 + 1e-4 * fabs(want[i]))
        fail_msg("einsum '%s' element %lld: %.7g, expected %.7g", cases[c].eq, (long long)i, got[i],
                 want[i]);
    vm_value_release(&res);
    vm_value_release(&xv);
    vm_machine_free(vm);
    vm_executable_free(exec);
  }
}

/* An LSTM unrolled into elementary nodes (3 steps, B 2, I 5, H 4), built
 * here as exporters write it, against the host: 0 as PyTorch exports an
 * LSTMCell in a loop (Gemms with bias, Split, gates i f g o, nonzero
 * initial states, h_k through Unsqueeze into one Concat): one cl.gemm and
 * one cl.rnn, no Sigmoid left; 1 another spelling (X batch first [B, T, I]
 * read by Gather on axis 1, x: MatMul then Add of a bias, h: Gemm of W
 * [H, 4H] without bias, four Slices, gates o g i f, operands of Mul and Add
 * swapped, the steps reading X from its end, Unsqueeze and Concat on axis 1
 * in time order): rewritten as one reverse LSTM of layout 1; near misses,
 * not rewritten, node by node: 2 h = o * Sigmoid(c), not Tanh; 3 the second
 * step's h Gemm reads weights of another name (the same values). */
static void lstm_unrolled_case(env_t *e, int variant) {
  enum { T = 3, B = 2, In = 5, H = 4, N = 16 };
  static float x[T * B * In], wx[N * In], wh[N * H], bx[N], bh[N], h0[B * H], c0[B * H];
  static float wxt[In * N], wht[H * N];
  for (int i = 0; i < T * B * In; i++) x[i] = (float)((i * 7) % 13) * 0.15f - 0.9f;
  for (int i = 0; i < N * In; i++) wx[i] = (float)((i * 5) % 11) * 0.08f - 0.4f;
  for (int i = 0; i < N * H; i++) wh[i] = (float)((i * 3) % 7) * 0.1f - 0.3f;
  for (int i = 0; i < N; i++) bx[i] = 0.05f * (float)(i % 5) - 0.1f, bh[i] = 0.03f * (float)(i % 3);
  for (int i = 0; i < B * H; i++) {
    h0[i] = variant == 1 ? 0.0f : 0.1f * (float)i - 0.3f;
    c0[i] = variant == 1 ? 0.0f : 0.2f - 0.05f * (float)i;
  }
  for (int n = 0; n < N; n++) {
    for (int i = 0; i < In; i++) wxt[i * N + n] = wx[n * In + i];
    for (int j = 0; j < H; j++) wht[j * N + n] = wh[n * H + j];
  }
  /* role of each chunk of the gates: 0 i, 1 f, 2 g, 3 o */
  static const int roles_pt[4] = {0, 1, 2, 3}, roles_1[4] = {3, 2, 0, 1};
  const int *roles = variant == 1 ? roles_1 : roles_pt;
  int rev = variant == 1, bf = variant == 1; /* reverse, batch first */
  mb_t m;
  mb_init(&m, 13);
  int64_t xd[3] = {bf ? B : T, bf ? T : B, In}, yd[3] = {bf ? B : T, bf ? T : B, H};
  int64_t wd[2] = {N, In}, whd[2] = {N, H};
  int64_t wtd[2] = {In, N}, whtd[2] = {H, N}, bd[1] = {N}, sd[2] = {B, H}, four[1] = {4};
  int64_t one[1] = {1};
  static int64_t steps[T], sizes[4] = {H, H, H, H}, t_ax[1], last_ax[1] = {-1};
  t_ax[0] = bf;
  static int64_t starts[4], ends[4];
  for (int k = 0; k < T; k++) steps[k] = k;
  for (int j = 0; j < 4; j++) starts[j] = j * H, ends[j] = j == 3 ? INT64_MAX : (j + 1) * H;
  mb_input(&m, "x", 3, xd);
  mb_output(&m, "y", 3, yd);
  if (variant == 1) {
    mb_init_raw(&m, "wx", 1, 2, wtd, wxt, sizeof(wxt));
    mb_init_raw(&m, "wh", 1, 2, whtd, wht, sizeof(wht));
  } else {
    mb_init_raw(&m, "wx", 1, 2, wd, wx, sizeof(wx));
    mb_init_raw(&m, "wh", 1, 2, whd, wh, sizeof(wh));
    mb_init_raw(&m, "bh", 1, 1, bd, bh, sizeof(bh));
    if (variant == 3) mb_init_raw(&m, "wh2", 1, 2, whd, wh, sizeof(wh));
  }
  mb_init_raw(&m, "bx", 1, 1, bd, bx, sizeof(bx));
  mb_init_raw(&m, "h0", 1, 2, sd, h0, sizeof(h0));
  mb_init_raw(&m, "c0", 1, 2, sd, c0, sizeof(c0));
  static const char *const tn[T] = {"t0", "t1", "t2"};
  for (int k = 0; k < T; k++) mb_init_raw(&m, tn[k], 7, 0, NULL, &steps[k], 8);
  mb_init_raw(&m, "uax", 7, 1, one, t_ax, 8);
  static const char *const stn[4] = {"st0", "st1", "st2", "st3"};
  static const char *const enn[4] = {"en0", "en1", "en2", "en3"};
  if (variant == 1) {
    for (int j = 0; j < 4; j++) {
      mb_init_raw(&m, stn[j], 7, 1, one, &starts[j], 8);
      mb_init_raw(&m, enn[j], 7, 1, one, &ends[j], 8);
    }
    mb_init_raw(&m, "sax", 7, 1, one, last_ax, 8);
  } else {
    mb_init_raw(&m, "sizes", 7, 1, four, sizes, sizeof(sizes));
  }
  /* names of step k: nm[k][slot] */
  static char nm[T][24][16];
  static char *split_out[T][4];
  static const char *const act_of[4] = {"Sigmoid", "Sigmoid", "Tanh", "Sigmoid"};
  Onnx__NodeProto *cat = NULL;
  for (int k = 0; k < T; k++) {
    char(*v)[16] = nm[k];
    for (int s = 0; s < 24; s++) snprintf(v[s], sizeof(v[s]), "s%d_%d", k, s);
    const char *hp = k ? nm[k - 1][20] : "h0", *cp = k ? nm[k - 1][18] : "c0";
    /* 0 x_k, 1 gx, 2 gh, 3 z, 4-7 chunks, 8-11 acts, 12 mf, 13 mi, 18 c, 19 tanh c, 20 h, 21 u */
    Onnx__NodeProto *ga = mb_node(&m, "Gather", v[0], "x", tn[rev ? T - 1 - k : k], v[0]);
    if (bf) mb_attr_i(&m, ga, "axis", 1);
    if (variant == 1) {
      mb_node(&m, "MatMul", v[14], v[0], "wx", v[14]);
      mb_node(&m, "Add", v[1], "bx", v[14], v[1]);
      mb_node(&m, "Gemm", v[2], hp, "wh", v[2]);
      mb_node(&m, "Add", v[3], v[2], v[1], v[3]);
      for (int j = 0; j < 4; j++) {
        Onnx__NodeProto *sl = mb_node(&m, "Slice", v[4 + j], v[3], stn[j], v[4 + j]);
        mb_node_input(sl, enn[j]);
        mb_node_input(sl, "sax");
      }
    } else {
      const char *whn = variant == 3 && k == 1 ? "wh2" : "wh";
      Onnx__NodeProto *gh = mb_node(&m, "Gemm", v[2], hp, whn, v[2]);
      mb_node_input(gh, "bh");
      mb_attr_i(&m, gh, "transB", 1);
      Onnx__NodeProto *gx = mb_node(&m, "Gemm", v[1], v[0], "wx", v[1]);
      mb_node_input(gx, "bx");
      mb_attr_i(&m, gx, "transB", 1);
      mb_node(&m, "Add", v[3], v[2], v[1], v[3]);
      Onnx__NodeProto *sp = mb_node(&m, "Split", v[4], v[3], "sizes", v[4]);
      mb_attr_i(&m, sp, "axis", 1);
      for (int j = 0; j < 4; j++) split_out[k][j] = v[4 + j];
      sp->output = split_out[k];
      sp->n_output = 4;
    }
    int ci[4]; /* chunk of role r */
    for (int j = 0; j < 4; j++) ci[roles[j]] = j;
    for (int j = 0; j < 4; j++) mb_node(&m, act_of[roles[j]], v[8 + j], v[4 + j], NULL, v[8 + j]);
    const char *sf = v[8 + ci[1]], *si = v[8 + ci[0]], *tg = v[8 + ci[2]], *so = v[8 + ci[3]];
    if (variant == 1) {
      mb_node(&m, "Mul", v[12], cp, sf, v[12]);
      mb_node(&m, "Mul", v[13], tg, si, v[13]);
      mb_node(&m, "Add", v[18], v[13], v[12], v[18]);
    } else {
      mb_node(&m, "Mul", v[12], sf, cp, v[12]);
      mb_node(&m, "Mul", v[13], si, tg, v[13]);
      mb_node(&m, "Add", v[18], v[12], v[13], v[18]);
    }
    mb_node(&m, variant == 2 ? "Sigmoid" : "Tanh", v[19], v[18], NULL, v[19]);
    if (variant == 1)
      mb_node(&m, "Mul", v[20], v[19], so, v[20]);
    else
      mb_node(&m, "Mul", v[20], so, v[19], v[20]);
  }
  /* Y: Unsqueeze(h of time t, 0), Concat in time order */
  for (int t = 0; t < T; t++) {
    int k = rev ? T - 1 - t : t;
    mb_node(&m, "Unsqueeze", nm[k][21], nm[k][20], "uax", nm[k][21]);
  }
  for (int t = 0; t < T; t++) {
    int k = rev ? T - 1 - t : t;
    if (!t)
      cat = mb_node(&m, "Concat", "cat", nm[k][21], NULL, "y");
    else
      mb_node_input(cat, nm[k][21]);
  }
  mb_attr_i(&m, cat, "axis", bf);

  vmcc_onnx_report_t rep;
  vmcc_tensor_t xin = {VM_F32, 3, {xd[0], xd[1], In}, x, sizeof(x)};
  float got[T * B * H];
  uint32_t nrnn = 0;
  compile_run_t(e, &m, &xin, &rep, got, sizeof(got), "cl.rnn", &nrnn);
  vm_executable_t *exec = compile_model(&m);
  uint32_t ngemm = count_calls(exec, "cl.gemm"), nsig = count_calls(exec, "cl.unary.sigmoid");
  vm_executable_free(exec);
  if (variant >= 2) {
    assert_int_equal(nrnn, 0);
    assert_true(nsig > 0);
  } else {
    assert_int_equal(nrnn, 1);
    assert_int_equal(ngemm, 1);
    assert_int_equal(nsig, 0);
  }
  /* the host, in double */
  double h[B * H], cs[B * H];
  for (int i = 0; i < B * H; i++) h[i] = h0[i], cs[i] = c0[i];
  for (int k = 0; k < T; k++) {
    int t = rev ? T - 1 - k : k;
    double hn[B * H];
    for (int b = 0; b < B; b++)
      for (int u = 0; u < H; u++) {
        double gate[4];
        for (int j = 0; j < 4; j++) {
          int n = j * H + u;
          double z = bx[n] + (variant == 1 ? 0.0 : bh[n]);
          int row = bf ? b * T + t : t * B + b;
          for (int i = 0; i < In; i++) z += (double)x[row * In + i] * wx[n * In + i];
          for (int q = 0; q < H; q++) z += h[b * H + q] * wh[n * H + q];
          gate[roles[j]] = roles[j] == 2 ? tanh(z) : 1.0 / (1.0 + exp(-z));
        }
        double cn = gate[1] * cs[b * H + u] + gate[0] * gate[2];
        cs[b * H + u] = cn;
        hn[b * H + u] = gate[3] * (variant == 2 ? 1.0 / (1.0 + exp(-cn)) : tanh(cn));
      }
    for (int i = 0; i < B * H; i++) {
      h[i] = hn[i];
      int b = i / H, u = i % H;
      double v = got[(bf ? b * T + t : t * B + b) * H + u];
      if (!(fabs(v - hn[i]) <= 1e-5 + 1e-4 * fabs(hn[i])))
        fail_msg("variant %d, step %d, [%d]: %.7g, expected %.7g", variant, k, i, v, hn[i]);
    }
  }
}

static void test_lstm_unrolled_rewritten(void **state) {
  for (int v = 0; v < 4; v++) lstm_unrolled_case(*state, v);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_node_cases),
      cmocka_unit_test(test_conv_bn_folded),
      cmocka_unit_test(test_conv_affine_folded),
      cmocka_unit_test(test_nhwc_conv_folded),
      cmocka_unit_test(test_transposes_cancel),
      cmocka_unit_test(test_nhwc_residual_block),
      cmocka_unit_test(test_pad_folded),
      cmocka_unit_test(test_hard_act_rewritten),
      cmocka_unit_test(test_conv_epilogue_folded),
      cmocka_unit_test(test_conv_residual_folded),
      cmocka_unit_test(test_squeeze_excite_fused),
      cmocka_unit_test(test_conv_view_bias_folded),
      cmocka_unit_test(test_softmax_chain_rewritten),
      cmocka_unit_test(test_layer_norm_moments_rewritten),
      cmocka_unit_test(test_conv_wino_filter),
      cmocka_unit_test(test_elementwise_fusion),
      cmocka_unit_test(test_gelu),
      cmocka_unit_test(test_matmul_bias_folded),
      cmocka_unit_test(test_matmul_packed_b),
      cmocka_unit_test(test_matmul_packed_shared),
      cmocka_unit_test(test_linear_scale_folded),
      cmocka_unit_test(test_conv_transpose_bn_folded),
      cmocka_unit_test(test_conv_transpose_bn_zero_channels),
      cmocka_unit_test(test_linear_scale_shared),
      cmocka_unit_test(test_layer_norm_rewritten),
      cmocka_unit_test(test_gelu_rewritten),
      cmocka_unit_test(test_rms_norm_rewritten),
      cmocka_unit_test(test_gelu_tanh_rewritten),
      cmocka_unit_test(test_one_hot_matmul_rewritten),
      cmocka_unit_test(test_qdq_conv_fused),
      cmocka_unit_test(test_dynamic_matmul_scale_folded),
      cmocka_unit_test(test_dynamic_matmul_siblings),
      cmocka_unit_test(test_attention_transposes_strided),
      cmocka_unit_test(test_recurrent_features),
      cmocka_unit_test(test_lstm_unrolled_rewritten),
      cmocka_unit_test(test_einsum_float32),
  };
  /* TEST_FILTER=test_conv* runs the matching tests only (as test_ops_nn.c) */
  const char *filter = getenv("TEST_FILTER");
  if (filter && *filter) cmocka_set_test_filter(filter);
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
