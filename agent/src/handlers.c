/* Request dispatch and the handler of every operation.
 *
 * Each handler validates its request completely (sizes, ids, names) before
 * allocating or touching a device: asserts never stand in for checks, since
 * every byte here came from the network. Handlers return a status; the
 * dispatcher turns it into the response, so every well-framed message gets
 * exactly one reply.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent_internal.h"
#include "handler_ctx.h"
#include "vm/log.h"

#define VMA_MSG_MAX 4096
/* Largest scratch buffer the time evaluator may be asked to flush. */
#define VMA_MAX_FLUSH_BYTES (1ull << 30)
/* Repeats of one TimeEvaluate and rows of one Profile reply: bounded so a
 * reply stays far below any client's receive limit (chunk + 64 KiB). */
#define VMA_MAX_REPEAT 2048
#define VMA_MAX_PROFILE_ROWS 256
#define VMA_MAX_COOLDOWN_MS 60000

static void *vma_own(vma_ctx_t *c, void *p) {
  for (size_t i = 0; i < sizeof(c->owned) / sizeof(c->owned[0]); i++) {
    if (!c->owned[i]) {
      c->owned[i] = p;
      return p;
    }
  }
  free(p); /* programming error: more blocks than slots */
  return NULL;
}

/* ------------------------------------------------------------ replies */

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

/* ------------------------------------------------------------ helpers */

vm_status_t vma_check_name(const char *name, const char *what) {
  if (!name || !*name) return vm_status_make(VM_INVALID_ARGUMENT, "%s is empty", what);
  size_t n = strnlen(name, VMA_MAX_NAME + 1);
  if (n > VMA_MAX_NAME)
    return vm_status_make(VM_INVALID_ARGUMENT, "%s is longer than %d bytes", what, VMA_MAX_NAME);
  return VM_STATUS_OK;
}

static vm_status_t vma_no_payload(const vma_ctx_t *c) {
  if (c->payload_len == 0) return VM_STATUS_OK;
  return vm_status_make(VM_INVALID_ARGUMENT,
                        "%s carries no payload, but %zu bytes followed the envelope",
                        vmp_op_name(c->rq->op_case), c->payload_len);
}

static vm_status_t vma_missing(const char *what) {
  return vm_status_make(VM_INVALID_ARGUMENT, "malformed request: %s is missing", what);
}

static void vma_fill_device(const vma_device_t *d, Vmrpc__DeviceInfo *o) {
  const vm_device_props_t *p = &d->dev->props;
  vmrpc__device_info__init(o);
  o->selector = (char *)d->selector;
  o->name = (char *)p->name;
  o->vendor = (char *)p->vendor;
  o->driver_version = (char *)p->driver_version;
  o->version = (char *)p->version;
  o->platform = (char *)p->platform;
  o->compute_units = p->compute_units;
  o->global_mem_bytes = p->global_mem_bytes;
  o->local_mem_bytes = p->local_mem_bytes;
  o->max_alloc_bytes = p->max_alloc_bytes;
  o->supports_fp16 = p->supports_fp16 != 0;
  o->has_device_timer = p->has_device_timer != 0;
}

/* Fills n_devices/devices arrays owned by c. */
static vm_status_t vma_devices_out(vma_ctx_t *c, size_t *out_n, Vmrpc__DeviceInfo ***out_list) {
  vmagent_t *a = c->a;
  size_t n = a->num_devices;
  Vmrpc__DeviceInfo *infos = vma_own(c, calloc(n ? n : 1, sizeof(*infos)));
  Vmrpc__DeviceInfo **ptrs = vma_own(c, calloc(n ? n : 1, sizeof(*ptrs)));
  if (!infos || !ptrs) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  for (size_t i = 0; i < n; i++) {
    vma_fill_device(&a->devices[i], &infos[i]);
    ptrs[i] = &infos[i];
  }
  *out_n = n;
  *out_list = ptrs;
  return VM_STATUS_OK;
}

/* Constant time whatever the lengths: compares SHA-256 digests. */
static int vma_token_equal(const char *want, const char *got) {
  uint8_t h1[VM_SHA256_BYTES], h2[VM_SHA256_BYTES];
  vm_sha256(want, strlen(want), h1);
  vm_sha256(got, strlen(got), h2);
  volatile uint8_t diff = 0;
  for (int i = 0; i < VM_SHA256_BYTES; i++) diff |= (uint8_t)(h1[i] ^ h2[i]);
  return diff == 0;
}

/* ------------------------------------------------------------ handles */

/* Session lock held. One counter for every kind: ids are never reused and
 * never name an object of another kind. */
static uint64_t vma_new_handle(vma_session_t *s) {
  return s->next_handle++;
}

static vma_vm_t *vma_find_vm(vma_session_t *s, uint64_t id) {
  for (vma_vm_t *v = s->vms; v; v = v->next)
    if (v->id == id) return v;
  return NULL;
}

static vm_status_t vma_vm_not_found(uint64_t id) {
  return vm_status_make(VM_NOT_FOUND, "vm %llu not found in this session", (unsigned long long)id);
}

static vm_status_t vma_vm_busy(uint64_t id) {
  return vm_status_make(VM_FAILED_PRECONDITION,
                        "vm %llu is busy: another request on it is still running; wait for its "
                        "reply (or Cancel it) and retry",
                        (unsigned long long)id);
}

vm_status_t vma_exec_not_found(uint64_t id) {
  return vm_status_make(VM_NOT_FOUND, "executable %llu not found in this session",
                        (unsigned long long)id);
}

static vm_status_t vma_transfer_not_found(uint64_t id) {
  return vm_status_make(VM_NOT_FOUND, "transfer %llu not found in this session",
                        (unsigned long long)id);
}

/* Claims a VM for one request. A VM runs one request at a time (its value
 * reference counts are not atomic); a second one gets "busy" instead of
 * racing it. */
vm_status_t vma_vm_acquire(vma_session_t *s, uint64_t id, vma_use_t use, vma_vm_t **out_v) {
  *out_v = NULL;
  pthread_mutex_lock(&s->lock);
  vma_vm_t *v = vma_find_vm(s, id);
  if (!v) {
    pthread_mutex_unlock(&s->lock);
    return vma_vm_not_found(id);
  }
  if (v->exclusive || (use != VMA_USE_READ && v->readers)) {
    pthread_mutex_unlock(&s->lock);
    return vma_vm_busy(id);
  }
  if (use == VMA_USE_RUN && s->ended) {
    /* The session ended while this request was on its way here: its
     * cancel has been and gone, so this run would never be stopped. */
    pthread_mutex_unlock(&s->lock);
    return vm_status_make(VM_CANCELLED, "vm %llu: the session ended (Goodbye or closed connection)",
                          (unsigned long long)id);
  }
  if (use == VMA_USE_READ) {
    v->readers++;
  } else {
    vma_vm_snapshot(v);
    v->exclusive = 1;
    v->running = use == VMA_USE_RUN;
    /* This request owns the VM's cancel token from here: a Cancel from now
     * on (same lock) sets it and it stays set, however early it lands. */
    atomic_store(&v->cancel_pending, 0);
    vm_machine_cancel_reset(v->m);
  }
  pthread_mutex_unlock(&s->lock);
  *out_v = v;
  return VM_STATUS_OK;
}

void vma_vm_release(vma_session_t *s, vma_vm_t *v, vma_use_t use) {
  pthread_mutex_lock(&s->lock);
  if (use == VMA_USE_READ) {
    v->readers--;
  } else {
    v->exclusive = 0;
    v->running = 0;
    atomic_store(&v->cancel_pending, 0);
    vma_vm_snapshot(v);
  }
  pthread_mutex_unlock(&s->lock);
}

/* Caps each allocator of v (held exclusively) so that the session as a
 * whole stays under --session-mem-limit. Approximate when several VMs of a
 * session run at once: each sees the others' last snapshots. */
static void vma_vm_apply_limit(vmagent_t *a, vma_session_t *s, vma_vm_t *v) {
  uint64_t limit = a->cfg.session_mem_limit;
  if (!limit) return;
  pthread_mutex_lock(&s->lock);
  uint64_t others = vma_session_bytes_locked(s, v);
  uint64_t own = 0;
  for (uint32_t i = 0; i < v->num_allocs; i++) own += v->snap[i].bytes_reserved;
  for (uint32_t i = 0; i < v->num_allocs; i++) {
    uint64_t mine = v->snap[i].bytes_reserved;
    uint64_t used = others + own - mine;
    uint64_t cap = used < limit ? limit - used : 0;
    if (cap < mine) cap = mine;
    if (cap == 0) cap = 1; /* 0 would mean "no cap" */
    vm_allocator_set_limit(vm_machine_allocator(v->m, i), cap);
  }
  pthread_mutex_unlock(&s->lock);
}

