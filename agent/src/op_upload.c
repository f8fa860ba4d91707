/* Executables: the chunked upload (UploadBegin / UploadChunk /
 * UploadCommit) into the store, and the session's executable handles. */
#include <stdlib.h>
#include <string.h>

#include "op_upload.h"

#include "chunks.h"
#include "handlers.h"

/* Adds an executable handle for a retained store entry (taking it over:
 * released on failure). */
vm_status_t vma_add_execref(vma_ctx_t *c, vma_exec_entry_t *e, uint64_t *out_id) {
  vma_session_t *s = c->s;
  vma_execref_t *r = calloc(1, sizeof(*r));
  vm_status_t st = VM_STATUS_OK;
  pthread_mutex_lock(&s->lock);
  if (!r) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  } else if (s->num_execs >= VMA_MAX_EXECS) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED,
                        "this session holds %u executables, the limit; FreeExecutable some",
                        s->num_execs);
  } else {
    r->id = vma_new_handle(s);
    r->entry = e;
    r->next = s->execs;
    s->execs = r;
    s->num_execs++;
    *out_id = r->id;
  }
  pthread_mutex_unlock(&s->lock);
  if (st) {
    free(r);
    vma_store_release(c->a->store, e);
  }
  return st;
}

vm_status_t vma_op_upload_begin(vma_ctx_t *c) {
  const Vmrpc__UploadBeginRequest *q = c->rq->upload_begin;
  vmagent_t *a = c->a;
  vma_session_t *s = c->s;
  if (q->sha256.len != VM_SHA256_BYTES)
    return vm_status_make(VM_INVALID_ARGUMENT, "sha256 must be %d bytes, got %zu", VM_SHA256_BYTES,
                          q->sha256.len);
  if (q->size == 0) return vm_status_make(VM_INVALID_ARGUMENT, "executable size is 0");
  if (q->size > a->cfg.max_executable_bytes)
    return vm_status_make(
        VM_RESOURCE_EXHAUSTED, "executable of %llu bytes exceeds this agent's limit of %llu bytes",
        (unsigned long long)q->size, (unsigned long long)a->cfg.max_executable_bytes);
  Vmrpc__UploadBeginResponse *r =
      VMA_RESPONSE(c, UPLOAD_BEGIN, upload_begin, upload_begin_response);

  vma_exec_entry_t *e = NULL;
  VM_RETURN_IF_ERROR(vma_store_lookup(a->store, q->sha256.data, q->size, &e));
  if (e) {
    VM_RETURN_IF_ERROR(vma_add_execref(c, e, &r->exec_id));
    r->present = 1;
    return VM_STATUS_OK;
  }

  /* Checked and reserved in one step, before anything is allocated:
   * concurrent UploadBegins cannot together pass the limits. */
  pthread_mutex_lock(&s->lock);
  vm_status_t st =
      s->num_uploads >= VMA_MAX_UPLOADS
          ? vm_status_make(VM_RESOURCE_EXHAUSTED,
                           "this session already has %d uploads in progress; commit them first",
                           VMA_MAX_UPLOADS)
          : vma_check_session_mem_locked(a, s, q->size, "an executable upload");
  if (!st) st = vm_budget_charge(&a->host, q->size, "an executable upload's staging");
  if (!st) {
    s->num_uploads++;
    s->staging_bytes += q->size;
  }
  pthread_mutex_unlock(&s->lock);
  if (st) return st;
  vma_upload_t *u = calloc(1, sizeof(*u));
  if (!u) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  } else {
    st = vma_chunks_init(&u->ck, q->size, a->cfg.chunk_bytes);
    if (!st && !(u->data = malloc(q->size)))
      st = vm_status_make(VM_RESOURCE_EXHAUSTED, "cannot allocate %llu bytes for the upload",
                          (unsigned long long)q->size);
  }
  if (st) {
    vma_upload_unreserve(a, s, q->size, 1);
    vma_upload_free(u);
    return st;
  }
  pthread_mutex_lock(&s->lock);
  memcpy(u->hash, q->sha256.data, VM_SHA256_BYTES);
  u->id = vma_new_handle(s);
  u->next = s->uploads;
  s->uploads = u;
  r->upload_id = u->id;
  pthread_mutex_unlock(&s->lock);
  return VM_STATUS_OK;
}

