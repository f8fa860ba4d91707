/* Request dispatch: frames and decodes a message, checks it against the
 * operation table (vmproto/ops.h: session, payload), runs its handler and
 * writes exactly one reply for every well-framed message. Also the helpers
 * every handler shares.
 *
 * Each handler (op_*.c, run.c) validates its request completely (sizes,
 * ids, names) before allocating or touching a device: asserts never stand
 * in for checks, since every byte here came from the network. Handlers
 * return a status; the dispatcher turns it into the response.
 */
#include <stdlib.h>
#include <string.h>

#include "agent_internal.h"
#include "handler_ctx.h"
#include "isolate.h"
#include "vm/log.h"

#define VMA_MSG_MAX 4096

void *vma_own(vma_ctx_t *c, void *p) {
  for (size_t i = 0; i < sizeof(c->owned) / sizeof(c->owned[0]); i++) {
    if (!c->owned[i]) {
      c->owned[i] = p;
      return p;
    }
  }
  free(p); /* programming error: more blocks than slots */
  return NULL;
}

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

vm_status_t vma_check_name(const char *name, const char *what) {
  if (!name || !*name) return vm_status_make(VM_INVALID_ARGUMENT, "%s is empty", what);
  size_t n = strnlen(name, VMA_MAX_NAME + 1);
  if (n > VMA_MAX_NAME)
    return vm_status_make(VM_INVALID_ARGUMENT, "%s is longer than %d bytes", what, VMA_MAX_NAME);
  return VM_STATUS_OK;
}

vm_status_t vma_no_payload(const vma_ctx_t *c) {
  if (c->payload_len == 0) return VM_STATUS_OK;
  return vm_status_make(VM_INVALID_ARGUMENT,
                        "%s carries no payload, but %zu bytes followed the envelope",
                        vmp_op_name(c->rq->op_case), c->payload_len);
}

vm_status_t vma_missing(const char *what) {
  return vm_status_make(VM_INVALID_ARGUMENT, "malformed request: %s is missing", what);
}

vm_status_t vma_exec_not_found(uint64_t id) {
  return vm_status_make(VM_NOT_FOUND, "executable %llu not found in this session",
                        (unsigned long long)id);
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

/* The checks the table makes for every operation, then its handler. */
static vm_status_t vma_call(vma_ctx_t *c, vma_handler_fn fn, uint32_t flags) {
  if (!(flags & VMP_OP_PAYLOAD)) VM_RETURN_IF_ERROR(vma_no_payload(c));
  return fn(c);
}

static vm_status_t vma_pre_hello_too_big(uint64_t len) {
  return vm_status_make(VM_FAILED_PRECONDITION,
                        "a %llu-byte message on a connection without a session: until Hello "
                        "succeeds the agent takes messages of at most %d bytes; send Hello first",
                        (unsigned long long)len, VMA_PRE_HELLO_MAX_BYTES);
}

int vma_refuse_pre_hello(vmagent_t *a, uint32_t pipe_id, uint64_t len, vma_out_t *out) {
  atomic_fetch_add(&a->requests, 1);
  vm_status_t st = vma_pre_hello_too_big(len);
  VM_LOGD("pipe %u: %s", pipe_id, vm_status_message(st));
  int rc = vma_write_error(out, 0, st);
  vm_status_free(st);
  return rc;
}

int vma_dispatch(vmagent_t *a, uint32_t pipe_id, const uint8_t *body, size_t len, vma_out_t *out) {
  const uint8_t *env, *payload;
  size_t env_len, payload_len;
  vm_status_t st = VM_STATUS_OK;
  /* A peer that has not said Hello gets no more than Hello needs: its large
   * message is not decoded at all (the serving loop does not even store
   * one much larger, see vma_refuse_pre_hello). */
  if (len > VMA_PRE_HELLO_MAX_BYTES && !vma_pipe_has_session(a, pipe_id))
    return vma_refuse_pre_hello(a, pipe_id, len, out);
  atomic_fetch_add(&a->requests, 1);
  st = vmp_frame_split(body, len, 0, &env, &env_len, &payload, &payload_len);
  if (st) {
    VM_LOGD("pipe %u: %s", pipe_id, vm_status_message(st));
    int rc = vma_write_error(out, 0, st);
    vm_status_free(st);
    return rc;
  }
  Vmrpc__Request *rq = NULL;
  st = vmp_request_unpack(env, env_len, &rq);
  if (st) {
    VM_LOGD("pipe %u: %s", pipe_id, vm_status_message(st));
    int rc = vma_write_error(out, 0, st);
    vm_status_free(st);
    return rc;
  }

  vma_ctx_t *c = calloc(1, sizeof(*c));
  if (!c) {
    vmrpc__request__free_unpacked(rq, NULL);
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
    int rc = vma_write_error(out, 0, st);
    vm_status_free(st);
    return rc;
  }
  c->a = a;
  c->pipe_id = pipe_id;
  c->rq = rq;
  c->payload = payload;
  c->payload_len = payload_len;
  c->out = out;
  vmrpc__response__init(&c->rs);
  c->rs.id = rq->id;

  vma_handler_fn fn = vma_handler(rq->op_case);
  uint32_t flags = vmp_op_flags(rq->op_case);
  if (!fn || !vmp_request_op_msg(rq)) {
    /* An op newer than this agent arrives as an unknown field. */
    unsigned num = rq->op_case != VMRPC__REQUEST__OP__NOT_SET ? (unsigned)rq->op_case : 0;
    if (!num && rq->base.n_unknown_fields) num = rq->base.unknown_fields[0].tag;
    st = vm_status_make(VM_UNIMPLEMENTED,
                        "operation %u is not implemented by this agent (version %s, protocol "
                        "%d.%d)",
                        num, VMRPC_VERSION, VMRPC_PROTOCOL_MAJOR, VMRPC_PROTOCOL_MINOR);
  } else if (!(flags & VMP_OP_SESSION)) {
    /* Ping with a live session of this pipe keeps it from going idle. */
    if (!(flags & VMP_OP_OPENS) && rq->session) {
      vma_session_t *s = NULL;
      vm_status_t ist = vma_session_acquire(a, rq->session, pipe_id, &s);
      if (!ist) vma_session_release(a, s);
      vm_status_free(ist);
    }
    st = vma_call(c, fn, flags);
  } else if (rq->session == 0) {
    st = vm_status_make(VM_FAILED_PRECONDITION, "no session: send Hello first");
  } else {
    st = vma_session_acquire(a, rq->session, pipe_id, &c->s);
    if (!st && vma_iso_forwards(a, rq)) { /* the session's worker process serves it */
      st = vma_iso_forward(a, c->s, rq, body, len, out);
      c->replied = !st;
    } else if (!st) {
      st = vma_call(c, fn, flags);
    }
  }

  int rc = 0;
  if (st) {
    VM_LOGD("request %llu %s: %s: %s", (unsigned long long)rq->id, vmp_op_name(rq->op_case),
            vm_code_name(vm_status_code(st)), vm_status_message(st));
    rc = vma_write_error(out, rq->id, st);
    vm_status_free(st);
  } else if (!c->replied) {
    rc = vma_write(out, &c->rs);
  }
  if (c->s) vma_session_release(a, c->s);
  for (size_t i = 0; i < sizeof(c->owned) / sizeof(c->owned[0]); i++) free(c->owned[i]);
  vmrpc__request__free_unpacked(rq, NULL);
  free(c);
  return rc;
}
