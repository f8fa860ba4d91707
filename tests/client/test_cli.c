/* The vmclient CLI, driven as a user drives it: the real binary, started
 * with fork/exec, its stdout/stderr captured, its exit status checked.
 * Covers asm/disasm round trips through files and pipes, stats and the
 * SHA-256 identity, the documented exit codes on corrupted, missing and
 * unreadable inputs, usage errors and --help. Every failure must be an
 * exit (never a signal) with exactly one line on stderr. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "sample_exec.h"
#include "run_proc.h"
#include "test_util.h"
#include "vm/executable.h"

/* Exit codes from docs/cli.md. */
enum { EXIT_USAGE = 2, EXIT_INPUT = 3, EXIT_IO = 4 };

static char g_vmclient[4096];
static char g_dir[4096]; /* scratch directory, removed at the end */

/* Runs vmclient in the scratch directory (see run_proc); 60 s bound. */
static void run_cli(const char *const *args, const void *in, size_t in_n, const char *stdout_file,
                    run_result_t *r) {
  run_proc(g_vmclient, args, g_dir, in, in_n, stdout_file, 60, r);
}

/* Runs and checks the exit code (never a signal). A failure must print
 * exactly one line on stderr, starting "vmclient: "; a success prints
 * nothing there. */
static void run_expect(const char *const *args, const void *in, size_t in_n, int code,
                       run_result_t *r) {
  run_cli(args, in, in_n, NULL, r);
  if (!WIFEXITED(r->status))
    fail_msg("vmclient %s: killed by signal %d", args[0] ? args[0] : "", WTERMSIG(r->status));
  if (WEXITSTATUS(r->status) != code)
    fail_msg("vmclient %s %s: exit %d, expected %d; stderr: %s", args[0] ? args[0] : "",
             args[0] && args[1] ? args[1] : "", WEXITSTATUS(r->status), code, r->err);
  if (code == 0) {
    assert_int_equal(r->err_n, 0);
    return;
  }
  if (strncmp(r->err, "vmclient: ", 10) != 0 || r->err_n == 0 || r->err[r->err_n - 1] != '\n' ||
      memchr(r->err, '\n', r->err_n) != r->err + r->err_n - 1)
    fail_msg("stderr is not one 'vmclient: ' line: [%s]", r->err);
}

static void path_in_dir(char *out, size_t n, const char *name) {
  snprintf(out, n, "%s/%s", g_dir, name);
}

