/* Run (protocol 1.1): the fused operation. One request finds the
 * executable (by store hash or session handle) or the VM to reuse, creates
 * the VM, sets every parameter, invokes, and describes the result's
 * leaves, the small tensors' bytes inline in the reply. Each step is the
 * stateful operation's own handler run on a context of its own, so the
 * checks and errors are exactly theirs (prefixed with the step).
 *
 * Everything that can be checked without side effects is checked first;
 * a VM this request created is freed again when a later step fails, so a
 * failed Run leaves the session as it found it (apart from an executable
 * handle for a store hit, which a retry reuses).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_gate.h"
#include "handlers.h"
#include "op_output.h"
#include "op_upload.h"
#include "vm_lock.h"
#include "vmrpc/log.h"

/* Inputs one Run may set, and result entries (leaves, or tuples left for
 * the client to walk) one reply describes: bounded so the reply's envelope
 * stays far below the client's receive limit. */
#define VMA_RUN_MAX_INPUTS 256
#define VMA_RUN_MAX_OUTPUTS 128
/* Tuple levels Run walks; deeper tuples are reported as tuples. */
#define VMA_RUN_MAX_DEPTH 8

/* A fresh context for one step, sharing the session, with req as its
 * request and [payload, +len) as its payload. */
static void run_sub(const vma_ctx_t *c, vma_ctx_t *sub, Vmrpc__Request *req, const uint8_t *payload,
                    size_t len) {
  memset(sub, 0, sizeof(*sub));
  sub->a = c->a;
  sub->conn_id = c->conn_id;
  sub->rq = req;
  sub->payload = payload;
  sub->payload_len = len;
  sub->s = c->s;
  sub->out = c->out;
  vmrpc__response__init(&sub->rs);
}

/* The checks that need no state: names, counts, the payload's split. */
static vm_status_t run_check(const vma_ctx_t *c, const Vmrpc__RunRequest *q) {
  VM_RETURN_IF_ERROR(vma_check_name(q->func, "func"));
  int has_hash = q->sha256.len != 0;
  if (q->vm_id) {
    if (has_hash || q->exec_id || q->n_devices || (q->exec_mode && *q->exec_mode))
      return vm_status_make(VM_INVALID_ARGUMENT,
                            "Run names vm %llu and also an executable, devices or exec_mode: a "
                            "VM already has them; give vm_id alone, or no vm_id",
                            (unsigned long long)q->vm_id);
  } else if (has_hash == (q->exec_id != 0)) {
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "Run needs exactly one of sha256 (with size), exec_id or vm_id");
  } else if (has_hash && q->sha256.len != VM_SHA256_BYTES) {
    return vm_status_make(VM_INVALID_ARGUMENT, "sha256 must be %d bytes, got %zu", VM_SHA256_BYTES,
                          q->sha256.len);
  } else if (has_hash && q->size == 0) {
    return vm_status_make(VM_INVALID_ARGUMENT, "executable size is 0");
  }
  if (q->n_inputs > VMA_RUN_MAX_INPUTS)
    return vm_status_make(VM_INVALID_ARGUMENT, "Run sets %zu inputs, at most %d", q->n_inputs,
                          VMA_RUN_MAX_INPUTS);
  uint64_t need = 0;
  for (size_t i = 0; i < q->n_inputs; i++) {
    const Vmrpc__Value *w = q->inputs[i];
    if (!w)
      return vm_status_make(VM_INVALID_ARGUMENT, "malformed request: input %zu is missing", i);
    if (w->kind_case != VMRPC__VALUE__KIND_TENSOR) continue;
    if (!w->tensor)
      return vm_status_make(VM_INVALID_ARGUMENT, "malformed request: input %zu has no meta", i);
    if (w->tensor->nbytes > c->payload_len - need)
      return vm_status_make(VM_INVALID_ARGUMENT,
                            "input %zu: a tensor of %llu bytes, but only %llu payload bytes are "
                            "left; send larger tensors with TensorBegin/TensorChunk and a "
                            "tensor_ref",
                            i, (unsigned long long)w->tensor->nbytes,
                            (unsigned long long)(c->payload_len - need));
    need += w->tensor->nbytes;
  }
  if (need != c->payload_len)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "the inputs' inline tensors need %llu payload bytes but %zu were sent",
                          (unsigned long long)need, c->payload_len);
  return VM_STATUS_OK;
}

