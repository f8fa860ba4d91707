/* Tensors and values in (SetInput, TensorBegin/TensorChunk) and out
 * (GetOutput and its chunks), and SaveFunction's bound arguments. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "vmrpc/file.h"
#include "ops_internal.h"

/* ------------------------------------------------------------- tensors in */

/* TensorBegin + chunks: the tensor waits on the agent as *out_transfer. */
static vm_status_t tensor_transfer(vmc_conn_t *c, vmc_vm_t vm, const vmc_tensor_t *t,
                                   uint64_t *out_transfer) {
  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__TensorBeginRequest tb = VMRPC__TENSOR_BEGIN_REQUEST__INIT;
  Vmrpc__TensorMeta meta;
  int64_t dims[VMC_MAX_NDIM];
  char dts[24];
  vmci_meta_from_tensor(t, &meta, dims, dts, sizeof(dts));
  tb.vm_id = vm.id;
  tb.meta = &meta;
  req.op_case = OP(TENSOR_BEGIN);
  req.tensor_begin = &tb;
  vmci_reply_t r;
  VM_RETURN_IF_ERROR(vmci_call_plain(c, &req, "TensorBegin", &r));
  uint64_t id = r.resp->tensor_begin ? r.resp->tensor_begin->transfer_id : 0;
  vmci_reply_free(&r);
  if (id == 0)
    return vm_status_make(VM_INTERNAL, "the agent began a tensor transfer without an id");
  if (t->nbytes > 0) VM_RETURN_IF_ERROR(vmci_send_chunks(c, 1, id, t->data, t->nbytes, NULL, NULL));
  *out_transfer = id;
  return VM_STATUS_OK;
}

/* Fills w from a scalar or shape value. Tensors are handled by callers. */
vm_status_t vmci_scalar_to_wire(const vmc_value_t *v, vmci_wire_value_t *w) {
  vmrpc__value__init(&w->v);
  switch (v->kind) {
    case VMC_VALUE_NONE:
      w->v.kind_case = VMRPC__VALUE__KIND_NONE;
      w->v.none = 1;
      return VM_STATUS_OK;
    case VMC_VALUE_INT:
      w->v.kind_case = VMRPC__VALUE__KIND_I;
      w->v.i = v->i;
      return VM_STATUS_OK;
    case VMC_VALUE_FLOAT:
      w->v.kind_case = VMRPC__VALUE__KIND_F;
      w->v.f = v->f;
      return VM_STATUS_OK;
    case VMC_VALUE_BOOL:
      w->v.kind_case = VMRPC__VALUE__KIND_B;
      w->v.b = v->b != 0;
      return VM_STATUS_OK;
    case VMC_VALUE_STRING:
      w->v.kind_case = VMRPC__VALUE__KIND_S;
      w->v.s = (char *)(v->s ? v->s : "");
      return VM_STATUS_OK;
    case VMC_VALUE_SHAPE:
      if (v->shape_ndim > VMC_MAX_NDIM)
        return vm_status_make(VM_INVALID_ARGUMENT, "shape value has %u dims, at most %d",
                              v->shape_ndim, VMC_MAX_NDIM);
      vmrpc__shape_value__init(&w->shape);
      for (uint32_t i = 0; i < v->shape_ndim; i++) w->dims[i] = v->shape[i];
      w->shape.n_dims = v->shape_ndim;
      w->shape.dims = w->dims;
      w->v.kind_case = VMRPC__VALUE__KIND_SHAPE;
      w->v.shape = &w->shape;
      return VM_STATUS_OK;
    case VMC_VALUE_TUPLE:
      return vm_status_make(VM_INVALID_ARGUMENT,
                            "tuples cannot be sent as inputs: pass their fields separately");
    default: return vm_status_make(VM_INVALID_ARGUMENT, "unknown value kind %d", (int)v->kind);
  }
}

