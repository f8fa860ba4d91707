/* Every operation of the wire protocol against a real vmagent process,
 * driven with the raw helper_wire client: Hello, ListDevices, upload (and
 * the store hit on re-upload, in memory and on disk after a restart),
 * CreateVM on cpu and opencl:0, SetInput inline and chunked, Invoke,
 * GetOutputArity, GetOutput (chunked), SaveFunction, TimeEvaluate, Profile,
 * Stats, Cancel from a second context, deadlines, FreeVM, FreeExecutable,
 * Goodbye, teardown on disconnect and on idle timeout. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent_proc.h"
#include "helper_agent.h"
#include "helper_wire.h"
#include "test_util.h"
#include "vm/executable.h"
#include "vm/vm.h"
#include "vmexamples/models.h"

#define CHUNK 4096

static agent_proc_t g_agent;
static uint8_t *g_prog;
static size_t g_prog_len;
static int g_have_opencl;

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static int setup(void **state) {
  (void)state;
  const char *args[] = {"--chunk-size", "4K", "--workers", "4", NULL};
  if (agent_proc_start(&g_agent, args) != 0) return -1;
  if (ha_exec_bytes(ha_test_program, &g_prog, &g_prog_len) != 0) return -1;
  hw_conn_t c;
  if (hw_open(&c, g_agent.url) != 0) return -1;
  hw_reply_t r;
  if (hw_hello(&c, NULL, &r) != 0) return -1;
  for (size_t i = 0; i < r.rs->hello->n_devices; i++)
    if (strcmp(r.rs->hello->devices[i]->selector, "opencl:0") == 0) g_have_opencl = 1;
  hw_reply_free(&r);
  hw_close(&c);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  free(g_prog);
  int rc = agent_proc_stop(&g_agent);
  if (rc != 0) fprintf(stderr, "vmagent exited with %d\n", rc);
  return rc == 0 ? 0 : -1;
}

static void open_session(hw_conn_t *c) {
  ha_open_session(c, g_agent.url);
}

/* A session with the test program loaded in a VM on sel. */
static uint64_t session_vm(hw_conn_t *c, const char *sel, uint64_t *out_exec) {
  open_session(c);
  uint64_t exec = ha_upload_ok(c, g_prog, g_prog_len, CHUNK);
  if (out_exec) *out_exec = exec;
  return ha_create_vm_ok(c, exec, sel, "pooled", "bytecode");
}

/* ------------------------------------------------------------------ */

static void test_hello_and_list_devices(void **state) {
  (void)state;
  hw_conn_t c;
  assert_int_equal(hw_open(&c, g_agent.url), 0);
  hw_reply_t r;
  CODE_IS(hw_hello(&c, NULL, &r), 0, &r);
  const Vmrpc__HelloResponse *h = r.rs->hello;
  assert_non_null(h);
  assert_int_equal(h->protocol_major, 1);
  assert_int_equal(h->protocol_minor, 2);
  assert_true(h->session != 0);
  assert_non_null(h->limits);
  assert_int_equal(h->limits->chunk_bytes, CHUNK);
  assert_int_equal(h->limits->max_message_bytes, CHUNK + 64 * 1024);
  assert_int_equal(h->limits->max_inflight_chunks, 4);
  assert_int_equal(h->limits->max_sessions, 64);
  assert_int_equal(h->limits->idle_timeout_ms, 600000);
  int cpu = 0;
  for (size_t i = 0; i < h->n_devices; i++)
    if (strcmp(h->devices[i]->selector, "cpu") == 0) cpu = 1;
  assert_true(cpu);
  assert_int_equal(r.rs->id, 1);
  uint64_t session = h->session;
  hw_reply_free(&r);

  CODE_IS(ha_list_devices(&c, &r), 0, &r);
  assert_true(r.rs->list_devices->n_devices >= 1);
  assert_string_equal(r.rs->list_devices->devices[r.rs->list_devices->n_devices - 1]->selector,
                      "cpu");
  hw_reply_free(&r);

  /* A second Hello on the same connection is a second session. */
  CODE_IS(hw_hello(&c, NULL, &r), 0, &r);
  assert_true(r.rs->hello->session != session);
  hw_reply_free(&r);
  hw_close(&c);
}

