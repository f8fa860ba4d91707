/* cl.linear_attention: the recurrence of ONNX's LinearAttention over all
 * time steps in one launch (kernels/attention.cl says how it runs). */
#include "cl_ops_internal.h"

#define LA_USAGE "(q, k, v, state0|none, decay|none, beta|none, scale, q_heads, kv_heads, y, state)"

/* t must be float32 with exactly shape (n dims). */
static vm_status_t want_f32(const vmcl_op_t *op, const vm_tensor_t *t, uint32_t idx,
                            const char *what, uint32_t n, const int64_t *shape) {
  return vmcl_op_want(op, t, idx, what, VM_F32, n, shape);
}

vm_status_t vmcl_op_linear_attention(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                     vm_value_t *out, void *user) {
  (void)m;
  (void)out;
  (void)user;
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.linear_attention", LA_USAGE, args, nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 11, 11));
  vm_tensor_t *q, *k, *v, *s0, *g, *beta, *y, *s;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "q", &q));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 1, "k", &k));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 2, "v", &v));
  VM_RETURN_IF_ERROR(vmcl_op_opt_tensor(&op, 3, "state0", &s0));
  VM_RETURN_IF_ERROR(vmcl_op_opt_tensor(&op, 4, "decay", &g));
  VM_RETURN_IF_ERROR(vmcl_op_opt_tensor(&op, 5, "beta", &beta));
  double scale;
  int64_t hq, hkv;
  VM_RETURN_IF_ERROR(vmcl_op_float(&op, 6, "scale", &scale));
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 7, "q_heads", 1, INT32_MAX, &hq));
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 8, "kv_heads", 1, INT32_MAX, &hkv));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 9, "y", &y));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 10, "state", &s));
  if (hq % hkv)
    return vmcl_op_error(&op, "q_heads %lld is not a multiple of kv_heads %lld", (long long)hq,
                         (long long)hkv);
  /* state [B, Hkv, dk, dv] gives dk and dv; q [B, T, Hq*dk] gives T */
  if (s->ndim != 4 || s->shape[1] != hkv)
    return vmcl_op_error(&op, "state (argument 10) must be [B, %lld, dk, dv]", (long long)hkv);
  int64_t B = s->shape[0], dk = s->shape[2], dv = s->shape[3];
  if (q->ndim != 3) return vmcl_op_error(&op, "q (argument 0) must have 3 dims");
  int64_t T = q->shape[1];
  /* an empty state bounds none of its dims: the heads' products are
   * bounded first, then made */
  if (hq > INT32_MAX / (dk ? dk : 1) || hq > INT32_MAX / (dv ? dv : 1) ||
      hkv > INT32_MAX / (dk ? dk : 1) || hkv > INT32_MAX / (dv ? dv : 1))
    return vmcl_op_error(&op, "heads times head size exceed 32 bits");
  int64_t qd[3] = {B, T, hq * dk}, kd[3] = {B, T, hkv * dk}, vd[3] = {B, T, hkv * dv},
          yd[3] = {B, T, hq * dv};
  VM_RETURN_IF_ERROR(want_f32(&op, q, 0, "q", 3, qd));
  VM_RETURN_IF_ERROR(want_f32(&op, k, 1, "k", 3, kd));
  VM_RETURN_IF_ERROR(want_f32(&op, v, 2, "v", 3, vd));
  VM_RETURN_IF_ERROR(want_f32(&op, s, 10, "state", 4, s->shape));
  VM_RETURN_IF_ERROR(want_f32(&op, y, 9, "y", 3, yd));
  if (s0) VM_RETURN_IF_ERROR(want_f32(&op, s0, 3, "state0", 4, s->shape));
  int g_mode = 0, b_mode = 0;
  if (g) {
    int64_t gh[3] = {B, T, hkv};
    g_mode = g->ndim == 3 && g->shape[2] == hkv ? 1 : 2;
    if (g_mode == 2) gh[2] = hkv * dk;
    VM_RETURN_IF_ERROR(want_f32(&op, g, 4, "decay", 3, gh));
  }
  if (beta) {
    int64_t bd[3] = {B, T, hkv};
    b_mode = beta->ndim == 3 && beta->shape[2] == hkv ? 1 : 2;
    if (b_mode == 2) bd[2] = 1;
    VM_RETURN_IF_ERROR(want_f32(&op, beta, 5, "beta", 3, bd));
  }
  /* a work-item per state column: B*Hkv*dv, within y's or state's count
   * (dk 0 still writes y's zeros) */
  int64_t items = B * hkv * dv;
  if (items == 0) return VM_STATUS_OK;

  vmcl_dev_t *d = op.d;
  cl_kernel kern;
  vm_status_t st;
  pthread_mutex_lock(&d->lock);
  st = vmcl_family_kernel(d, VMCL_FAM_ATTENTION, "", "linear_attention", &kern);
  if (st) goto done;
  size_t local = vmcl_local_size(d, kern, 64);
  vmcl_args_t a = vmcl_args_begin(kern);
  /* an absent tensor: q's buffer stands in (never read) */
#define OPT(t)                                      \
  vmcl_arg_mem(&a, vmcl_tensor_mem((t) ? (t) : q)); \
  vmcl_arg_int(&a, (t) ? vmcl_elem_offset(t) : 0)
  vmcl_arg_mem(&a, vmcl_tensor_mem(q));
  vmcl_arg_int(&a, vmcl_elem_offset(q));
  vmcl_arg_mem(&a, vmcl_tensor_mem(k));
  vmcl_arg_int(&a, vmcl_elem_offset(k));
  vmcl_arg_mem(&a, vmcl_tensor_mem(v));
  vmcl_arg_int(&a, vmcl_elem_offset(v));
  OPT(s0);
  vmcl_arg_int(&a, s0 != NULL);
  OPT(g);
  vmcl_arg_int(&a, g_mode);
  OPT(beta);
  vmcl_arg_int(&a, b_mode);
#undef OPT
  vmcl_arg_float(&a, (float)scale);
  vmcl_arg_int(&a, B);
  vmcl_arg_int(&a, T);
  vmcl_arg_int(&a, hq);
  vmcl_arg_int(&a, hkv);
  vmcl_arg_int(&a, dk);
  vmcl_arg_int(&a, dv);
  vmcl_arg_mem(&a, vmcl_tensor_mem(y));
  vmcl_arg_int(&a, vmcl_elem_offset(y));
  vmcl_arg_mem(&a, vmcl_tensor_mem(s));
  vmcl_arg_int(&a, vmcl_elem_offset(s));
  if (a.err != CL_SUCCESS) {
    st = vmcl_status(a.err, "clSetKernelArg");
    goto done;
  }
  st = vmcl_launch_1d(d, kern, (size_t)items, local);
done:
  pthread_mutex_unlock(&d->lock);
  return st;
}
