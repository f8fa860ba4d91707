/* The vmclient network commands end to end: the real vmclient binary
 * (fork/exec, stdout/stderr captured) against a real vmagent on a free
 * loopback port (agent_proc). Every command's success path (info, ping,
 * upload, run, check, bench, profile, stats), its --json output parsed by
 * a small JSON parser and checked, --help of every command, and the
 * documented exit codes of the main failures: agent down (5, with a hint),
 * wrong token (6), missing input (2), shape mismatch (6, the agent's
 * INVALID_ARGUMENT), bad .npy (3), missing file (4), outputs differ (7).
 * Also runs the C API example of README.md (tests/client/example_api.c). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
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

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "agent_proc.h"
#include "onnx_bytes.h"
#include "run_proc.h"
#include "test_util.h"
#include "vm/executable.h"

/* Exit codes from docs/cli.md. */
enum {
  EXIT_OK = 0,
  EXIT_USAGE = 2,
  EXIT_INPUT = 3,
  EXIT_IO = 4,
  EXIT_CONNECT = 5,
  EXIT_REMOTE = 6,
  EXIT_MISMATCH = 7
};

static char g_vmclient[4096];
static char g_example[4096];
static char g_gen_model[4096];
static char g_dir[4096]; /* scratch directory, removed at the end */
static agent_proc_t g_agent;

/* ------------------------------------------------------------------------
 * A minimal JSON parser: enough to check what vmclient --json prints.
 */
typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } jkind_t;

typedef struct jnode {
  jkind_t kind;
  double num;
  int b;
  char *str;           /* J_STR (unescaped) */
  struct jnode **kids; /* J_ARR, J_OBJ */
  char **keys;         /* J_OBJ */
  size_t n;
} jnode_t;

typedef struct jparser {
  const char *p;
  int depth;
} jparser_t;

static void jfree(jnode_t *n) {
  if (!n) return;
  for (size_t i = 0; i < n->n; i++) {
    jfree(n->kids[i]);
    if (n->keys) free(n->keys[i]);
  }
  free(n->kids);
  free(n->keys);
  free(n->str);
  free(n);
}

static void jws(jparser_t *j) {
  while (*j->p == ' ' || *j->p == '\n' || *j->p == '\t' || *j->p == '\r') j->p++;
}

static char *jstring(jparser_t *j) {
  if (*j->p != '"') return NULL;
  j->p++;
  size_t cap = 16, n = 0;
  char *s = malloc(cap);
  for (;;) {
    char c = *j->p++;
    if (c == '\0' || (unsigned char)c < 0x20) {
      free(s);
      return NULL;
    }
    if (c == '"') break;
    if (c == '\\') {
      char e = *j->p++;
      switch (e) {
        case '"': c = '"'; break;
        case '\\': c = '\\'; break;
        case '/': c = '/'; break;
        case 'n': c = '\n'; break;
        case 't': c = '\t'; break;
        case 'r': c = '\r'; break;
        case 'b': c = '\b'; break;
        case 'f': c = '\f'; break;
        case 'u': {
          unsigned v = 0;
          for (int i = 0; i < 4; i++) {
            char h = *j->p++;
            v <<= 4;
            if (h >= '0' && h <= '9')
              v |= (unsigned)(h - '0');
            else if (h >= 'a' && h <= 'f')
              v |= (unsigned)(h - 'a' + 10);
            else if (h >= 'A' && h <= 'F')
              v |= (unsigned)(h - 'A' + 10);
            else {
              free(s);
              return NULL;
            }
          }
          c = v < 0x80 ? (char)v : '?';
          break;
        }
        default: free(s); return NULL;
      }
    }
    if (n + 2 > cap) s = realloc(s, cap *= 2);
    s[n++] = c;
  }
  s[n] = '\0';
  return s;
}

static jnode_t *jvalue(jparser_t *j);

static jnode_t *jnew(jkind_t k) {
  jnode_t *n = calloc(1, sizeof(*n));
  n->kind = k;
  return n;
}

static void jadd(jnode_t *n, char *key, jnode_t *kid) {
  n->kids = realloc(n->kids, (n->n + 1) * sizeof(*n->kids));
  if (n->kind == J_OBJ) n->keys = realloc(n->keys, (n->n + 1) * sizeof(*n->keys));
  n->kids[n->n] = kid;
  if (n->kind == J_OBJ) n->keys[n->n] = key;
  n->n++;
}

static jnode_t *jvalue(jparser_t *j) {
  if (++j->depth > 64) return NULL;
  jws(j);
  jnode_t *n = NULL;
  char c = *j->p;
  if (c == '{' || c == '[') {
    int obj = c == '{';
    n = jnew(obj ? J_OBJ : J_ARR);
    j->p++;
    jws(j);
    if (*j->p == (obj ? '}' : ']')) {
      j->p++;
    } else {
      for (;;) {
        char *key = NULL;
        if (obj) {
          jws(j);
          key = jstring(j);
          jws(j);
          if (!key || *j->p != ':') {
            free(key);
            jfree(n);
            return NULL;
          }
          j->p++;
        }
        jnode_t *kid = jvalue(j);
        if (!kid) {
          free(key);
          jfree(n);
          return NULL;
        }
        jadd(n, key, kid);
        jws(j);
        if (*j->p == ',') {
          j->p++;
          continue;
        }
        if (*j->p == (obj ? '}' : ']')) {
          j->p++;
          break;
        }
        jfree(n);
        return NULL;
      }
    }
  } else if (c == '"') {
    char *s = jstring(j);
    if (!s) return NULL;
    n = jnew(J_STR);
    n->str = s;
  } else if (strncmp(j->p, "true", 4) == 0 || strncmp(j->p, "false", 5) == 0) {
    n = jnew(J_BOOL);
    n->b = c == 't';
    j->p += n->b ? 4 : 5;
  } else if (strncmp(j->p, "null", 4) == 0) {
    n = jnew(J_NULL);
    j->p += 4;
  } else if (c == '-' || (c >= '0' && c <= '9')) {
    /* JSON's number grammar: no leading '+', no leading zeros, no hex. */
    const char *q = j->p;
    if (*q == '-') q++;
    if (*q == '0' && q[1] >= '0' && q[1] <= '9') return NULL;
    char *end;
    double v = strtod(j->p, &end);
    if (end == j->p || strpbrk(j->p, "xX") == j->p + 1) return NULL;
    n = jnew(J_NUM);
    n->num = v;
    j->p = end;
  }
  j->depth--;
  return n;
}

/* Parses text, which must be exactly one JSON value (and whitespace). */
static jnode_t *jparse(const char *text) {
  jparser_t j = {text, 0};
  jnode_t *n = jvalue(&j);
  if (!n) fail_msg("invalid JSON near offset %ld: %.200s", (long)(j.p - text), text);
  jws(&j);
  if (*j.p) fail_msg("trailing text after the JSON value: %.100s", j.p);
  return n;
}

/* Member key of an object (fails the test if missing). */
static jnode_t *jget(const jnode_t *n, const char *key) {
  if (!n || n->kind != J_OBJ) fail_msg("not an object looking up '%s'", key);
  for (size_t i = 0; i < n->n; i++)
    if (strcmp(n->keys[i], key) == 0) return n->kids[i];
  fail_msg("JSON object lacks '%s'", key);
  return NULL;
}

