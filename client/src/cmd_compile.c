/* vmclient compile: ONNX models into executables with the compiler library
 * (compiler/, docs/onnx.md), and the compilation on the fly of .onnx models
 * that run, check, bench and profile accept where a .vmx goes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "vm/executable.h"
#include "vmrpc/vmclient.h"
#include "vmcompiler/onnx.h"

int cli_is_onnx_path(const char *path) {
  size_t n = path ? strlen(path) : 0;
  return n > 5 && strcmp(path + n - 5, ".onnx") == 0;
}

int cli_onnx_compile(const char *cmd, const char *path, const vmcc_onnx_options_t *opts,
                     vm_executable_t **out_exec, vmcc_onnx_report_t *report) {
  vmcc_onnx_report_t local;
  if (!report) report = &local;
  vm_status_t st = vmcc_onnx_compile_file(path, opts, out_exec, report);
  if (!st) {
    if (report->num_warnings)
      fprintf(stderr, "vmclient: %s: compiling '%s': warning: %s%s\n", cmd, path, report->warning,
              report->num_warnings > 1 ? " (and more like it)" : "");
    return CLI_EXIT_OK;
  }
  /* options that do not fit the model are usage errors; the model's own
   * problems (malformed, unsupported) exit 3, unreadable files 4 */
  int rc = vm_status_code(st) == VM_FAILED_PRECONDITION ? CLI_EXIT_USAGE : cli_input_exit_code(st);
  cli_error(cmd, "compiling '%s': %s", path, vm_status_message(st));
  vm_status_free(st);
  return rc;
}

/* "NAME=D0,D1,..." into s (name points into val, which is modified). */
static int parse_shape(const char *cmd, char *val, vmcc_input_shape_t *s) {
  char *eq = strrchr(val, '=');
  if (!eq || eq == val)
    return cli_usage_error(cmd, "--input-shape needs NAME=D0,D1,..., not '%.64s'", val);
  *eq = '\0';
  memset(s, 0, sizeof(*s));
  s->name = val;
  char *p = eq + 1;
  if (!*p) return CLI_EXIT_OK; /* a scalar */
  for (;;) {
    char *c = strchr(p, ',');
    if (c) *c = '\0';
    int64_t d;
    if (s->ndim >= VMCC_MAX_NDIM || cli_parse_i64(p, 0, INT32_MAX, &d) != 0)
      return cli_usage_error(cmd,
                             "--input-shape %s: '%.32s' is not a dim (0 to 2^31-1, at most %d)",
                             s->name, p, VMCC_MAX_NDIM);
    s->dims[s->ndim++] = d;
    if (!c) break;
    p = c + 1;
  }
  return CLI_EXIT_OK;
}

static void json_report(cli_json_t *j, const vmcc_onnx_report_t *r) {
  cli_json_int(j, "opset", r->opset);
  cli_json_uint(j, "nodes", r->num_nodes);
  cli_json_uint(j, "folded_nodes", r->num_folded);
  cli_json_uint(j, "fused_calls", r->num_fused);
  cli_json_obj(j, "ops");
  for (uint32_t i = 0; i < r->num_ops; i++) cli_json_uint(j, r->ops[i].name, r->ops[i].count);
  cli_json_obj_end(j);
  cli_json_uint(j, "constants", r->num_consts);
  cli_json_uint(j, "constants_bytes", r->const_bytes);
  cli_json_obj(j, "memory");
  cli_json_uint(j, "planned_bytes", r->plan.planned_bytes);
  cli_json_uint(j, "unplanned_bytes", r->plan.unplanned_bytes);
  cli_json_uint(j, "live_peak_bytes", r->plan.live_peak_bytes);
  cli_json_uint(j, "storages", r->plan.num_storages);
  cli_json_uint(j, "planned_tensors", r->plan.num_tensors);
  cli_json_uint(j, "output_bytes", r->plan.output_bytes);
  cli_json_obj_end(j);
  cli_json_uint(j, "warnings", r->num_warnings);
  if (r->num_warnings) cli_json_str(j, "warning", r->warning);
}

enum { OPT_OUT = 1, OPT_SHAPE, OPT_CONST, OPT_FUSE };

