/* Hostile and wrong inputs against a live vmagent: each gets its exact
 * status code (R1..R13 of docs/protocol.md) and the agent keeps serving —
 * every case ends with a successful Ping. Also: tokens, protocol versions,
 * --max-sessions and --session-mem-limit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent_proc.h"
#include "helper_agent.h"
#include "helper_wire.h"
#include "test_util.h"
#include "vm/executable.h"
#include "vmproto/wire.h"

#define CHUNK 4096

static agent_proc_t g_agent;
static uint8_t *g_prog;
static size_t g_prog_len;

/* Asserts the message contains sub, then frees the reply. */
static void expect_msg(hw_reply_t *r, const char *sub) {
  if (!strstr(hw_message(r), sub)) fail_msg("message '%s' lacks '%s'", hw_message(r), sub);
  hw_reply_free(r);
}

static int setup(void **state) {
  (void)state;
  const char *args[] = {"--chunk-size", "4K", "--max-executable", "1M", "--device", "cpu", NULL};
  if (agent_proc_start(&g_agent, args) != 0) return -1;
  return ha_exec_bytes(ha_test_program, &g_prog, &g_prog_len);
}

static int teardown(void **state) {
  (void)state;
  free(g_prog);
  return agent_proc_stop(&g_agent) == 0 ? 0 : -1;
}

/* The agent still serves: on this connection and on a new one. */
static void ping_ok(hw_conn_t *c) {
  hw_reply_t r;
  uint64_t saved = c->session;
  c->session = 0;
  CODE_IS_FREE(ha_ping(c, &r), 0, &r);
  c->session = saved;
  assert_int_equal(ha_ping_fresh(g_agent.url), 0);
}

static uint64_t setup_vm(hw_conn_t *c) {
  return ha_create_vm_ok(c, ha_upload_ok(c, g_prog, g_prog_len, CHUNK), "cpu", NULL, NULL);
}

/* ------------------------------------------------------------ framing */

/* On a connection that said Hello (before it, the first refusal is the
 * last answer: test_pre_hello_cap). */
static void test_garbage_bodies(void **state) {
  (void)state;
  hw_conn_t c;
  ha_open_session(&c, g_agent.url);
  hw_reply_t r;
  /* Shorter than the frame header. */
  CODE_IS(hw_call_raw(&c, "ab", 2, &r) ? -1 : hw_code(&r), VM_INVALID_ARGUMENT, &r);
  assert_int_equal(r.rs->id, 0);
  expect_msg(&r, "frame header");
  ping_ok(&c);
  /* Empty body. */
  CODE_IS(hw_call_raw(&c, "", 0, &r) ? -1 : hw_code(&r), VM_INVALID_ARGUMENT, &r);
  expect_msg(&r, "malformed");
  ping_ok(&c);
  /* Text: its first four bytes read as a huge envelope length. */
  const char *text = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  CODE_IS(hw_call_raw(&c, text, strlen(text), &r) ? -1 : hw_code(&r), VM_INVALID_ARGUMENT, &r);
  expect_msg(&r, "exceeds the limit");
  ping_ok(&c);
  /* Envelope length past the body. */
  uint8_t past[10] = {100, 0, 0, 0, 8, 1};
  CODE_IS(hw_call_raw(&c, past, sizeof(past), &r) ? -1 : hw_code(&r), VM_INVALID_ARGUMENT, &r);
  expect_msg(&r, "only 6 bytes follow");
  ping_ok(&c);
  /* An envelope that is not protobuf. */
  uint8_t junk[9] = {5, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff};
  CODE_IS(hw_call_raw(&c, junk, sizeof(junk), &r) ? -1 : hw_code(&r), VM_INVALID_ARGUMENT, &r);
  expect_msg(&r, "malformed request");
  ping_ok(&c);
  /* Random bytes of every length up to 64: always a reply, never a crash. */
  uint32_t seed = 12345;
  for (size_t len = 0; len < 64; len++) {
    uint8_t buf[64];
    for (size_t i = 0; i < len; i++) {
      seed = seed * 1103515245u + 12345u;
      buf[i] = (uint8_t)(seed >> 16);
    }
    if (len >= 4) { /* keep the envelope length plausible half of the time */
      if (len % 2) {
        buf[0] = (uint8_t)(len - 4);
        buf[1] = buf[2] = buf[3] = 0;
      }
    }
    assert_int_equal(hw_call_raw(&c, buf, len, &r), 0);
    assert_non_null(r.rs);
    assert_true(hw_code(&r) != 0);
    hw_reply_free(&r);
  }
  ping_ok(&c);
  hw_close(&c);
}

static void test_truncated_frame(void **state) {
  (void)state;
  hw_conn_t c;
  ha_open_session(&c, g_agent.url);
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__InvokeRequest q = VMRPC__INVOKE_REQUEST__INIT;
  q.vm_id = 1;
  q.func = (char *)"main_function_name";
  rq.id = 77;
  rq.session = c.session;
  rq.op_case = VMRPC__REQUEST__OP_INVOKE;
  rq.invoke = &q;
  size_t n = vmp_frame_size(&rq.base);
  uint8_t *buf = malloc(n);
  vmp_frame_write(&rq.base, buf);
  hw_reply_t r;
  /* Header claims the full envelope, bytes cut short. */
  CODE_IS(hw_call_raw(&c, buf, n - 5, &r) ? -1 : hw_code(&r), VM_INVALID_ARGUMENT, &r);
  expect_msg(&r, "bytes follow");
  /* Header adjusted to the cut: protobuf-c refuses the envelope. */
  size_t cut = n - 4 - 5;
  buf[0] = (uint8_t)cut;
  buf[1] = (uint8_t)(cut >> 8);
  CODE_IS(hw_call_raw(&c, buf, n - 5, &r) ? -1 : hw_code(&r), VM_INVALID_ARGUMENT, &r);
  expect_msg(&r, "malformed request");
  free(buf);
  ping_ok(&c);
  hw_close(&c);
}

static void test_oversized_message_is_dropped(void **state) {
  (void)state;
  hw_conn_t c;
  ha_open_session(&c, g_agent.url);
  /* max message = 4K + 64K: nng refuses it before the agent sees it and
   * closes the connection (with its sessions); no reply comes. */
  size_t n = 200 * 1024;
  uint8_t *big = calloc(1, n);
  hw_reply_t r;
  assert_int_equal(hw_send_raw(&c, 0, big, n), 0);
  int rv = hw_recv(&c, 0, &r, 1500);
  assert_int_not_equal(rv, 0);
  free(big);
  hw_close(&c);
  assert_int_equal(ha_ping_fresh(g_agent.url), 0);
  /* A message right at the limit is served. */
  ha_open_session(&c, g_agent.url);
  uint64_t vm = setup_vm(&c);
  int64_t shape[1] = {16 * 1024}; /* 64 KiB of float32: inline, > chunk */
  size_t bytes = 64 * 1024;
  uint8_t *x = calloc(1, bytes);
  CODE_IS_FREE(
      ha_set_input_tensor(&c, vm, "main", 0, NULL, "float32", shape, 1, bytes, x, bytes, &r), 0,
      &r);
  free(x);
  ping_ok(&c);
  hw_close(&c);
}

/* Before Hello a connection gets 8 KiB messages, not --max-message: a
 * larger one is refused undecoded (a 9 KiB Hello used to make a session).
 * That refusal is the connection's last answer (docs/protocol.md R3): a
 * Hello there gets none; on a new connection it works, and after it the
 * full size is taken. */
