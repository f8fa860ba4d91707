/* The fused Run operation (protocol 1.1) against a real vmagent process,
 * driven with the raw helper_wire client: a run by store hash with the
 * inputs and the small outputs inline, a store miss (nothing done), a
 * second run of the same VM with new inputs and its output left on the
 * agent, every error with its exact message (a failed Run frees the VM it
 * made), the sequence of a protocol 1.0 client, and libvmclient's vmc_run
 * in one request with the agent's request counter. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_proc.h"
#include "helper_agent.h"
#include "helper_wire.h"
#include "test_util.h"
#include "vmrpc/file.h"
#include "vmrpc/vmclient.h"

#define CHUNK 4096

static agent_proc_t g_agent;
static uint8_t *g_prog;
static size_t g_prog_len;
static uint8_t g_sha[32];
static const float k_x[3] = {1.5f, -2.0f, 4.25f};

static int setup(void **state) {
  (void)state;
  const char *args[] = {"--chunk-size", "4K", "--workers", "4", NULL};
  if (agent_proc_start(&g_agent, args) != 0) return -1;
  if (ha_exec_bytes(ha_test_program, &g_prog, &g_prog_len) != 0) return -1;
  vm_sha256(g_prog, g_prog_len, g_sha);
  /* Into the store once: every test runs it by hash. */
  hw_conn_t c;
  ha_open_session(&c, g_agent.url);
  ha_upload_ok(&c, g_prog, g_prog_len, CHUNK);
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

/* A Run request and the storage it points into. */
typedef struct run_req {
  Vmrpc__Request rq;
  Vmrpc__RunRequest run;
  Vmrpc__DeviceSpec dev;
  Vmrpc__DeviceSpec *devp;
  Vmrpc__Value in;
  Vmrpc__Value *inp;
  Vmrpc__TensorMeta meta;
  int64_t shape;
} run_req_t;

/* Run of func by hash on cpu with x (3 float32) inline, or of vm_id. */
static void run_init(run_req_t *q, uint64_t vm_id, const char *func, uint64_t inline_bytes) {
  memset(q, 0, sizeof(*q));
  vmrpc__request__init(&q->rq);
  vmrpc__run_request__init(&q->run);
  q->rq.op_case = VMRPC__REQUEST__OP_RUN;
  q->rq.run = &q->run;
  q->run.func = (char *)func;
  q->run.inline_bytes = inline_bytes;
  if (vm_id) {
    q->run.vm_id = vm_id;
  } else {
    q->run.sha256.data = g_sha;
    q->run.sha256.len = 32;
    q->run.size = g_prog_len;
    vmrpc__device_spec__init(&q->dev);
    q->dev.selector = "cpu";
    q->devp = &q->dev;
    q->run.n_devices = 1;
    q->run.devices = &q->devp;
  }
  vmrpc__tensor_meta__init(&q->meta);
  q->meta.dtype = "float32";
  q->shape = 3;
  q->meta.n_shape = 1;
  q->meta.shape = &q->shape;
  q->meta.nbytes = sizeof(k_x);
  vmrpc__value__init(&q->in);
  q->in.kind_case = VMRPC__VALUE__KIND_TENSOR;
  q->in.tensor = &q->meta;
  q->inp = &q->in;
  q->run.n_inputs = 1;
  q->run.inputs = &q->inp;
}

static uint32_t session_vms(hw_conn_t *c) {
  hw_reply_t r;
  CODE_IS(ha_stats(c, &r), 0, &r);
  uint32_t n = r.rs->stats->session_vms;
  hw_reply_free(&r);
  return n;
}

static void expect_msg(const hw_reply_t *r, const char *want) {
  if (strcmp(hw_message(r), want) != 0)
    fail_msg("message\n  got:  %s\n  want: %s", hw_message(r), want);
}

