/* Sessions (session.c): the table of sessions under the agent lock
 * (struct vmagent's session part, agent_core.h), what each holds (handles
 * of executables, uploads, VMs, transfers) and its memory accounting.
 *
 * A session belongs to the connection (conn_id) whose Hello opened it: a
 * request naming it from another connection finds nothing. */
#ifndef VMA_SESSION_H
#define VMA_SESSION_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "agent_limits.h"
#include "chunks.h"
#include "store.h"
#include "vm/vm.h"
#include "vmagent/agent.h"

typedef struct vma_upload {
  uint64_t id;
  uint8_t hash[VM_SHA256_BYTES];
  uint8_t *data; /* size bytes of host staging */
  vma_chunks_t ck;
  struct vma_upload *next;
} vma_upload_t;

typedef struct vma_vm vma_vm_t;

typedef struct vma_transfer {
  uint64_t id;
  vma_vm_t *vm;      /* destination VM (device 0) */
  vm_value_t tensor; /* owned; allocated through the VM's device-0 allocator */
  vma_chunks_t ck;
  struct vma_transfer *next;
} vma_transfer_t;

typedef struct vma_execref {
  uint64_t id;
  vma_exec_entry_t *entry; /* one store reference */
  struct vma_execref *next;
} vma_execref_t;

struct vma_vm {
  uint64_t id;
  vm_machine_t *m;
  vma_exec_entry_t *entry;              /* keeps the executable alive */
  uint32_t num_devs;                    /* agent devices the VM runs on */
  uint32_t dev_idx[VMA_MAX_VM_DEVICES]; /* sorted: run locks taken in this order */
  /* Busy state, under the session lock: one exclusive operation, or any
   * number of readers (GetOutput copies). */
  int exclusive;
  uint32_t readers;
  int running;               /* exclusive op runs VM code (cancellable) */
  atomic_int cancel_pending; /* Cancel arrived for the running op */
  /* Allocator figures taken when the VM was last idle, for Stats and limits
   * while it is busy. */
  uint32_t num_allocs;
  vm_alloc_stats_t snap[VMA_MAX_VM_DEVICES + 1];
  struct vma_vm *next;
};

typedef struct vma_session {
  uint64_t id;
  uint32_t conn_id; /* the connection whose Hello opened it */
  char client[64];
  /* under agent->lock */
  uint32_t refs; /* requests in flight */
  int dead;      /* out of the table: destroy when refs drops to 0 */
  uint64_t last_used_ns;
  uint64_t bytes; /* last computed session_bytes, for agent totals */
  struct vma_session *next_dead;
  /* Ended while requests still held it (on agent->ending): the reaper
   * keeps cancelling its invocations, since one may start after the end. */
  struct vma_session *next_ending;
  /* under session->lock */
  pthread_mutex_t lock;
  /* Set when the session ends (Goodbye, closed connection): a request that
   * took its reference before the end may no longer start running VM code,
   * as no Cancel, close or shutdown would ever reach that run again. */
  int ended;
  uint64_t next_handle; /* one counter for every handle kind, from 1 */
  vma_execref_t *execs;
  vma_upload_t *uploads;
  vma_transfer_t *transfers;
  vma_vm_t *vms;
  uint32_t num_execs, num_uploads, num_transfers, num_vms;
  uint64_t staging_bytes;
  /* host memory of the session's VMs (a child of the agent's budget) */
  vm_budget_t host;
  /* Isolation (isolation/, under iso->mu): the session's worker process,
   * how many it had (handle ranges), and its bytes as last reported. */
  struct vma_iso_worker *worker;
  uint32_t worker_gen;
  uint64_t worker_bytes;
} vma_session_t;

/* Random nonzero 64-bit value from the OS. */
uint64_t vma_random_u64(void);

/* The table. */
vm_status_t vma_session_create(vmagent_t *a, uint32_t conn_id, const char *client,
                               vma_session_t **out_s);
/* In a worker process: the session the agent names (id), handles from
 * first_handle. */
vm_status_t vma_session_create_as(vmagent_t *a, uint32_t conn_id, const char *client, uint64_t id,
                                  uint64_t first_handle, vma_session_t **out_s);
/* Finds id for conn_id and takes a reference (refs++); NOT_FOUND for an
 * unknown id or one of another connection (indistinguishable). */
vm_status_t vma_session_acquire(vmagent_t *a, uint64_t id, uint32_t conn_id, vma_session_t **out_s);
/* Drops the reference; destroys the session if it ended meanwhile. */
void vma_session_release(vmagent_t *a, vma_session_t *s);
/* Ends a session (Goodbye): out of the table now, destroyed when the last
 * in-flight request finishes. Running invocations are cancelled. */
void vma_session_end(vmagent_t *a, vma_session_t *s);
/* Connection closed: ends all its sessions. */
void vma_sessions_close_conn(vmagent_t *a, uint32_t conn_id);
/* Ends sessions idle past the timeout; destroys dead ones with no refs;
 * on shutdown cancels what runs. Called by the reaper. */
void vma_sessions_reap(vmagent_t *a);
/* Ends every session and destroys them (no request may be in flight). */
void vma_sessions_destroy_all(vmagent_t *a);
/* Frees everything a session holds. */
void vma_session_destroy(vmagent_t *a, vma_session_t *s);
/* Cancels every running op of a session (session lock taken inside). */
void vma_session_cancel_running(vma_session_t *s);
/* Whether connection conn_id has a live session (it said Hello). */
int vma_conn_has_session(vmagent_t *a, uint32_t conn_id);

/* Memory. */
/* Bytes the session holds (session lock held): VM allocators + staging. */
uint64_t vma_session_bytes_locked(vma_session_t *s, const vma_vm_t *except);
/* RESOURCE_EXHAUSTED "<what> of N bytes would exceed the session memory
 * limit ..." when extra bytes more do not fit --session-mem-limit; the
 * _locked form with s->lock held. */
vm_status_t vma_check_session_mem_locked(vmagent_t *a, vma_session_t *s, uint64_t extra,
                                         const char *what);
vm_status_t vma_check_session_mem(vmagent_t *a, vma_session_t *s, uint64_t extra, const char *what);
/* Caps each allocator of v (held exclusively) so that the session as a
 * whole stays under --session-mem-limit (takes the session lock). */
void vma_vm_apply_limit(vmagent_t *a, vma_session_t *s, vma_vm_t *v);
/* Refreshes a VM's allocator snapshot (session lock held, VM idle). */
void vma_vm_snapshot(vma_vm_t *v);
/* Frees a VM and its transfers (session lock held or session private; VM
 * idle). */
void vma_vm_destroy(vmagent_t *a, vma_session_t *s, vma_vm_t *v);

/* Uploads and transfers. */
/* vma_chunk_done() taking the session lock. */
void vma_chunk_finish(vma_session_t *s, vma_chunks_t *ck, uint64_t idx, size_t len, int ok);
/* Gives back what an upload of size bytes reserved in session s: its staging
 * bytes, the agent's host budget and, when slot, its upload slot. Takes the
 * session lock. */
void vma_upload_unreserve(vmagent_t *a, vma_session_t *s, uint64_t size, int slot);
/* Frees an upload out of its session's table (u may be NULL). */
void vma_upload_free(vma_upload_t *u);
/* Frees a transfer out of its session's table: its tensor and tracking (t
 * may be NULL). */
void vma_transfer_free(vma_transfer_t *t);

#endif /* VMA_SESSION_H */