static void test_pre_hello_cap(void **state) {
  (void)state;
  hw_conn_t c;
  assert_int_equal(hw_open(&c, g_agent.url), 0);
  char *name = malloc(9 * 1024 + 1);
  memset(name, 'n', 9 * 1024);
  name[9 * 1024] = '\0';
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__HelloRequest h = VMRPC__HELLO_REQUEST__INIT;
  h.protocol_major = 1;
  h.client_name = name;
  h.token = (char *)"";
  rq.id = 5;
  rq.op_case = VMRPC__REQUEST__OP_HELLO;
  rq.hello = &h;
  hw_reply_t r;
  CALL_CODE_IS(&c, &rq, NULL, 0, VM_FAILED_PRECONDITION, &r);
  assert_int_equal(r.rs->id, 0); /* not decoded: the id is unknown */
  expect_msg(&r,
             "until Hello succeeds the agent takes messages of at most 8192 bytes; send "
             "Hello first");
  hw_reply_free(&r);
  /* Nothing more is answered there, a Hello that fits included. */
  h.client_name = (char *)"small";
  assert_int_equal(hw_send(&c, 0, &rq, NULL, 0), 0);
  assert_int_not_equal(hw_recv(&c, 0, &r, 1000), 0);
  hw_close(&c);
  /* A garbage body of the same size: the same answer, not a decode error. */
  assert_int_equal(hw_open(&c, g_agent.url), 0);
  uint8_t *junk = malloc(9 * 1024);
  memset(junk, 0xff, 9 * 1024);
  CODE_IS(hw_call_raw(&c, junk, 9 * 1024, &r) ? -1 : hw_code(&r), VM_FAILED_PRECONDITION, &r);
  expect_msg(&r, "a 9216-byte message on a connection without a session");
  hw_reply_free(&r);
  hw_close(&c);
  /* A Hello that fits makes a session; then 9 KiB messages are served. */
  assert_int_equal(hw_open(&c, g_agent.url), 0);
  CALL_CODE_IS(&c, &rq, NULL, 0, 0, &r);
  c.session = r.rs->hello->session;
  hw_reply_free(&r);
  h.client_name = name;
  CALL_CODE_IS(&c, &rq, NULL, 0, 0, &r);
  hw_reply_free(&r);
  CODE_IS(hw_call_raw(&c, junk, 9 * 1024, &r) ? -1 : hw_code(&r), VM_INVALID_ARGUMENT, &r);
  expect_msg(&r, "exceeds the limit");
  free(junk);
  free(name);
  ping_ok(&c);
  hw_close(&c);
}

static void test_unknown_and_empty_operation(void **state) {
  (void)state;
  hw_conn_t c;
  ha_open_session(&c, g_agent.url);
  hw_reply_t r;
  /* Request{id = 7, field 99 = ""}: an operation from a newer protocol. */
  uint8_t unk[] = {5, 0, 0, 0, 0x08, 0x07, 0x9a, 0x06, 0x00};
  CODE_IS(hw_call_raw(&c, unk, sizeof(unk), &r) ? -1 : hw_code(&r), VM_UNIMPLEMENTED, &r);
  assert_int_equal(r.rs->id, 7);
  expect_msg(&r, "operation 99 is not implemented by this agent");
  /* Request{id = 8} with no operation. */
  uint8_t empty[] = {2, 0, 0, 0, 0x08, 0x08};
  CODE_IS(hw_call_raw(&c, empty, sizeof(empty), &r) ? -1 : hw_code(&r), VM_UNIMPLEMENTED, &r);
  assert_int_equal(r.rs->id, 8);
  expect_msg(&r, "operation 0 is not implemented");
  ping_ok(&c);
  hw_close(&c);
}

static void test_unexpected_payload(void **state) {
  (void)state;
  hw_conn_t c;
  assert_int_equal(hw_open(&c, g_agent.url), 0);
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__PingRequest q = VMRPC__PING_REQUEST__INIT;
  rq.op_case = VMRPC__REQUEST__OP_PING;
  rq.ping = &q;
  hw_reply_t r;
  CALL_CODE_IS(&c, &rq, "xyz", 3, VM_INVALID_ARGUMENT, &r);
  expect_msg(&r, "carries no payload");
  ping_ok(&c);
  hw_close(&c);
}

/* ------------------------------------------------------------ sessions */

static void test_sessions_and_handles(void **state) {
  (void)state;
  hw_conn_t a, b;
  assert_int_equal(hw_open(&a, g_agent.url), 0);
  hw_reply_t r;
  /* No session yet (a refusal before Hello is that connection's last
   * answer: Hello on a new one). */
  CODE_IS(ha_list_devices(&a, &r), VM_FAILED_PRECONDITION, &r);
  expect_msg(&r, "no session: send Hello first");
  hw_close(&a);
  assert_int_equal(hw_open(&a, g_agent.url), 0);
  CODE_IS_FREE(hw_hello(&a, NULL, &r), 0, &r);
  ha_open_session(&b, g_agent.url);
  uint64_t vm_a = setup_vm(&a);
  /* A's session id on B's connection looks exactly like an unknown id. */
  uint64_t b_session = b.session;
  b.session = a.session;
  CODE_IS(ha_stats(&b, &r), VM_NOT_FOUND, &r);
  char msg1[512];
  snprintf(msg1, sizeof(msg1), "%s", hw_message(&r));
  expect_msg(&r, "not found");
  b.session = a.session ^ 0x5555;
  CODE_IS(ha_stats(&b, &r), VM_NOT_FOUND, &r);
  assert_int_equal(strlen(hw_message(&r)), strlen(msg1));
  hw_reply_free(&r);
  b.session = b_session;
  /* A's VM from B's session. */
  CODE_IS(ha_invoke(&b, vm_a, "main", 0, &r), VM_NOT_FOUND, &r);
  char want[64];
  snprintf(want, sizeof(want), "vm %llu not found in this session", (unsigned long long)vm_a);
  expect_msg(&r, want);
  /* Stale handle: freed VM. */
  CODE_IS_FREE(ha_free_vm(&a, vm_a, &r), 0, &r);
  CODE_IS(ha_set_input_int(&a, vm_a, "ident", 0, 1, &r), VM_NOT_FOUND, &r);
  expect_msg(&r, want);
  CODE_IS_FREE(ha_free_vm(&a, vm_a, &r), VM_NOT_FOUND, &r);
  CODE_IS_FREE(ha_cancel(&a, 0, vm_a, &r), VM_NOT_FOUND, &r);
  /* Ids are never reused: a new VM gets a new id. */
  uint64_t vm2 = setup_vm(&a);
  assert_true(vm2 > vm_a);
  CODE_IS(ha_free_exec(&a, 999999, &r), VM_NOT_FOUND, &r);
  expect_msg(&r, "executable 999999 not found in this session");
  ping_ok(&a);
  hw_close(&a);
  hw_close(&b);
}

static void test_version_and_token_free_hello(void **state) {
  (void)state;
  hw_conn_t c;
  assert_int_equal(hw_open(&c, g_agent.url), 0);
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__HelloRequest h = VMRPC__HELLO_REQUEST__INIT;
  h.protocol_major = 2;
  h.protocol_minor = 3;
  rq.op_case = VMRPC__REQUEST__OP_HELLO;
  rq.hello = &h;
  hw_reply_t r;
  CALL_CODE_IS(&c, &rq, NULL, 0, VM_FAILED_PRECONDITION, &r);
  char want[160];
  snprintf(want, sizeof(want),
           "protocol version 2.3 is not supported by this agent (%d.%d); use a vmclient of "
           "the same major version",
           VMRPC_PROTOCOL_MAJOR, VMRPC_PROTOCOL_MINOR);
  expect_msg(&r, want);
  /* A newer minor is fine. */
  h.protocol_major = 1;
  h.protocol_minor = 9;
  rq.id = 0;
  CALL_CODE_IS(&c, &rq, NULL, 0, 0, &r);
  hw_reply_free(&r);
  /* A token sent to an agent without one is ignored. */
  CODE_IS_FREE(hw_hello(&c, "anything", &r), 0, &r);
  ping_ok(&c);
  hw_close(&c);
}

