/* Memory planner: placements never collide, and reuse beats one storage per
 * tensor. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "test_util.h"
#include "vm/planner.h"

/* Every pair of tensors that are live at the same time on the same device
 * must occupy disjoint bytes of their storage. */
static void assert_valid(const vm_plan_tensor_t *t, uint32_t n, const vm_plan_t *p,
                         uint64_t align) {
  for (uint32_t i = 0; i < n; i++) {
    assert_true(p->storage_of[i] < p->num_storages);
    assert_int_equal(p->storage_device[p->storage_of[i]], t[i].device);
    assert_int_equal(p->offset_of[i] % align, 0);
    assert_true(p->offset_of[i] + t[i].nbytes <= p->storage_bytes[p->storage_of[i]]);
    for (uint32_t j = i + 1; j < n; j++) {
      if (p->storage_of[i] != p->storage_of[j]) continue;
      int time = t[i].first_step <= t[j].last_step && t[j].first_step <= t[i].last_step;
      int space = p->offset_of[i] < p->offset_of[j] + t[j].nbytes &&
                  p->offset_of[j] < p->offset_of[i] + t[i].nbytes;
      if (time && space && t[i].nbytes && t[j].nbytes) fail_msg("tensors %u and %u collide", i, j);
    }
  }
  assert_true(p->planned_bytes >= p->live_peak_bytes);
}

/* The planner's specification, quadratic (the first implementation):
 * tensors by device, size (largest first), first step and index; each at
 * the first aligned gap between the placed tensors of its device whose
 * lifetimes overlap its own, by offset. */
static int cmp_u64_pair(const void *a, const void *b) {
  const uint64_t *x = a, *y = b;
  return x[0] < y[0] ? -1 : x[0] > y[0];
}

static void reference_plan(const vm_plan_tensor_t *t, uint32_t n, uint64_t align, uint64_t *off,
                           uint64_t *peak) {
  uint32_t order[200];
  uint8_t done[200] = {0};
  uint64_t busy[200][2];
  for (uint32_t i = 0; i < n; i++) order[i] = i;
  for (uint32_t i = 0; i < n; i++) /* insertion sort by the planner's order */
    for (uint32_t j = i; j > 0; j--) {
      const vm_plan_tensor_t *x = &t[order[j - 1]], *y = &t[order[j]];
      int later = x->device != y->device           ? x->device > y->device
                  : x->nbytes != y->nbytes         ? x->nbytes < y->nbytes
                  : x->first_step != y->first_step ? x->first_step > y->first_step
                                                   : order[j - 1] > order[j];
      if (!later) break;
      uint32_t tmp = order[j];
      order[j] = order[j - 1];
      order[j - 1] = tmp;
    }
  for (uint32_t k = 0; k < n; k++) {
    uint32_t i = order[k];
    size_t nb = 0;
    for (uint32_t j = 0; j < n; j++)
      if (done[j] && t[j].device == t[i].device && t[j].first_step <= t[i].last_step &&
          t[i].first_step <= t[j].last_step) {
        busy[nb][0] = off[j];
        busy[nb++][1] = off[j] + t[j].nbytes;
      }
    qsort(busy, nb, sizeof(busy[0]), cmp_u64_pair);
    uint64_t o = 0;
    for (size_t j = 0; j < nb; j++) {
      if (busy[j][0] >= o && busy[j][0] - o >= t[i].nbytes) break;
      if (busy[j][1] > o) o = (busy[j][1] + align - 1) & ~(align - 1);
    }
    off[i] = o;
    done[i] = 1;
  }
  *peak = 0;
  for (uint32_t i = 0; i < n; i++) {
    uint64_t live = 0;
    for (uint32_t j = 0; j < n; j++)
      if (t[j].device == t[i].device && t[j].first_step <= t[i].first_step &&
          t[j].last_step >= t[i].first_step)
        live += t[j].nbytes;
    if (live > *peak) *peak = live;
  }
}

static void test_chain_reuses_two_slots(void **state) {
  (void)state;
  /* x0 -> x1 -> ... -> x9: each produced at step i, consumed at step i+1. */
  vm_plan_tensor_t t[10];
  for (uint32_t i = 0; i < 10; i++) t[i] = (vm_plan_tensor_t){1024, i, i + 1, 0};
  vm_plan_t p;
  ASSERT_OK(vm_plan_memory(t, 10, 64, &p));
  assert_valid(t, 10, &p, 64);
  assert_int_equal(p.num_storages, 1);
  assert_int_equal(p.planned_bytes, 2048);
  assert_int_equal(p.unplanned_bytes, 10240);
  assert_int_equal(p.live_peak_bytes, 2048);
  vm_plan_free(&p);
}