vm_status_t vmc_set_input_value(vmc_conn_t *c, vmc_vm_t vm, const char *func, uint32_t index,
                                const char *name, const vmc_value_t *v) {
  VM_RETURN_IF_ERROR(vmci_need_conn(c));
  VM_RETURN_IF_ERROR(vmci_need_func(func));
  if (!v) return vm_status_make(VM_INVALID_ARGUMENT, "vmc_set_input: value is NULL");
  char what[160];
  if (name)
    snprintf(what, sizeof(what), "SetInput %s.%s", func, name);
  else
    snprintf(what, sizeof(what), "SetInput %s[%u]", func, index);
  vmci_wire_value_t w;
  const void *payload = NULL;
  size_t plen = 0;
  if (v->kind == VMC_VALUE_TENSOR) {
    const vmc_tensor_t *t = &v->tensor;
    vm_status_t st = vmc_tensor_check(t);
    if (st) return vm_status_annotate(st, "%s", what);
    vmrpc__value__init(&w.v);
    if (t->nbytes <= c->limits.chunk_bytes) {
      vmci_meta_from_tensor(t, &w.meta, w.dims, w.dtype, sizeof(w.dtype));
      w.v.kind_case = VMRPC__VALUE__KIND_TENSOR;
      w.v.tensor = &w.meta;
      payload = t->data;
      plen = (size_t)t->nbytes;
    } else {
      uint64_t tid;
      st = tensor_transfer(c, vm, t, &tid);
      if (st) return vm_status_annotate(st, "%s", what);
      w.v.kind_case = VMRPC__VALUE__KIND_TENSOR_REF;
      w.v.tensor_ref = tid;
    }
  } else {
    VM_RETURN_IF_ERROR(vmci_scalar_to_wire(v, &w));
  }
  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__SetInputRequest si = VMRPC__SET_INPUT_REQUEST__INIT;
  si.vm_id = vm.id;
  si.func = (char *)func;
  if (name) {
    si.param_case = VMRPC__SET_INPUT_REQUEST__PARAM_NAME;
    si.name = (char *)name;
  } else {
    si.param_case = VMRPC__SET_INPUT_REQUEST__PARAM_INDEX;
    si.index = index;
  }
  si.value = &w.v;
  req.op_case = OP(SET_INPUT);
  req.set_input = &si;
  return vmci_call_ack(c, &req, payload, plen, what);
}

/* vmc_set_input_value() of a tensor (checked to be given). */
static vm_status_t set_input_tensor(vmc_conn_t *c, vmc_vm_t vm, const char *func, uint32_t index,
                                    const char *name, const vmc_tensor_t *t) {
  if (!t) return vm_status_make(VM_INVALID_ARGUMENT, "vmc_set_input: tensor is NULL");
  vmc_value_t v;
  memset(&v, 0, sizeof(v));
  v.kind = VMC_VALUE_TENSOR;
  v.tensor = *t;
  return vmc_set_input_value(c, vm, func, index, name, &v);
}

vm_status_t vmc_set_input(vmc_conn_t *c, vmc_vm_t vm, const char *func, uint32_t index,
                          const vmc_tensor_t *t) {
  return set_input_tensor(c, vm, func, index, NULL, t);
}

vm_status_t vmc_set_input_named(vmc_conn_t *c, vmc_vm_t vm, const char *func, const char *name,
                                const vmc_tensor_t *t) {
  if (!t) return vm_status_make(VM_INVALID_ARGUMENT, "vmc_set_input: tensor is NULL");
  if (!name || !name[0])
    return vm_status_make(VM_INVALID_ARGUMENT, "vmc_set_input_named: no parameter name");
  return set_input_tensor(c, vm, func, 0, name, t);
}

/* ------------------------------------------------------------ tensors out */

vm_status_t vmc_get_output_arity(vmc_conn_t *c, vmc_vm_t vm, const char *func, const uint32_t *path,
                                 uint32_t path_len, int64_t *out_arity) {
  VM_RETURN_IF_ERROR(vmci_need_conn(c));
  VM_RETURN_IF_ERROR(vmci_need_func(func));
  if (path_len && !path) return vm_status_make(VM_INVALID_ARGUMENT, "path is NULL");
  char what[200];
  vmci_path_str(what, sizeof(what), "GetOutputArity", func, path, path_len);
  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__GetOutputArityRequest ga = VMRPC__GET_OUTPUT_ARITY_REQUEST__INIT;
  ga.vm_id = vm.id;
  ga.func = (char *)func;
  ga.n_path = path_len;
  ga.path = (uint32_t *)path;
  req.op_case = OP(GET_OUTPUT_ARITY);
  req.get_output_arity = &ga;
  vmci_reply_t r;
  VM_RETURN_IF_ERROR(vmci_call_plain(c, &req, what, &r));
  int64_t a = r.resp->get_output_arity ? r.resp->get_output_arity->arity : -1;
  vmci_reply_free(&r);
  if (out_arity) *out_arity = a;
  return VM_STATUS_OK;
}