/* RESOURCE_EXHAUSTED when the session cannot take extra bytes more. */
/* Whether `extra` bytes more fit the session memory limit. s->lock held. */
static vm_status_t vma_check_session_mem_locked(vmagent_t *a, vma_session_t *s, uint64_t extra,
                                                const char *what) {
  uint64_t limit = a->cfg.session_mem_limit;
  if (!limit) return VM_STATUS_OK;
  uint64_t used = vma_session_bytes_locked(s, NULL);
  if (extra > limit || used > limit - extra)
    return vm_status_make(VM_RESOURCE_EXHAUSTED,
                          "%s of %llu bytes would exceed the session memory limit: %llu of %llu "
                          "bytes in use (--session-mem-limit); free VMs or transfers first",
                          what, (unsigned long long)extra, (unsigned long long)used,
                          (unsigned long long)limit);
  return VM_STATUS_OK;
}

static vm_status_t vma_check_session_mem(vmagent_t *a, vma_session_t *s, uint64_t extra,
                                         const char *what) {
  if (!a->cfg.session_mem_limit) return VM_STATUS_OK;
  pthread_mutex_lock(&s->lock);
  vm_status_t st = vma_check_session_mem_locked(a, s, extra, what);
  pthread_mutex_unlock(&s->lock);
  return st;
}

/* Takes the run locks of the VM's devices in index order (no deadlock
 * between VMs sharing devices), waiting in slices so that a Cancel, the
 * deadline or shutdown ends the wait. */
static vm_status_t vma_lock_devices(vmagent_t *a, vma_vm_t *v, uint64_t deadline_ns) {
  for (uint32_t k = 0; k < v->num_devs; k++) {
    vma_device_t *d = &a->devices[v->dev_idx[k]];
    if (pthread_mutex_trylock(&d->run_lock) == 0) continue;
    /* About to wait, holding a worker: the transport makes sure another
     * worker is free for Cancel, Ping and chunks. */
    if (a->on_block) a->on_block(a);
    for (;;) {
      struct timespec ts;
      vma_time_in(CLOCK_REALTIME, 50, &ts);
      if (pthread_mutex_timedlock(&d->run_lock, &ts) == 0) break;
      vm_status_t st = VM_STATUS_OK;
      if (atomic_load(&v->cancel_pending))
        st = vm_status_make(VM_CANCELLED, "cancelled while waiting for device %s", d->selector);
      else if (atomic_load(&a->stopping))
        st = vm_status_make(VM_UNAVAILABLE, "the agent is shutting down");
      else if (deadline_ns && vm_now_ns() >= deadline_ns)
        st = vm_status_make(VM_DEADLINE_EXCEEDED,
                            "deadline passed while waiting for device %s (busy with another "
                            "session's work)",
                            d->selector);
      if (st) {
        while (k-- > 0) pthread_mutex_unlock(&a->devices[v->dev_idx[k]].run_lock);
        return st;
      }
    }
  }
  return VM_STATUS_OK;
}

static void vma_unlock_devices(vmagent_t *a, vma_vm_t *v) {
  for (uint32_t k = v->num_devs; k-- > 0;)
    pthread_mutex_unlock(&a->devices[v->dev_idx[k]].run_lock);
}

/* ------------------------------------------------------------ chunks */

static vm_status_t vma_chunks_init(vma_chunks_t *ck, uint64_t size, uint64_t chunk) {
  memset(ck, 0, sizeof(*ck));
  ck->size = size;
  ck->nchunks = size / chunk + (size % chunk != 0);
  ck->claimed = calloc(ck->nchunks / 8 + 1, 1);
  if (!ck->claimed) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  return VM_STATUS_OK;
}

/* Validates a chunk against R7 and claims it; session lock held. */
static vm_status_t vma_chunk_claim(vma_chunks_t *ck, uint64_t chunk, uint64_t offset, size_t len,
                                   const char *what, uint64_t id, uint64_t *out_idx) {
  if (offset >= ck->size || len > ck->size - offset)
    return vm_status_make(VM_OUT_OF_RANGE,
                          "%s %llu: chunk [%llu, +%zu) lies past the announced size of %llu "
                          "bytes",
                          what, (unsigned long long)id, (unsigned long long)offset, len,
                          (unsigned long long)ck->size);
  if (offset % chunk != 0)
    return vm_status_make(
        VM_INVALID_ARGUMENT, "%s %llu: chunk offset %llu is not a multiple of the chunk size %llu",
        what, (unsigned long long)id, (unsigned long long)offset, (unsigned long long)chunk);
  uint64_t want = ck->size - offset < chunk ? ck->size - offset : chunk;
  if (len != want)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "%s %llu: chunk at offset %llu carries %zu bytes, expected %llu (every "
                          "chunk but the last is exactly the chunk size)",
                          what, (unsigned long long)id, (unsigned long long)offset, len,
                          (unsigned long long)want);
  uint64_t idx = offset / chunk;
  if (ck->claimed[idx / 8] & (1u << (idx % 8)))
    return vm_status_make(VM_ALREADY_EXISTS, "%s %llu: the chunk at offset %llu was already sent",
                          what, (unsigned long long)id, (unsigned long long)offset);
  ck->claimed[idx / 8] |= (uint8_t)(1u << (idx % 8));
  ck->writers++;
  *out_idx = idx;
  return VM_STATUS_OK;
}

/* Finishes a claimed chunk; session lock held. A failed copy can be sent
 * again. */
static void vma_chunk_done(vma_chunks_t *ck, uint64_t idx, size_t len, int ok) {
  ck->writers--;
  if (ok)
    ck->received += len;
  else
    ck->claimed[idx / 8] &= (uint8_t) ~(1u << (idx % 8));
}

/* vma_chunk_done() taking the session lock. */
static void vma_chunk_finish(vma_session_t *s, vma_chunks_t *ck, uint64_t idx, size_t len, int ok) {
  pthread_mutex_lock(&s->lock);
  vma_chunk_done(ck, idx, len, ok);
  pthread_mutex_unlock(&s->lock);
}

static vm_status_t vma_chunks_complete(const vma_chunks_t *ck) {
  if (ck->received == ck->size && ck->writers == 0) return VM_STATUS_OK;
  return vm_status_make(VM_FAILED_PRECONDITION,
                        "upload incomplete: %llu of %llu bytes received; send the missing "
                        "chunks first",
                        (unsigned long long)ck->received, (unsigned long long)ck->size);
}

/* ------------------------------------------------------------ values in */

static vma_transfer_t *vma_find_transfer(vma_session_t *s, uint64_t id) {
  for (vma_transfer_t *t = s->transfers; t; t = t->next)
    if (t->id == id) return t;
  return NULL;
}

/* Allocates a tensor on the VM's device 0 (VM held exclusively) and fills
 * it from host bytes. */
static vm_status_t vma_tensor_from_host(vmagent_t *a, vma_session_t *s, vma_vm_t *v,
                                        const Vmrpc__TensorMeta *meta, const uint8_t *data,
                                        size_t avail, size_t *out_used, vm_value_t *out) {
  vm_dtype_t dt;
  int64_t dims[VMP_MAX_NDIM];
  uint32_t ndim;
  uint64_t nbytes;
  VM_RETURN_IF_ERROR(vmp_meta_check(meta, 0, &dt, dims, &ndim, &nbytes));
  if (nbytes > avail)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "tensor of %llu bytes but only %zu payload bytes are left; send "
                          "larger tensors with TensorBegin/TensorChunk",
                          (unsigned long long)nbytes, avail);
  VM_RETURN_IF_ERROR(vma_check_session_mem(a, s, nbytes, "a tensor"));
  vma_vm_apply_limit(a, s, v);
  VM_RETURN_IF_ERROR(vm_tensor_alloc(vm_machine_allocator(v->m, 0), dt, dims, ndim, out));
  vm_tensor_t *t = vm_value_as_tensor(out);
  vm_storage_t *sto = t->storage;
  vma_device_t *gate = vma_device_of(a, sto->device);
  vm_status_t st = vma_copy_enter(a, gate);
  if (!st) {
    st = sto->device->ops->copy_from_host(sto->device, sto->buffer, t->offset, data, nbytes);
    vma_copy_exit(gate);
  }
  if (st) {
    vm_value_release(out);
    return st;
  }
  *out_used = (size_t)nbytes;
  return VM_STATUS_OK;
}

/* Converts a wire value for VM v (held exclusively). Inline tensors take
 * their bytes from *payload in order; tensor_refs are recorded in consumed
 * (taken out of the session only when the whole operation succeeds). */