static void test_run_by_hash_inline(void **state) {
  (void)state;
  hw_conn_t c;
  ha_open_session(&c, g_agent.url);
  run_req_t q;
  run_init(&q, 0, "main", 1 << 20);
  hw_reply_t r;
  CALL_CODE_IS(&c, &q.rq, k_x, sizeof(k_x), 0, &r);
  const Vmrpc__RunResponse *rr = r.rs->run;
  assert_non_null(rr);
  assert_true(rr->present);
  assert_true(rr->vm_id != 0);
  assert_true(rr->exec_id != 0);
  /* main returns (x, shape_of(x)): both leaves, the tensor inline. */
  assert_int_equal(rr->n_outputs, 2);
  assert_int_equal(rr->outputs[0]->n_path, 1);
  assert_int_equal(rr->outputs[0]->path[0], 0);
  assert_int_equal(rr->outputs[0]->value->kind_case, VMRPC__VALUE__KIND_TENSOR);
  assert_string_equal(rr->outputs[0]->value->tensor->dtype, "float32");
  assert_true(rr->outputs[0]->data_inline);
  assert_int_equal(rr->outputs[1]->path[0], 1);
  assert_int_equal(rr->outputs[1]->value->kind_case, VMRPC__VALUE__KIND_SHAPE);
  assert_int_equal(rr->outputs[1]->value->shape->dims[0], 3);
  assert_int_equal(r.payload_len, sizeof(k_x));
  assert_memory_equal(r.payload, k_x, sizeof(k_x));
  uint64_t exec = rr->exec_id;
  hw_reply_free(&r);
  /* A second run by hash reuses the session's executable handle. */
  CALL_CODE_IS(&c, &q.rq, k_x, sizeof(k_x), 0, &r);
  assert_int_equal(r.rs->run->exec_id, exec);
  hw_reply_free(&r);
  assert_int_equal(session_vms(&c), 2);
  hw_close(&c);
}

static void test_run_store_miss(void **state) {
  (void)state;
  hw_conn_t c;
  ha_open_session(&c, g_agent.url);
  run_req_t q;
  run_init(&q, 0, "main", 0);
  uint8_t other[32];
  memset(other, 0x5a, sizeof(other));
  q.run.sha256.data = other;
  hw_reply_t r;
  CALL_CODE_IS(&c, &q.rq, k_x, sizeof(k_x), 0, &r);
  assert_false(r.rs->run->present);
  assert_int_equal(r.rs->run->vm_id, 0);
  assert_int_equal(r.payload_len, 0);
  hw_reply_free(&r);
  CODE_IS(ha_stats(&c, &r), 0, &r);
  assert_int_equal(r.rs->stats->session_vms, 0);
  assert_int_equal(r.rs->stats->session_executables, 0);
  hw_reply_free(&r);
  hw_close(&c);
}

static void test_run_again_output_remote(void **state) {
  (void)state;
  hw_conn_t c;
  ha_open_session(&c, g_agent.url);
  run_req_t q;
  run_init(&q, 0, "ident", 1 << 20);
  hw_reply_t r;
  CALL_CODE_IS(&c, &q.rq, k_x, sizeof(k_x), 0, &r);
  uint64_t vm = r.rs->run->vm_id;
  hw_reply_free(&r);
  /* The same VM with new inputs, nothing inline: the tensor is described
   * and stays on the agent for GetOutput. */
  const float y[3] = {7.0f, 8.0f, 9.0f};
  run_init(&q, vm, "ident", 0);
  CALL_CODE_IS(&c, &q.rq, y, sizeof(y), 0, &r);
  assert_int_equal(r.rs->run->vm_id, vm);
  assert_int_equal(r.rs->run->n_outputs, 1);
  assert_int_equal(r.rs->run->outputs[0]->n_path, 0);
  assert_false(r.rs->run->outputs[0]->data_inline);
  assert_int_equal(r.rs->run->outputs[0]->value->tensor->nbytes, sizeof(y));
  assert_int_equal(r.payload_len, 0);
  hw_reply_free(&r);
  uint8_t *data;
  size_t len;
  int chunks;
  CODE_IS(ha_fetch_output(&c, vm, "ident", NULL, 0, &data, &len, &chunks), 0, NULL);
  assert_int_equal(len, sizeof(y));
  assert_memory_equal(data, y, sizeof(y));
  free(data);
  /* No inputs: the VM keeps the ones it has. */
  run_init(&q, vm, "ident", 64);
  q.run.n_inputs = 0;
  CALL_CODE_IS(&c, &q.rq, NULL, 0, 0, &r);
  assert_int_equal(r.payload_len, sizeof(y));
  assert_memory_equal(r.payload, y, sizeof(y));
  hw_reply_free(&r);
  hw_close(&c);
}

