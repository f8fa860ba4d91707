/* cl.rnn: the recurrence of ONNX's RNN, GRU and LSTM (docs/operators.md).
 *
 * The input projection xw = X W^T of every time step is one GEMM before
 * this kernel (cl.gemm); what stays sequential is the recurrence, which
 * runs here: one work-group per (direction, batch) row, looping over the
 * time steps [t_begin, t_begin + t_count) with the hidden state in the
 * workspace ws. A work-item owns the hidden units in sixteens, j .. j + 15
 * for j = 16 lid, 16 (lid + L), ..., and reads R^T's columns for them as
 * two float8s a gate; the whole state is read by every work-item, so steps
 * are separated by a barrier (two for a GRU without linear_before_reset;
 * global memory is coherent within a work-group at a barrier). On a CPU
 * the host runs one work-item a group: the loop over the sixteens is then
 * plain vector code, with no work-item loop around it.
 *
 * The program is built per kind (-DRNN_KIND=0 RNN, 1 GRU, 2 LSTM) and,
 * for a GRU, linear_before_reset (-DRNN_LBR=1), so the number of gates in
 * a pass over the state is a constant and their accumulators registers.
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

#ifndef RNN_KIND
#define RNN_KIND 1
#endif
#ifndef RNN_LBR
#define RNN_LBR 0
#endif
/* gates of the first pass over the state (a GRU without
 * linear_before_reset leaves its candidate to a second pass) */
#if RNN_KIND == 0
#define NG 1
#elif RNN_KIND == 2
#define NG 4
#elif RNN_LBR
#define NG 3
#else
#define NG 2
#endif

/* Activation `code` on eight lanes. */
float8 rnn_act8(int code, float8 x, float a, float b) {
  switch (code) {
    case 0: return fmax(x, 0.0f);                             /* Relu */
    case 1: return tanh(x);                                   /* Tanh */
    case 2: return 1.0f / (1.0f + exp(-x));                   /* Sigmoid */
    case 3: return a * x + b;                                 /* Affine */
    case 4: return select(a * x, x, x >= 0.0f);               /* LeakyRelu */
    case 5: return select((float8)(0.0f), x, x > a);          /* ThresholdedRelu */
    case 6: return a * tanh(b * x);                           /* ScaledTanh */
    case 7: return clamp(a * x + b, 0.0f, 1.0f);              /* HardSigmoid */
    case 8: return select(a * (exp(x) - 1.0f), x, x >= 0.0f); /* Elu */
    case 9: return x / (1.0f + fabs(x));                      /* Softsign */
    default: return fmax(x, 0.0f) + log1p(exp(-fabs(x)));     /* Softplus */
  }
}

float8 clip8(float8 x, float c) {
  return c > 0.0f ? clamp(x, -c, c) : x;
}

/* Activation k of direction d on x clipped to [-c, c] (c 0: no clip). */
#define ACTC(k, x, c) \
  rnn_act8((acts >> (4 * (d * 3 + (k)))) & 15, clip8(x, c), params[1 + 2 * (d * 3 + (k))], \
           params[2 + 2 * (d * 3 + (k))])
/* the gates' pre-activations are clipped; the cell state before LSTM's h
 * is not (as onnxruntime) */
#define ACT(k, x) ACTC(k, x, clip)

