/* Runs a program to completion for CLI tests, capturing its output. */
#ifndef VMRPC_TEST_RUN_PROC_H
#define VMRPC_TEST_RUN_PROC_H

#include <stddef.h>

typedef struct run_result {
  int status; /* from waitpid */
  char *out;  /* captured stdout, NUL-terminated ("" when redirected) */
  size_t out_n;
  char *err; /* captured stderr, NUL-terminated */
  size_t err_n;
} run_result_t;

/* Runs prog with args (NULL-terminated, without argv[0], at most 62) in dir,
 * feeding in[0..in_n) on stdin (NULL: an empty stdin). stdout goes to
 * stdout_file when given, else is captured. A run over timeout_s seconds is
 * killed and fails the test (cmocka). */
void run_proc(const char *prog, const char *const *args, const char *dir, const void *in,
              size_t in_n, const char *stdout_file, double timeout_s, run_result_t *r);

void run_result_free(run_result_t *r);

/* $VMRPC_BUILD_DIR/rel into out when it is an executable program; else
 * says why on stderr and returns -1 (a suite's setup then fails). */
int run_proc_program(const char *rel, char *out, size_t n);

/* A fresh scratch folder $TMPDIR/<prefix>XXXXXX (TMPDIR defaults to /tmp)
 * into out; -1 on failure. run_proc_rmdir removes it with everything in
 * it. */
int run_proc_mkdtemp(const char *prefix, char *out, size_t n);
int run_proc_rmdir(const char *dir);

/* Both of the above for a suite's setup: run_proc_program(rel) into prog
 * and run_proc_mkdtemp(prefix) into dir; 0 or -1. */
int run_proc_setup(const char *rel, char *prog, size_t prog_n, const char *prefix, char *dir,
                   size_t dir_n);

/* Fails the test unless the vmclient run in r exited (no signal) with
 * code, and, when code is not 0, printed exactly one "vmclient: " line on
 * stderr (docs/cli.md, Output and errors). what names the command. */
void run_expect_cli_exit(const run_result_t *r, int code, const char *what);

#endif
