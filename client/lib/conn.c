/* Connection and request/reply calls of libvmclient.
 *
 * A connection is one transport connection (tcp://, tls+tcp:// or ipc://,
 * vmtransport/conn.h) carrying nng's req0 wire format, so it talks to any
 * rep0 peer, and its multiplexer (vmtransport/mux.h): the calling thread
 * writes its request itself and then waits for the reply, reading it
 * itself when no other caller holds the reading turn. A single request
 * thus costs one write and one read on the caller's own thread, woken by
 * the kernel on its own socket. Pipelined chunk transfers put several
 * requests on the wire before waiting, with each download chunk's payload
 * read straight into the caller's tensor; long calls wait with a limit and
 * send a Cancel from the same thread.
 *
 * Message buffers come from a small per-connection pool, so chunk after
 * chunk lands in the same (already faulted-in) memory; upload payloads are
 * written straight from the caller's memory.
 *
 * Lock order: the mux's locks (vmtransport/mux.h), then conn->mu (the
 * pool and the chunk slots), which is never held across I/O.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nng/nng.h>

#include "vmrpc/file.h"
#include "vmc_internal.h"

/* Room kept before a message body (where a reply's id word is read). */
#define VMCI_HEAD 16

/* ------------------------------------------------------------------ errors */

vm_status_t vmci_nng_error(vmc_conn_t *c, int rv, const char *what, int32_t timeout_ms) {
  const char *url = c && c->url ? c->url : "?";
  switch (rv) {
    case NNG_ETIMEDOUT:
      return vm_status_make(
          VM_DEADLINE_EXCEEDED,
          "no reply from the agent at %s to %s within %d ms (request timeout): the agent may be "
          "busy or stuck; raise the timeout (--timeout MS, vmc_conn_opts_t.request_timeout_ms; "
          "long_timeout_ms for invoke/bench/profile) or check it with `vmclient ping`",
          url, what, (int)timeout_ms);
    case NNG_ECLOSED:
    case NNG_ECONNSHUT:
    case NNG_ECONNRESET:
      return vm_status_make(
          VM_UNAVAILABLE,
          "the connection to the agent at %s was lost during %s (nng: %s): the session and "
          "everything it held on the agent (executables, VMs, outputs) is gone; check that "
          "vmagent is still running, then connect again",
          url, what, nng_strerror(rv));
    case NNG_EMSGSIZE:
      return vm_status_make(VM_RESOURCE_EXHAUSTED,
                            "%s: a message exceeded the size limit (nng: %s): client and agent "
                            "disagree on the chunk size; use a vmclient matching the agent",
                            what, nng_strerror(rv));
    default: {
      vm_status_t st = vmp_nng_status(rv, what);
      return vm_status_annotate(st, "agent at %s", url);
    }
  }
}

static vm_status_t lost_status(vmc_conn_t *c, const char *what) {
  return vmci_nng_error(c, NNG_ECONNSHUT, what, 0);
}

/* ------------------------------------------------------------------ buffers */

/* A buffer for a message of size bytes: the smallest pooled one that
 * fits, else a new one. */
vmci_msg_t *vmci_msg_get(vmc_conn_t *c, size_t size) {
  if (size > SIZE_MAX - VMCI_HEAD) return NULL;
  size_t need = VMCI_HEAD + size;
  pthread_mutex_lock(&c->mu);
  vmci_msg_t **best = NULL;
  for (vmci_msg_t **pp = &c->pool; *pp; pp = &(*pp)->next)
    if ((*pp)->cap >= need && (!best || (*pp)->cap < (*best)->cap)) best = pp;
  vmci_msg_t *m = NULL;
  if (best) {
    m = *best;
    *best = m->next;
    c->pool_n--;
  }
  pthread_mutex_unlock(&c->mu);
  if (!m) {
    m = calloc(1, sizeof(*m));
    if (!m) return NULL;
    m->cap = need < 4096 ? 4096 : need;
    m->mem = malloc(m->cap);
    if (!m->mem) {
      free(m);
      return NULL;
    }
  }
  m->next = NULL;
  m->body = m->mem + VMCI_HEAD;
  m->len = size;
  m->ext = NULL;
  m->ext_len = 0;
  return m;
}

