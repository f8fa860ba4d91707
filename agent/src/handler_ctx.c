/* Helpers every handler shares (handler_ctx.h). */
#include "handler_ctx.h"

#include <stdlib.h>
#include <string.h>

void *vma_own(vma_ctx_t *c, void *p) {
  for (size_t i = 0; i < sizeof(c->owned) / sizeof(c->owned[0]); i++) {
    if (!c->owned[i]) {
      c->owned[i] = p;
      return p;
    }
  }
  free(p); /* programming error: more blocks than slots */
  return NULL;
}

vm_status_t vma_check_name(const char *name, const char *what) {
  if (!name || !*name) return vm_status_make(VM_INVALID_ARGUMENT, "%s is empty", what);
  size_t n = strnlen(name, VMA_MAX_NAME + 1);
  if (n > VMA_MAX_NAME)
    return vm_status_make(VM_INVALID_ARGUMENT, "%s is longer than %d bytes", what, VMA_MAX_NAME);
  return VM_STATUS_OK;
}

vm_status_t vma_no_payload(const vma_ctx_t *c) {
  if (c->payload_len == 0) return VM_STATUS_OK;
  return vm_status_make(VM_INVALID_ARGUMENT,
                        "%s carries no payload, but %zu bytes followed the envelope",
                        vmp_op_name(c->rq->op_case), c->payload_len);
}

vm_status_t vma_missing(const char *what) {
  return vm_status_make(VM_INVALID_ARGUMENT, "malformed request: %s is missing", what);
}

vm_status_t vma_exec_not_found(uint64_t id) {
  return vm_status_make(VM_NOT_FOUND, "executable %llu not found in this session",
                        (unsigned long long)id);
}
