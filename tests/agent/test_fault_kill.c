/* Clients that die mid-operation leak nothing on the agent.
 *
 * Each trial starts a child process (this binary re-executed with
 * --fault-child, so no nng state crosses a fork) that connects and loops
 * over uploads (new, never-seen bytes, so chunks really travel), big chunked
 * set-inputs, invokes and get-outputs; the parent SIGKILLs it after a
 * random delay (fixed seed, bounded), then from a fresh connection polls
 * Stats until the session count and the agent's bytes are back at the
 * baseline (at most 5 s), and pings. The agent must stay up throughout.
 * The other way round, a client whose agent dies mid-invoke gets
 * UNAVAILABLE at once instead of hanging. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent_proc.h"
#include "helper_agent.h"
#include "test_util.h"
#include "vm/executable.h"
#include "vmrpc/vmclient.h"

#define TRIALS 24

static const char k_prog[] =
    ".func @ident(x) regs 1 {\n"
    "  ret %0\n"
    "}\n";

static agent_proc_t g_agent;

static uint64_t xorshift(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* ------------------------------------------------------------ the child */

/* Tells the parent (one byte on fd) that a session is open, so every
 * kill lands on a live session, not before the first connect. */
static int child_main(const char *url, uint64_t seed, int ready_fd) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  double end = ha_now_s() + 30.0; /* stops by itself even if nobody kills it */
  vm_executable_t *e;
  uint8_t *prog;
  size_t prog_size;
  if (vm_executable_asm(k_prog, sizeof(k_prog) - 1, NULL, &e)) return 2;
  if (vm_executable_write(e, &prog, &prog_size)) return 2;
  vm_executable_free(e);
  size_t junk_size = 6u << 20;
  uint8_t *junk = malloc(junk_size);
  int64_t n = 3 << 20;
  uint8_t *data = malloc((size_t)n);
  if (!junk || !data) return 2;
  memset(data, 0x5a, (size_t)n);
  uint64_t s = seed | 1;
  while (ha_now_s() < end) {
    vmc_conn_t *c;
    vm_status_t st = vmc_connect(url, NULL, &c);
    if (st) {
      vm_status_free(st);
      usleep(10000);
      continue;
    }
    if (ready_fd >= 0) {
      ssize_t w = write(ready_fd, "c", 1);
      (void)w;
      close(ready_fd);
      ready_fd = -1;
    }
    for (int round = 0; round < 50 && ha_now_s() < end; round++) {
      /* An upload of bytes the agent has never seen: chunks travel, then
       * the commit fails verification (or never happens). */
      for (size_t i = 0; i + 8 <= junk_size; i += 8) {
        uint64_t v = xorshift(&s);
        memcpy(junk + i, &v, 8);
      }
      vmc_exec_t ex;
      vm_status_free(vmc_upload_memory(c, junk, junk_size, NULL, NULL, &ex, NULL));
      st = vmc_upload_memory(c, prog, prog_size, NULL, NULL, &ex, NULL);
      vmc_vm_t vm;
      if (!st) st = vmc_create_vm(c, ex, NULL, 0, NULL, &vm);
      vmc_tensor_t t, back;
      if (!st) st = vmc_tensor_wrap(VM_U8, 1, &n, data, &t);
      if (!st) st = vmc_set_input(c, vm, "ident", 0, &t);
      if (!st) st = vmc_invoke(c, vm, "ident", 0, NULL);
      if (!st) st = vmc_get_output(c, vm, "ident", NULL, 0, &back);
      if (!st) vmc_tensor_free(&back);
      /* Leave the VM behind on odd rounds: the session teardown frees it. */
      if (!st && (round & 1) == 0) st = vmc_free_vm(c, vm);
      vm_status_free(st);
    }
    vmc_close(c);
  }
  free(junk);
  free(data);
  free(prog);
  return 0;
}

/* ----------------------------------------------------------- the parent */

static int setup(void **state) {
  (void)state;
  return agent_proc_start(&g_agent, NULL) == 0 ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  return agent_proc_stop(&g_agent) == 0 ? 0 : -1;
}

static void stats_now(uint32_t *sessions, uint64_t *bytes, uint32_t *transfers) {
  vmc_conn_t *c;
  ASSERT_OK(vmc_connect(g_agent.url, NULL, &c));
  vmc_stats_t st;
  ASSERT_OK(vmc_stats(c, &st));
  *sessions = st.agent_sessions;
  *bytes = st.agent_bytes;
  *transfers = st.session_transfers;
  vmc_stats_free(&st);
  vmc_close(c);
}

