/* Session isolation, the agent's side (isolation/supervisor.h has the
 * design): starting worker processes, keeping spares, watching them, and
 * giving each session one.
 *
 * Threads: the supervisor (starts every worker process, so that
 * PR_SET_PDEATHSIG, which follows the thread that forked, holds for the
 * agent's lifetime; keeps the spares; kills worker processes whose
 * requests passed their bound; frees the ended ones; notices the end of a
 * worker process nobody waits on), and a starter per new worker process
 * (until it answers HELLO: link.c). Locks: isolation/proc.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent_core.h"
#include "isolation/link.h"
#include "isolation/proc.h"
#include "isolation/supervisor.h"
#include "procfs.h"
#include "session.h"
#include "time_in.h"
#include "vmrpc/log.h"

/* Starts a worker (supervisor thread, iso->mu not held). */
static void vma_iso_spawn(vma_iso_t *iso) {
  vma_iso_worker_t *w = calloc(1, sizeof(*w));
  int sv[2] = {-1, -1};
  if (!w || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    VM_LOGE("cannot start a worker: %s", w ? strerror(errno) : "out of memory");
    free(w);
    return;
  }
  w->iso = iso;
  /* The agent's end: bodies up to the largest reply (reply_cap). */
  int lrv = vma_link_open(sv[0], iso->reply_cap + VMA_LINK_FLAGS_LEN, 1, &w->conn, &w->mux);
  if (lrv) {
    VM_LOGE("cannot start a worker: its link: nng error %d", lrv);
    close(sv[1]);
    free(w);
    return;
  }
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
    vmt_mux_destroy(&w->mux);
    vmt_conn_free(w->conn);
    free(w);
    return;
  }
  w->pid = pid;
  pthread_mutex_lock(&iso->mu);
  w->next = iso->workers;
  iso->workers = w;
  if (pthread_create(&w->starter, NULL, vma_iso_starter, w) == 0) {
    w->starter_started = 1;
    /* vma_iso_stop ran while this one was being started */
    if (iso->stopping) vma_iso_kill_locked(w, VM_UNAVAILABLE, 1, "the agent is shutting down");
  } else {
    vma_iso_kill_locked(w, VM_UNAVAILABLE, 0, "no thread to start it");
    w->gone = w->ending = 1;
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

/* Spares that are, or will be, ready. iso->mu held. */
static uint32_t vma_iso_spares_locked(vma_iso_t *iso) {
  uint32_t n = 0;
  for (vma_iso_worker_t *w = iso->workers; w; w = w->next)
    if (!w->session_id && !w->gone && !w->killed) n++;
  return n;
}

/* Whether w's link has something to read (or has closed). */
static int vma_iso_readable(const vma_iso_worker_t *w) {
  struct pollfd p = {.fd = w->conn->fd, .events = POLLIN};
  return poll(&p, 1, 0) > 0;
}

/* Kills w once it has been stopped for VMA_ISO_STOPPED_MS (iso->mu held):
 * the kernel then drops its device locks, and its session's requests get
 * ABORTED as for a crash. */
static void vma_iso_check_stopped_locked(vma_iso_worker_t *w, uint64_t now) {
  if (w->gone || w->killed || w->pid <= 0) return;
  if (!vma_proc_is_stopped(w->pid)) {
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
      if (w->gone && w->refs == 0) { /* ended, unused: free */
        *pp = w->next;
        pthread_mutex_unlock(&iso->mu);
        vma_iso_free_worker(w);
        pthread_mutex_lock(&iso->mu);
        pp = &iso->workers; /* the list may have changed */
        continue;
      }
      if (!w->gone && !w->ending && !w->calls && vma_iso_readable(w)) {
        /* Nobody waits on it, yet it speaks: it ended (or misbehaves). */
        w->refs++;
        pthread_mutex_unlock(&iso->mu);
        vma_iso_poll(iso, w);
        pthread_mutex_lock(&iso->mu);
        w->refs--;
        pthread_mutex_unlock(&iso->mu);
        pthread_mutex_lock(&iso->mu);
        pp = &iso->workers;
        continue;
      }
      vma_iso_check_stopped_locked(w, now);
      if (!w->ready && !w->killed && now - w->started_ns > vma_ms_ns(VMA_ISO_START_MS))
        vma_iso_kill_locked(w, VM_UNAVAILABLE, 0, "it did not start within %d s",
                            VMA_ISO_START_MS / 1000);
      for (vma_iso_call_t *c = w->calls; c && !w->killed; c = c->next) {
        if (!c->kill_at_ns || now < c->kill_at_ns || vmt_mux_is_done(&w->mux, &c->k)) continue;
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

/* Adds s (owned, NULL: out of memory) to the command line. */
static int vma_iso_push(vma_iso_t *iso, char *s) {
  if (!s || iso->argc + 1 >= VMA_ISO_MAX_ARGS) {
    free(s);
    return -1;
  }
  iso->argv[iso->argc++] = s;
  return 0;
}

/* Adds flag and its value, formatted. */
static int vma_iso_flag(vma_iso_t *iso, const char *flag, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int vma_iso_flag(vma_iso_t *iso, const char *flag, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *v = NULL;
  if (vasprintf(&v, fmt, ap) < 0) v = NULL;
  va_end(ap);
  int e = vma_iso_push(iso, strdup(flag));
  return e | vma_iso_push(iso, v);
}

/* The worker's command line: this agent's configuration, as flags. */
static int vma_iso_make_argv(vma_iso_t *iso) {
  const vmagent_t *a = iso->a;
  const vmagent_config_t *c = &a->cfg;
  int e = vma_iso_push(iso, strdup(a->worker_exe));
  e |= vma_iso_flag(iso, "--worker-fd", "3");
  if (iso->lock_fd >= 0) e |= vma_iso_flag(iso, "--worker-locks", "4");
  e |= vma_iso_flag(iso, "--log-level", "%s", vm_log_level_name(vm_log_get_level()));
  for (uint32_t i = 0; i < a->num_devices; i++)
    e |= vma_iso_flag(iso, "--device", "%s", a->devices[i].selector);
  e |= vma_iso_flag(iso, "--cache-dir", "%s", a->cache_dir ? a->cache_dir : "");
  const struct {
    const char *flag;
    uint64_t value;
  } sizes[] = {
      {"--cache-max-bytes", c->cache_max_bytes},     {"--max-executable", c->max_executable_bytes},
      {"--session-mem-limit", c->session_mem_limit}, {"--host-mem-limit", c->host_mem_limit},
      {"--device-mem-limit", c->cpu_mem_limit},      {"--chunk-size", c->chunk_bytes},
      {"--max-message", c->max_message_bytes},
  };
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
    e |= vma_iso_flag(iso, sizes[i].flag, "%llu", (unsigned long long)sizes[i].value);
  e |= vma_iso_flag(iso, "--workers", "%u", c->workers);
  e |= vma_iso_flag(iso, "--kernels", "cpu=%s,gpu=%s", c->kernels_cpu ? "allow" : "deny",
                    c->kernels_gpu ? "allow" : "deny");
  e |= vma_iso_flag(iso, "--kernel-timeout", "%u.%03u", c->kernel_timeout_ms / 1000,
                    c->kernel_timeout_ms % 1000);
  e |= vma_iso_flag(iso, "--idle-timeout", "0");
  /* the worker measures: it pins itself */
  if (a->pin.on) e |= vma_iso_flag(iso, "--cpus", "%s", a->pin.list);
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

/* ------------------------------------------------------------ sessions */

/* The session hooks (agent_core.h). */
static void vma_iso_session_ended(vmagent_t *a, vma_session_t *s) {
  vma_iso_t *iso = a->iso;
  pthread_mutex_lock(&iso->mu);
  if (s->worker)
    vma_iso_kill_locked(s->worker, VM_ABORTED, 1,
                        "the session ended (Goodbye, closed connection "
                        "or idle timeout)");
  pthread_mutex_unlock(&iso->mu);
}

static void vma_iso_session_free(vmagent_t *a, vma_session_t *s) {
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
vm_status_t vma_iso_worker_of(vmagent_t *a, vma_session_t *s, vma_iso_worker_t **out_w) {
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
  a->session_hooks.ended = vma_iso_session_ended;
  a->session_hooks.freed = vma_iso_session_free;
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
    if (!w->gone) vma_iso_end(iso, w); /* killed above: its link ends at once; reap it */
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
  a->session_hooks.ended = NULL;
  a->session_hooks.freed = NULL;
}
