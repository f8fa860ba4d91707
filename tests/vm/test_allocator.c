/* Allocators: naive vs pooled reuse, counters, device out-of-memory retry,
 * per-session limits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "test_util.h"
#include "vm/allocator.h"
#include "vm/device.h"

static vm_alloc_stats_t stats_of(const vm_allocator_t *a) {
  vm_alloc_stats_t s;
  vm_allocator_get_stats(a, &s);
  return s;
}

static void test_kind_names(void **state) {
  assert_string_equal(vm_allocator_kind_name(VM_ALLOC_NAIVE), "naive");
  assert_string_equal(vm_allocator_kind_name(VM_ALLOC_POOLED), "pooled");
  assert_string_equal(vm_allocator_kind_name((vm_allocator_kind_t)9), "unknown");
  vm_allocator_kind_t k = VM_ALLOC_NAIVE;
  assert_int_equal(vm_allocator_kind_parse("pooled", &k), 0);
  assert_int_equal(k, VM_ALLOC_POOLED);
  assert_int_equal(vm_allocator_kind_parse("naive", &k), 0);
  assert_int_equal(k, VM_ALLOC_NAIVE);
  assert_int_equal(vm_allocator_kind_parse("pool", &k), -1);
  assert_int_equal(vm_allocator_kind_parse("", &k), -1);
  assert_int_equal(vm_allocator_kind_parse(NULL, &k), -1);
  assert_int_equal(k, VM_ALLOC_NAIVE); /* untouched on failure */
  /* Values are TVM's allocator types. */
  assert_int_equal(VM_ALLOC_NAIVE, 1);
  assert_int_equal(VM_ALLOC_POOLED, 2);
}

static void test_create_errors(void **state) {
  vm_device_t *dev;
  ASSERT_OK(vm_cpu_device_create(0, &dev));
  vm_allocator_t *a;
  ASSERT_STATUS(vm_allocator_create(dev, (vm_allocator_kind_t)3, &a), VM_INVALID_ARGUMENT,
                "unknown allocator kind 3");
  ASSERT_STATUS(vm_allocator_create(NULL, VM_ALLOC_POOLED, &a), VM_INVALID_ARGUMENT, "no device");
  ASSERT_OK(vm_allocator_create(dev, VM_ALLOC_NAIVE, &a));
  assert_ptr_equal(vm_allocator_device(a), dev);
  assert_int_equal(vm_allocator_kind(a), VM_ALLOC_NAIVE);
  vm_allocator_destroy(a);
  vm_allocator_destroy(NULL);
  vm_device_destroy(dev);
}

/* Runs `rounds` of: allocate one block of each size, then free them all. */
static void churn(vm_allocator_t *a, const uint64_t *sizes, int n, int rounds) {
  vm_buffer_t bufs[16];
  uint64_t got[16];
  assert_true(n <= 16);
  for (int r = 0; r < rounds; r++) {
    for (int i = 0; i < n; i++) {
      ASSERT_OK(vm_allocator_alloc(a, sizes[i], &bufs[i], &got[i]));
      assert_non_null(bufs[i].handle);
      assert_true(got[i] >= sizes[i]);
      assert_int_equal((uintptr_t)bufs[i].handle % 64, 0);
      /* The block is really that large: ASan would flag a short one. */
      if (sizes[i]) memset(bufs[i].handle, 0xab, sizes[i]);
    }
    for (int i = n - 1; i >= 0; i--) vm_allocator_free(a, bufs[i], sizes[i], got[i]);
  }
}

static void test_naive_goes_to_device_every_time(void **state) {
  vm_device_t *dev;
  ASSERT_OK(vm_cpu_device_create(0, &dev));
  vm_allocator_t *a;
  ASSERT_OK(vm_allocator_create(dev, VM_ALLOC_NAIVE, &a));
  const uint64_t sizes[] = {100, 4096, 1 << 20};
  churn(a, sizes, 3, 10);
  vm_alloc_stats_t s = stats_of(a);
  assert_int_equal(s.allocs, 30);
  assert_int_equal(s.frees, 30);
  assert_int_equal(s.device_allocs, 30);
  assert_int_equal(s.device_frees, 30);
  assert_int_equal(s.pool_hits, 0);
  assert_int_equal(s.bytes_in_use, 0);
  assert_int_equal(s.bytes_reserved, 0);
  assert_int_equal(s.peak_bytes, 100 + 4096 + (1 << 20));
  /* Naive reserves exactly what was asked. */
  vm_buffer_t b;
  uint64_t got;
  ASSERT_OK(vm_allocator_alloc(a, 1000, &b, &got));
  assert_int_equal(got, 1000);
  assert_int_equal(stats_of(a).bytes_reserved, 1000);
  assert_int_equal(vm_cpu_device_bytes_in_use(dev), 1000);
  vm_allocator_free(a, b, 1000, got);
  assert_int_equal(vm_cpu_device_bytes_in_use(dev), 0);
  vm_allocator_destroy(a);
  vm_device_destroy(dev);
}

