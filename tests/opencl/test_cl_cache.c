/* The program cache (opencl/src/cl_program_cache.c): memory hits, build
 * errors with their log, and the disk cache across processes — a fresh
 * process is served from disk without compiling, and a damaged file is
 * detected, deleted, counted and rebuilt, never used.
 *
 * The fresh process is this binary run again (fork + exec of
 * /proc/self/exe) with "--child <cache dir>": it opens the device with that
 * cache directory, gets and runs one kernel, and prints its counters on
 * stdout.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "cl_internal.h"
#include "test_util.h"
#include "vmcl/vmcl.h"

/* The program every disk test caches. */
static const char *k_add_src =
    "__kernel void add_one(__global float* x) {\n"
    "  size_t i = get_global_id(0);\n"
    "  x[i] = x[i] + 1.0f;\n"
    "}\n"
    "__kernel void twice(__global float* x) { x[get_global_id(0)] *= 2.0f; }\n";

/* Runs add_one over 64 floats; returns 0 when the results are right. */
static vm_status_t run_add_one(vm_device_t *dev, cl_kernel k, int *out_ok) {
  enum { N = 64 };
  float host[N];
  for (int i = 0; i < N; i++) host[i] = (float)i;
  vm_buffer_t buf;
  *out_ok = 0;
  VM_RETURN_IF_ERROR(dev->ops->alloc(dev, sizeof(host), &buf));
  cl_mem mem = (cl_mem)buf.handle;
  size_t global = N;
  vm_status_t st = dev->ops->copy_from_host(dev, buf, 0, host, sizeof(host));
  if (!st) st = vmcl_status(clSetKernelArg(k, 0, sizeof(mem), &mem), "clSetKernelArg");
  if (!st) st = vmcl_launch(vmcl_get(dev), k, 1, &global, NULL);
  if (!st) st = dev->ops->copy_to_host(dev, host, buf, 0, sizeof(host));
  dev->ops->free(dev, buf, sizeof(host));
  if (st) return st;
  *out_ok = 1;
  for (int i = 0; i < N; i++) {
    if (host[i] != (float)i + 1.0f) *out_ok = 0;
  }
  return VM_STATUS_OK;
}

/* The child: prints "builds disk_hits disk_writes disk_corrupt memory_hits ok". */
static int child_main(const char *dir) {
  vmcl_options_t opts = {.cache_dir = dir};
  vm_device_t *dev = NULL;
  vm_status_t st = vmcl_device_open(NULL, &opts, &dev);
  cl_kernel k = NULL;
  int ok = 0;
  if (!st)
    st = vmcl_get_kernel(vmcl_get(dev), k_add_src, 0, "-cl-fast-relaxed-math", "add_one", &k);
  if (!st) st = run_add_one(dev, k, &ok);
  if (st) {
    fprintf(stderr, "child: %s\n", vm_status_message(st));
    vm_status_free(st);
    vm_device_destroy(dev);
    return 2;
  }
  vmcl_cache_stats_t s;
  vmcl_cache_stats(dev, &s);
  printf("%llu %llu %llu %llu %llu %d\n", (unsigned long long)s.builds,
         (unsigned long long)s.disk_hits, (unsigned long long)s.disk_writes,
         (unsigned long long)s.disk_corrupt, (unsigned long long)s.memory_hits, ok);
  fflush(stdout);
  vm_device_destroy(dev);
  return 0;
}

typedef struct child_result {
  unsigned long long builds, disk_hits, disk_writes, disk_corrupt, memory_hits;
  int ok;
} child_result_t;

