/* Fuzz target bodies shared by tests/fuzz/ and the regression suite; see
 * helper_fuzz.h. */
#include "helper_fuzz.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent_core.h"
#include "session.h"
#include "vmrpc/log.h"
#include "vmagent/agent.h"
#include "vmrpc/vmclient.h"
#include "vmproto/wire.h"

static void fuzz_default_fail(const char *msg) {
  fprintf(stderr, "fuzz invariant violated: %s\n", msg);
  fflush(stderr);
  abort();
}

void (*fuzz_fail_hook)(const char *msg) = fuzz_default_fail;

void fuzz_fail(const char *file, int line, const char *what) {
  char msg[512];
  snprintf(msg, sizeof(msg), "%s:%d: %s", file, line, what);
  fuzz_fail_hook(msg);
}

vm_limits_t fuzz_limits(void) {
  vm_limits_t lim = vm_limits_default();
  lim.max_file_bytes = 1u << 20; /* as an agent with --max-executable 1M */
  return lim;
}

/* ------------------------------------------------------------ executables */

/* write -> load -> write is stable; disasm -> asm -> write gives the same
 * bytes and disasm of the result the same text. */
static void fuzz_roundtrip(const vm_executable_t *e, const vm_limits_t *lim) {
  uint8_t *b1 = NULL, *b2 = NULL, *b3 = NULL;
  size_t n1 = 0, n2 = 0, n3 = 0;
  char *t1 = NULL, *t2 = NULL;
  vm_executable_t *e2 = NULL, *e3 = NULL;
  vm_status_t st = vm_executable_write(e, &b1, &n1);
  FUZZ_CHECK(!st, "a verified executable does not write");
  st = vm_executable_load(b1, n1, lim, &e2);
  if (st) fprintf(stderr, "reload: %s\n", vm_status_message(st));
  FUZZ_CHECK(!st, "written bytes do not load again");
  st = vm_executable_write(e2, &b2, &n2);
  FUZZ_CHECK(!st, "a reloaded executable does not write");
  FUZZ_CHECK(n1 == n2 && memcmp(b1, b2, n1) == 0, "write(load(write(x))) != write(x)");
  st = vm_executable_disasm(e, &t1);
  FUZZ_CHECK(!st, "a verified executable does not disassemble");
  st = vm_executable_asm(t1, strlen(t1), lim, &e3);
  if (st) fprintf(stderr, "asm(disasm): %s\n", vm_status_message(st));
  FUZZ_CHECK(!st, "disasm output does not assemble");
  st = vm_executable_write(e3, &b3, &n3);
  FUZZ_CHECK(!st, "an assembled executable does not write");
  FUZZ_CHECK(n1 == n3 && memcmp(b1, b3, n1) == 0, "write(asm(disasm(x))) != write(x)");
  st = vm_executable_disasm(e3, &t2);
  FUZZ_CHECK(!st, "an assembled executable does not disassemble");
  FUZZ_CHECK(strcmp(t1, t2) == 0, "disasm(asm(disasm(x))) != disasm(x)");
  free(b1);
  free(b2);
  free(b3);
  free(t1);
  free(t2);
  vm_executable_free(e2);
  vm_executable_free(e3);
}

void fuzz_loader_one(const uint8_t *data, size_t size) {
  vm_limits_t lim = fuzz_limits();
  vm_executable_t *e = NULL;
  vm_status_t st = vm_executable_load(data, size, &lim, &e);
  if (st) {
    FUZZ_CHECK(vm_status_message(st)[0] != '\0', "an error without a message");
    FUZZ_CHECK(e == NULL, "an error with an executable");
    vm_status_free(st);
    return;
  }
  FUZZ_CHECK(e != NULL, "success without an executable");
  fuzz_roundtrip(e, &lim);
  vm_executable_free(e);
}

void fuzz_asm_one(const uint8_t *data, size_t size) {
  vm_limits_t lim = fuzz_limits();
  vm_executable_t *e = NULL;
  vm_status_t st = vm_executable_asm((const char *)data, size, &lim, &e);
  if (st) {
    FUZZ_CHECK(vm_status_message(st)[0] != '\0', "an error without a message");
    FUZZ_CHECK(e == NULL, "an error with an executable");
    vm_status_free(st);
    return;
  }
  FUZZ_CHECK(e != NULL, "success without an executable");
  fuzz_roundtrip(e, &lim);
  vm_executable_free(e);
}

/* ------------------------------------------------------------ .npy */

