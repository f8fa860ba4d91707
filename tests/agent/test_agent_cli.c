/* The vmagent command line: --help lists every flag with its default,
 * --version, refused configurations exit 2 with a message (non-loopback
 * without a token, bad values, TLS without certificates), loopback and ipc
 * URLs are accepted, SIGINT/SIGTERM shut down with 0, and tls+tcp:// serves
 * a TLS client. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>

#include "agent_proc.h"
#include "helper_agent.h"
#include "helper_wire.h"

static char g_out[16384];

static void expect_in_output(const char *want) {
  if (!strstr(g_out, want)) fail_msg("output lacks '%s':\n%s", want, g_out);
}

static void test_help_lists_every_flag_with_default(void **state) {
  (void)state;
  const char *args[] = {"--help", NULL};
  assert_int_equal(agent_proc_run(args, g_out, sizeof(g_out), 30), 0);
  static const char *const flags[][2] = {
      {"--listen URL", "[tcp://127.0.0.1:9090]"},
      {"--device SEL", "[every OpenCL device, then cpu]"},
      {"--token-file FILE", "[none]"},
      {"--tls-cert FILE", "[none]"},
      {"--tls-key FILE", "[none]"},
      {"--cache-dir DIR", "[$XDG_CACHE_HOME/vmrpc or ~/.cache/vmrpc]"},
      {"--cache-max-bytes SIZE", "[2G]"},
      {"--max-sessions N", "[64]"},
      {"--session-mem-limit SIZE", "[0]"},
      {"--idle-timeout SECONDS", "[600]"},
      {"--hello-timeout SECONDS", "[10]"},
      {"--max-unauthenticated N", "[64]"},
      {"--write-timeout SECONDS", "[60]"},
      {"--max-message SIZE", "[chunk size + 64K]"},
      {"--chunk-size SIZE", "[1M]"},
      {"--max-executable SIZE", "[1G]"},
      {"--workers N", "[8]"},
      {"--log-level LEVEL", "[info]"},
      {"--insecure", "[off]"},
      {"--version", "print the version"},
      {"--help", "print this help"},
  };
  for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
    const char *at = strstr(g_out, flags[i][0]);
    if (!at) fail_msg("--help lacks %s", flags[i][0]);
    /* The default follows on the flag's own line or the next ones, before
     * the next flag. */
    const char *next = strstr(at + 2, "\n  --");
    const char *def = strstr(at, flags[i][1]);
    if (!def || (next && def > next))
      fail_msg("--help: %s lacks its default %s", flags[i][0], flags[i][1]);
  }
}

static void test_version(void **state) {
  (void)state;
  const char *args[] = {"--version", NULL};
  assert_int_equal(agent_proc_run(args, g_out, sizeof(g_out), 30), 0);
  expect_in_output("vmagent ");
  expect_in_output("protocol 1.2");
}

static void test_non_loopback_without_token_is_refused(void **state) {
  (void)state;
  static const char *const urls[] = {"tcp://0.0.0.0:0",   "tcp://*:0",    "tcp://:0",
                                     "tcp://192.0.2.1:0", "tcp://[::]:0", "tcp://example.com:0"};
  for (size_t i = 0; i < sizeof(urls) / sizeof(urls[0]); i++) {
    const char *args[] = {"--listen", urls[i], "--device", "cpu", NULL};
    int rc = agent_proc_run(args, g_out, sizeof(g_out), 30);
    if (rc != 2) fail_msg("%s: exit %d, expected 2:\n%s", urls[i], rc, g_out);
    expect_in_output("without a token");
    expect_in_output("--token-file");
    expect_in_output("--insecure");
  }
}

