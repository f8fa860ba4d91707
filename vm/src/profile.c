/* Per-operator profiling: one invocation with an instrumentation callback
 * that times every packed function call between device syncs, aggregated by
 * function name.
 *
 * Syncing before and after each call makes the wall time of a call include
 * the device work it queued and nothing queued before it; the price is that
 * the profiled run is slower than a plain one (that is what the time
 * evaluator is for).
 */
#include <stdlib.h>
#include <string.h>

#include "vm/vm.h"

/* Packed calls can nest (a builtin may call back into the VM); deeper
 * levels than this are counted but not timed. */
#define PROFILE_MAX_DEPTH 64

typedef struct frame {
  uint64_t t0;
  int dev_timing; /* device timer started for this call */
} frame_t;

typedef struct profiler {
  vm_machine_t *m;
  const vm_executable_t *exec;
  int32_t *row_of; /* function index -> row index, -1 if none yet */
  vm_profile_row_t *rows;
  uint32_t num_rows, cap_rows;
  frame_t stack[PROFILE_MAX_DEPTH];
  uint32_t depth; /* may exceed PROFILE_MAX_DEPTH */
  int has_device_timer;
  int dev_timer_busy; /* the device timer does not nest: outermost call only */
  vm_status_t err;    /* first failure inside the callback (it cannot return one) */
} profiler_t;

static void keep_error(profiler_t *p, vm_status_t st) {
  if (!st) return;
  if (!p->err)
    p->err = st;
  else
    vm_status_free(st);
}

static void sync_all(profiler_t *p) {
  uint32_t n = vm_machine_num_devices(p->m);
  for (uint32_t i = 0; i < n; i++) {
    vm_device_t *dev = vm_machine_device(p->m, i);
    keep_error(p, dev->ops->sync(dev));
  }
}

/* Row for func_idx, created on first use; NULL when out of host memory
 * (recorded in p->err). */
static vm_profile_row_t *row_for(profiler_t *p, uint32_t func_idx, const char *name) {
  if (p->row_of[func_idx] >= 0) return &p->rows[p->row_of[func_idx]];
  if (p->num_rows == p->cap_rows) {
    uint32_t cap = p->cap_rows ? p->cap_rows * 2 : 16;
    vm_profile_row_t *r = realloc(p->rows, cap * sizeof(*r));
    if (!r) {
      keep_error(p, vm_status_make(VM_RESOURCE_EXHAUSTED, "profile: out of host memory"));
      return NULL;
    }
    p->rows = r;
    p->cap_rows = cap;
  }
  vm_profile_row_t *row = &p->rows[p->num_rows];
  memset(row, 0, sizeof(*row));
  /* Names longer than the row's field are cut; they stay unique in practice
   * and a profile is for reading. */
  strncpy(row->name, name ? name : "?", sizeof(row->name) - 1);
  row->device_s = p->has_device_timer ? 0.0 : -1.0;
  p->row_of[func_idx] = (int32_t)p->num_rows++;
  return row;
}

static vm_instrument_action_t on_call(vm_machine_t *m, vm_instrument_phase_t phase,
                                      uint32_t func_idx, const char *func_name,
                                      const vm_value_t *args, uint32_t nargs, void *user) {
  profiler_t *p = user;
  if (func_idx >= p->exec->num_functions || p->exec->functions[func_idx].kind != VM_FUNC_PACKED)
    return VM_INSTRUMENT_CONTINUE;
  if (phase == VM_INSTRUMENT_BEFORE) {
    uint32_t d = p->depth++;
    if (d >= PROFILE_MAX_DEPTH) return VM_INSTRUMENT_CONTINUE;
    sync_all(p);
    frame_t *f = &p->stack[d];
    f->dev_timing = 0;
    if (p->has_device_timer && !p->dev_timer_busy) {
      vm_device_t *dev = vm_machine_device(m, 0);
      vm_status_t st = dev->ops->timer_begin(dev);
      if (st)
        keep_error(p, st);
      else
        f->dev_timing = p->dev_timer_busy = 1;
    }
    f->t0 = vm_now_ns();
    return VM_INSTRUMENT_CONTINUE;
  }
  if (p->depth == 0) return VM_INSTRUMENT_CONTINUE; /* AFTER without BEFORE */
  uint32_t d = --p->depth;
  vm_profile_row_t *row = row_for(p, func_idx, func_name);
  if (row) row->calls++;
  if (d >= PROFILE_MAX_DEPTH) return VM_INSTRUMENT_CONTINUE;
  frame_t *f = &p->stack[d];
  sync_all(p);
  uint64_t t1 = vm_now_ns();
  double dev_s = -1.0;
  if (f->dev_timing) {
    vm_device_t *dev = vm_machine_device(m, 0);
    keep_error(p, dev->ops->timer_end(dev, &dev_s));
    p->dev_timer_busy = 0;
  }
  if (!row) return VM_INSTRUMENT_CONTINUE;
  row->total_s += t1 > f->t0 ? (double)(t1 - f->t0) / 1e9 : 0.0;
  /* One unknown reading makes the row's device time unknown rather than a
   * sum over some of its calls. */
  if (row->device_s >= 0) row->device_s = dev_s >= 0 ? row->device_s + dev_s : -1.0;
  return VM_INSTRUMENT_CONTINUE;
}

