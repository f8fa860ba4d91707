/* Request dispatch: frames and decodes a message, checks it against the
 * operation table (vmproto/ops.h: session, payload), runs its handler and
 * writes exactly one reply for every well-framed message.
 *
 * Each handler (op_*.c, run.c) validates its request completely (sizes,
 * ids, names) before allocating or touching a device: asserts never stand
 * in for checks, since every byte here came from the network. Handlers
 * return a status; the dispatcher turns it into the response. The checks
 * before the handler (vma_request_run) are also those of a request that
 * session isolation forwards (isolation/forward.c).
 */
#include "dispatch.h"

#include <stdlib.h>
#include <string.h>

#include "handlers.h"
#include "op_tensor.h"
#include "vmrpc/log.h"

#define VMA_MSG_MAX 4096

static int vma_write(vma_out_t *out, const Vmrpc__Response *r) {
  size_t n = vmp_frame_size(&r->base);
  uint8_t *buf = out->alloc(out, n);
  if (!buf) return -1;
  vmp_frame_write(&r->base, buf);
  return 0;
}

static int vma_write_error(vma_out_t *out, uint64_t id, vm_status_t st) {
  Vmrpc__Response r;
  Vmrpc__Status ws;
  char msg[VMA_MSG_MAX];
  vmrpc__response__init(&r);
  r.id = id;
  vmp_status_to_wire(st, &ws, msg, sizeof(msg));
  r.status = &ws;
  return vma_write(out, &r);
}

/* Answers the request of conn_id with st (id 0: it has none yet) and
 * frees st. */
static int vma_answer(uint32_t conn_id, vma_out_t *out, uint64_t id, vm_status_t st) {
  VM_LOGD("pipe %u: %s", conn_id, vm_status_message(st));
  int rc = vma_write_error(out, id, st);
  vm_status_free(st);
  return rc;
}

typedef vm_status_t (*vma_handler_fn)(vma_ctx_t *c);

/* The handler of each row of the operation table (vmproto/ops.h). */
static const struct {
  Vmrpc__Request__OpCase op;
  vma_handler_fn fn;
} vma_handlers[] = {
#define VMA_HANDLER_ROW(C, f, N, fl) {VMRPC__REQUEST__OP_##C, vma_op_##f},
    VMP_OPS(VMA_HANDLER_ROW)
#undef VMA_HANDLER_ROW
};

static vma_handler_fn vma_handler(Vmrpc__Request__OpCase op) {
  for (size_t i = 0; i < sizeof(vma_handlers) / sizeof(vma_handlers[0]); i++)
    if (vma_handlers[i].op == op) return vma_handlers[i].fn;
  return NULL;
}

static vm_status_t vma_pre_hello_too_big(uint64_t len) {
  return vm_status_make(VM_FAILED_PRECONDITION,
                        "a %llu-byte message on a connection without a session: until Hello "
                        "succeeds the agent takes messages of at most %d bytes; send Hello first",
                        (unsigned long long)len, VMA_PRE_HELLO_MAX_BYTES);
}

int vma_refuse_pre_hello(vmagent_t *a, uint32_t conn_id, uint64_t len, vma_out_t *out) {
  atomic_fetch_add(&a->requests, 1);
  return vma_answer(conn_id, out, 0, vma_pre_hello_too_big(len));
}

/* The first half of vma_request_run: NULL when the request has been
 * answered already (*rc: 0, or -1 without memory for the reply); else its
 * context, and *st the status to answer with instead of serving it (NULL:
 * serve it). */
