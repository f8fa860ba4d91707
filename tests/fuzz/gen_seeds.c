/* Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/):
 *
 *   fuzz-gen-seeds OUTDIR
 *
 * loader  .vmx bytes of the sample executables (the agent test program, the
 *         rich sample that uses every opcode and constant kind, a small MLP
 *         and a small CNN carrying an OpenCL kernel module);
 * asm     their text form (disasm);
 * npy     valid .npy images of every supported dtype, versions 1.0-3.0;
 * request real framed request sequences (the format of fuzz_request_one:
 *         u16 LE length + body per message), replayed here through the
 *         same harness to check that each seed reaches deep states.
 *
 * fuzz-gen-seeds --replay FILE runs one fuzz_request input and prints each
 * reply (for debugging a crash).
 *
 * Deterministic: the same build writes the same files. scripts/fuzz.sh does
 * not run it; the generated seeds are committed (regenerate after a format
 * change). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "helper_agent.h"
#include "helper_fuzz.h"
#include "sample_exec.h"
#include "vm/executable.h"
#include "vmrpc/vmclient.h"
#include "vmexamples/models.h"
#include "vmproto/wire.h"

static const char *g_out;

static void die(const char *what, vm_status_t st) {
  fprintf(stderr, "fuzz-gen-seeds: %s: %s\n", what, st ? vm_status_message(st) : "failed");
  exit(1);
}

static void mkdir_p(const char *path) {
  char buf[1024];
  snprintf(buf, sizeof(buf), "%s", path);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    mkdir(buf, 0755);
    *p = '/';
  }
  if (mkdir(buf, 0755) != 0 && errno != EEXIST) die(path, NULL);
}

static void put(const char *target, const char *name, const void *data, size_t len) {
  char dir[1024], path[1200];
  snprintf(dir, sizeof(dir), "%s/%s", g_out, target);
  mkdir_p(dir);
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0) die(path, NULL);
  printf("%s (%zu bytes)\n", path, len);
}

/* ------------------------------------------------------------ executables */

static void put_exec(const char *name, vm_executable_t *e, uint8_t **out_bytes, size_t *out_len) {
  uint8_t *b = NULL;
  size_t n = 0;
  char *text = NULL;
  vm_status_t st = vm_executable_write(e, &b, &n);
  if (!st) st = vm_executable_disasm(e, &text);
  if (st) die(name, st);
  char file[256];
  snprintf(file, sizeof(file), "%s.vmx", name);
  put("fuzz_loader", file, b, n);
  snprintf(file, sizeof(file), "%s.vmasm", name);
  put("fuzz_asm", file, text, strlen(text));
  free(text);
  if (out_bytes) {
    *out_bytes = b;
    *out_len = n;
  } else {
    free(b);
  }
}

/* ------------------------------------------------------------ .npy */

static void put_npy(const char *name, vm_dtype_t dt, uint32_t ndim, const int64_t *shape,
                    int version) {
  vmc_tensor_t t;
  vm_status_t st = vmc_tensor_alloc(dt, ndim, shape, &t);
  if (st) die(name, st);
  for (uint64_t i = 0; i < t.nbytes; i++) ((uint8_t *)t.data)[i] = (uint8_t)(i * 37 + 1);
  if (dt.code == VM_DTYPE_BOOL)
    for (uint64_t i = 0; i < t.nbytes; i++) ((uint8_t *)t.data)[i] &= 1;
  uint8_t *img = NULL;
  size_t len = 0;
  st = vmc_npy_write_memory(&t, &img, &len);
  if (st) die(name, st);
  if (version > 1) {
    /* v1: magic(6) ver(2) u16 hlen; v2/v3: u32 hlen. */
    uint16_t hlen = (uint16_t)(img[8] | img[9] << 8);
    /* 2 more prefix bytes: pad the header by 62 spaces to stay 64-aligned */
    uint32_t h2 = hlen + 62u;
    size_t data_len = len - 10 - hlen, nlen = 12 + h2 + data_len;
    uint8_t *v = malloc(nlen);
    memcpy(v, img, 6);
    v[6] = (uint8_t)version;
    v[7] = 0;
    v[8] = (uint8_t)h2;
    v[9] = (uint8_t)(h2 >> 8);
    v[10] = 0;
    v[11] = 0;
    memcpy(v + 12, img + 10, hlen - 1u); /* without its '\n' */
    memset(v + 12 + hlen - 1, ' ', 62);
    v[12 + h2 - 1] = '\n';
    memcpy(v + 12 + h2, img + 10 + hlen, data_len);
    free(img);
    img = v;
    len = nlen;
    vmc_tensor_t chk;
    st = vmc_npy_read_memory(img, len, &chk);
    if (st) die(name, st);
    vmc_tensor_free(&chk);
  }
  put("fuzz_npy", name, img, len);
  free(img);
  vmc_tensor_free(&t);
}

