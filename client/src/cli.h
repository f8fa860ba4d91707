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
  CLI_EXIT_CONNECT = 5,  /* cannot reach the agent, or the connection was lost */
  CLI_EXIT_REMOTE = 6,   /* the agent refused or failed the request (its status) */
  CLI_EXIT_MISMATCH = 7, /* check: the outputs differ from the expected ones */
  CLI_EXIT_SLOWER = 8,   /* compare: B is slower than A beyond the threshold */
  CLI_EXIT_INCONCLUSIVE = 9, /* compare: the budget ran out before a verdict */
};

/* The agent vmclient talks to when neither --host nor $VMCLIENT_HOST says. */
#define CLI_DEFAULT_HOST "tcp://127.0.0.1:9090"

/* Global options. They may be given before the command or, for the
 * commands that talk to an agent, after it (`vmclient run --json ...`). */
typedef struct cli_global {
  const char *host;           /* --host, else $VMCLIENT_HOST, else CLI_DEFAULT_HOST */
  const char *token;          /* --token */
  const char *token_file;     /* --token-file: first line is the token */
  int32_t timeout_ms;         /* --timeout: request and long timeouts (0 = library default) */
  int32_t connect_timeout_ms; /* --connect-timeout (0 = library default) */
  const char *tls_ca;     /* --tls-ca */
  const char *tls_cert;   /* --tls-cert */
  const char *tls_key;    /* --tls-key */
  const char *tls_pin;    /* --tls-pin sha256:HEX */
  int tls_insecure;       /* --tls-insecure */
  int json;               /* --json: one JSON object on stdout */
  int quiet;              /* --quiet: no progress, notes or human report */
} cli_global_t;

typedef int (*cli_cmd_fn)(const cli_global_t *g, int argc, char **argv);

/* One row of the command table. */
typedef struct cli_command {
  const char *name;
  const char *synopsis; /* arguments after the name, for usage lines */
  const char *summary;  /* one line for the command list */
  const char *help;     /* full help: options and behaviour */
  cli_cmd_fn run;
  int net; /* talks to an agent: its help lists the global options */
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

/* ---------------------------------------------------------------------------
 * Global options (cli_global.c). Their option ids start at CLI_GOPT_BASE so
 * that a command can list CLI_GLOBAL_OPTS in its own table and hand every
 * id >= CLI_GOPT_BASE to cli_global_apply().
 */
enum {
  CLI_GOPT_BASE = 1000,
  CLI_GOPT_HOST = CLI_GOPT_BASE,
  CLI_GOPT_TOKEN,
  CLI_GOPT_TOKEN_FILE,
  CLI_GOPT_TIMEOUT,
  CLI_GOPT_CONNECT_TIMEOUT,
  CLI_GOPT_TLS_CA,
  CLI_GOPT_TLS_CERT,
  CLI_GOPT_TLS_KEY,
  CLI_GOPT_TLS_PIN,
  CLI_GOPT_TLS_INSECURE,
  CLI_GOPT_JSON,
  CLI_GOPT_QUIET,
};

/* clang-format off */
#define CLI_GLOBAL_OPTS                                 \
  {"host", 0, 1, CLI_GOPT_HOST},                        \
  {"token", 0, 1, CLI_GOPT_TOKEN},                      \
  {"token-file", 0, 1, CLI_GOPT_TOKEN_FILE},            \
  {"timeout", 0, 1, CLI_GOPT_TIMEOUT},                  \
  {"connect-timeout", 0, 1, CLI_GOPT_CONNECT_TIMEOUT},  \
  {"tls-ca", 0, 1, CLI_GOPT_TLS_CA},                    \
  {"tls-cert", 0, 1, CLI_GOPT_TLS_CERT},                \
  {"tls-key", 0, 1, CLI_GOPT_TLS_KEY},                  \
  {"tls-pin", 0, 1, CLI_GOPT_TLS_PIN},                  \
  {"tls-insecure", 0, 0, CLI_GOPT_TLS_INSECURE},        \
  {"json", 0, 0, CLI_GOPT_JSON},                        \
  {"quiet", 'q', 0, CLI_GOPT_QUIET}
/* clang-format on */

/* Text of the global options for --help screens. */
extern const char cli_global_help[];

/* Applies global option id with value val to g. Returns 0, or
 * CLI_EXIT_USAGE after printing the error. */
int cli_global_apply(cli_global_t *g, const char *cmd, int id, const char *val);

/* Parses a decimal integer in [lo, hi]; 0 on success, -1 otherwise. */
int cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);

