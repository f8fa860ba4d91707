/* Internals of the vmclient CLI: the command table, exit codes, option
 * parsing and the input/output helpers every subcommand shares.
 *
 * Adding a subcommand: write `int cli_cmd_NAME(const cli_global_t *g, int
 * argc, char **argv)` in a cmd_*.c file, declare it here and add one row
 * to the table in main.c. argv[0] is the subcommand name; the function
 * parses its own options with cli_next_arg() and returns an exit code. */
#ifndef VMCLIENT_CLI_H
#define VMCLIENT_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "vm/status.h"

#ifndef VMRPC_VERSION
#define VMRPC_VERSION "0.1.0" /* the CMake project version; a build may pass its own */
#endif

/* Exit codes (docs/cli.md). Scripts depend on them: never renumber. */
enum {
  CLI_EXIT_OK = 0,
  CLI_EXIT_INTERNAL = 1, /* a bug or the host out of memory */
  CLI_EXIT_USAGE = 2,    /* bad command line */
  CLI_EXIT_INPUT = 3,    /* an input file is invalid: parse, load or verify error, too large */
  CLI_EXIT_IO = 4,       /* cannot read an input or write an output */
  CLI_EXIT_CONNECT = 5,  /* reserved: cannot reach or talk to the agent */
  CLI_EXIT_REMOTE = 6,   /* reserved: the agent refused or failed the request */
};

/* Global options, parsed before the subcommand. Network options (--host,
 * --token, --json, --quiet, --timeout) will be added here. */
typedef struct cli_global {
  int unused_; /* keeps the struct non-empty until the first global option */
} cli_global_t;

typedef int (*cli_cmd_fn)(const cli_global_t *g, int argc, char **argv);

/* One row of the command table. */
typedef struct cli_command {
  const char *name;
  const char *synopsis; /* arguments after the name, for usage lines */
  const char *summary;  /* one line for the command list */
  const char *help;     /* full help: options and behaviour */
  cli_cmd_fn run;
} cli_command_t;

/* Looks a command up by name; NULL if unknown. */
const cli_command_t *cli_find_command(const char *name);

/* Prints "vmclient: <cmd>: <message>" on stderr as exactly one line:
 * control characters (which file names and messages from hostile files
 * may carry) are replaced by '?'. cmd may be NULL. */
void cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Reports a usage error (with a pointer to the command's --help) and
 * returns CLI_EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints a command's full help on stdout. */
void cli_print_command_help(const cli_command_t *c);

/* Options of a subcommand. id > 0 is returned by cli_next_arg when the
 * option is seen. */
typedef struct cli_opt {
  const char *long_name; /* without "--" */
  char short_name;       /* 0 = none */
  int has_arg;
  int id;
} cli_opt_t;

#define CLI_OPT_HELP (-100) /* id of the --help / -h every command accepts */

enum { CLI_ARG_END = 0, CLI_ARG_POSITIONAL = -1, CLI_ARG_ERROR = -2 };

typedef struct cli_args {
  const char *cmd; /* for messages */
  int argc;
  char **argv;
  int i;               /* next argv index */
  int only_positional; /* after "--" */
} cli_args_t;

/* Returns the next item: an option id (its value in *out_val when it takes
 * one), CLI_OPT_HELP, CLI_ARG_POSITIONAL (*out_val = the argument; "-"
 * counts as positional, meaning stdin/stdout), CLI_ARG_END, or
 * CLI_ARG_ERROR after printing the usage error. Accepts --name=value,
 * --name value, -x value, -xvalue and "--". opts ends with a zeroed row. */
int cli_next_arg(cli_args_t *a, const cli_opt_t *opts, const char **out_val);

/* Reads a whole input ("-" = stdin) of at most max_bytes. On failure prints
 * the error and returns its exit code (CLI_EXIT_IO, or CLI_EXIT_INPUT when
 * the input is over the limit); 0 on success. *out_data is malloc'ed. */
int cli_read_input(const char *cmd, const char *path, uint64_t max_bytes, uint8_t **out_data,
                   size_t *out_size);

/* Writes an output: "-" or NULL = stdout, otherwise atomically (temp file +
 * rename). Prints the error and returns CLI_EXIT_IO on failure, else 0. */
int cli_write_output(const char *cmd, const char *path, const void *data, size_t size);

/* Exit code for a failed parse / load / verify of an input file. */
int cli_input_exit_code(vm_status_t st);

/* The subcommands. */
int cli_cmd_asm(const cli_global_t *g, int argc, char **argv);
int cli_cmd_disasm(const cli_global_t *g, int argc, char **argv);
int cli_cmd_stats(const cli_global_t *g, int argc, char **argv);

#endif