void vmci_msg_free(vmci_msg_t *m) {
  if (!m) return;
  free(m->mem);
  free(m);
}

/* Back into the pool; with the pool full, the smallest buffer goes. */
void vmci_msg_put(vmc_conn_t *c, vmci_msg_t *m) {
  if (!m) return;
  m->ext = NULL;
  pthread_mutex_lock(&c->mu);
  m->next = c->pool;
  c->pool = m;
  c->pool_n++;
  vmci_msg_t *drop = NULL;
  if (c->pool_n > VMCI_POOL_MAX) {
    vmci_msg_t **small = &c->pool;
    for (vmci_msg_t **pp = &c->pool; *pp; pp = &(*pp)->next)
      if ((*pp)->cap < (*small)->cap) small = pp;
    drop = *small;
    *small = drop->next;
    c->pool_n--;
  }
  pthread_mutex_unlock(&c->mu);
  vmci_msg_free(drop);
}

/* ------------------------------------------------------------------- frames */

void vmci_reply_free(vmci_reply_t *r) {
  if (!r) return;
  if (r->resp) vmrpc__response__free_unpacked(r->resp, NULL);
  if (r->msg) vmci_msg_put(r->conn, r->msg);
  memset(r, 0, sizeof(*r));
}

vm_status_t vmci_build(vmc_conn_t *c, Vmrpc__Request *req, const void *payload, size_t plen,
                       vmci_msg_t **out_msg) {
  req->id = (uint64_t)atomic_fetch_add(&c->next_id, 1);
  if (!(vmp_op_flags(req->op_case) & VMP_OP_OPENS)) req->session = c->session;
  size_t fs = vmp_frame_size(&req->base);
  if (fs - VMP_FRAME_HEADER > VMP_MAX_ENVELOPE)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "%s request envelope of %zu bytes exceeds the protocol limit of %u "
                          "bytes (names or lists too long)",
                          vmp_op_name(req->op_case), fs - VMP_FRAME_HEADER,
                          (unsigned)VMP_MAX_ENVELOPE);
  if (plen > SIZE_MAX - fs) return vm_status_make(VM_INVALID_ARGUMENT, "request payload too large");
  size_t total = fs + plen;
  if (c->limits.max_message_bytes && total > c->limits.max_message_bytes)
    return vm_status_make(VM_RESOURCE_EXHAUSTED,
                          "%s request of %zu bytes exceeds the agent's message limit of %llu "
                          "bytes (its --max-message)",
                          vmp_op_name(req->op_case), total,
                          (unsigned long long)c->limits.max_message_bytes);
  vmci_msg_t *m = vmci_msg_get(c, fs);
  if (!m) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory for a request message");
  vmp_frame_write(&req->base, m->body);
  m->ext = payload;
  m->ext_len = plen;
  *out_msg = m;
  return VM_STATUS_OK;
}

static const char *response_op_name(Vmrpc__Response__OpCase op) {
  for (size_t i = 0; i < vmp_num_ops; i++)
    if (vmp_ops[i].reply == op) return vmp_ops[i].name;
  return "unknown";
}

vm_status_t vmci_decode(vmc_conn_t *c, vmci_msg_t *msg, uint64_t req_id,
                        Vmrpc__Response__OpCase expect, const char *what, vmci_reply_t *out) {
  memset(out, 0, sizeof(*out));
  out->conn = c;
  out->msg = msg;
  const uint8_t *env;
  size_t env_len;
  vm_status_t st =
      vmp_frame_split(msg->body, msg->len, 0, &env, &env_len, &out->payload, &out->payload_len);
  if (!st && msg->ext) { /* the payload was read straight into place */
    out->payload = msg->ext;
    out->payload_len = msg->ext_len;
  }
  if (st) {
    vmci_reply_free(out);
    vm_status_t e = vm_status_make(VM_INTERNAL,
                                   "reply to %s from %s is malformed (%s): is the peer a vmagent "
                                   "of this protocol?",
                                   what, c->url, vm_status_message(st));
    vm_status_free(st);
    return e;
  }
  st = vmp_response_unpack(env, env_len, &out->resp);
  if (st) {
    vmci_reply_free(out);
    return vm_status_annotate(st, "%s", what);
  }
  if (out->resp->id != req_id) {
    uint64_t got = out->resp->id;
    vmci_reply_free(out);
    return vm_status_make(VM_INTERNAL,
                          "reply to %s carries id %llu, expected %llu: the agent mixed up "
                          "requests (report this bug)",
                          what, (unsigned long long)got, (unsigned long long)req_id);
  }
  st = vmp_status_from_wire(out->resp->status);
  if (st) {
    vmci_reply_free(out);
    return st;
  }
  if (out->resp->op_case != expect) {
    const char *got = response_op_name(out->resp->op_case);
    vmci_reply_free(out);
    return vm_status_make(VM_INTERNAL,
                          "reply to %s carries a %s answer, expected %s: is the agent of the "
                          "same protocol version?",
                          what, got, response_op_name(expect));
  }
  return VM_STATUS_OK;
}

