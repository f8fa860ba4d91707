/* The OpenCL device (opencl/src/cl_device.c) on whatever OpenCL platform the
 * machine has (PoCL in CI): enumeration, selection, properties, memory,
 * copies, the device timer and the error table. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cl_internal.h"
#include "test_util.h"
#include "vmcl/vmcl.h"

typedef struct fixture {
  vm_device_t *dev;
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof(*f));
  if (!f) return -1;
  vm_status_t st = vmcl_device_open(NULL, NULL, &f->dev);
  if (st) {
    fprintf(stderr, "cannot open an OpenCL device: %s\n", vm_status_message(st));
    vm_status_free(st);
    free(f);
    return -1;
  }
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  vm_device_destroy(f->dev);
  free(f);
  return 0;
}

static void test_error_names(void **state) {
  (void)state;
  assert_string_equal(vmcl_error_name(CL_SUCCESS), "CL_SUCCESS");
  assert_string_equal(vmcl_error_name(CL_OUT_OF_RESOURCES), "CL_OUT_OF_RESOURCES");
  assert_string_equal(vmcl_error_name(CL_BUILD_PROGRAM_FAILURE), "CL_BUILD_PROGRAM_FAILURE");
  assert_string_equal(vmcl_error_name(CL_INVALID_WORK_GROUP_SIZE), "CL_INVALID_WORK_GROUP_SIZE");
  assert_string_equal(vmcl_error_name(CL_INVALID_DEVICE_PARTITION_COUNT),
                      "CL_INVALID_DEVICE_PARTITION_COUNT");
  assert_string_equal(vmcl_error_name(-1001), "CL_PLATFORM_NOT_FOUND_KHR");
  assert_string_equal(vmcl_error_name(12345), "CL_UNKNOWN_ERROR");
  assert_string_equal(vmcl_error_name(-20), "CL_UNKNOWN_ERROR");

  assert_null(vmcl_status(CL_SUCCESS, "clFinish"));
  ASSERT_STATUS(vmcl_status(CL_INVALID_WORK_GROUP_SIZE, "clEnqueueNDRangeKernel"),
                VM_INVALID_ARGUMENT, "clEnqueueNDRangeKernel: CL_INVALID_WORK_GROUP_SIZE (-54)");
  ASSERT_STATUS(vmcl_status(CL_MEM_OBJECT_ALLOCATION_FAILURE, "clCreateBuffer"),
                VM_RESOURCE_EXHAUSTED, "CL_MEM_OBJECT_ALLOCATION_FAILURE (-4)");
  ASSERT_STATUS(vmcl_status(CL_OUT_OF_HOST_MEMORY, "x"), VM_RESOURCE_EXHAUSTED, NULL);
  ASSERT_STATUS(vmcl_status(CL_OUT_OF_RESOURCES, "x"), VM_RESOURCE_EXHAUSTED, NULL);
  ASSERT_STATUS(vmcl_status(CL_BUILD_PROGRAM_FAILURE, "x"), VM_INVALID_ARGUMENT, NULL);
  ASSERT_STATUS(vmcl_status(CL_PROFILING_INFO_NOT_AVAILABLE, "x"), VM_INTERNAL,
                "CL_PROFILING_INFO_NOT_AVAILABLE");
  ASSERT_STATUS(vmcl_status(-777, "clFoo"), VM_INTERNAL, "clFoo: CL_UNKNOWN_ERROR (-777)");
}

static void test_list_devices(void **state) {
  (void)state;
  vm_device_props_t *props = NULL;
  uint32_t n = 0;
  ASSERT_OK(vmcl_list_devices(&props, &n));
  assert_true(n >= 1);
  for (uint32_t i = 0; i < n; i++) {
    assert_true(props[i].name[0] != '\0');
    assert_true(props[i].platform[0] != '\0');
    assert_true(strncmp(props[i].version, "OpenCL", 6) == 0);
    assert_true(props[i].compute_units >= 1);
    assert_true(props[i].max_alloc_bytes > 0);
    assert_true(props[i].global_mem_bytes >= props[i].max_alloc_bytes);
    assert_int_equal(props[i].has_device_timer, 1);
  }
  free(props);
}

static void test_open_by_index(void **state) {
  fixture_t *f = *state;
  vm_device_t *dev = NULL;
  ASSERT_OK(vmcl_device_open("opencl:0", NULL, &dev));
  assert_true(vmcl_is_device(dev));
  assert_non_null(vmcl_get(dev));
  assert_int_equal(dev->type, VM_DEVICE_OPENCL);
  assert_int_equal(dev->id, 0);
  assert_string_equal(dev->props.name, f->dev->props.name);
  char buf[32];
  assert_string_equal(vm_device_str(dev, buf, sizeof(buf)), "opencl:0");
  vm_device_destroy(dev);

  ASSERT_OK(vmcl_device_open("OpenCL:0", NULL, &dev)); /* prefix is case-insensitive */
  vm_device_destroy(dev);

  assert_false(vmcl_is_device(NULL));
  assert_null(vmcl_get(NULL));
}

