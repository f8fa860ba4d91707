/* Measurements: TimeEvaluate and Profile, run under the devices' run
 * locks with their quiet gates closed (device_gate.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_gate.h"
#include "handlers.h"
#include "vm_lock.h"

/* Largest scratch buffer the time evaluator may be asked to flush. */
#define VMA_MAX_FLUSH_BYTES (1ull << 30)
/* Repeats of one TimeEvaluate and rows of one Profile reply: bounded so a
 * reply stays far below any client's receive limit (chunk + 64 KiB). */
#define VMA_MAX_REPEAT 2048
#define VMA_MAX_PROFILE_ROWS 256
#define VMA_MAX_COOLDOWN_MS 60000

vm_status_t vma_op_time_evaluate(vma_ctx_t *c) {
  const Vmrpc__TimeEvaluateRequest *q = c->rq->time_evaluate;
  VM_RETURN_IF_ERROR(vma_check_name(q->func, "func"));
  vm_time_params_t p = vm_time_params_default();
  if (!q->defaults || q->number) p.number = q->number;
  if (!q->defaults || q->repeat) p.repeat = q->repeat;
  if (!q->defaults || q->min_repeat_ms) p.min_repeat_ms = q->min_repeat_ms;
  if (!q->defaults || q->limit_zero_time_iterations)
    p.limit_zero_time_iterations = q->limit_zero_time_iterations;
  if (!q->defaults || q->cooldown_interval_ms) p.cooldown_interval_ms = q->cooldown_interval_ms;
  if (!q->defaults || q->repeats_to_cooldown) p.repeats_to_cooldown = q->repeats_to_cooldown;
  if (!q->defaults || q->cache_flush_bytes) p.cache_flush_bytes = q->cache_flush_bytes;
  /* The per-repeat lists must fit in a reply a client accepts. */
  if (p.repeat > VMA_MAX_REPEAT)
    return vm_status_make(VM_INVALID_ARGUMENT, "repeat %d exceeds this agent's limit of %d",
                          p.repeat, VMA_MAX_REPEAT);
  /* A cooldown sleep cannot be cancelled and holds the device: bounded. */
  if (p.cooldown_interval_ms > VMA_MAX_COOLDOWN_MS)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "cooldown_interval_ms %d exceeds this agent's limit of %d",
                          p.cooldown_interval_ms, VMA_MAX_COOLDOWN_MS);
  if (p.cache_flush_bytes > VMA_MAX_FLUSH_BYTES)
    return vm_status_make(VM_RESOURCE_EXHAUSTED,
                          "cache_flush_bytes of %llu exceeds this agent's limit of %llu",
                          (unsigned long long)p.cache_flush_bytes, VMA_MAX_FLUSH_BYTES);
  vma_vm_t *v;
  VM_RETURN_IF_ERROR(vma_run_locked(c->a, c->s, q->vm_id, 0, &v));
  vm_time_result_t res;
  memset(&res, 0, sizeof(res));
  double gate_wait_s = vma_measure_enter(c->a, v);
  cpu_set_t saved;
  int pinned = vma_pin_enter(&c->a->pin, &saved);
  vm_status_t st = vm_machine_time_evaluate(v->m, q->func, &p, &res);
  vma_pin_exit(pinned, &saved);
  vma_measure_exit(c->a, v);
  vma_run_unlock(c->a, c->s, v);
  if (st) return st;
  Vmrpc__TimeEvaluateResponse *r =
      VMA_RESPONSE(c, TIME_EVALUATE, time_evaluate, time_evaluate_response);
  double *secs = vma_own(c, malloc((res.repeat ? res.repeat : 1) * sizeof(double)));
  double *dsecs = vma_own(c, malloc((res.repeat ? res.repeat : 1) * sizeof(double)));
  if (!secs || !dsecs) {
    vm_time_result_free(&res);
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (uint32_t i = 0; i < res.repeat; i++) {
    secs[i] = res.seconds ? res.seconds[i] : 0;
    dsecs[i] = res.device_seconds ? res.device_seconds[i] : -1.0;
  }
  r->number = res.number;
  r->n_seconds = res.repeat;
  r->seconds = secs;
  r->n_device_seconds = res.repeat;
  r->device_seconds = dsecs;
  r->min_s = res.min_s;
  r->mean_s = res.mean_s;
  r->median_s = res.median_s;
  r->max_s = res.max_s;
  r->std_s = res.std_s;
  r->device_median_s = res.device_median_s;
  r->warmup_s = res.warmup_s;
  r->gate_wait_s = gate_wait_s;
  vm_time_result_free(&res);
  return VM_STATUS_OK;
}

vm_status_t vma_op_profile(vma_ctx_t *c) {
  const Vmrpc__ProfileRequest *q = c->rq->profile;
  VM_RETURN_IF_ERROR(vma_check_name(q->func, "func"));
  vma_vm_t *v;
  VM_RETURN_IF_ERROR(vma_run_locked(c->a, c->s, q->vm_id, 0, &v));
  vm_profile_t prof;
  memset(&prof, 0, sizeof(prof));
  vma_measure_enter(c->a, v);
  cpu_set_t saved;
  int pinned = vma_pin_enter(&c->a->pin, &saved);
  vm_status_t st = vm_machine_profile(v->m, q->func, &prof);
  vma_pin_exit(pinned, &saved);
  vma_measure_exit(c->a, v);
  vma_run_unlock(c->a, c->s, v);
  if (st) return st;
  Vmrpc__ProfileResponse *r = VMA_RESPONSE(c, PROFILE, profile, profile_response);
  size_t n = prof.num_rows < VMA_MAX_PROFILE_ROWS ? prof.num_rows : VMA_MAX_PROFILE_ROWS;
  Vmrpc__ProfileRow *rows = vma_own(c, calloc(n ? n : 1, sizeof(*rows)));
  Vmrpc__ProfileRow **ptrs = vma_own(c, calloc(n ? n : 1, sizeof(*ptrs)));
  /* Names must outlive prof: copy them next to the rows. */
  char(*names)[128] = vma_own(c, calloc(n ? n : 1, 128));
  if (!rows || !ptrs || !names) {
    vm_profile_free(&prof);
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (size_t i = 0; i < n; i++) {
    const vm_profile_row_t *pr = &prof.rows[i];
    vmrpc__profile_row__init(&rows[i]);
    snprintf(names[i], 128, "%s", pr->name);
    rows[i].name = names[i];
    rows[i].calls = pr->calls;
    rows[i].total_s = pr->total_s;
    rows[i].mean_s = pr->mean_s;
    rows[i].device_s = pr->device_s;
    rows[i].share = pr->share;
    ptrs[i] = &rows[i];
  }
  r->n_rows = n;
  r->rows = ptrs;
  r->total_s = prof.total_s;
  vm_profile_free(&prof);
  return VM_STATUS_OK;
}