static void test_pooled_reuses_blocks(void **state) {
  vm_device_t *dev;
  ASSERT_OK(vm_cpu_device_create(0, &dev));
  vm_allocator_t *a;
  ASSERT_OK(vm_allocator_create(dev, VM_ALLOC_POOLED, &a));
  const uint64_t sizes[] = {100, 4096, 1 << 20};
  churn(a, sizes, 3, 1);
  vm_alloc_stats_t s = stats_of(a);
  assert_int_equal(s.device_allocs, 3);
  assert_int_equal(s.device_frees, 0);
  uint64_t reserved = s.bytes_reserved;
  assert_true(reserved >= 100 + 4096 + (1 << 20));
  assert_int_equal(vm_cpu_device_bytes_in_use(dev), reserved);
  /* The steady loop allocates nothing more on the device. */
  churn(a, sizes, 3, 50);
  s = stats_of(a);
  assert_int_equal(s.allocs, 153);
  assert_int_equal(s.frees, 153);
  assert_int_equal(s.device_allocs, 3);
  assert_int_equal(s.device_frees, 0);
  assert_int_equal(s.pool_hits, 150);
  assert_int_equal(s.bytes_in_use, 0);
  assert_int_equal(s.bytes_reserved, reserved);
  assert_int_equal(s.peak_bytes, 100 + 4096 + (1 << 20));

  vm_allocator_release_cached(a);
  s = stats_of(a);
  assert_int_equal(s.device_frees, 3);
  assert_int_equal(s.bytes_reserved, 0);
  assert_int_equal(vm_cpu_device_bytes_in_use(dev), 0);
  vm_allocator_release_cached(a); /* nothing left: a no-op */
  assert_int_equal(stats_of(a).device_frees, 3);
  vm_allocator_destroy(a);
  vm_device_destroy(dev);
}

static void test_pooled_size_classes(void **state) {
  vm_device_t *dev;
  ASSERT_OK(vm_cpu_device_create(0, &dev));
  vm_allocator_t *a;
  ASSERT_OK(vm_allocator_create(dev, VM_ALLOC_POOLED, &a));
  static const struct {
    uint64_t request, block;
  } cases[] = {
      {1, 256},           {256, 256},
      {257, 512},         {4095, 4096},
      {4096, 4096},       {4097, 4608},
      {8192, 8192},       {8193, 9216},
      {1000000, 1048576}, {(1 << 20) + 1, (1 << 20) + (1 << 17)},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    vm_buffer_t b;
    uint64_t got;
    ASSERT_OK(vm_allocator_alloc(a, cases[i].request, &b, &got));
    assert_int_equal(got, cases[i].block);
    /* Rounding never wastes more than 1/8 above 4 KiB. */
    if (cases[i].request > 4096) assert_true(got - cases[i].request < got / 8);
    vm_allocator_free(a, b, cases[i].request, got);
  }
  /* Sizes of one class share blocks; a neighbouring class does not. */
  vm_buffer_t b1, b2;
  uint64_t g1, g2;
  uint64_t before = stats_of(a).device_allocs;
  ASSERT_OK(vm_allocator_alloc(a, 5000, &b1, &g1)); /* class of 5120 */
  assert_int_equal(g1, 5120);
  vm_allocator_free(a, b1, 5000, g1);
  ASSERT_OK(vm_allocator_alloc(a, 4700, &b2, &g2)); /* same class */
  assert_ptr_equal(b2.handle, b1.handle);
  assert_int_equal(stats_of(a).device_allocs, before + 1);
  ASSERT_OK(vm_allocator_alloc(a, 5121, &b1, &g1)); /* next class */
  assert_int_equal(g1, 5632);
  assert_int_equal(stats_of(a).device_allocs, before + 2);
  vm_allocator_free(a, b1, 5121, g1);
  vm_allocator_free(a, b2, 4700, g2);
  vm_allocator_destroy(a);
  assert_int_equal(vm_cpu_device_bytes_in_use(dev), 0);
  vm_device_destroy(dev);
}

