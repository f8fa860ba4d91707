/* The host CPU device: allocation, alignment, copies, cap, counters. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "test_util.h"
#include "vm/device.h"

static void test_create_and_props(void **state) {
  vm_device_t *dev;
  ASSERT_OK(vm_cpu_device_create(0, &dev));
  assert_int_equal(dev->type, VM_DEVICE_CPU);
  assert_int_equal(dev->id, 0);
  assert_non_null(dev->ops);
  assert_string_equal(dev->props.name, "host cpu");
  assert_string_equal(dev->props.version, "host");
  assert_true(dev->props.compute_units >= 1);
  assert_true(dev->props.global_mem_bytes > 0);
  assert_int_equal(dev->props.has_device_timer, 0);
  char buf[32];
  assert_string_equal(vm_device_str(dev, buf, sizeof(buf)), "cpu:0");
  assert_int_equal(vm_cpu_device_bytes_in_use(dev), 0);
  vm_device_destroy(dev);
  vm_device_destroy(NULL);

  /* A cap is what the device reports as its memory. */
  ASSERT_OK(vm_cpu_device_create(1 << 20, &dev));
  assert_int_equal(dev->props.global_mem_bytes, 1 << 20);
  assert_int_equal(dev->props.max_alloc_bytes, 1 << 20);
  vm_device_destroy(dev);
}

static void test_device_str(void **state) {
  vm_device_t fake = {0};
  char buf[32];
  fake.type = VM_DEVICE_OPENCL;
  fake.id = 1;
  assert_string_equal(vm_device_str(&fake, buf, sizeof(buf)), "opencl:1");
  fake.type = (vm_device_type_t)7;
  fake.id = 2;
  assert_string_equal(vm_device_str(&fake, buf, sizeof(buf)), "device7:2");
  assert_string_equal(vm_device_str(NULL, buf, sizeof(buf)), "(no device)");
  char tiny[4];
  fake.type = VM_DEVICE_OPENCL;
  assert_string_equal(vm_device_str(&fake, tiny, sizeof(tiny)), "ope"); /* cut, terminated */
}

static void test_alloc_free_counts(void **state) {
  vm_device_t *dev;
  ASSERT_OK(vm_cpu_device_create(0, &dev));
  vm_buffer_t a, b;
  ASSERT_OK(dev->ops->alloc(dev, 100, &a));
  ASSERT_OK(dev->ops->alloc(dev, 1000, &b));
  assert_int_equal((uintptr_t)a.handle % 64, 0);
  assert_int_equal((uintptr_t)b.handle % 64, 0);
  assert_int_equal(vm_cpu_device_bytes_in_use(dev), 1100);
  dev->ops->free(dev, a, 100);
  assert_int_equal(vm_cpu_device_bytes_in_use(dev), 1000);
  dev->ops->free(dev, b, 1000);
  assert_int_equal(vm_cpu_device_bytes_in_use(dev), 0);
  vm_device_destroy(dev);
  /* Not a cpu device: 0 rather than a wild read. */
  assert_int_equal(vm_cpu_device_bytes_in_use(NULL), 0);
}

