/* ONNX operators, neural-network layers: Gemm and MatMul, convolutions
 * (with the epilogues folded into them), pooling, BatchNormalization,
 * Softmax and LayerNormalization. */

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_ops.h"

/* ---------------------------------------------------------------------------
 * Linear algebra
 */

/* Whether value v (of type dt) can be cl.gemm's bias for an output whose
 * rows have n columns: n values along its last axis, every other axis 1,
 * rank at most rank (so the Add leaves the output's shape as it is). */
static int bias_row(const onx_value_t *v, vm_dtype_t dt, uint32_t rank, int64_t n) {
  if (!v || !vm_dtype_equal(v->dt, dt) || v->ndim < 1 || v->ndim > rank ||
      v->dims[v->ndim - 1] != n)
    return 0;
  for (uint32_t i = 0; i + 1 < v->ndim; i++)
    if (v->dims[i] != 1) return 0;
  return 1;
}

/* The float32 Add that alone consumes the current MatMul's output (rank
 * rank, rows of n columns) with a constant row vector of n values (a
 * Linear layer's bias; either operand order): its index, the vector in
 * *bias; else -1. cl.gemm adds it in its store, which gives the same bits
 * as the product and a separate Add. */
static int64_t bias_after(onx_ctx_t *c, vm_dtype_t dt, uint32_t rank, int64_t n,
                          onx_value_t **bias) {
  if (!vm_dtype_equal(dt, VM_F32)) return -1;
  size_t slot = 0;
  int64_t j = onx_sole_consumer(c, c->node->output[0], c->node_idx, &slot);
  if (j < 0) return -1;
  const Onnx__NodeProto *nd = c->graph->node[j];
  if (strcmp(nd->op_type, "Add") != 0 || nd->n_input != 2 || slot > 1 || !nd->input[1 - slot])
    return -1;
  onx_value_t *v = onx_lookup_const(c, nd->input[1 - slot]);
  if (!v || !v->data || !bias_row(v, dt, rank, n)) return -1;
  *bias = v;
  return j;
}

/* After a Linear layer's bias Add (node add, output of rank rank, rows of
 * n columns): the float32 Mul by a constant that scales its columns, s[j]
 * per column (n values along the last axis, every other axis 1: a ViT's
 * layer scale; or one value), alone reading the Add's output; or, through
 * at most three Reshapes and Transposes each alone reading the value
 * before (Shape nodes aside), a Mul by one value of rank 0 (attention's
 * query and key scaled before their product). Its index (*through set in
 * the second case), else -1. Folded, (x W + b) s = x (W s) + b s. */
static int64_t linear_scale_after(onx_ctx_t *c, size_t add, uint32_t rank, int64_t n, double *s,
                                  int *through) {
  const char *cur = c->graph->node[add]->output[0];
  size_t at = add;
  *through = 0;
  for (int hop = 0; hop < 4; hop++) {
    size_t slot = 0;
    int64_t j = onx_sole_reader(c, cur, at, &slot, 1);
    if (j < 0) return -1;
    const Onnx__NodeProto *nd = c->graph->node[j];
    if (strcmp(nd->op_type, "Mul") == 0) {
      /* right after the Add, the Mul's output replaces the Add's: nothing
       * else may read that, Shape nodes included */
      size_t s0;
      if (!hop && onx_sole_consumer(c, cur, at, &s0) != j) return -1;
      if (nd->n_input != 2 || slot > 1 || !nd->input[1 - slot]) return -1;
      onx_value_t *k = onx_lookup_const(c, nd->input[1 - slot]);
      if (!k || !k->data || !vm_dtype_equal(k->dt, VM_F32)) return -1;
      if (hop ? k->ndim != 0 : k->numel != 1 && !bias_row(k, VM_F32, rank, n)) return -1;
      if (!hop && k->ndim > rank) return -1;
      for (int64_t i = 0; i < n; i++) {
        s[i] = onx_ld_f(k->dt, k->data, k->numel == 1 ? 0 : i);
        if (!isfinite(s[i])) return -1;
      }
      *through = hop > 0;
      return j;
    }
    if (slot != 0 || (strcmp(nd->op_type, "Reshape") != 0 && strcmp(nd->op_type, "Transpose") != 0))
      return -1;
    cur = nd->output[0];
    at = (size_t)j;
  }
  return -1;
}

vm_status_t onx_op_gemm(onx_ctx_t *c) {
  int done;
  VM_RETURN_IF_ERROR(onx_lstm_chain(c, &done)); /* an unrolled LSTM from here */
  if (done) return VM_STATUS_OK;
  int qdq;
  VM_RETURN_IF_ERROR(onx_qdq_matmul(c, 1, &qdq));
  if (qdq) return VM_STATUS_OK;
  onx_value_t *a, *b, *cc = onx_in(c, 2);
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &a));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &b));
  float alpha, beta;
  int64_t ta, tb;
  VM_RETURN_IF_ERROR(onx_attr_float(c, "alpha", 1.0f, &alpha));
  VM_RETURN_IF_ERROR(onx_attr_float(c, "beta", 1.0f, &beta));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "transA", 0, &ta));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "transB", 0, &tb));
  int64_t bc = 1; /* legacy: C broadcasts only with broadcast=1 */
  if (c->opset < 7) VM_RETURN_IF_ERROR(onx_attr_int(c, "broadcast", 0, &bc));
  if ((ta != 0 && ta != 1) || (tb != 0 && tb != 1))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "transA/transB must be 0 or 1");
  if (a->ndim != 2 || b->ndim != 2)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "A and B must be 2-D (ranks %u and %u)", a->ndim,
                        b->ndim);
  VM_RETURN_IF_ERROR(need_real(c, a));
  if (!vm_dtype_equal(a->dt, b->dt))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "A and B have different dtypes");
  int64_t m = ta ? a->dims[1] : a->dims[0], k = ta ? a->dims[0] : a->dims[1];
  int64_t kb = tb ? b->dims[1] : b->dims[0], nn = tb ? b->dims[0] : b->dims[1];
  if (k != kb)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "inner dims differ: %lld and %lld", (long long)k,
                        (long long)kb);
  int64_t yd[2] = {m, nn};
  int use_c = cc && beta != 0.0f;
  int32_t y = new_t(c, a->dt, 2, yd);
  if (use_c && beta == 1.0f && bc && vm_dtype_equal(a->dt, VM_F32) && bias_row(cc, a->dt, 2, nn)) {
    /* C is a float32 row vector (a Linear layer's bias): cl.gemm's bias,
     * the same bits as the product and the Add below */
    vmcc_arg_t g[8] = {
        A(onx_tid(c, a)),        A(onx_tid(c, b)),        I(ta), I(tb),
        onx_float_arg(c, alpha), vmcc_a_const(c->c_zero), A(y),  A(onx_reshaped(c, cc, 1, &nn))};
    call(c, "cl.gemm", 8, g);
    return onx_bind_out(c, 0, y, 2, yd);
  }
  int32_t mm = use_c ? new_t(c, a->dt, 2, yd) : y;
  vmcc_arg_t g[7] = {A(onx_tid(c, a)),        A(onx_tid(c, b)),        I(ta), I(tb),
                     onx_float_arg(c, alpha), vmcc_a_const(c->c_zero), A(mm)};
  call(c, "cl.gemm", 7, g);
  if (use_c) {
    uint32_t bn;
    int64_t bd[MAXD];
    if (onx_broadcast(2, yd, cc->ndim, cc->dims, &bn, bd) != 0 || bn != 2 || bd[0] != m ||
        bd[1] != nn)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "C does not broadcast to [%lld, %lld]",
                          (long long)m, (long long)nn);
    if (!bc && (cc->ndim != 2 || cc->dims[0] != m || cc->dims[1] != nn))
      return onx_node_err(c, VM_INVALID_ARGUMENT,
                          "C must be [%lld, %lld] (broadcast = 0) before opset 7", (long long)m,
                          (long long)nn);
    if (!vm_dtype_equal(cc->dt, a->dt))
      return onx_node_err(c, VM_INVALID_ARGUMENT, "C has another dtype than A");
    int32_t tc;
    if (beta == 1.0f) {
      tc = onx_tid(c, cc);
    } else if (cc->data) {
      double *vals = malloc((size_t)(cc->numel ? cc->numel : 1) * sizeof(double));
      if (!vals) return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
      for (int64_t i = 0; i < cc->numel; i++) vals[i] = beta * onx_ld_f(cc->dt, cc->data, i);
      tc = onx_const_tensor_f(c, cc->dt, cc->ndim, cc->dims, vals);
      free(vals);
    } else {
      double bv = beta;
      int32_t ts = onx_const_tensor_f(c, cc->dt, 0, NULL, &bv);
      tc = new_t(c, cc->dt, cc->ndim, cc->dims);
      vmcc_arg_t ma[3] = {A(onx_tid(c, cc)), A(ts), A(tc)};
      call(c, "cl.binary.mul", 3, ma);
    }
    vmcc_arg_t ad[3] = {A(mm), A(tc), A(y)};
    call(c, "cl.binary.add", 3, ad);
  }
  return onx_bind_out(c, 0, y, 2, yd);
}

/* cl.gemm_packed's panel width (opencl/kernels/gemm.cl, gemm4p_nn). */
#define GEMM_PANEL 24

/* A constant float32 B [K, N] packed for cl.gemm_packed: [ceil(N / 24),
 * K, 24], element (k, j) at [j / 24][k][j % 24], the columns past N 0
 * (docs/operators.md). *tid stays -1 where the product keeps cl.gemm:
 * another dtype, a run-time B, one row of A (gemm.cl's gemv_n reads B
 * once as it is) or fewer than 16 columns (most of a panel would be pad). */
static vm_status_t packed_gemm_b(onx_ctx_t *c, onx_value_t *b, const double *scaled, int64_t m,
                                 int32_t *tid) {
  *tid = -1;
  if (!b->data || b->ndim != 2 || !vm_dtype_equal(b->dt, VM_F32) || m < 2) return VM_STATUS_OK;
  int64_t k = b->dims[0], n = b->dims[1];
  if (k == 0 || n < 16) return VM_STATUS_OK;
  if (!scaled && b->pk_g == c->g) { /* packed for an earlier MatMul (shared weights) */
    *tid = b->pk_tid;
    return VM_STATUS_OK;
  }
  int64_t np = (n + GEMM_PANEL - 1) / GEMM_PANEL, dims[3] = {np, k, GEMM_PANEL};
  float *p = calloc((size_t)(np * k * GEMM_PANEL), sizeof(float));
  if (!p) return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
  for (int64_t kk = 0; kk < k; kk++)
    for (int64_t j = 0; j < n; j++) {
      float *dst = &p[((j / GEMM_PANEL) * k + kk) * GEMM_PANEL + j % GEMM_PANEL];
      if (scaled)
        *dst = (float)scaled[kk * n + j];
      else
        memcpy(dst, b->data + (size_t)(kk * n + j) * sizeof(float), sizeof(float));
    }
  *tid = vmcc_graph_const(c->g, VM_F32, p, 3, dims);
  free(p);
  if (*tid >= 0 && !scaled) b->pk_g = c->g, b->pk_tid = *tid;
  if (*tid >= 0 && c->rep) {
    c->rep->num_consts++;
    c->rep->const_bytes += np * k * GEMM_PANEL * (int64_t)sizeof(float);
  }
  return VM_STATUS_OK;
}

