/* Thread safety of one libvmclient connection against a real vmagent:
 * 8 threads share a connection, each with its own VM of the example MLP,
 * and run 100 set-input / invoke / get-output cycles with correct results
 * and zero errors; a cancel from another thread stops an endless invoke
 * with CANCELLED without waiting behind it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent_proc.h"
#include "helper_agent.h"
#include "test_util.h"
#include "vm/executable.h"
#include "vmrpc/vmclient.h"
#include "vmexamples/models.h"

#define NTHREADS 8
#define NCYCLES 100

static const char k_prog[] =
    ".func @ident(x) regs 1 {\n"
    "  ret %0\n"
    "}\n"
    ".func @spin() regs 1 {\n"
    "L0:\n"
    "  goto L0\n"
    "}\n";

static agent_proc_t g_agent;
static uint8_t *g_mlp, *g_prog;
static size_t g_mlp_size, g_prog_size;

static int setup(void **state) {
  (void)state;
  /* 8 invokes at once plus their set/get requests: more workers than the
   * default 8 (one of which the agent keeps for Cancel and Ping), or the
   * agent answers the 8th concurrent invoke UNAVAILABLE "retry later". */
  static const char *const args[] = {"--workers", "16", NULL};
  if (agent_proc_start(&g_agent, args) != 0) return -1;
  if (ha_mlp_bytes(11, &g_mlp, &g_mlp_size) != 0) return -1;
  return ha_exec_bytes(k_prog, &g_prog, &g_prog_size);
}

static int teardown(void **state) {
  (void)state;
  free(g_mlp);
  free(g_prog);
  return agent_proc_stop(&g_agent) == 0 ? 0 : -1;
}

typedef struct worker {
  vmc_conn_t *conn;
  vmc_exec_t exec;
  const char *device;
  int index;
  int errors;
  int wrong;
  char first_error[512];
} worker_t;

static void note_error(worker_t *w, vm_status_t st, const char *what) {
  if (!w->errors)
    snprintf(w->first_error, sizeof(w->first_error), "thread %d %s: %s: %s", w->index, what,
             vm_code_name(vm_status_code(st)), vm_status_message(st));
  w->errors++;
  vm_status_free(st);
}

/* Each cycle uses its own input (seeded by thread and cycle) and checks the
 * output against the host reference computed beforehand. */
static void *worker_main(void *arg) {
  worker_t *w = arg;
  vmex_io_shape_t io;
  vmex_io_shape(VMEX_MODEL_MLP, &io);
  enum { NINPUTS = 4 };
  float *x[NINPUTS], *want[NINPUTS];
  for (int k = 0; k < NINPUTS; k++) {
    x[k] = malloc(io.in_numel * sizeof(float));
    want[k] = malloc(io.out_numel * sizeof(float));
    vmex_make_input((uint64_t)(100 + w->index * NINPUTS + k), x[k], io.in_numel);
    vm_status_t st = vmex_reference_mlp(11, NULL, x[k], want[k]);
    if (st) note_error(w, st, "reference");
  }
  float *got = malloc(io.out_numel * sizeof(float));
  vmc_device_spec_t dev = {w->device, NULL};
  vmc_vm_t vm = {0};
  vm_status_t st = vmc_create_vm(w->conn, w->exec, &dev, 1, NULL, &vm);
  if (st) {
    note_error(w, st, "create_vm");
    goto out;
  }
  for (int i = 0; i < NCYCLES; i++) {
    int k = i % NINPUTS;
    vmc_tensor_t t;
    st = vmc_tensor_wrap(VM_F32, io.in_ndim, io.in_shape, x[k], &t);
    if (!st) st = vmc_set_input(w->conn, vm, "main", 0, &t);
    if (st) {
      note_error(w, st, "set_input");
      continue;
    }
    st = vmc_invoke(w->conn, vm, "main", 0, NULL);
    if (st) {
      note_error(w, st, "invoke");
      continue;
    }
    vmc_tensor_t meta;
    st =
        vmc_get_output_into(w->conn, vm, "main", NULL, 0, got, io.out_numel * sizeof(float), &meta);
    if (st) {
      note_error(w, st, "get_output");
      continue;
    }
    for (size_t j = 0; j < io.out_numel; j++) {
      if (fabs((double)got[j] - (double)want[k][j]) > 1e-5 + 1e-4 * fabs((double)want[k][j])) {
        w->wrong++;
        break;
      }
    }
  }
  st = vmc_free_vm(w->conn, vm);
  if (st) note_error(w, st, "free_vm");
out:
  for (int k = 0; k < NINPUTS; k++) {
    free(x[k]);
    free(want[k]);
  }
  free(got);
  return NULL;
}

