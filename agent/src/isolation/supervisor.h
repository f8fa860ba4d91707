/* Session isolation (isolation/, worker.c): with --isolate
 * session, the VMs of each session live in a worker process of their own,
 * a copy of vmagent started with --worker-fd, so that a fault there (a
 * carried kernel that writes over memory, a crash in a driver, the OOM
 * killer) ends that session's VMs and nothing else. docs/security.md,
 * "Session isolation".
 *
 * The agent keeps the connections and what the operation table marks
 * VMP_OP_LOCAL (Hello and its token, the session table, ListDevices,
 * DeviceState, Ping, Goodbye); the router (route.c) forwards every other
 * request of a session, as the client's bytes, to the session's worker
 * process over a socketpair (isolation/link.h, the link) and relays the reply
 * (isolation/forward.c). The agent kills a worker process that does not
 * answer a bounded request (the table's VMP_OP_KBOUND and VMP_OP_DEADLINE:
 * Invoke/Run with a deadline, Cancel, Stats, FreeExecutable) within its
 * bound, and one that stays suspended by a signal (SIGSTOP; /proc state
 * 'T') for VMA_ISO_STOPPED_MS, busy or idle: suspended, it would keep the
 * device locks it holds (isolation/xlock.h) and stall every other
 * session's work on those devices. Requests without a bound
 * (VMP_OP_UNBOUND: TimeEvaluate, Profile, transfers) may run as long as
 * they progress: another session's work on the same device waits for
 * them, as it waits for a measurement in one process. When a worker
 * process dies or is killed the kernel drops its locks; its session's
 * pending requests get ABORTED (DEADLINE_EXCEEDED for the one that timed
 * out) and its next request gets a fresh worker process. One stopped by a
 * debugger (state 't') is left alone. Spare worker processes are started
 * ahead so that a new session does not wait for a process and its OpenCL
 * start-up.
 *
 * Files: supervisor.c (this header: start, stop, spares, watching, a
 * session's worker process), proc.c (their table and end), forward.c (a
 * request's way there and back), stats.c (Stats speaks for the agent),
 * xlock.c (the cross-process device locks, in the worker processes),
 * shared.h (the memory they share), link.c (the link, on the transport's
 * multiplexer; the worker process's end is worker.c).
 */
#ifndef VMA_ISOLATION_SUPERVISOR_H
#define VMA_ISOLATION_SUPERVISOR_H

#include "vmrpc/status.h"
#include "vmagent/agent.h"

struct vma_session;
struct vma_iso_worker;

/* Starts the supervisor and the spare worker processes (vmagent_start),
 * and hooks isolation to the session table. */
vm_status_t vma_iso_start(vmagent_t *a);
/* Kills every worker process and refuses new ones (first step of
 * vmagent_stop): requests waiting for one get UNAVAILABLE at once. */
void vma_iso_stop(vmagent_t *a);
/* Waits for the worker processes' ends and frees the state (no request in
 * flight). */
void vma_iso_free(vmagent_t *a);
/* s's worker process, attached to the session (started on its first
 * request, and again after one ended), with a reference the caller drops
 * under iso->mu (refs--). */
vm_status_t vma_iso_worker_of(vmagent_t *a, struct vma_session *s, struct vma_iso_worker **out_w);

#endif /* VMA_ISOLATION_SUPERVISOR_H */
