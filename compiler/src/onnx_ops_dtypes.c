/* ONNX operators on the storage types (bfloat16, float8, float4, int4,
 * uint4, int2, uint2): BitCast, and the guard that keeps those types out of
 * the operators that do not handle them; float16 recurrent layers, which
 * run in float32 between casts. Cast, CastLike (onnx_ops_shape.c)
 * and QuantizeLinear / DequantizeLinear (onnx_ops_quant.c) convert them. */
#include <stdio.h>
#include <string.h>

#include "onnx_ops.h"

/* BitCast (opset 26): the bytes of x read as type `to`, of the same bit
 * width (the spec refuses any other). */
vm_status_t onx_op_bitcast(onx_ctx_t *c) {
  onx_value_t *x;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  int64_t to;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "to", 0, &to));
  vm_dtype_t dt;
  if (to < INT32_MIN || to > INT32_MAX || onx_dtype_from_onnx((int32_t)to, &dt) != 0) {
    char v[32];
    snprintf(v, sizeof(v), "%lld (%s)", (long long)to, onx_onnx_type_name((int32_t)to));
    return onx_unsupported_attr(c, "to", v, ONX_DTYPES_SUPPORTED);
  }
  if (dt.bits != x->dt.bits) {
    char a[32], b[32];
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "input 0 is %s (%u bits), 'to' is %s (%u bits): BitCast needs the same "
                        "bit width",
                        vm_dtype_str(x->dt, a, sizeof(a)), x->dt.bits,
                        vm_dtype_str(dt, b, sizeof(b)), dt.bits);
  }
  if (x->data) {
    uint64_t nb = onx_nbytes(x->dt, x->numel);
    uint8_t *d;
    VM_RETURN_IF_ERROR(onx_alloc_const(c, dt, x->numel, &d));
    if (nb) memcpy(d, x->data, nb);
    return onx_def_const(c, 0, dt, x->ndim, x->dims, d);
  }
  int32_t y = new_t(c, dt, x->ndim, x->dims);
  vmcc_arg_t a[2] = {A(onx_tid(c, x)), A(y)};
  call(c, "cl.bitcast", 2, a);
  return onx_bind_out(c, 0, y, x->ndim, x->dims);
}

/* The operators that take a storage type as an input: the casts, the
 * quantization pair and the views (which move no element). */
static const char *const k_storage_ops[] = {
    "BitCast", "Cast",     "CastLike",       "Constant", "DequantizeLinear",
    "Flatten", "Identity", "QuantizeLinear", "Reshape",  "Shape",
    "Size",    "Squeeze",  "Unsqueeze",
};

static int is_storage_dtype(vm_dtype_t dt) {
  return dt.code == VM_DTYPE_BFLOAT || dt.code >= VM_DTYPE_FLOAT8_E4M3FN ||
         vm_dtype_per_byte(dt) > 1;
}

/* Lowers the node with inputs of dtype `from` (bfloat16; float16 for the
 * recurrent layers, whose kernel computes in float32) as runtimes without
 * arithmetic in that type do: each such input cast to float32, the
 * operator in float32, each float32 output cast back to `from` (round to
 * nearest even); other inputs and outputs (lengths, indices) pass
 * through. */
static vm_status_t lower_in_f32(onx_ctx_t *c, const onx_op_t *op, vm_dtype_t from,
                                int64_t onnx_from) {
  const Onnx__NodeProto *n = c->node;
  enum { MAXIO = 32 };
  char fb[32];
  if (n->n_input > MAXIO || n->n_output > MAXIO)
    return onx_node_err(c, VM_UNIMPLEMENTED,
                        "a %s node with %zu inputs and %zu outputs: "
                        "supported: at most %d of each",
                        vm_dtype_str(from, fb, sizeof(fb)), n->n_input, n->n_output, MAXIO);
  const char *ins[MAXIO], *outs[MAXIO];
  onx_sattr_t to_f[1] = {SA_INT("to", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT)};
  onx_sattr_t to_from[1] = {SA_INT("to", onnx_from)};
  for (uint32_t k = 0; k < n->n_input; k++) {
    onx_value_t *v = onx_in(c, k);
    ins[k] = n->input[k];
    if (v && vm_dtype_equal(v->dt, from))
      VM_RETURN_IF_ERROR(onx_sub1(c, "Cast", NULL, v->name, NULL, NULL, 1, to_f, &ins[k]));
  }
  for (uint32_t k = 0; k < n->n_output; k++) {
    outs[k] = n->output[k];
    if (outs[k] && outs[k][0] && !(outs[k] = onx_sub_name(c)))
      return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
  }
  Onnx__NodeProto f = *n; /* the node in float32: fresh names in and out */
  f.input = (char **)ins;
  f.output = (char **)outs;
  c->node = &f;
  vm_status_t st = op->fn(c);
  c->node = n;
  for (uint32_t k = 0; !st && k < n->n_output; k++) {
    if (!n->output[k] || !n->output[k][0]) continue;
    onx_value_t *v = onx_lookup(c, outs[k]);
    if (!v) continue; /* an optional output the lowering does not define */
    int back = vm_dtype_equal(v->dt, VM_F32);
    st = onx_sub1(c, back ? "Cast" : "Identity", n->output[k], outs[k], NULL, NULL, back ? 1 : 0,
                  back ? to_from : NULL, NULL);
  }
  return st;
}

/* The recurrent layers: their kernel (cl.rnn) computes in float32, so a
 * float16 model's LSTM, GRU or RNN runs in float32 between casts. */
static const char *const k_f32_only_ops[] = {"GRU", "LSTM", "RNN"};

vm_status_t onx_lower_node(onx_ctx_t *c, const onx_op_t *op) {
  const Onnx__NodeProto *n = c->node;
  for (size_t i = 0; i < sizeof(k_storage_ops) / sizeof(k_storage_ops[0]); i++)
    if (strcmp(n->op_type, k_storage_ops[i]) == 0) return op->fn(c);
  int bf16 = 0;
  for (uint32_t k = 0; k < n->n_input; k++) {
    onx_value_t *v = onx_in(c, k);
    if (!v || !is_storage_dtype(v->dt)) continue;
    if (v->dt.code == VM_DTYPE_BFLOAT) {
      bf16 = 1;
      continue;
    }
    char b[32];
    return onx_node_err(c, VM_UNIMPLEMENTED,
                        "input %u is %s, a storage type this operator does not compute on: "
                        "supported: Cast it to float first (operators taking it: Cast, "
                        "CastLike, BitCast, QuantizeLinear, DequantizeLinear and the views)",
                        k, vm_dtype_str(v->dt, b, sizeof(b)));
  }
  if (bf16) return lower_in_f32(c, op, VM_DTYPE_MAKE(VM_DTYPE_BFLOAT, 16, 1),
                                ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16);
  onx_value_t *x = n->n_input ? onx_in(c, 0) : NULL;
  for (size_t i = 0; x && i < sizeof(k_f32_only_ops) / sizeof(k_f32_only_ops[0]); i++)
    if (strcmp(n->op_type, k_f32_only_ops[i]) == 0 && vm_dtype_equal(x->dt, VM_F16))
      return lower_in_f32(c, op, VM_F16, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16);
  return op->fn(c);
}