/* The serialised MLP example with `layers` layers; *out is malloc'ed. */
static uint8_t *mlp_bytes(int layers, size_t *out_len) {
  vm_executable_t *e = NULL;
  ASSERT_OK(vmex_build_mlp(layers, NULL, &e, NULL));
  uint8_t *mlp;
  ASSERT_OK(vm_executable_write(e, &mlp, out_len));
  vm_executable_free(e);
  return mlp;
}

static void test_upload_store_hit(void **state) {
  (void)state;
  hw_conn_t a, b;
  open_session(&a);
  open_session(&b);
  /* The MLP is ~1 MiB: many 4K chunks, sent last-first. */
  size_t mlp_len;
  uint8_t *mlp = mlp_bytes(3, &mlp_len);
  hw_reply_t r;
  uint64_t exec = 0, exec2 = 0;
  int present = -1;
  CODE_IS_FREE(ha_upload(&a, mlp, mlp_len, CHUNK, &exec, &present, &r), 0, &r);
  /* Same session again, then another session: hits, answered at Begin. */
  CODE_IS_FREE(ha_upload(&a, mlp, mlp_len, CHUNK, &exec2, &present, &r), 0, &r);
  assert_int_equal(present, 1);
  assert_true(exec2 != exec);
  CODE_IS_FREE(ha_upload(&b, mlp, mlp_len, CHUNK, &exec2, &present, &r), 0, &r);
  assert_int_equal(present, 1);
  /* After every handle is freed, the disk store still answers. */
  CODE_IS_FREE(ha_free_exec(&a, exec, &r), 0, &r);
  CODE_IS_FREE(ha_free_exec(&b, exec2, &r), 0, &r);
  CODE_IS_FREE(ha_upload(&b, mlp, mlp_len, CHUNK, &exec2, &present, &r), 0, &r);
  assert_int_equal(present, 1);
  CODE_IS(ha_stats(&b, &r), 0, &r);
  assert_true(r.rs->stats->store_entries >= 1);
  assert_true(r.rs->stats->store_bytes >= mlp_len);
  hw_reply_free(&r);
  free(mlp);
  hw_close(&a);
  hw_close(&b);
}

/* Starts a private agent with args, uploads the test program (a store hit
 * or not, as want_present says) and stops the agent. */
static void upload_to_new_agent(const char *const *args, int want_present) {
  agent_proc_t p;
  assert_int_equal(agent_proc_start(&p, args), 0);
  hw_conn_t c;
  hw_reply_t r;
  uint64_t exec;
  int present = -1;
  ha_open_session(&c, p.url);
  CODE_IS_FREE(ha_upload(&c, g_prog, g_prog_len, CHUNK, &exec, &present, &r), 0, &r);
  assert_int_equal(present, want_present);
  hw_close(&c);
  assert_int_equal(agent_proc_stop(&p), 0);
}

/* A private agent with its own cache dir: the store survives a restart,
 * and a corrupted file is detected, deleted and treated as a miss. */
static void test_store_disk_restart_and_corruption(void **state) {
  (void)state;
  char dir[] = "/tmp/vmagent-store-XXXXXX";
  assert_non_null(mkdtemp(dir));
  const char *args[] = {"--cache-dir", dir, "--device", "cpu", NULL};
  upload_to_new_agent(args, 0);

  uint8_t sha[32];
  char hex[65], path[512];
  vm_sha256(g_prog, g_prog_len, sha);
  vm_sha256_hex(sha, hex);
  snprintf(path, sizeof(path), "%s/executables/%s.vmx", dir, hex);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal((size_t)st.st_size, g_prog_len);

  /* Restart: a hit from disk. */
  upload_to_new_agent(args, 1);

  /* Flip a byte: the next lookup re-hashes, deletes, and asks for bytes. */
  FILE *f = fopen(path, "r+b");
  assert_non_null(f);
  fseek(f, (long)g_prog_len / 2, SEEK_SET);
  int ch = fgetc(f);
  fseek(f, (long)g_prog_len / 2, SEEK_SET);
  fputc(ch ^ 0x5a, f);
  fclose(f);
  upload_to_new_agent(args, 0);         /* a miss: uploaded again */
  assert_int_equal(stat(path, &st), 0); /* rewritten, intact */
  uint8_t *data = NULL;
  size_t len = 0;
  ASSERT_OK(vm_read_file(path, 1 << 20, &data, &len));
  assert_int_equal(len, g_prog_len);
  assert_memory_equal(data, g_prog, len);
  free(data);
  unlink(path);
  snprintf(path, sizeof(path), "%s/executables", dir);
  rmdir(path);
  rmdir(dir);
}

