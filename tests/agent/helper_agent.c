/* See helper_agent.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "helper_agent.h"

#include "agent_proc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test_util.h"
#include "vm/executable.h"
#include "vmexamples/models.h"

const char ha_test_program[] =
    ".packed $vm.builtin.make_tuple\n"
    ".packed $vm.builtin.shape_of\n"
    ".packed $vm.builtin.null_value\n"
    ".func @main(x: float32[?]) regs 3 {\n"
    "  %1 = call $vm.builtin.shape_of(%0)\n"
    "  %2 = call $vm.builtin.make_tuple(%0, %1)\n"
    "  ret %2\n"
    "}\n"
    ".func @ident(x) regs 1 {\n"
    "  ret %0\n"
    "}\n"
    ".func @pair(a, b) regs 3 {\n"
    "  %2 = call $vm.builtin.make_tuple(%0, %1)\n"
    "  ret %2\n"
    "}\n"
    ".func @spin() regs 1 {\n"
    "L0:\n"
    "  %0 = call $vm.builtin.null_value()\n"
    "  goto L0\n"
    "}\n";

/* Writes e (when st is OK) into *out and frees it; -1 with the reason on
 * stderr otherwise. */
static int ha_write_exec(vm_status_t st, vm_executable_t *e, const char *what, uint8_t **out,
                         size_t *out_len) {
  if (!st) st = vm_executable_write(e, out, out_len);
  vm_executable_free(e);
  if (st) {
    fprintf(stderr, "%s: %s\n", what, vm_status_message(st));
    vm_status_free(st);
    return -1;
  }
  return 0;
}

int ha_exec_bytes(const char *text, uint8_t **out, size_t *out_len) {
  vm_executable_t *e = NULL;
  vm_status_t st = vm_executable_asm(text, strlen(text), NULL, &e);
  return ha_write_exec(st, e, "ha_exec_bytes", out, out_len);
}

vm_status_t ha_mlp_check(const char *url, const char *device, const uint8_t *mlp, size_t len) {
  vmex_io_shape_t io;
  vmex_io_shape(VMEX_MODEL_MLP, &io);
  float *x = malloc(io.in_numel * sizeof(float));
  float *want = malloc(io.out_numel * sizeof(float));
  float *got = malloc(io.out_numel * sizeof(float));
  vmc_conn_t *c = NULL;
  vmc_exec_t ex;
  vmc_vm_t vm;
  vmc_tensor_t t, meta;
  vmex_make_input(5, x, io.in_numel);
  vm_status_t st = vmex_reference_mlp(11, NULL, x, want);
  if (!st) st = vmc_connect(url, NULL, &c);
  if (!st) st = vmc_upload_memory(c, mlp, len, NULL, NULL, &ex, NULL);
  vmc_device_spec_t dev = {device, NULL};
  if (!st) st = vmc_create_vm(c, ex, &dev, 1, NULL, &vm);
  if (!st) st = vmc_tensor_wrap(VM_F32, io.in_ndim, io.in_shape, x, &t);
  if (!st) st = vmc_set_input(c, vm, "main", 0, &t);
  if (!st) st = vmc_invoke(c, vm, "main", 30000, NULL);
  if (!st)
    st = vmc_get_output_into(c, vm, "main", NULL, 0, got, io.out_numel * sizeof(float), &meta);
  for (size_t j = 0; !st && j < io.out_numel; j++) {
    if (fabs((double)got[j] - (double)want[j]) > 1e-5 + 1e-4 * fabs((double)want[j]))
      st = vm_status_make(VM_INTERNAL, "mlp output %zu is %g, want %g", j, (double)got[j],
                          (double)want[j]);
  }
  vmc_close(c);
  free(x);
  free(want);
  free(got);
  return st;
}

int ha_mlp_bytes(uint64_t seed, uint8_t **out, size_t *out_len) {
  vm_executable_t *e = NULL;
  vm_status_t st = vmex_build_mlp(seed, NULL, &e, NULL);
  return ha_write_exec(st, e, "ha_mlp_bytes", out, out_len);
}

static int ha_call(hw_conn_t *c, Vmrpc__Request *rq, const void *payload, size_t len,
                   hw_reply_t *out) {
  if (hw_call(c, rq, payload, len, out) != 0) return -1;
  return hw_code(out);
}