static uint64_t tout_chunk_size(void *ctx, uint64_t idx) {
  vmci_tout_ctx_t *t = ctx;
  uint64_t cb = t->c->limits.chunk_bytes;
  return vmci_chunk_len(t->nbytes, (idx + 1) * cb, cb); /* chunk 0 came with the first reply */
}

/* Makes *req the GetOutput request (in *go) of up to one chunk at offset. */
void vmci_get_output_request(const vmc_conn_t *c, vmc_vm_t vm, const char *func,
                             const uint32_t *path, uint32_t path_len, uint64_t offset,
                             Vmrpc__Request *req, Vmrpc__GetOutputRequest *go) {
  go->vm_id = vm.id;
  go->func = (char *)func;
  go->n_path = path_len;
  go->path = (uint32_t *)path;
  go->offset = offset;
  go->max_bytes = c->limits.chunk_bytes;
  req->op_case = OP(GET_OUTPUT);
  req->get_output = go;
}

static vm_status_t tout_make(void *ctx, uint64_t idx, vmci_msg_t **out_msg, uint64_t *out_id) {
  vmci_tout_ctx_t *t = ctx;
  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__GetOutputRequest go = VMRPC__GET_OUTPUT_REQUEST__INIT;
  vmci_get_output_request(t->c, t->vm, t->func, t->path, t->path_len,
                          (idx + 1) * t->c->limits.chunk_bytes, &req, &go);
  VM_RETURN_IF_ERROR(vmci_build(t->c, &req, NULL, 0, out_msg));
  *out_id = req.id;
  return VM_STATUS_OK;
}

/* Checks a chunk reply and copies its payload into place. */
vm_status_t vmci_chunk_into(vmci_tout_ctx_t *t, const vmci_reply_t *r, uint64_t offset,
                            uint64_t expect_len) {
  const Vmrpc__GetOutputResponse *go = r->resp->get_output;
  if (!go || !go->value || go->value->kind_case != VMRPC__VALUE__KIND_TENSOR ||
      !go->value->tensor || go->value->tensor->nbytes != t->nbytes)
    return vm_status_make(VM_ABORTED,
                          "%s: the output changed while it was being fetched (another invoke "
                          "of the function?); fetch it again",
                          t->what);
  if (go->offset != offset || r->payload_len != expect_len)
    return vm_status_make(VM_INTERNAL,
                          "%s: asked for %llu bytes at offset %llu, the agent sent %zu at %llu",
                          t->what, (unsigned long long)expect_len, (unsigned long long)offset,
                          r->payload_len, (unsigned long long)go->offset);
  /* The payload may already be in place (read there from the socket). */
  if (expect_len && r->payload != t->dst + offset) memcpy(t->dst + offset, r->payload, expect_len);
  return VM_STATUS_OK;
}

static uint8_t *tout_dest(void *ctx, uint64_t idx) {
  vmci_tout_ctx_t *t = ctx;
  return t->dst + (idx + 1) * t->c->limits.chunk_bytes;
}

static vm_status_t tout_done(void *ctx, uint64_t idx, vmci_reply_t *r) {
  vmci_tout_ctx_t *t = ctx;
  uint64_t off = (idx + 1) * t->c->limits.chunk_bytes;
  return vmci_chunk_into(t, r, off, tout_chunk_size(ctx, idx));
}

/* Decodes a value of a reply into *out (zeroed first): scalars whole,
 * a tensor's kind and meta only (data NULL, nbytes checked). */
