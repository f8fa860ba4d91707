/* The operations of libvmclient: one function per protocol operation, plus
 * the chunked transfers (executable upload, tensor in, tensor out). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "vm/base.h"
#include "vmc_internal.h"

#define OP(name) VMRPC__REQUEST__OP_##name
#define ROP(name) VMRPC__RESPONSE__OP_##name

static vm_status_t need_func(const char *func) {
  if (!func || !func[0])
    return vm_status_make(VM_INVALID_ARGUMENT, "no function name given (e.g. \"main\")");
  return VM_STATUS_OK;
}

static vm_status_t need_conn(const vmc_conn_t *c) {
  if (!c) return vm_status_make(VM_INVALID_ARGUMENT, "connection is NULL: call vmc_connect first");
  return VM_STATUS_OK;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Formats "Op func[path]" for messages. */
static void path_str(char *buf, size_t cap, const char *op, const char *func, const uint32_t *path,
                     uint32_t path_len) {
  int n = snprintf(buf, cap, "%s %s", op, func ? func : "?");
  for (uint32_t i = 0; i < path_len && n > 0 && (size_t)n < cap; i++)
    n += snprintf(buf + n, cap - (size_t)n, "[%u]", path[i]);
}

/* The reply case of req's operation (vmproto/ops.h). */
static Vmrpc__Response__OpCase reply_of(const Vmrpc__Request *req) {
  const vmp_op_t *o = vmp_op_find(req->op_case);
  return o ? o->reply : VMRPC__RESPONSE__OP__NOT_SET;
}

/* One request with the connection's request timeout and no payload. */
static vm_status_t call(vmc_conn_t *c, Vmrpc__Request *req, const char *what, vmci_reply_t *out) {
  return vmci_call(c, req, NULL, 0, reply_of(req), c->request_timeout_ms, what, out);
}

/* One request whose reply carries nothing but success. */
static vm_status_t call_ack(vmc_conn_t *c, Vmrpc__Request *req, const void *payload, size_t plen,
                            const char *what) {
  vmci_reply_t r;
  VM_RETURN_IF_ERROR(
      vmci_call(c, req, payload, plen, reply_of(req), c->request_timeout_ms, what, &r));
  vmci_reply_free(&r);
  return VM_STATUS_OK;
}

/* Bytes of the chunk at off of a total-byte transfer in chunks of cb. */
static uint64_t chunk_len(uint64_t total, uint64_t off, uint64_t cb) {
  return total - off < cb ? total - off : cb;
}

/* ------------------------------------------------------------------ ping */

vm_status_t vmc_ping(vmc_conn_t *c, double *out_rtt_s) {
  VM_RETURN_IF_ERROR(need_conn(c));
  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__PingRequest p = VMRPC__PING_REQUEST__INIT;
  req.op_case = OP(PING);
  req.ping = &p;
  vmci_reply_t r;
  double t0 = now_s();
  VM_RETURN_IF_ERROR(call(c, &req, "Ping", &r));
  double t1 = now_s();
  vmci_reply_free(&r);
  if (out_rtt_s) *out_rtt_s = t1 - t0;
  return VM_STATUS_OK;
}

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
  return chunk_len(u->size, idx * cb, cb);
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

static vm_status_t ignore_reply(void *ctx, uint64_t idx, vmci_reply_t *r) {
  (void)ctx;
  (void)idx;
  (void)r;
  return VM_STATUS_OK;
}

/* Sends size bytes of data as the chunks of upload or transfer id. */
static vm_status_t send_chunks(vmc_conn_t *c, int tensor, uint64_t id, const void *data,
                               uint64_t size, vmc_progress_fn progress, void *user) {
  send_ctx_t u = {c, data, size, id, tensor};
  vmci_pipeline_t p;
  memset(&p, 0, sizeof(p));
  p.count = (size + c->limits.chunk_bytes - 1) / c->limits.chunk_bytes;
  p.make = send_make;
  p.done = ignore_reply;
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
  VM_RETURN_IF_ERROR(call(c, &req, "UploadBegin", &r));
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
  VM_RETURN_IF_ERROR(send_chunks(c, 0, upload_id, data, size, progress, user));
  Vmrpc__Request creq = VMRPC__REQUEST__INIT;
  Vmrpc__UploadCommitRequest cm = VMRPC__UPLOAD_COMMIT_REQUEST__INIT;
  cm.upload_id = upload_id;
  creq.op_case = OP(UPLOAD_COMMIT);
  creq.upload_commit = &cm;
  vmci_reply_t r;
  VM_RETURN_IF_ERROR(call(c, &creq, "UploadCommit", &r));
  *exec_id = r.resp->upload_commit ? r.resp->upload_commit->exec_id : 0;
  vmci_reply_free(&r);
  if (*exec_id == 0)
    return vm_status_make(VM_INTERNAL, "the agent committed the upload without an exec id");
  return VM_STATUS_OK;
}

/* vmc_upload_memory() with the hash already in res->sha256. */
static vm_status_t upload_hashed(vmc_conn_t *c, const void *data, size_t size,
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
  VM_RETURN_IF_ERROR(need_conn(c));
  if (!out_exec) return vm_status_make(VM_INVALID_ARGUMENT, "vmc_upload: out_exec is NULL");
  if (size == 0 || !data)
    return vm_status_make(VM_INVALID_ARGUMENT, "the executable is empty: nothing to upload");
  vmc_upload_result_t res;
  memset(&res, 0, sizeof(res));
  vm_sha256(data, size, res.sha256);
  VM_RETURN_IF_ERROR(upload_hashed(c, data, size, progress, user, out_exec, &res));
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
  VM_RETURN_IF_ERROR(need_conn(c));
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
  st = upload_hashed(c, data, size, progress, user, out_exec, &res);
  free(data);
  if (st) return vm_status_annotate(st, "uploading '%s'", path);
  if (out_result) *out_result = res;
  return VM_STATUS_OK;
}

vm_status_t vmc_free_exec(vmc_conn_t *c, vmc_exec_t exec) {
  VM_RETURN_IF_ERROR(need_conn(c));
  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__FreeExecutableRequest f = VMRPC__FREE_EXECUTABLE_REQUEST__INIT;
  f.exec_id = exec.id;
  req.op_case = OP(FREE_EXECUTABLE);
  req.free_executable = &f;
  return call_ack(c, &req, NULL, 0, "FreeExecutable");
}

/* -------------------------------------------------------------------- VMs */

/* The wire form of a VM's device list (at most 64). */
static vm_status_t device_specs(const vmc_device_spec_t *devices, uint32_t num_devices,
                                Vmrpc__DeviceSpec specs[64], Vmrpc__DeviceSpec *spec_ptrs[64]) {
  if (num_devices > 64)
    return vm_status_make(VM_INVALID_ARGUMENT, "%u devices given; at most 64 per VM", num_devices);
  if (num_devices && !devices)
    return vm_status_make(VM_INVALID_ARGUMENT, "vmc_create_vm: devices is NULL");
  for (uint32_t i = 0; i < num_devices; i++) {
    vmrpc__device_spec__init(&specs[i]);
    if (!devices[i].selector || !devices[i].selector[0])
      return vm_status_make(VM_INVALID_ARGUMENT,
                            "device %u has no selector (use \"cpu\", \"opencl:0\", ... as listed "
                            "by `vmclient info`)",
                            i);
    specs[i].selector = (char *)devices[i].selector;
    specs[i].allocator = (char *)(devices[i].allocator ? devices[i].allocator : "");
    spec_ptrs[i] = &specs[i];
  }
  return VM_STATUS_OK;
}

vm_status_t vmc_create_vm(vmc_conn_t *c, vmc_exec_t exec, const vmc_device_spec_t *devices,
                          uint32_t num_devices, const char *exec_mode, vmc_vm_t *out_vm) {
  VM_RETURN_IF_ERROR(need_conn(c));
  if (!out_vm) return vm_status_make(VM_INVALID_ARGUMENT, "vmc_create_vm: out_vm is NULL");
  Vmrpc__DeviceSpec specs[64];
  Vmrpc__DeviceSpec *spec_ptrs[64];
  VM_RETURN_IF_ERROR(device_specs(devices, num_devices, specs, spec_ptrs));
  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__CreateVMRequest cv = VMRPC__CREATE_VMREQUEST__INIT;
  cv.exec_id = exec.id;
  cv.n_devices = num_devices;
  cv.devices = spec_ptrs;
  cv.exec_mode = (char *)(exec_mode ? exec_mode : "");
  req.op_case = OP(CREATE_VM);
  req.create_vm = &cv;
  vmci_reply_t r;
  VM_RETURN_IF_ERROR(call(c, &req, "CreateVM", &r));
  uint64_t id = r.resp->create_vm ? r.resp->create_vm->vm_id : 0;
  vmci_reply_free(&r);
  if (id == 0) return vm_status_make(VM_INTERNAL, "the agent created a VM without a vm id");
  out_vm->id = id;
  return VM_STATUS_OK;
}