static int jhas(const jnode_t *n, const char *key) {
  for (size_t i = 0; n && n->kind == J_OBJ && i < n->n; i++)
    if (strcmp(n->keys[i], key) == 0) return 1;
  return 0;
}

static double jnum(const jnode_t *n, const char *key) {
  const jnode_t *v = jget(n, key);
  if (v->kind != J_NUM) fail_msg("'%s' is not a number", key);
  return v->num;
}

static const char *jstr(const jnode_t *n, const char *key) {
  const jnode_t *v = jget(n, key);
  if (v->kind != J_STR) fail_msg("'%s' is not a string", key);
  return v->str;
}

static int jbool(const jnode_t *n, const char *key) {
  const jnode_t *v = jget(n, key);
  if (v->kind != J_BOOL) fail_msg("'%s' is not a boolean", key);
  return v->b;
}

static const jnode_t *jarr(const jnode_t *n, const char *key) {
  const jnode_t *v = jget(n, key);
  if (v->kind != J_ARR) fail_msg("'%s' is not an array", key);
  return v;
}

/* ------------------------------------------------------------------------
 * Running programs
 */

/* Runs prog in the scratch directory with an empty stdin (see run_proc);
 * 300 s bound. */
static void run_prog(const char *prog, const char *const *args, run_result_t *r) {
  run_proc(prog, args, g_dir, NULL, 0, NULL, 300, r);
}

/* Runs vmclient and checks the exit code (never a signal). A failure must
 * print exactly one "vmclient: " line on stderr. */
static void cli(int code, run_result_t *r, const char *const *args) {
  run_prog(g_vmclient, args, r);
  run_expect_cli_exit(r, code, args[0] ? args[0] : "");
}

#define CLI(code, r, ...)                          \
  do {                                             \
    const char *cli_args_[] = {__VA_ARGS__, NULL}; \
    cli((code), (r), cli_args_);                   \
  } while (0)

static void expect_in(const char *hay, const char *needle) {
  if (!strstr(hay, needle)) fail_msg("'%s' not in: %.3000s", needle, hay);
}

static void path_in_dir(char *out, size_t n, const char *name) {
  snprintf(out, n, "%s/%s", g_dir, name);
}

static void write_file(const char *name, const void *d, size_t n) {
  char path[4200];
  path_in_dir(path, sizeof(path), name);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  if (n) assert_int_equal(fwrite(d, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}

static uint8_t *read_file_in_dir(const char *name, size_t *n) {
  char path[4200];
  path_in_dir(path, sizeof(path), name);
  uint8_t *d;
  ASSERT_OK(vm_read_file(path, UINT64_C(1) << 30, &d, n));
  return d;
}

/* Writes a float32 .npy file (version 1.0) into the scratch directory. */
static void write_npy_f32(const char *name, uint32_t ndim, const int64_t *shape, const float *v,
                          size_t n) {
  char hdr[160];
  int k = snprintf(hdr, sizeof(hdr), "{'descr': '<f4', 'fortran_order': False, 'shape': (");
  for (uint32_t i = 0; i < ndim; i++)
    k += snprintf(hdr + k, sizeof(hdr) - (size_t)k, "%lld,", (long long)shape[i]);
  k += snprintf(hdr + k, sizeof(hdr) - (size_t)k, "), }");
  size_t padded = (10 + (size_t)k + 1 + 63) / 64 * 64;
  size_t size = padded + n * 4;
  uint8_t *buf = malloc(size);
  assert_non_null(buf);
  memcpy(buf, "\x93NUMPY\x01\x00", 8);
  buf[8] = (uint8_t)((padded - 10) & 0xff);
  buf[9] = (uint8_t)((padded - 10) >> 8);
  memcpy(buf + 10, hdr, (size_t)k);
  memset(buf + 10 + k, ' ', padded - 10 - (size_t)k);
  buf[padded - 1] = '\n';
  memcpy(buf + padded, v, n * 4);
  write_file(name, buf, size);
  free(buf);
}

/* The float32 data at the end of an .npy file of n elements. */
static void read_npy_tail_f32(const char *name, float *v, size_t n) {
  size_t size;
  uint8_t *d = read_file_in_dir(name, &size);
  assert_true(size >= n * 4 + 64);
  memcpy(v, d + size - n * 4, n * 4);
  free(d);
}

/* ------------------------------------------------------------------------
 * Fixtures
 */

/* Builtins only: runs on the cpu device. main copies x; pair returns (x,
 * shape of x); sum2 takes two parameters and returns the second. */
static const char k_prog[] =
    ".packed $vm.builtin.copy\n"
    ".packed $vm.builtin.shape_of\n"
    ".packed $vm.builtin.make_tuple\n"
    ".func @main(x: float32[2, 3]) regs 2 {\n"
    "  %1 = call $vm.builtin.copy(%0)\n"
    "  ret %1\n"
    "}\n"
    ".func @pair(x: float32[2, 3]) regs 3 {\n"
    "  %1 = call $vm.builtin.shape_of(%0)\n"
    "  %2 = call $vm.builtin.make_tuple(%0, %1)\n"
    "  ret %2\n"
    "}\n"
    ".func @second(a: float32[2, 3], b: float32[2, 3]) regs 2 {\n"
    "  ret %1\n"
    "}\n";

static const float k_x[6] = {1.5f, -2.0f, 3.25f, 0.0f, 100.0f, -0.125f};

static int suite_setup(void **state) {
  (void)state;
  const char *bd = getenv("VMRPC_BUILD_DIR");
  if (!bd) {
    fprintf(stderr, "VMRPC_BUILD_DIR is not set\n");
    return -1;
  }
  snprintf(g_vmclient, sizeof(g_vmclient), "%s/client/vmclient", bd);
  snprintf(g_example, sizeof(g_example), "%s/tests/client_example_api", bd);
  snprintf(g_gen_model, sizeof(g_gen_model), "%s/examples/vmrpc-gen-model", bd);
  snprintf(g_dir, sizeof(g_dir), "/tmp/vmrpc-test-cli-net-XXXXXX");
  if (!mkdtemp(g_dir)) return -1;
  /* The environment must not pick another agent for us. */
  unsetenv("VMCLIENT_HOST");

  vm_executable_t *e;
  vm_status_t st = vm_executable_asm(k_prog, sizeof(k_prog) - 1, NULL, &e);
  if (st) {
    fprintf(stderr, "asm: %s\n", vm_status_message(st));
    vm_status_free(st);
    return -1;
  }
  char path[4200];
  path_in_dir(path, sizeof(path), "prog.vmx");
  st = vm_executable_write_file(e, path);
  vm_executable_free(e);
  if (st) {
    vm_status_free(st);
    return -1;
  }
  if (agent_proc_start(&g_agent, NULL) != 0) return -1;
  return 0;
}

static int suite_teardown(void **state) {
  (void)state;
  int rc = agent_proc_stop(&g_agent);
  char cmd[4300];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
  return rc == 0 ? 0 : -1;
}

/* Writes the inputs of the builtin program. */
static void write_prog_inputs(void) {
  int64_t shape[2] = {2, 3};
  write_npy_f32("x.npy", 2, shape, k_x, 6);
  float y[6];
  memcpy(y, k_x, sizeof(y));
  y[4] += 0.5f;
  write_npy_f32("x_off.npy", 2, shape, y, 6);
  int64_t bad[2] = {3, 2};
  write_npy_f32("x_32.npy", 2, bad, k_x, 6);
  write_file("garbage.npy", "\x93NUMPY\x01\x00\x10\x00{'descr': 'zz'", 24);
}

/* Generates the example MLP with its input and reference output (.npy). */
static void make_mlp(void) {
  run_result_t r;
  const char *args[] = {"mlp",     "--seed",    "3",          "--out",     "mlp.vmx",
                        "--input", "mlp_x.npy", "--expected", "mlp_y.npy", NULL};
  run_prog(g_gen_model, args, &r);
  if (!WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0)
    fail_msg("vmrpc-gen-model failed: %s", r.err);
  run_result_free(&r);
}

/* Does the agent serve opencl:0? (PoCL on CI.) */
static int agent_has_opencl(void) {
  run_result_t r;
  CLI(0, &r, "--host", g_agent.url, "--json", "info");
  jnode_t *j = jparse(r.out);
  const jnode_t *devs = jarr(j, "devices");
  int has = 0;
  for (size_t i = 0; i < devs->n; i++)
    if (strcmp(jstr(devs->kids[i], "selector"), "opencl:0") == 0) has = 1;
  jfree(j);
  run_result_free(&r);
  return has;
}

/* ------------------------------------------------------------------------
 * Tests
 */

static void test_help(void **state) {
  (void)state;
  const char *cmds[] = {"info", "ping", "upload", "run", "check", "bench", "profile", "stats"};
  for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
    run_result_t r;
    CLI(0, &r, cmds[i], "--help");
    char want[64];
    snprintf(want, sizeof(want), "usage: vmclient %s", cmds[i]);
    expect_in(r.out, want);
    expect_in(r.out, "--host URL");
    expect_in(r.out, "--json");
    run_result_free(&r);
  }
  run_result_t r;
  CLI(0, &r, "bench", "--help");
  const char *flags[] = {"--number",
                         "--repeat",
                         "--min-repeat-ms",
                         "--limit-zero-time-iterations",
                         "--cooldown-interval-ms",
                         "--repeats-to-cooldown",
                         "--cache-flush-bytes",
                         "--memory-cfg",
                         "--exec-mode",
                         "--device",
                         "--func",
                         "--input"};
  for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) expect_in(r.out, flags[i]);
  run_result_free(&r);
  CLI(0, &r, "--help");
  expect_in(r.out, "7 check: outputs differ");
  expect_in(r.out, "VMCLIENT_HOST");
  run_result_free(&r);
}

