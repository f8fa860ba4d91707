/* cl.rnn: the recurrence of ONNX's RNN, GRU and LSTM over time steps, one
 * launch for a whole range of steps (kernels/rnn.cl says how it runs). */
#include <math.h>
#include <stdio.h>

#include "cl_ops_internal.h"

#define RNN_USAGE                                                                              \
  "(xw, r, b|none, lens|none, h0|none, c0|none, p|none, params, kind, layout, rev_mask, "    \
  "t_begin, t_count, acts, flags, ws, y|none, yh, yc|none)"

vm_status_t vmcl_op_rnn(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                        void *user) {
  (void)m;
  (void)out;
  (void)user;
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.rnn", RNN_USAGE, args, nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 19, 19));
  vm_tensor_t *xw, *r, *b, *lens, *h0, *c0, *p, *params, *ws, *y, *yh, *yc;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "xw", &xw));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 1, "r", &r));
  VM_RETURN_IF_ERROR(vmcl_op_opt_tensor(&op, 2, "b", &b));
  VM_RETURN_IF_ERROR(vmcl_op_opt_tensor(&op, 3, "lens", &lens));
  VM_RETURN_IF_ERROR(vmcl_op_opt_tensor(&op, 4, "h0", &h0));
  VM_RETURN_IF_ERROR(vmcl_op_opt_tensor(&op, 5, "c0", &c0));
  VM_RETURN_IF_ERROR(vmcl_op_opt_tensor(&op, 6, "p", &p));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 7, "params", &params));
  int64_t kind, layout, rev, t_begin, t_count, acts, flags;
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 8, "kind", 0, 2, &kind));
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 9, "layout", 0, 1, &layout));
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 10, "rev_mask", 0, 3, &rev));
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 11, "t_begin", 0, INT32_MAX, &t_begin));
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 12, "t_count", 0, INT32_MAX, &t_count));
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 13, "acts", 0, (1 << 24) - 1, &acts));
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 14, "flags", 0, 3, &flags));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 15, "ws", &ws));
  VM_RETURN_IF_ERROR(vmcl_op_opt_tensor(&op, 16, "y", &y));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 17, "yh", &yh));
  VM_RETURN_IF_ERROR(vmcl_op_opt_tensor(&op, 18, "yc", &yc));
  for (uint32_t i = 0; i < 6; i++) {
    /* acts holds 6 codes of 0..10 */
    if (((acts >> (4 * i)) & 15) > 10)
      return vmcl_op_error(&op, "acts (argument 13) holds an activation code above 10");
  }

  /* r (R transposed) [D, H, G*H] gives D and H; yh [D, B, H] (layout 1:
   * [B, D, H]) gives B */
  int64_t G = kind == 0 ? 1 : kind == 1 ? 3 : 4;
  if (r->ndim != 3 || r->shape[0] < 1 || r->shape[0] > 2 || r->shape[2] != G * r->shape[1])
    return vmcl_op_error(&op, "r (argument 1) must be [D, H, %lld*H] with D 1 or 2", (long long)G);
  int64_t D = r->shape[0], H = r->shape[1], GH = r->shape[2];
  if (yh->ndim != 3) return vmcl_op_error(&op, "yh (argument 17) must have 3 dims");
  int64_t B = layout ? yh->shape[0] : yh->shape[1];
  int64_t sshape[3] = {layout ? B : D, layout ? D : B, H};
  VM_RETURN_IF_ERROR(vmcl_op_want(&op, r, 1, "r", VM_F32, 3, r->shape));
  VM_RETURN_IF_ERROR(vmcl_op_want(&op, yh, 17, "yh", VM_F32, 3, sshape));
  if (B == 0) return VM_STATUS_OK; /* no rows: nothing to compute */
  if (xw->ndim != 3 || xw->shape[0] != D || xw->shape[2] != GH || xw->shape[1] % B != 0)
    return vmcl_op_error(&op, "xw (argument 0) must be [%lld, T*%lld, %lld]", (long long)D,
                         (long long)B, (long long)GH);
  int64_t T = xw->shape[1] / B;
  if (t_begin > T || t_count > T - t_begin)
    return vmcl_op_error(&op, "steps %lld to %lld are beyond the sequence (%lld steps)",
                         (long long)t_begin, (long long)(t_begin + t_count), (long long)T);
  VM_RETURN_IF_ERROR(vmcl_op_want(&op, xw, 0, "xw", VM_F32, 3, xw->shape));
  int64_t bshape[2] = {D, 2 * GH}, pshape[2] = {D, 3 * H}, lshape[1] = {B}, parshape[1] = {13};
  int64_t wshape[2] = {D * B, 4 * H};
  int64_t yshape[4] = {T, D, B, H}, yshape1[4] = {B, T, D, H};
  if (b) VM_RETURN_IF_ERROR(vmcl_op_want(&op, b, 2, "b", VM_F32, 2, bshape));
  if (lens) VM_RETURN_IF_ERROR(vmcl_op_want(&op, lens, 3, "lens", VM_I32, 1, lshape));
  if (h0) VM_RETURN_IF_ERROR(vmcl_op_want(&op, h0, 4, "h0", VM_F32, 3, sshape));
  if (c0) VM_RETURN_IF_ERROR(vmcl_op_want(&op, c0, 5, "c0", VM_F32, 3, sshape));
  if (p) VM_RETURN_IF_ERROR(vmcl_op_want(&op, p, 6, "p", VM_F32, 2, pshape));
  VM_RETURN_IF_ERROR(vmcl_op_want(&op, params, 7, "params", VM_F32, 1, parshape));
  VM_RETURN_IF_ERROR(vmcl_op_want(&op, ws, 15, "ws", VM_F32, 2, wshape));
  if (y) VM_RETURN_IF_ERROR(vmcl_op_want(&op, y, 16, "y", VM_F32, 4, layout ? yshape1 : yshape));
  if (kind == 2 && !yc) return vmcl_op_error(&op, "yc (argument 18) is required for an LSTM");
  if (yc) VM_RETURN_IF_ERROR(vmcl_op_want(&op, yc, 18, "yc", VM_F32, 3, sshape));
  if ((c0 || p) && kind != 2) return vmcl_op_error(&op, "c0 and p are for an LSTM (kind 2) only");
  if (D * B * H == 0) return VM_STATUS_OK;

  vmcl_dev_t *d = op.d;
  cl_kernel k;
  vm_status_t st;
  pthread_mutex_lock(&d->lock);
  /* a program per kind (and GRU linear_before_reset): the gates of a pass
   * over the state are then a constant (kernels/rnn.cl) */
  char opts[64];
  snprintf(opts, sizeof(opts), "-DRNN_KIND=%d -DRNN_LBR=%d", (int)kind, (flags & 2) != 0);
  st = vmcl_family_kernel(d, VMCL_FAM_RNN, opts, "rnn_seq", &k);
  if (st) goto done;
  /* a CPU runs a group's work-items one after another: one work-item a
   * group makes its loop over the units plain vector code; elsewhere 64
   * (one size whatever H: PoCL compiles a kernel once per group size) */
  size_t local = vmcl_local_size(d, k, (d->type & CL_DEVICE_TYPE_CPU) ? 1 : 64);
  vmcl_args_t a = vmcl_args_begin(k);
  /* an absent tensor: r's buffer stands in (never read) */
