/* vmagent --cpus LIST: the thread that measures runs on those cores while
 * it measures, and only then (its former affinity comes back); a list
 * that names a core the process may not use, or is malformed, is refused
 * at start with exit 2 and the reason. Checked on a real vmagent by
 * reading its threads' Cpus_allowed_list in /proc during a long
 * TimeEvaluate. */
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent_proc.h"
#include "gemm_exec.h"
#include "test_util.h"
#include "vmrpc/vmclient.h"

static void test_bad_lists_refused(void **state) {
  (void)state;
  char out[4096];
  const char *far[] = {"--listen", "tcp://127.0.0.1:0", "--cpus", "1000", NULL};
  assert_int_equal(agent_proc_run(far, out, sizeof(out), 30), 2);
  if (!strstr(out, "--cpus 1000: cpu 1000 is not one this process may run on (allowed: "))
    fail_msg("output: %s", out);
  const char *bad[] = {"--listen", "tcp://127.0.0.1:0", "--cpus", "1-0", NULL};
  assert_int_equal(agent_proc_run(bad, out, sizeof(out), 30), 2);
  if (!strstr(out, "--cpus 1-0: expected a list of cores such as 0,2-3")) fail_msg("output: %s", out);
  const char *junk[] = {"--listen", "tcp://127.0.0.1:0", "--cpus", "0,", NULL};
  assert_int_equal(agent_proc_run(junk, out, sizeof(out), 30), 2);
  if (!strstr(out, "--cpus 0,: expected a list of cores such as 0,2-3")) fail_msg("output: %s", out);
}

/* How many of pid's threads have exactly `list` as Cpus_allowed_list. */
static int threads_on(pid_t pid, const char *list) {
  char dir[64];
  snprintf(dir, sizeof(dir), "/proc/%d/task", (int)pid);
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char path[512], line[256];
    snprintf(path, sizeof(path), "%s/%s/status", dir, e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    while (fgets(line, sizeof(line), f)) {
      if (strncmp(line, "Cpus_allowed_list:", 18) != 0) continue;
      char *v = line + 18;
      while (*v == ' ' || *v == '\t') v++;
      v[strcspn(v, "\n")] = '\0';
      if (strcmp(v, list) == 0) n++;
    }
    fclose(f);
  }
  closedir(d);
  return n;
}

typedef struct evaluation {
  const char *url;
  atomic_int done;
  vm_status_t st;
} evaluation_t;

/* A TimeEvaluate of about a second: gemms on opencl:0, batches grown to
 * 250 ms, 4 repeats. */
static void *evaluate(void *arg) {
  evaluation_t *ev = arg;
  vmc_conn_t *c = NULL;
  vm_executable_t *e = NULL;
  uint8_t *bytes = NULL;
  size_t n = 0;
  vmc_tensor_t x;
  memset(&x, 0, sizeof(x));
  int64_t shape[2] = {64, 64};
  vmc_exec_t ex;
  vmc_vm_t vm;
  vmc_device_spec_t spec = {"opencl:0", "pooled"};
  vm_status_t st = gemm_chain_exec(64, 4, &e);
  if (!st) st = vm_executable_write(e, &bytes, &n);
  if (!st) st = vmc_connect(ev->url, NULL, &c);
  if (!st) st = vmc_upload_memory(c, bytes, n, NULL, NULL, &ex, NULL);
  if (!st) st = vmc_create_vm(c, ex, &spec, 1, NULL, &vm);
  if (!st) st = vmc_tensor_alloc(VM_F32, 2, shape, &x);
  if (!st) st = vmc_set_input(c, vm, "main", 0, &x);
  vmc_time_params_t p = vmc_time_params_default();
  p.number = 1;
  p.repeat = 4;
  p.min_repeat_ms = 250;
  vmc_time_result_t r;
  memset(&r, 0, sizeof(r));
  if (!st) st = vmc_time_evaluate(c, vm, "main", &p, &r);
  vmc_time_result_free(&r);
  vmc_tensor_free(&x);
  vmc_close(c);
  free(bytes);
  vm_executable_free(e);
  ev->st = st;
  atomic_store(&ev->done, 1);
  return NULL;
}

static void test_measuring_thread_pinned(void **state) {
  (void)state;
  cpu_set_t allowed;
  assert_int_equal(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  int last = -1;
  for (int i = 0; i < CPU_SETSIZE; i++)
    if (CPU_ISSET(i, &allowed)) last = i;
  if (CPU_COUNT(&allowed) < 2) skip(); /* one core: nothing to tell apart */
  char list[16];
  snprintf(list, sizeof(list), "%d", last);
  agent_proc_t p;
  const char *args[] = {"--device", "opencl:0", "--cpus", list, NULL};
  assert_int_equal(agent_proc_start(&p, args), 0);
  assert_int_equal(threads_on(p.pid, list), 0); /* nobody pinned while idle */
  evaluation_t ev = {p.url, 0, NULL};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, evaluate, &ev), 0);
  int seen = 0;
  for (int i = 0; i < 3000 && !atomic_load(&ev.done); i++) { /* at most 30 s */
    if (threads_on(p.pid, list) == 1) seen = 1;
    usleep(10000);
  }
  pthread_join(th, NULL);
  ASSERT_OK(ev.st);
  assert_true(seen);
  assert_int_equal(threads_on(p.pid, list), 0); /* restored afterwards */
  assert_int_equal(agent_proc_stop(&p), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bad_lists_refused),
      cmocka_unit_test(test_measuring_thread_pinned),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
