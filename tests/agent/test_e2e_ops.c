/* End to end: every libvmclient operation against a real vmagent (started
 * on a free loopback port), on the example MLP (OpenCL) and on a small
 * builtin-only program on the cpu and opencl:0 devices. Results are compared
 * with the examples' C reference; big tensors round-trip bit-exactly
 * through chunking; a re-upload is a store hit that sends nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "agent_proc.h"
#include "helper_agent.h"
#include "test_util.h"
#include "vm/executable.h"
#include "vmrpc/vmclient.h"
#include "vmexamples/models.h"

#define MLP_SEED 7u

/* Identity, a tuple of (tensor, its shape, a scalar input), and an endless
 * loop (for deadlines). Only vm.builtin.* calls: runs on any device. */
static const char k_prog[] =
    ".packed $vm.builtin.shape_of\n"
    ".packed $vm.builtin.make_tuple\n"
    ".func @ident(x) regs 1 {\n"
    "  ret %0\n"
    "}\n"
    ".func @tup(x, n) regs 4 {\n"
    "  %2 = call $vm.builtin.shape_of(%0)\n"
    "  %3 = call $vm.builtin.make_tuple(%0, %2, %1)\n"
    "  ret %3\n"
    "}\n"
    ".func @spin() regs 1 {\n"
    "L0:\n"
    "  goto L0\n"
    "}\n";

typedef struct suite {
  agent_proc_t agent;
  uint8_t *mlp;
  size_t mlp_size;
  uint8_t *prog;
  size_t prog_size;
} suite_t;

static suite_t S;

static int suite_setup(void **state) {
  (void)state;
  memset(&S, 0, sizeof(S));
  if (agent_proc_start(&S.agent, NULL) != 0) return -1;
  vm_executable_t *e;
  if (vmex_build_mlp(MLP_SEED, NULL, &e, NULL)) return -1;
  if (vm_executable_write(e, &S.mlp, &S.mlp_size)) return -1;
  vm_executable_free(e);
  vm_status_t st = vm_executable_asm(k_prog, sizeof(k_prog) - 1, NULL, &e);
  if (st) {
    fprintf(stderr, "asm: %s\n", vm_status_message(st));
    vm_status_free(st);
    return -1;
  }
  if (vm_executable_write(e, &S.prog, &S.prog_size)) return -1;
  vm_executable_free(e);
  return 0;
}

static int suite_teardown(void **state) {
  (void)state;
  int rc = agent_proc_stop(&S.agent);
  free(S.mlp);
  free(S.prog);
  return rc == 0 ? 0 : -1;
}

static vmc_conn_t *connect_ok(void) {
  vmc_conn_t *c = NULL;
  vmc_conn_opts_t o;
  memset(&o, 0, sizeof(o));
  o.client_name = "test_e2e_ops";
  ASSERT_OK(vmc_connect(S.agent.url, &o, &c));
  return c;
}

static void fill_random(uint8_t *p, size_t n, uint64_t seed) {
  uint64_t x = seed | 1;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    memcpy(p + i, &x, 8);
  }
  for (; i < n; i++) p[i] = (uint8_t)(i * 131);
}

typedef struct progress_log {
  int calls;
  uint64_t last_done, total;
  int monotonic;
} progress_log_t;

static void on_progress(uint64_t done, uint64_t total, void *user) {
  progress_log_t *p = user;
  if (done < p->last_done) p->monotonic = 0;
  p->calls++;
  p->last_done = done;
  p->total = total;
}

static void expect_close(const float *got, const float *want, size_t n) {
  for (size_t i = 0; i < n; i++) {
    double tol = 1e-5 + 1e-4 * fabs((double)want[i]);
    if (!(fabs((double)got[i] - (double)want[i]) <= tol))
      fail_msg("element %zu: got %.9g, want %.9g", i, (double)got[i], (double)want[i]);
  }
}

/* ------------------------------------------------------------------------ */

static void test_info_and_ping(void **state) {
  (void)state;
  vmc_conn_t *c = connect_ok();
  vmc_info_t info;
  vmc_info(c, &info);
  assert_string_equal(info.url, S.agent.url);
  assert_int_equal(info.protocol_major, 1);
  assert_true(info.session != 0);
  assert_true(info.num_devices >= 1);
  assert_true(ha_has_device(c, "cpu"));
  assert_true(info.limits.chunk_bytes > 0);
  assert_true(info.limits.max_inflight_chunks > 0);
  assert_true(info.limits.max_message_bytes > info.limits.chunk_bytes);
  assert_true(info.agent_version[0] != '\0');
  double rtt = -1;
  ASSERT_OK(vmc_ping(c, &rtt));
  assert_true(rtt > 0 && rtt < 5.0);
  ASSERT_OK(vmc_ping(c, NULL));
  vmc_close(c);
}