static vm_status_t vma_value_in(vma_ctx_t *c, vma_vm_t *v, const Vmrpc__Value *w,
                                const uint8_t **payload, size_t *left, vma_transfer_t **consumed,
                                uint32_t *num_consumed, vm_value_t *out) {
  *out = vm_value_none();
  if (!w) return vma_missing("value");
  switch (w->kind_case) {
    case VMRPC__VALUE__KIND_NONE: return VM_STATUS_OK;
    case VMRPC__VALUE__KIND_I: *out = vm_value_int(w->i); return VM_STATUS_OK;
    case VMRPC__VALUE__KIND_F: *out = vm_value_float(w->f); return VM_STATUS_OK;
    case VMRPC__VALUE__KIND_B: *out = vm_value_bool(w->b); return VM_STATUS_OK;
    case VMRPC__VALUE__KIND_S: {
      size_t n = strlen(w->s ? w->s : "");
      if (n > (1u << 20))
        return vm_status_make(VM_INVALID_ARGUMENT, "string value of %zu bytes exceeds 1 MiB", n);
      return vm_string_new(w->s ? w->s : "", (uint32_t)n, out);
    }
    case VMRPC__VALUE__KIND_SHAPE: {
      if (!w->shape) return vma_missing("shape");
      if (w->shape->n_dims > VMP_MAX_NDIM)
        return vm_status_make(VM_INVALID_ARGUMENT, "shape has %zu dimensions, at most %d allowed",
                              w->shape->n_dims, VMP_MAX_NDIM);
      return vm_shape_new(w->shape->dims, (uint32_t)w->shape->n_dims, out);
    }
    case VMRPC__VALUE__KIND_TENSOR: {
      size_t used = 0;
      VM_RETURN_IF_ERROR(
          vma_tensor_from_host(c->a, c->s, v, w->tensor, *payload, *left, &used, out));
      *payload += used;
      *left -= used;
      return VM_STATUS_OK;
    }
    case VMRPC__VALUE__KIND_TENSOR_REF: {
      pthread_mutex_lock(&c->s->lock);
      vma_transfer_t *t = vma_find_transfer(c->s, w->tensor_ref);
      vm_status_t st = VM_STATUS_OK;
      if (!t) {
        st = vma_transfer_not_found(w->tensor_ref);
      } else if (t->vm != v) {
        st = vm_status_make(VM_INVALID_ARGUMENT, "transfer %llu was begun for vm %llu, not vm %llu",
                            (unsigned long long)t->id, (unsigned long long)t->vm->id,
                            (unsigned long long)v->id);
      } else {
        st = vma_chunks_complete(&t->ck);
      }
      for (uint32_t i = 0; !st && i < *num_consumed; i++)
        if (consumed[i] == t)
          st = vm_status_make(VM_INVALID_ARGUMENT, "transfer %llu is used twice",
                              (unsigned long long)t->id);
      if (!st) {
        *out = t->tensor;
        vm_value_retain(out);
        consumed[(*num_consumed)++] = t;
      }
      pthread_mutex_unlock(&c->s->lock);
      return st;
    }
    case VMRPC__VALUE__KIND_TUPLE_ARITY:
      return vm_status_make(VM_INVALID_ARGUMENT,
                            "a tuple cannot be sent as a value; pass its fields one by one");
    default: return vm_status_make(VM_INVALID_ARGUMENT, "value has no kind set");
  }
}

/* Drops consumed transfers after success (VM held exclusively). */
static void vma_consume_transfers(vma_session_t *s, vma_transfer_t **consumed, uint32_t n) {
  pthread_mutex_lock(&s->lock);
  for (uint32_t i = 0; i < n; i++) {
    vma_transfer_t **pp = &s->transfers;
    while (*pp && *pp != consumed[i]) pp = &(*pp)->next;
    if (*pp) {
      *pp = consumed[i]->next;
      s->num_transfers--;
      vm_value_release(&consumed[i]->tensor);
      free(consumed[i]->ck.claimed);
      free(consumed[i]);
    }
  }
  pthread_mutex_unlock(&s->lock);
}

/* ------------------------------------------------------------ handlers */

vm_status_t vma_op_hello(vma_ctx_t *c) {
  const Vmrpc__HelloRequest *h = c->rq->hello;
  vmagent_t *a = c->a;
  if (h->protocol_major != VMRPC_PROTOCOL_MAJOR)
    return vm_status_make(VM_FAILED_PRECONDITION,
                          "protocol version %u.%u is not supported by this agent (%d.%d); use a "
                          "vmclient of the same major version",
                          h->protocol_major, h->protocol_minor, VMRPC_PROTOCOL_MAJOR,
                          VMRPC_PROTOCOL_MINOR);
  if (a->token) {
    VM_RETURN_IF_ERROR(vma_auth_admit(a, c->pipe_id)); /* brute force: auth.c */
    if (!h->token || !*h->token)
      return vma_auth_failed(a, c->pipe_id, 1,
                             vm_status_make(VM_UNAUTHENTICATED,
                                            "this agent requires a token: pass --token or "
                                            "--token-file"));
    if (!vma_token_equal(a->token, h->token))
      return vma_auth_failed(a, c->pipe_id, 0,
                             vm_status_make(VM_UNAUTHENTICATED,
                                            "the token does not match the agent's: pass --token "
                                            "or --token-file with the agent's token"));
  }
  Vmrpc__HelloResponse *r = VMA_RESPONSE(c, HELLO, hello, hello_response);
  VM_RETURN_IF_ERROR(vma_devices_out(c, &r->n_devices, &r->devices));
  /* Last: nothing may fail once the session exists. */
  VM_RETURN_IF_ERROR(vma_session_create(a, c->pipe_id, h->client_name, &c->s));
  VM_LOGI("session %016llx: hello from '%s' (protocol %u.%u)", (unsigned long long)c->s->id,
          c->s->client, h->protocol_major, h->protocol_minor);
  r->protocol_major = VMRPC_PROTOCOL_MAJOR;
  r->protocol_minor = VMRPC_PROTOCOL_MINOR;
  r->agent_version = (char *)VMRPC_VERSION;
  r->session = c->s->id;
  Vmrpc__Limits *l = &c->limits;
  vmrpc__limits__init(l);
  l->max_message_bytes = a->cfg.max_message_bytes;
  l->chunk_bytes = a->cfg.chunk_bytes;
  l->max_inflight_chunks = a->cfg.workers < 8 ? a->cfg.workers : 8;
  l->max_sessions = a->cfg.max_sessions;
  l->session_mem_bytes = a->cfg.session_mem_limit;
  l->max_executable_bytes = a->cfg.max_executable_bytes;
  l->idle_timeout_ms = a->cfg.idle_timeout_ms;
  r->limits = l;
  return VM_STATUS_OK;
}

vm_status_t vma_op_list_devices(vma_ctx_t *c) {
  Vmrpc__ListDevicesResponse *r =
      VMA_RESPONSE(c, LIST_DEVICES, list_devices, list_devices_response);
  VM_RETURN_IF_ERROR(vma_devices_out(c, &r->n_devices, &r->devices));
  return VM_STATUS_OK;
}

/* Adds an executable handle for a retained store entry (taking it over:
 * released on failure). */
vm_status_t vma_add_execref(vma_ctx_t *c, vma_exec_entry_t *e, uint64_t *out_id) {
  vma_session_t *s = c->s;
  vma_execref_t *r = calloc(1, sizeof(*r));
  vm_status_t st = VM_STATUS_OK;
  pthread_mutex_lock(&s->lock);
  if (!r) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  } else if (s->num_execs >= VMA_MAX_EXECS) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED,
                        "this session holds %u executables, the limit; FreeExecutable some",
                        s->num_execs);
  } else {
    r->id = vma_new_handle(s);
    r->entry = e;
    r->next = s->execs;
    s->execs = r;
    s->num_execs++;
    *out_id = r->id;
  }
  pthread_mutex_unlock(&s->lock);
  if (st) {
    free(r);
    vma_store_release(c->a->store, e);
  }
  return st;
}