static void test_open_by_substring(void **state) {
  fixture_t *f = *state;
  /* a case-flipped piece of the name from its middle */
  const char *name = f->dev->props.name;
  size_t len = strlen(name);
  char sub[8] = {0};
  size_t from = len > 6 ? len / 2 - 2 : 0;
  for (size_t i = 0; i < 4 && from + i < len; i++) {
    char c = name[from + i];
    sub[i] = (c >= 'a' && c <= 'z') ? (char)(c - 32) : (c >= 'A' && c <= 'Z') ? (char)(c + 32) : c;
  }
  vm_device_t *dev = NULL;
  ASSERT_OK(vmcl_device_open(sub, NULL, &dev));
  assert_string_equal(dev->props.name, name);
  vm_device_destroy(dev);

  ASSERT_OK(vmcl_device_open("", NULL, &dev));
  assert_int_equal(dev->id, 0);
  vm_device_destroy(dev);
}

static void test_open_missing(void **state) {
  fixture_t *f = *state;
  vm_device_t *dev = (vm_device_t *)1;
  ASSERT_STATUS(vmcl_device_open("no-such-gpu-xyz", NULL, &dev), VM_NOT_FOUND,
                "no OpenCL device matches 'no-such-gpu-xyz'");
  assert_null(dev);
  /* the message lists what there is */
  ASSERT_STATUS(vmcl_device_open("no-such-gpu-xyz", NULL, &dev), VM_NOT_FOUND, f->dev->props.name);
  ASSERT_STATUS(vmcl_device_open("opencl:99", NULL, &dev), VM_NOT_FOUND, "opencl:0 '");
  ASSERT_STATUS(vmcl_device_open("opencl:x", NULL, &dev), VM_INVALID_ARGUMENT, "opencl:N");
  ASSERT_STATUS(vmcl_device_open("opencl:", NULL, &dev), VM_INVALID_ARGUMENT, NULL);
}

static void test_alloc_copy_round_trip(void **state) {
  fixture_t *f = *state;
  vm_device_t *dev = f->dev;
  enum { N = 1024 };
  float host[N], back[N];
  for (int i = 0; i < N; i++) host[i] = (float)i * 0.5f;

  vm_buffer_t a, b;
  ASSERT_OK(dev->ops->alloc(dev, sizeof(host), &a));
  ASSERT_OK(dev->ops->alloc(dev, sizeof(host), &b));
  assert_non_null(a.handle);

  ASSERT_OK(dev->ops->copy_from_host(dev, a, 0, host, sizeof(host)));
  memset(back, 0, sizeof(back));
  ASSERT_OK(dev->ops->copy_to_host(dev, back, a, 0, sizeof(back)));
  assert_memory_equal(host, back, sizeof(host));

  /* offsets on both sides */
  float part[16];
  for (int i = 0; i < 16; i++) part[i] = -1.0f - (float)i;
  ASSERT_OK(dev->ops->copy_from_host(dev, a, 100 * sizeof(float), part, sizeof(part)));
  float got[16];
  ASSERT_OK(dev->ops->copy_to_host(dev, got, a, 100 * sizeof(float), sizeof(got)));
  assert_memory_equal(part, got, sizeof(part));
  ASSERT_OK(dev->ops->copy_to_host(dev, back, a, 0, sizeof(back)));
  assert_memory_equal(back, host, 100 * sizeof(float));
  assert_memory_equal(back + 116, host + 116, (N - 116) * sizeof(float));

  /* copy_within: a[100..116) -> b[500..516), ordered before the read */
  ASSERT_OK(dev->ops->copy_from_host(dev, b, 0, host, sizeof(host)));
  ASSERT_OK(
      dev->ops->copy_within(dev, b, 500 * sizeof(float), a, 100 * sizeof(float), sizeof(part)));
  ASSERT_OK(dev->ops->sync(dev));
  ASSERT_OK(dev->ops->copy_to_host(dev, back, b, 0, sizeof(back)));
  assert_memory_equal(back + 500, part, sizeof(part));
  assert_memory_equal(back, host, 500 * sizeof(float));
  assert_memory_equal(back + 516, host + 516, (N - 516) * sizeof(float));

  /* zero bytes is a no-op; out of range is the caller's error */
  ASSERT_OK(dev->ops->copy_from_host(dev, a, sizeof(host), host, 0));
  ASSERT_STATUS(dev->ops->copy_to_host(dev, back, a, sizeof(host) - 4, 8), VM_INVALID_ARGUMENT,
                "clEnqueueReadBuffer");
  ASSERT_STATUS(dev->ops->copy_from_host(dev, a, UINT64_MAX - 2, host, 8), VM_INVALID_ARGUMENT,
                "overflows");
  /* overlapping regions of one buffer */
  ASSERT_STATUS(dev->ops->copy_within(dev, a, 0, a, 4, 64), VM_INVALID_ARGUMENT,
                "CL_MEM_COPY_OVERLAP");

  /* a zero-byte allocation is still a valid handle */
  vm_buffer_t z;
  ASSERT_OK(dev->ops->alloc(dev, 0, &z));
  assert_non_null(z.handle);
  dev->ops->free(dev, z, 0);

  dev->ops->free(dev, b, sizeof(host));
  dev->ops->free(dev, a, sizeof(host));
}

