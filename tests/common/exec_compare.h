/* Deep comparison of executables for test suites. */
#ifndef VMRPC_TEST_EXEC_COMPARE_H
#define VMRPC_TEST_EXEC_COMPARE_H

#include "vm/executable.h"

/* Asserts (cmocka) that a and b are equal field for field: version, every
 * function with its parameters, every constant with its data (b's tensor
 * data VM_TENSOR_ALIGN-aligned), the code, kernels and metadata. */
void exec_assert_equal(const vm_executable_t *a, const vm_executable_t *b);

#endif
