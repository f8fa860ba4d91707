/* Helpers of the vmclient commands that talk to an agent: connecting,
 * mapping statuses to exit codes, the model options every model command
 * shares (--func, --device, --memory-cfg, --exec-mode, --input), setting up
 * a VM (upload + create + set inputs, each timed), fetching outputs and
 * reading tensor elements. */
#ifndef VMCLIENT_CLI_NET_H
#define VMCLIENT_CLI_NET_H

#include <stdint.h>

#include "cli.h"
#include "vm/executable.h"
#include "vmrpc/vmclient.h"

/* Transfers larger than this show a progress bar (stderr a terminal, no
 * --quiet). */
#define CLI_PROGRESS_MIN_BYTES (8ull << 20)

/* Connects with the global options. Prints the error and returns its exit
 * code on failure (5 unreachable/timeout, 6 refused by the agent, 2 bad
 * URL, 4 unreadable token/TLS file), 0 on success. */
int cli_connect(const cli_global_t *g, const char *cmd, vmc_conn_t **out_conn);

/* Exit code of a failed call on an open connection: 5 when the agent
 * cannot be reached any more (UNAVAILABLE), else 6. */
int cli_remote_exit_code(vm_status_t st);

/* Prints "vmclient: CMD: WHAT: CODE: message", frees st and returns
 * cli_remote_exit_code(st). */
int cli_remote_error(const char *cmd, const char *what, vm_status_t st);

/* Progress bar state for vmc_progress_fn (cli_progress_fn). */
typedef struct cli_progress {
  const char *label;
  double t0;
  int shown;
  int last_permille;
} cli_progress_t;

/* Returns the callback to use for a transfer of total bytes (NULL when no
 * bar is shown) and initialises p. */
vmc_progress_fn cli_progress_for(const cli_global_t *g, cli_progress_t *p, const char *label,
                                 uint64_t total);
/* Ends the bar's line if one was drawn. */
void cli_progress_done(cli_progress_t *p);

/* ---------------------------------------------------------------------------
 * Model options and the VM they describe.
 */
#define CLI_MAX_DEVICES 8

enum {
  CLI_MOPT_BASE = 500,
  CLI_MOPT_FUNC = CLI_MOPT_BASE,
  CLI_MOPT_DEVICE,
  CLI_MOPT_MEMCFG,
  CLI_MOPT_EXECMODE,
  CLI_MOPT_INPUT,
  CLI_MOPT_END_,
};

/* The model options' table. */
extern const cli_opt_t cli_model_options[];

typedef struct cli_input_spec {
  const char *name; /* parameter name, or NULL when index is used */
  int64_t index;    /* parameter index, or -1 */
  const char *path;
} cli_input_spec_t;

typedef struct cli_model_opts {
  const char *model; /* the .vmx path */
  const char *func;  /* default "main" */
  const char *devices[CLI_MAX_DEVICES];
  uint32_t num_devices;
  const char *allocators[CLI_MAX_DEVICES]; /* per device; NULL = default */
  const char *memory_cfg;
  const char *exec_mode;
  cli_input_spec_t *inputs; /* as many as the command line gives (malloc'ed) */
  uint32_t num_inputs, cap_inputs;
  uint32_t num_positional_inputs;
  int fill_missing; /* bench, profile: make inputs the user did not give */
} cli_model_opts_t;

/* Frees what the parse of the model options allocated. */
void cli_model_opts_free(cli_model_opts_t *m);

/* Applies a model option (id in [CLI_MOPT_BASE, CLI_MOPT_END_)). 0 or
 * CLI_EXIT_USAGE after printing. */
int cli_model_opt(cli_model_opts_t *m, const char *cmd, int id, const char *val);
/* Takes a positional argument: the model first, then inputs in parameter
 * order. */
int cli_model_positional(cli_model_opts_t *m, const char *cmd, const char *val);

typedef struct cli_model {
  const char *cmd;
  const cli_model_opts_t *o;
  /* local */
  uint8_t *bytes;
  size_t size;
  vm_executable_t *exec;
  char sha256_hex[2 * VM_SHA256_BYTES + 1]; /* set by the upload */
  const vm_function_t *fn;
  uint32_t num_params;
  vmc_tensor_t *inputs;  /* num_params of them (calloc'ed) */
  int *input_generated;  /* per parameter */
  /* remote */
  vmc_conn_t *conn;
  vmc_info_t info;
  vmc_exec_t xid;
  vmc_vm_t vm;
  vmc_upload_result_t upload;
  vmc_device_spec_t specs[CLI_MAX_DEVICES];
  uint32_t num_specs;
  const vmc_device_info_t *device; /* the VM's first device */
  double upload_s, create_s, set_inputs_s, connect_s;
} cli_model_t;

/* Loads the .vmx, finds the function, resolves and reads the inputs
 * (generating missing ones when fill_missing). Prints and returns the exit
 * code on failure. */
int cli_model_load(cli_model_t *m, const char *cmd, cli_model_opts_t *o);