static void test_info_and_ping(void **state) {
  (void)state;
  run_result_t r;
  CLI(0, &r, "--host", g_agent.url, "info");
  expect_in(r.out, "agent:     vmagent ");
  expect_in(r.out, "cpu");
  run_result_free(&r);

  CLI(0, &r, "info", "--host", g_agent.url, "--json");
  jnode_t *j = jparse(r.out);
  assert_string_equal(jstr(j, "url"), g_agent.url);
  assert_true(strlen(jstr(j, "agent_version")) > 0);
  assert_true(jnum(j, "protocol_major") >= 1);
  assert_true(jnum(j, "rtt_s") > 0);
  const jnode_t *devs = jarr(j, "devices");
  assert_true(devs->n >= 1);
  int has_cpu = 0;
  for (size_t i = 0; i < devs->n; i++) {
    if (strcmp(jstr(devs->kids[i], "selector"), "cpu") == 0) has_cpu = 1;
    assert_true(jnum(devs->kids[i], "compute_units") >= 1);
  }
  assert_true(has_cpu);
  assert_true(jnum(jget(j, "limits"), "chunk_bytes") > 0);
  jfree(j);
  run_result_free(&r);

  /* VMCLIENT_HOST is the default host. */
  setenv("VMCLIENT_HOST", g_agent.url, 1);
  CLI(0, &r, "ping", "-n", "7", "--json");
  unsetenv("VMCLIENT_HOST");
  j = jparse(r.out);
  assert_int_equal((int)jnum(j, "count"), 7);
  assert_int_equal(jarr(j, "rtt_s")->n, 7);
  double mn = jnum(j, "min_s"), med = jnum(j, "median_s"), mx = jnum(j, "max_s");
  double mean = jnum(j, "mean_s");
  assert_true(mn > 0 && mn <= med && med <= mx && mn <= mean && mean <= mx);
  jfree(j);
  run_result_free(&r);

  CLI(0, &r, "--host", g_agent.url, "ping");
  expect_in(r.out, "10 pings");
  expect_in(r.out, "min/median/mean/max");
  run_result_free(&r);
  CLI(EXIT_USAGE, &r, "--host", g_agent.url, "ping", "-n", "0");
  run_result_free(&r);
}

static void test_upload_and_stats(void **state) {
  (void)state;
  run_result_t r;
  CLI(0, &r, "stats", "--json", "prog.vmx");
  jnode_t *j = jparse(r.out);
  char sha[65];
  snprintf(sha, sizeof(sha), "%s", jstr(j, "sha256"));
  assert_int_equal(strlen(sha), 64);
  assert_int_equal((int)jnum(j, "bytecode_functions"), 3);
  jfree(j);
  run_result_free(&r);
  /* The file form keeps its text output. */
  CLI(0, &r, "stats", "prog.vmx");
  expect_in(r.out, "sha256:       ");
  run_result_free(&r);

  CLI(0, &r, "--host", g_agent.url, "upload", "prog.vmx");
  expect_in(r.out, sha);
  run_result_free(&r);
  /* Now it is in the store: a second upload sends nothing. */
  CLI(0, &r, "--host", g_agent.url, "--json", "upload", "prog.vmx");
  j = jparse(r.out);
  assert_string_equal(jstr(j, "sha256"), sha);
  assert_true(jbool(j, "store_hit"));
  assert_int_equal((int)jnum(j, "bytes_sent"), 0);
  jfree(j);
  run_result_free(&r);

  /* stats without a file: the agent's counters. */
  CLI(0, &r, "--host", g_agent.url, "stats");
  expect_in(r.out, "requests:");
  expect_in(r.out, "store:");
  run_result_free(&r);
  CLI(0, &r, "--host", g_agent.url, "stats", "--json");
  j = jparse(r.out);
  assert_true(jnum(j, "requests") >= 1);
  assert_true(jnum(j, "store_entries") >= 1);
  assert_true(jnum(j, "agent_sessions") >= 1);
  jfree(j);
  run_result_free(&r);

  /* An invalid executable is the user's input error, found before any
   * network traffic. */
  write_file("broken.vmx", "not an executable", 17);
  CLI(EXIT_INPUT, &r, "--host", g_agent.url, "upload", "broken.vmx");
  run_result_free(&r);
  CLI(EXIT_IO, &r, "--host", g_agent.url, "upload", "missing.vmx");
  run_result_free(&r);
}