void fuzz_npy_one(const uint8_t *data, size_t size) {
  vmc_tensor_t t;
  memset(&t, 0, sizeof(t));
  vm_status_t st = vmc_npy_read_memory(data, size, &t);
  if (st) {
    FUZZ_CHECK(vm_status_message(st)[0] != '\0', "an error without a message");
    vm_status_free(st);
    return;
  }
  st = vmc_tensor_check(&t);
  FUZZ_CHECK(!st, "a parsed tensor fails vmc_tensor_check");
  /* nothing is allocated for data the input does not contain */
  FUZZ_CHECK(t.nbytes <= size, "more data bytes than input bytes");
  uint8_t *img = NULL;
  size_t img_len = 0;
  st = vmc_npy_write_memory(&t, &img, &img_len);
  FUZZ_CHECK(!st, "a parsed tensor does not write back");
  vmc_tensor_t u;
  memset(&u, 0, sizeof(u));
  st = vmc_npy_read_memory(img, img_len, &u);
  FUZZ_CHECK(!st, "a written image does not read back");
  FUZZ_CHECK(vm_dtype_equal(u.dtype, t.dtype) && u.ndim == t.ndim && u.nbytes == t.nbytes,
             "read(write(t)) differs in dtype, rank or size");
  FUZZ_CHECK(memcmp(u.shape, t.shape, t.ndim * sizeof(t.shape[0])) == 0,
             "read(write(t)) differs in shape");
  FUZZ_CHECK(t.nbytes == 0 || memcmp(u.data, t.data, t.nbytes) == 0,
             "read(write(t)) differs in data");
  free(img);
  vmc_tensor_free(&u);
  vmc_tensor_free(&t);
}

/* ------------------------------------------------------------ requests */

#define FUZZ_MAX_SESSIONS 8
#define FUZZ_RESET_EVERY 2000
#define FUZZ_WATCHDOG_MS 30

void (*fuzz_trace_hook)(const char *line);

static vmagent_t *g_agent;
static uint32_t g_pipe;
static unsigned g_inputs;

static uint64_t fuzz_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* The watchdog: cancels a VM whose Invoke/TimeEvaluate/Profile has run for
 * FUZZ_WATCHDOG_MS (a program may loop forever), repeating every 20 ms
 * until the request returns. */
static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int started;
  int armed;
  int in_cancel;
  uint64_t start_ms, last_ms;
  vmagent_t *agent;
  uint32_t pipe;
  uint64_t session, vm;
} wd = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, 0, NULL, 0, 0, 0};

static void fuzz_send_cancel(vmagent_t *a, uint32_t pipe, uint64_t session, uint64_t vm) {
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__CancelRequest q = VMRPC__CANCEL_REQUEST__INIT;
  q.vm_id = vm;
  rq.id = 0xfeed;
  rq.session = session;
  rq.op_case = VMRPC__REQUEST__OP_CANCEL;
  rq.cancel = &q;
  uint8_t buf[128];
  size_t n = vmp_frame_size(&rq.base);
  if (n > sizeof(buf)) return;
  vmp_frame_write(&rq.base, buf);
  uint8_t *reply = NULL;
  size_t reply_len = 0;
  vmagent_handle_message(a, pipe, buf, n, &reply, &reply_len);
  free(reply);
}

static void *fuzz_watchdog_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&wd.mu);
  for (;;) {
    while (!wd.armed) pthread_cond_wait(&wd.cv, &wd.mu);
    uint64_t now = fuzz_now_ms();
    if (now - wd.start_ms >= FUZZ_WATCHDOG_MS && now - wd.last_ms >= 20) {
      wd.last_ms = now;
      wd.in_cancel = 1;
      vmagent_t *a = wd.agent;
      uint32_t pipe = wd.pipe;
      uint64_t session = wd.session, vm = wd.vm;
      pthread_mutex_unlock(&wd.mu);
      fuzz_send_cancel(a, pipe, session, vm);
      pthread_mutex_lock(&wd.mu);
      wd.in_cancel = 0;
      pthread_cond_broadcast(&wd.cv);
      continue;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 5 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&wd.cv, &wd.mu, &ts);
  }
  return NULL;
}

static void fuzz_watchdog_arm(vmagent_t *a, uint32_t pipe, uint64_t session, uint64_t vm) {
  pthread_mutex_lock(&wd.mu);
  if (!wd.started) {
    pthread_t t;
    if (pthread_create(&t, NULL, fuzz_watchdog_main, NULL) == 0) {
      pthread_detach(t);
      wd.started = 1;
    }
  }
  wd.agent = a;
  wd.pipe = pipe;
  wd.session = session;
  wd.vm = vm;
  wd.start_ms = wd.last_ms = fuzz_now_ms();
  wd.armed = 1;
  pthread_cond_broadcast(&wd.cv);
  pthread_mutex_unlock(&wd.mu);
}

