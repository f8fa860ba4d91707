/* Greedy-by-size offset assignment: the largest tensors are placed first,
 * each at the lowest aligned offset that does not collide with an already
 * placed tensor of the same device whose lifetime overlaps. Large tensors
 * placed first leave the small ones to fill the gaps, which is what keeps
 * the arena close to the live peak in practice. O(n^2) in tensors, which is
 * fine for the graph sizes a model compiler emits. */
#include "vm/planner.h"

#include <stdlib.h>
#include <string.h>

#include "vm/checked.h"

typedef struct placed {
  uint64_t offset, end;
} placed_t;

static int cmp_placed(const void *a, const void *b) {
  const placed_t *x = a, *y = b;
  return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Sort context for qsort (no qsort_r portability worries: a static is fine,
 * planning is not performance critical, but keep it thread-safe by sorting
 * indices with the key copied in). */
typedef struct order_key {
  uint32_t idx;
  uint32_t device;
  uint64_t nbytes;
  uint32_t first_step;
} order_key_t;

static int cmp_order(const void *a, const void *b) {
  const order_key_t *x = a, *y = b;
  if (x->device != y->device) return x->device < y->device ? -1 : 1;
  if (x->nbytes != y->nbytes) return x->nbytes > y->nbytes ? -1 : 1;
  if (x->first_step != y->first_step) return x->first_step < y->first_step ? -1 : 1;
  return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static int overlaps(const vm_plan_tensor_t *a, const vm_plan_tensor_t *b) {
  return a->first_step <= b->last_step && b->first_step <= a->last_step;
}

void vm_plan_free(vm_plan_t *plan) {
  if (!plan) return;
  free(plan->storage_of);
  free(plan->offset_of);
  free(plan->storage_bytes);
  free(plan->storage_device);
  memset(plan, 0, sizeof(*plan));
}

vm_status_t vm_plan_memory(const vm_plan_tensor_t *tensors, uint32_t n, uint64_t align,
                           vm_plan_t *out) {
  memset(out, 0, sizeof(*out));
  if (align == 0) align = 64;
  if (align & (align - 1))
    return vm_status_make(VM_INVALID_ARGUMENT, "plan: alignment %llu is not a power of two",
                          (unsigned long long)align);
  for (uint32_t i = 0; i < n; i++) {
    if (tensors[i].last_step < tensors[i].first_step)
      return vm_status_make(VM_INVALID_ARGUMENT,
                            "plan: tensor %u ends (step %u) before it starts (step %u)", i,
                            tensors[i].last_step, tensors[i].first_step);
    uint64_t rounded;
    if (vm_ckd_align_u64(tensors[i].nbytes, align, &rounded) != 0)
      return vm_status_make(VM_INVALID_ARGUMENT, "plan: tensor %u is too large", i);
  }

  size_t cnt = n ? n : 1;
  order_key_t *order = calloc(cnt, sizeof(*order));
  placed_t *busy = calloc(cnt, sizeof(*busy));
  uint8_t *done = calloc(cnt, 1);
  out->storage_of = calloc(cnt, sizeof(uint32_t));
  out->offset_of = calloc(cnt, sizeof(uint64_t));
  out->storage_bytes = calloc(cnt, sizeof(uint64_t));
  out->storage_device = calloc(cnt, sizeof(uint32_t));
  if (!order || !busy || !done || !out->storage_of || !out->offset_of || !out->storage_bytes ||
      !out->storage_device)
    goto nomem;
  out->num_tensors = n;

  for (uint32_t i = 0; i < n; i++)
    order[i] = (order_key_t){i, tensors[i].device, tensors[i].nbytes, tensors[i].first_step};
  qsort(order, n, sizeof(*order), cmp_order);

  int64_t cur_device = -1;
  uint32_t storage = 0;
  for (uint32_t k = 0; k < n; k++) {
    uint32_t t = order[k].idx;
    if ((int64_t)tensors[t].device != cur_device) {
      cur_device = tensors[t].device;
      storage = out->num_storages++;
      out->storage_device[storage] = tensors[t].device;
    }
    /* Collect the intervals of already placed, time-overlapping tensors of
     * this storage, by offset, and take the first gap that fits. */
    size_t nb = 0;
    for (uint32_t j = 0; j < n; j++) {
      if (!done[j] || out->storage_of[j] != storage || !overlaps(&tensors[j], &tensors[t]))
        continue;
      busy[nb++] = (placed_t){out->offset_of[j], out->offset_of[j] + tensors[j].nbytes};
    }
    qsort(busy, nb, sizeof(*busy), cmp_placed);
    uint64_t size = tensors[t].nbytes;
    uint64_t off = 0;
    int overflow = 0;
    for (size_t j = 0; j < nb && !overflow; j++) {
      if (busy[j].offset >= off && busy[j].offset - off >= size) break;
      if (busy[j].end > off) overflow = vm_ckd_align_u64(busy[j].end, align, &off);
    }
    uint64_t end;
    if (overflow || vm_ckd_add_u64(off, size, &end) != 0) {
      free(order);
      free(busy);
      free(done);
      vm_plan_free(out);
      return vm_status_make(VM_INVALID_ARGUMENT, "plan: storage size overflows 64 bits");
    }
    out->storage_of[t] = storage;
    out->offset_of[t] = off;
    done[t] = 1;
    if (end > out->storage_bytes[storage]) out->storage_bytes[storage] = end;
  }

  for (uint32_t s = 0; s < out->num_storages; s++) out->planned_bytes += out->storage_bytes[s];
  for (uint32_t i = 0; i < n; i++) {
    out->unplanned_bytes += tensors[i].nbytes;
    /* The live set only grows at a tensor's first step, so the peak is at
     * one of them. */
    uint64_t live = 0;
    for (uint32_t j = 0; j < n; j++)
      if (tensors[j].device == tensors[i].device && tensors[j].first_step <= tensors[i].first_step &&
          tensors[j].last_step >= tensors[i].first_step)
        live += tensors[j].nbytes;
    if (live > out->live_peak_bytes) out->live_peak_bytes = live;
  }
  free(order);
  free(busy);
  free(done);
  return VM_STATUS_OK;
nomem:
  free(order);
  free(busy);
  free(done);
  vm_plan_free(out);
  return vm_status_make(VM_RESOURCE_EXHAUSTED, "plan: out of host memory for %u tensors", n);
}