vm_status_t vma_op_upload_begin(vma_ctx_t *c) {
  const Vmrpc__UploadBeginRequest *q = c->rq->upload_begin;
  vmagent_t *a = c->a;
  vma_session_t *s = c->s;
  if (q->sha256.len != VM_SHA256_BYTES)
    return vm_status_make(VM_INVALID_ARGUMENT, "sha256 must be %d bytes, got %zu", VM_SHA256_BYTES,
                          q->sha256.len);
  if (q->size == 0) return vm_status_make(VM_INVALID_ARGUMENT, "executable size is 0");
  if (q->size > a->cfg.max_executable_bytes)
    return vm_status_make(
        VM_RESOURCE_EXHAUSTED, "executable of %llu bytes exceeds this agent's limit of %llu bytes",
        (unsigned long long)q->size, (unsigned long long)a->cfg.max_executable_bytes);
  Vmrpc__UploadBeginResponse *r =
      VMA_RESPONSE(c, UPLOAD_BEGIN, upload_begin, upload_begin_response);

  vma_exec_entry_t *e = NULL;
  VM_RETURN_IF_ERROR(vma_store_lookup(a->store, q->sha256.data, q->size, &e));
  if (e) {
    VM_RETURN_IF_ERROR(vma_add_execref(c, e, &r->exec_id));
    r->present = 1;
    return VM_STATUS_OK;
  }

  /* Checked and reserved in one step, before anything is allocated:
   * concurrent UploadBegins cannot together pass the limits. */
  pthread_mutex_lock(&s->lock);
  vm_status_t st =
      s->num_uploads >= VMA_MAX_UPLOADS
          ? vm_status_make(VM_RESOURCE_EXHAUSTED,
                           "this session already has %d uploads in progress; commit them first",
                           VMA_MAX_UPLOADS)
          : vma_check_session_mem_locked(a, s, q->size, "an executable upload");
  if (!st) st = vm_budget_charge(&a->host, q->size, "an executable upload's staging");
  if (!st) {
    s->num_uploads++;
    s->staging_bytes += q->size;
  }
  pthread_mutex_unlock(&s->lock);
  if (st) return st;
  vma_upload_t *u = calloc(1, sizeof(*u));
  if (!u) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  } else {
    st = vma_chunks_init(&u->ck, q->size, a->cfg.chunk_bytes);
    if (!st && !(u->data = malloc(q->size)))
      st = vm_status_make(VM_RESOURCE_EXHAUSTED, "cannot allocate %llu bytes for the upload",
                          (unsigned long long)q->size);
  }
  pthread_mutex_lock(&s->lock);
  if (st) {
    s->num_uploads--;
    s->staging_bytes -= q->size;
    vm_budget_release(&a->host, q->size);
  } else {
    memcpy(u->hash, q->sha256.data, VM_SHA256_BYTES);
    u->id = vma_new_handle(s);
    u->next = s->uploads;
    s->uploads = u;
    r->upload_id = u->id;
  }
  pthread_mutex_unlock(&s->lock);
  if (st && u) {
    free(u->data);
    free(u->ck.claimed);
    free(u);
  }
  return st;
}

static vma_upload_t *vma_find_upload(vma_session_t *s, uint64_t id) {
  for (vma_upload_t *u = s->uploads; u; u = u->next)
    if (u->id == id) return u;
  return NULL;
}

static vm_status_t vma_upload_not_found(uint64_t id) {
  return vm_status_make(VM_NOT_FOUND,
                        "upload %llu not found in this session (committed, failed, or never "
                        "begun)",
                        (unsigned long long)id);
}

vm_status_t vma_op_upload_chunk(vma_ctx_t *c) {
  const Vmrpc__UploadChunkRequest *q = c->rq->upload_chunk;
  vma_session_t *s = c->s;
  uint64_t idx = 0;
  pthread_mutex_lock(&s->lock);
  vma_upload_t *u = vma_find_upload(s, q->upload_id);
  vm_status_t st = u ? vma_chunk_claim(&u->ck, c->a->cfg.chunk_bytes, q->offset, c->payload_len,
                                       "upload", u->id, &idx)
                     : vma_upload_not_found(q->upload_id);
  pthread_mutex_unlock(&s->lock);
  if (st) return st;
  /* The claim keeps u alive (commit waits for writers) while the bytes go
   * straight into the staging buffer, outside the lock. */
  memcpy(u->data + q->offset, c->payload, c->payload_len);
  vma_chunk_finish(s, &u->ck, idx, c->payload_len, 1);
  VMA_RESPONSE(c, UPLOAD_CHUNK, upload_chunk, upload_chunk_response);
  return VM_STATUS_OK;
}

vm_status_t vma_op_upload_commit(vma_ctx_t *c) {
  const Vmrpc__UploadCommitRequest *q = c->rq->upload_commit;
  vma_session_t *s = c->s;
  pthread_mutex_lock(&s->lock);
  vma_upload_t *u = vma_find_upload(s, q->upload_id);
  vm_status_t st = u ? vma_chunks_complete(&u->ck) : vma_upload_not_found(q->upload_id);
  if (!st) { /* out of the table: nobody else can reach it now */
    vma_upload_t **pp = &s->uploads;
    while (*pp != u) pp = &(*pp)->next;
    *pp = u->next;
    s->num_uploads--;
  }
  pthread_mutex_unlock(&s->lock);
  if (st) return st;

  uint8_t got[VM_SHA256_BYTES];
  vm_sha256(u->data, u->ck.size, got);
  vma_exec_entry_t *e = NULL;
  if (memcmp(got, u->hash, VM_SHA256_BYTES) != 0) {
    char want_hex[2 * VM_SHA256_BYTES + 1], got_hex[2 * VM_SHA256_BYTES + 1];
    vm_sha256_hex(u->hash, want_hex);
    vm_sha256_hex(got, got_hex);
    st = vm_status_make(VM_DATA_LOSS,
                        "executable hash mismatch: announced %.16s..., received bytes hash to "
                        "%.16s...; the data was damaged in transit: upload again",
                        want_hex, got_hex);
  } else {
    st = vma_store_insert(c->a->store, u->hash, u->data, u->ck.size, &e);
  }
  pthread_mutex_lock(&s->lock);
  s->staging_bytes -= u->ck.size;
  vm_budget_release(&c->a->host, u->ck.size);
  pthread_mutex_unlock(&s->lock);
  free(u->data);
  free(u->ck.claimed);
  free(u);
  if (st) return st;
  Vmrpc__UploadCommitResponse *r =
      VMA_RESPONSE(c, UPLOAD_COMMIT, upload_commit, upload_commit_response);
  VM_RETURN_IF_ERROR(vma_add_execref(c, e, &r->exec_id));
  return VM_STATUS_OK;
}

static int vma_find_device(const vmagent_t *a, const char *sel) {
  for (uint32_t i = 0; i < a->num_devices; i++) {
    if (strcmp(a->devices[i].selector, sel) == 0) return (int)i;
    if (strcmp(sel, "cpu:0") == 0 && strcmp(a->devices[i].selector, "cpu") == 0) return (int)i;
  }
  return -1;
}

