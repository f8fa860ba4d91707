/* The agent as a library, without a network: vmagent_handle_message (the
 * transport-free dispatcher the request fuzzer uses) answers every body,
 * binds sessions to pipes, tears them down with vmagent_close_pipe; the
 * loopback check; the executable store (LRU cap, corruption, persistence);
 * vmagent_start/stop in-process. Leak-checked by the sanitizer build. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "agent_core.h"
#include "device_gate.h"
#include "listen_url.h"
#include "session.h"
#include "vmproto/wire.h"
#include "helper_agent.h"
#include "helper_wire.h"
#include "test_util.h"
#include "vmagent/agent.h"

static vmagent_t *new_agent(const char *cache_dir) {
  vmagent_config_t cfg;
  vmagent_config_default(&cfg);
  const char *devs[] = {"cpu"};
  cfg.devices = devs;
  cfg.num_devices = 1;
  cfg.cache_dir = cache_dir;
  cfg.chunk_bytes = 4096;
  vmagent_t *a = NULL;
  ASSERT_OK(vmagent_create(&cfg, &a));
  return a;
}

/* Sends rq from pipe and returns the unpacked response (caller frees). */
static Vmrpc__Response *call(vmagent_t *a, uint32_t pipe, Vmrpc__Request *rq, const void *payload,
                             size_t plen) {
  size_t n = vmp_frame_size(&rq->base);
  uint8_t *buf = malloc(n + plen);
  vmp_frame_write(&rq->base, buf);
  if (plen) memcpy(buf + n, payload, plen);
  uint8_t *reply = NULL;
  size_t reply_len = 0;
  assert_int_equal(vmagent_handle_message(a, pipe, buf, n + plen, &reply, &reply_len), 0);
  free(buf);
  const uint8_t *env, *pl;
  size_t env_len, pl_len;
  Vmrpc__Response *rs = NULL;
  ASSERT_OK(vmp_frame_split(reply, reply_len, 0, &env, &env_len, &pl, &pl_len));
  ASSERT_OK(vmp_response_unpack(env, env_len, &rs));
  free(reply);
  return rs;
}

static int code_of(const Vmrpc__Response *rs) {
  return rs->status ? (int)rs->status->code : 0;
}

static uint64_t hello(vmagent_t *a, uint32_t pipe) {
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__HelloRequest h = VMRPC__HELLO_REQUEST__INIT;
  h.protocol_major = 1;
  rq.op_case = VMRPC__REQUEST__OP_HELLO;
  rq.hello = &h;
  Vmrpc__Response *rs = call(a, pipe, &rq, NULL, 0);
  assert_int_equal(code_of(rs), 0);
  uint64_t s = rs->hello->session;
  vmrpc__response__free_unpacked(rs, NULL);
  return s;
}

static int stats_code(vmagent_t *a, uint32_t pipe, uint64_t session) {
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__StatsRequest q = VMRPC__STATS_REQUEST__INIT;
  rq.session = session;
  rq.op_case = VMRPC__REQUEST__OP_STATS;
  rq.stats = &q;
  Vmrpc__Response *rs = call(a, pipe, &rq, NULL, 0);
  int code = code_of(rs);
  vmrpc__response__free_unpacked(rs, NULL);
  return code;
}

static void test_handle_message_any_bytes(void **state) {
  (void)state;
  vmagent_t *a = new_agent(NULL);
  uint32_t seed = 99;
  for (int i = 0; i < 2000; i++) {
    uint8_t buf[96];
    size_t len = (size_t)(i % 96);
    for (size_t k = 0; k < len; k++) {
      seed = seed * 1664525u + 1013904223u;
      buf[k] = (uint8_t)(seed >> 24);
    }
    if (len >= 4 && (i & 1)) {
      buf[0] = (uint8_t)(len - 4);
      buf[1] = buf[2] = buf[3] = 0;
    }
    uint8_t *reply = NULL;
    size_t reply_len = 0;
    assert_int_equal(vmagent_handle_message(a, 1, buf, len, &reply, &reply_len), 0);
    assert_non_null(reply);
    assert_true(reply_len >= 4);
    free(reply);
  }
  vmagent_free(a);
}