static void test_run(void **state) {
  (void)state;
  write_prog_inputs();
  run_result_t r;
  CLI(0, &r, "--host", g_agent.url, "run", "-d", "cpu", "prog.vmx", "x.npy", "--output-dir", "out");
  expect_in(r.out, "output 0: float32[2, 3] -> out/output_0.npy");
  run_result_free(&r);
  float got[6];
  read_npy_tail_f32("out/output_0.npy", got, 6);
  assert_memory_equal(got, k_x, sizeof(got));

  /* By name, by index, modes and allocators; JSON. */
  CLI(0, &r, "--host", g_agent.url, "run", "prog.vmx", "--input", "x=x.npy", "--device", "cpu",
      "--memory-cfg", "naive", "--exec-mode", "compiled", "--json");
  jnode_t *j = jparse(r.out);
  assert_string_equal(jstr(j, "function"), "main");
  assert_string_equal(jstr(j, "exec_mode"), "compiled");
  const jnode_t *devs = jarr(j, "devices");
  assert_int_equal(devs->n, 1);
  assert_string_equal(jstr(devs->kids[0], "selector"), "cpu");
  assert_string_equal(jstr(devs->kids[0], "allocator"), "naive");
  const jnode_t *outs = jarr(j, "outputs");
  assert_int_equal(outs->n, 1);
  const jnode_t *shape = jarr(outs->kids[0], "shape");
  assert_int_equal(shape->n, 2);
  assert_int_equal((int)shape->kids[0]->num, 2);
  assert_int_equal((int)shape->kids[1]->num, 3);
  assert_true(jnum(jget(j, "timing"), "run_s") > 0);
  jfree(j);
  run_result_free(&r);

  CLI(0, &r, "--host", g_agent.url, "run", "prog.vmx", "-i", "0=x.npy", "--memory-cfg",
      "cpu=pooled", "-q");
  assert_int_equal(r.out_n, 0);
  run_result_free(&r);

  /* A tuple result: outputs 0 (the tensor) and 1 (its shape). */
  CLI(0, &r, "--host", g_agent.url, "--json", "run", "-d", "cpu", "-f", "pair", "prog.vmx", "x.npy",
      "-o", "pair");
  j = jparse(r.out);
  outs = jarr(j, "outputs");
  assert_int_equal(outs->n, 2);
  assert_string_equal(jstr(outs->kids[0], "name"), "0");
  assert_string_equal(jstr(outs->kids[1], "name"), "1");
  assert_string_equal(jstr(outs->kids[1], "dtype"), "int64");
  const jnode_t *vals = jarr(outs->kids[1], "values");
  assert_int_equal(vals->n, 2);
  assert_int_equal((int)vals->kids[0]->num, 2);
  assert_int_equal((int)vals->kids[1]->num, 3);
  jfree(j);
  run_result_free(&r);
  struct stat sb;
  char path[4200];
  path_in_dir(path, sizeof(path), "pair/output_1.npy");
  assert_int_equal(stat(path, &sb), 0);

  /* Two parameters, positional and named mixed. */
  CLI(0, &r, "--host", g_agent.url, "run", "-d", "cpu", "-f", "second", "prog.vmx", "x_off.npy",
      "--input", "b=x.npy", "-o", "second");
  run_result_free(&r);
  read_npy_tail_f32("second/output_0.npy", got, 6);
  assert_memory_equal(got, k_x, sizeof(got));
}

/* The agent's request counter (a `vmclient stats` costs Hello and Stats
 * before it reads it, and a Goodbye after). */
static double agent_requests(void) {
  run_result_t r;
  CLI(0, &r, "--host", g_agent.url, "stats", "--json");
  jnode_t *j = jparse(r.out);
  double n = jnum(j, "requests");
  jfree(j);
  run_result_free(&r);
  return n;
}

/* A `vmclient run` of an executable the agent has stored costs at most 3
 * requests (Hello, Run, Goodbye), counted by the agent itself. */
static void test_run_cached_request_count(void **state) {
  (void)state;
  write_prog_inputs();
  run_result_t r;
  CLI(0, &r, "--host", g_agent.url, "run", "prog.vmx", "x.npy", "-q"); /* now stored */
  run_result_free(&r);
  double before = agent_requests();
  CLI(0, &r, "--host", g_agent.url, "--json", "run", "prog.vmx", "x.npy");
  jnode_t *j = jparse(r.out);
  assert_true(jbool(jget(j, "timing"), "store_hit"));
  assert_int_equal((int)jnum(jget(j, "timing"), "requests"), 1); /* Run alone */
  jfree(j);
  run_result_free(&r);
  double after = agent_requests();
  double run_requests = after - before - 3; /* stats' Goodbye, then Hello + Stats */
  if (run_requests > 3) fail_msg("a cached vmclient run took %.0f requests", run_requests);
  assert_int_equal((int)run_requests, 3);
}

/* Writes an executable whose results are tuples too big to fetch: wide
 * (2 x 600 ints: more values than vmclient fetches) and hollow (5 x 1000
 * empty tuples: no values at all, but 5,005 tuple elements to walk). */
static void write_big_tuples(void) {
  size_t cap = 64 * 1024, n = 0;
  char *t = malloc(cap);
  assert_non_null(t);
  n += (size_t)snprintf(t + n, cap - n,
                        ".packed $vm.builtin.make_tuple\n"
                        ".func @wide() regs 3 {\n  %%0 = call $vm.builtin.make_tuple(");
  for (int i = 0; i < 600; i++) n += (size_t)snprintf(t + n, cap - n, "%s1", i ? ", " : "");
  n += (size_t)snprintf(t + n, cap - n,
                        ")\n  %%1 = call $vm.builtin.make_tuple(%%0, %%0)\n  ret %%1\n}\n"
                        ".func @hollow() regs 3 {\n  %%0 = call $vm.builtin.make_tuple()\n"
                        "  %%1 = call $vm.builtin.make_tuple(");
  for (int i = 0; i < 1000; i++) n += (size_t)snprintf(t + n, cap - n, "%s%%0", i ? ", " : "");
  n += (size_t)snprintf(t + n, cap - n,
                        ")\n  %%2 = call $vm.builtin.make_tuple(%%1, %%1, %%1, %%1, %%1)\n"
                        "  ret %%2\n}\n");
  assert_true(n < cap);
  vm_executable_t *e;
  ASSERT_OK(vm_executable_asm(t, n, NULL, &e));
  char path[4200];
  path_in_dir(path, sizeof(path), "tuples.vmx");
  ASSERT_OK(vm_executable_write_file(e, path));
  vm_executable_free(e);
  free(t);
}