int ha_upload_begin(hw_conn_t *c, const uint8_t sha[32], uint64_t size, hw_reply_t *out) {
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__UploadBeginRequest q = VMRPC__UPLOAD_BEGIN_REQUEST__INIT;
  q.sha256.data = (uint8_t *)sha;
  q.sha256.len = 32;
  q.size = size;
  rq.op_case = VMRPC__REQUEST__OP_UPLOAD_BEGIN;
  rq.upload_begin = &q;
  return ha_call(c, &rq, NULL, 0, out);
}

int ha_upload_chunk(hw_conn_t *c, uint64_t upload_id, uint64_t offset, const void *data, size_t len,
                    hw_reply_t *out) {
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__UploadChunkRequest q = VMRPC__UPLOAD_CHUNK_REQUEST__INIT;
  q.upload_id = upload_id;
  q.offset = offset;
  rq.op_case = VMRPC__REQUEST__OP_UPLOAD_CHUNK;
  rq.upload_chunk = &q;
  return ha_call(c, &rq, data, len, out);
}

int ha_upload_commit(hw_conn_t *c, uint64_t upload_id, hw_reply_t *out) {
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__UploadCommitRequest q = VMRPC__UPLOAD_COMMIT_REQUEST__INIT;
  q.upload_id = upload_id;
  rq.op_case = VMRPC__REQUEST__OP_UPLOAD_COMMIT;
  rq.upload_commit = &q;
  return ha_call(c, &rq, NULL, 0, out);
}

int ha_upload(hw_conn_t *c, const uint8_t *data, size_t len, size_t chunk, uint64_t *out_exec,
              int *out_present, hw_reply_t *out) {
  uint8_t sha[32];
  vm_sha256(data, len, sha);
  *out_present = 0;
  int code = ha_upload_begin(c, sha, len, out);
  if (code) return code;
  if (out->rs->upload_begin->present) {
    *out_present = 1;
    *out_exec = out->rs->upload_begin->exec_id;
    return 0;
  }
  uint64_t id = out->rs->upload_begin->upload_id;
  hw_reply_free(out);
  /* Last chunk first: order must not matter. */
  size_t n = len / chunk + (len % chunk != 0);
  for (size_t k = n; k-- > 0;) {
    size_t off = k * chunk, l = len - off < chunk ? len - off : chunk;
    code = ha_upload_chunk(c, id, off, data + off, l, out);
    if (code) return code;
    hw_reply_free(out);
  }
  code = ha_upload_commit(c, id, out);
  if (code) return code;
  *out_exec = out->rs->upload_commit->exec_id;
  return 0;
}

int ha_create_vm(hw_conn_t *c, uint64_t exec_id, const char *selector, const char *allocator,
                 const char *mode, uint64_t *out_vm, hw_reply_t *out) {
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__CreateVMRequest q = VMRPC__CREATE_VMREQUEST__INIT;
  Vmrpc__DeviceSpec d = VMRPC__DEVICE_SPEC__INIT;
  Vmrpc__DeviceSpec *dl[1] = {&d};
  q.exec_id = exec_id;
  if (selector) {
    d.selector = (char *)selector;
    d.allocator = (char *)(allocator ? allocator : "");
    q.n_devices = 1;
    q.devices = dl;
  }
  q.exec_mode = (char *)(mode ? mode : "");
  rq.op_case = VMRPC__REQUEST__OP_CREATE_VM;
  rq.create_vm = &q;
  int code = ha_call(c, &rq, NULL, 0, out);
  if (code == 0) *out_vm = out->rs->create_vm->vm_id;
  return code;
}

static int ha_set_input(hw_conn_t *c, uint64_t vm, const char *func, int index, const char *name,
                        Vmrpc__Value *v, const void *data, size_t len, hw_reply_t *out) {
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__SetInputRequest q = VMRPC__SET_INPUT_REQUEST__INIT;
  q.vm_id = vm;
  q.func = (char *)func;
  if (index >= 0) {
    q.param_case = VMRPC__SET_INPUT_REQUEST__PARAM_INDEX;
    q.index = (uint32_t)index;
  } else if (name) {
    q.param_case = VMRPC__SET_INPUT_REQUEST__PARAM_NAME;
    q.name = (char *)name;
  }
  q.value = v;
  rq.op_case = VMRPC__REQUEST__OP_SET_INPUT;
  rq.set_input = &q;
  return ha_call(c, &rq, data, len, out);
}

