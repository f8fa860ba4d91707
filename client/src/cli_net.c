/* Shared machinery of the vmclient commands that talk to an agent. */
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

/* ---------------------------------------------------------------------------
 * Model options
 */

const cli_opt_t cli_model_options[] = {
    {"func", 'f', "NAME", CLI_MOPT_FUNC, "the function to run [main]"},
    {"device", 'd', "SEL", CLI_MOPT_DEVICE,
     "a device of the agent (vmclient info lists them: cpu,\n"
     "opencl:0, ...); repeatable, or a comma-separated list;\n"
     "the first is where inputs go [the agent's first device]"},
    {"memory-cfg", 0, "CFG", CLI_MOPT_MEMCFG,
     "allocators: pooled or naive for every device, or\n"
     "SEL=TYPE,SEL=TYPE,... per device (without --device the\n"
     "listed devices are used) [pooled]"},
    {"exec-mode", 0, "MODE", CLI_MOPT_EXECMODE, "bytecode or compiled [bytecode]"},
    {"input", 'i', "P=FILE.npy", CLI_MOPT_INPUT,
     "set parameter P (a name, or an index from 0) from an\n"
     ".npy file; repeatable, as many as the function takes.\n"
     "Input files may also follow MODEL.vmx positionally,\n"
     "in parameter order"},
    {0},
};

static int valid_allocator(const char *s) {
  return strcmp(s, "pooled") == 0 || strcmp(s, "naive") == 0;
}

static int add_device(cli_model_opts_t *m, const char *cmd, const char *sel) {
  if (!*sel) return cli_usage_error(cmd, "--device needs a device selector (e.g. opencl:0)");
  for (uint32_t i = 0; i < m->num_devices; i++)
    if (strcmp(m->devices[i], sel) == 0)
      return cli_usage_error(cmd, "device '%.64s' given twice", sel);
  if (m->num_devices >= CLI_MAX_DEVICES)
    return cli_usage_error(cmd, "at most %d devices", CLI_MAX_DEVICES);
  m->devices[m->num_devices++] = sel;
  return CLI_EXIT_OK;
}

/* A new input spec at the end of m's list (which grows as needed: a
 * model takes as many inputs as its function has parameters); NULL after
 * printing the error when out of memory. */
static cli_input_spec_t *add_input(cli_model_opts_t *m, const char *cmd) {
  if (m->num_inputs == m->cap_inputs) {
    uint32_t cap = m->cap_inputs ? 2 * m->cap_inputs : 16;
    cli_input_spec_t *p = cap > m->cap_inputs ? realloc(m->inputs, cap * sizeof(*p)) : NULL;
    if (!p) {
      cli_error(cmd, "out of memory for the inputs");
      return NULL;
    }
    m->inputs = p;
    m->cap_inputs = cap;
  }
  return &m->inputs[m->num_inputs++];
}

void cli_model_opts_free(cli_model_opts_t *m) {
  free(m->inputs);
  m->inputs = NULL;
  m->num_inputs = m->cap_inputs = 0;
}

/* Splits s at commas in place into items (s is argv memory, which we may
 * modify). */
static int split_commas(char *s, char **items, int max) {
  int n = 0;
  for (char *p = s;;) {
    char *c = strchr(p, ',');
    if (c) *c = '\0';
    if (n >= max) return -1;
    items[n++] = p;
    if (!c) break;
    p = c + 1;
  }
  return n;
}