static void test_run_errors(void **state) {
  (void)state;
  write_prog_inputs();
  run_result_t r;
  /* Results too big to fetch: the agent's tuple arities bound the walk. */
  write_big_tuples();
  CLI(EXIT_REMOTE, &r, "--host", g_agent.url, "run", "-d", "cpu", "-f", "wide", "tuples.vmx");
  expect_in(r.err, "the result has more than 1024 values");
  run_result_free(&r);
  CLI(EXIT_REMOTE, &r, "--host", g_agent.url, "run", "-d", "cpu", "-f", "hollow", "tuples.vmx");
  expect_in(r.err, "the result has more than 1024 values");
  run_result_free(&r);
  /* Missing input: a usage error naming the parameter and its type. */
  CLI(EXIT_USAGE, &r, "--host", g_agent.url, "run", "-d", "cpu", "prog.vmx");
  expect_in(r.err, "missing input for parameter 0 'x' (float32[2, 3])");
  run_result_free(&r);
  CLI(EXIT_USAGE, &r, "--host", g_agent.url, "run", "-d", "cpu", "-f", "second", "prog.vmx",
      "x.npy");
  expect_in(r.err, "'b'");
  run_result_free(&r);
  /* Shape mismatch: the agent's INVALID_ARGUMENT. */
  CLI(EXIT_REMOTE, &r, "--host", g_agent.url, "run", "-d", "cpu", "prog.vmx", "x_32.npy");
  expect_in(r.err, "INVALID_ARGUMENT");
  expect_in(r.err, "float32[2, 3]");
  run_result_free(&r);
  /* Bad .npy: invalid input file. Missing file: I/O. */
  CLI(EXIT_INPUT, &r, "--host", g_agent.url, "run", "-d", "cpu", "prog.vmx", "garbage.npy");
  expect_in(r.err, "garbage.npy");
  run_result_free(&r);
  CLI(EXIT_IO, &r, "--host", g_agent.url, "run", "-d", "cpu", "prog.vmx", "nothere.npy");
  run_result_free(&r);
  /* Unknown parameter, function, device; bad options. */
  CLI(EXIT_USAGE, &r, "--host", g_agent.url, "run", "prog.vmx", "-i", "zz=x.npy");
  expect_in(r.err, "no parameter 'zz'");
  run_result_free(&r);
  CLI(EXIT_USAGE, &r, "--host", g_agent.url, "run", "prog.vmx", "-f", "nope", "x.npy");
  expect_in(r.err, "no function 'nope'");
  run_result_free(&r);
  CLI(EXIT_REMOTE, &r, "--host", g_agent.url, "run", "prog.vmx", "-d", "opencl:99", "x.npy");
  expect_in(r.err, "NOT_FOUND");
  run_result_free(&r);
  CLI(EXIT_USAGE, &r, "--host", g_agent.url, "run", "prog.vmx", "--memory-cfg", "huge", "x.npy");
  run_result_free(&r);
  CLI(EXIT_USAGE, &r, "--host", g_agent.url, "run", "prog.vmx", "-d", "cpu", "--memory-cfg",
      "opencl:0=naive", "x.npy");
  run_result_free(&r);
  CLI(EXIT_USAGE, &r, "--host", g_agent.url, "run", "prog.vmx", "--exec-mode", "jit", "x.npy");
  run_result_free(&r);
  CLI(EXIT_USAGE, &r, "--host", g_agent.url, "run", "prog.vmx", "x.npy", "-i", "0=x.npy");
  expect_in(r.err, "given twice");
  run_result_free(&r);
  CLI(EXIT_USAGE, &r, "--host", g_agent.url, "run");
  run_result_free(&r);
  CLI(EXIT_USAGE, &r, "--timeout", "abc", "info");
  run_result_free(&r);
}

static void test_check(void **state) {
  (void)state;
  write_prog_inputs();
  run_result_t r;
  CLI(0, &r, "--host", g_agent.url, "check", "-d", "cpu", "prog.vmx", "x.npy", "-e", "x.npy");
  expect_in(r.out, "check: OK");
  expect_in(r.out, "max abs err 0");
  run_result_free(&r);

  /* Element 4 is off by 0.5 (rel 0.005): differs under the defaults. */
  CLI(EXIT_MISMATCH, &r, "--host", g_agent.url, "check", "-d", "cpu", "prog.vmx", "x.npy", "-e",
      "x_off.npy");
  expect_in(r.out, "DIFFERENT");
  expect_in(r.out, "1 of 6 elements differ; first at [1, 1]");
  expect_in(r.err, "check");
  run_result_free(&r);
  CLI(EXIT_MISMATCH, &r, "--host", g_agent.url, "--json", "check", "-d", "cpu", "prog.vmx", "x.npy",
      "-e", "0=x_off.npy");
  jnode_t *j = jparse(r.out);
  assert_false(jbool(j, "match"));
  const jnode_t *c = jget(jarr(j, "outputs")->kids[0], "check");
  assert_false(jbool(c, "ok"));
  assert_int_equal((int)jnum(c, "mismatched"), 1);
  assert_true(fabs(jnum(c, "max_abs_err") - 0.5) < 1e-6);
  assert_true(fabs(jnum(c, "max_rel_err") - 0.5 / 100.5) < 1e-6);
  jfree(j);
  run_result_free(&r);
  /* allclose: |a - e| <= atol + rtol * |e|. 0.5 <= 0.01 * 100.5 passes. */
  CLI(0, &r, "--host", g_agent.url, "check", "-d", "cpu", "prog.vmx", "x.npy", "-e", "x_off.npy",
      "--rtol", "0.01");
  run_result_free(&r);
  CLI(0, &r, "--host", g_agent.url, "check", "-d", "cpu", "prog.vmx", "x.npy", "-e", "x_off.npy",
      "--rtol", "0", "--atol", "0.5");
  run_result_free(&r);
  CLI(EXIT_MISMATCH, &r, "--host", g_agent.url, "check", "-d", "cpu", "prog.vmx", "x.npy", "-e",
      "x_off.npy", "--rtol", "0", "--atol", "0.49");
  run_result_free(&r);
  /* Shape differs; more expected files than outputs. */
  CLI(EXIT_MISMATCH, &r, "--host", g_agent.url, "check", "-d", "cpu", "prog.vmx", "x.npy", "-e",
      "x_32.npy");
  expect_in(r.out, "DIFFERENT SHAPE");
  run_result_free(&r);
  CLI(EXIT_MISMATCH, &r, "--host", g_agent.url, "check", "-d", "cpu", "prog.vmx", "x.npy", "-e",
      "x.npy", "-e", "x.npy");
  run_result_free(&r);
  /* Usage and input errors. */
  CLI(EXIT_USAGE, &r, "--host", g_agent.url, "check", "-d", "cpu", "prog.vmx", "x.npy");
  expect_in(r.err, "--expected");
  run_result_free(&r);
  CLI(EXIT_INPUT, &r, "--host", g_agent.url, "check", "-d", "cpu", "prog.vmx", "x.npy", "-e",
      "garbage.npy");
  run_result_free(&r);
  CLI(EXIT_USAGE, &r, "--host", g_agent.url, "check", "prog.vmx", "x.npy", "-e", "x.npy", "--rtol",
      "-1");
  run_result_free(&r);
}

