/* Executables that tests share. */
#ifndef VMRPC_TEST_SAMPLE_EXEC_H
#define VMRPC_TEST_SAMPLE_EXEC_H

#include "vm/executable.h"

/* Builds a verified executable that uses every opcode, every argument kind,
 * every constant kind (with scopes), nested If/Goto (forward and backward
 * jumps), several bytecode functions calling each other, packed functions,
 * typed and untyped parameters, two kernel modules and metadata.
 * Fails the test (cmocka) on error. Caller frees. */
vm_executable_t *sample_exec_rich(void);

/* Serialises exec; fails the test on error. Caller frees *out_data. */
void sample_exec_bytes(const vm_executable_t *exec, uint8_t **out_data, size_t *out_size);

#endif
