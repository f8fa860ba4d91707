/* Global options of vmclient and small parsers shared by the commands. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

const cli_opt_t cli_global_opts[] = {
    {"host", 0, "URL", CLI_GOPT_HOST,
     "the agent: tcp://HOST:PORT, tls+tcp://HOST:PORT, ipc:///PATH\n"
     "or HOST:PORT [$VMCLIENT_HOST, else " CLI_DEFAULT_HOST "]"},
    {"token", 0, "T", CLI_GOPT_TOKEN, "token of an agent started with --token-file"},
    {"token-file", 0, "F", CLI_GOPT_TOKEN_FILE, "read the token from the first line of F"},
    {"timeout", 0, "MS", CLI_GOPT_TIMEOUT,
     "limit of every request, invoke, bench and profile included\n"
     "[30000 per request; invoke/bench/profile unlimited]"},
    {"connect-timeout", 0, "MS", CLI_GOPT_CONNECT_TIMEOUT,
     "limit of connecting and the Hello [5000]"},
    {"tls-ca", 0, "F", CLI_GOPT_TLS_CA,
     "PEM CA bundle that signed a tls+tcp:// agent's certificate\n[the system CA store]"},
    {"tls-pin", 0, "sha256:HEX", CLI_GOPT_TLS_PIN,
     "trust exactly the (self-signed) agent certificate with this\nSHA-256 fingerprint instead"},
    {"tls-insecure", 0, NULL, CLI_GOPT_TLS_INSECURE,
     "do not verify the agent's certificate (anyone on the path\ncan read the token and the data)"},
    {"tls-cert", 0, "F", CLI_GOPT_TLS_CERT, "client certificate for tls+tcp://"},
    {"tls-key", 0, "F", CLI_GOPT_TLS_KEY, "the key of --tls-cert"},
    {"json", 0, NULL, CLI_GOPT_JSON, "print one JSON object on standard output"},
    {"quiet", 'q', NULL, CLI_GOPT_QUIET, "no progress bars, notes or human-readable report"},
    {0},
};

int cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
  if (!s || !*s) return -1;
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || *end || v < lo || v > hi) return -1;
  *out = (int64_t)v;
  return 0;
}

int cli_parse_size(const char *s, uint64_t *out) {
  if (!s || !*s || *s == '-' || *s == '+') return -1;
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s) return -1;
  unsigned shift = 0;
  if (*end == 'K' || *end == 'k')
    shift = 10;
  else if (*end == 'M' || *end == 'm')
    shift = 20;
  else if (*end == 'G' || *end == 'g')
    shift = 30;
  if (shift) end++;
  if (*end) return -1;
  if (shift && v > (UINT64_MAX >> shift)) return -1;
  *out = (uint64_t)v << shift;
  return 0;
}

int cli_parse_nonneg_double(const char *s, double *out) {
  if (!s || !*s) return -1;
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || *end || !isfinite(v) || v < 0) return -1;
  *out = v;
  return 0;
}

double cli_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int parse_ms(const char *cmd, const char *name, const char *val, int32_t *out) {
  int64_t v;
  if (cli_parse_i64(val, 1, INT32_MAX, &v) != 0)
    return cli_usage_error(cmd, "--%s needs a number of milliseconds from 1 to %d, not '%.64s'",
                           name, INT32_MAX, val);
  *out = (int32_t)v;
  return CLI_EXIT_OK;
}

static int nonempty(const char *cmd, const char *name, const char *val, const char **out) {
  if (!*val) return cli_usage_error(cmd, "--%s needs a non-empty value", name);
  *out = val;
  return CLI_EXIT_OK;
}

int cli_global_apply(cli_global_t *g, const char *cmd, int id, const char *val) {
  switch (id) {
    case CLI_GOPT_HOST: return nonempty(cmd, "host", val, &g->host);
    case CLI_GOPT_TOKEN: g->token = val; return CLI_EXIT_OK;
    case CLI_GOPT_TOKEN_FILE: return nonempty(cmd, "token-file", val, &g->token_file);
    case CLI_GOPT_TIMEOUT: return parse_ms(cmd, "timeout", val, &g->timeout_ms);
    case CLI_GOPT_CONNECT_TIMEOUT:
      return parse_ms(cmd, "connect-timeout", val, &g->connect_timeout_ms);
    case CLI_GOPT_TLS_CA: return nonempty(cmd, "tls-ca", val, &g->tls_ca);
    case CLI_GOPT_TLS_CERT: return nonempty(cmd, "tls-cert", val, &g->tls_cert);
    case CLI_GOPT_TLS_KEY: return nonempty(cmd, "tls-key", val, &g->tls_key);
    case CLI_GOPT_TLS_PIN: return nonempty(cmd, "tls-pin", val, &g->tls_pin);
    case CLI_GOPT_TLS_INSECURE: g->tls_insecure = 1; return CLI_EXIT_OK;
    case CLI_GOPT_JSON: g->json = 1; return CLI_EXIT_OK;
    case CLI_GOPT_QUIET: g->quiet = 1; return CLI_EXIT_OK;
    default:
      cli_error(cmd, "internal error: unknown global option %d", id);
      return CLI_EXIT_INTERNAL;
  }
}