/* ------------------------------------------------------------ values */

static void test_tensor_mismatches(void **state) {
  (void)state;
  hw_conn_t c;
  ha_open_session(&c, g_agent.url);
  uint64_t vm = setup_vm(&c);
  hw_reply_t r;
  int32_t xi[4] = {1, 2, 3, 4};
  float xf[4] = {1, 2, 3, 4};
  int64_t s1[1] = {4}, s2[2] = {2, 2};
  /* main(x: float32[?]): an int32 tensor is refused by the param type. */
  CODE_IS(ha_set_input_tensor(&c, vm, "main", 0, NULL, "int32", s1, 1, 16, xi, 16, &r),
          VM_INVALID_ARGUMENT, &r);
  expect_msg(&r, "int32");
  /* Wrong rank. */
  CODE_IS_FREE(ha_set_input_tensor(&c, vm, "main", 0, NULL, "float32", s2, 2, 16, xf, 16, &r),
               VM_INVALID_ARGUMENT, &r);
  /* nbytes that does not match shape x dtype. */
  CODE_IS(ha_set_input_tensor(&c, vm, "main", 0, NULL, "float32", s1, 1, 12, xf, 12, &r),
          VM_INVALID_ARGUMENT, &r);
  expect_msg(&r, "claims 12 bytes");
  /* Payload shorter / longer than nbytes. */
  CODE_IS_FREE(ha_set_input_tensor(&c, vm, "main", 0, NULL, "float32", s1, 1, 16, xf, 8, &r),
               VM_INVALID_ARGUMENT, &r);
  uint8_t more[20] = {0};
  CODE_IS_FREE(ha_set_input_tensor(&c, vm, "main", 0, NULL, "float32", s1, 1, 16, more, 20, &r),
               VM_INVALID_ARGUMENT, &r);
  /* Unknown dtype, negative dim, too many dims. */
  CODE_IS(ha_set_input_tensor(&c, vm, "main", 0, NULL, "float33", s1, 1, 16, xf, 16, &r),
          VM_INVALID_ARGUMENT, &r);
  expect_msg(&r, "unknown dtype");
  int64_t neg[1] = {-4};
  CODE_IS_FREE(ha_set_input_tensor(&c, vm, "main", 0, NULL, "float32", neg, 1, 16, xf, 16, &r),
               VM_INVALID_ARGUMENT, &r);
  int64_t many[17] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  CODE_IS_FREE(ha_set_input_tensor(&c, vm, "main", 0, NULL, "float32", many, 17, 4, xf, 4, &r),
               VM_INVALID_ARGUMENT, &r);
  /* Overflowing shape: checked before anything is allocated. */
  int64_t huge[2] = {INT64_C(1) << 40, INT64_C(1) << 40};
  CODE_IS_FREE(ha_tensor_begin(&c, vm, "float32", huge, 2, 0, &(uint64_t){0}, &r),
               VM_INVALID_ARGUMENT, &r);
  /* A size that does not overflow but no device holds: the device says so
   * (before, a chunk bitmap of nbytes / chunk bits was sized from it). */
  int64_t vast[1] = {INT64_C(1) << 59};
  CODE_IS(ha_tensor_begin(&c, vm, "float32", vast, 1, UINT64_C(1) << 61, &(uint64_t){0}, &r),
          VM_RESOURCE_EXHAUSTED, &r);
  expect_msg(&r,
             "cpu device out of memory: 2305843009213693952 bytes requested, more than the host");
  /* Unknown function and parameter, index out of range. */
  CODE_IS_FREE(ha_set_input_tensor(&c, vm, "nope", 0, NULL, "float32", s1, 1, 16, xf, 16, &r),
               VM_NOT_FOUND, &r);
  CODE_IS_FREE(ha_set_input_tensor(&c, vm, "main", -1, "y", "float32", s1, 1, 16, xf, 16, &r),
               VM_NOT_FOUND, &r);
  CODE_IS_FREE(ha_set_input_int(&c, vm, "ident", 5, 1, &r), VM_OUT_OF_RANGE, &r);
  /* Neither index nor name. */
  CODE_IS_FREE(ha_set_input_tensor(&c, vm, "main", -1, NULL, "float32", s1, 1, 16, xf, 16, &r),
               VM_INVALID_ARGUMENT, &r);
  /* Empty function name. */
  CODE_IS_FREE(ha_invoke(&c, vm, "", 0, &r), VM_INVALID_ARGUMENT, &r);
  /* Invoke with a missing input; output before any invoke. */
  CODE_IS_FREE(ha_invoke(&c, vm, "main", 0, &r), VM_FAILED_PRECONDITION, &r);
  CODE_IS_FREE(ha_get_output(&c, vm, "main", NULL, 0, 0, 0, &r), VM_NOT_FOUND, &r);
  /* A good input, then out-of-range output reads. */
  CODE_IS_FREE(ha_set_input_tensor(&c, vm, "main", 0, NULL, "float32", s1, 1, 16, xf, 16, &r), 0,
               &r);
  CODE_IS_FREE(ha_invoke(&c, vm, "main", 0, &r), 0, &r);
  uint32_t p0[1] = {0}, p9[1] = {9}, p1[1] = {1};
  CODE_IS_FREE(ha_get_output(&c, vm, "main", p0, 1, 17, 0, &r), VM_OUT_OF_RANGE, &r);
  CODE_IS_FREE(ha_get_output(&c, vm, "main", p9, 1, 0, 0, &r), VM_OUT_OF_RANGE, &r);
  CODE_IS_FREE(ha_get_output(&c, vm, "main", p1, 1, 4, 0, &r), VM_OUT_OF_RANGE, &r);
  ping_ok(&c);
  hw_close(&c);
}

