/* Executable upload (UploadBegin, the chunks, the store hit) and the
 * chunk pipeline that tensor transfers share. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "vmrpc/file.h"
#include "ops_internal.h"

/* ---------------------------------------------------------------- upload */

/* Chunks sent after an UploadBegin (upload) or a TensorBegin (tensor). */
typedef struct send_ctx {
  vmc_conn_t *c;
  const uint8_t *data;
  uint64_t size;
  uint64_t id; /* upload or transfer id */
  int tensor;
} send_ctx_t;

static uint64_t send_chunk_size(void *ctx, uint64_t idx) {
  send_ctx_t *u = ctx;
  uint64_t cb = u->c->limits.chunk_bytes;
  return vmci_chunk_len(u->size, idx * cb, cb);
}

static vm_status_t send_make(void *ctx, uint64_t idx, vmci_msg_t **out_msg, uint64_t *out_id) {
  send_ctx_t *u = ctx;
  uint64_t off = idx * u->c->limits.chunk_bytes;
  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__UploadChunkRequest uc = VMRPC__UPLOAD_CHUNK_REQUEST__INIT;
  Vmrpc__TensorChunkRequest tc = VMRPC__TENSOR_CHUNK_REQUEST__INIT;
  if (u->tensor) {
    tc.transfer_id = u->id;
    tc.offset = off;
    req.op_case = OP(TENSOR_CHUNK);
    req.tensor_chunk = &tc;
  } else {
    uc.upload_id = u->id;
    uc.offset = off;
    req.op_case = OP(UPLOAD_CHUNK);
    req.upload_chunk = &uc;
  }
  VM_RETURN_IF_ERROR(vmci_build(u->c, &req, u->data + off, send_chunk_size(ctx, idx), out_msg));
  *out_id = req.id;
  return VM_STATUS_OK;
}

vm_status_t vmci_ignore_reply(void *ctx, uint64_t idx, vmci_reply_t *r) {
  (void)ctx;
  (void)idx;
  (void)r;
  return VM_STATUS_OK;
}

/* Sends size bytes of data as the chunks of upload or transfer id. */
vm_status_t vmci_send_chunks(vmc_conn_t *c, int tensor, uint64_t id, const void *data,
                             uint64_t size, vmc_progress_fn progress, void *user) {
  send_ctx_t u = {c, data, size, id, tensor};
  vmci_pipeline_t p;
  memset(&p, 0, sizeof(p));
  p.count = (size + c->limits.chunk_bytes - 1) / c->limits.chunk_bytes;
  p.make = send_make;
  p.done = vmci_ignore_reply;
  p.chunk_size = send_chunk_size;
  p.expect = tensor ? ROP(TENSOR_CHUNK) : ROP(UPLOAD_CHUNK);
  p.ctx = &u;
  p.progress = progress;
  p.user = user;
  p.progress_total = size;
  p.what = tensor ? "TensorChunk" : "UploadChunk";
  return vmci_pipeline_run(c, &p);
}

/* UploadBegin for size bytes hashing to sha: *present with *exec_id (a
 * store hit), or the *upload_id of a new upload. */
static vm_status_t upload_begin(vmc_conn_t *c, const uint8_t sha[32], uint64_t size, int *present,
                                uint64_t *exec_id, uint64_t *upload_id) {
  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__UploadBeginRequest b = VMRPC__UPLOAD_BEGIN_REQUEST__INIT;
  b.sha256.data = (uint8_t *)sha;
  b.sha256.len = 32;
  b.size = size;
  req.op_case = OP(UPLOAD_BEGIN);
  req.upload_begin = &b;
  vmci_reply_t r;
  VM_RETURN_IF_ERROR(vmci_call_plain(c, &req, "UploadBegin", &r));
  const Vmrpc__UploadBeginResponse *br = r.resp->upload_begin;
  *present = br && br->present;
  *exec_id = br ? br->exec_id : 0;
  *upload_id = br ? br->upload_id : 0;
  vmci_reply_free(&r);
  if (*present && *exec_id == 0)
    return vm_status_make(VM_INTERNAL, "the agent reported a store hit without an exec id");
  if (!*present && *upload_id == 0)
    return vm_status_make(VM_INTERNAL, "the agent started an upload without an upload id");
  return VM_STATUS_OK;
}

/* The chunks and the UploadCommit of upload_id. */
static vm_status_t upload_finish(vmc_conn_t *c, uint64_t upload_id, const void *data, size_t size,
                                 vmc_progress_fn progress, void *user, uint64_t *exec_id) {
  VM_RETURN_IF_ERROR(vmci_send_chunks(c, 0, upload_id, data, size, progress, user));
  Vmrpc__Request creq = VMRPC__REQUEST__INIT;
  Vmrpc__UploadCommitRequest cm = VMRPC__UPLOAD_COMMIT_REQUEST__INIT;
  cm.upload_id = upload_id;
  creq.op_case = OP(UPLOAD_COMMIT);
  creq.upload_commit = &cm;
  vmci_reply_t r;
  VM_RETURN_IF_ERROR(vmci_call_plain(c, &creq, "UploadCommit", &r));
  *exec_id = r.resp->upload_commit ? r.resp->upload_commit->exec_id : 0;
  vmci_reply_free(&r);
  if (*exec_id == 0)
    return vm_status_make(VM_INTERNAL, "the agent committed the upload without an exec id");
  return VM_STATUS_OK;
}