static void roundtrip(const char *sel, int chunked) {
  hw_conn_t c;
  uint64_t vm = session_vm(&c, sel, NULL);
  hw_reply_t r;
  size_t n = chunked ? 3000 : 5; /* 12000 bytes = 3 chunks of 4K */
  float *x = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) x[i] = (float)i * 0.5f - 3.0f;
  int64_t shape[1] = {(int64_t)n};
  if (!chunked) {
    CODE_IS_FREE(
        ha_set_input_tensor(&c, vm, "main", 0, NULL, "float32", shape, 1, n * 4, x, n * 4, &r), 0,
        &r);
  } else {
    uint64_t t = 0;
    CODE_IS_FREE(ha_tensor_begin(&c, vm, "float32", shape, 1, n * 4, &t, &r), 0, &r);
    /* Out of order: 2, 0, 1. */
    const size_t order[3] = {2, 0, 1};
    for (int k = 0; k < 3; k++) {
      size_t off = order[k] * CHUNK, len = n * 4 - off < CHUNK ? n * 4 - off : CHUNK;
      CODE_IS_FREE(ha_tensor_chunk(&c, t, off, (uint8_t *)x + off, len, &r), 0, &r);
    }
    CODE_IS_FREE(ha_set_input_ref(&c, vm, "main", 0, t, &r), 0, &r);
    /* Consumed: a second use is NOT_FOUND. */
    CODE_IS(ha_set_input_ref(&c, vm, "main", 0, t, &r), VM_NOT_FOUND, &r);
    assert_non_null(strstr(hw_message(&r), "transfer"));
    hw_reply_free(&r);
  }
  CODE_IS(ha_invoke(&c, vm, "main", 0, &r), 0, &r);
  assert_true(r.rs->invoke->seconds >= 0);
  hw_reply_free(&r);

  int64_t arity = 0;
  CODE_IS_FREE(ha_get_arity(&c, vm, "main", NULL, 0, &arity, &r), 0, &r);
  assert_int_equal(arity, 2);
  uint32_t p0[1] = {0}, p1[1] = {1};
  CODE_IS_FREE(ha_get_arity(&c, vm, "main", p0, 1, &arity, &r), 0, &r);
  assert_int_equal(arity, -1);

  /* The whole result is a tuple: its arity comes back, no payload. */
  CODE_IS(ha_get_output(&c, vm, "main", NULL, 0, 0, 0, &r), 0, &r);
  assert_int_equal(r.rs->get_output->value->kind_case, VMRPC__VALUE__KIND_TUPLE_ARITY);
  assert_int_equal(r.rs->get_output->value->tuple_arity, 2);
  assert_int_equal(r.payload_len, 0);
  hw_reply_free(&r);

  uint8_t *out = NULL;
  size_t out_len = 0;
  int chunks = 0;
  assert_int_equal(ha_fetch_output(&c, vm, "main", p0, 1, &out, &out_len, &chunks), 0);
  assert_int_equal(out_len, n * 4);
  assert_memory_equal(out, x, n * 4);
  assert_int_equal(chunks, chunked ? 3 : 1);
  free(out);

  /* A smaller max_bytes clamps the chunk. */
  CODE_IS(ha_get_output(&c, vm, "main", p0, 1, 4, 8, &r), 0, &r);
  assert_int_equal(r.payload_len, 8);
  assert_memory_equal(r.payload, (uint8_t *)x + 4, 8);
  assert_string_equal(r.rs->get_output->value->tensor->dtype, "float32");
  assert_int_equal(r.rs->get_output->value->tensor->n_shape, 1);
  assert_int_equal(r.rs->get_output->value->tensor->shape[0], (int64_t)n);
  hw_reply_free(&r);

  CODE_IS(ha_get_output(&c, vm, "main", p1, 1, 0, 0, &r), 0, &r);
  assert_int_equal(r.rs->get_output->value->kind_case, VMRPC__VALUE__KIND_SHAPE);
  assert_int_equal(r.rs->get_output->value->shape->n_dims, 1);
  assert_int_equal(r.rs->get_output->value->shape->dims[0], (int64_t)n);
  hw_reply_free(&r);

  CODE_IS_FREE(ha_free_vm(&c, vm, &r), 0, &r);
  CODE_IS_FREE(ha_goodbye(&c, &r), 0, &r);
  free(x);
  hw_close(&c);
}

