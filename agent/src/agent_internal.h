/* Internals of vmagent. Prefix vma_ (the public API is vmagent_).
 *
 * Threads (server.c): an acceptor; one reader per connection, which reads
 * its requests, serves the cheap ones itself and queues the others; N
 * workers (more while requests wait for devices) serving queued requests;
 * one reaper (idle sessions, sessions of closed connections, shutdown
 * cancels); the flusher (replies the sockets did not take at once,
 * vmtransport/sendq.h); the caller of
 * vmagent_start/stop.
 *
 * Locks, always taken in this order, never the other way round:
 *   agent->lock     the session table, session refs/dead flags, counters
 *   session->lock   a session's handle tables and VM busy state
 *   store->lock     the executable store (memory map + disk)
 * Device run locks (one per agent device, taken in device index order) are
 * never acquired while holding any of the above: they are held for whole
 * invocations and may be waited for.
 */
#ifndef VMAGENT_AGENT_INTERNAL_H
#define VMAGENT_AGENT_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include <nng/nng.h>

#include "pin.h"
#include "vm/executable.h"
#include "vm/vm.h"
#include "vmagent/agent.h"
#include "vmproto/wire.h"

#ifndef VMRPC_VERSION
#define VMRPC_VERSION "0.0.0"
#endif

#define VMA_MAX_DEVICES 32
#define VMA_MAX_VM_DEVICES 8
/* Per-session handle caps: a session cannot grow its tables without bound. */
#define VMA_MAX_EXECS 256
#define VMA_MAX_VMS 64
#define VMA_MAX_TRANSFERS 256
#define VMA_MAX_UPLOADS 4
#define VMA_MAX_PATH 64   /* GetOutput path components */
#define VMA_MAX_NAME 1024 /* function / parameter names from the wire */
#define VMA_MAX_SAVE_ARGS 256
#define VMA_CLOSED_PIPES 1024 /* ring of recently closed pipe ids */
/* Largest message taken from a connection with no live session: Hello and
 * Ping fit in it (a token is at most VMA_MAX_TOKEN bytes). Anything larger
 * is refused before it is decoded. */
#define VMA_PRE_HELLO_MAX_BYTES 8192
#define VMA_MAX_TOKEN 4096

/* ---------------------------------------------------------------- store */

typedef struct vma_store vma_store_t;

/* A loaded, verified executable shared by sessions and VMs. */
typedef struct vma_exec_entry {
  uint8_t hash[VM_SHA256_BYTES];
  uint64_t size; /* file bytes */
  vm_executable_t *exec;
  uint32_t refs; /* under the store lock */
  struct vma_exec_entry *next;
} vma_exec_entry_t;

/* Opens the store under dir/executables (dir NULL: memory only). Scans the
 * directory to build the LRU list. */
vm_status_t vma_store_open(const char *dir, uint64_t max_bytes, uint64_t max_exec_bytes,
                           vma_store_t **out_store);
void vma_store_close(vma_store_t *s);
/* A hit in memory, or on disk (hash verified, loaded): *out_entry retained.
 * A miss: *out_entry NULL and OK. */
vm_status_t vma_store_lookup(vma_store_t *s, const uint8_t hash[VM_SHA256_BYTES], uint64_t size,
                             vma_exec_entry_t **out_entry);
/* Loads data (whose SHA-256 the caller verified to be hash) through the
 * verifier and keeps it: memory map and, capped, on disk. Loader errors
 * pass through. *out_entry retained. */
vm_status_t vma_store_insert(vma_store_t *s, const uint8_t hash[VM_SHA256_BYTES],
                             const uint8_t *data, size_t size, vma_exec_entry_t **out_entry);
void vma_store_retain(vma_store_t *s, vma_exec_entry_t *e);
void vma_store_release(vma_store_t *s, vma_exec_entry_t *e);
/* Disk bytes and entries, plus loaded entries (tests check executables
 * leave memory with their last user). */
void vma_store_stats(vma_store_t *s, uint64_t *out_disk_bytes, uint32_t *out_disk_entries,
                     uint32_t *out_loaded);

/* ---------------------------------------------------------------- devices */

typedef struct vma_device {
  vm_device_t *dev;
  char selector[32];        /* "cpu", "opencl:0", ... */
  pthread_mutex_t run_lock; /* serialises invocations on this device */
  /* The quiet gate (device_gate.c): copies outside invocations pass it,
   * TimeEvaluate / Profile close it. */
  pthread_mutex_t gate_mu;
  pthread_cond_t gate_cv;
  uint32_t copies; /* transfers inside */
  int measuring;   /* closed: a measurement runs here */
  /* In a worker (gate_mu): this process holds the device's cross-process
   * gate shared, for its copies (isolate.h, vma_xgate_*). */
  int xgate_shared;
  struct vmagent *owner;
} vma_device_t;

/* ---------------------------------------------------------------- sessions */

/* A chunked receive: which chunks arrived. Shared by uploads and tensor
 * transfers. */