/* ------------------------------------------------------------ requests */

typedef struct seq {
  uint8_t *buf;
  size_t len;
  uint64_t next_id;
} seq_t;

static void add(seq_t *q, Vmrpc__Request *rq, const void *payload, size_t plen) {
  rq->id = ++q->next_id;
  if (!rq->session && rq->op_case != VMRPC__REQUEST__OP_HELLO) rq->session = 1; /* 1st Hello */
  size_t n = vmp_frame_size(&rq->base);
  uint8_t *body = malloc(n + plen);
  vmp_frame_write(&rq->base, body);
  if (plen) memcpy(body + n, payload, plen);
  if (fuzz_frames_append(&q->buf, &q->len, body, n + plen) != 0) die("frame too big", NULL);
  free(body);
}

static void add_raw(seq_t *q, const void *body, size_t len) {
  if (fuzz_frames_append(&q->buf, &q->len, body, len) != 0) die("frame too big", NULL);
}

static void hello(seq_t *q, const char *token, uint32_t major) {
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__HelloRequest h = VMRPC__HELLO_REQUEST__INIT;
  h.protocol_major = major;
  h.client_name = (char *)"fuzz-seed";
  h.token = (char *)token;
  rq.op_case = VMRPC__REQUEST__OP_HELLO;
  rq.hello = &h;
  add(q, &rq, NULL, 0);
}

#define SIMPLE(q, CASE, field, TYPE, INIT)     \
  do {                                         \
    Vmrpc__Request rq_ = VMRPC__REQUEST__INIT; \
    TYPE m_ = INIT;                            \
    rq_.op_case = CASE;                        \
    rq_.field = &m_;                           \
    add(q, &rq_, NULL, 0);                     \
  } while (0)

static void ping(seq_t *q) {
  SIMPLE(q, VMRPC__REQUEST__OP_PING, ping, Vmrpc__PingRequest, VMRPC__PING_REQUEST__INIT);
}
static void stats(seq_t *q) {
  SIMPLE(q, VMRPC__REQUEST__OP_STATS, stats, Vmrpc__StatsRequest, VMRPC__STATS_REQUEST__INIT);
}
static void goodbye(seq_t *q) {
  SIMPLE(q, VMRPC__REQUEST__OP_GOODBYE, goodbye, Vmrpc__GoodbyeRequest,
         VMRPC__GOODBYE_REQUEST__INIT);
}
static void list_devices(seq_t *q) {
  SIMPLE(q, VMRPC__REQUEST__OP_LIST_DEVICES, list_devices, Vmrpc__ListDevicesRequest,
         VMRPC__LIST_DEVICES_REQUEST__INIT);
}

/* Upload in a fresh session: upload_id is handle 1 (or the next one). */
static void upload(seq_t *q, const uint8_t *data, size_t len, uint64_t upload_id) {
  uint8_t sha[32];
  vm_sha256(data, len, sha);
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__UploadBeginRequest b = VMRPC__UPLOAD_BEGIN_REQUEST__INIT;
  b.sha256.data = sha;
  b.sha256.len = 32;
  b.size = len;
  rq.op_case = VMRPC__REQUEST__OP_UPLOAD_BEGIN;
  rq.upload_begin = &b;
  add(q, &rq, NULL, 0);
  for (size_t off = 0; off < len; off += 4096) {
    Vmrpc__Request r2 = VMRPC__REQUEST__INIT;
    Vmrpc__UploadChunkRequest c = VMRPC__UPLOAD_CHUNK_REQUEST__INIT;
    c.upload_id = upload_id;
    c.offset = off;
    r2.op_case = VMRPC__REQUEST__OP_UPLOAD_CHUNK;
    r2.upload_chunk = &c;
    add(q, &r2, data + off, len - off < 4096 ? len - off : 4096);
  }
  Vmrpc__Request r3 = VMRPC__REQUEST__INIT;
  Vmrpc__UploadCommitRequest m = VMRPC__UPLOAD_COMMIT_REQUEST__INIT;
  m.upload_id = upload_id;
  r3.op_case = VMRPC__REQUEST__OP_UPLOAD_COMMIT;
  r3.upload_commit = &m;
  add(q, &r3, NULL, 0);
}