static void test_cpu_inline(void **state) {
  (void)state;
  roundtrip("cpu", 0);
}

static void test_cpu_chunked(void **state) {
  (void)state;
  roundtrip("cpu", 1);
}

static void test_opencl_inline_and_chunked(void **state) {
  (void)state;
  if (!g_have_opencl) skip();
  roundtrip("opencl:0", 0);
  roundtrip("opencl:0", 1);
}

/* Chunks of one upload and one transfer in flight on 8 contexts at once,
 * then the output read by 4 parallel GetOutput requests. */
static void test_parallel_chunks_and_reads(void **state) {
  (void)state;
  hw_conn_t c;
  uint64_t vm = session_vm(&c, "cpu", NULL);
  hw_reply_t r;
  enum { N = 8 };
  size_t bytes = N * CHUNK - 100;
  uint8_t *x = malloc(bytes);
  for (size_t i = 0; i < bytes; i++) x[i] = (uint8_t)(i * 7 + 3);
  int64_t shape[1] = {(int64_t)bytes};
  uint64_t t = 0;
  CODE_IS_FREE(ha_tensor_begin(&c, vm, "uint8", shape, 1, bytes, &t, &r), 0, &r);
  Vmrpc__Request rq[N];
  Vmrpc__TensorChunkRequest q[N];
  for (int k = 0; k < N; k++) {
    vmrpc__request__init(&rq[k]);
    vmrpc__tensor_chunk_request__init(&q[k]);
    q[k].transfer_id = t;
    q[k].offset = (uint64_t)k * CHUNK;
    rq[k].op_case = VMRPC__REQUEST__OP_TENSOR_CHUNK;
    rq[k].tensor_chunk = &q[k];
    size_t len = bytes - q[k].offset < CHUNK ? bytes - q[k].offset : CHUNK;
    assert_int_equal(hw_send(&c, k, &rq[k], x + q[k].offset, len), 0);
  }
  for (int k = 0; k < N; k++) {
    assert_int_equal(hw_recv(&c, k, &r, 0), 0);
    CODE_IS(hw_code(&r), 0, &r);
    assert_int_equal(r.rs->id, rq[k].id);
    hw_reply_free(&r);
  }
  CODE_IS_FREE(ha_set_input_ref(&c, vm, "ident", 0, t, &r), 0, &r);
  CODE_IS_FREE(ha_invoke(&c, vm, "ident", 0, &r), 0, &r);
  Vmrpc__GetOutputRequest g[N];
  for (int k = 0; k < N; k++) {
    vmrpc__request__init(&rq[k]);
    vmrpc__get_output_request__init(&g[k]);
    g[k].vm_id = vm;
    g[k].func = (char *)"ident";
    g[k].offset = (uint64_t)k * CHUNK;
    rq[k].op_case = VMRPC__REQUEST__OP_GET_OUTPUT;
    rq[k].get_output = &g[k];
    assert_int_equal(hw_send(&c, k, &rq[k], NULL, 0), 0);
  }
  for (int k = 0; k < N; k++) {
    assert_int_equal(hw_recv(&c, k, &r, 0), 0);
    CODE_IS(hw_code(&r), 0, &r);
    size_t len = bytes - g[k].offset < CHUNK ? bytes - g[k].offset : CHUNK;
    assert_int_equal(r.payload_len, len);
    assert_memory_equal(r.payload, x + g[k].offset, len);
    hw_reply_free(&r);
  }
  free(x);
  hw_close(&c);
}

