/* vmclient: the command-line client. main() parses the global options,
 * then dispatches through the command table below; each subcommand parses
 * its own options and returns an exit code (docs/cli.md). */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "cli.h"
#include "vm/executable.h"

static int cmd_help(const cli_global_t *g, int argc, char **argv);

/* The command table: one row per subcommand, in the order --help lists
 * them. The help texts are the reference for docs/cli.md. */
#define MODEL_HELP_HEAD                                                           \
  "MODEL.vmx is read, verified and hashed here, uploaded (nothing is sent when\n" \
  "the agent already has it), and a VM is created on the agent.\n\n"

static const cli_command_t k_commands[] = {
    {"info", "[--state]", "Show the agent: version, protocol, devices and limits.",
     "Connects, says Hello and prints what the agent told: its version and\n"
     "protocol, the session, a round-trip time, every device (the selector to\n"
     "pass to --device, name, vendor, driver, memory, timer) and its limits.\n"
     "\n"
     "With --state, also the host's state as the agent reads it (Linux sysfs and\n"
     "procfs, no root needed): each core's clock, its maximum and cap, and governor;\n"
     "every thermal zone's temperature and trip points; devfreq devices (GPUs);\n"
     "the load average; the agent's other sessions. What is not exposed is said\n"
     "to be unknown, never guessed.\n"
     "\n"
     "options:\n"
     "  --state                the host's clocks, temperatures and load too\n"
     "  -h, --help             show this help\n",
     cli_cmd_info, 1},
    {"ping", "[-n COUNT]", "Measure round trips to the agent.",
     "Sends COUNT pings (no work on the agent) one after another on one\n"
     "connection and prints min/median/mean/max of the round-trip times.\n"
     "\n"
     "options:\n"
     "  -n, --count COUNT      pings to send, 1..100000 [10]\n"
     "  -h, --help             show this help\n",
     cli_cmd_ping, 1},
    {"upload", "MODEL.vmx", "Upload an executable to the agent's store.",
     "Verifies the file here, then uploads it: the SHA-256 goes first and\n"
     "nothing more is sent when the agent's store has it (a store hit);\n"
     "otherwise the bytes go in chunks (a progress bar over 8 MiB when\n"
     "standard error is a terminal) and the agent verifies and stores it.\n"
     "Later commands on the same file are then store hits.\n"
     "\n"
     "options:\n"
     "  -h, --help             show this help\n",
     cli_cmd_upload, 1},
    {"run", "[options] MODEL.vmx [INPUT.npy...]", "Run a function once and fetch its outputs.",
     MODEL_HELP_HEAD "Sets every parameter from an .npy file (by --input NAME=FILE, --input\n"
                     "INDEX=FILE, or positionally in parameter order; all are required), invokes\n"
                     "the function once and fetches every output (tuples are flattened: output\n"
                     "names are paths such as 0, 1.0). Outputs are written as .npy files with\n"
                     "--output-dir, and summarised on standard output.\n"
                     "\n"
                     "options:\n"
                     "%MODEL%"
                     "  -o, --output-dir DIR   write output_NAME.npy files there (created if\n"
                     "                         missing; dots in NAME become _)\n"
                     "  -h, --help             show this help\n",
     cli_cmd_run, 1},
    {"check", "[options] MODEL.vmx [INPUT.npy...] -e EXPECTED.npy...",
     "Run a function and compare its outputs with expected .npy files.",
     MODEL_HELP_HEAD "Runs like 'vmclient run', then compares each output with its expected\n"
                     "array as numpy.allclose does: |actual - expected| <= atol + rtol *\n"
                     "|expected| element-wise, infinities equal only to themselves, NaN never\n"
                     "equal (unless --equal-nan), and shapes must match. Prints the max\n"
                     "absolute and relative error of each output and the first element that\n"
                     "differs. Exit status 7 when any output differs.\n"
                     "\n"
                     "options:\n"
                     "%MODEL%"
                     "  -e, --expected [OUT=]FILE.npy  expected value of output OUT (a path such\n"
                     "                         as 0 or 1.0); without OUT=, the next output in\n"
                     "                         order; repeatable\n"
                     "  --rtol X               relative tolerance [1e-05]\n"
                     "  --atol X               absolute tolerance [1e-08]\n"
                     "  --equal-nan            NaN equals NaN\n"
                     "  -o, --output-dir DIR   also write the outputs as .npy files there\n"
                     "  -h, --help             show this help\n",
     cli_cmd_check, 1},
    {"bench", "[options] MODEL.vmx [INPUT.npy...]",
     "Time a function on the device with TVM's time_evaluator.",
     MODEL_HELP_HEAD "Inputs that are not given are generated (uniform [-1, 1) for float32 and\n"
                     "float64, zeros otherwise) for parameters of a fixed type and shape. Prints\n"
                     "the init time (upload + create VM + set inputs), the first run, the\n"
                     "evaluator's discarded warm-up, then mean, median, min, max and std per\n"
                     "call over the repeats (p90 from 10 repeats, p99 from 100), in ms, for the\n"
                     "wall clock and, when the device has a timer, the device time. Timing runs\n"
                     "on the agent: the network is never measured. --json adds the per-repeat\n"
                     "list, the device's properties, the agent's version and the executable's\n"
                     "SHA-256.\n"
                     "\n"
                     "options (time_evaluator's, with its defaults):\n"
                     "  -n, --number N         calls per repeat [10]\n"
                     "  -r, --repeat N         measurements, 1..1048576 [1]\n"
                     "  --min-repeat-ms MS     grow number until a repeat lasts this long [0]\n"
                     "  --limit-zero-time-iterations N  zero readings allowed before a zero is\n"
                     "                         kept [100]\n"
                     "  --cooldown-interval-ms MS  sleep between groups of repeats [0]\n"
                     "  --repeats-to-cooldown N    repeats per group [1]\n"
                     "  --cache-flush-bytes SIZE   bytes written to flush host caches before each\n"
                     "                         repeat; K, M, G suffixes [0]\n"
                     "  --max-temp C           first wait until every thermal zone is at or\n"
                     "                         below C degrees [no wait]\n"
                     "  --max-temp-wait S      wait at most this long, then measure anyway [60]\n"
                     "The device's state (clocks, temperatures, load, other sessions) is\n"
                     "recorded before and after; throttling seen in it is named.\n"
                     "model options:\n"
                     "%MODEL%"
                     "  -h, --help             show this help\n",
     cli_cmd_bench, 1},
    {"compare", "[options] A.vmx [B.vmx] [INPUT.npy...]",
     "Is B faster, slower or the same as A on the device? A verdict a CI can use.",
     MODEL_HELP_HEAD "Both executables (or two functions of A.vmx: --func-b) run on the same\n"
                     "agent and device, with the same inputs (given or generated as for\n"
                     "'vmclient bench'). Each is calibrated so that a batch of calls lasts\n"
                     "--round-ms; then rounds A B, B A, A B, ... time both with the agent's\n"
                     "time evaluator, --repeats batches each, the fastest counting (device\n"
                     "time where the device has a timer, else wall). The ratio B/A is the\n"
                     "Hodges-Lehmann estimate over rounds with its signed-rank interval;\n"
                     "rounds are added until the interval decides\n"
                     "('faster': below 1 - threshold; 'slower': above 1 + threshold; 'same':\n"
                     "within 1 +- threshold) or the budget runs out ('inconclusive').\n"
                     "Exit status: 0 same or faster, 8 slower, 9 inconclusive.\n"
                     "\n"
                     "options:\n"
                     "  --func-b NAME          B's function [the same as --func]\n"
                     "  -t, --threshold X      relative difference that matters: 2% or 0.02 [2%]\n"
                     "  --confidence X         family-wise level over every look [95%]\n"
                     "  --min-rounds N         rounds before the first look, 2..1000 [10]\n"
                     "  --max-rounds N         1..1000 [100]\n"
                     "  --max-seconds S        no round starts that would end later [300]\n"
                     "  --round-ms MS          each batch of calls lasts about this [1]\n"
                     "  -r, --repeats N        batches per side per round, 1..100 [20]\n"
                     "  --cooldown-ms MS       sleep between rounds [0]\n"
                     "  --max-temp C           before each round, wait until every thermal zone\n"
                     "                         is at or below C degrees [no wait]\n"
                     "  --max-temp-wait S      wait at most this long each time, then measure\n"
                     "                         anyway with a warning [60]\n"
                     "The device's state (clocks, temperatures, load, other sessions) is\n"
                     "recorded before, after every round and after; throttling seen in it is\n"
                     "named.\n"
                     "model options (shared by A and B):\n"
                     "%MODEL%"
                     "  -h, --help             show this help\n",
     cli_cmd_compare, 1},
    {"profile", "[options] MODEL.vmx [INPUT.npy...]", "Profile a function per operator.",
     MODEL_HELP_HEAD "Inputs are given or generated as for 'vmclient bench'. Runs the function\n"
                     "once (first-run costs such as kernel builds), then once more with a\n"
                     "device sync around every operator call, and prints a row per operator:\n"
                     "calls, total and mean wall time, device time (when the device has a\n"
                     "timer) and share of the total, largest first.\n"
                     "\n"
                     "options:\n"
                     "%MODEL%"
                     "  -h, --help             show this help\n",
     cli_cmd_profile, 1},
    {"stats", "[IN.vmx]", "Summarise a .vmx file, or (without a file) show the agent's counters.",
     "With a file: prints the SHA-256 of the file (the key of the agent's\n"
     "executable store), counts per section, tensor bytes, code size, and each\n"
     "function with its kind, arity, registers and instruction count. No agent\n"
     "is involved.\n"
     "\n"
     "Without a file: connects to the agent (--host) and prints its counters:\n"
     "sessions, memory held by all sessions, resident memory, requests served\n"
     "and the executable store.\n"
     "\n"
     "options:\n"
     "  -h, --help             show this help\n",
     cli_cmd_stats, 1},
    {"compile", "[options] MODEL.onnx", "Compile an ONNX model into a .vmx executable.",
     "Parses the model, fixes every shape, evaluates the shape arithmetic on\n"
     "constants here and lowers every other node to the cl.* operators\n"
     "(docs/onnx.md). main takes the graph's inputs by name and returns its\n"
     "outputs in order. An operator, attribute value or dtype the compiler does\n"
     "not support fails with exit 3 and names the node. run, check, bench and\n"
     "profile also accept MODEL.onnx and compile it on the fly, the input\n"
     "shapes taken from the input files.\n"
     "\n"
     "options:\n"
     "  -o, --output OUT       where to write (default: MODEL with .onnx replaced\n"
     "                         by .vmx; \"-\" = standard output)\n"
     "  --input-shape NAME=D0,D1,...  fix the shape of input NAME (required for\n"
     "                         dynamic dims; must agree with static ones);\n"
     "                         repeatable\n"
     "  --const NAME=FILE.npy  bind input NAME to a constant; repeatable\n"
     "  --fuse-elementwise     fuse chains of elementwise nodes into\n"
     "                         cl.elementwise calls (default: one call per node)\n"
     "  --json                 print the summary as JSON: ops used, constants and\n"
     "                         their bytes, planned vs unplanned memory\n"
     "  -q, --quiet            no summary\n"
     "  -h, --help             show this help\n",
     cli_cmd_compile, 0},
    {"asm", "[-o OUT.vmx] IN.vmasm", "Assemble a .vmasm text file into a .vmx executable.",
     "Reads the text form (docs/vmasm.md; \"-\" = standard input), checks it\n"
     "like the loader checks a file, and writes the executable atomically.\n"
     "\n"
     "options:\n"
     "  -o, --output OUT  where to write (default: IN with .vmasm replaced by .vmx;\n"
     "                    \"-\" = standard output)\n"
     "  -h, --help        show this help\n",
     cli_cmd_asm, 0},
    {"disasm", "[-o OUT.vmasm] IN.vmx", "Print a .vmx executable as .vmasm text.",
     "Loads and verifies the executable (\"-\" = standard input) and prints its\n"
     "text form, which 'vmclient asm' turns back into the same bytes.\n"
     "\n"
     "options:\n"
     "  -o, --output OUT  write to OUT atomically instead of standard output\n"
     "  -h, --help        show this help\n",
     cli_cmd_disasm, 0},
    {"help", "[COMMAND]", "Show the help of vmclient or of one command.", "", cmd_help, 0},
};
#define NUM_COMMANDS (sizeof(k_commands) / sizeof(k_commands[0]))