static void test_pipes_and_sessions(void **state) {
  (void)state;
  vmagent_t *a = new_agent(NULL);
  uint64_t s1 = hello(a, 1);
  uint64_t s2 = hello(a, 2);
  assert_int_equal(stats_code(a, 1, s1), 0);
  assert_int_equal(stats_code(a, 2, s1), VM_NOT_FOUND); /* another pipe's session */
  assert_int_equal(stats_code(a, 1, 0), VM_FAILED_PRECONDITION);

  /* Pipe 1 has an upload in flight and a VM with a transfer when it drops. */
  uint8_t *prog;
  size_t prog_len;
  assert_int_equal(ha_exec_bytes(ha_test_program, &prog, &prog_len), 0);
  uint8_t sha[32];
  vm_sha256(prog, prog_len, sha);
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__UploadBeginRequest ub = VMRPC__UPLOAD_BEGIN_REQUEST__INIT;
  ub.sha256.data = sha;
  ub.sha256.len = 32;
  ub.size = prog_len;
  rq.session = s1;
  rq.op_case = VMRPC__REQUEST__OP_UPLOAD_BEGIN;
  rq.upload_begin = &ub;
  Vmrpc__Response *rs = call(a, 1, &rq, NULL, 0);
  assert_int_equal(code_of(rs), 0);
  uint64_t up = rs->upload_begin->upload_id;
  vmrpc__response__free_unpacked(rs, NULL);
  Vmrpc__UploadChunkRequest uc = VMRPC__UPLOAD_CHUNK_REQUEST__INIT;
  uc.upload_id = up;
  rq.op_case = VMRPC__REQUEST__OP_UPLOAD_CHUNK;
  rq.upload_chunk = &uc;
  rs = call(a, 1, &rq, prog, prog_len);
  assert_int_equal(code_of(rs), 0);
  vmrpc__response__free_unpacked(rs, NULL);
  Vmrpc__UploadCommitRequest ucm = VMRPC__UPLOAD_COMMIT_REQUEST__INIT;
  ucm.upload_id = up;
  rq.op_case = VMRPC__REQUEST__OP_UPLOAD_COMMIT;
  rq.upload_commit = &ucm;
  rs = call(a, 1, &rq, NULL, 0);
  assert_int_equal(code_of(rs), 0);
  uint64_t exec = rs->upload_commit->exec_id;
  vmrpc__response__free_unpacked(rs, NULL);
  Vmrpc__CreateVMRequest cv = VMRPC__CREATE_VMREQUEST__INIT;
  cv.exec_id = exec;
  rq.op_case = VMRPC__REQUEST__OP_CREATE_VM;
  rq.create_vm = &cv;
  rs = call(a, 1, &rq, NULL, 0);
  assert_int_equal(code_of(rs), 0);
  uint64_t vm = rs->create_vm->vm_id;
  vmrpc__response__free_unpacked(rs, NULL);
  Vmrpc__TensorBeginRequest tb = VMRPC__TENSOR_BEGIN_REQUEST__INIT;
  Vmrpc__TensorMeta m = VMRPC__TENSOR_META__INIT;
  int64_t shape[1] = {3000};
  m.dtype = (char *)"float32";
  m.n_shape = 1;
  m.shape = shape;
  m.nbytes = 12000;
  tb.vm_id = vm;
  tb.meta = &m;
  rq.op_case = VMRPC__REQUEST__OP_TENSOR_BEGIN;
  rq.tensor_begin = &tb;
  rs = call(a, 1, &rq, NULL, 0);
  assert_int_equal(code_of(rs), 0);
  vmrpc__response__free_unpacked(rs, NULL);
  ub.sha256.data[0] ^= 1; /* another upload left half done */
  rq.op_case = VMRPC__REQUEST__OP_UPLOAD_BEGIN;
  rq.upload_begin = &ub;
  rs = call(a, 1, &rq, NULL, 0);
  assert_int_equal(code_of(rs), 0);
  vmrpc__response__free_unpacked(rs, NULL);

  vmagent_close_pipe(a, 1);
  assert_int_equal(stats_code(a, 1, s1), VM_NOT_FOUND);
  /* A Hello still in flight from a closed connection makes no session. */
  Vmrpc__Request hq = VMRPC__REQUEST__INIT;
  Vmrpc__HelloRequest h = VMRPC__HELLO_REQUEST__INIT;
  h.protocol_major = 1;
  hq.op_case = VMRPC__REQUEST__OP_HELLO;
  hq.hello = &h;
  rs = call(a, 1, &hq, NULL, 0);
  assert_int_equal(code_of(rs), VM_UNAVAILABLE);
  vmrpc__response__free_unpacked(rs, NULL);
  assert_int_equal(stats_code(a, 2, s2), 0);
  free(prog);
  vmagent_free(a); /* frees s2 */
}

