/* Shared machinery of the vmclient commands that talk to an agent:
 * connecting, errors and progress bars (the model options and VM are in
 * cli_model.c, the outputs in cli_outputs.c). */
#include "cli_net.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---------------------------------------------------------------------------
 * Connecting and errors
 */

int cli_remote_exit_code(vm_status_t st) {
  return vm_status_code(st) == VM_UNAVAILABLE ? CLI_EXIT_CONNECT : CLI_EXIT_REMOTE;
}

int cli_remote_error(const char *cmd, const char *what, vm_status_t st) {
  int rc = cli_remote_exit_code(st);
  cli_error(cmd, "%s: %s: %s", what, vm_code_name(vm_status_code(st)), vm_status_message(st));
  vm_status_free(st);
  return rc;
}

/* Reads the first line of a token file into a malloc'ed string. */
static int read_token_file(const char *cmd, const char *path, char **out) {
  uint8_t *data = NULL;
  size_t n = 0;
  vm_status_t st = vm_read_file(path, 65536, &data, &n);
  if (st) {
    int rc = vm_status_code(st) == VM_RESOURCE_EXHAUSTED ? CLI_EXIT_INPUT : CLI_EXIT_IO;
    cli_error(cmd, "--token-file: %s", vm_status_message(st));
    vm_status_free(st);
    return rc;
  }
  size_t len = 0;
  while (len < n && data[len] != '\n' && data[len] != '\r' && data[len] != '\0') len++;
  char *tok = malloc(len + 1);
  if (!tok) {
    free(data);
    cli_error(cmd, "out of memory");
    return CLI_EXIT_INTERNAL;
  }
  memcpy(tok, data, len);
  tok[len] = '\0';
  free(data);
  if (len == 0) {
    free(tok);
    cli_error(cmd, "--token-file: the first line of '%s' is empty", path);
    return CLI_EXIT_INPUT;
  }
  *out = tok;
  return CLI_EXIT_OK;
}

int cli_connect(const cli_global_t *g, const char *cmd, vmc_conn_t **out_conn) {
  *out_conn = NULL;
  const char *host = g->host;
  if (!host || !*host) host = getenv("VMCLIENT_HOST");
  if (!host || !*host) host = CLI_DEFAULT_HOST;
  /* HOST:PORT is short for tcp://HOST:PORT. */
  char url[512];
  if (strstr(host, "://"))
    snprintf(url, sizeof(url), "%s", host);
  else
    snprintf(url, sizeof(url), "tcp://%s", host);
  if (strlen(host) >= sizeof(url) - 8) return cli_usage_error(cmd, "--host URL is too long");

  char *token_owned = NULL;
  if (g->token_file) {
    if (g->token) return cli_usage_error(cmd, "give --token or --token-file, not both");
    int rc = read_token_file(cmd, g->token_file, &token_owned);
    if (rc) return rc;
  }
  vmc_conn_opts_t o;
  memset(&o, 0, sizeof(o));
  o.token = token_owned ? token_owned : g->token;
  o.tls_ca_file = g->tls_ca;
  o.tls_cert = g->tls_cert;
  o.tls_key = g->tls_key;
  o.tls_pin = g->tls_pin;
  o.tls_insecure = g->tls_insecure;
  if (g->tls_insecure && !g->tls_ca && !g->tls_pin && strncmp(url, "tls+", 4) == 0)
    cli_error(cmd,
              "warning: --tls-insecure: the agent's certificate is not verified; anyone on the "
              "path can read the token and the data (use --tls-ca or --tls-pin)");
  o.connect_timeout_ms = g->connect_timeout_ms;
  o.request_timeout_ms = g->timeout_ms;
  o.long_timeout_ms = g->timeout_ms;
  o.client_name = "vmclient/" VMRPC_VERSION;
  vm_status_t st = vmc_connect(url, &o, out_conn);
  free(token_owned);
  if (!st) return CLI_EXIT_OK;
  int rc;
  switch (vm_status_code(st)) {
    case VM_UNAVAILABLE:
    case VM_DEADLINE_EXCEEDED: rc = CLI_EXIT_CONNECT; break;
    case VM_INVALID_ARGUMENT: rc = CLI_EXIT_USAGE; break;
    case VM_NOT_FOUND:
    case VM_PERMISSION_DENIED: rc = CLI_EXIT_IO; break; /* TLS files */
    default: rc = CLI_EXIT_REMOTE; break;               /* UNAUTHENTICATED, version, full */
  }
  cli_error(cmd, "connecting to %s: %s: %s", url, vm_code_name(vm_status_code(st)),
            vm_status_message(st));
  vm_status_free(st);
  return rc;
}

/* ---------------------------------------------------------------------------
 * Progress bars
 */

static void progress_cb(uint64_t done, uint64_t total, void *user) {
  cli_progress_t *p = user;
  if (!total) return;
  int permille = (int)(done * 1000 / total);
  if (p->shown && permille - p->last_permille < 5 && done != total) return;
  p->last_permille = permille;
  p->shown = 1;
  double el = cli_now_s() - p->t0;
  double rate = el > 0 ? (double)done / el : 0;
  char bar[31];
  int fill = permille * 30 / 1000;
  for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
  bar[30] = '\0';
  fprintf(stderr, "\r%-8s [%s] %5.1f%%  %.1f/%.1f MiB  %.1f MiB/s ", p->label, bar, permille / 10.0,
          (double)done / 1048576.0, (double)total / 1048576.0, rate / 1048576.0);
  fflush(stderr);
}

vmc_progress_fn cli_progress_for(const cli_global_t *g, cli_progress_t *p, const char *label,
                                 uint64_t total) {
  memset(p, 0, sizeof(*p));
  p->label = label;
  p->t0 = cli_now_s();
  if (g->quiet || total <= CLI_PROGRESS_MIN_BYTES || !isatty(STDERR_FILENO)) return NULL;
  return progress_cb;
}

void cli_progress_done(cli_progress_t *p) {
  if (p->shown) {
    fputc('\n', stderr);
    fflush(stderr);
  }
  p->shown = 0;
}
