/* The operation table (vmproto/ops.h) against vmrpc.proto and a real agent,
 * driven from the table and protobuf-c's descriptors, so an operation added
 * to one and not the other fails here:
 *
 * - every member of Request's oneof op has exactly one row, with the same
 *   field name, the reply case of the same number and name in Response's
 *   oneof, and request/reply types named <Name>Request / <Name>Response;
 *   every row is such a member; vmp_op_find / vmp_op_name agree;
 * - on a connection without a session, each row's operation (an empty
 *   message of its type) gets exactly FAILED_PRECONDITION "no session: send
 *   Hello first" when the row needs a session; Ping is answered OK, Hello
 *   with protocol 0.0 gets its protocol error, never the session one;
 * - with a session, each row without VMP_OP_PAYLOAD refuses one payload
 *   byte with INVALID_ARGUMENT "<Name> carries no payload, but 1 bytes
 *   followed the envelope" (Goodbye last: it ends the session);
 * - every row says where session isolation serves it (VMP_OP_LOCAL, or
 *   VMP_OP_FORWARD with a session and one bound), and the bounds agree with
 *   the messages: a row whose request carries deadline_ms is bounded by it,
 *   a cheap forwarded row by the kernel bound; so a row added without its
 *   routing considered fails here (and ops.c does not compile);
 * - against an isolated agent, the router follows the table: with the
 *   session's worker process killed, each VMP_OP_FORWARD row gets ABORTED
 *   naming the kill (it went to the worker process), each VMP_OP_LOCAL row
 *   is answered by the agent without learning of it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <time.h>

#include "agent_proc.h"
#include "helper_agent.h"
#include "test_util.h"
#include "vmproto/ops.h"
#include "vmproto/wire.h"

static agent_proc_t g_agent;

static int setup(void **state) {
  (void)state;
  const char *args[] = {"--device", "cpu", NULL};
  return agent_proc_start(&g_agent, args);
}

static int teardown(void **state) {
  (void)state;
  return agent_proc_stop(&g_agent);
}

static void expect_msg(const hw_reply_t *r, const char *want) {
  if (strcmp(hw_message(r), want) != 0)
    fail_msg("message '%s', expected '%s'", hw_message(r), want);
}

static int is_op_field(const ProtobufCFieldDescriptor *f) {
  return (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) != 0 &&
         f->quantifier_offset == offsetof(Vmrpc__Request, op_case);
}

static void test_table_matches_proto(void **state) {
  (void)state;
  const ProtobufCMessageDescriptor *rq = &vmrpc__request__descriptor;
  const ProtobufCMessageDescriptor *rs = &vmrpc__response__descriptor;
  size_t members = 0;
  for (unsigned i = 0; i < rq->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &rq->fields[i];
    if (!is_op_field(f)) continue;
    members++;
    int rows = 0;
    const vmp_op_t *o = NULL;
    for (size_t k = 0; k < vmp_num_ops; k++)
      if ((unsigned)vmp_ops[k].op == f->id) {
        rows++;
        o = &vmp_ops[k];
      }
    if (rows != 1) fail_msg("oneof member %s (%u) has %d rows in the table", f->name, f->id, rows);
    assert_string_equal(o->field, f->name);
    assert_ptr_equal(vmp_op_find((Vmrpc__Request__OpCase)f->id), o);
    assert_string_equal(vmp_op_name(o->op), o->name);
    char want[96];
    snprintf(want, sizeof(want), "%sRequest", o->name);
    const ProtobufCMessageDescriptor *qd = f->descriptor;
    assert_non_null(qd);
    assert_string_equal(qd->short_name, want);
    const ProtobufCFieldDescriptor *g = protobuf_c_message_descriptor_get_field(rs, o->reply);
    if (!g) fail_msg("%s: no reply member numbered %u", o->name, (unsigned)o->reply);
    assert_true((unsigned)o->reply == f->id);
    assert_string_equal(g->name, f->name);
    assert_true((g->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) != 0);
    assert_true(g->quantifier_offset == offsetof(Vmrpc__Response, op_case));
    snprintf(want, sizeof(want), "%sResponse", o->name);
    assert_string_equal(((const ProtobufCMessageDescriptor *)g->descriptor)->short_name, want);
  }
  assert_int_equal(members, vmp_num_ops);
  /* Hello alone opens a session; only operations without one may skip it. */
  for (size_t k = 0; k < vmp_num_ops; k++) {
    uint32_t fl = vmp_ops[k].flags;
    assert_int_equal((fl & VMP_OP_OPENS) != 0, vmp_ops[k].op == VMRPC__REQUEST__OP_HELLO);
    if (fl & VMP_OP_OPENS) assert_false(fl & VMP_OP_SESSION);
  }
  assert_null(vmp_op_find(VMRPC__REQUEST__OP__NOT_SET));
  assert_string_equal(vmp_op_name(VMRPC__REQUEST__OP__NOT_SET), "unknown");
}