int cli_model_opt(cli_model_opts_t *m, const char *cmd, int id, const char *val) {
  switch (id) {
    case CLI_MOPT_FUNC:
      if (!*val) return cli_usage_error(cmd, "--func needs a function name");
      m->func = val;
      return CLI_EXIT_OK;
    case CLI_MOPT_DEVICE: {
      char *items[CLI_MAX_DEVICES + 1];
      int n = split_commas((char *)val, items, CLI_MAX_DEVICES + 1);
      if (n < 0) return cli_usage_error(cmd, "at most %d devices", CLI_MAX_DEVICES);
      for (int i = 0; i < n; i++) {
        int rc = add_device(m, cmd, items[i]);
        if (rc) return rc;
      }
      return CLI_EXIT_OK;
    }
    case CLI_MOPT_MEMCFG:
      if (m->memory_cfg) return cli_usage_error(cmd, "--memory-cfg given twice");
      m->memory_cfg = val;
      return CLI_EXIT_OK;
    case CLI_MOPT_EXECMODE:
      if (strcmp(val, "bytecode") != 0 && strcmp(val, "compiled") != 0)
        return cli_usage_error(cmd, "--exec-mode must be bytecode or compiled, not '%.64s'", val);
      m->exec_mode = val;
      return CLI_EXIT_OK;
    case CLI_MOPT_INPUT: {
      const char *eq = strchr(val, '=');
      if (!eq || eq == val || !eq[1])
        return cli_usage_error(
            cmd, "--input needs PARAM=FILE.npy (a name or an index), not '%.64s'", val);
      cli_input_spec_t *s = add_input(m, cmd);
      if (!s) return CLI_EXIT_INTERNAL;
      *(char *)eq = '\0';
      int64_t idx;
      if (cli_parse_i64(val, 0, UINT32_MAX - 1, &idx) == 0) {
        s->name = NULL;
        s->index = idx;
      } else {
        s->name = val;
        s->index = -1;
      }
      s->path = eq + 1;
      return CLI_EXIT_OK;
    }
    default: cli_error(cmd, "internal error: model option %d", id); return CLI_EXIT_INTERNAL;
  }
}

int cli_model_positional(cli_model_opts_t *m, const char *cmd, const char *val) {
  if (!*val) return cli_usage_error(cmd, "an empty path was given");
  if (!m->model) {
    m->model = val;
    return CLI_EXIT_OK;
  }
  cli_input_spec_t *s = add_input(m, cmd);
  if (!s) return CLI_EXIT_INTERNAL;
  s->name = NULL;
  s->index = m->num_positional_inputs++;
  s->path = val;
  return CLI_EXIT_OK;
}

/* Resolves --memory-cfg into per-device allocators (and devices when none
 * were given). */
static int apply_memory_cfg(cli_model_opts_t *o, const char *cmd) {
  if (!o->memory_cfg) return CLI_EXIT_OK;
  if (!strchr(o->memory_cfg, '=')) {
    if (!valid_allocator(o->memory_cfg))
      return cli_usage_error(cmd, "--memory-cfg must be pooled, naive or SEL=TYPE,..., not '%.64s'",
                             o->memory_cfg);
    for (uint32_t i = 0; i < CLI_MAX_DEVICES; i++) o->allocators[i] = o->memory_cfg;
    return CLI_EXIT_OK;
  }
  char *items[CLI_MAX_DEVICES + 1];
  int n = split_commas((char *)o->memory_cfg, items, CLI_MAX_DEVICES + 1);
  if (n < 0) return cli_usage_error(cmd, "--memory-cfg: at most %d devices", CLI_MAX_DEVICES);
  int had_devices = o->num_devices > 0;
  for (int i = 0; i < n; i++) {
    char *eq = strchr(items[i], '=');
    if (!eq || eq == items[i])
      return cli_usage_error(cmd, "--memory-cfg: '%.64s' is not SEL=TYPE", items[i]);
    *eq = '\0';
    const char *sel = items[i], *type = eq + 1;
    if (!valid_allocator(type))
      return cli_usage_error(cmd,
                             "--memory-cfg: allocator of '%.64s' must be pooled or naive, not "
                             "'%.64s'",
                             sel, type);
    uint32_t k = 0;
    while (k < o->num_devices && strcmp(o->devices[k], sel) != 0) k++;
    if (k == o->num_devices) {
      if (had_devices)
        return cli_usage_error(cmd, "--memory-cfg names device '%.64s', which --device does not",
                               sel);
      int rc = add_device(o, cmd, sel);
      if (rc) return rc;
    }
    if (o->allocators[k]) return cli_usage_error(cmd, "--memory-cfg names '%.64s' twice", sel);
    o->allocators[k] = type;
  }
  return CLI_EXIT_OK;
}