static void test_killed_clients_leak_nothing(void **state) {
  (void)state;
  uint32_t base_sessions, tr;
  uint64_t base_bytes;
  stats_now(&base_sessions, &base_bytes, &tr);
  assert_int_equal(base_sessions, 1); /* our own */

  uint64_t rng = 0x1234abcdull;
  double worst = 0;
  for (int trial = 0; trial < TRIALS; trial++) {
    char seed[32];
    snprintf(seed, sizeof(seed), "%llu", (unsigned long long)xorshift(&rng));
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    char fd_arg[16];
    snprintf(fd_arg, sizeof(fd_arg), "%d", fds[1]);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
      close(fds[0]);
      setenv("VMC_FAULT_CHILD", "1", 1);
      execl("/proc/self/exe", "test_fault_kill", "--fault-child", g_agent.url, seed, fd_arg,
            (char *)NULL);
      _exit(127);
    }
    close(fds[1]);
    /* Wait (bounded) until the child holds a session. */
    struct pollfd pfd = {fds[0], POLLIN, 0};
    char byte = 0;
    if (poll(&pfd, 1, 20000) != 1 || read(fds[0], &byte, 1) != 1) byte = 0;
    close(fds[0]);
    if (byte != 'c') {
      kill(pid, SIGKILL);
      waitpid(pid, NULL, 0);
      fail_msg("trial %d: the child did not connect within 20 s", trial);
    }
    /* 0..600 ms after the first Hello: through uploads, transfers,
     * invokes, reconnects. */
    useconds_t delay = (useconds_t)(xorshift(&rng) % 600000);
    usleep(delay);
    assert_int_equal(kill(pid, SIGKILL), 0);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFSIGNALED(status))
      fail_msg("trial %d: the child exited by itself with status %d", trial,
               WIFEXITED(status) ? WEXITSTATUS(status) : -1);

    /* The agent must notice the dead pipe and free everything. */
    vmc_conn_t *c;
    ASSERT_OK(vmc_connect(g_agent.url, NULL, &c));
    double t0 = ha_now_s();
    vmc_stats_t st;
    memset(&st, 0, sizeof(st));
    for (;;) {
      ASSERT_OK(vmc_stats(c, &st));
      int back = st.agent_sessions == base_sessions && st.agent_bytes == base_bytes;
      uint32_t sessions = st.agent_sessions;
      uint64_t bytes = st.agent_bytes;
      vmc_stats_free(&st);
      if (back) break;
      if (ha_now_s() - t0 > 5.0)
        fail_msg(
            "trial %d (killed after %u ms): after 5 s the agent still has %u sessions and "
            "%llu bytes (baseline %u, %llu)",
            trial, (unsigned)(delay / 1000), sessions, (unsigned long long)bytes, base_sessions,
            (unsigned long long)base_bytes);
      usleep(20000);
    }
    double took = ha_now_s() - t0;
    if (took > worst) worst = took;
    ASSERT_OK(vmc_ping(c, NULL));
    vmc_close(c);
    assert_int_equal(kill(g_agent.pid, 0), 0); /* still up */
  }
  fprintf(stderr, "  %d kills: slowest recovery %.3f s\n", TRIALS, worst);
}

/* The agent dies under a client: the invoke in flight (with no timeout at
 * all) returns UNAVAILABLE at once, saying the session is gone; later calls
 * fail fast; close does not hang. */
static void test_agent_dies_mid_invoke(void **state) {
  (void)state;
  static const char spin_prog[] =
      ".func @spin() regs 1 {\n"
      "L0:\n"
      "  goto L0\n"
      "}\n";
  agent_proc_t a;
  assert_int_equal(agent_proc_start(&a, NULL), 0);
  vmc_conn_t *c;
  ASSERT_OK(vmc_connect(a.url, NULL, &c));
  vm_executable_t *e;
  uint8_t *bytes;
  size_t size;
  ASSERT_OK(vm_executable_asm(spin_prog, sizeof(spin_prog) - 1, NULL, &e));
  ASSERT_OK(vm_executable_write(e, &bytes, &size));
  vm_executable_free(e);
  vmc_exec_t ex;
  ASSERT_OK(vmc_upload_memory(c, bytes, size, NULL, NULL, &ex, NULL));
  free(bytes);
  ha_spin_job_t j;
  memset(&j, 0, sizeof(j));
  j.conn = c;
  ASSERT_OK(vmc_create_vm(c, ex, NULL, 0, NULL, &j.vm));
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, ha_spin_main, &j), 0);
  usleep(300 * 1000);
  double t0 = ha_now_s();
  assert_int_equal(kill(a.pid, SIGKILL), 0);
  pthread_join(th, NULL);
  double after_kill = ha_now_s() - t0;
  agent_proc_stop(&a); /* reaps it; -1: it died of a signal */
  if (j.code != VM_UNAVAILABLE)
    fail_msg("invoke returned %s (%s), expected UNAVAILABLE", vm_code_name(j.code), j.msg);
  assert_non_null(strstr(j.msg, "was lost"));
  assert_true(after_kill < 3.0);
  t0 = ha_now_s();
  ASSERT_STATUS(vmc_ping(c, NULL), VM_UNAVAILABLE, "connect again");
  ASSERT_STATUS(vmc_stats(c, &(vmc_stats_t){0}), VM_UNAVAILABLE, "was lost");
  vmc_close(c);
  assert_true(ha_now_s() - t0 < 3.0);
}

int main(int argc, char **argv) {
  /* Child mode whatever else is on the line: a child must never run the
   * suite itself (it would fork children of its own). */
  if ((argc > 1 && strcmp(argv[1], "--fault-child") == 0) || getenv("VMC_FAULT_CHILD")) {
    if (argc != 5) return 2;
    return child_main(argv[2], strtoull(argv[3], NULL, 10), atoi(argv[4]));
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_killed_clients_leak_nothing),
      cmocka_unit_test(test_agent_dies_mid_invoke),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