vm_status_t vma_op_create_vm(vma_ctx_t *c) {
  const Vmrpc__CreateVMRequest *q = c->rq->create_vm;
  vmagent_t *a = c->a;
  vma_session_t *s = c->s;
  if (q->n_devices > VMA_MAX_VM_DEVICES)
    return vm_status_make(VM_INVALID_ARGUMENT, "%zu devices given, at most %d per VM", q->n_devices,
                          VMA_MAX_VM_DEVICES);
  vm_exec_mode_t mode = VM_EXEC_BYTECODE;
  if (q->exec_mode && *q->exec_mode && vm_exec_mode_parse(q->exec_mode, &mode) != 0)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "unknown exec_mode '%.64s' (use bytecode or compiled)", q->exec_mode);
  vm_device_t *devs[VMA_MAX_VM_DEVICES];
  vm_allocator_kind_t kinds[VMA_MAX_VM_DEVICES];
  uint32_t idx[VMA_MAX_VM_DEVICES];
  uint32_t n = (uint32_t)q->n_devices;
  if (n == 0) { /* the agent's first device */
    devs[0] = a->devices[0].dev;
    kinds[0] = VM_ALLOC_POOLED;
    idx[0] = 0;
    n = 1;
  }
  for (uint32_t i = 0; i < q->n_devices; i++) {
    const Vmrpc__DeviceSpec *d = q->devices[i];
    const char *sel = d && d->selector ? d->selector : "";
    int k = vma_find_device(a, sel);
    if (k < 0) {
      char list[512] = "";
      size_t off = 0;
      for (uint32_t j = 0; j < a->num_devices && off < sizeof(list); j++)
        off += (size_t)snprintf(list + off, sizeof(list) - off, "%s%s", j ? ", " : "",
                                a->devices[j].selector);
      return vm_status_make(VM_NOT_FOUND, "device '%.64s' not found; this agent has: %s", sel,
                            list);
    }
    for (uint32_t j = 0; j < i; j++)
      if (idx[j] == (uint32_t)k)
        return vm_status_make(VM_INVALID_ARGUMENT, "device '%s' is listed twice", sel);
    kinds[i] = VM_ALLOC_POOLED;
    if (d->allocator && *d->allocator && vm_allocator_kind_parse(d->allocator, &kinds[i]) != 0)
      return vm_status_make(VM_INVALID_ARGUMENT,
                            "unknown allocator '%.64s' for device %s (use pooled or naive)",
                            d->allocator, sel);
    devs[i] = a->devices[k].dev;
    idx[i] = (uint32_t)k;
  }
  pthread_mutex_lock(&s->lock);
  vma_execref_t *er = s->execs;
  while (er && er->id != q->exec_id) er = er->next;
  vma_exec_entry_t *e = er ? er->entry : NULL;
  if (e) vma_store_retain(a->store, e);
  uint32_t nvms = s->num_vms;
  uint64_t used = vma_session_bytes_locked(s, NULL);
  pthread_mutex_unlock(&s->lock);
  if (!e) return vma_exec_not_found(q->exec_id);
  vm_status_t st = VM_STATUS_OK;
  vma_vm_t *v = NULL;
  uint64_t limit = a->cfg.session_mem_limit;
  if (nvms >= VMA_MAX_VMS) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "this session holds %u VMs, the limit; FreeVM some",
                        nvms);
    goto fail;
  }
  if (limit && used >= limit) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED,
                        "the session memory limit of %llu bytes is used up (--session-mem-limit)",
                        (unsigned long long)limit);
    goto fail;
  }
  v = calloc(1, sizeof(*v));
  if (!v) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
    goto fail;
  }
  vm_machine_config_t mc;
  memset(&mc, 0, sizeof(mc));
  mc.mode = mode;
  mc.num_devices = n;
  mc.devices = devs;
  mc.allocators = kinds;
  mc.registry = a->registry;
  mc.mem_limit_bytes = limit ? limit - used : 0;
  mc.host_budget = &s->host;
  /* Creation copies the tensor constants onto device 0. */
  vma_device_t *gate = vma_device_of(a, devs[0]);
  st = vma_copy_enter(a, gate);
  if (st) goto fail;
  st = vm_machine_create(e->exec, &mc, &v->m);
  vma_copy_exit(gate);
  if (st) goto fail;
  v->entry = e;
  /* Run locks in index order; the machine's own appended cpu device (if
   * any) is private to it and needs none. */
  for (uint32_t i = 0; i < n; i++) {
    uint32_t x = idx[i], j = v->num_devs;
    while (j > 0 && v->dev_idx[j - 1] > x) {
      v->dev_idx[j] = v->dev_idx[j - 1];
      j--;
    }
    v->dev_idx[j] = x;
    v->num_devs++;
  }
  atomic_init(&v->cancel_pending, 0);
  vma_vm_snapshot(v);
  pthread_mutex_lock(&s->lock);
  v->id = vma_new_handle(s);
  v->next = s->vms;
  s->vms = v;
  s->num_vms++;
  pthread_mutex_unlock(&s->lock);
  Vmrpc__CreateVMResponse *r = VMA_RESPONSE(c, CREATE_VM, create_vm, create_vmresponse);
  r->vm_id = v->id;
  return VM_STATUS_OK;
fail:
  free(v);
  vma_store_release(a->store, e);
  return st;
}

vm_status_t vma_op_tensor_begin(vma_ctx_t *c) {
  const Vmrpc__TensorBeginRequest *q = c->rq->tensor_begin;
  vmagent_t *a = c->a;
  vma_session_t *s = c->s;
  vm_dtype_t dt;
  int64_t dims[VMP_MAX_NDIM];
  uint32_t ndim;
  uint64_t nbytes;
  VM_RETURN_IF_ERROR(vmp_meta_check(q->meta, 0, &dt, dims, &ndim, &nbytes));
  vma_vm_t *v;
  VM_RETURN_IF_ERROR(vma_vm_acquire(s, q->vm_id, VMA_USE_EXCL, &v));
  vma_transfer_t *t = calloc(1, sizeof(*t));
  vm_status_t st = VM_STATUS_OK;
  if (!t) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
    goto fail;
  }
  pthread_mutex_lock(&s->lock);
  uint32_t nt = s->num_transfers;
  pthread_mutex_unlock(&s->lock);
  if (nt >= VMA_MAX_TRANSFERS) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED,
                        "this session holds %u transfers, the limit; use or free them first", nt);
    goto fail;
  }
  st = vma_check_session_mem(a, s, nbytes, "a tensor transfer");
  if (st) goto fail;
  vma_vm_apply_limit(a, s, v);
  /* The device refuses an impossible size first; only then is the chunk
   * bitmap (nbytes / chunk bits) sized from it. */
  st = vm_tensor_alloc(vm_machine_allocator(v->m, 0), dt, dims, ndim, &t->tensor);
  if (st) goto fail;
  st = vma_chunks_init(&t->ck, nbytes, a->cfg.chunk_bytes);
  if (st) goto fail;
  t->vm = v;
  pthread_mutex_lock(&s->lock);
  t->id = vma_new_handle(s);
  t->next = s->transfers;
  s->transfers = t;
  s->num_transfers++;
  pthread_mutex_unlock(&s->lock);
  vma_vm_release(s, v, VMA_USE_EXCL);
  Vmrpc__TensorBeginResponse *r =
      VMA_RESPONSE(c, TENSOR_BEGIN, tensor_begin, tensor_begin_response);
  r->transfer_id = t->id;
  return VM_STATUS_OK;
fail:
  if (t) {
    vm_value_release(&t->tensor);
    free(t->ck.claimed);
    free(t);
  }
  vma_vm_release(s, v, VMA_USE_EXCL);
  return st;
}

vm_status_t vma_op_tensor_chunk(vma_ctx_t *c) {
  const Vmrpc__TensorChunkRequest *q = c->rq->tensor_chunk;
  vma_session_t *s = c->s;
  uint64_t idx = 0;
  pthread_mutex_lock(&s->lock);
  vma_transfer_t *t = vma_find_transfer(s, q->transfer_id);
  vm_status_t st = t ? vma_chunk_claim(&t->ck, c->a->cfg.chunk_bytes, q->offset, c->payload_len,
                                       "transfer", t->id, &idx)
                     : vma_transfer_not_found(q->transfer_id);
  pthread_mutex_unlock(&s->lock);
  if (st) return st;
  /* Straight from the message into the device buffer. The claim keeps t
   * alive: FreeVM and SetInput wait for writers; the copy touches only the
   * buffer, not the VM, so it may overlap an invocation of that VM. */
  vm_tensor_t *tt = vm_value_as_tensor(&t->tensor);
  vm_storage_t *sto = tt->storage;
  vma_device_t *gate = vma_device_of(c->a, sto->device);
  st = vma_copy_enter(c->a, gate);
  if (!st) {
    st = sto->device->ops->copy_from_host(sto->device, sto->buffer, tt->offset + q->offset,
                                          c->payload, c->payload_len);
    vma_copy_exit(gate);
  }
  vma_chunk_finish(s, &t->ck, idx, c->payload_len, st == VM_STATUS_OK);
  if (st) return st;
  VMA_RESPONSE(c, TENSOR_CHUNK, tensor_chunk, tensor_chunk_response);
  return VM_STATUS_OK;
}

vm_status_t vma_op_set_input(vma_ctx_t *c) {
  const Vmrpc__SetInputRequest *q = c->rq->set_input;
  vma_session_t *s = c->s;
  VM_RETURN_IF_ERROR(vma_check_name(q->func, "func"));
  if (q->param_case == VMRPC__SET_INPUT_REQUEST__PARAM_NAME)
    VM_RETURN_IF_ERROR(vma_check_name(q->name, "parameter name"));
  else if (q->param_case != VMRPC__SET_INPUT_REQUEST__PARAM_INDEX)
    return vm_status_make(VM_INVALID_ARGUMENT, "SetInput needs a parameter index or name");
  if (!q->value) return vma_missing("value");
  if (q->value->kind_case != VMRPC__VALUE__KIND_TENSOR) VM_RETURN_IF_ERROR(vma_no_payload(c));
  vma_vm_t *v;
  VM_RETURN_IF_ERROR(vma_vm_acquire(s, q->vm_id, VMA_USE_EXCL, &v));
  const uint8_t *p = c->payload;
  size_t left = c->payload_len;
  vma_transfer_t *consumed[1];
  uint32_t nc = 0;
  vm_value_t val = vm_value_none();
  vm_status_t st = vma_value_in(c, v, q->value, &p, &left, consumed, &nc, &val);
  if (!st && left)
    st = vm_status_make(VM_INVALID_ARGUMENT, "the tensor needs %zu payload bytes but %zu were sent",
                        c->payload_len - left, c->payload_len);
  /* Setting may copy the value onto device 0. */
  vma_device_t *gate = vma_device_of(c->a, vm_machine_device(v->m, 0));
  if (!st) st = vma_copy_enter(c->a, gate);
  if (!st) {
    if (q->param_case == VMRPC__SET_INPUT_REQUEST__PARAM_NAME)
      st = vm_machine_set_input_by_name(v->m, q->func, q->name, &val);
    else
      st = vm_machine_set_input(v->m, q->func, q->index, &val);
    vma_copy_exit(gate);
  }
  vm_value_release(&val);
  if (!st) vma_consume_transfers(s, consumed, nc);
  vma_vm_release(s, v, VMA_USE_EXCL);
  if (st) return st;
  VMA_RESPONSE(c, SET_INPUT, set_input, set_input_response);
  return VM_STATUS_OK;
}

