/* The quiet gate of a device: while a TimeEvaluate or Profile measures a
 * function on a device, no other request enqueues work there. Transfers
 * (TensorChunk, GetOutput, inline tensors of SetInput / SaveFunction, a new
 * VM's constants) do not take the device's run lock — they may overlap an
 * ordinary invocation — so without the gate another session's 64 MiB copy
 * would sit in the measured function's queue, delay its syncs and, for the
 * wall clock, land in its figures.
 *
 * Copies pass the gate one device at a time and hold nothing else while
 * they wait; a measurement closes the gate of all its devices first and
 * then waits for the copies already inside to finish. So the two never wait
 * on each other in a circle.
 *
 * Worker processes (isolation/) that share a device hold the same gate
 * across processes too: a byte-range lock per device, shared while the
 * process has copies inside, exclusive while it measures.
 */
#include <time.h>

#include "device_gate.h"

#include "agent_core.h"
#include "isolation/xlock.h"
#include "session.h"
#include "time_in.h"

/* Taking the cross-process gate exclusively costs a system call; longer
 * than this it had to wait for another worker's copies. */
#define VMA_XGATE_WAITED_NS 200000ull

vm_status_t vma_gate_init(vma_device_t *d) {
  pthread_condattr_t ca;
  if (pthread_condattr_init(&ca) != 0) return vm_status_make(VM_INTERNAL, "pthread_condattr_init");
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  int rv = pthread_cond_init(&d->gate_cv, &ca);
  pthread_condattr_destroy(&ca);
  if (rv != 0) return vm_status_make(VM_INTERNAL, "pthread_cond_init failed");
  if (pthread_mutex_init(&d->gate_mu, NULL) != 0) {
    pthread_cond_destroy(&d->gate_cv);
    return vm_status_make(VM_INTERNAL, "pthread_mutex_init failed");
  }
  d->copies = 0;
  d->measuring = 0;
  return VM_STATUS_OK;
}

void vma_gate_destroy(vma_device_t *d) {
  pthread_cond_destroy(&d->gate_cv);
  pthread_mutex_destroy(&d->gate_mu);
}

/* Waits on d's gate for 50 ms at most. gate_mu held. */
static void vma_gate_wait_slice(vma_device_t *d) {
  struct timespec ts;
  vma_time_in(CLOCK_MONOTONIC, 50, &ts);
  pthread_cond_timedwait(&d->gate_cv, &d->gate_mu, &ts);
}

vma_device_t *vma_device_of(vmagent_t *a, const vm_device_t *dev) {
  for (uint32_t i = 0; i < a->num_devices; i++)
    if (a->devices[i].dev == dev) return &a->devices[i];
  return NULL; /* a VM's private cpu device: nobody measures it */
}

vm_status_t vma_copy_enter(vmagent_t *a, vma_device_t *d) {
  if (!d) return VM_STATUS_OK;
  pthread_mutex_lock(&d->gate_mu);
  if (d->measuring && a->hooks.on_block) {
    /* About to wait holding a worker: see vma_lock_devices. */
    pthread_mutex_unlock(&d->gate_mu);
    a->hooks.on_block(a);
    pthread_mutex_lock(&d->gate_mu);
  }
  while (d->measuring) {
    if (atomic_load(&a->stopping)) {
      pthread_mutex_unlock(&d->gate_mu);
      return vm_status_make(VM_UNAVAILABLE, "the agent is shutting down");
    }
    vma_gate_wait_slice(d);
  }
  d->copies++;
  if (a->in_worker.lock_fd >= 0 && !d->xgate_shared) {
    /* A worker: its copies hold the gate shared across workers too, while
     * any is inside (a measurement in another worker closes it). */
    (void)vma_xgate_lock(a, d, 0);
    d->xgate_shared = 1;
  }
  pthread_mutex_unlock(&d->gate_mu);
  return VM_STATUS_OK;
}

int vma_copy_try_enter(vmagent_t *a, vma_device_t *d) {
  if (!d) return 1;
  if (a->in_worker.lock_fd >= 0) return 0;
  pthread_mutex_lock(&d->gate_mu);
  int ok = !d->measuring && !atomic_load(&a->stopping);
  if (ok) d->copies++;
  pthread_mutex_unlock(&d->gate_mu);
  return ok;
}

void vma_copy_exit(vma_device_t *d) {
  if (!d) return;
  pthread_mutex_lock(&d->gate_mu);
  if (--d->copies == 0) {
    if (d->xgate_shared) {
      vma_xgate_unlock(d->owner, d);
      d->xgate_shared = 0;
    }
    pthread_cond_broadcast(&d->gate_cv);
  }
  pthread_mutex_unlock(&d->gate_mu);
}

double vma_measure_enter(vmagent_t *a, const vma_vm_t *v) {
  uint64_t t0 = vm_now_ns();
  int waited = 0;
  for (uint32_t k = 0; k < v->num_devs; k++) {
    vma_device_t *d = &a->devices[v->dev_idx[k]];
    pthread_mutex_lock(&d->gate_mu);
    d->measuring = 1;
    pthread_mutex_unlock(&d->gate_mu);
  }
  /* Copies inside are one chunk or one tensor each: short. */
  for (uint32_t k = 0; k < v->num_devs; k++) {
    vma_device_t *d = &a->devices[v->dev_idx[k]];
    pthread_mutex_lock(&d->gate_mu);
    if (d->copies) waited = 1;
    while (d->copies) vma_gate_wait_slice(d);
    pthread_mutex_unlock(&d->gate_mu);
    /* ... and, in a worker, the other workers' copies. */
    uint64_t x0 = vm_now_ns();
    (void)vma_xgate_lock(a, d, 1);
    if (vm_now_ns() - x0 > VMA_XGATE_WAITED_NS) waited = 1;
  }
  return waited ? (double)(vm_now_ns() - t0) / 1e9 : 0.0;
}

void vma_measure_exit(vmagent_t *a, const vma_vm_t *v) {
  for (uint32_t k = 0; k < v->num_devs; k++) {
    vma_device_t *d = &a->devices[v->dev_idx[k]];
    vma_xgate_unlock(a, d);
    pthread_mutex_lock(&d->gate_mu);
    d->measuring = 0;
    pthread_cond_broadcast(&d->gate_cv);
    pthread_mutex_unlock(&d->gate_mu);
  }
}
