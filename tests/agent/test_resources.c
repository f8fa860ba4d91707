/* Resource exhaustion against a real vmagent; each case expects the exact
 * status, then a successful Ping, and shows the damage stays with the
 * session that caused it. (Too many sessions is test_agent_hostile.c's
 * test_max_sessions.)
 *
 * - Device out of memory: the cpu device capped at 8 MiB for all sessions
 *   (--device-mem-limit). Session B's run-time allocation (a copy in
 *   Invoke) and then its transfer (TensorBegin) past the cap fail with
 *   RESOURCE_EXHAUSTED "cpu device out of memory" while session A keeps
 *   running and fetching its outputs, and B works again once memory is
 *   free.
 * - Disk full for the executable store: the cache dir on a 128 KiB tmpfs
 *   (when this process may mount one; real ENOSPC), and, always, a file
 *   size limit (RLIMIT_FSIZE inherited by the agent, SIGXFSZ ignored: the
 *   write fails with EFBIG halfway through the file). Uploading an
 *   executable too big for the disk fails with RESOURCE_EXHAUSTED, nothing
 *   of it is left (no partial or temporary file, not listed, not loaded,
 *   its staging released), the session goes on with what was stored, and
 *   an agent restarted on that cache dir does not serve it (a miss) while
 *   a small executable stored before is a hit. When older store files
 *   would make room, the least recently used go and the upload succeeds
 *   (on a 256 KiB tmpfs). A store directory that cannot be written for
 *   another reason: UNAVAILABLE, the same way. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent_proc.h"
#include "helper_agent.h"
#include "test_util.h"
#include "vm/executable.h"
#include "vmrpc/vmclient.h"

#define MIB (1u << 20)

/* ident(x) -> x; dup(x) -> a new tensor of x's shape (device memory
 * allocated at run time; its bytes are not copied). */
static const char k_prog[] =
    ".const c0 dtype float32\n"
    ".const c1 string \"global\"\n"
    ".packed $vm.builtin.shape_of\n"
    ".packed $vm.builtin.alloc_storage\n"
    ".packed $vm.builtin.alloc_tensor\n"
    ".func @ident(x) regs 1 {\n"
    "  ret %0\n"
    "}\n"
    ".func @dup(x) regs 4 {\n"
    "  %1 = call $vm.builtin.shape_of(%0)\n"
    "  %2 = call $vm.builtin.alloc_storage(%vm, %1, 0, c0, c1)\n"
    "  %3 = call $vm.builtin.alloc_tensor(%2, 0, %1, c0)\n"
    "  ret %3\n"
    "}\n";

static vmc_conn_t *connect_ok(const char *url) {
  vmc_conn_t *c = NULL;
  ASSERT_OK(vmc_connect(url, NULL, &c));
  return c;
}

static vmc_vm_t vm_ok(vmc_conn_t *c, const uint8_t *prog, size_t len) {
  vmc_exec_t ex;
  ASSERT_OK(vmc_upload_memory(c, prog, len, NULL, NULL, &ex, NULL));
  vmc_device_spec_t d = {"cpu", "naive"}; /* frees at once: exact accounting */
  vmc_vm_t vm;
  ASSERT_OK(vmc_create_vm(c, ex, &d, 1, NULL, &vm));
  ASSERT_OK(vmc_free_exec(c, ex));
  return vm;
}

/* A float32 tensor of `bytes` bytes, element i = i + salt. */
static void make_input(vmc_tensor_t *x, uint64_t bytes, float salt) {
  int64_t n = (int64_t)(bytes / 4);
  ASSERT_OK(vmc_tensor_alloc(VM_F32, 1, &n, x));
  for (int64_t i = 0; i < n; i++) ((float *)x->data)[i] = (float)i + salt;
}

/* func's output has x's size (and, for ident, its bytes). */
static void expect_output(vmc_conn_t *c, vmc_vm_t vm, const char *func, const vmc_tensor_t *x) {
  vmc_tensor_t y;
  ASSERT_OK(vmc_get_output(c, vm, func, NULL, 0, &y));
  assert_int_equal(y.nbytes, x->nbytes);
  if (strcmp(func, "ident") == 0) assert_memory_equal(y.data, x->data, x->nbytes);
  vmc_tensor_free(&y);
}

