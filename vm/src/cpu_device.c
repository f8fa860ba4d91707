/* The host CPU device: buffers are 64-byte aligned host memory.
 *
 * An optional cap makes the device behave like one with little memory, so
 * that out-of-memory paths (allocator retry, session limits) can be tested
 * without exhausting the machine. The bytes-in-use counter is atomic because
 * one cpu device may be shared by VMs running on different threads; the rest
 * of the state is fixed at creation.
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "vmrpc/checked.h"
#include "vm/device.h"
#include "vmrpc/log.h"

#define VMI_CPU_ALIGN 64

typedef struct cpu_impl {
  uint64_t cap;  /* 0 = no cap */
  uint64_t phys; /* host physical memory; 0 = unknown */
  _Atomic uint64_t in_use;
  /* The count the cap applies to: &in_use, or one shared with other
   * processes, in which share counts this device's part
   * (vm_cpu_device_share). */
  _Atomic uint64_t *total;
  _Atomic uint64_t *share;
} cpu_impl_t;

static cpu_impl_t *impl_of(const vm_device_t *dev) {
  return (cpu_impl_t *)dev->impl;
}

/* Reserves nbytes against the cap; 0 on success, -1 if it would pass it. */
static int reserve(cpu_impl_t *c, uint64_t nbytes, uint64_t *out_seen) {
  uint64_t cur = atomic_load(c->total);
  for (;;) {
    *out_seen = cur;
    uint64_t next;
    if (vm_ckd_add_u64(cur, nbytes, &next) != 0) return -1;
    if (c->cap && next > c->cap) return -1;
    if (atomic_compare_exchange_weak(c->total, &cur, next)) break;
  }
  if (c->total != &c->in_use) atomic_fetch_add(&c->in_use, nbytes);
  if (c->share) atomic_fetch_add(c->share, nbytes);
  return 0;
}

/* Takes nbytes off counter, clamped at 0: a free larger than what is in use
 * is a caller bug; clamping keeps the counter meaningful. */
static void count_down(_Atomic uint64_t *counter, uint64_t nbytes) {
  uint64_t cur = atomic_load(counter);
  for (;;) {
    uint64_t next = nbytes > cur ? 0 : cur - nbytes;
    if (atomic_compare_exchange_weak(counter, &cur, next)) return;
  }
}

static void unreserve(cpu_impl_t *c, uint64_t nbytes) {
  count_down(c->total, nbytes);
  if (c->total != &c->in_use) count_down(&c->in_use, nbytes);
  if (c->share) count_down(c->share, nbytes);
}

static vm_status_t cpu_alloc(vm_device_t *dev, uint64_t nbytes, vm_buffer_t *out_buf) {
  cpu_impl_t *c = impl_of(dev);
  /* Refused up front: no host can back it, and asking malloc for petabytes
   * aborts under sanitizers instead of returning NULL. Past a cap, the cap's
   * message below says more. */
  if (c->phys && nbytes > c->phys && (!c->cap || nbytes <= c->cap))
    return vm_status_make(VM_RESOURCE_EXHAUSTED,
                          "cpu device out of memory: %" PRIu64
                          " bytes requested, more than the host's %" PRIu64 " bytes",
                          nbytes, c->phys);
  uint64_t seen;
  if (reserve(c, nbytes, &seen) != 0) {
    if (c->cap)
      return vm_status_make(VM_RESOURCE_EXHAUSTED,
                            "cpu device out of memory: %" PRIu64 " bytes requested, %" PRIu64
                            " of cap %" PRIu64 " in use",
                            nbytes, seen, c->cap);
    return vm_status_make(
        VM_RESOURCE_EXHAUSTED,
        "cpu device out of memory: %" PRIu64 " bytes requested, %" PRIu64 " in use", nbytes, seen);
  }
  void *p = NULL;
  /* The interface asks for nbytes > 0; a 0 still gets a real block so that
   * a caller's free stays valid. */
  size_t size = nbytes ? (size_t)nbytes : 1;
  if ((uint64_t)size != (nbytes ? nbytes : 1) || posix_memalign(&p, VMI_CPU_ALIGN, size) != 0) {
    unreserve(c, nbytes);
    return vm_status_make(VM_RESOURCE_EXHAUSTED,
                          "cpu device out of memory: %" PRIu64 " bytes requested, %" PRIu64
                          " in use (host allocation failed)",
                          nbytes, seen);
  }
  out_buf->handle = p;
  return VM_STATUS_OK;
}

static void cpu_free(vm_device_t *dev, vm_buffer_t buf, uint64_t nbytes) {
  if (!buf.handle) return;
  free(buf.handle);
  unreserve(impl_of(dev), nbytes);
}