/* A request of row o's operation with an empty message of its type (owned
 * by *out_msg: free it after the call). */
static void make_request(const vmp_op_t *o, Vmrpc__Request *rq, void **out_msg) {
  const ProtobufCFieldDescriptor *f =
      protobuf_c_message_descriptor_get_field(&vmrpc__request__descriptor, (unsigned)o->op);
  assert_non_null(f);
  const ProtobufCMessageDescriptor *d = f->descriptor;
  void *m = calloc(1, d->sizeof_message);
  assert_non_null(m);
  d->message_init((ProtobufCMessage *)m);
  vmrpc__request__init(rq);
  rq->op_case = o->op;
  memcpy((char *)rq + f->offset, &m, sizeof(m));
  *out_msg = m;
}

static void test_pre_hello_from_table(void **state) {
  (void)state;
  for (size_t k = 0; k < vmp_num_ops; k++) {
    const vmp_op_t *o = &vmp_ops[k];
    hw_conn_t c;
    assert_int_equal(hw_open(&c, g_agent.url), 0);
    Vmrpc__Request rq;
    void *m;
    make_request(o, &rq, &m);
    hw_reply_t r;
    assert_int_equal(hw_call(&c, &rq, NULL, 0, &r), 0);
    free(m);
    if (o->flags & VMP_OP_SESSION) {
      if (hw_code(&r) != VM_FAILED_PRECONDITION)
        fail_msg("%s before Hello: code %d (%s)", o->name, hw_code(&r), hw_message(&r));
      expect_msg(&r, "no session: send Hello first");
    } else if (o->op == VMRPC__REQUEST__OP_HELLO) {
      CODE_IS(hw_code(&r), VM_FAILED_PRECONDITION, &r);
      if (!strstr(hw_message(&r), "protocol version 0.0 is not supported"))
        fail_msg("Hello 0.0: '%s'", hw_message(&r));
    } else {
      CODE_IS(hw_code(&r), 0, &r);
      assert_int_equal(r.rs->op_case, o->reply);
    }
    hw_reply_free(&r);
    hw_close(&c);
  }
}

static void test_no_payload_from_table(void **state) {
  (void)state;
  hw_conn_t c;
  ha_open_session(&c, g_agent.url);
  const vmp_op_t *goodbye = NULL;
  for (size_t k = 0; k <= vmp_num_ops; k++) {
    const vmp_op_t *o = k < vmp_num_ops ? &vmp_ops[k] : goodbye;
    if (!o) break;
    if (o->flags & VMP_OP_PAYLOAD) continue;
    if (k < vmp_num_ops && o->op == VMRPC__REQUEST__OP_GOODBYE) {
      goodbye = o; /* ends the session: last */
      continue;
    }
    Vmrpc__Request rq;
    void *m;
    make_request(o, &rq, &m);
    hw_reply_t r;
    const uint8_t byte = 7;
    assert_int_equal(hw_call(&c, &rq, &byte, 1, &r), 0);
    free(m);
    if (hw_code(&r) != VM_INVALID_ARGUMENT)
      fail_msg("%s with a payload: code %d (%s)", o->name, hw_code(&r), hw_message(&r));
    char want[160];
    snprintf(want, sizeof(want), "%s carries no payload, but 1 bytes followed the envelope",
             o->name);
    expect_msg(&r, want);
    hw_reply_free(&r);
  }
  assert_non_null(goodbye);
  hw_close(&c);
}

/* The uint32 deadline_ms field of row o's request message, NULL if none. */
static const ProtobufCFieldDescriptor *deadline_field(const vmp_op_t *o) {
  const ProtobufCFieldDescriptor *f =
      protobuf_c_message_descriptor_get_field(&vmrpc__request__descriptor, (unsigned)o->op);
  assert_non_null(f);
  return protobuf_c_message_descriptor_get_field_by_name(f->descriptor, "deadline_ms");
}