static void create_vm(seq_t *q, uint64_t exec, const char *allocator, const char *mode) {
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__CreateVMRequest c = VMRPC__CREATE_VMREQUEST__INIT;
  Vmrpc__DeviceSpec d = VMRPC__DEVICE_SPEC__INIT;
  Vmrpc__DeviceSpec *dl[1] = {&d};
  d.selector = (char *)"cpu";
  d.allocator = (char *)allocator;
  c.exec_id = exec;
  c.n_devices = 1;
  c.devices = dl;
  c.exec_mode = (char *)mode;
  rq.op_case = VMRPC__REQUEST__OP_CREATE_VM;
  rq.create_vm = &c;
  add(q, &rq, NULL, 0);
}

static void set_input(seq_t *q, uint64_t vm, const char *func, int index, const char *name,
                      Vmrpc__Value *v, const void *payload, size_t plen) {
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__SetInputRequest s = VMRPC__SET_INPUT_REQUEST__INIT;
  s.vm_id = vm;
  s.func = (char *)func;
  if (name) {
    s.param_case = VMRPC__SET_INPUT_REQUEST__PARAM_NAME;
    s.name = (char *)name;
  } else {
    s.param_case = VMRPC__SET_INPUT_REQUEST__PARAM_INDEX;
    s.index = (uint32_t)index;
  }
  s.value = v;
  rq.op_case = VMRPC__REQUEST__OP_SET_INPUT;
  rq.set_input = &s;
  add(q, &rq, payload, plen);
}

static void set_input_f32(seq_t *q, uint64_t vm, const char *func, int index, const char *name,
                          const int64_t *shape, size_t ndim) {
  size_t numel = 1;
  for (size_t i = 0; i < ndim; i++) numel *= (size_t)shape[i];
  float *x = malloc(numel * sizeof(float) + 1);
  for (size_t i = 0; i < numel; i++) x[i] = (float)i * 0.25f - 1.0f;
  Vmrpc__Value v = VMRPC__VALUE__INIT;
  Vmrpc__TensorMeta m = VMRPC__TENSOR_META__INIT;
  m.dtype = (char *)"float32";
  m.n_shape = ndim;
  m.shape = (int64_t *)shape;
  m.nbytes = numel * sizeof(float);
  v.kind_case = VMRPC__VALUE__KIND_TENSOR;
  v.tensor = &m;
  set_input(q, vm, func, index, name, &v, x, numel * sizeof(float));
  free(x);
}

static void invoke(seq_t *q, uint64_t vm, const char *func, uint32_t deadline_ms) {
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__InvokeRequest i = VMRPC__INVOKE_REQUEST__INIT;
  i.vm_id = vm;
  i.func = (char *)func;
  i.deadline_ms = deadline_ms;
  rq.op_case = VMRPC__REQUEST__OP_INVOKE;
  rq.invoke = &i;
  add(q, &rq, NULL, 0);
}

static void get_output(seq_t *q, uint64_t vm, const char *func, uint32_t *path, size_t n,
                       uint64_t offset, uint64_t max_bytes) {
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__GetOutputRequest g = VMRPC__GET_OUTPUT_REQUEST__INIT;
  g.vm_id = vm;
  g.func = (char *)func;
  g.n_path = n;
  g.path = path;
  g.offset = offset;
  g.max_bytes = max_bytes;
  rq.op_case = VMRPC__REQUEST__OP_GET_OUTPUT;
  rq.get_output = &g;
  add(q, &rq, NULL, 0);
}

static void get_arity(seq_t *q, uint64_t vm, const char *func, uint32_t *path, size_t n) {
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__GetOutputArityRequest g = VMRPC__GET_OUTPUT_ARITY_REQUEST__INIT;
  g.vm_id = vm;
  g.func = (char *)func;
  g.n_path = n;
  g.path = path;
  rq.op_case = VMRPC__REQUEST__OP_GET_OUTPUT_ARITY;
  rq.get_output_arity = &g;
  add(q, &rq, NULL, 0);
}

static void time_eval(seq_t *q, uint64_t vm, const char *func, int number, int repeat,
                      int defaults) {
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__TimeEvaluateRequest t = VMRPC__TIME_EVALUATE_REQUEST__INIT;
  t.vm_id = vm;
  t.func = (char *)func;
  t.number = number;
  t.repeat = repeat;
  t.defaults = defaults;
  t.repeats_to_cooldown = 1;
  t.limit_zero_time_iterations = 3;
  rq.op_case = VMRPC__REQUEST__OP_TIME_EVALUATE;
  rq.time_evaluate = &t;
  add(q, &rq, NULL, 0);
}