static void fuzz_watchdog_disarm(void) {
  pthread_mutex_lock(&wd.mu);
  wd.armed = 0;
  while (wd.in_cancel) pthread_cond_wait(&wd.cv, &wd.mu);
  pthread_mutex_unlock(&wd.mu);
}

void fuzz_request_reset(void) {
  vmagent_free(g_agent);
  g_agent = NULL;
}

static vmagent_t *fuzz_agent(void) {
  if (g_agent && g_inputs % FUZZ_RESET_EVERY == 0) fuzz_request_reset();
  g_inputs++;
  if (g_agent) return g_agent;
  vmagent_config_t cfg;
  vmagent_config_default(&cfg);
  static const char *const devs[] = {"cpu"};
  cfg.devices = devs;
  cfg.num_devices = 1;
  cfg.listen_url = "tcp://127.0.0.1:0"; /* never started */
  cfg.token = "fuzz-token";
  cfg.max_sessions = FUZZ_MAX_SESSIONS;
  cfg.session_mem_limit = 16u << 20;
  cfg.idle_timeout_ms = 0;
  cfg.chunk_bytes = 4096;
  cfg.max_executable_bytes = 1u << 20;
  cfg.workers = 1;
  vm_status_t st = vmagent_create(&cfg, &g_agent);
  if (st) {
    fprintf(stderr, "fuzz: vmagent_create: %s\n", vm_status_message(st));
    vm_status_free(st);
    abort();
  }
  return g_agent;
}

/* Adjusts a parsed request (see helper_fuzz.h); returns the VM whose code
 * it may run (for the watchdog), or 0. */
static uint64_t fuzz_adjust(Vmrpc__Request *rq, const uint64_t *sessions, uint32_t nsess) {
  if (rq->session >= 1 && rq->session <= nsess) rq->session = sessions[rq->session - 1];
  switch (rq->op_case) {
    case VMRPC__REQUEST__OP_INVOKE:
      if (!rq->invoke) return 0;
      if (rq->invoke->deadline_ms == 0 || rq->invoke->deadline_ms > 10)
        rq->invoke->deadline_ms = 10;
      return rq->invoke->vm_id;
    case VMRPC__REQUEST__OP_TIME_EVALUATE: {
      Vmrpc__TimeEvaluateRequest *t = rq->time_evaluate;
      if (!t) return 0;
      if (t->number > 4) t->number = 4;
      if (t->repeat > 3) t->repeat = 3;
      if (t->min_repeat_ms > 5) t->min_repeat_ms = 5;
      if (t->limit_zero_time_iterations > 10) t->limit_zero_time_iterations = 10;
      if (t->cooldown_interval_ms > 1) t->cooldown_interval_ms = 1;
      if (t->cache_flush_bytes > 65536) t->cache_flush_bytes = 65536;
      return t->vm_id;
    }
    case VMRPC__REQUEST__OP_PROFILE: return rq->profile ? rq->profile->vm_id : 0;
    case VMRPC__REQUEST__OP_RUN: /* the VM it makes has no id yet: the deadline bounds it */
      if (!rq->run) return 0;
      if (rq->run->deadline_ms == 0 || rq->run->deadline_ms > 10) rq->run->deadline_ms = 10;
      return rq->run->vm_id;
    default: return 0;
  }
}