static void test_connect_errors(void **state) {
  (void)state;
  vmc_conn_t *c = NULL;
  /* A port nobody listens on: take one from the agent's URL and change it. */
  ASSERT_STATUS(vmc_connect("tcp://127.0.0.1:1", NULL, &c), VM_UNAVAILABLE,
                "is vmagent running? start it with `vmagent --listen tcp://127.0.0.1:1`");
  assert_null(c);
  ASSERT_STATUS(vmc_connect("bogus://x", NULL, &c), VM_INVALID_ARGUMENT,
                "is not a valid agent URL");
  ASSERT_STATUS(vmc_connect("", NULL, &c), VM_INVALID_ARGUMENT, "no agent URL given");
  vmc_conn_opts_t o;
  memset(&o, 0, sizeof(o));
  o.tls_ca_file = "/nonexistent/ca.pem";
  ASSERT_STATUS(vmc_connect(S.agent.url, &o, &c), VM_INVALID_ARGUMENT, "is not a tls+tcp:// URL");
  memset(&o, 0, sizeof(o));
  o.connect_timeout_ms = -1;
  ASSERT_STATUS(vmc_connect(S.agent.url, &o, &c), VM_INVALID_ARGUMENT, "timeouts");
}

/* Everything on the MLP, on opencl:0. */
static void test_mlp_all_ops(void **state) {
  (void)state;
  vmc_conn_t *c = connect_ok();
  if (!ha_has_device(c, "opencl:0")) {
    vmc_close(c);
    skip();
  }
  vmc_stats_t st0;
  ASSERT_OK(vmc_stats(c, &st0));
  assert_int_equal(st0.session_vms, 0);
  vmc_stats_free(&st0);

  progress_log_t pl = {0, 0, 0, 1};
  vmc_exec_t ex;
  vmc_upload_result_t ur;
  ASSERT_OK(vmc_upload_memory(c, S.mlp, S.mlp_size, on_progress, &pl, &ex, &ur));
  assert_true(ex.id != 0);
  uint8_t sha[32];
  vm_sha256(S.mlp, S.mlp_size, sha);
  assert_memory_equal(ur.sha256, sha, 32);
  if (!ur.store_hit) {
    assert_int_equal(ur.bytes_sent, S.mlp_size);
    assert_true(pl.calls >= 1);
    assert_int_equal(pl.last_done, S.mlp_size);
    assert_int_equal(pl.total, S.mlp_size);
    assert_true(pl.monotonic);
  }

  vmc_device_spec_t dev = {"opencl:0", "pooled"};
  vmc_vm_t vm;
  ASSERT_OK(vmc_create_vm(c, ex, &dev, 1, "bytecode", &vm));

  vmex_io_shape_t io;
  vmex_io_shape(VMEX_MODEL_MLP, &io);
  float *x = malloc(io.in_numel * sizeof(float));
  float *want = malloc(io.out_numel * sizeof(float));
  vmex_make_input(MLP_SEED, x, io.in_numel);
  ASSERT_OK(vmex_reference_mlp(MLP_SEED, NULL, x, want));
  vmc_tensor_t tx;
  ASSERT_OK(vmc_tensor_wrap(VM_F32, io.in_ndim, io.in_shape, x, &tx));
  ASSERT_OK(vmc_set_input(c, vm, "main", 0, &tx));
  double agent_s = -1;
  ASSERT_OK(vmc_invoke(c, vm, "main", 0, &agent_s));
  assert_true(agent_s >= 0);
  int64_t arity = 0;
  ASSERT_OK(vmc_get_output_arity(c, vm, "main", NULL, 0, &arity));
  assert_int_equal(arity, -1);
  vmc_tensor_t out;
  ASSERT_OK(vmc_get_output(c, vm, "main", NULL, 0, &out));
  assert_true(vm_dtype_equal(out.dtype, VM_F32));
  assert_int_equal(out.ndim, io.out_ndim);
  for (uint32_t i = 0; i < out.ndim; i++) assert_int_equal(out.shape[i], io.out_shape[i]);
  assert_int_equal(out.nbytes, io.out_numel * sizeof(float));
  expect_close(out.data, want, io.out_numel);
  vmc_tensor_free(&out);

  /* By name, and into a caller buffer. */
  ASSERT_OK(vmc_set_input_named(c, vm, "main", "x", &tx));
  ASSERT_OK(vmc_invoke(c, vm, "main", 10000, NULL));
  float *buf = calloc(io.out_numel, sizeof(float));
  vmc_tensor_t meta;
  ASSERT_OK(vmc_get_output_into(c, vm, "main", NULL, 0, buf, io.out_numel * sizeof(float), &meta));
  assert_ptr_equal(meta.data, buf);
  assert_int_equal(meta.owns_data, 0);
  expect_close(buf, want, io.out_numel);
  ASSERT_STATUS(vmc_get_output_into(c, vm, "main", NULL, 0, buf, 16, &meta), VM_OUT_OF_RANGE,
                "pass a buffer of at least");
  free(buf);

  /* Timing, with explicit params and with the defaults. */
  vmc_time_params_t tp = vmc_time_params_default();
  tp.number = 2;
  tp.repeat = 3;
  vmc_time_result_t tr;
  ASSERT_OK(vmc_time_evaluate(c, vm, "main", &tp, &tr));
  assert_int_equal(tr.repeat, 3);
  assert_true(tr.number >= 2);
  for (uint32_t i = 0; i < tr.repeat; i++) assert_true(tr.seconds[i] > 0);
  assert_true(tr.min_s <= tr.median_s && tr.median_s <= tr.max_s);
  assert_true(tr.mean_s > 0);
  vmc_time_result_free(&tr);
  ASSERT_OK(vmc_time_evaluate(c, vm, "main", NULL, &tr));
  assert_int_equal(tr.repeat, 1);
  vmc_time_result_free(&tr);
  tp.number = 0;
  ASSERT_STATUS(vmc_time_evaluate(c, vm, "main", &tp, &tr), VM_INVALID_ARGUMENT, NULL);

  /* save_function binds the input; time the saved closure. */
  vmc_value_t arg;
  memset(&arg, 0, sizeof(arg));
  arg.kind = VMC_VALUE_TENSOR;
  arg.tensor = tx;
  ASSERT_OK(vmc_save_function(c, vm, "main", "main_saved", &arg, 1));
  tp = vmc_time_params_default();
  tp.number = 1;
  tp.repeat = 2;
  ASSERT_OK(vmc_time_evaluate(c, vm, "main_saved", &tp, &tr));
  assert_int_equal(tr.repeat, 2);
  vmc_time_result_free(&tr);

  /* Profile: one row per packed function, gemm among them. */
  vmc_profile_t prof;
  ASSERT_OK(vmc_profile(c, vm, "main", &prof));
  assert_true(prof.num_rows >= 3);
  int saw_gemm = 0;
  double share = 0;
  for (uint32_t i = 0; i < prof.num_rows; i++) {
    if (strcmp(prof.rows[i].name, "cl.gemm") == 0) {
      saw_gemm = 1;
      assert_int_equal(prof.rows[i].calls, 4);
    }
    share += prof.rows[i].share;
  }
  assert_true(saw_gemm);
  assert_true(fabs(share - 1.0) < 1e-6);
  assert_true(prof.total_s > 0);
  vmc_profile_free(&prof);

  /* Stats see the VM and its allocator. */
  vmc_stats_t st;
  ASSERT_OK(vmc_stats(c, &st));
  assert_int_equal(st.session_vms, 1);
  assert_true(st.session_executables >= 1);
  assert_true(st.session_bytes > 0);
  assert_true(st.agent_sessions >= 1);
  assert_true(st.num_allocators >= 1);
  assert_true(st.requests > 0);
  vmc_stats_free(&st);

  /* Errors pass through with the agent's code. */
  vmc_tensor_t bad;
  int64_t bad_shape[2] = {3, 3};
  ASSERT_OK(vmc_tensor_alloc(VM_F32, 2, bad_shape, &bad));
  ASSERT_STATUS(vmc_set_input(c, vm, "main", 0, &bad), VM_INVALID_ARGUMENT, NULL);
  vmc_tensor_free(&bad);
  ASSERT_STATUS(vmc_invoke(c, vm, "nope", 0, NULL), VM_NOT_FOUND, NULL);

  ASSERT_OK(vmc_free_vm(c, vm));
  ASSERT_STATUS(vmc_free_vm(c, vm), VM_NOT_FOUND, NULL);
  ASSERT_STATUS(vmc_invoke(c, vm, "main", 0, NULL), VM_NOT_FOUND, NULL);
  ASSERT_OK(vmc_free_exec(c, ex));
  ASSERT_STATUS(vmc_free_exec(c, ex), VM_NOT_FOUND, NULL);
  ASSERT_OK(vmc_stats(c, &st));
  assert_int_equal(st.session_vms, 0);
  assert_int_equal(st.session_executables, 0);
  vmc_stats_free(&st);
  free(x);
  free(want);
  vmc_close(c);
}