const cli_opt_t cli_compile_opts[] = {
    {"output", 'o', "OUT", OPT_OUT,
     "where to write (default: MODEL with .onnx replaced\nby .vmx; \"-\" = standard output)"},
    {"input-shape", 0, "NAME=D0,D1,...", OPT_SHAPE,
     "fix the shape of input NAME (required for\ndynamic dims; must agree with static ones);\n"
     "repeatable"},
    {"const", 0, "NAME=FILE.npy", OPT_CONST, "bind input NAME to a constant; repeatable"},
    {"fuse-elementwise", 0, NULL, OPT_FUSE,
     "fuse chains of elementwise nodes into\ncl.elementwise calls (default: one call per node)"},
    {"json", 0, NULL, CLI_GOPT_JSON,
     "print the summary as JSON: ops used, constants and\n"
     "their bytes, planned vs unplanned memory"},
    {"quiet", 'q', NULL, CLI_GOPT_QUIET, "no summary"},
    {0},
};

/* compile's command line. Every --input-shape and --const takes an
 * argument of its own, so arrays of argc entries hold them all. */
typedef struct compile_args {
  const char *in, *out;
  vmcc_input_shape_t *shapes;
  vmcc_const_binding_t *consts;
  vmcc_tensor_t *cvals;
  const char **cpaths;
  uint32_t ns, nc;
  int fuse;
  cli_global_t *g;
} compile_args_t;

static int compile_opt(void *ctx, int id, const char *val) {
  compile_args_t *c = ctx;
  const char *cmd = "compile";
  if (id == CLI_GOPT_JSON || id == CLI_GOPT_QUIET) return cli_global_apply(c->g, cmd, id, val);
  if (id == OPT_FUSE) {
    c->fuse = 1;
  } else if (id == OPT_OUT) {
    if (c->out) return cli_usage_error(cmd, "-o given twice");
    if (!*val) return cli_usage_error(cmd, "-o needs a non-empty path");
    c->out = val;
  } else if (id == OPT_SHAPE) {
    int rc = parse_shape(cmd, (char *)val, &c->shapes[c->ns]);
    if (rc) return rc;
    for (uint32_t i = 0; i < c->ns; i++)
      if (strcmp(c->shapes[i].name, c->shapes[c->ns].name) == 0)
        return cli_usage_error(cmd, "--input-shape %s given twice", c->shapes[c->ns].name);
    c->ns++;
  } else if (id == OPT_CONST) {
    char *eq = strchr(val, '=');
    if (!eq || eq == val || !eq[1])
      return cli_usage_error(cmd, "--const needs NAME=FILE.npy, not '%.64s'", val);
    *eq = '\0';
    for (uint32_t i = 0; i < c->nc; i++)
      if (strcmp(c->consts[i].name, val) == 0)
        return cli_usage_error(cmd, "--const %s given twice", val);
    c->consts[c->nc].name = val;
    c->cpaths[c->nc++] = eq + 1;
  } else {
    return cli_usage_error(cmd, "internal: option %d", id);
  }
  return CLI_EXIT_OK;
}

static int compile_pos(void *ctx, const char *val) {
  compile_args_t *c = ctx;
  if (c->in) return cli_usage_error("compile", "more than one model ('%.64s')", val);
  if (!*val) return cli_usage_error("compile", "the model path is empty");
  c->in = val;
  return CLI_EXIT_OK;
}

static int compile_model(cli_global_t *g, compile_args_t *c);

int cli_cmd_compile(const cli_global_t *gin, int argc, char **argv) {
  cli_global_t g = *gin;
  size_t n = argc > 0 ? (size_t)argc : 1;
  compile_args_t c = {NULL, NULL, calloc(n, sizeof(vmcc_input_shape_t)),
                      calloc(n, sizeof(vmcc_const_binding_t)), calloc(n, sizeof(vmcc_tensor_t)),
                      calloc(n, sizeof(const char *)), 0, 0, 0, &g};
  int rc = -1;
  if (!c.shapes || !c.consts || !c.cvals || !c.cpaths) {
    cli_error("compile", "out of memory");
    rc = CLI_EXIT_INTERNAL;
  }
  cli_parse_t p = {&g, NULL, compile_opt, compile_pos, &c};
  if (rc < 0) rc = cli_parse(cli_find_command("compile"), argc, argv, &p);
  if (rc < 0) rc = compile_model(&g, &c);
  for (uint32_t i = 0; c.cvals && i < c.nc; i++) vmcc_tensor_free(&c.cvals[i]);
  free(c.shapes);
  free(c.consts);
  free(c.cvals);
  free(c.cpaths);
  return rc;
}

