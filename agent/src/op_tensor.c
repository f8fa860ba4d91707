/* Values into a VM: tensor transfers (TensorBegin / TensorChunk), wire
 * values converted for the VM (inline tensors, transfer references), and
 * the operations that take them: SetInput and SaveFunction. */
#include <stdlib.h>
#include <string.h>

#include "chunks.h"
#include "device_gate.h"
#include "handlers.h"
#include "op_output.h"
#include "op_tensor.h"
#include "vm_lock.h"

static vm_status_t vma_transfer_not_found(uint64_t id) {
  return vm_status_make(VM_NOT_FOUND, "transfer %llu not found in this session",
                        (unsigned long long)id);
}

static vma_transfer_t *vma_find_transfer(vma_session_t *s, uint64_t id) {
  for (vma_transfer_t *t = s->transfers; t; t = t->next)
    if (t->id == id) return t;
  return NULL;
}

/* Allocates a tensor on the VM's device 0 (VM held exclusively) and fills
 * it from host bytes. */
static vm_status_t vma_tensor_from_host(vmagent_t *a, vma_session_t *s, vma_vm_t *v,
                                        const Vmrpc__TensorMeta *meta, const uint8_t *data,
                                        size_t avail, size_t *out_used, vm_value_t *out) {
  vm_dtype_t dt;
  int64_t dims[VMP_MAX_NDIM];
  uint32_t ndim;
  uint64_t nbytes;
  VM_RETURN_IF_ERROR(vmp_meta_check(meta, 0, &dt, dims, &ndim, &nbytes));
  if (nbytes > avail)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "tensor of %llu bytes but only %zu payload bytes are left; send "
                          "larger tensors with TensorBegin/TensorChunk",
                          (unsigned long long)nbytes, avail);
  VM_RETURN_IF_ERROR(vma_check_session_mem(a, s, nbytes, "a tensor"));
  vma_vm_apply_limit(a, s, v);
  VM_RETURN_IF_ERROR(vm_tensor_alloc(vm_machine_allocator(v->m, 0), dt, dims, ndim, out));
  vm_tensor_t *t = vm_value_as_tensor(out);
  vm_storage_t *sto = t->storage;
  vma_device_t *gate = vma_device_of(a, sto->device);
  vm_status_t st = vma_copy_enter(a, gate);
  if (!st) {
    st = sto->device->ops->copy_from_host(sto->device, sto->buffer, t->offset, data, nbytes);
    vma_copy_exit(gate);
  }
  if (st) {
    vm_value_release(out);
    return st;
  }
  *out_used = (size_t)nbytes;
  return VM_STATUS_OK;
}

/* Converts a wire value for VM v (held exclusively). Inline tensors take
 * their bytes from *payload in order; tensor_refs are recorded in consumed
 * (taken out of the session only when the whole operation succeeds). */
