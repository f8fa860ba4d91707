/* cl.rnn: the recurrence of ONNX's RNN, GRU and LSTM (docs/operators.md).
 *
 * The input projection xw = X W^T of every time step is one GEMM before
 * this kernel (cl.gemm); what stays sequential is the recurrence, which
 * runs here: one work-group per (direction, batch) row, looping over the
 * time steps [t_begin, t_begin + t_count) with the hidden state in the
 * workspace ws. A work-item owns the hidden units in eights, j .. j + 7
 * for j = 8 lid, 8 (lid + L), ..., and reads R^T's columns for them as
 * float8s; the whole state is read by every work-item, so steps are
 * separated by a barrier (two for a GRU without linear_before_reset;
 * global memory is coherent within a work-group at a barrier).
 *
 * Layouts (ONNX's `layout` attribute): 0: X [T, B, I], Y [T, D, B, H],
 * states [D, B, H]; 1: X [B, T, I], Y [B, T, D, H], states [B, D, H].
 * xw is [D, rows, G*H] with rows in X's order; r is R transposed,
 * [D, H, G*H]. Step s of a row with
 * sequence length len runs time t = s (forward) or len - 1 - s
 * (reverse); a step s >= len writes zeros to Y at t = s.
 *
 * kind: 0 RNN (gates i), 1 GRU (z, r, h), 2 LSTM (i, o, f, c).
 * acts: per direction d, activation k (f, g, h) at slot d * 3 + k,
 * 4 bits each; params: [clip (<= 0: none; it bounds the gates'
 * pre-activations), alpha/beta per slot].
 * flags: 1 input_forget (LSTM), 2 linear_before_reset (GRU).
 * ws: [D * B, 4 * H]: two hidden-state slots (a step reads one and
 * writes the other), r * h (GRU), z (GRU); the cell state lives in yc.
 * Steps from t_begin 0 start from h0/c0 (or 0).
 */

float rnn_act(int code, float x, float a, float b) {
  switch (code) {
    case 0: return fmax(x, 0.0f);                      /* Relu */
    case 1: return tanh(x);                            /* Tanh */
    case 2: return 1.0f / (1.0f + exp(-x));            /* Sigmoid */
    case 3: return a * x + b;                          /* Affine */
    case 4: return x >= 0.0f ? x : a * x;              /* LeakyRelu */
    case 5: return x > a ? x : 0.0f;                   /* ThresholdedRelu */
    case 6: return a * tanh(b * x);                    /* ScaledTanh */
    case 7: return clamp(a * x + b, 0.0f, 1.0f);       /* HardSigmoid */
    case 8: return x >= 0.0f ? x : a * (exp(x) - 1.0f); /* Elu */
    case 9: return x / (1.0f + fabs(x));               /* Softsign */
    default: return x > 0.0f ? x + log1p(exp(-x)) : log1p(exp(x)); /* Softplus */
  }
}

/* Activation k of direction d applied to x clipped to [-c, c] (c 0: no
 * clip). */
#define ACTC(k, x, c) \
  rnn_act((acts >> (4 * (d * 3 + (k)))) & 15, clipv(x, c), params[1 + 2 * (d * 3 + (k))], \
          params[2 + 2 * (d * 3 + (k))])
/* the gates' pre-activations are clipped; the cell state before LSTM's h
 * is not (as onnxruntime) */
#define ACT(k, x) ACTC(k, x, clip)

float clipv(float x, float c) {
  return c > 0.0f ? clamp(x, -c, c) : x;
}

/* Lane e of v. */
float lane8(float8 v, int e) {
  float t[8];
  vstore8(v, 0, t);
  return t[e];
}

/* h R^T for the w (1..8) adjacent units from column col of each of the ng
 * gates (gate g's columns start at g * H): acc[g]. r holds R^T ([H, G*H],
 * a row per input unit), so the units are adjacent floats, read as one
 * float8 where w is 8; each lane sums over k in order, as a scalar dot
 * would. Called with a constant ng, so the accumulators stay registers. */