static void profile(seq_t *q, uint64_t vm, const char *func) {
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__ProfileRequest p = VMRPC__PROFILE_REQUEST__INIT;
  p.vm_id = vm;
  p.func = (char *)func;
  rq.op_case = VMRPC__REQUEST__OP_PROFILE;
  rq.profile = &p;
  add(q, &rq, NULL, 0);
}

static void tensor_begin(seq_t *q, uint64_t vm, const int64_t *shape, size_t ndim) {
  size_t numel = 1;
  for (size_t i = 0; i < ndim; i++) numel *= (size_t)shape[i];
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__TensorBeginRequest b = VMRPC__TENSOR_BEGIN_REQUEST__INIT;
  Vmrpc__TensorMeta m = VMRPC__TENSOR_META__INIT;
  m.dtype = (char *)"float32";
  m.n_shape = ndim;
  m.shape = (int64_t *)shape;
  m.nbytes = numel * 4;
  b.vm_id = vm;
  b.meta = &m;
  rq.op_case = VMRPC__REQUEST__OP_TENSOR_BEGIN;
  rq.tensor_begin = &b;
  add(q, &rq, NULL, 0);
}

static void tensor_chunk(seq_t *q, uint64_t transfer, uint64_t offset, size_t len) {
  uint8_t *d = malloc(len + 1);
  for (size_t i = 0; i < len; i++) d[i] = (uint8_t)(i * 13);
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__TensorChunkRequest c = VMRPC__TENSOR_CHUNK_REQUEST__INIT;
  c.transfer_id = transfer;
  c.offset = offset;
  rq.op_case = VMRPC__REQUEST__OP_TENSOR_CHUNK;
  rq.tensor_chunk = &c;
  add(q, &rq, d, len);
  free(d);
}

static void by_id(seq_t *q, Vmrpc__Request__OpCase op, uint64_t id) {
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__FreeVMRequest fv = VMRPC__FREE_VMREQUEST__INIT;
  Vmrpc__FreeExecutableRequest fe = VMRPC__FREE_EXECUTABLE_REQUEST__INIT;
  Vmrpc__CancelRequest c = VMRPC__CANCEL_REQUEST__INIT;
  rq.op_case = op;
  if (op == VMRPC__REQUEST__OP_FREE_VM) {
    fv.vm_id = id;
    rq.free_vm = &fv;
  } else if (op == VMRPC__REQUEST__OP_FREE_EXECUTABLE) {
    fe.exec_id = id;
    rq.free_executable = &fe;
  } else {
    c.vm_id = id;
    rq.cancel = &c;
  }
  add(q, &rq, NULL, 0);
}

static void save_function(seq_t *q, uint64_t vm, const char *func, const char *saved,
                          uint64_t transfer_a) {
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__SaveFunctionRequest s = VMRPC__SAVE_FUNCTION_REQUEST__INIT;
  Vmrpc__Value a = VMRPC__VALUE__INIT, b = VMRPC__VALUE__INIT;
  Vmrpc__Value *args[2] = {&a, &b};
  a.kind_case = VMRPC__VALUE__KIND_TENSOR_REF;
  a.tensor_ref = transfer_a;
  b.kind_case = VMRPC__VALUE__KIND_I;
  b.i = 7;
  s.vm_id = vm;
  s.func = (char *)func;
  s.saved_name = (char *)saved;
  s.n_args = 2;
  s.args = args;
  rq.op_case = VMRPC__REQUEST__OP_SAVE_FUNCTION;
  rq.save_function = &s;
  add(q, &rq, NULL, 0);
}

static int g_bad_replies;

static void trace(const char *line) {
  printf("    %s\n", line);
  /* seeds are meant to succeed, except where they test refusals */
  if (strstr(line, "INTERNAL")) g_bad_replies++;
}