static void test_device_out_of_memory(void **state) {
  (void)state;
  uint8_t *prog;
  size_t prog_len;
  assert_int_equal(ha_exec_bytes(k_prog, &prog, &prog_len), 0);
  const char *args[] = {"--device", "cpu", "--device-mem-limit", "8M", "--chunk-size",
                        "256K",     NULL};
  agent_proc_t p;
  assert_int_equal(agent_proc_start(&p, args), 0);
  vmc_conn_t *a = connect_ok(p.url), *b = connect_ok(p.url);
  vmc_vm_t va = vm_ok(a, prog, prog_len), vb = vm_ok(b, prog, prog_len);
  vmc_tensor_t xa, xb, xc, xd;
  make_input(&xa, 3 * MIB, 0.5f);
  make_input(&xb, 3 * MIB, 7.0f);
  make_input(&xc, 1 * MIB, 3.0f);
  make_input(&xd, 7 * MIB / 2, 9.0f);

  /* A holds 3 MiB, B 3 MiB: 6 of 8 MiB. */
  ASSERT_OK(vmc_set_input(a, va, "ident", 0, &xa));
  ASSERT_OK(vmc_invoke(a, va, "ident", 0, NULL));
  expect_output(a, va, "ident", &xa);
  ASSERT_OK(vmc_set_input(b, vb, "dup", 0, &xb));
  /* B's copy needs 3 MiB more at run time: the device is out of memory. */
  ASSERT_STATUS(vmc_invoke(b, vb, "dup", 0, NULL), VM_RESOURCE_EXHAUSTED,
                "cpu device out of memory");
  ASSERT_OK(vmc_ping(b, NULL));
  /* A is not affected. */
  ASSERT_OK(vmc_invoke(a, va, "ident", 0, NULL));
  expect_output(a, va, "ident", &xa);
  ASSERT_OK(vmc_ping(a, NULL));
  /* B with a smaller input (1 MiB, replacing its 3 MiB) runs: 3 + 1 + 1. */
  ASSERT_OK(vmc_set_input(b, vb, "dup", 0, &xc));
  ASSERT_OK(vmc_invoke(b, vb, "dup", 0, NULL));
  expect_output(b, vb, "dup", &xc);
  /* 5 MiB in use: B's 3.5 MiB transfer (TensorBegin) does not fit. */
  ASSERT_STATUS(vmc_set_input(b, vb, "dup", 0, &xd), VM_RESOURCE_EXHAUSTED,
                "cpu device out of memory");
  ASSERT_OK(vmc_ping(b, NULL));
  ASSERT_OK(vmc_invoke(a, va, "ident", 0, NULL));
  expect_output(a, va, "ident", &xa);
  /* Once A and B's old VM let go, B's 3.5 + 3.5 MiB fit, end to end. */
  ASSERT_OK(vmc_free_vm(a, va));
  ASSERT_OK(vmc_free_vm(b, vb));
  vb = vm_ok(b, prog, prog_len);
  ASSERT_OK(vmc_set_input(b, vb, "dup", 0, &xd));
  ASSERT_OK(vmc_invoke(b, vb, "dup", 0, NULL));
  expect_output(b, vb, "dup", &xd);
  vmc_stats_t s;
  ASSERT_OK(vmc_stats(b, &s));
  assert_int_equal(s.agent_sessions, 2);
  vmc_stats_free(&s);

  vmc_tensor_free(&xa);
  vmc_tensor_free(&xb);
  vmc_tensor_free(&xc);
  vmc_tensor_free(&xd);
  vmc_close(a);
  vmc_close(b);
  assert_int_equal(ha_ping_fresh(p.url), 0);
  assert_int_equal(agent_proc_stop(&p), 0);
  free(prog);
}

/* ------------------------------------------------------------ disk full */

/* An executable of about `bytes` bytes (a uint8 tensor constant returned
 * by @big), unique to salt. */
static void big_exec(size_t bytes, unsigned salt, uint8_t **out, size_t *out_len) {
  size_t cap = 2 * bytes + 512;
  char *text = malloc(cap);
  assert_non_null(text);
  int n = snprintf(text, cap, ".const c0 tensor uint8[%zu] data ", bytes);
  unsigned s = salt * 2654435761u + 1;
  for (size_t i = 0; i < bytes; i++) {
    s = s * 1103515245u + 12345u;
    n += snprintf(text + n, cap - (size_t)n, "%02x", (s >> 16) & 0xff);
  }
  snprintf(text + n, cap - (size_t)n,
           "\n.packed $vm.builtin.copy\n.func @big() regs 1 {\n  %%0 = call $vm.builtin.copy(c0)\n"
           "  ret %%0\n}\n");
  assert_int_equal(ha_exec_bytes(text, out, out_len), 0);
  free(text);
}