/* vmc_upload_memory() with the hash already in res->sha256. */
vm_status_t vmci_upload_hashed(vmc_conn_t *c, const void *data, size_t size,
                               vmc_progress_fn progress, void *user, vmc_exec_t *out_exec,
                               vmc_upload_result_t *res) {
  int present;
  uint64_t exec_id, upload_id;
  VM_RETURN_IF_ERROR(upload_begin(c, res->sha256, size, &present, &exec_id, &upload_id));
  if (!present) {
    VM_RETURN_IF_ERROR(upload_finish(c, upload_id, data, size, progress, user, &exec_id));
    res->bytes_sent = size;
  }
  res->store_hit = present;
  out_exec->id = exec_id;
  return VM_STATUS_OK;
}

vm_status_t vmc_upload_memory(vmc_conn_t *c, const void *data, size_t size,
                              vmc_progress_fn progress, void *user, vmc_exec_t *out_exec,
                              vmc_upload_result_t *out_result) {
  VM_RETURN_IF_ERROR(vmci_need_conn(c));
  if (!out_exec) return vm_status_make(VM_INVALID_ARGUMENT, "vmc_upload: out_exec is NULL");
  if (size == 0 || !data)
    return vm_status_make(VM_INVALID_ARGUMENT, "the executable is empty: nothing to upload");
  vmc_upload_result_t res;
  memset(&res, 0, sizeof(res));
  vm_sha256(data, size, res.sha256);
  VM_RETURN_IF_ERROR(vmci_upload_hashed(c, data, size, progress, user, out_exec, &res));
  if (out_result) *out_result = res;
  return VM_STATUS_OK;
}

/* A file whose hash this process already knows (hashmemo.c): UploadBegin
 * first, and the file is read only when the agent lacks it. */
static vm_status_t upload_file_known(vmc_conn_t *c, const char *path, const struct stat *st,
                                     uint64_t cap, vmc_progress_fn progress, void *user,
                                     vmc_exec_t *out_exec, vmc_upload_result_t *res) {
  int present;
  uint64_t exec_id, upload_id;
  VM_RETURN_IF_ERROR(
      upload_begin(c, res->sha256, (uint64_t)st->st_size, &present, &exec_id, &upload_id));
  if (!present) {
    uint8_t *data;
    size_t size;
    VM_RETURN_IF_ERROR(vm_read_file(path, cap, &data, &size));
    vm_status_t st2 = VM_STATUS_OK;
    if (size != (uint64_t)st->st_size)
      st2 = vm_status_make(VM_ABORTED,
                           "the file changed while it was being uploaded (%llu "
                           "bytes announced, %zu read): upload it again",
                           (unsigned long long)st->st_size, size);
    else
      st2 = upload_finish(c, upload_id, data, size, progress, user, &exec_id);
    free(data);
    if (st2) {
      /* Any failure forgets the remembered hash (DATA_LOSS: the bytes no
       * longer hash to it); the next upload hashes the file again. */
      vmci_memo_forget(st);
      return st2;
    }
    res->bytes_sent = size;
  }
  res->store_hit = present;
  out_exec->id = exec_id;
  return VM_STATUS_OK;
}

vm_status_t vmc_upload_file(vmc_conn_t *c, const char *path, vmc_progress_fn progress, void *user,
                            vmc_exec_t *out_exec, vmc_upload_result_t *out_result) {
  VM_RETURN_IF_ERROR(vmci_need_conn(c));
  if (!path) return vm_status_make(VM_INVALID_ARGUMENT, "no executable path given");
  if (!out_exec) return vm_status_make(VM_INVALID_ARGUMENT, "vmc_upload: out_exec is NULL");
  uint64_t cap = c->limits.max_executable_bytes ? c->limits.max_executable_bytes : UINT64_MAX;
  vmc_upload_result_t res;
  memset(&res, 0, sizeof(res));
  struct stat before, after;
  int have_before = stat(path, &before) == 0;
  if (have_before && S_ISREG(before.st_mode) && before.st_size > 0 &&
      (uint64_t)before.st_size <= cap && vmci_memo_get(&before, res.sha256)) {
    vm_status_t st = upload_file_known(c, path, &before, cap, progress, user, out_exec, &res);
    if (st) return vm_status_annotate(st, "uploading '%s'", path);
    if (out_result) *out_result = res;
    return VM_STATUS_OK;
  }
  time_t read_start = time(NULL);
  uint8_t *data;
  size_t size;
  vm_status_t st = vm_read_file(path, cap, &data, &size);
  if (st) {
    if (vm_status_code(st) == VM_RESOURCE_EXHAUSTED && cap != UINT64_MAX)
      return vm_status_annotate(st, "the agent accepts executables up to %llu bytes",
                                (unsigned long long)cap);
    return st;
  }
  if (size == 0) {
    free(data);
    return vm_status_annotate(
        vm_status_make(VM_INVALID_ARGUMENT, "the executable is empty: nothing to upload"),
        "uploading '%s'", path);
  }
  vm_sha256(data, size, res.sha256);
  if (have_before && stat(path, &after) == 0 && (uint64_t)after.st_size == size)
    vmci_memo_put(&before, &after, read_start, res.sha256);
  st = vmci_upload_hashed(c, data, size, progress, user, out_exec, &res);
  free(data);
  if (st) return vm_status_annotate(st, "uploading '%s'", path);
  if (out_result) *out_result = res;
  return VM_STATUS_OK;
}

vm_status_t vmc_free_exec(vmc_conn_t *c, vmc_exec_t exec) {
  VM_RETURN_IF_ERROR(vmci_need_conn(c));
  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__FreeExecutableRequest f = VMRPC__FREE_EXECUTABLE_REQUEST__INIT;
  f.exec_id = exec.id;
  req.op_case = OP(FREE_EXECUTABLE);
  req.free_executable = &f;
  return vmci_call_ack(c, &req, NULL, 0, "FreeExecutable");
}
