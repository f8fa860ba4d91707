/* Holding a VM for one request (busy state under the session lock) and
 * its devices' run locks for an invocation. */
#include "vm_lock.h"

#include <time.h>

#include "agent_core.h"
#include "isolation/xlock.h"
#include "time_in.h"

vma_vm_t *vma_find_vm(vma_session_t *s, uint64_t id) {
  for (vma_vm_t *v = s->vms; v; v = v->next)
    if (v->id == id) return v;
  return NULL;
}

vm_status_t vma_vm_not_found(uint64_t id) {
  return vm_status_make(VM_NOT_FOUND, "vm %llu not found in this session", (unsigned long long)id);
}

vm_status_t vma_vm_busy(uint64_t id) {
  return vm_status_make(VM_FAILED_PRECONDITION,
                        "vm %llu is busy: another request on it is still running; wait for its "
                        "reply (or Cancel it) and retry",
                        (unsigned long long)id);
}

/* Claims a VM for one request. A VM runs one request at a time (its value
 * reference counts are not atomic); a second one gets "busy" instead of
 * racing it. */
vm_status_t vma_vm_acquire(vma_session_t *s, uint64_t id, vma_use_t use, vma_vm_t **out_v) {
  *out_v = NULL;
  pthread_mutex_lock(&s->lock);
  vma_vm_t *v = vma_find_vm(s, id);
  if (!v) {
    pthread_mutex_unlock(&s->lock);
    return vma_vm_not_found(id);
  }
  if (v->exclusive || (use != VMA_USE_READ && v->readers)) {
    pthread_mutex_unlock(&s->lock);
    return vma_vm_busy(id);
  }
  if (use == VMA_USE_RUN && s->ended) {
    /* The session ended while this request was on its way here: its
     * cancel has been and gone, so this run would never be stopped. */
    pthread_mutex_unlock(&s->lock);
    return vm_status_make(VM_CANCELLED, "vm %llu: the session ended (Goodbye or closed connection)",
                          (unsigned long long)id);
  }
  if (use == VMA_USE_READ) {
    v->readers++;
  } else {
    vma_vm_snapshot(v);
    v->exclusive = 1;
    v->running = use == VMA_USE_RUN;
    /* This request owns the VM's cancel token from here: a Cancel from now
     * on (same lock) sets it and it stays set, however early it lands. */
    atomic_store(&v->cancel_pending, 0);
    vm_machine_cancel_reset(v->m);
  }
  pthread_mutex_unlock(&s->lock);
  *out_v = v;
  return VM_STATUS_OK;
}

void vma_vm_release(vma_session_t *s, vma_vm_t *v, vma_use_t use) {
  pthread_mutex_lock(&s->lock);
  if (use == VMA_USE_READ) {
    v->readers--;
  } else {
    v->exclusive = 0;
    v->running = 0;
    atomic_store(&v->cancel_pending, 0);
    vma_vm_snapshot(v);
  }
  pthread_mutex_unlock(&s->lock);
}

/* Takes the run locks of the VM's devices in index order (no deadlock
 * between VMs sharing devices), waiting in slices so that a Cancel, the
 * deadline or shutdown ends the wait. */
static vm_status_t vma_lock_devices(vmagent_t *a, vma_vm_t *v, uint64_t deadline_ns) {
  for (uint32_t k = 0; k < v->num_devs; k++) {
    vma_device_t *d = &a->devices[v->dev_idx[k]];
    if (pthread_mutex_trylock(&d->run_lock) == 0) continue;
    /* About to wait, holding a worker: the transport makes sure another
     * worker is free for Cancel, Ping and chunks. */
    if (a->hooks.on_block) a->hooks.on_block(a);
    for (;;) {
      struct timespec ts;
      vma_time_in(CLOCK_REALTIME, 50, &ts);
      if (pthread_mutex_timedlock(&d->run_lock, &ts) == 0) break;
      vm_status_t st = VM_STATUS_OK;
      if (atomic_load(&v->cancel_pending))
        st = vm_status_make(VM_CANCELLED, "cancelled while waiting for device %s", d->selector);
      else if (atomic_load(&a->stopping))
        st = vm_status_make(VM_UNAVAILABLE, "the agent is shutting down");
      else if (deadline_ns && vm_now_ns() >= deadline_ns)
        st = vm_status_make(VM_DEADLINE_EXCEEDED,
                            "deadline passed while waiting for device %s (busy with another "
                            "session's work)",
                            d->selector);
      if (st) {
        while (k-- > 0) pthread_mutex_unlock(&a->devices[v->dev_idx[k]].run_lock);
        return st;
      }
    }
  }
  /* In a worker process, the devices' run locks across worker processes
   * (isolation/xlock.h). */
  for (uint32_t k = 0; k < v->num_devs; k++) {
    vm_status_t st = vma_xrun_lock(a, &a->devices[v->dev_idx[k]], v, deadline_ns);
    if (st) {
      for (uint32_t j = k; j-- > 0;) vma_xrun_unlock(a, &a->devices[v->dev_idx[j]]);
      for (uint32_t j = v->num_devs; j-- > 0;)
        pthread_mutex_unlock(&a->devices[v->dev_idx[j]].run_lock);
      return st;
    }
  }
  return VM_STATUS_OK;
}

static void vma_unlock_devices(vmagent_t *a, vma_vm_t *v) {
  for (uint32_t k = v->num_devs; k-- > 0;) {
    vma_xrun_unlock(a, &a->devices[v->dev_idx[k]]);
    pthread_mutex_unlock(&a->devices[v->dev_idx[k]].run_lock);
  }
}

/* Holds a VM for running, under its devices' run locks (waited for until
 * deadline_ns, 0: no deadline); vma_run_unlock() lets go. */
vm_status_t vma_run_locked(vmagent_t *a, vma_session_t *s, uint64_t vm_id, uint64_t deadline_ns,
                           vma_vm_t **out_v) {
  if (atomic_load(&a->stopping))
    return vm_status_make(VM_UNAVAILABLE, "the agent is shutting down");
  VM_RETURN_IF_ERROR(vma_vm_acquire(s, vm_id, VMA_USE_RUN, out_v));
  vm_status_t st = vma_lock_devices(a, *out_v, deadline_ns);
  if (st) {
    vma_vm_release(s, *out_v, VMA_USE_RUN);
    return st;
  }
  vma_vm_apply_limit(a, s, *out_v);
  return VM_STATUS_OK;
}

void vma_run_unlock(vmagent_t *a, vma_session_t *s, vma_vm_t *v) {
  vma_unlock_devices(a, v);
  vma_vm_release(s, v, VMA_USE_RUN);
}