int ha_set_input_tensor(hw_conn_t *c, uint64_t vm, const char *func, int index, const char *name,
                        const char *dtype, const int64_t *shape, size_t ndim, uint64_t nbytes,
                        const void *data, size_t data_len, hw_reply_t *out) {
  Vmrpc__Value v = VMRPC__VALUE__INIT;
  Vmrpc__TensorMeta m = VMRPC__TENSOR_META__INIT;
  m.dtype = (char *)dtype;
  m.n_shape = ndim;
  m.shape = (int64_t *)shape;
  m.nbytes = nbytes;
  v.kind_case = VMRPC__VALUE__KIND_TENSOR;
  v.tensor = &m;
  return ha_set_input(c, vm, func, index, name, &v, data, data_len, out);
}

int ha_set_input_ref(hw_conn_t *c, uint64_t vm, const char *func, int index, uint64_t transfer,
                     hw_reply_t *out) {
  Vmrpc__Value v = VMRPC__VALUE__INIT;
  v.kind_case = VMRPC__VALUE__KIND_TENSOR_REF;
  v.tensor_ref = transfer;
  return ha_set_input(c, vm, func, index, NULL, &v, NULL, 0, out);
}

int ha_set_input_int(hw_conn_t *c, uint64_t vm, const char *func, int index, int64_t i,
                     hw_reply_t *out) {
  Vmrpc__Value v = VMRPC__VALUE__INIT;
  v.kind_case = VMRPC__VALUE__KIND_I;
  v.i = i;
  return ha_set_input(c, vm, func, index, NULL, &v, NULL, 0, out);
}

int ha_tensor_begin(hw_conn_t *c, uint64_t vm, const char *dtype, const int64_t *shape, size_t ndim,
                    uint64_t nbytes, uint64_t *out_transfer, hw_reply_t *out) {
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__TensorBeginRequest q = VMRPC__TENSOR_BEGIN_REQUEST__INIT;
  Vmrpc__TensorMeta m = VMRPC__TENSOR_META__INIT;
  m.dtype = (char *)dtype;
  m.n_shape = ndim;
  m.shape = (int64_t *)shape;
  m.nbytes = nbytes;
  q.vm_id = vm;
  q.meta = &m;
  rq.op_case = VMRPC__REQUEST__OP_TENSOR_BEGIN;
  rq.tensor_begin = &q;
  int code = ha_call(c, &rq, NULL, 0, out);
  if (code == 0) *out_transfer = out->rs->tensor_begin->transfer_id;
  return code;
}

int ha_tensor_chunk(hw_conn_t *c, uint64_t transfer, uint64_t offset, const void *data, size_t len,
                    hw_reply_t *out) {
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__TensorChunkRequest q = VMRPC__TENSOR_CHUNK_REQUEST__INIT;
  q.transfer_id = transfer;
  q.offset = offset;
  rq.op_case = VMRPC__REQUEST__OP_TENSOR_CHUNK;
  rq.tensor_chunk = &q;
  return ha_call(c, &rq, data, len, out);
}

static void invoke_request(Vmrpc__Request *rq, Vmrpc__InvokeRequest *q, uint64_t vm,
                           const char *func, uint32_t deadline_ms) {
  q->vm_id = vm;
  q->func = (char *)func;
  q->deadline_ms = deadline_ms;
  rq->op_case = VMRPC__REQUEST__OP_INVOKE;
  rq->invoke = q;
}

int ha_invoke(hw_conn_t *c, uint64_t vm, const char *func, uint32_t deadline_ms, hw_reply_t *out) {
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__InvokeRequest q = VMRPC__INVOKE_REQUEST__INIT;
  invoke_request(&rq, &q, vm, func, deadline_ms);
  return ha_call(c, &rq, NULL, 0, out);
}

void ha_send_invoke(hw_conn_t *c, int ctx, uint64_t vm, const char *func, uint64_t *out_id) {
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__InvokeRequest q = VMRPC__INVOKE_REQUEST__INIT;
  invoke_request(&rq, &q, vm, func, 0);
  assert_int_equal(hw_send(c, ctx, &rq, NULL, 0), 0);
  if (out_id) *out_id = rq.id;
}

int ha_get_output(hw_conn_t *c, uint64_t vm, const char *func, const uint32_t *path,
                  size_t path_len, uint64_t offset, uint64_t max_bytes, hw_reply_t *out) {
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__GetOutputRequest q = VMRPC__GET_OUTPUT_REQUEST__INIT;
  q.vm_id = vm;
  q.func = (char *)func;
  q.n_path = path_len;
  q.path = (uint32_t *)path;
  q.offset = offset;
  q.max_bytes = max_bytes;
  rq.op_case = VMRPC__REQUEST__OP_GET_OUTPUT;
  rq.get_output = &q;
  return ha_call(c, &rq, NULL, 0, out);
}