/* Holds a VM for running, under its devices' run locks (waited for until
 * deadline_ns, 0: no deadline); vma_run_unlock() lets go. */
static vm_status_t vma_run_locked(vma_ctx_t *c, uint64_t vm_id, uint64_t deadline_ns,
                                  vma_vm_t **out_v) {
  if (atomic_load(&c->a->stopping))
    return vm_status_make(VM_UNAVAILABLE, "the agent is shutting down");
  VM_RETURN_IF_ERROR(vma_vm_acquire(c->s, vm_id, VMA_USE_RUN, out_v));
  vm_status_t st = vma_lock_devices(c->a, *out_v, deadline_ns);
  if (st) {
    vma_vm_release(c->s, *out_v, VMA_USE_RUN);
    return st;
  }
  vma_vm_apply_limit(c->a, c->s, *out_v);
  return VM_STATUS_OK;
}

static void vma_run_unlock(vma_ctx_t *c, vma_vm_t *v) {
  vma_unlock_devices(c->a, v);
  vma_vm_release(c->s, v, VMA_USE_RUN);
}

vm_status_t vma_op_invoke(vma_ctx_t *c) {
  const Vmrpc__InvokeRequest *q = c->rq->invoke;
  VM_RETURN_IF_ERROR(vma_check_name(q->func, "func"));
  uint64_t deadline = q->deadline_ms ? vm_now_ns() + (uint64_t)q->deadline_ms * 1000000ull : 0;
  vma_vm_t *v;
  VM_RETURN_IF_ERROR(vma_run_locked(c, q->vm_id, deadline, &v));
  vm_status_t st = VM_STATUS_OK;
  double secs = 0;
  if (atomic_load(&v->cancel_pending)) {
    st = vm_status_make(VM_CANCELLED, "invocation of '%.128s' cancelled", q->func);
  } else {
    vm_machine_set_deadline(v->m, deadline);
    uint64_t t0 = vm_now_ns();
    st = vm_machine_invoke_stateful(v->m, q->func);
    /* Operators only enqueue their kernels: the reply (and its seconds)
     * means the work is done, and the devices are free of it before their
     * run locks go to another session. */
    for (uint32_t k = 0; !st && k < vm_machine_num_devices(v->m); k++) {
      vm_device_t *dev = vm_machine_device(v->m, k);
      st = dev->ops->sync(dev);
    }
    secs = (double)(vm_now_ns() - t0) * 1e-9;
    vm_machine_set_deadline(v->m, 0);
  }
  vma_run_unlock(c, v);
  if (st) return st;
  Vmrpc__InvokeResponse *r = VMA_RESPONSE(c, INVOKE, invoke, invoke_response);
  r->seconds = secs;
  return VM_STATUS_OK;
}

static vm_status_t vma_check_path(size_t n, const uint32_t *path) {
  (void)path;
  if (n > VMA_MAX_PATH)
    return vm_status_make(VM_INVALID_ARGUMENT, "output path of %zu steps exceeds %d", n,
                          VMA_MAX_PATH);
  return VM_STATUS_OK;
}

vm_status_t vma_op_get_output_arity(vma_ctx_t *c) {
  const Vmrpc__GetOutputArityRequest *q = c->rq->get_output_arity;
  vma_session_t *s = c->s;
  VM_RETURN_IF_ERROR(vma_check_name(q->func, "func"));
  VM_RETURN_IF_ERROR(vma_check_path(q->n_path, q->path));
  vma_vm_t *v;
  VM_RETURN_IF_ERROR(vma_vm_acquire(s, q->vm_id, VMA_USE_READ, &v));
  int64_t arity = -1;
  /* Reference counts change inside: serialise with other readers. */
  pthread_mutex_lock(&s->lock);
  vm_status_t st = vm_machine_get_output_arity(v->m, q->func, q->path, (uint32_t)q->n_path, &arity);
  pthread_mutex_unlock(&s->lock);
  vma_vm_release(s, v, VMA_USE_READ);
  if (st) return st;
  Vmrpc__GetOutputArityResponse *r =
      VMA_RESPONSE(c, GET_OUTPUT_ARITY, get_output_arity, get_output_arity_response);
  r->arity = arity;
  return VM_STATUS_OK;
}

/* Describes an output value on the wire. dims must hold VMP_MAX_NDIM. */
vm_status_t vma_value_out(const vm_value_t *val, Vmrpc__Value *w, Vmrpc__TensorMeta *meta,
                          Vmrpc__ShapeValue *shape, char *dtype_buf, size_t dtype_len) {
  vmrpc__value__init(w);
  switch (val->kind) {
    case VM_VAL_NONE:
      w->kind_case = VMRPC__VALUE__KIND_NONE;
      w->none = 1;
      return VM_STATUS_OK;
    case VM_VAL_INT:
      w->kind_case = VMRPC__VALUE__KIND_I;
      w->i = val->u.i;
      return VM_STATUS_OK;
    case VM_VAL_FLOAT:
      w->kind_case = VMRPC__VALUE__KIND_F;
      w->f = val->u.f;
      return VM_STATUS_OK;
    case VM_VAL_BOOL:
      w->kind_case = VMRPC__VALUE__KIND_B;
      w->b = val->u.i != 0;
      return VM_STATUS_OK;
    case VM_VAL_DTYPE:
      w->kind_case = VMRPC__VALUE__KIND_S;
      w->s = vm_dtype_str(val->u.dtype, dtype_buf, dtype_len);
      return VM_STATUS_OK;
    case VM_VAL_STRING:
      w->kind_case = VMRPC__VALUE__KIND_S;
      w->s = vm_value_as_string(val)->data;
      return VM_STATUS_OK;
    case VM_VAL_SHAPE: {
      vm_shape_t *sh = vm_value_as_shape(val);
      vmrpc__shape_value__init(shape);
      shape->n_dims = sh->ndim;
      shape->dims = sh->dims;
      w->kind_case = VMRPC__VALUE__KIND_SHAPE;
      w->shape = shape;
      return VM_STATUS_OK;
    }
    case VM_VAL_TUPLE:
      w->kind_case = VMRPC__VALUE__KIND_TUPLE_ARITY;
      w->tuple_arity = vm_value_as_tuple(val)->size;
      return VM_STATUS_OK;
    case VM_VAL_TENSOR: {
      vm_tensor_t *t = vm_value_as_tensor(val);
      vmrpc__tensor_meta__init(meta);
      meta->dtype = vm_dtype_str(t->dtype, dtype_buf, dtype_len);
      meta->n_shape = t->ndim;
      meta->shape = t->shape;
      meta->nbytes = vm_tensor_nbytes_of(t);
      w->kind_case = VMRPC__VALUE__KIND_TENSOR;
      w->tensor = meta;
      return VM_STATUS_OK;
    }
    default:
      return vm_status_make(VM_INVALID_ARGUMENT, "the output is a %s, which cannot cross the wire",
                            vm_value_kind_name(val->kind));
  }
}