vm_status_t vmci_value_from_wire(const Vmrpc__Value *wv, const char *what, vmc_value_t *out) {
  memset(out, 0, sizeof(*out));
  if (!wv) return vm_status_make(VM_INTERNAL, "%s: the agent's reply carries no value", what);
  switch (wv->kind_case) {
    case VMRPC__VALUE__KIND_NONE: out->kind = VMC_VALUE_NONE; return VM_STATUS_OK;
    case VMRPC__VALUE__KIND_I:
      out->kind = VMC_VALUE_INT;
      out->i = wv->i;
      return VM_STATUS_OK;
    case VMRPC__VALUE__KIND_F:
      out->kind = VMC_VALUE_FLOAT;
      out->f = wv->f;
      return VM_STATUS_OK;
    case VMRPC__VALUE__KIND_B:
      out->kind = VMC_VALUE_BOOL;
      out->b = wv->b != 0;
      return VM_STATUS_OK;
    case VMRPC__VALUE__KIND_S: {
      size_t n = strlen(wv->s ? wv->s : "");
      out->s = malloc(n + 1);
      if (!out->s) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
      memcpy(out->s, wv->s ? wv->s : "", n + 1);
      out->kind = VMC_VALUE_STRING;
      return VM_STATUS_OK;
    }
    case VMRPC__VALUE__KIND_SHAPE:
      if (!wv->shape || wv->shape->n_dims > VMC_MAX_NDIM)
        return vm_status_make(VM_INTERNAL, "%s: the agent sent a shape of more than %d dims", what,
                              VMC_MAX_NDIM);
      out->kind = VMC_VALUE_SHAPE;
      out->shape_ndim = (uint32_t)wv->shape->n_dims;
      for (size_t i = 0; i < wv->shape->n_dims; i++) out->shape[i] = wv->shape->dims[i];
      return VM_STATUS_OK;
    case VMRPC__VALUE__KIND_TUPLE_ARITY:
      out->kind = VMC_VALUE_TUPLE;
      out->tuple_arity = wv->tuple_arity;
      return VM_STATUS_OK;
    case VMRPC__VALUE__KIND_TENSOR: break;
    default:
      return vm_status_make(VM_INTERNAL, "%s: the agent sent a value of unknown kind %d", what,
                            (int)wv->kind_case);
  }
  vmc_tensor_t *t = &out->tensor;
  int64_t dims[VMP_MAX_NDIM];
  uint32_t ndim;
  uint64_t nbytes;
  vm_status_t st = vmp_meta_check(wv->tensor, 0, &t->dtype, dims, &ndim, &nbytes);
  if (st) return vm_status_annotate(st, "%s: the agent sent bad tensor metadata", what);
  t->ndim = ndim;
  for (uint32_t i = 0; i < ndim; i++) t->shape[i] = dims[i];
  t->nbytes = nbytes;
  out->kind = VMC_VALUE_TENSOR;
  return VM_STATUS_OK;
}

