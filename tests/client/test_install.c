/* The installed client library, as someone who links it sees it:
 * `cmake --install` into a temporary prefix; vmclient.h compiles on its
 * own; README's C example (tests/client/example_api.c) builds with
 * `cc example_api.c $(pkg-config --cflags --libs vmclient)` and nothing
 * else, and runs against a live agent; the same from the installed static
 * libvmclient.a; libvmclient.so exports exactly the API its installed
 * headers declare (vmc_* and vmrpc/status.h, vmrpc/dtype.h), nothing of
 * vm_*, vmp_* or protobuf-c inside it; every installed header is under
 * include/vmrpc/; and libvmclient.a carries the client, the base layer and
 * the wire protocol only: no object of vm/ (the interpreter, verifier,
 * assembler ...). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "agent_proc.h"
#include "run_proc.h"

#ifndef VMRPC_TEST_CC
#define VMRPC_TEST_CC "cc"
#endif
#ifndef VMRPC_TEST_CMAKE
#define VMRPC_TEST_CMAKE "cmake"
#endif
#ifndef VMRPC_TEST_SAN
#define VMRPC_TEST_SAN ""
#endif

static char g_build[2048], g_src[2048], g_dir[64], g_prefix[128];
static agent_proc_t g_agent;

/* Runs a shell command in the scratch directory; it must exit 0. */
static void sh(const char *cmd, run_result_t *r) {
  const char *args[] = {"-c", cmd, NULL};
  run_proc("/bin/sh", args, g_dir, NULL, 0, NULL, 300, r);
  if (!WIFEXITED(r->status) || WEXITSTATUS(r->status) != 0)
    fail_msg("`%s` failed (status %d): %.3000s%.3000s", cmd, r->status, r->out, r->err);
}

static int setup(void **state) {
  (void)state;
  const char *bd = getenv("VMRPC_BUILD_DIR"), *sd = getenv("VMRPC_SOURCE_DIR");
  if (!bd || !sd) {
    fprintf(stderr, "VMRPC_BUILD_DIR / VMRPC_SOURCE_DIR are not set\n");
    return -1;
  }
  snprintf(g_build, sizeof(g_build), "%s", bd);
  snprintf(g_src, sizeof(g_src), "%s", sd);
  snprintf(g_dir, sizeof(g_dir), "/tmp/vmrpc-test-install-XXXXXX");
  if (!mkdtemp(g_dir)) return -1;
  snprintf(g_prefix, sizeof(g_prefix), "%s/prefix", g_dir);
  char cmd[8192];
  snprintf(cmd, sizeof(cmd),
           "'%s' --install '%s' --prefix '%s' >install.log 2>&1 && "
           "'%s/examples/vmrpc-gen-model' mlp --seed 3 --out mlp.vmx --input mlp_x.npy "
           "--expected mlp_y.npy >/dev/null",
           VMRPC_TEST_CMAKE, g_build, g_prefix, g_build);
  char full[8300];
  snprintf(full, sizeof(full), "cd '%s' && %s", g_dir, cmd);
  if (system(full) != 0) {
    fprintf(stderr, "install or model generation failed: see %s/install.log\n", g_dir);
    return -1;
  }
  return agent_proc_start(&g_agent, NULL);
}

static int teardown(void **state) {
  (void)state;
  int rc = agent_proc_stop(&g_agent);
  char cmd[200];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
  return rc == 0 ? 0 : -1;
}

/* pkg-config against the temporary prefix only. */
#define PKG "PKG_CONFIG_PATH='%s/lib/pkgconfig' pkg-config"

/* Runs a built example on the MLP and checks it printed its timing. */
static void run_example(const char *exe, int with_lib_path) {
  char cmd[4096];
  snprintf(cmd, sizeof(cmd), "%s%s%s ./%s '%s' mlp.vmx mlp_x.npy %s_y.npy",
           with_lib_path ? "LD_LIBRARY_PATH='" : "", with_lib_path ? g_prefix : "",
           with_lib_path ? "/lib'" : "", exe, g_agent.url, exe);
  run_result_t r;
  sh(cmd, &r);
  if (!strstr(r.out, "median")) fail_msg("%s printed no timing: %s", exe, r.out);
  run_result_free(&r);
}

static void test_header_alone(void **state) {
  (void)state;
  char cmd[4096];
  run_result_t r;
  /* vmclient.h and what it includes are installed and compile on their
   * own, strictly. */
  snprintf(cmd, sizeof(cmd),
           "printf '#include <vmrpc/vmclient.h>\\nint main(void) { vmc_conn_opts_t o = {0}; "
           "return (int)o.tls_insecure; }\\n' > alone.c && '%s' -std=c11 -Wall -Wextra -Werror "
           "-pedantic -fsyntax-only $(" PKG " --cflags vmclient) alone.c",
           VMRPC_TEST_CC, g_prefix);
  sh(cmd, &r);
  run_result_free(&r);
}