vm_status_t vma_op_get_output(vma_ctx_t *c) {
  const Vmrpc__GetOutputRequest *q = c->rq->get_output;
  vmagent_t *a = c->a;
  vma_session_t *s = c->s;
  VM_RETURN_IF_ERROR(vma_check_name(q->func, "func"));
  VM_RETURN_IF_ERROR(vma_check_path(q->n_path, q->path));
  vma_vm_t *v;
  VM_RETURN_IF_ERROR(vma_vm_acquire(s, q->vm_id, VMA_USE_READ, &v));
  vm_value_t val = vm_value_none();
  pthread_mutex_lock(&s->lock);
  vm_status_t st = vm_machine_get_output(v->m, q->func, q->path, (uint32_t)q->n_path, &val);
  pthread_mutex_unlock(&s->lock);
  Vmrpc__GetOutputResponse r;
  Vmrpc__Value w;
  Vmrpc__TensorMeta meta;
  Vmrpc__ShapeValue shape;
  char dtype[32];
  uint64_t len = 0;
  vm_tensor_t *t = NULL;
  if (st) goto done;
  st = vma_value_out(&val, &w, &meta, &shape, dtype, sizeof(dtype));
  if (st) goto done;
  vmrpc__get_output_response__init(&r);
  r.value = &w;
  r.offset = q->offset;
  t = vm_value_as_tensor(&val);
  if (t) {
    uint64_t nbytes = vm_tensor_nbytes_of(t);
    if (q->offset > nbytes) {
      st = vm_status_make(VM_OUT_OF_RANGE, "offset %llu is past the output's %llu bytes",
                          (unsigned long long)q->offset, (unsigned long long)nbytes);
      goto done;
    }
    uint64_t cap =
        q->max_bytes && q->max_bytes < a->cfg.chunk_bytes ? q->max_bytes : a->cfg.chunk_bytes;
    len = nbytes - q->offset < cap ? nbytes - q->offset : cap;
  } else if (q->offset) {
    st = vm_status_make(VM_OUT_OF_RANGE, "offset %llu given for an output that is not a tensor",
                        (unsigned long long)q->offset);
    goto done;
  }
  c->rs.op_case = VMRPC__RESPONSE__OP_GET_OUTPUT;
  c->rs.get_output = &r;
  {
    /* The device writes the bytes straight into the outgoing message. */
    size_t env = vmp_frame_size(&c->rs.base);
    uint8_t *buf = c->out->alloc(c->out, env + (size_t)len);
    if (!buf) {
      st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory for a %llu-byte reply",
                          (unsigned long long)len);
    } else {
      vmp_frame_write(&c->rs.base, buf);
      if (len) {
        vm_storage_t *sto = t->storage;
        vma_device_t *gate = vma_device_of(a, sto->device);
        st = vma_copy_enter(a, gate);
        if (!st) {
          st = sto->device->ops->copy_to_host(sto->device, buf + env, sto->buffer,
                                              t->offset + q->offset, len);
          vma_copy_exit(gate);
        }
      }
      if (!st) c->replied = 1;
    }
  }
  c->rs.op_case = VMRPC__RESPONSE__OP__NOT_SET;
  c->rs.get_output = NULL;
done:
  pthread_mutex_lock(&s->lock);
  vm_value_release(&val);
  pthread_mutex_unlock(&s->lock);
  vma_vm_release(s, v, VMA_USE_READ);
  return st;
}

vm_status_t vma_op_save_function(vma_ctx_t *c) {
  const Vmrpc__SaveFunctionRequest *q = c->rq->save_function;
  vma_session_t *s = c->s;
  VM_RETURN_IF_ERROR(vma_check_name(q->func, "func"));
  VM_RETURN_IF_ERROR(vma_check_name(q->saved_name, "saved_name"));
  if (q->n_args > VMA_MAX_SAVE_ARGS)
    return vm_status_make(VM_INVALID_ARGUMENT, "%zu arguments, at most %d", q->n_args,
                          VMA_MAX_SAVE_ARGS);
  vma_vm_t *v;
  VM_RETURN_IF_ERROR(vma_vm_acquire(s, q->vm_id, VMA_USE_EXCL, &v));
  vm_status_t st = VM_STATUS_OK;
  size_t n = q->n_args;
  vm_value_t *args = calloc(n ? n : 1, sizeof(*args));
  vma_transfer_t **consumed = calloc(n ? n : 1, sizeof(*consumed));
  uint32_t nc = 0, made = 0;
  const uint8_t *p = c->payload;
  size_t left = c->payload_len;
  if (!args || !consumed) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
    goto done;
  }
  /* Inline tensor arguments take their bytes from the payload one after
   * the other, in argument order. */
  for (; made < n && !st; made++)
    st = vma_value_in(c, v, q->args[made], &p, &left, consumed, &nc, &args[made]);
  if (!st && left)
    st = vm_status_make(VM_INVALID_ARGUMENT,
                        "the arguments' inline tensors need %zu payload bytes but %zu were sent",
                        c->payload_len - left, c->payload_len);
  if (!st) st = vm_machine_save_function(v->m, q->func, q->saved_name, args, (uint32_t)n);
  if (!st) vma_consume_transfers(s, consumed, nc);
done:
  for (uint32_t i = 0; args && i < made; i++) vm_value_release(&args[i]);
  free(args);
  free(consumed);
  vma_vm_release(s, v, VMA_USE_EXCL);
  if (st) return st;
  VMA_RESPONSE(c, SAVE_FUNCTION, save_function, save_function_response);
  return VM_STATUS_OK;
}

vm_status_t vma_op_time_evaluate(vma_ctx_t *c) {
  const Vmrpc__TimeEvaluateRequest *q = c->rq->time_evaluate;
  VM_RETURN_IF_ERROR(vma_check_name(q->func, "func"));
  vm_time_params_t p = vm_time_params_default();
  if (!q->defaults || q->number) p.number = q->number;
  if (!q->defaults || q->repeat) p.repeat = q->repeat;
  if (!q->defaults || q->min_repeat_ms) p.min_repeat_ms = q->min_repeat_ms;
  if (!q->defaults || q->limit_zero_time_iterations)
    p.limit_zero_time_iterations = q->limit_zero_time_iterations;
  if (!q->defaults || q->cooldown_interval_ms) p.cooldown_interval_ms = q->cooldown_interval_ms;
  if (!q->defaults || q->repeats_to_cooldown) p.repeats_to_cooldown = q->repeats_to_cooldown;
  if (!q->defaults || q->cache_flush_bytes) p.cache_flush_bytes = q->cache_flush_bytes;
  /* The per-repeat lists must fit in a reply a client accepts. */
  if (p.repeat > VMA_MAX_REPEAT)
    return vm_status_make(VM_INVALID_ARGUMENT, "repeat %d exceeds this agent's limit of %d",
                          p.repeat, VMA_MAX_REPEAT);
  /* A cooldown sleep cannot be cancelled and holds the device: bounded. */
  if (p.cooldown_interval_ms > VMA_MAX_COOLDOWN_MS)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "cooldown_interval_ms %d exceeds this agent's limit of %d",
                          p.cooldown_interval_ms, VMA_MAX_COOLDOWN_MS);
  if (p.cache_flush_bytes > VMA_MAX_FLUSH_BYTES)
    return vm_status_make(VM_RESOURCE_EXHAUSTED,
                          "cache_flush_bytes of %llu exceeds this agent's limit of %llu",
                          (unsigned long long)p.cache_flush_bytes, VMA_MAX_FLUSH_BYTES);
  vma_vm_t *v;
  VM_RETURN_IF_ERROR(vma_run_locked(c, q->vm_id, 0, &v));
  vm_time_result_t res;
  memset(&res, 0, sizeof(res));
  vma_measure_enter(c->a, v);
  vm_status_t st = vm_machine_time_evaluate(v->m, q->func, &p, &res);
  vma_measure_exit(c->a, v);
  vma_run_unlock(c, v);
  if (st) return st;
  Vmrpc__TimeEvaluateResponse *r =
      VMA_RESPONSE(c, TIME_EVALUATE, time_evaluate, time_evaluate_response);
  double *secs = vma_own(c, malloc((res.repeat ? res.repeat : 1) * sizeof(double)));
  double *dsecs = vma_own(c, malloc((res.repeat ? res.repeat : 1) * sizeof(double)));
  if (!secs || !dsecs) {
    vm_time_result_free(&res);
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (uint32_t i = 0; i < res.repeat; i++) {
    secs[i] = res.seconds ? res.seconds[i] : 0;
    dsecs[i] = res.device_seconds ? res.device_seconds[i] : -1.0;
  }
  r->number = res.number;
  r->n_seconds = res.repeat;
  r->seconds = secs;
  r->n_device_seconds = res.repeat;
  r->device_seconds = dsecs;
  r->min_s = res.min_s;
  r->mean_s = res.mean_s;
  r->median_s = res.median_s;
  r->max_s = res.max_s;
  r->std_s = res.std_s;
  r->device_median_s = res.device_median_s;
  r->warmup_s = res.warmup_s;
  vm_time_result_free(&res);
  return VM_STATUS_OK;
}