static void test_bench_profile_cpu(void **state) {
  (void)state;
  write_prog_inputs();
  run_result_t r;
  CLI(0, &r, "--host", g_agent.url, "bench", "-d", "cpu", "prog.vmx", "x.npy", "--repeat", "3",
      "--number", "4");
  expect_in(r.out, "init:");
  expect_in(r.out, "first run:");
  expect_in(r.out, "3 repeats x 4 calls");
  expect_in(r.out, "median");
  run_result_free(&r);

  CLI(0, &r, "--host", g_agent.url, "--json", "bench", "-d", "cpu", "prog.vmx", "-r", "12", "-n",
      "2", "--min-repeat-ms", "1", "--cooldown-interval-ms", "1", "--repeats-to-cooldown", "6",
      "--limit-zero-time-iterations", "5", "--cache-flush-bytes", "64K");
  jnode_t *j = jparse(r.out);
  const jnode_t *p = jget(j, "params");
  assert_int_equal((int)jnum(p, "repeat"), 12);
  assert_int_equal((int)jnum(p, "number"), 2);
  assert_int_equal((int)jnum(p, "min_repeat_ms"), 1);
  assert_int_equal((int)jnum(p, "cache_flush_bytes"), 65536);
  /* min_repeat_ms grows number (at least the requested one). */
  assert_true(jnum(j, "number") >= 2);
  const jnode_t *reps = jarr(j, "repeats_s");
  assert_int_equal(reps->n, 12);
  const jnode_t *w = jget(j, "wall");
  double mn = jnum(w, "min_s"), med = jnum(w, "median_s"), mx = jnum(w, "max_s");
  assert_true(mn <= med && med <= mx);
  assert_true(mn <= jnum(w, "mean_s") && jnum(w, "mean_s") <= mx);
  assert_true(jnum(w, "std_s") >= 0);
  assert_true(jnum(w, "p90_s") >= med && jnum(w, "p90_s") <= mx);
  assert_false(jhas(w, "p99_s")); /* only from 100 repeats */
  for (size_t i = 0; i < reps->n; i++)
    assert_true(reps->kids[i]->num >= mn && reps->kids[i]->num <= mx);
  assert_true(jbool(jget(j, "inputs")->kids[0], "generated"));
  const jnode_t *init = jget(j, "init");
  assert_true(jnum(init, "total_s") >= jnum(init, "create_vm_s"));
  assert_true(jnum(jget(j, "first_run"), "wall_s") > 0);
  assert_int_equal(strlen(jstr(j, "sha256")), 64);
  assert_true(strlen(jstr(jget(j, "agent"), "version")) > 0);
  jfree(j);
  run_result_free(&r);

  /* Without the input file: generated data, and stderr says so. */
  CLI(0, &r, "--host", g_agent.url, "bench", "-d", "cpu", "prog.vmx", "-r", "2");
  expect_in(r.err, "vmclient: bench: note: no input for '");
  expect_in(r.err, "': using generated data");
  run_result_free(&r);
  CLI(0, &r, "--host", g_agent.url, "profile", "-d", "cpu", "prog.vmx");
  expect_in(r.err, "vmclient: profile: note: no input for '");
  run_result_free(&r);

  /* Out-of-range evaluator flags are usage errors. */
  CLI(EXIT_USAGE, &r, "--host", g_agent.url, "bench", "prog.vmx", "--number", "0");
  run_result_free(&r);
  CLI(EXIT_USAGE, &r, "--host", g_agent.url, "bench", "prog.vmx", "--repeat", "x");
  run_result_free(&r);
  CLI(EXIT_USAGE, &r, "--host", g_agent.url, "bench", "prog.vmx", "--cache-flush-bytes", "1Q");
  run_result_free(&r);

  CLI(0, &r, "--host", g_agent.url, "profile", "-d", "cpu", "prog.vmx", "x.npy");
  expect_in(r.out, "operator");
  expect_in(r.out, "vm.builtin.copy");
  run_result_free(&r);
  CLI(0, &r, "--host", g_agent.url, "--json", "profile", "-d", "cpu", "prog.vmx", "-f", "pair");
  j = jparse(r.out);
  const jnode_t *rows = jarr(j, "rows");
  assert_true(rows->n >= 2);
  double share = 0;
  for (size_t i = 0; i < rows->n; i++) {
    assert_true(jnum(rows->kids[i], "calls") >= 1);
    share += jnum(rows->kids[i], "share");
  }
  assert_true(fabs(share - 1.0) < 1e-3);
  jfree(j);
  run_result_free(&r);
}

/* The example MLP on opencl:0: run, check against the host reference,
 * bench with the device timer, profile, and the README's C example. */
static void test_mlp_opencl(void **state) {
  (void)state;
  if (!agent_has_opencl()) {
    print_message("no opencl:0 on the agent: skipped\n");
    skip();
  }
  make_mlp();
  run_result_t r;
  CLI(0, &r, "--host", g_agent.url, "check", "-d", "opencl:0", "mlp.vmx", "--input", "x=mlp_x.npy",
      "--expected", "mlp_y.npy", "--rtol", "1e-4", "--atol", "1e-6");
  expect_in(r.out, "check: OK");
  run_result_free(&r);

  CLI(0, &r, "--host", g_agent.url, "--json", "bench", "-d", "opencl:0", "mlp.vmx", "mlp_x.npy",
      "-r", "10", "-n", "3");
  jnode_t *j = jparse(r.out);
  assert_int_equal(jarr(j, "repeats_s")->n, 10);
  assert_int_equal(jarr(j, "device_repeats_s")->n, 10);
  const jnode_t *w = jget(j, "wall");
  assert_true(jnum(w, "min_s") <= jnum(w, "median_s") && jnum(w, "median_s") <= jnum(w, "max_s"));
  const jnode_t *dev = jget(j, "device");
  assert_int_equal(dev->kind, J_OBJ); /* PoCL's queue has a profiling timer */
  assert_true(jnum(dev, "median_s") > 0);
  const jnode_t *d0 = jarr(j, "devices")->kids[0];
  assert_string_equal(jstr(d0, "selector"), "opencl:0");
  assert_true(strlen(jstr(d0, "name")) > 0);
  assert_true(jbool(d0, "has_device_timer"));
  assert_false(jbool(jget(j, "inputs")->kids[0], "generated"));
  jfree(j);
  run_result_free(&r);

  CLI(0, &r, "--host", g_agent.url, "--json", "profile", "-d", "opencl:0", "mlp.vmx");
  expect_in(r.out, "\"cl.gemm\"");
  j = jparse(r.out);
  assert_true(jarr(j, "rows")->n >= 4);
  jfree(j);
  run_result_free(&r);

  /* README's C API example: same output as the reference. */
  const char *args[] = {g_agent.url, "mlp.vmx", "mlp_x.npy", "api_y.npy", NULL};
  run_prog(g_example, args, &r);
  if (!WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0)
    fail_msg("example_api failed (%d): %s", r.status, r.err);
  expect_in(r.out, "median");
  run_result_free(&r);
  float got[80], want[80];
  read_npy_tail_f32("api_y.npy", got, 80);
  read_npy_tail_f32("mlp_y.npy", want, 80);
  for (int i = 0; i < 80; i++)
    assert_true(fabsf(got[i] - want[i]) <= 1e-6f + 1e-4f * fabsf(want[i]));
}

/* A loopback port nobody listens on. */
static int free_port(void) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(s >= 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof(a)), 0);
  socklen_t len = sizeof(a);
  assert_int_equal(getsockname(s, (struct sockaddr *)&a, &len), 0);
  close(s);
  return ntohs(a.sin_port);
}