vm_status_t onx_op_matmul(onx_ctx_t *c) {
  int done;
  VM_RETURN_IF_ERROR(onx_lstm_chain(c, &done)); /* an unrolled LSTM from here */
  if (done) return VM_STATUS_OK;
  int qdq;
  VM_RETURN_IF_ERROR(onx_qdq_matmul(c, 0, &qdq));
  if (qdq) return VM_STATUS_OK;
  VM_RETURN_IF_ERROR(onx_lt_matmul(c, &done)); /* operands transposed in place? */
  if (done) return VM_STATUS_OK;
  onx_value_t *a, *b;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &a));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &b));
  if (a->ndim < 1 || b->ndim < 1)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "MatMul of a 0-d tensor");
  VM_RETURN_IF_ERROR(need_real(c, a));
  if (!vm_dtype_equal(a->dt, b->dt))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "A and B have different dtypes");
  /* 1-D operands: [K] as [1, K] (A) or [K, 1] (B), the dim dropped after */
  int64_t ad[MAXD], bd[MAXD];
  uint32_t an = a->ndim, bn = b->ndim;
  memcpy(ad, a->dims, sizeof(ad));
  memcpy(bd, b->dims, sizeof(bd));
  if (an == 1) {
    ad[1] = ad[0];
    ad[0] = 1;
    an = 2;
  }
  if (bn == 1) {
    bd[1] = 1;
    bn = 2;
  }
  int64_t m = ad[an - 2], k = ad[an - 1], kb = bd[bn - 2], n = bd[bn - 1];
  if (k != kb)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "inner dims differ: %lld and %lld", (long long)k,
                        (long long)kb);
  uint32_t nbo;
  int64_t bo[MAXD];
  if (onx_broadcast(an - 2, ad, bn - 2, bd, &nbo, bo) != 0)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "batch dims do not broadcast");
  /* output dims */
  int64_t od[MAXD];
  uint32_t on = 0;
  for (uint32_t i = 0; i < nbo; i++) od[on++] = bo[i];
  if (a->ndim > 1) od[on++] = m;
  if (b->ndim > 1) od[on++] = n;
  /* the batch product times m or n then fits too (po is one of od's
   * products, pa and pb are their operands') */
  VM_RETURN_IF_ERROR(onx_check_shape(c, "output", on, od, NULL));
  int64_t pa = prod(ad, an - 2), pb = prod(bd, bn - 2), po = prod(bo, nbo);
  int32_t ta, tb, y, packed = -1;
  /* a Linear layer: the bias Add, and a Mul scaling its columns, folded */
  onx_value_t *bv = NULL;
  int64_t add = b->ndim > 1 ? bias_after(c, a->dt, on, n, &bv) : -1, mul = -1;
  int through = 0;
  int32_t bias = 0;
  double *nw = NULL; /* the scaled weights [K, N] when a Mul folds */
  if (add >= 0 && b->data && b->ndim == 2 && a->ndim >= 2) {
    /* the scale first: the k n scaled weights are allocated only when a
     * Mul folds (a large head without one compiles as before) */
    double *sc = malloc((size_t)(n ? n : 1) * sizeof(double));
    if (!sc) return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
    mul = linear_scale_after(c, (size_t)add, on, n, sc, &through);
    if (mul >= 0) {
      int64_t kn = k * n > n ? k * n : n;
      nw = malloc((size_t)(kn ? kn : 1) * sizeof(double));
      double *nb = malloc((size_t)(n ? n : 1) * sizeof(double));
      if (!nw || !nb) {
        free(sc), free(nw), free(nb);
        return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
      }
      for (int64_t r = 0; r < k; r++)
        for (int64_t j = 0; j < n; j++) nw[r * n + j] = sc[j] * onx_ld_f(b->dt, b->data, r * n + j);
      for (int64_t j = 0; j < n; j++) nb[j] = sc[j] * onx_ld_f(bv->dt, bv->data, j);
      bias = onx_const_tensor_f(c, bv->dt, 1, &n, nb);
      free(nb);
    }
    free(sc);
  }
  if (add >= 0 && mul < 0) bias = onx_reshaped(c, bv, 1, &n);
  if (pb == 1 && bn - 2 <= an - 2) {
    /* B shared by every batch: A as [po*M, K] (a constant float32 B
     * packed into panels once, here, for cl.gemm_packed) */
    int64_t a2[2] = {pa * m, k}, b2[2] = {k, n}, y2[2] = {pa * m, n};
    ta = onx_reshaped(c, a, 2, a2);
    /* (the fold's scaled weights, packed or as they are, in place of B) */
    vm_status_t pst = b->ndim == 2 ? packed_gemm_b(c, b, nw, pa * m, &packed) : VM_STATUS_OK;
    if (pst) {
      free(nw);
      return pst;
    }
    if (packed >= 0)
      tb = packed;
    else if (nw)
      tb = onx_const_tensor_f(c, b->dt, 2, b2, nw);
    else
      tb = onx_reshaped(c, b, 2, b2);
    free(nw);
    nw = NULL;
    y = new_t(c, a->dt, 2, y2);
  } else if (pa == 1 && an - 2 <= bn - 2) {
    int64_t a2[2] = {m, k}, b3[3] = {pb, k, n}, y3[3] = {pb, m, n};
    ta = onx_reshaped(c, a, 2, a2);
    tb = onx_reshaped(c, b, 3, b3);
    y = new_t(c, a->dt, 3, y3);
  } else if (pa == po && pb == po) {
    int64_t a3[3] = {po, m, k}, b3[3] = {po, k, n}, y3[3] = {po, m, n};
    ta = onx_reshaped(c, a, 3, a3);
    tb = onx_reshaped(c, b, 3, b3);
    y = new_t(c, a->dt, 3, y3);
  } else {
    /* materialise the broadcast batches of the smaller side */
    int64_t fa[MAXD], fb[MAXD];
    uint32_t nf = nbo + 2;
    memcpy(fa, bo, nbo * sizeof(int64_t));
    memcpy(fb, bo, nbo * sizeof(int64_t));
    fa[nbo] = m, fa[nbo + 1] = k, fb[nbo] = k, fb[nbo + 1] = n;
    int32_t xa = onx_reshaped(c, a, an, ad), xb = onx_reshaped(c, b, bn, bd);
    if (pa != po) {
      int32_t e = new_t(c, a->dt, nf, fa);
      vmcc_arg_t ba[2] = {A(xa), A(e)};
      call(c, "cl.broadcast_to", 2, ba);
      xa = e;
    }
    if (pb != po) {
      int32_t e = new_t(c, b->dt, nf, fb);
      vmcc_arg_t ba[2] = {A(xb), A(e)};
      call(c, "cl.broadcast_to", 2, ba);
      xb = e;
    }
    int64_t a3[3] = {po, m, k}, b3[3] = {po, k, n}, y3[3] = {po, m, n};
    ta = vmcc_graph_view(c->g, xa, 3, a3);
    tb = vmcc_graph_view(c->g, xb, 3, b3);
    y = new_t(c, a->dt, 3, y3);
  }
  vmcc_arg_t g[8] = {A(ta), A(tb), I(0), I(0), vmcc_a_const(c->c_one), vmcc_a_const(c->c_zero),
                     A(y)};
  free(nw); /* (only the shared-B branch above uses it; the fold needs that branch) */
  if (packed >= 0) { /* (A, B packed, alpha, beta, C, bias|none) */
    vmcc_arg_t pg[6] = {A(ta), A(tb), vmcc_a_const(c->c_one), vmcc_a_const(c->c_zero), A(y),
                        add >= 0 ? A(bias) : vmcc_a_none()};
    call(c, "cl.gemm_packed", 6, pg);
    if (add < 0) return onx_bind_out(c, 0, y, on, od);
  } else if (add >= 0) {
    g[7] = A(bias);
    call(c, "cl.gemm", 8, g);
  } else {
    call(c, "cl.gemm", 7, g);
    return onx_bind_out(c, 0, y, on, od);
  }
  c->skip[add] = ONX_SKIP_FOLDED;
  c->fused = 1; /* the product itself is never a value */
  if (mul >= 0) c->skip[mul] = through ? ONX_SKIP_IDENTITY : ONX_SKIP_FOLDED;
  return onx_bind_named(c, c->graph->node[mul >= 0 && !through ? mul : add]->output[0], y, on, od);
}

/* ---------------------------------------------------------------------------
 * Convolution and pooling
 */

vm_status_t onx_read_window(onx_ctx_t *c, uint32_t nsp, const int64_t *in,
                               const int64_t *wkernel, int ceil_mode, int has_dil, win2d_t *w) {
  int64_t ks[4], st[4], dl[4], pd[8], nks, nst, ndl, npd;
  VM_RETURN_IF_ERROR(onx_attr_ints(c, "kernel_shape", ks, 4, &nks));
  VM_RETURN_IF_ERROR(onx_attr_ints(c, "strides", st, 4, &nst));
  VM_RETURN_IF_ERROR(onx_attr_ints(c, "dilations", dl, 4, &ndl));
  VM_RETURN_IF_ERROR(onx_attr_ints(c, "pads", pd, 8, &npd));
  char ap[32];
  VM_RETURN_IF_ERROR(onx_attr_str(c, "auto_pad", "NOTSET", ap, sizeof(ap)));
  if (nks >= 0 && nks != (int64_t)nsp)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "kernel_shape has %lld values for %u spatial dims",
                        (long long)nks, nsp);
  if (!wkernel && nks < 0) return onx_node_err(c, VM_INVALID_ARGUMENT, "kernel_shape is missing");
  if ((nst >= 0 && nst != (int64_t)nsp) || (ndl >= 0 && ndl != (int64_t)nsp) ||
      (npd >= 0 && npd != 2 * (int64_t)nsp))
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "strides/dilations/pads do not match %u spatial dims", nsp);
  if (ndl >= 0 && !has_dil) {
    for (uint32_t i = 0; i < nsp; i++)
      if (dl[i] != 1) return onx_unsupported_attr(c, "dilations", "!= 1", "1 before opset 10");
  }
  int mode = 0; /* 0 NOTSET, 1 SAME_UPPER, 2 SAME_LOWER, 3 VALID */
  if (strcmp(ap, "NOTSET") == 0 || ap[0] == 0)
    mode = 0;
  else if (strcmp(ap, "SAME_UPPER") == 0)
    mode = 1;
  else if (strcmp(ap, "SAME_LOWER") == 0)
    mode = 2;
  else if (strcmp(ap, "VALID") == 0)
    mode = 3;
  else
    return onx_unsupported_attr(c, "auto_pad", ap, "NOTSET, SAME_UPPER, SAME_LOWER, VALID");
  memset(w, 0, sizeof(*w));
  for (uint32_t i = 0; i < 3; i++) {
    w->k[i] = w->s[i] = w->d[i] = 1;
    w->out[i] = 1;
  }
  uint32_t off = 3 - nsp; /* absent axes are dummies of size 1 */
  for (uint32_t i = 0; i < nsp; i++) {
    uint32_t j = off + i;
    w->k[j] = wkernel ? wkernel[i] : ks[i];
    if (wkernel && nks >= 0 && ks[i] != wkernel[i])
      return onx_node_err(c, VM_INVALID_ARGUMENT, "kernel_shape differs from the weight's");
    w->s[j] = nst >= 0 ? st[i] : 1;
    w->d[j] = ndl >= 0 ? dl[i] : 1;
    w->pb[j] = npd >= 0 ? pd[i] : 0;
    w->pe[j] = npd >= 0 ? pd[i + nsp] : 0;
    if (w->k[j] < 1 || w->s[j] < 1 || w->d[j] < 1 || w->pb[j] < 0 || w->pe[j] < 0 ||
        w->k[j] > (1 << 20) || w->s[j] > (1 << 20) || w->d[j] > (1 << 20) || w->pb[j] > (1 << 20) ||
        w->pe[j] > (1 << 20))
      return onx_node_err(c, VM_INVALID_ARGUMENT,
                          "spatial axis %u: kernel %lld, stride %lld, dilation %lld, pads %lld "
                          "and %lld: kernel, strides and dilations must be 1 to 2^20 and pads 0 "
                          "to 2^20",
                          i, (long long)w->k[j], (long long)w->s[j], (long long)w->d[j],
                          (long long)w->pb[j], (long long)w->pe[j]);
    int64_t ek = (w->k[j] - 1) * w->d[j] + 1; /* dilated kernel */
    int64_t x = in[i];
    if (mode == 1 || mode == 2) {
      int64_t o = (x + w->s[j] - 1) / w->s[j];
      int64_t tot = (o - 1) * w->s[j] + ek - x;
      if (tot < 0) tot = 0;
      w->pb[j] = mode == 1 ? tot / 2 : tot - tot / 2;
      w->pe[j] = tot - w->pb[j];
      w->out[j] = o;
      continue;
    }
    if (mode == 3) w->pb[j] = w->pe[j] = 0;
    int64_t span = x + w->pb[j] + w->pe[j] - ek;
    if (span < 0)
      return onx_node_err(c, VM_INVALID_ARGUMENT,
                          "the kernel (%lld with dilation) is larger than the padded input (%lld)",
                          (long long)ek, (long long)(x + w->pb[j] + w->pe[j]));
    int64_t o = ceil_mode ? (span + w->s[j] - 1) / w->s[j] + 1 : span / w->s[j] + 1;
    /* ceil_mode: a window that starts in the right padding is dropped */
    if (ceil_mode && (o - 1) * w->s[j] >= x + w->pb[j]) o--;
    w->out[j] = o;
  }
  return VM_STATUS_OK;
}

/* Before opset 7, BatchNormalization and Dropout run in training mode
 * unless the attribute is_test is nonzero (absent means 0): training mode
 * (batch statistics, random dropout) is refused. */
vm_status_t onx_need_is_test(onx_ctx_t *c) {
  int64_t is_test;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "is_test", 0, &is_test));
  if (is_test == 0)
    return onx_unsupported_attr(c, "is_test", "0 (training mode)",
                                "nonzero (inference; absent means 0)");
  return VM_STATUS_OK;
}

/* Node `bn` as an inference-mode BatchNormalization with constant
 * parameters of co values defined by now (or by Constant nodes later), folded into the per-channel
 * y = a y + b: 1, or 0 when it does not fit. */