static void test_run_errors(void **state) {
  (void)state;
  hw_conn_t c;
  ha_open_session(&c, g_agent.url);
  run_req_t q;
  hw_reply_t r;
  char want[256];

  run_init(&q, 0, "main", 0);
  q.run.vm_id = 42;
  CALL_CODE_IS(&c, &q.rq, k_x, sizeof(k_x), VM_INVALID_ARGUMENT, &r);
  expect_msg(&r,
             "Run names vm 42 and also an executable, devices or exec_mode: a VM already has "
             "them; give vm_id alone, or no vm_id");
  hw_reply_free(&r);

  run_init(&q, 0, "main", 0);
  q.run.sha256.len = 0;
  CALL_CODE_IS(&c, &q.rq, k_x, sizeof(k_x), VM_INVALID_ARGUMENT, &r);
  expect_msg(&r, "Run needs exactly one of sha256 (with size), exec_id or vm_id");
  hw_reply_free(&r);

  run_init(&q, 0, "main", 0);
  q.run.sha256.len = 31;
  CALL_CODE_IS(&c, &q.rq, k_x, sizeof(k_x), VM_INVALID_ARGUMENT, &r);
  expect_msg(&r, "sha256 must be 32 bytes, got 31");
  hw_reply_free(&r);

  run_init(&q, 0, "", 0);
  CALL_CODE_IS(&c, &q.rq, k_x, sizeof(k_x), VM_INVALID_ARGUMENT, &r);
  expect_msg(&r, "func is empty");
  hw_reply_free(&r);

  /* The payload must be exactly the inline tensors' bytes. */
  run_init(&q, 0, "main", 0);
  uint8_t more[16] = {0};
  CALL_CODE_IS(&c, &q.rq, more, sizeof(more), VM_INVALID_ARGUMENT, &r);
  expect_msg(&r, "the inputs' inline tensors need 12 payload bytes but 16 were sent");
  hw_reply_free(&r);
  CALL_CODE_IS(&c, &q.rq, more, 8, VM_INVALID_ARGUMENT, &r);
  expect_msg(&r,
             "input 0: a tensor of 12 bytes, but only 8 payload bytes are left; send larger "
             "tensors with TensorBegin/TensorChunk and a tensor_ref");
  hw_reply_free(&r);

  /* A step's own error, prefixed with the step; the VM it made is gone. */
  run_init(&q, 0, "main", 0);
  q.run.sha256.len = 0;
  q.run.size = 0;
  q.run.exec_id = 999;
  CALL_CODE_IS(&c, &q.rq, k_x, sizeof(k_x), VM_NOT_FOUND, &r);
  expect_msg(&r, "Run: creating the VM: executable 999 not found in this session");
  hw_reply_free(&r);

  run_init(&q, 0, "main", 0);
  q.meta.dtype = "int32";
  CALL_CODE_IS(&c, &q.rq, k_x, sizeof(k_x), VM_INVALID_ARGUMENT, &r);
  snprintf(want, sizeof(want), "Run: input 0: ");
  if (strncmp(hw_message(&r), want, strlen(want)) != 0)
    fail_msg("message '%s' does not start with '%s'", hw_message(&r), want);
  hw_reply_free(&r);

  run_init(&q, 0, "nosuch", 0);
  CALL_CODE_IS(&c, &q.rq, k_x, sizeof(k_x), VM_NOT_FOUND, &r);
  snprintf(want, sizeof(want), "Run: input 0: ");
  if (strncmp(hw_message(&r), want, strlen(want)) != 0)
    fail_msg("message '%s' does not start with '%s'", hw_message(&r), want);
  hw_reply_free(&r);
  assert_int_equal(session_vms(&c), 0);

  run_init(&q, 777, "main", 0);
  CALL_CODE_IS(&c, &q.rq, k_x, sizeof(k_x), VM_NOT_FOUND, &r);
  expect_msg(&r, "Run: input 0: vm 777 not found in this session");
  hw_reply_free(&r);
  hw_close(&c);
}