typedef struct vma_chunks {
  uint64_t size;     /* announced bytes */
  uint64_t received; /* bytes of chunks fully copied */
  uint64_t nchunks;
  uint8_t *claimed; /* bitmap: chunk taken by a request (maybe still copying) */
  uint32_t writers; /* chunk copies in progress (outside the session lock) */
} vma_chunks_t;

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
  uint32_t pipe_id;
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
  /* Set when the session ends (Goodbye, closed pipe): a request that took
   * its reference before the end may no longer start running VM code, as
   * no Cancel, close or shutdown would ever reach that run again. */
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
  /* Isolation (isolate.c, under its lock): the session's worker process,
   * how many it had (handle ranges), and its bytes as last reported. */
  struct vma_iso_worker *worker;
  uint32_t worker_gen;
  uint64_t worker_bytes;
} vma_session_t;

/* ---------------------------------------------------------------- auth */

/* The agent-wide failure budget of Hello tokens (auth.c), under
 * agent->lock. */
typedef struct vma_auth {
  uint64_t tat_ns;      /* GCRA: when the budget is whole again */
  uint64_t failures;    /* wrong or missing tokens, all time */
  uint64_t over;        /* of them refused over the budget */
  uint64_t last_log_ns; /* the latest failure line */
  uint32_t unlogged;    /* failures since that line */
} vma_auth_t;

/* Whether the failure budget is spent at now (an attack): Hellos arriving
 * now are answered no sooner than cfg.auth_delay_ms after now. */
int vma_auth_under_attack(struct vmagent *a, uint64_t now);
/* Sleeps until until_ns (vm_now_ns clock), or the agent stops. */
void vma_auth_hold(struct vmagent *a, uint64_t until_ns);
/* A Hello that arrived at arrived_ns (under attack or not, as
 * vma_auth_under_attack said then) had a wrong token (missing: none was
 * sent): counts it against the budget, logs it (rate-limited), waits for
 * its turn, and returns st, or RESOURCE_EXHAUSTED when its turn is beyond
 * cfg.auth_max_wait_ms (st freed). The caller closes the connection after
 * the reply. */
vm_status_t vma_auth_failed(struct vmagent *a, uint32_t pipe_id, int missing, uint64_t arrived_ns,
                            int attack, vm_status_t st);

/* ---------------------------------------------------------------- agent */

/* Beyond --workers, this many extra workers may be started while requests
 * wait for busy devices (see vma_on_block in server.c). */
#define VMA_MAX_EXTRA_WORKERS 64

typedef struct vma_worker {
  struct vmagent *agent;
  pthread_t thread;
  int started;       /* thread created and not yet joined (pool_lock) */
  int extra;         /* retires when other workers are idle */
  atomic_int exited; /* the thread left its loop */
} vma_worker_t;

struct vma_conn; /* one accepted connection (server.c) */
struct vma_job;  /* a request waiting for a worker (server.c) */

struct vmagent {
  vmagent_config_t cfg; /* strings below are owned copies */
  char *listen_url;
  char *token;
  char *tls_cert_file, *tls_key_file, *cache_dir;
  char *state_root; /* DeviceState's sysfs root (devstate.c); NULL = / */
  vma_pin_t pin;    /* --cpus (pin.c) */
  char url[512];

  vma_device_t devices[VMA_MAX_DEVICES];
  uint32_t num_devices;
  vm_registry_t *registry;
  vma_store_t *store;

  pthread_mutex_t lock;
  vma_session_t **sessions; /* cfg.max_sessions slots */
  /* Host memory clients cause (cfg.host_mem_limit): the sessions' VM
   * budgets are its children; upload staging is charged here directly. */
  vm_budget_t host;
  uint32_t num_sessions;
  vma_session_t *dead;   /* removed, refs 0: for the reaper */
  vma_session_t *ending; /* removed, refs > 0 (next_ending) */
  atomic_ullong requests;
  atomic_int stopping;

  /* transport */
  int started;
  int stopped;
  struct vmt_listener *listener;
  int ipc_listener; /* ipc:// framing (a type byte before each length) */
  pthread_t acceptor;
  int acceptor_started;
  struct vmt_tls *tls;         /* tls+tcp:// */
  struct vmt_flusher *flusher; /* writes what replies left in send queues */
  vma_worker_t *workers; /* pool_size slots */
  uint32_t pool_size;
  /* Worker slots, the job queue, the connection list and the counts
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
  uint32_t idle_workers; /* waiting for a job (or about to) */
  int pool_full_logged;
  int conns_full_logged;
  /* Called by a request about to wait for a device (transport hook). */
  void (*on_block)(struct vmagent *a);
  /* Pipes closed recently (under lock): a Hello still in flight when its
   * connection closed must not create a session nobody will tear down. */
  uint32_t closed_pipes[VMA_CLOSED_PIPES];
  uint32_t closed_next;
  vma_auth_t auth; /* under lock (auth.c) */
  /* Session isolation (isolate.c): NULL when sessions run in-process. */
  struct vma_iso *iso;
  char *worker_exe;
  /* This process is a worker (worker.c): its link to the parent, and its
   * handle of the cross-process device lock file (-1: none). */
  int worker_mode;
  int xlock_fd;
  /* In a worker: --host-mem-limit over all workers (shared counter), the
   * parent of host, which counts this worker's share. */
  vm_budget_t xhost;
  void *shared;
  size_t shared_len;
  pthread_t reaper;
  int reaper_started;
  int reaper_quit; /* under lock */
  pthread_cond_t reaper_cond;
};

