/* The chunk protocol (R7 in docs/protocol.md) shared by executable uploads
 * and tensor transfers, and their teardown (chunks.c).
 *
 * A chunk is claimed under the session lock (vma_chunk_claim), copied
 * outside it, and finished under it again (vma_chunk_done / _finish); the
 * claim keeps the upload or transfer alive meanwhile, since whoever ends it
 * waits until no writers are left. */
#ifndef VMA_CHUNKS_H
#define VMA_CHUNKS_H

#include "agent_internal.h"

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
/* vma_chunk_done() taking the session lock. */
void vma_chunk_finish(vma_session_t *s, vma_chunks_t *ck, uint64_t idx, size_t len, int ok);
/* OK when every byte arrived and no copy is in progress; FAILED_PRECONDITION
 * "upload incomplete: ..." otherwise. */
vm_status_t vma_chunks_complete(const vma_chunks_t *ck);

/* Gives back what an upload of size bytes reserved in session s: its staging
 * bytes, the agent's host budget and, when slot, its upload slot. Takes the
 * session lock. */
void vma_upload_unreserve(vmagent_t *a, vma_session_t *s, uint64_t size, int slot);
/* Frees an upload out of its session's table (u may be NULL). */
void vma_upload_free(vma_upload_t *u);
/* Frees a transfer out of its session's table: its tensor and tracking (t
 * may be NULL). */
void vma_transfer_free(vma_transfer_t *t);

#endif /* VMA_CHUNKS_H */
