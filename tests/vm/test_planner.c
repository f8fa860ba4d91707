/* Memory planner: placements never collide, and reuse beats one storage per
 * tensor. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

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
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