#define OPT(t)                                      \
  vmcl_arg_mem(&a, vmcl_tensor_mem((t) ? (t) : r)); \
  vmcl_arg_int(&a, (t) ? vmcl_elem_offset(t) : 0)
  vmcl_arg_mem(&a, vmcl_tensor_mem(xw));
  vmcl_arg_int(&a, vmcl_elem_offset(xw));
  vmcl_arg_mem(&a, vmcl_tensor_mem(r));
  vmcl_arg_int(&a, vmcl_elem_offset(r));
  OPT(b);
  vmcl_arg_int(&a, b != NULL);
  OPT(lens);
  vmcl_arg_int(&a, lens != NULL);
  OPT(h0);
  vmcl_arg_int(&a, h0 != NULL);
  OPT(c0);
  vmcl_arg_int(&a, c0 != NULL);
  OPT(p);
  vmcl_arg_int(&a, p != NULL);
  vmcl_arg_mem(&a, vmcl_tensor_mem(params));
  vmcl_arg_int(&a, vmcl_elem_offset(params));
  vmcl_arg_int(&a, kind);
  vmcl_arg_int(&a, layout);
  vmcl_arg_int(&a, rev);
  vmcl_arg_int(&a, t_begin);
  vmcl_arg_int(&a, t_count);
  vmcl_arg_int(&a, acts);
  vmcl_arg_int(&a, flags);
  vmcl_arg_int(&a, T);
  vmcl_arg_int(&a, B);
  vmcl_arg_int(&a, H);
  vmcl_arg_int(&a, D);
  vmcl_arg_mem(&a, vmcl_tensor_mem(ws));
  vmcl_arg_int(&a, vmcl_elem_offset(ws));
  OPT(y);
  vmcl_arg_int(&a, y != NULL);
  vmcl_arg_mem(&a, vmcl_tensor_mem(yh));
  vmcl_arg_int(&a, vmcl_elem_offset(yh));
  OPT(yc);
#undef OPT
  if (a.err != CL_SUCCESS) {
    st = vmcl_status(a.err, "clSetKernelArg");
    goto done;
  }
  st = vmcl_launch_1d(d, k, (size_t)(D * B) * local, local);
done:
  pthread_mutex_unlock(&d->lock);
  return st;
}