/* The common path of every GetOutput flavour. dst NULL: allocate. */
static vm_status_t get_output_impl(vmc_conn_t *c, vmc_vm_t vm, const char *func,
                                   const uint32_t *path, uint32_t path_len, void *dst,
                                   uint64_t dst_capacity, vmc_value_t *out) {
  VM_RETURN_IF_ERROR(vmci_need_conn(c));
  VM_RETURN_IF_ERROR(vmci_need_func(func));
  if (path_len && !path) return vm_status_make(VM_INVALID_ARGUMENT, "path is NULL");
  if (path_len > 64)
    return vm_status_make(VM_INVALID_ARGUMENT, "output path of %u levels; at most 64", path_len);
  char what[200];
  vmci_path_str(what, sizeof(what), "GetOutput", func, path, path_len);
  memset(out, 0, sizeof(*out));

  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__GetOutputRequest go = VMRPC__GET_OUTPUT_REQUEST__INIT;
  vmci_get_output_request(c, vm, func, path, path_len, 0, &req, &go);
  vmci_reply_t r;
  VM_RETURN_IF_ERROR(vmci_call_plain(c, &req, what, &r));
  const Vmrpc__GetOutputResponse *gr = r.resp->get_output;
  vm_status_t st = vmci_value_from_wire(gr ? gr->value : NULL, what, out);
  if (st || out->kind != VMC_VALUE_TENSOR) goto done;
  {
    vmc_tensor_t *t = &out->tensor;
    uint64_t nbytes = t->nbytes;
    if (nbytes > SIZE_MAX) {
      st = vm_status_make(VM_RESOURCE_EXHAUSTED, "%s: %llu bytes do not fit in memory", what,
                          (unsigned long long)nbytes);
      goto done;
    }
    if (dst) {
      if (nbytes > dst_capacity) {
        st = vm_status_make(VM_OUT_OF_RANGE,
                            "%s: the output needs %llu bytes, the buffer holds %llu; pass a "
                            "buffer of at least %llu bytes",
                            what, (unsigned long long)nbytes, (unsigned long long)dst_capacity,
                            (unsigned long long)nbytes);
        goto done;
      }
      t->data = dst;
      t->owns_data = 0;
    } else {
      t->data = malloc(nbytes ? (size_t)nbytes : 1);
      if (!t->data) {
        st = vm_status_make(VM_RESOURCE_EXHAUSTED, "%s: out of host memory for a %llu-byte output",
                            what, (unsigned long long)nbytes);
        goto done;
      }
      t->owns_data = 1;
    }
    uint64_t cb = c->limits.chunk_bytes;
    vmci_tout_ctx_t tc = {c, vm, func, path, path_len, t->data, nbytes, what};
    uint64_t first = nbytes < cb ? nbytes : cb;
    st = vmci_chunk_into(&tc, &r, 0, first);
    vmci_reply_free(&r);
    if (!st && nbytes > cb) {
      vmci_pipeline_t p;
      memset(&p, 0, sizeof(p));
      p.count = (nbytes + cb - 1) / cb - 1;
      p.make = tout_make;
      p.done = tout_done;
      p.chunk_size = tout_chunk_size;
      p.dest = tout_dest;
      p.expect = ROP(GET_OUTPUT);
      p.ctx = &tc;
      p.progress_total = nbytes;
      p.what = what;
      st = vmci_pipeline_run(c, &p);
    }
    if (st) vmc_value_free(out);
    return st;
  }
done:
  vmci_reply_free(&r);
  if (st) vmc_value_free(out);
  return st;
}

vm_status_t vmc_get_output_value(vmc_conn_t *c, vmc_vm_t vm, const char *func, const uint32_t *path,
                                 uint32_t path_len, vmc_value_t *out) {
  if (!out) return vm_status_make(VM_INVALID_ARGUMENT, "vmc_get_output: out is NULL");
  return get_output_impl(c, vm, func, path, path_len, NULL, 0, out);
}

static vm_status_t not_a_tensor(const vmc_value_t *v, const char *func) {
  switch (v->kind) {
    case VMC_VALUE_TUPLE:
      return vm_status_make(VM_FAILED_PRECONDITION,
                            "the output of %s is a tuple of %u fields, not a tensor: fetch a "
                            "field with a longer path (e.g. [0])",
                            func, v->tuple_arity);
    case VMC_VALUE_NONE:
      return vm_status_make(VM_INVALID_ARGUMENT, "the output of %s is none, not a tensor", func);
    case VMC_VALUE_STRING:
      return vm_status_make(VM_INVALID_ARGUMENT, "the output of %s is a string, not a tensor",
                            func);
    default:
      return vm_status_make(VM_FAILED_PRECONDITION,
                            "the output of %s is a scalar or shape, not a tensor", func);
  }
}

vm_status_t vmc_get_output(vmc_conn_t *c, vmc_vm_t vm, const char *func, const uint32_t *path,
                           uint32_t path_len, vmc_tensor_t *out) {
  if (!out) return vm_status_make(VM_INVALID_ARGUMENT, "vmc_get_output: out is NULL");
  vmc_value_t v;
  VM_RETURN_IF_ERROR(get_output_impl(c, vm, func, path, path_len, NULL, 0, &v));
  vm_status_t st = VM_STATUS_OK;
  vmc_tensor_t t;
  memset(&t, 0, sizeof(t));
  switch (v.kind) {
    case VMC_VALUE_TENSOR: *out = v.tensor; return VM_STATUS_OK;
    case VMC_VALUE_INT:
      st = vmc_tensor_alloc(VM_I64, 0, NULL, &t);
      if (!st) memcpy(t.data, &v.i, 8);
      break;
    case VMC_VALUE_FLOAT:
      st = vmc_tensor_alloc(VM_F64, 0, NULL, &t);
      if (!st) memcpy(t.data, &v.f, 8);
      break;
    case VMC_VALUE_BOOL:
      st = vmc_tensor_alloc(VM_BOOL, 0, NULL, &t);
      if (!st) *(uint8_t *)t.data = (uint8_t)(v.b != 0);
      break;
    case VMC_VALUE_SHAPE: {
      int64_t n = v.shape_ndim;
      st = vmc_tensor_alloc(VM_I64, 1, &n, &t);
      if (!st && n) memcpy(t.data, v.shape, (size_t)n * 8);
      break;
    }
    default: st = not_a_tensor(&v, func); break;
  }
  vmc_value_free(&v);
  if (!st) *out = t;
  return st;
}