/* ---------------------------------------------------------------- the wire */

static int64_t now_ns(void) {
  return vmt_mux_now_ns();
}

/* Deadline ms from now (0 when ms <= 0: none). */
static int64_t deadline_in(int32_t ms) {
  return ms > 0 ? now_ns() + (int64_t)ms * 1000000 : 0;
}

int vmci_conn_lost(vmc_conn_t *c) {
  return !c->mux_ready || vmt_mux_lost(&c->mux) != 0;
}

/* Registers k and writes msg (then returns it to the pool). Returns 0 or
 * the nng error (k is then done with it; the connection may be lost). */
static int call_send(vmc_conn_t *c, vmci_call_t *k, vmci_msg_t *m, uint64_t req_id) {
  struct iovec v[2] = {{.iov_base = m->body, .iov_len = m->len},
                       {.iov_base = (void *)m->ext, .iov_len = m->ext_len}};
  int rv = vmt_mux_send(&c->mux, k, vmt_id_make(req_id), v, m->ext_len ? 2 : 1);
  vmci_msg_put(c, m);
  return rv;
}

/* Sends req and waits up to timeout_ms (<= 0: no limit) for its reply:
 * returns the nng result and the reply message. */
static int call_sync(vmc_conn_t *c, vmci_msg_t *msg, uint64_t req_id, int32_t timeout_ms,
                     vmci_msg_t **out_reply) {
  vmci_call_t k;
  memset(&k, 0, sizeof(k));
  *out_reply = NULL;
  int64_t deadline = deadline_in(timeout_ms);
  int rv = call_send(c, &k, msg, req_id);
  if (rv) return rv;
  vmci_call_t *ks = &k;
  rv = vmt_mux_wait(&c->mux, &ks, 1, deadline);
  if (rv)
    vmt_mux_abandon(&c->mux, &k, rv);
  else
    rv = k.rv;
  *out_reply = k.reply;
  return rv;
}

vm_status_t vmci_call(vmc_conn_t *c, Vmrpc__Request *req, const void *payload, size_t plen,
                      Vmrpc__Response__OpCase expect, int32_t timeout_ms, const char *what,
                      vmci_reply_t *out) {
  return vmci_call_rv(c, req, payload, plen, expect, timeout_ms, what, out, NULL);
}

vm_status_t vmci_call_rv(vmc_conn_t *c, Vmrpc__Request *req, const void *payload, size_t plen,
                         Vmrpc__Response__OpCase expect, int32_t timeout_ms, const char *what,
                         vmci_reply_t *out, int *out_rv) {
  memset(out, 0, sizeof(*out));
  if (out_rv) *out_rv = 0;
  if (vmci_conn_lost(c)) return lost_status(c, what);
  vmci_msg_t *msg;
  VM_RETURN_IF_ERROR(vmci_build(c, req, payload, plen, &msg));
  vmci_msg_t *reply;
  int rv = call_sync(c, msg, req->id, timeout_ms, &reply);
  if (out_rv) *out_rv = rv;
  if (rv != 0) {
    vmci_msg_put(c, reply);
    return vmci_nng_error(c, rv, what, timeout_ms);
  }
  return vmci_decode(c, reply, req->id, expect, what, out);
}

