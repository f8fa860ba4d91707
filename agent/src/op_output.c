/* Results out of a VM: GetOutputArity, GetOutput (bytes straight from the
 * device into the reply) and the wire description of a value. */
#include <string.h>

#include "op_output.h"

#include "device_gate.h"
#include "handlers.h"
#include "vm_lock.h"

static vm_status_t vma_check_path(size_t n, const uint32_t *path) {
  (void)path;
  if (n > VMA_MAX_PATH)
    return vm_status_make(VM_INVALID_ARGUMENT, "output path of %zu steps exceeds %d", n,
                          VMA_MAX_PATH);
  return VM_STATUS_OK;
}

vm_status_t vma_op_get_output_arity(vma_ctx_t *c) {
  const Vmrpc__GetOutputArityRequest *q = c->rq->get_output_arity;
  vma_session_t *s = c->s;
  VM_RETURN_IF_ERROR(vma_check_name(q->func, "func"));
  VM_RETURN_IF_ERROR(vma_check_path(q->n_path, q->path));
  vma_vm_t *v;
  VM_RETURN_IF_ERROR(vma_vm_acquire(s, q->vm_id, VMA_USE_READ, &v));
  int64_t arity = -1;
  /* Reference counts change inside: serialise with other readers. */
  pthread_mutex_lock(&s->lock);
  vm_status_t st = vm_machine_get_output_arity(v->m, q->func, q->path, (uint32_t)q->n_path, &arity);
  pthread_mutex_unlock(&s->lock);
  vma_vm_release(s, v, VMA_USE_READ);
  if (st) return st;
  Vmrpc__GetOutputArityResponse *r =
      VMA_RESPONSE(c, GET_OUTPUT_ARITY, get_output_arity, get_output_arity_response);
  r->arity = arity;
  return VM_STATUS_OK;
}

/* Describes an output value on the wire. dims must hold VMP_MAX_NDIM. */
vm_status_t vma_value_out(const vm_value_t *val, Vmrpc__Value *w, Vmrpc__TensorMeta *meta,
                          Vmrpc__ShapeValue *shape, char *dtype_buf, size_t dtype_len) {
  vmrpc__value__init(w);
  switch (val->kind) {
    case VM_VAL_NONE:
      w->kind_case = VMRPC__VALUE__KIND_NONE;
      w->none = 1;
      return VM_STATUS_OK;
    case VM_VAL_INT:
      w->kind_case = VMRPC__VALUE__KIND_I;
      w->i = val->u.i;
      return VM_STATUS_OK;
    case VM_VAL_FLOAT:
      w->kind_case = VMRPC__VALUE__KIND_F;
      w->f = val->u.f;
      return VM_STATUS_OK;
    case VM_VAL_BOOL:
      w->kind_case = VMRPC__VALUE__KIND_B;
      w->b = val->u.i != 0;
      return VM_STATUS_OK;
    case VM_VAL_DTYPE:
      w->kind_case = VMRPC__VALUE__KIND_S;
      w->s = vm_dtype_str(val->u.dtype, dtype_buf, dtype_len);
      return VM_STATUS_OK;
    case VM_VAL_STRING:
      w->kind_case = VMRPC__VALUE__KIND_S;
      w->s = vm_value_as_string(val)->data;
      return VM_STATUS_OK;
    case VM_VAL_SHAPE: {
      vm_shape_t *sh = vm_value_as_shape(val);
      vmrpc__shape_value__init(shape);
      shape->n_dims = sh->ndim;
      shape->dims = sh->dims;
      w->kind_case = VMRPC__VALUE__KIND_SHAPE;
      w->shape = shape;
      return VM_STATUS_OK;
    }
    case VM_VAL_TUPLE:
      w->kind_case = VMRPC__VALUE__KIND_TUPLE_ARITY;
      w->tuple_arity = vm_value_as_tuple(val)->size;
      return VM_STATUS_OK;
    case VM_VAL_TENSOR: {
      vm_tensor_t *t = vm_value_as_tensor(val);
      vmrpc__tensor_meta__init(meta);
      meta->dtype = vm_dtype_str(t->dtype, dtype_buf, dtype_len);
      meta->n_shape = t->ndim;
      meta->shape = t->shape;
      meta->nbytes = vm_tensor_nbytes_of(t);
      w->kind_case = VMRPC__VALUE__KIND_TENSOR;
      w->tensor = meta;
      return VM_STATUS_OK;
    }
    default:
      return vm_status_make(VM_INVALID_ARGUMENT, "the output is a %s, which cannot cross the wire",
                            vm_value_kind_name(val->kind));
  }
}

