/* Session isolation's worker processes: their end (isolation/proc.h). */
#include "isolation/proc.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <nng/nng.h>

#include "vmrpc/log.h"

uint64_t vma_ms_ns(uint64_t ms) {
  return ms * 1000000ull;
}

void vma_iso_kill_locked(vma_iso_worker_t *w, vm_code_t code, int quiet, const char *fmt, ...) {
  if (w->killed || w->gone) return;
  w->killed = 1;
  w->code = code;
  va_list ap;
  va_start(ap, fmt);
  int n = snprintf(w->why, sizeof(w->why), "was stopped: ");
  vsnprintf(w->why + n, sizeof(w->why) - (size_t)n, fmt, ap);
  va_end(ap);
  if (w->pid > 0) kill(w->pid, SIGKILL);
  vmt_conn_close(w->conn);
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

/* The link is lost: why, reaping the process, the link closed for every
 * later call; once (iso->mu not held). */
void vma_iso_end(vma_iso_t *iso, vma_iso_worker_t *w) {
  pthread_mutex_lock(&iso->mu);
  if (w->ending) { /* another thread ends it: its why comes from there */
    while (!w->gone) pthread_cond_wait(&iso->cv, &iso->mu);
    pthread_mutex_unlock(&iso->mu);
    return;
  }
  w->ending = 1;
  int was_killed = w->killed;
  pthread_mutex_unlock(&iso->mu);
  vmt_mux_lose(&w->mux, NNG_ECONNSHUT); /* calls still in flight fail; none starts */
  vmt_conn_close(w->conn);
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
  pthread_cond_broadcast(&iso->cv);
  pthread_mutex_unlock(&iso->mu);
}

void vma_iso_free_worker(vma_iso_worker_t *w) {
  if (w->starter_started) pthread_join(w->starter, NULL);
  vmt_mux_destroy(&w->mux);
  vmt_conn_free(w->conn);
  free(w);
}

/* The status a request gets when its session's worker ended. */
vm_status_t vma_iso_lost(vm_code_t code, const char *why) {
  return vm_status_make(code,
                        "the session's worker process %s; its VMs and handles are gone "
                        "(executables stay in the store): create them again",
                        why);
}