/* Files in dir/executables: total count and *.tmp.* ones. */
static void count_files(const char *dir, int *out_all, int *out_tmp) {
  char path[600];
  snprintf(path, sizeof(path), "%s/executables", dir);
  *out_all = *out_tmp = 0;
  DIR *d = opendir(path);
  if (!d) return;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (e->d_name[0] == '.') continue;
    (*out_all)++;
    if (strstr(e->d_name, ".tmp")) (*out_tmp)++;
  }
  closedir(d);
}

static int upload_begin_present(const char *url, const uint8_t *data, size_t len) {
  hw_conn_t c;
  hw_reply_t r;
  assert_int_equal(hw_open(&c, url), 0);
  CODE_IS(hw_hello(&c, NULL, &r), 0, &r);
  hw_reply_free(&r);
  uint8_t sha[32];
  vm_sha256(data, len, sha);
  CODE_IS(ha_upload_begin(&c, sha, len, &r), 0, &r);
  int present = r.rs->upload_begin->present;
  hw_reply_free(&r);
  hw_close(&c);
  return present;
}

/* Fails unless st is RESOURCE_EXHAUSTED with the store's full-disk message;
 * frees st. */
static void expect_store_full(vm_status_t st) {
  assert_non_null(st);
  const char *m = vm_status_message(st);
  if (vm_status_code(st) != VM_RESOURCE_EXHAUSTED ||
      !strstr(m, "the agent's executable store cannot keep this executable") ||
      !strstr(m, "its disk is full or a file size limit was reached; nothing was stored") ||
      !strstr(m, "then upload again"))
    fail_msg("expected RESOURCE_EXHAUSTED (store full), got code %d: %s", (int)vm_status_code(st),
             m);
  vm_status_free(st);
}

/* The store's entry count; *out_agent_bytes (may be NULL) the bytes all
 * sessions hold. */
static uint32_t store_entries(vmc_conn_t *c, uint64_t *out_agent_bytes) {
  vmc_stats_t s;
  ASSERT_OK(vmc_stats(c, &s));
  uint32_t n = s.store_entries;
  if (out_agent_bytes) *out_agent_bytes = s.agent_bytes;
  vmc_stats_free(&s);
  return n;
}

/* The scenario, on an agent whose store cannot hold `big`. */
static void disk_full_scenario(const char *dir, int limit_fsize) {
  uint8_t *small, *big;
  size_t small_len, big_len;
  assert_int_equal(ha_exec_bytes(k_prog, &small, &small_len), 0);
  big_exec(256u << 10, (unsigned)getpid() ^ (unsigned)limit_fsize, &big, &big_len);
  const char *args[] = {"--device", "cpu", "--cache-dir", dir, NULL};
  agent_proc_t p;
  struct rlimit old;
  if (limit_fsize) { /* the agent inherits both */
    signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    struct rlimit lim = {128u << 10, old.rlim_max};
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
  }
  int started = agent_proc_start(&p, args);
  if (limit_fsize) {
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, SIG_DFL);
  }
  assert_int_equal(started, 0);

  vmc_conn_t *c = connect_ok(p.url);
  vmc_exec_t ex;
  /* the small one is stored */
  ASSERT_OK(vmc_upload_memory(c, small, small_len, NULL, NULL, &ex, NULL));
  uint64_t bytes0, bytes1;
  assert_int_equal(store_entries(c, &bytes0), 1);
  /* the big one does not fit on the disk: the upload fails as a whole */
  vmc_exec_t ex_big;
  expect_store_full(vmc_upload_memory(c, big, big_len, NULL, NULL, &ex_big, NULL));
  ASSERT_OK(vmc_ping(c, NULL));
  assert_int_equal(store_entries(c, &bytes1), 1); /* not listed; nothing evicted for it */
  assert_int_equal(bytes1, bytes0);                /* its staging is released */
  int all, tmp;
  count_files(dir, &all, &tmp);
  assert_int_equal(tmp, 0); /* no partial file left behind */
  assert_int_equal(all, 1); /* only the small one */
  /* not served from memory either, and trying again fails the same way */
  assert_false(upload_begin_present(p.url, big, big_len));
  expect_store_full(vmc_upload_memory(c, big, big_len, NULL, NULL, &ex_big, NULL));
  /* the session keeps working with what was stored */
  vmc_upload_result_t res;
  ASSERT_OK(vmc_upload_memory(c, small, small_len, NULL, NULL, &ex, &res));
  assert_true(res.store_hit);
  vmc_device_spec_t d = {"cpu", NULL};
  vmc_vm_t vm;
  ASSERT_OK(vmc_create_vm(c, ex, &d, 1, NULL, &vm));
  vmc_tensor_t x;
  make_input(&x, 4096, 1.5f);
  ASSERT_OK(vmc_set_input(c, vm, "ident", 0, &x));
  ASSERT_OK(vmc_invoke(c, vm, "ident", 0, NULL));
  expect_output(c, vm, "ident", &x);
  vmc_tensor_free(&x);
  ASSERT_OK(vmc_ping(c, NULL));
  vmc_close(c);
  assert_int_equal(agent_proc_stop(&p), 0);

  /* A restarted agent on this cache dir serves the small one from disk and
   * does not serve the big one. */
  const char *args2[] = {"--device", "cpu", "--cache-dir", dir, NULL};
  assert_int_equal(agent_proc_start(&p, args2), 0);
  assert_true(upload_begin_present(p.url, small, small_len));
  assert_false(upload_begin_present(p.url, big, big_len));
  assert_int_equal(ha_ping_fresh(p.url), 0);
  assert_int_equal(agent_proc_stop(&p), 0);
  free(small);
  free(big);
}