static void test_mixed_sizes_counters(void **state) {
  vm_device_t *dev;
  ASSERT_OK(vm_cpu_device_create(0, &dev));
  vm_allocator_t *a;
  ASSERT_OK(vm_allocator_create(dev, VM_ALLOC_POOLED, &a));
  vm_buffer_t b[6];
  uint64_t g[6];
  const uint64_t req[] = {10, 300, 70000, 10, 300, 3000000};
  uint64_t sum = 0;
  for (int i = 0; i < 6; i++) {
    ASSERT_OK(vm_allocator_alloc(a, req[i], &b[i], &g[i]));
    sum += req[i];
    assert_int_equal(stats_of(a).bytes_in_use, sum);
  }
  assert_int_equal(stats_of(a).peak_bytes, sum);
  assert_int_equal(stats_of(a).device_allocs, 6); /* nothing cached yet */
  /* Free half; the peak stays, in-use drops by the requested sizes. */
  vm_allocator_free(a, b[2], req[2], g[2]);
  vm_allocator_free(a, b[5], req[5], g[5]);
  vm_alloc_stats_t s = stats_of(a);
  assert_int_equal(s.bytes_in_use, sum - req[2] - req[5]);
  assert_int_equal(s.peak_bytes, sum);
  /* A smaller request of a freed class reuses it. */
  ASSERT_OK(vm_allocator_alloc(a, 69000, &b[2], &g[2]));
  assert_int_equal(stats_of(a).pool_hits, 1);
  assert_int_equal(stats_of(a).device_allocs, 6);
  /* A different class does not. */
  ASSERT_OK(vm_allocator_alloc(a, 140000, &b[5], &g[5]));
  assert_int_equal(stats_of(a).device_allocs, 7);
  uint64_t reserved = 0;
  for (int i = 0; i < 6; i++) reserved += g[i];
  reserved += 3145728; /* the cached block of the 3000000 request */
  assert_int_equal(stats_of(a).bytes_reserved, reserved);
  assert_int_equal(vm_cpu_device_bytes_in_use(dev), reserved);
  const uint64_t req2[] = {10, 300, 69000, 10, 300, 140000};
  for (int i = 0; i < 6; i++) vm_allocator_free(a, b[i], req2[i], g[i]);
  s = stats_of(a);
  assert_int_equal(s.bytes_in_use, 0);
  assert_int_equal(s.allocs, 8);
  assert_int_equal(s.frees, 8);
  vm_allocator_destroy(a);
  assert_int_equal(vm_cpu_device_bytes_in_use(dev), 0);
  vm_device_destroy(dev);
}

static void test_zero_byte_alloc(void **state) {
  vm_device_t *dev;
  ASSERT_OK(vm_cpu_device_create(0, &dev));
  for (int k = VM_ALLOC_NAIVE; k <= VM_ALLOC_POOLED; k++) {
    vm_allocator_t *a;
    ASSERT_OK(vm_allocator_create(dev, (vm_allocator_kind_t)k, &a));
    vm_buffer_t b;
    uint64_t got = 0;
    ASSERT_OK(vm_allocator_alloc(a, 0, &b, &got));
    assert_non_null(b.handle);
    assert_true(got > 0);
    vm_alloc_stats_t s = stats_of(a);
    assert_int_equal(s.bytes_in_use, 0);
    assert_int_equal(s.bytes_reserved, got);
    vm_allocator_free(a, b, 0, got);
    /* Pooled: a second zero-byte block comes from the pool. */
    ASSERT_OK(vm_allocator_alloc(a, 0, &b, &got));
    assert_int_equal(stats_of(a).pool_hits, k == VM_ALLOC_POOLED ? 1 : 0);
    vm_allocator_free(a, b, 0, got);
    vm_allocator_destroy(a);
  }
  assert_int_equal(vm_cpu_device_bytes_in_use(dev), 0);
  vm_device_destroy(dev);
}

static void test_device_oom_naive(void **state) {
  vm_device_t *dev;
  ASSERT_OK(vm_cpu_device_create(10000, &dev));
  vm_allocator_t *a;
  ASSERT_OK(vm_allocator_create(dev, VM_ALLOC_NAIVE, &a));
  vm_buffer_t b1, b2;
  uint64_t g1, g2;
  ASSERT_OK(vm_allocator_alloc(a, 6000, &b1, &g1));
  ASSERT_STATUS(vm_allocator_alloc(a, 5000, &b2, &g2), VM_RESOURCE_EXHAUSTED,
                "allocating 5000 bytes on cpu:0 (6000 bytes in use, 6000 reserved by the naive "
                "allocator): cpu device out of memory: 5000 bytes requested, 6000 of cap 10000 "
                "in use");
  vm_alloc_stats_t s = stats_of(a);
  assert_int_equal(s.allocs, 2);
  assert_int_equal(s.device_allocs, 1);
  assert_int_equal(s.bytes_in_use, 6000);
  ASSERT_OK(vm_allocator_alloc(a, 4000, &b2, &g2)); /* exactly up to the cap */
  vm_allocator_free(a, b1, 6000, g1);
  vm_allocator_free(a, b2, 4000, g2);
  vm_allocator_destroy(a);
  vm_device_destroy(dev);
}

