/* Security: TLS with a CA. (Missing, wrong and right tokens themselves:
 * test_agent_hostile.c test_token and test_e2e_ops.c test_token; their
 * brute-force protection: test_security_auth.c; TLS with a self-signed
 * certificate and a wrong CA: test_e2e_ops.c test_tls.)
 *
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
#include "vmrpc/log.h"
#include "vmagent/agent.h"
#include "vmrpc/vmclient.h"
#include "vmproto/wire.h"

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
      cmocka_unit_test(test_tls_with_ca),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