vm_status_t vmc_get_output_into(vmc_conn_t *c, vmc_vm_t vm, const char *func, const uint32_t *path,
                                uint32_t path_len, void *dst, uint64_t dst_capacity,
                                vmc_tensor_t *out_meta) {
  if (!dst && dst_capacity)
    return vm_status_make(VM_INVALID_ARGUMENT, "vmc_get_output_into: dst is NULL");
  static uint8_t empty;
  vmc_value_t v;
  VM_RETURN_IF_ERROR(
      get_output_impl(c, vm, func, path, path_len, dst ? dst : &empty, dst_capacity, &v));
  if (v.kind != VMC_VALUE_TENSOR) {
    vm_status_t st = not_a_tensor(&v, func);
    vmc_value_free(&v);
    return st;
  }
  if (out_meta) *out_meta = v.tensor;
  return VM_STATUS_OK;
}

void vmc_value_free(vmc_value_t *v) {
  if (!v) return;
  free(v->s);
  vmc_tensor_free(&v->tensor);
  memset(v, 0, sizeof(*v));
}

/* --------------------------------------------------------- save_function */

vm_status_t vmc_save_function(vmc_conn_t *c, vmc_vm_t vm, const char *func, const char *saved_name,
                              const vmc_value_t *args, uint32_t nargs) {
  VM_RETURN_IF_ERROR(vmci_need_conn(c));
  VM_RETURN_IF_ERROR(vmci_need_func(func));
  if (!saved_name || !saved_name[0])
    return vm_status_make(VM_INVALID_ARGUMENT, "vmc_save_function: no saved name given");
  if (nargs && !args) return vm_status_make(VM_INVALID_ARGUMENT, "vmc_save_function: args NULL");
  if (nargs > 256) return vm_status_make(VM_INVALID_ARGUMENT, "%u arguments; at most 256", nargs);
  char what[200];
  snprintf(what, sizeof(what), "SaveFunction %s as %s", func, saved_name);
  vmci_wire_value_t *w = calloc(nargs ? nargs : 1, sizeof(*w));
  Vmrpc__Value **wp = calloc(nargs ? nargs : 1, sizeof(*wp));
  vm_status_t st = VM_STATUS_OK;
  if (!w || !wp) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
    goto done;
  }
  for (uint32_t i = 0; i < nargs; i++) {
    if (args[i].kind == VMC_VALUE_TENSOR) {
      st = vmc_tensor_check(&args[i].tensor);
      uint64_t tid = 0;
      if (!st) st = tensor_transfer(c, vm, &args[i].tensor, &tid);
      if (st) {
        st = vm_status_annotate(st, "%s: argument %u", what, i);
        goto done;
      }
      vmrpc__value__init(&w[i].v);
      w[i].v.kind_case = VMRPC__VALUE__KIND_TENSOR_REF;
      w[i].v.tensor_ref = tid;
    } else if ((st = vmci_scalar_to_wire(&args[i], &w[i]))) {
      st = vm_status_annotate(st, "%s: argument %u", what, i);
      goto done;
    }
    wp[i] = &w[i].v;
  }
  {
    Vmrpc__Request req = VMRPC__REQUEST__INIT;
    Vmrpc__SaveFunctionRequest sf = VMRPC__SAVE_FUNCTION_REQUEST__INIT;
    sf.vm_id = vm.id;
    sf.func = (char *)func;
    sf.saved_name = (char *)saved_name;
    sf.n_args = nargs;
    sf.args = wp;
    req.op_case = OP(SAVE_FUNCTION);
    req.save_function = &sf;
    st = vmci_call_ack(c, &req, NULL, 0, what);
  }
done:
  free(wp);
  free(w);
  return st;
}