static void test_chunk_rules(void **state) {
  (void)state;
  hw_conn_t c;
  ha_open_session(&c, g_agent.url);
  uint64_t vm = setup_vm(&c);
  hw_reply_t r;
  int64_t shape[1] = {2500}; /* 10000 bytes: chunks 4096, 4096, 1808 */
  uint64_t t = 0;
  uint8_t *data = calloc(1, 10000);
  CODE_IS_FREE(ha_tensor_begin(&c, vm, "float32", shape, 1, 10000, &t, &r), 0, &r);
  CODE_IS(ha_tensor_chunk(&c, t, 5 * CHUNK, data, CHUNK, &r), VM_OUT_OF_RANGE, &r);
  expect_msg(&r, "past the announced size");
  CODE_IS(ha_tensor_chunk(&c, t, 100, data, CHUNK, &r), VM_INVALID_ARGUMENT, &r);
  expect_msg(&r, "not a multiple of the chunk size");
  CODE_IS(ha_tensor_chunk(&c, t, 0, data, 100, &r), VM_INVALID_ARGUMENT, &r);
  expect_msg(&r, "expected 4096");
  CODE_IS_FREE(ha_tensor_chunk(&c, t, 2 * CHUNK, data, CHUNK, &r), VM_OUT_OF_RANGE, &r);
  CODE_IS(ha_tensor_chunk(&c, t, 2 * CHUNK, data, 100, &r), VM_INVALID_ARGUMENT, &r);
  expect_msg(&r, "expected 1808");
  CODE_IS_FREE(ha_tensor_chunk(&c, t, 0, data, CHUNK, &r), 0, &r);
  CODE_IS(ha_tensor_chunk(&c, t, 0, data, CHUNK, &r), VM_ALREADY_EXISTS, &r);
  expect_msg(&r, "already sent");
  CODE_IS(ha_set_input_ref(&c, vm, "main", 0, t, &r), VM_FAILED_PRECONDITION, &r);
  expect_msg(&r, "upload incomplete: 4096 of 10000 bytes received");
  CODE_IS_FREE(ha_tensor_chunk(&c, 987654, 0, data, CHUNK, &r), VM_NOT_FOUND, &r);
  /* Completing it makes it usable; refs to another VM's transfer fail. */
  CODE_IS_FREE(ha_tensor_chunk(&c, t, 2 * CHUNK, data, 1808, &r), 0, &r);
  CODE_IS_FREE(ha_tensor_chunk(&c, t, CHUNK, data, CHUNK, &r), 0, &r);
  uint64_t vm2 = setup_vm(&c);
  CODE_IS(ha_set_input_ref(&c, vm2, "main", 0, t, &r), VM_INVALID_ARGUMENT, &r);
  expect_msg(&r, "was begun for vm");
  CODE_IS_FREE(ha_set_input_ref(&c, vm, "main", 0, t, &r), 0, &r);

  /* Uploads follow the same rules. */
  uint8_t sha[32];
  vm_sha256(g_prog, g_prog_len, sha);
  uint8_t fake[32];
  memset(fake, 0xab, sizeof(fake));
  CODE_IS(ha_upload_begin(&c, fake, 10000, &r), 0, &r);
  uint64_t up = r.rs->upload_begin->upload_id;
  assert_false(r.rs->upload_begin->present);
  hw_reply_free(&r);
  CODE_IS_FREE(ha_upload_chunk(&c, up, 3 * CHUNK, data, 10, &r), VM_OUT_OF_RANGE, &r);
  CODE_IS_FREE(ha_upload_chunk(&c, up, 1, data, CHUNK, &r), VM_INVALID_ARGUMENT, &r);
  CODE_IS_FREE(ha_upload_chunk(&c, up, CHUNK, data, CHUNK - 1, &r), VM_INVALID_ARGUMENT, &r);
  CODE_IS_FREE(ha_upload_chunk(&c, up, CHUNK, data, CHUNK, &r), 0, &r);
  CODE_IS_FREE(ha_upload_chunk(&c, up, CHUNK, data, CHUNK, &r), VM_ALREADY_EXISTS, &r);
  CODE_IS(ha_upload_commit(&c, up, &r), VM_FAILED_PRECONDITION, &r);
  expect_msg(&r, "upload incomplete: 4096 of 10000 bytes received");
  CODE_IS_FREE(ha_upload_chunk(&c, up, 0, data, CHUNK, &r), 0, &r);
  CODE_IS_FREE(ha_upload_chunk(&c, up, 2 * CHUNK, data, 1808, &r), 0, &r);
  /* The bytes do not hash to the announced identity. */
  CODE_IS(ha_upload_commit(&c, up, &r), VM_DATA_LOSS, &r);
  expect_msg(&r, "executable hash mismatch");
  CODE_IS_FREE(ha_upload_commit(&c, up, &r), VM_NOT_FOUND, &r);
  free(data);
  ping_ok(&c);
  hw_close(&c);
}

static void test_upload_rules(void **state) {
  (void)state;
  hw_conn_t c;
  ha_open_session(&c, g_agent.url);
  hw_reply_t r;
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__UploadBeginRequest q = VMRPC__UPLOAD_BEGIN_REQUEST__INIT;
  uint8_t sha[32] = {0};
  q.sha256.data = sha;
  q.sha256.len = 31;
  q.size = 100;
  rq.op_case = VMRPC__REQUEST__OP_UPLOAD_BEGIN;
  rq.upload_begin = &q;
  CALL_CODE_IS(&c, &rq, NULL, 0, VM_INVALID_ARGUMENT, &r);
  expect_msg(&r, "sha256 must be 32 bytes");
  CODE_IS_FREE(ha_upload_begin(&c, sha, 0, &r), VM_INVALID_ARGUMENT, &r);
  CODE_IS(ha_upload_begin(&c, sha, (1u << 20) + 1, &r), VM_RESOURCE_EXHAUSTED, &r);
  expect_msg(&r, "exceeds this agent's limit");
  CODE_IS_FREE(ha_upload_begin(&c, sha, UINT64_MAX, &r), VM_RESOURCE_EXHAUSTED, &r);
  /* Bytes that hash right but are no executable: the verifier's error. */
  uint8_t junk[100];
  memset(junk, 0x42, sizeof(junk));
  uint64_t exec;
  int present;
  CODE_IS_FREE(ha_upload(&c, junk, sizeof(junk), CHUNK, &exec, &present, &r), VM_INVALID_ARGUMENT,
               &r);
  /* Too many uploads in flight. */
  for (int i = 0; i < 4; i++) {
    sha[0] = (uint8_t)(i + 1);
    CODE_IS_FREE(ha_upload_begin(&c, sha, 1000, &r), 0, &r);
  }
  sha[0] = 9;
  CODE_IS(ha_upload_begin(&c, sha, 1000, &r), VM_RESOURCE_EXHAUSTED, &r);
  expect_msg(&r, "uploads in progress");
  ping_ok(&c);
  hw_close(&c);
}

static void test_create_vm_rules(void **state) {
  (void)state;
  hw_conn_t c;
  ha_open_session(&c, g_agent.url);
  hw_reply_t r;
  uint64_t exec = 0, vm = 0;
  int present;
  CODE_IS_FREE(ha_upload(&c, g_prog, g_prog_len, CHUNK, &exec, &present, &r), 0, &r);
  CODE_IS(ha_create_vm(&c, exec, "opencl:7", NULL, NULL, &vm, &r), VM_NOT_FOUND, &r);
  expect_msg(&r, "this agent has: cpu");
  CODE_IS(ha_create_vm(&c, exec, "cpu", "fancy", NULL, &vm, &r), VM_INVALID_ARGUMENT, &r);
  expect_msg(&r, "unknown allocator 'fancy'");
  CODE_IS(ha_create_vm(&c, exec, "cpu", NULL, "jit", &vm, &r), VM_INVALID_ARGUMENT, &r);
  expect_msg(&r, "unknown exec_mode 'jit'");
  CODE_IS_FREE(ha_create_vm(&c, exec + 100, "cpu", NULL, NULL, &vm, &r), VM_NOT_FOUND, &r);
  CODE_IS_FREE(ha_create_vm(&c, exec, "cpu", "naive", "compiled", &vm, &r), 0, &r);
  /* Missing builtins: one NOT_FOUND naming all of them. */
  uint8_t *bad;
  size_t bad_len;
  assert_int_equal(ha_exec_bytes(".packed $test.missing_one\n"
                                 ".packed $test.missing_two\n"
                                 ".func @main() regs 1 {\n"
                                 "  %0 = call $test.missing_one()\n"
                                 "  call $test.missing_two()\n"
                                 "  ret %0\n"
                                 "}\n",
                                 &bad, &bad_len),
                   0);
  CODE_IS_FREE(ha_upload(&c, bad, bad_len, CHUNK, &exec, &present, &r), 0, &r);
  free(bad);
  CODE_IS(ha_create_vm(&c, exec, "cpu", NULL, NULL, &vm, &r), VM_NOT_FOUND, &r);
  if (!strstr(hw_message(&r), "test.missing_one") || !strstr(hw_message(&r), "test.missing_two"))
    fail_msg("message '%s' does not list both names", hw_message(&r));
  hw_reply_free(&r);
  ping_ok(&c);
  hw_close(&c);
}