const cli_command_t *cli_find_command(const char *name) {
  for (size_t i = 0; i < NUM_COMMANDS; i++)
    if (strcmp(k_commands[i].name, name) == 0) return &k_commands[i];
  return NULL;
}

static void print_usage(FILE *f) {
  fprintf(f,
          "usage: vmclient [GLOBAL OPTIONS] COMMAND [ARGS...]\n"
          "\n"
          "Drive vmrpc executables and agents. Commands:\n");
  for (size_t i = 0; i < NUM_COMMANDS; i++)
    fprintf(f, "  %-8s %s\n", k_commands[i].name, k_commands[i].summary);
  fprintf(f, "\n%s", cli_global_help);
  fprintf(f,
          "  -V, --version          print the version and exit\n"
          "  -h, --help             show this help\n"
          "\n"
          "Run 'vmclient COMMAND --help' for a command's options.\n"
          "Exit codes: 0 success, 1 internal error, 2 usage error, 3 invalid input file,\n"
          "4 I/O error, 5 cannot reach the agent, 6 the agent returned an error,\n"
          "7 check: outputs differ (docs/cli.md).\n");
}

static int cmd_help(const cli_global_t *g, int argc, char **argv) {
  (void)g;
  cli_args_t a = {"help", argc, argv, 1, 0};
  const char *val, *topic = NULL;
  for (;;) {
    int r = cli_next_arg(&a, NULL, &val);
    if (r == CLI_ARG_END) break;
    if (r == CLI_ARG_ERROR) return CLI_EXIT_USAGE;
    if (r == CLI_OPT_HELP) {
      cli_print_command_help(cli_find_command("help"));
      return CLI_EXIT_OK;
    }
    if (topic) return cli_usage_error("help", "more than one command given");
    topic = val;
  }
  if (!topic) {
    print_usage(stdout);
    return CLI_EXIT_OK;
  }
  const cli_command_t *c = cli_find_command(topic);
  if (!c) return cli_usage_error("help", "unknown command '%.64s'", topic);
  cli_print_command_help(c);
  return CLI_EXIT_OK;
}

