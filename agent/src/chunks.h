/* The chunk protocol (R7 in docs/protocol.md) shared by executable uploads
 * and tensor transfers (chunks.c); the teardown of uploads and transfers is
 * the session's (session.h).
 *
 * A chunk is claimed under the session lock (vma_chunk_claim), copied
 * outside it, and finished under it again (vma_chunk_done / _finish); the
 * claim keeps the upload or transfer alive meanwhile, since whoever ends it
 * waits until no writers are left. */
#ifndef VMA_CHUNKS_H
#define VMA_CHUNKS_H

#include <stdint.h>
#include <stddef.h>

#include "vmrpc/status.h"

/* A chunked receive: which chunks arrived. Shared by uploads and tensor
 * transfers. */
typedef struct vma_chunks {
  uint64_t size;     /* announced bytes */
  uint64_t received; /* bytes of chunks fully copied */
  uint64_t nchunks;
  uint8_t *claimed; /* bitmap: chunk taken by a request (maybe still copying) */
  uint32_t writers; /* chunk copies in progress (outside the session lock) */
} vma_chunks_t;

/* Sets up tracking of size bytes in chunks of chunk bytes. */
vm_status_t vma_chunks_init(vma_chunks_t *ck, uint64_t size, uint64_t chunk);
/* Validates a chunk of what ("upload", "transfer") id against R7 and claims
 * it; session lock held. OUT_OF_RANGE, INVALID_ARGUMENT or ALREADY_EXISTS
 * naming the problem. */
vm_status_t vma_chunk_claim(vma_chunks_t *ck, uint64_t chunk, uint64_t offset, size_t len,
                            const char *what, uint64_t id, uint64_t *out_idx);
/* Finishes a claimed chunk; session lock held. A failed copy can be sent
 * again. */
void vma_chunk_done(vma_chunks_t *ck, uint64_t idx, size_t len, int ok);
/* OK when every byte arrived and no copy is in progress; FAILED_PRECONDITION
 * "upload incomplete: ..." otherwise. */
vm_status_t vma_chunks_complete(const vma_chunks_t *ck);

#endif /* VMA_CHUNKS_H */