static int fold_bn(onx_ctx_t *c, const Onnx__NodeProto *bn, int64_t co, double *a, double *b) {
  if (bn->n_input < 5) return 0;
  /* training outputs wanted, or training mode before opset 7: onx_op_batchnorm
   * refuses it */
  for (size_t k = 1; k < bn->n_output; k++)
    if (bn->output[k] && bn->output[k][0]) return 0;
  const Onnx__AttributeProto *at = onx_attr(bn, "is_test");
  if (c->opset < 7 && (!at || at->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT || !at->i))
    return 0;
  at = onx_attr(bn, "training_mode");
  if (at && at->i != 0) return 0;
  at = onx_attr(bn, "spatial");
  if (at && at->i != 1) return 0;
  at = onx_attr(bn, "epsilon");
  float eps = 1e-5f;
  if (at) {
    if (at->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT) return 0;
    eps = at->f;
  }
  onx_value_t *p[4];
  for (int k = 0; k < 4; k++) {
    p[k] = onx_lookup_const(c, bn->input[k + 1]);
    if (!p[k] || !p[k]->data || p[k]->numel != co || !onx_is_float(p[k]->dt)) return 0;
  }
  /* s (y - mean) + beta, s = scale / sqrt(var + eps) */
  for (int64_t o = 0; o < co; o++) {
    double s =
        onx_ld_f(p[0]->dt, p[0]->data, o) / sqrt(onx_ld_f(p[3]->dt, p[3]->data, o) + (double)eps);
    a[o] *= s;
    b[o] = s * (b[o] - onx_ld_f(p[2]->dt, p[2]->data, o)) + onx_ld_f(p[1]->dt, p[1]->data, o);
  }
  return 1;
}

/* Node `n`, a float32 Mul, Add or Sub of the rank-`ndim` value y (its
 * input `slot`) with a constant (defined by now, or a later Constant node) that holds one value or
 * one per channel and broadcasts to y's shape without changing it (channels on axis cax: a scalar,
 * [co, 1, 1] or [1, co, 1, 1] for axis 1, [co] or [1, 1, 1, co] for axis 3, ...), folded into y = a
 * y + b: 1, or 0 when it does not fit. */
static int fold_affine(onx_ctx_t *c, const Onnx__NodeProto *n, size_t slot, uint32_t ndim,
                       uint32_t cax, int64_t co, double *a, double *b) {
  int mul = strcmp(n->op_type, "Mul") == 0, sub = strcmp(n->op_type, "Sub") == 0;
  if ((!mul && !sub && strcmp(n->op_type, "Add") != 0) || n->n_input != 2 || slot > 1 ||
      !n->input[1 - slot])
    return 0;
  onx_value_t *k = onx_lookup_const(c, n->input[1 - slot]);
  if (!k || !k->data || !vm_dtype_equal(k->dt, VM_F32) || k->ndim > ndim ||
      (k->numel != 1 && k->numel != co))
    return 0;
  for (uint32_t i = 0; i < k->ndim; i++) {
    uint32_t axis = ndim - k->ndim + i; /* y's axis, right-aligned */
    if (k->dims[i] != 1 && !(axis == cax && k->dims[i] == co)) return 0;
  }
  for (int64_t o = 0; o < co; o++) {
    double v = onx_ld_f(k->dt, k->data, k->numel == 1 ? 0 : o);
    if (mul) {
      a[o] *= v;
      b[o] *= v;
    } else if (sub && slot == 1) { /* v - y */
      a[o] = -a[o];
      b[o] = v - b[o];
    } else {
      b[o] += sub ? -v : v;
    }
  }
  return 1;
}

int onx_lookup_ints(onx_ctx_t *c, const char *name, int64_t *v, size_t max, size_t *n) {
  onx_value_t *k = name && name[0] ? onx_lookup_const(c, name) : NULL;
  /* onx_const_ints' rules without its errors (a pattern that does not
   * fit is no error) */
  if (!k || !k->data || !onx_is_int(k->dt) || k->dt.code == VM_DTYPE_BOOL || k->ndim > 1 ||
      k->numel < 0 || (size_t)k->numel > max)
    return 0;
  for (int64_t i = 0; i < k->numel; i++) v[i] = onx_ld_i(k->dt, k->data, i);
  *n = (size_t)k->numel;
  return 1;
}

/* Whether node n (reading the value of rank *ndim and extents dims as its
 * input 0) only views it and keeps axes 0 and 1 (batch and channels) where
 * they are: a Slice (opset 10 on) that keeps every element, or a Squeeze of
 * unit axes past 1 (axes given; an input from opset 13, an attribute
 * before). jax2tf writes a 1-D convolution's output so, [N, C, L, 1] ->
 * Slice (whole) -> Squeeze(3) -> [N, C, L], before its bias Add. Then
 * *ndim and dims become n's output's. */
static int channel_view(onx_ctx_t *c, const Onnx__NodeProto *n, size_t slot, uint32_t *ndim,
                        int64_t *dims) {
  if (slot != 0 || n->n_output != 1 || (n->domain && n->domain[0])) return 0;
  int64_t v[3][VMCC_MAX_NDIM];
  size_t nv[3];
  if (strcmp(n->op_type, "Slice") == 0) {
    if (n->n_input < 3 || n->n_input > 5 || !onx_lookup_ints(c, n->input[1], v[0], *ndim, &nv[0]) ||
        !onx_lookup_ints(c, n->input[2], v[1], *ndim, &nv[1]) || nv[1] != nv[0])
      return 0;
    int64_t ax[VMCC_MAX_NDIM], st[VMCC_MAX_NDIM];
    size_t na = nv[0], ns = nv[0];
    if (n->n_input >= 4 && n->input[3] && n->input[3][0]) {
      if (!onx_lookup_ints(c, n->input[3], ax, *ndim, &na) || na != nv[0]) return 0;
    } else {
      for (size_t i = 0; i < nv[0]; i++) ax[i] = (int64_t)i;
    }
    if (n->n_input == 5 && n->input[4] && n->input[4][0]) {
      if (!onx_lookup_ints(c, n->input[4], st, *ndim, &ns) || ns != nv[0]) return 0;
    } else {
      for (size_t i = 0; i < nv[0]; i++) st[i] = 1;
    }
    for (size_t i = 0; i < nv[0]; i++) {
      int64_t a = ax[i] < 0 ? ax[i] + *ndim : ax[i];
      if (a < 0 || a >= (int64_t)*ndim || st[i] != 1) return 0;
      int64_t d = dims[a], s = v[0][i], e = v[1][i];
      if (s < 0) s += d;
      if (e < 0) e += d;
      if (s > 0 || e < d) return 0; /* not the whole axis */
    }
    return 1;
  }
  if (strcmp(n->op_type, "Squeeze") == 0) {
    size_t na = 0;
    if (c->opset >= 13) {
      if (n->n_input != 2 || !onx_lookup_ints(c, n->input[1], v[0], *ndim, &na)) return 0;
    } else {
      const Onnx__AttributeProto *at = onx_attr(n, "axes");
      if (n->n_input != 1 || !at || at->n_ints > *ndim) return 0;
      na = at->n_ints;
      for (size_t i = 0; i < na; i++) v[0][i] = at->ints[i];
    }
    if (na == 0) return 0;
    int drop[VMCC_MAX_NDIM] = {0};
    for (size_t i = 0; i < na; i++) {
      int64_t a = v[0][i] < 0 ? v[0][i] + *ndim : v[0][i];
      if (a < 2 || a >= (int64_t)*ndim || dims[a] != 1 || drop[a]) return 0;
      drop[a] = 1;
    }
    uint32_t o = 0;
    for (uint32_t i = 0; i < *ndim; i++)
      if (!drop[i]) dims[o++] = dims[i];
    *ndim = o;
    return 1;
  }
  return 0;
}

/* Folds the chain of per-channel affine nodes (BatchNormalization; for
 * float32 also Mul and Add by constants) that alone consume the current
 * Conv's output into a[o] y + b[o], marking them skipped: the index of the
 * last one, or -1 when none fits. With ydims (the Conv's output, rank
 * *yndim), views that keep the channel axis (channel_view) may stand
 * between the affine nodes, and *yndim and ydims become the last folded
 * node's output's. */
static int64_t affine_after(onx_ctx_t *c, vm_dtype_t dt, uint32_t ndim, int64_t co, double *a,
                            double *b, uint32_t *yndim, int64_t *ydims) {
  const char *cur = c->node->output[0];
  size_t after = c->node_idx;
  int64_t last = -1, views[8];
  int nviews = 0;
  uint32_t vn = yndim ? *yndim : ndim;
  int64_t vd[VMCC_MAX_NDIM];
  if (yndim) memcpy(vd, ydims, vn * sizeof(int64_t));
  for (;;) {
    size_t slot = 0;
    int64_t j = onx_sole_consumer(c, cur, after, &slot);
    if (j < 0) break;
    const Onnx__NodeProto *n = c->graph->node[j];
    int ok = 0;
    if (strcmp(n->op_type, "BatchNormalization") == 0) {
      ok = slot == 0 && vn >= 2 && fold_bn(c, n, co, a, b);
    } else if (yndim && nviews < 8 && channel_view(c, n, slot, &vn, vd)) {
      views[nviews++] = j; /* skipped only when an affine node after it folds */
      cur = n->output[0];
      after = (size_t)j;
      continue;
    } else if (vm_dtype_equal(dt, VM_F32)) {
      ok = fold_affine(c, n, slot, yndim ? vn : ndim, 1, co, a, b);
    }
    if (!ok) break;
    for (int i = 0; i < nviews; i++) c->skip[views[i]] = 1;
    nviews = 0;
    c->skip[j] = 1;
    last = j;
    if (yndim) {
      *yndim = vn;
      memcpy(ydims, vd, vn * sizeof(int64_t));
    }
    cur = n->output[0];
    after = (size_t)j;
  }
  return last;
}

/* The per-output-channel y = a y + b an affine fold starts from: a = 1,
 * b = the bias (or 0), co values each (*fa, *fb malloc'd; freed on
 * failure). */
static vm_status_t affine_start(onx_ctx_t *c, int64_t co, const onx_value_t *bias, double **fa,
                                double **fb) {
  *fa = malloc((size_t)(co ? co : 1) * sizeof(double));
  *fb = malloc((size_t)(co ? co : 1) * sizeof(double));
  if (!*fa || !*fb) {
    free(*fa);
    free(*fb);
    *fa = *fb = NULL;
    return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
  }
  for (int64_t o = 0; o < co; o++) {
    (*fa)[o] = 1.0;
    (*fb)[o] = bias ? onx_ld_f(bias->dt, bias->data, o) : 0.0;
  }
  return VM_STATUS_OK;
}

/* cl.conv2d's epilogue (its 16-argument form): act(y) * am + aa. */
typedef struct conv_epi {
  int64_t act; /* 0 none, 1 relu, 2 hard_swish */
  double am, aa;
  int64_t last; /* the last node folded, or -1 */
} conv_epi_t;

/* Folds the float32 activation that alone consumes the value `cur` (of
 * rank ndim, written by node `after`: Relu, HardSwish or hard_swish spelled
 * out, see onx_hard_chain), then a chain of Mul and Add by one-value constants,
 * into e, marking those nodes skipped. e->last is -1 when none fits. */
static void conv_epilogue_after(onx_ctx_t *c, const char *cur, size_t after, uint32_t ndim,
                                conv_epi_t *e) {
  e->act = 0;
  e->am = 1;
  e->aa = 0;
  e->last = -1;
  const Onnx__GraphProto *g = c->graph;
  size_t slot = 0;
  int64_t j = onx_sole_consumer(c, cur, after, &slot);
  if (j >= 0 && g->node[j]->n_input == 1 &&
      (strcmp(g->node[j]->op_type, "Relu") == 0 || strcmp(g->node[j]->op_type, "HardSwish") == 0)) {
    e->act = strcmp(g->node[j]->op_type, "Relu") == 0 ? 1 : 2;
    c->skip[j] = 1;
    e->last = j;
  } else if (j < 0) {
    /* hard_swish spelled out: x consumed by Add(x, 3) and the Mul by x */
    const onx_name_t *nm = onx_names_find(&c->names, cur);
    for (uint32_t u = 0; nm && u < nm->num_cons && e->last < 0; u++) {
      onx_use_t use = c->names.uses[nm->cons_off + u];
      size_t n = use.node, xs = use.slot;
      const Onnx__NodeProto *nd = g->node[n];
      int64_t ic, im, id;
      int swish;
      if (n <= after || xs > 1 || !nd->op_type || strcmp(nd->op_type, "Add") != 0 ||
          nd->n_input != 2 ||
          !onx_hard_chain(c, n, xs, cur, ndim, &ic, &im, &id, &swish) || !swish ||
          !onx_consumed_by_two(c, cur, after, n, (size_t)im))
        continue;
      c->skip[n] = c->skip[ic] = c->skip[im] = c->skip[id] = 1;
      e->act = 2;
      e->last = id;
    }
  }
  if (e->last < 0) return;
  /* then y * am + aa, by scalars */
  for (;;) {
    const Onnx__NodeProto *ln = g->node[e->last];
    int64_t k = onx_sole_consumer(c, ln->output[0], (size_t)e->last, &slot);
    if (k < 0 || !fold_affine(c, g->node[k], slot, ndim, 1, 1, &e->am, &e->aa)) break;
    c->skip[k] = 1;
    e->last = k;
  }
}