static int compile_model(cli_global_t *gp, compile_args_t *c) {
  const char *cmd = "compile";
  cli_global_t g = *gp;
  const char *in = c->in, *out = c->out;
  vmcc_input_shape_t *shapes = c->shapes;
  vmcc_const_binding_t *consts = c->consts;
  vmcc_tensor_t *cvals = c->cvals;
  const char **cpaths = c->cpaths;
  uint32_t ns = c->ns, nc = c->nc;
  int rc, fuse = c->fuse;
  if (!in) return cli_usage_error(cmd, "missing MODEL.onnx");
  if (out && strcmp(out, "-") == 0 && g.json)
    return cli_usage_error(cmd, "--json and -o - both want standard output");
  char outbuf[4096];
  if (!out) {
    size_t n = strlen(in);
    const char *base = cli_is_onnx_path(in) ? in : NULL;
    if (!base || n - 5 + 4 >= sizeof(outbuf))
      return cli_usage_error(cmd, "give -o OUT.vmx (the model's name does not end in .onnx)");
    snprintf(outbuf, sizeof(outbuf), "%.*s.vmx", (int)(n - 5), in);
    out = outbuf;
  }
  for (uint32_t i = 0; i < nc; i++) {
    vmc_tensor_t t;
    vm_status_t st = vmc_npy_read_file(cpaths[i], &t);
    if (st) {
      rc = cli_input_exit_code(st);
      cli_error(cmd, "--const %s: %s", consts[i].name, vm_status_message(st));
      vm_status_free(st);
      goto done;
    }
    cvals[i].dtype = t.dtype;
    cvals[i].ndim = t.ndim > VMCC_MAX_NDIM ? VMCC_MAX_NDIM + 1 : t.ndim;
    for (uint32_t k = 0; k < t.ndim && k < VMCC_MAX_NDIM; k++) cvals[i].shape[k] = t.shape[k];
    cvals[i].nbytes = t.nbytes;
    cvals[i].data = malloc(t.nbytes ? t.nbytes : 1);
    if (cvals[i].data && t.nbytes) memcpy(cvals[i].data, t.data, t.nbytes);
    vmc_tensor_free(&t);
    if (!cvals[i].data) {
      cli_error(cmd, "out of host memory");
      rc = CLI_EXIT_INTERNAL;
      goto done;
    }
    consts[i].value = &cvals[i];
  }
  vmcc_onnx_options_t o;
  memset(&o, 0, sizeof(o));
  o.num_input_shapes = ns;
  o.input_shapes = shapes;
  o.num_consts = nc;
  o.consts = consts;
  o.fuse_elementwise = fuse;
  vm_executable_t *exec = NULL;
  vmcc_onnx_report_t rep;
  rc = cli_onnx_compile(cmd, in, &o, &exec, &rep);
  if (rc) goto done;
  uint8_t *bytes = NULL;
  size_t size = 0;
  vm_status_t st = vm_executable_write(exec, &bytes, &size);
  if (st) {
    cli_error(cmd, "writing the executable: %s", vm_status_message(st));
    vm_status_free(st);
    rc = CLI_EXIT_INTERNAL;
  } else {
    rc = cli_write_output(cmd, out, bytes, size);
  }
  if (!rc && g.json) {
    cli_json_t j;
    cli_json_begin(&j);
    cli_json_str(&j, "model", in);
    cli_json_str(&j, "output", out);
    cli_json_uint(&j, "output_size", size);
    json_report(&j, &rep);
    cli_json_end(&j);
  } else if (!rc && !g.quiet && strcmp(out, "-") != 0) {
    printf("compiled %s -> %s (%zu bytes)\n", in, out, size);
    printf("opset %lld, %u nodes (%u folded at compile time), %u fused elementwise calls\n",
           (long long)rep.opset, rep.num_nodes, rep.num_folded, rep.num_fused);
    printf("ops:");
    for (uint32_t i = 0; i < rep.num_ops; i++)
      printf(" %s x%u%s", rep.ops[i].name, rep.ops[i].count, i + 1 < rep.num_ops ? "," : "");
    printf("\nconstants: %u, %llu bytes\n", rep.num_consts, (unsigned long long)rep.const_bytes);
    printf(
        "memory: planned %llu bytes in %u storage(s) for %u tensors (unplanned %llu, live "
        "peak %llu), outputs %llu\n",
        (unsigned long long)rep.plan.planned_bytes, rep.plan.num_storages, rep.plan.num_tensors,
        (unsigned long long)rep.plan.unplanned_bytes, (unsigned long long)rep.plan.live_peak_bytes,
        (unsigned long long)rep.plan.output_bytes);
  }
  free(bytes);
  vm_executable_free(exec);
done:
  return rc; /* the caller frees the constants */
}

