/* The agent's wire messages cannot nest without bound: no message type of
 * vmrpc.proto contains itself, directly or through others, so protobuf-c's
 * recursive unpack of a Request or Response goes only as deep as the
 * schema (an ONNX model can nest, and the compiler bounds it on the wire
 * first: compiler/src/onnx_wire.c). If this fails, a message type became
 * recursive: bound its depth before unpacking, as the compiler does. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "vmrpc.pb-c.h"

/* The deepest nesting of message fields below d (d itself is 1); fails
 * the test when d is reached again while it is being walked. */
static int depth_of(const ProtobufCMessageDescriptor *d, const ProtobufCMessageDescriptor **path,
                    int n) {
  for (int i = 0; i < n; i++)
    if (path[i] == d) fail_msg("message %s contains itself (nesting without bound)", d->name);
  if (n >= 64) fail_msg("messages nest more than 64 deep below %s", path[0]->name);
  path[n] = d;
  int deepest = 0;
  for (unsigned f = 0; f < d->n_fields; f++) {
    if (d->fields[f].type != PROTOBUF_C_TYPE_MESSAGE) continue;
    int k = depth_of(d->fields[f].descriptor, path, n + 1);
    if (k > deepest) deepest = k;
  }
  return deepest + 1;
}

static void test_requests_and_responses_nest_boundedly(void **state) {
  (void)state;
  const ProtobufCMessageDescriptor *path[64];
  int req = depth_of(&vmrpc__request__descriptor, path, 0);
  int resp = depth_of(&vmrpc__response__descriptor, path, 0);
  print_message("Request nests %d messages deep, Response %d\n", req, resp);
  /* Request > RunRequest > Value > TensorMeta, and the like */
  assert_true(req <= 8);
  assert_true(resp <= 8);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_requests_and_responses_nest_boundedly),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
