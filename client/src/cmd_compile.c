/* vmclient compile: ONNX models into executables with the compiler library
 * (compiler/, docs/onnx.md), and the compilation on the fly of .onnx models
 * that run, check, bench and profile accept where a .vmx goes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "vm/executable.h"
#include "vmclient.h"
#include "vmcompiler/onnx.h"

#define MAX_SHAPES 64

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

int cli_cmd_compile(const cli_global_t *gin, int argc, char **argv) {
  const char *cmd = argv[0];
  cli_global_t g = *gin;
  static const cli_opt_t opts[] = {{"output", 'o', 1, OPT_OUT},
                                   {"input-shape", 0, 1, OPT_SHAPE},
                                   {"const", 0, 1, OPT_CONST},
                                   {"fuse-elementwise", 0, 0, OPT_FUSE},
                                   {"json", 0, 0, CLI_GOPT_JSON},
                                   {"quiet", 'q', 0, CLI_GOPT_QUIET},
                                   {0}};
  cli_args_t a = {cmd, argc, argv, 1, 0};
  const char *val, *in = NULL, *out = NULL;
  vmcc_input_shape_t shapes[MAX_SHAPES];
  vmcc_const_binding_t consts[MAX_SHAPES];
  vmcc_tensor_t cvals[MAX_SHAPES];
  const char *cpaths[MAX_SHAPES];
  uint32_t ns = 0, nc = 0;
  int rc = CLI_EXIT_OK, fuse = 0;
  for (;;) {
    int r = cli_next_arg(&a, opts, &val);
    if (r == CLI_ARG_END) break;
    if (r == CLI_ARG_ERROR) return CLI_EXIT_USAGE;
    if (r == CLI_OPT_HELP) {
      cli_print_command_help(cli_find_command(cmd));
      return CLI_EXIT_OK;
    }
    if (r >= CLI_GOPT_BASE) {
      if ((rc = cli_global_apply(&g, cmd, r, val))) return rc;
      continue;
    }
    if (r == OPT_FUSE) {
      fuse = 1;
    } else if (r == OPT_OUT) {
      if (out) return cli_usage_error(cmd, "-o given twice");
      if (!*val) return cli_usage_error(cmd, "-o needs a non-empty path");
      out = val;
    } else if (r == OPT_SHAPE) {
      if (ns >= MAX_SHAPES) return cli_usage_error(cmd, "at most %d --input-shape", MAX_SHAPES);
      if ((rc = parse_shape(cmd, (char *)val, &shapes[ns]))) return rc;
      for (uint32_t i = 0; i < ns; i++)
        if (strcmp(shapes[i].name, shapes[ns].name) == 0)
          return cli_usage_error(cmd, "--input-shape %s given twice", shapes[ns].name);
      ns++;
    } else if (r == OPT_CONST) {
      char *eq = strchr(val, '=');
      if (!eq || eq == val || !eq[1])
        return cli_usage_error(cmd, "--const needs NAME=FILE.npy, not '%.64s'", val);
      if (nc >= MAX_SHAPES) return cli_usage_error(cmd, "at most %d --const", MAX_SHAPES);
      *eq = '\0';
      consts[nc].name = val;
      cpaths[nc] = eq + 1;
      for (uint32_t i = 0; i < nc; i++)
        if (strcmp(consts[i].name, val) == 0)
          return cli_usage_error(cmd, "--const %s given twice", val);
      nc++;
    } else {
      if (in) return cli_usage_error(cmd, "more than one model ('%.64s')", val);
      if (!*val) return cli_usage_error(cmd, "the model path is empty");
      in = val;
    }
  }
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
  memset(cvals, 0, sizeof(cvals));
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
  for (uint32_t i = 0; i < nc; i++) vmcc_tensor_free(&cvals[i]);
  return rc;
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
  vmcc_input_shape_t shapes[MAX_SHAPES];
  uint32_t ns = 0;
  int rc = CLI_EXIT_OK;
  for (uint32_t i = 0; i < n && i < MAX_SHAPES; i++) {
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
  vmcc_onnx_io_free(&io);
  return rc;
}