static void rm_rf(const char *dir) {
  char cmd[700];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

/* Mounts a tmpfs of `size` (e.g. "128k") on a new directory: 0, or -1
 * when this process may not (not root). */
static int mount_tmpfs(const char *size, char dir[26]) {
  strcpy(dir, "/tmp/vmagent-full-XXXXXX");
  assert_non_null(mkdtemp(dir));
  char cmd[700];
  snprintf(cmd, sizeof(cmd), "mount -t tmpfs -o size=%s vmrpc-test %s >/dev/null 2>&1", size,
           dir);
  if (geteuid() != 0 || system(cmd) != 0) {
    rmdir(dir);
    print_message("cannot mount a tmpfs here (needs root): covered by the RLIMIT_FSIZE test\n");
    return -1;
  }
  return 0;
}

static void unmount_tmpfs(const char *dir) {
  char cmd[700];
  snprintf(cmd, sizeof(cmd), "umount %s", dir);
  assert_int_equal(system(cmd), 0);
  rm_rf(dir);
}

static void test_store_disk_full_tmpfs(void **state) {
  (void)state;
  char dir[26];
  if (mount_tmpfs("128k", dir) != 0) skip();
  disk_full_scenario(dir, 0);
  unmount_tmpfs(dir);
}

/* A disk full of older store files: the least recently used ones make
 * room, only as many as needed, and the new upload succeeds. On a 256 KiB
 * tmpfs (64 pages): A and B of ~96 KiB each are stored (50 pages), A is
 * used again (a store hit from disk in a new session), then C of ~96 KiB
 * does not fit: B, the least recently used, is evicted and C is stored. */
static void test_store_disk_full_evicts_oldest(void **state) {
  (void)state;
  char dir[26];
  if (mount_tmpfs("256k", dir) != 0) skip();
  uint8_t *x[3];
  size_t len[3];
  for (int i = 0; i < 3; i++) big_exec(96u << 10, 100u + (unsigned)i, &x[i], &len[i]);
  const char *args[] = {"--device", "cpu", "--cache-dir", dir, NULL};
  agent_proc_t p;
  assert_int_equal(agent_proc_start(&p, args), 0);
  vmc_conn_t *c = connect_ok(p.url);
  vmc_exec_t ex;
  ASSERT_OK(vmc_upload_memory(c, x[0], len[0], NULL, NULL, &ex, NULL));
  ASSERT_OK(vmc_upload_memory(c, x[1], len[1], NULL, NULL, &ex, NULL));
  assert_int_equal(store_entries(c, NULL), 2);
  vmc_close(c); /* the session's handles go: both now live on disk only */
  assert_true(upload_begin_present(p.url, x[0], len[0])); /* A used again */
  c = connect_ok(p.url);
  ASSERT_OK(vmc_upload_memory(c, x[2], len[2], NULL, NULL, &ex, NULL));
  assert_int_equal(store_entries(c, NULL), 2); /* A and C */
  vmc_device_spec_t d = {"cpu", NULL};
  vmc_vm_t vm;
  ASSERT_OK(vmc_create_vm(c, ex, &d, 1, NULL, &vm));
  ASSERT_OK(vmc_invoke(c, vm, "big", 0, NULL));
  vmc_tensor_t y;
  ASSERT_OK(vmc_get_output(c, vm, "big", NULL, 0, &y));
  assert_int_equal(y.nbytes, 96u << 10);
  vmc_tensor_free(&y);
  ASSERT_OK(vmc_ping(c, NULL));
  vmc_close(c);
  int all, tmp;
  count_files(dir, &all, &tmp);
  assert_int_equal(all, 2);
  assert_int_equal(tmp, 0);
  assert_int_equal(agent_proc_stop(&p), 0);
  /* what is on the disk is what a restarted agent serves */
  assert_int_equal(agent_proc_start(&p, args), 0);
  assert_true(upload_begin_present(p.url, x[0], len[0]));
  assert_false(upload_begin_present(p.url, x[1], len[1]));
  assert_true(upload_begin_present(p.url, x[2], len[2]));
  assert_int_equal(ha_ping_fresh(p.url), 0);
  assert_int_equal(agent_proc_stop(&p), 0);
  for (int i = 0; i < 3; i++) free(x[i]);
  unmount_tmpfs(dir);
}

static void test_store_file_too_large(void **state) {
  (void)state;
  char dir[] = "/tmp/vmagent-fsize-XXXXXX";
  assert_non_null(mkdtemp(dir));
  disk_full_scenario(dir, 1);
  rm_rf(dir);
}

/* A store directory that cannot be written for another reason than room
 * (here it was replaced by a plain file while the agent ran: ENOTDIR, which
 * root's permissions cannot bypass): UNAVAILABLE, nothing kept, and the
 * session goes on. */
static void test_store_write_error(void **state) {
  (void)state;
  char dir[] = "/tmp/vmagent-werr-XXXXXX";
  assert_non_null(mkdtemp(dir));
  /* in process: an isolated agent's spare workers, starting at any time,
   * open (and create) the store directory this test takes away */
  const char *args[] = {"--device", "cpu", "--cache-dir", dir, "--isolate", "none", NULL};
  agent_proc_t p;
  assert_int_equal(agent_proc_start(&p, args), 0);
  char path[600];
  snprintf(path, sizeof(path), "%s/executables", dir);
  assert_int_equal(rmdir(path), 0);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fclose(f);
  uint8_t *prog;
  size_t len;
  assert_int_equal(ha_exec_bytes(k_prog, &prog, &len), 0);
  vmc_conn_t *c = connect_ok(p.url);
  vmc_exec_t ex;
  ASSERT_STATUS(vmc_upload_memory(c, prog, len, NULL, NULL, &ex, NULL), VM_UNAVAILABLE,
                "the agent's executable store cannot keep this executable");
  ASSERT_STATUS(vmc_upload_memory(c, prog, len, NULL, NULL, &ex, NULL), VM_UNAVAILABLE,
                "writing the store file failed (see the agent's log); nothing was stored");
  assert_int_equal(store_entries(c, NULL), 0);
  assert_false(upload_begin_present(p.url, prog, len));
  ASSERT_OK(vmc_ping(c, NULL));
  vmc_close(c);
  assert_int_equal(agent_proc_stop(&p), 0);
  free(prog);
  rm_rf(dir);
}

/* Agents may share a store folder (a farm host runs several): one that
 * starts removes the temp files of crashed writers only, never one that a
 * live agent is writing (its upload would then fail). */
static void test_store_scan_keeps_live_writers_temp_files(void **state) {
  (void)state;
  char dir[] = "/tmp/vmagent-tmpscan-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char sub[600], live[700], dead[700], odd[700];
  snprintf(sub, sizeof(sub), "%s/executables", dir);
  assert_int_equal(mkdir(sub, 0700), 0);
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) _exit(0);
  assert_int_equal(waitpid(child, NULL, 0), child);
  snprintf(live, sizeof(live), "%s/%064d.vmx.tmp.%ld.7", sub, 1, (long)getpid());
  snprintf(dead, sizeof(dead), "%s/%064d.vmx.tmp.%ld.7", sub, 2, (long)child);
  snprintf(odd, sizeof(odd), "%s/%064d.vmx.tmp.x", sub, 3);
  const char *files[] = {live, dead, odd};
  for (int i = 0; i < 3; i++) {
    FILE *f = fopen(files[i], "w");
    assert_non_null(f);
    fclose(f);
  }
  const char *args[] = {"--device", "cpu", "--cache-dir", dir, NULL};
  agent_proc_t p;
  assert_int_equal(agent_proc_start(&p, args), 0);
  assert_int_equal(ha_ping_fresh(p.url), 0);
  assert_int_equal(access(live, F_OK), 0);
  assert_int_equal(access(dead, F_OK), -1);
  assert_int_equal(access(odd, F_OK), -1);
  assert_int_equal(agent_proc_stop(&p), 0);
  rm_rf(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_device_out_of_memory),
      cmocka_unit_test(test_store_disk_full_tmpfs),
      cmocka_unit_test(test_store_disk_full_evicts_oldest),
      cmocka_unit_test(test_store_file_too_large),
      cmocka_unit_test(test_store_write_error),
      cmocka_unit_test(test_store_scan_keeps_live_writers_temp_files),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
