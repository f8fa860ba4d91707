#include "gemm_exec.h"

#include <stdio.h>
#include <stdlib.h>

vm_status_t gemm_chain_exec(int n, int gemms, vm_executable_t **out) {
  if (n < 1 || n > 4096 || gemms < 1 || gemms > 1000)
    return vm_status_make(VM_INVALID_ARGUMENT, "gemm_chain_exec: n %d, gemms %d", n, gemms);
  size_t cap = 1024 + (size_t)gemms * 64, len = 0;
  char *t = malloc(cap);
  if (!t) return vm_status_make(VM_RESOURCE_EXHAUSTED, "gemm_chain_exec: out of memory");
  len += (size_t)snprintf(t + len, cap - len,
                          ".packed $cl.gemm\n.packed $vm.builtin.alloc_storage\n"
                          ".packed $vm.builtin.alloc_tensor\n"
                          ".const c0 float 1\n.const c1 float 0\n.const c2 dtype float32\n"
                          ".const c3 shape [%d]\n.const c4 string \"global\"\n"
                          ".const c5 shape [%d, %d]\n"
                          ".func @main(x: float32[%d, %d]) regs 3 {\n"
                          "  %%1 = call $vm.builtin.alloc_storage(%%vm, c3, 0, c2, c4)\n"
                          "  %%2 = call $vm.builtin.alloc_tensor(%%1, 0, c5, c2)\n",
                          n * n, n, n, n, n);
  for (int i = 0; i < gemms; i++)
    len += (size_t)snprintf(t + len, cap - len, "  call $cl.gemm(%%0, %%0, 0, 0, c0, c1, %%2)\n");
  len += (size_t)snprintf(t + len, cap - len, "  ret %%2\n}\n");
  vm_status_t st = vm_executable_asm(t, len, NULL, out);
  free(t);
  return st;
}