/* Re-uploading the same bytes is a store hit: no transfer, no progress. */
static void test_store_hit(void **state) {
  (void)state;
  vmc_conn_t *c = connect_ok();
  vmc_exec_t ex1, ex2;
  vmc_upload_result_t r1, r2;
  progress_log_t pl = {0, 0, 0, 1};
  ASSERT_OK(vmc_upload_memory(c, S.prog, S.prog_size, NULL, NULL, &ex1, &r1));
  ASSERT_OK(vmc_upload_memory(c, S.prog, S.prog_size, on_progress, &pl, &ex2, &r2));
  assert_true(r2.store_hit);
  assert_int_equal(r2.bytes_sent, 0);
  assert_int_equal(pl.calls, 0);
  assert_true(ex2.id != 0);
  vmc_close(c);
  /* A new session finds it too (loaded or in the cache dir). */
  c = connect_ok();
  pl.calls = 0;
  ASSERT_OK(vmc_upload_memory(c, S.prog, S.prog_size, on_progress, &pl, &ex2, &r2));
  assert_true(r2.store_hit);
  assert_int_equal(pl.calls, 0);
  /* Through a file as well. */
  char path[256];
  snprintf(path, sizeof(path), "/tmp/vmc_e2e_prog_%ld.vmx", (long)getpid());
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(S.prog, 1, S.prog_size, f), S.prog_size);
  fclose(f);
  ASSERT_OK(vmc_upload_file(c, path, NULL, NULL, &ex2, &r2));
  assert_true(r2.store_hit);
  unlink(path);
  ASSERT_STATUS(vmc_upload_file(c, path, NULL, NULL, &ex2, &r2), VM_NOT_FOUND, "cannot open");
  /* Bytes that are not an executable: the agent's verifier refuses them. */
  uint8_t junk[3000];
  fill_random(junk, sizeof(junk), 99);
  ASSERT_STATUS(vmc_upload_memory(c, junk, sizeof(junk), NULL, NULL, &ex2, &r2),
                VM_INVALID_ARGUMENT, NULL);
  vmc_close(c);
}