static void fuzz_serve(vmagent_t *a, uint32_t pipe, const uint8_t *body, size_t len,
                       uint64_t *sessions, uint32_t *nsess) {
  const uint8_t *env, *payload;
  size_t env_len, payload_len;
  Vmrpc__Request *rq = NULL;
  uint8_t *own = NULL;
  uint64_t vm = 0;
  vm_status_t st = vmp_frame_split(body, len, 0, &env, &env_len, &payload, &payload_len);
  if (!st) st = vmp_request_unpack(env, env_len, &rq);
  vm_status_free(st);
  if (rq) {
    vm = fuzz_adjust(rq, sessions, *nsess);
    size_t n = vmp_frame_size(&rq->base);
    own = malloc(n + payload_len + 1);
    FUZZ_CHECK(own != NULL, "out of memory");
    vmp_frame_write(&rq->base, own);
    if (payload_len) memcpy(own + n, payload, payload_len);
    /* protobuf-c accepts some envelopes it does not pack back to bytes it
     * accepts (an overlong varint for field number 0 is kept as an unknown
     * field, then written as a plain 0 tag, which unpack refuses): those
     * go to the agent unchanged. */
    Vmrpc__Request *again = NULL;
    st = vmp_request_unpack(own + 4, n - 4, &again);
    if (st) {
      vm_status_free(st);
      vm = 0;
    } else {
      vmrpc__request__free_unpacked(again, NULL);
      body = own;
      len = n + payload_len;
    }
  }
  if (vm) fuzz_watchdog_arm(a, pipe, rq->session, vm);
  uint8_t *reply = NULL;
  size_t reply_len = 0;
  int rc = vmagent_handle_message(a, pipe, body, len, &reply, &reply_len);
  if (vm) fuzz_watchdog_disarm();
  FUZZ_CHECK(rc == 0 && reply, "no reply");
  Vmrpc__Response *rs = NULL;
  st = vmp_frame_split(reply, reply_len, 0, &env, &env_len, &payload, &payload_len);
  if (!st) st = vmp_response_unpack(env, env_len, &rs);
  FUZZ_CHECK(!st, "the reply is not a framed Response");
  vm_status_free(st);
  int ok = !rs->status || rs->status->code == 0;
  FUZZ_CHECK(ok || rs->op_case == VMRPC__RESPONSE__OP__NOT_SET, "an error reply carries an op");
  FUZZ_CHECK(ok || (rs->status->message && rs->status->message[0]), "an error without a message");
  if (fuzz_trace_hook && rs->id != (rq ? rq->id : 0)) {
    char line[200];
    snprintf(line, sizeof(line), "id mismatch: request %llu, reply %llu",
             (unsigned long long)(rq ? rq->id : 0), (unsigned long long)rs->id);
    fuzz_trace_hook(line);
  }
  if (fuzz_trace_hook) {
    char line[600];
    snprintf(line, sizeof(line), "%s -> %s%s%s", rq ? vmp_op_name(rq->op_case) : "(unparsed)",
             ok ? "OK" : vm_code_name((vm_code_t)rs->status->code), ok ? "" : ": ",
             ok ? "" : rs->status->message);
    fuzz_trace_hook(line);
  }
  FUZZ_CHECK(rs->id == (rq ? rq->id : 0), "the reply does not echo the request id");
  if (ok && rs->op_case == VMRPC__RESPONSE__OP_HELLO && rs->hello) {
    FUZZ_CHECK(rs->hello->session != 0, "Hello made session 0");
    if (*nsess < FUZZ_MAX_SESSIONS) sessions[(*nsess)++] = rs->hello->session;
  }
  vmrpc__response__free_unpacked(rs, NULL);
  free(reply);
  if (rq) vmrpc__request__free_unpacked(rq, NULL);
  free(own);
}

void fuzz_request_one(const uint8_t *data, size_t size) {
  vm_log_set_level(VM_LOG_OFF);
  vmagent_t *a = fuzz_agent();
  uint32_t pipe = ++g_pipe;
  if (pipe == 0) pipe = ++g_pipe;
  uint64_t sessions[FUZZ_MAX_SESSIONS];
  uint32_t nsess = 0;
  size_t off = 0;
  for (int frames = 0; off < size && frames < 256; frames++) {
    size_t n = data[off];
    if (off + 1 < size) n |= (size_t)data[off + 1] << 8;
    off += 2;
    if (off > size) off = size;
    if (n > size - off) n = size - off;
    fuzz_serve(a, pipe, data + off, n, sessions, &nsess);
    off += n;
  }
  vmagent_close_pipe(a, pipe);
  pthread_mutex_lock(&a->lock);
  uint32_t left = a->num_sessions;
  int dead = a->dead != NULL;
  pthread_mutex_unlock(&a->lock);
  FUZZ_CHECK(left == 0 && !dead, "sessions outlive their closed connection");
}

int fuzz_frames_append(uint8_t **buf, size_t *len, const uint8_t *body, size_t body_len) {
  if (body_len > 0xffff) return -1;
  uint8_t *p = realloc(*buf, *len + 2 + body_len);
  if (!p) return -1;
  p[*len] = (uint8_t)(body_len & 0xff);
  p[*len + 1] = (uint8_t)(body_len >> 8);
  if (body_len) memcpy(p + *len + 2, body, body_len);
  *buf = p;
  *len += 2 + body_len;
  return 0;
}