/* ---------------------------------------------------------------------------
 * The model's VM
 */

static void param_type(const vm_param_t *p, char *buf, size_t n) {
  if (!p->has_type) {
    snprintf(buf, n, "any");
    return;
  }
  char dt[32];
  vm_dtype_str(p->dtype, dt, sizeof(dt));
  if (p->ndim < 0) {
    snprintf(buf, n, "%s[*]", dt);
    return;
  }
  size_t k = (size_t)snprintf(buf, n, "%s[", dt);
  for (int32_t i = 0; i < p->ndim && k < n; i++)
    k += (size_t)(p->shape[i] < 0
                      ? snprintf(buf + k, n - k, "%s?", i ? ", " : "")
                      : snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)p->shape[i]));
  if (k < n) snprintf(buf + k, n - k, "]");
}

/* Deterministic input for a typed, static parameter: uniform [-1, 1) for
 * float32/float64, zeros otherwise. */
static int make_input(const char *cmd, const vm_param_t *p, vmc_tensor_t *out) {
  char ty[256];
  param_type(p, ty, sizeof(ty));
  int fixed = p->has_type && p->ndim >= 0 && p->dtype.lanes == 1;
  for (int32_t i = 0; fixed && i < p->ndim; i++) fixed = p->shape[i] >= 0;
  if (!fixed)
    return cli_usage_error(cmd,
                           "parameter '%s' (%s) has no fixed shape, so no input can be made "
                           "for it: give --input %s=FILE.npy",
                           p->name, ty, p->name);
  vm_status_t st = vmc_tensor_alloc(p->dtype, (uint32_t)p->ndim, p->shape, out);
  if (st) {
    cli_error(cmd, "making an input for '%s' (%s): %s", p->name, ty, vm_status_message(st));
    vm_status_free(st);
    return CLI_EXIT_INTERNAL;
  }
  uint64_t x = 0x9E3779B97F4A7C15ull;
  if (p->dtype.code == VM_DTYPE_FLOAT && (p->dtype.bits == 32 || p->dtype.bits == 64)) {
    uint64_t n = out->nbytes / (p->dtype.bits / 8);
    for (uint64_t i = 0; i < n; i++) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      double v = (double)(x >> 11) / 9007199254740992.0 * 2.0 - 1.0;
      if (p->dtype.bits == 32)
        ((float *)out->data)[i] = (float)v;
      else
        ((double *)out->data)[i] = v;
    }
  }
  return CLI_EXIT_OK;
}

/* Reads the inputs the command line gives into m->inputs, marking each
 * parameter given. Prints and returns the exit code on failure. */
static int read_given_inputs(cli_model_t *m, const char *cmd, const cli_model_opts_t *o,
                             const char *func, uint8_t *given) {
  for (uint32_t i = 0; i < o->num_inputs; i++) {
    const cli_input_spec_t *s = &o->inputs[i];
    int64_t idx = s->index;
    if (s->name) {
      idx = -1;
      for (uint32_t k = 0; k < m->num_params; k++)
        if (strcmp(m->fn->params[k].name, s->name) == 0) idx = k;
      if (idx < 0) {
        char names[512];
        size_t k = 0;
        names[0] = '\0';
        for (uint32_t p = 0; p < m->num_params && k < sizeof(names) - 1; p++)
          k += (size_t)snprintf(names + k, sizeof(names) - k, "%s%s", p ? ", " : "",
                                m->fn->params[p].name);
        return cli_usage_error(cmd, "function '%s' has no parameter '%.64s' (parameters: %s)", func,
                               s->name, names[0] ? names : "none");
      }
    } else if (idx >= (int64_t)m->num_params) {
      return cli_usage_error(cmd, "input '%.128s' is for parameter %lld, but '%s' takes %u",
                             s->path, (long long)idx, func, m->num_params);
    }
    if (given[idx])
      return cli_usage_error(cmd, "parameter %lld ('%s') is given twice", (long long)idx,
                             m->fn->params[idx].name);
    given[idx] = 1;
    vm_status_t st = vmc_npy_read_file(s->path, &m->inputs[idx]);
    if (st) {
      int rc = cli_input_exit_code(st);
      cli_error(cmd, "input '%s': %s", m->fn->params[idx].name, vm_status_message(st));
      vm_status_free(st);
      return rc;
    }
  }
  return CLI_EXIT_OK;
}

