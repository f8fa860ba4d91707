/* Local executable tools: asm, disasm, stats FILE. They need no agent, only
 * the vm library's format code (stats without a file asks the agent:
 * cli_agent_stats in cmd_net.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "vm/executable.h"

enum { OPT_OUTPUT = 1 };

const cli_opt_t cli_asm_opts[] = {
    {"output", 'o', "OUT", OPT_OUTPUT,
     "where to write (default: IN with .vmasm replaced by .vmx;\n\"-\" = standard output)"},
    {0},
};

const cli_opt_t cli_disasm_opts[] = {
    {"output", 'o', "OUT", OPT_OUTPUT, "write to OUT atomically instead of standard output"},
    {0},
};

/* The input file and -o of asm, disasm and stats FILE. */
typedef struct in_out {
  const char *cmd, *in, *out;
} in_out_t;

static int in_out_opt(void *ctx, int id, const char *val) {
  in_out_t *io = ctx;
  if (id != OPT_OUTPUT) return cli_usage_error(io->cmd, "internal: option %d", id);
  if (io->out) return cli_usage_error(io->cmd, "-o given twice");
  if (!*val) return cli_usage_error(io->cmd, "-o needs a non-empty path");
  io->out = val;
  return CLI_EXIT_OK;
}

static int in_out_pos(void *ctx, const char *val) {
  in_out_t *io = ctx;
  if (io->in) return cli_usage_error(io->cmd, "more than one input file ('%s')", val);
  if (!*val) return cli_usage_error(io->cmd, "the input path is empty");
  io->in = val;
  return CLI_EXIT_OK;
}

/* Parses "[-o OUT] IN": exactly one positional. Returns 0, or an exit code
 * (with *done set for --help, which exits 0). */
static int parse_in_out(const char *cmd, int argc, char **argv, const char **out_in,
                        const char **out_out, int *done) {
  in_out_t io = {cmd, NULL, NULL};
  cli_global_t g;
  memset(&g, 0, sizeof(g));
  cli_parse_t p = {&g, NULL, in_out_opt, in_out_pos, &io};
  int rc = cli_parse(cli_find_command(cmd), argc, argv, &p);
  *done = rc == CLI_EXIT_OK;
  if (rc >= 0) return rc;
  if (!io.in) return cli_usage_error(cmd, "missing input file");
  *out_in = io.in;
  *out_out = io.out;
  return CLI_EXIT_OK;
}

/* Reads and loads a .vmx file (or stdin). Prints the error and returns its
 * exit code on failure. *out_bytes is kept for callers that hash it. */
static int load_vmx(const char *cmd, const char *path, vm_executable_t **out_exec,
                    uint8_t **out_bytes, size_t *out_size) {
  vm_limits_t lim = vm_limits_default();
  *out_exec = NULL;
  int rc = cli_read_input(cmd, path, lim.max_file_bytes, out_bytes, out_size);
  if (rc) return rc;
  vm_status_t st = vm_executable_load(*out_bytes, *out_size, &lim, out_exec);
  if (st) {
    rc = cli_input_exit_code(st);
    cli_error(cmd, "loading '%s': %s", path, vm_status_message(st));
    vm_status_free(st);
    free(*out_bytes);
    *out_bytes = NULL;
    return rc;
  }
  return CLI_EXIT_OK;
}

/* Reports "NAME: message" for a failed step on an input, frees st and
 * returns its exit code. */
static int input_error(const char *cmd, const char *name, vm_status_t st) {
  int rc = cli_input_exit_code(st);
  cli_error(cmd, "%s: %s", name, vm_status_message(st));
  vm_status_free(st);
  return rc;
}

/* IN.vmasm -> IN.vmx; any other name gets ".vmx" appended. */
static char *default_output(const char *in) {
  size_t n = strlen(in);
  const char *ext = ".vmasm";
  size_t el = strlen(ext);
  if (n > el && strcmp(in + n - el, ext) == 0) n -= el;
  char *out = malloc(n + 5);
  if (!out) return NULL;
  memcpy(out, in, n);
  memcpy(out + n, ".vmx", 5);
  return out;
}

