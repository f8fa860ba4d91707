/* The quiet gate of each agent device (device_gate.c has the design). */
#ifndef VMA_DEVICE_GATE_H
#define VMA_DEVICE_GATE_H

#include "device.h"
#include "vmrpc/status.h"
#include "vmagent/agent.h"

typedef struct vma_vm vma_vm_t;

vm_status_t vma_gate_init(vma_device_t *d);
void vma_gate_destroy(vma_device_t *d);
/* The agent device behind dev, NULL for a VM's private cpu device. */
vma_device_t *vma_device_of(vmagent_t *a, const vm_device_t *dev);
/* Around one copy to or from d outside an invocation (d may be NULL):
 * waits while a measurement runs there (UNAVAILABLE on shutdown). Never
 * nest two on one thread. */
vm_status_t vma_copy_enter(vmagent_t *a, vma_device_t *d);
void vma_copy_exit(vma_device_t *d);
/* As vma_copy_enter, but never waits: 0 (not entered) while a measurement
 * runs on d, or in a worker process (whose copies take the cross-process
 * gate); 1 when entered (leave with vma_copy_exit). */
int vma_copy_try_enter(vmagent_t *a, vma_device_t *d);
/* Around a measurement of v (its run locks held): closes the quiet gates
 * of its devices and waits for the copies inside; returns the seconds it
 * had to wait for them (0 when none were inside). */
double vma_measure_enter(vmagent_t *a, const vma_vm_t *v);
void vma_measure_exit(vmagent_t *a, const vma_vm_t *v);

#endif /* VMA_DEVICE_GATE_H */