static void test_copies(void **state) {
  vm_device_t *dev;
  ASSERT_OK(vm_cpu_device_create(0, &dev));
  vm_buffer_t buf, buf2;
  ASSERT_OK(dev->ops->alloc(dev, 64, &buf));
  ASSERT_OK(dev->ops->alloc(dev, 64, &buf2));
  uint8_t src[64], dst[64];
  for (int i = 0; i < 64; i++) src[i] = (uint8_t)i;
  ASSERT_OK(dev->ops->copy_from_host(dev, buf, 0, src, 64));
  memset(dst, 0, sizeof(dst));
  ASSERT_OK(dev->ops->copy_to_host(dev, dst, buf, 16, 8));
  for (int i = 0; i < 8; i++) assert_int_equal(dst[i], 16 + i);
  /* Into an offset. */
  uint8_t ff[4] = {0xff, 0xff, 0xff, 0xff};
  ASSERT_OK(dev->ops->copy_from_host(dev, buf, 60, ff, 4));
  ASSERT_OK(dev->ops->copy_to_host(dev, dst, buf, 56, 8));
  assert_int_equal(dst[3], 59);
  assert_int_equal(dst[4], 0xff);
  /* Between buffers, and overlapping within one. */
  ASSERT_OK(dev->ops->copy_within(dev, buf2, 0, buf, 0, 64));
  ASSERT_OK(dev->ops->copy_to_host(dev, dst, buf2, 0, 64));
  assert_int_equal(dst[10], 10);
  ASSERT_OK(dev->ops->copy_within(dev, buf, 1, buf, 0, 32));
  ASSERT_OK(dev->ops->copy_to_host(dev, dst, buf, 0, 33));
  assert_int_equal(dst[0], 0);
  for (int i = 1; i <= 32; i++) assert_int_equal(dst[i], i - 1);
  /* Zero bytes touch nothing, even with a NULL host pointer. */
  ASSERT_OK(dev->ops->copy_from_host(dev, buf, 64, NULL, 0));
  ASSERT_OK(dev->ops->copy_to_host(dev, NULL, buf, 64, 0));
  ASSERT_OK(dev->ops->copy_within(dev, buf, 64, buf2, 64, 0));
  ASSERT_OK(dev->ops->sync(dev));
  dev->ops->free(dev, buf, 64);
  dev->ops->free(dev, buf2, 64);
  vm_device_destroy(dev);
}

static void test_timer_reports_no_device_time(void **state) {
  vm_device_t *dev;
  ASSERT_OK(vm_cpu_device_create(0, &dev));
  double secs = 0;
  ASSERT_OK(dev->ops->timer_begin(dev));
  ASSERT_OK(dev->ops->timer_end(dev, &secs));
  assert_true(secs < 0);
  vm_device_destroy(dev);
}

static void test_cap(void **state) {
  vm_device_t *dev;
  ASSERT_OK(vm_cpu_device_create(4096, &dev));
  vm_buffer_t a, b;
  ASSERT_OK(dev->ops->alloc(dev, 3000, &a));
  ASSERT_STATUS(dev->ops->alloc(dev, 2000, &b), VM_RESOURCE_EXHAUSTED,
                "cpu device out of memory: 2000 bytes requested, 3000 of cap 4096 in use");
  assert_int_equal(vm_cpu_device_bytes_in_use(dev), 3000); /* a failure reserves nothing */
  ASSERT_OK(dev->ops->alloc(dev, 1096, &b));               /* exactly to the cap */
  assert_int_equal(vm_cpu_device_bytes_in_use(dev), 4096);
  ASSERT_STATUS(dev->ops->alloc(dev, 1, &b), VM_RESOURCE_EXHAUSTED, "1 bytes requested");
  dev->ops->free(dev, a, 3000);
  ASSERT_STATUS(dev->ops->alloc(dev, UINT64_MAX, &a), VM_RESOURCE_EXHAUSTED, "of cap 4096 in use");
  ASSERT_OK(dev->ops->alloc(dev, 3000, &a));
  dev->ops->free(dev, a, 3000);
  dev->ops->free(dev, b, 1096);
  assert_int_equal(vm_cpu_device_bytes_in_use(dev), 0);
  vm_device_destroy(dev);
}

static void test_more_than_the_host_has(void **state) {
  vm_device_t *dev;
  ASSERT_OK(vm_cpu_device_create(0, &dev));
  vm_buffer_t a;
  ASSERT_STATUS(dev->ops->alloc(dev, UINT64_C(1) << 60, &a), VM_RESOURCE_EXHAUSTED,
                "cpu device out of memory: 1152921504606846976 bytes requested");
  ASSERT_STATUS(dev->ops->alloc(dev, UINT64_MAX, &a), VM_RESOURCE_EXHAUSTED, NULL);
  assert_int_equal(vm_cpu_device_bytes_in_use(dev), 0);
  vm_device_destroy(dev);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_create_and_props),
      cmocka_unit_test(test_device_str),
      cmocka_unit_test(test_alloc_free_counts),
      cmocka_unit_test(test_copies),
      cmocka_unit_test(test_timer_reports_no_device_time),
      cmocka_unit_test(test_cap),
      cmocka_unit_test(test_more_than_the_host_has),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
