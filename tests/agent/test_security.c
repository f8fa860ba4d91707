/* Security: brute-force protection of the token and TLS with a CA.
 * (Missing, wrong and right tokens themselves: test_agent_hostile.c
 * test_token and test_e2e_ops.c test_token; TLS with a self-signed
 * certificate and a wrong CA: test_e2e_ops.c test_tls.)
 *
 * - After 5 failed Hello tokens from one address within 60 s, further
 *   Hellos from that address — new connections and the right token
 *   included — get RESOURCE_EXHAUSTED "too many failed authentication
 *   attempts from 127.0.0.1; wait N s", while established sessions and
 *   Ping keep working. In process (short window): the block ends when the
 *   window has passed, peers are counted separately, and each failure is
 *   logged at warn naming the peer.
 * - TLS: a CA made at test time with the openssl CLI signs the agent's
 *   certificate (SAN DNS:127.0.0.1 and IP:127.0.0.1: mbedTLS 2.28, nng's
 *   TLS engine here, matches the host only against DNS names); a client
 *   trusting that CA works end to end; a plaintext client dialling the TLS
 *   port fails cleanly (UNAVAILABLE or DEADLINE_EXCEEDED within its 2 s
 *   connect timeout) and the agent keeps serving TLS clients. Skipped
 *   without openssl. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent_proc.h"
#include "helper_agent.h"
#include "test_util.h"
#include "vm/executable.h"
#include "vm/log.h"
#include "vmagent/agent.h"
#include "vmclient.h"
#include "vmproto/wire.h"

static void expect_msg(const hw_reply_t *r, const char *want) {
  if (!strstr(hw_message(r), want)) fail_msg("message '%s' lacks '%s'", hw_message(r), want);
}

/* ------------------------------------------------------------ rate limit */

static void test_token_brute_force_is_blocked(void **state) {
  (void)state;
  char path[] = "/tmp/vmagent-sec-token-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  const char tok[] = "correct-horse-battery\n";
  assert_int_equal(write(fd, tok, sizeof(tok) - 1), (ssize_t)(sizeof(tok) - 1));
  close(fd);
  const char *args[] = {"--token-file", path, "--device", "cpu", NULL};
  agent_proc_t p;
  assert_int_equal(agent_proc_start(&p, args), 0);
  hw_conn_t good, bad;
  hw_reply_t r;
  assert_int_equal(hw_open(&good, p.url), 0);
  CODE_IS(hw_hello(&good, "correct-horse-battery", &r), 0, &r);
  hw_reply_free(&r);

  assert_int_equal(hw_open(&bad, p.url), 0);
  for (int i = 0; i < 5; i++) {
    CODE_IS(hw_hello(&bad, i == 0 ? NULL : "guess", &r), VM_UNAUTHENTICATED, &r);
    hw_reply_free(&r);
  }
  CODE_IS(hw_hello(&bad, "guess", &r), VM_RESOURCE_EXHAUSTED, &r);
  expect_msg(&r, "too many failed authentication attempts from 127.0.0.1; wait");
  hw_reply_free(&r);
  /* the right token does not help while blocked, nor a new connection */
  CODE_IS(hw_hello(&bad, "correct-horse-battery", &r), VM_RESOURCE_EXHAUSTED, &r);
  hw_reply_free(&r);
  hw_close(&bad);
  assert_int_equal(hw_open(&bad, p.url), 0);
  CODE_IS(hw_hello(&bad, "correct-horse-battery", &r), VM_RESOURCE_EXHAUSTED, &r);
  hw_reply_free(&r);
  CODE_IS(ha_ping(&bad, &r), 0, &r);
  hw_reply_free(&r);
  hw_close(&bad);
  /* the session made before goes on */
  CODE_IS(ha_list_devices(&good, &r), 0, &r);
  hw_reply_free(&r);
  CODE_IS(ha_stats(&good, &r), 0, &r);
  hw_reply_free(&r);
  hw_close(&good);
  assert_int_equal(agent_proc_stop(&p), 0);
  unlink(path);
}

/* In process: a log sink collects warn lines. */
static pthread_mutex_t g_log_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_log[8192];

static void sink(vm_log_level_t level, const char *line, void *user) {
  (void)user;
  if (level < VM_LOG_WARN) return;
  pthread_mutex_lock(&g_log_lock);
  size_t n = strlen(g_log);
  snprintf(g_log + n, sizeof(g_log) - n, "%s\n", line);
  pthread_mutex_unlock(&g_log_lock);
}

