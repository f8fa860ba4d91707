/* One process runner for the CLI suites. See run_proc.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "run_proc.h"

int run_proc_program(const char *rel, char *out, size_t n) {
  const char *bd = getenv("VMRPC_BUILD_DIR");
  if (!bd) {
    fprintf(stderr, "VMRPC_BUILD_DIR is not set (run through ctest)\n");
    return -1;
  }
  snprintf(out, n, "%s/%s", bd, rel);
  if (access(out, X_OK) != 0) {
    fprintf(stderr, "%s is not built\n", out);
    return -1;
  }
  return 0;
}

int run_proc_mkdtemp(const char *prefix, char *out, size_t n) {
  const char *tmp = getenv("TMPDIR");
  snprintf(out, n, "%s/%sXXXXXX", tmp && *tmp ? tmp : "/tmp", prefix);
  return mkdtemp(out) ? 0 : -1;
}

int run_proc_rmdir(const char *dir) {
  char cmd[4300];
  if (snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir) >= (int)sizeof(cmd)) return -1;
  return system(cmd) == 0 ? 0 : -1;
}

void run_result_free(run_result_t *r) {
  free(r->out);
  free(r->err);
  memset(r, 0, sizeof(*r));
}

static void buf_add(char **b, size_t *n, const char *d, size_t k) {
  *b = realloc(*b, *n + k + 1);
  assert_non_null(*b);
  memcpy(*b + *n, d, k);
  *n += k;
  (*b)[*n] = '\0';
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void run_proc(const char *prog, const char *const *args, const char *dir, const void *in,
              size_t in_n, const char *stdout_file, double timeout_s, run_result_t *r) {
  memset(r, 0, sizeof(*r));
  buf_add(&r->out, &r->out_n, "", 0);
  buf_add(&r->err, &r->err_n, "", 0);
  /* every argument, however many (a model may take hundreds of inputs) */
  size_t nargs = 0;
  while (args[nargs]) nargs++;
  const char **argv = calloc(nargs + 2, sizeof(*argv));
  assert_non_null(argv);
  argv[0] = prog;
  memcpy(argv + 1, args, nargs * sizeof(*argv));

  int pin[2], pout[2], perr[2];
  assert_int_equal(pipe(pin), 0);
  assert_int_equal(pipe(pout), 0);
  assert_int_equal(pipe(perr), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    if (chdir(dir) != 0) _exit(125);
    dup2(pin[0], 0);
    if (stdout_file) {
      int fd = open(stdout_file, O_WRONLY);
      if (fd < 0) _exit(126);
      dup2(fd, 1);
      close(fd);
    } else {
      dup2(pout[1], 1);
    }
    dup2(perr[1], 2);
    close(pin[0]);
    close(pin[1]);
    close(pout[0]);
    close(pout[1]);
    close(perr[0]);
    close(perr[1]);
    execv(prog, (char *const *)argv);
    _exit(127);
  }
  free(argv);
  close(pin[0]);
  close(pout[1]);
  close(perr[1]);
  fcntl(pin[1], F_SETFL, O_NONBLOCK);
  size_t in_done = 0;
  if (!in || in_n == 0) {
    close(pin[1]);
    pin[1] = -1;
  }
  int open_out = 1, open_err = 1;
  double deadline = now_s() + timeout_s;
  while (open_out || open_err) {
    struct pollfd fds[3] = {{pout[0], POLLIN, 0}, {perr[0], POLLIN, 0}, {pin[1], POLLOUT, 0}};
    if (!open_out) fds[0].fd = -1;
    if (!open_err) fds[1].fd = -1;
    int rc = poll(fds, 3, 200);
    if (now_s() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, NULL, 0);
      fail_msg("%s %s did not finish within %.0f s", prog, args[0] ? args[0] : "", timeout_s);
    }
    if (rc < 0 && errno == EINTR) continue;
    assert_true(rc >= 0);
    char buf[65536];
    if (open_out && (fds[0].revents & (POLLIN | POLLHUP))) {
      ssize_t k = read(pout[0], buf, sizeof(buf));
      if (k > 0)
        buf_add(&r->out, &r->out_n, buf, (size_t)k);
      else
        open_out = 0;
    }
    if (open_err && (fds[1].revents & (POLLIN | POLLHUP))) {
      ssize_t k = read(perr[0], buf, sizeof(buf));
      if (k > 0)
        buf_add(&r->err, &r->err_n, buf, (size_t)k);
      else
        open_err = 0;
    }
    if (pin[1] >= 0 && (fds[2].revents & (POLLOUT | POLLERR | POLLHUP))) {
      ssize_t k = write(pin[1], (const char *)in + in_done, in_n - in_done);
      if (k > 0) in_done += (size_t)k;
      if (k < 0 && errno != EAGAIN) in_done = in_n; /* the child closed stdin */
      if (in_done == in_n) {
        close(pin[1]);
        pin[1] = -1;
      }
    }
  }
  if (pin[1] >= 0) close(pin[1]);
  close(pout[0]);
  close(perr[0]);
  for (;;) {
    pid_t w = waitpid(pid, &r->status, 0);
    if (w == pid) break;
    assert_true(w < 0 && errno == EINTR);
  }
}

int run_proc_setup(const char *rel, char *prog, size_t prog_n, const char *prefix, char *dir,
                   size_t dir_n) {
  if (run_proc_program(rel, prog, prog_n) != 0) return -1;
  return run_proc_mkdtemp(prefix, dir, dir_n);
}

void run_expect_cli_exit(const run_result_t *r, int code, const char *what) {
  if (!WIFEXITED(r->status))
    fail_msg("vmclient %s: killed by signal %d", what, WTERMSIG(r->status));
  if (WEXITSTATUS(r->status) != code)
    fail_msg("vmclient %s: exit %d, expected %d; stdout: %.2000s; stderr: %.2000s", what,
             WEXITSTATUS(r->status), code, r->out, r->err);
  if (code == 0) return;
  if (strncmp(r->err, "vmclient: ", 10) != 0 || r->err_n == 0 || r->err[r->err_n - 1] != '\n' ||
      memchr(r->err, '\n', r->err_n) != r->err + r->err_n - 1)
    fail_msg("stderr is not one 'vmclient: ' line: [%s]", r->err);
}
