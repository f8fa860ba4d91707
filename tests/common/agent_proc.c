/* Child-process control for end-to-end tests. See agent_proc.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "agent_proc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#define AP_MAX_ARGS 64
#define AP_MAX_CHILDREN 64

/* Every child started and not yet reaped, so that atexit can kill the ones a
 * failed test (cmocka longjmps out of it) never stopped. */
static pid_t ap_children[AP_MAX_CHILDREN];
static int ap_atexit_done;

static void ap_kill_leftovers(void) {
  for (int i = 0; i < AP_MAX_CHILDREN; i++) {
    if (ap_children[i] > 0) {
      kill(ap_children[i], SIGKILL);
      (void)waitpid(ap_children[i], NULL, 0);
      ap_children[i] = 0;
    }
  }
}

static void ap_track(pid_t pid) {
  if (!ap_atexit_done) {
    ap_atexit_done = 1;
    atexit(ap_kill_leftovers);
  }
  for (int i = 0; i < AP_MAX_CHILDREN; i++) {
    if (ap_children[i] == 0) {
      ap_children[i] = pid;
      return;
    }
  }
}

static void ap_untrack(pid_t pid) {
  for (int i = 0; i < AP_MAX_CHILDREN; i++)
    if (ap_children[i] == pid) ap_children[i] = 0;
}

static double ap_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

const char *agent_proc_binary(void) {
  static char path[4096];
  const char *dir = getenv("VMRPC_BUILD_DIR");
  if (!dir || !*dir) return NULL;
  int n = snprintf(path, sizeof(path), "%s/agent/vmagent", dir);
  if (n < 0 || (size_t)n >= sizeof(path)) return NULL;
  return path;
}

/* Forks and execs argv with stdout (and stderr when merge) on a pipe whose
 * read end is returned in *out_fd. Returns the pid or -1. */