/* The sole consumer of `name` after node `after` (onx_sole_consumer),
 * looking through Casts of float32 to float32 (no-ops, which converters
 * of NHWC models write around every node): their indices go to casts[]
 * (at most max; more: -1). */
static int64_t sole_through_casts(onx_ctx_t *c, const char *name, size_t after, size_t *slot,
                                  int64_t *casts, int *ncasts, int max) {
  *ncasts = 0;
  for (;;) {
    int64_t j = onx_sole_consumer(c, name, after, slot);
    if (j < 0) return -1;
    const Onnx__NodeProto *n = c->graph->node[j];
    if (strcmp(n->op_type, "Cast") != 0) return j;
    const Onnx__AttributeProto *to = onx_attr(n, "to");
    if (!to || to->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT ||
        to->i != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT || *ncasts >= max)
      return -1;
    casts[(*ncasts)++] = j;
    name = n->output[0];
    after = (size_t)j;
  }
}

onx_value_t *onx_residual_other(onx_ctx_t *c, const Onnx__NodeProto *n, size_t slot) {
  if (strcmp(n->op_type, "Add") != 0 || (n->domain && n->domain[0]) || n->n_input != 2 ||
      n->n_attribute != 0 || slot > 1 || !n->input[0] || !n->input[1] ||
      strcmp(n->input[0], n->input[1]) == 0)
    return NULL;
  /* through Casts to float32 not lowered yet (converters of NHWC models
   * write them around every node, and may order a shortcut's Casts after
   * the other branch's convolution): no-ops on a float32 value */
  const char *name = n->input[1 - slot];
  onx_value_t *v = onx_lookup(c, name);
  for (int k = 0; !v && k < 8; k++) {
    const onx_name_t *e = onx_names_find(&c->names, name);
    const Onnx__NodeProto *p = e && e->producer >= 0 ? c->graph->node[e->producer] : NULL;
    const Onnx__AttributeProto *to = p ? onx_attr(p, "to") : NULL;
    if (!p || strcmp(p->op_type, "Cast") != 0 || p->n_input != 1 || !to ||
        to->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT ||
        to->i != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT)
      return NULL;
    name = p->input[0];
    v = onx_lookup(c, name);
  }
  return v && !v->data && vm_dtype_equal(v->dt, VM_F32) ? v : NULL;
}

/* The other operand of node n, an Add whose input `slot` is a float32
 * convolution's output (shape y4, NCHW), as cl.conv2d's residual r (its
 * 18-argument form: y = act(conv + bias + r)): a float32 run-time value
 * defined by now with the convolution's output shape, as a tensor of its
 * own (nhwc 0) or as a pending transpose to NHWC (perm 0, 2, 3, 1, no
 * pads) of such a tensor (nhwc 1: the convolution's output is then seen
 * transposed too). Its tensor, or -1 when the Add does not fit (a
 * broadcast, a constant, a value of a later node). */
static int32_t residual_operand(onx_ctx_t *c, const Onnx__NodeProto *n, size_t slot,
                                const int64_t *y4, int nhwc) {
  onx_value_t *v = onx_residual_other(c, n, slot);
  if (!v || v->ndim != 4) return -1;
  if (!nhwc) {
    if (onx_lt_pending(c, v)) return -1;
    for (int i = 0; i < 4; i++)
      if (v->dims[i] != y4[i]) return -1;
    return onx_tid(c, v);
  }
  static const int64_t to_nhwc[4] = {0, 2, 3, 1};
  if (!onx_lt_active(c, v) || vmcc_graph_ndim(c->g, v->lt_src) != 4) return -1;
  const int64_t *sd = vmcc_graph_shape(c->g, v->lt_src);
  for (int i = 0; i < 4; i++)
    if (v->lt_perm[i] != to_nhwc[i] || sd[i] != y4[i]) return -1;
  return v->lt_src;
}

/* Whether node n is a Transpose with the 4-D permutation p. */
static int is_transpose(const Onnx__NodeProto *n, const int64_t p[4]) {
  if (strcmp(n->op_type, "Transpose") != 0 || n->n_input != 1) return 0;
  const Onnx__AttributeProto *at = onx_attr(n, "perm");
  if (!at || at->n_ints != 4) return 0;
  for (int i = 0; i < 4; i++)
    if (at->ints[i] != p[i]) return 0;
  return 1;
}

/* A float32 4-D Conv whose output alone goes through Transpose(perm 0, 2,
 * 3, 1) into NHWC — as converters of NHWC models (TensorFlow's) write
 * every convolution —, then per-channel Add, Sub and Mul by constants on
 * the last axis (the bias and batch norm: folded into a, b), a Relu (into
 * the epilogue e), and maybe Transpose(perm 0, 3, 1, 2) back to NCHW
 * (*back: its index, else -1), Casts to float32 anywhere in between; a
 * residual Add (residual_operand: *res its tensor, else -1) may stand
 * after the folds and before the Relu. Those
 * nodes are marked skipped; returns the last of them, or -1 when there is
 * no such Transpose after the Conv or nothing after it folds (nothing is
 * marked then). Without the transpose back, the caller transposes the
 * convolution's (epilogued) output once to NHWC and binds it to the last
 * node's output. */
static int64_t nhwc_after(onx_ctx_t *c, int64_t co, const int64_t *y4, double *a, double *b,
                          conv_epi_t *e, int64_t *back, int32_t *res) {
  static const int64_t to_nhwc[4] = {0, 2, 3, 1}, to_nchw[4] = {0, 3, 1, 2};
  enum { MAXC = 8 };
  int64_t casts[MAXC];
  int nc;
  size_t slot = 0;
  *back = -1;
  *res = -1;
  int64_t t = sole_through_casts(c, c->node->output[0], c->node_idx, &slot, casts, &nc, MAXC);
  if (t < 0 || !is_transpose(c->graph->node[t], to_nhwc)) return -1;
  /* what is folded so far: marked when the chain is kept */
  int64_t marks[64];
  int nm = 0, folded = 0;
  for (int i = 0; i < nc; i++) marks[nm++] = casts[i];
  marks[nm++] = t;
  int64_t last = t;
  for (;;) {
    int64_t j = sole_through_casts(c, c->graph->node[last]->output[0], (size_t)last, &slot, casts,
                                   &nc, MAXC);
    if (j < 0 || nm + nc + 1 > 64) break;
    const Onnx__NodeProto *n = c->graph->node[j];
    int ok = 0;
    if (e->act == 0 && strcmp(n->op_type, "Relu") == 0 && n->n_input == 1) {
      e->act = 1;
      ok = 1;
    } else if (e->act == 0 && *res < 0) {
      ok = fold_affine(c, n, slot, 4, 3, co, a, b);
      if (!ok && (*res = residual_operand(c, n, slot, y4, 1)) >= 0) ok = 1;
    } else if (is_transpose(n, to_nchw)) {
      *back = j;
      ok = 1;
    }
    if (!ok && is_transpose(n, to_nchw)) {
      *back = j;
      ok = 1;
    }
    if (!ok) break;
    for (int i = 0; i < nc; i++) marks[nm++] = casts[i];
    marks[nm++] = j;
    last = j;
    folded = 1;
    if (*back >= 0) break;
  }
  if (!folded) return -1;
  for (int i = 0; i < nm; i++) c->skip[marks[i]] = 1;
  e->last = last;
  return last;
}

/* Whether the 4-D x is a pending Pad (mode 1 zeros, 2 edge values) of its
 * two spatial axes only. */
static int padded_by(const onx_ctx_t *c, const onx_value_t *x, int mode) {
  return x->ndim == 4 && onx_lt_pending(c, x) && x->lt_pad == mode && !x->lt_pads[0] &&
         !x->lt_pads[1] && !x->lt_pads[4] && !x->lt_pads[5];
}

/* Adds x's pending pads (padded_by) to the window's. */
static void take_pads(const onx_value_t *x, win2d_t *w) {
  w->pb[1] += x->lt_pads[2];
  w->pb[2] += x->lt_pads[3];
  w->pe[1] += x->lt_pads[6];
  w->pe[2] += x->lt_pads[7];
}

/* The Winograd filter transform U = G g G^T of every 3x3 kernel g (w:
 * [co, ci, 3, 3]) for F(m x m, 3x3), m 2 or 4, as cl.conv2d's 17-argument
 * form takes it: float32 [(m + 2)^2, co, ci], element ((i * (m + 2) + j) *
 * co + o) * ci + c = U[i][j] of kernel (o, c) (conv.cl's conv2d_wino_filter
 * and conv2d_wino4_filter, computed in double here). -1 on error. */
