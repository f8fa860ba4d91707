/* Session isolation (isolate.c, worker.c): with --isolate session, the VMs
 * of each session live in a worker process of their own, a copy of vmagent
 * started in worker mode, so that a fault there (a carried kernel that
 * writes over memory, a crash in a driver, the OOM killer) ends that
 * session's VMs and nothing else. docs/security.md, "Session isolation".
 *
 * The agent (parent) keeps the connections, Hello and its token, the
 * session table, ListDevices, Ping and Goodbye; it forwards every other
 * request of a session, as the client's bytes, to the session's worker over
 * a socketpair and relays the reply. The agent kills a worker that
 * does not answer a bounded request (Invoke/Run with a deadline, Cancel,
 * Stats, FreeExecutable: isolate.c, vma_iso_bound) within its bound, and
 * one that stays suspended by a signal (SIGSTOP; /proc state 'T') for
 * VMA_ISO_STOPPED_MS, busy or idle: suspended, it would keep the device
 * locks it holds (below) and stall every other session's work on those
 * devices. Requests without a bound (TimeEvaluate, Profile, transfers) may
 * run as long as they progress: another session's work on the same device
 * waits for them, as it waits for a measurement in one process. When a
 * worker dies or is killed the kernel drops its locks; its session's
 * pending requests get ABORTED (DEADLINE_EXCEEDED for the one that timed
 * out) and its next request gets a fresh worker. A worker stopped by a
 * debugger (state 't') is left alone. Spare workers are started ahead so
 * that a new session does not wait for a process and its OpenCL start-up.
 *
 * The link: frames of a 16-byte header (u32 length of the body, u32 flags,
 * u64 tag, little-endian as the host: both ends are one binary on one
 * machine) and the body. The parent's tags number its requests; a reply
 * carries the tag of its request. Tag 0 from the worker: VMA_LINK_READY.
 */
#ifndef VMA_ISOLATE_H
#define VMA_ISOLATE_H

#include <stdint.h>

#include "agent_internal.h"

typedef struct vma_link_hdr {
  uint32_t len;
  uint32_t flags;
  uint64_t tag;
} vma_link_hdr_t;

enum {
  /* worker -> parent, tag 0: initialised, serving. */
  VMA_LINK_READY = 1u << 0,
  /* parent -> worker: the body is an attach (vma_link_attach_t then the
   * client name); the reply body is empty (OK) or an error message. */
  VMA_LINK_ATTACH = 1u << 1,
  /* worker -> parent, on a reply: a device of this worker is out of
   * service (a carried kernel ran past --kernel-timeout and still runs):
   * stop this worker, which frees the device. */
  VMA_LINK_RETIRE = 1u << 2,
};

typedef struct vma_link_attach {
  uint64_t session_id; /* the parent's id: forwarded frames name it */
  uint64_t first_handle;
} vma_link_attach_t;

/* Memory shared by the agent and its workers (the device lock file's
 * contents): the host memory and cpu device memory all workers' sessions
 * hold, for --host-mem-limit and --device-mem-limit across them, and each
 * worker's share, which the agent takes back out of the totals when the
 * worker ends. */
typedef struct vma_share {
  _Atomic uint64_t host; /* under --host-mem-limit */
  _Atomic uint64_t cpu;  /* on the cpu device, under --device-mem-limit */
} vma_share_t;
typedef struct vma_shared {
  _Atomic uint64_t host_total;
  _Atomic uint64_t cpu_total;
  vma_share_t slot[];
} vma_shared_t;
#define VMA_SHARED_BYTES(slots) (sizeof(vma_shared_t) + (size_t)(slots) * sizeof(vma_share_t))

/* Bytes the link takes in one frame beyond the largest request/reply. */
#define VMA_LINK_SLACK (1u << 20)

/* Writes/reads a whole buffer (EINTR retried). 0, or -1 (errno). */
int vma_link_write(int fd, const vma_link_hdr_t *h, const void *body);
int vma_link_read_full(int fd, void *buf, size_t len);

/* ---- parent (isolate.c) ---- */

/* Starts the supervisor and the spare workers (vmagent_start). */
vm_status_t vma_iso_start(vmagent_t *a);
/* Kills every worker and refuses new ones (first step of vmagent_stop):
 * requests waiting for a worker get UNAVAILABLE at once. */
void vma_iso_stop(vmagent_t *a);
/* Waits for the workers' ends and frees the state (no request in flight). */
void vma_iso_free(vmagent_t *a);
/* Whether request rq of a session goes to the session's worker. */
int vma_iso_forwards(const vmagent_t *a, const Vmrpc__Request *rq);
/* Serves rq (whole frame body/len) through s's worker: OK with the reply
 * written into out, or the status to answer with. */
vm_status_t vma_iso_forward(vmagent_t *a, vma_session_t *s, const Vmrpc__Request *rq,
                            const uint8_t *body, size_t len, vma_out_t *out);
/* The session ended (agent->lock held, must not block): its worker is
 * killed. */
void vma_iso_session_ended(vmagent_t *a, vma_session_t *s);
/* The session is being destroyed: lets go of its worker. */
void vma_iso_session_free(vmagent_t *a, vma_session_t *s);

/* ---- worker (worker.c) ---- */

/* Serves the parent on fd until it closes; never returns. */
void vma_worker_serve(vmagent_t *a, int fd) __attribute__((noreturn));
/* Opens this worker's own handle of the parent's device lock file
 * (inherited as fd; see vma_xlock_*) and, with slot >= 0, counts its host
 * and cpu device memory in the shared totals under the agent's limits. */
vm_status_t vma_worker_locks(vmagent_t *a, int fd, int slot);

/* Cross-process device locks (worker.c): the run lock and the quiet gate of
 * each device, held across the workers that share it. No-ops outside a
 * worker. */
vm_status_t vma_xrun_lock(vmagent_t *a, vma_device_t *d, const vma_vm_t *v, uint64_t deadline_ns);
void vma_xrun_unlock(vmagent_t *a, vma_device_t *d);
/* Shared (copies) or exclusive (measurements) hold of d's gate, an OFD
 * byte-range lock that the kernel drops when the holding process dies;
 * waits in growing naps (at most 5 ms) while another worker holds it the
 * other way, with no bound of its own: the agent's supervision (above)
 * kills a holder that is suspended or past its request's bound. Returns
 * OK. */
vm_status_t vma_xgate_lock(vmagent_t *a, vma_device_t *d, int exclusive);
void vma_xgate_unlock(vmagent_t *a, vma_device_t *d);

#endif
