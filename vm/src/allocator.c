/* Per-device allocators: naive and pooled.
 *
 * Pooled size classes. A request is rounded up to a class size and freed
 * blocks are kept on a per-class stack, so a later request of the same class
 * reuses one with an array index and a pop (no search):
 *   - up to 4 KiB: multiples of 256 bytes (16 classes: 256, 512 ... 4096);
 *   - above 4 KiB: 8 classes per power of two, i.e. a size in (2^k, 2^(k+1)]
 *     is rounded up to a multiple of 2^(k-3), so rounding wastes < 12.5%.
 * The class index comes from a count-leading-zeros, so both lookup and
 * return are O(1). TVM's pooled allocator instead page-rounds and matches
 * exact sizes in a hash map; classes make slightly different shapes (dynamic
 * batch, sequence length) share blocks at a bounded cost in memory, and on
 * device out-of-memory the cache is given back and the request retried.
 *
 * An allocator belongs to one VM and is used by one thread at a time (see
 * value.h), so its counters are plain integers.
 */
#include "vm/allocator.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmrpc/log.h"

#define VMI_SMALL_STEP 256u
#define VMI_SMALL_MAX 4096u /* last size of the 256-byte classes */
#define VMI_SMALL_CLASSES (VMI_SMALL_MAX / VMI_SMALL_STEP)
#define VMI_SUBCLASSES 8u  /* classes per power of two above VMI_SMALL_MAX */
#define VMI_SUB_SHIFT 3u   /* log2(VMI_SUBCLASSES) */
#define VMI_SMALL_LOG2 12u /* log2(VMI_SMALL_MAX) */
/* Largest request: rounding it up can neither overflow nor pass 2^62. */
#define VMI_MAX_REQUEST (UINT64_C(1) << 62)
#define VMI_NUM_CLASSES (VMI_SMALL_CLASSES + VMI_SUBCLASSES * (62u - VMI_SMALL_LOG2))
/* What the naive allocator reserves for a 0-byte request: devices need > 0,
 * and 64 is the alignment granule every device guarantees anyway. */
#define VMI_NAIVE_MIN_BLOCK 64u

typedef struct pool_bucket {
  vm_buffer_t *items; /* cached free blocks of this class (a stack) */
  uint32_t n, cap;
} pool_bucket_t;

struct vm_allocator {
  vm_device_t *dev; /* borrowed */
  vm_allocator_kind_t kind;
  uint64_t limit; /* cap on stats.bytes_reserved; 0 = none */
  vm_alloc_stats_t stats;
  uint64_t live_blocks;                   /* handed out, not yet returned */
  uint64_t cached_bytes;                  /* part of bytes_reserved sitting in buckets */
  pool_bucket_t buckets[VMI_NUM_CLASSES]; /* pooled only */
};

const char *vm_allocator_kind_name(vm_allocator_kind_t kind) {
  switch (kind) {
    case VM_ALLOC_NAIVE: return "naive";
    case VM_ALLOC_POOLED: return "pooled";
  }
  return "unknown";
}

int vm_allocator_kind_parse(const char *name, vm_allocator_kind_t *out_kind) {
  if (!name) return -1;
  if (strcmp(name, "naive") == 0) {
    *out_kind = VM_ALLOC_NAIVE;
  } else if (strcmp(name, "pooled") == 0) {
    *out_kind = VM_ALLOC_POOLED;
  } else {
    return -1;
  }
  return 0;
}

/* Class of a request of s bytes (1 <= s <= VMI_MAX_REQUEST) and its size. */
static uint32_t size_class(uint64_t s, uint64_t *out_size) {
  if (s <= VMI_SMALL_MAX) {
    uint32_t c = (uint32_t)((s + VMI_SMALL_STEP - 1) / VMI_SMALL_STEP) - 1;
    *out_size = (uint64_t)(c + 1) * VMI_SMALL_STEP;
    return c;
  }
  uint32_t k = 63u - (uint32_t)__builtin_clzll(s - 1); /* s in (2^k, 2^(k+1)] */
  uint32_t shift = k - VMI_SUB_SHIFT;
  uint64_t units = (s + (UINT64_C(1) << shift) - 1) >> shift; /* 9 ..= 16 */
  *out_size = units << shift;
  return VMI_SMALL_CLASSES + (k - VMI_SMALL_LOG2) * VMI_SUBCLASSES +
         (uint32_t)(units - VMI_SUBCLASSES - 1);
}