static int hello_code(vmagent_t *a, uint32_t pipe, const char *token, char *msg, size_t cap) {
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__HelloRequest h = VMRPC__HELLO_REQUEST__INIT;
  h.protocol_major = VMRPC_PROTOCOL_MAJOR;
  h.token = (char *)token;
  rq.id = 1;
  rq.op_case = VMRPC__REQUEST__OP_HELLO;
  rq.hello = &h;
  uint8_t buf[256];
  size_t n = vmp_frame_size(&rq.base);
  assert_true(n <= sizeof(buf));
  vmp_frame_write(&rq.base, buf);
  uint8_t *reply = NULL;
  size_t len = 0;
  assert_int_equal(vmagent_handle_message(a, pipe, buf, n, &reply, &len), 0);
  const uint8_t *env, *pl;
  size_t env_len, pl_len;
  Vmrpc__Response *rs = NULL;
  ASSERT_OK(vmp_frame_split(reply, len, 0, &env, &env_len, &pl, &pl_len));
  ASSERT_OK(vmp_response_unpack(env, env_len, &rs));
  int code = rs->status ? (int)rs->status->code : 0;
  snprintf(msg, cap, "%s", rs->status && rs->status->message ? rs->status->message : "");
  vmrpc__response__free_unpacked(rs, NULL);
  free(reply);
  return code;
}

static void test_rate_limit_window_in_process(void **state) {
  (void)state;
  vmagent_config_t cfg;
  vmagent_config_default(&cfg);
  const char *devs[] = {"cpu"};
  cfg.devices = devs;
  cfg.num_devices = 1;
  cfg.token = "t0ken";
  cfg.auth_max_failures = 3;
  cfg.auth_window_ms = 1500; /* the four Hellos below fit it on a loaded machine */
  vmagent_t *a = NULL;
  ASSERT_OK(vmagent_create(&cfg, &a));
  g_log[0] = '\0';
  vm_log_level_t old = vm_log_get_level();
  vm_log_set_level(VM_LOG_WARN);
  vm_log_set_sink(sink, NULL);
  char msg[512];
  assert_int_equal(hello_code(a, 7, "nope", msg, sizeof(msg)), VM_UNAUTHENTICATED);
  double t0 = ha_now_s(); /* the window began before this: it ends by t0 + 1.5 s */
  for (int i = 0; i < 2; i++)
    assert_int_equal(hello_code(a, 7, "nope", msg, sizeof(msg)), VM_UNAUTHENTICATED);
  assert_int_equal(hello_code(a, 7, "t0ken", msg, sizeof(msg)), VM_RESOURCE_EXHAUSTED);
  assert_non_null(strstr(msg, "too many failed authentication attempts from pipe 7"));
  /* without a transport each connection is its own peer */
  assert_int_equal(hello_code(a, 8, "t0ken", msg, sizeof(msg)), 0);
  /* the window passes: pipe 7 may try again */
  while (ha_now_s() - t0 < 1.55) usleep(20000);
  assert_int_equal(hello_code(a, 7, "t0ken", msg, sizeof(msg)), 0);
  vm_log_set_sink(NULL, NULL);
  vm_log_set_level(old);
  /* each failure at warn, naming the peer; the block once */
  const char *at = g_log;
  int failures = 0;
  while ((at = strstr(at, "auth: Hello from pipe 7 with a wrong token")) != NULL) {
    failures++;
    at++;
  }
  if (failures != 3) fail_msg("expected 3 failure lines, log:\n%s", g_log);
  assert_non_null(strstr(g_log, "auth: refusing Hello from pipe 7"));
  vmagent_free(a);
}

/* ------------------------------------------------------------ TLS */

