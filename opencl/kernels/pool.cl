/* cl.pool2d.{max,avg} on NCHW float tensors (storage S, common.cl).
 *
 * One work-item per output element (flattened n*c, oh, ow, so the launch
 * keeps one fixed local size whatever the shape). Padding never
 * contributes: max ignores it and avg divides by the number of in-bounds
 * elements (count_include_pad = false, as TVM and ONNX default). The host
 * guarantees pad < kernel, so every window holds at least one element.
 */

#define POOL_INIT_max (-INFINITY)
#define POOL_STEP_max(acc, v) NANMAX((acc), (v))
#define POOL_FINAL_max(acc, cnt) (acc)
#define POOL_INIT_avg 0.0f
#define POOL_STEP_avg(acc, v) ((acc) + (v))
#define POOL_FINAL_avg(acc, cnt) ((acc) / (float)(cnt))

#define POOL2D(op)                                                                       \
  __kernel void pool2d_##op(__global const S *x, int xo, __global S *y, int yo, int n,   \
                            int H, int W, int OH, int OW, int KH, int KW, int SH, int SW, \
                            int PH, int PW) {                                            \
    int i = get_global_id(0);                                                            \
    if (i >= n) return;                                                                  \
    int ow = i % OW;                                                                     \
    int t = i / OW;                                                                      \
    int oh = t % OH;                                                                     \
    int nc = t / OH;                                                                     \
    int h0 = oh * SH - PH, w0 = ow * SW - PW;                                            \
    int h1 = min(h0 + KH, H), w1 = min(w0 + KW, W);                                      \
    h0 = max(h0, 0);                                                                     \
    w0 = max(w0, 0);                                                                     \
    __global const S *p = x + xo + nc * H * W;                                           \
    float acc = POOL_INIT_##op;                                                          \
    for (int h = h0; h < h1; h++)                                                        \
      for (int w = w0; w < w1; w++) acc = POOL_STEP_##op(acc, LD(p, h * W + w));         \
    ST(POOL_FINAL_##op(acc, (h1 - h0) * (w1 - w0)), yo + i, y);                          \
  }

POOL2D(max)
POOL2D(avg)