void rdots(__global const float *r, int col, int H, int GH, int ng, int w,
           __global const float *v, float8 *acc) {
  if (w == 8) {
    for (int g = 0; g < ng; g++) acc[g] = (float8)(0.0f);
    __global const float *p = r + col;
    for (int k = 0; k < H; k++, p += GH) {
      float vk = v[k];
      for (int g = 0; g < ng; g++) acc[g] += vload8(0, p + g * H) * vk;
    }
    return;
  }
  for (int g = 0; g < ng; g++) {
    float t[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    for (int e = 0; e < w; e++) {
      __global const float *p = r + col + g * H + e;
      float sum = 0.0f;
      for (int k = 0; k < H; k++) sum += p[(size_t)k * GH] * v[k];
      t[e] = sum;
    }
    acc[g] = vload8(0, t);
  }
}

__kernel void rnn_seq(__global const float *xw, int xwo, __global const float *r, int ro,
                      __global const float *bias, int bo, int has_b, __global const int *lens,
                      int lo, int has_lens, __global const float *h0, int h0o, int has_h0,
                      __global const float *c0, int c0o, int has_c0, __global const float *pp,
                      int po, int has_p, __global const float *params, int pao, int kind,
                      int layout, int rev_mask, int t_begin, int t_count, int acts, int flags,
                      int T, int B, int H, int D, __global float *ws, int wso,
                      __global float *y, int yo, int has_y, __global float *yh, int yho,
                      __global float *yc, int yco) {
  int g = get_group_id(0), lid = get_local_id(0), L = get_local_size(0);
  int d = g / B, b = g - d * B;
  int G = kind == 0 ? 1 : kind == 1 ? 3 : 4;
  int GH = G * H;
  params += pao;
  float clip = params[0];
  r += ro + (size_t)d * GH * H;
  __global const float *wb = has_b ? bias + bo + (size_t)d * 2 * GH : bias;
  __global const float *rb = wb + GH;
  __global const float *p = has_p ? pp + po + (size_t)d * 3 * H : pp;
  /* the row's state, wherever the layout puts it */
  size_t st = layout ? ((size_t)b * D + d) * H : ((size_t)d * B + b) * H;
  /* the hidden state before step s is slot min(s, len) & 1 of the row's
   * ws (each live step writes the other slot: one barrier per step) */
  __global float *wr = ws + wso + (size_t)g * 4 * H, *rh = wr + 2 * H, *zs = wr + 3 * H;
  __global float *cs = kind == 2 ? yc + yco + st : yc;
  int len = T;
  if (has_lens) len = clamp(lens[lo + b], 0, T);
  int rev = (rev_mask >> d) & 1;
  int lbr = (flags & 2) != 0;
  if (t_begin == 0) {
    for (int j = lid; j < H; j += L) {
      wr[j] = has_h0 ? h0[h0o + st + j] : 0.0f;
      if (kind == 2) cs[j] = has_c0 ? c0[c0o + st + j] : 0.0f;
    }
    barrier(CLK_GLOBAL_MEM_FENCE);
  }
  for (int s = t_begin; s < t_begin + t_count; s++) {
    int live = s < len;
    int t = live && rev ? len - 1 - s : s;
    size_t yrow = layout ? (((size_t)b * T + t) * D + d) * H : (((size_t)t * D + d) * B + b) * H;
    if (!live) {
      if (has_y)
        for (int j = lid; j < H; j += L) y[yo + yrow + j] = 0.0f;
      continue; /* uniform over the group: one row per group */
    }
    __global const float *hp = wr + (s & 1) * H;
    __global float *hn = wr + ((s + 1) & 1) * H;
    __global const float *x =
        xw + xwo + ((size_t)d * T * B + (layout ? (size_t)b * T + t : (size_t)t * B + b)) * GH;
    /* a work-item takes units j .. j + 7, j + 8L .. */
    for (int j = 8 * lid; j < H; j += 8 * L) {
      int w = min(8, H - j);
      float8 acc[4];
      if (kind == 0)
        rdots(r, j, H, GH, 1, w, hp, acc);
      else if (kind == 1 && lbr)
        rdots(r, j, H, GH, 3, w, hp, acc);
      else if (kind == 1)
        rdots(r, j, H, GH, 2, w, hp, acc);
      else
        rdots(r, j, H, GH, 4, w, hp, acc);
      for (int e = 0; e < w; e++) {
        int u = j + e;
        float hnew;
        if (kind == 0) {
          float a = x[u] + lane8(acc[0], e);
          if (has_b) a += wb[u] + rb[u];
          hnew = ACT(0, a);
        } else if (kind == 1) {
          float az = x[u] + lane8(acc[0], e), ar = x[H + u] + lane8(acc[1], e);
          if (has_b) az += wb[u] + rb[u], ar += wb[H + u] + rb[H + u];
          float z = ACT(0, az), rr = ACT(0, ar);
          if (!lbr) {
            /* the candidate needs every unit's r * h: after a barrier */
            zs[u] = z;
            rh[u] = rr * hp[u];
            continue;
          }
          float wbh = has_b ? wb[2 * H + u] : 0.0f, rbh = has_b ? rb[2 * H + u] : 0.0f;
          float ah = x[2 * H + u] + rr * (lane8(acc[2], e) + rbh) + wbh;
          hnew = (1.0f - z) * ACT(1, ah) + z * hp[u];
        } else {
          float ai = x[u] + lane8(acc[0], e), ao = x[H + u] + lane8(acc[1], e);
          float af = x[2 * H + u] + lane8(acc[2], e), ac = x[3 * H + u] + lane8(acc[3], e);
          if (has_b) {
            ai += wb[u] + rb[u];
            ao += wb[H + u] + rb[H + u];
            af += wb[2 * H + u] + rb[2 * H + u];
            ac += wb[3 * H + u] + rb[3 * H + u];
          }
          float cprev = cs[u];
          if (has_p) ai += p[u] * cprev, af += p[2 * H + u] * cprev;
          float ig = ACT(0, ai);
          float fg = (flags & 1) ? 1.0f - ig : ACT(0, af);
          float cnew = fg * cprev + ig * ACT(1, ac);
          if (has_p) ao += p[H + u] * cnew;
          float og = ACT(0, ao);
          cs[u] = cnew;
          hnew = og * ACTC(2, cnew, 0.0f);
        }
        hn[u] = hnew;
        if (has_y) y[yo + yrow + u] = hnew;
      }
    }
    if (kind == 1 && !lbr) {
      barrier(CLK_GLOBAL_MEM_FENCE);
      for (int j = 8 * lid; j < H; j += 8 * L) {
        int w = min(8, H - j);
        float8 acc[1];
        rdots(r, 2 * H + j, H, GH, 1, w, rh, acc);
        for (int e = 0; e < w; e++) {
          int u = j + e;
          float wbh = has_b ? wb[2 * H + u] : 0.0f, rbh = has_b ? rb[2 * H + u] : 0.0f;
          float ah = x[2 * H + u] + lane8(acc[0], e) + rbh + wbh;
          float z = zs[u];
          float hnew = (1.0f - z) * ACT(1, ah) + z * hp[u];
          hn[u] = hnew;
          if (has_y) y[yo + yrow + u] = hnew;
        }
      }
    }
    barrier(CLK_GLOBAL_MEM_FENCE);
  }
  __global const float *hf = wr + (min(t_begin + t_count, len) & 1) * H;
  for (int j = lid; j < H; j += L) yh[yho + st + j] = hf[j];
}