static void test_tls_with_ca(void **state) {
  (void)state;
  if (system("command -v openssl >/dev/null 2>&1") != 0) skip();
  char dir[] = "/tmp/vmagent-sec-tls-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char cmd[4096];
  /* CA, then a server key + CSR signed by it with SAN IP:127.0.0.1. */
  snprintf(cmd, sizeof(cmd),
           "cd %s && "
           "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 "
           "-subj /CN=vmrpc-test-ca -keyout ca.key -out ca.pem && "
           "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
           "-subj /CN=127.0.0.1 -keyout agent.key -out agent.csr && "
           "printf 'subjectAltName=DNS:127.0.0.1,IP:127.0.0.1\\nbasicConstraints=CA:FALSE\\n' > "
           "ext.cnf && "
           "openssl x509 -req -in agent.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
           "-extfile ext.cnf -out agent.pem",
           dir);
  char quiet[4200];
  snprintf(quiet, sizeof(quiet), "(%s) >/dev/null 2>&1", cmd);
  if (system(quiet) != 0) {
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    (void)system(cmd);
    skip();
  }
  char cert[128], key[128], ca[128];
  snprintf(cert, sizeof(cert), "%s/agent.pem", dir);
  snprintf(key, sizeof(key), "%s/agent.key", dir);
  snprintf(ca, sizeof(ca), "%s/ca.pem", dir);
  const char *args[] = {
      "--listen", "tls+tcp://127.0.0.1:0", "--tls-cert", cert, "--tls-key", key, "--device", "cpu",
      NULL};
  agent_proc_t p;
  assert_int_equal(agent_proc_start(&p, args), 0);
  assert_true(strncmp(p.url, "tls+tcp://127.0.0.1:", 20) == 0);

  uint8_t *prog;
  size_t prog_len;
  assert_int_equal(ha_exec_bytes(ha_test_program, &prog, &prog_len), 0);
  vmc_conn_opts_t o;
  memset(&o, 0, sizeof(o));
  o.tls_ca_file = ca;
  o.connect_timeout_ms = 10000;
  for (int round = 0; round < 2; round++) {
    vmc_conn_t *c = NULL;
    ASSERT_OK(vmc_connect(p.url, &o, &c));
    vmc_exec_t ex;
    ASSERT_OK(vmc_upload_memory(c, prog, prog_len, NULL, NULL, &ex, NULL));
    vmc_device_spec_t d = {"cpu", NULL};
    vmc_vm_t vm;
    ASSERT_OK(vmc_create_vm(c, ex, &d, 1, NULL, &vm));
    int64_t n = 5;
    vmc_tensor_t x, y;
    ASSERT_OK(vmc_tensor_alloc(VM_F32, 1, &n, &x));
    for (int i = 0; i < 5; i++) ((float *)x.data)[i] = (float)i * 1.5f;
    ASSERT_OK(vmc_set_input(c, vm, "ident", 0, &x));
    ASSERT_OK(vmc_invoke(c, vm, "ident", 0, NULL));
    ASSERT_OK(vmc_get_output(c, vm, "ident", NULL, 0, &y));
    assert_int_equal(y.nbytes, x.nbytes);
    assert_memory_equal(y.data, x.data, x.nbytes);
    vmc_tensor_free(&x);
    vmc_tensor_free(&y);
    ASSERT_OK(vmc_ping(c, NULL));
    vmc_close(c);
    if (round == 1) break;

    /* This certificate matches its pin but is signed by the CA: it cannot be
     * its own trust anchor, and the client says to use --tls-ca. */
    char fp_cmd[600], pin[200] = "sha256:";
    snprintf(fp_cmd, sizeof(fp_cmd), "openssl x509 -noout -fingerprint -sha256 -in %s", cert);
    FILE *fp = popen(fp_cmd, "r");
    assert_non_null(fp);
    char line[200];
    assert_non_null(fgets(line, sizeof(line), fp));
    pclose(fp);
    assert_non_null(strchr(line, '='));
    strncat(pin, strchr(line, '=') + 1, 100);
    pin[strcspn(pin, "\r\n")] = '\0';
    vmc_conn_opts_t pinned = o;
    pinned.tls_ca_file = NULL;
    pinned.tls_pin = pin;
    ASSERT_STATUS(vmc_connect(p.url, &pinned, &c), VM_FAILED_PRECONDITION,
                  "matches --tls-pin but is not self-signed");

    /* A plaintext client on the TLS port: a clean, bounded failure. */
    char plain[300];
    snprintf(plain, sizeof(plain), "tcp://%s", p.url + strlen("tls+tcp://"));
    vmc_conn_opts_t po;
    memset(&po, 0, sizeof(po));
    po.connect_timeout_ms = 2000;
    vmc_conn_t *pc = NULL;
    double t0 = ha_now_s();
    vm_status_t st = vmc_connect(plain, &po, &pc);
    double took = ha_now_s() - t0;
    assert_non_null(st);
    vm_code_t code = vm_status_code(st);
    if (code != VM_UNAVAILABLE && code != VM_DEADLINE_EXCEEDED)
      fail_msg("plaintext client: %s: %s", vm_code_name(code), vm_status_message(st));
    print_message("plaintext client on the TLS port: %s after %.2f s: %s\n", vm_code_name(code),
                  took, vm_status_message(st));
    vm_status_free(st);
    assert_null(pc);
    assert_true(took < 10.0);
    /* raw nng as well: the dial does not yield a working connection */
    hw_conn_t raw;
    if (hw_open(&raw, plain) == 0) {
      raw.timeout_ms = 2000;
      hw_reply_t r;
      assert_int_not_equal(ha_ping(&raw, &r), 0);
      hw_reply_free(&r);
      hw_close(&raw);
    }
  }
  free(prog);
  assert_int_equal(agent_proc_stop(&p), 0);
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_token_brute_force_is_blocked),
      cmocka_unit_test(test_rate_limit_window_in_process),
      cmocka_unit_test(test_tls_with_ca),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
