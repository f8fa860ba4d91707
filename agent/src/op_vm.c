/* A VM's life: CreateVM, Invoke, Cancel, FreeVM. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_gate.h"
#include "handlers.h"
#include "vm_lock.h"

static int vma_find_device(const vmagent_t *a, const char *sel) {
  for (uint32_t i = 0; i < a->num_devices; i++) {
    if (strcmp(a->devices[i].selector, sel) == 0) return (int)i;
    if (strcmp(sel, "cpu:0") == 0 && strcmp(a->devices[i].selector, "cpu") == 0) return (int)i;
  }
  return -1;
}

vm_status_t vma_op_create_vm(vma_ctx_t *c) {
  const Vmrpc__CreateVMRequest *q = c->rq->create_vm;
  vmagent_t *a = c->a;
  vma_session_t *s = c->s;
  if (q->n_devices > VMA_MAX_VM_DEVICES)
    return vm_status_make(VM_INVALID_ARGUMENT, "%zu devices given, at most %d per VM", q->n_devices,
                          VMA_MAX_VM_DEVICES);
  vm_exec_mode_t mode = VM_EXEC_BYTECODE;
  if (q->exec_mode && *q->exec_mode && vm_exec_mode_parse(q->exec_mode, &mode) != 0)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "unknown exec_mode '%.64s' (use bytecode or compiled)", q->exec_mode);
  vm_device_t *devs[VMA_MAX_VM_DEVICES];
  vm_allocator_kind_t kinds[VMA_MAX_VM_DEVICES];
  uint32_t idx[VMA_MAX_VM_DEVICES];
  uint32_t n = (uint32_t)q->n_devices;
  if (n == 0) { /* the agent's first device */
    devs[0] = a->devices[0].dev;
    kinds[0] = VM_ALLOC_POOLED;
    idx[0] = 0;
    n = 1;
  }
  for (uint32_t i = 0; i < q->n_devices; i++) {
    const Vmrpc__DeviceSpec *d = q->devices[i];
    const char *sel = d && d->selector ? d->selector : "";
    int k = vma_find_device(a, sel);
    if (k < 0) {
      char list[512] = "";
      size_t off = 0;
      for (uint32_t j = 0; j < a->num_devices && off < sizeof(list); j++)
        off += (size_t)snprintf(list + off, sizeof(list) - off, "%s%s", j ? ", " : "",
                                a->devices[j].selector);
      return vm_status_make(VM_NOT_FOUND, "device '%.64s' not found; this agent has: %s", sel,
                            list);
    }
    for (uint32_t j = 0; j < i; j++)
      if (idx[j] == (uint32_t)k)
        return vm_status_make(VM_INVALID_ARGUMENT, "device '%s' is listed twice", sel);
    kinds[i] = VM_ALLOC_POOLED;
    if (d->allocator && *d->allocator && vm_allocator_kind_parse(d->allocator, &kinds[i]) != 0)
      return vm_status_make(VM_INVALID_ARGUMENT,
                            "unknown allocator '%.64s' for device %s (use pooled or naive)",
                            d->allocator, sel);
    devs[i] = a->devices[k].dev;
    idx[i] = (uint32_t)k;
  }
  pthread_mutex_lock(&s->lock);
  vma_execref_t *er = s->execs;
  while (er && er->id != q->exec_id) er = er->next;
  vma_exec_entry_t *e = er ? er->entry : NULL;
  if (e) vma_store_retain(a->store, e);
  uint32_t nvms = s->num_vms;
  uint64_t used = vma_session_bytes_locked(s, NULL);
  pthread_mutex_unlock(&s->lock);
  if (!e) return vma_exec_not_found(q->exec_id);
  vm_status_t st = VM_STATUS_OK;
  vma_vm_t *v = NULL;
  uint64_t limit = a->cfg.session_mem_limit;
  if (nvms >= VMA_MAX_VMS) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "this session holds %u VMs, the limit; FreeVM some",
                        nvms);
    goto fail;
  }
  if (limit && used >= limit) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED,
                        "the session memory limit of %llu bytes is used up (--session-mem-limit)",
                        (unsigned long long)limit);
    goto fail;
  }
  v = calloc(1, sizeof(*v));
  if (!v) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
    goto fail;
  }
  vm_machine_config_t mc;
  memset(&mc, 0, sizeof(mc));
  mc.mode = mode;
  mc.num_devices = n;
  mc.devices = devs;
  mc.allocators = kinds;
  mc.registry = a->registry;
  mc.mem_limit_bytes = limit ? limit - used : 0;
  mc.host_budget = &s->host;
  /* Creation copies the tensor constants onto device 0. */
  vma_device_t *gate = vma_device_of(a, devs[0]);
  st = vma_copy_enter(a, gate);
  if (st) goto fail;
  st = vm_machine_create(e->exec, &mc, &v->m);
  vma_copy_exit(gate);
  if (st) goto fail;
  v->entry = e;
  /* Run locks in index order; the machine's own appended cpu device (if
   * any) is private to it and needs none. */
  for (uint32_t i = 0; i < n; i++) {
    uint32_t x = idx[i], j = v->num_devs;
    while (j > 0 && v->dev_idx[j - 1] > x) {
      v->dev_idx[j] = v->dev_idx[j - 1];
      j--;
    }
    v->dev_idx[j] = x;
    v->num_devs++;
  }
  atomic_init(&v->cancel_pending, 0);
  vma_vm_snapshot(v);
  pthread_mutex_lock(&s->lock);
  v->id = vma_new_handle(s);
  v->next = s->vms;
  s->vms = v;
  s->num_vms++;
  pthread_mutex_unlock(&s->lock);
  Vmrpc__CreateVMResponse *r = VMA_RESPONSE(c, CREATE_VM, create_vm, create_vmresponse);
  r->vm_id = v->id;
  return VM_STATUS_OK;
