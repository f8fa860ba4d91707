/* Session isolation, the agent's side (isolate.h has the design): worker
 * processes, their supervision, and the forwarding of a session's requests.
 *
 * Threads: the supervisor (starts every worker, so that PR_SET_PDEATHSIG,
 * which follows the thread that forked, holds for the agent's lifetime;
 * keeps the spares; kills workers whose requests passed their bound; frees
 * the ended ones; notices the end of a worker nobody waits on), a starter
 * per new worker (until it says it is ready), and the transport's request
 * threads. A request thread reads the link itself while it waits: one at a
 * time takes the worker's reading turn, hands each reply it reads to its
 * request (its own included), and passes the turn on when its own reply is
 * in; so a reply reaches its request without a hand-off between threads.
 *
 * One lock (iso->mu) covers the workers, their pending calls and the
 * sessions' worker fields; it is taken after agent->lock, never before.
 * Writes to a worker are serialised by its own write lock, taken with no
 * other lock held.
 */
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent_internal.h"
#include "vmtransport/frame.h"
#include "isolate.h"
#include "vm/log.h"

/* A worker that does not say it is ready within this long is killed. */
#define VMA_ISO_START_MS 60000
/* A request waits this long for a worker to be ready for its session. */
#define VMA_ISO_WAIT_MS 60000
/* Beyond a request's own bound (its deadline plus the kernel bound), the
 * worker gets this long to answer before it is killed. */
#define VMA_ISO_GRACE_MS 2000
/* Workers that died before they were ready, in a row, before the
 * supervisor waits VMA_ISO_BACKOFF_MS between starts. */
/* A worker seen stopped (SIGSTOP, SIGTSTP: /proc state 'T') this long is
 * killed: stopped, it still holds the device locks (run lock, quiet gate)
 * it took, and every other session's work on those devices would wait for
 * it for ever. */
#define VMA_ISO_STOPPED_MS 1000
#define VMA_ISO_MAX_FAILS 3
#define VMA_ISO_BACKOFF_MS 5000
#define VMA_ISO_MAX_ARGS 96
#define VMA_ISO_WHY 320

typedef struct vma_iso_call {
  uint64_t tag;
  vma_out_t *out;
  uint64_t kill_at_ns; /* 0: no bound */
  int done;            /* replied, or failed */
  int failed;          /* the worker ended first: code/why say how */
  vm_code_t code;
  char why[VMA_ISO_WHY];
  uint32_t flags; /* of the reply */
  pthread_cond_t cv;
  struct vma_iso_call *next;
} vma_iso_call_t;

typedef struct vma_iso_worker {
  struct vma_iso *iso;
  pid_t pid;
  int fd;
  pthread_t starter;
  int starter_started;
  int reading; /* a thread has the reading turn */
  int told;    /* a request of its session learnt of its end */
  int slot;    /* its share's index in the shared memory, -1: none */
  uint64_t started_ns;
  uint64_t stopped_ns; /* first seen stopped (0: running) */
  int ready;
  int gone;   /* its link is closed: no call may start */
  int killed; /* we killed it: why/code say why */
  vm_code_t code;
  char why[VMA_ISO_WHY];
  uint64_t session_id; /* 0: a spare */
  uint32_t refs;       /* the session's binding and calls in flight */
  uint64_t next_tag;
  vma_iso_call_t *calls;
  pthread_mutex_t wmu;
  struct vma_iso_worker *next;
} vma_iso_worker_t;

typedef struct vma_iso {
  vmagent_t *a;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* spares ready, workers gone, supervisor wake-ups */
  vma_iso_worker_t *workers;
  int stopping;
  int want_spare; /* a request waits for a worker */
  pthread_t super;
  int super_started;
  pid_t parent_pid;
  char *argv[VMA_ISO_MAX_ARGS];
  uint32_t argc;
  int lock_fd;          /* the device lock file workers inherit */
  vma_shared_t *shared; /* its contents, mapped (NULL: none) */
  size_t shared_len;
  uint32_t num_slots;
  uint8_t *slot_used;
  uint32_t fails; /* workers that died before ready, in a row */
  uint64_t backoff_until_ns;
  char last_fail[VMA_ISO_WHY];
  uint64_t reply_cap; /* largest reply body a worker may send */
} vma_iso_t;

/* ------------------------------------------------------------ the link */