static void test_pkg_config_shared(void **state) {
  (void)state;
  char cmd[8192];
  run_result_t r;
  snprintf(cmd, sizeof(cmd),
           "'%s' %s '%s/tests/client/example_api.c' $(" PKG
           " --cflags --libs vmclient) -o "
           "example_shared && LD_LIBRARY_PATH='%s/lib' ldd example_shared",
           VMRPC_TEST_CC, VMRPC_TEST_SAN, g_src, g_prefix, g_prefix);
  sh(cmd, &r);
  /* it runs on the installed shared library, not on one of the build tree */
  char want[300];
  snprintf(want, sizeof(want), "%s/lib/libvmclient.so", g_prefix);
  if (!strstr(r.out, want)) fail_msg("example_shared does not use %s: %s", want, r.out);
  run_result_free(&r);
  run_example("example_shared", 1);
}

static void test_static_archive(void **state) {
  (void)state;
  char cmd[8192];
  run_result_t r;
  /* libvmclient.a statically, the system libraries of `pkg-config --static`
   * as they come: the archive needs no project library besides itself. */
  snprintf(cmd, sizeof(cmd),
           "'%s' %s '%s/tests/client/example_api.c' $(" PKG
           " --cflags vmclient) -L'%s/lib' "
           "-Wl,-Bstatic -lvmclient -Wl,-Bdynamic $(" PKG
           " --static --libs-only-l vmclient | sed 's/-lvmclient//') -o example_static",
           VMRPC_TEST_CC, VMRPC_TEST_SAN, g_src, g_prefix, g_prefix, g_prefix);
  sh(cmd, &r);
  run_result_free(&r);
  run_example("example_static", 0);
}

/* Adds every name declared as a function in header h (comments skipped,
 * not static inline ones, not function-pointer types) to the list. */
static void header_functions(const char *h, char names[][64], size_t *n, size_t cap) {
  FILE *f = fopen(h, "r");
  if (!f) fail_msg("cannot open %s", h);
  char line[1024];
  int in_comment = 0;
  while (fgets(line, sizeof(line), f)) {
    /* blank out comments */
    for (char *p = line; *p; p++) {
      if (in_comment) {
        if (p[0] == '*' && p[1] == '/') {
          in_comment = 0;
          p[0] = p[1] = ' ';
          p++;
        } else {
          *p = ' ';
        }
      } else if (p[0] == '/' && p[1] == '*') {
        in_comment = 1;
        p[0] = p[1] = ' ';
        p++;
      }
    }
    if (strstr(line, "static") || strstr(line, "#define")) continue;
    for (char *p = strstr(line, "vm"); p; p = strstr(p + 1, "vm")) {
      if (p > line && (isalnum((unsigned char)p[-1]) || p[-1] == '_')) continue;
      if (p > line + 1 && p[-1] == '*' && p[-2] == '(') continue; /* (*fn_type)( */
      size_t k = 0;
      while (isalnum((unsigned char)p[k]) || p[k] == '_') k++;
      if (p[k] != '(' || k >= 64 || (strncmp(p, "vm_", 3) && strncmp(p, "vmc_", 4))) continue;
      assert_true(*n < cap);
      memcpy(names[*n], p, k);
      names[*n][k] = '\0';
      (*n)++;
    }
  }
  fclose(f);
}

static int listed(char names[][64], size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(names[i], name) == 0) return 1;
  return 0;
}