vm_status_t vm_allocator_create(vm_device_t *dev, vm_allocator_kind_t kind,
                                vm_allocator_t **out_alloc) {
  if (!dev) return vm_status_make(VM_INVALID_ARGUMENT, "allocator: no device");
  if (kind != VM_ALLOC_NAIVE && kind != VM_ALLOC_POOLED)
    return vm_status_make(VM_INVALID_ARGUMENT, "unknown allocator kind %d (naive=%d, pooled=%d)",
                          (int)kind, VM_ALLOC_NAIVE, VM_ALLOC_POOLED);
  vm_allocator_t *a = calloc(1, sizeof(*a));
  if (!a) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory creating an allocator");
  a->dev = dev;
  a->kind = kind;
  *out_alloc = a;
  return VM_STATUS_OK;
}

/* Frees one block on the device and accounts for it. */
static void device_free(vm_allocator_t *a, vm_buffer_t buf, uint64_t size) {
  a->dev->ops->free(a->dev, buf, size);
  a->stats.device_frees++;
  a->stats.bytes_reserved -= size;
}

void vm_allocator_release_cached(vm_allocator_t *a) {
  if (!a || a->cached_bytes == 0) return;
  for (uint32_t c = 0; c < VMI_NUM_CLASSES; c++) {
    pool_bucket_t *b = &a->buckets[c];
    if (b->n == 0) continue;
    uint64_t size;
    /* The class's size is the size of every block in it. */
    if (c < VMI_SMALL_CLASSES) {
      size = (uint64_t)(c + 1) * VMI_SMALL_STEP;
    } else {
      uint32_t k = VMI_SMALL_LOG2 + (c - VMI_SMALL_CLASSES) / VMI_SUBCLASSES;
      uint64_t units = VMI_SUBCLASSES + 1 + (c - VMI_SMALL_CLASSES) % VMI_SUBCLASSES;
      size = units << (k - VMI_SUB_SHIFT);
    }
    while (b->n > 0) device_free(a, b->items[--b->n], size);
  }
  a->cached_bytes = 0;
}

void vm_allocator_destroy(vm_allocator_t *a) {
  if (!a) return;
  vm_allocator_release_cached(a);
  if (a->live_blocks) {
    char dev[32];
    VM_LOGW("%s allocator on %s destroyed with %" PRIu64 " blocks (%" PRIu64
            " bytes) still in use: leaking them",
            vm_allocator_kind_name(a->kind), vm_device_str(a->dev, dev, sizeof(dev)),
            a->live_blocks, a->stats.bytes_in_use);
  }
  for (uint32_t c = 0; c < VMI_NUM_CLASSES; c++) free(a->buckets[c].items);
  free(a);
}

/* Gets a fresh block of size bytes from the device, within the limit. The
 * pooled allocator gives its cache back first when that is what stands in
 * the way (the limit, or device memory), and tries again once. */
static vm_status_t device_alloc(vm_allocator_t *a, uint64_t nbytes, uint64_t size,
                                vm_buffer_t *out_buf) {
  if (a->limit && (size > a->limit || a->stats.bytes_reserved > a->limit - size)) {
    vm_allocator_release_cached(a);
    if (size > a->limit || a->stats.bytes_reserved > a->limit - size)
      return vm_status_make(VM_RESOURCE_EXHAUSTED,
                            "memory limit of %" PRIu64 " bytes reached: %" PRIu64
                            " bytes requested (block of %" PRIu64 "), %" PRIu64
                            " bytes reserved, %" PRIu64 " in use",
                            a->limit, nbytes, size, a->stats.bytes_reserved, a->stats.bytes_in_use);
  }
  vm_status_t st = a->dev->ops->alloc(a->dev, size, out_buf);
  if (st && vm_status_code(st) == VM_RESOURCE_EXHAUSTED && a->cached_bytes > 0) {
    VM_LOGD("device out of memory for %" PRIu64 " bytes: releasing %" PRIu64
            " cached bytes and retrying",
            size, a->cached_bytes);
    vm_status_free(st);
    vm_allocator_release_cached(a);
    st = a->dev->ops->alloc(a->dev, size, out_buf);
  }
  if (st) {
    char dev[32];
    return vm_status_annotate(st,
                              "allocating %" PRIu64 " bytes on %s (%" PRIu64
                              " bytes in use, %" PRIu64 " reserved by the %s allocator)",
                              nbytes, vm_device_str(a->dev, dev, sizeof(dev)),
                              a->stats.bytes_in_use, a->stats.bytes_reserved,
                              vm_allocator_kind_name(a->kind));
  }
  a->stats.device_allocs++;
  a->stats.bytes_reserved += size;
  return VM_STATUS_OK;
}