static void test_device_oom_pooled_releases_cache(void **state) {
  vm_device_t *dev;
  ASSERT_OK(vm_cpu_device_create(64 * 1024, &dev));
  vm_allocator_t *a;
  ASSERT_OK(vm_allocator_create(dev, VM_ALLOC_POOLED, &a));
  /* Fill the cache with 40 KiB of blocks of one class, then ask for another
   * class that only fits once the cache is given back. */
  vm_buffer_t b[5];
  uint64_t g[5];
  for (int i = 0; i < 5; i++) ASSERT_OK(vm_allocator_alloc(a, 8192, &b[i], &g[i]));
  for (int i = 0; i < 5; i++) vm_allocator_free(a, b[i], 8192, g[i]);
  assert_int_equal(stats_of(a).bytes_reserved, 40960);
  vm_buffer_t big;
  uint64_t gbig;
  ASSERT_OK(vm_allocator_alloc(a, 40000, &big, &gbig)); /* block of 40960 */
  vm_alloc_stats_t s = stats_of(a);
  assert_int_equal(s.device_frees, 5);
  assert_int_equal(s.device_allocs, 6);
  assert_int_equal(s.bytes_reserved, gbig);
  assert_int_equal(vm_cpu_device_bytes_in_use(dev), gbig);
  /* With nothing cached, out of memory is an error naming the device. */
  vm_buffer_t b2;
  uint64_t g2;
  ASSERT_STATUS(vm_allocator_alloc(a, 30000, &b2, &g2), VM_RESOURCE_EXHAUSTED,
                "allocating 30000 bytes on cpu:0 (40000 bytes in use, 40960 reserved by the "
                "pooled allocator): cpu device out of memory");
  /* A cache too small to help: released, retried once, still an error. */
  ASSERT_OK(vm_allocator_alloc(a, 1000, &b2, &g2));
  vm_allocator_free(a, b2, 1000, g2);
  s = stats_of(a);
  ASSERT_STATUS(vm_allocator_alloc(a, 30000, &b2, &g2), VM_RESOURCE_EXHAUSTED,
                "of cap 65536 in use");
  assert_int_equal(stats_of(a).device_frees, s.device_frees + 1);
  vm_allocator_free(a, big, 40000, gbig);
  vm_allocator_destroy(a);
  assert_int_equal(vm_cpu_device_bytes_in_use(dev), 0);
  vm_device_destroy(dev);
}

static void test_huge_request(void **state) {
  vm_device_t *dev;
  ASSERT_OK(vm_cpu_device_create(0, &dev));
  for (int k = VM_ALLOC_NAIVE; k <= VM_ALLOC_POOLED; k++) {
    vm_allocator_t *a;
    ASSERT_OK(vm_allocator_create(dev, (vm_allocator_kind_t)k, &a));
    vm_buffer_t b;
    uint64_t g;
    ASSERT_STATUS(vm_allocator_alloc(a, UINT64_MAX, &b, &g), VM_RESOURCE_EXHAUSTED,
                  "allocating 18446744073709551615 bytes on cpu:0");
    ASSERT_STATUS(vm_allocator_alloc(a, UINT64_C(1) << 62, &b, &g), VM_RESOURCE_EXHAUSTED,
                  "cpu device out of memory");
    assert_int_equal(stats_of(a).bytes_reserved, 0);
    vm_allocator_destroy(a);
  }
  vm_device_destroy(dev);
}

