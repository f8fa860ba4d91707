/* Helpers shared by the vmclient subcommands: messages, option parsing,
 * reading inputs and writing outputs. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cli_net.h"
#include "vm/executable.h"

/* Writes s with control bytes replaced, so a message is always one line. */
static void put_sanitized(FILE *f, const char *s) {
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    fputc(c < 0x20 || c == 0x7f ? '?' : c, f);
  }
}

static void verror(const char *cmd, const char *fmt, va_list ap) {
  char msg[2048];
  vsnprintf(msg, sizeof(msg), fmt, ap);
  fputs("vmclient: ", stderr);
  if (cmd) {
    put_sanitized(stderr, cmd);
    fputs(": ", stderr);
  }
  put_sanitized(stderr, msg);
  fputc('\n', stderr);
  fflush(stderr);
}

void cli_error(const char *cmd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  verror(cmd, fmt, ap);
  va_end(ap);
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (cmd)
    cli_error(cmd, "%s (see 'vmclient %s --help')", msg, cmd);
  else
    cli_error(NULL, "%s (see 'vmclient --help')", msg);
  return CLI_EXIT_USAGE;
}

/* The help's option rows: names and value from column 2, the text from
 * column 25 (after two spaces when the names are longer), continuation
 * lines indented to it. */
#define HELP_COL 25

static void print_opt(FILE *f, const cli_opt_t *o) {
  char left[96];
  const char *sp = o->arg ? " " : "", *arg = o->arg ? o->arg : "";
  int n = o->short_name ? snprintf(left, sizeof(left), "  -%c, --%s%s%s", o->short_name,
                                   o->long_name, sp, arg)
                         : snprintf(left, sizeof(left), "  --%s%s%s", o->long_name, sp, arg);
  fprintf(f, "%s%*s", left, n + 2 > HELP_COL ? 2 : HELP_COL - n, "");
  const char *h = o->help ? o->help : "";
  for (const char *nl; (nl = strchr(h, '\n')) != NULL; h = nl + 1)
    fprintf(f, "%.*s\n%*s", (int)(nl - h), h, HELP_COL, "");
  fprintf(f, "%s\n", h);
}

void cli_print_opts(FILE *f, const cli_opt_t *opts) {
  for (const cli_opt_t *o = opts; o && o->long_name; o++) print_opt(f, o);
}

static const cli_opt_t k_help_opt[] = {
    {"help", 'h', NULL, CLI_OPT_HELP, "show this help"},
    {0},
};

void cli_print_command_help(FILE *f, const cli_command_t *c) {
  fprintf(f, "usage: vmclient %s %s\n\n%s\n", c->name, c->synopsis, c->summary);
  if (c->about && *c->about) fprintf(f, "\n%s", c->about);
  fprintf(f, "\n%s\n", c->opts_title ? c->opts_title : "options:");
  cli_print_opts(f, c->opts);
  cli_print_opts(f, k_help_opt);
  if (c->opts_note) fprintf(f, "\n%s", c->opts_note);
  if (c->model) {
    fprintf(f, "\nmodel options:\n");
    cli_print_opts(f, cli_model_options);
  }
  if (c->net) {
    fprintf(f, "\nglobal options (before or after the command):\n");
    cli_print_opts(f, cli_global_opts);
  }
}

void cli_args_init(cli_args_t *a, const cli_command_t *c, int argc, char **argv) {
  memset(a, 0, sizeof(*a));
  a->argc = argc;
  a->argv = argv;
  a->i = 1;
  if (!c) return;
  a->cmd = c->name;
  int n = 0;
  if (c->opts) a->tables[n++] = c->opts;
  if (c->model) a->tables[n++] = cli_model_options;
  if (c->net) a->tables[n++] = cli_global_opts;
}

/* The row of a's tables that matches: by long name (n bytes of name) when
 * name is set, else by short name. */
static const cli_opt_t *find_opt(const cli_args_t *a, const char *name, size_t n, char short_name) {
  for (int t = 0; t < CLI_MAX_OPT_TABLES && a->tables[t]; t++)
    for (const cli_opt_t *p = a->tables[t]; p->long_name; p++) {
      if (name ? strlen(p->long_name) == n && strncmp(p->long_name, name, n) == 0
               : p->short_name && p->short_name == short_name)
        return p;
    }
  return NULL;
}

int cli_next_arg(cli_args_t *a, const char **out_val) {
  *out_val = NULL;
  if (a->i >= a->argc) return CLI_ARG_END;
  char *arg = a->argv[a->i++];
  if (a->only_positional || arg[0] != '-' || arg[1] == '\0') {
    *out_val = arg;
    return CLI_ARG_POSITIONAL;
  }
  if (strcmp(arg, "--") == 0) {
    a->only_positional = 1;
    if (a->i >= a->argc) return CLI_ARG_END;
    *out_val = a->argv[a->i++];
    return CLI_ARG_POSITIONAL;
  }
  const cli_opt_t *o = NULL;
  const char *inline_val = NULL;
  char shown[64];
  if (arg[1] == '-') {
    const char *name = arg + 2;
    const char *eq = strchr(name, '=');
    size_t n = eq ? (size_t)(eq - name) : strlen(name);
    if (n == 4 && strncmp(name, "help", 4) == 0 && !eq) return CLI_OPT_HELP;
    o = find_opt(a, name, n, 0);
    if (eq) inline_val = eq + 1;
    snprintf(shown, sizeof(shown), "--%.*s", (int)(n > 40 ? 40 : n), name);
  } else {
    if (arg[1] == 'h' && arg[2] == '\0') return CLI_OPT_HELP;
    o = find_opt(a, NULL, 0, arg[1]);
    if (arg[2]) inline_val = arg + 2;
    snprintf(shown, sizeof(shown), "-%c", arg[1]);
  }
  if (!o) {
    a->i = a->argc;
    cli_usage_error(a->cmd, "unknown option '%s'", shown);
    return CLI_ARG_ERROR;
  }
  if (!o->arg) {
    if (inline_val) {
      cli_usage_error(a->cmd, "option '%s' takes no value", shown);
      return CLI_ARG_ERROR;
    }
    return o->id;
  }
  if (inline_val) {
    *out_val = inline_val;
    return o->id;
  }
  if (a->i >= a->argc) {
    cli_usage_error(a->cmd, "option '%s' needs a value", shown);
    return CLI_ARG_ERROR;
  }
  *out_val = a->argv[a->i++];
  return o->id;
}