static void test_alloc_over_max_alloc(void **state) {
  fixture_t *f = *state;
  vm_device_t *dev = f->dev;
  vm_buffer_t buf = {(void *)1};
  uint64_t max = dev->props.max_alloc_bytes;
  char want[64];
  snprintf(want, sizeof(want), "%llu", (unsigned long long)(max + 1));
  ASSERT_STATUS(dev->ops->alloc(dev, max + 1, &buf), VM_RESOURCE_EXHAUSTED, want);
  assert_null(buf.handle);
  snprintf(want, sizeof(want), "%llu", (unsigned long long)max);
  ASSERT_STATUS(dev->ops->alloc(dev, UINT64_MAX, &buf), VM_RESOURCE_EXHAUSTED, want);
}

static const char *k_fill_src =
    "__kernel void fill(__global float* x, float v, int n) {\n"
    "  int i = get_global_id(0);\n"
    "  if (i < n) x[i] = v * (float)i;\n"
    "}\n";

static void test_timer_measures_kernels_and_copies(void **state) {
  fixture_t *f = *state;
  vm_device_t *dev = f->dev;
  vmcl_dev_t *d = vmcl_get(dev);
  enum { N = 1 << 16 };
  float *host = calloc(N, sizeof(float));
  assert_non_null(host);
  vm_buffer_t buf;
  ASSERT_OK(dev->ops->alloc(dev, N * sizeof(float), &buf));

  cl_kernel k = NULL;
  ASSERT_OK(vmcl_get_kernel(d, k_fill_src, 0, "", "fill", &k));
  cl_mem mem = (cl_mem)buf.handle;
  float v = 2.0f;
  cl_int n = N;
  assert_int_equal(clSetKernelArg(k, 0, sizeof(mem), &mem), CL_SUCCESS);
  assert_int_equal(clSetKernelArg(k, 1, sizeof(v), &v), CL_SUCCESS);
  assert_int_equal(clSetKernelArg(k, 2, sizeof(n), &n), CL_SUCCESS);

  double seconds = 0;
  ASSERT_STATUS(dev->ops->timer_end(dev, &seconds), VM_FAILED_PRECONDITION, "timer_begin");

  ASSERT_OK(dev->ops->timer_begin(dev));
  size_t global = N, local = 64;
  for (int r = 0; r < 5; r++) ASSERT_OK(vmcl_launch(d, k, 1, &global, &local));
  ASSERT_OK(dev->ops->copy_to_host(dev, host, buf, 0, N * sizeof(float)));
  seconds = -1;
  ASSERT_OK(dev->ops->timer_end(dev, &seconds));
  assert_true(seconds > 0.0);
  assert_true(seconds < 60.0);
  for (int i = 0; i < N; i += 997) assert_true(host[i] == 2.0f * (float)i);

  /* a bad launch is an error for that call only */
  size_t bad_local = 3; /* does not divide the global size */
  ASSERT_STATUS(vmcl_launch(d, k, 1, &global, &bad_local), VM_INVALID_ARGUMENT,
                "clEnqueueNDRangeKernel");

  /* nothing timed: zero, and a timer runs again after a stop */
  ASSERT_OK(dev->ops->timer_begin(dev));
  ASSERT_OK(dev->ops->timer_end(dev, &seconds));
  assert_true(seconds == 0.0);

  /* events are only kept while timing; tracking a foreign event takes it */
  ASSERT_OK(vmcl_launch(d, k, 1, &global, NULL));
  ASSERT_OK(dev->ops->sync(dev));
  cl_int err = CL_SUCCESS;
  cl_event user = clCreateUserEvent(d->context, &err);
  assert_int_equal(err, CL_SUCCESS);
  /* completed first: a user event released while still pending keeps
   * NVIDIA's driver (580) waiting for it in clFinish at the device's end */
  assert_int_equal(clSetUserEventStatus(user, CL_COMPLETE), CL_SUCCESS);
  vmcl_track_event(d, user); /* not timing: released */
  vmcl_track_event(d, NULL);

  /* more events than the pending cap are folded in as they go */
  ASSERT_OK(dev->ops->timer_begin(dev));
  size_t small = 64;
  for (int r = 0; r < 4100 + 10; r++) ASSERT_OK(vmcl_launch(d, k, 1, &small, NULL));
  ASSERT_OK(dev->ops->timer_end(dev, &seconds));
  assert_true(seconds > 0.0);

  dev->ops->free(dev, buf, N * sizeof(float));
  free(host);
}

