/* Cross-process device locks (xlock.c): in a worker process of session
 * isolation, the run lock and the quiet gate of each device, held across
 * the worker processes that share it, as byte-range (OFD) locks on the
 * agent's device lock file (isolation/shared.h), which the kernel drops
 * when the holding process dies. No-ops outside a worker process. */
#ifndef VMA_ISOLATION_XLOCK_H
#define VMA_ISOLATION_XLOCK_H

#include <stdint.h>

#include "device.h"
#include "vmrpc/status.h"
#include "vmagent/agent.h"

typedef struct vma_vm vma_vm_t;

/* Opens this worker process's own handle of the agent's device lock file
 * (inherited as fd) and, with slot >= 0, counts its host and cpu device
 * memory in the shared totals under the agent's limits. */
vm_status_t vma_xlock_open(vmagent_t *a, int fd, int slot);
/* Lets go of what vma_xlock_open took (vmagent_free). */
void vma_xlock_close(vmagent_t *a);
/* Takes d's cross-process run lock for an invocation of v, waiting in
 * growing naps while another worker process holds it: CANCELLED when v's
 * run is cancelled, DEADLINE_EXCEEDED past deadline_ns (0: none). */
vm_status_t vma_xrun_lock(vmagent_t *a, vma_device_t *d, const vma_vm_t *v, uint64_t deadline_ns);
void vma_xrun_unlock(vmagent_t *a, vma_device_t *d);
/* Shared (copies) or exclusive (measurements) hold of d's gate; waits in
 * growing naps (at most 5 ms) while another worker process holds it the
 * other way, with no bound of its own: the agent's supervision
 * (isolation/supervisor.h) kills a holder that is suspended or past its
 * request's bound. Returns OK. */
vm_status_t vma_xgate_lock(vmagent_t *a, vma_device_t *d, int exclusive);
void vma_xgate_unlock(vmagent_t *a, vma_device_t *d);

#endif /* VMA_ISOLATION_XLOCK_H */
