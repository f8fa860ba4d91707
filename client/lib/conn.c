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

#include "vm/base.h"
#include "vmc_internal.h"

#ifndef VMRPC_VERSION
#define VMRPC_VERSION "0"
#endif

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
static vmci_msg_t *msg_get(vmc_conn_t *c, size_t size) {
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

static void msg_free(vmci_msg_t *m) {
  if (!m) return;
  free(m->mem);
  free(m);
}

/* Back into the pool; with the pool full, the smallest buffer goes. */
static void msg_put(vmc_conn_t *c, vmci_msg_t *m) {
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
  msg_free(drop);
}

/* ------------------------------------------------------------------- frames */

void vmci_reply_free(vmci_reply_t *r) {
  if (!r) return;
  if (r->resp) vmrpc__response__free_unpacked(r->resp, NULL);
  if (r->msg) msg_put(r->conn, r->msg);
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
  vmci_msg_t *m = msg_get(c, fs);
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

static int conn_lost(vmc_conn_t *c) {
  return !c->mux_ready || vmt_mux_lost(&c->mux) != 0;
}

/* The multiplexer's view of the message pool and of a reply body: a
 * frame header (u32 little-endian envelope length), the envelope, then
 * the payload. */
static void *mux_get(void *ctx, size_t size, uint8_t **mem) {
  vmci_msg_t *m = msg_get(ctx, size);
  if (!m) return NULL;
  *mem = m->body;
  return m;
}

static void mux_put(void *ctx, void *msg) {
  msg_put(ctx, msg);
}

static void mux_received(void *ctx, void *msg, size_t off, size_t len, uint8_t *ext,
                         size_t ext_len) {
  (void)ctx;
  vmci_msg_t *m = msg;
  m->body += off;
  m->len = len;
  m->ext = ext;
  m->ext_len = ext_len;
}

static uint64_t mux_payload_len(const uint8_t *head, uint64_t body_len) {
  uint64_t env = (uint64_t)head[0] | (uint64_t)head[1] << 8 | (uint64_t)head[2] << 16 |
                 (uint64_t)head[3] << 24;
  return env <= body_len - VMP_FRAME_HEADER ? body_len - VMP_FRAME_HEADER - env : 0;
}

/* Registers k and writes msg (then returns it to the pool). Returns 0 or
 * the nng error (k is then done with it; the connection may be lost). */
static int call_send(vmc_conn_t *c, vmci_call_t *k, vmci_msg_t *m, uint64_t req_id) {
  struct iovec v[2] = {{.iov_base = m->body, .iov_len = m->len},
                       {.iov_base = (void *)m->ext, .iov_len = m->ext_len}};
  int rv = vmt_mux_send(&c->mux, k, vmt_id_make(req_id), v, m->ext_len ? 2 : 1);
  msg_put(c, m);
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
  if (conn_lost(c)) return lost_status(c, what);
  vmci_msg_t *msg;
  VM_RETURN_IF_ERROR(vmci_build(c, req, payload, plen, &msg));
  vmci_msg_t *reply;
  int rv = call_sync(c, msg, req->id, timeout_ms, &reply);
  if (out_rv) *out_rv = rv;
  if (rv != 0) {
    msg_put(c, reply);
    return vmci_nng_error(c, rv, what, timeout_ms);
  }
  return vmci_decode(c, reply, req->id, expect, what, out);
}

vm_status_t vmci_call_long(vmc_conn_t *c, Vmrpc__Request *req, Vmrpc__Response__OpCase expect,
                           int32_t wait_ms, const char *what, void (*on_timeout)(void *arg),
                           void *arg, vmci_reply_t *out) {
  memset(out, 0, sizeof(*out));
  if (wait_ms <= 0) return vmci_call(c, req, NULL, 0, expect, 0, what, out); /* no limit */
  if (conn_lost(c)) return lost_status(c, what);
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
    msg_put(c, reply);
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
        msg_put(c, k->reply);
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

/* --------------------------------------------------------------- connect */

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

/* Host and port of a tls+tcp://HOST:PORT URL (host without brackets). */
static int url_host_port(const char *url, char *host, size_t hcap, char *port, size_t pcap) {
  const char *p = strstr(url, "://");
  if (!p) return -1;
  p += 3;
  const char *end;
  if (*p == '[') {
    end = strchr(p, ']');
    if (!end || end[1] != ':') return -1;
    snprintf(host, hcap, "%.*s", (int)(end - p - 1), p + 1);
    end++;
  } else {
    end = strrchr(p, ':');
    if (!end) return -1;
    snprintf(host, hcap, "%.*s", (int)(end - p), p);
  }
  snprintf(port, pcap, "%.*s", (int)strcspn(end + 1, "/"), end + 1);
  return host[0] && port[0] ? 0 : -1;
}

/* The TLS configuration of a tls+tcp:// connection (see vmc_conn_opts_t):
 * trust in a pinned certificate, a CA file, the system store, or
 * (insecure) nothing; a client certificate when given. */
static vm_status_t tls_setup(vmc_conn_t *c, const vmc_conn_opts_t *o) {
  char host[256], port[16];
  if (url_host_port(c->url, host, sizeof(host), port, sizeof(port)) != 0)
    return vm_status_make(VM_INVALID_ARGUMENT, "'%s' names no host: use tls+tcp://HOST:PORT", c->url);
  int has_ca = o->tls_ca_file && o->tls_ca_file[0], has_pin = o->tls_pin && o->tls_pin[0];
  if (has_ca + has_pin + (o->tls_insecure != 0) > 1)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "give at most one of --tls-ca, --tls-pin and --tls-insecure");
  int has_cert = o->tls_cert && o->tls_cert[0], has_key = o->tls_key && o->tls_key[0];
  if (has_cert != has_key)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "a TLS client certificate needs both --tls-cert and --tls-key");
  vmt_tls_opts_t to;
  memset(&to, 0, sizeof(to));
  char *ca = NULL, *cert = NULL, *key = NULL;
  const char *what = NULL;
  vm_status_t st = VM_STATUS_OK;
  if (has_pin) {
    uint8_t pin[32];
    if ((st = vmci_tls_pin_parse(o->tls_pin, pin))) goto done;
    if ((st = vmci_tls_probe_pin(c->url, host, port, c->connect_timeout_ms, o->tls_pin, pin, &ca)))
      goto done;
    /* No host name check: the pinned key is the identity. */
    what = "the pinned certificate";
  } else if (!o->tls_insecure) {
    what = has_ca ? o->tls_ca_file : vmci_tls_system_ca();
    if (!what) {
      st = vm_status_make(VM_FAILED_PRECONDITION,
                          "no system CA store to verify the agent's certificate with (looked "
                          "at $SSL_CERT_FILE and /etc/ssl/certs/ca-certificates.crt ...): give "
                          "--tls-ca FILE or --tls-pin sha256:HEX (or, on a trusted network "
                          "only, --tls-insecure)");
      goto done;
    }
    if ((st = read_pem(what, has_ca ? "TLS CA file" : "system CA store", &ca))) goto done;
    to.server_name = host;
  }
  to.ca_pem = ca;
  if (has_cert) {
    if ((st = read_pem(o->tls_cert, "TLS client certificate", &cert))) goto done;
    if ((st = read_pem(o->tls_key, "TLS client key", &key))) goto done;
    to.cert_pem = cert;
    to.key_pem = key;
  }
  char err[256];
  int rv = vmt_tls_new(&to, &c->tls, err, sizeof(err));
  if (rv == NNG_EINVAL && ca && strstr(err, "no PEM certificate"))
    st = vm_status_make(VM_INVALID_ARGUMENT,
                        "cannot use '%s' as TLS trust anchors: %s (expected PEM certificates)",
                        what, err);
  else if (rv == NNG_EINVAL)
    st = vm_status_make(VM_INVALID_ARGUMENT,
                        "cannot use the TLS certificate '%s' with key '%s': %s (expected PEM "
                        "files that belong together)",
                        o->tls_cert, o->tls_key, err);
  else if (rv)
    st = vmci_nng_error(c, rv, "setting up TLS", 0);
done:
  if (key) {
    memset(key, 0, strlen(key));
    free(key);
  }
  free(cert);
  free(ca);
  return st;
}

/* Connects within the connect timeout: the socket, the TLS handshake on
 * tls+tcp://, then the SP handshake. */
static vm_status_t dial(vmc_conn_t *c) {
  int64_t start = now_ns();
  int rv = vmt_dial(c->url, c->tls, c->connect_timeout_ms, &c->s);
  if (!rv) {
    int64_t left = c->connect_timeout_ms - (now_ns() - start) / 1000000;
    rv = vmt_conn_handshake(c->s, VMT_SP_REQ0, VMT_SP_REP0, left > 0 ? (int32_t)left : 1);
  }
  if (!rv) {
    uint64_t max_reply = (uint64_t)VMCI_MAX_CHUNK + VMP_MAX_ENVELOPE + VMP_FRAME_HEADER + 4;
    vmt_mux_msgs_t msgs = {.ctx = c,
                           .get = mux_get,
                           .put = mux_put,
                           .received = mux_received,
                           .payload_len = mux_payload_len,
                           .peek = VMP_FRAME_HEADER};
    rv = vmt_mux_init(&c->mux, c->s, &msgs, max_reply, c->request_timeout_ms);
    c->mux_ready = rv == 0;
  }
  if (rv == NNG_ETIMEDOUT)
    return vm_status_make(VM_DEADLINE_EXCEEDED,
                          "could not connect to the agent at %s within %d ms (connect timeout): "
                          "check the host, the port and any firewall, and that a vmagent (not "
                          "another service) listens there, or raise the timeout "
                          "(--connect-timeout MS, vmc_conn_opts_t.connect_timeout_ms)",
                          c->url, (int)c->connect_timeout_ms);
  if (rv == 0) return VM_STATUS_OK;
  switch (rv) {
    case NNG_ECONNREFUSED:
      return vm_status_make(VM_UNAVAILABLE,
                            "cannot reach the agent at %s: %s — is vmagent running? start it "
                            "with `vmagent --listen %s`",
                            c->url, nng_strerror(rv), c->url);
    case NNG_EADDRINVAL:
    case NNG_EINVAL:
      return vm_status_make(VM_INVALID_ARGUMENT,
                            "cannot connect to '%s': %s — check that the host name resolves "
                            "and that the URL reads tcp://HOST:PORT, tls+tcp://HOST:PORT or "
                            "ipc:///PATH",
                            c->url, nng_strerror(rv));
    case NNG_EUNREACHABLE:
    case NNG_ETIMEDOUT:
    case NNG_EPROTO:
      return vm_status_make(VM_UNAVAILABLE,
                            "cannot reach the agent at %s: %s (nng error %d) — check the "
                            "address, the network and any firewall, and that a vmagent (not "
                            "another service) listens there",
                            c->url, nng_strerror(rv), rv);
    case NNG_EPEERAUTH:
    case NNG_ECRYPTO:
      return vm_status_make(VM_UNAVAILABLE,
                            "TLS handshake with the agent at %s failed: %s — its certificate "
                            "must be signed by --tls-ca (default: the system CA store) and name "
                            "the host, or match --tls-pin sha256:HEX; check also that the agent "
                            "listens on tls+tcp://",
                            c->url, nng_strerror(rv));
    default:
      return vm_status_make(VM_UNAVAILABLE,
                            "cannot reach the agent at %s: %s (nng error %d) — is vmagent "
                            "running there? start it with `vmagent --listen %s`",
                            c->url, nng_strerror(rv), rv, c->url);
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
  int rv = vmt_url_check(url);
  if (rv) {
    st = vm_status_make(VM_INVALID_ARGUMENT,
                        "'%s' is not a valid agent URL (%s): use tcp://HOST:PORT, "
                        "tls+tcp://HOST:PORT or ipc:///PATH",
                        url, nng_strerror(rv));
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
  if (c->mux_ready) vmt_mux_destroy(&c->mux);
  vmt_conn_free(c->s);
  vmt_tls_free(c->tls);
  while (c->pool) {
    vmci_msg_t *m = c->pool;
    c->pool = m->next;
    msg_free(m);
  }
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
