/* An executable whose device work is a known multiple of one operation,
 * for the compare tests and bench/bench_compare (no cmocka here). */
#ifndef VMRPC_TEST_GEMM_EXEC_H
#define VMRPC_TEST_GEMM_EXEC_H

#include "vm/executable.h"

/* main(x: float32[n, n]) computes x * x with cl.gemm `gemms` times into
 * one tensor and returns it: `gemms` sets the device work. n 1..4096,
 * gemms 1..1000. */
vm_status_t gemm_chain_exec(int n, int gemms, vm_executable_t **out);

#endif