static int32_t wino_filter_const(onx_ctx_t *c, int64_t co, int64_t ci, const double *w, int m) {
  static const double g2[4][3] = {{1, 0, 0}, {.5, .5, .5}, {.5, -.5, .5}, {0, 0, 1}};
  static const double g4[6][3] = {{1.0 / 4, 0, 0},
                                  {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                  {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                  {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                  {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                  {0, 0, 1}};
  int a = m + 2;
  const double(*G)[3] = m == 4 ? g4 : g2;
  int64_t oc = co * ci;
  double *u = malloc((size_t)(a * a * oc) * sizeof(double));
  if (!u) return -1;
  for (int64_t k = 0; k < oc; k++) {
    const double *g = w + k * 9;
    double t[6][3];
    for (int i = 0; i < a; i++)
      for (int j = 0; j < 3; j++) t[i][j] = G[i][0] * g[j] + G[i][1] * g[3 + j] + G[i][2] * g[6 + j];
    for (int i = 0; i < a; i++)
      for (int j = 0; j < a; j++)
        u[(i * a + j) * oc + k] = t[i][0] * G[j][0] + t[i][1] * G[j][1] + t[i][2] * G[j][2];
  }
  int64_t dims[3] = {a * a, co, ci};
  int32_t id = onx_const_tensor_f(c, VM_F32, 3, dims, u);
  free(u);
  return id;
}

/* Which Winograd filter the compiler transforms for a float32 3x3
 * convolution at stride 1, dilation 1, one group, with constant weights
 * (cl.conv2d's 17-argument form): 4 (F(4x4, 3x3)) where the output has at
 * least 16 tiles of 4x4 (its GEMMs' N; fewer leave the GEMM's 16-column
 * blocks mostly idle), else 2; 0 for none (other convolutions, fewer than 8
 * channels either way, as cl.conv2d's Winograd, unknown extents, or a U
 * past 2^26 elements). bench_conv's o_3x3_* shapes: with U given, F(4x4) is
 * the faster on 14x14 and larger maps, F(2x2) on 7x7. */
static int wino_filter_m(const win2d_t *w, int64_t group, int64_t co, int64_t ci,
                         const int64_t *y4) {
  if (w->k[1] != 3 || w->k[2] != 3 || w->s[1] != 1 || w->s[2] != 1 || w->d[1] != 1 ||
      w->d[2] != 1 || group != 1 || co < 8 || ci < 8 || y4[0] < 1 || y4[2] < 1 || y4[3] < 1 ||
      36 * co * ci > ((int64_t)1 << 26))
    return 0;
  return y4[0] * ((y4[2] + 3) / 4) * ((y4[3] + 3) / 4) >= 16 ? 4 : 2;
}

vm_status_t onx_op_conv(onx_ctx_t *c) {
  int qdq;
  VM_RETURN_IF_ERROR(onx_qdq_conv(c, &qdq));
  if (qdq) return VM_STATUS_OK;
  onx_value_t *x, *wv, *bias = onx_in(c, 2);
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &wv));
  VM_RETURN_IF_ERROR(need_float(c, x));
  if (x->ndim != 3 && x->ndim != 4)
    return onx_node_err(c, VM_UNIMPLEMENTED,
                        "input rank %u: supported: 1-D and 2-D convolutions "
                        "(rank 3 or 4)",
                        x->ndim);
  if (wv->ndim != x->ndim || !vm_dtype_equal(wv->dt, x->dt))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "W must have X's rank and dtype");
  int64_t group;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "group", 1, &group));
  uint32_t nsp = x->ndim - 2;
  int64_t co = wv->dims[0], cig = wv->dims[1], cin;
  if (group < 1 || x->dims[1] % group != 0 || co % group != 0 ||
      vm_ckd_mul_i64(cig, group, &cin) != 0 || cin != x->dims[1])
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "group %lld does not fit C=%lld, W's %lld output and %lld input channels",
                        (long long)group, (long long)x->dims[1], (long long)co, (long long)cig);
  win2d_t w;
  VM_RETURN_IF_ERROR(onx_read_window(c, nsp, x->dims + 2, wv->dims + 2, 0, 1, &w));
  if (bias && (bias->ndim != 1 || bias->dims[0] != co || !vm_dtype_equal(bias->dt, x->dt)))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "B must be [%lld] of X's dtype", (long long)co);
  int64_t x4[4] = {x->dims[0], x->dims[1], nsp == 2 ? x->dims[2] : 1, x->dims[nsp + 1]};
  int64_t w4[4] = {co, cig, w.k[1], w.k[2]};
  int64_t y4[4] = {x->dims[0], co, w.out[1], w.out[2]};
  VM_RETURN_IF_ERROR(onx_check_shape(c, "output", 4, y4, NULL));
  int32_t tx, tw;
  if (nsp == 2 && padded_by(c, x, 1)) {
    /* a Pad by zeros before it (onnx_layout.c): its own padding */
    tx = onx_lt_inner(c, x);
    take_pads(x, &w);
  } else {
    tx = onx_reshaped(c, x, 4, x4);
  }
  vmcc_arg_t bz;
  int64_t bn = -1, nhwc = -1, back = -1;
  int32_t res = -1; /* the residual r (residual_operand), or -1 */
  conv_epi_t ep = {0, 1, 0, -1};
  double *fa = NULL, *fb = NULL;
  /* the shape the last folded node's output has (views may drop unit axes) */
  uint32_t bnd = x->ndim;
  int64_t bdims[4] = {x->dims[0], co, nsp == 2 ? w.out[1] : w.out[2], w.out[2]};
  if (wv->data && (!bias || bias->data)) {
    VM_RETURN_IF_ERROR(affine_start(c, co, bias, &fa, &fb));
    bn = affine_after(c, x->dt, x->ndim, co, fa, fb, &bnd, bdims);
    if (bn < 0 && x->ndim == 4 && vm_dtype_equal(x->dt, VM_F32))
      nhwc = nhwc_after(c, co, y4, fa, fb, &ep, &back, &res);
    if (nhwc >= 0) bn = nhwc;
  }
  /* the float32 3x3 convolutions' Winograd filter, transformed here once
   * (wino_filter_m) */
  int wm = nsp == 2 && vm_dtype_equal(x->dt, VM_F32) && wv->data
               ? wino_filter_m(&w, group, co, cig, y4)
               : 0;
  double *nw = NULL;
  if (bn >= 0 || wm) {
    /* a (conv(x, W) + b) + c = conv(x, a W) + (a b + c), per output channel */
    int64_t per = wv->numel / (co ? co : 1);
    nw = malloc((size_t)(wv->numel ? wv->numel : 1) * sizeof(double));
    if (!nw) {
      free(fa);
      free(fb);
      return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
    }
    for (int64_t o = 0; o < co; o++)
      for (int64_t k = 0; k < per; k++)
        nw[o * per + k] = (bn >= 0 ? fa[o] : 1.0) * onx_ld_f(wv->dt, wv->data, o * per + k);
  }
  if (bn >= 0) {
    tw = onx_const_tensor_f(c, wv->dt, 4, w4, nw);
    int64_t bd[1] = {co};
    bz = A(onx_const_tensor_f(c, x->dt, 1, bd, fb));
  } else {
    tw = onx_reshaped(c, wv, 4, w4);
    bz = bias ? A(onx_tid(c, bias)) : vmcc_a_none();
  }
  int32_t tu = wm ? wino_filter_const(c, co, cig, nw, wm) : -1;
  free(nw);
  free(fa);
  free(fb);
  if (wm && tu < 0) return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
  int32_t y = new_t(c, x->dt, 4, y4);
  if (nhwc < 0 && vm_dtype_equal(x->dt, VM_F32)) {
    size_t at = bn >= 0 ? (size_t)bn : c->node_idx, slot = 0;
    /* a residual Add(y, r) first, when y alone feeds it (a 4-D result: not
     * through the views of a 1-D convolution) */
    int64_t j = bnd == 4 ? onx_sole_consumer(c, c->graph->node[at]->output[0], at, &slot) : -1;
    if (j >= 0 && (res = residual_operand(c, c->graph->node[j], slot, y4, 0)) >= 0) {
      c->skip[j] = 1;
      at = (size_t)j;
    }
    conv_epilogue_after(c, c->graph->node[at]->output[0], at, bnd, &ep);
    if (res >= 0 && ep.last < 0) ep.last = j;
  }
  if (res >= 0) {
    vmcc_arg_t a[18] = {A(tx),      A(tw),      bz,         I(w.s[1]),  I(w.s[2]),
                        I(w.pb[1]), I(w.pb[2]), I(w.pe[1]), I(w.pe[2]), I(w.d[1]),
                        I(w.d[2]),  I(group),   I(ep.act),  onx_float_arg(c, ep.am),
                        onx_float_arg(c, ep.aa), tu >= 0 ? A(tu) : vmcc_a_none(), A(res), A(y)};
    call(c, "cl.conv2d", 18, a);
  } else if (tu >= 0) {
    vmcc_arg_t a[17] = {A(tx),      A(tw),      bz,         I(w.s[1]),  I(w.s[2]),
                        I(w.pb[1]), I(w.pb[2]), I(w.pe[1]), I(w.pe[2]), I(w.d[1]),
                        I(w.d[2]),  I(group),   I(ep.act),  onx_float_arg(c, ep.am),
                        onx_float_arg(c, ep.aa), A(tu), A(y)};
    call(c, "cl.conv2d", 17, a);
  } else if (ep.last >= 0) {
    vmcc_arg_t a[16] = {A(tx),
                        A(tw),
                        bz,
                        I(w.s[1]),
                        I(w.s[2]),
                        I(w.pb[1]),
                        I(w.pb[2]),
                        I(w.pe[1]),
                        I(w.pe[2]),
                        I(w.d[1]),
                        I(w.d[2]),
                        I(group),
                        I(ep.act),
                        onx_float_arg(c, ep.am),
                        onx_float_arg(c, ep.aa),
                        A(y)};
    call(c, "cl.conv2d", 16, a);
  } else if (w.pb[1] == w.pe[1] && w.pb[2] == w.pe[2]) {
    vmcc_arg_t a[11] = {A(tx),      A(tw),     bz,        I(w.s[1]), I(w.s[2]), I(w.pb[1]),
                        I(w.pb[2]), I(w.d[1]), I(w.d[2]), I(group),  A(y)};
    call(c, "cl.conv2d", 11, a);
  } else {
    vmcc_arg_t a[13] = {A(tx),      A(tw),      bz,         I(w.s[1]),  I(w.s[2]),
                        I(w.pb[1]), I(w.pb[2]), I(w.pe[1]), I(w.pe[2]), I(w.d[1]),
                        I(w.d[2]),  I(group),   A(y)};
    call(c, "cl.conv2d", 13, a);
  }
  int64_t yd[4] = {x->dims[0], co, w.out[1], w.out[2]};
  if (nsp == 1) yd[2] = w.out[2];
  if (nhwc >= 0) {
    c->fused = 1;
    if (back >= 0) return onx_bind_named(c, c->graph->node[back]->output[0], y, 4, yd);
    /* to NHWC after the folded bias, batch norm and Relu, left pending
     * (onnx_layout.c): a residual Add and Relu run before it, a Transpose
     * back to NCHW cancels it */
    static const int64_t perm[4] = {0, 2, 3, 1};
    return onx_def_transposed(c, c->graph->node[nhwc]->output[0], y, 4, perm);
  }
  int64_t last = ep.last >= 0 ? ep.last : bn;
  if (last >= 0) {
    c->fused = 1;
    return onx_bind_named(c, c->graph->node[last]->output[0], y, bnd, bdims);
  }
  return onx_bind_out(c, 0, y, x->ndim, yd);
}

vm_status_t onx_op_conv_transpose(onx_ctx_t *c) {
  onx_value_t *x, *wv, *bias = onx_in(c, 2);
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &wv));
  VM_RETURN_IF_ERROR(need_float(c, x));
  if (x->ndim < 3 || x->ndim > 5)
    return onx_node_err(c, VM_UNIMPLEMENTED,
                        "input rank %u: supported: 1-D, 2-D and 3-D (rank 3 to 5)", x->ndim);
  if (wv->ndim != x->ndim || !vm_dtype_equal(wv->dt, x->dt))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "W must have X's rank and dtype");
  int64_t group;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "group", 1, &group));
  uint32_t nsp = x->ndim - 2;
  int64_t ci = wv->dims[0], cog = wv->dims[1];
  if (group < 1 || ci != x->dims[1] || ci % group != 0)
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "W's %lld input channels do not match C=%lld "
                        "and group %lld",
                        (long long)ci, (long long)x->dims[1], (long long)group);
  int64_t co;
  if (vm_ckd_mul_i64(cog, group, &co) != 0)
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "group %lld times W's %lld output channels per group overflows",
                        (long long)group, (long long)cog);
  int64_t ks[4], st[4], dl[4], pd[8], op[4], os[8], nks, nst, ndl, npd, nop, nos;
  VM_RETURN_IF_ERROR(onx_attr_ints(c, "kernel_shape", ks, 4, &nks));
  VM_RETURN_IF_ERROR(onx_attr_ints(c, "strides", st, 4, &nst));
  VM_RETURN_IF_ERROR(onx_attr_ints(c, "dilations", dl, 4, &ndl));
  VM_RETURN_IF_ERROR(onx_attr_ints(c, "pads", pd, 8, &npd));
  VM_RETURN_IF_ERROR(onx_attr_ints(c, "output_padding", op, 4, &nop));
  VM_RETURN_IF_ERROR(onx_attr_ints(c, "output_shape", os, 8, &nos));
  char ap[32];
  VM_RETURN_IF_ERROR(onx_attr_str(c, "auto_pad", "NOTSET", ap, sizeof(ap)));
  if ((nst >= 0 && nst != nsp) || (ndl >= 0 && ndl != nsp) || (npd >= 0 && npd != 2 * nsp) ||
      (nop >= 0 && nop != nsp) || (nks >= 0 && nks != nsp))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "attributes do not match %u spatial dims", nsp);
  if (nos >= 0 && nos != nsp && nos != nsp + 2)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "output_shape has %lld values", (long long)nos);
  int mode = 0;
  if (strcmp(ap, "NOTSET") == 0 || !ap[0])
    mode = 0;
  else if (strcmp(ap, "SAME_UPPER") == 0)
    mode = 1;
  else if (strcmp(ap, "SAME_LOWER") == 0)
    mode = 2;
  else if (strcmp(ap, "VALID") == 0)
    mode = 3;
  else
    return onx_unsupported_attr(c, "auto_pad", ap, "NOTSET, SAME_UPPER, SAME_LOWER, VALID");
  /* per spatial axis, right-aligned: [0] D, [1] H, [2] W */
  int64_t s2[3] = {1, 1, 1}, d2[3] = {1, 1, 1}, k2[3] = {1, 1, 1}, pb[3] = {0, 0, 0},
          pe[3] = {0, 0, 0}, o2[3] = {1, 1, 1};
  uint32_t off = 3 - nsp;
  for (uint32_t i = 0; i < nsp; i++) {
    uint32_t j = off + i;
    k2[j] = wv->dims[2 + i];
    s2[j] = nst >= 0 ? st[i] : 1;
    d2[j] = ndl >= 0 ? dl[i] : 1;
    int64_t opad = nop >= 0 ? op[i] : 0;
    if (s2[j] < 1 || d2[j] < 1 || opad < 0 || s2[j] > (1 << 20) || d2[j] > (1 << 20) ||
        opad > (1 << 20))
      return onx_node_err(c, VM_INVALID_ARGUMENT,
                          "spatial axis %u: stride %lld, dilation %lld, output_padding %lld: "
                          "strides and dilations must be 1 to 2^20, output_padding 0 to 2^20",
                          i, (long long)s2[j], (long long)d2[j], (long long)opad);
    if (nks >= 0 && ks[i] != k2[j])
      return onx_node_err(c, VM_INVALID_ARGUMENT,
                          "kernel_shape %lld differs from the weight's %lld on spatial axis %u",
                          (long long)ks[i], (long long)k2[j], i);
    int64_t in = x->dims[2 + i];
    int64_t full = s2[j] * (in - 1) + opad + (k2[j] - 1) * d2[j] + 1;
    if (nos >= 0) {
      int64_t want = os[nos - nsp + i];
      int64_t tot = full - want;
      if (want < 0 || want > (1 << 24))
        return onx_node_err(c, VM_INVALID_ARGUMENT, "output_shape value %lld: 0 to 2^24",
                            (long long)want);
      if (tot < 0) {
        /* a larger output: the extra rows and columns come at the end, as
         * output_padding's do (only the bias reaches them) */
        pb[j] = pe[j] = 0;
      } else if (mode == 1) {
        pb[j] = tot / 2;
        pe[j] = tot - tot / 2;
      } else {
        pb[j] = tot - tot / 2;
        pe[j] = tot / 2;
      }
      o2[j] = want;
    } else if (mode == 1 || mode == 2) {
      int64_t want = in * s2[j];
      int64_t tot = full - want;
      if (tot < 0) tot = 0;
      if (mode == 1) {
        pb[j] = tot / 2;
        pe[j] = tot - tot / 2;
      } else {
        pb[j] = tot - tot / 2;
        pe[j] = tot / 2;
      }
      o2[j] = want;
    } else {
      pb[j] = npd >= 0 && mode == 0 ? pd[i] : 0;
      pe[j] = npd >= 0 && mode == 0 ? pd[i + nsp] : 0;
      if (pb[j] < 0 || pe[j] < 0 || pb[j] > (1 << 20) || pe[j] > (1 << 20))
        return onx_node_err(c, VM_INVALID_ARGUMENT,
                            "pads %lld and %lld on spatial axis %u: 0 to 2^20", (long long)pb[j],
                            (long long)pe[j], i);
      o2[j] = full - pb[j] - pe[j];
      if (o2[j] < 0) return onx_node_err(c, VM_INVALID_ARGUMENT, "pads larger than the output");
    }
    /* cl.conv_transpose2d's extent is s (in - 1) + dilated kernel - begin -
     * end: output_padding and a larger output_shape make the end negative */
    pe[j] = s2[j] * (in - 1) + (k2[j] - 1) * d2[j] + 1 - pb[j] - o2[j];
  }
  if (bias && (bias->ndim != 1 || bias->dims[0] != co || !vm_dtype_equal(bias->dt, x->dt)))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "B must be [%lld] of X's dtype", (long long)co);
  /* a batch norm (or per-channel Mul/Add by constants) after it: folded
   * into W and B per output channel, as for Conv (not with 0 input
   * channels: W's extent per channel pair divides by them) */
  int64_t bn = -1;
  int32_t tw_f = -1;
  vmcc_arg_t bz;
  if (nsp < 3 && wv->data && (!bias || bias->data) && co > 0 && ci > 0) {
    double *fa, *fb;
    VM_RETURN_IF_ERROR(affine_start(c, co, bias, &fa, &fb));
    double *nw = malloc((size_t)(wv->numel ? wv->numel : 1) * sizeof(double));
    if (!nw) {
      free(fa);
      free(fb);
      return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
    }
    bn = affine_after(c, x->dt, x->ndim, co, fa, fb, NULL, NULL);
    if (bn >= 0) {
      /* W [ci, cog, k...]: input channel i of group i / (ci / group) feeds
       * output channels g cog + j */
      int64_t per = wv->numel / (ci * cog), cig = ci / group;
      for (int64_t i = 0; i < ci; i++)
        for (int64_t j = 0; j < cog; j++)
          for (int64_t t = 0; t < per; t++) {
            int64_t at = (i * cog + j) * per + t;
            nw[at] = fa[(i / cig) * cog + j] * onx_ld_f(wv->dt, wv->data, at);
          }
      int64_t w4f[4] = {ci, cog, k2[1], k2[2]};
      tw_f = onx_const_tensor_f(c, wv->dt, 4, w4f, nw);
      bz = A(onx_const_tensor_f(c, x->dt, 1, &co, fb));
    }
    free(fa);
    free(fb);
    free(nw);
  }
  if (bn < 0) bz = bias ? A(onx_tid(c, bias)) : vmcc_a_none();
  if (nsp == 3) {
    /* 3-D: onnx_ops_spatial.c's gather (the 2-D path's GEMM forms are 2-D) */
    int64_t y5[5] = {x->dims[0], co, o2[0], o2[1], o2[2]};
    VM_RETURN_IF_ERROR(onx_check_shape(c, "output", 5, y5, NULL));
    int32_t y = new_t(c, x->dt, 5, y5);
    vmcc_arg_t a[14] = {A(onx_tid(c, x)), A(onx_tid(c, wv)), bz,       I(s2[0]), I(s2[1]),
                        I(s2[2]),         I(pb[0]),          I(pb[1]), I(pb[2]), I(d2[0]),
                        I(d2[1]),         I(d2[2]),          I(group), A(y)};
    call(c, "cl.conv_transpose3d", 14, a);
    return onx_bind_out(c, 0, y, 5, y5);
  }
  int64_t x4[4] = {x->dims[0], x->dims[1], nsp == 2 ? x->dims[2] : 1, x->dims[nsp + 1]};
  int64_t w4[4] = {ci, cog, k2[1], k2[2]};
  int64_t y4[4] = {x->dims[0], co, o2[1], o2[2]};
  VM_RETURN_IF_ERROR(onx_check_shape(c, "output", 4, y4, NULL));
  int32_t tx = onx_reshaped(c, x, 4, x4), tw = tw_f >= 0 ? tw_f : onx_reshaped(c, wv, 4, w4);
  int32_t y = new_t(c, x->dt, 4, y4);
  vmcc_arg_t a[13] = {A(tx),    A(tw),    bz,       I(s2[1]), I(s2[2]), I(pb[1]), I(pb[2]),
                      I(pe[1]), I(pe[2]), I(d2[1]), I(d2[2]), I(group), A(y)};
  call(c, "cl.conv_transpose2d", 13, a);
  int64_t yd[4] = {x->dims[0], co, o2[1], o2[2]};
  if (nsp == 1) yd[2] = o2[2];
  if (bn >= 0) {
    c->fused = 1;
    return onx_bind_named(c, c->graph->node[bn]->output[0], y, x->ndim, yd);
  }
  return onx_bind_out(c, 0, y, x->ndim, yd);
}

