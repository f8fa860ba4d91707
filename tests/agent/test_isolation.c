/* Session isolation (vmagent --isolate session; docs/security.md): each
 * session's VMs run in a worker process of their own. Against a real
 * vmagent on the OpenCL device (PoCL: carried kernels run as native code in
 * the worker), each case expects the exact status of the faulting session,
 * then shows that another client's session on the same device, made before
 * the fault, still runs its VM, that a new client runs the example MLP
 * correctly, and that the faulting session itself goes on with a fresh
 * worker:
 * - a kernel that writes far out of bounds (address 0): its worker dies of
 *   SIGSEGV; the session gets ABORTED naming the crash;
 * - a kernel that never ends (1 s bound): DEADLINE_EXCEEDED, and the worker
 *   is stopped, which frees the device at once (no UNAVAILABLE for others);
 * - a kernel that never ends with no kernel bound: the agent stops the
 *   worker when the invocation's deadline (+ grace) has passed;
 * - a worker killed while its session is idle (the OOM killer): the next
 *   request gets ABORTED naming the kill, the session goes on;
 * - --host-mem-limit counts all workers' sessions together, and a
 *   worker's share comes back when it ends;
 * - Stats and ListDevices speak for the whole agent;
 * - SIGTERM with a worker busy in an endless kernel: the agent exits 0 and
 *   leaves no worker process behind (checked in /proc);
 * - a worker suspended (SIGSTOP) in the middle of a TimeEvaluate, holding
 *   the device's locks: the agent kills it within its bound, another
 *   session's invocation and output on that device are served, and the
 *   measuring session gets ABORTED naming the stop.
 * No timing is asserted beyond generous guards: waits are for conditions,
 * each bounded.
 * Skipped without an OpenCL device. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <signal.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent_proc.h"
#include "helper_agent.h"
#include "test_util.h"
#include "vmagent/agent.h"
#include "vmrpc/vmclient.h"

#define N 16

static const char k_prog[] =
    ".kernel m {\n"
    "  \"__kernel void fill(__global int* x, int v) { x[get_global_id(0)] = v; }\\n\"\n"
    "  \"__kernel void smash(__global int* x) {\\n\"\n"
    "  \"  x[-(long)((ulong)x / 4)] = 7;\\n\"\n"
    "  \"}\\n\"\n"
    "  \"__kernel void spin(__global int* x) {\\n\"\n"
    "  \"  while (x[0] == 0) { x[1]++; }\\n\"\n"
    "  \"}\\n\"\n"
    "}\n"
    ".const c0 string \"m\"\n"
    ".const c1 string \"fill\"\n"
    ".const c2 int 7\n"
    ".const c3 string \"smash\"\n"
    ".const c4 string \"spin\"\n"
    ".packed $cl.kernel\n"
    ".func @fill(x) regs 1 {\n"
    "  call $cl.kernel(%vm, c0, c1, %0, 0, %0, c2)\n"
    "  ret %0\n"
    "}\n"
    ".func @smash(x) regs 1 {\n"
    "  call $cl.kernel(%vm, c0, c3, %0, 0, %0)\n"
    "  ret %0\n"
    "}\n"
    ".func @spin(x) regs 1 {\n"
    "  call $cl.kernel(%vm, c0, c4, %0, 0, %0)\n"
    "  ret %0\n"
    "}\n";

static ha_fixtures_t g_fx;

static int setup(void **state) {
  (void)state;
  return ha_fixtures_load(&g_fx, k_prog);
}

static int teardown(void **state) {
  (void)state;
  ha_fixtures_free(&g_fx);
  return 0;
}

/* An isolated agent on opencl:0 and cpu with carried kernels allowed and
 * extra flags; skips the test without an OpenCL device. */
static void start_agent(agent_proc_t *p, const char *const *extra) {
  static const char *const base[] = {"--device", "opencl:0",  "--device", "cpu", "--kernels",
                                     "allow",    "--isolate", "session",  NULL};
  ha_start_agent_or_skip(p, base, extra);
}

/* The test program on opencl:0 in c's session: a VM with input x = 0.. of
 * every function set. */
static vmc_vm_t prog_vm(vmc_conn_t *c) {
  vmc_exec_t ex;
  vmc_vm_t vm;
  ASSERT_OK(vmc_upload_memory(c, g_fx.prog, g_fx.prog_len, NULL, NULL, &ex, NULL));
  vmc_device_spec_t dev = {"opencl:0", NULL};
  ASSERT_OK(vmc_create_vm(c, ex, &dev, 1, NULL, &vm));
  int64_t n = N;
  vmc_tensor_t x;
  ASSERT_OK(vmc_tensor_alloc(VM_I32, 1, &n, &x));
  memset(x.data, 0, N * sizeof(int32_t));
  const char *funcs[] = {"fill", "smash", "spin"};
  for (size_t i = 0; i < 3; i++) ASSERT_OK(vmc_set_input(c, vm, funcs[i], 0, &x));
  vmc_tensor_free(&x);
  return vm;
}