vm_status_t vmc_free_vm(vmc_conn_t *c, vmc_vm_t vm) {
  VM_RETURN_IF_ERROR(need_conn(c));
  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__FreeVMRequest f = VMRPC__FREE_VMREQUEST__INIT;
  f.vm_id = vm.id;
  req.op_case = OP(FREE_VM);
  req.free_vm = &f;
  return call_ack(c, &req, NULL, 0, "FreeVM");
}

/* ------------------------------------------------------------- tensors in */

/* TensorBegin + chunks: the tensor waits on the agent as *out_transfer. */
static vm_status_t tensor_transfer(vmc_conn_t *c, vmc_vm_t vm, const vmc_tensor_t *t,
                                   uint64_t *out_transfer) {
  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__TensorBeginRequest tb = VMRPC__TENSOR_BEGIN_REQUEST__INIT;
  Vmrpc__TensorMeta meta;
  int64_t dims[VMC_MAX_NDIM];
  char dts[24];
  vmci_meta_from_tensor(t, &meta, dims, dts, sizeof(dts));
  tb.vm_id = vm.id;
  tb.meta = &meta;
  req.op_case = OP(TENSOR_BEGIN);
  req.tensor_begin = &tb;
  vmci_reply_t r;
  VM_RETURN_IF_ERROR(call(c, &req, "TensorBegin", &r));
  uint64_t id = r.resp->tensor_begin ? r.resp->tensor_begin->transfer_id : 0;
  vmci_reply_free(&r);
  if (id == 0)
    return vm_status_make(VM_INTERNAL, "the agent began a tensor transfer without an id");
  if (t->nbytes > 0) VM_RETURN_IF_ERROR(send_chunks(c, 1, id, t->data, t->nbytes, NULL, NULL));
  *out_transfer = id;
  return VM_STATUS_OK;
}

/* Storage a wire Value points into. */
typedef struct wire_value {
  Vmrpc__Value v;
  Vmrpc__TensorMeta meta;
  Vmrpc__ShapeValue shape;
  int64_t dims[VMC_MAX_NDIM];
  char dtype[24];
} wire_value_t;

/* Fills w from a scalar or shape value. Tensors are handled by callers. */
static vm_status_t scalar_to_wire(const vmc_value_t *v, wire_value_t *w) {
  vmrpc__value__init(&w->v);
  switch (v->kind) {
    case VMC_VALUE_NONE:
      w->v.kind_case = VMRPC__VALUE__KIND_NONE;
      w->v.none = 1;
      return VM_STATUS_OK;
    case VMC_VALUE_INT:
      w->v.kind_case = VMRPC__VALUE__KIND_I;
      w->v.i = v->i;
      return VM_STATUS_OK;
    case VMC_VALUE_FLOAT:
      w->v.kind_case = VMRPC__VALUE__KIND_F;
      w->v.f = v->f;
      return VM_STATUS_OK;
    case VMC_VALUE_BOOL:
      w->v.kind_case = VMRPC__VALUE__KIND_B;
      w->v.b = v->b != 0;
      return VM_STATUS_OK;
    case VMC_VALUE_STRING:
      w->v.kind_case = VMRPC__VALUE__KIND_S;
      w->v.s = (char *)(v->s ? v->s : "");
      return VM_STATUS_OK;
    case VMC_VALUE_SHAPE:
      if (v->shape_ndim > VMC_MAX_NDIM)
        return vm_status_make(VM_INVALID_ARGUMENT, "shape value has %u dims, at most %d",
                              v->shape_ndim, VMC_MAX_NDIM);
      vmrpc__shape_value__init(&w->shape);
      for (uint32_t i = 0; i < v->shape_ndim; i++) w->dims[i] = v->shape[i];
      w->shape.n_dims = v->shape_ndim;
      w->shape.dims = w->dims;
      w->v.kind_case = VMRPC__VALUE__KIND_SHAPE;
      w->v.shape = &w->shape;
      return VM_STATUS_OK;
    case VMC_VALUE_TUPLE:
      return vm_status_make(VM_INVALID_ARGUMENT,
                            "tuples cannot be sent as inputs: pass their fields separately");
    default: return vm_status_make(VM_INVALID_ARGUMENT, "unknown value kind %d", (int)v->kind);
  }
}

vm_status_t vmc_set_input_value(vmc_conn_t *c, vmc_vm_t vm, const char *func, uint32_t index,
                                const char *name, const vmc_value_t *v) {
  VM_RETURN_IF_ERROR(need_conn(c));
  VM_RETURN_IF_ERROR(need_func(func));
  if (!v) return vm_status_make(VM_INVALID_ARGUMENT, "vmc_set_input: value is NULL");
  char what[160];
  if (name)
    snprintf(what, sizeof(what), "SetInput %s.%s", func, name);
  else
    snprintf(what, sizeof(what), "SetInput %s[%u]", func, index);
  wire_value_t w;
  const void *payload = NULL;
  size_t plen = 0;
  if (v->kind == VMC_VALUE_TENSOR) {
    const vmc_tensor_t *t = &v->tensor;
    vm_status_t st = vmc_tensor_check(t);
    if (st) return vm_status_annotate(st, "%s", what);
    vmrpc__value__init(&w.v);
    if (t->nbytes <= c->limits.chunk_bytes) {
      vmci_meta_from_tensor(t, &w.meta, w.dims, w.dtype, sizeof(w.dtype));
      w.v.kind_case = VMRPC__VALUE__KIND_TENSOR;
      w.v.tensor = &w.meta;
      payload = t->data;
      plen = (size_t)t->nbytes;
    } else {
      uint64_t tid;
      st = tensor_transfer(c, vm, t, &tid);
      if (st) return vm_status_annotate(st, "%s", what);
      w.v.kind_case = VMRPC__VALUE__KIND_TENSOR_REF;
      w.v.tensor_ref = tid;
    }
  } else {
    VM_RETURN_IF_ERROR(scalar_to_wire(v, &w));
  }
  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__SetInputRequest si = VMRPC__SET_INPUT_REQUEST__INIT;
  si.vm_id = vm.id;
  si.func = (char *)func;
  if (name) {
    si.param_case = VMRPC__SET_INPUT_REQUEST__PARAM_NAME;
    si.name = (char *)name;
  } else {
    si.param_case = VMRPC__SET_INPUT_REQUEST__PARAM_INDEX;
    si.index = index;
  }
  si.value = &w.v;
  req.op_case = OP(SET_INPUT);
  req.set_input = &si;
  return call_ack(c, &req, payload, plen, what);
}

/* vmc_set_input_value() of a tensor (checked to be given). */
static vm_status_t set_input_tensor(vmc_conn_t *c, vmc_vm_t vm, const char *func, uint32_t index,
                                    const char *name, const vmc_tensor_t *t) {
  if (!t) return vm_status_make(VM_INVALID_ARGUMENT, "vmc_set_input: tensor is NULL");
  vmc_value_t v;
  memset(&v, 0, sizeof(v));
  v.kind = VMC_VALUE_TENSOR;
  v.tensor = *t;
  return vmc_set_input_value(c, vm, func, index, name, &v);
}

vm_status_t vmc_set_input(vmc_conn_t *c, vmc_vm_t vm, const char *func, uint32_t index,
                          const vmc_tensor_t *t) {
  return set_input_tensor(c, vm, func, index, NULL, t);
}

vm_status_t vmc_set_input_named(vmc_conn_t *c, vmc_vm_t vm, const char *func, const char *name,
                                const vmc_tensor_t *t) {
  if (!t) return vm_status_make(VM_INVALID_ARGUMENT, "vmc_set_input: tensor is NULL");
  if (!name || !name[0])
    return vm_status_make(VM_INVALID_ARGUMENT, "vmc_set_input_named: no parameter name");
  return set_input_tensor(c, vm, func, 0, name, t);
}