static vma_ctx_t *vma_request_open(vmagent_t *a, uint32_t conn_id, const uint8_t *body, size_t len,
                                   vma_out_t *out, vm_status_t *st, int *rc) {
  const uint8_t *env, *payload;
  size_t env_len, payload_len;
  *st = VM_STATUS_OK;
  /* A peer that has not said Hello gets no more than Hello needs: its large
   * message is not decoded at all (the serving loop does not even store
   * one much larger, see vma_refuse_pre_hello). */
  if (len > VMA_PRE_HELLO_MAX_BYTES && !vma_conn_has_session(a, conn_id)) {
    *rc = vma_refuse_pre_hello(a, conn_id, len, out);
    return NULL;
  }
  atomic_fetch_add(&a->requests, 1);
  vm_status_t e = vmp_frame_split(body, len, 0, &env, &env_len, &payload, &payload_len);
  if (e) {
    *rc = vma_answer(conn_id, out, 0, e);
    return NULL;
  }
  Vmrpc__Request *rq = NULL;
  e = vmp_request_unpack(env, env_len, &rq);
  if (e) {
    *rc = vma_answer(conn_id, out, 0, e);
    return NULL;
  }
  vma_ctx_t *c = calloc(1, sizeof(*c));
  if (!c) {
    vmrpc__request__free_unpacked(rq, NULL);
    *rc = vma_answer(conn_id, out, 0, vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory"));
    return NULL;
  }
  c->a = a;
  c->conn_id = conn_id;
  c->rq = rq;
  c->body = body;
  c->body_len = len;
  c->payload = payload;
  c->payload_len = payload_len;
  c->out = out;
  vmrpc__response__init(&c->rs);
  c->rs.id = rq->id;

  uint32_t flags = vmp_op_flags(rq->op_case);
  if (!vma_handler(rq->op_case) || !vmp_request_op_msg(rq)) {
    /* An op newer than this agent arrives as an unknown field. */
    unsigned num = rq->op_case != VMRPC__REQUEST__OP__NOT_SET ? (unsigned)rq->op_case : 0;
    if (!num && rq->base.n_unknown_fields) num = rq->base.unknown_fields[0].tag;
    *st = vm_status_make(VM_UNIMPLEMENTED,
                         "operation %u is not implemented by this agent (version %s, protocol "
                         "%d.%d)",
                         num, VMRPC_VERSION, VMRPC_PROTOCOL_MAJOR, VMRPC_PROTOCOL_MINOR);
  } else if (!(flags & VMP_OP_SESSION)) {
    /* Ping with a live session of this connection keeps it from going
     * idle. */
    if (!(flags & VMP_OP_OPENS) && rq->session) {
      vma_session_t *s = NULL;
      vm_status_t ist = vma_session_acquire(a, rq->session, conn_id, &s);
      if (!ist) vma_session_release(a, s);
      vm_status_free(ist);
    }
  } else if (rq->session == 0) {
    *st = vm_status_make(VM_FAILED_PRECONDITION, "no session: send Hello first");
  } else {
    *st = vma_session_acquire(a, rq->session, conn_id, &c->s);
  }
  return c;
}

vm_status_t vma_request_serve(vma_ctx_t *c) {
  if (!(vmp_op_flags(c->rq->op_case) & VMP_OP_PAYLOAD)) VM_RETURN_IF_ERROR(vma_no_payload(c));
  return vma_handler(c->rq->op_case)(c);
}

/* Writes c's reply (an error for st, which it frees; else c->rs unless
 * the reply was written already), lets go of its session and frees c. */
static int vma_request_close(vma_ctx_t *c, vm_status_t st) {
  vmagent_t *a = c->a;
  const Vmrpc__Request *rq = c->rq;
  int rc = 0;
  if (st) {
    VM_LOGD("request %llu %s: %s: %s", (unsigned long long)rq->id, vmp_op_name(rq->op_case),
            vm_code_name(vm_status_code(st)), vm_status_message(st));
    rc = vma_write_error(c->out, rq->id, st);
    vm_status_free(st);
  } else if (!c->replied) {
    rc = vma_write(c->out, &c->rs);
  }
  if (c->s) vma_session_release(a, c->s);
  for (size_t i = 0; i < sizeof(c->owned) / sizeof(c->owned[0]); i++) free(c->owned[i]);
  vmrpc__request__free_unpacked((Vmrpc__Request *)rq, NULL);
  free(c);
  return rc;
}

int vma_request_run(vmagent_t *a, uint32_t conn_id, const uint8_t *body, size_t len, vma_out_t *out,
                    vma_serve_fn serve) {
  vm_status_t st;
  int rc = 0;
  vma_ctx_t *c = vma_request_open(a, conn_id, body, len, out, &st, &rc);
  if (!c) return rc;
  if (!st) st = serve(c);
  return vma_request_close(c, st);
}

int vma_dispatch(vmagent_t *a, uint32_t conn_id, const uint8_t *body, size_t len, vma_out_t *out) {
  return vma_request_run(a, conn_id, body, len, out, vma_request_serve);
}

int vma_dispatch_direct(vmagent_t *a, uint32_t conn_id, const uint8_t *head, size_t head_len,
                        vma_payload_src_t *src, vma_out_t *out) {
  const uint8_t *env, *rest;
  size_t env_len, rest_len;
  vm_status_t e = vmp_frame_split(head, head_len, 0, &env, &env_len, &rest, &rest_len);
  if (e || rest_len) {
    vm_status_free(e);
    return 1;
  }
  Vmrpc__Request *rq = NULL;
  e = vmp_request_unpack(env, env_len, &rq);
  if (e) {
    vm_status_free(e);
    return 1;
  }
  int rc = 1;
  vma_session_t *s = NULL;
  if (rq->op_case == VMRPC__REQUEST__OP_TENSOR_CHUNK && rq->tensor_chunk && rq->session &&
      !rq->base.n_unknown_fields) {
    vm_status_t st = vma_session_acquire(a, rq->session, conn_id, &s);
    if (st) {
      vm_status_free(st);
      s = NULL;
    }
  }
  vm_status_t st = VM_STATUS_OK;
  if (s && vma_tensor_chunk_direct(a, s, rq->tensor_chunk, src, &st) == 0) {
    atomic_fetch_add(&a->requests, 1);
    if (st) {
      VM_LOGD("request %llu TensorChunk: %s", (unsigned long long)rq->id, vm_status_message(st));
      rc = vma_write_error(out, rq->id, st);
      vm_status_free(st);
    } else {
      Vmrpc__Response r;
      Vmrpc__TensorChunkResponse tr;
      vmrpc__response__init(&r);
      vmrpc__tensor_chunk_response__init(&tr);
      r.id = rq->id;
      r.op_case = VMRPC__RESPONSE__OP_TENSOR_CHUNK;
      r.tensor_chunk = &tr;
      rc = vma_write(out, &r);
    }
  }
  if (s) vma_session_release(a, s);
  vmrpc__request__free_unpacked(rq, NULL);
  return rc;
}
