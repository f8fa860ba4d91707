/* The transport's part of the agent (server.c): the listener, the pool of
 * serving threads, the job queue and the open connections. Types only:
 * struct vmagent holds one as a->srv.
 *
 * The pool's threads serve queued requests; they are "pool threads" here
 * (cfg.workers, --workers, says how many), not the worker processes of
 * session isolation (isolation/). */
#ifndef VMA_SERVER_STATE_H
#define VMA_SERVER_STATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

/* Beyond --workers, this many extra pool threads may be started while
 * requests wait for busy devices (see vma_on_block in server.c). */
#define VMA_MAX_EXTRA_THREADS 64

typedef struct vma_pool_thread {
  struct vmagent *agent;
  pthread_t thread;
  int started;       /* thread created and not yet joined (pool_lock) */
  int extra;         /* retires when other threads are idle */
  atomic_int exited; /* the thread left its loop */
} vma_pool_thread_t;

struct vma_conn; /* one accepted connection (server.c) */
struct vma_job;  /* a request waiting for a pool thread (server.c) */
struct vmt_listener;
struct vmt_tls;
struct vmt_flusher;

typedef struct vma_server {
  struct vmt_listener *listener;
  int ipc_listener; /* ipc:// framing (a type byte before each length) */
  pthread_t acceptor;
  int acceptor_started;
  struct vmt_tls *tls;         /* tls+tcp:// (vmtransport/conn.h) */
  struct vmt_flusher *flusher; /* writes what replies left in send queues (vmtransport/sendq.h) */
  vma_pool_thread_t *threads;  /* pool_size slots */
  uint32_t pool_size;
  /* Thread slots, the job queue, the connection list and the counts
   * below. */
  pthread_mutex_t pool_lock;
  int pool_lock_ready;
  pthread_cond_t jobs_cv;    /* a job was queued, or stopping */
  pthread_cond_t readers_cv; /* a connection's reader ended */
  pthread_cond_t space_cv;   /* a connection's queue has room again */
  struct vma_job *jobs_head, *jobs_tail;
  struct vma_conn *conns; /* open connections (their readers run) */
  struct vma_conn *ended; /* readers that ended, to be joined */
  /* Connections that have not said Hello yet, oldest first (server.c):
   * closed at their Hello deadline, or when a newer one needs the room. */
  struct vma_conn *unauth_head, *unauth_tail;
  uint32_t num_unauth;
  uint32_t num_conns;
  /* Dropped connections logged in this second, and those left out. */
  uint64_t drop_log_sec;
  uint32_t drop_logged, drop_unlogged;
  /* Connections ended since the reaper last gave free heap back, and
   * when it may next (the reaper's). */
  atomic_int conns_gone;
  uint64_t next_trim_ns;
  uint32_t next_conn_id;
  uint32_t idle_threads; /* waiting for a job (or about to) */
  int pool_full_logged;
  int conns_full_logged;
} vma_server_t;

#endif /* VMA_SERVER_STATE_H */