/* fill on vm gives 7 everywhere. */
static void expect_fill(vmc_conn_t *c, vmc_vm_t vm) {
  ASSERT_OK(vmc_invoke(c, vm, "fill", 0, NULL));
  vmc_tensor_t y;
  ASSERT_OK(vmc_get_output(c, vm, "fill", NULL, 0, &y));
  assert_int_equal(y.nbytes, N * sizeof(int32_t));
  for (int i = 0; i < N; i++) assert_int_equal(((int32_t *)y.data)[i], 7);
  vmc_tensor_free(&y);
}

/* The pids of p's worker processes (children of the agent), at most max. */
static size_t worker_pids(const agent_proc_t *p, pid_t *out, size_t max) {
  return agent_proc_children(p->pid, out, max);
}

/* Whether pid is gone (or a zombie nobody runs any more). */
static int pid_gone(pid_t pid) {
  char path[64], buf[512];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return 1;
  size_t len = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[len] = '\0';
  char *rp = strrchr(buf, ')');
  char st = 0;
  return rp && sscanf(rp + 1, " %c", &st) == 1 && st == 'Z';
}

/* CPU seconds pid has used (utime + stime), -1 when it is gone. */
static double cpu_seconds(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t len = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[len] = '\0';
  char *rp = strrchr(buf, ')');
  unsigned long ut = 0, stime = 0;
  if (!rp ||
      sscanf(rp + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &stime) != 2)
    return -1;
  return (double)(ut + stime) / (double)sysconf(_SC_CLK_TCK);
}

static void nap_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static void test_crash_ends_one_session(void **state) {
  (void)state;
  agent_proc_t p;
  start_agent(&p, NULL);
  vmc_conn_t *other = NULL, *c = NULL;
  ASSERT_OK(vmc_connect(p.url, NULL, &other));
  vmc_vm_t ovm = prog_vm(other);
  expect_fill(other, ovm);

  ASSERT_OK(vmc_connect(p.url, NULL, &c));
  vmc_vm_t vm = prog_vm(c);
  expect_fill(c, vm);
  /* SIGSEGV (signal 11); a sanitizer build turns it into an abort */
  vm_status_t st = vmc_invoke(c, vm, "smash", 0, NULL);
  assert_non_null(st);
  const char *msg = vm_status_message(st);
  if (vm_status_code(st) != VM_ABORTED ||
      (!strstr(msg, "the session's worker process crashed (signal 11, Segmentation fault); ") &&
       !strstr(msg, "the session's worker process crashed (signal 6, Aborted); ")) ||
      !strstr(msg,
              "; its VMs and handles are gone (executables stay in the store): create them "
              "again"))
    fail_msg("smash: %s: %s", vm_code_name(vm_status_code(st)), msg);
  vm_status_free(st);
  /* the session goes on, with a fresh worker: its old VM is gone */
  ASSERT_OK(vmc_ping(c, NULL));
  ASSERT_STATUS(vmc_invoke(c, vm, "fill", 0, NULL), VM_NOT_FOUND, "not found in this session");
  vmc_vm_t vm2 = prog_vm(c);
  assert_true(vm2.id != vm.id);
  expect_fill(c, vm2);
  /* the other session kept its VM; a new client runs the MLP */
  expect_fill(other, ovm);
  ASSERT_OK(ha_mlp_check(p.url, "opencl:0", g_fx.mlp, g_fx.mlp_len));
  vmc_close(c);
  vmc_close(other);
  assert_int_equal(agent_proc_stop(&p), 0);
}

