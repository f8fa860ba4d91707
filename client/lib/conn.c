/* Connection, channels and request/reply transport of libvmclient.
 *
 * A connection is one nng req0 socket with one dialer. Every request runs
 * on a "channel" (an nng context + aio) taken from a per-connection pool, so
 * any number of threads can have requests in flight at once; the pool grows
 * on demand and channels are reused. The aio callback moves a channel from
 * send to receive and then signals its waiter; the caller's thread decodes
 * the reply, so payload copies happen there, straight into the destination.
 *
 * Lock order: conn->mu before waiter->mu. The aio callback takes conn->mu
 * only around starting the receive (so that a connection loss observed by
 * the pipe callback either sees the channel busy and aborts it, or the
 * callback sees the loss and does not start the receive). Neither lock is
 * held across network waits.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>

#include "vm/base.h"
#include "vmc_internal.h"

#ifndef VMRPC_VERSION
#define VMRPC_VERSION "0"
#endif

nng_duration vmci_duration(int32_t ms) {
  return ms > 0 ? (nng_duration)ms : NNG_DURATION_INFINITE;
}

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

/* ---------------------------------------------------------------- channels */

static void chan_finish(vmci_chan_t *ch, int rv, nng_msg *reply) {
  vmci_waiter_t *w = ch->waiter;
  pthread_mutex_lock(&w->mu);
  ch->rv = rv;
  ch->reply = reply;
  ch->done = 1;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

static void chan_cb(void *arg) {
  vmci_chan_t *ch = arg;
  int rv = nng_aio_result(ch->aio);
  if (ch->sending) {
    if (rv != 0) {
      /* A failed send leaves the message with us. */
      nng_msg *m = nng_aio_get_msg(ch->aio);
      nng_aio_set_msg(ch->aio, NULL);
      if (m) nng_msg_free(m);
      chan_finish(ch, rv, NULL);
      return;
    }
    ch->sending = 0;
    vmc_conn_t *c = ch->conn;
    pthread_mutex_lock(&c->mu);
    int lost = c->lost;
    if (!lost) nng_ctx_recv(ch->ctx, ch->aio);
    pthread_mutex_unlock(&c->mu);
    if (lost) chan_finish(ch, NNG_ECONNSHUT, NULL);
    return;
  }
  nng_msg *m = NULL;
  if (rv == 0) {
    m = nng_aio_get_msg(ch->aio);
    nng_aio_set_msg(ch->aio, NULL);
  }
  chan_finish(ch, rv, m);
}

static void chan_destroy(vmci_chan_t *ch) {
  if (!ch) return;
  if (ch->aio) nng_aio_free(ch->aio);
  if (ch->saio) nng_aio_free(ch->saio);
  free(ch);
}

/* Takes a free channel or opens a new one. */
static vm_status_t chan_acquire(vmc_conn_t *c, vmci_chan_t **out) {
  pthread_mutex_lock(&c->mu);
  for (uint32_t i = 0; i < c->num_chans; i++) {
    if (!c->chans[i]->busy) {
      c->chans[i]->busy = 1;
      *out = c->chans[i];
      pthread_mutex_unlock(&c->mu);
      return VM_STATUS_OK;
    }
  }
  if (c->num_chans >= VMCI_MAX_CHANNELS) {
    pthread_mutex_unlock(&c->mu);
    return vm_status_make(VM_RESOURCE_EXHAUSTED,
                          "%d requests are already in flight on this connection; wait for "
                          "some to finish or open another connection",
                          VMCI_MAX_CHANNELS);
  }
  if (c->num_chans == c->cap_chans) {
    uint32_t ncap = c->cap_chans ? c->cap_chans * 2 : 16;
    vmci_chan_t **n = realloc(c->chans, ncap * sizeof(*n));
    if (!n) {
      pthread_mutex_unlock(&c->mu);
      return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory for a request channel");
    }
    c->chans = n;
    c->cap_chans = ncap;
  }
  vmci_chan_t *ch = calloc(1, sizeof(*ch));
  if (!ch) {
    pthread_mutex_unlock(&c->mu);
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory for a request channel");
  }
  ch->conn = c;
  int rv = nng_aio_alloc(&ch->aio, chan_cb, ch);
  if (rv == 0) rv = nng_aio_alloc(&ch->saio, NULL, NULL);
  if (rv == 0) rv = nng_ctx_open(&ch->ctx, c->sock);
  if (rv == 0) rv = nng_ctx_set_ms(ch->ctx, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
  if (rv != 0) {
    pthread_mutex_unlock(&c->mu);
    chan_destroy(ch);
    return vmci_nng_error(c, rv, "opening a request context", 0);
  }
  ch->busy = 1;
  c->chans[c->num_chans++] = ch;
  pthread_mutex_unlock(&c->mu);
  *out = ch;
  return VM_STATUS_OK;
}

static void chan_release(vmc_conn_t *c, vmci_chan_t *ch) {
  pthread_mutex_lock(&c->mu);
  ch->busy = 0;
  ch->waiter = NULL;
  pthread_mutex_unlock(&c->mu);
}

/* Starts msg on ch (takes msg). The completion is reported to w. */
static void chan_start(vmci_chan_t *ch, vmci_waiter_t *w, nng_msg *msg, int32_t timeout_ms) {
  ch->waiter = w;
  ch->done = 0;
  ch->rv = 0;
  ch->reply = NULL;
  ch->sending = 1;
  nng_aio_set_timeout(ch->aio, vmci_duration(timeout_ms));
  nng_aio_set_msg(ch->aio, msg);
  nng_ctx_send(ch->ctx, ch->aio);
}

static void waiter_init(vmci_waiter_t *w) {
  pthread_mutex_init(&w->mu, NULL);
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(&w->cv, &a);
  pthread_condattr_destroy(&a);
}

/* Waits until ch is done or ms (> 0) have passed; returns ch->done. Call
 * with w->mu held. */
static int wait_done_for(vmci_chan_t *ch, vmci_waiter_t *w, int32_t ms) {
  struct timespec dl;
  clock_gettime(CLOCK_MONOTONIC, &dl);
  dl.tv_sec += ms / 1000;
  dl.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (dl.tv_nsec >= 1000000000L) {
    dl.tv_sec++;
    dl.tv_nsec -= 1000000000L;
  }
  while (!ch->done)
    if (pthread_cond_timedwait(&w->cv, &w->mu, &dl) == ETIMEDOUT) break;
  return ch->done;
}

static void waiter_fini(vmci_waiter_t *w) {
  pthread_cond_destroy(&w->cv);
  pthread_mutex_destroy(&w->mu);
}

/* ------------------------------------------------------------------- frames */

void vmci_reply_free(vmci_reply_t *r) {
  if (!r) return;
  if (r->resp) vmrpc__response__free_unpacked(r->resp, NULL);
  if (r->msg) nng_msg_free(r->msg);
  memset(r, 0, sizeof(*r));
}

vm_status_t vmci_build(vmc_conn_t *c, Vmrpc__Request *req, const void *payload, size_t plen,
                       nng_msg **out_msg) {
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
  nng_msg *m;
  int rv = nng_msg_alloc(&m, total);
  if (rv != 0) return vmci_nng_error(c, rv, "allocating a request message", 0);
  uint8_t *body = nng_msg_body(m);
  vmp_frame_write(&req->base, body);
  if (plen) memcpy(body + fs, payload, plen);
  *out_msg = m;
  return VM_STATUS_OK;
}

static const char *response_op_name(Vmrpc__Response__OpCase op) {
  for (size_t i = 0; i < vmp_num_ops; i++)
    if (vmp_ops[i].reply == op) return vmp_ops[i].name;
  return "unknown";
}

vm_status_t vmci_decode(vmc_conn_t *c, nng_msg *msg, uint64_t req_id,
                        Vmrpc__Response__OpCase expect, const char *what, vmci_reply_t *out) {
  memset(out, 0, sizeof(*out));
  out->msg = msg;
  const uint8_t *env;
  size_t env_len;
  vm_status_t st = vmp_frame_split(nng_msg_body(msg), nng_msg_len(msg), 0, &env, &env_len,
                                   &out->payload, &out->payload_len);
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

static int conn_lost(vmc_conn_t *c) {
  pthread_mutex_lock(&c->mu);
  int lost = c->lost;
  pthread_mutex_unlock(&c->mu);
  return lost;
}

/* Builds req (+ payload) and starts it on a channel of its own, whose
 * completion w signals. */
static vm_status_t call_start(vmc_conn_t *c, Vmrpc__Request *req, const void *payload, size_t plen,
                              int32_t timeout_ms, const char *what, vmci_waiter_t *w,
                              vmci_chan_t **out_ch) {
  if (conn_lost(c)) return lost_status(c, what);
  nng_msg *msg;
  VM_RETURN_IF_ERROR(vmci_build(c, req, payload, plen, &msg));
  vm_status_t st = chan_acquire(c, out_ch);
  if (st) {
    nng_msg_free(msg);
    return st;
  }
  waiter_init(w);
  chan_start(*out_ch, w, msg, timeout_ms);
  return VM_STATUS_OK;
}

/* Waits until a started call completes and lets its channel go: returns
 * the nng result, and the reply (if any) in *out_reply. */
static int call_finish(vmc_conn_t *c, vmci_chan_t *ch, vmci_waiter_t *w, nng_msg **out_reply) {
  pthread_mutex_lock(&w->mu);
  while (!ch->done) pthread_cond_wait(&w->cv, &w->mu);
  int rv = ch->rv;
  *out_reply = ch->reply;
  pthread_mutex_unlock(&w->mu);
  chan_release(c, ch);
  waiter_fini(w);
  return rv;
}

vm_status_t vmci_call(vmc_conn_t *c, Vmrpc__Request *req, const void *payload, size_t plen,
                      Vmrpc__Response__OpCase expect, int32_t timeout_ms, const char *what,
                      vmci_reply_t *out) {
  return vmci_call_rv(c, req, payload, plen, expect, timeout_ms, what, out, NULL);
}

/* One request on ch, waited for by the calling thread on the channel's
 * callback-free aio: nng then wakes this thread straight from the thread
 * that completes the operation. (The callback aio of pipelines first hands
 * the completion to one of nng's task threads, which then has to wake the
 * caller: measured on loopback, 5-6 more context switches and ~15% more
 * CPU per round trip; docs/performance.md.) Takes msg. Returns the nng
 * result; the reply in *out_reply. */
static int call_sync(vmc_conn_t *c, vmci_chan_t *ch, nng_msg *msg, int32_t timeout_ms,
                     nng_msg **out_reply) {
  nng_aio *a = ch->saio;
  *out_reply = NULL;
  nng_aio_set_timeout(a, vmci_duration(timeout_ms));
  nng_aio_set_msg(a, msg);
  nng_ctx_send(ch->ctx, a);
  nng_aio_wait(a);
  int rv = nng_aio_result(a);
  if (rv != 0) {
    nng_msg *m = nng_aio_get_msg(a); /* a failed send leaves the message with us */
    nng_aio_set_msg(a, NULL);
    if (m) nng_msg_free(m);
    return rv;
  }
  /* As in chan_cb: a connection loss seen by pipe_cb either finds the
   * receive started (and aborts it) or is seen here. */
  pthread_mutex_lock(&c->mu);
  int lost = c->lost;
  if (!lost) nng_ctx_recv(ch->ctx, a);
  pthread_mutex_unlock(&c->mu);
  if (lost) return NNG_ECONNSHUT;
  nng_aio_wait(a);
  rv = nng_aio_result(a);
  if (rv == 0) {
    *out_reply = nng_aio_get_msg(a);
    nng_aio_set_msg(a, NULL);
  }
  return rv;
}

vm_status_t vmci_call_rv(vmc_conn_t *c, Vmrpc__Request *req, const void *payload, size_t plen,
                         Vmrpc__Response__OpCase expect, int32_t timeout_ms, const char *what,
                         vmci_reply_t *out, int *out_rv) {
  memset(out, 0, sizeof(*out));
  if (out_rv) *out_rv = 0;
  if (conn_lost(c)) return lost_status(c, what);
  nng_msg *msg;
  VM_RETURN_IF_ERROR(vmci_build(c, req, payload, plen, &msg));
  vmci_chan_t *ch;
  vm_status_t st = chan_acquire(c, &ch);
  if (st) {
    nng_msg_free(msg);
    return st;
  }
  nng_msg *reply;
  int rv = call_sync(c, ch, msg, timeout_ms, &reply);
  chan_release(c, ch);
  if (out_rv) *out_rv = rv;
  if (rv != 0) return vmci_nng_error(c, rv, what, timeout_ms);
  return vmci_decode(c, reply, req->id, expect, what, out);
}

vm_status_t vmci_call_long(vmc_conn_t *c, Vmrpc__Request *req, Vmrpc__Response__OpCase expect,
                           int32_t wait_ms, const char *what, void (*on_timeout)(void *arg),
                           void *arg, vmci_reply_t *out) {
  memset(out, 0, sizeof(*out));
  if (wait_ms <= 0) return vmci_call(c, req, NULL, 0, expect, 0, what, out); /* no limit */
  vmci_chan_t *ch = NULL;
  vmci_waiter_t w;
  VM_RETURN_IF_ERROR(call_start(c, req, NULL, 0, 0, what, &w, &ch));
  uint64_t id = req->id;
  pthread_mutex_lock(&w.mu);
  int gave_up = !wait_done_for(ch, &w, wait_ms);
  pthread_mutex_unlock(&w.mu);
  int confirmed = 0;
  if (gave_up) {
    /* Stop the run on the agent, then give its reply (CANCELLED) a
     * bounded time to arrive so the VM is idle when we return. */
    if (on_timeout) on_timeout(arg);
    pthread_mutex_lock(&w.mu);
    confirmed = wait_done_for(ch, &w, c->request_timeout_ms);
    pthread_mutex_unlock(&w.mu);
    if (!confirmed) nng_aio_cancel(ch->aio);
  }
  nng_msg *reply;
  int rv = call_finish(c, ch, &w, &reply);
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
  if (rv != 0) return vmci_nng_error(c, rv, what, wait_ms);
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
    if (c->lost) {
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
  vmci_chan_t *inflight[VMCI_MAX_INFLIGHT];
  uint32_t n_inflight = 0;
  uint64_t next = 0;
  uint64_t bytes_done = 0;
  vm_status_t first_err = VM_STATUS_OK;
  int32_t timeout_ms = c->request_timeout_ms;
  vmci_waiter_t w;
  waiter_init(&w);

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
      nng_msg *msg;
      uint64_t req_id;
      vm_status_t st = p->make(p->ctx, next, &msg, &req_id);
      vmci_chan_t *ch = NULL;
      if (!st) {
        st = chan_acquire(c, &ch);
        if (st) nng_msg_free(msg);
      }
      if (st) {
        slot_release(c);
        first_err = st;
        break;
      }
      ch->tag = next;
      ch->req_id = req_id;
      chan_start(ch, &w, msg, timeout_ms);
      inflight[n_inflight++] = ch;
      next++;
    }
    if (n_inflight == 0) break;
    /* Wait for any of ours to complete, then handle every completed one. */
    pthread_mutex_lock(&w.mu);
    for (;;) {
      int any = 0;
      for (uint32_t i = 0; i < n_inflight; i++) any |= inflight[i]->done;
      if (any) break;
      pthread_cond_wait(&w.cv, &w.mu);
    }
    pthread_mutex_unlock(&w.mu);
    for (uint32_t i = 0; i < n_inflight;) {
      vmci_chan_t *ch = inflight[i];
      pthread_mutex_lock(&w.mu);
      int done = ch->done;
      int rv = ch->rv;
      nng_msg *reply = ch->reply;
      pthread_mutex_unlock(&w.mu);
      if (!done) {
        i++;
        continue;
      }
      uint64_t idx = ch->tag;
      uint64_t req_id = ch->req_id;
      chan_release(c, ch);
      slot_release(c);
      inflight[i] = inflight[--n_inflight];
      vm_status_t st;
      if (rv != 0) {
        char what[96];
        snprintf(what, sizeof(what), "%s (chunk %llu)", p->what, (unsigned long long)idx);
        st = vmci_nng_error(c, rv, what, timeout_ms);
      } else {
        vmci_reply_t r;
        st = vmci_decode(c, reply, req_id, p->expect, p->what, &r);
        if (!st) {
          st = p->done(p->ctx, idx, &r);
          vmci_reply_free(&r);
        }
      }
      if (st) {
        if (!first_err) {
          first_err = st;
          /* Stop the others quickly: their results no longer matter. */
          for (uint32_t j = 0; j < n_inflight; j++) nng_aio_cancel(inflight[j]->aio);
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
  waiter_fini(&w);
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

/* --------------------------------------------------------------- connect */

static void pipe_cb(nng_pipe p, nng_pipe_ev ev, void *arg) {
  (void)p;
  vmc_conn_t *c = arg;
  pthread_mutex_lock(&c->mu);
  if (ev == NNG_PIPE_EV_ADD_POST) {
    c->had_pipe = 1;
  } else if (ev == NNG_PIPE_EV_REM_POST && c->had_pipe && !c->closing) {
    /* The session died with the pipe (the agent tears it down): fail
     * every request in flight now instead of letting req0 resend it on a
     * new pipe, and every later one at once. */
    c->lost = 1;
    for (uint32_t i = 0; i < c->num_chans; i++)
      if (c->chans[i]->busy) {
        nng_aio_abort(c->chans[i]->aio, NNG_ECONNSHUT);
        nng_aio_abort(c->chans[i]->saio, NNG_ECONNSHUT);
      }
    pthread_cond_broadcast(&c->slot_cv);
  }
  pthread_mutex_unlock(&c->mu);
}

typedef struct dial_job {
  nng_dialer dialer;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done;
  int rv;
} dial_job_t;

static void *dial_thread(void *arg) {
  dial_job_t *j = arg;
  int rv = nng_dialer_start(j->dialer, 0);
  pthread_mutex_lock(&j->mu);
  j->rv = rv;
  j->done = 1;
  pthread_cond_signal(&j->cv);
  pthread_mutex_unlock(&j->mu);
  return NULL;
}

static char *dup_str(const char *s) {
  s = s ? s : "";
  size_t n = strlen(s);
  char *d = malloc(n + 1);
  if (d) memcpy(d, s, n + 1);
  return d;
}

static void copy_str(char *dst, size_t cap, const char *src) {
  snprintf(dst, cap, "%s", src ? src : "");
}

static vm_status_t read_pem(const char *path, const char *what, char **out) {
  uint8_t *data;
  size_t size;
  vm_status_t st = vm_read_file(path, 1u << 20, &data, &size);
  if (st) {
    /* Missing: NOT_FOUND; any other reason it cannot be read (permissions,
     * a directory, too big): PERMISSION_DENIED. Both are I/O errors to the
     * CLI (exit 4), not usage errors. */
    if (vm_status_code(st) != VM_NOT_FOUND) {
      vm_status_t io = vm_status_make(VM_PERMISSION_DENIED, "%s", vm_status_message(st));
      vm_status_free(st);
      st = io;
    }
    return vm_status_annotate(st, "reading the %s", what);
  }
  char *s = malloc(size + 1);
  if (!s) {
    free(data);
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory reading the %s", what);
  }
  memcpy(s, data, size);
  s[size] = '\0';
  free(data);
  *out = s;
  return VM_STATUS_OK;
}

/* The trust anchors of a tls+tcp:// connection (see vmc_conn_opts_t):
 * pinned certificate, CA file, system store, or (insecure) nothing. */
static vm_status_t tls_trust(vmc_conn_t *c, const vmc_conn_opts_t *o, nng_tls_config *cfg,
                             const nng_url *u) {
  int has_ca = o->tls_ca_file && o->tls_ca_file[0], has_pin = o->tls_pin && o->tls_pin[0];
  if (has_ca + has_pin + (o->tls_insecure != 0) > 1)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "give at most one of --tls-ca, --tls-pin and --tls-insecure");
  int rv;
  if (o->tls_insecure) {
    rv = nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_NONE);
    return rv ? vmp_nng_status(rv, "disabling TLS verification") : VM_STATUS_OK;
  }
  char *pem = NULL;
  const char *what;
  if (has_pin) {
    uint8_t pin[32];
    VM_RETURN_IF_ERROR(vmci_tls_pin_parse(o->tls_pin, pin));
    const char *port = u->u_port && u->u_port[0] ? u->u_port : "443";
    VM_RETURN_IF_ERROR(vmci_tls_probe_pin(c->url, u->u_hostname, port, c->connect_timeout_ms,
                                          o->tls_pin, pin, &pem));
    /* No host name check: the pinned key is the identity. */
    what = "the pinned certificate";
  } else {
    what = has_ca ? o->tls_ca_file : vmci_tls_system_ca();
    if (!what)
      return vm_status_make(VM_FAILED_PRECONDITION,
                            "no system CA store to verify the agent's certificate with (looked "
                            "at $SSL_CERT_FILE and /etc/ssl/certs/ca-certificates.crt ...): give "
                            "--tls-ca FILE or --tls-pin sha256:HEX (or, on a trusted network "
                            "only, --tls-insecure)");
    VM_RETURN_IF_ERROR(read_pem(what, has_ca ? "TLS CA file" : "system CA store", &pem));
    nng_tls_config_server_name(cfg, u->u_hostname);
  }
  vm_status_t st = VM_STATUS_OK;
  rv = nng_tls_config_ca_chain(cfg, pem, NULL);
  if (rv)
    st = vm_status_make(VM_INVALID_ARGUMENT,
                        "cannot use '%s' as TLS trust anchors: %s (expected PEM certificates)",
                        what, nng_strerror(rv));
  else if ((rv = nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_REQUIRED)))
    st = vmp_nng_status(rv, "requiring TLS verification");
  free(pem);
  return st;
}

static vm_status_t tls_setup(vmc_conn_t *c, const vmc_conn_opts_t *o) {
  nng_url *u = NULL;
  nng_tls_config *cfg = NULL;
  char *cert = NULL, *key = NULL;
  vm_status_t st = VM_STATUS_OK;
  int rv = nng_tls_config_alloc(&cfg, NNG_TLS_MODE_CLIENT);
  if (rv) {
    st = vmci_nng_error(c, rv, "setting up TLS (is nng built with TLS support?)", 0);
    goto done;
  }
  if (nng_url_parse(&u, c->url) != 0 || !u->u_hostname || !u->u_hostname[0]) {
    st = vm_status_make(VM_INVALID_ARGUMENT, "'%s' names no host: use tls+tcp://HOST:PORT", c->url);
    goto done;
  }
  if ((st = tls_trust(c, o, cfg, u))) goto done;
  int has_cert = o->tls_cert && o->tls_cert[0], has_key = o->tls_key && o->tls_key[0];
  if (has_cert != has_key) {
    st = vm_status_make(VM_INVALID_ARGUMENT,
                        "a TLS client certificate needs both --tls-cert and --tls-key");
    goto done;
  }
  if (has_cert) {
    if ((st = read_pem(o->tls_cert, "TLS client certificate", &cert))) goto done;
    if ((st = read_pem(o->tls_key, "TLS client key", &key))) goto done;
    rv = nng_tls_config_own_cert(cfg, cert, key, NULL);
    if (rv) {
      st = vm_status_make(VM_INVALID_ARGUMENT,
                          "cannot use the TLS certificate '%s' with key '%s': %s (expected PEM "
                          "files that belong together)",
                          o->tls_cert, o->tls_key, nng_strerror(rv));
      goto done;
    }
  }
  rv = nng_dialer_set_ptr(c->dialer, NNG_OPT_TLS_CONFIG, cfg);
  if (rv) st = vmci_nng_error(c, rv, "configuring TLS on the dialer", 0);
done:
  if (key) {
    memset(key, 0, strlen(key));
    free(key);
  }
  free(cert);
  if (u) nng_url_free(u);
  if (cfg) nng_tls_config_free(cfg); /* the dialer holds its own reference */
  return st;
}

/* Dials with a bound on the wait: the blocking dial runs on a helper thread
 * so that a black-holed address cannot hold the caller past the timeout. */
static vm_status_t dial(vmc_conn_t *c) {
  dial_job_t j;
  memset(&j, 0, sizeof(j));
  j.dialer = c->dialer;
  pthread_mutex_init(&j.mu, NULL);
  pthread_cond_init(&j.cv, NULL);
  pthread_t th;
  if (pthread_create(&th, NULL, dial_thread, &j) != 0) {
    pthread_cond_destroy(&j.cv);
    pthread_mutex_destroy(&j.mu);
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "cannot start a thread to connect");
  }
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += c->connect_timeout_ms / 1000;
  deadline.tv_nsec += (long)(c->connect_timeout_ms % 1000) * 1000000L;
  if (deadline.tv_nsec >= 1000000000L) {
    deadline.tv_sec++;
    deadline.tv_nsec -= 1000000000L;
  }
  int timed_out = 0;
  pthread_mutex_lock(&j.mu);
  while (!j.done) {
    if (pthread_cond_timedwait(&j.cv, &j.mu, &deadline) == ETIMEDOUT && !j.done) {
      timed_out = 1;
      break;
    }
  }
  pthread_mutex_unlock(&j.mu);
  if (timed_out) {
    /* Closing the dialer aborts the blocked attempt. */
    nng_dialer_close(c->dialer);
  }
  pthread_join(th, NULL);
  pthread_cond_destroy(&j.cv);
  pthread_mutex_destroy(&j.mu);
  if (timed_out)
    return vm_status_make(VM_DEADLINE_EXCEEDED,
                          "could not connect to the agent at %s within %d ms (connect timeout): "
                          "check the host, the port and any firewall, and that a vmagent (not "
                          "another service) listens there, or raise the timeout "
                          "(--connect-timeout MS, vmc_conn_opts_t.connect_timeout_ms)",
                          c->url, (int)c->connect_timeout_ms);
  if (j.rv == 0) return VM_STATUS_OK;
  switch (j.rv) {
    case NNG_ECONNREFUSED:
      return vm_status_make(VM_UNAVAILABLE,
                            "cannot reach the agent at %s: %s — is vmagent running? start it "
                            "with `vmagent --listen %s`",
                            c->url, nng_strerror(j.rv), c->url);
    case NNG_EADDRINVAL:
    case NNG_EINVAL:
      return vm_status_make(VM_INVALID_ARGUMENT,
                            "cannot connect to '%s': %s — check that the host name resolves "
                            "and that the URL reads tcp://HOST:PORT, tls+tcp://HOST:PORT or "
                            "ipc:///PATH",
                            c->url, nng_strerror(j.rv));
    case NNG_EUNREACHABLE:
    case NNG_ETIMEDOUT:
    case NNG_EPROTO:
      return vm_status_make(VM_UNAVAILABLE,
                            "cannot reach the agent at %s: %s (nng error %d) — check the "
                            "address, the network and any firewall, and that a vmagent (not "
                            "another service) listens there",
                            c->url, nng_strerror(j.rv), j.rv);
    case NNG_EPEERAUTH:
    case NNG_ECRYPTO:
      return vm_status_make(VM_UNAVAILABLE,
                            "TLS handshake with the agent at %s failed: %s — its certificate "
                            "must be signed by --tls-ca (default: the system CA store) and name "
                            "the host, or match --tls-pin sha256:HEX; check also that the agent "
                            "listens on tls+tcp://",
                            c->url, nng_strerror(j.rv));
    default:
      return vm_status_make(VM_UNAVAILABLE,
                            "cannot reach the agent at %s: %s (nng error %d) — is vmagent "
                            "running there? start it with `vmagent --listen %s`",
                            c->url, nng_strerror(j.rv), j.rv, c->url);
  }
}

static vm_status_t hello(vmc_conn_t *c, const vmc_conn_opts_t *o) {
  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__HelloRequest h = VMRPC__HELLO_REQUEST__INIT;
  h.protocol_major = VMRPC_PROTOCOL_MAJOR;
  h.protocol_minor = VMRPC_PROTOCOL_MINOR;
  h.client_name =
      (char *)(o->client_name && o->client_name[0] ? o->client_name : "libvmclient/" VMRPC_VERSION);
  h.token = (char *)(o->token ? o->token : "");
  req.op_case = VMRPC__REQUEST__OP_HELLO;
  req.hello = &h;
  vmci_reply_t r;
  int rv;
  vm_status_t cst = vmci_call_rv(c, &req, NULL, 0, VMRPC__RESPONSE__OP_HELLO, c->connect_timeout_ms,
                                 "Hello", &r, &rv);
  if (cst && rv == NNG_ETIMEDOUT) {
    vm_status_free(cst);
    return vm_status_make(VM_DEADLINE_EXCEEDED,
                          "connected to %s but no vmrpc Hello reply within %d ms (connect "
                          "timeout): is a vmagent listening there (and not some other service)? "
                          "If it is busy, raise the timeout (--connect-timeout MS, "
                          "vmc_conn_opts_t.connect_timeout_ms)",
                          c->url, (int)c->connect_timeout_ms);
  }
  if (cst) return cst;
  const Vmrpc__HelloResponse *hr = r.resp->hello;
  vm_status_t st = VM_STATUS_OK;
  if (!hr) {
    st = vm_status_make(VM_INTERNAL, "the agent at %s sent an empty Hello reply", c->url);
    goto done;
  }
  if (hr->protocol_major != VMRPC_PROTOCOL_MAJOR) {
    st = vm_status_make(VM_FAILED_PRECONDITION,
                        "the agent at %s speaks protocol %u.%u, this client %d.%d: use a "
                        "vmclient of the agent's major version (or upgrade the agent)",
                        c->url, hr->protocol_major, hr->protocol_minor, VMRPC_PROTOCOL_MAJOR,
                        VMRPC_PROTOCOL_MINOR);
    goto done;
  }
  if (hr->session == 0) {
    st = vm_status_make(VM_INTERNAL, "the agent at %s opened no session (session id 0)", c->url);
    goto done;
  }
  c->protocol_major = hr->protocol_major;
  c->protocol_minor = hr->protocol_minor;
  c->agent_version = dup_str(hr->agent_version);
  if (!c->agent_version) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
    goto done;
  }
  if (hr->n_devices > 1024) {
    st = vm_status_make(VM_INTERNAL, "the agent at %s lists %zu devices; at most 1024 expected",
                        c->url, hr->n_devices);
    goto done;
  }
  c->num_devices = (uint32_t)hr->n_devices;
  c->devices = calloc(c->num_devices ? c->num_devices : 1, sizeof(*c->devices));
  if (!c->devices) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
    goto done;
  }
  for (uint32_t i = 0; i < c->num_devices; i++) {
    const Vmrpc__DeviceInfo *d = hr->devices[i];
    vmc_device_info_t *o2 = &c->devices[i];
    copy_str(o2->selector, sizeof(o2->selector), d->selector);
    copy_str(o2->name, sizeof(o2->name), d->name);
    copy_str(o2->vendor, sizeof(o2->vendor), d->vendor);
    copy_str(o2->driver_version, sizeof(o2->driver_version), d->driver_version);
    copy_str(o2->version, sizeof(o2->version), d->version);
    copy_str(o2->platform, sizeof(o2->platform), d->platform);
    o2->compute_units = d->compute_units;
    o2->global_mem_bytes = d->global_mem_bytes;
    o2->local_mem_bytes = d->local_mem_bytes;
    o2->max_alloc_bytes = d->max_alloc_bytes;
    o2->supports_fp16 = d->supports_fp16;
    o2->has_device_timer = d->has_device_timer;
  }
  vmc_limits_t *l = &c->limits;
  const Vmrpc__Limits *wl = hr->limits;
  l->chunk_bytes = wl && wl->chunk_bytes ? wl->chunk_bytes : (1u << 20);
  l->max_inflight_chunks = wl && wl->max_inflight_chunks ? wl->max_inflight_chunks : 8;
  l->max_message_bytes =
      wl && wl->max_message_bytes ? wl->max_message_bytes : l->chunk_bytes + (64u << 10);
  l->max_sessions = wl ? wl->max_sessions : 0;
  l->session_mem_bytes = wl ? wl->session_mem_bytes : 0;
  l->max_executable_bytes = wl ? wl->max_executable_bytes : 0;
  l->idle_timeout_ms = wl ? wl->idle_timeout_ms : 0;
  if (l->chunk_bytes > VMCI_MAX_CHUNK || l->chunk_bytes < 64) {
    st = vm_status_make(VM_FAILED_PRECONDITION,
                        "the agent at %s uses %llu-byte chunks; this client supports 64 bytes to "
                        "%u bytes (restart the agent with a --chunk size in that range)",
                        c->url, (unsigned long long)l->chunk_bytes, (unsigned)VMCI_MAX_CHUNK);
    goto done;
  }
  if (l->max_message_bytes < l->chunk_bytes + 256) {
    st = vm_status_make(VM_FAILED_PRECONDITION,
                        "the agent at %s accepts messages of %llu bytes, too small for its own "
                        "%llu-byte chunks plus an envelope: fix its --max-message",
                        c->url, (unsigned long long)l->max_message_bytes,
                        (unsigned long long)l->chunk_bytes);
    goto done;
  }
  if (l->max_inflight_chunks > VMCI_MAX_INFLIGHT) l->max_inflight_chunks = VMCI_MAX_INFLIGHT;
  c->slots_free = l->max_inflight_chunks;
  c->session = hr->session;
done:
  vmci_reply_free(&r);
  return st;
}

vm_status_t vmc_connect(const char *url, const vmc_conn_opts_t *opts, vmc_conn_t **out_conn) {
  vmc_conn_opts_t o;
  memset(&o, 0, sizeof(o));
  if (opts) o = *opts;
  if (!out_conn) return vm_status_make(VM_INVALID_ARGUMENT, "vmc_connect: out_conn is NULL");
  *out_conn = NULL;
  if (!url || !url[0])
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "no agent URL given: pass --host tcp://HOST:PORT or set VMCLIENT_HOST");
  int is_tls = strncmp(url, "tls+", 4) == 0;
  if (!is_tls && ((o.tls_ca_file && o.tls_ca_file[0]) || (o.tls_cert && o.tls_cert[0]) ||
                  (o.tls_key && o.tls_key[0]) || (o.tls_pin && o.tls_pin[0]) || o.tls_insecure))
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "TLS options were given but '%s' is not a tls+tcp:// URL: use "
                          "tls+tcp://HOST:PORT",
                          url);
  if (o.connect_timeout_ms < 0 || o.request_timeout_ms < 0 || o.long_timeout_ms < 0)
    return vm_status_make(VM_INVALID_ARGUMENT, "timeouts must be >= 0 ms (0 = default)");

  vmc_conn_t *c = calloc(1, sizeof(*c));
  if (!c) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->slot_cv, NULL);
  atomic_init(&c->next_id, 1);
  c->connect_timeout_ms =
      o.connect_timeout_ms ? o.connect_timeout_ms : VMC_DEFAULT_CONNECT_TIMEOUT_MS;
  c->request_timeout_ms =
      o.request_timeout_ms ? o.request_timeout_ms : VMC_DEFAULT_REQUEST_TIMEOUT_MS;
  c->long_timeout_ms = o.long_timeout_ms;
  c->limits.max_inflight_chunks = 1;
  c->slots_free = 1;
  vm_status_t st = VM_STATUS_OK;
  c->url = dup_str(url);
  if (!c->url) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
    goto fail;
  }
  int rv = nng_req0_open(&c->sock);
  if (rv) {
    st = vmci_nng_error(c, rv, "opening an nng req socket", 0);
    goto fail;
  }
  c->sock_open = 1;
  /* Never resend a request on our own: a resent Invoke would run twice. */
  nng_socket_set_ms(c->sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
  /* Replies are at most one chunk plus an envelope. */
  nng_socket_set_size(c->sock, NNG_OPT_RECVMAXSZ,
                      (size_t)VMCI_MAX_CHUNK + VMP_MAX_ENVELOPE + VMP_FRAME_HEADER);
  nng_pipe_notify(c->sock, NNG_PIPE_EV_ADD_POST, pipe_cb, c);
  nng_pipe_notify(c->sock, NNG_PIPE_EV_REM_POST, pipe_cb, c);
  rv = nng_dialer_create(&c->dialer, c->sock, url);
  if (rv) {
    if (rv == NNG_ENOTSUP || rv == NNG_EADDRINVAL || rv == NNG_EINVAL)
      st = vm_status_make(VM_INVALID_ARGUMENT,
                          "'%s' is not a valid agent URL (%s): use tcp://HOST:PORT, "
                          "tls+tcp://HOST:PORT or ipc:///PATH",
                          url, nng_strerror(rv));
    else
      st = vmci_nng_error(c, rv, "creating a dialer", 0);
    goto fail;
  }
  if (is_tls && (st = tls_setup(c, &o))) goto fail;
  if ((st = dial(c))) goto fail;
  if ((st = hello(c, &o))) goto fail;
  *out_conn = c;
  return VM_STATUS_OK;
fail:
  vmc_close(c);
  return st;
}

