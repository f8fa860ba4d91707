/* libFuzzer target: the agent's request dispatcher (vmagent_handle_message)
 * on an in-process agent (cpu device, no network); the input is a sequence
 * of length-prefixed messages on one connection.
 * The body lives in tests/agent/helper_fuzz.c, shared with the regression
 * suite tests/agent/test_fuzz_regressions.c. */
#include <stddef.h>
#include <stdint.h>

#include "helper_fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_request_one(data, size);
  return 0;
}