int cli_onnx_compile_for_inputs(const char *cmd, const char *path, uint32_t n,
                                const char *const *names, const int64_t *idx,
                                const char *const *paths, vm_executable_t **out_exec,
                                uint8_t **out_bytes, size_t *out_size) {
  *out_exec = NULL;
  *out_bytes = NULL;
  *out_size = 0;
  vmcc_onnx_io_t io;
  vm_status_t st = vmcc_onnx_read_io(path, &io);
  if (st) {
    int rc = cli_input_exit_code(st);
    cli_error(cmd, "reading '%s': %s", path, vm_status_message(st));
    vm_status_free(st);
    return rc;
  }
  vmcc_input_shape_t *shapes = calloc(n ? n : 1, sizeof(*shapes));
  uint32_t ns = 0;
  int rc = CLI_EXIT_OK;
  if (!shapes) {
    cli_error(cmd, "out of memory");
    rc = CLI_EXIT_INTERNAL;
  }
  for (uint32_t i = 0; !rc && i < n; i++) {
    const char *name = names[i];
    if (!name) {
      if (idx[i] < 0 || idx[i] >= (int64_t)io.num_inputs) {
        rc = cli_usage_error(cmd, "input '%.128s' is for parameter %lld, but the model takes %u",
                             paths[i], (long long)idx[i], io.num_inputs);
        goto done;
      }
      name = io.inputs[idx[i]];
    }
    int known = 0;
    for (uint32_t k = 0; k < io.num_inputs; k++)
      if (strcmp(io.inputs[k], name) == 0) {
        known = 1;
        name = io.inputs[k];
      }
    if (!known) continue; /* cli_model_load names the bad parameter */
    vmc_tensor_t t;
    st = vmc_npy_read_file(paths[i], &t);
    if (st) {
      rc = cli_input_exit_code(st);
      cli_error(cmd, "input '%s': %s", name, vm_status_message(st));
      vm_status_free(st);
      goto done;
    }
    memset(&shapes[ns], 0, sizeof(shapes[ns]));
    shapes[ns].name = name;
    shapes[ns].ndim = t.ndim > VMCC_MAX_NDIM ? VMCC_MAX_NDIM : t.ndim;
    for (uint32_t k = 0; k < shapes[ns].ndim; k++) shapes[ns].dims[k] = t.shape[k];
    vmc_tensor_free(&t);
    ns++;
  }
  if (rc) goto done;
  vmcc_onnx_options_t o;
  memset(&o, 0, sizeof(o));
  o.num_input_shapes = ns;
  o.input_shapes = shapes;
  rc = cli_onnx_compile(cmd, path, &o, out_exec, NULL);
  if (rc) goto done;
  st = vm_executable_write(*out_exec, out_bytes, out_size);
  if (st) {
    cli_error(cmd, "writing the executable: %s", vm_status_message(st));
    vm_status_free(st);
    vm_executable_free(*out_exec);
    *out_exec = NULL;
    rc = CLI_EXIT_INTERNAL;
  }
done:
  free(shapes);
  vmcc_onnx_io_free(&io);
  return rc;
}