static void test_default_device_and_compiled_mode(void **state) {
  (void)state;
  hw_conn_t c;
  open_session(&c);
  uint64_t exec = ha_upload_ok(&c, g_prog, g_prog_len, CHUNK);
  hw_reply_t r;
  uint64_t vm = 0;
  CODE_IS_FREE(ha_create_vm(&c, exec, NULL, NULL, "compiled", &vm, &r), 0, &r);
  CODE_IS_FREE(ha_set_input_int(&c, vm, "ident", 0, 42, &r), 0, &r);
  CODE_IS_FREE(ha_invoke(&c, vm, "ident", 0, &r), 0, &r);
  CODE_IS(ha_get_output(&c, vm, "ident", NULL, 0, 0, 0, &r), 0, &r);
  assert_int_equal(r.rs->get_output->value->kind_case, VMRPC__VALUE__KIND_I);
  assert_int_equal(r.rs->get_output->value->i, 42);
  hw_reply_free(&r);
  hw_close(&c);
}

static void test_mlp_on_opencl_matches_reference(void **state) {
  (void)state;
  if (!g_have_opencl) skip();
  hw_conn_t c;
  open_session(&c);
  size_t mlp_len;
  uint8_t *mlp = mlp_bytes(5, &mlp_len);
  hw_reply_t r;
  uint64_t exec = ha_upload_ok(&c, mlp, mlp_len, CHUNK);
  free(mlp);
  uint64_t vm = ha_create_vm_ok(&c, exec, "opencl:0", "pooled", "bytecode");
  vmex_io_shape_t io;
  vmex_mlp_io_shape(NULL, &io);
  float *x = malloc(io.in_numel * sizeof(float));
  float *want = malloc(io.out_numel * sizeof(float));
  vmex_make_input(9, x, io.in_numel);
  ASSERT_OK(vmex_reference_mlp(5, NULL, x, want));
  uint64_t nbytes = io.in_numel * sizeof(float), t = 0;
  CODE_IS_FREE(ha_tensor_begin(&c, vm, "float32", io.in_shape, io.in_ndim, nbytes, &t, &r), 0, &r);
  for (uint64_t off = 0; off < nbytes; off += CHUNK) {
    size_t len = nbytes - off < CHUNK ? (size_t)(nbytes - off) : CHUNK;
    CODE_IS_FREE(ha_tensor_chunk(&c, t, off, (uint8_t *)x + off, len, &r), 0, &r);
  }
  CODE_IS_FREE(ha_set_input_ref(&c, vm, "main", 0, t, &r), 0, &r);
  CODE_IS_FREE(ha_invoke(&c, vm, "main", 0, &r), 0, &r);
  uint8_t *out;
  size_t out_len;
  int chunks;
  assert_int_equal(ha_fetch_output(&c, vm, "main", NULL, 0, &out, &out_len, &chunks), 0);
  assert_int_equal(out_len, io.out_numel * sizeof(float));
  const float *y = (const float *)out;
  for (size_t i = 0; i < io.out_numel; i++)
    if (fabsf(y[i] - want[i]) > 1e-4f + 1e-3f * fabsf(want[i]))
      fail_msg("output %zu: %g, reference %g", i, (double)y[i], (double)want[i]);
  free(out);
  free(x);
  free(want);
  hw_close(&c);
}

