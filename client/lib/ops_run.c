/* The fused Run (protocol 1.1): VM, inputs, invoke and the small outputs
 * in one request, the large inputs transferred before it and the large
 * outputs fetched after; the stateful requests against 1.0 agents. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "vmrpc/file.h"
#include "ops_internal.h"

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
  vmci_tout_ctx_t *touts; /* per output */
} remote_ctx_t;

static uint64_t remote_chunk_size(void *ctx, uint64_t idx) {
  remote_ctx_t *x = ctx;
  const remote_chunk_t *k = &x->chunks[idx];
  return vmci_chunk_len(x->touts[k->out].nbytes, k->offset, x->c->limits.chunk_bytes);
}

static vm_status_t remote_make(void *ctx, uint64_t idx, vmci_msg_t **out_msg, uint64_t *out_id) {
  remote_ctx_t *x = ctx;
  const remote_chunk_t *k = &x->chunks[idx];
  const vmc_run_output_t *ro = &x->res->outputs[k->out];
  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__GetOutputRequest go = VMRPC__GET_OUTPUT_REQUEST__INIT;
  vmci_get_output_request(x->c, x->res->vm, x->func, ro->path, ro->path_len, k->offset, &req, &go);
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
  return vmci_chunk_into(&x->touts[k->out], r, k->offset, remote_chunk_size(ctx, idx));
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
                    calloc(out->num_outputs, sizeof(vmci_tout_ctx_t))};
  vm_status_t st = VM_STATUS_OK;
  if (!x.chunks || !x.touts) st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  uint64_t n = 0;
  for (uint32_t i = 0; !st && i < out->num_outputs; i++) {
    vmc_run_output_t *ro = &out->outputs[i];
    if (!ro->remote) continue;
    const vmc_tensor_t *t = &ro->value.tensor;
    vmci_tout_ctx_t tc = {c, out->vm, func, ro->path, ro->path_len, t->data, t->nbytes, what};
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
    VM_RETURN_IF_ERROR(vmci_value_from_wire(o->value, what, &ro->value));
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
    VM_RETURN_IF_ERROR(vmci_upload_hashed(c, exec, exec_size, o->progress, o->progress_user,
                                          &out->exec, &out->upload));
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
  return vmci_chunk_len(x->in[k->out].tensor.nbytes, k->offset, x->c->limits.chunk_bytes);
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
    p.done = vmci_ignore_reply;
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
  vmci_wire_value_t *w = calloc(num_inputs ? num_inputs : 1, sizeof(*w));
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
    st = vmci_upload_hashed(c, exec, exec_size, o->progress, o->progress_user, &out->exec,
                            &out->upload);
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
      st = vmci_scalar_to_wire(v, &w[i]);
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
    st = vmci_device_specs(o->devices, o->num_devices, specs, spec_ptrs);
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
  int32_t wait = vmci_long_wait_ms(c, o->deadline_ms);
  vmci_reply_t r;
  memset(&r, 0, sizeof(r));
  if (!st) st = vmci_call(c, &req, payload, (size_t)plen, vmci_reply_of(&req), wait, what, &r);
  if (!st && r.resp->run && !r.resp->run->present && !out->vm.id) {
    /* A store miss: upload, then run by handle (the agent did nothing). */
    vmci_reply_free(&r);
    out->upload.store_hit = 0;
    st = vmci_upload_hashed(c, exec, exec_size, o->progress, o->progress_user, &out->exec,
                            &out->upload);
    rq.sha256.data = NULL;
    rq.sha256.len = 0;
    rq.size = 0;
    rq.exec_id = out->exec.id;
    if (!st) st = vmci_call(c, &req, payload, (size_t)plen, vmci_reply_of(&req), wait, what, &r);
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
  VM_RETURN_IF_ERROR(vmci_need_conn(c));
  if (!out) return vm_status_make(VM_INVALID_ARGUMENT, "vmc_run: out is NULL");
  memset(out, 0, sizeof(*out));
  vmc_run_opts_t o;
  memset(&o, 0, sizeof(o));
  if (opts) o = *opts;
  const char *func = o.func ? o.func : "main";
  VM_RETURN_IF_ERROR(vmci_need_func(func));
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