vm_status_t vma_op_profile(vma_ctx_t *c) {
  const Vmrpc__ProfileRequest *q = c->rq->profile;
  VM_RETURN_IF_ERROR(vma_check_name(q->func, "func"));
  vma_vm_t *v;
  VM_RETURN_IF_ERROR(vma_run_locked(c, q->vm_id, 0, &v));
  vm_profile_t prof;
  memset(&prof, 0, sizeof(prof));
  vma_measure_enter(c->a, v);
  vm_status_t st = vm_machine_profile(v->m, q->func, &prof);
  vma_measure_exit(c->a, v);
  vma_run_unlock(c, v);
  if (st) return st;
  Vmrpc__ProfileResponse *r = VMA_RESPONSE(c, PROFILE, profile, profile_response);
  size_t n = prof.num_rows < VMA_MAX_PROFILE_ROWS ? prof.num_rows : VMA_MAX_PROFILE_ROWS;
  Vmrpc__ProfileRow *rows = vma_own(c, calloc(n ? n : 1, sizeof(*rows)));
  Vmrpc__ProfileRow **ptrs = vma_own(c, calloc(n ? n : 1, sizeof(*ptrs)));
  /* Names must outlive prof: copy them next to the rows. */
  char(*names)[128] = vma_own(c, calloc(n ? n : 1, 128));
  if (!rows || !ptrs || !names) {
    vm_profile_free(&prof);
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (size_t i = 0; i < n; i++) {
    const vm_profile_row_t *pr = &prof.rows[i];
    vmrpc__profile_row__init(&rows[i]);
    snprintf(names[i], 128, "%s", pr->name);
    rows[i].name = names[i];
    rows[i].calls = pr->calls;
    rows[i].total_s = pr->total_s;
    rows[i].mean_s = pr->mean_s;
    rows[i].device_s = pr->device_s;
    rows[i].share = pr->share;
    ptrs[i] = &rows[i];
  }
  r->n_rows = n;
  r->rows = ptrs;
  r->total_s = prof.total_s;
  vm_profile_free(&prof);
  return VM_STATUS_OK;
}

uint64_t vma_rss_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long long size = 0, rss = 0;
  int n = fscanf(f, "%llu %llu", &size, &rss);
  fclose(f);
  if (n != 2) return 0;
  long page = sysconf(_SC_PAGESIZE);
  return rss * (uint64_t)(page > 0 ? page : 4096);
}

vm_status_t vma_op_stats(vma_ctx_t *c) {
  vmagent_t *a = c->a;
  vma_session_t *s = c->s;
  Vmrpc__StatsResponse *r = VMA_RESPONSE(c, STATS, stats, stats_response);
  /* Agent totals first (table lock, then each session's lock: the usual
   * order). Other sessions' figures are as of their last request. */
  pthread_mutex_lock(&a->lock);
  r->agent_sessions = a->num_sessions;
  uint64_t agent_bytes = 0;
  for (uint32_t i = 0; i < a->num_sessions; i++)
    if (a->sessions[i] != s) agent_bytes += a->sessions[i]->bytes;
  pthread_mutex_unlock(&a->lock);

  pthread_mutex_lock(&s->lock);
  r->session_bytes = vma_session_bytes_locked(s, NULL);
  r->session_vms = s->num_vms;
  r->session_executables = s->num_execs;
  r->session_transfers = s->num_transfers;
  size_t n = 0;
  for (vma_vm_t *v = s->vms; v; v = v->next) n += v->num_allocs;
  Vmrpc__AllocatorStats *rows = vma_own(c, calloc(n ? n : 1, sizeof(*rows)));
  Vmrpc__AllocatorStats **ptrs = vma_own(c, calloc(n ? n : 1, sizeof(*ptrs)));
  char(*names)[48] = vma_own(c, calloc(n ? n : 1, 48));
  if (!rows || !ptrs || !names) {
    pthread_mutex_unlock(&s->lock);
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  }
  size_t k = 0;
  for (vma_vm_t *v = s->vms; v; v = v->next) {
    for (uint32_t i = 0; i < v->num_allocs && k < n; i++, k++) {
      char dev[32];
      vm_device_str(vm_machine_device(v->m, i), dev, sizeof(dev));
      snprintf(names[k], 48, "vm %llu %s", (unsigned long long)v->id, dev);
      vmrpc__allocator_stats__init(&rows[k]);
      rows[k].device = names[k];
      rows[k].kind =
          (char *)vm_allocator_kind_name(vm_allocator_kind(vm_machine_allocator(v->m, i)));
      rows[k].bytes_in_use = v->snap[i].bytes_in_use;
      rows[k].peak_bytes = v->snap[i].peak_bytes;
      rows[k].bytes_reserved = v->snap[i].bytes_reserved;
      rows[k].device_allocs = v->snap[i].device_allocs;
      rows[k].device_frees = v->snap[i].device_frees;
      ptrs[k] = &rows[k];
    }
  }
  pthread_mutex_unlock(&s->lock);
  r->n_allocators = k;
  r->allocators = ptrs;
  r->agent_bytes = agent_bytes + r->session_bytes;
  uint32_t loaded = 0;
  vma_store_stats(a->store, &r->store_bytes, &r->store_entries, &loaded);
  r->requests = atomic_load(&a->requests);
  r->agent_rss_bytes = vma_rss_bytes();
  return VM_STATUS_OK;
}

vm_status_t vma_op_cancel(vma_ctx_t *c) {
  const Vmrpc__CancelRequest *q = c->rq->cancel;
  vma_session_t *s = c->s;
  pthread_mutex_lock(&s->lock);
  vma_vm_t *v = vma_find_vm(s, q->vm_id);
  if (v && v->running) {
    /* Sticky until the next request on this VM resets it. */
    atomic_store(&v->cancel_pending, 1);
    vm_machine_cancel(v->m);
  }
  pthread_mutex_unlock(&s->lock);
  if (!v) return vma_vm_not_found(q->vm_id);
  VMA_RESPONSE(c, CANCEL, cancel, cancel_response);
  return VM_STATUS_OK;
}

vm_status_t vma_op_free_vm(vma_ctx_t *c) {
  const Vmrpc__FreeVMRequest *q = c->rq->free_vm;
  vma_session_t *s = c->s;
  vm_status_t st = VM_STATUS_OK;
  pthread_mutex_lock(&s->lock);
  vma_vm_t *v = vma_find_vm(s, q->vm_id);
  int busy = v && (v->exclusive || v->readers);
  for (vma_transfer_t *t = s->transfers; v && !busy && t; t = t->next)
    if (t->vm == v && t->ck.writers) busy = 1;
  if (!v) {
    st = vma_vm_not_found(q->vm_id);
  } else if (busy) {
    st = vma_vm_busy(q->vm_id);
  } else {
    vma_vm_t **pp = &s->vms;
    while (*pp != v) pp = &(*pp)->next;
    *pp = v->next;
    s->num_vms--;
    vma_vm_destroy(c->a, s, v);
  }
  pthread_mutex_unlock(&s->lock);
  if (st) return st;
  VMA_RESPONSE(c, FREE_VM, free_vm, free_vmresponse);
  return VM_STATUS_OK;
}

vm_status_t vma_op_free_executable(vma_ctx_t *c) {
  const Vmrpc__FreeExecutableRequest *q = c->rq->free_executable;
  vma_session_t *s = c->s;
  pthread_mutex_lock(&s->lock);
  vma_execref_t **pp = &s->execs;
  while (*pp && (*pp)->id != q->exec_id) pp = &(*pp)->next;
  vma_execref_t *e = *pp;
  if (e) {
    *pp = e->next;
    s->num_execs--;
  }
  pthread_mutex_unlock(&s->lock);
  if (!e) return vma_exec_not_found(q->exec_id);
  /* VMs made from it hold their own reference: they keep working. */
  vma_store_release(c->a->store, e->entry);
  free(e);
  VMA_RESPONSE(c, FREE_EXECUTABLE, free_executable, free_executable_response);
  return VM_STATUS_OK;
}

vm_status_t vma_op_ping(vma_ctx_t *c) {
  VMA_RESPONSE(c, PING, ping, ping_response);
  return VM_STATUS_OK;
}

vm_status_t vma_op_goodbye(vma_ctx_t *c) {
  VM_LOGI("session %016llx: goodbye", (unsigned long long)c->s->id);
  vma_session_end(c->a, c->s); /* destroyed when this request lets go */
  VMA_RESPONSE(c, GOODBYE, goodbye, goodbye_response);
  return VM_STATUS_OK;
}

/* ------------------------------------------------------------ dispatch */

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

int vma_dispatch(vmagent_t *a, uint32_t pipe_id, const uint8_t *body, size_t len, vma_out_t *out) {
  atomic_fetch_add(&a->requests, 1);
  const uint8_t *env, *payload;
  size_t env_len, payload_len;
  vm_status_t st = VM_STATUS_OK;
  /* A peer that has not said Hello gets no more than Hello needs: its large
   * message is not decoded at all. */
  if (len > VMA_PRE_HELLO_MAX_BYTES && !vma_pipe_has_session(a, pipe_id))
    st = vm_status_make(VM_FAILED_PRECONDITION,
                        "a %zu-byte message on a connection without a session: until Hello "
                        "succeeds the agent takes messages of at most %d bytes; send Hello first",
                        len, VMA_PRE_HELLO_MAX_BYTES);
  if (!st) st = vmp_frame_split(body, len, 0, &env, &env_len, &payload, &payload_len);
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
    if (!st) st = vma_call(c, fn, flags);
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