/* ---------------------------------------------------------------- invoke */

vm_status_t vmc_cancel(vmc_conn_t *c, vmc_vm_t vm) {
  VM_RETURN_IF_ERROR(need_conn(c));
  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__CancelRequest cr = VMRPC__CANCEL_REQUEST__INIT;
  cr.vm_id = vm.id;
  req.op_case = OP(CANCEL);
  req.cancel = &cr;
  return call_ack(c, &req, NULL, 0, "Cancel");
}

/* How long to wait for a long operation's reply. */
static int32_t long_wait_ms(const vmc_conn_t *c, uint32_t deadline_ms) {
  if (deadline_ms == 0) return c->long_timeout_ms; /* 0: no limit */
  int64_t t = (int64_t)deadline_ms + c->request_timeout_ms;
  return t > INT32_MAX ? INT32_MAX : (int32_t)t;
}

typedef struct cancel_arg {
  vmc_conn_t *c;
  vmc_vm_t vm;
} cancel_arg_t;

/* After giving up on a long operation, stop it on the agent (best effort). */
static void cancel_on_timeout(void *arg) {
  cancel_arg_t *a = arg;
  vm_status_free(vmc_cancel(a->c, a->vm));
}

/* A long operation on vm, cancelled there when its wait runs out. */
static vm_status_t call_long(vmc_conn_t *c, vmc_vm_t vm, Vmrpc__Request *req, uint32_t deadline_ms,
                             const char *what, vmci_reply_t *out) {
  cancel_arg_t ca = {c, vm};
  return vmci_call_long(c, req, reply_of(req), long_wait_ms(c, deadline_ms), what,
                        cancel_on_timeout, &ca, out);
}

vm_status_t vmc_invoke(vmc_conn_t *c, vmc_vm_t vm, const char *func, uint32_t deadline_ms,
                       double *out_agent_seconds) {
  VM_RETURN_IF_ERROR(need_conn(c));
  VM_RETURN_IF_ERROR(need_func(func));
  char what[160];
  snprintf(what, sizeof(what), "Invoke %s", func);
  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__InvokeRequest iv = VMRPC__INVOKE_REQUEST__INIT;
  iv.vm_id = vm.id;
  iv.func = (char *)func;
  iv.deadline_ms = deadline_ms;
  req.op_case = OP(INVOKE);
  req.invoke = &iv;
  vmci_reply_t r;
  VM_RETURN_IF_ERROR(call_long(c, vm, &req, deadline_ms, what, &r));
  if (out_agent_seconds) *out_agent_seconds = r.resp->invoke ? r.resp->invoke->seconds : 0.0;
  vmci_reply_free(&r);
  return VM_STATUS_OK;
}

/* ------------------------------------------------------------ tensors out */

vm_status_t vmc_get_output_arity(vmc_conn_t *c, vmc_vm_t vm, const char *func, const uint32_t *path,
                                 uint32_t path_len, int64_t *out_arity) {
  VM_RETURN_IF_ERROR(need_conn(c));
  VM_RETURN_IF_ERROR(need_func(func));
  if (path_len && !path) return vm_status_make(VM_INVALID_ARGUMENT, "path is NULL");
  char what[200];
  path_str(what, sizeof(what), "GetOutputArity", func, path, path_len);
  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__GetOutputArityRequest ga = VMRPC__GET_OUTPUT_ARITY_REQUEST__INIT;
  ga.vm_id = vm.id;
  ga.func = (char *)func;
  ga.n_path = path_len;
  ga.path = (uint32_t *)path;
  req.op_case = OP(GET_OUTPUT_ARITY);
  req.get_output_arity = &ga;
  vmci_reply_t r;
  VM_RETURN_IF_ERROR(call(c, &req, what, &r));
  int64_t a = r.resp->get_output_arity ? r.resp->get_output_arity->arity : -1;
  vmci_reply_free(&r);
  if (out_arity) *out_arity = a;
  return VM_STATUS_OK;
}

typedef struct tout_ctx {
  vmc_conn_t *c;
  vmc_vm_t vm;
  const char *func;
  const uint32_t *path;
  uint32_t path_len;
  uint8_t *dst;
  uint64_t nbytes;
  const char *what;
} tout_ctx_t;

static uint64_t tout_chunk_size(void *ctx, uint64_t idx) {
  tout_ctx_t *t = ctx;
  uint64_t cb = t->c->limits.chunk_bytes;
  return chunk_len(t->nbytes, (idx + 1) * cb, cb); /* chunk 0 came with the first reply */
}

/* Makes *req the GetOutput request (in *go) of up to one chunk at offset. */
static void get_output_request(const vmc_conn_t *c, vmc_vm_t vm, const char *func,
                               const uint32_t *path, uint32_t path_len, uint64_t offset,
                               Vmrpc__Request *req, Vmrpc__GetOutputRequest *go) {
  go->vm_id = vm.id;
  go->func = (char *)func;
  go->n_path = path_len;
  go->path = (uint32_t *)path;
  go->offset = offset;
  go->max_bytes = c->limits.chunk_bytes;
  req->op_case = OP(GET_OUTPUT);
  req->get_output = go;
}

static vm_status_t tout_make(void *ctx, uint64_t idx, vmci_msg_t **out_msg, uint64_t *out_id) {
  tout_ctx_t *t = ctx;
  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__GetOutputRequest go = VMRPC__GET_OUTPUT_REQUEST__INIT;
  get_output_request(t->c, t->vm, t->func, t->path, t->path_len,
                     (idx + 1) * t->c->limits.chunk_bytes, &req, &go);
  VM_RETURN_IF_ERROR(vmci_build(t->c, &req, NULL, 0, out_msg));
  *out_id = req.id;
  return VM_STATUS_OK;
}

/* Checks a chunk reply and copies its payload into place. */
static vm_status_t chunk_into(tout_ctx_t *t, const vmci_reply_t *r, uint64_t offset,
                              uint64_t expect_len) {
  const Vmrpc__GetOutputResponse *go = r->resp->get_output;
  if (!go || !go->value || go->value->kind_case != VMRPC__VALUE__KIND_TENSOR ||
      !go->value->tensor || go->value->tensor->nbytes != t->nbytes)
    return vm_status_make(VM_ABORTED,
                          "%s: the output changed while it was being fetched (another invoke "
                          "of the function?); fetch it again",
                          t->what);
  if (go->offset != offset || r->payload_len != expect_len)
    return vm_status_make(VM_INTERNAL,
                          "%s: asked for %llu bytes at offset %llu, the agent sent %zu at %llu",
                          t->what, (unsigned long long)expect_len, (unsigned long long)offset,
                          r->payload_len, (unsigned long long)go->offset);
  /* The payload may already be in place (read there from the socket). */
  if (expect_len && r->payload != t->dst + offset) memcpy(t->dst + offset, r->payload, expect_len);
  return VM_STATUS_OK;
}

static uint8_t *tout_dest(void *ctx, uint64_t idx) {
  tout_ctx_t *t = ctx;
  return t->dst + (idx + 1) * t->c->limits.chunk_bytes;
}

static vm_status_t tout_done(void *ctx, uint64_t idx, vmci_reply_t *r) {
  tout_ctx_t *t = ctx;
  uint64_t off = (idx + 1) * t->c->limits.chunk_bytes;
  return chunk_into(t, r, off, tout_chunk_size(ctx, idx));
}

/* Decodes a value of a reply into *out (zeroed first): scalars whole,
 * a tensor's kind and meta only (data NULL, nbytes checked). */
