/* The operations of libvmclient: one function per protocol operation
 * (ops_internal.h lists the files), and the helpers they share. This file:
 * ping, VMs, invoke and the long operations, timing, profile, stats. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "vmrpc/file.h"
#include "ops_internal.h"

vm_status_t vmci_need_func(const char *func) {
  if (!func || !func[0])
    return vm_status_make(VM_INVALID_ARGUMENT, "no function name given (e.g. \"main\")");
  return VM_STATUS_OK;
}

vm_status_t vmci_need_conn(const vmc_conn_t *c) {
  if (!c) return vm_status_make(VM_INVALID_ARGUMENT, "connection is NULL: call vmc_connect first");
  return VM_STATUS_OK;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Formats "Op func[path]" for messages. */
void vmci_path_str(char *buf, size_t cap, const char *op, const char *func, const uint32_t *path,
                   uint32_t path_len) {
  int n = snprintf(buf, cap, "%s %s", op, func ? func : "?");
  for (uint32_t i = 0; i < path_len && n > 0 && (size_t)n < cap; i++)
    n += snprintf(buf + n, cap - (size_t)n, "[%u]", path[i]);
}

/* The reply case of req's operation (vmproto/ops.h). */
Vmrpc__Response__OpCase vmci_reply_of(const Vmrpc__Request *req) {
  const vmp_op_t *o = vmp_op_find(req->op_case);
  return o ? o->reply : VMRPC__RESPONSE__OP__NOT_SET;
}

/* One request with the connection's request timeout and no payload. */
vm_status_t vmci_call_plain(vmc_conn_t *c, Vmrpc__Request *req, const char *what,
                            vmci_reply_t *out) {
  return vmci_call(c, req, NULL, 0, vmci_reply_of(req), c->request_timeout_ms, what, out);
}

/* One request whose reply carries nothing but success. */
vm_status_t vmci_call_ack(vmc_conn_t *c, Vmrpc__Request *req, const void *payload, size_t plen,
                          const char *what) {
  vmci_reply_t r;
  VM_RETURN_IF_ERROR(
      vmci_call(c, req, payload, plen, vmci_reply_of(req), c->request_timeout_ms, what, &r));
  vmci_reply_free(&r);
  return VM_STATUS_OK;
}

/* Bytes of the chunk at off of a total-byte transfer in chunks of cb. */
uint64_t vmci_chunk_len(uint64_t total, uint64_t off, uint64_t cb) {
  return total - off < cb ? total - off : cb;
}

/* ------------------------------------------------------------------ ping */

vm_status_t vmc_ping(vmc_conn_t *c, double *out_rtt_s) {
  VM_RETURN_IF_ERROR(vmci_need_conn(c));
  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__PingRequest p = VMRPC__PING_REQUEST__INIT;
  req.op_case = OP(PING);
  req.ping = &p;
  vmci_reply_t r;
  double t0 = now_s();
  VM_RETURN_IF_ERROR(vmci_call_plain(c, &req, "Ping", &r));
  double t1 = now_s();
  vmci_reply_free(&r);
  if (out_rtt_s) *out_rtt_s = t1 - t0;
  return VM_STATUS_OK;
}

/* -------------------------------------------------------------------- VMs */

/* The wire form of a VM's device list (at most 64). */
vm_status_t vmci_device_specs(const vmc_device_spec_t *devices, uint32_t num_devices,
                              Vmrpc__DeviceSpec specs[64], Vmrpc__DeviceSpec *spec_ptrs[64]) {
  if (num_devices > 64)
    return vm_status_make(VM_INVALID_ARGUMENT, "%u devices given; at most 64 per VM", num_devices);
  if (num_devices && !devices)
    return vm_status_make(VM_INVALID_ARGUMENT, "vmc_create_vm: devices is NULL");
  for (uint32_t i = 0; i < num_devices; i++) {
    vmrpc__device_spec__init(&specs[i]);
    if (!devices[i].selector || !devices[i].selector[0])
      return vm_status_make(VM_INVALID_ARGUMENT,
                            "device %u has no selector (use \"cpu\", \"opencl:0\", ... as listed "
                            "by `vmclient info`)",
                            i);
    specs[i].selector = (char *)devices[i].selector;
    specs[i].allocator = (char *)(devices[i].allocator ? devices[i].allocator : "");
    spec_ptrs[i] = &specs[i];
  }
  return VM_STATUS_OK;
}

