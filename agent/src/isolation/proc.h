/* Session isolation's worker processes, as the agent sees them
 * (isolation/proc.c): the table of them, their calls in flight, and their
 * end. isolation/supervisor.h has the design.
 *
 * Lock order: agent->lock, then iso->mu, then a worker process's link
 * multiplexer (its wmu, then its mu: vmtransport/mux.h). iso->mu covers the
 * worker processes, their lists of calls and the sessions' worker fields;
 * it is held for a look at the multiplexer (vmt_mux_is_done) but never
 * across I/O: a request thread writes its request and takes the reading
 * turn with no lock of the agent's held.
 */
#ifndef VMA_ISOLATION_PROC_H
#define VMA_ISOLATION_PROC_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "isolation/shared.h"
#include "out.h"
#include "vmtransport/mux.h"
#include "vmrpc/status.h"
#include "vmagent/agent.h"

/* A worker that does not say it is ready within this long is killed. */
#define VMA_ISO_START_MS 60000
/* A request waits this long for a worker to be ready for its session. */
#define VMA_ISO_WAIT_MS 60000
/* Beyond a request's own bound (its deadline plus the kernel bound), the
 * worker gets this long to answer before it is killed. */
#define VMA_ISO_GRACE_MS 2000
/* A worker seen stopped (SIGSTOP, SIGTSTP: /proc state 'T') this long is
 * killed: stopped, it still holds the device locks (run lock, quiet gate)
 * it took, and every other session's work on those devices would wait for
 * it for ever. */
#define VMA_ISO_STOPPED_MS 1000
/* Workers that died before they were ready, in a row, before the
 * supervisor waits VMA_ISO_BACKOFF_MS between starts. */
#define VMA_ISO_MAX_FAILS 3
#define VMA_ISO_BACKOFF_MS 5000
#define VMA_ISO_MAX_ARGS 96
#define VMA_ISO_WHY 320

/* A request in flight to a worker process: its call on the link, and what
 * the supervisor needs to bound it. */
typedef struct vma_iso_call {
  vmt_call_t k;        /* on w->mux: the reply goes into the request's vma_out_t */
  uint64_t kill_at_ns; /* 0: no bound */
  vm_code_t code;      /* set when it is the reason w was killed (else w's) */
  char why[VMA_ISO_WHY];
  struct vma_iso_call *next;
} vma_iso_call_t;

typedef struct vma_iso_worker {
  struct vma_iso *iso;
  pid_t pid;
  vmt_conn_t *conn; /* the link (isolation/link.h) */
  vmt_mux_t mux;
  pthread_t starter;
  int starter_started;
  int ending;  /* a thread runs vma_iso_end */
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
  uint64_t next_id;      /* of its link's requests */
  vma_iso_call_t *calls; /* in flight (the supervisor's bounds) */
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

uint64_t vma_ms_ns(uint64_t ms);
/* Kills w (iso->mu held; never blocks): SIGKILL, and the link closed so
 * that its reader and any writer return at once. The first reason stays. */
void vma_iso_kill_locked(vma_iso_worker_t *w, vm_code_t code, int quiet, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The link is lost (iso->mu not held): why, reaping the process, the link
 * closed for every later call. Once per worker process: a second caller
 * waits until the first is done. */
void vma_iso_end(vma_iso_t *iso, vma_iso_worker_t *w);
/* Frees an ended worker process's record (its starter joined). */
void vma_iso_free_worker(vma_iso_worker_t *w);
/* The status a request gets when its session's worker process ended. */
vm_status_t vma_iso_lost(vm_code_t code, const char *why);

#endif /* VMA_ISOLATION_PROC_H */
