/* The command table: one row per subcommand, in the order --help lists
 * them, with the prose of its help. Options are not written here: each
 * row points at its command's option table (cmd_*.c), from which both its
 * help rows and its parser come (cli_util.c). The help texts are the
 * reference for docs/cli.md. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static int cmd_help(const cli_global_t *g, int argc, char **argv);

#define MODEL_HELP_HEAD                                                           \
  "MODEL.vmx is read, verified and hashed here, uploaded (nothing is sent when\n" \
  "the agent already has it), and a VM is created on the agent.\n\n"

const cli_command_t cli_commands[] = {
    {"info", "[--state]", "Show the agent: version, protocol, devices and limits.",
     "Connects, says Hello and prints what the agent told: its version and\n"
     "protocol, the session, a round-trip time, every device (the selector to\n"
     "pass to --device, name, vendor, driver, memory, timer) and its limits.\n"
     "\n"
     "With --state, also the host's state as the agent reads it (Linux sysfs and\n"
     "procfs, no root needed): each core's clock, its maximum and cap, and governor;\n"
     "every thermal zone's temperature and trip points; devfreq devices (GPUs);\n"
     "the load average; the agent's other sessions. What is not exposed is said\n"
     "to be unknown, never guessed.\n",
     cli_info_opts, NULL, NULL, 0, 1, cli_cmd_info},
    {"ping", "[-n COUNT]", "Measure round trips to the agent.",
     "Sends COUNT pings (no work on the agent) one after another on one\n"
     "connection and prints min/median/mean/max of the round-trip times.\n",
     cli_ping_opts, NULL, NULL, 0, 1, cli_cmd_ping},
    {"upload", "MODEL.vmx", "Upload an executable to the agent's store.",
     "Verifies the file here, then uploads it: the SHA-256 goes first and\n"
     "nothing more is sent when the agent's store has it (a store hit);\n"
     "otherwise the bytes go in chunks (a progress bar over 8 MiB when\n"
     "standard error is a terminal) and the agent verifies and stores it.\n"
     "Later commands on the same file are then store hits.\n",
     NULL, NULL, NULL, 0, 1, cli_cmd_upload},
    {"run", "[options] MODEL.vmx [INPUT.npy...]", "Run a function once and fetch its outputs.",
     MODEL_HELP_HEAD
     "Sets every parameter from an .npy file (by --input NAME=FILE, --input\n"
     "INDEX=FILE, or positionally in parameter order; all are required, as many\n"
     "as the function takes), invokes the function once and fetches every output\n"
     "(tuples are flattened: output names are paths such as 0, 1.0). Outputs are\n"
     "written as .npy files with --output-dir, and summarised on standard output.\n",
     cli_run_opts, NULL, NULL, 1, 1, cli_cmd_run},
    {"check", "[options] MODEL.vmx [INPUT.npy...] -e EXPECTED.npy...",
     "Run a function and compare its outputs with expected .npy files.",
     MODEL_HELP_HEAD
     "Runs like 'vmclient run', then compares each output with its expected\n"
     "array as numpy.allclose does: |actual - expected| <= atol + rtol *\n"
     "|expected| element-wise, infinities equal only to themselves, NaN never\n"
     "equal (unless --equal-nan), and shapes must match. Prints the max\n"
     "absolute and relative error of each output and the first element that\n"
     "differs. Exit status 7 when any output differs.\n",
     cli_check_opts, NULL, NULL, 1, 1, cli_cmd_check},
    {"bench", "[options] MODEL.vmx [INPUT.npy...]",
     "Time a function on the device with TVM's time_evaluator.",
     MODEL_HELP_HEAD
     "Inputs that are not given are generated (uniform [-1, 1) for float32 and\n"
     "float64, zeros otherwise) for parameters of a fixed type and shape. Prints\n"
     "the init time (upload + create VM + set inputs), the first run, the\n"
     "evaluator's discarded warm-up, then mean, median, min, max and std per\n"
     "call over the repeats (p90 from 10 repeats, p99 from 100), in ms, for the\n"
     "wall clock and, when the device has a timer, the device time. Timing runs\n"
     "on the agent: the network is never measured. --json adds the per-repeat\n"
     "list, the device's properties, the agent's version and the executable's\n"
     "SHA-256.\n",
     cli_bench_opts, "options (time_evaluator's, with its defaults):",
     "The device's state (clocks, temperatures, load, other sessions) is\n"
     "recorded before and after; throttling seen in it is named.\n",
     1, 1, cli_cmd_bench},
    {"compare", "[options] A.vmx [B.vmx] [INPUT.npy...]",
     "Is B faster, slower or the same as A on the device? A verdict a CI can use.",
     MODEL_HELP_HEAD
     "Both executables (or two functions of A.vmx: --func-b) run on the same\n"
     "agent and device, with the same inputs (given or generated as for\n"
     "'vmclient bench'). Each is calibrated so that a batch of calls lasts\n"
     "--round-ms; then rounds A B, B A, A B, ... time both with the agent's\n"
     "time evaluator, --repeats batches each, the fastest counting (device\n"
     "time where the device has a timer, else wall). The ratio B/A is the\n"
     "Hodges-Lehmann estimate over rounds with its signed-rank interval;\n"
     "rounds are added until the interval decides\n"
     "('faster': below 1 - threshold; 'slower': above 1 + threshold; 'same':\n"
     "within 1 +- threshold) or the budget runs out ('inconclusive').\n"
     "Exit status: 0 same or faster, 8 slower, 9 inconclusive.\n",
     cli_compare_opts, NULL,
     "The device's state (clocks, temperatures, load, other sessions) is\n"
     "recorded before, after every round and after; throttling seen in it is\n"
     "named. The model options are shared by A and B.\n",
     1, 1, cli_cmd_compare},
    {"profile", "[options] MODEL.vmx [INPUT.npy...]", "Profile a function per operator.",
     MODEL_HELP_HEAD
     "Inputs are given or generated as for 'vmclient bench'. Runs the function\n"
     "once (first-run costs such as kernel builds), then once more with a\n"
     "device sync around every operator call, and prints a row per operator:\n"
     "calls, total and mean wall time, device time (when the device has a\n"
     "timer) and share of the total, largest first.\n",
     NULL, NULL, NULL, 1, 1, cli_cmd_profile},
    {"stats", "[IN.vmx]", "Summarise a .vmx file, or (without a file) show the agent's counters.",
     "With a file: prints the SHA-256 of the file (the key of the agent's\n"
     "executable store), counts per section, tensor bytes, code size, and each\n"
     "function with its kind, arity, registers and instruction count. No agent\n"
     "is involved.\n"
     "\n"
     "Without a file: connects to the agent (--host) and prints its counters:\n"
     "sessions, memory held by all sessions, resident memory, requests served\n"
     "and the executable store.\n",
     NULL, NULL, NULL, 0, 1, cli_cmd_stats},
    {"compile", "[options] MODEL.onnx", "Compile an ONNX model into a .vmx executable.",
     "Parses the model, fixes every shape, evaluates the shape arithmetic on\n"
     "constants here and lowers every other node to the cl.* operators\n"
     "(docs/onnx.md). main takes the graph's inputs by name and returns its\n"
     "outputs in order. An operator, attribute value or dtype the compiler does\n"
     "not support fails with exit 3 and names the node. run, check, bench and\n"
     "profile also accept MODEL.onnx and compile it on the fly, the input\n"
     "shapes taken from the input files.\n",
     cli_compile_opts, NULL, NULL, 0, 0, cli_cmd_compile},
    {"asm", "[-o OUT.vmx] IN.vmasm", "Assemble a .vmasm text file into a .vmx executable.",
     "Reads the text form (docs/vmasm.md; \"-\" = standard input), checks it\n"
     "like the loader checks a file, and writes the executable atomically.\n",
     cli_asm_opts, NULL, NULL, 0, 0, cli_cmd_asm},
    {"disasm", "[-o OUT.vmasm] IN.vmx", "Print a .vmx executable as .vmasm text.",
     "Loads and verifies the executable (\"-\" = standard input) and prints its\n"
     "text form, which 'vmclient asm' turns back into the same bytes.\n",
     cli_disasm_opts, NULL, NULL, 0, 0, cli_cmd_disasm},
    {"help", "[COMMAND]", "Show the help of vmclient or of one command.", "", NULL, NULL, NULL, 0,
     0, cmd_help},
};
const size_t cli_num_commands = sizeof(cli_commands) / sizeof(cli_commands[0]);

const cli_command_t *cli_find_command(const char *name) {
  for (size_t i = 0; i < cli_num_commands; i++)
    if (strcmp(cli_commands[i].name, name) == 0) return &cli_commands[i];
  return NULL;
}

/* vmclient's own options, before the command (with the global ones). */
const cli_opt_t cli_main_opts[] = {
    {"version", 'V', NULL, CLI_MAIN_OPT_VERSION, "print the version and exit"},
    {"help", 'h', NULL, CLI_OPT_HELP, "show this help"},
    {0},
};