vm_status_t vmc_create_vm(vmc_conn_t *c, vmc_exec_t exec, const vmc_device_spec_t *devices,
                          uint32_t num_devices, const char *exec_mode, vmc_vm_t *out_vm) {
  VM_RETURN_IF_ERROR(vmci_need_conn(c));
  if (!out_vm) return vm_status_make(VM_INVALID_ARGUMENT, "vmc_create_vm: out_vm is NULL");
  Vmrpc__DeviceSpec specs[64];
  Vmrpc__DeviceSpec *spec_ptrs[64];
  VM_RETURN_IF_ERROR(vmci_device_specs(devices, num_devices, specs, spec_ptrs));
  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__CreateVMRequest cv = VMRPC__CREATE_VMREQUEST__INIT;
  cv.exec_id = exec.id;
  cv.n_devices = num_devices;
  cv.devices = spec_ptrs;
  cv.exec_mode = (char *)(exec_mode ? exec_mode : "");
  req.op_case = OP(CREATE_VM);
  req.create_vm = &cv;
  vmci_reply_t r;
  VM_RETURN_IF_ERROR(vmci_call_plain(c, &req, "CreateVM", &r));
  uint64_t id = r.resp->create_vm ? r.resp->create_vm->vm_id : 0;
  vmci_reply_free(&r);
  if (id == 0) return vm_status_make(VM_INTERNAL, "the agent created a VM without a vm id");
  out_vm->id = id;
  return VM_STATUS_OK;
}

vm_status_t vmc_free_vm(vmc_conn_t *c, vmc_vm_t vm) {
  VM_RETURN_IF_ERROR(vmci_need_conn(c));
  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__FreeVMRequest f = VMRPC__FREE_VMREQUEST__INIT;
  f.vm_id = vm.id;
  req.op_case = OP(FREE_VM);
  req.free_vm = &f;
  return vmci_call_ack(c, &req, NULL, 0, "FreeVM");
}

/* ---------------------------------------------------------------- invoke */

vm_status_t vmc_cancel(vmc_conn_t *c, vmc_vm_t vm) {
  VM_RETURN_IF_ERROR(vmci_need_conn(c));
  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__CancelRequest cr = VMRPC__CANCEL_REQUEST__INIT;
  cr.vm_id = vm.id;
  req.op_case = OP(CANCEL);
  req.cancel = &cr;
  return vmci_call_ack(c, &req, NULL, 0, "Cancel");
}

/* How long to wait for a long operation's reply. */
int32_t vmci_long_wait_ms(const vmc_conn_t *c, uint32_t deadline_ms) {
  if (deadline_ms == 0) return c->long_timeout_ms; /* 0: no limit */
  int64_t t = (int64_t)deadline_ms + c->request_timeout_ms;
  return t > INT32_MAX ? INT32_MAX : (int32_t)t;
}

typedef struct cancel_arg {
  vmc_conn_t *c;
  vmc_vm_t vm;
} cancel_arg_t;

/* After giving up on a long operation, stop it on the agent (best effort). */
static void cancel_on_timeout(void *arg) {
  cancel_arg_t *a = arg;
  vm_status_free(vmc_cancel(a->c, a->vm));
}

/* A long operation on vm, cancelled there when its wait runs out. */
vm_status_t vmci_call_vm_long(vmc_conn_t *c, vmc_vm_t vm, Vmrpc__Request *req, uint32_t deadline_ms,
                              const char *what, vmci_reply_t *out) {
  cancel_arg_t ca = {c, vm};
  return vmci_call_long(c, req, vmci_reply_of(req), vmci_long_wait_ms(c, deadline_ms), what,
                        cancel_on_timeout, &ca, out);
}