/* The session's handle of store entry e (retained by the caller: taken
 * over), made when there is none. */
static vm_status_t run_execref(vma_ctx_t *c, vma_exec_entry_t *e, uint64_t *out_id) {
  vma_session_t *s = c->s;
  uint64_t id = 0;
  pthread_mutex_lock(&s->lock);
  for (vma_execref_t *r = s->execs; r && !id; r = r->next)
    if (r->entry == e) id = r->id;
  pthread_mutex_unlock(&s->lock);
  if (!id) return vma_add_execref(c, e, out_id);
  vma_store_release(c->a->store, e);
  *out_id = id;
  return VM_STATUS_OK;
}

static vm_status_t run_create_vm(vma_ctx_t *c, const Vmrpc__RunRequest *q, uint64_t exec_id,
                                 uint64_t *out_vm) {
  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__CreateVMRequest cv = VMRPC__CREATE_VMREQUEST__INIT;
  cv.exec_id = exec_id;
  cv.n_devices = q->n_devices;
  cv.devices = q->devices;
  cv.exec_mode = q->exec_mode;
  req.op_case = VMRPC__REQUEST__OP_CREATE_VM;
  req.create_vm = &cv;
  vma_ctx_t sub;
  run_sub(c, &sub, &req, NULL, 0);
  vm_status_t st = vma_op_create_vm(&sub);
  if (st) return vm_status_annotate(st, "Run: creating the VM");
  *out_vm = sub.u.create_vm.vm_id;
  return VM_STATUS_OK;
}

static void run_free_vm(vma_ctx_t *c, uint64_t vm_id) {
  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__FreeVMRequest fv = VMRPC__FREE_VMREQUEST__INIT;
  fv.vm_id = vm_id;
  req.op_case = VMRPC__REQUEST__OP_FREE_VM;
  req.free_vm = &fv;
  vma_ctx_t sub;
  run_sub(c, &sub, &req, NULL, 0);
  vm_status_free(vma_op_free_vm(&sub));
}

static vm_status_t run_set_inputs(vma_ctx_t *c, const Vmrpc__RunRequest *q, uint64_t vm_id) {
  const uint8_t *p = c->payload;
  for (size_t i = 0; i < q->n_inputs; i++) {
    const Vmrpc__Value *w = q->inputs[i];
    size_t len = w->kind_case == VMRPC__VALUE__KIND_TENSOR ? (size_t)w->tensor->nbytes : 0;
    Vmrpc__Request req = VMRPC__REQUEST__INIT;
    Vmrpc__SetInputRequest si = VMRPC__SET_INPUT_REQUEST__INIT;
    si.vm_id = vm_id;
    si.func = q->func;
    si.param_case = VMRPC__SET_INPUT_REQUEST__PARAM_INDEX;
    si.index = (uint32_t)i;
    si.value = (Vmrpc__Value *)w;
    req.op_case = VMRPC__REQUEST__OP_SET_INPUT;
    req.set_input = &si;
    vma_ctx_t sub;
    run_sub(c, &sub, &req, p, len);
    vm_status_t st = vma_op_set_input(&sub);
    if (st) return vm_status_annotate(st, "Run: input %zu", i);
    p += len;
  }
  return VM_STATUS_OK;
}