vm_status_t vmci_call_long(vmc_conn_t *c, Vmrpc__Request *req, Vmrpc__Response__OpCase expect,
                           int32_t wait_ms, const char *what, void (*on_timeout)(void *arg),
                           void *arg, vmci_reply_t *out) {
  memset(out, 0, sizeof(*out));
  if (wait_ms <= 0) return vmci_call(c, req, NULL, 0, expect, 0, what, out); /* no limit */
  if (vmci_conn_lost(c)) return lost_status(c, what);
  vmci_msg_t *msg;
  VM_RETURN_IF_ERROR(vmci_build(c, req, NULL, 0, &msg));
  uint64_t id = req->id;
  vmci_call_t k;
  memset(&k, 0, sizeof(k));
  vmci_call_t *ks = &k;
  int64_t deadline = deadline_in(wait_ms);
  int rv = call_send(c, &k, msg, id);
  if (rv) return vmci_nng_error(c, rv, what, wait_ms);
  int gave_up = vmt_mux_wait(&c->mux, &ks, 1, deadline) == NNG_ETIMEDOUT;
  int confirmed = 0;
  if (gave_up) {
    /* Stop the run on the agent, then give its reply (CANCELLED) a
     * bounded time to arrive so the VM is idle when we return. The call
     * stays registered meanwhile: whoever reads its reply completes it. */
    if (on_timeout) on_timeout(arg);
    confirmed = vmt_mux_wait(&c->mux, &ks, 1, deadline_in(c->request_timeout_ms)) == 0;
  }
  vmt_mux_abandon(&c->mux, &k, NNG_ETIMEDOUT);
  rv = k.rv;
  vmci_msg_t *reply = k.reply;
  if (gave_up) {
    if (reply) {
      /* A run that finished just as we gave up counts as done. */
      vm_status_t dst = vmci_decode(c, reply, id, expect, what, out);
      if (!dst) return VM_STATUS_OK;
      vm_status_free(dst);
    }
    return vm_status_make(
        VM_DEADLINE_EXCEEDED,
        "no reply from the agent at %s to %s within %d ms (long_timeout_ms): %s; raise the "
        "limit (--timeout MS, vmc_conn_opts_t.long_timeout_ms) or pass a deadline",
        c->url, what, (int)wait_ms,
        confirmed ? "the client gave up and cancelled the run on the agent"
                  : "the client gave up and asked the agent to cancel the run, but it did not "
                    "confirm: the VM may still be busy");
  }
  if (rv != 0) {
    vmci_msg_put(c, reply);
    return vmci_nng_error(c, rv, what, wait_ms);
  }
  return vmci_decode(c, reply, id, expect, what, out);
}

/* ----------------------------------------------------------------- pipeline */

static void slot_release(vmc_conn_t *c) {
  pthread_mutex_lock(&c->mu);
  c->slots_free++;
  pthread_cond_signal(&c->slot_cv);
  pthread_mutex_unlock(&c->mu);
}

/* Takes a chunk slot: blocks when block is set, else returns 0 if none is
 * free. Returns -1 if the connection was lost. */
static int slot_take(vmc_conn_t *c, int block) {
  pthread_mutex_lock(&c->mu);
  for (;;) {
    if (vmt_mux_lost(&c->mux)) {
      pthread_mutex_unlock(&c->mu);
      return -1;
    }
    if (c->slots_free > 0) {
      c->slots_free--;
      pthread_mutex_unlock(&c->mu);
      return 1;
    }
    if (!block) {
      pthread_mutex_unlock(&c->mu);
      return 0;
    }
    pthread_cond_wait(&c->slot_cv, &c->mu);
  }
}