typedef struct foreign_copy {
  vm_device_t *dev;
  vm_buffer_t buf;
  uint8_t *host;
  uint64_t nbytes;
  vm_status_t st;
} foreign_copy_t;

/* Another session's transfer: a write and a read of the whole buffer. */
static void *foreign_copy_main(void *arg) {
  foreign_copy_t *fc = arg;
  fc->st = fc->dev->ops->copy_from_host(fc->dev, fc->buf, 0, fc->host, fc->nbytes);
  if (!fc->st) fc->st = fc->dev->ops->copy_to_host(fc->dev, fc->host, fc->buf, 0, fc->nbytes);
  return NULL;
}

/* The device timer counts only the commands of the thread that started it
 * (the one running the measured function): 64 MiB of copies that another
 * thread (another session's TensorChunk / GetOutput) enqueues on the same
 * device meanwhile keep no event and add nothing. Before, every enqueue
 * while the timer ran was counted. */
static void test_timer_ignores_other_threads(void **state) {
  fixture_t *f = *state;
  vm_device_t *dev = f->dev;
  vmcl_dev_t *d = vmcl_get(dev);
  foreign_copy_t fc = {dev, {NULL}, NULL, 64u << 20, VM_STATUS_OK};
  fc.host = malloc(fc.nbytes);
  assert_non_null(fc.host);
  memset(fc.host, 7, fc.nbytes);
  ASSERT_OK(dev->ops->alloc(dev, fc.nbytes, &fc.buf));

  double seconds = -1;
  ASSERT_OK(dev->ops->timer_begin(dev));
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, foreign_copy_main, &fc), 0);
  pthread_join(th, NULL);
  ASSERT_OK(fc.st);
  assert_int_equal(d->num_events, 0);
  ASSERT_OK(dev->ops->timer_end(dev, &seconds));
  assert_true(seconds == 0.0);

  /* the timing thread's own command is counted, the other's copies not */
  cl_kernel k = NULL;
  ASSERT_OK(vmcl_get_kernel(d, k_fill_src, 0, "", "fill", &k));
  cl_mem mem = (cl_mem)fc.buf.handle;
  float v = 1.0f;
  cl_int n = 1024;
  assert_int_equal(clSetKernelArg(k, 0, sizeof(mem), &mem), CL_SUCCESS);
  assert_int_equal(clSetKernelArg(k, 1, sizeof(v), &v), CL_SUCCESS);
  assert_int_equal(clSetKernelArg(k, 2, sizeof(n), &n), CL_SUCCESS);
  ASSERT_OK(dev->ops->timer_begin(dev));
  assert_int_equal(pthread_create(&th, NULL, foreign_copy_main, &fc), 0);
  size_t global = 1024;
  ASSERT_OK(vmcl_launch(d, k, 1, &global, NULL));
  pthread_join(th, NULL);
  ASSERT_OK(fc.st);
  assert_int_equal(d->num_events, 1);
  ASSERT_OK(dev->ops->timer_end(dev, &seconds));
  assert_true(seconds > 0.0);

  dev->ops->free(dev, fc.buf, fc.nbytes);
  free(fc.host);
}

static void test_cache_stats_of_other_devices(void **state) {
  (void)state;
  vmcl_cache_stats_t s;
  memset(&s, 0xff, sizeof(s));
  vmcl_cache_stats(NULL, &s);
  assert_int_equal(s.builds, 0);
  assert_int_equal(s.memory_hits, 0);
  assert_int_equal(s.disk_corrupt, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_error_names),
      cmocka_unit_test(test_list_devices),
      cmocka_unit_test(test_open_by_index),
      cmocka_unit_test(test_open_by_substring),
      cmocka_unit_test(test_open_missing),
      cmocka_unit_test(test_alloc_copy_round_trip),
      cmocka_unit_test(test_alloc_over_max_alloc),
      cmocka_unit_test(test_timer_measures_kernels_and_copies),
      cmocka_unit_test(test_timer_ignores_other_threads),
      cmocka_unit_test(test_cache_stats_of_other_devices),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