static void test_limit(void **state) {
  vm_device_t *dev;
  ASSERT_OK(vm_cpu_device_create(0, &dev));
  vm_allocator_t *a;
  ASSERT_OK(vm_allocator_create(dev, VM_ALLOC_POOLED, &a));
  vm_allocator_set_limit(a, 10000);
  vm_buffer_t b1, b2;
  uint64_t g1, g2;
  ASSERT_OK(vm_allocator_alloc(a, 6000, &b1, &g1)); /* block of 6144 */
  ASSERT_STATUS(vm_allocator_alloc(a, 5000, &b2, &g2), VM_RESOURCE_EXHAUSTED,
                "memory limit of 10000 bytes reached: 5000 bytes requested (block of 5120), "
                "6144 bytes reserved, 6000 in use");
  ASSERT_STATUS(vm_allocator_alloc(a, 20000, &b2, &g2), VM_RESOURCE_EXHAUSTED,
                "memory limit of 10000 bytes");
  assert_int_equal(stats_of(a).device_allocs, 1);
  ASSERT_OK(vm_allocator_alloc(a, 3000, &b2, &g2)); /* 6144 + 3072 fits */
  vm_allocator_free(a, b2, 3000, g2);
  /* The cached 3072 block is given back to make room under the limit. */
  vm_allocator_free(a, b1, 6000, g1);
  ASSERT_OK(vm_allocator_alloc(a, 9000, &b2, &g2)); /* block of 9216 */
  vm_alloc_stats_t s = stats_of(a);
  assert_int_equal(s.bytes_reserved, 9216);
  assert_int_equal(s.device_frees, 2);
  vm_allocator_free(a, b2, 9000, g2);
  /* Lowering the limit gives the cache back; 0 lifts it. */
  vm_allocator_set_limit(a, 4096);
  assert_int_equal(stats_of(a).bytes_reserved, 0);
  ASSERT_STATUS(vm_allocator_alloc(a, 5000, &b2, &g2), VM_RESOURCE_EXHAUSTED,
                "memory limit of 4096 bytes");
  vm_allocator_set_limit(a, 0);
  ASSERT_OK(vm_allocator_alloc(a, 50000, &b2, &g2));
  vm_allocator_free(a, b2, 50000, g2);

  /* Naive counts the same way. */
  vm_allocator_t *n;
  ASSERT_OK(vm_allocator_create(dev, VM_ALLOC_NAIVE, &n));
  vm_allocator_set_limit(n, 1000);
  ASSERT_OK(vm_allocator_alloc(n, 1000, &b1, &g1));
  ASSERT_STATUS(vm_allocator_alloc(n, 1, &b2, &g2), VM_RESOURCE_EXHAUSTED,
                "memory limit of 1000 bytes reached: 1 bytes requested");
  vm_allocator_free(n, b1, 1000, g1);
  vm_allocator_destroy(n);
  vm_allocator_destroy(a);
  assert_int_equal(vm_cpu_device_bytes_in_use(dev), 0);
  vm_device_destroy(dev);
}

static void test_destroy_frees_cache(void **state) {
  vm_device_t *dev;
  ASSERT_OK(vm_cpu_device_create(0, &dev));
  vm_allocator_t *a;
  ASSERT_OK(vm_allocator_create(dev, VM_ALLOC_POOLED, &a));
  const uint64_t sizes[] = {1, 5000, 123456, 7 << 20};
  churn(a, sizes, 4, 3);
  assert_true(vm_cpu_device_bytes_in_use(dev) > 0);
  vm_allocator_destroy(a);
  assert_int_equal(vm_cpu_device_bytes_in_use(dev), 0);
  vm_device_destroy(dev);
}

static void test_many_blocks_one_class(void **state) {
  /* Bucket stacks grow past their first capacity. */
  vm_device_t *dev;
  ASSERT_OK(vm_cpu_device_create(0, &dev));
  vm_allocator_t *a;
  ASSERT_OK(vm_allocator_create(dev, VM_ALLOC_POOLED, &a));
  enum { N = 100 };
  vm_buffer_t b[N];
  uint64_t g[N];
  for (int r = 0; r < 3; r++) {
    for (int i = 0; i < N; i++) ASSERT_OK(vm_allocator_alloc(a, 64, &b[i], &g[i]));
    for (int i = 0; i < N; i++) vm_allocator_free(a, b[i], 64, g[i]);
  }
  vm_alloc_stats_t s = stats_of(a);
  assert_int_equal(s.device_allocs, N);
  assert_int_equal(s.pool_hits, 2 * N);
  assert_int_equal(s.peak_bytes, 64 * N);
  vm_allocator_destroy(a);
  vm_device_destroy(dev);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kind_names),
      cmocka_unit_test(test_create_errors),
      cmocka_unit_test(test_naive_goes_to_device_every_time),
      cmocka_unit_test(test_pooled_reuses_blocks),
      cmocka_unit_test(test_pooled_size_classes),
      cmocka_unit_test(test_mixed_sizes_counters),
      cmocka_unit_test(test_zero_byte_alloc),
      cmocka_unit_test(test_device_oom_naive),
      cmocka_unit_test(test_device_oom_pooled_releases_cache),
      cmocka_unit_test(test_huge_request),
      cmocka_unit_test(test_limit),
      cmocka_unit_test(test_destroy_frees_cache),
      cmocka_unit_test(test_many_blocks_one_class),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
