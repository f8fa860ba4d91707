/* What session isolation shares between the agent and its worker
 * processes, and a worker process's own side of it. Types only.
 *
 * The device lock file (an anonymous file the agent creates and each
 * worker process reopens: isolation/xlock.c) holds one byte-range lock
 * pair per device (run lock, quiet gate), and its contents are the shared
 * memory below: the host memory and cpu device memory all worker
 * processes' sessions hold, for --host-mem-limit and --device-mem-limit
 * across them, and each worker process's share, which the agent takes
 * back out of the totals when that process ends. */
#ifndef VMA_ISOLATION_SHARED_H
#define VMA_ISOLATION_SHARED_H

#include <stddef.h>
#include <stdint.h>

#include "vm/vm.h"

typedef struct vma_share {
  _Atomic uint64_t host; /* under --host-mem-limit */
  _Atomic uint64_t cpu;  /* on the cpu device, under --device-mem-limit */
} vma_share_t;
typedef struct vma_shared {
  _Atomic uint64_t host_total;
  _Atomic uint64_t cpu_total;
  vma_share_t slot[];
} vma_shared_t;
#define VMA_SHARED_BYTES(slots) (sizeof(vma_shared_t) + (size_t)(slots) * sizeof(vma_share_t))

/* In a worker process (vmagent --worker-fd): the agent's side of it. Zero
 * (lock_fd -1) in the agent and in an agent without isolation. */
typedef struct vma_in_worker {
  int on;      /* this process is a worker process (worker.c) */
  int lock_fd; /* its own handle of the device lock file, -1: none */
  /* --host-mem-limit over all worker processes (shared counter), the
   * parent of the agent's host budget, which counts this one's share. */
  vm_budget_t host_all;
  void *shared; /* vma_shared_t, mapped */
  size_t shared_len;
} vma_in_worker_t;

#endif /* VMA_ISOLATION_SHARED_H */