static void test_agent_down(void **state) {
  (void)state;
  write_prog_inputs();
  char url[64];
  snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", free_port());
  const char *cmds[][4] = {{"info", NULL},
                           {"ping", NULL},
                           {"stats", NULL},
                           {"upload", "prog.vmx", NULL},
                           {"run", "prog.vmx", "x.npy", NULL},
                           {"bench", "prog.vmx", NULL}};
  for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
    const char *args[8] = {"--host", url, "--connect-timeout", "3000"};
    int n = 4;
    for (int k = 0; cmds[i][k]; k++) args[n++] = cmds[i][k];
    args[n] = NULL;
    run_result_t r;
    cli(EXIT_CONNECT, &r, args);
    expect_in(r.err, "is vmagent running?");
    expect_in(r.err, "vmagent --listen");
    run_result_free(&r);
  }
  /* HOST:PORT without a scheme means tcp://. */
  char hp[64];
  snprintf(hp, sizeof(hp), "127.0.0.1:%d", free_port());
  run_result_t r;
  CLI(EXIT_CONNECT, &r, "--host", hp, "info");
  expect_in(r.err, "tcp://127.0.0.1:");
  run_result_free(&r);
  /* A malformed URL is a usage error. */
  CLI(EXIT_USAGE, &r, "--host", "bogus://x", "info");
  run_result_free(&r);
  /* TLS trust options are checked before dialling: a missing --tls-ca is an
   * I/O error (exit 4, as documented; it used to be 2), a malformed pin or
   * two trust options a usage error. */
  char tls[64];
  snprintf(tls, sizeof(tls), "tls+tcp://127.0.0.1:%d", free_port());
  CLI(EXIT_IO, &r, "--host", tls, "--tls-ca", "no-such-ca.pem", "info");
  expect_in(r.err, "NOT_FOUND: reading the TLS CA file");
  run_result_free(&r);
  CLI(EXIT_USAGE, &r, "--host", tls, "--tls-pin", "sha256:12", "info");
  expect_in(r.err, "--tls-pin 'sha256:12': expected sha256: and the 64 hex digits");
  run_result_free(&r);
  CLI(EXIT_USAGE, &r, "--host", tls, "--tls-insecure", "--tls-ca", "x.pem", "info");
  expect_in(r.err, "give at most one of --tls-ca, --tls-pin and --tls-insecure");
  run_result_free(&r);
  /* --tls-insecure says what it costs (then the agent is simply down). */
  const char *insecure[] = {"--host", tls, "--connect-timeout", "3000", "--tls-insecure",
                            "ping",   NULL};
  run_prog(g_vmclient, insecure, &r);
  assert_true(WIFEXITED(r.status) && WEXITSTATUS(r.status) == EXIT_CONNECT);
  expect_in(r.err,
            "vmclient: ping: warning: --tls-insecure: the agent's certificate is not "
            "verified; anyone on the path can read the token and the data");
  run_result_free(&r);
}

static void test_token(void **state) {
  (void)state;
  write_file("token", "s3cret-token\n", 13);
  char tok_path[4200];
  path_in_dir(tok_path, sizeof(tok_path), "token");
  assert_int_equal(chmod(tok_path, 0600), 0);
  agent_proc_t a;
  const char *extra[] = {"--token-file", tok_path, NULL};
  assert_int_equal(agent_proc_start(&a, extra), 0);
  run_result_t r;
  CLI(EXIT_REMOTE, &r, "--host", a.url, "info");
  expect_in(r.err, "UNAUTHENTICATED");
  expect_in(r.err, "--token");
  run_result_free(&r);
  CLI(EXIT_REMOTE, &r, "--host", a.url, "--token", "wrong", "info");
  expect_in(r.err, "UNAUTHENTICATED");
  run_result_free(&r);
  CLI(0, &r, "--host", a.url, "--token", "s3cret-token", "info");
  run_result_free(&r);
  CLI(0, &r, "--host", a.url, "--token-file", "token", "ping", "-n", "2");
  run_result_free(&r);
  CLI(EXIT_IO, &r, "--host", a.url, "--token-file", "no-such-token", "info");
  run_result_free(&r);
  CLI(EXIT_USAGE, &r, "--host", a.url, "--token", "x", "--token-file", "token", "info");
  run_result_free(&r);
  assert_int_equal(agent_proc_stop(&a), 0);
}

/* README.md shows tests/client/example_api.c: the two must not drift. */
static void test_readme_example_in_sync(void **state) {
  (void)state;
  const char *src = getenv("VMRPC_SOURCE_DIR");
  assert_non_null(src);
  char path[4200];
  uint8_t *readme, *example;
  size_t rn, en;
  snprintf(path, sizeof(path), "%s/README.md", src);
  ASSERT_OK(vm_read_file(path, 1 << 20, &readme, &rn));
  snprintf(path, sizeof(path), "%s/tests/client/example_api.c", src);
  ASSERT_OK(vm_read_file(path, 1 << 20, &example, &en));
  char *r = malloc(rn + 1), *e = malloc(en + 1);
  memcpy(r, readme, rn);
  r[rn] = '\0';
  memcpy(e, example, en);
  e[en] = '\0';
  /* From "#define CHECK" to the end of main(). */
  const char *body = strstr(e, "#define CHECK");
  assert_non_null(body);
  if (!strstr(r, body)) fail_msg("README.md's C example differs from tests/client/example_api.c");
  free(r);
  free(e);
  free(readme);
  free(example);
}

/* NHWC layers as converters write them, compiled by `vmclient compile` and
 * checked on the agent's opencl:0: x [1, 2, 3, 4] -> Transpose to NCHW ->
 * Relu -> Transpose back to NHWC -> Add x = y. The two transposes cancel
 * (the executable has no cl.transpose; the Relu runs on x as it is) and
 * y = relu(x) + x. */
static void test_onnx_transposes_cancel(void **state) {
  (void)state;
  if (!agent_has_opencl()) {
    print_message("no opencl:0 on the agent: skipped\n");
    skip();
  }
  static const int64_t xd[4] = {1, 2, 3, 4}, to_nchw[4] = {0, 3, 1, 2}, to_nhwc[4] = {0, 2, 3, 1};
  pb_t g = {0}, a0 = {0}, a1 = {0};
  onnx_add_value_info(&g, 11, "x", 4, xd);
  onnx_add_value_info(&g, 12, "y", 4, xd);
  const char *x[1] = {"x"}, *a[1] = {"a"}, *b[1] = {"b"}, *c[1] = {"c"}, *cx[2] = {"c", "x"};
  onnx_attr_ints(&a0, "perm", to_nchw, 4);
  onnx_add_node_attrs(&g, "Transpose", "t0", x, 1, a, 1, &a0);
  onnx_add_node(&g, "Relu", "r", a, 1, "b");
  onnx_attr_ints(&a1, "perm", to_nhwc, 4);
  onnx_add_node_attrs(&g, "Transpose", "t1", b, 1, c, 1, &a1);
  onnx_add_node(&g, "Add", "add", cx, 2, "y");
  pb_t m = onnx_model_of(&g, 13);
  write_file("nhwc.onnx", m.d, m.n);
  free(m.d);
  float xv[24], yv[24];
  for (int i = 0; i < 24; i++) {
    xv[i] = (float)(i % 7) - 3.0f;
    yv[i] = (xv[i] > 0 ? xv[i] : 0) + xv[i];
  }
  write_npy_f32("nhwc_x.npy", 4, xd, xv, 24);
  write_npy_f32("nhwc_y.npy", 4, xd, yv, 24);
  run_result_t r;
  CLI(0, &r, "compile", "nhwc.onnx", "--input-shape", "x=1,2,3,4", "-o", "nhwc.vmx");
  run_result_free(&r);
  CLI(0, &r, "disasm", "nhwc.vmx");
  expect_in(r.out, "cl.unary.relu");
  if (strstr(r.out, "cl.transpose")) fail_msg("a cl.transpose is left:\n%s", r.out);
  run_result_free(&r);
  CLI(0, &r, "--host", g_agent.url, "check", "-d", "opencl:0", "nhwc.vmx", "nhwc_x.npy", "-e",
      "nhwc_y.npy");
  expect_in(r.out, "check: OK");
  run_result_free(&r);
}

/* An ONNX model where a .vmx goes: run/check/bench compile it on the fly
 * (shapes from the input file), outputs carry the graph's names; an
 * unsupported model fails before any network traffic. Uses the node models
 * of Debian's libonnx-testdata (skipped without them). */
