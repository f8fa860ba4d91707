/* No protobuf message of the wire protocol (proto/vmrpc.proto) can nest:
 * the message types reachable from Request (what the agent unpacks) and
 * Response (what the client unpacks) form no cycle, directly or through
 * other messages, so protobuf-c's recursive unpack goes at most a few
 * levels deep whatever the bytes say. The ONNX importer had to bound the
 * nesting of hostile models (GraphProto inside an attribute); this suite
 * fails the day a recursive type is added to the wire protocol, which would
 * then need the same bound before unpacking (docs/security.md). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "vmrpc.pb-c.h"

/* The deepest chain of message fields below the top message, counting the
 * top message as 1; -1 if a message type contains itself (directly or
 * through others): *cycle then names the chain "A -> B -> A". */
#define MAX_TYPES 256
typedef struct {
  const ProtobufCMessageDescriptor *path[MAX_TYPES];
  int n;
  char *cycle;
  size_t cycle_len;
} walk_t;

static int depth_of(walk_t *w, const ProtobufCMessageDescriptor *d) {
  assert_int_equal(d->magic, PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC);
  for (int i = 0; i < w->n; i++) {
    if (w->path[i] != d) continue;
    size_t off = 0;
    for (int j = i; j < w->n; j++)
      off += (size_t)snprintf(w->cycle + off, w->cycle_len - off, "%s -> ", w->path[j]->name);
    snprintf(w->cycle + off, w->cycle_len - off, "%s", d->name);
    return -1;
  }
  assert_true(w->n < MAX_TYPES);
  w->path[w->n++] = d;
  int deepest = 0;
  for (unsigned f = 0; f < d->n_fields; f++) {
    if (d->fields[f].type != PROTOBUF_C_TYPE_MESSAGE) continue;
    int sub = depth_of(w, d->fields[f].descriptor);
    if (sub < 0) return -1;
    if (sub > deepest) deepest = sub;
  }
  w->n--;
  return deepest + 1;
}

static int message_depth(const ProtobufCMessageDescriptor *d, char *cycle, size_t cycle_len) {
  walk_t w = {.n = 0, .cycle = cycle, .cycle_len = cycle_len};
  cycle[0] = '\0';
  return depth_of(&w, d);
}

static void test_wire_messages_do_not_nest(void **state) {
  (void)state;
  char cycle[2048];
  /* Request -> RunRequest -> Value -> TensorMeta */
  int req = message_depth(&vmrpc__request__descriptor, cycle, sizeof(cycle));
  if (req < 0) fail_msg("recursive message type in Request: %s", cycle);
  assert_int_equal(req, 4);
  /* Response -> RunResponse -> RunOutput -> Value -> TensorMeta */
  int resp = message_depth(&vmrpc__response__descriptor, cycle, sizeof(cycle));
  if (resp < 0) fail_msg("recursive message type in Response: %s", cycle);
  assert_int_equal(resp, 5);
}

/* The walk finds a cycle through another message, and a direct one. */
static void test_walk_finds_recursion(void **state) {
  (void)state;
  ProtobufCFieldDescriptor a_fields[2], b_fields[1];
  ProtobufCMessageDescriptor a, b;
  memset(a_fields, 0, sizeof(a_fields));
  memset(b_fields, 0, sizeof(b_fields));
  memset(&a, 0, sizeof(a));
  memset(&b, 0, sizeof(b));
  a.magic = b.magic = PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC;
  a.name = "test.A";
  b.name = "test.B";
  a_fields[0].type = PROTOBUF_C_TYPE_INT64;
  a_fields[1].type = PROTOBUF_C_TYPE_MESSAGE;
  a_fields[1].descriptor = &vmrpc__tensor_meta__descriptor;
  a.n_fields = 2;
  a.fields = a_fields;
  b_fields[0].type = PROTOBUF_C_TYPE_MESSAGE;
  b_fields[0].descriptor = &a;
  b.n_fields = 1;
  b.fields = b_fields;
  char cycle[512];
  assert_int_equal(message_depth(&b, cycle, sizeof(cycle)), 3); /* B -> A -> TensorMeta */
  a_fields[1].descriptor = &b; /* A -> B -> A */
  assert_int_equal(message_depth(&b, cycle, sizeof(cycle)), -1);
  assert_string_equal(cycle, "test.B -> test.A -> test.B");
  b_fields[0].descriptor = &b; /* B -> B */
  assert_int_equal(message_depth(&b, cycle, sizeof(cycle)), -1);
  assert_string_equal(cycle, "test.B -> test.B");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_wire_messages_do_not_nest),
      cmocka_unit_test(test_walk_finds_recursion),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
