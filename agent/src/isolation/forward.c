/* Forwarding a session's request to its worker process
 * (isolation/forward.h). The operation table says how long the worker
 * process may take (vmproto/ops.h): VMP_OP_KBOUND, VMP_OP_DEADLINE or
 * VMP_OP_UNBOUND. */
#include "isolation/forward.h"

#include <pthread.h>
#include <string.h>

#include "agent_core.h"
#include "dispatch.h"
#include "isolation/link.h"
#include "isolation/proc.h"
#include "isolation/stats.h"
#include "isolation/supervisor.h"
#include "session.h"
#include "vmproto/ops.h"

/* The deadline_ms of rq's message (0: none, or no such field): the table
 * promises the field for every VMP_OP_DEADLINE row
 * (tests/agent/test_op_table.c checks it). */
static uint32_t vma_deadline_ms(const Vmrpc__Request *rq) {
  const ProtobufCMessage *m = vmp_request_op_msg(rq);
  if (!m) return 0;
  const ProtobufCFieldDescriptor *f =
      protobuf_c_message_descriptor_get_field_by_name(m->descriptor, "deadline_ms");
  if (!f || f->type != PROTOBUF_C_TYPE_UINT32 || f->label != PROTOBUF_C_LABEL_NONE) return 0;
  uint32_t v;
  memcpy(&v, (const char *)m + f->offset, sizeof(v));
  return v;
}

/* When the worker process is killed unless it has answered rq, from the
 * table: a deadline (VMP_OP_DEADLINE, when set) + kernel bound + grace;
 * VMP_OP_KBOUND (runs no VM code): kernel bound + grace; the rest (and a
 * request without a deadline) run as long as they need (Cancel, Goodbye
 * or a closed connection end them): 0. */
static uint64_t vma_forward_bound(const vmagent_t *a, const Vmrpc__Request *rq) {
  uint32_t flags = vmp_op_flags(rq->op_case);
  uint32_t deadline_ms = 0;
  if (flags & VMP_OP_DEADLINE)
    deadline_ms = vma_deadline_ms(rq);
  else if (flags & VMP_OP_KBOUND)
    deadline_ms = 1;
  if (!deadline_ms) return 0;
  return vm_now_ns() +
         vma_ms_ns((uint64_t)deadline_ms + a->cfg.kernel_timeout_ms + VMA_ISO_GRACE_MS);
}

/* Serves c through its session's worker process: OK with the reply
 * written into c->out, or the status to answer with. */
static vm_status_t vma_forward_serve(vma_ctx_t *c) {
  vmagent_t *a = c->a;
  const Vmrpc__Request *rq = c->rq;
  if (!(vmp_op_flags(rq->op_case) & VMP_OP_FORWARD) || !c->s) {
    /* Decoded, it is not what the peek said (the router never sends such
     * a request here): served by this process. */
    return vma_request_serve(c);
  }
  vma_iso_t *iso = a->iso;
  vma_iso_worker_t *w = NULL;
  VM_RETURN_IF_ERROR(vma_iso_worker_of(a, c->s, &w));
  /* Waiting for the reply holds a transport thread: as for a busy device,
   * the transport makes sure another is free for Cancel and Ping. */
  if (a->hooks.on_block) a->hooks.on_block(a);
  uint32_t flags = 0;
  vm_status_t st =
      vma_iso_call(iso, w, 0, c->body, c->body_len, c->out, vma_forward_bound(a, rq), &flags);
  pthread_mutex_lock(&iso->mu);
  w->refs--;
  pthread_mutex_unlock(&iso->mu);
  if (!st && rq->op_case == VMRPC__REQUEST__OP_STATS) st = vma_iso_fix_stats(a, c->s, c->out);
  c->replied = !st;
  return st;
}

int vma_forward(vmagent_t *a, uint32_t conn_id, const uint8_t *body, size_t len, vma_out_t *out) {
  return vma_request_run(a, conn_id, body, len, out, vma_forward_serve);
}