/* One cl.pool2d call of x (a 4-D tensor of dims x4) over the window's H
 * and W axes ([1], [2]); returns the output tensor. */
static int32_t pool2d_emit(onx_ctx_t *c, const char *name, int32_t tx, vm_dtype_t dt,
                           const int64_t *x4, const win2d_t *w, int64_t ceil_mode, int64_t cip,
                           int is_max) {
  int64_t y4[4] = {x4[0], x4[1], w->out[1], w->out[2]};
  int32_t y = new_t(c, dt, 4, y4);
  /* the short form: symmetric pads smaller than the kernel, no dilation,
   * floor rounding, padding never counted */
  int simple = w->pb[1] == w->pe[1] && w->pb[2] == w->pe[2] && w->pb[1] < w->k[1] &&
               w->pb[2] < w->k[2] && w->d[1] == 1 && w->d[2] == 1 &&
               (is_max || cip == 0 || (w->pb[1] == 0 && w->pb[2] == 0));
  for (uint32_t j = 1; simple && j < 3; j++)
    if (w->out[j] != (x4[1 + j] + 2 * w->pb[j] - w->k[j]) / w->s[j] + 1) simple = 0;
  if (simple) {
    vmcc_arg_t a[8] = {A(tx),      I(w->k[1]),  I(w->k[2]),  I(w->s[1]),
                       I(w->s[2]), I(w->pb[1]), I(w->pb[2]), A(y)};
    call(c, name, 8, a);
  } else {
    vmcc_arg_t a[14] = {A(tx),       I(w->k[1]),   I(w->k[2]),  I(w->s[1]),  I(w->s[2]),
                        I(w->pb[1]), I(w->pb[2]),  I(w->pe[1]), I(w->pe[2]), I(w->d[1]),
                        I(w->d[2]),  I(ceil_mode), I(cip),      A(y)};
    call(c, name, 14, a);
  }
  return y;
}

static vm_status_t pool_common(onx_ctx_t *c, int is_max) {
  onx_value_t *x;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  /* 8- and 16-bit integers max-pool exactly in float32 (every value is
   * representable; padding never contributes to a max) */
  int small_int =
      is_max && (x->dt.code == VM_DTYPE_INT || x->dt.code == VM_DTYPE_UINT) && x->dt.bits <= 16;
  if (!small_int) VM_RETURN_IF_ERROR(need_float(c, x));
  if (x->ndim < 3 || x->ndim > 5)
    return onx_node_err(c, VM_UNIMPLEMENTED,
                        "input rank %u: supported: 1-D, 2-D and 3-D pooling (rank 3 to 5)",
                        x->ndim);
  if (is_max && onx_out_wanted(c, 1)) return onx_maxpool_indices(c);
  int64_t ceil_mode = 0, cip = 0, so = 0;
  if (c->opset >= 10) VM_RETURN_IF_ERROR(onx_attr_int(c, "ceil_mode", 0, &ceil_mode));
  if (!is_max) VM_RETURN_IF_ERROR(onx_attr_int(c, "count_include_pad", 0, &cip));
  if (is_max) VM_RETURN_IF_ERROR(onx_attr_int(c, "storage_order", 0, &so));
  if ((ceil_mode != 0 && ceil_mode != 1) || (cip != 0 && cip != 1))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "ceil_mode and count_include_pad must be 0 or 1");
  uint32_t nsp = x->ndim - 2;
  win2d_t w;
  int has_dil = is_max ? c->opset >= 10 : c->opset >= 19;
  VM_RETURN_IF_ERROR(onx_read_window(c, nsp, x->dims + 2, NULL, (int)ceil_mode, has_dil, &w));
  const char *name = is_max ? "cl.pool2d.max" : "cl.pool2d.avg";
  const int64_t *xd = x->dims;
  int64_t yd[5] = {xd[0], xd[1], 0, 0, 0};
  for (uint32_t i = 0; i < nsp; i++) yd[2 + i] = w.out[3 - nsp + i];
  VM_RETURN_IF_ERROR(onx_check_shape(c, "output", x->ndim, yd, NULL));
  int32_t y;
  vm_dtype_t pdt = small_int ? VM_F32 : x->dt;
  if (small_int) {
    int32_t f = new_t(c, VM_F32, x->ndim, x->dims);
    vmcc_arg_t ca[2] = {A(onx_tid(c, x)), A(f)};
    call(c, "cl.cast", 2, ca);
    if (nsp < 3) {
      int64_t x4[4] = {xd[0], xd[1], nsp == 2 ? xd[2] : 1, xd[nsp + 1]};
      int32_t yf =
          pool2d_emit(c, name, vmcc_graph_view(c->g, f, 4, x4), pdt, x4, &w, ceil_mode, cip, 1);
      y = new_t(c, x->dt, 4, vmcc_graph_shape(c->g, yf));
      vmcc_arg_t cb[2] = {A(yf), A(y)};
      call(c, "cl.cast", 2, cb);
      return onx_bind_out(c, 0, y, x->ndim, yd);
    }
    return onx_node_err(c, VM_UNIMPLEMENTED, "3-D pooling of integers: supported: float, float16");
  }
  win2d_t we = w;
  if (nsp == 2) take_pads(x, &we);
  int64_t ih = xd[2] - x->lt_pads[2] - x->lt_pads[6], iw = xd[3] - x->lt_pads[3] - x->lt_pads[7];
  if (nsp == 2 && is_max && padded_by(c, x, 2) && !ceil_mode && w.d[1] == 1 && w.d[2] == 1 &&
      we.pb[1] < w.k[1] && we.pe[1] < w.k[1] && we.pb[2] < w.k[2] && we.pe[2] < w.k[2] &&
      ih > 0 && iw > 0) {
    /* a Pad by edge values before it (onnx_layout.c): every window still
     * holds a real element, which the copies at the edge repeat, so the max
     * is the same with them as the pool's own padding (never counted) */
    int64_t i4[4] = {xd[0], xd[1], ih, iw};
    y = pool2d_emit(c, name, onx_lt_inner(c, x), x->dt, i4, &we, ceil_mode, cip, is_max);
  } else if (nsp < 3) {
    int64_t x4[4] = {xd[0], xd[1], nsp == 2 ? xd[2] : 1, xd[nsp + 1]};
    y = pool2d_emit(c, name, onx_reshaped(c, x, 4, x4), x->dt, x4, &w, ceil_mode, cip, is_max);
  } else {
    /* 3-D: max and average are separable (the in-bounds count of a window
     * is the product of its per-axis counts): pool H and W with D folded
     * into the channels, then D with H*W as the last axis */
    int64_t x4[4] = {xd[0], xd[1] * xd[2], xd[3], xd[4]};
    int32_t y1 =
        pool2d_emit(c, name, onx_reshaped(c, x, 4, x4), x->dt, x4, &w, ceil_mode, cip, is_max);
    int64_t m4[4] = {xd[0], xd[1], xd[2], w.out[1] * w.out[2]};
    win2d_t w2 = w;
    w2.k[1] = w.k[0], w2.s[1] = w.s[0], w2.d[1] = w.d[0], w2.pb[1] = w.pb[0], w2.pe[1] = w.pe[0];
    w2.out[1] = w.out[0];
    w2.k[2] = w2.s[2] = w2.d[2] = 1, w2.pb[2] = w2.pe[2] = 0, w2.out[2] = m4[3];
    int32_t v = vmcc_graph_view(c->g, y1, 4, m4);
    y = pool2d_emit(c, name, v, x->dt, m4, &w2, ceil_mode, cip, is_max);
  }
  return onx_bind_out(c, 0, y, x->ndim, yd);
}

vm_status_t onx_op_maxpool(onx_ctx_t *c) {
  return pool_common(c, 1);
}

vm_status_t onx_op_avgpool(onx_ctx_t *c) {
  return pool_common(c, 0);
}

/* ---- squeeze-excitation (cl.squeeze_excite) ----
 * GlobalAveragePool(x) -> 1x1 Conv (R outputs) -> per-channel Add/Mul ->
 * Relu -> 1x1 Conv (C outputs) -> per-channel Add/Mul -> HardSigmoid or
 * Sigmoid -> Mul by x, each value alone read by the next (Identity nodes
 * between them looked through): MobileNetV3's and PP-LCNet's SE block. */

/* cl.squeeze_excite runs each image on one work-group (one core on a CPU
 * device): maps of more than SE_MAX_MAP elements per image (PP-OCRv4
 * det's SE blocks on 120x160 maps) keep the separate, parallel calls. */