/* A place for the response: the transport decides where the bytes live so
 * that bulk payloads are written once, straight into the outgoing message. */
typedef struct vma_out {
  /* Returns size writable bytes (replacing any earlier buffer), or NULL. */
  uint8_t *(*alloc)(struct vma_out *o, size_t size);
  void *user;
  uint8_t *buf;
  size_t len;
  /* Set by the handler: the transport closes the connection once this
   * reply is written (a failed Hello: auth.c). */
  int close_after;
} vma_out_t;

/* A vma_out_t allocator on the heap (malloc; the caller frees o->buf). */
uint8_t *vma_heap_alloc(vma_out_t *o, size_t size);

/* Serves one request body from pipe_id into out (always produces a reply
 * unless allocation fails: returns -1). */
int vma_dispatch(vmagent_t *a, uint32_t pipe_id, const uint8_t *body, size_t len, vma_out_t *out);
/* The reply to a LEN-byte message on a connection without a session (the
 * pre-Hello cap), written without the message: the serving loop drains such
 * a message instead of storing it. */
int vma_refuse_pre_hello(vmagent_t *a, uint32_t pipe_id, uint64_t len, vma_out_t *out);

/* Session table (session.c). */
vm_status_t vma_session_create(vmagent_t *a, uint32_t pipe_id, const char *client,
                               vma_session_t **out_s);
/* In a worker: the session the parent names (id), handles from
 * first_handle. */
vm_status_t vma_session_create_as(vmagent_t *a, uint32_t pipe_id, const char *client, uint64_t id,
                                  uint64_t first_handle, vma_session_t **out_s);
/* Finds id for pipe_id and takes a reference (refs++); NOT_FOUND for an
 * unknown id or one of another pipe (indistinguishable). */
vm_status_t vma_session_acquire(vmagent_t *a, uint64_t id, uint32_t pipe_id, vma_session_t **out_s);
/* Drops the reference; destroys the session if it ended meanwhile. */
void vma_session_release(vmagent_t *a, vma_session_t *s);
/* Ends a session (Goodbye): out of the table now, destroyed when the last
 * in-flight request finishes. Running invocations are cancelled. */
void vma_session_end(vmagent_t *a, vma_session_t *s);
/* Pipe closed: ends all its sessions. */
void vma_sessions_close_pipe(vmagent_t *a, uint32_t pipe_id);
/* Ends sessions idle past the timeout; destroys dead ones with no refs;
 * on shutdown cancels what runs. Called by the reaper. */
void vma_sessions_reap(vmagent_t *a);
/* Ends every session and destroys them (no request may be in flight). */
void vma_sessions_destroy_all(vmagent_t *a);
/* Frees everything a session holds. */
void vma_session_destroy(vmagent_t *a, vma_session_t *s);
/* Cancels every running op of a session (session lock taken inside). */
void vma_session_cancel_running(vma_session_t *s);
/* ---- device_gate.c ---- */
/* *out = now on clock + ms (for timed waits). */
void vma_time_in(clockid_t clock, uint32_t ms, struct timespec *out);
vm_status_t vma_gate_init(vma_device_t *d);
void vma_gate_destroy(vma_device_t *d);
/* The agent device behind dev, NULL for a VM's private cpu device. */
vma_device_t *vma_device_of(vmagent_t *a, const vm_device_t *dev);
/* Around one copy to or from d outside an invocation (d may be NULL):
 * waits while a measurement runs there (UNAVAILABLE on shutdown). Never
 * nest two on one thread. */
vm_status_t vma_copy_enter(vmagent_t *a, vma_device_t *d);
void vma_copy_exit(vma_device_t *d);
/* Around a measurement of v (its run locks held): closes the gates of its
 * devices and waits for the copies inside to finish. */
/* Closes the quiet gates of v's devices and waits for the copies inside;
 * returns the seconds it had to wait for them (0 when none were inside). */
double vma_measure_enter(vmagent_t *a, const vma_vm_t *v);
void vma_measure_exit(vmagent_t *a, const vma_vm_t *v);

/* Whether connection pipe_id has a live session (it said Hello). */
int vma_pipe_has_session(vmagent_t *a, uint32_t pipe_id);
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
/* Random nonzero 64-bit value from the OS. */
uint64_t vma_random_u64(void);

/* Server (server.c). */
vm_status_t vma_server_start(vmagent_t *a);
void vma_server_stop(vmagent_t *a);
/* The peer of connection id for logs and the Hello brute-force table: its
 * IP address, "ipc", or "pipe N" when no such connection is open. */
void vma_conn_peer(vmagent_t *a, uint32_t id, char *out, size_t cap);

/* Misc. */
int vma_url_is_local(const char *url);
uint64_t vma_rss_bytes(void);

#endif