int ha_get_arity(hw_conn_t *c, uint64_t vm, const char *func, const uint32_t *path, size_t path_len,
                 int64_t *out_arity, hw_reply_t *out) {
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__GetOutputArityRequest q = VMRPC__GET_OUTPUT_ARITY_REQUEST__INIT;
  q.vm_id = vm;
  q.func = (char *)func;
  q.n_path = path_len;
  q.path = (uint32_t *)path;
  rq.op_case = VMRPC__REQUEST__OP_GET_OUTPUT_ARITY;
  rq.get_output_arity = &q;
  int code = ha_call(c, &rq, NULL, 0, out);
  if (code == 0) *out_arity = out->rs->get_output_arity->arity;
  return code;
}

int ha_fetch_output(hw_conn_t *c, uint64_t vm, const char *func, const uint32_t *path,
                    size_t path_len, uint8_t **out_data, size_t *out_len, int *out_chunks) {
  hw_reply_t r;
  *out_data = NULL;
  *out_len = 0;
  *out_chunks = 0;
  int code = ha_get_output(c, vm, func, path, path_len, 0, 0, &r);
  if (code) {
    fprintf(stderr, "ha_fetch_output: %d %s\n", code, hw_message(&r));
    hw_reply_free(&r);
    return code;
  }
  if (!r.rs->get_output || !r.rs->get_output->value ||
      r.rs->get_output->value->kind_case != VMRPC__VALUE__KIND_TENSOR) {
    hw_reply_free(&r);
    return -2;
  }
  uint64_t total = r.rs->get_output->value->tensor->nbytes;
  uint8_t *buf = malloc(total ? total : 1);
  size_t got = 0;
  for (;;) {
    (*out_chunks)++;
    if (r.payload_len > total - got || r.rs->get_output->offset != got) {
      code = -3;
      break;
    }
    if (r.payload_len) memcpy(buf + got, r.payload, r.payload_len);
    got += r.payload_len;
    hw_reply_free(&r);
    if (got == total) break;
    code = ha_get_output(c, vm, func, path, path_len, got, 0, &r);
    if (code) break;
  }
  hw_reply_free(&r);
  if (code) {
    free(buf);
    return code;
  }
  *out_data = buf;
  *out_len = total;
  return 0;
}

#define HA_ID_OP(fn, field, Type, INIT, CASE, member)  \
  int fn(hw_conn_t *c, uint64_t id, hw_reply_t *out) { \
    Vmrpc__Request rq = VMRPC__REQUEST__INIT;          \
    Type q = INIT;                                     \
    q.member = id;                                     \
    rq.op_case = CASE;                                 \
    rq.field = &q;                                     \
    return ha_call(c, &rq, NULL, 0, out);              \
  }

HA_ID_OP(ha_free_vm, free_vm, Vmrpc__FreeVMRequest, VMRPC__FREE_VMREQUEST__INIT,
         VMRPC__REQUEST__OP_FREE_VM, vm_id)
HA_ID_OP(ha_free_exec, free_executable, Vmrpc__FreeExecutableRequest,
         VMRPC__FREE_EXECUTABLE_REQUEST__INIT, VMRPC__REQUEST__OP_FREE_EXECUTABLE, exec_id)

int ha_cancel(hw_conn_t *c, int ctx, uint64_t vm, hw_reply_t *out) {
  Vmrpc__Request rq = VMRPC__REQUEST__INIT;
  Vmrpc__CancelRequest q = VMRPC__CANCEL_REQUEST__INIT;
  q.vm_id = vm;
  rq.op_case = VMRPC__REQUEST__OP_CANCEL;
  rq.cancel = &q;
  memset(out, 0, sizeof(*out));
  if (hw_send(c, ctx, &rq, NULL, 0) != 0 || hw_recv(c, ctx, out, 0) != 0) return -1;
  return hw_code(out);
}

#define HA_EMPTY_OP(fn, field, Type, INIT, CASE) \
  int fn(hw_conn_t *c, hw_reply_t *out) {        \
    Vmrpc__Request rq = VMRPC__REQUEST__INIT;    \
    Type q = INIT;                               \
    rq.op_case = CASE;                           \
    rq.field = &q;                               \
    return ha_call(c, &rq, NULL, 0, out);        \
  }

