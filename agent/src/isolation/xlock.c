/* Cross-process device locks of worker processes (isolation/xlock.h). */
#include "isolation/xlock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent_core.h"
#include "procfs.h"
#include "session.h"
#include "vm/vm.h"

vm_status_t vma_xlock_open(vmagent_t *a, int fd, int slot) {
  int own = vma_proc_reopen_fd(fd);
  close(fd);
  if (own < 0)
    return vm_status_make(VM_INTERNAL, "worker: opening the device lock file: %s", strerror(errno));
  a->in_worker.lock_fd = own;
  if (slot < 0) return VM_STATUS_OK;
  struct stat st;
  if (fstat(own, &st) != 0 || (size_t)st.st_size < VMA_SHARED_BYTES(slot + 1))
    return vm_status_make(VM_INTERNAL, "worker: slot %d is past the shared memory", slot);
  void *m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, own, 0);
  if (m == MAP_FAILED)
    return vm_status_make(VM_INTERNAL, "worker: mapping the shared memory: %s", strerror(errno));
  a->in_worker.shared = m;
  a->in_worker.shared_len = (size_t)st.st_size;
  vma_shared_t *sh = m;
  /* the agent's limit over all workers; this worker's share under it */
  vm_budget_init(&a->in_worker.host_all, a->cfg.host_mem_limit, NULL,
                 "the agent's host memory limit", "--host-mem-limit");
  vm_budget_share(&a->in_worker.host_all, &sh->host_total);
  a->host.limit = 0;
  a->host.parent = &a->in_worker.host_all;
  vm_budget_share(&a->host, &sh->slot[slot].host);
  for (uint32_t i = 0; i < a->num_devices; i++)
    if (a->devices[i].dev->type == VM_DEVICE_CPU)
      vm_cpu_device_share(a->devices[i].dev, &sh->cpu_total, &sh->slot[slot].cpu);
  return VM_STATUS_OK;
}

void vma_xlock_close(vmagent_t *a) {
  if (a->in_worker.lock_fd >= 0) close(a->in_worker.lock_fd);
  a->in_worker.lock_fd = -1;
  if (a->in_worker.shared) munmap(a->in_worker.shared, a->in_worker.shared_len);
  a->in_worker.shared = NULL;
}

/* One byte of the lock file: type F_WRLCK/F_RDLCK/F_UNLCK. 0, or -1 when
 * another worker holds it. */
static int vma_xlock_try(vmagent_t *a, off_t at, short type) {
  struct flock fl;
  memset(&fl, 0, sizeof(fl));
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = at;
  fl.l_len = 1;
  for (;;) {
    if (fcntl(a->in_worker.lock_fd, F_OFD_SETLK, &fl) == 0) return 0;
    if (errno != EINTR) return -1;
  }
}

static off_t vma_xrun_at(vmagent_t *a, const vma_device_t *d) {
  return 2 * (off_t)(d - a->devices);
}

static void vma_nap(long *ns) {
  struct timespec ts = {0, *ns};
  nanosleep(&ts, NULL);
  if (*ns < 5 * 1000 * 1000) *ns *= 2;
}

vm_status_t vma_xrun_lock(vmagent_t *a, vma_device_t *d, const vma_vm_t *v, uint64_t deadline_ns) {
  if (a->in_worker.lock_fd < 0) return VM_STATUS_OK;
  off_t at = vma_xrun_at(a, d);
  if (vma_xlock_try(a, at, F_WRLCK) == 0) return VM_STATUS_OK;
  if (a->hooks.on_block) a->hooks.on_block(a);
  long nap = 50 * 1000;
  for (;;) {
    vma_nap(&nap);
    if (vma_xlock_try(a, at, F_WRLCK) == 0) return VM_STATUS_OK;
    if (atomic_load(&v->cancel_pending))
      return vm_status_make(VM_CANCELLED, "cancelled while waiting for device %s", d->selector);
    if (deadline_ns && vm_now_ns() >= deadline_ns)
      return vm_status_make(VM_DEADLINE_EXCEEDED,
                            "deadline passed while waiting for device %s (busy with another "
                            "session's work)",
                            d->selector);
  }
}

void vma_xrun_unlock(vmagent_t *a, vma_device_t *d) {
  if (a->in_worker.lock_fd >= 0) (void)vma_xlock_try(a, vma_xrun_at(a, d), F_UNLCK);
}

vm_status_t vma_xgate_lock(vmagent_t *a, vma_device_t *d, int exclusive) {
  if (a->in_worker.lock_fd < 0) return VM_STATUS_OK;
  off_t at = vma_xrun_at(a, d) + 1;
  short type = exclusive ? F_WRLCK : F_RDLCK;
  long nap = 50 * 1000;
  while (vma_xlock_try(a, at, type) != 0) vma_nap(&nap);
  return VM_STATUS_OK;
}

void vma_xgate_unlock(vmagent_t *a, vma_device_t *d) {
  if (a->in_worker.lock_fd >= 0) (void)vma_xlock_try(a, vma_xrun_at(a, d) + 1, F_UNLCK);
}