vm_status_t vma_op_get_output(vma_ctx_t *c) {
  const Vmrpc__GetOutputRequest *q = c->rq->get_output;
  vmagent_t *a = c->a;
  vma_session_t *s = c->s;
  VM_RETURN_IF_ERROR(vma_check_name(q->func, "func"));
  VM_RETURN_IF_ERROR(vma_check_path(q->n_path, q->path));
  vma_vm_t *v;
  VM_RETURN_IF_ERROR(vma_vm_acquire(s, q->vm_id, VMA_USE_READ, &v));
  vm_value_t val = vm_value_none();
  pthread_mutex_lock(&s->lock);
  vm_status_t st = vm_machine_get_output(v->m, q->func, q->path, (uint32_t)q->n_path, &val);
  pthread_mutex_unlock(&s->lock);
  Vmrpc__GetOutputResponse r;
  Vmrpc__Value w;
  Vmrpc__TensorMeta meta;
  Vmrpc__ShapeValue shape;
  char dtype[32];
  uint64_t len = 0;
  vm_tensor_t *t = NULL;
  if (st) goto done;
  st = vma_value_out(&val, &w, &meta, &shape, dtype, sizeof(dtype));
  if (st) goto done;
  vmrpc__get_output_response__init(&r);
  r.value = &w;
  r.offset = q->offset;
  t = vm_value_as_tensor(&val);
  if (t) {
    uint64_t nbytes = vm_tensor_nbytes_of(t);
    if (q->offset > nbytes) {
      st = vm_status_make(VM_OUT_OF_RANGE, "offset %llu is past the output's %llu bytes",
                          (unsigned long long)q->offset, (unsigned long long)nbytes);
      goto done;
    }
    uint64_t cap =
        q->max_bytes && q->max_bytes < a->cfg.chunk_bytes ? q->max_bytes : a->cfg.chunk_bytes;
    len = nbytes - q->offset < cap ? nbytes - q->offset : cap;
  } else if (q->offset) {
    st = vm_status_make(VM_OUT_OF_RANGE, "offset %llu given for an output that is not a tensor",
                        (unsigned long long)q->offset);
    goto done;
  }
  c->rs.op_case = VMRPC__RESPONSE__OP_GET_OUTPUT;
  c->rs.get_output = &r;
  {
    /* The device writes the bytes straight into the outgoing message. */
    size_t env = vmp_frame_size(&c->rs.base);
    uint8_t *buf = c->out->alloc(c->out, env + (size_t)len);
    if (!buf) {
      st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory for a %llu-byte reply",
                          (unsigned long long)len);
    } else {
      vmp_frame_write(&c->rs.base, buf);
      if (len) {
        vm_storage_t *sto = t->storage;
        vma_device_t *gate = vma_device_of(a, sto->device);
        st = vma_copy_enter(a, gate);
        if (!st) {
          st = sto->device->ops->copy_to_host(sto->device, buf + env, sto->buffer,
                                              t->offset + q->offset, len);
          vma_copy_exit(gate);
        }
      }
      if (!st) c->replied = 1;
    }
  }
  c->rs.op_case = VMRPC__RESPONSE__OP__NOT_SET;
  c->rs.get_output = NULL;
done:
  pthread_mutex_lock(&s->lock);
  vm_value_release(&val);
  pthread_mutex_unlock(&s->lock);
  vma_vm_release(s, v, VMA_USE_READ);
  return st;
}