void vmc_close(vmc_conn_t *c) {
  if (!c) return;
  if (c->session && !conn_lost(c)) {
    Vmrpc__Request req = VMRPC__REQUEST__INIT;
    Vmrpc__GoodbyeRequest g = VMRPC__GOODBYE_REQUEST__INIT;
    req.op_case = VMRPC__REQUEST__OP_GOODBYE;
    req.goodbye = &g;
    vmci_reply_t r;
    int32_t t = c->request_timeout_ms < 2000 ? c->request_timeout_ms : 2000;
    vm_status_t st = vmci_call(c, &req, NULL, 0, VMRPC__RESPONSE__OP_GOODBYE, t, "Goodbye", &r);
    if (st)
      vm_status_free(st);
    else
      vmci_reply_free(&r);
  }
  pthread_mutex_lock(&c->mu);
  c->closing = 1;
  pthread_mutex_unlock(&c->mu);
  /* Stop every aio before the socket goes away so no callback runs late. */
  for (uint32_t i = 0; i < c->num_chans; i++) {
    nng_aio_stop(c->chans[i]->aio);
    nng_aio_stop(c->chans[i]->saio);
  }
  if (c->sock_open) nng_close(c->sock);
  for (uint32_t i = 0; i < c->num_chans; i++) chan_destroy(c->chans[i]);
  free(c->chans);
  free(c->devices);
  free(c->agent_version);
  free(c->url);
  pthread_cond_destroy(&c->slot_cv);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

const char *vmc_conn_url(const vmc_conn_t *c) {
  return c ? c->url : "";
}

void vmc_info(const vmc_conn_t *c, vmc_info_t *out) {
  memset(out, 0, sizeof(*out));
  out->url = c->url;
  out->agent_version = c->agent_version ? c->agent_version : "";
  out->protocol_major = c->protocol_major;
  out->protocol_minor = c->protocol_minor;
  out->client_protocol_major = VMRPC_PROTOCOL_MAJOR;
  out->client_protocol_minor = VMRPC_PROTOCOL_MINOR;
  out->session = c->session;
  out->num_devices = c->num_devices;
  out->devices = c->devices;
  out->limits = c->limits;
}
