/* Internals of the vmclient CLI: the command table, exit codes, option
 * parsing and the input/output helpers every subcommand shares.
 *
 * Adding a subcommand: write `int cli_cmd_NAME(const cli_global_t *g, int
 * argc, char **argv)` and its option table in a cmd_*.c file, declare both
 * here and add one row to the table in cli_commands.c. argv[0] is the
 * subcommand name; the function parses its options with cli_parse() and
 * returns an exit code. */
#ifndef VMCLIENT_CLI_H
#define VMCLIENT_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "vmrpc/status.h"

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

/* One option: the single place that says its names, whether it takes a
 * value, its id and its help. cli_next_arg() parses by these rows and
 * cli_print_command_help() prints them, so the two cannot disagree. */
typedef struct cli_opt {
  const char *long_name; /* without "--" */
  char short_name;       /* 0 = none */
  const char *arg;       /* the value's name in the help ("N", "DIR"); NULL = takes none */
  int id;                /* > 0: what cli_next_arg() returns for it */
  const char *help;      /* what it does; each '\n' starts a continuation line */
} cli_opt_t;

/* One row of the command table (cli_commands.c). Its help is made of the
 * prose below and its option tables: its own (opts), the model options
 * (cli_model_options, when model) and the global ones (cli_global_opts, when
 * net); the parser accepts exactly those. */
typedef struct cli_command {
  const char *name;
  const char *synopsis;   /* arguments after the name, for usage lines */
  const char *summary;    /* one line for the command list */
  const char *about;      /* what it does, before the options */
  const cli_opt_t *opts;  /* its own options (a zeroed row ends them); NULL = none */
  const char *opts_title; /* heading of its own options; NULL = "options:" */
  const char *opts_note;  /* prose after its own options; NULL = none */
  int model;              /* takes the model options (cli_net.h) */
  int net;                /* talks to an agent: takes the global options after its name too */
  cli_cmd_fn run;
} cli_command_t;

/* The command table, in the order --help lists it. */
extern const cli_command_t cli_commands[];
extern const size_t cli_num_commands;

/* vmclient's own options before the command (--version, --help), and its
 * usage screen. */
enum { CLI_MAIN_OPT_VERSION = 1 };
extern const cli_opt_t cli_main_opts[];
void cli_print_usage(FILE *f);

/* Looks a command up by name; NULL if unknown. */
const cli_command_t *cli_find_command(const char *name);

/* Prints "vmclient: <cmd>: <message>" on stderr as exactly one line:
 * control characters (which file names and messages from hostile files
 * may carry) are replaced by '?'. cmd may be NULL. */
void cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Reports a usage error (with a pointer to the command's --help) and
 * returns CLI_EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints a command's full help to f. */
void cli_print_command_help(FILE *f, const cli_command_t *c);
/* Prints the rows of an option table (a zeroed row ends it) to f. */
void cli_print_opts(FILE *f, const cli_opt_t *opts);

#define CLI_OPT_HELP (-100) /* id of the --help / -h every command accepts */

enum { CLI_ARG_END = 0, CLI_ARG_POSITIONAL = -1, CLI_ARG_ERROR = -2 };

#define CLI_MAX_OPT_TABLES 4

typedef struct cli_args {
  const char *cmd; /* for messages */
  int argc;
  char **argv;
  int i;               /* next argv index */
  int only_positional; /* after "--" */
  const cli_opt_t *tables[CLI_MAX_OPT_TABLES + 1]; /* searched in order; NULL ends */
} cli_args_t;

/* Sets a up to parse argv[1..argc) by the option tables of command c. */
void cli_args_init(cli_args_t *a, const cli_command_t *c, int argc, char **argv);

/* Returns the next item: an option id (its value in *out_val when it takes
 * one), CLI_OPT_HELP, CLI_ARG_POSITIONAL (*out_val = the argument; "-"
 * counts as positional, meaning stdin/stdout), CLI_ARG_END, or
 * CLI_ARG_ERROR after printing the usage error. Accepts --name=value,
 * --name value, -x value, -xvalue and "--". */
int cli_next_arg(cli_args_t *a, const char **out_val);

/* How a command takes what cli_parse() finds. */
struct cli_model_opts;
typedef struct cli_parse {
  cli_global_t *g;          /* global options land here */
  struct cli_model_opts *mo; /* model options, and positionals when on_pos is NULL */
  int (*on_opt)(void *ctx, int id, const char *val); /* its own options */
  int (*on_pos)(void *ctx, const char *val);         /* positionals; NULL: to mo, else refused */
  void *ctx;
} cli_parse_t;

/* Parses argv (argv[0] the command's name) by c's tables. Returns -1 when
 * the command goes on, else its exit code: 0 after printing --help, or
 * the usage error's. */
int cli_parse(const cli_command_t *c, int argc, char **argv, const cli_parse_t *p);

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

/* The global options (each command that talks to an agent takes them
 * after its name too). */
extern const cli_opt_t cli_global_opts[];

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

/* The subcommands, and the tables of their own options. */
extern const cli_opt_t cli_info_opts[], cli_ping_opts[], cli_run_opts[], cli_check_opts[],
    cli_bench_opts[], cli_compare_opts[], cli_compile_opts[], cli_asm_opts[], cli_disasm_opts[];
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