/* The w (1..8) floats at p as lanes 0..w-1 (the rest 0), and back. */
float8 ld8(__global const float *p, int w) {
  if (w == 8) return vload8(0, p);
  float t[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  for (int e = 0; e < w; e++) t[e] = p[e];
  return vload8(0, t);
}

void st8(float8 v, __global float *p, int w) {
  if (w == 8) {
    vstore8(v, 0, p);
    return;
  }
  float t[8];
  vstore8(v, 0, t);
  for (int e = 0; e < w; e++) p[e] = t[e];
}

/* h R^T for the units col .. col + 15 of each of the NGATES gates (gate
 * g's columns start at g * H; r holds R^T, [H, G*H], a row per input
 * unit): acc[2 g] and acc[2 g + 1] the two eights. w units are real
 * (1..16); where w is 16 the columns are read as float8s, with the sum over
 * k split into even and odd k where there are few gates (so that enough
 * independent multiply-adds are in flight); otherwise unit by unit in
 * order. A macro, so that NGATES is a constant and acc registers. */
#define RDOTS16(NGATES, r, col, H, GH, w, v, acc)                                      \
  do {                                                                                 \
    if ((w) == 16) {                                                                   \
      float8 e_[2 * (NGATES)], o_[2 * (NGATES)];                                       \
      _Pragma("unroll") for (int g_ = 0; g_ < 2 * (NGATES); g_++) e_[g_] = o_[g_] =    \
          (float8)(0.0f);                                                              \
      __global const float *p_ = (r) + (col);                                          \
      int k_ = 0;                                                                      \
      if (2 * (NGATES) <= 4) {                                                         \
        for (; k_ + 1 < (H); k_ += 2, p_ += 2 * (GH)) {                                \
          float v0_ = (v)[k_], v1_ = (v)[k_ + 1];                                      \
          _Pragma("unroll") for (int g_ = 0; g_ < (NGATES); g_++) {                    \
            e_[2 * g_] += vload8(0, p_ + g_ * (H)) * v0_;                              \
            e_[2 * g_ + 1] += vload8(0, p_ + g_ * (H) + 8) * v0_;                      \
            o_[2 * g_] += vload8(0, p_ + (GH) + g_ * (H)) * v1_;                       \
            o_[2 * g_ + 1] += vload8(0, p_ + (GH) + g_ * (H) + 8) * v1_;               \
          }                                                                            \
        }                                                                              \
      }                                                                                \
      for (; k_ < (H); k_++, p_ += (GH)) {                                             \
        float v0_ = (v)[k_];                                                           \
        _Pragma("unroll") for (int g_ = 0; g_ < (NGATES); g_++) {                      \
          e_[2 * g_] += vload8(0, p_ + g_ * (H)) * v0_;                                \
          e_[2 * g_ + 1] += vload8(0, p_ + g_ * (H) + 8) * v0_;                        \
        }                                                                              \
      }                                                                                \
      _Pragma("unroll") for (int g_ = 0; g_ < 2 * (NGATES); g_++) (acc)[g_] =          \
          e_[g_] + o_[g_];                                                             \
    } else {                                                                           \
      for (int g_ = 0; g_ < 2 * (NGATES); g_++) {                                      \
        float t_[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};                \
        int u0_ = (col) + (g_ >> 1) * (H) + (g_ & 1) * 8;                              \
        int n_ = min(8, (w) - (g_ & 1) * 8);                                           \
        for (int e = 0; e < n_; e++) {                                                 \
          float sum_ = 0.0f;                                                           \
          for (int k = 0; k < (H); k++) sum_ += (r)[(size_t)k * (GH) + u0_ + e] * (v)[k]; \
          t_[e] = sum_;                                                                \
        }                                                                              \
        (acc)[g_] = vload8(0, t_);                                                     \
      }                                                                                \
    }                                                                                  \
  } while (0)

__kernel void rnn_seq(__global const float *xw, int xwo, __global const float *r, int ro,
                      __global const float *bias, int bo, int has_b, __global const int *lens,
                      int lo, int has_lens, __global const float *h0, int h0o, int has_h0,
                      __global const float *c0, int c0o, int has_c0, __global const float *pp,
                      int po, int has_p, __global const float *params, int pao, int kind,
                      int layout, int rev_mask, int t_begin, int t_count, int acts, int flags,
                      int T, int B, int H, int D, __global float *ws, int wso,
                      __global float *y, int yo, int has_y, __global float *yh, int yho,
                      __global float *yc, int yco) {
  (void)kind; /* RNN_KIND: the host builds the program for the call's kind */
  int g = get_group_id(0), lid = get_local_id(0), L = get_local_size(0);
  int d = g / B, b = g - d * B;
  const int G = RNN_KIND == 0 ? 1 : RNN_KIND == 1 ? 3 : 4;
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
  __global float *cs = RNN_KIND == 2 ? yc + yco + st : yc;
  int len = T;
  if (has_lens) len = clamp(lens[lo + b], 0, T);
  int rev = (rev_mask >> d) & 1;
  if (t_begin == 0) {
    for (int j = lid; j < H; j += L) {
      wr[j] = has_h0 ? h0[h0o + st + j] : 0.0f;
      if (RNN_KIND == 2) cs[j] = has_c0 ? c0[c0o + st + j] : 0.0f;
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
    for (int j0 = 16 * lid; j0 < H; j0 += 16 * L) {
      int w16 = min(16, H - j0);
      float8 acc[2 * NG];
      RDOTS16(NG, r, j0, H, GH, w16, hp, acc);
      /* the gates' arithmetic on eight units at once */
      for (int q = 0; q < 2; q++) {
        int j = j0 + 8 * q, w = min(8, H - j);
        if (w <= 0) break;
        float8 hprev = ld8(hp + j, w), hnew;
#if RNN_KIND == 0
        float8 a = ld8(x + j, w) + acc[q];
        if (has_b) a += ld8(wb + j, w) + ld8(rb + j, w);
        hnew = ACT(0, a);
#elif RNN_KIND == 1
        float8 az = ld8(x + j, w) + acc[q], ar = ld8(x + H + j, w) + acc[2 + q];
        if (has_b) {
          az += ld8(wb + j, w) + ld8(rb + j, w);
          ar += ld8(wb + H + j, w) + ld8(rb + H + j, w);
        }
        float8 z = ACT(0, az), rr = ACT(0, ar);
#if !RNN_LBR
        /* the candidate needs every unit's r * h: after a barrier */
        st8(z, zs + j, w);
        st8(rr * hprev, rh + j, w);
        continue;
#else
        float8 wbh = has_b ? ld8(wb + 2 * H + j, w) : (float8)(0.0f);
        float8 rbh = has_b ? ld8(rb + 2 * H + j, w) : (float8)(0.0f);
        float8 ah = ld8(x + 2 * H + j, w) + rr * (acc[4 + q] + rbh) + wbh;
        hnew = (1.0f - z) * ACT(1, ah) + z * hprev;
#endif
#else
        float8 ai = ld8(x + j, w) + acc[q], ao = ld8(x + H + j, w) + acc[2 + q];
        float8 af = ld8(x + 2 * H + j, w) + acc[4 + q];
        float8 ac = ld8(x + 3 * H + j, w) + acc[6 + q];
        if (has_b) {
          ai += ld8(wb + j, w) + ld8(rb + j, w);
          ao += ld8(wb + H + j, w) + ld8(rb + H + j, w);
          af += ld8(wb + 2 * H + j, w) + ld8(rb + 2 * H + j, w);
          ac += ld8(wb + 3 * H + j, w) + ld8(rb + 3 * H + j, w);
        }
        float8 cprev = ld8(cs + j, w);
        if (has_p) ai += ld8(p + j, w) * cprev, af += ld8(p + 2 * H + j, w) * cprev;
        float8 ig = ACT(0, ai);
        float8 fg = (flags & 1) ? 1.0f - ig : ACT(0, af);
        float8 cnew = fg * cprev + ig * ACT(1, ac);
        if (has_p) ao += ld8(p + H + j, w) * cnew;
        float8 og = ACT(0, ao);
        st8(cnew, cs + j, w);
        hnew = og * ACTC(2, cnew, 0.0f);
#endif
        st8(hnew, hn + j, w);
        if (has_y) st8(hnew, y + yo + yrow + j, w);
      }
    }
#if RNN_KIND == 1 && !RNN_LBR
    barrier(CLK_GLOBAL_MEM_FENCE);
    for (int j0 = 16 * lid; j0 < H; j0 += 16 * L) {
      int w16 = min(16, H - j0);
      float8 acc[2];
      RDOTS16(1, r, 2 * H + j0, H, GH, w16, rh, acc);
      for (int q = 0; q < 2; q++) {
        int j = j0 + 8 * q, w = min(8, H - j);
        if (w <= 0) break;
        float8 wbh = has_b ? ld8(wb + 2 * H + j, w) : (float8)(0.0f);
        float8 rbh = has_b ? ld8(rb + 2 * H + j, w) : (float8)(0.0f);
        float8 ah = ld8(x + 2 * H + j, w) + acc[q] + rbh + wbh;
        float8 z = ld8(zs + j, w);
        float8 hnew = (1.0f - z) * ACT(1, ah) + z * ld8(hp + j, w);
        st8(hnew, hn + j, w);
        if (has_y) st8(hnew, y + yo + yrow + j, w);
      }
    }
#endif
    barrier(CLK_GLOBAL_MEM_FENCE);
  }
  __global const float *hf = wr + (min(t_begin + t_count, len) & 1) * H;
  for (int j = lid; j < H; j += L) yh[yho + st + j] = hf[j];
}