int cli_cmd_asm(const cli_global_t *g, int argc, char **argv) {
  (void)g;
  const char *cmd = "asm", *in = NULL, *out = NULL;
  int done, rc = parse_in_out(cmd, argc, argv, &in, &out, &done);
  if (rc || done) return rc;
  if (strcmp(in, "-") == 0 && !out)
    return cli_usage_error(cmd, "reading standard input needs -o OUT.vmx (or -o - for stdout)");
  if (out && strcmp(out, "-") == 0 && isatty(STDOUT_FILENO))
    return cli_usage_error(cmd, "refusing to write a binary executable to a terminal");

  vm_limits_t lim = vm_limits_default();
  uint8_t *text = NULL, *bytes = NULL;
  size_t text_size, nbytes;
  char *out_owned = NULL;
  vm_executable_t *exec = NULL;
  rc = cli_read_input(cmd, in, lim.max_file_bytes, &text, &text_size);
  if (rc) goto done;
  vm_status_t st = vm_executable_asm((const char *)text, text_size, &lim, &exec);
  if (st) {
    rc = input_error(cmd, strcmp(in, "-") == 0 ? "<stdin>" : in, st);
    goto done;
  }
  st = vm_executable_write(exec, &bytes, &nbytes);
  if (st) {
    rc = CLI_EXIT_INTERNAL;
    cli_error(cmd, "serialising: %s", vm_status_message(st));
    vm_status_free(st);
    goto done;
  }
  if (!out) {
    out = out_owned = default_output(in);
    if (!out) {
      rc = CLI_EXIT_INTERNAL;
      cli_error(cmd, "out of memory");
      goto done;
    }
  }
  rc = cli_write_output(cmd, out, bytes, nbytes);
done:
  free(out_owned);
  free(bytes);
  vm_executable_free(exec);
  free(text);
  return rc;
}

int cli_cmd_disasm(const cli_global_t *g, int argc, char **argv) {
  (void)g;
  const char *cmd = "disasm", *in = NULL, *out = NULL;
  int done, rc = parse_in_out(cmd, argc, argv, &in, &out, &done);
  if (rc || done) return rc;
  vm_executable_t *exec;
  uint8_t *bytes;
  size_t nbytes;
  rc = load_vmx(cmd, in, &exec, &bytes, &nbytes);
  if (rc) return rc;
  char *text = NULL;
  vm_status_t st = vm_executable_disasm(exec, &text);
  rc = st ? input_error(cmd, in, st) : cli_write_output(cmd, out, text, strlen(text));
  free(text);
  free(bytes);
  vm_executable_free(exec);
  return rc;
}