fail:
  free(v);
  vma_store_release(a->store, e);
  return st;
}

vm_status_t vma_op_invoke(vma_ctx_t *c) {
  const Vmrpc__InvokeRequest *q = c->rq->invoke;
  VM_RETURN_IF_ERROR(vma_check_name(q->func, "func"));
  uint64_t deadline = q->deadline_ms ? vm_now_ns() + (uint64_t)q->deadline_ms * 1000000ull : 0;
  vma_vm_t *v;
  VM_RETURN_IF_ERROR(vma_run_locked(c->a, c->s, q->vm_id, deadline, &v));
  vm_status_t st = VM_STATUS_OK;
  double secs = 0;
  if (atomic_load(&v->cancel_pending)) {
    st = vm_status_make(VM_CANCELLED, "invocation of '%.128s' cancelled", q->func);
  } else {
    vm_machine_set_deadline(v->m, deadline);
    uint64_t t0 = vm_now_ns();
    st = vm_machine_invoke_stateful(v->m, q->func);
    /* Operators only enqueue their kernels: the reply (and its seconds)
     * means the work is done, and the devices are free of it before their
     * run locks go to another session. */
    for (uint32_t k = 0; !st && k < vm_machine_num_devices(v->m); k++) {
      vm_device_t *dev = vm_machine_device(v->m, k);
      st = dev->ops->sync(dev);
    }
    secs = (double)(vm_now_ns() - t0) * 1e-9;
    vm_machine_set_deadline(v->m, 0);
  }
  vma_run_unlock(c->a, c->s, v);
  if (st) return st;
  Vmrpc__InvokeResponse *r = VMA_RESPONSE(c, INVOKE, invoke, invoke_response);
  r->seconds = secs;
  return VM_STATUS_OK;
}

vm_status_t vma_op_cancel(vma_ctx_t *c) {
  const Vmrpc__CancelRequest *q = c->rq->cancel;
  vma_session_t *s = c->s;
  pthread_mutex_lock(&s->lock);
  vma_vm_t *v = vma_find_vm(s, q->vm_id);
  if (v && v->running) {
    /* Sticky until the next request on this VM resets it. */
    atomic_store(&v->cancel_pending, 1);
    vm_machine_cancel(v->m);
  }
  pthread_mutex_unlock(&s->lock);
  if (!v) return vma_vm_not_found(q->vm_id);
  VMA_RESPONSE(c, CANCEL, cancel, cancel_response);
  return VM_STATUS_OK;
}

vm_status_t vma_op_free_vm(vma_ctx_t *c) {
  const Vmrpc__FreeVMRequest *q = c->rq->free_vm;
  vma_session_t *s = c->s;
  vm_status_t st = VM_STATUS_OK;
  pthread_mutex_lock(&s->lock);
  vma_vm_t *v = vma_find_vm(s, q->vm_id);
  int busy = v && (v->exclusive || v->readers);
  for (vma_transfer_t *t = s->transfers; v && !busy && t; t = t->next)
    if (t->vm == v && t->ck.writers) busy = 1;
  if (!v) {
    st = vma_vm_not_found(q->vm_id);
  } else if (busy) {
    st = vma_vm_busy(q->vm_id);
  } else {
    vma_vm_t **pp = &s->vms;
    while (*pp != v) pp = &(*pp)->next;
    *pp = v->next;
    s->num_vms--;
    vma_vm_destroy(c->a, s, v);
  }
  pthread_mutex_unlock(&s->lock);
  if (st) return st;
  VMA_RESPONSE(c, FREE_VM, free_vm, free_vmresponse);
  return VM_STATUS_OK;
}
