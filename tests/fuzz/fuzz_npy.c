/* libFuzzer target: the .npy reader of libvmclient (vmc_npy_read_memory); a
 * parsed tensor must write back and read again identically.
 * The body lives in tests/agent/helper_fuzz.c, shared with the regression
 * suite tests/agent/test_fuzz_regressions.c. */
#include <stddef.h>
#include <stdint.h>

#include "helper_fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_npy_one(data, size);
  return 0;
}