int cli_model_load(cli_model_t *m, const char *cmd, cli_model_opts_t *o) {
  memset(m, 0, sizeof(*m));
  m->cmd = cmd;
  m->o = o;
  if (!o->model) return cli_usage_error(cmd, "missing MODEL.vmx");
  int rc = apply_memory_cfg(o, cmd);
  if (rc) return rc;
  vm_limits_t lim = vm_limits_default();
  vm_status_t st;
  if (cli_is_onnx_path(o->model)) {
    /* compiled here, the input shapes taken from the input files */
    size_t n = o->num_inputs ? o->num_inputs : 1;
    const char **names = calloc(n, sizeof(*names)), **paths = calloc(n, sizeof(*paths));
    int64_t *idx = calloc(n, sizeof(*idx));
    rc = names && paths && idx ? CLI_EXIT_OK : CLI_EXIT_INTERNAL;
    if (rc) cli_error(cmd, "out of memory");
    for (uint32_t i = 0; !rc && i < o->num_inputs; i++) {
      names[i] = o->inputs[i].name;
      idx[i] = o->inputs[i].index;
      paths[i] = o->inputs[i].path;
    }
    if (!rc)
      rc = cli_onnx_compile_for_inputs(cmd, o->model, o->num_inputs, names, idx, paths, &m->exec,
                                       &m->bytes, &m->size);
    free(names);
    free(paths);
    free(idx);
    if (rc) return rc;
  } else {
    rc = cli_read_input(cmd, o->model, lim.max_file_bytes, &m->bytes, &m->size);
    if (rc) return rc;
    st = vm_executable_load(m->bytes, m->size, &lim, &m->exec);
    if (st) {
      rc = cli_input_exit_code(st);
      cli_error(cmd, "loading '%s': %s", o->model, vm_status_message(st));
      vm_status_free(st);
      return rc;
    }
  }

  const char *func = o->func ? o->func : "main";
  int64_t fi = vm_executable_find_function(m->exec, func, VM_FUNC_BYTECODE);
  if (fi < 0) {
    char names[512];
    size_t k = 0;
    names[0] = '\0';
    for (uint32_t i = 0; i < m->exec->num_functions && k < sizeof(names) - 1; i++) {
      const vm_function_t *f = &m->exec->functions[i];
      if (f->kind != VM_FUNC_BYTECODE) continue;
      k += (size_t)snprintf(names + k, sizeof(names) - k, "%s%s", k ? ", " : "", f->name);
    }
    return cli_usage_error(cmd, "'%s' has no function '%.64s' (functions: %s)", o->model, func,
                           names[0] ? names : "none");
  }
  m->fn = &m->exec->functions[fi];
  m->num_params = m->fn->num_args;
  size_t np = m->num_params ? m->num_params : 1;
  m->inputs = calloc(np, sizeof(*m->inputs));
  m->input_generated = calloc(np, sizeof(*m->input_generated));
  if (!m->inputs || !m->input_generated) {
    cli_error(cmd, "out of memory for %u inputs", m->num_params);
    return CLI_EXIT_INTERNAL;
  }
  uint8_t *given = calloc(np, 1);
  rc = given ? read_given_inputs(m, cmd, o, func, given) : CLI_EXIT_INTERNAL;
  if (!given) cli_error(cmd, "out of memory for %u inputs", m->num_params);
  for (uint32_t i = 0; !rc && i < m->num_params; i++) {
    if (given[i]) continue;
    const vm_param_t *p = &m->fn->params[i];
    if (o->fill_missing) {
      rc = make_input(cmd, p, &m->inputs[i]);
      m->input_generated[i] = !rc;
      continue;
    }
    char ty[256];
    param_type(p, ty, sizeof(ty));
    rc = cli_usage_error(cmd,
                         "missing input for parameter %u '%s' (%s) of %s: give --input "
                         "%s=FILE.npy",
                         i, p->name, ty, func, p->name);
  }
  free(given);
  return rc;
}