vm_status_t vmc_invoke(vmc_conn_t *c, vmc_vm_t vm, const char *func, uint32_t deadline_ms,
                       double *out_agent_seconds) {
  VM_RETURN_IF_ERROR(vmci_need_conn(c));
  VM_RETURN_IF_ERROR(vmci_need_func(func));
  char what[160];
  snprintf(what, sizeof(what), "Invoke %s", func);
  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__InvokeRequest iv = VMRPC__INVOKE_REQUEST__INIT;
  iv.vm_id = vm.id;
  iv.func = (char *)func;
  iv.deadline_ms = deadline_ms;
  req.op_case = OP(INVOKE);
  req.invoke = &iv;
  vmci_reply_t r;
  VM_RETURN_IF_ERROR(vmci_call_vm_long(c, vm, &req, deadline_ms, what, &r));
  if (out_agent_seconds) *out_agent_seconds = r.resp->invoke ? r.resp->invoke->seconds : 0.0;
  vmci_reply_free(&r);
  return VM_STATUS_OK;
}

/* ---------------------------------------------------------------- timing */

vmc_time_params_t vmc_time_params_default(void) {
  vmc_time_params_t p;
  memset(&p, 0, sizeof(p));
  p.number = 10;
  p.repeat = 1;
  p.min_repeat_ms = 0;
  p.limit_zero_time_iterations = 100;
  p.cooldown_interval_ms = 0;
  p.repeats_to_cooldown = 1;
  p.cache_flush_bytes = 0;
  return p;
}