int cli_parse(const cli_command_t *c, int argc, char **argv, const cli_parse_t *p) {
  cli_args_t a;
  cli_args_init(&a, c, argc, argv);
  const char *val;
  for (;;) {
    int r = cli_next_arg(&a, &val), rc;
    if (r == CLI_ARG_END) return -1;
    if (r == CLI_ARG_ERROR) return CLI_EXIT_USAGE;
    if (r == CLI_OPT_HELP) {
      cli_print_command_help(stdout, c);
      return CLI_EXIT_OK;
    }
    if (r == CLI_ARG_POSITIONAL) {
      if (p->on_pos)
        rc = p->on_pos(p->ctx, val);
      else if (p->mo)
        rc = cli_model_positional(p->mo, c->name, val);
      else
        rc = cli_usage_error(c->name, "unexpected argument '%.64s'", val);
    } else if (r >= CLI_GOPT_BASE) {
      rc = cli_global_apply(p->g, c->name, r, val);
    } else if (r >= CLI_MOPT_BASE && r < CLI_MOPT_END_) {
      rc = cli_model_opt(p->mo, c->name, r, val);
    } else if (p->on_opt) {
      rc = p->on_opt(p->ctx, r, val);
    } else {
      cli_error(c->name, "internal error: option %d has no handler", r);
      rc = CLI_EXIT_INTERNAL;
    }
    if (rc) return rc;
  }
}

/* Reads stdin to the end, refusing more than max_bytes. */
static vm_status_t read_stdin(uint64_t max_bytes, uint8_t **out_data, size_t *out_size) {
  uint8_t *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n == cap) {
      size_t nc = cap ? cap * 2 : 65536;
      if (nc < cap) nc = SIZE_MAX;
      uint8_t *p = realloc(buf, nc);
      if (!p) {
        free(buf);
        return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory reading standard input");
      }
      buf = p;
      cap = nc;
    }
    ssize_t r = read(STDIN_FILENO, buf + n, cap - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      free(buf);
      return vm_status_make(VM_UNAVAILABLE, "reading standard input: %s", strerror(e));
    }
    if (r == 0) break;
    n += (size_t)r;
    if ((uint64_t)n > max_bytes) {
      free(buf);
      return vm_status_make(VM_RESOURCE_EXHAUSTED, "standard input is over the limit of %llu bytes",
                            (unsigned long long)max_bytes);
    }
  }
  *out_data = buf;
  *out_size = n;
  return VM_STATUS_OK;
}

int cli_read_input(const char *cmd, const char *path, uint64_t max_bytes, uint8_t **out_data,
                   size_t *out_size) {
  vm_status_t st = strcmp(path, "-") == 0 ? read_stdin(max_bytes, out_data, out_size)
                                          : vm_read_file(path, max_bytes, out_data, out_size);
  if (!st) return CLI_EXIT_OK;
  /* Over the size limit is a property of the input; everything else
   * (missing, unreadable, a directory) means it could not be read. */
  int code = vm_status_code(st) == VM_RESOURCE_EXHAUSTED ? CLI_EXIT_INPUT : CLI_EXIT_IO;
  cli_error(cmd, "%s", vm_status_message(st));
  vm_status_free(st);
  return code;
}

int cli_write_output(const char *cmd, const char *path, const void *data, size_t size) {
  if (!path || strcmp(path, "-") == 0) {
    /* SIGPIPE is ignored in main(), so a closed pipe shows up here as EPIPE. */
    if ((size && fwrite(data, 1, size, stdout) != size) || fflush(stdout) != 0) {
      cli_error(cmd, "writing to standard output: %s", strerror(errno));
      return CLI_EXIT_IO;
    }
    return CLI_EXIT_OK;
  }
  vm_status_t st = vm_write_file_atomic(path, data, size);
  if (!st) return CLI_EXIT_OK;
  cli_error(cmd, "%s", vm_status_message(st));
  vm_status_free(st);
  return CLI_EXIT_IO;
}

int cli_input_exit_code(vm_status_t st) {
  switch (vm_status_code(st)) {
    case VM_INVALID_ARGUMENT:
    case VM_FAILED_PRECONDITION:
    case VM_RESOURCE_EXHAUSTED:
    case VM_OUT_OF_RANGE:
    case VM_DATA_LOSS:
    case VM_UNIMPLEMENTED: return CLI_EXIT_INPUT;
    case VM_NOT_FOUND:
    case VM_UNAVAILABLE:
    case VM_PERMISSION_DENIED: return CLI_EXIT_IO;
    default: return CLI_EXIT_INTERNAL;
  }
}
