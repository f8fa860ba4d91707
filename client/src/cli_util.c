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

void cli_print_command_help(const cli_command_t *c) {
  printf("usage: vmclient %s %s\n\n%s\n", c->name, c->synopsis, c->summary);
  if (c->help && *c->help) {
    /* "%MODEL%" stands for the model options every model command shares. */
    const char *h = c->help, *mark;
    printf("\n");
    while ((mark = strstr(h, "%MODEL%")) != NULL) {
      printf("%.*s%s", (int)(mark - h), h, cli_model_help);
      h = mark + 7;
    }
    printf("%s", h);
  }
  if (c->net) printf("\n%s", cli_global_help);
}

int cli_next_arg(cli_args_t *a, const cli_opt_t *opts, const char **out_val) {
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
    for (const cli_opt_t *p = opts; p && p->long_name; p++) {
      if (strlen(p->long_name) == n && strncmp(p->long_name, name, n) == 0) o = p;
    }
    if (eq) inline_val = eq + 1;
    snprintf(shown, sizeof(shown), "--%.*s", (int)(n > 40 ? 40 : n), name);
  } else {
    if (arg[1] == 'h' && arg[2] == '\0') return CLI_OPT_HELP;
    for (const cli_opt_t *p = opts; p && p->long_name; p++) {
      if (p->short_name && p->short_name == arg[1]) o = p;
    }
    if (arg[2]) inline_val = arg + 2;
    snprintf(shown, sizeof(shown), "-%c", arg[1]);
  }
  if (!o) {
    a->i = a->argc;
    cli_usage_error(a->cmd, "unknown option '%s'", shown);
    return CLI_ARG_ERROR;
  }
  if (!o->has_arg) {
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
