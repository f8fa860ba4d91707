/* vmclient: the command-line client. main() parses the global options,
 * then dispatches through the command table below; each subcommand parses
 * its own options and returns an exit code (docs/cli.md). */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "vm/executable.h"

static int cmd_help(const cli_global_t *g, int argc, char **argv);

/* The command table: one row per subcommand, in the order --help lists
 * them. Network commands (info, ping, upload, run, bench, profile, check)
 * slot in here. */
static const cli_command_t k_commands[] = {
    {"asm", "[-o OUT.vmx] IN.vmasm", "Assemble a .vmasm text file into a .vmx executable.",
     "Reads the text form (docs/vmasm.md; \"-\" = standard input), checks it\n"
     "like the loader checks a file, and writes the executable atomically.\n"
     "\n"
     "options:\n"
     "  -o, --output OUT  where to write (default: IN with .vmasm replaced by .vmx;\n"
     "                    \"-\" = standard output)\n"
     "  -h, --help        show this help\n",
     cli_cmd_asm},
    {"disasm", "[-o OUT.vmasm] IN.vmx", "Print a .vmx executable as .vmasm text.",
     "Loads and verifies the executable (\"-\" = standard input) and prints its\n"
     "text form, which 'vmclient asm' turns back into the same bytes.\n"
     "\n"
     "options:\n"
     "  -o, --output OUT  write to OUT atomically instead of standard output\n"
     "  -h, --help        show this help\n",
     cli_cmd_disasm},
    {"stats", "IN.vmx", "Summarise a .vmx executable and print its SHA-256 identity.",
     "Prints the SHA-256 of the file (the key of the agent's executable\n"
     "store), counts per section, tensor bytes, code size, and each function\n"
     "with its kind, arity, registers and instruction count.\n"
     "\n"
     "options:\n"
     "  -h, --help        show this help\n",
     cli_cmd_stats},
    {"help", "[COMMAND]", "Show the help of vmclient or of one command.", "", cmd_help},
};
#define NUM_COMMANDS (sizeof(k_commands) / sizeof(k_commands[0]))

const cli_command_t *cli_find_command(const char *name) {
  for (size_t i = 0; i < NUM_COMMANDS; i++)
    if (strcmp(k_commands[i].name, name) == 0) return &k_commands[i];
  return NULL;
}

static void print_usage(FILE *f) {
  fprintf(f,
          "usage: vmclient [--help] [--version] COMMAND [ARGS...]\n"
          "\n"
          "Drive vmrpc executables and agents. Commands:\n");
  for (size_t i = 0; i < NUM_COMMANDS; i++)
    fprintf(f, "  %-8s %s\n", k_commands[i].name, k_commands[i].summary);
  fprintf(f,
          "\n"
          "Run 'vmclient COMMAND --help' for a command's options.\n"
          "Exit codes: 0 success, 1 internal error, 2 usage error, 3 invalid input file,\n"
          "4 I/O error, 5 connection error, 6 remote error (docs/cli.md).\n");
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
    {0},
};

int main(int argc, char **argv) {
  /* A closed stdout pipe must end in an I/O error exit, not a signal. */
  signal(SIGPIPE, SIG_IGN);
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
