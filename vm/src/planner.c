/* Greedy-by-size offset assignment: the largest tensors are placed first,
 * each at the lowest aligned offset that does not collide with an already
 * placed tensor of the same device whose lifetime overlaps. Large tensors
 * placed first leave the small ones to fill the gaps, which is what keeps
 * the arena close to the live peak in practice.
 *
 * The tensors whose lifetimes overlap one tensor's come from two static
 * indexes built up front (lifetimes in ranks of their distinct steps): the
 * tensors sorted by first step (those starting inside the lifetime) and a
 * segment tree holding each lifetime at its canonical nodes (those live at
 * its first step). Planning costs O(n log n) plus the number of overlapping
 * pairs, so a long chain of operators plans in linear time; only graphs
 * where many tensors are live at once cost more, as they must. */
#include "vm/planner.h"

#include <stdlib.h>
#include <string.h>

#include "vmrpc/checked.h"

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

void vm_plan_free(vm_plan_t *plan) {
  if (!plan) return;
  free(plan->storage_of);
  free(plan->offset_of);
  free(plan->storage_bytes);
  free(plan->storage_device);
  memset(plan, 0, sizeof(*plan));
}

/* The static indexes over every tensor's lifetime (see the top). */
typedef struct life_index {
  uint32_t *steps;    /* distinct steps, ascending */
  uint32_t nsteps;
  uint32_t *byfirst;  /* tensor indices by first step */
  uint32_t *firsts;   /* their first steps, in the same order */
  uint32_t leaves;    /* segment tree leaves: a power of two >= nsteps */
  uint32_t *node_off; /* per node (2 * leaves + 1): start of its list in node_items */
  uint32_t *node_items;
} life_index_t;

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

/* Rank of step s among the distinct steps (s is one of them). */
static uint32_t step_rank(const life_index_t *ix, uint32_t s) {
  uint32_t lo = 0, hi = ix->nsteps;
  while (hi - lo > 1) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (ix->steps[mid] <= s) lo = mid;
    else hi = mid;
  }
  return lo;
}