static void test_hung_kernel_frees_device(void **state) {
  (void)state;
  agent_proc_t p;
  const char *extra[] = {"--kernel-timeout", "1", NULL};
  start_agent(&p, extra);
  vmc_conn_t *other = NULL, *c = NULL;
  ASSERT_OK(vmc_connect(p.url, NULL, &other));
  vmc_vm_t ovm = prog_vm(other);
  ASSERT_OK(vmc_connect(p.url, NULL, &c));
  vmc_vm_t vm = prog_vm(c);
  ASSERT_STATUS(vmc_invoke(c, vm, "spin", 0, NULL), VM_DEADLINE_EXCEEDED,
                "'m.spin' ran past the device's kernel time bound of 1000 ms (--kernel-timeout); "
                "the device is out of service until it ends (with session isolation the "
                "session's worker process is stopped instead, which frees the device at once: "
                "the session's VMs are gone; create them again)");
  /* Requests that reach the stopped worker, or come later: the VM is gone */
  vm_status_t st = vmc_invoke(c, vm, "fill", 0, NULL);
  assert_non_null(st);
  vm_code_t code = vm_status_code(st);
  if (code != VM_ABORTED && code != VM_NOT_FOUND)
    fail_msg("invoke after the stop: %s: %s", vm_code_name(code), vm_status_message(st));
  vm_status_free(st);
  /* the device serves everyone at once: no UNAVAILABLE */
  expect_fill(other, ovm);
  ASSERT_OK(ha_mlp_check(p.url, "opencl:0", g_fx.mlp, g_fx.mlp_len));
  expect_fill(c, prog_vm(c));
  vmc_close(c);
  vmc_close(other);
  assert_int_equal(agent_proc_stop(&p), 0);
}

static void test_unanswered_request_stops_worker(void **state) {
  (void)state;
  agent_proc_t p;
  /* no kernel bound: only the agent's bound on the worker stops this */
  const char *extra[] = {"--kernel-timeout", "0", NULL};
  start_agent(&p, extra);
  vmc_conn_t *c = NULL;
  ASSERT_OK(vmc_connect(p.url, NULL, &c));
  vmc_vm_t vm = prog_vm(c);
  ASSERT_STATUS(vmc_invoke(c, vm, "spin", 300, NULL), VM_DEADLINE_EXCEEDED,
                "the session's worker process was stopped: it did not answer within this "
                "request's bound (its deadline, the kernel time bound and 2 s of grace); its VMs "
                "and handles are gone");
  ASSERT_OK(ha_mlp_check(p.url, "opencl:0", g_fx.mlp, g_fx.mlp_len));
  expect_fill(c, prog_vm(c));
  vmc_close(c);
  assert_int_equal(agent_proc_stop(&p), 0);
}

static void test_worker_killed_while_idle(void **state) {
  (void)state;
  agent_proc_t p;
  const char *extra[] = {"--spare-workers", "0", NULL};
  start_agent(&p, extra);
  vmc_conn_t *c = NULL;
  ASSERT_OK(vmc_connect(p.url, NULL, &c));
  vmc_vm_t vm = prog_vm(c);
  expect_fill(c, vm);
  /* no spares: the session's worker is the agent's only child; the OOM
   * killer's SIGKILL, say */
  pid_t pids[4];
  assert_int_equal(worker_pids(&p, pids, 4), 1);
  assert_int_equal(kill(pids[0], SIGKILL), 0);
  for (int i = 0; i < 1000 && !pid_gone(pids[0]); i++) nap_ms(10);
  assert_true(pid_gone(pids[0]));
  /* the next request learns it; the one after gets a fresh worker */
  ASSERT_STATUS(vmc_invoke(c, vm, "fill", 0, NULL), VM_ABORTED,
                "the session's worker process crashed (signal 9, Killed); its VMs and handles "
                "are gone (executables stay in the store): create them again");
  ASSERT_STATUS(vmc_invoke(c, vm, "fill", 0, NULL), VM_NOT_FOUND, "not found in this session");
  expect_fill(c, prog_vm(c));
  vmc_close(c);
  assert_int_equal(agent_proc_stop(&p), 0);
}

/* --host-mem-limit holds for all workers together: upload staging (host
 * memory charged before it is allocated) of one session counts against
 * another's, and comes back when the first session's worker ends. */
static void test_host_limit_spans_workers(void **state) {
  (void)state;
  agent_proc_t p;
  const char *extra[] = {"--host-mem-limit", "48M", NULL};
  start_agent(&p, extra);
  uint8_t sha_a[32], sha_b[32];
  memset(sha_a, 0xa1, sizeof(sha_a));
  memset(sha_b, 0xb2, sizeof(sha_b));
  const uint64_t size = 40ull << 20;
  hw_conn_t a, b;
  hw_reply_t r;
  ha_open_session(&a, p.url);
  ha_open_session(&b, p.url);
  CODE_IS_FREE(ha_upload_begin(&a, sha_a, size, &r), 0, &r);
  CODE_IS(ha_upload_begin(&b, sha_b, size, &r), VM_RESOURCE_EXHAUSTED, &r);
  const char *want =
      "an executable upload's staging (41943040 bytes of host memory) would exceed the agent's "
      "host memory limit: 41943040 of 50331648 bytes in use (--host-mem-limit)";
  if (!strstr(hw_message(&r), want)) fail_msg("got '%s', want '%s'", hw_message(&r), want);
  hw_reply_free(&r);
  /* a's session ends: its worker with its staging */
  CODE_IS_FREE(ha_goodbye(&a, &r), 0, &r);
  hw_close(&a);
  int ok = 0;
  for (int i = 0; i < 500 && !ok; i++) { /* the agent reaps a's worker */
    int code = ha_upload_begin(&b, sha_b, size, &r);
    hw_reply_free(&r);
    ok = code == 0;
    if (!ok) nap_ms(10);
  }
  assert_true(ok);
  hw_close(&b);
  assert_int_equal(agent_proc_stop(&p), 0);
}

