/* The chunk protocol (R7) shared by uploads and tensor transfers. */
#include "chunks.h"

#include <stdlib.h>
#include <string.h>

vm_status_t vma_chunks_init(vma_chunks_t *ck, uint64_t size, uint64_t chunk) {
  memset(ck, 0, sizeof(*ck));
  ck->size = size;
  ck->nchunks = size / chunk + (size % chunk != 0);
  ck->claimed = calloc(ck->nchunks / 8 + 1, 1);
  if (!ck->claimed) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  return VM_STATUS_OK;
}

/* Validates a chunk against R7 and claims it; session lock held. */
vm_status_t vma_chunk_claim(vma_chunks_t *ck, uint64_t chunk, uint64_t offset, size_t len,
                            const char *what, uint64_t id, uint64_t *out_idx) {
  if (offset >= ck->size || len > ck->size - offset)
    return vm_status_make(VM_OUT_OF_RANGE,
                          "%s %llu: chunk [%llu, +%zu) lies past the announced size of %llu "
                          "bytes",
                          what, (unsigned long long)id, (unsigned long long)offset, len,
                          (unsigned long long)ck->size);
  if (offset % chunk != 0)
    return vm_status_make(
        VM_INVALID_ARGUMENT, "%s %llu: chunk offset %llu is not a multiple of the chunk size %llu",
        what, (unsigned long long)id, (unsigned long long)offset, (unsigned long long)chunk);
  uint64_t want = ck->size - offset < chunk ? ck->size - offset : chunk;
  if (len != want)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "%s %llu: chunk at offset %llu carries %zu bytes, expected %llu (every "
                          "chunk but the last is exactly the chunk size)",
                          what, (unsigned long long)id, (unsigned long long)offset, len,
                          (unsigned long long)want);
  uint64_t idx = offset / chunk;
  if (ck->claimed[idx / 8] & (1u << (idx % 8)))
    return vm_status_make(VM_ALREADY_EXISTS, "%s %llu: the chunk at offset %llu was already sent",
                          what, (unsigned long long)id, (unsigned long long)offset);
  ck->claimed[idx / 8] |= (uint8_t)(1u << (idx % 8));
  ck->writers++;
  *out_idx = idx;
  return VM_STATUS_OK;
}

/* Finishes a claimed chunk; session lock held. A failed copy can be sent
 * again. */
void vma_chunk_done(vma_chunks_t *ck, uint64_t idx, size_t len, int ok) {
  ck->writers--;
  if (ok)
    ck->received += len;
  else
    ck->claimed[idx / 8] &= (uint8_t) ~(1u << (idx % 8));
}

/* vma_chunk_done() taking the session lock. */
vm_status_t vma_chunks_complete(const vma_chunks_t *ck) {
  if (ck->received == ck->size && ck->writers == 0) return VM_STATUS_OK;
  return vm_status_make(VM_FAILED_PRECONDITION,
                        "upload incomplete: %llu of %llu bytes received; send the missing "
                        "chunks first",
                        (unsigned long long)ck->received, (unsigned long long)ck->size);
}