static vm_status_t run_invoke(vma_ctx_t *c, const Vmrpc__RunRequest *q, uint64_t vm_id,
                              double *out_s) {
  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__InvokeRequest iv = VMRPC__INVOKE_REQUEST__INIT;
  iv.vm_id = vm_id;
  iv.func = q->func;
  iv.deadline_ms = q->deadline_ms;
  req.op_case = VMRPC__REQUEST__OP_INVOKE;
  req.invoke = &iv;
  vma_ctx_t sub;
  run_sub(c, &sub, &req, NULL, 0);
  VM_RETURN_IF_ERROR(vma_op_invoke(&sub));
  *out_s = sub.u.invoke.seconds;
  return VM_STATUS_OK;
}

/* One entry of the reply, with the storage its wire value points into. */
typedef struct run_out {
  Vmrpc__RunOutput o;
  Vmrpc__Value w;
  Vmrpc__TensorMeta meta;
  Vmrpc__ShapeValue shape;
  char dtype[32];
  uint32_t path[VMA_RUN_MAX_DEPTH];
  vm_value_t val;  /* held until the reply is written */
  uint64_t nbytes; /* inline bytes */
} run_out_t;

typedef struct run_walk {
  vma_ctx_t *c;
  vma_vm_t *v;
  const char *func;
  run_out_t *outs;
  uint32_t n;
  uint64_t inline_left;
} run_walk_t;

/* Describes the value at path[0..depth); `after` entries are kept free for
 * the siblings still to come. s->lock held (reference counts change). */
static vm_status_t run_walk(run_walk_t *w, uint32_t *path, uint32_t depth, uint32_t after) {
  int64_t arity = -1;
  VM_RETURN_IF_ERROR(vm_machine_get_output_arity(w->v->m, w->func, path, depth, &arity));
  if (arity >= 0 && depth < VMA_RUN_MAX_DEPTH &&
      (uint64_t)arity + after + w->n <= VMA_RUN_MAX_OUTPUTS) {
    for (int64_t i = 0; i < arity; i++) {
      path[depth] = (uint32_t)i;
      VM_RETURN_IF_ERROR(run_walk(w, path, depth + 1, after + (uint32_t)(arity - 1 - i)));
    }
    return VM_STATUS_OK;
  }
  /* A leaf, or a tuple left for the client (too deep or too many). */
  run_out_t *r = &w->outs[w->n];
  r->val = vm_value_none();
  VM_RETURN_IF_ERROR(vm_machine_get_output(w->v->m, w->func, path, depth, &r->val));
  w->n++;
  VM_RETURN_IF_ERROR(
      vma_value_out(&r->val, &r->w, &r->meta, &r->shape, r->dtype, sizeof(r->dtype)));
  vmrpc__run_output__init(&r->o);
  memcpy(r->path, path, depth * sizeof(uint32_t));
  r->o.n_path = depth;
  r->o.path = r->path;
  r->o.value = &r->w;
  vm_tensor_t *t = vm_value_as_tensor(&r->val);
  if (t && vm_tensor_nbytes_of(t) <= w->inline_left) {
    r->nbytes = vm_tensor_nbytes_of(t);
    w->inline_left -= r->nbytes;
    r->o.data_inline = 1;
  }
  return VM_STATUS_OK;
}

/* Writes the reply: the entries, then the inline tensors' bytes copied
 * from the device straight into the outgoing message. */