static vm_status_t value_from_wire(const Vmrpc__Value *wv, const char *what, vmc_value_t *out) {
  memset(out, 0, sizeof(*out));
  if (!wv) return vm_status_make(VM_INTERNAL, "%s: the agent's reply carries no value", what);
  switch (wv->kind_case) {
    case VMRPC__VALUE__KIND_NONE: out->kind = VMC_VALUE_NONE; return VM_STATUS_OK;
    case VMRPC__VALUE__KIND_I:
      out->kind = VMC_VALUE_INT;
      out->i = wv->i;
      return VM_STATUS_OK;
    case VMRPC__VALUE__KIND_F:
      out->kind = VMC_VALUE_FLOAT;
      out->f = wv->f;
      return VM_STATUS_OK;
    case VMRPC__VALUE__KIND_B:
      out->kind = VMC_VALUE_BOOL;
      out->b = wv->b != 0;
      return VM_STATUS_OK;
    case VMRPC__VALUE__KIND_S: {
      size_t n = strlen(wv->s ? wv->s : "");
      out->s = malloc(n + 1);
      if (!out->s) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
      memcpy(out->s, wv->s ? wv->s : "", n + 1);
      out->kind = VMC_VALUE_STRING;
      return VM_STATUS_OK;
    }
    case VMRPC__VALUE__KIND_SHAPE:
      if (!wv->shape || wv->shape->n_dims > VMC_MAX_NDIM)
        return vm_status_make(VM_INTERNAL, "%s: the agent sent a shape of more than %d dims", what,
                              VMC_MAX_NDIM);
      out->kind = VMC_VALUE_SHAPE;
      out->shape_ndim = (uint32_t)wv->shape->n_dims;
      for (size_t i = 0; i < wv->shape->n_dims; i++) out->shape[i] = wv->shape->dims[i];
      return VM_STATUS_OK;
    case VMRPC__VALUE__KIND_TUPLE_ARITY:
      out->kind = VMC_VALUE_TUPLE;
      out->tuple_arity = wv->tuple_arity;
      return VM_STATUS_OK;
    case VMRPC__VALUE__KIND_TENSOR: break;
    default:
      return vm_status_make(VM_INTERNAL, "%s: the agent sent a value of unknown kind %d", what,
                            (int)wv->kind_case);
  }
  vmc_tensor_t *t = &out->tensor;
  int64_t dims[VMP_MAX_NDIM];
  uint32_t ndim;
  uint64_t nbytes;
  vm_status_t st = vmp_meta_check(wv->tensor, 0, &t->dtype, dims, &ndim, &nbytes);
  if (st) return vm_status_annotate(st, "%s: the agent sent bad tensor metadata", what);
  t->ndim = ndim;
  for (uint32_t i = 0; i < ndim; i++) t->shape[i] = dims[i];
  t->nbytes = nbytes;
  out->kind = VMC_VALUE_TENSOR;
  return VM_STATUS_OK;
}

/* The common path of every GetOutput flavour. dst NULL: allocate. */
static vm_status_t get_output_impl(vmc_conn_t *c, vmc_vm_t vm, const char *func,
                                   const uint32_t *path, uint32_t path_len, void *dst,
                                   uint64_t dst_capacity, vmc_value_t *out) {
  VM_RETURN_IF_ERROR(need_conn(c));
  VM_RETURN_IF_ERROR(need_func(func));
  if (path_len && !path) return vm_status_make(VM_INVALID_ARGUMENT, "path is NULL");
  if (path_len > 64)
    return vm_status_make(VM_INVALID_ARGUMENT, "output path of %u levels; at most 64", path_len);
  char what[200];
  path_str(what, sizeof(what), "GetOutput", func, path, path_len);
  memset(out, 0, sizeof(*out));

  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__GetOutputRequest go = VMRPC__GET_OUTPUT_REQUEST__INIT;
  get_output_request(c, vm, func, path, path_len, 0, &req, &go);
  vmci_reply_t r;
  VM_RETURN_IF_ERROR(call(c, &req, what, &r));
  const Vmrpc__GetOutputResponse *gr = r.resp->get_output;
  vm_status_t st = value_from_wire(gr ? gr->value : NULL, what, out);
  if (st || out->kind != VMC_VALUE_TENSOR) goto done;
  {
    vmc_tensor_t *t = &out->tensor;
    uint64_t nbytes = t->nbytes;
    if (nbytes > SIZE_MAX) {
      st = vm_status_make(VM_RESOURCE_EXHAUSTED, "%s: %llu bytes do not fit in memory", what,
                          (unsigned long long)nbytes);
      goto done;
    }
    if (dst) {
      if (nbytes > dst_capacity) {
        st = vm_status_make(VM_OUT_OF_RANGE,
                            "%s: the output needs %llu bytes, the buffer holds %llu; pass a "
                            "buffer of at least %llu bytes",
                            what, (unsigned long long)nbytes, (unsigned long long)dst_capacity,
                            (unsigned long long)nbytes);
        goto done;
      }
      t->data = dst;
      t->owns_data = 0;
    } else {
      t->data = malloc(nbytes ? (size_t)nbytes : 1);
      if (!t->data) {
        st = vm_status_make(VM_RESOURCE_EXHAUSTED, "%s: out of host memory for a %llu-byte output",
                            what, (unsigned long long)nbytes);
        goto done;
      }
      t->owns_data = 1;
    }
    uint64_t cb = c->limits.chunk_bytes;
    tout_ctx_t tc = {c, vm, func, path, path_len, t->data, nbytes, what};
    uint64_t first = nbytes < cb ? nbytes : cb;
    st = chunk_into(&tc, &r, 0, first);
    vmci_reply_free(&r);
    if (!st && nbytes > cb) {
      vmci_pipeline_t p;
      memset(&p, 0, sizeof(p));
      p.count = (nbytes + cb - 1) / cb - 1;
      p.make = tout_make;
      p.done = tout_done;
      p.chunk_size = tout_chunk_size;
      p.dest = tout_dest;
      p.expect = ROP(GET_OUTPUT);
      p.ctx = &tc;
      p.progress_total = nbytes;
      p.what = what;
      st = vmci_pipeline_run(c, &p);
    }
    if (st) vmc_value_free(out);
    return st;
  }
done:
  vmci_reply_free(&r);
  if (st) vmc_value_free(out);
  return st;
}

vm_status_t vmc_get_output_value(vmc_conn_t *c, vmc_vm_t vm, const char *func, const uint32_t *path,
                                 uint32_t path_len, vmc_value_t *out) {
  if (!out) return vm_status_make(VM_INVALID_ARGUMENT, "vmc_get_output: out is NULL");
  return get_output_impl(c, vm, func, path, path_len, NULL, 0, out);
}

static vm_status_t not_a_tensor(const vmc_value_t *v, const char *func) {
  switch (v->kind) {
    case VMC_VALUE_TUPLE:
      return vm_status_make(VM_FAILED_PRECONDITION,
                            "the output of %s is a tuple of %u fields, not a tensor: fetch a "
                            "field with a longer path (e.g. [0])",
                            func, v->tuple_arity);
    case VMC_VALUE_NONE:
      return vm_status_make(VM_INVALID_ARGUMENT, "the output of %s is none, not a tensor", func);
    case VMC_VALUE_STRING:
      return vm_status_make(VM_INVALID_ARGUMENT, "the output of %s is a string, not a tensor",
                            func);
    default:
      return vm_status_make(VM_FAILED_PRECONDITION,
                            "the output of %s is a scalar or shape, not a tensor", func);
  }
}

vm_status_t vmc_get_output(vmc_conn_t *c, vmc_vm_t vm, const char *func, const uint32_t *path,
                           uint32_t path_len, vmc_tensor_t *out) {
  if (!out) return vm_status_make(VM_INVALID_ARGUMENT, "vmc_get_output: out is NULL");
  vmc_value_t v;
  VM_RETURN_IF_ERROR(get_output_impl(c, vm, func, path, path_len, NULL, 0, &v));
  vm_status_t st = VM_STATUS_OK;
  vmc_tensor_t t;
  memset(&t, 0, sizeof(t));
  switch (v.kind) {
    case VMC_VALUE_TENSOR: *out = v.tensor; return VM_STATUS_OK;
    case VMC_VALUE_INT:
      st = vmc_tensor_alloc(VM_I64, 0, NULL, &t);
      if (!st) memcpy(t.data, &v.i, 8);
      break;
    case VMC_VALUE_FLOAT:
      st = vmc_tensor_alloc(VM_F64, 0, NULL, &t);
      if (!st) memcpy(t.data, &v.f, 8);
      break;
    case VMC_VALUE_BOOL:
      st = vmc_tensor_alloc(VM_BOOL, 0, NULL, &t);
      if (!st) *(uint8_t *)t.data = (uint8_t)(v.b != 0);
      break;
    case VMC_VALUE_SHAPE: {
      int64_t n = v.shape_ndim;
      st = vmc_tensor_alloc(VM_I64, 1, &n, &t);
      if (!st && n) memcpy(t.data, v.shape, (size_t)n * 8);
      break;
    }
    default: st = not_a_tensor(&v, func); break;
  }
  vmc_value_free(&v);
  if (!st) *out = t;
  return st;
}