HA_EMPTY_OP(ha_stats, stats, Vmrpc__StatsRequest, VMRPC__STATS_REQUEST__INIT,
            VMRPC__REQUEST__OP_STATS)
HA_EMPTY_OP(ha_ping, ping, Vmrpc__PingRequest, VMRPC__PING_REQUEST__INIT, VMRPC__REQUEST__OP_PING)
HA_EMPTY_OP(ha_goodbye, goodbye, Vmrpc__GoodbyeRequest, VMRPC__GOODBYE_REQUEST__INIT,
            VMRPC__REQUEST__OP_GOODBYE)
HA_EMPTY_OP(ha_list_devices, list_devices, Vmrpc__ListDevicesRequest,
            VMRPC__LIST_DEVICES_REQUEST__INIT, VMRPC__REQUEST__OP_LIST_DEVICES)

int ha_ping_fresh(const char *url) {
  hw_conn_t c;
  if (hw_open(&c, url) != 0) return -1;
  c.timeout_ms = 10000;
  hw_reply_t r;
  int code = ha_ping(&c, &r);
  hw_reply_free(&r);
  hw_close(&c);
  return code;
}

void ha_open_session(hw_conn_t *c, const char *url) {
  assert_int_equal(hw_open(c, url), 0);
  hw_reply_t r;
  CODE_IS_FREE(hw_hello(c, NULL, &r), 0, &r);
}

uint64_t ha_upload_ok(hw_conn_t *c, const uint8_t *data, size_t len, size_t chunk) {
  hw_reply_t r;
  uint64_t exec = 0;
  int present = 0;
  CODE_IS_FREE(ha_upload(c, data, len, chunk, &exec, &present, &r), 0, &r);
  assert_true(exec > 0);
  return exec;
}

uint64_t ha_create_vm_ok(hw_conn_t *c, uint64_t exec_id, const char *selector,
                         const char *allocator, const char *mode) {
  hw_reply_t r;
  uint64_t vm = 0;
  CODE_IS_FREE(ha_create_vm(c, exec_id, selector, allocator, mode, &vm, &r), 0, &r);
  return vm;
}

double ha_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int ha_has_device(vmc_conn_t *c, const char *sel) {
  vmc_info_t info;
  vmc_info(c, &info);
  for (uint32_t i = 0; i < info.num_devices; i++)
    if (strcmp(info.devices[i].selector, sel) == 0) return 1;
  return 0;
}

vmc_vm_t ha_vm_on_device(vmc_conn_t *c, const uint8_t *prog, size_t size, const char *device,
                         const char *allocator, const char *mode) {
  if (!ha_has_device(c, device)) {
    vmc_close(c);
    skip();
  }
  vmc_exec_t ex;
  ASSERT_OK(vmc_upload_memory(c, prog, size, NULL, NULL, &ex, NULL));
  vmc_device_spec_t dev = {device, allocator};
  vmc_vm_t vm;
  ASSERT_OK(vmc_create_vm(c, ex, &dev, 1, mode, &vm));
  return vm;
}

void *ha_spin_main(void *arg) {
  ha_spin_job_t *j = arg;
  double t0 = ha_now_s();
  vm_status_t st = vmc_invoke(j->conn, j->vm, "spin", 0, NULL);
  j->took = ha_now_s() - t0;
  j->code = vm_status_code(st);
  snprintf(j->msg, sizeof(j->msg), "%s", vm_status_message(st));
  vm_status_free(st);
  __atomic_store_n(&j->done, 1, __ATOMIC_SEQ_CST);
  return NULL;
}

int ha_fixtures_load(ha_fixtures_t *f, const char *prog_text) {
  memset(f, 0, sizeof(*f));
  if (ha_exec_bytes(prog_text, &f->prog, &f->prog_len) != 0) return -1;
  return ha_mlp_bytes(11, &f->mlp, &f->mlp_len);
}

void ha_fixtures_free(ha_fixtures_t *f) {
  free(f->prog);
  free(f->mlp);
  memset(f, 0, sizeof(*f));
}

void ha_start_agent_or_skip(struct agent_proc *p, const char *const *base,
                            const char *const *extra) {
  const char *args[64];
  size_t n = 0;
  for (size_t i = 0; base && base[i] && n < 63; i++) args[n++] = base[i];
  for (size_t i = 0; extra && extra[i] && n < 63; i++) args[n++] = extra[i];
  args[n] = NULL;
  if (agent_proc_start(p, args) != 0) skip();
}