typedef struct gate_probe {
  vmagent_t *a;
  vma_vm_t *v;
  atomic_int done;
  vm_status_t st;
  double waited_s; /* what vma_measure_enter reported */
} gate_probe_t;

static void *gate_copy_main(void *arg) {
  gate_probe_t *g = arg;
  g->st = vma_copy_enter(g->a, &g->a->devices[0]);
  atomic_store(&g->done, 1);
  if (!g->st) vma_copy_exit(&g->a->devices[0]);
  return NULL;
}

static void *gate_measure_main(void *arg) {
  gate_probe_t *g = arg;
  g->waited_s = vma_measure_enter(g->a, g->v);
  atomic_store(&g->done, 1);
  return NULL;
}

static void sleep_ms(int ms) {
  struct timespec ts = {0, ms * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* The quiet gate of a device: while a TimeEvaluate / Profile measures there,
 * another request's copy (TensorChunk, GetOutput, SetInput ...) waits, so
 * it cannot delay the measured syncs or enter the figures; a measurement
 * first waits for the copies already running. (The waits are checked one
 * way only: a broken gate lets the other side through at once.) */
static void test_device_gate(void **state) {
  (void)state;
  vmagent_t *a = new_agent(NULL);
  vma_device_t *d = &a->devices[0];
  assert_ptr_equal(vma_device_of(a, d->dev), d);
  assert_null(vma_device_of(a, NULL));
  vma_vm_t v;
  memset(&v, 0, sizeof(v));
  v.num_devs = 1;
  v.dev_idx[0] = 0;
  gate_probe_t g = {a, &v, 0, VM_STATUS_OK, -1};
  pthread_t th;

  /* a copy waits for the measurement; a measurement on a quiet device
   * reports no wait */
  assert_true(vma_measure_enter(a, &v) == 0.0);
  assert_int_equal(pthread_create(&th, NULL, gate_copy_main, &g), 0);
  sleep_ms(200);
  assert_int_equal(atomic_load(&g.done), 0);
  assert_int_equal(d->copies, 0);
  vma_measure_exit(a, &v);
  pthread_join(th, NULL);
  assert_int_equal(atomic_load(&g.done), 1);
  ASSERT_OK(g.st);
  assert_int_equal(d->copies, 0);

  /* a measurement waits for the copy inside, and closes the gate at once */
  ASSERT_OK(vma_copy_enter(a, d));
  atomic_store(&g.done, 0);
  assert_int_equal(pthread_create(&th, NULL, gate_measure_main, &g), 0);
  sleep_ms(200);
  assert_int_equal(atomic_load(&g.done), 0);
  pthread_mutex_lock(&d->gate_mu);
  assert_int_equal(d->measuring, 1);
  pthread_mutex_unlock(&d->gate_mu);
  vma_copy_exit(d);
  pthread_join(th, NULL);
  assert_int_equal(atomic_load(&g.done), 1);
  /* ... and reports how long it waited (TimeEvaluateResponse.gate_wait_s) */
  if (!(g.waited_s >= 0.15 && g.waited_s < 30))
    fail_msg("the measurement waited %.3f s for the copy inside, expected about 0.2 s", g.waited_s);

  /* on shutdown a copy stops waiting */
  atomic_store(&a->stopping, 1);
  ASSERT_STATUS(vma_copy_enter(a, d), VM_UNAVAILABLE, "the agent is shutting down");
  atomic_store(&a->stopping, 0);
  vma_measure_exit(a, &v);
  ASSERT_OK(vma_copy_enter(a, d));
  vma_copy_exit(d);
  ASSERT_OK(vma_copy_enter(a, NULL)); /* a VM's private cpu device: no gate */
  vma_copy_exit(NULL);
  vmagent_free(a);
}

static void test_url_is_local(void **state) {
  (void)state;
  assert_true(vma_url_is_local("tcp://127.0.0.1:9090"));
  assert_true(vma_url_is_local("tcp://127.1.2.3:1"));
  assert_true(vma_url_is_local("tcp://localhost:0"));
  assert_true(vma_url_is_local("tls+tcp://127.0.0.1:0"));
  assert_true(vma_url_is_local("tcp://[::1]:5"));
  assert_true(vma_url_is_local("ipc:///tmp/x.sock"));
  assert_true(vma_url_is_local("inproc://x"));
  assert_false(vma_url_is_local("tcp://0.0.0.0:9090"));
  assert_false(vma_url_is_local("tcp://*:9090"));
  assert_false(vma_url_is_local("tcp://:9090"));
  assert_false(vma_url_is_local("tcp://[::]:9090"));
  assert_false(vma_url_is_local("tcp://10.0.0.1:9090"));
  assert_false(vma_url_is_local("tcp://localhost.evil.com:1"));
  assert_false(vma_url_is_local("tcp://[::1"));
  assert_false(vma_url_is_local("garbage"));
  assert_false(vma_url_is_local(NULL));
}

static void make_exec(int variant, uint8_t **out, size_t *len) {
  char text[256];
  snprintf(text, sizeof(text), ".meta variant \"%d\"\n.const c0 tensor uint8[1000] data {\n",
           variant);
  size_t n = strlen(text);
  char *full = malloc(n + 4000);
  memcpy(full, text, n);
  for (int line = 0; line < 1000 / 32 + 1; line++) {
    int bytes = line < 31 ? 32 : 1000 - 31 * 32;
    full[n++] = ' ';
    for (int i = 0; i < bytes; i++) {
      snprintf(full + n, 3, "%02x", (variant + i) & 0xff);
      n += 2;
    }
    full[n++] = '\n';
  }
  const char tail[] = "}\n.func @main() regs 1 {\n  ret %0\n}\n";
  memcpy(full + n, tail, sizeof(tail));
  assert_int_equal(ha_exec_bytes(full, out, len), 0);
  free(full);
}

static void test_store_lru_and_corruption(void **state) {
  (void)state;
  char dir[] = "/tmp/vmagent-store-unit-XXXXXX";
  assert_non_null(mkdtemp(dir));
  uint8_t *e[3];
  size_t len[3];
  uint8_t sha[3][32];
  for (int i = 0; i < 3; i++) {
    make_exec(i, &e[i], &len[i]);
    vm_sha256(e[i], len[i], sha[i]);
  }
  /* Room for two of the three. */
  uint64_t cap = len[0] + len[1] + len[2] / 2;
  vma_store_t *s;
  ASSERT_OK(vma_store_open(dir, cap, 1 << 20, &s));
  vma_exec_entry_t *ent[3];
  for (int i = 0; i < 3; i++) {
    ASSERT_OK(vma_store_insert(s, sha[i], e[i], len[i], &ent[i]));
    vma_store_release(s, ent[i]); /* freed from memory, kept on disk */
    if (i == 1) {                 /* use 0 again so that 1 is the least recently used */
      vma_exec_entry_t *x;
      ASSERT_OK(vma_store_lookup(s, sha[0], len[0], &x));
      assert_non_null(x);
      vma_store_release(s, x);
    }
  }
  uint64_t bytes;
  uint32_t entries, loaded;
  vma_store_stats(s, &bytes, &entries, &loaded);
  assert_int_equal(entries, 2);
  assert_int_equal(loaded, 0);
  assert_true(bytes <= cap);
  vma_exec_entry_t *x = NULL;
  ASSERT_OK(vma_store_lookup(s, sha[1], len[1], &x));
  assert_null(x); /* evicted */
  ASSERT_OK(vma_store_lookup(s, sha[2], len[2], &x));
  assert_non_null(x);
  /* A second user shares the loaded executable. */
  vma_exec_entry_t *y = NULL;
  ASSERT_OK(vma_store_lookup(s, sha[2], len[2], &y));
  assert_ptr_equal(x, y);
  /* Wrong size for a known hash: a miss. */
  vma_exec_entry_t *z = NULL;
  ASSERT_OK(vma_store_lookup(s, sha[0], len[0] + 1, &z));
  assert_null(z);
  vma_store_release(s, x);
  vma_store_release(s, y);
  vma_store_close(s);

  /* Reopen: the LRU comes back from disk; truncate one file: a miss and
   * the file is gone; a stray temp file is cleaned up. */
  char hex[65], path[512], tmp[600];
  vm_sha256_hex(sha[0], hex);
  snprintf(path, sizeof(path), "%s/executables/%s.vmx", dir, hex);
  assert_int_equal(truncate(path, (off_t)len[0] / 2), 0);
  snprintf(tmp, sizeof(tmp), "%s.tmp.12345", path);
  FILE *f = fopen(tmp, "w");
  assert_non_null(f);
  fclose(f);
  ASSERT_OK(vma_store_open(dir, cap, 1 << 20, &s));
  struct stat st;
  assert_int_not_equal(stat(tmp, &st), 0);
  ASSERT_OK(vma_store_lookup(s, sha[0], len[0], &x));
  assert_null(x);
  ASSERT_OK(vma_store_lookup(s, sha[0], len[0] / 2, &x));
  assert_null(x);
  assert_int_not_equal(stat(path, &st), 0);
  ASSERT_OK(vma_store_lookup(s, sha[2], len[2], &x));
  assert_non_null(x);
  vma_store_release(s, x);
  /* Bytes that fail the verifier are refused and not stored. */
  uint8_t junk[64] = {1, 2, 3};
  uint8_t jsha[32];
  vm_sha256(junk, sizeof(junk), jsha);
  ASSERT_STATUS(vma_store_insert(s, jsha, junk, sizeof(junk), &x), VM_INVALID_ARGUMENT, NULL);
  vma_store_stats(s, &bytes, &entries, &loaded);
  assert_int_equal(entries, 1);
  vma_store_close(s);

  for (int i = 0; i < 3; i++) {
    vm_sha256_hex(sha[i], hex);
    snprintf(path, sizeof(path), "%s/executables/%s.vmx", dir, hex);
    unlink(path);
    free(e[i]);
  }
  snprintf(path, sizeof(path), "%s/executables", dir);
  rmdir(path);
  rmdir(dir);
}

static void test_start_stop_in_process(void **state) {
  (void)state;
  vmagent_config_t cfg;
  vmagent_config_default(&cfg);
  const char *devs[] = {"cpu"};
  cfg.devices = devs;
  cfg.num_devices = 1;
  cfg.listen_url = "tcp://127.0.0.1:0";
  cfg.workers = 2;
  vmagent_t *a = NULL;
  ASSERT_OK(vmagent_create(&cfg, &a));
  assert_string_equal(vmagent_url(a), "");
  ASSERT_OK(vmagent_start(a));
  assert_non_null(strstr(vmagent_url(a), "tcp://127.0.0.1:"));
  ASSERT_STATUS(vmagent_start(a), VM_FAILED_PRECONDITION, "already");
  hw_conn_t c;
  assert_int_equal(hw_open(&c, vmagent_url(a)), 0);
  hw_reply_t r;
  assert_int_equal(hw_hello(&c, NULL, &r), 0);
  hw_reply_free(&r);
  /* Stop with a live session and connection. */
  vmagent_stop(a);
  vmagent_stop(a);
  hw_close(&c);
  vmagent_free(a);

  /* Config refusals. */
  cfg.listen_url = "tcp://0.0.0.0:0";
  ASSERT_STATUS(vmagent_create(&cfg, &a), VM_FAILED_PRECONDITION, "without a token");
  cfg.token = "t";
  cfg.listen_url = "tcp://127.0.0.1:0";
  cfg.workers = 0;
  ASSERT_STATUS(vmagent_create(&cfg, &a), VM_INVALID_ARGUMENT, "--workers");
  cfg.workers = 1;
  /* Hello, token included, must fit in the 8 KiB taken before a session. */
  char long_token[4098];
  memset(long_token, 't', sizeof(long_token) - 1);
  long_token[sizeof(long_token) - 1] = '\0';
  cfg.token = long_token;
  ASSERT_STATUS(vmagent_create(&cfg, &a), VM_INVALID_ARGUMENT,
                "the token is longer than 4096 bytes: Hello must fit in the 8192 bytes");
  cfg.token = "t";
  /* Address in use. */
  cfg.listen_url = "tcp://127.0.0.1:0";
  vmagent_t *b = NULL;
  ASSERT_OK(vmagent_create(&cfg, &b));
  ASSERT_OK(vmagent_start(b));
  cfg.listen_url = vmagent_url(b);
  ASSERT_OK(vmagent_create(&cfg, &a));
  ASSERT_STATUS(vmagent_start(a), VM_UNAVAILABLE, NULL);
  vmagent_free(a);
  vmagent_free(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_handle_message_any_bytes),
      cmocka_unit_test(test_pipes_and_sessions),
      cmocka_unit_test(test_url_is_local),
      cmocka_unit_test(test_device_gate),
      cmocka_unit_test(test_store_lru_and_corruption),
      cmocka_unit_test(test_start_stop_in_process),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