vm_status_t vmc_get_output_into(vmc_conn_t *c, vmc_vm_t vm, const char *func, const uint32_t *path,
                                uint32_t path_len, void *dst, uint64_t dst_capacity,
                                vmc_tensor_t *out_meta) {
  if (!dst && dst_capacity)
    return vm_status_make(VM_INVALID_ARGUMENT, "vmc_get_output_into: dst is NULL");
  static uint8_t empty;
  vmc_value_t v;
  VM_RETURN_IF_ERROR(
      get_output_impl(c, vm, func, path, path_len, dst ? dst : &empty, dst_capacity, &v));
  if (v.kind != VMC_VALUE_TENSOR) {
    vm_status_t st = not_a_tensor(&v, func);
    vmc_value_free(&v);
    return st;
  }
  if (out_meta) *out_meta = v.tensor;
  return VM_STATUS_OK;
}

void vmc_value_free(vmc_value_t *v) {
  if (!v) return;
  free(v->s);
  vmc_tensor_free(&v->tensor);
  memset(v, 0, sizeof(*v));
}

/* --------------------------------------------------------- save_function */

vm_status_t vmc_save_function(vmc_conn_t *c, vmc_vm_t vm, const char *func, const char *saved_name,
                              const vmc_value_t *args, uint32_t nargs) {
  VM_RETURN_IF_ERROR(need_conn(c));
  VM_RETURN_IF_ERROR(need_func(func));
  if (!saved_name || !saved_name[0])
    return vm_status_make(VM_INVALID_ARGUMENT, "vmc_save_function: no saved name given");
  if (nargs && !args) return vm_status_make(VM_INVALID_ARGUMENT, "vmc_save_function: args NULL");
  if (nargs > 256) return vm_status_make(VM_INVALID_ARGUMENT, "%u arguments; at most 256", nargs);
  char what[200];
  snprintf(what, sizeof(what), "SaveFunction %s as %s", func, saved_name);
  wire_value_t *w = calloc(nargs ? nargs : 1, sizeof(*w));
  Vmrpc__Value **wp = calloc(nargs ? nargs : 1, sizeof(*wp));
  vm_status_t st = VM_STATUS_OK;
  if (!w || !wp) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
    goto done;
  }
  for (uint32_t i = 0; i < nargs; i++) {
    if (args[i].kind == VMC_VALUE_TENSOR) {
      st = vmc_tensor_check(&args[i].tensor);
      uint64_t tid = 0;
      if (!st) st = tensor_transfer(c, vm, &args[i].tensor, &tid);
      if (st) {
        st = vm_status_annotate(st, "%s: argument %u", what, i);
        goto done;
      }
      vmrpc__value__init(&w[i].v);
      w[i].v.kind_case = VMRPC__VALUE__KIND_TENSOR_REF;
      w[i].v.tensor_ref = tid;
    } else if ((st = scalar_to_wire(&args[i], &w[i]))) {
      st = vm_status_annotate(st, "%s: argument %u", what, i);
      goto done;
    }
    wp[i] = &w[i].v;
  }
  {
    Vmrpc__Request req = VMRPC__REQUEST__INIT;
    Vmrpc__SaveFunctionRequest sf = VMRPC__SAVE_FUNCTION_REQUEST__INIT;
    sf.vm_id = vm.id;
    sf.func = (char *)func;
    sf.saved_name = (char *)saved_name;
    sf.n_args = nargs;
    sf.args = wp;
    req.op_case = OP(SAVE_FUNCTION);
    req.save_function = &sf;
    st = call_ack(c, &req, NULL, 0, what);
  }
done:
  free(wp);
  free(w);
  return st;
}

/* ---------------------------------------------------------------- timing */

vmc_time_params_t vmc_time_params_default(void) {
  vmc_time_params_t p;
  memset(&p, 0, sizeof(p));
  p.number = 10;
  p.repeat = 1;
  p.min_repeat_ms = 0;
  p.limit_zero_time_iterations = 100;
  p.cooldown_interval_ms = 0;
  p.repeats_to_cooldown = 1;
  p.cache_flush_bytes = 0;
  return p;
}

