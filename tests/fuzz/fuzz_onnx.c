/* libFuzzer target: the ONNX importer on arbitrary bytes (vmcc_onnx_compile:
 * protobuf parse, tensor and attribute checks, shape inference, folding and
 * lowering). Seeds: the Debian libonnx-testdata node models, copied by
 * scripts/fuzz.sh, and the If/Loop/Scan models of corpus/fuzz_onnx. Every input must end in a status or an executable, never
 * a crash, a leak or an out-of-bounds access. */
#include <stddef.h>
#include <stdint.h>

#include "vm/executable.h"
#include "vmcompiler/onnx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  vm_executable_t *e = NULL;
  vmcc_onnx_report_t rep;
  vm_status_t st = vmcc_onnx_compile(data, size, NULL, NULL, &e, &rep);
  vm_status_free(st);
  vm_executable_free(e);
  return 0;
}