/* Connects and runs the function once with the fused Run (the upload
 * first on a store miss): the VM, executable and upload result land in m.
 * keep_outputs: small outputs come back inline and the rest is fetched
 * into res; 0: the outputs stay on the agent (bench, profile). Prints and
 * returns the exit code on failure. Free res with vmc_run_result_free(). */
int cli_model_run(cli_model_t *m, const cli_global_t *g, int keep_outputs, vmc_run_result_t *res,
                  double *out_wall_s);

/* Frees everything (the session ends with the connection). */
void cli_model_close(cli_model_t *m);

/* Says on stderr which inputs were generated (not with --quiet/--json). */
void cli_model_note_generated(const cli_model_t *m, const cli_global_t *g);

/* Writes "model", "sha256", "function", "agent" and "device" members. */
void cli_model_json(cli_json_t *j, const cli_model_t *m);

/* ---------------------------------------------------------------------------
 * Outputs.
 */
#define CLI_MAX_OUTPUTS 1024
#define CLI_MAX_OUTPUT_DEPTH 8

typedef struct cli_output {
  char name[64]; /* the path: "0" for a plain result, "1.0" in tuples */
  int is_tensor;
  vmc_tensor_t tensor;   /* is_tensor: owned */
  vmc_value_kind_t kind; /* the value's kind before conversion */
  char *text;            /* !is_tensor: "none" or the string (owned) */
} cli_output_t;

/* Every leaf of func's last result (tuples flattened depth-first;
 * scalars as 0-d tensors, shapes as 1-d int64) from a fused run's outputs
 * (their values taken over); tuples the agent did not walk are fetched
 * here. Free with cli_outputs_free(). Prints and returns the exit code on
 * failure. */
int cli_outputs_from_run(const cli_model_t *m, vmc_run_result_t *res, cli_output_t **out,
                         uint32_t *out_n);
void cli_outputs_free(cli_output_t *o, uint32_t n);

/* Number of scalar elements (all lanes) of t. */
uint64_t cli_tensor_count(const vmc_tensor_t *t);
/* Element i of t as a double (any dtype the project stores). */
double cli_tensor_elem(const vmc_tensor_t *t, uint64_t i);
/* "float32[8, 10]" into buf. */
const char *cli_tensor_type(const vmc_tensor_t *t, char *buf, size_t n);
/* Writes dtype and shape members. */
void cli_tensor_json(cli_json_t *j, const vmc_tensor_t *t);

/* Percentile p (0..100) of sorted[0..n) with linear interpolation
 * (NumPy's default). */
double cli_percentile(const double *sorted, uint32_t n, double p);

/* ---------------------------------------------------------------------------
 * The device's state (cli_state.c): `info --state`, and snapshots around
 * compare and bench.
 */
void cli_state_json(cli_json_t *j, const char *key, const vmc_device_state_t *s);
void cli_state_print(const vmc_device_state_t *s);

/* Snapshots of one measurement, and its temperature gate. */
typedef struct cli_snaps {
  vmc_conn_t *conn;
  vmc_device_state_t *s;
  uint32_t n, cap;
  int available;     /* 0 after the agent could not report (error says why) */
  char error[256];
  double max_temp_c; /* > 0: wait before each round until every zone is at or below */
  double max_wait_s; /* for at most this long each time */
  double waited_s, longest_wait_s;
  uint32_t waits, gave_up;
  int no_zone;       /* --max-temp given but no zone reports a temperature */
  /* Measurements that waited at the device's quiet gate for other
   * sessions' copies (cli_snaps_gate), and the seconds in all. */
  uint32_t gate_waits;
  double gate_wait_s;
} cli_snaps_t;

void cli_snaps_init(cli_snaps_t *sn, vmc_conn_t *conn, double max_temp_c, double max_wait_s);
/* Takes one snapshot: its index, or -1 (no state from this agent). */
int cli_snaps_take(cli_snaps_t *sn);
/* With max_temp_c: takes snapshots until every zone is at or below it or
 * max_wait_s has passed (then counted in gave_up). */
void cli_snaps_wait_cool(cli_snaps_t *sn);
/* Counts a measurement that waited wait_s at the quiet gate (0: none). */
void cli_snaps_gate(cli_snaps_t *sn, double wait_s);
/* The most other busy sessions any snapshot saw. */
uint32_t cli_snaps_busy(const cli_snaps_t *sn);
/* state_before, state_after, throttled, throttling, max_busy_sessions,
 * temperature_gate. */
void cli_snaps_json(cli_json_t *j, const cli_snaps_t *sn);
/* The human report's lines: throttling, the gate's waits, warnings of busy
 * sessions and of a gate that gave up (nothing with --json or --quiet:
 * the JSON has it all). */
void cli_snaps_report(const cli_snaps_t *sn, const cli_global_t *g);
void cli_snaps_free(cli_snaps_t *sn);
/* Parses --max-temp C (above 0, at most 150) for cmd. 0 or the usage
 * error's exit code. */
int cli_parse_max_temp(const char *cmd, const char *val, double *out);
/* Parses --max-temp-wait S (above 0, at most 3600). */
int cli_parse_max_temp_wait(const char *cmd, const char *val, double *out);

#endif