void cli_print_usage(FILE *f) {
  fprintf(f,
          "usage: vmclient [GLOBAL OPTIONS] COMMAND [ARGS...]\n"
          "\n"
          "Drive vmrpc executables and agents. Commands:\n");
  for (size_t i = 0; i < cli_num_commands; i++)
    fprintf(f, "  %-8s %s\n", cli_commands[i].name, cli_commands[i].summary);
  fprintf(f, "\nglobal options (before or after the command):\n");
  cli_print_opts(f, cli_global_opts);
  cli_print_opts(f, cli_main_opts);
  fprintf(f,
          "\n"
          "Run 'vmclient COMMAND --help' for a command's options.\n"
          "Exit codes: 0 success, 1 internal error, 2 usage error, 3 invalid input file,\n"
          "4 I/O error, 5 cannot reach the agent, 6 the agent returned an error,\n"
          "7 check: outputs differ (docs/cli.md).\n");
}

typedef struct help_args {
  const char *topic;
} help_args_t;

static int help_pos(void *ctx, const char *val) {
  help_args_t *h = ctx;
  if (h->topic) return cli_usage_error("help", "more than one command given");
  h->topic = val;
  return CLI_EXIT_OK;
}

static int cmd_help(const cli_global_t *g, int argc, char **argv) {
  help_args_t h = {NULL};
  cli_global_t gl = *g;
  cli_parse_t p = {&gl, NULL, NULL, help_pos, &h};
  int rc = cli_parse(cli_find_command("help"), argc, argv, &p);
  if (rc >= 0) return rc;
  if (!h.topic) {
    cli_print_usage(stdout);
    return CLI_EXIT_OK;
  }
  const cli_command_t *c = cli_find_command(h.topic);
  if (!c) return cli_usage_error("help", "unknown command '%.64s'", h.topic);
  cli_print_command_help(stdout, c);
  return CLI_EXIT_OK;
}