static void run_workers(vmc_conn_t *shared, const char *url, const char *device) {
  worker_t w[NTHREADS];
  pthread_t th[NTHREADS];
  vmc_conn_t *own[NTHREADS] = {0};
  for (int i = 0; i < NTHREADS; i++) {
    memset(&w[i], 0, sizeof(w[i]));
    w[i].index = i;
    w[i].device = device;
    if (shared) {
      w[i].conn = shared;
    } else {
      ASSERT_OK(vmc_connect(url, NULL, &own[i]));
      w[i].conn = own[i];
    }
    ASSERT_OK(vmc_upload_memory(w[i].conn, g_mlp, g_mlp_size, NULL, NULL, &w[i].exec, NULL));
  }
  for (int i = 0; i < NTHREADS; i++)
    assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
  for (int i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
  int errors = 0, wrong = 0;
  for (int i = 0; i < NTHREADS; i++) {
    if (w[i].errors) fprintf(stderr, "%s (%d errors)\n", w[i].first_error, w[i].errors);
    errors += w[i].errors;
    wrong += w[i].wrong;
  }
  for (int i = 0; i < NTHREADS; i++) vmc_close(own[i]);
  assert_int_equal(errors, 0);
  assert_int_equal(wrong, 0);
}

static void test_threads_share_one_connection(void **state) {
  (void)state;
  vmc_conn_t *c;
  ASSERT_OK(vmc_connect(g_agent.url, NULL, &c));
  if (!ha_has_device(c, "opencl:0")) {
    vmc_close(c);
    skip();
  }
  double t0 = ha_now_s();
  run_workers(c, g_agent.url, "opencl:0");
  fprintf(stderr, "  %d threads x %d cycles on one connection: %.2f s\n", NTHREADS, NCYCLES,
          ha_now_s() - t0);
  vmc_stats_t st;
  ASSERT_OK(vmc_stats(c, &st));
  assert_int_equal(st.session_vms, 0);
  assert_int_equal(st.session_transfers, 0);
  vmc_stats_free(&st);
  vmc_close(c);
}

/* Big inputs from several threads at once share the chunk budget. */
typedef struct big_job {
  vmc_conn_t *conn;
  vmc_exec_t exec;
  int seed;
  int errors;
  char err[512];
} big_job_t;

static void *big_main(void *arg) {
  big_job_t *j = arg;
  vmc_vm_t vm;
  vm_status_t st = vmc_create_vm(j->conn, j->exec, NULL, 0, NULL, &vm);
  int64_t n = (8 << 20) + j->seed;
  uint8_t *data = malloc((size_t)n);
  for (int64_t i = 0; i < n; i++) data[i] = (uint8_t)(i * 7 + j->seed);
  vmc_tensor_t t, back;
  memset(&back, 0, sizeof(back));
  if (!st) st = vmc_tensor_wrap(VM_U8, 1, &n, data, &t);
  for (int r = 0; r < 3 && !st; r++) {
    st = vmc_set_input(j->conn, vm, "ident", 0, &t);
    if (!st) st = vmc_invoke(j->conn, vm, "ident", 0, NULL);
    if (!st) st = vmc_get_output(j->conn, vm, "ident", NULL, 0, &back);
    if (!st && (back.nbytes != (uint64_t)n || memcmp(back.data, data, (size_t)n) != 0))
      st = vm_status_make(VM_DATA_LOSS, "round trip differs");
    vmc_tensor_free(&back);
  }
  if (!st) st = vmc_free_vm(j->conn, vm);
  if (st) {
    snprintf(j->err, sizeof(j->err), "%s", vm_status_message(st));
    j->errors++;
    vm_status_free(st);
  }
  free(data);
  return NULL;
}

static void test_parallel_big_transfers(void **state) {
  (void)state;
  vmc_conn_t *c;
  ASSERT_OK(vmc_connect(g_agent.url, NULL, &c));
  vmc_exec_t ex;
  ASSERT_OK(vmc_upload_memory(c, g_prog, g_prog_size, NULL, NULL, &ex, NULL));
  enum { NJ = 4 };
  big_job_t jobs[NJ];
  pthread_t th[NJ];
  for (int i = 0; i < NJ; i++) {
    memset(&jobs[i], 0, sizeof(jobs[i]));
    jobs[i].conn = c;
    jobs[i].exec = ex;
    jobs[i].seed = i * 3 + 1;
    assert_int_equal(pthread_create(&th[i], NULL, big_main, &jobs[i]), 0);
  }
  for (int i = 0; i < NJ; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < NJ; i++) {
    if (jobs[i].errors) fail_msg("job %d: %s", i, jobs[i].err);
  }
  vmc_close(c);
}

/* Cancel from another thread while an endless invoke is in flight. The
 * VM clears its cancel flag when an invocation starts, so the canceller
 * repeats (bounded) until the invoke returns. */
static void cancel_while_spinning(const char *device) {
  vmc_conn_t *c;
  ASSERT_OK(vmc_connect(g_agent.url, NULL, &c));
  vmc_vm_t vm = ha_vm_on_device(c, g_prog, g_prog_size, device, NULL, NULL);
  ha_spin_job_t j;
  memset(&j, 0, sizeof(j));
  j.conn = c;
  j.vm = vm;
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, ha_spin_main, &j), 0);
  usleep(200 * 1000);
  assert_false(__atomic_load_n(&j.done, __ATOMIC_SEQ_CST)); /* it spins */
  /* Other calls on the same connection are not blocked by the invoke. */
  double t0 = ha_now_s();
  ASSERT_OK(vmc_ping(c, NULL));
  vmc_stats_t st;
  ASSERT_OK(vmc_stats(c, &st));
  vmc_stats_free(&st);
  assert_true(ha_now_s() - t0 < 2.0);
  double worst_cancel = 0;
  for (int i = 0; i < 100 && !__atomic_load_n(&j.done, __ATOMIC_SEQ_CST); i++) {
    double c0 = ha_now_s();
    ASSERT_OK(vmc_cancel(c, vm));
    double dt = ha_now_s() - c0;
    if (dt > worst_cancel) worst_cancel = dt;
    usleep(100 * 1000);
  }
  pthread_join(th, NULL);
  assert_true(j.done);
  if (j.code != VM_CANCELLED)
    fail_msg("invoke returned %s (%s), expected CANCELLED", vm_code_name(j.code), j.msg);
  assert_true(worst_cancel < 2.0);
  /* The VM is usable afterwards. */
  int64_t n = 4;
  float d[4] = {1, 2, 3, 4};
  vmc_tensor_t t, back;
  ASSERT_OK(vmc_tensor_wrap(VM_F32, 1, &n, d, &t));
  ASSERT_OK(vmc_set_input(c, vm, "ident", 0, &t));
  ASSERT_OK(vmc_invoke(c, vm, "ident", 0, NULL));
  ASSERT_OK(vmc_get_output(c, vm, "ident", NULL, 0, &back));
  assert_memory_equal(back.data, d, sizeof(d));
  vmc_tensor_free(&back);
  ASSERT_OK(vmc_free_vm(c, vm));
  vmc_close(c);
}

static void test_cancel_from_another_thread_cpu(void **state) {
  (void)state;
  cancel_while_spinning("cpu");
}

static void test_cancel_from_another_thread_opencl(void **state) {
  (void)state;
  cancel_while_spinning("opencl:0");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_threads_share_one_connection),
      cmocka_unit_test(test_parallel_big_transfers),
      cmocka_unit_test(test_cancel_from_another_thread_cpu),
      cmocka_unit_test(test_cancel_from_another_thread_opencl),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