static pid_t ap_spawn(char *const argv[], int merge, int *out_fd) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    perror("agent_proc: pipe");
    return -1;
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    perror("agent_proc: fork");
    close(fds[0]);
    close(fds[1]);
    return -1;
  }
  if (pid == 0) {
#ifdef __linux__
    /* The agent must not outlive a test process that crashed. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
#else
    (void)parent;
#endif
    dup2(fds[1], STDOUT_FILENO);
    if (merge) dup2(fds[1], STDERR_FILENO);
    execv(argv[0], argv);
    fprintf(stderr, "agent_proc: exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  ap_track(pid);
  *out_fd = fds[0];
  return pid;
}

/* Waits for pid at most timeout_s seconds; returns 1 and *status when it
 * exited, 0 on timeout, -1 on error. */
static int ap_wait(pid_t pid, double timeout_s, int *status) {
  double end = ap_now() + timeout_s;
  for (;;) {
    pid_t r = waitpid(pid, status, WNOHANG);
    if (r == pid) return 1;
    if (r < 0 && errno != EINTR) return -1;
    if (ap_now() >= end) return 0;
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

/* Kills and reaps pid (used when starting fails). */
static void ap_kill_reap(pid_t pid) {
  int st;
  kill(pid, SIGKILL);
  (void)ap_wait(pid, 10.0, &st);
  ap_untrack(pid);
}

static int ap_has_flag(const char *const *args, const char *flag) {
  size_t n = strlen(flag);
  for (size_t i = 0; args && args[i]; i++)
    if (strncmp(args[i], flag, n) == 0 && (args[i][n] == '\0' || args[i][n] == '=')) return 1;
  return 0;
}

int agent_proc_start(agent_proc_t *p, const char *const *extra_args) {
  memset(p, 0, sizeof(*p));
  const char *bin = agent_proc_binary();
  if (!bin) {
    fprintf(stderr, "agent_proc: VMRPC_BUILD_DIR is not set\n");
    return -1;
  }
  static char cache[4096];
  const char *argv[AP_MAX_ARGS + 8];
  int n = 0;
  argv[n++] = bin;
  argv[n++] = "--listen";
  argv[n++] = "tcp://127.0.0.1:0";
  if (!ap_has_flag(extra_args, "--cache-dir")) {
    snprintf(cache, sizeof(cache), "%s/test-cache", getenv("VMRPC_BUILD_DIR"));
    (void)mkdir(cache, 0700);
    argv[n++] = "--cache-dir";
    argv[n++] = cache;
  }
  /* Quiet unless asked: VMRPC_AGENT_LOG=debug|info|... */
  const char *level = getenv("VMRPC_AGENT_LOG");
  argv[n++] = "--log-level";
  argv[n++] = level && *level ? level : "warn";
  /* VMRPC_AGENT_ISOLATE=session|none: every suite's agents with that
   * session isolation (a test's own --isolate wins). */
  const char *iso = getenv("VMRPC_AGENT_ISOLATE");
  if (iso && *iso) {
    argv[n++] = "--isolate";
    argv[n++] = iso;
  }
  for (size_t i = 0; extra_args && extra_args[i]; i++) {
    if (n >= AP_MAX_ARGS) {
      fprintf(stderr, "agent_proc: too many arguments\n");
      return -1;
    }
    argv[n++] = extra_args[i];
  }
  argv[n] = NULL;

  int fd = -1;
  pid_t pid = ap_spawn((char *const *)argv, 0, &fd);
  if (pid < 0) return -1;

  /* Read the first line, byte-wise bounded, under a deadline. */
  char line[512];
  size_t len = 0;
  double end = ap_now() + 60.0;
  int ok = 0;
  while (len + 1 < sizeof(line)) {
    int left_ms = (int)((end - ap_now()) * 1000.0);
    if (left_ms <= 0) {
      fprintf(stderr, "agent_proc: no 'listening' line within 60 s\n");
      break;
    }
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int r = poll(&pfd, 1, left_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    ssize_t got = read(fd, line + len, 1);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      fprintf(stderr, "agent_proc: vmagent exited before listening\n");
      break;
    }
    if (line[len] == '\n') {
      ok = 1;
      break;
    }
    len++;
  }
  line[len] = '\0';
  close(fd);
  static const char prefix[] = "vmagent listening on ";
  if (!ok || strncmp(line, prefix, sizeof(prefix) - 1) != 0 ||
      strlen(line + sizeof(prefix) - 1) >= sizeof(p->url)) {
    if (ok) fprintf(stderr, "agent_proc: unexpected first line '%s'\n", line);
    ap_kill_reap(pid);
    return -1;
  }
  snprintf(p->url, sizeof(p->url), "%s", line + sizeof(prefix) - 1);
  p->pid = pid;
  return 0;
}

int agent_proc_stop(agent_proc_t *p) {
  if (!p || p->pid <= 0) return -1;
  pid_t pid = p->pid;
  p->pid = 0;
  int st = 0;
  kill(pid, SIGTERM);
  int r = ap_wait(pid, 10.0, &st);
  if (r == 0) {
    fprintf(stderr, "agent_proc: vmagent %d ignored SIGTERM for 10 s, killing it\n", (int)pid);
    kill(pid, SIGKILL);
    r = ap_wait(pid, 10.0, &st);
    ap_untrack(pid);
    return -1;
  }
  ap_untrack(pid);
  if (r < 0) return -1;
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  fprintf(stderr, "agent_proc: vmagent %d died of signal %d\n", (int)pid,
          WIFSIGNALED(st) ? WTERMSIG(st) : -1);
  return -1;
}

int agent_proc_run(const char *const *args, char *out, size_t out_size, int timeout_s) {
  if (out && out_size) out[0] = '\0';
  const char *bin = agent_proc_binary();
  if (!bin) {
    fprintf(stderr, "agent_proc: VMRPC_BUILD_DIR is not set\n");
    return -1;
  }
  const char *argv[AP_MAX_ARGS + 2];
  int n = 0;
  argv[n++] = bin;
  for (size_t i = 0; args && args[i]; i++) {
    if (n >= AP_MAX_ARGS) return -1;
    argv[n++] = args[i];
  }
  argv[n] = NULL;
  int fd = -1;
  pid_t pid = ap_spawn((char *const *)argv, 1, &fd);
  if (pid < 0) return -1;
  size_t len = 0;
  double end = ap_now() + timeout_s;
  for (;;) {
    int left_ms = (int)((end - ap_now()) * 1000.0);
    if (left_ms <= 0) break;
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int r = poll(&pfd, 1, left_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    char buf[1024];
    ssize_t got = read(fd, buf, sizeof(buf));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break; /* EOF: the child closed its output (exited) */
    if (out && out_size > 1) {
      size_t room = out_size - 1 - len;
      size_t take = (size_t)got < room ? (size_t)got : room;
      memcpy(out + len, buf, take);
      len += take;
      out[len] = '\0';
    }
  }
  close(fd);
  int st = 0;
  double left = end - ap_now();
  int r = ap_wait(pid, left > 0.1 ? left : 0.1, &st);
  if (r != 1) {
    fprintf(stderr, "agent_proc: vmagent did not exit within %d s\n", timeout_s);
    ap_kill_reap(pid);
    return -1;
  }
  ap_untrack(pid);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* CPU nanoseconds of every thread of pid. */
static unsigned long long ap_task_cpu_ns(pid_t pid) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
  DIR *d = opendir(path);
  if (!d) return 0;
  unsigned long long total = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char sp[128];
    snprintf(sp, sizeof(sp), "%s/%.32s/schedstat", path, e->d_name);
    FILE *f = fopen(sp, "r");
    if (!f) continue;
    unsigned long long v;
    if (fscanf(f, "%llu", &v) == 1) total += v;
    fclose(f);
  }
  closedir(d);
  return total;
}

size_t agent_proc_children(pid_t pid, pid_t *out, size_t max) {
  size_t n = 0;
  DIR *d = opendir("/proc");
  if (!d) return 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL && n < max) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%.32s/stat", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    size_t len = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[len] = '\0';
    char *rp = strrchr(buf, ')'); /* "pid (comm) S ppid ..." */
    char st = 0;
    int ppid = 0;
    if (rp && sscanf(rp + 1, " %c %d", &st, &ppid) == 2 && ppid == (int)pid && st != 'Z')
      out[n++] = (pid_t)atoi(e->d_name);
  }
  closedir(d);
  return n;
}

unsigned long long agent_proc_cpu_ns(pid_t pid, int children) {
  unsigned long long total = ap_task_cpu_ns(pid);
  pid_t kids[256];
  size_t n = children ? agent_proc_children(pid, kids, 256) : 0;
  for (size_t i = 0; i < n; i++) total += ap_task_cpu_ns(kids[i]);
  return total;
}

int agent_proc_set_build_dir(void) {
  if (getenv("VMRPC_BUILD_DIR")) return 0;
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) {
    fprintf(stderr, "set VMRPC_BUILD_DIR to the build tree\n");
    return -1;
  }
  exe[n] = '\0';
  for (int k = 0; k < 2; k++) {
    char *slash = strrchr(exe, '/');
    if (slash) *slash = '\0';
  }
  return setenv("VMRPC_BUILD_DIR", exe, 1);
}