/* Bounds are the caller's to guarantee (the VM checks views against their
 * storage); a host device cannot check a raw pointer. */
static vm_status_t cpu_copy_from_host(vm_device_t *dev, vm_buffer_t dst, uint64_t dst_offset,
                                      const void *src, uint64_t nbytes) {
  if (nbytes) memcpy((char *)dst.handle + dst_offset, src, (size_t)nbytes);
  return VM_STATUS_OK;
}

static vm_status_t cpu_copy_to_host(vm_device_t *dev, void *dst, vm_buffer_t src,
                                    uint64_t src_offset, uint64_t nbytes) {
  if (nbytes) memcpy(dst, (const char *)src.handle + src_offset, (size_t)nbytes);
  return VM_STATUS_OK;
}

static vm_status_t cpu_copy_within(vm_device_t *dev, vm_buffer_t dst, uint64_t dst_offset,
                                   vm_buffer_t src, uint64_t src_offset, uint64_t nbytes) {
  /* memmove: source and destination may be views of one storage. */
  if (nbytes)
    memmove((char *)dst.handle + dst_offset, (const char *)src.handle + src_offset, (size_t)nbytes);
  return VM_STATUS_OK;
}

/* Host work is synchronous: nothing is ever queued. */
static vm_status_t cpu_sync(vm_device_t *dev) {
  return VM_STATUS_OK;
}

static vm_status_t cpu_timer_begin(vm_device_t *dev) {
  return VM_STATUS_OK;
}

/* No device clock: callers fall back to wall time. */
static vm_status_t cpu_timer_end(vm_device_t *dev, double *out_seconds) {
  *out_seconds = -1.0;
  return VM_STATUS_OK;
}

static void cpu_destroy(vm_device_t *dev) {
  cpu_impl_t *c = impl_of(dev);
  uint64_t left = atomic_load(&c->in_use);
  if (left) VM_LOGW("cpu device destroyed with %" PRIu64 " bytes still allocated", left);
  free(c);
  free(dev);
}

static const vm_device_ops_t k_cpu_ops = {
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy_from_host = cpu_copy_from_host,
    .copy_to_host = cpu_copy_to_host,
    .copy_within = cpu_copy_within,
    .sync = cpu_sync,
    .timer_begin = cpu_timer_begin,
    .timer_end = cpu_timer_end,
    .destroy = cpu_destroy,
};

static uint64_t host_phys_bytes(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
}

static void fill_props(vm_device_props_t *p, uint64_t cap, uint64_t phys) {
  memset(p, 0, sizeof(*p));
  snprintf(p->name, sizeof(p->name), "host cpu");
  snprintf(p->vendor, sizeof(p->vendor), "host");
  snprintf(p->version, sizeof(p->version), "host");
  struct utsname u;
  if (uname(&u) == 0) {
    snprintf(p->platform, sizeof(p->platform), "%.60s %.60s", u.sysname, u.machine);
    snprintf(p->driver_version, sizeof(p->driver_version), "%.63s", u.release);
  } else {
    snprintf(p->platform, sizeof(p->platform), "host");
  }
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  p->compute_units = ncpu > 0 ? (uint32_t)ncpu : 1;
  p->global_mem_bytes = cap && (phys == 0 || cap < phys) ? cap : phys;
  p->local_mem_bytes = 0;
  p->max_alloc_bytes = p->global_mem_bytes;
  p->supports_fp16 = 0;
  p->has_device_timer = 0;
}

vm_status_t vm_cpu_device_create(uint64_t mem_cap_bytes, vm_device_t **out_dev) {
  vm_device_t *dev = calloc(1, sizeof(*dev));
  if (!dev) goto fail;
  cpu_impl_t *c = calloc(1, sizeof(*c));
  if (!c) goto fail_dev;
  c->cap = mem_cap_bytes;
  atomic_init(&c->in_use, 0);
  c->total = &c->in_use;
  dev->ops = &k_cpu_ops;
  dev->type = VM_DEVICE_CPU;
  dev->id = 0;
  dev->impl = c;
  c->phys = host_phys_bytes();
  fill_props(&dev->props, mem_cap_bytes, c->phys);
  *out_dev = dev;
  return VM_STATUS_OK;

fail_dev:
  free(dev);
fail:
  return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory creating the cpu device");
}

void vm_cpu_device_share(vm_device_t *dev, _Atomic uint64_t *total, _Atomic uint64_t *share) {
  cpu_impl_t *c = impl_of(dev);
  c->total = total;
  c->share = share;
}

uint64_t vm_cpu_device_bytes_in_use(const vm_device_t *dev) {
  if (!dev || dev->type != VM_DEVICE_CPU || dev->ops != &k_cpu_ops) return 0;
  return atomic_load(&impl_of(dev)->in_use);
}
