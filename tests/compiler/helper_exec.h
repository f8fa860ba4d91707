/* Reading compiled executables in the compiler suites. */
#ifndef VMRPC_TEST_HELPER_EXEC_H
#define VMRPC_TEST_HELPER_EXEC_H

#include <stdint.h>

#include "vm/executable.h"

/* Calls of the packed function name in the bytecode function "main" (which
 * must exist: the test fails otherwise). */
uint32_t count_calls(const vm_executable_t *x, const char *name);

/* Bytes of the executable's tensor constants of dtype dt, all of them
 * (what the file carries of that type). */
uint64_t tensor_const_bytes(const vm_executable_t *x, vm_dtype_t dt);

#endif