enum { GOPT_VERSION = 1 };

static const cli_opt_t k_global_opts[] = {
    {"version", 'V', 0, GOPT_VERSION},
    CLI_GLOBAL_OPTS,
    {0},
};

int main(int argc, char **argv) {
  /* A closed stdout pipe must end in an I/O error exit, not a signal. */
  signal(SIGPIPE, SIG_IGN);
#ifdef __GLIBC__
  /* Chunk messages (up to 64 MiB each, 1 MiB by default) are allocated and
   * freed by the thousand during a transfer: keep them in the heap instead
   * of handing their pages back to the kernel after each one, so the next
   * chunk reuses them rather than faulting fresh pages in (the library
   * leaves its host's allocator alone; docs/performance.md). */
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 128 << 20);
#endif
  cli_global_t g;
  memset(&g, 0, sizeof(g));

  /* Global options come before the command; the first positional is it. */
  cli_args_t a = {NULL, argc, argv, 1, 0};
  const char *val, *name = NULL;
  while (!name) {
    int r = cli_next_arg(&a, k_global_opts, &val);
    if (r == CLI_ARG_END) break;
    if (r == CLI_ARG_ERROR) return CLI_EXIT_USAGE;
    if (r == CLI_OPT_HELP) {
      print_usage(stdout);
      return fflush(stdout) == 0 ? CLI_EXIT_OK : CLI_EXIT_IO;
    }
    if (r == GOPT_VERSION) {
      printf("vmclient %s (executable format %d.%d)\n", VMRPC_VERSION, VM_FORMAT_MAJOR,
             VM_FORMAT_MINOR);
      return fflush(stdout) == 0 ? CLI_EXIT_OK : CLI_EXIT_IO;
    }
    if (r >= CLI_GOPT_BASE) {
      int rc = cli_global_apply(&g, NULL, r, val);
      if (rc) return rc;
      continue;
    }
    name = val;
  }
  if (!name) return cli_usage_error(NULL, "missing command");
  const cli_command_t *c = cli_find_command(name);
  if (!c) return cli_usage_error(NULL, "unknown command '%.64s'", name);
  /* The command sees argv from its own name on. */
  int rc = c->run(&g, argc - (a.i - 1), argv + (a.i - 1));
  if (fflush(stdout) != 0 && rc == CLI_EXIT_OK) {
    cli_error(c->name, "writing to standard output failed");
    rc = CLI_EXIT_IO;
  }
  return rc;
}