static void test_time_evaluate_limits(void **state) {
  (void)state;
  hw_conn_t c;
  ha_open_session(&c, g_agent.url);
  uint64_t vm = setup_vm(&c);
  hw_reply_t r;
  CODE_IS_FREE(ha_set_input_int(&c, vm, "ident", 0, 1, &r), 0, &r);
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__TimeEvaluateRequest q = VMRPC__TIME_EVALUATE_REQUEST__INIT;
  q.vm_id = vm;
  q.func = (char *)"ident";
  q.defaults = 1;
  rq.op_case = VMRPC__REQUEST__OP_TIME_EVALUATE;
  rq.time_evaluate = &q;
  q.repeat = 2049;
  CALL_CODE_IS(&c, &rq, NULL, 0, VM_INVALID_ARGUMENT, &r);
  expect_msg(&r, "repeat 2049 exceeds");
  q.repeat = 1;
  q.cooldown_interval_ms = 3600 * 1000;
  rq.id = 0;
  CALL_CODE_IS(&c, &rq, NULL, 0, VM_INVALID_ARGUMENT, &r);
  expect_msg(&r, "cooldown_interval_ms");
  q.cooldown_interval_ms = 0;
  q.cache_flush_bytes = UINT64_MAX;
  rq.id = 0;
  CALL_CODE_IS(&c, &rq, NULL, 0, VM_RESOURCE_EXHAUSTED, &r);
  expect_msg(&r, "cache_flush_bytes");
  q.cache_flush_bytes = 0;
  q.number = -3;
  q.defaults = 0;
  rq.id = 0;
  CALL_CODE_IS(&c, &rq, NULL, 0, VM_INVALID_ARGUMENT, &r);
  hw_reply_free(&r);
  q.func = (char *)"nope";
  q.defaults = 1;
  q.number = 0;
  rq.id = 0;
  CALL_CODE_IS(&c, &rq, NULL, 0, VM_NOT_FOUND, &r);
  hw_reply_free(&r);
  ping_ok(&c);
  hw_close(&c);
}

/* ------------------------------------------------------------ SP wire */

/* A plain TCP connection to the agent (tcp://127.0.0.1:PORT). */
static int raw_connect(const char *url) {
  const char *colon = strrchr(url, ':');
  assert_non_null(colon);
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)atoi(colon + 1));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  return fd;
}

static void raw_write(int fd, const void *buf, size_t n) {
  assert_int_equal(write(fd, buf, n), (ssize_t)n);
}

/* Reads n bytes; returns how many came before the end of the stream. */
static size_t raw_read(int fd, void *buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t k = read(fd, (uint8_t *)buf + got, n - got);
    if (k <= 0) break;
    got += (size_t)k;
  }
  return got;
}

/* Sends a Ping (Request.id 77) after the id words, reads the reply and
 * checks that it starts with the same words and answers the Ping. */
static void raw_ping(int fd, const uint8_t *words, size_t nwords) {
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__PingRequest ping = VMRPC__PING_REQUEST__INIT;
  rq.id = 77;
  rq.op_case = VMRPC__REQUEST__OP_PING;
  rq.ping = &ping;
  size_t body = vmp_frame_size(&rq.base), len = 4 * nwords + body;
  uint8_t msg[256];
  assert_true(8 + len <= sizeof(msg));
  for (int i = 0; i < 8; i++) msg[i] = (uint8_t)((uint64_t)len >> (56 - 8 * i));
  memcpy(msg + 8, words, 4 * nwords);
  vmp_frame_write(&rq.base, msg + 8 + 4 * nwords);
  raw_write(fd, msg, 8 + len);
  uint8_t pre[8], reply[256];
  assert_int_equal(raw_read(fd, pre, 8), 8);
  uint64_t rlen = 0;
  for (int i = 0; i < 8; i++) rlen = rlen << 8 | pre[i];
  assert_true(rlen > 4 * nwords && rlen <= sizeof(reply));
  assert_int_equal(raw_read(fd, reply, (size_t)rlen), (size_t)rlen);
  assert_memory_equal(reply, words, 4 * nwords);
  const uint8_t *env, *pl;
  size_t env_len, pl_len;
  Vmrpc__Response *rs = NULL;
  vm_status_t st = vmp_frame_split(reply + 4 * nwords, (size_t)rlen - 4 * nwords, 0, &env, &env_len,
                                   &pl, &pl_len);
  if (!st) st = vmp_response_unpack(env, env_len, &rs);
  assert_null(st);
  assert_int_equal(rs->id, 77);
  assert_int_equal(rs->op_case, VMRPC__RESPONSE__OP_PING);
  assert_true(!rs->status || rs->status->code == 0);
  vmrpc__response__free_unpacked(rs, NULL);
}

/* The wire format of docs/protocol.md R1, spoken byte by byte: the 8-byte
 * handshake (req0 in, rep0 out), u64 big-endian lengths, the request id
 * words echoed (one, or a relayed request's two); a peer announcing any
 * protocol but req0 is disconnected. */
static void test_sp_wire_by_hand(void **state) {
  (void)state;
  int fd = raw_connect(g_agent.url);
  const uint8_t req0[8] = {0, 'S', 'P', 0, 0x00, 0x30, 0, 0};
  const uint8_t rep0[8] = {0, 'S', 'P', 0, 0x00, 0x31, 0, 0};
  raw_write(fd, req0, sizeof(req0));
  uint8_t hs[8];
  assert_int_equal(raw_read(fd, hs, 8), 8);
  assert_memory_equal(hs, rep0, 8);
  const uint8_t one[4] = {0x80, 0, 0, 5};
  raw_ping(fd, one, 1);
  const uint8_t two[8] = {0, 0, 0, 1, 0x80, 0x12, 0x34, 0x56};
  raw_ping(fd, two, 2);
  close(fd);

  fd = raw_connect(g_agent.url);
  raw_write(fd, rep0, sizeof(rep0)); /* a rep0 peer: not ours to serve */
  assert_int_equal(raw_read(fd, hs, 8), 8);
  uint8_t more;
  assert_int_equal(raw_read(fd, &more, 1), 0); /* the agent closed it */
  close(fd);
  assert_int_equal(ha_ping_fresh(g_agent.url), 0);
}

/* A handshake as req0 on a new plain TCP connection. */
static int raw_open(void) {
  int fd = raw_connect(g_agent.url);
  const uint8_t req0[8] = {0, 'S', 'P', 0, 0x00, 0x30, 0, 0};
  raw_write(fd, req0, sizeof(req0));
  uint8_t hs[8];
  assert_int_equal(raw_read(fd, hs, 8), 8);
  return fd;
}

/* Sends rq (+ payload) with the single id word 0x80000000|id, all but its
 * last `hold` bytes (the caller writes them). */
