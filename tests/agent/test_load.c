/* Soak and load: 16 client threads against one real vmagent (--workers 8,
 * cpu device, 4 KiB chunks so most tensors travel in chunks) for
 * $VMRPC_LOAD_SECONDS (default 30). Each thread loops over sessions that
 * upload the test program (a store hit after the first), create a VM
 * (pooled/naive, bytecode/compiled), set random tensors, invoke, fetch and
 * check every output byte, time-evaluate, and free — and, at a fixed-seed
 * random moment, disconnect on purpose: a Goodbye-less close in the middle
 * of an upload, of a tensor transfer or of a running endless invocation,
 * or a vmc_close with the VM still loaded. Every result is checked; the
 * only failures allowed are the injected ones (which are not counted as
 * errors because they are never awaited). At the end the agent's session
 * count and bytes (Stats) must return to the baseline within 20 s and it
 * must still answer Ping. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
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

#define THREADS 16
#define CHUNK 4096

static agent_proc_t g_agent;
static uint8_t *g_prog;
static size_t g_prog_len;
static double g_end;

static atomic_uint g_errors, g_ops, g_sessions, g_invokes, g_bytes_checked, g_time_evals;
static atomic_uint g_inj_upload, g_inj_transfer, g_inj_spin, g_inj_close;
static pthread_mutex_t g_msg_lock = PTHREAD_MUTEX_INITIALIZER;
/* The monitor connection and its Stats results live here, so that the
 * teardown frees them when a failed assertion leaves test_load early. */
static vmc_conn_t *g_mon;
static vmc_stats_t g_base, g_stats;

/* Counts an unexpected failure and prints the first few. Frees st. */
static void error(int thread, const char *what, vm_status_t st) {
  unsigned n = atomic_fetch_add(&g_errors, 1);
  if (n < 20) {
    pthread_mutex_lock(&g_msg_lock);
    fprintf(stderr, "load thread %d: %s: %s: %s\n", thread, what,
            st ? vm_code_name(vm_status_code(st)) : "check",
            st ? vm_status_message(st) : "wrong result");
    pthread_mutex_unlock(&g_msg_lock);
  }
  vm_status_free(st);
}

/* error() for a raw reply: quotes its code and message. */
static void error_reply(int thread, const char *what, const hw_reply_t *r) {
  vm_status_t st = vm_status_make(VM_INTERNAL, "reply code %d: %s", hw_code(r), hw_message(r));
  error(thread, what, st);
}

#define OK_OR(expr, what)        \
  do {                           \
    vm_status_t st_ = (expr);    \
    atomic_fetch_add(&g_ops, 1); \
    if (st_) {                   \
      error(id, what, st_);      \
      goto out;                  \
    }                            \
  } while (0)

/* ------------------------------------------------------------ injected */

/* A raw connection that stops in the middle of something and closes
 * without Goodbye: the agent must tear the session down by itself. */
static void inject_abrupt(int id, unsigned *seed) {
  hw_conn_t c;
  hw_reply_t r;
  memset(&r, 0, sizeof(r));
  if (hw_open(&c, g_agent.url) != 0) {
    error_reply(id, "inject: dial", &r);
    return;
  }
  if (hw_hello(&c, NULL, &r) != 0) {
    error_reply(id, "inject: hello", &r);
    goto done;
  }
  hw_reply_free(&r);
  int kind = (int)(rand_r(seed) % 3);
  if (kind == 0) { /* half an upload: staging reserved, one chunk of three */
    uint8_t sha[32];
    for (int i = 0; i < 32; i++) sha[i] = (uint8_t)rand_r(seed);
    if (ha_upload_begin(&c, sha, 3 * CHUNK, &r) != 0) {
      error_reply(id, "inject: upload begin", &r);
      goto done;
    }
    uint64_t up = r.rs->upload_begin->upload_id;
    hw_reply_free(&r);
    uint8_t junk[CHUNK];
    memset(junk, 0xab, sizeof(junk));
    if (ha_upload_chunk(&c, up, CHUNK, junk, CHUNK, &r) != 0) error_reply(id, "inject: chunk", &r);
    hw_reply_free(&r);
    atomic_fetch_add(&g_inj_upload, 1);
    goto done;
  }
  uint64_t exec = 0, vm = 0, t = 0;
  int present = 0;
  if (ha_upload(&c, g_prog, g_prog_len, CHUNK, &exec, &present, &r) != 0) {
    error_reply(id, "inject: upload", &r);
    goto done;
  }
  hw_reply_free(&r);
  if (ha_create_vm(&c, exec, "cpu", NULL, NULL, &vm, &r) != 0) {
    error_reply(id, "inject: create vm", &r);
    goto done;
  }
  hw_reply_free(&r);
  if (kind == 1) { /* half a tensor transfer */
    int64_t shape[1] = {3 * CHUNK / 4};
    if (ha_tensor_begin(&c, vm, "float32", shape, 1, 3 * CHUNK, &t, &r) != 0) {
      error_reply(id, "inject: tensor begin", &r);
      goto done;
    }
    hw_reply_free(&r);
    uint8_t junk[CHUNK];
    memset(junk, 0xcd, sizeof(junk));
    if (ha_tensor_chunk(&c, t, 0, junk, CHUNK, &r) != 0)
      error_reply(id, "inject: tensor chunk", &r);
    hw_reply_free(&r);
    atomic_fetch_add(&g_inj_transfer, 1);
    goto done;
  }
  /* an endless invocation, left running: closing must cancel it */
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__InvokeRequest q = VMRPC__INVOKE_REQUEST__INIT;
  q.vm_id = vm;
  q.func = (char *)"spin";
  rq.op_case = VMRPC__REQUEST__OP_INVOKE;
  rq.invoke = &q;
  if (hw_send(&c, 1, &rq, NULL, 0) != 0) error_reply(id, "inject: send spin", &r);
  usleep(1000 * (useconds_t)(rand_r(seed) % 20));
  atomic_fetch_add(&g_inj_spin, 1);
done:
  hw_reply_free(&r);
  hw_close(&c);
}