static int cmp_rows(const void *a, const void *b) {
  const vm_profile_row_t *x = a, *y = b;
  if (x->total_s != y->total_s) return x->total_s < y->total_s ? 1 : -1;
  return strcmp(x->name, y->name); /* ties in a stable, readable order */
}

/* Replaces (and afterwards removes) any instrumentation callback installed
 * on m: vm.h offers no way to read the current one back. On success *out
 * owns its rows (vm_profile_free); on error *out is zeroed. */
vm_status_t vm_machine_profile(vm_machine_t *m, const char *func, vm_profile_t *out) {
  if (!out) return vm_status_make(VM_INVALID_ARGUMENT, "profile: out is NULL");
  memset(out, 0, sizeof(*out));
  if (!m || !func)
    return vm_status_make(VM_INVALID_ARGUMENT, "profile: machine and function required");
  profiler_t p;
  memset(&p, 0, sizeof(p));
  p.m = m;
  p.exec = vm_machine_executable(m);
  vm_device_t *dev0 = vm_machine_device(m, 0);
  p.has_device_timer = dev0 && dev0->props.has_device_timer;
  vm_status_t st = VM_STATUS_OK;
  p.row_of = malloc((p.exec->num_functions ? p.exec->num_functions : 1) * sizeof(int32_t));
  if (!p.row_of) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "profile: out of host memory");
    goto fail;
  }
  for (uint32_t i = 0; i < p.exec->num_functions; i++) p.row_of[i] = -1;

  vm_machine_set_instrument(m, on_call, &p);
  uint64_t t0 = vm_now_ns();
  st = vm_machine_invoke_stateful(m, func);
  uint64_t t1 = vm_now_ns();
  vm_machine_set_instrument(m, NULL, NULL);
  if (p.dev_timer_busy) { /* a call failed between BEFORE and AFTER */
    double ignored;
    vm_status_free(dev0->ops->timer_end(dev0, &ignored));
  }
  if (st) goto fail;
  if (p.err) {
    st = p.err;
    p.err = NULL;
    goto fail;
  }

  double sum = 0;
  for (uint32_t i = 0; i < p.num_rows; i++) {
    vm_profile_row_t *r = &p.rows[i];
    r->mean_s = r->calls ? r->total_s / (double)r->calls : 0.0;
    sum += r->total_s;
  }
  for (uint32_t i = 0; i < p.num_rows; i++) p.rows[i].share = sum > 0 ? p.rows[i].total_s / sum : 0;
  if (p.num_rows) qsort(p.rows, p.num_rows, sizeof(*p.rows), cmp_rows);
  out->rows = p.rows;
  out->num_rows = p.num_rows;
  out->total_s = t1 > t0 ? (double)(t1 - t0) / 1e9 : 0.0;
  free(p.row_of);
  return VM_STATUS_OK;

fail:
  vm_status_free(p.err);
  free(p.rows);
  free(p.row_of);
  return vm_status_annotate(st, "profiling '%s'", func);
}

void vm_profile_free(vm_profile_t *p) {
  if (!p) return;
  free(p->rows);
  memset(p, 0, sizeof(*p));
}