enum { SE_MAX_NODES = 48, SE_MAX_LOCAL = 4096, SE_MAX_MAP = 1 << 16 };

typedef struct se_walk {
  int64_t nodes[SE_MAX_NODES];
  int n;
} se_walk_t;

/* The node that alone reads `name` after `after`, looking through
 * Identity nodes (recorded in w); -1 when none or too many. */
static int64_t se_next(onx_ctx_t *c, const char *name, size_t after, size_t *slot, se_walk_t *w) {
  for (;;) {
    int64_t j = onx_sole_consumer(c, name, after, slot);
    if (j < 0 || w->n >= SE_MAX_NODES) return -1;
    const Onnx__NodeProto *n = c->graph->node[j];
    if (strcmp(n->op_type, "Identity") != 0) return j;
    w->nodes[w->n++] = j;
    name = n->output[0];
    after = (size_t)j;
  }
}

/* Whether node j is a Conv of a [N, ci, 1, 1] float32 map by constant
 * weights [co, ci, 1, 1] (co set from them), one group, no padding, with a
 * constant bias or none; its weights go to *wv, its bias (or NULL) *bv. */
static int se_conv(onx_ctx_t *c, int64_t j, size_t slot, int64_t ci, int64_t *co,
                   onx_value_t **wv, onx_value_t **bv) {
  const Onnx__NodeProto *n = c->graph->node[j];
  if (strcmp(n->op_type, "Conv") != 0 || slot != 0 || n->n_input < 2) return 0;
  for (size_t k = 0; k < n->n_attribute; k++) {
    const Onnx__AttributeProto *at = n->attribute[k];
    /* not yet checked by onx_check_attrs: a hostile model's attribute may
     * have no name or another type (left for Conv's own lowering to refuse) */
    if (!at || !at->name) return 0;
    if (strcmp(at->name, "auto_pad") == 0
            ? at->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING
        : strcmp(at->name, "group") == 0 ? at->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT
                                         : at->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS)
      return 0;
    if (strcmp(at->name, "group") == 0) {
      if (at->i != 1) return 0;
    } else if (strcmp(at->name, "pads") == 0) {
      for (size_t i = 0; i < at->n_ints; i++)
        if (at->ints[i] != 0) return 0;
    } else if (strcmp(at->name, "auto_pad") == 0) {
      if (at->s.len && !(at->s.len == 5 && memcmp(at->s.data, "VALID", 5) == 0) &&
          !(at->s.len == 6 && memcmp(at->s.data, "NOTSET", 6) == 0))
        return 0;
    } else if (strcmp(at->name, "kernel_shape") == 0) {
      for (size_t i = 0; i < at->n_ints; i++)
        if (at->ints[i] != 1) return 0;
    } else if (strcmp(at->name, "strides") != 0 && strcmp(at->name, "dilations") != 0) {
      return 0; /* strides and dilations do not matter on a 1x1 map */
    }
  }
  onx_value_t *w = onx_lookup_const(c, n->input[1]);
  if (!w || !w->data || !vm_dtype_equal(w->dt, VM_F32) || w->ndim != 4 || w->dims[1] != ci ||
      w->dims[2] != 1 || w->dims[3] != 1 || w->dims[0] < 1)
    return 0;
  onx_value_t *b = NULL;
  if (n->n_input > 2 && n->input[2] && n->input[2][0]) {
    b = onx_lookup_const(c, n->input[2]);
    if (!b || !b->data || !vm_dtype_equal(b->dt, VM_F32) || b->numel != w->dims[0]) return 0;
  }
  *co = w->dims[0];
  *wv = w;
  *bv = b;
  return 1;
}

/* From Conv node j (co outputs, weights wv, bias bv), the per-channel
 * affine nodes after it folded into weights (*fw, co x ci, malloc'd) and
 * bias (*fb): the node after them (through Identity), or -1. */
static int64_t se_folded_conv(onx_ctx_t *c, int64_t j, int64_t ci, int64_t co,
                              const onx_value_t *wv, const onx_value_t *bv, se_walk_t *w,
                              double **fw, double **fb, size_t *slot) {
  double *a = malloc((size_t)co * sizeof(double)), *b = malloc((size_t)co * sizeof(double));
  *fw = malloc((size_t)(co * ci) * sizeof(double));
  if (!a || !b || !*fw) goto fail;
  for (int64_t o = 0; o < co; o++) {
    a[o] = 1.0;
    b[o] = bv ? onx_ld_f(bv->dt, bv->data, o) : 0.0;
  }
  const char *cur = c->graph->node[j]->output[0];
  int64_t k;
  for (;;) {
    k = se_next(c, cur, (size_t)j, slot, w);
    if (k < 0 || !fold_affine(c, c->graph->node[k], *slot, 4, 1, co, a, b)) break;
    if (w->n >= SE_MAX_NODES) goto fail;
    w->nodes[w->n++] = k;
    cur = c->graph->node[k]->output[0];
    j = k;
  }
  if (k < 0) goto fail;
  for (int64_t o = 0; o < co; o++)
    for (int64_t i = 0; i < ci; i++) (*fw)[o * ci + i] = a[o] * onx_ld_f(wv->dt, wv->data, o * ci + i);
  free(a);
  *fb = b;
  return k;
fail:
  free(a);
  free(b);
  free(*fw);
  *fw = *fb = NULL;
  return -1;
}

/* Lowers the SE block that starts at the current GlobalAveragePool (of the
 * float32 4-D x) to one cl.squeeze_excite: 1 when done (its nodes marked
 * skipped, the Mul's output bound), 0 when the nodes do not fit. */
static vm_status_t squeeze_excite(onx_ctx_t *c, onx_value_t *x, int *done) {
  *done = 0;
  if (x->ndim != 4 || !vm_dtype_equal(x->dt, VM_F32) || !x->name || x->dims[0] < 1 ||
      x->numel / x->dims[0] > SE_MAX_MAP)
    return VM_STATUS_OK;
  const Onnx__GraphProto *g = c->graph;
  se_walk_t w = {{0}, 0};
  size_t slot = 0;
  int64_t C = x->dims[1], R = 0, C2 = 0;
  onx_value_t *w1, *b1, *w2, *b2;
  double *fw1 = NULL, *fb1 = NULL, *fw2 = NULL, *fb2 = NULL;
  int64_t j1 = se_next(c, c->node->output[0], c->node_idx, &slot, &w);
  if (j1 < 0 || !se_conv(c, j1, slot, C, &R, &w1, &b1) || C + R > SE_MAX_LOCAL)
    return VM_STATUS_OK;
  w.nodes[w.n++] = j1;
  int64_t relu = se_folded_conv(c, j1, C, R, w1, b1, &w, &fw1, &fb1, &slot);
  int64_t j2 = -1, gate = -1, mul = -1;
  int gk = 0;
  double alpha = 0.2, beta = 0.5;
  if (relu < 0 || strcmp(g->node[relu]->op_type, "Relu") != 0 || w.n >= SE_MAX_NODES) goto out;
  w.nodes[w.n++] = relu;
  j2 = se_next(c, g->node[relu]->output[0], (size_t)relu, &slot, &w);
  if (j2 < 0 || !se_conv(c, j2, slot, R, &C2, &w2, &b2) || C2 != C || w.n >= SE_MAX_NODES) goto out;
  w.nodes[w.n++] = j2;
  gate = se_folded_conv(c, j2, R, C, w2, b2, &w, &fw2, &fb2, &slot);
  if (gate < 0 || w.n >= SE_MAX_NODES) goto out;
  const Onnx__NodeProto *gn = g->node[gate];
  if (strcmp(gn->op_type, "HardSigmoid") == 0) {
    for (size_t k = 0; k < gn->n_attribute; k++) {
      const Onnx__AttributeProto *at = gn->attribute[k];
      if (!at || !at->name || at->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT) goto out;
      if (strcmp(at->name, "alpha") == 0)
        alpha = at->f;
      else if (strcmp(at->name, "beta") == 0)
        beta = at->f;
      else
        goto out;
    }
  } else if (strcmp(gn->op_type, "Sigmoid") == 0) {
    gk = 1;
  } else {
    goto out;
  }
  w.nodes[w.n++] = gate;
  mul = se_next(c, gn->output[0], (size_t)gate, &slot, &w);
  if (mul < 0 || w.n >= SE_MAX_NODES) goto out;
  const Onnx__NodeProto *mn = g->node[mul];
  if (strcmp(mn->op_type, "Mul") != 0 || mn->n_input != 2 || slot > 1 ||
      !mn->input[1 - slot] || strcmp(mn->input[1 - slot], x->name) != 0)
    goto out;
  w.nodes[w.n++] = mul;
  /* the gate is [N, C, 1, 1]: the product has x's shape */
  int64_t d1[2] = {R, C}, db1[1] = {R}, d2[2] = {C, R}, db2[1] = {C};
  int32_t t1 = onx_const_tensor_f(c, VM_F32, 2, d1, fw1), tb1 = onx_const_tensor_f(c, VM_F32, 1, db1, fb1);
  int32_t t2 = onx_const_tensor_f(c, VM_F32, 2, d2, fw2), tb2 = onx_const_tensor_f(c, VM_F32, 1, db2, fb2);
  free(fw1);
  free(fb1);
  free(fw2);
  free(fb2);
  if (t1 < 0 || tb1 < 0 || t2 < 0 || tb2 < 0)
    return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
  int32_t y = new_t(c, x->dt, 4, x->dims);
  vmcc_arg_t a[9] = {A(onx_tid(c, x)), A(t1),       A(tb1), A(t2), A(tb2), I(gk),
                     onx_float_arg(c, alpha), onx_float_arg(c, beta), A(y)};
  call(c, "cl.squeeze_excite", 9, a);
  for (int i = 0; i < w.n; i++) c->skip[w.nodes[i]] = 1;
  c->fused = 1;
  *done = 1;
  return onx_bind_named(c, mn->output[0], y, 4, x->dims);
out:
  free(fw1);
  free(fb1);
  free(fw2);
  free(fb2);
  return VM_STATUS_OK;
}

vm_status_t onx_op_global_pool(onx_ctx_t *c) {
  onx_value_t *x;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(need_float(c, x));
  if (x->ndim < 3) return onx_node_err(c, VM_INVALID_ARGUMENT, "input rank %u < 3", x->ndim);
  int is_max = c->op->arg; /* 1 GlobalMaxPool, 0 GlobalAveragePool */
  if (!is_max) {
    int done;
    VM_RETURN_IF_ERROR(squeeze_excite(c, x, &done));
    if (done) return VM_STATUS_OK;
  }
  if (x->ndim == 4 && !is_max) {
    int64_t yd[4] = {x->dims[0], x->dims[1], 1, 1};
    int32_t y = new_t(c, x->dt, 4, yd);
    vmcc_arg_t a[2] = {A(onx_tid(c, x)), A(y)};
    call(c, "cl.pool2d.global_avg", 2, a);
    return onx_bind_out(c, 0, y, 4, yd);
  }
  int64_t axes[MAXD];
  for (uint32_t i = 2; i < x->ndim; i++) axes[i - 2] = i;
  return onx_reduce_emit(c, x, is_max ? "cl.reduce.max" : "cl.reduce.mean", x->ndim - 2, axes, 1);
}

/* c = a OP b (cl.binary.*) into a new tensor of the broadcast shape. */
static int32_t emit_binary(onx_ctx_t *c, const char *name, int32_t a, int32_t b) {
  uint32_t n;
  int64_t d[MAXD];
  if (onx_broadcast(vmcc_graph_ndim(c->g, a), vmcc_graph_shape(c->g, a), vmcc_graph_ndim(c->g, b),
                    vmcc_graph_shape(c->g, b), &n, d) != 0)
    return vmcc_graph_tensor(c->g, VM_F32, MAXD + 1, d); /* sticky error */
  int32_t y = new_t(c, vmcc_graph_dtype(c->g, a), n, d);
  vmcc_arg_t args[3] = {A(a), A(b), A(y)};
  call(c, name, 3, args);
  return y;
}

/* BatchNormalization with training_mode = 1: normalises with the batch's
 * own mean and (population) variance over every axis but the channels;
 * outputs 1 and 2 are the running statistics
 * input * momentum + batch * (1 - momentum). */