static void test_onnx_models(void **state) {
  (void)state;
  const char *relu = "/usr/share/libonnx-testdata/data/node/test_relu/model.onnx";
  const char *drop = "/usr/share/libonnx-testdata/data/node/test_training_dropout/model.onnx";
  if (!agent_has_opencl() || access(relu, R_OK) != 0 || access(drop, R_OK) != 0) {
    print_message("no opencl:0 on the agent or no libonnx-testdata: skipped\n");
    skip();
  }
  float x[60], y[60], got[60];
  for (int i = 0; i < 60; i++) {
    x[i] = (float)(i % 7) - 3.0f;
    y[i] = x[i] > 0 ? x[i] : 0;
  }
  int64_t shape[3] = {3, 4, 5};
  write_npy_f32("relu_x.npy", 3, shape, x, 60);
  write_npy_f32("relu_y.npy", 3, shape, y, 60);
  run_result_t r;
  CLI(0, &r, "--host", g_agent.url, "run", "-d", "opencl:0", relu, "--input", "x=relu_x.npy", "-o",
      "onnx_out");
  expect_in(r.out, "output y: float32[3, 4, 5] -> onnx_out/output_y.npy");
  run_result_free(&r);
  read_npy_tail_f32("onnx_out/output_y.npy", got, 60);
  assert_memory_equal(got, y, sizeof(got));
  CLI(0, &r, "--host", g_agent.url, "check", "-d", "opencl:0", relu, "relu_x.npy", "-e",
      "relu_y.npy");
  expect_in(r.out, "check: OK");
  run_result_free(&r);
  CLI(0, &r, "--host", g_agent.url, "bench", "-d", "opencl:0", relu, "relu_x.npy", "-n", "2");
  run_result_free(&r);
  /* an unsupported model: exit 3 naming the node, even with no agent */
  CLI(EXIT_INPUT, &r, "--host", "tcp://127.0.0.1:1", "run", drop, "relu_x.npy");
  expect_in(r.err, "node 0 (Dropout)");
  run_result_free(&r);
}

/* A function of many parameters, as models that take their weights as
 * inputs have: run, check and bench set all 300 (more than the 256 one Run
 * request carries) from positional files, --input NAME= and --input
 * INDEX=, and the outputs are the inputs they name. */
#define MANY_INPUTS 300

static void test_many_inputs(void **state) {
  (void)state;
  size_t cap = 64 * 1024, n = 0;
  char *t = malloc(cap);
  assert_non_null(t);
  n += (size_t)snprintf(t + n, cap - n, ".packed $vm.builtin.make_tuple\n.func @main(");
  for (int i = 0; i < MANY_INPUTS; i++)
    n += (size_t)snprintf(t + n, cap - n, "%sp%d: float32[2]", i ? ", " : "", i);
  n += (size_t)snprintf(t + n, cap - n,
                        ") regs %d {\n  %%%d = call $vm.builtin.make_tuple(%%0, %%150, %%299)\n"
                        "  ret %%%d\n}\n",
                        MANY_INPUTS + 1, MANY_INPUTS, MANY_INPUTS);
  assert_true(n < cap);
  vm_executable_t *e;
  ASSERT_OK(vm_executable_asm(t, n, NULL, &e));
  free(t);
  char path[4200];
  path_in_dir(path, sizeof(path), "many.vmx");
  ASSERT_OK(vm_executable_write_file(e, path));
  vm_executable_free(e);
  int64_t shape[1] = {2};
  for (int i = 0; i < MANY_INPUTS; i++) {
    char name[32];
    float v[2] = {(float)i, -(float)i};
    snprintf(name, sizeof(name), "p%d.npy", i);
    write_npy_f32(name, 1, shape, v, 2);
  }

  /* 0..297 positionally, 298 by name, 299 by index. */
  static char specs[2][32];
  const char *args[MANY_INPUTS + 32];
  size_t k = 0;
  const char *head[] = {"--host", g_agent.url, "run", "-d", "cpu", "--json",
                        "many.vmx", "-o", "many_out"};
  for (size_t i = 0; i < sizeof(head) / sizeof(head[0]); i++) args[k++] = head[i];
  static char names[MANY_INPUTS][16];
  for (int i = 0; i < MANY_INPUTS - 2; i++) {
    snprintf(names[i], sizeof(names[i]), "p%d.npy", i);
    args[k++] = names[i];
  }
  snprintf(specs[0], sizeof(specs[0]), "p298=p298.npy");
  snprintf(specs[1], sizeof(specs[1]), "299=p299.npy");
  args[k++] = "--input";
  args[k++] = specs[0];
  args[k++] = "-i";
  args[k++] = specs[1];
  args[k] = NULL;
  run_result_t r;
  cli(EXIT_OK, &r, args);
  jnode_t *j = jparse(r.out);
  assert_non_null(j);
  assert_int_equal(jarr(j, "inputs")->n, MANY_INPUTS);
  const jnode_t *outs = jarr(j, "outputs");
  assert_int_equal(outs->n, 3);
  const int want[3] = {0, 150, 299};
  for (int o = 0; o < 3; o++) {
    char name[64];
    float got[2];
    snprintf(name, sizeof(name), "many_out/output_%d.npy", o);
    read_npy_tail_f32(name, got, 2);
    assert_true(got[0] == (float)want[o] && got[1] == -(float)want[o]);
  }
  jfree(j);
  run_result_free(&r);

  /* check: the same inputs, the outputs against the files they came from;
   * output 2 against input 298 differs (exit 7). */
  args[2] = "check";
  args[5] = "-q";
  args[k++] = "-e";
  args[k++] = "p0.npy";
  args[k++] = "-e";
  args[k++] = "p150.npy";
  args[k++] = "-e";
  args[k++] = "2=p299.npy";
  args[k] = NULL;
  cli(EXIT_OK, &r, args);
  run_result_free(&r);
  args[k - 1] = "2=p298.npy";
  cli(EXIT_MISMATCH, &r, args);
  expect_in(r.err, "outputs differ");
  run_result_free(&r);

  /* bench generates the inputs it is not given: all 300 here. */
  CLI(EXIT_OK, &r, "--host", g_agent.url, "bench", "-d", "cpu", "-n", "1", "--json", "many.vmx",
      "p0.npy");
  j = jparse(r.out);
  assert_non_null(j);
  assert_int_equal(jarr(j, "inputs")->n, MANY_INPUTS);
  jfree(j);
  run_result_free(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_help),
      cmocka_unit_test(test_info_and_ping),
      cmocka_unit_test(test_upload_and_stats),
      cmocka_unit_test(test_run),
      cmocka_unit_test(test_run_cached_request_count),
      cmocka_unit_test(test_run_errors),
      cmocka_unit_test(test_check),
      cmocka_unit_test(test_bench_profile_cpu),
      cmocka_unit_test(test_mlp_opencl),
      cmocka_unit_test(test_onnx_models),
      cmocka_unit_test(test_onnx_transposes_cancel),
      cmocka_unit_test(test_agent_down),
      cmocka_unit_test(test_token),
      cmocka_unit_test(test_readme_example_in_sync),
      cmocka_unit_test(test_many_inputs),
  };
  return cmocka_run_group_tests(tests, suite_setup, suite_teardown);
}