/* Runs this binary again in a fresh process with --child dir. */
static void run_child(const char *dir, child_result_t *r) {
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    if (dup2(fds[1], STDOUT_FILENO) < 0) _exit(126);
    close(fds[1]);
    execl("/proc/self/exe", "test_cl_cache", "--child", dir, (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  char out[256];
  size_t got = 0;
  for (;;) {
    ssize_t n = read(fds[0], out + got, sizeof(out) - 1 - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += (size_t)n;
    if (got == sizeof(out) - 1) break;
  }
  out[got] = '\0';
  close(fds[0]);
  int wstatus = 0;
  assert_int_equal(waitpid(pid, &wstatus, 0), pid);
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0)
    fail_msg("child failed (status 0x%x), output '%s'", wstatus, out);
  memset(r, 0, sizeof(*r));
  if (sscanf(out, "%llu %llu %llu %llu %llu %d", &r->builds, &r->disk_hits, &r->disk_writes,
             &r->disk_corrupt, &r->memory_hits, &r->ok) != 6)
    fail_msg("unexpected child output '%s'", out);
}

/* The one .clbin file in dir (fails unless there is exactly one). */
static void find_bin(const char *dir, char *path, size_t size) {
  DIR *dp = opendir(dir);
  assert_non_null(dp);
  int count = 0;
  struct dirent *de;
  while ((de = readdir(dp)) != NULL) {
    size_t n = strlen(de->d_name);
    if (n > 6 && strcmp(de->d_name + n - 6, ".clbin") == 0) {
      snprintf(path, size, "%s/%s", dir, de->d_name);
      count++;
    } else if (de->d_name[0] != '.') {
      fail_msg("unexpected file '%s' in the cache directory", de->d_name);
    }
  }
  closedir(dp);
  assert_int_equal(count, 1);
}

static long file_size(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

static void flip_byte(const char *path, long offset) {
  int fd = open(path, O_RDWR);
  assert_true(fd >= 0);
  unsigned char c = 0;
  assert_int_equal(pread(fd, &c, 1, offset), 1);
  c ^= 0x5a;
  assert_int_equal(pwrite(fd, &c, 1, offset), 1);
  close(fd);
}

static void remove_dir(const char *dir) {
  DIR *dp = opendir(dir);
  if (!dp) return;
  struct dirent *de;
  char path[4096];
  while ((de = readdir(dp)) != NULL) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
    snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
    unlink(path);
  }
  closedir(dp);
  rmdir(dir);
}

/* ---------------------------------------------------------------------------
 * Tests
 */

static void test_memory_hit(void **state) {
  (void)state;
  vm_device_t *dev = NULL;
  ASSERT_OK(vmcl_device_open(NULL, NULL, &dev));
  vmcl_dev_t *d = vmcl_get(dev);
  cl_kernel k1 = NULL, k2 = NULL, k3 = NULL;
  ASSERT_OK(vmcl_get_kernel(d, k_add_src, 0, NULL, "add_one", &k1));
  vmcl_cache_stats_t s;
  vmcl_cache_stats(dev, &s);
  assert_int_equal(s.builds, 1);
  assert_int_equal(s.memory_hits, 0);
  assert_int_equal(s.disk_writes, 0); /* no cache directory */

  /* the same source again, from a different buffer: no build */
  char *copy = strdup(k_add_src);
  assert_non_null(copy);
  ASSERT_OK(vmcl_get_kernel(d, copy, 0, "", "add_one", &k2));
  assert_ptr_equal(k1, k2);
  ASSERT_OK(vmcl_get_kernel(d, copy, 0, "", "twice", &k3)); /* another kernel, same program */
  assert_ptr_not_equal(k1, k3);
  free(copy);
  vmcl_cache_stats(dev, &s);
  assert_int_equal(s.builds, 1);
  assert_int_equal(s.memory_hits, 2);

  /* a process-lifetime source, found by its address and options: the
   * options still tell programs apart, and the bytes path finds the same
   * entry */
  cl_kernel k4 = NULL, k5 = NULL, k6 = NULL;
  ASSERT_OK(vmcl_get_kernel(d, k_add_src, 1, "-DVMRPC_TEST=1", "add_one", &k4));
  assert_ptr_not_equal(k1, k4);
  ASSERT_OK(vmcl_get_kernel(d, k_add_src, 1, "-DVMRPC_TEST=1", "add_one", &k5));
  assert_ptr_equal(k4, k5);
  ASSERT_OK(vmcl_get_kernel(d, k_add_src, 1, "", "add_one", &k6));
  assert_ptr_equal(k1, k6);
  copy = strdup(k_add_src);
  assert_non_null(copy);
  ASSERT_OK(vmcl_get_kernel(d, copy, 0, "-DVMRPC_TEST=1", "add_one", &k6));
  assert_ptr_equal(k4, k6);
  free(copy);
  vmcl_cache_stats(dev, &s);
  assert_int_equal(s.builds, 2);
  assert_int_equal(s.memory_hits, 5);

  int ok = 0;
  ASSERT_OK(run_add_one(dev, k1, &ok));
  assert_true(ok);

  /* an unknown kernel name in a cached program */
  ASSERT_STATUS(vmcl_get_kernel(d, k_add_src, 0, "", "nope", &k2), VM_NOT_FOUND,
                "no kernel 'nope'");
  assert_null(k2);
  ASSERT_STATUS(vmcl_get_kernel(d, k_add_src, 0, "", "", &k2), VM_INVALID_ARGUMENT, NULL);
  vm_device_destroy(dev);
}

static void test_build_error_carries_log(void **state) {
  (void)state;
  vm_device_t *dev = NULL;
  ASSERT_OK(vmcl_device_open(NULL, NULL, &dev));
  cl_kernel k = (cl_kernel)1;
  const char *bad = "__kernel void broken(__global float* x) { x[0] = not_declared_anywhere; }\n";
  ASSERT_STATUS(vmcl_get_kernel(vmcl_get(dev), bad, 0, "", "broken", &k), VM_INVALID_ARGUMENT,
                "CL_BUILD_PROGRAM_FAILURE");
  assert_null(k);
  ASSERT_STATUS(vmcl_get_kernel(vmcl_get(dev), bad, 0, "", "broken", &k), VM_INVALID_ARGUMENT,
                "not_declared_anywhere");
  ASSERT_STATUS(vmcl_get_kernel(vmcl_get(dev), k_add_src, 0, "-no-such-option", "add_one", &k),
                VM_INVALID_ARGUMENT, "-no-such-option");
  vmcl_cache_stats_t s;
  vmcl_cache_stats(dev, &s);
  assert_int_equal(s.builds, 0); /* failed builds are not cached */
  vm_device_destroy(dev);
}

static void test_disk_cache_across_processes(void **state) {
  (void)state;
  char dir[] = "/tmp/vmcl_cache_test_XXXXXX";
  assert_non_null(mkdtemp(dir));
  char sub[sizeof(dir) + 16];
  snprintf(sub, sizeof(sub), "%s/a/b/", dir); /* created, trailing slash tolerated */

  /* this process: compiles and saves */
  vmcl_options_t opts = {.cache_dir = sub};
  vm_device_t *dev = NULL;
  ASSERT_OK(vmcl_device_open(NULL, &opts, &dev));
  cl_kernel k = NULL;
  ASSERT_OK(vmcl_get_kernel(vmcl_get(dev), k_add_src, 0, "-cl-fast-relaxed-math", "add_one", &k));
  ASSERT_OK(vmcl_get_kernel(vmcl_get(dev), k_add_src, 0, "-cl-fast-relaxed-math", "twice", &k));
  vmcl_cache_stats_t s;
  vmcl_cache_stats(dev, &s);
  assert_int_equal(s.builds, 1);
  assert_int_equal(s.disk_hits, 0);
  assert_int_equal(s.disk_writes, 1); /* once per program */
  vm_device_destroy(dev);
  char path[4096];
  find_bin(sub, path, sizeof(path));
  long size = file_size(path);
  assert_true(size > 88);

  /* a fresh process is served from disk */
  child_result_t r;
  run_child(sub, &r);
  assert_int_equal(r.builds, 0);
  assert_int_equal(r.disk_hits, 1);
  assert_int_equal(r.disk_writes, 0);
  assert_int_equal(r.disk_corrupt, 0);
  assert_int_equal(r.ok, 1);

  /* damage: truncated payload, a flipped payload byte, a flipped header byte
   * (magic, key, length); each is found, deleted, rebuilt and saved again */
  const long flips[] = {-1 /* truncate */, size - 1, 88, 0, 20, 50, 60};
  for (size_t i = 0; i < sizeof(flips) / sizeof(flips[0]); i++) {
    find_bin(sub, path, sizeof(path));
    if (flips[i] < 0) {
      assert_int_equal(truncate(path, size / 2), 0);
    } else {
      flip_byte(path, flips[i]);
    }
    run_child(sub, &r);
    if (r.disk_corrupt != 1 || r.builds != 1 || r.disk_hits != 0 || r.disk_writes != 1 || !r.ok)
      fail_msg("damage %zu (offset %ld): builds %llu disk_hits %llu writes %llu corrupt %llu ok %d",
               i, flips[i], r.builds, r.disk_hits, r.disk_writes, r.disk_corrupt, r.ok);
    find_bin(sub, path, sizeof(path)); /* saved again (its size may differ: PoCL packs
                                          whatever it has compiled so far) */
    size = file_size(path);
    assert_true(size > 88);
  }
  /* a file shorter than a header */
  find_bin(sub, path, sizeof(path));
  assert_int_equal(truncate(path, 10), 0);
  run_child(sub, &r);
  assert_int_equal(r.disk_corrupt, 1);
  assert_int_equal(r.builds, 1);

  /* and the repaired file serves the next process again */
  run_child(sub, &r);
  assert_int_equal(r.builds, 0);
  assert_int_equal(r.disk_hits, 1);
  assert_int_equal(r.disk_corrupt, 0);
  assert_int_equal(r.ok, 1);

  char a[sizeof(dir) + 8];
  snprintf(a, sizeof(a), "%s/a", dir);
  sub[strlen(sub) - 1] = '\0';
  remove_dir(sub);
  remove_dir(a);
  remove_dir(dir);
}

static void test_cache_key_separates_options_and_sources(void **state) {
  (void)state;
  char dir[] = "/tmp/vmcl_cache_test_XXXXXX";
  assert_non_null(mkdtemp(dir));
  vmcl_options_t opts = {.cache_dir = dir};
  vm_device_t *dev = NULL;
  ASSERT_OK(vmcl_device_open(NULL, &opts, &dev));
  vmcl_dev_t *d = vmcl_get(dev);
  cl_kernel k1 = NULL, k2 = NULL;
  /* options are part of the key: a define changes the program */
  const char *src = "__kernel void v(__global int* x) { x[0] = VALUE; }\n";
  ASSERT_OK(vmcl_get_kernel(d, src, 0, "-DVALUE=1", "v", &k1));
  ASSERT_OK(vmcl_get_kernel(d, src, 0, "-DVALUE=2", "v", &k2));
  assert_ptr_not_equal(k1, k2);
  vmcl_cache_stats_t s;
  vmcl_cache_stats(dev, &s);
  assert_int_equal(s.builds, 2);
  assert_int_equal(s.disk_writes, 2);

  vm_buffer_t buf;
  ASSERT_OK(dev->ops->alloc(dev, sizeof(cl_int), &buf));
  cl_mem mem = (cl_mem)buf.handle;
  size_t one = 1;
  cl_int v = 0;
  assert_int_equal(clSetKernelArg(k2, 0, sizeof(mem), &mem), CL_SUCCESS);
  ASSERT_OK(vmcl_launch(d, k2, 1, &one, NULL));
  ASSERT_OK(dev->ops->copy_to_host(dev, &v, buf, 0, sizeof(v)));
  assert_int_equal(v, 2);
  dev->ops->free(dev, buf, sizeof(cl_int));
  vm_device_destroy(dev);
  remove_dir(dir);
}

static void test_cache_dir_unusable(void **state) {
  (void)state;
  char dir[] = "/tmp/vmcl_cache_test_XXXXXX";
  assert_non_null(mkdtemp(dir));
  char file[sizeof(dir) + 8];
  snprintf(file, sizeof(file), "%s/file", dir);
  FILE *fp = fopen(file, "w");
  assert_non_null(fp);
  fclose(fp);
  vmcl_options_t opts = {.cache_dir = file}; /* a file, not a directory */
  vm_device_t *dev = (vm_device_t *)1;
  ASSERT_STATUS(vmcl_device_open(NULL, &opts, &dev), VM_UNAVAILABLE, file);
  assert_null(dev);
  remove_dir(dir);
}

/* The path of the one tune-*.txt file in dir (the tuning table's). */
static void tune_file(const char *dir, char *out, size_t cap) {
  DIR *dp = opendir(dir);
  assert_non_null(dp);
  struct dirent *de;
  int found = 0;
  while ((de = readdir(dp))) {
    if (strncmp(de->d_name, "tune-", 5) == 0) {
      snprintf(out, cap, "%.200s/%.40s", dir, de->d_name);
      found++;
    }
  }
  closedir(dp);
  assert_int_equal(found, 1);
}

/* The tuning table (cl_tune.c) persists in the cache directory, is read
 * back by the next device on that directory, and skips what it cannot
 * trust in its file: keys with other characters, choices out of range or
 * not numbers, lines without a tab, an over-long line. */
/* The options a kernel's program was built with. */
static char *built_options(vmcl_dev_t *d, cl_kernel k) {
  cl_program prog = NULL;
  assert_int_equal(clGetKernelInfo(k, CL_KERNEL_PROGRAM, sizeof(prog), &prog, NULL), CL_SUCCESS);
  size_t n = 0;
  assert_int_equal(clGetProgramBuildInfo(prog, d->device, CL_PROGRAM_BUILD_OPTIONS, 0, NULL, &n),
                   CL_SUCCESS);
  char *s = calloc(1, n + 1);
  assert_non_null(s);
  assert_int_equal(clGetProgramBuildInfo(prog, d->device, CL_PROGRAM_BUILD_OPTIONS, n, s, NULL),
                   CL_SUCCESS);
  return s;
}

/* Every program is built with -cl-fp32-correctly-rounded-divide-sqrt where
 * the device offers it, beside the caller's options, from source and from
 * a cached binary: float32 division then rounds as the CPU references do
 * (a GPU's default division may be 2.5 ulp off). */
static void test_exact_division_option(void **state) {
  (void)state;
  char dir[] = "/tmp/vmcl_cache_test_XXXXXX";
  assert_non_null(mkdtemp(dir));
  const char *want = "-cl-fp32-correctly-rounded-divide-sqrt";
  for (int pass = 0; pass < 2; pass++) {
    vmcl_options_t opts = {.cache_dir = dir};
    vm_device_t *dev = NULL;
    ASSERT_OK(vmcl_device_open(NULL, &opts, &dev));
    vmcl_dev_t *d = vmcl_get(dev);
    cl_device_fp_config fp = 0;
    assert_int_equal(clGetDeviceInfo(d->device, CL_DEVICE_SINGLE_FP_CONFIG, sizeof(fp), &fp, NULL),
                     CL_SUCCESS);
    cl_kernel k = NULL;
    ASSERT_OK(vmcl_get_kernel(d, k_add_src, 0, "-DVMRPC_TEST=2", "add_one", &k));
    vmcl_cache_stats_t s;
    vmcl_cache_stats(dev, &s);
    assert_int_equal(s.builds, pass == 0 ? 1 : 0); /* the second from disk */
    assert_int_equal(s.disk_hits, pass == 0 ? 0 : 1);
    char *built = built_options(d, k);
    assert_non_null(strstr(built, "-DVMRPC_TEST=2"));
    if (fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT)
      assert_non_null(strstr(built, want));
    else
      assert_null(strstr(built, want));
    free(built);
    int ok = 0;
    ASSERT_OK(run_add_one(dev, k, &ok));
    assert_true(ok);
    vm_device_destroy(dev);
  }
  remove_dir(dir);
}

static void test_tune_table_file(void **state) {
  (void)state;
  char dir[] = "/tmp/vmcl_cache_test_XXXXXX";
  assert_non_null(mkdtemp(dir));
  vmcl_options_t opts = {.cache_dir = dir};
  vm_device_t *dev = NULL;
  ASSERT_OK(vmcl_device_open(NULL, &opts, &dev));
  vmcl_dev_t *d = vmcl_get(dev);
  assert_int_equal(vmcl_tune_lookup(d, "conv2d f32 a"), -1);
  vmcl_tune_record(d, "conv2d f32 a", 1, "direct 2 ms, gemm 1 ms");
  vmcl_tune_record(d, "Bad\tkey", 1, NULL); /* not a key: ignored */
  vmcl_tune_record(d, "conv2d f32 e", 16, NULL); /* out of range: ignored */
  assert_int_equal(vmcl_tune_lookup(d, "conv2d f32 a"), 1);
  assert_int_equal(vmcl_tune_lookup(d, "conv2d f32 e"), -1);
  vm_device_destroy(dev);

  char path[256];
  tune_file(dir, path, sizeof(path));
  FILE *fp = fopen(path, "a");
  assert_non_null(fp);
  fputs("bad key!\t1\nconv2d f32 b\t99\nconv2d f32 c\tx\nno tab here\n", fp);
  for (int i = 0; i < 5000; i++) fputc('k', fp);
  fputs("\t1\nconv2d f32 d\t0\tdirect 1 ms, gemm 3 ms\n\n", fp);
  fclose(fp);

  ASSERT_OK(vmcl_device_open(NULL, &opts, &dev));
  d = vmcl_get(dev);
  assert_int_equal(vmcl_tune_lookup(d, "conv2d f32 a"), 1);
  assert_int_equal(vmcl_tune_lookup(d, "conv2d f32 d"), 0);
  assert_int_equal(vmcl_tune_lookup(d, "conv2d f32 b"), -1);
  assert_int_equal(vmcl_tune_lookup(d, "conv2d f32 c"), -1);
  assert_int_equal(vmcl_tune_lookup(d, "bad key!"), -1);
  /* a later choice for a key replaces the earlier one, in memory and on disk */
  vmcl_tune_record(d, "conv2d f32 a", 0, NULL);
  assert_int_equal(vmcl_tune_lookup(d, "conv2d f32 a"), 0);
  vm_device_destroy(dev);
  ASSERT_OK(vmcl_device_open(NULL, &opts, &dev));
  assert_int_equal(vmcl_tune_lookup(vmcl_get(dev), "conv2d f32 a"), 0);
  vm_device_destroy(dev);
  remove_dir(dir);
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--child") == 0) return child_main(argv[2]);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_memory_hit),
      cmocka_unit_test(test_build_error_carries_log),
      cmocka_unit_test(test_disk_cache_across_processes),
      cmocka_unit_test(test_cache_key_separates_options_and_sources),
      cmocka_unit_test(test_cache_dir_unusable),
      cmocka_unit_test(test_tune_table_file),
      cmocka_unit_test(test_exact_division_option),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