static void raw_send(int fd, uint32_t id, Vmrpc__Request *rq, const void *payload, size_t plen,
                     size_t hold) {
  size_t body = vmp_frame_size(&rq->base), len = 4 + body + plen;
  uint8_t *msg = malloc(8 + len);
  assert_non_null(msg);
  for (int i = 0; i < 8; i++) msg[i] = (uint8_t)((uint64_t)len >> (56 - 8 * i));
  const uint8_t word[4] = {(uint8_t)(0x80 | id >> 24), (uint8_t)(id >> 16), (uint8_t)(id >> 8),
                           (uint8_t)id};
  memcpy(msg + 8, word, 4);
  vmp_frame_write(&rq->base, msg + 12);
  if (plen) memcpy(msg + 12 + body, payload, plen);
  assert_true(hold <= plen);
  raw_write(fd, msg, 8 + len - hold);
  free(msg);
}

/* Reads one reply: its status code (0 OK), *rs (the caller frees it) and
 * its payload copied into pl (at most cap bytes; *pl_len). */
static int raw_reply(int fd, Vmrpc__Response **rs, void *pl, size_t cap, size_t *pl_len) {
  uint8_t pre[8];
  assert_int_equal(raw_read(fd, pre, 8), 8);
  uint64_t rlen = 0;
  for (int i = 0; i < 8; i++) rlen = rlen << 8 | pre[i];
  assert_true(rlen > 4 && rlen < (1u << 20));
  uint8_t *msg = malloc((size_t)rlen);
  assert_non_null(msg);
  assert_int_equal(raw_read(fd, msg, (size_t)rlen), (size_t)rlen);
  const uint8_t *env, *p;
  size_t env_len, p_len;
  vm_status_t st = vmp_frame_split(msg + 4, (size_t)rlen - 4, 0, &env, &env_len, &p, &p_len);
  if (!st) st = vmp_response_unpack(env, env_len, rs);
  assert_null(st);
  assert_true(p_len <= cap);
  if (p_len) memcpy(pl, p, p_len);
  if (pl_len) *pl_len = p_len;
  free(msg);
  return (*rs)->status ? (int)(*rs)->status->code : 0;
}

/* Sends rq on fd (session `session`) and reads its reply: its code. */
static int raw_call(int fd, uint64_t session, Vmrpc__Request *rq, Vmrpc__Response **rs) {
  static uint32_t next_id = 100;
  rq->id = ++next_id;
  rq->session = session;
  raw_send(fd, next_id, rq, NULL, 0, 0);
  return raw_reply(fd, rs, NULL, 0, NULL);
}

/* raw_call that must succeed; the reply is freed. */
static void raw_ok(int fd, uint64_t session, Vmrpc__Request *rq) {
  Vmrpc__Response *rs = NULL;
  assert_int_equal(raw_call(fd, session, rq, &rs), 0);
  vmrpc__response__free_unpacked(rs, NULL);
}

/* A TensorChunk request for transfer t at offset off. */
static void chunk_request(Vmrpc__Request *rq, Vmrpc__TensorChunkRequest *q, uint64_t session,
                          uint32_t id, uint64_t t, uint64_t off) {
  vmrpc__request__init(rq);
  vmrpc__tensor_chunk_request__init(q);
  q->transfer_id = t;
  q->offset = off;
  rq->id = id;
  rq->session = session;
  rq->op_case = VMRPC__REQUEST__OP_TENSOR_CHUNK;
  rq->tensor_chunk = q;
}

/* A chunk's payload is read from the socket into its tensor as it comes
 * (vma_route_direct): one arriving in two parts with a pause between lands
 * whole, a chunk of the usual way beside it too, and the tensor reads back
 * as sent; a peer that closes mid-payload leaves an agent that still
 * serves (and, under ASan, nothing leaked: the agent's exit status). */
static void test_chunk_payload_read_in_place(void **state) {
  (void)state;
  hw_conn_t c;
  ha_open_session(&c, g_agent.url);
  (void)ha_upload_ok(&c, g_prog, g_prog_len, CHUNK); /* in the agent's store */
  int fd = raw_open();
  Vmrpc__Response *rs = NULL;
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__HelloRequest h = VMRPC__HELLO_REQUEST__INIT;
  h.protocol_major = 1;
  h.client_name = (char *)"raw";
  h.token = (char *)"";
  rq.op_case = VMRPC__REQUEST__OP_HELLO;
  rq.hello = &h;
  assert_int_equal(raw_call(fd, 0, &rq, &rs), 0);
  uint64_t session = rs->hello->session;
  vmrpc__response__free_unpacked(rs, NULL);
  uint8_t sha[32];
  vm_sha256(g_prog, g_prog_len, sha);
  Vmrpc__UploadBeginRequest ub = VMRPC__UPLOAD_BEGIN_REQUEST__INIT;
  ub.sha256.data = sha;
  ub.sha256.len = 32;
  ub.size = g_prog_len;
  vmrpc__request__init(&rq);
  rq.op_case = VMRPC__REQUEST__OP_UPLOAD_BEGIN;
  rq.upload_begin = &ub;
  assert_int_equal(raw_call(fd, session, &rq, &rs), 0);
  assert_true(rs->upload_begin->present);
  uint64_t exec = rs->upload_begin->exec_id;
  vmrpc__response__free_unpacked(rs, NULL);
  Vmrpc__CreateVMRequest cv = VMRPC__CREATE_VMREQUEST__INIT;
  Vmrpc__DeviceSpec d = VMRPC__DEVICE_SPEC__INIT;
  Vmrpc__DeviceSpec *dl[1] = {&d};
  d.selector = (char *)"cpu";
  d.allocator = (char *)"";
  cv.exec_id = exec;
  cv.n_devices = 1;
  cv.devices = dl;
  cv.exec_mode = (char *)"";
  vmrpc__request__init(&rq);
  rq.op_case = VMRPC__REQUEST__OP_CREATE_VM;
  rq.create_vm = &cv;
  assert_int_equal(raw_call(fd, session, &rq, &rs), 0);
  uint64_t vm = rs->create_vm->vm_id;
  vmrpc__response__free_unpacked(rs, NULL);

  /* 10000 bytes: chunks of 4096 and 4096 (read in place) and 1808 (under
   * half of VMA_DIRECT_MIN: the usual way). */
  int64_t shape[1] = {2500};
  Vmrpc__TensorBeginRequest tb = VMRPC__TENSOR_BEGIN_REQUEST__INIT;
  Vmrpc__TensorMeta m = VMRPC__TENSOR_META__INIT;
  m.dtype = (char *)"float32";
  m.n_shape = 1;
  m.shape = shape;
  m.nbytes = 10000;
  tb.vm_id = vm;
  tb.meta = &m;
  vmrpc__request__init(&rq);
  rq.op_case = VMRPC__REQUEST__OP_TENSOR_BEGIN;
  rq.tensor_begin = &tb;
  assert_int_equal(raw_call(fd, session, &rq, &rs), 0);
  uint64_t t = rs->tensor_begin->transfer_id;
  vmrpc__response__free_unpacked(rs, NULL);
  uint8_t *data = malloc(10000), *back = malloc(10000);
  assert_non_null(data);
  assert_non_null(back);
  for (size_t i = 0; i < 10000; i++) data[i] = (uint8_t)(i * 7 + 3);
  Vmrpc__TensorChunkRequest tc;
  /* Chunk 1 first, its last 1000 bytes after a pause. */
  chunk_request(&rq, &tc, session, 201, t, CHUNK);
  raw_send(fd, 201, &rq, data + CHUNK, CHUNK, 1000);
  usleep(200 * 1000);
  assert_int_equal(ha_ping_fresh(g_agent.url), 0); /* others are served meanwhile */
  raw_write(fd, data + 2 * CHUNK - 1000, 1000);
  assert_int_equal(raw_reply(fd, &rs, NULL, 0, NULL), 0);
  assert_int_equal(rs->id, 201);
  assert_int_equal(rs->op_case, VMRPC__RESPONSE__OP_TENSOR_CHUNK);
  vmrpc__response__free_unpacked(rs, NULL);
  /* The same chunk again: refused as before (the usual way answers). */
  chunk_request(&rq, &tc, session, 202, t, CHUNK);
  raw_send(fd, 202, &rq, data + CHUNK, CHUNK, 0);
  assert_int_equal(raw_reply(fd, &rs, NULL, 0, NULL), VM_ALREADY_EXISTS);
  vmrpc__response__free_unpacked(rs, NULL);
  chunk_request(&rq, &tc, session, 203, t, 0);
  raw_send(fd, 203, &rq, data, CHUNK, 0);
  chunk_request(&rq, &tc, session, 204, t, 2 * CHUNK);
  raw_send(fd, 204, &rq, data + 2 * CHUNK, 10000 - 2 * CHUNK, 0);
  for (int k = 0; k < 2; k++) {
    assert_int_equal(raw_reply(fd, &rs, NULL, 0, NULL), 0);
    vmrpc__response__free_unpacked(rs, NULL);
  }
  /* Into the VM and back out. */
  Vmrpc__SetInputRequest si = VMRPC__SET_INPUT_REQUEST__INIT;
  Vmrpc__Value v = VMRPC__VALUE__INIT;
  v.kind_case = VMRPC__VALUE__KIND_TENSOR_REF;
  v.tensor_ref = t;
  si.vm_id = vm;
  si.func = (char *)"ident";
  si.param_case = VMRPC__SET_INPUT_REQUEST__PARAM_INDEX;
  si.index = 0;
  si.value = &v;
  vmrpc__request__init(&rq);
  rq.op_case = VMRPC__REQUEST__OP_SET_INPUT;
  rq.set_input = &si;
  raw_ok(fd, session, &rq);
  Vmrpc__InvokeRequest iv = VMRPC__INVOKE_REQUEST__INIT;
  iv.vm_id = vm;
  iv.func = (char *)"ident";
  vmrpc__request__init(&rq);
  rq.op_case = VMRPC__REQUEST__OP_INVOKE;
  rq.invoke = &iv;
  raw_ok(fd, session, &rq);
  Vmrpc__GetOutputRequest go = VMRPC__GET_OUTPUT_REQUEST__INIT;
  go.vm_id = vm;
  go.func = (char *)"ident";
  vmrpc__request__init(&rq);
  rq.op_case = VMRPC__REQUEST__OP_GET_OUTPUT;
  rq.get_output = &go;
  rq.session = session;
  for (uint32_t off = 0; off < 10000; off += CHUNK) { /* a chunk per reply */
    go.offset = off;
    rq.id = 300 + off;
    raw_send(fd, 300 + off, &rq, NULL, 0, 0);
    size_t got = 0;
    assert_int_equal(raw_reply(fd, &rs, back + off, 10000 - off, &got), 0);
    vmrpc__response__free_unpacked(rs, NULL);
    assert_int_equal(got, off + CHUNK <= 10000 ? CHUNK : 10000 - off);
  }
  assert_memory_equal(back, data, 10000);

  /* A second transfer: the peer goes away halfway through a chunk. */
  vmrpc__request__init(&rq);
  rq.op_case = VMRPC__REQUEST__OP_TENSOR_BEGIN;
  rq.tensor_begin = &tb;
  assert_int_equal(raw_call(fd, session, &rq, &rs), 0);
  uint64_t t2 = rs->tensor_begin->transfer_id;
  vmrpc__response__free_unpacked(rs, NULL);
  chunk_request(&rq, &tc, session, 401, t2, 0);
  raw_send(fd, 401, &rq, data, CHUNK, CHUNK / 2);
  close(fd);
  ping_ok(&c);
  hw_close(&c);
  free(data);
  free(back);
}