vm_status_t vmci_pipeline_run(vmc_conn_t *c, const vmci_pipeline_t *p) {
  uint32_t window = c->limits.max_inflight_chunks;
  if (window == 0) window = 1;
  if (window > VMCI_MAX_INFLIGHT) window = VMCI_MAX_INFLIGHT;
  vmci_call_t calls[VMCI_MAX_INFLIGHT];
  memset(calls, 0, sizeof(calls));
  vmci_call_t *inflight[VMCI_MAX_INFLIGHT];
  vmci_call_t *spare[VMCI_MAX_INFLIGHT];
  uint64_t req_ids[VMCI_MAX_INFLIGHT];
  uint32_t n_inflight = 0, n_spare = window;
  for (uint32_t i = 0; i < window; i++) spare[i] = &calls[i];
  uint64_t next = 0;
  uint64_t bytes_done = 0;
  vm_status_t first_err = VM_STATUS_OK;
  int32_t timeout_ms = c->request_timeout_ms;

  while ((next < p->count && !first_err) || n_inflight > 0) {
    /* Start as many chunks as the window and the connection's slots allow;
     * with nothing in flight, wait for a slot. */
    while (next < p->count && !first_err && n_inflight < window) {
      int got = slot_take(c, n_inflight == 0);
      if (got < 0) {
        first_err = lost_status(c, p->what);
        break;
      }
      if (got == 0) break;
      vmci_msg_t *msg;
      uint64_t req_id;
      vm_status_t st = p->make(p->ctx, next, &msg, &req_id);
      if (st) {
        slot_release(c);
        first_err = st;
        break;
      }
      vmci_call_t *k = spare[--n_spare];
      k->tag = next;
      k->dst = p->dest ? p->dest(p->ctx, next) : NULL;
      k->dst_len = k->dst ? (size_t)p->chunk_size(p->ctx, next) : 0;
      req_ids[k - calls] = req_id;
      inflight[n_inflight++] = k;
      next++;
      /* A failed send completes k (the connection is lost) and is
       * reported below like any other failed chunk. */
      if (call_send(c, k, msg, req_id) != 0) break;
    }
    if (n_inflight == 0) break;
    /* Wait for any of ours to complete, then handle every completed one. */
    int rv = vmt_mux_wait(&c->mux, inflight, n_inflight, deadline_in(timeout_ms));
    if (rv == NNG_ETIMEDOUT)
      for (uint32_t i = 0; i < n_inflight; i++) vmt_mux_abandon(&c->mux, inflight[i], NNG_ETIMEDOUT);
    for (uint32_t i = 0; i < n_inflight;) {
      vmci_call_t *k = inflight[i];
      if (!vmt_mux_is_done(&c->mux, k)) {
        i++;
        continue;
      }
      uint64_t idx = k->tag;
      inflight[i] = inflight[--n_inflight];
      spare[n_spare++] = k;
      slot_release(c);
      vm_status_t st;
      if (k->rv != 0) {
        vmci_msg_put(c, k->reply);
        char what[96];
        snprintf(what, sizeof(what), "%s (chunk %llu)", p->what, (unsigned long long)idx);
        st = vmci_nng_error(c, k->rv, what, timeout_ms);
      } else {
        vmci_reply_t r;
        st = vmci_decode(c, k->reply, req_ids[k - calls], p->expect, p->what, &r);
        if (!st) {
          st = p->done(p->ctx, idx, &r);
          vmci_reply_free(&r);
        }
      }
      k->reply = NULL;
      if (st) {
        if (!first_err) {
          first_err = st;
          /* Stop waiting for the others: their results no longer matter
           * (replies that still come are dropped). */
          for (uint32_t j = 0; j < n_inflight; j++)
            vmt_mux_abandon(&c->mux, inflight[j], NNG_ECANCELED);
        } else {
          vm_status_free(st);
        }
        continue;
      }
      if (!first_err) {
        bytes_done += p->chunk_size(p->ctx, idx);
        if (p->progress) p->progress(bytes_done, p->progress_total, p->user);
      }
    }
  }
  return first_err;
}

/* ---------------------------------------------------------------- meta */

void vmci_meta_from_tensor(const vmc_tensor_t *t, Vmrpc__TensorMeta *meta, int64_t *dims_buf,
                           char *dtype_buf, size_t dtype_buf_len) {
  vmrpc__tensor_meta__init(meta);
  vm_dtype_str(t->dtype, dtype_buf, dtype_buf_len);
  meta->dtype = dtype_buf;
  for (uint32_t i = 0; i < t->ndim; i++) dims_buf[i] = t->shape[i];
  meta->n_shape = t->ndim;
  meta->shape = dims_buf;
  meta->nbytes = t->nbytes;
}
