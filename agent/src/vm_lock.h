/* Holding a VM for one request, and its devices for an invocation
 * (vm_lock.c).
 *
 * A VM runs one request at a time: one exclusive holder (changes the VM, or
 * runs its code) or any number of readers (GetOutput copies), under the
 * session lock; a request that finds it taken gets "busy" at once. An
 * invocation also holds the run locks of the VM's agent devices, taken in
 * device index order and waited for (Cancel, the deadline or shutdown end
 * the wait). */
#ifndef VMA_VM_LOCK_H
#define VMA_VM_LOCK_H

#include <stdint.h>

#include "session.h"
#include "vmrpc/status.h"
#include "vmagent/agent.h"

typedef enum vma_use {
  VMA_USE_EXCL = 0, /* changes the VM: alone */
  VMA_USE_RUN = 1,  /* alone and runs VM code: cancellable */
  VMA_USE_READ = 2, /* reads a result: alongside other readers */
} vma_use_t;

/* The VM of handle id, NULL if none (session lock held). */
vma_vm_t *vma_find_vm(vma_session_t *s, uint64_t id);
/* NOT_FOUND "vm N not found in this session". */
vm_status_t vma_vm_not_found(uint64_t id);
/* FAILED_PRECONDITION "vm N is busy: ...". */
vm_status_t vma_vm_busy(uint64_t id);
/* Claims VM id for one request as use: NOT_FOUND, busy, or CANCELLED for a
 * run in a session that has ended. An exclusive claim resets the VM's
 * cancel token. */
vm_status_t vma_vm_acquire(vma_session_t *s, uint64_t id, vma_use_t use, vma_vm_t **out_v);
void vma_vm_release(vma_session_t *s, vma_vm_t *v, vma_use_t use);
/* Holds VM vm_id for running (VMA_USE_RUN) and takes its devices' run locks,
 * waiting until deadline_ns (0: no deadline); caps its allocators to the
 * session memory limit. vma_run_unlock() lets go of both. */
vm_status_t vma_run_locked(vmagent_t *a, vma_session_t *s, uint64_t vm_id, uint64_t deadline_ns,
                           vma_vm_t **out_v);
void vma_run_unlock(vmagent_t *a, vma_session_t *s, vma_vm_t *v);

#endif /* VMA_VM_LOCK_H */