static void test_stats_and_devices_speak_for_the_agent(void **state) {
  (void)state;
  agent_proc_t p;
  start_agent(&p, NULL);
  vmc_conn_t *a = NULL, *b = NULL;
  ASSERT_OK(vmc_connect(p.url, NULL, &a));
  ASSERT_OK(vmc_connect(p.url, NULL, &b));
  vmc_vm_t va = prog_vm(a);
  expect_fill(a, va);
  vmc_vm_t vb = prog_vm(b);
  expect_fill(b, vb);
  vmc_stats_t sa, sb;
  ASSERT_OK(vmc_stats(a, &sa));
  ASSERT_OK(vmc_stats(b, &sb));
  assert_int_equal(sa.agent_sessions, 2);
  assert_int_equal(sb.agent_sessions, 2);
  assert_int_equal(sa.session_vms, 1);
  assert_true(sa.session_bytes > 0);
  /* b's total counts a's bytes as a reported them */
  assert_true(sb.agent_bytes >= sa.session_bytes + sb.session_bytes);
  assert_true(sb.requests > sa.requests);
  vmc_stats_free(&sa);
  vmc_stats_free(&sb);
  assert_true(ha_has_device(a, "opencl:0"));
  assert_true(ha_has_device(a, "cpu"));
  /* one worker per session (plus spares) */
  pid_t pids[16];
  assert_true(worker_pids(&p, pids, 16) >= 2);
  vmc_close(a);
  vmc_close(b);
  assert_int_equal(agent_proc_stop(&p), 0);
}

typedef struct spin_job {
  vmc_conn_t *c;
  vmc_vm_t vm;
  vm_code_t code;
} spin_job_t;

static void *spin_main(void *arg) {
  spin_job_t *j = arg;
  vm_status_t st = vmc_invoke(j->c, j->vm, "spin", 0, NULL);
  j->code = vm_status_code(st);
  vm_status_free(st);
  return NULL;
}

static void test_sigterm_with_busy_worker(void **state) {
  (void)state;
  agent_proc_t p;
  const char *extra[] = {"--kernel-timeout", "0", NULL};
  start_agent(&p, extra);
  vmc_conn_t *c = NULL;
  ASSERT_OK(vmc_connect(p.url, NULL, &c));
  spin_job_t j = {c, prog_vm(c), VM_OK};
  pid_t before[16];
  size_t n = worker_pids(&p, before, 16);
  assert_true(n >= 1);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, spin_main, &j), 0);
  /* wait until a worker burns CPU in the endless kernel (bounded) */
  int busy = 0;
  for (int i = 0; i < 600 && !busy; i++) {
    pid_t pids[16];
    size_t k = worker_pids(&p, pids, 16);
    for (size_t w = 0; w < k && !busy; w++) busy = cpu_seconds(pids[w]) > 1.5;
    if (!busy) nap_ms(50);
  }
  assert_true(busy);
  pid_t all[16];
  size_t nall = worker_pids(&p, all, 16);
  /* SIGTERM: the kernel runs in a worker, so the clean shutdown finishes */
  assert_int_equal(agent_proc_stop(&p), 0);
  pthread_join(t, NULL);
  assert_int_not_equal(j.code, VM_OK);
  vmc_close(c);
  for (size_t w = 0; w < nall; w++)
    if (!pid_gone(all[w])) fail_msg("worker %d outlived the agent", (int)all[w]);
}

typedef struct measure_job {
  vmc_conn_t *c;
  vmc_vm_t vm;
  vm_status_t st;
} measure_job_t;

static void *measure_main(void *arg) {
  measure_job_t *j = arg;
  /* a repeat grows until it lasts a minute: the device stays measured */
  vmc_time_params_t tp = vmc_time_params_default();
  tp.repeat = 1;
  tp.min_repeat_ms = 60000;
  vmc_time_result_t r;
  memset(&r, 0, sizeof(r));
  j->st = vmc_time_evaluate(j->c, j->vm, "fill", &tp, &r);
  vmc_time_result_free(&r);
  return NULL;
}