static vm_status_t vma_value_in(vma_ctx_t *c, vma_vm_t *v, const Vmrpc__Value *w,
                                const uint8_t **payload, size_t *left, vma_transfer_t **consumed,
                                uint32_t *num_consumed, vm_value_t *out) {
  *out = vm_value_none();
  if (!w) return vma_missing("value");
  switch (w->kind_case) {
    case VMRPC__VALUE__KIND_NONE: return VM_STATUS_OK;
    case VMRPC__VALUE__KIND_I: *out = vm_value_int(w->i); return VM_STATUS_OK;
    case VMRPC__VALUE__KIND_F: *out = vm_value_float(w->f); return VM_STATUS_OK;
    case VMRPC__VALUE__KIND_B: *out = vm_value_bool(w->b); return VM_STATUS_OK;
    case VMRPC__VALUE__KIND_S: {
      size_t n = strlen(w->s ? w->s : "");
      if (n > (1u << 20))
        return vm_status_make(VM_INVALID_ARGUMENT, "string value of %zu bytes exceeds 1 MiB", n);
      return vm_string_new(w->s ? w->s : "", (uint32_t)n, out);
    }
    case VMRPC__VALUE__KIND_SHAPE: {
      if (!w->shape) return vma_missing("shape");
      if (w->shape->n_dims > VMP_MAX_NDIM)
        return vm_status_make(VM_INVALID_ARGUMENT, "shape has %zu dimensions, at most %d allowed",
                              w->shape->n_dims, VMP_MAX_NDIM);
      return vm_shape_new(w->shape->dims, (uint32_t)w->shape->n_dims, out);
    }
    case VMRPC__VALUE__KIND_TENSOR: {
      size_t used = 0;
      VM_RETURN_IF_ERROR(
          vma_tensor_from_host(c->a, c->s, v, w->tensor, *payload, *left, &used, out));
      *payload += used;
      *left -= used;
      return VM_STATUS_OK;
    }
    case VMRPC__VALUE__KIND_TENSOR_REF: {
      pthread_mutex_lock(&c->s->lock);
      vma_transfer_t *t = vma_find_transfer(c->s, w->tensor_ref);
      vm_status_t st = VM_STATUS_OK;
      if (!t) {
        st = vma_transfer_not_found(w->tensor_ref);
      } else if (t->vm != v) {
        st = vm_status_make(VM_INVALID_ARGUMENT, "transfer %llu was begun for vm %llu, not vm %llu",
                            (unsigned long long)t->id, (unsigned long long)t->vm->id,
                            (unsigned long long)v->id);
      } else {
        st = vma_chunks_complete(&t->ck);
      }
      for (uint32_t i = 0; !st && i < *num_consumed; i++)
        if (consumed[i] == t)
          st = vm_status_make(VM_INVALID_ARGUMENT, "transfer %llu is used twice",
                              (unsigned long long)t->id);
      if (!st) {
        *out = t->tensor;
        vm_value_retain(out);
        consumed[(*num_consumed)++] = t;
      }
      pthread_mutex_unlock(&c->s->lock);
      return st;
    }
    case VMRPC__VALUE__KIND_TUPLE_ARITY:
      return vm_status_make(VM_INVALID_ARGUMENT,
                            "a tuple cannot be sent as a value; pass its fields one by one");
    default: return vm_status_make(VM_INVALID_ARGUMENT, "value has no kind set");
  }
}

/* Drops consumed transfers after success (VM held exclusively). */
static void vma_consume_transfers(vma_session_t *s, vma_transfer_t **consumed, uint32_t n) {
  pthread_mutex_lock(&s->lock);
  for (uint32_t i = 0; i < n; i++) {
    vma_transfer_t **pp = &s->transfers;
    while (*pp && *pp != consumed[i]) pp = &(*pp)->next;
    if (*pp) {
      *pp = consumed[i]->next;
      s->num_transfers--;
      vma_transfer_free(consumed[i]);
    }
  }
  pthread_mutex_unlock(&s->lock);
}

vm_status_t vma_op_tensor_begin(vma_ctx_t *c) {
  const Vmrpc__TensorBeginRequest *q = c->rq->tensor_begin;
  vmagent_t *a = c->a;
  vma_session_t *s = c->s;
  vm_dtype_t dt;
  int64_t dims[VMP_MAX_NDIM];
  uint32_t ndim;
  uint64_t nbytes;
  VM_RETURN_IF_ERROR(vmp_meta_check(q->meta, 0, &dt, dims, &ndim, &nbytes));
  vma_vm_t *v;
  VM_RETURN_IF_ERROR(vma_vm_acquire(s, q->vm_id, VMA_USE_EXCL, &v));
  vma_transfer_t *t = calloc(1, sizeof(*t));
  vm_status_t st = VM_STATUS_OK;
  if (!t) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
    goto fail;
  }
  pthread_mutex_lock(&s->lock);
  uint32_t nt = s->num_transfers;
  pthread_mutex_unlock(&s->lock);
  if (nt >= VMA_MAX_TRANSFERS) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED,
                        "this session holds %u transfers, the limit; use or free them first", nt);
    goto fail;
  }
  st = vma_check_session_mem(a, s, nbytes, "a tensor transfer");
  if (st) goto fail;
  vma_vm_apply_limit(a, s, v);
  /* The device refuses an impossible size first; only then is the chunk
   * bitmap (nbytes / chunk bits) sized from it. */
  st = vm_tensor_alloc(vm_machine_allocator(v->m, 0), dt, dims, ndim, &t->tensor);
  if (st) goto fail;
  st = vma_chunks_init(&t->ck, nbytes, a->cfg.chunk_bytes);
  if (st) goto fail;
  t->vm = v;
  pthread_mutex_lock(&s->lock);
  t->id = vma_new_handle(s);
  t->next = s->transfers;
  s->transfers = t;
  s->num_transfers++;
  pthread_mutex_unlock(&s->lock);
  vma_vm_release(s, v, VMA_USE_EXCL);
  Vmrpc__TensorBeginResponse *r =
      VMA_RESPONSE(c, TENSOR_BEGIN, tensor_begin, tensor_begin_response);
  r->transfer_id = t->id;
  return VM_STATUS_OK;
