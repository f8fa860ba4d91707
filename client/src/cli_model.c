/* The model options every model command shares (--func, --device,
 * --memory-cfg, --exec-mode, --input) and the VM they describe: loading
 * the executable, reading or making the inputs, the fused run. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_net.h"

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

/* 1 when the executable holds float16 tensors (constants, or tensors it
 * allocates: a DTYPE constant). */
static int uses_float16(const vm_executable_t *e) {
  for (uint32_t i = 0; e && i < e->num_constants; i++) {
    const vm_constant_t *k = &e->constants[i];
    if ((k->kind == VM_CONST_DTYPE && vm_dtype_equal(k->u.dtype, VM_F16)) ||
        (k->kind == VM_CONST_TENSOR && vm_dtype_equal(k->u.tensor.dtype, VM_F16)))
      return 1;
  }
  return 0;
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
  /* float16 without cl_khr_fp16: the cl.* kernels keep half storage and
   * compute in float32 (docs/onnx.md, "float16") */
  if (m->device && strncmp(m->device->selector, "opencl", 6) == 0 && !m->device->supports_fp16 &&
      uses_float16(m->exec))
    fprintf(stderr,
            "vmclient: %s: note: %s has no cl_khr_fp16: float16 tensors stay half in memory and "
            "are computed in float32\n",
            cmd, m->device->selector);
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