static void test_stopped_worker_frees_device(void **state) {
  (void)state;
  agent_proc_t p;
  const char *extra[] = {"--spare-workers", "0", NULL};
  start_agent(&p, extra);
  vmc_conn_t *a = NULL, *b = NULL;
  ASSERT_OK(vmc_connect(p.url, NULL, &a));
  vmc_vm_t va = prog_vm(a);
  expect_fill(a, va);
  /* no spares: a's worker is the agent's only child so far */
  pid_t pids[4];
  assert_int_equal(worker_pids(&p, pids, 4), 1);
  pid_t wa = pids[0];
  ASSERT_OK(vmc_connect(p.url, NULL, &b));
  vmc_vm_t vb = prog_vm(b);
  expect_fill(b, vb);
  measure_job_t j = {a, va, NULL};
  double cpu0 = cpu_seconds(wa);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, measure_main, &j), 0);
  /* wait until a's worker measures (it burns CPU in the fill calls) */
  int busy = 0;
  for (int i = 0; i < 600 && !busy; i++) {
    busy = cpu_seconds(wa) > cpu0 + 0.5;
    if (!busy) nap_ms(50);
  }
  assert_true(busy);
  assert_int_equal(kill(wa, SIGSTOP), 0);
  /* b's work on the same device: served once the agent has killed the
   * suspended worker (1 s), not when a's minute is over; on a loaded
   * machine well within the 20 s deadline */
  double t0 = ha_now_s();
  ASSERT_OK(vmc_invoke(b, vb, "fill", 20000, NULL));
  double waited = ha_now_s() - t0;
  print_message("b's invocation was served %.2f s after the stop\n", waited);
  if (waited > 15.0) fail_msg("b's invocation waited %.1f s for the suspended worker", waited);
  expect_fill(b, vb);
  pthread_join(t, NULL);
  assert_non_null(j.st);
  const char *want =
      "the session's worker process was stopped: it stayed suspended by a signal (SIGSTOP) for "
      "1000 ms, holding its devices from the other sessions; its VMs and handles are gone "
      "(executables stay in the store): create them again";
  if (vm_status_code(j.st) != VM_ABORTED || strcmp(vm_status_message(j.st), want) != 0)
    fail_msg("a's TimeEvaluate: %s: %s", vm_code_name(vm_status_code(j.st)),
             vm_status_message(j.st));
  vm_status_free(j.st);
  for (int i = 0; i < 1000 && !pid_gone(wa); i++) nap_ms(10);
  assert_true(pid_gone(wa));
  /* a's session goes on with a fresh worker; b kept its VM */
  expect_fill(a, prog_vm(a));
  expect_fill(b, vb);
  vmc_close(a);
  vmc_close(b);
  assert_int_equal(agent_proc_stop(&p), 0);
}

/* The library cannot start workers without the vmagent binary. */
static void test_session_isolation_needs_the_binary(void **state) {
  (void)state;
  vmagent_config_t cfg;
  vmagent_config_default(&cfg);
  const char *cpu[] = {"cpu"};
  cfg.devices = cpu;
  cfg.num_devices = 1;
  cfg.isolate = VMAGENT_ISOLATE_SESSION;
  vmagent_t *a = NULL;
  ASSERT_STATUS(vmagent_create(&cfg, &a), VM_FAILED_PRECONDITION,
                "session isolation needs the vmagent binary to start as workers (worker_exe); "
                "run vmagent, or use --isolate none");
  assert_null(a);
  cfg.isolate = 7;
  ASSERT_STATUS(vmagent_create(&cfg, &a), VM_INVALID_ARGUMENT,
                "isolate 7 is not auto, none or session");
  /* auto without the binary: in process, even with kernels allowed */
  cfg.isolate = VMAGENT_ISOLATE_AUTO;
  cfg.kernels_cpu = cfg.kernels_gpu = VMAGENT_KERNELS_ALLOW;
  ASSERT_OK(vmagent_create(&cfg, &a));
  vmagent_free(a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_session_isolation_needs_the_binary),
      cmocka_unit_test(test_crash_ends_one_session),
      cmocka_unit_test(test_hung_kernel_frees_device),
      cmocka_unit_test(test_unanswered_request_stops_worker),
      cmocka_unit_test(test_worker_killed_while_idle),
      cmocka_unit_test(test_host_limit_spans_workers),
      cmocka_unit_test(test_stats_and_devices_speak_for_the_agent),
      cmocka_unit_test(test_sigterm_with_busy_worker),
      cmocka_unit_test(test_stopped_worker_frees_device),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
