/* vmclient: the command-line client. main() parses the global options,
 * then dispatches through the command table (cli_commands.c); each
 * subcommand parses its own options and returns an exit code
 * (docs/cli.md). */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "cli.h"
#include "vm/executable.h"

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
  cli_args_t a;
  cli_args_init(&a, NULL, argc, argv);
  a.tables[0] = cli_main_opts;
  a.tables[1] = cli_global_opts;
  const char *val, *name = NULL;
  while (!name) {
    int r = cli_next_arg(&a, &val);
    if (r == CLI_ARG_END) break;
    if (r == CLI_ARG_ERROR) return CLI_EXIT_USAGE;
    if (r == CLI_OPT_HELP) {
      cli_print_usage(stdout);
      return fflush(stdout) == 0 ? CLI_EXIT_OK : CLI_EXIT_IO;
    }
    if (r == CLI_MAIN_OPT_VERSION) {
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
