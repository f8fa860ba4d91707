/* One device of the agent (vmagent --device): the VM device, the lock that
 * serialises invocations on it, and its quiet gate (device_gate.h). Types
 * only. */
#ifndef VMA_DEVICE_H
#define VMA_DEVICE_H

#include <pthread.h>
#include <stdint.h>

#include "vm/vm.h"

typedef struct vma_device {
  vm_device_t *dev;
  char selector[32];        /* "cpu", "opencl:0", ... */
  pthread_mutex_t run_lock; /* serialises invocations on this device */
  /* The quiet gate (device_gate.c): copies outside invocations pass it,
   * TimeEvaluate / Profile close it. */
  pthread_mutex_t gate_mu;
  pthread_cond_t gate_cv;
  uint32_t copies; /* transfers inside */
  int measuring;   /* closed: a measurement runs here */
  /* In a worker process (gate_mu): this process holds the device's
   * cross-process gate shared, for its copies (isolation/xlock.h). */
  int xgate_shared;
  struct vmagent *owner;
} vma_device_t;

#endif /* VMA_DEVICE_H */