static void write_file(const char *path, const void *d, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  if (n) assert_int_equal(fwrite(d, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}

static uint8_t *read_file(const char *path, size_t *n) {
  uint8_t *d;
  ASSERT_OK(vm_read_file(path, UINT64_C(1) << 30, &d, n));
  return d;
}

/* The rich sample as text and as bytes. */
static void rich(char **text, uint8_t **bytes, size_t *nbytes) {
  vm_executable_t *e = sample_exec_rich();
  ASSERT_OK(vm_executable_disasm(e, text));
  sample_exec_bytes(e, bytes, nbytes);
  vm_executable_free(e);
}

/* ---------------------------------------------------------------------------
 * Tests
 */

static void test_help_and_version(void **state) {
  (void)state;
  run_result_t r;
  run_expect((const char *[]){"--help", NULL}, NULL, 0, 0, &r);
  assert_non_null(strstr(r.out, "usage: vmclient"));
  assert_non_null(strstr(r.out, "asm"));
  assert_non_null(strstr(r.out, "disasm"));
  assert_non_null(strstr(r.out, "stats"));
  assert_non_null(strstr(r.out, "Exit codes"));
  run_result_free(&r);
  run_expect((const char *[]){"-h", NULL}, NULL, 0, 0, &r);
  run_result_free(&r);
  run_expect((const char *[]){"--version", NULL}, NULL, 0, 0, &r);
  assert_true(strncmp(r.out, "vmclient ", 9) == 0);
  assert_non_null(strstr(r.out, "executable format 1."));
  run_result_free(&r);
  static const char *cmds[] = {"asm", "disasm", "stats"};
  for (int i = 0; i < 3; i++) {
    run_expect((const char *[]){cmds[i], "--help", NULL}, NULL, 0, 0, &r);
    char want[64];
    snprintf(want, sizeof(want), "usage: vmclient %s ", cmds[i]);
    assert_true(strncmp(r.out, want, strlen(want)) == 0);
    run_result_free(&r);
    run_expect((const char *[]){cmds[i], "-h", NULL}, NULL, 0, 0, &r);
    run_result_free(&r);
    run_expect((const char *[]){"help", cmds[i], NULL}, NULL, 0, 0, &r);
    assert_true(strncmp(r.out, want, strlen(want)) == 0);
    run_result_free(&r);
  }
  run_expect((const char *[]){"help", NULL}, NULL, 0, 0, &r);
  assert_non_null(strstr(r.out, "usage: vmclient"));
  run_result_free(&r);
}

static void test_usage_errors(void **state) {
  (void)state;
  run_result_t r;
  static const char *const cases[][5] = {
      {NULL},
      {"frob", NULL},
      {"--frob", "asm", NULL},
      {"--version=2", NULL},
      {"-Q", NULL},
      {"asm", NULL},
      {"asm", "--frob", "x.vmasm", NULL},
      {"asm", "-", NULL}, /* stdin needs -o */
      {"asm", "a.vmasm", "b.vmasm", NULL},
      {"asm", "a.vmasm", "-o", NULL},
      {"asm", "a.vmasm", "-o", "x", NULL}, /* fine so far ... */
      {"disasm", NULL},
      {"disasm", "a.vmx", "b.vmx", NULL},
      {"disasm", "-o", "x", "-o", "y"},
      {"disasm", "--output", NULL},
      {"disasm", "--help=yes", "a.vmx", NULL},
      {"stats", "--frob", NULL}, /* stats without a file asks the agent: test_cli_net.c */
      {"stats", "-o", "x", "a.vmx", NULL},
      {"stats", "a.vmx", "b.vmx", NULL},
      {"help", "frob", NULL},
      {"help", "asm", "disasm", NULL},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    if (i == 10) continue; /* a valid line (whose input is missing), see below */
    const char *args[6] = {0};
    for (int k = 0; k < 5 && cases[i][k]; k++) args[k] = cases[i][k];
    run_expect(args, NULL, 0, EXIT_USAGE, &r);
    run_result_free(&r);
  }
  run_expect((const char *[]){"frob", NULL}, NULL, 0, EXIT_USAGE, &r);
  assert_string_equal(r.err, "vmclient: unknown command 'frob' (see 'vmclient --help')\n");
  run_result_free(&r);
  run_expect((const char *[]){"asm", "--frob", "x", NULL}, NULL, 0, EXIT_USAGE, &r);
  assert_string_equal(r.err,
                      "vmclient: asm: unknown option '--frob' (see 'vmclient asm --help')\n");
  run_result_free(&r);
}

static void test_round_trip_through_files(void **state) {
  (void)state;
  char *text;
  uint8_t *bytes;
  size_t nbytes;
  rich(&text, &bytes, &nbytes);
  char in[4200], out[4200], out2[4200], def[4200];
  path_in_dir(in, sizeof(in), "rich.vmasm");
  path_in_dir(out, sizeof(out), "rich_out.vmx");
  path_in_dir(out2, sizeof(out2), "again.vmasm");
  path_in_dir(def, sizeof(def), "rich.vmx");
  write_file(in, text, strlen(text));
  run_result_t r;

  /* asm -o: the exact bytes the library writes. */
  run_expect((const char *[]){"asm", in, "-o", out, NULL}, NULL, 0, 0, &r);
  assert_int_equal(r.out_n, 0);
  run_result_free(&r);
  size_t n;
  uint8_t *got = read_file(out, &n);
  assert_int_equal(n, nbytes);
  assert_memory_equal(got, bytes, n);
  free(got);

  /* Default output name: IN.vmasm -> IN.vmx. */
  run_expect((const char *[]){"asm", in, NULL}, NULL, 0, 0, &r);
  run_result_free(&r);
  got = read_file(def, &n);
  assert_int_equal(n, nbytes);
  assert_memory_equal(got, bytes, n);
  free(got);

  /* disasm to stdout and to a file: the input text again. */
  run_expect((const char *[]){"disasm", out, NULL}, NULL, 0, 0, &r);
  assert_string_equal(r.out, text);
  run_result_free(&r);
  run_expect((const char *[]){"disasm", "--output", out2, out, NULL}, NULL, 0, 0, &r);
  assert_int_equal(r.out_n, 0);
  run_result_free(&r);
  got = read_file(out2, &n);
  assert_int_equal(n, strlen(text));
  assert_memory_equal(got, text, n);
  free(got);

  /* Pipes: text on stdin, bytes on stdout, and back. */
  run_expect((const char *[]){"asm", "-", "-o", "-", NULL}, text, strlen(text), 0, &r);
  assert_int_equal(r.out_n, nbytes);
  assert_memory_equal(r.out, bytes, nbytes);
  run_result_free(&r);
  run_expect((const char *[]){"disasm", "-", NULL}, bytes, nbytes, 0, &r);
  assert_string_equal(r.out, text);
  run_result_free(&r);
  /* Names that look like options (runs happen in the scratch directory):
   * an option's value is taken as is, and "--" ends the options. */
  char dash_in[4200], dash_out[4200];
  path_in_dir(dash_in, sizeof(dash_in), "-in.vmx");
  path_in_dir(dash_out, sizeof(dash_out), "-out.vmasm");
  write_file(dash_in, bytes, nbytes);
  run_expect((const char *[]){"disasm", "-o", "-out.vmasm", "--", "-in.vmx", NULL}, NULL, 0, 0, &r);
  run_result_free(&r);
  got = read_file(dash_out, &n);
  assert_int_equal(n, strlen(text));
  assert_memory_equal(got, text, n);
  free(got);
  run_expect((const char *[]){"disasm", "-in.vmx", NULL}, NULL, 0, EXIT_USAGE, &r);
  run_result_free(&r);
  free(text);
  free(bytes);
}

static void test_stats_prints_sha256(void **state) {
  (void)state;
  char *text;
  uint8_t *bytes;
  size_t nbytes;
  rich(&text, &bytes, &nbytes);
  char path[4200];
  path_in_dir(path, sizeof(path), "stats.vmx");
  write_file(path, bytes, nbytes);
  uint8_t digest[VM_SHA256_BYTES];
  char hex[2 * VM_SHA256_BYTES + 1], want[128];
  vm_sha256(bytes, nbytes, digest);
  vm_sha256_hex(digest, hex);
  snprintf(want, sizeof(want), "sha256:       %s\n", hex);
  run_result_t r;
  run_expect((const char *[]){"stats", path, NULL}, NULL, 0, 0, &r);
  assert_true(strncmp(r.out, want, strlen(want)) == 0);
  assert_non_null(strstr(r.out, "functions:    6 (3 packed, 3 bytecode)\n"));
  char size_line[64];
  snprintf(size_line, sizeof(size_line), "file size:    %zu bytes\n", nbytes);
  assert_non_null(strstr(r.out, size_line));
  assert_non_null(strstr(r.out, "  bytecode     2     5      11  @main\n"));
  run_result_free(&r);
  free(text);
  free(bytes);
}

/* disasm and stats on a bad input: the documented code, one line, no
 * signal. A flipped bit may still leave a valid file (tensor data, names):
 * then the command succeeds. */
static void expect_bad_vmx(const char *path, int code) {
  static const char *cmds[] = {"disasm", "stats"};
  for (int i = 0; i < 2; i++) {
    run_result_t r;
    run_expect((const char *[]){cmds[i], path, NULL}, NULL, 0, code, &r);
    if (code) {
      char prefix[64];
      snprintf(prefix, sizeof(prefix), "vmclient: %s: ", cmds[i]);
      assert_true(strncmp(r.err, prefix, strlen(prefix)) == 0);
    }
    run_result_free(&r);
  }
}

static void test_corrupted_inputs(void **state) {
  (void)state;
  char *text;
  uint8_t *bytes;
  size_t nbytes;
  rich(&text, &bytes, &nbytes);
  char path[4200];

  path_in_dir(path, sizeof(path), "does-not-exist.vmx");
  expect_bad_vmx(path, EXIT_IO);
  expect_bad_vmx(g_dir, EXIT_IO); /* a directory */

  path_in_dir(path, sizeof(path), "empty.vmx");
  write_file(path, "", 0);
  expect_bad_vmx(path, EXIT_INPUT);

  path_in_dir(path, sizeof(path), "text.vmx");
  write_file(path, text, strlen(text)); /* text where bytes are expected */
  expect_bad_vmx(path, EXIT_INPUT);

  size_t cuts[] = {1, 7, 8, 16, 31, 64, nbytes / 2, nbytes - 1};
  for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) {
    path_in_dir(path, sizeof(path), "truncated.vmx");
    write_file(path, bytes, cuts[i]);
    expect_bad_vmx(path, EXIT_INPUT);
  }

  /* Bit flips all over the file. */
  uint64_t rng = 0x5eed;
  uint8_t *copy = malloc(nbytes);
  int refused = 0;
  for (int i = 0; i < 120; i++) {
    memcpy(copy, bytes, nbytes);
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    size_t at = (size_t)(rng >> 33) % nbytes;
    copy[at] ^= (uint8_t)(1u << ((rng >> 20) & 7));
    path_in_dir(path, sizeof(path), "flipped.vmx");
    write_file(path, copy, nbytes);
    vm_executable_t *e = NULL;
    vm_status_t st = vm_executable_load(copy, nbytes, NULL, &e);
    int code = st ? EXIT_INPUT : 0;
    refused += st != NULL;
    vm_status_free(st);
    vm_executable_free(e);
    expect_bad_vmx(path, code);
  }
  assert_true(refused > 30);
  free(copy);
  free(text);
  free(bytes);
}

static void test_asm_errors(void **state) {
  (void)state;
  char in[4200], out[4200];
  run_result_t r;
  path_in_dir(in, sizeof(in), "bad.vmasm");
  path_in_dir(out, sizeof(out), "bad.vmx");
  unlink(out);
  const char *bad = ".packed $p\n.func @f() regs 1 {\n  frob %0\n}\n";
  write_file(in, bad, strlen(bad));
  run_expect((const char *[]){"asm", in, "-o", out, NULL}, NULL, 0, EXIT_INPUT, &r);
  assert_non_null(strstr(r.err, "line 3: unknown mnemonic 'frob'"));
  run_result_free(&r);
  assert_int_equal(access(out, F_OK), -1); /* nothing written */

  /* Control bytes in the text never break the one-line rule. */
  const char garbage[] = "\x01\n\x1b[31m\r\n\0zz";
  write_file(in, garbage, sizeof(garbage));
  run_expect((const char *[]){"asm", in, "-o", out, NULL}, NULL, 0, EXIT_INPUT, &r);
  run_result_free(&r);

  run_expect((const char *[]){"asm", "-", "-o", out, NULL}, "\"", 1, EXIT_INPUT, &r);
  assert_non_null(strstr(r.err, "<stdin>: line 1: unterminated string"));
  run_result_free(&r);

  char missing[4200];
  path_in_dir(missing, sizeof(missing), "missing.vmasm");
  run_expect((const char *[]){"asm", missing, "-o", out, NULL}, NULL, 0, EXIT_IO, &r);
  run_result_free(&r);
  run_expect((const char *[]){"asm", g_dir, "-o", out, NULL}, NULL, 0, EXIT_IO, &r);
  run_result_free(&r);

  /* Output that cannot be written. */
  const char *good = ".packed $p\n";
  write_file(in, good, strlen(good));
  char nodir[4200];
  path_in_dir(nodir, sizeof(nodir), "no/such/dir/x.vmx");
  run_expect((const char *[]){"asm", in, "-o", nodir, NULL}, NULL, 0, EXIT_IO, &r);
  run_result_free(&r);
  run_expect((const char *[]){"asm", in, "-o", out, NULL}, NULL, 0, 0, &r);
  run_result_free(&r);
  run_expect((const char *[]){"disasm", out, "-o", nodir, NULL}, NULL, 0, EXIT_IO, &r);
  run_result_free(&r);
  /* stdout on a full device. */
  run_cli((const char *[]){"disasm", out, NULL}, NULL, 0, "/dev/full", &r);
  assert_true(WIFEXITED(r.status));
  assert_int_equal(WEXITSTATUS(r.status), EXIT_IO);
  assert_non_null(strstr(r.err, "vmclient: disasm: writing to standard output"));
  run_result_free(&r);
}

/* Garbage of every kind on stdin: always an exit, never a signal. */
static void test_random_inputs_never_crash(void **state) {
  (void)state;
  uint64_t rng = 0xabcdef;
  char *text;
  uint8_t *bytes;
  size_t nbytes;
  rich(&text, &bytes, &nbytes);
  for (int i = 0; i < 40; i++) {
    size_t n = (size_t)(i * 37 % 500);
    uint8_t *d = malloc(n + 1);
    for (size_t k = 0; k < n; k++) {
      rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
      d[k] = (uint8_t)(rng >> 56);
    }
    if (i % 2 && n > 8) memcpy(d, bytes, 8); /* a valid magic, then garbage */
    run_result_t r;
    run_cli((const char *[]){i % 2 ? "disasm" : "asm", "-", "-o", "-", NULL}, d, n, NULL, &r);
    if (!WIFEXITED(r.status)) fail_msg("signal %d", WTERMSIG(r.status));
    int c = WEXITSTATUS(r.status);
    assert_true(c == 0 || c == EXIT_INPUT);
    run_result_free(&r);
    free(d);
  }
  free(text);
  free(bytes);
}

/* vmclient compile on ONNX node test models (Debian libonnx-testdata; the
 * test is skipped without it) and on files that are not models. */
static void test_compile_onnx(void **state) {
  (void)state;
  const char *relu = "/usr/share/libonnx-testdata/data/node/test_relu/model.onnx";
  const char *drop = "/usr/share/libonnx-testdata/data/node/test_training_dropout/model.onnx";
  run_result_t r;
  char junk[4200], out[4200];
  path_in_dir(junk, sizeof(junk), "junk.onnx");
  path_in_dir(out, sizeof(out), "relu.vmx");
  static const char k_junk[] = "\xff\xff\xffnot a model";
  write_file(junk, k_junk, sizeof(k_junk) - 1);
  const char *a1[] = {"compile", junk, "-o", out, NULL};
  run_expect(a1, NULL, 0, 3, &r);
  assert_non_null(strstr(r.err, "not an ONNX model"));
  run_result_free(&r);
  const char *a2[] = {"compile", "missing.onnx", NULL};
  run_expect(a2, NULL, 0, 4, &r);
  run_result_free(&r);
  const char *a3[] = {"compile", "--input-shape", "x=2,oops", junk, NULL};
  run_expect(a3, NULL, 0, 2, &r);
  assert_non_null(strstr(r.err, "'oops' is not a dim"));
  run_result_free(&r);
  if (access(relu, R_OK) != 0 || access(drop, R_OK) != 0) {
    print_message("skipped the model cases: no libonnx-testdata\n");
    return;
  }
  const char *a4[] = {"compile", relu, "-o", out, NULL};
  run_expect(a4, NULL, 0, 0, &r);
  assert_non_null(strstr(r.out, "ops: Relu x1"));
  assert_non_null(strstr(r.out, "memory: planned"));
  run_result_free(&r);
  assert_int_equal(access(out, R_OK), 0);
  const char *a5[] = {"compile", "--json", relu, "-o", out, NULL};
  run_expect(a5, NULL, 0, 0, &r);
  assert_non_null(strstr(r.out, "\"ops\":{\"Relu\":1}"));
  assert_non_null(strstr(r.out, "\"unplanned_bytes\":"));
  run_result_free(&r);
  /* an unsupported attribute value: exit 3, one line naming node and op */
  const char *a6[] = {"compile", drop, "-o", out, NULL};
  run_expect(a6, NULL, 0, 3, &r);
  assert_non_null(strstr(r.err, "node 0 (Dropout): training_mode must be a constant"));
  run_result_free(&r);
  /* options that do not fit the model: exit 2 */
  const char *a7[] = {"compile", "--input-shape", "nope=1,2", relu, "-o", out, NULL};
  run_expect(a7, NULL, 0, 2, &r);
  assert_non_null(strstr(r.err, "input shape for 'nope': the graph has no such input"));
  run_result_free(&r);
  const char *a8[] = {"compile", "--input-shape", "x=3,4,6", relu, "-o", out, NULL};
  run_expect(a8, NULL, 0, 2, &r);
  assert_non_null(strstr(r.err, "dim 2 is 6, the graph fixes it to 5"));
  run_result_free(&r);
  /* an input that is not a tensor: exit 3, naming it */
  const char *opt = "/usr/share/libonnx-testdata/data/node/test_identity_opt/model.onnx";
  if (access(opt, R_OK) == 0) {
    const char *a9[] = {"compile", opt, "-o", out, NULL};
    run_expect(a9, NULL, 0, 3, &r);
    assert_non_null(
        strstr(r.err, "input 'opt_in' has an optional type: supported: tensor types only"));
    run_result_free(&r);
  }
}

static int setup(void **state) {
  (void)state;
  signal(SIGPIPE, SIG_IGN);
  return run_proc_setup("client/vmclient", g_vmclient, sizeof(g_vmclient), "vmrpc_cli_", g_dir,
                        sizeof(g_dir));
}

static int teardown(void **state) {
  (void)state;
  return run_proc_rmdir(g_dir); /* our own scratch folder */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_help_and_version),          cmocka_unit_test(test_usage_errors),
      cmocka_unit_test(test_round_trip_through_files),  cmocka_unit_test(test_stats_prints_sha256),
      cmocka_unit_test(test_corrupted_inputs),          cmocka_unit_test(test_asm_errors),
      cmocka_unit_test(test_random_inputs_never_crash), cmocka_unit_test(test_compile_onnx),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