void cli_model_note_generated(const cli_model_t *m, const cli_global_t *g) {
  for (uint32_t i = 0; i < m->num_params && !g->quiet && !g->json; i++)
    if (m->input_generated[i])
      fprintf(stderr, "vmclient: %s: note: no input for '%s': using generated data\n", m->cmd,
              m->fn->params[i].name);
}

/* Connects and picks the VM's devices: as given, else the agent's first. */
static int model_connect(cli_model_t *m, const cli_global_t *g) {
  const char *cmd = m->cmd;
  double t0 = cli_now_s();
  int rc = cli_connect(g, cmd, &m->conn);
  if (rc) return rc;
  m->connect_s = cli_now_s() - t0;
  vmc_info(m->conn, &m->info);

  /* Devices: as given, else the agent's first. */
  const cli_model_opts_t *o = m->o;
  if (o->num_devices == 0 && m->info.num_devices == 0) {
    cli_error(cmd, "the agent at %s serves no device", m->info.url);
    return CLI_EXIT_REMOTE;
  }
  m->num_specs = o->num_devices ? o->num_devices : 1;
  for (uint32_t i = 0; i < m->num_specs; i++) {
    m->specs[i].selector = o->num_devices ? o->devices[i] : m->info.devices[0].selector;
    m->specs[i].allocator = o->allocators[i];
  }
  for (uint32_t i = 0; i < m->info.num_devices; i++)
    if (strcmp(m->info.devices[i].selector, m->specs[0].selector) == 0)
      m->device = &m->info.devices[i];
  return CLI_EXIT_OK;
}

int cli_model_run(cli_model_t *m, const cli_global_t *g, int keep_outputs, vmc_run_result_t *res,
                  double *out_wall_s) {
  memset(res, 0, sizeof(*res));
  int rc = model_connect(m, g);
  if (rc) return rc;
  vmc_value_t *in = calloc(m->num_params ? m->num_params : 1, sizeof(*in));
  if (!in) {
    cli_error(m->cmd, "out of memory for %u inputs", m->num_params);
    return CLI_EXIT_INTERNAL;
  }
  for (uint32_t i = 0; i < m->num_params; i++) {
    in[i].kind = VMC_VALUE_TENSOR;
    in[i].tensor = m->inputs[i];
  }
  vmc_run_opts_t ro;
  memset(&ro, 0, sizeof(ro));
  ro.func = m->o->func ? m->o->func : "main";
  ro.devices = m->specs;
  ro.num_devices = m->num_specs;
  ro.exec_mode = m->o->exec_mode;
  ro.no_inline = !keep_outputs;
  ro.keep_remote = !keep_outputs;
  cli_progress_t pr;
  ro.progress = cli_progress_for(g, &pr, "upload", m->size);
  ro.progress_user = &pr;
  double t0 = cli_now_s();
  vm_status_t st = vmc_run(m->conn, m->bytes, m->size, (vmc_vm_t){0}, in, m->num_params, &ro, res);
  free(in); /* the tensors stay m's */
  cli_progress_done(&pr);
  if (out_wall_s) *out_wall_s = cli_now_s() - t0;
  if (st) {
    char what[160];
    snprintf(what, sizeof(what), "run %s", ro.func);
    return cli_remote_error(m->cmd, what, st);
  }
  m->vm = res->vm;
  m->xid = res->exec;
  m->upload = res->upload;
  vm_sha256_hex(m->upload.sha256, m->sha256_hex);
  return CLI_EXIT_OK;
}

void cli_model_close(cli_model_t *m) {
  vmc_close(m->conn);
  m->conn = NULL;
  for (uint32_t i = 0; m->inputs && i < m->num_params; i++) vmc_tensor_free(&m->inputs[i]);
  free(m->inputs);
  m->inputs = NULL;
  free(m->input_generated);
  m->input_generated = NULL;
  vm_executable_free(m->exec);
  m->exec = NULL;
  free(m->bytes);
  m->bytes = NULL;
}