static vm_status_t batchnorm_training(onx_ctx_t *c, onx_value_t *x, onx_value_t *sc,
                                      onx_value_t *bb, onx_value_t *mean, onx_value_t *var,
                                      float eps) {
  float momentum;
  VM_RETURN_IF_ERROR(onx_attr_float(c, "momentum", 0.9f, &momentum));
  int64_t ch = x->dims[1], axes[MAXD], kd[MAXD], cd[MAXD];
  uint32_t na = 0;
  for (uint32_t i = 0; i < x->ndim; i++) {
    if (i != 1) axes[na++] = i;
    kd[i] = i == 1 ? ch : 1;
  }
  onx_value_t *ps[4] = {sc, bb, mean, var};
  for (int i = 0; i < 4; i++)
    if (ps[i]->numel != ch || !vm_dtype_equal(ps[i]->dt, x->dt))
      return onx_node_err(c, VM_INVALID_ARGUMENT,
                          "input '%.80s' must have %lld values of X's "
                          "dtype",
                          ps[i]->name, (long long)ch);
  cd[0] = ch;
  for (uint32_t i = 2; i < x->ndim; i++) cd[i - 1] = 1;
  int32_t tx = onx_tid(c, x);
  int32_t m = new_t(c, x->dt, x->ndim, kd);
  vmcc_arg_t r1[4] = {A(tx), vmcc_graph_ints(c->g, na, axes), I(1), A(m)};
  call(c, "cl.reduce.mean", 4, r1);
  int32_t d = emit_binary(c, "cl.binary.sub", tx, m);
  int32_t d2 = emit_binary(c, "cl.binary.mul", d, d);
  int32_t v = new_t(c, x->dt, x->ndim, kd);
  vmcc_arg_t r2[4] = {A(d2), vmcc_graph_ints(c->g, na, axes), I(1), A(v)};
  call(c, "cl.reduce.mean", 4, r2);
  double ev = eps;
  int32_t ve = emit_binary(c, "cl.binary.add", v, onx_const_tensor_f(c, x->dt, 0, NULL, &ev));
  int32_t sd = new_t(c, x->dt, x->ndim, kd);
  vmcc_arg_t sq[2] = {A(ve), A(sd)};
  call(c, "cl.unary.sqrt", 2, sq);
  int32_t nrm = emit_binary(c, "cl.binary.div", d, sd);
  int32_t sy = emit_binary(c, "cl.binary.mul", nrm, onx_reshaped(c, sc, x->ndim - 1, cd));
  int32_t y = emit_binary(c, "cl.binary.add", sy, onx_reshaped(c, bb, x->ndim - 1, cd));
  VM_RETURN_IF_ERROR(onx_bind_out(c, 0, y, x->ndim, x->dims));
  int32_t stats[2] = {m, v};
  onx_value_t *inputs[2] = {mean, var};
  for (int k = 0; k < 2; k++) {
    if (!onx_out_wanted(c, 1 + (uint32_t)k)) continue;
    double mo = momentum, om = 1.0 - (double)momentum;
    int64_t c1[1] = {ch};
    int32_t bs = vmcc_graph_view(c->g, stats[k], 1, c1);
    int32_t a = emit_binary(c, "cl.binary.mul", bs, onx_const_tensor_f(c, x->dt, 0, NULL, &om));
    int32_t b = emit_binary(c, "cl.binary.mul", onx_reshaped(c, inputs[k], 1, c1),
                            onx_const_tensor_f(c, x->dt, 0, NULL, &mo));
    int32_t o = emit_binary(c, "cl.binary.add", b, a);
    VM_RETURN_IF_ERROR(onx_bind_out(c, 1 + (uint32_t)k, o, 1, c1));
  }
  return VM_STATUS_OK;
}

vm_status_t onx_op_batchnorm(onx_ctx_t *c) {
  onx_value_t *x, *sc, *bb, *mean, *var;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &sc));
  VM_RETURN_IF_ERROR(onx_in_req(c, 2, &bb));
  VM_RETURN_IF_ERROR(onx_in_req(c, 3, &mean));
  VM_RETURN_IF_ERROR(onx_in_req(c, 4, &var));
  float eps;
  int64_t training = 0;
  VM_RETURN_IF_ERROR(onx_attr_float(c, "epsilon", 1e-5f, &eps));
  if (c->opset >= 14) VM_RETURN_IF_ERROR(onx_attr_int(c, "training_mode", 0, &training));
  if (c->opset < 7) VM_RETURN_IF_ERROR(onx_need_is_test(c));
  if (c->opset < 9) {
    int64_t spatial;
    VM_RETURN_IF_ERROR(onx_attr_int(c, "spatial", 1, &spatial));
    if (spatial != 1) return onx_unsupported_attr(c, "spatial", "0", "1");
  }
  VM_RETURN_IF_ERROR(need_float(c, x));
  if (x->ndim < 2) return onx_node_err(c, VM_INVALID_ARGUMENT, "X has rank %u < 2", x->ndim);
  if (training) return batchnorm_training(c, x, sc, bb, mean, var, eps);
  for (uint32_t i = 1; i < 5; i++)
    if (onx_out_wanted(c, i))
      return onx_node_err(c, VM_UNIMPLEMENTED, "training outputs: supported: Y only");
  int64_t ch = x->dims[1];
  onx_value_t *ps[4] = {sc, bb, mean, var};
  for (int i = 0; i < 4; i++) {
    if (!ps[i]->data)
      return onx_node_err(c, VM_UNIMPLEMENTED,
                          "input '%.80s' must be a constant: supported: constant scale, bias, "
                          "mean and var",
                          ps[i]->name);
    if (ps[i]->numel != ch)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "input '%.80s' must have %lld values",
                          ps[i]->name, (long long)ch);
  }
  double *s = malloc((size_t)(ch ? ch : 1) * 2 * sizeof(double));
  if (!s) return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
  double *t = s + ch;
  for (int64_t i = 0; i < ch; i++) {
    double inv = 1.0 / sqrt(onx_ld_f(var->dt, var->data, i) + (double)eps);
    s[i] = onx_ld_f(sc->dt, sc->data, i) * inv;
    t[i] = onx_ld_f(bb->dt, bb->data, i) - onx_ld_f(mean->dt, mean->data, i) * s[i];
  }
  int64_t cd[MAXD];
  cd[0] = ch;
  for (uint32_t i = 2; i < x->ndim; i++) cd[i - 1] = 1;
  int32_t ts = onx_const_tensor_f(c, x->dt, x->ndim - 1, cd, s);
  int32_t tt = onx_const_tensor_f(c, x->dt, x->ndim - 1, cd, t);
  free(s);
  int32_t m = new_t(c, x->dt, x->ndim, x->dims);
  int32_t y = new_t(c, x->dt, x->ndim, x->dims);
  vmcc_arg_t a1[3] = {A(onx_tid(c, x)), A(ts), A(m)};
  call(c, "cl.binary.mul", 3, a1);
  vmcc_arg_t a2[3] = {A(m), A(tt), A(y)};
  call(c, "cl.binary.add", 3, a2);
  return onx_bind_out(c, 0, y, x->ndim, x->dims);
}

/* ---------------------------------------------------------------------------
 * Normalisation, softmax, reductions
 */

vm_status_t onx_op_softmax(onx_ctx_t *c) {
  onx_value_t *x;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(need_real(c, x));
  int64_t axis;
  int log_sm = c->op->arg; /* 1 LogSoftmax, 0 Softmax */
  VM_RETURN_IF_ERROR(onx_attr_int(c, "axis", c->opset < 13 ? 1 : -1, &axis));
  if (x->ndim == 0) return onx_node_err(c, VM_INVALID_ARGUMENT, "X is 0-d");
  int64_t ax;
  VM_RETURN_IF_ERROR(norm_axis(c, axis, x->ndim, "axis", &ax));
  int32_t tx, y;
  int64_t cax;
  if (c->opset < 13) {
    /* coerced to 2-D [prod(dims[:axis]), prod(dims[axis:])], softmax per row */
    int64_t d2[2] = {prod(x->dims, (uint32_t)ax), prod(x->dims + ax, x->ndim - (uint32_t)ax)};
    tx = onx_reshaped(c, x, 2, d2);
    y = new_t(c, x->dt, 2, d2);
    cax = 1;
  } else {
    tx = onx_tid(c, x);
    y = new_t(c, x->dt, x->ndim, x->dims);
    cax = ax;
  }
  vmcc_arg_t a[3] = {A(tx), I(cax), A(y)};
  call(c, "cl.softmax", 3, a);
  if (log_sm) {
    int32_t l = new_t(c, x->dt, vmcc_graph_ndim(c->g, y), vmcc_graph_shape(c->g, y));
    vmcc_arg_t b[2] = {A(y), A(l)};
    call(c, "cl.unary.log", 2, b);
    y = l;
  }
  return onx_bind_out(c, 0, y, x->ndim, x->dims);
}

vm_status_t onx_layer_norm_call(onx_ctx_t *c, onx_value_t *x, onx_value_t *sc, onx_value_t *bb,
                                int64_t ax, float eps, int rms, int32_t *y, int32_t *tm,
                                int32_t *ti) {
  uint32_t nn = x->ndim - (uint32_t)ax;
  const int64_t *nd = x->dims + ax;
  /* Scale and B: the normalised shape (or broadcastable to it) */
  int32_t tg = -1, tb = -1;
  onx_value_t *pp[2] = {sc, bb};
  for (int i = 0; i < 2; i++) {
    onx_value_t *p = pp[i];
    if (!p) continue;
    if (!vm_dtype_equal(p->dt, x->dt))
      return onx_node_err(c, VM_INVALID_ARGUMENT, "'%.80s' has another dtype than X", p->name);
    int same = p->ndim == nn && memcmp(p->dims, nd, nn * sizeof(int64_t)) == 0;
    int32_t t;
    if (same || p->numel == onx_numel(nn, nd)) {
      uint32_t bn;
      int64_t bd[MAXD];
      /* leading unit axes (a [1, n] scale over the last axis) change nothing */
      int fits = onx_broadcast(p->ndim, p->dims, nn, nd, &bn, bd) == 0 && bn >= nn &&
                 bn <= x->ndim && memcmp(bd + bn - nn, nd, nn * sizeof(int64_t)) == 0;
      for (uint32_t k = 0; fits && k + nn < bn; k++) fits = bd[k] == 1;
      if (!fits)
        return onx_node_err(c, VM_INVALID_ARGUMENT, "'%.80s' does not fit the normalised shape",
                            p->name);
      t = onx_reshaped(c, p, nn, nd);
    } else {
      uint32_t bn;
      int64_t bd[MAXD];
      if (onx_broadcast(p->ndim, p->dims, nn, nd, &bn, bd) != 0 || bn != nn ||
          memcmp(bd, nd, nn * sizeof(int64_t)) != 0)
        return onx_node_err(c, VM_INVALID_ARGUMENT,
                            "'%.80s' does not broadcast to the "
                            "normalised shape",
                            p->name);
      t = new_t(c, x->dt, nn, nd);
      vmcc_arg_t a[2] = {A(onx_tid(c, p)), A(t)};
      call(c, "cl.broadcast_to", 2, a);
    }
    if (i == 0)
      tg = t;
    else
      tb = t;
  }
  *y = new_t(c, x->dt, x->ndim, x->dims);
  int64_t sd[MAXD];
  for (uint32_t i = 0; i < x->ndim; i++) sd[i] = i < ax ? x->dims[i] : 1;
  vmcc_arg_t a[8] = {A(onx_tid(c, x)),
                     tg >= 0 ? A(tg) : vmcc_a_none(),
                     tb >= 0 ? A(tb) : vmcc_a_none(),
                     I(ax),
                     onx_float_arg(c, eps),
                     A(*y),
                     vmcc_a_none(),
                     vmcc_a_none()};
  if (tm && ti) {
    *tm = new_t(c, VM_F32, x->ndim, sd);
    *ti = new_t(c, VM_F32, x->ndim, sd);
    a[6] = A(*tm);
    a[7] = A(*ti);
  }
  call(c, rms ? "cl.rms_norm" : "cl.layer_norm", tm && ti ? 8 : 6, a);
  return VM_STATUS_OK;
}

vm_status_t onx_op_layernorm(onx_ctx_t *c) {
  onx_value_t *x, *sc, *bb = onx_in(c, 2);
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &sc));
  VM_RETURN_IF_ERROR(need_float(c, x));
  int64_t axis, stash;
  float eps;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "axis", -1, &axis));
  VM_RETURN_IF_ERROR(onx_attr_float(c, "epsilon", 1e-5f, &eps));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "stash_type", 1, &stash));
  if (stash != 1) {
    char v[24];
    snprintf(v, sizeof(v), "%lld", (long long)stash);
    return onx_unsupported_attr(c, "stash_type", v, "1 (float)");
  }
  int64_t ax;
  VM_RETURN_IF_ERROR(norm_axis(c, axis, x->ndim, "axis", &ax));
  int want_stats = onx_out_wanted(c, 1) || onx_out_wanted(c, 2);
  int32_t y, tm = -1, ti = -1;
  VM_RETURN_IF_ERROR(onx_layer_norm_call(c, x, sc, bb, ax, eps, 0, &y, want_stats ? &tm : NULL,
                                         want_stats ? &ti : NULL));
  VM_RETURN_IF_ERROR(onx_bind_out(c, 0, y, x->ndim, x->dims));
  if (want_stats) {
    int64_t sd[MAXD];
    for (uint32_t i = 0; i < x->ndim; i++) sd[i] = i < ax ? x->dims[i] : 1;
    VM_RETURN_IF_ERROR(onx_bind_out(c, 1, tm, x->ndim, sd));
    VM_RETURN_IF_ERROR(onx_bind_out(c, 2, ti, x->ndim, sd));
  }
  return VM_STATUS_OK;
}