/* ------------------------------------------------------------ agent flags */

static void test_token(void **state) {
  (void)state;
  char path[] = "/tmp/vmagent-token-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  const char tok[] = "s3cret-token-value\n";
  assert_int_equal(write(fd, tok, sizeof(tok) - 1), (ssize_t)(sizeof(tok) - 1));
  close(fd);
  const char *args[] = {"--token-file", path, "--device", "cpu", NULL};
  agent_proc_t p;
  assert_int_equal(agent_proc_start(&p, args), 0);
  hw_conn_t c;
  assert_int_equal(hw_open(&c, p.url), 0);
  hw_reply_t r;
  /* Ping needs no session (nor token). */
  CODE_IS_FREE(ha_ping(&c, &r), 0, &r);
  /* each refusal closes its connection (test_security_auth.c): a new one
   * for each try */
  CODE_IS(hw_hello(&c, NULL, &r), VM_UNAUTHENTICATED, &r);
  expect_msg(&r, "pass --token or --token-file");
  hw_reply_free(&r);
  hw_close(&c);
  assert_int_equal(hw_open(&c, p.url), 0);
  CODE_IS(hw_hello(&c, "s3cret-token-valuE", &r), VM_UNAUTHENTICATED, &r);
  expect_msg(&r, "pass --token or --token-file");
  hw_reply_free(&r);
  hw_close(&c);
  assert_int_equal(hw_open(&c, p.url), 0);
  CODE_IS_FREE(hw_hello(&c, "s3cret", &r), VM_UNAUTHENTICATED, &r);
  hw_close(&c);
  assert_int_equal(hw_open(&c, p.url), 0);
  CODE_IS_FREE(ha_list_devices(&c, &r), VM_FAILED_PRECONDITION, &r);
  /* That refusal was the connection's last answer: Hello on a new one. */
  hw_close(&c);
  assert_int_equal(hw_open(&c, p.url), 0);
  CODE_IS_FREE(hw_hello(&c, "s3cret-token-value", &r), 0, &r);
  CODE_IS_FREE(ha_list_devices(&c, &r), 0, &r);
  hw_close(&c);
  assert_int_equal(agent_proc_stop(&p), 0);
  unlink(path);
}

static void test_max_sessions(void **state) {
  (void)state;
  const char *args[] = {"--max-sessions", "2", "--device", "cpu", NULL};
  agent_proc_t p;
  assert_int_equal(agent_proc_start(&p, args), 0);
  hw_conn_t c1, c2, c3;
  hw_reply_t r;
  assert_int_equal(hw_open(&c1, p.url), 0);
  assert_int_equal(hw_open(&c2, p.url), 0);
  assert_int_equal(hw_open(&c3, p.url), 0);
  CODE_IS_FREE(hw_hello(&c1, NULL, &r), 0, &r);
  CODE_IS_FREE(hw_hello(&c2, NULL, &r), 0, &r);
  CODE_IS(hw_hello(&c3, NULL, &r), VM_RESOURCE_EXHAUSTED, &r);
  expect_msg(&r, "the agent serves 2 sessions, its limit (--max-sessions 2)");
  CODE_IS_FREE(ha_ping(&c3, &r), 0, &r);
  CODE_IS_FREE(ha_goodbye(&c1, &r), 0, &r);
  CODE_IS_FREE(hw_hello(&c3, NULL, &r), 0, &r);
  /* A closed connection frees its slot too (asynchronously). */
  hw_close(&c2);
  int code = -1;
  for (int i = 0; i < 100 && code != 0; i++) {
    code = hw_hello(&c1, NULL, &r);
    hw_reply_free(&r);
    if (code) usleep(20000);
  }
  assert_int_equal(code, 0);
  hw_close(&c1);
  hw_close(&c3);
  assert_int_equal(agent_proc_stop(&p), 0);
}