vm_status_t vmc_time_evaluate(vmc_conn_t *c, vmc_vm_t vm, const char *func,
                              const vmc_time_params_t *params, vmc_time_result_t *out) {
  VM_RETURN_IF_ERROR(vmci_need_conn(c));
  VM_RETURN_IF_ERROR(vmci_need_func(func));
  if (!out) return vm_status_make(VM_INVALID_ARGUMENT, "vmc_time_evaluate: out is NULL");
  char what[160];
  snprintf(what, sizeof(what), "TimeEvaluate %s", func);
  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__TimeEvaluateRequest te = VMRPC__TIME_EVALUATE_REQUEST__INIT;
  te.vm_id = vm.id;
  te.func = (char *)func;
  if (params) {
    te.number = params->number;
    te.repeat = params->repeat;
    te.min_repeat_ms = params->min_repeat_ms;
    te.limit_zero_time_iterations = params->limit_zero_time_iterations;
    te.cooldown_interval_ms = params->cooldown_interval_ms;
    te.repeats_to_cooldown = params->repeats_to_cooldown;
    te.cache_flush_bytes = params->cache_flush_bytes;
    te.defaults = 0;
  } else {
    te.defaults = 1;
  }
  req.op_case = OP(TIME_EVALUATE);
  req.time_evaluate = &te;
  vmci_reply_t r;
  VM_RETURN_IF_ERROR(vmci_call_vm_long(c, vm, &req, 0, what, &r));
  const Vmrpc__TimeEvaluateResponse *tr = r.resp->time_evaluate;
  memset(out, 0, sizeof(*out));
  if (!tr) {
    vmci_reply_free(&r);
    return vm_status_make(VM_INTERNAL, "%s: empty reply", what);
  }
  size_t n = tr->n_seconds;
  if (n > (1u << 24)) {
    vmci_reply_free(&r);
    return vm_status_make(VM_INTERNAL, "%s: the agent sent %zu repeats", what, n);
  }
  out->seconds = calloc(n ? n : 1, sizeof(double));
  out->device_seconds = calloc(n ? n : 1, sizeof(double));
  if (!out->seconds || !out->device_seconds) {
    vmci_reply_free(&r);
    vmc_time_result_free(out);
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (size_t i = 0; i < n; i++) {
    out->seconds[i] = tr->seconds[i];
    out->device_seconds[i] = i < tr->n_device_seconds ? tr->device_seconds[i] : -1.0;
  }
  out->repeat = (uint32_t)n;
  out->number = tr->number;
  out->min_s = tr->min_s;
  out->mean_s = tr->mean_s;
  out->median_s = tr->median_s;
  out->max_s = tr->max_s;
  out->std_s = tr->std_s;
  out->device_median_s = tr->device_median_s;
  out->warmup_s = tr->warmup_s;
  out->gate_wait_s = tr->gate_wait_s;
  vmci_reply_free(&r);
  return VM_STATUS_OK;
}

void vmc_time_result_free(vmc_time_result_t *r) {
  if (!r) return;
  free(r->seconds);
  free(r->device_seconds);
  memset(r, 0, sizeof(*r));
}

vm_status_t vmc_profile(vmc_conn_t *c, vmc_vm_t vm, const char *func, vmc_profile_t *out) {
  VM_RETURN_IF_ERROR(vmci_need_conn(c));
  VM_RETURN_IF_ERROR(vmci_need_func(func));
  if (!out) return vm_status_make(VM_INVALID_ARGUMENT, "vmc_profile: out is NULL");
  char what[160];
  snprintf(what, sizeof(what), "Profile %s", func);
  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__ProfileRequest pr = VMRPC__PROFILE_REQUEST__INIT;
  pr.vm_id = vm.id;
  pr.func = (char *)func;
  req.op_case = OP(PROFILE);
  req.profile = &pr;
  vmci_reply_t r;
  VM_RETURN_IF_ERROR(vmci_call_vm_long(c, vm, &req, 0, what, &r));
  const Vmrpc__ProfileResponse *p = r.resp->profile;
  memset(out, 0, sizeof(*out));
  size_t n = p ? p->n_rows : 0;
  out->rows = calloc(n ? n : 1, sizeof(*out->rows));
  if (!out->rows) {
    vmci_reply_free(&r);
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (size_t i = 0; i < n; i++) {
    const Vmrpc__ProfileRow *w = p->rows[i];
    vmc_profile_row_t *o = &out->rows[i];
    snprintf(o->name, sizeof(o->name), "%s", w->name ? w->name : "");
    o->calls = w->calls;
    o->total_s = w->total_s;
    o->mean_s = w->mean_s;
    o->device_s = w->device_s;
    o->share = w->share;
  }
  out->num_rows = (uint32_t)n;
  out->total_s = p ? p->total_s : 0.0;
  vmci_reply_free(&r);
  return VM_STATUS_OK;
}

void vmc_profile_free(vmc_profile_t *p) {
  if (!p) return;
  free(p->rows);
  memset(p, 0, sizeof(*p));
}

/* ----------------------------------------------------------------- stats */

vm_status_t vmc_stats(vmc_conn_t *c, vmc_stats_t *out) {
  VM_RETURN_IF_ERROR(vmci_need_conn(c));
  if (!out) return vm_status_make(VM_INVALID_ARGUMENT, "vmc_stats: out is NULL");
  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__StatsRequest sr = VMRPC__STATS_REQUEST__INIT;
  req.op_case = OP(STATS);
  req.stats = &sr;
  vmci_reply_t r;
  VM_RETURN_IF_ERROR(vmci_call_plain(c, &req, "Stats", &r));
  const Vmrpc__StatsResponse *s = r.resp->stats;
  memset(out, 0, sizeof(*out));
  size_t n = s ? s->n_allocators : 0;
  out->allocators = calloc(n ? n : 1, sizeof(*out->allocators));
  if (!out->allocators) {
    vmci_reply_free(&r);
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (size_t i = 0; i < n; i++) {
    const Vmrpc__AllocatorStats *a = s->allocators[i];
    vmc_alloc_stats_t *o = &out->allocators[i];
    snprintf(o->device, sizeof(o->device), "%s", a->device ? a->device : "");
    snprintf(o->kind, sizeof(o->kind), "%s", a->kind ? a->kind : "");
    o->bytes_in_use = a->bytes_in_use;
    o->peak_bytes = a->peak_bytes;
    o->bytes_reserved = a->bytes_reserved;
    o->device_allocs = a->device_allocs;
    o->device_frees = a->device_frees;
  }
  out->num_allocators = (uint32_t)n;
  if (s) {
    out->session_bytes = s->session_bytes;
    out->session_vms = s->session_vms;
    out->session_executables = s->session_executables;
    out->session_transfers = s->session_transfers;
    out->agent_sessions = s->agent_sessions;
    out->agent_bytes = s->agent_bytes;
    out->store_bytes = s->store_bytes;
    out->store_entries = s->store_entries;
    out->requests = s->requests;
    out->agent_rss_bytes = s->agent_rss_bytes;
  }
  vmci_reply_free(&r);
  return VM_STATUS_OK;
}

void vmc_stats_free(vmc_stats_t *s) {
  if (!s) return;
  free(s->allocators);
  memset(s, 0, sizeof(*s));
}
