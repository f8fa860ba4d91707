/* The link between the agent and a worker process of session isolation
 * (isolation/supervisor.h has the design; isolate.c the agent's side,
 * worker.c the worker process's).
 *
 * Frames of a 16-byte header (u32 length of the body, u32 flags,
 * u64 tag, little-endian as the host: both ends are one binary on one
 * machine) and the body. The parent's tags number its requests; a reply
 * carries the tag of its request. Tag 0 from the worker: VMA_LINK_READY.
 */
#ifndef VMA_ISOLATE_H
#define VMA_ISOLATE_H

#include <stddef.h>
#include <stdint.h>

#include "out.h"
#include "vmrpc/status.h"

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

/* Bytes the link takes in one frame beyond the largest request/reply. */
#define VMA_LINK_SLACK (1u << 20)

/* Writes/reads a whole buffer (EINTR retried). 0, or -1 (errno). */
int vma_link_write(int fd, const vma_link_hdr_t *h, const void *body);
int vma_link_read_full(int fd, void *buf, size_t len);

/* ---- the agent's side (isolate.c) ---- */

struct vma_iso;
struct vma_iso_worker;

/* Reads one reply of worker process w and gives it to its request (the
 * reading turn held, given back here). 0, or -1 when the link ended (the
 * worker process is gone). */
int vma_iso_read_one(struct vma_iso *iso, struct vma_iso_worker *w);
/* A new worker process's starter thread (arg: its record): reads its first
 * frame, READY, or notes its end. */
void *vma_iso_starter(void *arg);
/* Sends one frame to w and waits for its reply into out. kill_at_ns: 0, or
 * when w is killed unless it has answered. *out_flags: the reply's. */
vm_status_t vma_iso_call(struct vma_iso *iso, struct vma_iso_worker *w, uint32_t flags,
                         const void *body, size_t len, vma_out_t *out, uint64_t kill_at_ns,
                         uint32_t *out_flags);

#endif
