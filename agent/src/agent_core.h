/* The agent (struct vmagent): what one vmagent process holds, each part
 * owned by one concern. Types only: the functions of each part are in its
 * own header, and none of them is declared here, so that including this
 * header makes no file depend on another's code (no circle of imports:
 * scripts/check-agent-imports.py).
 *
 *   configuration   cfg and the owned strings (agent.c)
 *   devices         devices[] (device.h; the quiet gate: device_gate.h)
 *   executables     registry, store (store.h)
 *   sessions        the session table and the reaper's wake-up, under
 *                   a->lock (session.h)
 *   auth            the Hello failure budget, under a->lock (auth.h)
 *   transport       a->srv (server_state.h, server.c) and its hooks
 *   isolation       a->iso, the worker processes (isolation/), and the
 *                   hooks it sets on the session table
 *   worker process  a->in_worker: this process serves one session of an
 *                   agent (worker.c, isolation/shared.h)
 *
 * Threads (server.c): an acceptor; one reader per connection, which reads
 * its requests, serves the cheap ones itself and queues the others; N pool
 * threads (more while requests wait for devices) serving queued requests;
 * one reaper (idle sessions, sessions of closed connections, shutdown
 * cancels); the flusher (replies the sockets did not take at once,
 * vmtransport/sendq.h); the caller of vmagent_start/stop. With session isolation, isolation/supervisor.c adds
 * its own (docs/architecture.md has the whole lock order).
 *
 * Locks, always taken in this order, never the other way round:
 *   a->lock           the session table, session refs/dead flags, counters
 *   iso->mu           the worker processes (isolation/proc.h)
 *   session->lock     a session's handle tables and VM busy state
 *   store->lock       the executable store (memory map + disk)
 * a->srv.pool_lock is the transport's own; it is never held while taking
 * any of the above. Device run locks (one per agent device, taken in device
 * index order) and the cross-process device locks of worker processes are
 * never acquired while holding any of the above: they are held for whole
 * invocations and may be waited for.
 */
#ifndef VMA_AGENT_CORE_H
#define VMA_AGENT_CORE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "agent_limits.h"
#include "auth_state.h"
#include "device.h"
#include "isolation/shared.h"
#include "pin.h"
#include "server_state.h"
#include "vm/vm.h"
#include "vmagent/agent.h"

struct vma_store;
struct vma_session;
struct vma_iso;

/* What the transport lends the rest of the agent (set by server.c, or by
 * worker.c in a worker process). */
typedef struct vma_transport_hooks {
  /* Called by a request about to wait for a device or a worker process:
   * the transport keeps a thread free for Cancel and Ping. */
  void (*on_block)(struct vmagent *a);
  /* The peer of connection conn_id for logs (server.c, vma_conn_peer);
   * NULL: "pipe N". */
  void (*conn_peer)(struct vmagent *a, uint32_t conn_id, char *out, size_t cap);
} vma_transport_hooks_t;

/* What session isolation wants to hear from the session table (set by
 * isolation/supervisor.c; NULL without isolation). */
typedef struct vma_session_hooks {
  /* The session ended (a->lock held, must not block). */
  void (*ended)(struct vmagent *a, struct vma_session *s);
  /* The session is being destroyed. */
  void (*freed)(struct vmagent *a, struct vma_session *s);
} vma_session_hooks_t;

struct vmagent {
  /* configuration: cfg's strings below are owned copies */
  vmagent_config_t cfg;
  char *listen_url;
  char *token;
  char *tls_cert_file, *tls_key_file, *cache_dir;
  char *state_root; /* DeviceState's sysfs root (devstate.c); NULL = / */
  char *worker_exe; /* the program of the worker processes */
  vma_pin_t pin;    /* --cpus (pin.c) */
  char url[512];
  int started;
  int stopped;

  /* devices and executables */
  vma_device_t devices[VMA_MAX_DEVICES];
  uint32_t num_devices;
  vm_registry_t *registry;
  struct vma_store *store;

  /* sessions (session.c), under lock */
  pthread_mutex_t lock;
  struct vma_session **sessions; /* cfg.max_sessions slots */
  uint32_t num_sessions;
  struct vma_session *dead;   /* removed, refs 0: for the reaper */
  struct vma_session *ending; /* removed, refs > 0 (next_ending) */
  /* Connections closed recently: a Hello still in flight when its
   * connection closed must not create a session nobody will tear down. */
  uint32_t closed_conns[VMA_CLOSED_CONNS];
  uint32_t closed_next;
  vma_session_hooks_t session_hooks;
  /* Host memory clients cause (cfg.host_mem_limit): the sessions' VM
   * budgets are its children; upload staging is charged here directly. */
  vm_budget_t host;
  atomic_ullong requests;
  atomic_int stopping;
  /* The reaper (started by server.c, woken by session.c). */
  pthread_t reaper;
  int reaper_started;
  int reaper_quit; /* under lock */
  pthread_cond_t reaper_cond;

  /* auth (auth.c), under lock */
  vma_auth_t auth;

  /* transport (server.c) */
  vma_server_t srv;
  vma_transport_hooks_t hooks;

  /* session isolation (isolation/): NULL when sessions run in-process */
  struct vma_iso *iso;

  /* this process as a worker process (worker.c, isolation/xlock.c) */
  vma_in_worker_t in_worker;
};

#endif /* VMA_AGENT_CORE_H */