void cli_model_json(cli_json_t *j, const cli_model_t *m) {
  cli_json_str(j, "model", m->o->model);
  cli_json_str(j, "sha256", m->sha256_hex);
  cli_json_uint(j, "model_bytes", m->size);
  cli_json_str(j, "function", m->o->func ? m->o->func : "main");
  cli_json_str(j, "exec_mode", m->o->exec_mode ? m->o->exec_mode : "bytecode");
  cli_json_arr(j, "inputs");
  for (uint32_t i = 0; i < m->num_params; i++) {
    cli_json_obj(j, NULL);
    cli_json_str(j, "name", m->fn->params[i].name);
    cli_tensor_json(j, &m->inputs[i]);
    cli_json_bool(j, "generated", m->input_generated[i]);
    cli_json_obj_end(j);
  }
  cli_json_arr_end(j);
  if (!m->conn) return;
  cli_json_obj(j, "agent");
  cli_json_str(j, "url", m->info.url);
  cli_json_str(j, "version", m->info.agent_version);
  cli_json_uint(j, "protocol_major", m->info.protocol_major);
  cli_json_uint(j, "protocol_minor", m->info.protocol_minor);
  cli_json_obj_end(j);
  cli_json_arr(j, "devices");
  for (uint32_t i = 0; i < m->num_specs; i++) {
    cli_json_obj(j, NULL);
    cli_json_str(j, "selector", m->specs[i].selector);
    cli_json_str(j, "allocator", m->specs[i].allocator ? m->specs[i].allocator : "pooled");
    for (uint32_t k = 0; k < m->info.num_devices; k++) {
      const vmc_device_info_t *d = &m->info.devices[k];
      if (strcmp(d->selector, m->specs[i].selector) != 0) continue;
      cli_json_str(j, "name", d->name);
      cli_json_str(j, "vendor", d->vendor);
      cli_json_str(j, "version", d->version);
      cli_json_str(j, "driver_version", d->driver_version);
      cli_json_str(j, "platform", d->platform);
      cli_json_uint(j, "compute_units", d->compute_units);
      cli_json_uint(j, "global_mem_bytes", d->global_mem_bytes);
      cli_json_bool(j, "has_device_timer", d->has_device_timer);
    }
    cli_json_obj_end(j);
  }
  cli_json_arr_end(j);
}

/* ---------------------------------------------------------------------------
 * Outputs
 */

static vm_status_t value_to_tensor(vmc_value_t *v, cli_output_t *o) {
  o->kind = v->kind;
  switch (v->kind) {
    case VMC_VALUE_TENSOR:
      o->tensor = v->tensor;
      o->is_tensor = 1;
      memset(&v->tensor, 0, sizeof(v->tensor));
      return VM_STATUS_OK;
    case VMC_VALUE_INT:
    case VMC_VALUE_FLOAT:
    case VMC_VALUE_BOOL: {
      vm_dtype_t dt = v->kind == VMC_VALUE_INT     ? VM_I64
                      : v->kind == VMC_VALUE_FLOAT ? VM_F64
                                                   : VM_BOOL;
      VM_RETURN_IF_ERROR(vmc_tensor_alloc(dt, 0, NULL, &o->tensor));
      if (v->kind == VMC_VALUE_INT)
        memcpy(o->tensor.data, &v->i, 8);
      else if (v->kind == VMC_VALUE_FLOAT)
        memcpy(o->tensor.data, &v->f, 8);
      else
        *(uint8_t *)o->tensor.data = v->b ? 1 : 0;
      o->is_tensor = 1;
      return VM_STATUS_OK;
    }
    case VMC_VALUE_SHAPE: {
      int64_t n = v->shape_ndim;
      VM_RETURN_IF_ERROR(vmc_tensor_alloc(VM_I64, 1, &n, &o->tensor));
      if (n) memcpy(o->tensor.data, v->shape, (size_t)n * 8);
      o->is_tensor = 1;
      return VM_STATUS_OK;
    }
    case VMC_VALUE_STRING:
      o->text = strdup(v->s ? v->s : "");
      return o->text ? VM_STATUS_OK : vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
    default:
      o->text = strdup("none");
      return o->text ? VM_STATUS_OK : vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  }
}