static void test_routing_flags(void **state) {
  (void)state;
  for (size_t k = 0; k < vmp_num_ops; k++) {
    const vmp_op_t *o = &vmp_ops[k];
    uint32_t fl = o->flags;
    uint32_t place = fl & (VMP_OP_LOCAL | VMP_OP_FORWARD);
    uint32_t bound = fl & VMP_OP_BOUNDS;
    if (place != VMP_OP_LOCAL && place != VMP_OP_FORWARD)
      fail_msg("%s: give it exactly one of VMP_OP_LOCAL and VMP_OP_FORWARD", o->name);
    if (place == VMP_OP_LOCAL && bound) fail_msg("%s: served locally, yet it has a bound", o->name);
    if (place == VMP_OP_FORWARD) {
      if (!(fl & VMP_OP_SESSION)) fail_msg("%s: forwarded without a session", o->name);
      if (bound != VMP_OP_KBOUND && bound != VMP_OP_DEADLINE && bound != VMP_OP_UNBOUND)
        fail_msg(
            "%s: forwarded: give it exactly one of VMP_OP_KBOUND, VMP_OP_DEADLINE and "
            "VMP_OP_UNBOUND",
            o->name);
      /* never waits for a device: the kernel bound is its bound */
      if (((fl & VMP_OP_CHEAP) != 0) != (bound == VMP_OP_KBOUND))
        fail_msg("%s: cheap and forwarded go with VMP_OP_KBOUND, and only they", o->name);
    }
    const ProtobufCFieldDescriptor *d = deadline_field(o);
    if (d && place == VMP_OP_FORWARD && bound != VMP_OP_DEADLINE)
      fail_msg("%s carries deadline_ms: bound it with VMP_OP_DEADLINE", o->name);
    if (bound == VMP_OP_DEADLINE) {
      if (!d) fail_msg("%s: VMP_OP_DEADLINE without a deadline_ms field", o->name);
      assert_int_equal(d->type, PROTOBUF_C_TYPE_UINT32);
      assert_int_equal(d->label, PROTOBUF_C_LABEL_NONE);
    }
    assert_true(VMP_OP_ROUTED(fl));
  }
}

static void nap_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Kills the one worker process of agent p (no spares: its session's) and
 * waits until the agent has reaped it (it is no longer p's child). */
static void kill_worker(const agent_proc_t *p) {
  pid_t pids[4];
  size_t n = agent_proc_children(p->pid, pids, 4);
  if (n != 1) fail_msg("%zu worker processes, expected the session's only", n);
  assert_int_equal(kill(pids[0], SIGKILL), 0);
  for (int i = 0; i < 1000 && agent_proc_children(p->pid, pids, 4) != 0; i++) nap_ms(10);
  assert_int_equal(agent_proc_children(p->pid, pids, 4), 0);
}

/* A Stats request on c: the code of its reply (OK starts a worker process
 * for the session when it has none). */
static int stats_code(hw_conn_t *c) {
  hw_reply_t r;
  int code = ha_stats(c, &r);
  if (code != 0 && code != VM_ABORTED) fail_msg("Stats: %d (%s)", code, hw_message(&r));
  hw_reply_free(&r);
  return code;
}

static void test_router_follows_table(void **state) {
  (void)state;
  agent_proc_t p;
  const char *args[] = {"--device", "cpu", "--isolate", "session", "--spare-workers", "0", NULL};
  assert_int_equal(agent_proc_start(&p, args), 0);
  hw_conn_t c;
  ha_open_session(&c, p.url);
  const vmp_op_t *goodbye = NULL;
  for (size_t k = 0; k <= vmp_num_ops; k++) {
    const vmp_op_t *o = k < vmp_num_ops ? &vmp_ops[k] : goodbye;
    if (!o) break;
    if (o->op == VMRPC__REQUEST__OP_HELLO) continue; /* opens another session */
    if (k < vmp_num_ops && o->op == VMRPC__REQUEST__OP_GOODBYE) {
      goodbye = o; /* ends the session: last */
      continue;
    }
    /* the session's worker process runs, then dies while idle */
    if (stats_code(&c) == VM_ABORTED) assert_int_equal(stats_code(&c), 0);
    kill_worker(&p);
    Vmrpc__Request rq;
    void *m;
    make_request(o, &rq, &m);
    hw_reply_t r;
    assert_int_equal(hw_call(&c, &rq, NULL, 0, &r), 0);
    free(m);
    if (o->flags & VMP_OP_FORWARD) {
      if (hw_code(&r) != VM_ABORTED ||
          !strstr(hw_message(&r), "the session's worker process crashed (signal 9, Killed)"))
        fail_msg("%s, forwarded, after its worker process died: %d (%s)", o->name, hw_code(&r),
                 hw_message(&r));
    } else {
      if (hw_code(&r) == VM_ABORTED)
        fail_msg("%s, served by the agent, reached the dead worker process: %s", o->name,
                 hw_message(&r));
      /* the death is still untold: the next forwarded request learns it */
      if (o->op != VMRPC__REQUEST__OP_GOODBYE) assert_int_equal(stats_code(&c), VM_ABORTED);
    }
    hw_reply_free(&r);
  }
  assert_non_null(goodbye);
  hw_close(&c);
  assert_int_equal(agent_proc_stop(&p), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_table_matches_proto),   cmocka_unit_test(test_pre_hello_from_table),
      cmocka_unit_test(test_no_payload_from_table), cmocka_unit_test(test_routing_flags),
      cmocka_unit_test(test_router_follows_table),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