fail:
  vma_transfer_free(t);
  vma_vm_release(s, v, VMA_USE_EXCL);
  return st;
}

vm_status_t vma_op_tensor_chunk(vma_ctx_t *c) {
  const Vmrpc__TensorChunkRequest *q = c->rq->tensor_chunk;
  vma_session_t *s = c->s;
  uint64_t idx = 0;
  pthread_mutex_lock(&s->lock);
  vma_transfer_t *t = vma_find_transfer(s, q->transfer_id);
  vm_status_t st = t ? vma_chunk_claim(&t->ck, c->a->cfg.chunk_bytes, q->offset, c->payload_len,
                                       "transfer", t->id, &idx)
                     : vma_transfer_not_found(q->transfer_id);
  pthread_mutex_unlock(&s->lock);
  if (st) return st;
  /* Straight from the message into the device buffer. The claim keeps t
   * alive: FreeVM and SetInput wait for writers; the copy touches only the
   * buffer, not the VM, so it may overlap an invocation of that VM. */
  vm_tensor_t *tt = vm_value_as_tensor(&t->tensor);
  vm_storage_t *sto = tt->storage;
  vma_device_t *gate = vma_device_of(c->a, sto->device);
  st = vma_copy_enter(c->a, gate);
  if (!st) {
    st = sto->device->ops->copy_from_host(sto->device, sto->buffer, tt->offset + q->offset,
                                          c->payload, c->payload_len);
    vma_copy_exit(gate);
  }
  vma_chunk_finish(s, &t->ck, idx, c->payload_len, st == VM_STATUS_OK);
  if (st) return st;
  VMA_RESPONSE(c, TENSOR_CHUNK, tensor_chunk, tensor_chunk_response);
  return VM_STATUS_OK;
}

int vma_tensor_chunk_direct(vmagent_t *a, vma_session_t *s, const Vmrpc__TensorChunkRequest *q,
                            vma_payload_src_t *src, vm_status_t *out_st) {
  uint64_t idx = 0;
  pthread_mutex_lock(&s->lock);
  vma_transfer_t *t = vma_find_transfer(s, q->transfer_id);
  vm_tensor_t *tt = t ? vm_value_as_tensor(&t->tensor) : NULL;
  vm_storage_t *sto = tt ? tt->storage : NULL;
  vm_status_t st = VM_STATUS_OK;
  if (sto && sto->device->type == VM_DEVICE_CPU)
    st = vma_chunk_claim(&t->ck, a->cfg.chunk_bytes, q->offset, (size_t)src->len, "transfer",
                         t->id, &idx);
  else
    sto = NULL;
  pthread_mutex_unlock(&s->lock);
  if (!sto || st) {
    vm_status_free(st); /* the usual path answers with it */
    return 1;
  }
  vma_device_t *gate = vma_device_of(a, sto->device);
  if (!vma_copy_try_enter(a, gate)) { /* a measurement: the usual path waits for it */
    vma_chunk_finish(s, &t->ck, idx, (size_t)src->len, 0);
    return 1;
  }
  /* The claim keeps t alive, as in vma_op_tensor_chunk; the claim checked
   * the chunk against the tensor's bytes. */
  int rv = src->read(src->ctx, (uint8_t *)sto->buffer.handle + tt->offset + q->offset,
                     (size_t)src->len);
  vma_copy_exit(gate);
  vma_chunk_finish(s, &t->ck, idx, (size_t)src->len, rv == 0);
  *out_st = rv ? vm_status_make(VM_UNAVAILABLE,
                                "the connection failed while transfer %llu's chunk arrived",
                                (unsigned long long)t->id)
               : VM_STATUS_OK;
  return 0;
}