/* First position in ix->firsts whose step is >= s. */
static uint32_t first_at_least(const life_index_t *ix, uint32_t n, uint64_t s) {
  uint32_t lo = 0, hi = n;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (ix->firsts[mid] < s) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static int cmp_by_first(const void *a, const void *b) {
  const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Adds tensor t's lifetime [lo, hi] (ranks) to its canonical nodes: pass 0
 * counts into node_off, pass 1 fills node_items through cursor. */
static void add_canonical(life_index_t *ix, uint32_t t, uint32_t lo, uint32_t hi, int pass,
                          uint32_t *cursor) {
  for (uint64_t l = (uint64_t)lo + ix->leaves, r = (uint64_t)hi + ix->leaves + 1; l < r;
       l >>= 1, r >>= 1) {
    if (l & 1) {
      if (pass) ix->node_items[cursor[l]++] = t;
      else ix->node_off[l]++;
      l++;
    }
    if (r & 1) {
      r--;
      if (pass) ix->node_items[cursor[r]++] = t;
      else ix->node_off[r]++;
    }
  }
}

static void life_index_free(life_index_t *ix) {
  free(ix->steps);
  free(ix->byfirst);
  free(ix->firsts);
  free(ix->node_off);
  free(ix->node_items);
}

static int life_index_build(life_index_t *ix, const vm_plan_tensor_t *t, uint32_t n) {
  memset(ix, 0, sizeof(*ix));
  size_t cnt = n ? n : 1;
  ix->steps = malloc(2 * cnt * sizeof(uint32_t));
  ix->byfirst = malloc(cnt * sizeof(uint32_t));
  ix->firsts = malloc(cnt * sizeof(uint32_t));
  uint64_t *keys = malloc(cnt * sizeof(uint64_t));
  if (!ix->steps || !ix->byfirst || !ix->firsts || !keys) goto fail;
  for (uint32_t i = 0; i < n; i++) {
    ix->steps[2 * i] = t[i].first_step;
    ix->steps[2 * i + 1] = t[i].last_step;
    keys[i] = (uint64_t)t[i].first_step << 32 | i;
  }
  qsort(ix->steps, 2 * (size_t)n, sizeof(uint32_t), cmp_u32);
  for (uint32_t i = 0; i < 2 * n; i++)
    if (ix->nsteps == 0 || ix->steps[ix->nsteps - 1] != ix->steps[i])
      ix->steps[ix->nsteps++] = ix->steps[i];
  qsort(keys, n, sizeof(uint64_t), cmp_by_first);
  for (uint32_t i = 0; i < n; i++) {
    ix->byfirst[i] = (uint32_t)keys[i];
    ix->firsts[i] = (uint32_t)(keys[i] >> 32);
  }
  free(keys);
  keys = NULL;
  ix->leaves = 1;
  while (ix->leaves < ix->nsteps) ix->leaves *= 2;
  size_t nodes = 2 * (size_t)ix->leaves + 1;
  ix->node_off = calloc(nodes, sizeof(uint32_t));
  if (!ix->node_off) goto fail;
  for (uint32_t i = 0; i < n; i++)
    add_canonical(ix, i, step_rank(ix, t[i].first_step), step_rank(ix, t[i].last_step), 0, NULL);
  uint64_t total = 0;
  for (size_t k = 0; k < nodes; k++) total += ix->node_off[k];
  if (total > UINT32_MAX) goto fail;
  total = 0;
  for (size_t k = 0; k < nodes; k++) {
    uint32_t c = ix->node_off[k];
    ix->node_off[k] = (uint32_t)total;
    total += c;
  }
  ix->node_items = malloc((total ? total : 1) * sizeof(uint32_t));
  uint32_t *cursor = malloc(nodes * sizeof(uint32_t));
  if (!ix->node_items || !cursor) {
    free(cursor);
    goto fail;
  }
  memcpy(cursor, ix->node_off, nodes * sizeof(uint32_t));
  for (uint32_t i = 0; i < n; i++)
    add_canonical(ix, i, step_rank(ix, t[i].first_step), step_rank(ix, t[i].last_step), 1,
                  cursor);
  free(cursor);
  return 0;
fail:
  free(keys);
  life_index_free(ix);
  return -1;
}

/* The peak over steps of the bytes live at once, per device: a sweep over
 * lifetime starts (+) and ends (-). */
typedef struct live_event {
  uint32_t device;
  uint64_t step; /* last_step + 1 for an end */
  int add;
  uint64_t nbytes;
} live_event_t;

static int cmp_event(const void *a, const void *b) {
  const live_event_t *x = a, *y = b;
  if (x->device != y->device) return x->device < y->device ? -1 : 1;
  if (x->step != y->step) return x->step < y->step ? -1 : 1;
  return 0;
}

static int live_peak(const vm_plan_tensor_t *t, uint32_t n, uint64_t *out) {
  *out = 0;
  live_event_t *ev = malloc((2 * (size_t)n + 1) * sizeof(*ev));
  if (!ev) return -1;
  for (uint32_t i = 0; i < n; i++) {
    ev[2 * i] = (live_event_t){t[i].device, t[i].first_step, 1, t[i].nbytes};
    ev[2 * i + 1] = (live_event_t){t[i].device, (uint64_t)t[i].last_step + 1, 0, t[i].nbytes};
  }
  qsort(ev, 2 * (size_t)n, sizeof(*ev), cmp_event);
  uint64_t live = 0;
  for (size_t i = 0; i < 2 * (size_t)n;) {
    if (i == 0 || ev[i].device != ev[i - 1].device) live = 0;
    size_t j = i;
    int starts = 0;
    /* every event of this step and device, then the live bytes after it */
    for (; j < 2 * (size_t)n && ev[j].device == ev[i].device && ev[j].step == ev[i].step; j++) {
      if (ev[j].add) {
        live += ev[j].nbytes;
        starts = 1;
      } else {
        live -= ev[j].nbytes;
      }
    }
    if (starts && live > *out) *out = live;
    i = j;
  }
  free(ev);
  return 0;
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
  life_index_t ix;
  int ix_ok = life_index_build(&ix, tensors, n) == 0;
  order_key_t *order = calloc(cnt, sizeof(*order));
  placed_t *busy = calloc(cnt, sizeof(*busy));
  uint8_t *done = calloc(cnt, 1);
  out->storage_of = calloc(cnt, sizeof(uint32_t));
  out->offset_of = calloc(cnt, sizeof(uint64_t));
  out->storage_bytes = calloc(cnt, sizeof(uint64_t));
  out->storage_device = calloc(cnt, sizeof(uint32_t));
  if (!ix_ok || !order || !busy || !done || !out->storage_of || !out->offset_of ||
      !out->storage_bytes || !out->storage_device)
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
     * this storage, by offset, and take the first gap that fits: those
     * starting inside t's lifetime, then those live at its first step. */
    size_t nb = 0;
    uint32_t a = tensors[t].first_step, b = tensors[t].last_step;
    for (uint32_t p = first_at_least(&ix, n, a); p < n && ix.firsts[p] <= b; p++) {
      uint32_t j = ix.byfirst[p];
      if (done[j] && out->storage_of[j] == storage)
        busy[nb++] = (placed_t){out->offset_of[j], out->offset_of[j] + tensors[j].nbytes};
    }
    for (uint64_t node = (uint64_t)step_rank(&ix, a) + ix.leaves; node >= 1; node >>= 1) {
      for (uint32_t q = ix.node_off[node]; q < ix.node_off[node + 1]; q++) {
        uint32_t j = ix.node_items[q];
        if (tensors[j].first_step < a && done[j] && out->storage_of[j] == storage)
          busy[nb++] = (placed_t){out->offset_of[j], out->offset_of[j] + tensors[j].nbytes};
      }
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
      life_index_free(&ix);
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
  for (uint32_t i = 0; i < n; i++) out->unplanned_bytes += tensors[i].nbytes;
  if (live_peak(tensors, n, &out->live_peak_bytes) != 0) goto nomem;
  life_index_free(&ix);
  free(order);
  free(busy);
  free(done);
  return VM_STATUS_OK;
nomem:
  if (ix_ok) life_index_free(&ix);
  free(order);
  free(busy);
  free(done);
  vm_plan_free(out);
  return vm_status_make(VM_RESOURCE_EXHAUSTED, "plan: out of host memory for %u tensors", n);
}