/* Invocations queued behind a busy device hold their workers; the pool
 * grows so that Ping and Cancel still get through, and a cancel ends a
 * wait for the device. */
static void test_device_queue_keeps_a_worker_free(void **state) {
  (void)state;
  const char *args[] = {"--workers", "2", "--device", "cpu", NULL};
  agent_proc_t p;
  assert_int_equal(agent_proc_start(&p, args), 0);
  hw_conn_t c;
  hw_reply_t r;
  ha_open_session(&c, p.url);
  enum { N = 5 };
  uint64_t vm[N];
  for (int i = 0; i < N; i++) vm[i] = setup_vm(&c);
  for (int i = 0; i < N; i++) ha_send_invoke(&c, 1 + i, vm[i], "spin", NULL); /* 1 runs, 4 wait */
  usleep(300000);
  for (int i = 0; i < 3; i++) {
    CODE_IS_FREE(ha_ping(&c, &r), 0, &r);
    CODE_IS_FREE(ha_stats(&c, &r), 0, &r);
  }
  /* Waiting ones first, the running one last: all end CANCELLED. */
  for (int i = N; i-- > 0;) {
    CODE_IS_FREE(ha_cancel(&c, 10, vm[i], &r), 0, &r);
  }
  for (int i = 0; i < N; i++) {
    assert_int_equal(hw_recv(&c, 1 + i, &r, 10000), 0);
    CODE_IS_FREE(hw_code(&r), VM_CANCELLED, &r);
  }
  /* Everything still works, and the agent stops cleanly. */
  CODE_IS_FREE(ha_set_input_int(&c, vm[0], "ident", 0, 1, &r), 0, &r);
  CODE_IS_FREE(ha_invoke(&c, vm[0], "ident", 0, &r), 0, &r);
  hw_close(&c);
  assert_int_equal(agent_proc_stop(&p), 0);
}

typedef struct recv_job {
  hw_conn_t *c;
  int ctx;
  int rv;
  hw_reply_t r;
  int done; /* atomic */
} recv_job_t;

static void *recv_main(void *arg) {
  recv_job_t *j = arg;
  j->rv = hw_recv(j->c, j->ctx, &j->r, 60000);
  __atomic_store_n(&j->done, 1, __ATOMIC_SEQ_CST);
  return NULL;
}

/* Ping, Stats and Cancel are served by the connection's reader, never
 * queued behind the workers. With --workers 1, three endless invokes (one
 * running on the only worker, two queued for it) and then Pings and Stats
 * on the same connection (so the agent reads them after the invokes): all
 * are answered while no invoke has, and Cancel ends the invokes one by one
 * in the order the worker takes them. An agent that serves every request
 * on a worker answers none of them. The client is a plain nng req0 socket,
 * as an old client is. */
static void test_cheap_requests_skip_busy_workers(void **state) {
  (void)state;
  const char *args[] = {"--workers", "1", "--device", "cpu", NULL};
  agent_proc_t p;
  assert_int_equal(agent_proc_start(&p, args), 0);
  hw_conn_t c;
  hw_reply_t r;
  ha_open_session(&c, p.url);
  enum { N = 3 };
  uint64_t vm[N];
  for (int i = 0; i < N; i++) vm[i] = setup_vm(&c);
  for (int i = 0; i < N; i++) ha_send_invoke(&c, 1 + i, vm[i], "spin", NULL);
  for (int i = 0; i < 3; i++) {
    CODE_IS_FREE(ha_ping(&c, &r), 0, &r);
    CODE_IS_FREE(ha_stats(&c, &r), 0, &r);
  }
  recv_job_t j[N];
  pthread_t th[N];
  for (int i = 0; i < N; i++) {
    memset(&j[i], 0, sizeof(j[i]));
    j[i].c = &c;
    j[i].ctx = 1 + i;
    assert_int_equal(pthread_create(&th[i], NULL, recv_main, &j[i]), 0);
  }
  for (int i = 0; i < N; i++) {
    /* A Cancel that lands before the worker took invoke i changes
     * nothing: repeat until it ends. The others spin on meanwhile. */
    for (int k = 0; k < 1200 && !__atomic_load_n(&j[i].done, __ATOMIC_SEQ_CST); k++) {
      CODE_IS_FREE(ha_cancel(&c, 10, vm[i], &r), 0, &r);
      usleep(25 * 1000);
    }
    pthread_join(th[i], NULL);
    assert_int_equal(j[i].rv, 0);
    CODE_IS_FREE(hw_code(&j[i].r), VM_CANCELLED, &j[i].r);
    for (int k = i + 1; k < N; k++) assert_false(__atomic_load_n(&j[k].done, __ATOMIC_SEQ_CST));
  }
  CODE_IS_FREE(ha_ping(&c, &r), 0, &r);
  hw_close(&c);
  assert_int_equal(agent_proc_stop(&p), 0);
}

static void test_session_mem_limit(void **state) {
  (void)state;
  const char *args[] = {"--session-mem-limit", "64K", "--device", "cpu",
                        "--chunk-size",        "4K",  NULL};
  agent_proc_t p;
  assert_int_equal(agent_proc_start(&p, args), 0);
  hw_conn_t c;
  hw_reply_t r;
  assert_int_equal(hw_open(&c, p.url), 0);
  CODE_IS(hw_hello(&c, NULL, &r), 0, &r);
  assert_int_equal(r.rs->hello->limits->session_mem_bytes, 64 * 1024);
  hw_reply_free(&r);
  uint64_t vm = setup_vm(&c), t = 0;
  int64_t big[1] = {1 << 18}; /* 1 MiB */
  CODE_IS(ha_tensor_begin(&c, vm, "float32", big, 1, 1 << 20, &t, &r), VM_RESOURCE_EXHAUSTED, &r);
  expect_msg(&r, "session memory limit");
  int64_t small[1] = {1024}; /* 4 KiB fits */
  CODE_IS_FREE(ha_tensor_begin(&c, vm, "float32", small, 1, 4096, &t, &r), 0, &r);
  uint8_t sha[32] = {7};
  CODE_IS_FREE(ha_upload_begin(&c, sha, 100000, &r), VM_RESOURCE_EXHAUSTED, &r);
  hw_close(&c);
  assert_int_equal(agent_proc_stop(&p), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_garbage_bodies),
      cmocka_unit_test(test_truncated_frame),
      cmocka_unit_test(test_oversized_message_is_dropped),
      cmocka_unit_test(test_pre_hello_cap),
      cmocka_unit_test(test_unknown_and_empty_operation),
      cmocka_unit_test(test_unexpected_payload),
      cmocka_unit_test(test_sessions_and_handles),
      cmocka_unit_test(test_version_and_token_free_hello),
      cmocka_unit_test(test_tensor_mismatches),
      cmocka_unit_test(test_chunk_rules),
      cmocka_unit_test(test_upload_rules),
      cmocka_unit_test(test_create_vm_rules),
      cmocka_unit_test(test_time_evaluate_limits),
      cmocka_unit_test(test_sp_wire_by_hand),
      cmocka_unit_test(test_chunk_payload_read_in_place),
      cmocka_unit_test(test_token),
      cmocka_unit_test(test_max_sessions),
      cmocka_unit_test(test_device_queue_keeps_a_worker_free),
      cmocka_unit_test(test_cheap_requests_skip_busy_workers),
      cmocka_unit_test(test_session_mem_limit),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