static vm_status_t run_reply(vma_ctx_t *c, run_walk_t *w, Vmrpc__RunResponse *r) {
  Vmrpc__RunOutput *ptrs[VMA_RUN_MAX_OUTPUTS];
  uint64_t total = 0;
  for (uint32_t i = 0; i < w->n; i++) {
    ptrs[i] = &w->outs[i].o;
    total += w->outs[i].nbytes;
  }
  r->n_outputs = w->n;
  r->outputs = ptrs;
  c->rs.op_case = VMRPC__RESPONSE__OP_RUN;
  c->rs.run = r;
  size_t env = vmp_frame_size(&c->rs.base);
  uint8_t *buf = c->out->alloc(c->out, env + (size_t)total);
  vm_status_t st = VM_STATUS_OK;
  if (!buf) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory for a %llu-byte reply",
                        (unsigned long long)total);
  } else {
    vmp_frame_write(&c->rs.base, buf);
    uint8_t *p = buf + env;
    for (uint32_t i = 0; i < w->n && !st; i++) {
      if (!w->outs[i].nbytes) continue;
      vm_tensor_t *t = vm_value_as_tensor(&w->outs[i].val);
      vm_storage_t *sto = t->storage;
      vma_device_t *gate = vma_device_of(c->a, sto->device);
      st = vma_copy_enter(c->a, gate);
      if (!st) {
        st = sto->device->ops->copy_to_host(sto->device, p, sto->buffer, t->offset,
                                            w->outs[i].nbytes);
        vma_copy_exit(gate);
      }
      p += w->outs[i].nbytes;
    }
  }
  c->rs.op_case = VMRPC__RESPONSE__OP__NOT_SET;
  c->rs.run = NULL;
  if (!st) c->replied = 1;
  return st;
}

/* The result's entries and the reply, the VM held as a reader. */
static vm_status_t run_outputs(vma_ctx_t *c, const Vmrpc__RunRequest *q, Vmrpc__RunResponse *r) {
  vma_session_t *s = c->s;
  vma_vm_t *v;
  VM_RETURN_IF_ERROR(vma_vm_acquire(s, r->vm_id, VMA_USE_READ, &v));
  run_walk_t w;
  memset(&w, 0, sizeof(w));
  w.c = c;
  w.v = v;
  w.func = q->func;
  w.outs = calloc(VMA_RUN_MAX_OUTPUTS, sizeof(run_out_t));
  uint64_t cap = c->a->cfg.chunk_bytes;
  w.inline_left = q->inline_bytes < cap ? q->inline_bytes : cap;
  vm_status_t st = VM_STATUS_OK;
  if (!w.outs) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  } else {
    uint32_t path[VMA_RUN_MAX_DEPTH];
    pthread_mutex_lock(&s->lock);
    st = run_walk(&w, path, 0, 0);
    pthread_mutex_unlock(&s->lock);
    if (st) st = vm_status_annotate(st, "Run: reading the result");
  }
  if (!st) st = run_reply(c, &w, r);
  pthread_mutex_lock(&s->lock);
  for (uint32_t i = 0; i < w.n; i++) vm_value_release(&w.outs[i].val);
  pthread_mutex_unlock(&s->lock);
  free(w.outs);
  vma_vm_release(s, v, VMA_USE_READ);
  return st;
}

vm_status_t vma_op_run(vma_ctx_t *c) {
  const Vmrpc__RunRequest *q = c->rq->run;
  VM_RETURN_IF_ERROR(run_check(c, q));
  Vmrpc__RunResponse *r = VMA_RESPONSE(c, RUN, run, run_response);
  r->vm_id = q->vm_id;
  r->exec_id = q->exec_id;
  r->present = 1;
  if (q->sha256.len) {
    vma_exec_entry_t *e = NULL;
    VM_RETURN_IF_ERROR(vma_store_lookup(c->a->store, q->sha256.data, q->size, &e));
    if (!e) { /* the client uploads it and runs again */
      r->present = 0;
      return VM_STATUS_OK;
    }
    VM_RETURN_IF_ERROR(run_execref(c, e, &r->exec_id));
  }
  int created = 0;
  if (!r->vm_id) {
    VM_RETURN_IF_ERROR(run_create_vm(c, q, r->exec_id, &r->vm_id));
    created = 1;
  }
  vm_status_t st = run_set_inputs(c, q, r->vm_id);
  if (!st) st = run_invoke(c, q, r->vm_id, &r->seconds);
  if (!st) st = run_outputs(c, q, r);
  if (st && created) run_free_vm(c, r->vm_id);
  return st;
}