static void note_alloc(vm_allocator_t *a, uint64_t nbytes) {
  a->live_blocks++;
  a->stats.bytes_in_use += nbytes;
  if (a->stats.bytes_in_use > a->stats.peak_bytes) a->stats.peak_bytes = a->stats.bytes_in_use;
}

vm_status_t vm_allocator_alloc(vm_allocator_t *a, uint64_t nbytes, vm_buffer_t *out_buf,
                               uint64_t *out_size) {
  a->stats.allocs++;
  if (nbytes > VMI_MAX_REQUEST) {
    char dev[32];
    return vm_status_make(VM_RESOURCE_EXHAUSTED,
                          "allocating %" PRIu64 " bytes on %s: larger than any device can hold",
                          nbytes, vm_device_str(a->dev, dev, sizeof(dev)));
  }
  uint64_t size;
  if (a->kind == VM_ALLOC_POOLED) {
    pool_bucket_t *b = &a->buckets[size_class(nbytes ? nbytes : 1, &size)];
    if (b->n > 0) {
      *out_buf = b->items[--b->n];
      a->cached_bytes -= size;
      a->stats.pool_hits++;
      goto done;
    }
  } else {
    size = nbytes ? nbytes : VMI_NAIVE_MIN_BLOCK;
  }
  VM_RETURN_IF_ERROR(device_alloc(a, nbytes, size, out_buf));
done:
  note_alloc(a, nbytes);
  *out_size = size;
  return VM_STATUS_OK;
}

/* Parks a freed block in its bucket; 0 on success, -1 if it must go back to
 * the device instead (not a class size, or no host memory for the stack). */
static int pool_put(vm_allocator_t *a, vm_buffer_t buf, uint64_t size) {
  if (size == 0 || size > VMI_MAX_REQUEST) return -1;
  uint64_t csize;
  pool_bucket_t *b = &a->buckets[size_class(size, &csize)];
  if (csize != size) return -1;
  if (b->n == b->cap) {
    uint32_t ncap = b->cap ? b->cap * 2 : 4;
    if (ncap < b->cap) return -1;
    vm_buffer_t *p = realloc(b->items, (size_t)ncap * sizeof(*p));
    if (!p) return -1;
    b->items = p;
    b->cap = ncap;
  }
  b->items[b->n++] = buf;
  a->cached_bytes += size;
  return 0;
}

void vm_allocator_free(vm_allocator_t *a, vm_buffer_t buf, uint64_t requested, uint64_t size) {
  a->stats.frees++;
  if (a->live_blocks) a->live_blocks--;
  /* Clamped: a mismatched requested size is a caller bug, and a wrapped
   * counter would hide every later figure. */
  a->stats.bytes_in_use = requested > a->stats.bytes_in_use ? 0 : a->stats.bytes_in_use - requested;
  if (a->kind == VM_ALLOC_POOLED && pool_put(a, buf, size) == 0) return;
  device_free(a, buf, size);
}

void vm_allocator_set_limit(vm_allocator_t *a, uint64_t max_bytes) {
  a->limit = max_bytes;
  /* Cached blocks should not keep a lowered limit exceeded. */
  if (max_bytes && a->stats.bytes_reserved > max_bytes) vm_allocator_release_cached(a);
}

void vm_allocator_get_stats(const vm_allocator_t *a, vm_alloc_stats_t *out_stats) {
  *out_stats = a->stats;
}

vm_device_t *vm_allocator_device(const vm_allocator_t *a) {
  return a->dev;
}

vm_allocator_kind_t vm_allocator_kind(const vm_allocator_t *a) {
  return a->kind;
}