static void test_save_function_time_evaluate_profile(void **state) {
  (void)state;
  hw_conn_t c;
  uint64_t vm = session_vm(&c, "cpu", NULL);
  hw_reply_t r;
  float x[6] = {1, 2, 3, 4, 5, 6};
  int64_t shape[1] = {6};
  uint64_t t = 0;
  CODE_IS_FREE(ha_tensor_begin(&c, vm, "float32", shape, 1, sizeof(x), &t, &r), 0, &r);
  CODE_IS_FREE(ha_tensor_chunk(&c, t, 0, x, sizeof(x), &r), 0, &r);

  /* pair(tensor_ref, 7) saved as "bound". */
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__SaveFunctionRequest q = VMRPC__SAVE_FUNCTION_REQUEST__INIT;
  Vmrpc__Value a0 = VMRPC__VALUE__INIT, a1 = VMRPC__VALUE__INIT;
  Vmrpc__Value *args[2] = {&a0, &a1};
  a0.kind_case = VMRPC__VALUE__KIND_TENSOR_REF;
  a0.tensor_ref = t;
  a1.kind_case = VMRPC__VALUE__KIND_I;
  a1.i = 7;
  q.vm_id = vm;
  q.func = (char *)"pair";
  q.saved_name = (char *)"bound";
  q.n_args = 2;
  q.args = args;
  rq.op_case = VMRPC__REQUEST__OP_SAVE_FUNCTION;
  rq.save_function = &q;
  CALL_CODE_IS(&c, &rq, NULL, 0, 0, &r);
  hw_reply_free(&r);

  /* An inline tensor argument takes its bytes from the payload. */
  Vmrpc__TensorMeta m = VMRPC__TENSOR_META__INIT;
  m.dtype = (char *)"float32";
  m.n_shape = 1;
  m.shape = shape;
  m.nbytes = sizeof(x);
  a0.kind_case = VMRPC__VALUE__KIND_TENSOR;
  a0.tensor = &m;
  q.saved_name = (char *)"bound_inline";
  rq.id = 0;
  CALL_CODE_IS(&c, &rq, x, sizeof(x), 0, &r);
  hw_reply_free(&r);

  Vmrpc__Request tr = VMRPC__REQUEST__INIT;
  Vmrpc__TimeEvaluateRequest te = VMRPC__TIME_EVALUATE_REQUEST__INIT;
  te.vm_id = vm;
  te.func = (char *)"bound";
  te.number = 3;
  te.repeat = 4;
  te.defaults = 1;
  tr.op_case = VMRPC__REQUEST__OP_TIME_EVALUATE;
  tr.time_evaluate = &te;
  CALL_CODE_IS(&c, &tr, NULL, 0, 0, &r);
  const Vmrpc__TimeEvaluateResponse *ter = r.rs->time_evaluate;
  assert_int_equal(ter->number, 3);
  assert_int_equal(ter->n_seconds, 4);
  assert_int_equal(ter->n_device_seconds, 4);
  assert_true(ter->min_s <= ter->median_s && ter->median_s <= ter->max_s);
  assert_true(ter->min_s >= 0);
  hw_reply_free(&r);

  /* Without defaults, a zero number is the evaluator's INVALID_ARGUMENT. */
  te.defaults = 0;
  te.number = 0;
  tr.id = 0;
  CALL_CODE_IS(&c, &tr, NULL, 0, VM_INVALID_ARGUMENT, &r);
  hw_reply_free(&r);

  /* Profile main with a stateful input. */
  CODE_IS_FREE(ha_set_input_tensor(&c, vm, "main", -1, "x", "float32", shape, 1, sizeof(x), x,
                                   sizeof(x), &r),
               0, &r);
  Vmrpc__Request pr = VMRPC__REQUEST__INIT;
  Vmrpc__ProfileRequest pq = VMRPC__PROFILE_REQUEST__INIT;
  pq.vm_id = vm;
  pq.func = (char *)"main";
  pr.op_case = VMRPC__REQUEST__OP_PROFILE;
  pr.profile = &pq;
  CALL_CODE_IS(&c, &pr, NULL, 0, 0, &r);
  int shape_of = 0, make_tuple = 0;
  for (size_t i = 0; i < r.rs->profile->n_rows; i++) {
    const Vmrpc__ProfileRow *row = r.rs->profile->rows[i];
    if (strcmp(row->name, "vm.builtin.shape_of") == 0) shape_of = (int)row->calls;
    if (strcmp(row->name, "vm.builtin.make_tuple") == 0) make_tuple = (int)row->calls;
  }
  assert_int_equal(shape_of, 1);
  assert_int_equal(make_tuple, 1);
  assert_true(r.rs->profile->total_s >= 0);
  hw_reply_free(&r);

  /* Stats: the session holds device bytes in its VM's allocators. */
  CODE_IS(ha_stats(&c, &r), 0, &r);
  const Vmrpc__StatsResponse *s = r.rs->stats;
  assert_int_equal(s->session_vms, 1);
  assert_int_equal(s->session_executables, 1);
  assert_int_equal(s->session_transfers, 0); /* consumed by SaveFunction */
  assert_true(s->session_bytes > 0);
  assert_true(s->n_allocators >= 1);
  assert_true(s->agent_sessions >= 1);
  assert_true(s->agent_bytes >= s->session_bytes);
  assert_true(s->requests > 0);
  assert_true(s->agent_rss_bytes > 0);
  hw_reply_free(&r);
  hw_close(&c);
}