/* stats FILE --json: the same figures as one JSON object. */
static void stats_json(const char *path, const vm_executable_t *e, size_t nbytes, const char *hex) {
  cli_json_t j;
  uint64_t tensor_bytes = 0, kernel_bytes = 0;
  uint32_t packed = 0, bytecode = 0;
  for (uint32_t i = 0; i < e->num_constants; i++)
    if (e->constants[i].kind == VM_CONST_TENSOR) tensor_bytes += e->constants[i].u.tensor.nbytes;
  for (uint32_t i = 0; i < e->num_kernels; i++) kernel_bytes += strlen(e->kernels[i].source);
  for (uint32_t i = 0; i < e->num_functions; i++) {
    if (e->functions[i].kind == VM_FUNC_PACKED)
      packed++;
    else
      bytecode++;
  }
  cli_json_begin(&j);
  cli_json_str(&j, "file", path);
  cli_json_str(&j, "sha256", hex);
  char ver[32];
  snprintf(ver, sizeof(ver), "%u.%u", e->version_major, e->version_minor);
  cli_json_str(&j, "version", ver);
  cli_json_uint(&j, "file_bytes", nbytes);
  cli_json_uint(&j, "packed_functions", packed);
  cli_json_uint(&j, "bytecode_functions", bytecode);
  cli_json_uint(&j, "constants", e->num_constants);
  cli_json_uint(&j, "tensor_bytes", tensor_bytes);
  cli_json_uint(&j, "instructions", e->num_instrs);
  cli_json_uint(&j, "words", e->num_words);
  cli_json_uint(&j, "kernels", e->num_kernels);
  cli_json_uint(&j, "kernel_source_bytes", kernel_bytes);
  cli_json_obj(&j, "metadata");
  for (uint32_t i = 0; i < e->num_meta; i++) cli_json_str(&j, e->meta[i].key, e->meta[i].value);
  cli_json_obj_end(&j);
  cli_json_arr(&j, "functions");
  for (uint32_t i = 0; i < e->num_functions; i++) {
    const vm_function_t *f = &e->functions[i];
    cli_json_obj(&j, NULL);
    cli_json_uint(&j, "index", i);
    cli_json_str(&j, "name", f->name);
    cli_json_str(&j, "kind", f->kind == VM_FUNC_PACKED ? "packed" : "bytecode");
    if (f->kind == VM_FUNC_BYTECODE) {
      cli_json_uint(&j, "args", f->num_args);
      cli_json_uint(&j, "regs", f->num_regs);
      cli_json_uint(&j, "instrs", f->end_instr - f->start_instr);
      cli_json_arr(&j, "params");
      for (uint32_t p = 0; p < f->num_args; p++) cli_json_str(&j, NULL, f->params[p].name);
      cli_json_arr_end(&j);
    }
    cli_json_obj_end(&j);
  }
  cli_json_arr_end(&j);
  cli_json_end(&j);
}

int cli_cmd_stats(const cli_global_t *g0, int argc, char **argv) {
  /* `stats FILE` summarises a file; `stats` alone asks the agent. */
  const char *cmd = "stats", *in = NULL;
  cli_global_t g = *g0;
  in_out_t io = {cmd, NULL, NULL};
  cli_parse_t p = {&g, NULL, NULL, in_out_pos, &io};
  int rc = cli_parse(cli_find_command(cmd), argc, argv, &p);
  if (rc >= 0) return rc;
  in = io.in;
  if (!in) return cli_agent_stats(&g, cmd);
  vm_executable_t *exec;
  uint8_t *bytes;
  size_t nbytes;
  rc = load_vmx(cmd, in, &exec, &bytes, &nbytes);
  if (rc) return rc;
  /* The identity the agent's executable store uses: SHA-256 of the bytes. */
  uint8_t digest[VM_SHA256_BYTES];
  char hex[2 * VM_SHA256_BYTES + 1];
  vm_sha256(bytes, nbytes, digest);
  vm_sha256_hex(digest, hex);
  if (g.json) {
    stats_json(in, exec, nbytes, hex);
    free(bytes);
    vm_executable_free(exec);
    return CLI_EXIT_OK;
  }
  char *text = NULL;
  vm_status_t st = vm_executable_stats(exec, nbytes, &text);
  if (st) {
    rc = input_error(cmd, in, st);
  } else {
    size_t tl = strlen(text);
    char *all = malloc(tl + sizeof(hex) + 32);
    if (!all) {
      cli_error(cmd, "out of memory");
      rc = CLI_EXIT_INTERNAL;
    } else {
      /* The identity first: it is what a user compares with the agent's store. */
      int n = snprintf(all, tl + sizeof(hex) + 32, "sha256:       %s\n%s", hex, text);
      rc = cli_write_output(cmd, NULL, all, (size_t)n);
      free(all);
    }
  }
  free(text);
  free(bytes);
  vm_executable_free(exec);
  return rc;
}