/* Parses a byte count with an optional K, M or G suffix (powers of 1024). */
int cli_parse_size(const char *s, uint64_t *out);

/* Parses a floating-point number >= 0; 0 on success, -1 otherwise. */
int cli_parse_nonneg_double(const char *s, double *out);

/* Monotonic seconds. */
double cli_now_s(void);

/* ---------------------------------------------------------------------------
 * JSON output (cli_json.c): a small streaming writer of one compact object
 * on stdout. Keys are plain ASCII; strings are escaped; non-finite numbers
 * are written as null.
 */
typedef struct cli_json {
  int depth;
  int need_comma[32];
} cli_json_t;

void cli_json_begin(cli_json_t *j);                /* "{" */
void cli_json_end(cli_json_t *j);                  /* "}\n" */
void cli_json_obj(cli_json_t *j, const char *key); /* key NULL inside arrays */
void cli_json_obj_end(cli_json_t *j);
void cli_json_arr(cli_json_t *j, const char *key);
void cli_json_arr_end(cli_json_t *j);
void cli_json_str(cli_json_t *j, const char *key, const char *v); /* v NULL = null */
void cli_json_num(cli_json_t *j, const char *key, double v);
void cli_json_int(cli_json_t *j, const char *key, int64_t v);
void cli_json_uint(cli_json_t *j, const char *key, uint64_t v);
void cli_json_bool(cli_json_t *j, const char *key, int v);
void cli_json_null(cli_json_t *j, const char *key);

/* The subcommands. */
int cli_cmd_asm(const cli_global_t *g, int argc, char **argv);
int cli_cmd_disasm(const cli_global_t *g, int argc, char **argv);
int cli_cmd_stats(const cli_global_t *g, int argc, char **argv);
int cli_cmd_info(const cli_global_t *g, int argc, char **argv);
int cli_cmd_ping(const cli_global_t *g, int argc, char **argv);
int cli_cmd_upload(const cli_global_t *g, int argc, char **argv);
int cli_cmd_run(const cli_global_t *g, int argc, char **argv);
int cli_cmd_check(const cli_global_t *g, int argc, char **argv);
int cli_cmd_bench(const cli_global_t *g, int argc, char **argv);
int cli_cmd_compare(const cli_global_t *g, int argc, char **argv);
int cli_cmd_profile(const cli_global_t *g, int argc, char **argv);
int cli_cmd_compile(const cli_global_t *g, int argc, char **argv);

/* ONNX models (cmd_compile.c). */
struct vm_executable;
struct vmcc_onnx_options;
struct vmcc_onnx_report;
/* 1 when path names an ONNX model (ends in .onnx). */
int cli_is_onnx_path(const char *path);
/* Compiles the model at path; prints the error and returns its exit code
 * (2 for options that do not fit the model, 3 for a malformed or
 * unsupported model, 4 for unreadable files). report may be NULL. */
int cli_onnx_compile(const char *cmd, const char *path, const struct vmcc_onnx_options *opts,
                     struct vm_executable **out_exec, struct vmcc_onnx_report *report);
/* For run/check/bench/profile: compiles the model with the shapes of the
 * given input files (input i: parameter names[i], or graph input idx[i] when
 * names[i] is NULL, from the .npy at paths[i]) and serialises it. */
int cli_onnx_compile_for_inputs(const char *cmd, const char *path, uint32_t n,
                                const char *const *names, const int64_t *idx,
                                const char *const *paths, struct vm_executable **out_exec,
                                uint8_t **out_bytes, size_t *out_size);
/* stats without a file: the agent's counters (cmd_net.c). */
int cli_agent_stats(const cli_global_t *g, const char *cmd);

#endif