static void test_exported_symbols(void **state) {
  (void)state;
  static char api[512][64], exported[512][64];
  size_t n_api = 0, n_exp = 0;
  const char *headers[] = {"vmrpc/vmclient.h", "vmrpc/status.h", "vmrpc/dtype.h"};
  for (size_t i = 0; i < 3; i++) {
    char h[300];
    snprintf(h, sizeof(h), "%s/include/%s", g_prefix, headers[i]);
    header_functions(h, api, &n_api, 512);
  }
  assert_true(listed(api, n_api, "vmc_connect"));
  assert_true(listed(api, n_api, "vm_status_message"));

  char cmd[4096];
  run_result_t r;
  snprintf(cmd, sizeof(cmd), "nm -D --defined-only '%s/lib/libvmclient.so'", g_prefix);
  sh(cmd, &r);
  char *save = NULL;
  for (char *ln = strtok_r(r.out, "\n", &save); ln; ln = strtok_r(NULL, "\n", &save)) {
    char addr[64], type[8], name[256];
    if (sscanf(ln, "%63s %7s %255s", addr, type, name) != 3) fail_msg("nm line: %s", ln);
    if (strcmp(type, "A") == 0) continue; /* the version node */
    char *at = strchr(name, '@');
    if (at) *at = '\0';
    if (!listed(api, n_api, name))
      fail_msg("libvmclient.so exports '%s', which its installed headers do not declare", name);
    assert_true(n_exp < 512 && strlen(name) < 64);
    memcpy(exported[n_exp++], name, strlen(name) + 1);
  }
  run_result_free(&r);
  /* every function of vmclient.h is there */
  for (size_t i = 0; i < n_api; i++)
    if (strncmp(api[i], "vmc_", 4) == 0 && !listed(exported, n_exp, api[i]))
      fail_msg("vmclient.h declares %s but libvmclient.so does not export it", api[i]);
  assert_true(n_exp > 30);
}

/* 1 when dir (under the source tree) has a file named name. */
static int source_has(const char *dir, const char *name) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/%s/%s", g_src, dir, name);
  FILE *f = fopen(path, "r");
  if (f) fclose(f);
  return f != NULL;
}

/* libvmclient.a holds the objects of client/lib, base/src, proto/src,
 * transport/src and the generated protocol code, and none of vm/src: the client library does
 * not carry the VM. */
static void test_archive_members(void **state) {
  (void)state;
  char cmd[4096];
  run_result_t r;
  snprintf(cmd, sizeof(cmd), "ar t '%s/lib/libvmclient.a'", g_prefix);
  sh(cmd, &r);
  size_t members = 0, base = 0;
  char *save = NULL;
  for (char *m = strtok_r(r.out, "\n", &save); m; m = strtok_r(NULL, "\n", &save)) {
    char src[256];
    size_t n = strlen(m);
    if (n < 5 || n >= sizeof(src) || strcmp(m + n - 4, ".c.o") != 0)
      fail_msg("libvmclient.a member '%s' is not an object of a C file", m);
    memcpy(src, m, n - 2); /* "x.c.o" -> "x.c" */
    src[n - 2] = '\0';
    if (source_has("vm/src", src))
      fail_msg("libvmclient.a carries %s, an object of the VM (vm/src/%s)", m, src);
    int ours = source_has("client/lib", src) || source_has("base/src", src) ||
               source_has("proto/src", src) || source_has("transport/src", src) ||
               strcmp(src, "vmrpc.pb-c.c") == 0;
    if (!ours)
      fail_msg("libvmclient.a member '%s' comes from no client, base, proto or transport file", m);
    base += source_has("base/src", src);
    members++;
  }
  run_result_free(&r);
  assert_true(members > 10);
  assert_true(base >= 2); /* status.c, dtype.c at least */
  /* and what the VM defines is not in it */
  snprintf(cmd, sizeof(cmd),
           "nm --defined-only '%s/lib/libvmclient.a' | grep -E ' T (vm_executable_|vm_machine_|"
           "vm_interp|vm_verify)' || true",
           g_prefix);
  sh(cmd, &r);
  if (r.out[0]) fail_msg("libvmclient.a defines VM functions: %.500s", r.out);
  run_result_free(&r);
}

/* Every installed header is under include/vmrpc/: nothing else in
 * include/. */
static void test_headers_under_vmrpc(void **state) {
  (void)state;
  char dir[300];
  snprintf(dir, sizeof(dir), "%s/include", g_prefix);
  DIR *d = opendir(dir);
  assert_non_null(d);
  size_t n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    if (strcmp(e->d_name, "vmrpc") != 0)
      fail_msg("include/%s is installed outside vmrpc/", e->d_name);
    n++;
  }
  closedir(d);
  assert_int_equal(n, 1);
  const char *want[] = {"vmrpc/vmclient.h", "vmrpc/status.h", "vmrpc/dtype.h"};
  for (size_t i = 0; i < 3; i++) {
    char p[400];
    snprintf(p, sizeof(p), "%s/%s", dir, want[i]);
    FILE *f = fopen(p, "r");
    if (!f) fail_msg("%s is not installed", p);
    fclose(f);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_header_alone),
      cmocka_unit_test(test_exported_symbols),
      cmocka_unit_test(test_archive_members),
      cmocka_unit_test(test_headers_under_vmrpc),
      cmocka_unit_test(test_pkg_config_shared),
      cmocka_unit_test(test_static_archive),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