/* ------------------------------------------------------------ the work */

static int check_output(int id, vmc_conn_t *c, vmc_vm_t vm, const vmc_tensor_t *x) {
  uint32_t p0[1] = {0}, p1[1] = {1};
  int64_t arity = 0;
  vmc_tensor_t y, s;
  memset(&y, 0, sizeof(y));
  memset(&s, 0, sizeof(s));
  int ok = 0;
  OK_OR(vmc_get_output_arity(c, vm, "main", NULL, 0, &arity), "arity");
  if (arity != 2) {
    error(id, "arity is not 2", NULL);
    goto out;
  }
  OK_OR(vmc_get_output(c, vm, "main", p0, 1, &y), "get output 0");
  OK_OR(vmc_get_output(c, vm, "main", p1, 1, &s), "get output 1");
  if (y.nbytes != x->nbytes || y.ndim != 1 || y.shape[0] != x->shape[0] ||
      memcmp(y.data, x->data, x->nbytes) != 0) {
    error(id, "output 0 differs from the input", NULL);
    goto out;
  }
  if (s.ndim != 1 || s.shape[0] != 1 || ((int64_t *)s.data)[0] != x->shape[0]) {
    error(id, "output 1 is not the input's shape", NULL);
    goto out;
  }
  atomic_fetch_add(&g_bytes_checked, (unsigned)x->nbytes);
  ok = 1;
out:
  vmc_tensor_free(&y);
  vmc_tensor_free(&s);
  return ok;
}

/* One session; returns when it ended (normally or by an injected close). */
static void session(int id, unsigned *seed) {
  vmc_conn_t *c = NULL;
  vmc_tensor_t x;
  memset(&x, 0, sizeof(x));
  vmc_vm_t vm = {0};
  vmc_exec_t ex = {0};
  vmc_conn_opts_t o;
  memset(&o, 0, sizeof(o));
  o.connect_timeout_ms = 20000;
  o.request_timeout_ms = 60000;
  o.long_timeout_ms = 60000;
  o.client_name = "load";
  OK_OR(vmc_connect(g_agent.url, &o, &c), "connect");
  atomic_fetch_add(&g_sessions, 1);
  /* 1 in 8 sessions stops early with everything still loaded */
  int close_at = rand_r(seed) % 8 == 0 ? (int)(rand_r(seed) % 3) : -1;
  OK_OR(vmc_upload_memory(c, g_prog, g_prog_len, NULL, NULL, &ex, NULL), "upload");
  vmc_device_spec_t d = {"cpu", rand_r(seed) % 2 ? "pooled" : "naive"};
  OK_OR(vmc_create_vm(c, ex, &d, 1, rand_r(seed) % 2 ? "bytecode" : "compiled", &vm), "create vm");
  int rounds = 1 + (int)(rand_r(seed) % 4);
  for (int k = 0; k < rounds; k++) {
    int64_t n = 1 + (int64_t)(rand_r(seed) % 3000); /* up to 12 KB: chunked */
    OK_OR(vmc_tensor_alloc(VM_F32, 1, &n, &x), "alloc");
    float *xf = x.data;
    for (int64_t i = 0; i < n; i++) xf[i] = (float)(rand_r(seed) % 100000) * 0.01f;
    OK_OR(vmc_set_input(c, vm, "main", 0, &x), "set input");
    if (close_at == k) {
      atomic_fetch_add(&g_inj_close, 1);
      goto out; /* vmc_close with the VM, input and executable loaded */
    }
    OK_OR(vmc_invoke(c, vm, "main", 0, NULL), "invoke");
    atomic_fetch_add(&g_invokes, 1);
    if (!check_output(id, c, vm, &x)) goto out;
    if (rand_r(seed) % 4 == 0) {
      vmc_time_params_t tp = vmc_time_params_default();
      tp.number = 2;
      tp.repeat = 2;
      vmc_time_result_t tr;
      memset(&tr, 0, sizeof(tr));
      OK_OR(vmc_time_evaluate(c, vm, "main", &tp, &tr), "time evaluate");
      int good = tr.repeat == 2 && tr.number >= 2 && tr.min_s >= 0 && tr.max_s >= tr.min_s;
      vmc_time_result_free(&tr);
      if (!good) {
        error(id, "time evaluate result", NULL);
        goto out;
      }
      atomic_fetch_add(&g_time_evals, 1);
    }
    vmc_tensor_free(&x);
  }
  OK_OR(vmc_free_vm(c, vm), "free vm");
  OK_OR(vmc_free_exec(c, ex), "free exec");
out:
  vmc_tensor_free(&x);
  vmc_close(c);
}