int vma_link_read_full(int fd, void *buf, size_t len) {
  uint8_t *p = buf;
  while (len) {
    ssize_t n = read(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

int vma_link_write(int fd, const vma_link_hdr_t *h, const void *body) {
  struct iovec iov[2] = {{(void *)h, sizeof(*h)}, {(void *)body, body ? h->len : 0}};
  unsigned n = 2;
  struct iovec *v = iov;
  while (n) {
    struct msghdr m = {.msg_iov = v, .msg_iovlen = n};
    ssize_t w = sendmsg(fd, &m, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return -1;
    vmt_iov_advance(&v, &n, (size_t)w);
  }
  return 0;
}

/* ------------------------------------------------------------ workers */

static uint64_t vma_ms_ns(uint64_t ms) {
  return ms * 1000000ull;
}

/* Kills w (iso->mu held; never blocks): SIGKILL, and the link shut so that
 * its reader and any writer return at once. The first reason stays. */
static void vma_iso_kill_locked(vma_iso_worker_t *w, vm_code_t code, int quiet, const char *fmt,
                                ...) __attribute__((format(printf, 4, 5)));
static void vma_iso_kill_locked(vma_iso_worker_t *w, vm_code_t code, int quiet, const char *fmt,
                                ...) {
  if (w->killed || w->gone) return;
  w->killed = 1;
  w->code = code;
  va_list ap;
  va_start(ap, fmt);
  int n = snprintf(w->why, sizeof(w->why), "was stopped: ");
  vsnprintf(w->why + n, sizeof(w->why) - (size_t)n, fmt, ap);
  va_end(ap);
  if (w->pid > 0) kill(w->pid, SIGKILL);
  shutdown(w->fd, SHUT_RDWR);
  vm_log(quiet ? VM_LOG_DEBUG : VM_LOG_WARN, "worker %d%s %s", (int)w->pid,
         w->session_id ? " (session)" : "", w->why);
}

/* Why a worker that closed its link ended: waits for it a little (it
 * usually has just died), kills it if it still runs, and reaps it. */
static void vma_iso_exit_reason(vma_iso_t *iso, vma_iso_worker_t *w, char *why, size_t len) {
  pid_t pid = w->pid; /* only this thread changes it, below */
  siginfo_t si;
  int exited = 0;
  for (int i = 0; i < 200 && !exited; i++) { /* 2 s */
    memset(&si, 0, sizeof(si));
    exited = waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid;
    if (!exited) {
      struct timespec ts = {0, 10 * 1000 * 1000};
      nanosleep(&ts, NULL);
    }
  }
  if (!exited) {
    kill(pid, SIGKILL);
    snprintf(why, len, "closed its link and was stopped");
  } else if (si.si_code == CLD_EXITED) {
    snprintf(why, len, "exited with status %d", si.si_status);
  } else {
    snprintf(why, len, "crashed (signal %d, %s)", si.si_status, strsignal(si.si_status));
  }
  pthread_mutex_lock(&iso->mu);
  w->pid = -pid; /* no kill() from here on: the pid may be reused */
  pthread_mutex_unlock(&iso->mu);
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
  }
}

static void vma_iso_fail_calls_locked(vma_iso_worker_t *w, vm_code_t code, const char *why) {
  for (vma_iso_call_t *c = w->calls; c; c = c->next) {
    if (c->done) continue;
    w->told = 1;
    c->done = 1;
    c->failed = 1;
    if (!c->code) c->code = code;
    if (!c->why[0]) snprintf(c->why, sizeof(c->why), "%s", why);
    pthread_cond_signal(&c->cv);
  }
}

static vma_iso_call_t *vma_iso_find_call_locked(vma_iso_worker_t *w, uint64_t tag) {
  for (vma_iso_call_t *c = w->calls; c; c = c->next)
    if (c->tag == tag && !c->done) return c;
  return NULL;
}

/* The link closed: why, reaping the process, and every waiting request
 * failed. The caller has the reading turn (iso->mu not held); it ends here. */
static void vma_iso_end(vma_iso_t *iso, vma_iso_worker_t *w) {
  pthread_mutex_lock(&iso->mu);
  int was_killed = w->killed;
  pthread_mutex_unlock(&iso->mu);
  char why[VMA_ISO_WHY];
  vma_iso_exit_reason(iso, w, why, sizeof(why));
  pthread_mutex_lock(&iso->mu);
  w->gone = 1;
  if (w->slot >= 0) { /* the process is gone: its memory with it */
    vma_share_t *sh = &iso->shared->slot[w->slot];
    atomic_fetch_sub(&iso->shared->host_total, atomic_exchange(&sh->host, 0));
    atomic_fetch_sub(&iso->shared->cpu_total, atomic_exchange(&sh->cpu, 0));
    iso->slot_used[w->slot] = 0;
    w->slot = -1;
  }
  if (!was_killed) {
    w->code = VM_ABORTED;
    snprintf(w->why, sizeof(w->why), "%s", why);
    VM_LOGW("worker %d%s %s", (int)-w->pid, w->session_id ? " (session)" : "", why);
    if (!w->ready) {
      iso->fails++;
      snprintf(iso->last_fail, sizeof(iso->last_fail), "%s", why);
      if (iso->fails >= VMA_ISO_MAX_FAILS)
        iso->backoff_until_ns = vm_now_ns() + vma_ms_ns(VMA_ISO_BACKOFF_MS);
    }
  }
  vma_iso_fail_calls_locked(w, w->code, w->why);
  w->reading = 0;
  pthread_cond_broadcast(&iso->cv);
  pthread_mutex_unlock(&iso->mu);
}

/* Kills w for a broken link and ends it (reading turn held). */
static void vma_iso_bad(vma_iso_t *iso, vma_iso_worker_t *w, const char *bad) {
  pthread_mutex_lock(&iso->mu);
  vma_iso_kill_locked(w, VM_ABORTED, 0, "it %s", bad);
  pthread_mutex_unlock(&iso->mu);
  vma_iso_end(iso, w);
}

/* Reads one reply and gives it to its request (reading turn held, given
 * back here). 0, or -1 when the link ended (the worker is gone). */
static int vma_iso_read_one(vma_iso_t *iso, vma_iso_worker_t *w) {
  vma_link_hdr_t h;
  if (vma_link_read_full(w->fd, &h, sizeof(h)) != 0) {
    vma_iso_end(iso, w);
    return -1;
  }
  pthread_mutex_lock(&iso->mu);
  vma_iso_call_t *c = h.tag ? vma_iso_find_call_locked(w, h.tag) : NULL;
  pthread_mutex_unlock(&iso->mu);
  if (!c || h.len > iso->reply_cap) {
    vma_iso_bad(
        iso, w,
        c ? "sent a reply larger than any request allows" : "answered a request never sent");
    return -1;
  }
  /* The call stays registered (its requester waits) until done. */
  uint8_t *dst = c->out->alloc(c->out, h.len);
  if (!dst) {
    vma_iso_bad(iso, w, "sent a reply the agent has no memory for");
    return -1;
  }
  if (vma_link_read_full(w->fd, dst, h.len) != 0) {
    vma_iso_end(iso, w);
    return -1;
  }
  pthread_mutex_lock(&iso->mu);
  c->flags = h.flags;
  c->done = 1;
  pthread_cond_signal(&c->cv);
  if ((h.flags & VMA_LINK_RETIRE) && !w->killed) {
    /* Stopped after this reply, which says so: that frees the device its
     * kernel holds. */
    w->told = 1;
    vma_iso_kill_locked(w, VM_ABORTED, 0,
                        "a kernel it ran is past the kernel time bound (--kernel-timeout) "
                        "and still runs; stopping the process frees the device");
  }
  w->reading = 0;
  pthread_mutex_unlock(&iso->mu);
  return 0;
}

/* A new worker's first frame: READY, or its end. */
static void *vma_iso_starter(void *arg) {
  vma_iso_worker_t *w = arg;
  vma_iso_t *iso = w->iso;
  vma_link_hdr_t h;
  if (vma_link_read_full(w->fd, &h, sizeof(h)) != 0) {
    vma_iso_end(iso, w);
  } else if (h.tag != 0 || h.flags != VMA_LINK_READY || h.len != 0) {
    vma_iso_bad(iso, w, "sent a malformed frame");
  } else {
    pthread_mutex_lock(&iso->mu);
    w->ready = 1;
    w->reading = 0;
    iso->fails = 0;
    pthread_cond_broadcast(&iso->cv);
    pthread_mutex_unlock(&iso->mu);
  }
  return NULL;
}

/* Starts a worker (supervisor thread, iso->mu not held). */
static void vma_iso_spawn(vma_iso_t *iso) {
  vma_iso_worker_t *w = calloc(1, sizeof(*w));
  int sv[2] = {-1, -1};
  if (!w || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    VM_LOGE("cannot start a worker: %s", w ? strerror(errno) : "out of memory");
    free(w);
    return;
  }
  pthread_mutex_init(&w->wmu, NULL);
  w->iso = iso;
  w->fd = sv[0];
  w->started_ns = vm_now_ns();
  w->slot = -1;
  char *argv[VMA_ISO_MAX_ARGS + 2];
  memcpy(argv, iso->argv, sizeof(char *) * iso->argc);
  uint32_t argc = iso->argc;
  char slot_arg[16];
  pthread_mutex_lock(&iso->mu);
  for (uint32_t i = 0; iso->shared && i < iso->num_slots && w->slot < 0; i++) {
    if (!iso->slot_used[i]) {
      iso->slot_used[i] = 1;
      w->slot = (int)i;
    }
  }
  pthread_mutex_unlock(&iso->mu);
  if (w->slot >= 0) { /* else it counts its own host memory only */
    snprintf(slot_arg, sizeof(slot_arg), "%d", w->slot);
    argv[argc++] = "--worker-slot";
    argv[argc++] = slot_arg;
  }
  argv[argc] = NULL;
  pid_t pid = fork();
  if (pid == 0) {
    /* Only async-signal-safe calls until exec. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != iso->parent_pid) _exit(126);
    if (dup2(sv[1], 3) < 0) _exit(126);
    if (iso->lock_fd >= 0 && dup2(iso->lock_fd, 4) < 0) _exit(126);
    /* Nothing else of the agent's (connections, files): stdout, which only
     * the agent writes its "listening" line to, becomes stderr. */
    if (close_range(iso->lock_fd >= 0 ? 5 : 4, ~0u, 0) != 0 || dup2(2, 1) < 0) _exit(126);
    execv(argv[0], argv);
    _exit(127);
  }
  close(sv[1]);
  if (pid < 0) {
    VM_LOGE("cannot start a worker: fork: %s", strerror(errno));
    pthread_mutex_lock(&iso->mu);
    if (w->slot >= 0) iso->slot_used[w->slot] = 0;
    pthread_mutex_unlock(&iso->mu);
    close(sv[0]);
    pthread_mutex_destroy(&w->wmu);
    free(w);
    return;
  }
  w->pid = pid;
  pthread_mutex_lock(&iso->mu);
  w->next = iso->workers;
  iso->workers = w;
  w->reading = 1; /* the starter's, until READY */
  if (pthread_create(&w->starter, NULL, vma_iso_starter, w) == 0) {
    w->starter_started = 1;
    /* vma_iso_stop ran while this one was being started */
    if (iso->stopping) vma_iso_kill_locked(w, VM_UNAVAILABLE, 1, "the agent is shutting down");
  } else {
    vma_iso_kill_locked(w, VM_UNAVAILABLE, 0, "no thread to start it");
    w->gone = 1;
    w->reading = 0;
    kill(pid, SIGKILL);
    (void)waitpid(pid, NULL, 0);
    w->pid = -pid;
    if (w->slot >= 0) {
      memset(&iso->shared->slot[w->slot], 0, sizeof(vma_share_t));
      iso->slot_used[w->slot] = 0;
      w->slot = -1;
    }
  }
  pthread_mutex_unlock(&iso->mu);
  VM_LOGD("worker %d started", (int)pid);
}

static void vma_iso_free_worker(vma_iso_worker_t *w) {
  if (w->starter_started) pthread_join(w->starter, NULL);
  close(w->fd);
  pthread_mutex_destroy(&w->wmu);
  free(w);
}

/* Spares that are, or will be, ready. iso->mu held. */
static uint32_t vma_iso_spares_locked(vma_iso_t *iso) {
  uint32_t n = 0;
  for (vma_iso_worker_t *w = iso->workers; w; w = w->next)
    if (!w->session_id && !w->gone && !w->killed) n++;
  return n;
}

/* Whether w's link has something to read (or has closed). */
static int vma_iso_readable(const vma_iso_worker_t *w) {
  struct pollfd p = {.fd = w->fd, .events = POLLIN};
  return poll(&p, 1, 0) > 0;
}

/* Whether process pid is stopped by a signal (/proc state 'T'). A
 * traced process ('t', a debugger's stop) is left alone. */
static int vma_iso_is_stopped(pid_t pid) {
  char path[64], buf[256];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char *rp = strrchr(buf, ')'); /* the name may hold spaces and ')' */
  return rp && rp[1] == ' ' && rp[2] == 'T';
}

/* Kills w once it has been stopped for VMA_ISO_STOPPED_MS (iso->mu held):
 * the kernel then drops its device locks, and its session's requests get
 * ABORTED as for a crash. */
static void vma_iso_check_stopped_locked(vma_iso_worker_t *w, uint64_t now) {
  if (w->gone || w->killed || w->pid <= 0) return;
  if (!vma_iso_is_stopped(w->pid)) {
    w->stopped_ns = 0;
    return;
  }
  if (!w->stopped_ns) {
    w->stopped_ns = now;
    return;
  }
  if (now - w->stopped_ns < vma_ms_ns(VMA_ISO_STOPPED_MS)) return;
  vma_iso_kill_locked(w, VM_ABORTED, 0,
                      "it stayed suspended by a signal (SIGSTOP) for %d ms, holding its "
                      "devices from the other sessions",
                      VMA_ISO_STOPPED_MS);
}

static void *vma_iso_supervisor(void *arg) {
  vma_iso_t *iso = arg;
  pthread_mutex_lock(&iso->mu);
  while (!iso->stopping) {
    uint64_t now = vm_now_ns();
    vma_iso_worker_t **pp = &iso->workers;
    while (*pp) {
      vma_iso_worker_t *w = *pp;
      if (w->gone && !w->reading && w->refs == 0) { /* ended, unused: free */
        *pp = w->next;
        pthread_mutex_unlock(&iso->mu);
        vma_iso_free_worker(w);
        pthread_mutex_lock(&iso->mu);
        pp = &iso->workers; /* the list may have changed */
        continue;
      }
      if (!w->gone && !w->reading && !w->calls && vma_iso_readable(w)) {
        /* Nobody waits on it, yet it speaks: it ended (or misbehaves). */
        w->reading = 1;
        pthread_mutex_unlock(&iso->mu);
        (void)vma_iso_read_one(iso, w);
        pthread_mutex_lock(&iso->mu);
        pp = &iso->workers;
        continue;
      }
      vma_iso_check_stopped_locked(w, now);
      if (!w->ready && !w->killed && now - w->started_ns > vma_ms_ns(VMA_ISO_START_MS))
        vma_iso_kill_locked(w, VM_UNAVAILABLE, 0, "it did not start within %d s",
                            VMA_ISO_START_MS / 1000);
      for (vma_iso_call_t *c = w->calls; c && !w->killed; c = c->next) {
        if (c->done || !c->kill_at_ns || now < c->kill_at_ns) continue;
        c->code = VM_DEADLINE_EXCEEDED;
        snprintf(c->why, sizeof(c->why),
                 "was stopped: it did not answer within this request's bound (its deadline, "
                 "the kernel time bound and %d s of grace)",
                 VMA_ISO_GRACE_MS / 1000);
        vma_iso_kill_locked(w, VM_ABORTED, 0, "a request of its session passed its bound");
      }
      pp = &w->next;
    }
    uint32_t want = iso->a->cfg.spare_workers + (iso->want_spare ? 1 : 0);
    if (vma_iso_spares_locked(iso) < want && now >= iso->backoff_until_ns) {
      pthread_mutex_unlock(&iso->mu);
      vma_iso_spawn(iso);
      pthread_mutex_lock(&iso->mu);
      continue;
    }
    struct timespec ts;
    vma_time_in(CLOCK_MONOTONIC, 100, &ts);
    pthread_cond_timedwait(&iso->cv, &iso->mu, &ts);
  }
  pthread_mutex_unlock(&iso->mu);
  return NULL;
}

/* ------------------------------------------------------------ start, stop */

static int vma_iso_arg(vma_iso_t *iso, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int vma_iso_arg(vma_iso_t *iso, const char *fmt, ...) {
  if (iso->argc + 1 >= VMA_ISO_MAX_ARGS) return -1;
  va_list ap;
  va_start(ap, fmt);
  char *s = NULL;
  int n = vasprintf(&s, fmt, ap);
  va_end(ap);
  if (n < 0) return -1;
  iso->argv[iso->argc++] = s;
  return 0;
}

/* The worker's command line: this agent's configuration, as flags. */
static int vma_iso_make_argv(vma_iso_t *iso) {
  const vmagent_t *a = iso->a;
  const vmagent_config_t *c = &a->cfg;
  int e = 0;
  e |= vma_iso_arg(iso, "%s", a->worker_exe);
  e |= vma_iso_arg(iso, "--worker-fd");
  e |= vma_iso_arg(iso, "3");
  if (iso->lock_fd >= 0) {
    e |= vma_iso_arg(iso, "--worker-locks");
    e |= vma_iso_arg(iso, "4");
  }
  e |= vma_iso_arg(iso, "--log-level");
  e |= vma_iso_arg(iso, "%s", vm_log_level_name(vm_log_get_level()));
  for (uint32_t i = 0; i < a->num_devices; i++) {
    e |= vma_iso_arg(iso, "--device");
    e |= vma_iso_arg(iso, "%s", a->devices[i].selector);
  }
  e |= vma_iso_arg(iso, "--cache-dir");
  e |= vma_iso_arg(iso, "%s", a->cache_dir ? a->cache_dir : "");
  e |= vma_iso_arg(iso, "--cache-max-bytes");
  e |= vma_iso_arg(iso, "%llu", (unsigned long long)c->cache_max_bytes);
  e |= vma_iso_arg(iso, "--max-executable");
  e |= vma_iso_arg(iso, "%llu", (unsigned long long)c->max_executable_bytes);
  e |= vma_iso_arg(iso, "--session-mem-limit");
  e |= vma_iso_arg(iso, "%llu", (unsigned long long)c->session_mem_limit);
  e |= vma_iso_arg(iso, "--host-mem-limit");
  e |= vma_iso_arg(iso, "%llu", (unsigned long long)c->host_mem_limit);
  e |= vma_iso_arg(iso, "--device-mem-limit");
  e |= vma_iso_arg(iso, "%llu", (unsigned long long)c->cpu_mem_limit);
  e |= vma_iso_arg(iso, "--chunk-size");
  e |= vma_iso_arg(iso, "%llu", (unsigned long long)c->chunk_bytes);
  e |= vma_iso_arg(iso, "--max-message");
  e |= vma_iso_arg(iso, "%llu", (unsigned long long)c->max_message_bytes);
  e |= vma_iso_arg(iso, "--workers");
  e |= vma_iso_arg(iso, "%u", c->workers);
  e |= vma_iso_arg(iso, "--kernels");
  e |= vma_iso_arg(iso, "cpu=%s,gpu=%s", c->kernels_cpu ? "allow" : "deny",
                   c->kernels_gpu ? "allow" : "deny");
  e |= vma_iso_arg(iso, "--kernel-timeout");
  e |= vma_iso_arg(iso, "%u.%03u", c->kernel_timeout_ms / 1000, c->kernel_timeout_ms % 1000);
  e |= vma_iso_arg(iso, "--idle-timeout");
  e |= vma_iso_arg(iso, "0");
  if (a->pin.on) { /* the worker measures: it pins itself */
    e |= vma_iso_arg(iso, "--cpus");
    e |= vma_iso_arg(iso, "%s", a->pin.list);
  }
  iso->argv[iso->argc] = NULL;
  return e ? -1 : 0;
}

/* The device lock file: one byte-range lock pair per device (run lock,
 * gate) in an anonymous file; each worker opens its own description of it
 * through /proc/self/fd, so its locks are its own and end with it. Kept
 * above fd 4 so that the child's dup2 onto 3 and 4 cannot clobber it. */
static int vma_iso_lock_file(void) {
  int fd = memfd_create("vmagent-devices", MFD_CLOEXEC);
  if (fd < 0) return -1;
  int high = fcntl(fd, F_DUPFD_CLOEXEC, 10);
  close(fd);
  return high;
}

vm_status_t vma_iso_start(vmagent_t *a) {
  vma_iso_t *iso = calloc(1, sizeof(*iso));
  if (!iso) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  iso->a = a;
  iso->parent_pid = getpid();
  iso->reply_cap = a->cfg.max_message_bytes + VMA_LINK_SLACK;
  pthread_mutex_init(&iso->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&iso->cv, &ca);
  pthread_condattr_destroy(&ca);
  iso->lock_fd = vma_iso_lock_file();
  if (iso->lock_fd < 0)
    VM_LOGW("no device lock file (%s): workers sharing a device do not serialise their runs",
            strerror(errno));
  /* A share for every worker there can be: sessions, spares, and workers
   * killed but not yet reaped. */
  iso->num_slots = a->cfg.max_sessions + 2 * 64 + 16;
  iso->shared_len = VMA_SHARED_BYTES(iso->num_slots);
  iso->slot_used = calloc(iso->num_slots, 1);
  if (iso->lock_fd >= 0 && iso->slot_used && ftruncate(iso->lock_fd, (off_t)iso->shared_len) == 0) {
    void *m = mmap(NULL, iso->shared_len, PROT_READ | PROT_WRITE, MAP_SHARED, iso->lock_fd, 0);
    if (m != MAP_FAILED) iso->shared = m;
  }
  if (!iso->shared)
    VM_LOGW("no shared memory for the workers (%s): --host-mem-limit holds per worker",
            strerror(errno));
  a->iso = iso;
  if (vma_iso_make_argv(iso) != 0)
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory for the workers' flags");
  if (pthread_create(&iso->super, NULL, vma_iso_supervisor, iso) != 0)
    return vm_status_make(VM_INTERNAL, "cannot start the worker supervisor thread");
  iso->super_started = 1;
  VM_LOGI("session isolation: each session's VMs run in a worker process (%s)", a->worker_exe);
  return VM_STATUS_OK;
}

void vma_iso_stop(vmagent_t *a) {
  vma_iso_t *iso = a->iso;
  if (!iso) return;
  pthread_mutex_lock(&iso->mu);
  iso->stopping = 1;
  for (vma_iso_worker_t *w = iso->workers; w; w = w->next)
    vma_iso_kill_locked(w, VM_UNAVAILABLE, 1, "the agent is shutting down");
  pthread_cond_broadcast(&iso->cv);
  pthread_mutex_unlock(&iso->mu);
}

void vma_iso_free(vmagent_t *a) {
  vma_iso_t *iso = a->iso;
  if (!iso) return;
  vma_iso_stop(a);
  if (iso->super_started) pthread_join(iso->super, NULL);
  while (iso->workers) {
    vma_iso_worker_t *w = iso->workers;
    iso->workers = w->next;
    if (w->starter_started) pthread_join(w->starter, NULL);
    w->starter_started = 0;
    if (!w->gone) { /* killed above: its link ends at once; reap it */
      w->reading = 1;
      vma_iso_end(iso, w);
    }
    vma_iso_free_worker(w);
  }
  for (uint32_t i = 0; i < iso->argc; i++) free(iso->argv[i]);
  if (iso->shared) munmap(iso->shared, iso->shared_len);
  free(iso->slot_used);
  if (iso->lock_fd >= 0) close(iso->lock_fd);
  pthread_cond_destroy(&iso->cv);
  pthread_mutex_destroy(&iso->mu);
  free(iso);
  a->iso = NULL;
}

/* ------------------------------------------------------------ sessions */

void vma_iso_session_ended(vmagent_t *a, vma_session_t *s) {
  vma_iso_t *iso = a->iso;
  pthread_mutex_lock(&iso->mu);
  if (s->worker)
    vma_iso_kill_locked(s->worker, VM_ABORTED, 1,
                        "the session ended (Goodbye, closed connection "
                        "or idle timeout)");
  pthread_mutex_unlock(&iso->mu);
}

void vma_iso_session_free(vmagent_t *a, vma_session_t *s) {
  vma_iso_t *iso = a->iso;
  pthread_mutex_lock(&iso->mu);
  if (s->worker) {
    vma_iso_kill_locked(s->worker, VM_ABORTED, 1, "the session ended");
    s->worker->refs--;
    s->worker = NULL;
  }
  pthread_cond_broadcast(&iso->cv);
  pthread_mutex_unlock(&iso->mu);
}

int vma_iso_forwards(const vmagent_t *a, const Vmrpc__Request *rq) {
  if (!a->iso) return 0;
  switch (rq->op_case) {
    case VMRPC__REQUEST__OP_HELLO:
    case VMRPC__REQUEST__OP_PING:
    case VMRPC__REQUEST__OP_LIST_DEVICES:
    case VMRPC__REQUEST__OP_DEVICE_STATE: /* the host's, read by the agent */
    case VMRPC__REQUEST__OP_GOODBYE: return 0;
    default: return 1;
  }
}

/* The status a request gets when its session's worker ended. */
static vm_status_t vma_iso_lost(vm_code_t code, const char *why) {
  return vm_status_make(code,
                        "the session's worker process %s; its VMs and handles are gone "
                        "(executables stay in the store): create them again",
                        why);
}

/* Sends one frame to w and waits for its reply into out. kill_at_ns: 0, or
 * when w is killed unless it has answered. *out_flags: the reply's. */
static vm_status_t vma_iso_call(vma_iso_t *iso, vma_iso_worker_t *w, uint32_t flags,
                                const void *body, size_t len, vma_out_t *out, uint64_t kill_at_ns,
                                uint32_t *out_flags) {
  vma_iso_call_t c;
  memset(&c, 0, sizeof(c));
  c.out = out;
  c.kill_at_ns = kill_at_ns;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&c.cv, &ca);
  pthread_condattr_destroy(&ca);
  pthread_mutex_lock(&iso->mu);
  if (w->gone || w->killed) {
    c.done = c.failed = 1;
    c.code = w->code ? w->code : VM_ABORTED;
    snprintf(c.why, sizeof(c.why), "%s", w->why[0] ? w->why : "ended");
  } else {
    c.tag = ++w->next_tag;
    c.next = w->calls;
    w->calls = &c;
    w->refs++;
  }
  pthread_mutex_unlock(&iso->mu);
  if (!c.done) {
    vma_link_hdr_t h = {(uint32_t)len, flags, c.tag};
    pthread_mutex_lock(&w->wmu);
    int wr = vma_link_write(w->fd, &h, body);
    pthread_mutex_unlock(&w->wmu);
    pthread_mutex_lock(&iso->mu);
    /* The worker closed its end: it is ending; reading tells why. */
    if (wr != 0) shutdown(w->fd, SHUT_RDWR);
    while (!c.done) {
      if (!w->reading && !w->gone) { /* take the reading turn */
        w->reading = 1;
        pthread_mutex_unlock(&iso->mu);
        (void)vma_iso_read_one(iso, w);
        pthread_mutex_lock(&iso->mu);
        continue;
      }
      pthread_cond_wait(&c.cv, &iso->mu);
    }
    for (vma_iso_call_t **pp = &w->calls; *pp; pp = &(*pp)->next) {
      if (*pp == &c) {
        *pp = c.next;
        break;
      }
    }
    /* The turn passes to a request still waiting. */
    for (vma_iso_call_t *x = w->calls; x && !w->reading && !w->gone; x = x->next) {
      if (!x->done) {
        pthread_cond_signal(&x->cv);
        break;
      }
    }
    w->refs--; /* an ended worker is freed by the supervisor's next round */
    pthread_mutex_unlock(&iso->mu);
  }
  pthread_cond_destroy(&c.cv);
  *out_flags = c.flags;
  if (c.failed) return vma_iso_lost(c.code, c.why);
  return VM_STATUS_OK;
}

/* Gives s a ready worker (iso->mu held; may wait). */
static vm_status_t vma_iso_bind_locked(vma_iso_t *iso, vma_session_t *s, vma_iso_worker_t **out_w) {
  uint64_t until = vm_now_ns() + vma_ms_ns(VMA_ISO_WAIT_MS);
  for (;;) {
    if (s->worker && !s->worker->gone && !s->worker->killed) {
      *out_w = s->worker;
      return VM_STATUS_OK;
    }
    if (s->worker) { /* ended: the next one takes over */
      vma_iso_worker_t *old = s->worker;
      s->worker = NULL;
      old->refs--;
      if (!old->told) {
        /* It ended while idle (killed by the OOM killer, say): this request
         * tells the session, the next one gets a fresh worker. */
        old->told = 1;
        return vma_iso_lost(old->code ? old->code : VM_ABORTED, old->why[0] ? old->why : "ended");
      }
    }
    if (iso->stopping) return vm_status_make(VM_UNAVAILABLE, "the agent is shutting down");
    vma_iso_worker_t *spare = NULL;
    for (vma_iso_worker_t *w = iso->workers; w && !spare; w = w->next)
      if (!w->session_id && w->ready && !w->gone && !w->killed) spare = w;
    if (spare) {
      spare->session_id = s->id;
      spare->refs++;
      s->worker = spare;
      s->worker_gen++;
      pthread_cond_broadcast(&iso->cv); /* the supervisor starts a new spare */
      *out_w = spare;
      return VM_STATUS_OK;
    }
    uint64_t now = vm_now_ns();
    if (now >= until || (iso->backoff_until_ns > now && iso->fails >= VMA_ISO_MAX_FAILS))
      return vm_status_make(
          VM_UNAVAILABLE, "no worker process for this session: %s%s; see the agent's log",
          iso->last_fail[0] ? "the last one " : "none became ready in time", iso->last_fail);
    iso->want_spare = 1;
    pthread_cond_broadcast(&iso->cv);
    struct timespec ts;
    vma_time_in(CLOCK_MONOTONIC, 100, &ts);
    pthread_cond_timedwait(&iso->cv, &iso->mu, &ts);
    iso->want_spare = 0;
  }
}

/* s's worker, attached to the session (started on its first request, and
 * again after one ended). */
static vm_status_t vma_iso_worker_of(vmagent_t *a, vma_session_t *s, vma_iso_worker_t **out_w) {
  vma_iso_t *iso = a->iso;
  pthread_mutex_lock(&iso->mu);
  uint32_t gen_before = s->worker_gen;
  vma_iso_worker_t *w = NULL;
  vm_status_t st = vma_iso_bind_locked(iso, s, &w);
  int fresh = !st && s->worker_gen != gen_before;
  if (!st) w->refs++; /* held across the attach below */
  pthread_mutex_unlock(&iso->mu);
  if (st) return st;
  if (fresh) {
    /* Handles of each worker of a session start past the earlier ones': an
     * id of a VM that died with its worker never names a new one. */
    struct {
      vma_link_attach_t at;
      char client[sizeof(s->client)];
    } msg;
    memset(&msg, 0, sizeof(msg));
    msg.at.session_id = s->id;
    msg.at.first_handle = ((uint64_t)(s->worker_gen - 1) << 32) + 1;
    snprintf(msg.client, sizeof(msg.client), "%s", s->client);
    vma_out_t out = {.alloc = vma_heap_alloc};
    uint32_t flags = 0;
    st = vma_iso_call(iso, w, VMA_LINK_ATTACH, &msg, sizeof(msg.at) + strlen(msg.client), &out,
                      vm_now_ns() + vma_ms_ns(VMA_ISO_START_MS), &flags);
    if (!st && out.len)
      st = vm_status_make(VM_UNAVAILABLE, "the session's worker process refused it: %.*s",
                          (int)out.len, (const char *)out.buf);
    free(out.buf);
    if (st) {
      pthread_mutex_lock(&iso->mu);
      vma_iso_kill_locked(w, VM_UNAVAILABLE, 0, "its attach failed");
      w->refs--;
      pthread_mutex_unlock(&iso->mu);
      return st;
    }
    VM_LOGI("session %016llx: worker process %d", (unsigned long long)s->id, (int)w->pid);
  }
  *out_w = w;
  return VM_STATUS_OK;
}

/* When the worker is killed unless it has answered rq. Invocations and
 * measurements with a deadline: deadline + kernel bound + grace; Cancel,
 * Stats and FreeExecutable, which run no VM code (and which the transport
 * serves on a connection's reader, VMP_OP_CHEAP): kernel bound + grace;
 * the rest run as long as they need (Cancel, Goodbye or a closed
 * connection end them). */
static uint64_t vma_iso_bound(const vmagent_t *a, const Vmrpc__Request *rq) {
  uint32_t deadline_ms = 0;
  switch (rq->op_case) {
    case VMRPC__REQUEST__OP_INVOKE: deadline_ms = rq->invoke->deadline_ms; break;
    case VMRPC__REQUEST__OP_RUN: deadline_ms = rq->run->deadline_ms; break;
    case VMRPC__REQUEST__OP_CANCEL:
    case VMRPC__REQUEST__OP_STATS:
    case VMRPC__REQUEST__OP_FREE_EXECUTABLE: deadline_ms = 1; break;
    default: return 0;
  }
  if (!deadline_ms) return 0;
  return vm_now_ns() +
         vma_ms_ns((uint64_t)deadline_ms + a->cfg.kernel_timeout_ms + VMA_ISO_GRACE_MS);
}

/* RSS of the live workers. */
static uint64_t vma_iso_rss(vma_iso_t *iso) {
  uint64_t sum = 0;
  pthread_mutex_lock(&iso->mu);
  for (vma_iso_worker_t *w = iso->workers; w; w = w->next) {
    if (w->gone || w->pid <= 0) continue;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/statm", (int)w->pid);
    FILE *f = fopen(path, "r");
    unsigned long long size = 0, rss = 0;
    if (f && fscanf(f, "%llu %llu", &size, &rss) == 2) sum += rss * (uint64_t)sysconf(_SC_PAGESIZE);
    if (f) fclose(f);
  }
  pthread_mutex_unlock(&iso->mu);
  return sum;
}

/* A worker's Stats reply speaks for its process: the agent's totals
 * replace its own (sessions, requests, memory of all sessions and RSS of
 * all processes). */
static vm_status_t vma_iso_fix_stats(vmagent_t *a, vma_session_t *s, vma_out_t *out) {
  const uint8_t *env, *payload;
  size_t env_len, payload_len;
  VM_RETURN_IF_ERROR(
      vmp_frame_split(out->buf, out->len, 0, &env, &env_len, &payload, &payload_len));
  Vmrpc__Response *r = NULL;
  VM_RETURN_IF_ERROR(vmp_response_unpack(env, env_len, &r));
  vm_status_t st = VM_STATUS_OK;
  if (r->op_case == VMRPC__RESPONSE__OP_STATS && r->stats) {
    Vmrpc__StatsResponse *x = r->stats;
    pthread_mutex_lock(&a->iso->mu);
    s->worker_bytes = x->session_bytes;
    pthread_mutex_unlock(&a->iso->mu);
    uint64_t others = 0;
    pthread_mutex_lock(&a->lock);
    x->agent_sessions = a->num_sessions;
    pthread_mutex_lock(&a->iso->mu);
    for (uint32_t i = 0; i < a->num_sessions; i++)
      if (a->sessions[i] != s) others += a->sessions[i]->worker_bytes;
    pthread_mutex_unlock(&a->iso->mu);
    pthread_mutex_unlock(&a->lock);
    x->agent_bytes = others + x->session_bytes;
    x->requests = atomic_load(&a->requests);
    x->agent_rss_bytes = vma_rss_bytes() + vma_iso_rss(a->iso);
    size_t n = vmp_frame_size(&r->base);
    uint8_t *tmp = malloc(n);
    if (!tmp) {
      st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
    } else {
      vmp_frame_write(&r->base, tmp);
      uint8_t *dst = out->alloc(out, n);
      if (dst)
        memcpy(dst, tmp, n);
      else
        st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
      free(tmp);
    }
  }
  vmrpc__response__free_unpacked(r, NULL);
  return st;
}

vm_status_t vma_iso_forward(vmagent_t *a, vma_session_t *s, const Vmrpc__Request *rq,
                            const uint8_t *body, size_t len, vma_out_t *out) {
  vma_iso_t *iso = a->iso;
  vma_iso_worker_t *w = NULL;
  VM_RETURN_IF_ERROR(vma_iso_worker_of(a, s, &w));
  /* Waiting for the reply holds a transport thread: as for a busy device,
   * the transport makes sure another is free for Cancel and Ping. */
  if (a->on_block) a->on_block(a);
  uint32_t flags = 0;
  vm_status_t st = vma_iso_call(iso, w, 0, body, len, out, vma_iso_bound(a, rq), &flags);
  pthread_mutex_lock(&iso->mu);
  w->refs--;
  pthread_mutex_unlock(&iso->mu);
  if (!st && rq->op_case == VMRPC__REQUEST__OP_STATS) st = vma_iso_fix_stats(a, s, out);
  return st;
}