static void test_cancel_from_second_context(void **state) {
  (void)state;
  hw_conn_t c;
  uint64_t vm = session_vm(&c, "cpu", NULL);
  hw_reply_t r;
  /* Cancel of an idle VM is a no-op. */
  CODE_IS_FREE(ha_cancel(&c, 0, vm, &r), 0, &r);

  uint64_t spin_id = 0;
  /* While it spins: other ops on this VM are refused ("busy" as soon as
   * the invoke has started: poll, a loaded machine may be slow). A poll
   * that reaches the agent first makes the invoke itself "busy": then it
   * is sent again (at most 3 times). */
  float x[1] = {1};
  int64_t shape[1] = {1};
  hw_reply_t b;
  int code = 0;
  for (int attempt = 0; attempt < 3 && code == 0; attempt++) {
    ha_send_invoke(&c, 1, vm, "spin", &spin_id);
    for (int i = 0; i < 200 && code == 0; i++) {
      code = ha_set_input_tensor(&c, vm, "main", 0, NULL, "float32", shape, 1, 4, x, 4, &b);
      if (code == 0) {
        hw_reply_free(&b);
        sleep_ms(25);
      }
    }
    if (code == 0) { /* the invoke lost the race: its answer says so */
      assert_int_equal(hw_recv(&c, 1, &r, 10000), 0);
      CODE_IS(hw_code(&r), VM_FAILED_PRECONDITION, &r);
      assert_non_null(strstr(hw_message(&r), "busy"));
      hw_reply_free(&r);
    }
  }
  CODE_IS(code, VM_FAILED_PRECONDITION, &b);
  assert_non_null(strstr(hw_message(&b), "busy"));
  hw_reply_free(&b);
  CODE_IS_FREE(ha_free_vm(&c, vm, &b), VM_FAILED_PRECONDITION, &b);
  CODE_IS_FREE(ha_stats(&c, &b), 0, &b);
  CODE_IS_FREE(ha_ping(&c, &b), 0, &b);

  uint64_t t0 = vm_now_ns();
  CODE_IS_FREE(ha_cancel(&c, 2, vm, &r), 0, &r);
  assert_int_equal(hw_recv(&c, 1, &r, 10000), 0);
  CODE_IS(hw_code(&r), VM_CANCELLED, &r);
  assert_int_equal(r.rs->id, spin_id);
  hw_reply_free(&r);
  assert_true(vm_now_ns() - t0 < 5000000000ull);
  /* The VM works afterwards. */
  CODE_IS_FREE(ha_set_input_int(&c, vm, "ident", 0, 1, &r), 0, &r);
  CODE_IS_FREE(ha_invoke(&c, vm, "ident", 0, &r), 0, &r);
  hw_close(&c);
}

static void test_deadline(void **state) {
  (void)state;
  hw_conn_t c;
  uint64_t vm = session_vm(&c, "cpu", NULL);
  hw_reply_t r;
  uint64_t t0 = vm_now_ns();
  CODE_IS_FREE(ha_invoke(&c, vm, "spin", 200, &r), VM_DEADLINE_EXCEEDED, &r);
  uint64_t ms = (vm_now_ns() - t0) / 1000000;
  assert_true(ms >= 150 && ms < 5000);
  hw_close(&c);
}

static void test_free_executable_keeps_vm_and_goodbye(void **state) {
  (void)state;
  hw_conn_t c;
  uint64_t exec;
  uint64_t vm = session_vm(&c, "cpu", &exec);
  hw_reply_t r;
  CODE_IS_FREE(ha_free_exec(&c, exec, &r), 0, &r);
  CODE_IS(ha_free_exec(&c, exec, &r), VM_NOT_FOUND, &r);
  assert_non_null(strstr(hw_message(&r), "executable"));
  hw_reply_free(&r);
  /* The VM still runs the executable it was made from. */
  CODE_IS_FREE(ha_set_input_int(&c, vm, "ident", 0, 5, &r), 0, &r);
  CODE_IS_FREE(ha_invoke(&c, vm, "ident", 0, &r), 0, &r);
  CODE_IS_FREE(ha_free_vm(&c, vm, &r), 0, &r);
  CODE_IS_FREE(ha_invoke(&c, vm, "ident", 0, &r), VM_NOT_FOUND, &r);
  CODE_IS_FREE(ha_goodbye(&c, &r), 0, &r);
  CODE_IS_FREE(ha_stats(&c, &r), VM_NOT_FOUND, &r);
  CODE_IS_FREE(ha_ping(&c, &r), 0, &r);
  hw_close(&c);
}