/* The stateful sequence of a protocol 1.0 client (hw_hello says 1.0)
 * still works on this agent. */
static void test_protocol_1_0_sequence(void **state) {
  (void)state;
  hw_conn_t c;
  ha_open_session(&c, g_agent.url);
  uint64_t exec = ha_upload_ok(&c, g_prog, g_prog_len, CHUNK);
  uint64_t vm = ha_create_vm_ok(&c, exec, "cpu", "pooled", "bytecode");
  hw_reply_t r;
  const int64_t shape = 3;
  CODE_IS_FREE(ha_set_input_tensor(&c, vm, "ident", 0, NULL, "float32", &shape, 1, sizeof(k_x), k_x,
                                   sizeof(k_x), &r),
               0, &r);
  CODE_IS_FREE(ha_invoke(&c, vm, "ident", 0, &r), 0, &r);
  int64_t arity = 0;
  CODE_IS_FREE(ha_get_arity(&c, vm, "ident", NULL, 0, &arity, &r), 0, &r);
  assert_int_equal(arity, -1);
  uint8_t *data;
  size_t len;
  int chunks;
  CODE_IS(ha_fetch_output(&c, vm, "ident", NULL, 0, &data, &len, &chunks), 0, NULL);
  assert_memory_equal(data, k_x, sizeof(k_x));
  free(data);
  CODE_IS_FREE(ha_goodbye(&c, &r), 0, &r);
  hw_close(&c);
}

static uint64_t agent_requests(void) {
  hw_conn_t c;
  ha_open_session(&c, g_agent.url);
  hw_reply_t r;
  CODE_IS(ha_stats(&c, &r), 0, &r);
  uint64_t n = r.rs->stats->requests;
  hw_reply_free(&r);
  CODE_IS_FREE(ha_goodbye(&c, &r), 0, &r);
  hw_close(&c);
  return n;
}

/* libvmclient: connect, run a stored executable, close: three requests
 * (Hello, Run, Goodbye) by the agent's own counter. */
static void test_vmc_run_request_count(void **state) {
  (void)state;
  uint64_t before = agent_requests(); /* counts its Hello and Stats */
  vmc_conn_t *conn;
  ASSERT_OK(vmc_connect(g_agent.url, NULL, &conn));
  vmc_value_t in;
  memset(&in, 0, sizeof(in));
  in.kind = VMC_VALUE_TENSOR;
  ASSERT_OK(vmc_tensor_wrap(VM_F32, 1, (const int64_t[]){3}, (void *)k_x, &in.tensor));
  vmc_run_opts_t o;
  memset(&o, 0, sizeof(o));
  o.func = "main";
  vmc_run_result_t res;
  ASSERT_OK(vmc_run(conn, g_prog, g_prog_len, (vmc_vm_t){0}, &in, 1, &o, &res));
  assert_int_equal(res.requests, 1);
  assert_true(res.upload.store_hit);
  assert_int_equal(res.num_outputs, 2);
  assert_int_equal(res.outputs[0].value.kind, VMC_VALUE_TENSOR);
  assert_memory_equal(res.outputs[0].value.tensor.data, k_x, sizeof(k_x));
  assert_int_equal(res.outputs[1].value.kind, VMC_VALUE_SHAPE);
  /* Again on the same VM: one request. */
  vmc_vm_t vm = res.vm;
  vmc_run_result_free(&res);
  ASSERT_OK(vmc_run(conn, NULL, 0, vm, &in, 1, &o, &res));
  assert_int_equal(res.requests, 1);
  vmc_run_result_free(&res);
  vmc_close(conn);
  uint64_t after = agent_requests();
  /* before's Goodbye, then Hello + 2 Run + Goodbye, then after's Hello
   * and Stats. */
  assert_int_equal(after - before, 1 + 4 + 2);
}