/* Bytes the agent has never seen travel in chunks with progress; then the
 * same bytes are a store hit. The fresh executable gives the reference's
 * answer. */
static void test_upload_progress(void **state) {
  (void)state;
  vmc_conn_t *c = connect_ok();
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t seed = (uint64_t)getpid() * 1000003u ^ (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 20;
  vm_executable_t *e;
  ASSERT_OK(vmex_build_mlp(seed, NULL, &e, NULL));
  uint8_t *bytes;
  size_t size;
  ASSERT_OK(vm_executable_write(e, &bytes, &size));
  vm_executable_free(e);
  vmc_info_t info;
  vmc_info(c, &info);
  uint64_t chunks = (size + info.limits.chunk_bytes - 1) / info.limits.chunk_bytes;
  assert_true(chunks >= 2);
  progress_log_t pl = {0, 0, 0, 1};
  vmc_exec_t ex;
  vmc_upload_result_t ur;
  ASSERT_OK(vmc_upload_memory(c, bytes, size, on_progress, &pl, &ex, &ur));
  assert_false(ur.store_hit);
  assert_int_equal(ur.bytes_sent, size);
  assert_int_equal(pl.calls, chunks);
  assert_int_equal(pl.last_done, size);
  assert_int_equal(pl.total, size);
  assert_true(pl.monotonic);
  progress_log_t again = {0, 0, 0, 1};
  vmc_exec_t ex2;
  ASSERT_OK(vmc_upload_memory(c, bytes, size, on_progress, &again, &ex2, &ur));
  assert_true(ur.store_hit);
  assert_int_equal(ur.bytes_sent, 0);
  assert_int_equal(again.calls, 0);
  free(bytes);
  if (ha_has_device(c, "opencl:0")) {
    vmc_device_spec_t dev = {"opencl:0", NULL};
    vmc_vm_t vm;
    ASSERT_OK(vmc_create_vm(c, ex, &dev, 1, "compiled", &vm));
    vmex_io_shape_t io;
    vmex_io_shape(VMEX_MODEL_MLP, &io);
    float *x = malloc(io.in_numel * sizeof(float));
    float *want = malloc(io.out_numel * sizeof(float));
    vmex_make_input(seed, x, io.in_numel);
    ASSERT_OK(vmex_reference_mlp(seed, NULL, x, want));
    vmc_tensor_t t, out;
    ASSERT_OK(vmc_tensor_wrap(VM_F32, io.in_ndim, io.in_shape, x, &t));
    ASSERT_OK(vmc_set_input(c, vm, "main", 0, &t));
    ASSERT_OK(vmc_invoke(c, vm, "main", 0, NULL));
    ASSERT_OK(vmc_get_output(c, vm, "main", NULL, 0, &out));
    expect_close(out.data, want, io.out_numel);
    vmc_tensor_free(&out);
    free(x);
    free(want);
  }
  vmc_close(c);
}

/* A tensor many chunks long (and not a multiple of the chunk) goes in and
 * comes back bit-exactly, allocated and into a caller buffer. */
static void big_roundtrip(const char *device) {
  vmc_conn_t *c = connect_ok();
  vmc_vm_t vm = ha_vm_on_device(c, S.prog, S.prog_size, device, NULL, NULL);
  vmc_info_t info;
  vmc_info(c, &info);
  int64_t n = (64 << 20) + 12345; /* bytes: 64 MiB and a partial chunk */
  assert_true((uint64_t)n > 8 * info.limits.chunk_bytes);
  vmc_tensor_t t;
  ASSERT_OK(vmc_tensor_alloc(VM_U8, 1, &n, &t));
  fill_random(t.data, (size_t)n, 1234);
  ASSERT_OK(vmc_set_input(c, vm, "ident", 0, &t));
  ASSERT_OK(vmc_invoke(c, vm, "ident", 0, NULL));
  vmc_tensor_t back;
  ASSERT_OK(vmc_get_output(c, vm, "ident", NULL, 0, &back));
  assert_int_equal(back.nbytes, (uint64_t)n);
  assert_int_equal(back.ndim, 1);
  assert_true(memcmp(back.data, t.data, (size_t)n) == 0);
  memset(back.data, 0, (size_t)n);
  vmc_tensor_t meta;
  ASSERT_OK(vmc_get_output_into(c, vm, "ident", NULL, 0, back.data, back.nbytes, &meta));
  assert_true(memcmp(back.data, t.data, (size_t)n) == 0);
  vmc_tensor_free(&back);
  /* Exactly one chunk and one byte more: the inline / chunked boundary. */
  int64_t edges[3] = {(int64_t)info.limits.chunk_bytes, (int64_t)info.limits.chunk_bytes + 1, 0};
  for (int i = 0; i < 3; i++) {
    vmc_tensor_t e;
    ASSERT_OK(vmc_tensor_wrap(VM_U8, 1, &edges[i], t.data, &e));
    ASSERT_OK(vmc_set_input(c, vm, "ident", 0, &e));
    ASSERT_OK(vmc_invoke(c, vm, "ident", 0, NULL));
    ASSERT_OK(vmc_get_output(c, vm, "ident", NULL, 0, &back));
    assert_int_equal(back.nbytes, (uint64_t)edges[i]);
    assert_true(edges[i] == 0 || memcmp(back.data, t.data, (size_t)edges[i]) == 0);
    vmc_tensor_free(&back);
  }
  vmc_tensor_free(&t);
  ASSERT_OK(vmc_free_vm(c, vm));
  vmc_close(c);
}

static void test_big_tensor_cpu(void **state) {
  (void)state;
  big_roundtrip("cpu");
}

static void test_big_tensor_opencl(void **state) {
  (void)state;
  big_roundtrip("opencl:0");
}

/* Tuples, shapes and scalars: inputs and outputs. */
static void tuple_outputs(const char *device) {
  vmc_conn_t *c = connect_ok();
  vmc_vm_t vm = ha_vm_on_device(c, S.prog, S.prog_size, device, "naive", "compiled");
  int64_t shape[2] = {2, 3};
  int32_t data[6] = {1, 2, 3, 4, 5, 6};
  vmc_tensor_t t;
  ASSERT_OK(vmc_tensor_wrap(VM_I32, 2, shape, data, &t));
  ASSERT_OK(vmc_set_input(c, vm, "tup", 0, &t));
  vmc_value_t n;
  memset(&n, 0, sizeof(n));
  n.kind = VMC_VALUE_INT;
  n.i = 42;
  ASSERT_OK(vmc_set_input_value(c, vm, "tup", 1, NULL, &n));
  ASSERT_OK(vmc_invoke(c, vm, "tup", 0, NULL));
  int64_t arity;
  ASSERT_OK(vmc_get_output_arity(c, vm, "tup", NULL, 0, &arity));
  assert_int_equal(arity, 3);
  uint32_t p0 = 0, p1 = 1, p2 = 2;
  ASSERT_OK(vmc_get_output_arity(c, vm, "tup", &p0, 1, &arity));
  assert_int_equal(arity, -1);
  vmc_tensor_t out;
  ASSERT_STATUS(vmc_get_output(c, vm, "tup", NULL, 0, &out), VM_FAILED_PRECONDITION,
                "tuple of 3 fields");
  vmc_value_t v;
  ASSERT_OK(vmc_get_output_value(c, vm, "tup", NULL, 0, &v));
  assert_int_equal(v.kind, VMC_VALUE_TUPLE);
  assert_int_equal(v.tuple_arity, 3);
  vmc_value_free(&v);
  ASSERT_OK(vmc_get_output(c, vm, "tup", &p0, 1, &out));
  assert_true(vm_dtype_equal(out.dtype, VM_I32));
  assert_memory_equal(out.data, data, sizeof(data));
  vmc_tensor_free(&out);
  ASSERT_OK(vmc_get_output_value(c, vm, "tup", &p1, 1, &v));
  assert_int_equal(v.kind, VMC_VALUE_SHAPE);
  assert_int_equal(v.shape_ndim, 2);
  assert_int_equal(v.shape[0], 2);
  assert_int_equal(v.shape[1], 3);
  vmc_value_free(&v);
  ASSERT_OK(vmc_get_output(c, vm, "tup", &p1, 1, &out)); /* shape as int64[2] */
  assert_int_equal(out.ndim, 1);
  assert_int_equal(((int64_t *)out.data)[1], 3);
  vmc_tensor_free(&out);
  ASSERT_OK(vmc_get_output(c, vm, "tup", &p2, 1, &out)); /* int as a 0-d int64 */
  assert_int_equal(out.ndim, 0);
  assert_true(vm_dtype_equal(out.dtype, VM_I64));
  assert_int_equal(*(int64_t *)out.data, 42);
  vmc_tensor_free(&out);
  uint32_t p9 = 9;
  ASSERT_STATUS(vmc_get_output(c, vm, "tup", &p9, 1, &out), VM_OUT_OF_RANGE, NULL);
  /* A deadline stops an endless loop. */
  ASSERT_STATUS(vmc_invoke(c, vm, "spin", 200, NULL), VM_DEADLINE_EXCEEDED, NULL);
  ASSERT_OK(vmc_ping(c, NULL));
  ASSERT_OK(vmc_free_vm(c, vm));
  vmc_close(c);
}

static void test_tuples_cpu(void **state) {
  (void)state;
  tuple_outputs("cpu");
}

static void test_tuples_opencl(void **state) {
  (void)state;
  tuple_outputs("opencl:0");
}

/* Handles of one session mean nothing in another. */
static void test_sessions_isolated(void **state) {
  (void)state;
  vmc_conn_t *a = connect_ok(), *b = connect_ok();
  vmc_exec_t ex;
  ASSERT_OK(vmc_upload_memory(a, S.prog, S.prog_size, NULL, NULL, &ex, NULL));
  vmc_vm_t vm;
  ASSERT_OK(vmc_create_vm(a, ex, NULL, 0, NULL, &vm));
  ASSERT_STATUS(vmc_invoke(b, vm, "spin", 0, NULL), VM_NOT_FOUND, NULL);
  ASSERT_STATUS(vmc_create_vm(b, ex, NULL, 0, NULL, &vm), VM_NOT_FOUND, NULL);
  vmc_device_spec_t dev = {"tpu:9", NULL};
  ASSERT_STATUS(vmc_create_vm(a, ex, &dev, 1, NULL, &vm), VM_NOT_FOUND, "this agent has: ");
  dev.selector = "cpu";
  dev.allocator = "bogus";
  ASSERT_STATUS(vmc_create_vm(a, ex, &dev, 1, NULL, &vm), VM_INVALID_ARGUMENT, NULL);
  vmc_close(b);
  vmc_close(a);
}

/* Timeouts name themselves and the flag that raises them. */
static void test_timeouts(void **state) {
  (void)state;
  /* Something listens but never speaks: the connect timeout fires. */
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  assert_int_equal(listen(fd, 4), 0);
  socklen_t sl = sizeof(sa);
  assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
  char url[64];
  snprintf(url, sizeof(url), "tcp://127.0.0.1:%u", (unsigned)ntohs(sa.sin_port));
  vmc_conn_opts_t o;
  memset(&o, 0, sizeof(o));
  o.connect_timeout_ms = 300;
  vmc_conn_t *c = NULL;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  ASSERT_STATUS(vmc_connect(url, &o, &c), VM_DEADLINE_EXCEEDED, "--connect-timeout");
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  assert_true(took >= 0.25 && took < 3.0);
  assert_null(c);
  close(fd);

  /* The client gives up on a long invoke, says which knob to turn, and
   * cancels the run so the VM is usable again. */
  memset(&o, 0, sizeof(o));
  o.long_timeout_ms = 300;
  ASSERT_OK(vmc_connect(S.agent.url, &o, &c));
  vmc_exec_t ex;
  ASSERT_OK(vmc_upload_memory(c, S.prog, S.prog_size, NULL, NULL, &ex, NULL));
  vmc_vm_t vm;
  vmc_device_spec_t dev = {"cpu", NULL};
  ASSERT_OK(vmc_create_vm(c, ex, &dev, 1, NULL, &vm));
  ASSERT_STATUS(vmc_invoke(c, vm, "spin", 0, NULL), VM_DEADLINE_EXCEEDED,
                "within 300 ms (long_timeout_ms): the client gave up and cancelled the run");
  int64_t n = 3;
  int8_t d[3] = {1, 2, 3};
  vmc_tensor_t t, back;
  ASSERT_OK(vmc_tensor_wrap(VM_I8, 1, &n, d, &t));
  ASSERT_OK(vmc_set_input(c, vm, "ident", 0, &t));
  ASSERT_OK(vmc_invoke(c, vm, "ident", 5000, NULL));
  ASSERT_OK(vmc_get_output(c, vm, "ident", NULL, 0, &back));
  assert_memory_equal(back.data, d, 3);
  vmc_tensor_free(&back);
  vmc_close(c);
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

/* An agent with a token refuses Hello without it, naming the flag. */
static void test_token(void **state) {
  (void)state;
  char path[128];
  snprintf(path, sizeof(path), "/tmp/vmc_e2e_token_%ld", (long)getpid());
  write_text(path, "s3cret-token\n");
  chmod(path, 0600);
  const char *args[] = {"--token-file", path, NULL};
  agent_proc_t a;
  assert_int_equal(agent_proc_start(&a, args), 0);
  vmc_conn_t *c = NULL;
  ASSERT_STATUS(vmc_connect(a.url, NULL, &c), VM_UNAUTHENTICATED, "--token");
  vmc_conn_opts_t o;
  memset(&o, 0, sizeof(o));
  o.token = "wrong";
  ASSERT_STATUS(vmc_connect(a.url, &o, &c), VM_UNAUTHENTICATED, "--token");
  o.token = "s3cret-token";
  ASSERT_OK(vmc_connect(a.url, &o, &c));
  ASSERT_OK(vmc_ping(c, NULL));
  vmc_close(c);
  assert_int_equal(agent_proc_stop(&a), 0);
  unlink(path);
}

/* The SHA-256 fingerprint of a PEM certificate as "sha256:AA:BB:...". */
static void cert_fingerprint(const char *cert, char *out, size_t cap) {
  char cmd[512], line[512];
  snprintf(cmd, sizeof(cmd), "openssl x509 -noout -fingerprint -sha256 -in %s", cert);
  FILE *f = popen(cmd, "r");
  assert_non_null(f);
  assert_non_null(fgets(line, sizeof(line), f));
  pclose(f);
  char *eq = strchr(line, '=');
  assert_non_null(eq);
  eq[strcspn(eq, "\r\n")] = '\0';
  snprintf(out, cap, "sha256:%s", eq + 1);
}

/* Connects with o and uploads: the connection works. */
static void tls_works(const char *url, const vmc_conn_opts_t *o) {
  vmc_conn_t *c = NULL;
  ASSERT_OK(vmc_connect(url, o, &c));
  vmc_exec_t ex;
  ASSERT_OK(vmc_upload_memory(c, S.prog, S.prog_size, NULL, NULL, &ex, NULL));
  ASSERT_OK(vmc_ping(c, NULL));
  vmc_close(c);
}

/* tls+tcp:// trust: the agent's self-signed certificate (CN 127.0.0.1) as
 * the CA, as the system store, or pinned by fingerprint; without any of
 * them the system store verifies (and refuses this certificate: before,
 * the client did not verify at all and sent its token to whoever answered);
 * --tls-insecure is explicit. Wrong CA, wrong pin, bad options and missing
 * files fail with advice. */
static void test_tls(void **state) {
  (void)state;
  char dir[64], cmd[2048], cert[96], key[96], other[96], okey[96];
  snprintf(dir, sizeof(dir), "/tmp/vmc_e2e_tls_%ld", (long)getpid());
  snprintf(cert, sizeof(cert), "%s/cert.pem", dir);
  snprintf(key, sizeof(key), "%s/key.pem", dir);
  snprintf(other, sizeof(other), "%s/other.pem", dir);
  snprintf(okey, sizeof(okey), "%s/okey.pem", dir);
  snprintf(cmd, sizeof(cmd),
           "mkdir -p %s && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
           "-days 2 -subj /CN=127.0.0.1 -keyout %s -out %s >/dev/null 2>&1 && "
           "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 "
           "-subj /CN=127.0.0.1 -keyout %s -out %s >/dev/null 2>&1",
           dir, key, cert, okey, other);
  if (system(cmd) != 0) skip(); /* no openssl: nothing to test with */
  const char *args[] = {"--listen", "tls+tcp://127.0.0.1:0", "--tls-cert", cert, "--tls-key", key,
                        NULL};
  agent_proc_t a;
  assert_int_equal(agent_proc_start(&a, args), 0);
  assert_true(strncmp(a.url, "tls+tcp://", 10) == 0);
  char *saved_env = getenv("SSL_CERT_FILE") ? strdup(getenv("SSL_CERT_FILE")) : NULL;
  vmc_conn_opts_t o;
  memset(&o, 0, sizeof(o));
  o.connect_timeout_ms = 3000;
  vmc_conn_t *c = NULL;

  /* Verified by default: the system store does not know this certificate. */
  unsetenv("SSL_CERT_FILE");
  vm_status_t st = vmc_connect(a.url, &o, &c);
  assert_non_null(st);
  assert_null(c);
  assert_true(vm_status_code(st) == VM_UNAVAILABLE ||
              vm_status_code(st) == VM_FAILED_PRECONDITION); /* no system store at all */
  vm_status_free(st);
  setenv("SSL_CERT_FILE", other, 1);
  ASSERT_STATUS(vmc_connect(a.url, &o, &c), VM_UNAVAILABLE,
                "must be signed by --tls-ca (default: the system CA store)");
  setenv("SSL_CERT_FILE", "/nonexistent/store.pem", 1);
  ASSERT_STATUS(vmc_connect(a.url, &o, &c), VM_FAILED_PRECONDITION,
                "no system CA store to verify the agent's certificate with");
  setenv("SSL_CERT_FILE", cert, 1); /* a store that holds it: verified, host name too */
  tls_works(a.url, &o);
  unsetenv("SSL_CERT_FILE");

  /* --tls-ca */
  o.tls_ca_file = cert;
  tls_works(a.url, &o);
  o.tls_ca_file = other;
  ASSERT_STATUS(vmc_connect(a.url, &o, &c), VM_UNAVAILABLE, "--tls-ca");
  o.tls_ca_file = "/nonexistent/ca.pem";
  ASSERT_STATUS(vmc_connect(a.url, &o, &c), VM_NOT_FOUND, "reading the TLS CA file");
  o.tls_ca_file = dir; /* a directory: cannot be read */
  ASSERT_STATUS(vmc_connect(a.url, &o, &c), VM_PERMISSION_DENIED, "reading the TLS CA file");
  o.tls_ca_file = NULL;

  /* --tls-pin, as openssl prints it and as bare lower-case hex */
  char pin[160], other_pin[160], bare[80];
  cert_fingerprint(cert, pin, sizeof(pin));
  cert_fingerprint(other, other_pin, sizeof(other_pin));
  o.tls_pin = pin;
  tls_works(a.url, &o);
  size_t n = 0;
  n += (size_t)snprintf(bare, sizeof(bare), "SHA256:");
  for (const char *p = pin + 7; *p; p++)
    if (*p != ':') bare[n++] = (char)(*p >= 'A' && *p <= 'F' ? *p - 'A' + 'a' : *p);
  bare[n] = '\0';
  o.tls_pin = bare;
  tls_works(a.url, &o);
  o.tls_pin = other_pin;
  ASSERT_STATUS(vmc_connect(a.url, &o, &c), VM_UNAVAILABLE, "not the one pinned by --tls-pin");
  /* the check's own handshake with something that does not speak TLS */
  char plain[320];
  snprintf(plain, sizeof(plain), "tls+tcp://%s", S.agent.url + strlen("tcp://"));
  ASSERT_STATUS(vmc_connect(plain, &o, &c), VM_UNAVAILABLE, "failed while checking --tls-pin");
  o.tls_pin = "sha256:abcd";
  ASSERT_STATUS(vmc_connect(a.url, &o, &c), VM_INVALID_ARGUMENT,
                "expected sha256: and the 64 hex digits");
  o.tls_pin = "md5:00";
  ASSERT_STATUS(vmc_connect(a.url, &o, &c), VM_INVALID_ARGUMENT, "expected sha256:");
  o.tls_pin = pin;
  o.tls_ca_file = cert;
  ASSERT_STATUS(vmc_connect(a.url, &o, &c), VM_INVALID_ARGUMENT,
                "give at most one of --tls-ca, --tls-pin and --tls-insecure");
  o.tls_pin = NULL;
  o.tls_ca_file = NULL;

  /* --tls-insecure: only when asked for, and alone */
  o.tls_insecure = 1;
  tls_works(a.url, &o);
  o.tls_ca_file = cert;
  ASSERT_STATUS(vmc_connect(a.url, &o, &c), VM_INVALID_ARGUMENT, "give at most one of");
  o.tls_ca_file = NULL;
  ASSERT_STATUS(vmc_connect("tcp://127.0.0.1:1", &o, &c), VM_INVALID_ARGUMENT,
                "is not a tls+tcp:// URL");

  if (saved_env) setenv("SSL_CERT_FILE", saved_env, 1);
  free(saved_env);
  assert_int_equal(agent_proc_stop(&a), 0);
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

/* An Invoke's reply means the work is done on the device: operators only
 * enqueue their kernels, so without a sync the reply (and its seconds) came
 * back after the enqueueing, the device still busy for the next session.
 * 32 fills of a 64 MiB tensor: the invoke takes as long as a timed call. */
static void test_invoke_waits_for_the_device(void **state) {
  (void)state;
  char text[4096];
  size_t n = (size_t)snprintf(text, sizeof(text),
                              ".const c0 shape [16777216]\n"
                              ".const c1 dtype float32\n"
                              ".const c2 string \"global\"\n"
                              ".const c3 float 1.5\n"
                              ".packed $vm.builtin.alloc_storage\n"
                              ".packed $vm.builtin.alloc_tensor\n"
                              ".packed $cl.fill\n"
                              ".func @fills() regs 2 {\n"
                              "  %%0 = call $vm.builtin.alloc_storage(%%vm, c0, 0, c1, c2)\n"
                              "  %%1 = call $vm.builtin.alloc_tensor(%%0, 0, c0, c1)\n");
  for (int i = 0; i < 32; i++)
    n += (size_t)snprintf(text + n, sizeof(text) - n, "  call $cl.fill(c3, %%1)\n");
  n += (size_t)snprintf(text + n, sizeof(text) - n, "  ret %%1\n}\n");
  assert_true(n < sizeof(text));
  uint8_t *prog;
  size_t len;
  assert_int_equal(ha_exec_bytes(text, &prog, &len), 0);
  vmc_conn_t *c = connect_ok();
  if (!ha_has_device(c, "opencl:0")) {
    vmc_close(c);
    free(prog);
    skip();
  }
  vmc_vm_t vm = ha_vm_on_device(c, prog, len, "opencl:0", "naive", "bytecode");
  double invoke_s = 0;
  ASSERT_OK(vmc_invoke(c, vm, "fills", 0, NULL)); /* warm: the fill program */
  ASSERT_OK(vmc_invoke(c, vm, "fills", 0, &invoke_s));
  vmc_time_params_t tp = vmc_time_params_default();
  tp.number = 1;
  tp.repeat = 3;
  vmc_time_result_t r;
  ASSERT_OK(vmc_time_evaluate(c, vm, "fills", &tp, &r));
  /* Before: the invoke took the enqueueing only, under a tenth of this. */
  if (!(invoke_s >= 0.5 * r.min_s))
    fail_msg("invoke %.6f s, timed call %.6f s (min of 3)", invoke_s, r.min_s);
  vmc_time_result_free(&r);
  vmc_close(c);
  free(prog);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_info_and_ping),
      cmocka_unit_test(test_connect_errors),
      cmocka_unit_test(test_mlp_all_ops),
      cmocka_unit_test(test_upload_progress),
      cmocka_unit_test(test_store_hit),
      cmocka_unit_test(test_big_tensor_cpu),
      cmocka_unit_test(test_big_tensor_opencl),
      cmocka_unit_test(test_tuples_cpu),
      cmocka_unit_test(test_tuples_opencl),
      cmocka_unit_test(test_invoke_waits_for_the_device),
      cmocka_unit_test(test_sessions_isolated),
      cmocka_unit_test(test_timeouts),
      cmocka_unit_test(test_token),
      cmocka_unit_test(test_tls),
  };
  return cmocka_run_group_tests(tests, suite_setup, suite_teardown);
}