static uint32_t agent_sessions(hw_conn_t *c) {
  hw_reply_t r;
  CODE_IS(ha_stats(c, &r), 0, &r);
  uint32_t n = r.rs->stats->agent_sessions;
  hw_reply_free(&r);
  return n;
}

static void test_disconnect_tears_down(void **state) {
  (void)state;
  hw_conn_t obs;
  open_session(&obs);
  /* Earlier tests closed their connections; each is torn down once the
   * agent has read its end, which may be a moment later: wait for it. */
  uint32_t before = agent_sessions(&obs);
  for (int i = 0; i < 100 && before != 1; i++) {
    sleep_ms(50);
    before = agent_sessions(&obs);
  }
  assert_int_equal(before, 1);
  hw_conn_t c;
  uint64_t vm = session_vm(&c, "cpu", NULL);
  hw_reply_t r;
  int64_t shape[1] = {100};
  uint64_t t;
  /* A half-done transfer and an upload in flight: both must be freed. */
  CODE_IS_FREE(ha_tensor_begin(&c, vm, "float32", shape, 1, 400, &t, &r), 0, &r);
  uint8_t sha[32] = {1};
  CODE_IS_FREE(ha_upload_begin(&c, sha, 10000, &r), 0, &r);
  /* A spinning invoke is cancelled by the teardown. */
  ha_send_invoke(&c, 1, vm, "spin", NULL);
  sleep_ms(200);
  assert_int_equal(agent_sessions(&obs), before + 1);
  hw_close(&c);
  uint32_t n = 0;
  for (int i = 0; i < 100; i++) {
    n = agent_sessions(&obs);
    if (n == before) break;
    sleep_ms(50);
  }
  assert_int_equal(n, before);
  hw_close(&obs);
}

/* The reaper's check for sessions whose connection vanished leaves live,
 * quiet sessions alone. */
static void test_quiet_live_session_survives(void **state) {
  (void)state;
  hw_conn_t c;
  open_session(&c);
  sleep_ms(2500);
  hw_reply_t r;
  CODE_IS_FREE(ha_stats(&c, &r), 0, &r);
  hw_close(&c);
}

static void test_idle_timeout(void **state) {
  (void)state;
  const char *args[] = {"--idle-timeout", "1", "--device", "cpu", NULL};
  agent_proc_t p;
  assert_int_equal(agent_proc_start(&p, args), 0);
  hw_conn_t c;
  hw_reply_t r;
  assert_int_equal(hw_open(&c, p.url), 0);
  CODE_IS(hw_hello(&c, NULL, &r), 0, &r);
  assert_int_equal(r.rs->hello->limits->idle_timeout_ms, 1000);
  hw_reply_free(&r);
  /* Requests keep it alive... */
  for (int i = 0; i < 8; i++) {
    sleep_ms(250);
    CODE_IS_FREE(ha_stats(&c, &r), 0, &r);
  }
  /* ...silence ends it. */
  sleep_ms(2500);
  CODE_IS_FREE(ha_stats(&c, &r), VM_NOT_FOUND, &r);
  hw_close(&c);
  assert_int_equal(agent_proc_stop(&p), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hello_and_list_devices),
      cmocka_unit_test(test_upload_store_hit),
      cmocka_unit_test(test_store_disk_restart_and_corruption),
      cmocka_unit_test(test_cpu_inline),
      cmocka_unit_test(test_cpu_chunked),
      cmocka_unit_test(test_opencl_inline_and_chunked),
      cmocka_unit_test(test_parallel_chunks_and_reads),
      cmocka_unit_test(test_default_device_and_compiled_mode),
      cmocka_unit_test(test_mlp_on_opencl_matches_reference),
      cmocka_unit_test(test_save_function_time_evaluate_profile),
      cmocka_unit_test(test_cancel_from_second_context),
      cmocka_unit_test(test_deadline),
      cmocka_unit_test(test_free_executable_keeps_vm_and_goodbye),
      cmocka_unit_test(test_disconnect_tears_down),
      cmocka_unit_test(test_quiet_live_session_survives),
      cmocka_unit_test(test_idle_timeout),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