static void test_bad_flags_exit_2(void **state) {
  (void)state;
  static const char *const cases[][3] = {
      {"--bogus", NULL, "unknown flag"},
      {"--workers", "0", "--workers 0"},
      {"--workers", "x", "--workers"},
      {"--chunk-size", "1", "--chunk-size"},
      {"--chunk-size", "12Q", "chunk-size"},
      {"--session-mem-limit", "-5", "session-mem-limit"},
      {"--idle-timeout", "-1", "idle-timeout"},
      {"--hello-timeout", "0", "bad value '0' for --hello-timeout"},
      {"--max-unauthenticated", "0", "bad value '0' for --max-unauthenticated"},
      {"--max-unauthenticated", "1001", "bad value '1001' for --max-unauthenticated"},
      {"--write-timeout", "0", "bad value '0' for --write-timeout"},
      {"--max-sessions", "0", "--max-sessions"},
      {"--max-message", "1K", "--max-message"},
      {"--log-level", "loud", "log-level"},
      {"--listen", "tls+tcp://127.0.0.1:0", "--tls-cert and --tls-key"},
      {"--tls-cert", "/nonexistent.pem", "need a tls+tcp:// listen URL"},
      {"--isolate", "process", "bad value 'process' for --isolate"},
      {"--spare-workers", "65", "bad value '65' for --spare-workers"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    const char *args[] = {cases[i][0], cases[i][1], cases[i][1] ? "--device" : NULL, "cpu", NULL};
    int rc = agent_proc_run(args, g_out, sizeof(g_out), 30);
    if (rc != 2) fail_msg("%s %s: exit %d, expected 2:\n%s", cases[i][0], cases[i][1], rc, g_out);
    expect_in_output(cases[i][2]);
  }
  const char *extra[] = {"stray", NULL};
  assert_int_equal(agent_proc_run(extra, g_out, sizeof(g_out), 30), 2);
  expect_in_output("unexpected argument");

  char path[] = "/tmp/vmagent-empty-token-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "  \n", 3), 3);
  close(fd);
  const char *tok[] = {"--token-file", path, NULL};
  assert_int_equal(agent_proc_run(tok, g_out, sizeof(g_out), 30), 2);
  expect_in_output("is empty");
  unlink(path);
  const char *missing[] = {"--token-file", "/nonexistent/token", NULL};
  assert_int_equal(agent_proc_run(missing, g_out, sizeof(g_out), 30), 2);
}

static void test_unknown_device_exits_1(void **state) {
  (void)state;
  const char *args[] = {"--listen", "tcp://127.0.0.1:0", "--device", "opencl:99", NULL};
  assert_int_equal(agent_proc_run(args, g_out, sizeof(g_out), 60), 1);
  expect_in_output("opencl:99");
}

static void test_loopback_and_ipc_accepted_and_signals(void **state) {
  (void)state;
  agent_proc_t p;
  const char *lh[] = {"--listen", "tcp://localhost:0", "--device", "cpu", NULL};
  assert_int_equal(agent_proc_start(&p, lh), 0);
  assert_non_null(strstr(p.url, "tcp://localhost:"));
  assert_null(strstr(p.url, ":0"));
  assert_int_equal(ha_ping_fresh(p.url), 0);
  /* SIGINT is a clean shutdown as well. */
  kill(p.pid, SIGINT);
  assert_int_equal(agent_proc_stop(&p), 0);

  char sock[64];
  snprintf(sock, sizeof(sock), "ipc:///tmp/vmagent-test-%d.sock", (int)getpid());
  const char *ipc[] = {"--listen", sock, "--device", "cpu", NULL};
  assert_int_equal(agent_proc_start(&p, ipc), 0);
  assert_string_equal(p.url, sock);
  assert_int_equal(ha_ping_fresh(p.url), 0);
  assert_int_equal(agent_proc_stop(&p), 0);
  unlink(sock + strlen("ipc://"));
}

static void test_tls(void **state) {
  (void)state;
  if (system("command -v openssl >/dev/null 2>&1") != 0) skip();
  char dir[] = "/tmp/vmagent-tls-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char cmd[1024], cert[256], key[256];
  snprintf(cert, sizeof(cert), "%s/cert.pem", dir);
  snprintf(key, sizeof(key), "%s/key.pem", dir);
  snprintf(cmd, sizeof(cmd),
           "openssl req -x509 -newkey rsa:2048 -nodes -keyout %s -out %s -days 1 "
           "-subj /CN=localhost >/dev/null 2>&1",
           key, cert);
  if (system(cmd) != 0) {
    rmdir(dir);
    skip();
  }
  const char *args[] = {
      "--listen", "tls+tcp://127.0.0.1:0", "--tls-cert", cert, "--tls-key", key, "--device", "cpu",
      NULL};
  agent_proc_t p;
  assert_int_equal(agent_proc_start(&p, args), 0);
  assert_non_null(strstr(p.url, "tls+tcp://127.0.0.1:"));

  /* A TLS client that verifies the agent: its self-signed certificate is
   * the CA, and the host name must match its CN. */
  hw_conn_t c;
  memset(&c, 0, sizeof(c));
  c.next_id = 1;
  c.timeout_ms = 10000;
  assert_int_equal(nng_req0_open(&c.sock), 0);
  nng_dialer d;
  nng_tls_config *tc;
  assert_int_equal(nng_dialer_create(&d, c.sock, p.url), 0);
  assert_int_equal(nng_tls_config_alloc(&tc, NNG_TLS_MODE_CLIENT), 0);
  assert_int_equal(nng_tls_config_ca_file(tc, cert), 0);
  assert_int_equal(nng_tls_config_server_name(tc, "localhost"), 0);
  assert_int_equal(nng_tls_config_auth_mode(tc, NNG_TLS_AUTH_MODE_REQUIRED), 0);
  assert_int_equal(nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, tc), 0);
  assert_int_equal(nng_dialer_start(d, 0), 0);
  hw_reply_t r;
  assert_int_equal(hw_hello(&c, NULL, &r), 0);
  hw_reply_free(&r);
  assert_int_equal(ha_ping(&c, &r), 0);
  hw_reply_free(&r);
  hw_close(&c);
  nng_tls_config_free(tc);
  assert_int_equal(agent_proc_stop(&p), 0);
  unlink(cert);
  unlink(key);
  rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_help_lists_every_flag_with_default),
      cmocka_unit_test(test_version),
      cmocka_unit_test(test_non_loopback_without_token_is_refused),
      cmocka_unit_test(test_bad_flags_exit_2),
      cmocka_unit_test(test_unknown_device_exits_1),
      cmocka_unit_test(test_loopback_and_ipc_accepted_and_signals),
      cmocka_unit_test(test_tls),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