vm_status_t vmc_time_evaluate(vmc_conn_t *c, vmc_vm_t vm, const char *func,
                              const vmc_time_params_t *params, vmc_time_result_t *out) {
  VM_RETURN_IF_ERROR(need_conn(c));
  VM_RETURN_IF_ERROR(need_func(func));
  if (!out) return vm_status_make(VM_INVALID_ARGUMENT, "vmc_time_evaluate: out is NULL");
  char what[160];
  snprintf(what, sizeof(what), "TimeEvaluate %s", func);
  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__TimeEvaluateRequest te = VMRPC__TIME_EVALUATE_REQUEST__INIT;
  te.vm_id = vm.id;
  te.func = (char *)func;
  if (params) {
    te.number = params->number;
    te.repeat = params->repeat;
    te.min_repeat_ms = params->min_repeat_ms;
    te.limit_zero_time_iterations = params->limit_zero_time_iterations;
    te.cooldown_interval_ms = params->cooldown_interval_ms;
    te.repeats_to_cooldown = params->repeats_to_cooldown;
    te.cache_flush_bytes = params->cache_flush_bytes;
    te.defaults = 0;
  } else {
    te.defaults = 1;
  }
  req.op_case = OP(TIME_EVALUATE);
  req.time_evaluate = &te;
  vmci_reply_t r;
  VM_RETURN_IF_ERROR(call_long(c, vm, &req, 0, what, &r));
  const Vmrpc__TimeEvaluateResponse *tr = r.resp->time_evaluate;
  memset(out, 0, sizeof(*out));
  if (!tr) {
    vmci_reply_free(&r);
    return vm_status_make(VM_INTERNAL, "%s: empty reply", what);
  }
  size_t n = tr->n_seconds;
  if (n > (1u << 24)) {
    vmci_reply_free(&r);
    return vm_status_make(VM_INTERNAL, "%s: the agent sent %zu repeats", what, n);
  }
  out->seconds = calloc(n ? n : 1, sizeof(double));
  out->device_seconds = calloc(n ? n : 1, sizeof(double));
  if (!out->seconds || !out->device_seconds) {
    vmci_reply_free(&r);
    vmc_time_result_free(out);
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (size_t i = 0; i < n; i++) {
    out->seconds[i] = tr->seconds[i];
    out->device_seconds[i] = i < tr->n_device_seconds ? tr->device_seconds[i] : -1.0;
  }
  out->repeat = (uint32_t)n;
  out->number = tr->number;
  out->min_s = tr->min_s;
  out->mean_s = tr->mean_s;
  out->median_s = tr->median_s;
  out->max_s = tr->max_s;
  out->std_s = tr->std_s;
  out->device_median_s = tr->device_median_s;
  out->warmup_s = tr->warmup_s;
  out->gate_wait_s = tr->gate_wait_s;
  vmci_reply_free(&r);
  return VM_STATUS_OK;
}

void vmc_time_result_free(vmc_time_result_t *r) {
  if (!r) return;
  free(r->seconds);
  free(r->device_seconds);
  memset(r, 0, sizeof(*r));
}

vm_status_t vmc_profile(vmc_conn_t *c, vmc_vm_t vm, const char *func, vmc_profile_t *out) {
  VM_RETURN_IF_ERROR(need_conn(c));
  VM_RETURN_IF_ERROR(need_func(func));
  if (!out) return vm_status_make(VM_INVALID_ARGUMENT, "vmc_profile: out is NULL");
  char what[160];
  snprintf(what, sizeof(what), "Profile %s", func);
  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__ProfileRequest pr = VMRPC__PROFILE_REQUEST__INIT;
  pr.vm_id = vm.id;
  pr.func = (char *)func;
  req.op_case = OP(PROFILE);
  req.profile = &pr;
  vmci_reply_t r;
  VM_RETURN_IF_ERROR(call_long(c, vm, &req, 0, what, &r));
  const Vmrpc__ProfileResponse *p = r.resp->profile;
  memset(out, 0, sizeof(*out));
  size_t n = p ? p->n_rows : 0;
  out->rows = calloc(n ? n : 1, sizeof(*out->rows));
  if (!out->rows) {
    vmci_reply_free(&r);
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (size_t i = 0; i < n; i++) {
    const Vmrpc__ProfileRow *w = p->rows[i];
    vmc_profile_row_t *o = &out->rows[i];
    snprintf(o->name, sizeof(o->name), "%s", w->name ? w->name : "");
    o->calls = w->calls;
    o->total_s = w->total_s;
    o->mean_s = w->mean_s;
    o->device_s = w->device_s;
    o->share = w->share;
  }
  out->num_rows = (uint32_t)n;
  out->total_s = p ? p->total_s : 0.0;
  vmci_reply_free(&r);
  return VM_STATUS_OK;
}

void vmc_profile_free(vmc_profile_t *p) {
  if (!p) return;
  free(p->rows);
  memset(p, 0, sizeof(*p));
}

/* ----------------------------------------------------------------- stats */

vm_status_t vmc_stats(vmc_conn_t *c, vmc_stats_t *out) {
  VM_RETURN_IF_ERROR(need_conn(c));
  if (!out) return vm_status_make(VM_INVALID_ARGUMENT, "vmc_stats: out is NULL");
  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__StatsRequest sr = VMRPC__STATS_REQUEST__INIT;
  req.op_case = OP(STATS);
  req.stats = &sr;
  vmci_reply_t r;
  VM_RETURN_IF_ERROR(call(c, &req, "Stats", &r));
  const Vmrpc__StatsResponse *s = r.resp->stats;
  memset(out, 0, sizeof(*out));
  size_t n = s ? s->n_allocators : 0;
  out->allocators = calloc(n ? n : 1, sizeof(*out->allocators));
  if (!out->allocators) {
    vmci_reply_free(&r);
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (size_t i = 0; i < n; i++) {
    const Vmrpc__AllocatorStats *a = s->allocators[i];
    vmc_alloc_stats_t *o = &out->allocators[i];
    snprintf(o->device, sizeof(o->device), "%s", a->device ? a->device : "");
    snprintf(o->kind, sizeof(o->kind), "%s", a->kind ? a->kind : "");
    o->bytes_in_use = a->bytes_in_use;
    o->peak_bytes = a->peak_bytes;
    o->bytes_reserved = a->bytes_reserved;
    o->device_allocs = a->device_allocs;
    o->device_frees = a->device_frees;
  }
  out->num_allocators = (uint32_t)n;
  if (s) {
    out->session_bytes = s->session_bytes;
    out->session_vms = s->session_vms;
    out->session_executables = s->session_executables;
    out->session_transfers = s->session_transfers;
    out->agent_sessions = s->agent_sessions;
    out->agent_bytes = s->agent_bytes;
    out->store_bytes = s->store_bytes;
    out->store_entries = s->store_entries;
    out->requests = s->requests;
    out->agent_rss_bytes = s->agent_rss_bytes;
  }
  vmci_reply_free(&r);
  return VM_STATUS_OK;
}

void vmc_stats_free(vmc_stats_t *s) {
  if (!s) return;
  free(s->allocators);
  memset(s, 0, sizeof(*s));
}

/* -------------------------------------------------------------- fused run */

/* Most entries a Run reply may describe (the agent sends at most 128). */
#define RUN_MAX_OUTPUTS 4096

void vmc_run_result_free(vmc_run_result_t *r) {
  if (!r) return;
  for (uint32_t i = 0; r->outputs && i < r->num_outputs; i++) vmc_value_free(&r->outputs[i].value);
  free(r->outputs);
  memset(r, 0, sizeof(*r));
}

/* The chunks of every tensor a Run reply left on the agent, fetched as one
 * pipeline: several outputs (and chunks) in flight at once, never one by
 * one. Their metas came with the reply, so every buffer is allocated
 * first and each GetOutput names its offset. */
typedef struct remote_chunk {
  uint32_t out;    /* index in res->outputs */
  uint64_t offset; /* of the chunk */
} remote_chunk_t;

typedef struct remote_ctx {
  vmc_conn_t *c;
  vmc_run_result_t *res;
  const char *func;
  remote_chunk_t *chunks;
  tout_ctx_t *touts; /* per output */
} remote_ctx_t;

static uint64_t remote_chunk_size(void *ctx, uint64_t idx) {
  remote_ctx_t *x = ctx;
  const remote_chunk_t *k = &x->chunks[idx];
  return chunk_len(x->touts[k->out].nbytes, k->offset, x->c->limits.chunk_bytes);
}

static vm_status_t remote_make(void *ctx, uint64_t idx, vmci_msg_t **out_msg, uint64_t *out_id) {
  remote_ctx_t *x = ctx;
  const remote_chunk_t *k = &x->chunks[idx];
  const vmc_run_output_t *ro = &x->res->outputs[k->out];
  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__GetOutputRequest go = VMRPC__GET_OUTPUT_REQUEST__INIT;
  get_output_request(x->c, x->res->vm, x->func, ro->path, ro->path_len, k->offset, &req, &go);
  VM_RETURN_IF_ERROR(vmci_build(x->c, &req, NULL, 0, out_msg));
  *out_id = req.id;
  return VM_STATUS_OK;
}

static uint8_t *remote_dest(void *ctx, uint64_t idx) {
  remote_ctx_t *x = ctx;
  const remote_chunk_t *k = &x->chunks[idx];
  return x->touts[k->out].dst + k->offset;
}

static vm_status_t remote_done(void *ctx, uint64_t idx, vmci_reply_t *r) {
  remote_ctx_t *x = ctx;
  const remote_chunk_t *k = &x->chunks[idx];
  return chunk_into(&x->touts[k->out], r, k->offset, remote_chunk_size(ctx, idx));
}

static vm_status_t run_fetch_remote(vmc_conn_t *c, const char *func, const vmc_run_opts_t *o,
                                    vmc_run_result_t *out) {
  if (o->keep_remote) return VM_STATUS_OK;
  uint64_t cb = c->limits.chunk_bytes, count = 0;
  for (uint32_t i = 0; i < out->num_outputs; i++) {
    vmc_run_output_t *ro = &out->outputs[i];
    if (!ro->remote) continue;
    vmc_tensor_t *t = &ro->value.tensor;
    if (t->nbytes > SIZE_MAX - 1)
      return vm_status_make(VM_RESOURCE_EXHAUSTED, "Run %s: %llu bytes do not fit in memory", func,
                            (unsigned long long)t->nbytes);
    t->data = malloc(t->nbytes ? (size_t)t->nbytes : 1);
    if (!t->data)
      return vm_status_make(VM_RESOURCE_EXHAUSTED,
                            "Run %s: out of host memory for a %llu-byte output", func,
                            (unsigned long long)t->nbytes);
    t->owns_data = 1;
    count += (t->nbytes + cb - 1) / cb;
  }
  if (count == 0) {
    for (uint32_t i = 0; i < out->num_outputs; i++) out->outputs[i].remote = 0;
    return VM_STATUS_OK;
  }
  char what[160];
  snprintf(what, sizeof(what), "GetOutput %s", func);
  remote_ctx_t x = {c, out, func, calloc(count, sizeof(remote_chunk_t)),
                    calloc(out->num_outputs, sizeof(tout_ctx_t))};
  vm_status_t st = VM_STATUS_OK;
  if (!x.chunks || !x.touts) st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  uint64_t n = 0;
  for (uint32_t i = 0; !st && i < out->num_outputs; i++) {
    vmc_run_output_t *ro = &out->outputs[i];
    if (!ro->remote) continue;
    const vmc_tensor_t *t = &ro->value.tensor;
    tout_ctx_t tc = {c, out->vm, func, ro->path, ro->path_len, t->data, t->nbytes, what};
    x.touts[i] = tc;
    for (uint64_t off = 0; off < t->nbytes; off += cb) {
      x.chunks[n].out = i;
      x.chunks[n++].offset = off;
    }
  }
  if (!st) {
    vmci_pipeline_t p;
    memset(&p, 0, sizeof(p));
    p.count = count;
    p.make = remote_make;
    p.done = remote_done;
    p.chunk_size = remote_chunk_size;
    p.dest = remote_dest;
    p.expect = ROP(GET_OUTPUT);
    p.ctx = &x;
    p.what = what;
    st = vmci_pipeline_run(c, &p);
  }
  free(x.chunks);
  free(x.touts);
  if (st) return st;
  for (uint32_t i = 0; i < out->num_outputs; i++) out->outputs[i].remote = 0;
  return VM_STATUS_OK;
}

/* The outputs of a Run reply, inline tensors copied out of its payload. */
static vm_status_t run_outputs_from_reply(const vmci_reply_t *r, const char *what,
                                          vmc_run_result_t *out) {
  const Vmrpc__RunResponse *rr = r->resp->run;
  if (rr->n_outputs > RUN_MAX_OUTPUTS)
    return vm_status_make(VM_INTERNAL, "%s: the agent described %zu outputs, at most %d", what,
                          rr->n_outputs, RUN_MAX_OUTPUTS);
  out->outputs = calloc(rr->n_outputs ? rr->n_outputs : 1, sizeof(vmc_run_output_t));
  if (!out->outputs) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  const uint8_t *p = r->payload;
  size_t left = r->payload_len;
  for (size_t i = 0; i < rr->n_outputs; i++) {
    const Vmrpc__RunOutput *o = rr->outputs[i];
    if (!o || o->n_path > VMC_RUN_MAX_DEPTH)
      return vm_status_make(VM_INTERNAL, "%s: output %zu has a path deeper than %d", what, i,
                            VMC_RUN_MAX_DEPTH);
    vmc_run_output_t *ro = &out->outputs[out->num_outputs++];
    ro->path_len = (uint32_t)o->n_path;
    for (size_t k = 0; k < o->n_path; k++) ro->path[k] = o->path[k];
    VM_RETURN_IF_ERROR(value_from_wire(o->value, what, &ro->value));
    if (ro->value.kind != VMC_VALUE_TENSOR) continue;
    vmc_tensor_t *t = &ro->value.tensor;
    if (!o->data_inline) {
      ro->remote = 1;
      continue;
    }
    if (t->nbytes > left)
      return vm_status_make(VM_INTERNAL,
                            "%s: output %zu has %llu bytes inline but only %zu payload bytes "
                            "are left",
                            what, i, (unsigned long long)t->nbytes, left);
    t->data = malloc(t->nbytes ? (size_t)t->nbytes : 1);
    if (!t->data) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
    t->owns_data = 1;
    memcpy(t->data, p, (size_t)t->nbytes);
    p += t->nbytes;
    left -= (size_t)t->nbytes;
  }
  if (left)
    return vm_status_make(VM_INTERNAL, "%s: %zu payload bytes follow the inline outputs", what,
                          left);
  return VM_STATUS_OK;
}

/* Against a protocol 1.0 agent: the stateful requests. */
static vm_status_t run_stateful(vmc_conn_t *c, const void *exec, size_t exec_size,
                                const vmc_value_t *inputs, uint32_t num_inputs, const char *func,
                                const vmc_run_opts_t *o, vmc_run_result_t *out, int *created) {
  if (!out->vm.id) {
    VM_RETURN_IF_ERROR(
        upload_hashed(c, exec, exec_size, o->progress, o->progress_user, &out->exec, &out->upload));
    VM_RETURN_IF_ERROR(
        vmc_create_vm(c, out->exec, o->devices, o->num_devices, o->exec_mode, &out->vm));
    *created = 1;
  }
  for (uint32_t i = 0; i < num_inputs; i++)
    VM_RETURN_IF_ERROR(vmc_set_input_value(c, out->vm, func, i, NULL, &inputs[i]));
  VM_RETURN_IF_ERROR(vmc_invoke(c, out->vm, func, o->deadline_ms, &out->agent_seconds));
  out->outputs = calloc(1, sizeof(vmc_run_output_t));
  if (!out->outputs) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  out->num_outputs = 1;
  return vmc_get_output_value(c, out->vm, func, NULL, 0, &out->outputs[0].value);
}

/* The inputs of a Run too large to travel inside it (in[k] for the k
 * listed), transferred to vm: one TensorBegin after the other (each claims
 * the VM for a moment to allocate its tensor, so two in flight at once
 * would find it busy), then the chunks of all of them in one pipeline;
 * tid[k] receives each transfer id. */
typedef struct xfer_ctx {
  vmc_conn_t *c;
  vmc_vm_t vm;
  const vmc_value_t *in;
  const uint32_t *which; /* the inputs transferred */
  uint64_t *tid;         /* per input */
  remote_chunk_t *chunks;
  uint32_t first; /* the TensorBegin pipeline's idx 0 is which[first] */
} xfer_ctx_t;

static uint64_t xfer_begin_size(void *ctx, uint64_t idx) {
  (void)ctx;
  (void)idx;
  return 0;
}

static vm_status_t xfer_begin_make(void *ctx, uint64_t idx, vmci_msg_t **out_msg,
                                   uint64_t *out_id) {
  xfer_ctx_t *x = ctx;
  const vmc_tensor_t *t = &x->in[x->which[x->first + idx]].tensor;
  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__TensorBeginRequest tb = VMRPC__TENSOR_BEGIN_REQUEST__INIT;
  Vmrpc__TensorMeta meta;
  int64_t dims[VMC_MAX_NDIM];
  char dts[24];
  vmci_meta_from_tensor(t, &meta, dims, dts, sizeof(dts));
  tb.vm_id = x->vm.id;
  tb.meta = &meta;
  req.op_case = OP(TENSOR_BEGIN);
  req.tensor_begin = &tb;
  VM_RETURN_IF_ERROR(vmci_build(x->c, &req, NULL, 0, out_msg));
  *out_id = req.id;
  return VM_STATUS_OK;
}

static vm_status_t xfer_begin_done(void *ctx, uint64_t idx, vmci_reply_t *r) {
  xfer_ctx_t *x = ctx;
  uint64_t id = r->resp->tensor_begin ? r->resp->tensor_begin->transfer_id : 0;
  if (id == 0)
    return vm_status_make(VM_INTERNAL, "the agent began a tensor transfer without an id");
  x->tid[x->which[x->first + idx]] = id;
  return VM_STATUS_OK;
}

static uint64_t xfer_chunk_size(void *ctx, uint64_t idx) {
  xfer_ctx_t *x = ctx;
  const remote_chunk_t *k = &x->chunks[idx];
  return chunk_len(x->in[k->out].tensor.nbytes, k->offset, x->c->limits.chunk_bytes);
}

static vm_status_t xfer_chunk_make(void *ctx, uint64_t idx, vmci_msg_t **out_msg,
                                   uint64_t *out_id) {
  xfer_ctx_t *x = ctx;
  const remote_chunk_t *k = &x->chunks[idx];
  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__TensorChunkRequest tc = VMRPC__TENSOR_CHUNK_REQUEST__INIT;
  tc.transfer_id = x->tid[k->out];
  tc.offset = k->offset;
  req.op_case = OP(TENSOR_CHUNK);
  req.tensor_chunk = &tc;
  const uint8_t *data = x->in[k->out].tensor.data;
  VM_RETURN_IF_ERROR(vmci_build(x->c, &req, data + k->offset, xfer_chunk_size(ctx, idx), out_msg));
  *out_id = req.id;
  return VM_STATUS_OK;
}

static vm_status_t run_transfer_inputs(vmc_conn_t *c, vmc_vm_t vm, const vmc_value_t *in,
                                       const uint32_t *which, uint32_t n, uint64_t *tid) {
  uint64_t cb = c->limits.chunk_bytes, count = 0;
  for (uint32_t i = 0; i < n; i++) count += (in[which[i]].tensor.nbytes + cb - 1) / cb;
  xfer_ctx_t x = {c, vm, in, which, tid, calloc(count ? count : 1, sizeof(remote_chunk_t)), 0};
  if (!x.chunks) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  uint64_t k = 0;
  for (uint32_t i = 0; i < n; i++)
    for (uint64_t off = 0; off < in[which[i]].tensor.nbytes; off += cb) {
      x.chunks[k].out = which[i];
      x.chunks[k++].offset = off;
    }
  vmci_pipeline_t p;
  memset(&p, 0, sizeof(p));
  p.count = 1;
  p.make = xfer_begin_make;
  p.done = xfer_begin_done;
  p.chunk_size = xfer_begin_size;
  p.expect = ROP(TENSOR_BEGIN);
  p.ctx = &x;
  p.what = "TensorBegin";
  vm_status_t st = VM_STATUS_OK;
  for (x.first = 0; !st && x.first < n; x.first++) st = vmci_pipeline_run(c, &p);
  if (!st && count) {
    p.count = count;
    p.make = xfer_chunk_make;
    p.done = ignore_reply;
    p.chunk_size = xfer_chunk_size;
    p.expect = ROP(TENSOR_CHUNK);
    p.what = "TensorChunk";
    st = vmci_pipeline_run(c, &p);
  }
  free(x.chunks);
  return st;
}

/* The Run request itself: inputs inline or (larger ones) transferred
 * first, which needs the VM to exist before. A Run carries at most
 * VMCI_RUN_MAX_INPUTS inputs (0, 1, ...): the parameters after them are
 * set on the VM with SetInput before it, one round trip each. */
static vm_status_t run_fused(vmc_conn_t *c, const void *exec, size_t exec_size,
                             const vmc_value_t *inputs, uint32_t num_all, const char *func,
                             const vmc_run_opts_t *o, vmc_run_result_t *out, int *created) {
  uint32_t num_inputs = num_all < VMCI_RUN_MAX_INPUTS ? num_all : VMCI_RUN_MAX_INPUTS;
  uint64_t cb = c->limits.chunk_bytes;
  uint64_t inline_total = 0;
  uint32_t nx = 0; /* tensors transferred before the Run: which[0..nx) */
  wire_value_t *w = calloc(num_inputs ? num_inputs : 1, sizeof(*w));
  Vmrpc__Value **wp = calloc(num_inputs ? num_inputs : 1, sizeof(*wp));
  uint32_t *which = calloc(num_inputs ? num_inputs : 1, sizeof(*which));
  uint64_t *tid = calloc(num_inputs ? num_inputs : 1, sizeof(*tid));
  uint8_t *payload = NULL;
  vm_status_t st = VM_STATUS_OK;
  if (!w || !wp || !which || !tid) st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  /* Tensors travel inline in order while they fit one chunk in all. */
  for (uint32_t i = 0; !st && i < num_inputs; i++) {
    if (inputs[i].kind != VMC_VALUE_TENSOR) continue;
    st = vmc_tensor_check(&inputs[i].tensor);
    if (st)
      st = vm_status_annotate(st, "Run %s: input %u", func, i);
    else if (inputs[i].tensor.nbytes <= cb - inline_total)
      inline_total += inputs[i].tensor.nbytes;
    else
      which[nx++] = i;
  }
  if (!st && !(payload = malloc(inline_total ? (size_t)inline_total : 1)))
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  if (!st && !out->vm.id) vm_sha256(exec, exec_size, out->upload.sha256);
  if (!st && (nx || num_all > num_inputs) && !out->vm.id) { /* they need their VM first */
    st = upload_hashed(c, exec, exec_size, o->progress, o->progress_user, &out->exec, &out->upload);
    if (!st) st = vmc_create_vm(c, out->exec, o->devices, o->num_devices, o->exec_mode, &out->vm);
    if (!st) *created = 1;
  }
  if (!st && nx) {
    st = run_transfer_inputs(c, out->vm, inputs, which, nx, tid);
    if (st)
      st = vm_status_annotate(st, "Run %s: transferring %u input%s", func, nx, nx == 1 ? "" : "s");
  }
  for (uint32_t i = num_inputs; !st && i < num_all; i++) {
    st = vmc_set_input_value(c, out->vm, func, i, NULL, &inputs[i]);
    if (st) st = vm_status_annotate(st, "Run %s: input %u", func, i);
  }
  uint64_t plen = 0;
  uint32_t xi = 0;
  for (uint32_t i = 0; !st && i < num_inputs; i++) {
    wp[i] = &w[i].v;
    const vmc_value_t *v = &inputs[i];
    if (v->kind != VMC_VALUE_TENSOR) {
      st = scalar_to_wire(v, &w[i]);
      continue;
    }
    const vmc_tensor_t *t = &v->tensor;
    vmrpc__value__init(&w[i].v);
    if (xi < nx && which[xi] == i) {
      xi++;
      w[i].v.kind_case = VMRPC__VALUE__KIND_TENSOR_REF;
      w[i].v.tensor_ref = tid[i];
    } else {
      vmci_meta_from_tensor(t, &w[i].meta, w[i].dims, w[i].dtype, sizeof(w[i].dtype));
      w[i].v.kind_case = VMRPC__VALUE__KIND_TENSOR;
      w[i].v.tensor = &w[i].meta;
      if (t->nbytes) memcpy(payload + plen, t->data, (size_t)t->nbytes);
      plen += t->nbytes;
    }
  }
  Vmrpc__DeviceSpec specs[64];
  Vmrpc__DeviceSpec *spec_ptrs[64];
  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__RunRequest rq = VMRPC__RUN_REQUEST__INIT;
  rq.func = (char *)func;
  rq.n_inputs = num_inputs;
  rq.inputs = wp;
  rq.deadline_ms = o->deadline_ms;
  rq.inline_bytes = o->no_inline ? 0 : o->inline_bytes ? o->inline_bytes : cb;
  if (out->vm.id) {
    rq.vm_id = out->vm.id;
  } else if (!st) {
    st = device_specs(o->devices, o->num_devices, specs, spec_ptrs);
    rq.n_devices = o->num_devices;
    rq.devices = spec_ptrs;
    rq.exec_mode = (char *)(o->exec_mode ? o->exec_mode : "");
    rq.sha256.data = out->upload.sha256;
    rq.sha256.len = 32;
    rq.size = exec_size;
  }
  req.op_case = OP(RUN);
  req.run = &rq;
  char what[160];
  snprintf(what, sizeof(what), "Run %s", func);
  int32_t wait = long_wait_ms(c, o->deadline_ms);
  vmci_reply_t r;
  memset(&r, 0, sizeof(r));
  if (!st) st = vmci_call(c, &req, payload, (size_t)plen, reply_of(&req), wait, what, &r);
  if (!st && r.resp->run && !r.resp->run->present && !out->vm.id) {
    /* A store miss: upload, then run by handle (the agent did nothing). */
    vmci_reply_free(&r);
    out->upload.store_hit = 0;
    st = upload_hashed(c, exec, exec_size, o->progress, o->progress_user, &out->exec, &out->upload);
    rq.sha256.data = NULL;
    rq.sha256.len = 0;
    rq.size = 0;
    rq.exec_id = out->exec.id;
    if (!st) st = vmci_call(c, &req, payload, (size_t)plen, reply_of(&req), wait, what, &r);
  } else if (!st && !out->vm.id) {
    out->upload.store_hit = 1;
  }
  if (!st && (!r.resp->run || !r.resp->run->present || !r.resp->run->vm_id))
    st = vm_status_make(VM_INTERNAL, "%s: the agent's reply names no VM", what);
  if (!st) {
    const Vmrpc__RunResponse *rr = r.resp->run;
    if (!out->vm.id) *created = 1;
    out->vm.id = rr->vm_id;
    if (rr->exec_id) out->exec.id = rr->exec_id;
    out->agent_seconds = rr->seconds;
    st = run_outputs_from_reply(&r, what, out);
  }
  vmci_reply_free(&r);
  free(tid);
  free(which);
  free(payload);
  free(wp);
  free(w);
  return st;
}

vm_status_t vmc_run(vmc_conn_t *c, const void *exec, size_t exec_size, vmc_vm_t vm,
                    const vmc_value_t *inputs, uint32_t num_inputs, const vmc_run_opts_t *opts,
                    vmc_run_result_t *out) {
  VM_RETURN_IF_ERROR(need_conn(c));
  if (!out) return vm_status_make(VM_INVALID_ARGUMENT, "vmc_run: out is NULL");
  memset(out, 0, sizeof(*out));
  vmc_run_opts_t o;
  memset(&o, 0, sizeof(o));
  if (opts) o = *opts;
  const char *func = o.func ? o.func : "main";
  VM_RETURN_IF_ERROR(need_func(func));
  if (vm.id && exec)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "vmc_run: give a VM or the executable's bytes, not both");
  if (!vm.id && (!exec || !exec_size))
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "vmc_run: no VM and no executable given: pass the .vmx bytes");
  if (num_inputs && !inputs) return vm_status_make(VM_INVALID_ARGUMENT, "vmc_run: inputs is NULL");
  uint64_t id0 = atomic_load(&c->next_id);
  out->vm = vm;
  int created = 0;
  vm_status_t st;
  if (c->protocol_major == 1 && c->protocol_minor < 1)
    st = run_stateful(c, exec, exec_size, inputs, num_inputs, func, &o, out, &created);
  else
    st = run_fused(c, exec, exec_size, inputs, num_inputs, func, &o, out, &created);
  if (!st) st = run_fetch_remote(c, func, &o, out);
  out->requests = (uint32_t)(atomic_load(&c->next_id) - id0);
  if (st) {
    if (created) vm_status_free(vmc_free_vm(c, out->vm));
    vmc_run_result_free(out);
  }
  return st;
}