/* Inputs larger than a chunk (4 KiB here) are transferred before the Run
 * (which then needs the VM first); outputs past the inline budget are
 * fetched afterwards, the chunks of both outputs in one pipeline. */
static void test_vmc_run_large_inputs_and_outputs(void **state) {
  (void)state;
  vmc_conn_t *conn;
  ASSERT_OK(vmc_connect(g_agent.url, NULL, &conn));
  enum { N = 3000 }; /* 12,000 bytes: 3 chunks */
  float *a = malloc(N * sizeof(float)), *b = malloc(N * sizeof(float));
  assert_non_null(a);
  assert_non_null(b);
  for (int i = 0; i < N; i++) {
    a[i] = (float)i * 0.5f;
    b[i] = -(float)i;
  }
  vmc_value_t in[2];
  memset(in, 0, sizeof(in));
  in[0].kind = in[1].kind = VMC_VALUE_TENSOR;
  ASSERT_OK(vmc_tensor_wrap(VM_F32, 1, (const int64_t[]){N}, a, &in[0].tensor));
  ASSERT_OK(vmc_tensor_wrap(VM_F32, 1, (const int64_t[]){N}, b, &in[1].tensor));
  vmc_run_opts_t o;
  memset(&o, 0, sizeof(o));
  o.func = "pair";
  vmc_run_result_t res;
  ASSERT_OK(vmc_run(conn, g_prog, g_prog_len, (vmc_vm_t){0}, in, 2, &o, &res));
  assert_int_equal(res.num_outputs, 2);
  for (int k = 0; k < 2; k++) {
    assert_int_equal(res.outputs[k].path_len, 1);
    assert_int_equal(res.outputs[k].path[0], k);
    assert_false(res.outputs[k].remote);
    assert_int_equal(res.outputs[k].value.tensor.nbytes, N * sizeof(float));
    assert_memory_equal(res.outputs[k].value.tensor.data, k ? b : a, N * sizeof(float));
  }
  /* UploadBegin (a store hit), CreateVM, per input TensorBegin + 3
   * chunks, Run, then 3 GetOutput chunks per output. */
  assert_int_equal(res.requests, 1 + 1 + 2 * (1 + 3) + 1 + 2 * 3);
  vmc_run_result_free(&res);
  /* keep_remote: the metas only. */
  o.keep_remote = 1;
  ASSERT_OK(vmc_run(conn, g_prog, g_prog_len, (vmc_vm_t){0}, in, 2, &o, &res));
  assert_true(res.outputs[0].remote && res.outputs[1].remote);
  assert_null(res.outputs[0].value.tensor.data);
  vmc_run_result_free(&res);
  vmc_close(conn);
  free(a);
  free(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_run_by_hash_inline),
      cmocka_unit_test(test_run_store_miss),
      cmocka_unit_test(test_run_again_output_remote),
      cmocka_unit_test(test_run_errors),
      cmocka_unit_test(test_protocol_1_0_sequence),
      cmocka_unit_test(test_vmc_run_request_count),
      cmocka_unit_test(test_vmc_run_large_inputs_and_outputs),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