vm_status_t vma_op_set_input(vma_ctx_t *c) {
  const Vmrpc__SetInputRequest *q = c->rq->set_input;
  vma_session_t *s = c->s;
  VM_RETURN_IF_ERROR(vma_check_name(q->func, "func"));
  if (q->param_case == VMRPC__SET_INPUT_REQUEST__PARAM_NAME)
    VM_RETURN_IF_ERROR(vma_check_name(q->name, "parameter name"));
  else if (q->param_case != VMRPC__SET_INPUT_REQUEST__PARAM_INDEX)
    return vm_status_make(VM_INVALID_ARGUMENT, "SetInput needs a parameter index or name");
  if (!q->value) return vma_missing("value");
  if (q->value->kind_case != VMRPC__VALUE__KIND_TENSOR) VM_RETURN_IF_ERROR(vma_no_payload(c));
  vma_vm_t *v;
  VM_RETURN_IF_ERROR(vma_vm_acquire(s, q->vm_id, VMA_USE_EXCL, &v));
  const uint8_t *p = c->payload;
  size_t left = c->payload_len;
  vma_transfer_t *consumed[1];
  uint32_t nc = 0;
  vm_value_t val = vm_value_none();
  vm_status_t st = vma_value_in(c, v, q->value, &p, &left, consumed, &nc, &val);
  if (!st && left)
    st = vm_status_make(VM_INVALID_ARGUMENT, "the tensor needs %zu payload bytes but %zu were sent",
                        c->payload_len - left, c->payload_len);
  /* Setting may copy the value onto device 0. */
  vma_device_t *gate = vma_device_of(c->a, vm_machine_device(v->m, 0));
  if (!st) st = vma_copy_enter(c->a, gate);
  if (!st) {
    if (q->param_case == VMRPC__SET_INPUT_REQUEST__PARAM_NAME)
      st = vm_machine_set_input_by_name(v->m, q->func, q->name, &val);
    else
      st = vm_machine_set_input(v->m, q->func, q->index, &val);
    vma_copy_exit(gate);
  }
  vm_value_release(&val);
  if (!st) vma_consume_transfers(s, consumed, nc);
  vma_vm_release(s, v, VMA_USE_EXCL);
  if (st) return st;
  VMA_RESPONSE(c, SET_INPUT, set_input, set_input_response);
  return VM_STATUS_OK;
}

vm_status_t vma_op_save_function(vma_ctx_t *c) {
  const Vmrpc__SaveFunctionRequest *q = c->rq->save_function;
  vma_session_t *s = c->s;
  VM_RETURN_IF_ERROR(vma_check_name(q->func, "func"));
  VM_RETURN_IF_ERROR(vma_check_name(q->saved_name, "saved_name"));
  if (q->n_args > VMA_MAX_SAVE_ARGS)
    return vm_status_make(VM_INVALID_ARGUMENT, "%zu arguments, at most %d", q->n_args,
                          VMA_MAX_SAVE_ARGS);
  vma_vm_t *v;
  VM_RETURN_IF_ERROR(vma_vm_acquire(s, q->vm_id, VMA_USE_EXCL, &v));
  vm_status_t st = VM_STATUS_OK;
  size_t n = q->n_args;
  vm_value_t *args = calloc(n ? n : 1, sizeof(*args));
  vma_transfer_t **consumed = calloc(n ? n : 1, sizeof(*consumed));
  uint32_t nc = 0, made = 0;
  const uint8_t *p = c->payload;
  size_t left = c->payload_len;
  if (!args || !consumed) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
    goto done;
  }
  /* Inline tensor arguments take their bytes from the payload one after
   * the other, in argument order. */
  for (; made < n && !st; made++)
    st = vma_value_in(c, v, q->args[made], &p, &left, consumed, &nc, &args[made]);
  if (!st && left)
    st = vm_status_make(VM_INVALID_ARGUMENT,
                        "the arguments' inline tensors need %zu payload bytes but %zu were sent",
                        c->payload_len - left, c->payload_len);
  if (!st) st = vm_machine_save_function(v->m, q->func, q->saved_name, args, (uint32_t)n);
  if (!st) vma_consume_transfers(s, consumed, nc);
done:
  for (uint32_t i = 0; args && i < made; i++) vm_value_release(&args[i]);
  free(args);
  free(consumed);
  vma_vm_release(s, v, VMA_USE_EXCL);
  if (st) return st;
  VMA_RESPONSE(c, SAVE_FUNCTION, save_function, save_function_response);
  return VM_STATUS_OK;
}