static void put_seq(const char *name, seq_t *q) {
  put("fuzz_request", name, q->buf, q->len);
  fuzz_trace_hook = trace;
  fuzz_request_one(q->buf, q->len);
  fuzz_trace_hook = NULL;
  free(q->buf);
  memset(q, 0, sizeof(*q));
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--replay") == 0) { /* debugging a fuzz_request input */
    setvbuf(stdout, NULL, _IONBF, 0);
    uint8_t *data = NULL;
    size_t len = 0;
    vm_status_t rst = vm_read_file(argv[2], 16u << 20, &data, &len);
    if (rst) die(argv[2], rst);
    fuzz_trace_hook = trace;
    fuzz_request_one(data, len);
    fuzz_request_reset();
    free(data);
    return 0;
  }
  if (argc != 2) {
    fprintf(stderr, "usage: fuzz-gen-seeds OUTDIR | --replay FUZZ_REQUEST_INPUT\n");
    return 2;
  }
  g_out = argv[1];

  /* executables */
  vm_executable_t *e = NULL;
  vm_status_t st = vm_executable_asm(ha_test_program, strlen(ha_test_program), NULL, &e);
  if (st) die("test program", st);
  uint8_t *prog = NULL;
  size_t prog_len = 0;
  put_exec("test_program", e, &prog, &prog_len);
  vm_executable_free(e);

  e = sample_exec_rich();
  put_exec("rich", e, NULL, NULL);
  vm_executable_free(e);

  vmex_mlp_config_t mc = vmex_mlp_config_default();
  mc.batch = 2;
  mc.in = 4;
  mc.num_hidden = 1;
  mc.hidden[0] = 6;
  mc.out = 3;
  st = vmex_build_mlp(1, &mc, &e, NULL);
  if (st) die("mlp", st);
  uint8_t *mlp = NULL;
  size_t mlp_len = 0;
  put_exec("mlp_small", e, &mlp, &mlp_len);
  vm_executable_free(e);

  vmex_cnn_config_t cc = vmex_cnn_config_default();
  cc.n = 1;
  cc.c = 1;
  cc.h = cc.w = 4;
  cc.c1 = 2;
  cc.c2 = 2;
  cc.classes = 2;
  cc.plan_align = 64;
  st = vmex_build_cnn(1, &cc, &e, NULL);
  if (st) die("cnn", st);
  put_exec("cnn_small", e, NULL, NULL);
  vm_executable_free(e);

  /* .npy */
  int64_t s23[2] = {2, 3}, s4[1] = {4}, s0[1] = {0}, s112[3] = {1, 1, 2};
  put_npy("f32_2x3.npy", VM_DTYPE_MAKE(VM_DTYPE_FLOAT, 32, 1), 2, s23, 1);
  put_npy("f64_4.npy", VM_DTYPE_MAKE(VM_DTYPE_FLOAT, 64, 1), 1, s4, 1);
  put_npy("f16_1x1x2.npy", VM_DTYPE_MAKE(VM_DTYPE_FLOAT, 16, 1), 3, s112, 1);
  put_npy("i64_scalar.npy", VM_DTYPE_MAKE(VM_DTYPE_INT, 64, 1), 0, NULL, 1);
  put_npy("i8_4.npy", VM_DTYPE_MAKE(VM_DTYPE_INT, 8, 1), 1, s4, 1);
  put_npy("i16_2x3.npy", VM_DTYPE_MAKE(VM_DTYPE_INT, 16, 1), 2, s23, 1);
  put_npy("i32_4.npy", VM_DTYPE_MAKE(VM_DTYPE_INT, 32, 1), 1, s4, 1);
  put_npy("u8_empty.npy", VM_DTYPE_MAKE(VM_DTYPE_UINT, 8, 1), 1, s0, 1);
  put_npy("u16_4.npy", VM_DTYPE_MAKE(VM_DTYPE_UINT, 16, 1), 1, s4, 1);
  put_npy("u32_4.npy", VM_DTYPE_MAKE(VM_DTYPE_UINT, 32, 1), 1, s4, 1);
  put_npy("u64_2x3.npy", VM_DTYPE_MAKE(VM_DTYPE_UINT, 64, 1), 2, s23, 1);
  put_npy("bool_4.npy", VM_DTYPE_MAKE(VM_DTYPE_BOOL, 8, 1), 1, s4, 1);
  put_npy("f32_v2.npy", VM_DTYPE_MAKE(VM_DTYPE_FLOAT, 32, 1), 2, s23, 2);
  put_npy("i32_v3.npy", VM_DTYPE_MAKE(VM_DTYPE_INT, 32, 1), 1, s4, 3);

  /* request sequences; handles count from 1 per session */
  seq_t q = {0};
  ping(&q);
  add_raw(&q, "\x01\x00", 2);
  put_seq("ping_and_garbage", &q);

  hello(&q, "fuzz-token", 1);
  list_devices(&q);
  stats(&q);
  ping(&q);
  goodbye(&q);
  stats(&q);
  put_seq("hello_stats_goodbye", &q);

  hello(&q, NULL, 1);
  hello(&q, "wrong", 1);
  hello(&q, "fuzz-token", 2);
  hello(&q, "fuzz-token", 1);
  hello(&q, "fuzz-token", 1);
  stats(&q);
  put_seq("hello_refusals", &q);

  /* upload 1, exec 2, vm 3 */
  uint32_t p0[1] = {0}, p1[1] = {1};
  int64_t x3[1] = {3};
  hello(&q, "fuzz-token", 1);
  upload(&q, prog, prog_len, 1);
  create_vm(&q, 2, "pooled", "bytecode");
  set_input_f32(&q, 3, "main", 0, NULL, x3, 1);
  invoke(&q, 3, "main", 0);
  get_arity(&q, 3, "main", NULL, 0);
  get_output(&q, 3, "main", p0, 1, 0, 0);
  get_output(&q, 3, "main", p1, 1, 0, 0);
  get_output(&q, 3, "main", p0, 1, 4, 4);
  time_eval(&q, 3, "main", 2, 2, 0);
  profile(&q, 3, "main");
  stats(&q);
  by_id(&q, VMRPC__REQUEST__OP_FREE_VM, 3);
  by_id(&q, VMRPC__REQUEST__OP_FREE_EXECUTABLE, 2);
  goodbye(&q);
  put_seq("upload_invoke_output", &q);

  /* upload 1, exec 2, vm 3, transfer 4, transfer 5 */
  int64_t x1k[1] = {1100};
  hello(&q, "fuzz-token", 1);
  upload(&q, prog, prog_len, 1);
  create_vm(&q, 2, "naive", "compiled");
  tensor_begin(&q, 3, x1k, 1);
  tensor_chunk(&q, 4, 4096, 4400 - 4096);
  tensor_chunk(&q, 4, 0, 4096);
  {
    Vmrpc__Value v = VMRPC__VALUE__INIT;
    v.kind_case = VMRPC__VALUE__KIND_TENSOR_REF;
    v.tensor_ref = 4;
    set_input(&q, 3, "ident", 0, NULL, &v, NULL, 0);
  }
  invoke(&q, 3, "ident", 1000);
  get_output(&q, 3, "ident", NULL, 0, 0, 0);
  get_output(&q, 3, "ident", NULL, 0, 4096, 0);
  tensor_begin(&q, 3, x3, 1);
  tensor_chunk(&q, 5, 0, 12);
  save_function(&q, 3, "pair", "pair_saved", 5);
  time_eval(&q, 3, "pair_saved", 0, 0, 1);
  by_id(&q, VMRPC__REQUEST__OP_CANCEL, 3);
  by_id(&q, VMRPC__REQUEST__OP_FREE_VM, 3);
  put_seq("transfer_save_time", &q);

  /* a program that never ends: the deadline / Cancel end it */
  hello(&q, "fuzz-token", 1);
  upload(&q, prog, prog_len, 1);
  create_vm(&q, 2, "", "");
  invoke(&q, 3, "spin", 20);
  profile(&q, 3, "spin");
  stats(&q);
  put_seq("spin_deadline", &q);

  /* the MLP: x float32[2, 4] */
  int64_t xm[2] = {2, 4};
  hello(&q, "fuzz-token", 1);
  upload(&q, mlp, mlp_len, 1);
  create_vm(&q, 2, "pooled", "bytecode");
  set_input_f32(&q, 3, "main", -1, "x", xm, 2);
  invoke(&q, 3, "main", 0);
  get_output(&q, 3, "main", NULL, 0, 0, 0);
  time_eval(&q, 3, "main", 1, 1, 0);
  stats(&q);
  put_seq("mlp", &q);

  /* two sessions on one connection */
  hello(&q, "fuzz-token", 1);
  hello(&q, "fuzz-token", 1);
  upload(&q, prog, prog_len, 1);
  {
    Vmrpc__Request rq = VMRPC__REQUEST__INIT;
    Vmrpc__StatsRequest s = VMRPC__STATS_REQUEST__INIT;
    rq.op_case = VMRPC__REQUEST__OP_STATS;
    rq.stats = &s;
    rq.session = 2;
    add(&q, &rq, NULL, 0);
  }
  put_seq("two_sessions", &q);

  free(prog);
  free(mlp);
  fuzz_request_reset();
  if (g_bad_replies) {
    fprintf(stderr, "fuzz-gen-seeds: %d INTERNAL replies\n", g_bad_replies);
    return 1;
  }
  return 0;
}