static vma_upload_t *vma_find_upload(vma_session_t *s, uint64_t id) {
  for (vma_upload_t *u = s->uploads; u; u = u->next)
    if (u->id == id) return u;
  return NULL;
}

static vm_status_t vma_upload_not_found(uint64_t id) {
  return vm_status_make(VM_NOT_FOUND,
                        "upload %llu not found in this session (committed, failed, or never "
                        "begun)",
                        (unsigned long long)id);
}

vm_status_t vma_op_upload_chunk(vma_ctx_t *c) {
  const Vmrpc__UploadChunkRequest *q = c->rq->upload_chunk;
  vma_session_t *s = c->s;
  uint64_t idx = 0;
  pthread_mutex_lock(&s->lock);
  vma_upload_t *u = vma_find_upload(s, q->upload_id);
  vm_status_t st = u ? vma_chunk_claim(&u->ck, c->a->cfg.chunk_bytes, q->offset, c->payload_len,
                                       "upload", u->id, &idx)
                     : vma_upload_not_found(q->upload_id);
  pthread_mutex_unlock(&s->lock);
  if (st) return st;
  /* The claim keeps u alive (commit waits for writers) while the bytes go
   * straight into the staging buffer, outside the lock. */
  memcpy(u->data + q->offset, c->payload, c->payload_len);
  vma_chunk_finish(s, &u->ck, idx, c->payload_len, 1);
  VMA_RESPONSE(c, UPLOAD_CHUNK, upload_chunk, upload_chunk_response);
  return VM_STATUS_OK;
}

vm_status_t vma_op_upload_commit(vma_ctx_t *c) {
  const Vmrpc__UploadCommitRequest *q = c->rq->upload_commit;
  vma_session_t *s = c->s;
  pthread_mutex_lock(&s->lock);
  vma_upload_t *u = vma_find_upload(s, q->upload_id);
  vm_status_t st = u ? vma_chunks_complete(&u->ck) : vma_upload_not_found(q->upload_id);
  if (!st) { /* out of the table: nobody else can reach it now */
    vma_upload_t **pp = &s->uploads;
    while (*pp != u) pp = &(*pp)->next;
    *pp = u->next;
    s->num_uploads--;
  }
  pthread_mutex_unlock(&s->lock);
  if (st) return st;

  uint8_t got[VM_SHA256_BYTES];
  vm_sha256(u->data, u->ck.size, got);
  vma_exec_entry_t *e = NULL;
  if (memcmp(got, u->hash, VM_SHA256_BYTES) != 0) {
    char want_hex[2 * VM_SHA256_BYTES + 1], got_hex[2 * VM_SHA256_BYTES + 1];
    vm_sha256_hex(u->hash, want_hex);
    vm_sha256_hex(got, got_hex);
    st = vm_status_make(VM_DATA_LOSS,
                        "executable hash mismatch: announced %.16s..., received bytes hash to "
                        "%.16s...; the data was damaged in transit: upload again",
                        want_hex, got_hex);
  } else {
    st = vma_store_insert(c->a->store, u->hash, u->data, u->ck.size, &e);
  }
  vma_upload_unreserve(c->a, s, u->ck.size, 0);
  vma_upload_free(u);
  if (st) return st;
  Vmrpc__UploadCommitResponse *r =
      VMA_RESPONSE(c, UPLOAD_COMMIT, upload_commit, upload_commit_response);
  VM_RETURN_IF_ERROR(vma_add_execref(c, e, &r->exec_id));
  return VM_STATUS_OK;
}

vm_status_t vma_op_free_executable(vma_ctx_t *c) {
  const Vmrpc__FreeExecutableRequest *q = c->rq->free_executable;
  vma_session_t *s = c->s;
  pthread_mutex_lock(&s->lock);
  vma_execref_t **pp = &s->execs;
  while (*pp && (*pp)->id != q->exec_id) pp = &(*pp)->next;
  vma_execref_t *e = *pp;
  if (e) {
    *pp = e->next;
    s->num_execs--;
  }
  pthread_mutex_unlock(&s->lock);
  if (!e) return vma_exec_not_found(q->exec_id);
  /* VMs made from it hold their own reference: they keep working. */
  vma_store_release(c->a->store, e->entry);
  free(e);
  VMA_RESPONSE(c, FREE_EXECUTABLE, free_executable, free_executable_response);
  return VM_STATUS_OK;
}