typedef struct fetch_ctx {
  const cli_model_t *m;
  const char *func;
  cli_output_t *outs;
  uint32_t n;
  int rc;
  uint64_t nodes; /* tuple elements walked: bounds round trips to the agent */
} fetch_ctx_t;

/* The name an executable gives output i ("output.I.name" metadata, which
 * ONNX imports carry), or NULL. */
static const char *output_meta_name(const vm_executable_t *e, uint32_t i) {
  char key[48];
  snprintf(key, sizeof(key), "output.%u.name", i);
  for (uint32_t k = 0; e && k < e->num_meta; k++)
    if (strcmp(e->meta[k].key, key) == 0 && e->meta[k].value[0]) return e->meta[k].value;
  return NULL;
}

/* The name of the output at path: the model's own (an ONNX graph's, only
 * characters that are safe in a file name), else the path ("0", "1.0"). */
static const char *leaf_name(const fetch_ctx_t *c, const uint32_t *path, uint32_t depth, char *name,
                             size_t cap) {
  const char *mname = depth <= 1 ? output_meta_name(c->m->exec, depth ? path[0] : 0) : NULL;
  if (mname) {
    size_t k = 0;
    for (; mname[k] && k < cap - 1; k++) {
      char ch = mname[k];
      int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
               ch == '_' || ch == '-';
      name[k] = ok ? ch : '_';
    }
    name[k] = 0;
  } else if (depth == 0) {
    snprintf(name, cap, "0");
  } else {
    size_t k = 0;
    for (uint32_t i = 0; i < depth && k < cap; i++)
      k += (size_t)snprintf(name + k, cap - k, "%s%u", i ? "." : "", path[i]);
  }
  return name;
}

/* Adds the leaf at path with value v (taken over) to the outputs. */
static void leaf_take(fetch_ctx_t *c, const uint32_t *path, uint32_t depth, vmc_value_t *v) {
  if (c->n >= CLI_MAX_OUTPUTS) {
    vmc_value_free(v);
    cli_error(c->m->cmd, "the result has more than %d values", CLI_MAX_OUTPUTS);
    c->rc = CLI_EXIT_REMOTE;
    return;
  }
  cli_output_t *o = &c->outs[c->n];
  memset(o, 0, sizeof(*o));
  leaf_name(c, path, depth, o->name, sizeof(o->name));
  c->n++;
  vm_status_t st = value_to_tensor(v, o);
  vmc_value_free(v);
  if (st) {
    cli_error(c->m->cmd, "%s", vm_status_message(st));
    vm_status_free(st);
    c->rc = CLI_EXIT_INTERNAL;
  }
}

static void fetch_rec(fetch_ctx_t *c, uint32_t *path, uint32_t depth) {
  if (c->rc) return;
  int64_t arity = -1;
  vm_status_t st = vmc_get_output_arity(c->m->conn, c->m->vm, c->func, path, depth, &arity);
  if (st) {
    c->rc = cli_remote_error(c->m->cmd, "get output arity", st);
    return;
  }
  if (arity >= 0) {
    if (depth >= CLI_MAX_OUTPUT_DEPTH) {
      cli_error(c->m->cmd, "the result is nested deeper than %d tuples", CLI_MAX_OUTPUT_DEPTH);
      c->rc = CLI_EXIT_REMOTE;
      return;
    }
    /* The arity comes from the agent: a result of empty tuples has no
     * values to count, so the walk itself is bounded. */
    if ((uint64_t)arity > 4u * CLI_MAX_OUTPUTS - c->nodes) {
      cli_error(c->m->cmd, "the result has more than %d values", CLI_MAX_OUTPUTS);
      c->rc = CLI_EXIT_REMOTE;
      return;
    }
    c->nodes += (uint64_t)arity;
    for (int64_t i = 0; i < arity && !c->rc; i++) {
      path[depth] = (uint32_t)i;
      fetch_rec(c, path, depth + 1);
    }
    return;
  }
  if (c->n >= CLI_MAX_OUTPUTS) {
    cli_error(c->m->cmd, "the result has more than %d values", CLI_MAX_OUTPUTS);
    c->rc = CLI_EXIT_REMOTE;
    return;
  }
  vmc_value_t v;
  memset(&v, 0, sizeof(v));
  st = vmc_get_output_value(c->m->conn, c->m->vm, c->func, path, depth, &v);
  if (st) {
    char what[96];
    snprintf(what, sizeof(what), "get output %s",
             leaf_name(c, path, depth, c->outs[c->n].name, sizeof(c->outs[c->n].name)));
    c->rc = cli_remote_error(c->m->cmd, what, st);
    return;
  }
  leaf_take(c, path, depth, &v);
}

