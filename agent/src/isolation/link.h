/* The link between the agent and a worker process of session isolation
 * (isolation/supervisor.h has the design): the transport's frames and its
 * one request/reply multiplexer (vmtransport/frame.h, vmtransport/mux.h)
 * over a socketpair. The agent's side is link.c; the worker process serves
 * its end with the same multiplexer (worker.c).
 *
 * A message is framed as on tcp:// (a u64 big-endian length, then one id
 * word with the high bit set); its body starts with a u32 big-endian of
 * VMA_LINK_* flags and goes on with the request's or the reply's bytes. A
 * reply echoes its request's id. There is no SP handshake: both ends are
 * one binary, the one a fork of the other.
 */
#ifndef VMA_ISOLATION_LINK_H
#define VMA_ISOLATION_LINK_H

#include <stddef.h>
#include <stdint.h>

#include "out.h"
#include "vmrpc/status.h"
#include "vmtransport/conn.h"
#include "vmtransport/mux.h"

enum {
  /* parent -> worker: answered (empty) once the worker process serves;
   * the agent's starter asks it first. */
  VMA_LINK_HELLO = 1u << 0,
  /* parent -> worker: the body is an attach (vma_link_attach_t then the
   * client name); the reply body is empty (OK) or an error message. */
  VMA_LINK_ATTACH = 1u << 1,
  /* worker -> parent, on a reply: a device of this worker is out of
   * service (a carried kernel ran past --kernel-timeout and still runs):
   * stop this worker, which frees the device. */
  VMA_LINK_RETIRE = 1u << 2,
};

/* Bytes of the flags word at the start of every body. */
#define VMA_LINK_FLAGS_LEN 4

typedef struct vma_link_attach {
  uint64_t session_id; /* the parent's id: forwarded frames name it */
  uint64_t first_handle;
} vma_link_attach_t;

/* Bytes the link takes in one body beyond the largest request/reply. */
#define VMA_LINK_SLACK (1u << 20)

/* A message the multiplexer read for the serving end (heap). */
typedef struct vma_link_msg {
  size_t off, len; /* its body: mem[off, off + len) */
  uint8_t mem[];
} vma_link_msg_t;

/* Opens the link on fd (taken over: closed by vmt_conn_free(*c) even on
 * failure): bodies up to max_body bytes. strict: the agent's end (a reply
 * no call waits for is a fault). 0, or an nng error. */
int vma_link_open(int fd, uint64_t max_body, int strict, vmt_conn_t **c, vmt_mux_t *m);
void vma_link_flags_put(uint32_t flags, uint8_t out[VMA_LINK_FLAGS_LEN]);
uint32_t vma_link_flags_get(const uint8_t in[VMA_LINK_FLAGS_LEN]);

/* ---- the agent's side (link.c) ---- */

struct vma_iso;
struct vma_iso_worker;

/* A new worker process's starter thread (arg: its record): asks it HELLO
 * and marks it ready, or notes its end. */
void *vma_iso_starter(void *arg);
/* Sends one request to w and waits for its reply into out. kill_at_ns: 0,
 * or when w is killed unless it has answered. *out_flags: the reply's. */
vm_status_t vma_iso_call(struct vma_iso *iso, struct vma_iso_worker *w, uint32_t flags,
                         const void *body, size_t len, vma_out_t *out, uint64_t kill_at_ns,
                         uint32_t *out_flags);
/* For the supervisor, when nobody waits on w yet its link is readable:
 * reads what came (its end, or a fault) and ends w if the link is lost. */
void vma_iso_poll(struct vma_iso *iso, struct vma_iso_worker *w);

#endif
