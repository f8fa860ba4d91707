/* cl.linear_attention: the recurrence of ONNX's LinearAttention
 * (docs/operators.md), float32.
 *
 * A work-item owns one column m of one (batch, kv head) state [dk, dv]
 * and walks the time steps in order; the columns never meet, so no
 * barrier is needed. The state lives in the output s ([B, Hkv, dk, dv]),
 * read and written by its owner only. Per step t, with k, v and q the
 * step's rows of the head:
 *   gated:  S[d] *= exp(g[d])           (g per head, g_mode 1, or per key dim, 2)
 *   delta:  v' = beta (v[m] - sum_d S[d] k[d])   (beta per head, b_mode 1, or one, 2)
 *   write:  S[d] += k[d] v'             (v' = v[m] without delta)
 *   read:   y[hq, m] = scale sum_d q[hq, d] S[d] for the Hq / Hkv query
 *           heads hq sharing the kv head (head h serves h*G .. h*G+G-1).
 */
__kernel void linear_attention(__global const float *q, int qo, __global const float *k, int ko,
                               __global const float *v, int vo, __global const float *s0,
                               int s0o, int has_s0, __global const float *g, int go, int g_mode,
                               __global const float *beta, int bo, int b_mode, float scale, int B,
                               int T, int Hq, int Hkv, int dk, int dv, __global float *y, int yo,
                               __global float *s, int so) {
  int gid = get_global_id(0);
  if (gid >= B * Hkv * dv) return;
  int m = gid % dv, bh = gid / dv;
  int h = bh % Hkv, b = bh / Hkv;
  int G = Hq / Hkv;
  __global float *st = s + so + (size_t)bh * dk * dv + m;
  for (int d = 0; d < dk; d++)
    st[(size_t)d * dv] = has_s0 ? s0[s0o + (size_t)bh * dk * dv + (size_t)d * dv + m] : 0.0f;
  for (int t = 0; t < T; t++) {
    size_t row = (size_t)b * T + t;
    __global const float *kt = k + ko + row * Hkv * dk + (size_t)h * dk;
    float vt = v[vo + row * Hkv * dv + (size_t)h * dv + m];
    if (g_mode == 1) {
      float e = exp(g[go + row * Hkv + h]);
      for (int d = 0; d < dk; d++) st[(size_t)d * dv] *= e;
    } else if (g_mode == 2) {
      __global const float *gt = g + go + row * Hkv * dk + (size_t)h * dk;
      for (int d = 0; d < dk; d++) st[(size_t)d * dv] *= exp(gt[d]);
    }
    if (b_mode) {
      float r = 0.0f;
      for (int d = 0; d < dk; d++) r += st[(size_t)d * dv] * kt[d];
      float bt = b_mode == 1 ? beta[bo + row * Hkv + h] : beta[bo + row];
      vt = bt * (vt - r);
    }
    for (int d = 0; d < dk; d++) st[(size_t)d * dv] += kt[d] * vt;
    for (int j = 0; j < G; j++) {
      int hq = h * G + j;
      __global const float *qt = q + qo + row * Hq * dk + (size_t)hq * dk;
      float o = 0.0f;
      for (int d = 0; d < dk; d++) o += qt[d] * st[(size_t)d * dv];
      y[yo + row * Hq * dv + (size_t)hq * dv + m] = scale * o;
    }
  }
}