static void test_devices_get_separate_storages(void **state) {
  (void)state;
  vm_plan_tensor_t t[3] = {{100, 0, 5, 0}, {100, 0, 5, 1}, {50, 6, 7, 0}};
  vm_plan_t p;
  ASSERT_OK(vm_plan_memory(t, 3, 0, &p));
  assert_valid(t, 3, &p, 64);
  assert_int_equal(p.num_storages, 2);
  assert_int_equal(p.storage_of[0], p.storage_of[2]);
  assert_int_equal(p.offset_of[2], 0); /* reuses tensor 0's bytes */
  vm_plan_free(&p);
}

static void test_random_graphs_never_collide(void **state) {
  (void)state;
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  for (int trial = 0; trial < 200; trial++) {
    uint32_t n = 1 + (uint32_t)(seed % 60);
    vm_plan_tensor_t t[64];
    for (uint32_t i = 0; i < n; i++) {
      seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
      uint32_t a = (uint32_t)(seed % 40), len = (uint32_t)((seed >> 8) % 10);
      t[i] = (vm_plan_tensor_t){(seed >> 16) % 5000, a, a + len, (uint32_t)((seed >> 40) % 2)};
    }
    vm_plan_t p;
    ASSERT_OK(vm_plan_memory(t, n, 128, &p));
    assert_valid(t, n, &p, 128);
    assert_true(p.planned_bytes <= p.unplanned_bytes + 128ull * n * 2);
    vm_plan_free(&p);
    seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
  }
}

/* The indexed planner places exactly where the quadratic specification
 * does, on random lifetimes (wide steps, several devices, zero sizes). */
static void test_matches_reference(void **state) {
  (void)state;
  uint64_t seed = 0x2545f4914f6cdd1dull;
  for (int trial = 0; trial < 300; trial++) {
    seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
    uint32_t n = 1 + (uint32_t)(seed % 150);
    uint32_t span = trial % 3 == 0 ? 4000000000u : 1 + (uint32_t)(seed >> 20) % 300;
    vm_plan_tensor_t t[200];
    for (uint32_t i = 0; i < n; i++) {
      seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
      uint32_t a = (uint32_t)(seed % span), len = (uint32_t)((seed >> 8) % (trial % 2 ? 5 : 60));
      if (a > UINT32_MAX - len) a = UINT32_MAX - len;
      t[i] = (vm_plan_tensor_t){(seed >> 16) % 3000 * (trial % 5 ? 1 : 64), a, a + len,
                                (uint32_t)((seed >> 40) % 3)};
    }
    uint64_t off[200], peak;
    reference_plan(t, n, 64, off, &peak);
    vm_plan_t p;
    ASSERT_OK(vm_plan_memory(t, n, 64, &p));
    assert_valid(t, n, &p, 64);
    for (uint32_t i = 0; i < n; i++) assert_int_equal(p.offset_of[i], off[i]);
    assert_int_equal(p.live_peak_bytes, peak);
    vm_plan_free(&p);
  }
}

static void test_errors(void **state) {
  (void)state;
  vm_plan_t p;
  vm_plan_tensor_t bad[1] = {{8, 5, 4, 0}};
  ASSERT_STATUS(vm_plan_memory(bad, 1, 64, &p), VM_INVALID_ARGUMENT, "ends (step 4) before");
  vm_plan_tensor_t ok[1] = {{8, 0, 0, 0}};
  ASSERT_STATUS(vm_plan_memory(ok, 1, 48, &p), VM_INVALID_ARGUMENT, "not a power of two");
  vm_plan_tensor_t huge[2] = {{UINT64_MAX - 64, 0, 1, 0}, {UINT64_MAX - 64, 0, 1, 0}};
  ASSERT_STATUS(vm_plan_memory(huge, 2, 64, &p), VM_INVALID_ARGUMENT, "overflows");
  ASSERT_OK(vm_plan_memory(NULL, 0, 64, &p));
  assert_int_equal(p.planned_bytes, 0);
  vm_plan_free(&p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_chain_reuses_two_slots),
      cmocka_unit_test(test_devices_get_separate_storages),
      cmocka_unit_test(test_random_graphs_never_collide),
      cmocka_unit_test(test_matches_reference),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
