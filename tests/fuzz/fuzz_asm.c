/* libFuzzer target: the text form parser (vm_executable_asm); assembled text
 * must round-trip through write/load and disasm/asm.
 * The body lives in tests/agent/helper_fuzz.c, shared with the regression
 * suite tests/agent/test_fuzz_regressions.c. */
#include <stddef.h>
#include <stdint.h>

#include "helper_fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_asm_one(data, size);
  return 0;
}