int cli_outputs_from_run(const cli_model_t *m, vmc_run_result_t *res, cli_output_t **out,
                         uint32_t *out_n) {
  *out = NULL;
  *out_n = 0;
  fetch_ctx_t c = {m, m->o->func ? m->o->func : "main", NULL, 0, 0, 0};
  c.outs = calloc(CLI_MAX_OUTPUTS, sizeof(cli_output_t));
  if (!c.outs) {
    cli_error(m->cmd, "out of memory");
    return CLI_EXIT_INTERNAL;
  }
  uint32_t path[CLI_MAX_OUTPUT_DEPTH + 1] = {0};
  for (uint32_t i = 0; i < res->num_outputs && !c.rc; i++) {
    vmc_run_output_t *ro = &res->outputs[i];
    if (ro->path_len > CLI_MAX_OUTPUT_DEPTH) {
      cli_error(m->cmd, "the result is nested deeper than %d tuples", CLI_MAX_OUTPUT_DEPTH);
      c.rc = CLI_EXIT_REMOTE;
      break;
    }
    memcpy(path, ro->path, ro->path_len * sizeof(uint32_t));
    c.nodes++;
    if (ro->value.kind == VMC_VALUE_TUPLE)
      fetch_rec(&c, path, ro->path_len); /* left for the client to walk */
    else
      leaf_take(&c, path, ro->path_len, &ro->value);
  }
  if (c.rc) {
    cli_outputs_free(c.outs, c.n);
    return c.rc;
  }
  *out = c.outs;
  *out_n = c.n;
  return CLI_EXIT_OK;
}

void cli_outputs_free(cli_output_t *o, uint32_t n) {
  if (!o) return;
  for (uint32_t i = 0; i < n; i++) {
    vmc_tensor_free(&o[i].tensor);
    free(o[i].text);
  }
  free(o);
}

/* ---------------------------------------------------------------------------
 * Elements
 */

uint64_t cli_tensor_count(const vmc_tensor_t *t) {
  size_t b = (t->dtype.bits + 7) / 8;
  return b ? t->nbytes / b : 0;
}

double cli_tensor_elem(const vmc_tensor_t *t, uint64_t i) {
  return vm_dtype_load_f64(t->dtype, t->data, i);
}

const char *cli_tensor_type(const vmc_tensor_t *t, char *buf, size_t n) {
  char dt[32];
  vm_dtype_str(t->dtype, dt, sizeof(dt));
  size_t k = (size_t)snprintf(buf, n, "%s[", dt);
  for (uint32_t i = 0; i < t->ndim && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
  if (k < n) snprintf(buf + k, n - k, "]");
  return buf;
}

void cli_tensor_json(cli_json_t *j, const vmc_tensor_t *t) {
  char dt[32];
  cli_json_str(j, "dtype", vm_dtype_str(t->dtype, dt, sizeof(dt)));
  cli_json_arr(j, "shape");
  for (uint32_t i = 0; i < t->ndim; i++) cli_json_int(j, NULL, t->shape[i]);
  cli_json_arr_end(j);
}

double cli_percentile(const double *sorted, uint32_t n, double p) {
  if (n == 0) return NAN;
  double pos = p / 100.0 * (double)(n - 1);
  uint32_t lo = (uint32_t)floor(pos);
  if (lo >= n - 1) return sorted[n - 1];
  double frac = pos - lo;
  return sorted[lo] + (sorted[lo + 1] - sorted[lo]) * frac;
}