static void *thread_main(void *arg) {
  int id = (int)(intptr_t)arg;
  unsigned seed = 0x5eed0000u + (unsigned)id;
  while (ha_now_s() < g_end) {
    if (rand_r(&seed) % 10 == 0)
      inject_abrupt(id, &seed);
    else
      session(id, &seed);
  }
  return NULL;
}

/* ------------------------------------------------------------ the test */

static int setup(void **state) {
  (void)state;
  if (ha_exec_bytes(ha_test_program, &g_prog, &g_prog_len) != 0) return -1;
  const char *args[] = {"--workers", "8", "--device", "cpu", "--chunk-size", "4K", NULL};
  return agent_proc_start(&g_agent, args);
}

static int teardown(void **state) {
  (void)state;
  vmc_stats_free(&g_stats);
  vmc_stats_free(&g_base);
  vmc_close(g_mon);
  g_mon = NULL;
  int rc = agent_proc_stop(&g_agent);
  free(g_prog);
  return rc == 0 ? 0 : -1;
}

/* Frees *s's earlier result first. */
static void stats_of(vmc_conn_t *c, vmc_stats_t *s) {
  vmc_stats_free(s);
  ASSERT_OK(vmc_stats(c, s));
}

static void test_load(void **state) {
  (void)state;
  double seconds = 30; /* a soak: VMRPC_LOAD_SECONDS=600 */
  const char *env = getenv("VMRPC_LOAD_SECONDS");
  if (env && *env) seconds = atof(env);
  if (seconds < 1) seconds = 1;

  ASSERT_OK(vmc_connect(g_agent.url, NULL, &g_mon));
  vmc_conn_t *mon = g_mon;
  vmc_stats_t *base = &g_base, *s = &g_stats;
  stats_of(mon, base);
  assert_int_equal(base->agent_sessions, 1); /* the monitor */

  g_end = ha_now_s() + seconds;
  pthread_t th[THREADS];
  for (int i = 0; i < THREADS; i++)
    assert_int_equal(pthread_create(&th[i], NULL, thread_main, (void *)(intptr_t)i), 0);
  for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);

  /* Everything the clients held is freed: sessions and bytes back at the
   * baseline (abrupt closes are torn down asynchronously). */
  double deadline = ha_now_s() + 20;
  for (;;) {
    stats_of(mon, s);
    if ((s->agent_sessions == base->agent_sessions && s->agent_bytes == base->agent_bytes) ||
        ha_now_s() > deadline)
      break;
    usleep(50000);
  }
  print_message(
      "load: %.0f s, %d threads: %u sessions, %u ops, %u invokes (%u KiB checked), %u time "
      "evaluations; injected: %u half uploads, %u half transfers, %u running invokes, %u "
      "early closes; errors %u; agent sessions %u (baseline %u), bytes %llu (baseline %llu), "
      "rss %llu -> %llu MiB, %llu requests\n",
      seconds, THREADS, atomic_load(&g_sessions), atomic_load(&g_ops), atomic_load(&g_invokes),
      atomic_load(&g_bytes_checked) / 1024, atomic_load(&g_time_evals), atomic_load(&g_inj_upload),
      atomic_load(&g_inj_transfer), atomic_load(&g_inj_spin), atomic_load(&g_inj_close),
      atomic_load(&g_errors), s->agent_sessions, base->agent_sessions,
      (unsigned long long)s->agent_bytes, (unsigned long long)base->agent_bytes,
      (unsigned long long)(base->agent_rss_bytes >> 20),
      (unsigned long long)(s->agent_rss_bytes >> 20), (unsigned long long)s->requests);
  assert_int_equal(atomic_load(&g_errors), 0);
  assert_int_equal(s->agent_sessions, base->agent_sessions);
  assert_int_equal(s->agent_bytes, base->agent_bytes);
  assert_true(atomic_load(&g_invokes) >= THREADS); /* it did real work */
  assert_true(atomic_load(&g_inj_upload) + atomic_load(&g_inj_transfer) + atomic_load(&g_inj_spin) +
                  atomic_load(&g_inj_close) >
              0);
  vmc_stats_free(s);
  vmc_stats_free(base);
  ASSERT_OK(vmc_ping(mon, NULL));
  vmc_close(mon);
  g_mon = NULL;
  assert_int_equal(ha_ping_fresh(g_agent.url), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_load),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
