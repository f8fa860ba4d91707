/* Integer elementwise operators: cl.binary.{add,sub,mul,div,max,min,pow},
 * cl.binary.bitwise_{and,or,xor} (integers only) and
 * the comparisons on int8..int64 / uint8..uint64 tensors, and
 * cl.unary.clip on them. Built per type: -DT=<type> -DU=<unsigned type of
 * the same size> -DSIGNED=<0|1>.
 *
 * Semantics are defined for every input (no trap on any device): add, sub
 * and mul wrap (two's complement, computed in U, as NumPy); div truncates
 * toward zero (C, ONNX), x / 0 is 0 and MIN / -1 wraps to MIN. Broadcasting
 * as binary_OP_nd of elementwise.cl.
 */
#define IOP_add(a, b) ((T)((U)(a) + (U)(b)))
#define IOP_sub(a, b) ((T)((U)(a) - (U)(b)))
#define IOP_mul(a, b) ((T)((U)(a) * (U)(b)))
#if SIGNED
#define IOP_div(a, b) ((b) == 0 ? (T)0 : (b) == (T)-1 ? (T)((U)0 - (U)(a)) : (T)((a) / (b)))
#else
#define IOP_div(a, b) ((b) == 0 ? (T)0 : (T)((a) / (b)))
#endif
#define IOP_bitwise_and(a, b) ((T)((a) & (b)))
#define IOP_bitwise_or(a, b) ((T)((a) | (b)))
#define IOP_bitwise_xor(a, b) ((T)((a) ^ (b)))
/* pow: exponentiation by squaring, wrapping as mul; a negative exponent
 * gives the integer part of the real power: 1 for a = 1, +-1 for a = -1
 * (by the exponent's parity), 0 otherwise (0 ** -k too: no trap). */
T iop_pow(T a, T b) {
#if SIGNED
  if (b < 0) return a == 1 ? (T)1 : a == (T)-1 ? ((b & 1) ? (T)-1 : (T)1) : (T)0;
#endif
  U r = 1, x = (U)a, e = (U)b;
  while (e) {
    if (e & 1) r *= x;
    x *= x;
    e >>= 1;
  }
  return (T)r;
}
#define IOP_pow(a, b) iop_pow((a), (b))
#define IOP_max(a, b) ((a) > (b) ? (a) : (b))
#define IOP_min(a, b) ((a) < (b) ? (a) : (b))

#define IBINARY_ND(name)                                                              \
  __kernel void ibinary_##name##_nd(__global const T *a, int ao, __global const T *b, \
                                    int bo, __global T *c, int co, int n, int rank,   \
                                    int8 shape, int8 as, int8 bs) {                   \
    int i = get_global_id(0);                                                         \
    if (i >= n) return;                                                               \
    int2 o = nd_offsets(i, rank, shape, as, bs);                                      \
    T x = a[ao + o.x], y = b[bo + o.y];                                               \
    c[co + i] = IOP_##name(x, y);                                                     \
  }

#define ICMP_ND(name, op)                                                             \
  __kernel void icmp_##name##_nd(__global const T *a, int ao, __global const T *b,    \
                                 int bo, __global uchar *c, int co, int n, int rank,  \
                                 int8 shape, int8 as, int8 bs) {                      \
    int i = get_global_id(0);                                                         \
    if (i >= n) return;                                                               \
    int2 o = nd_offsets(i, rank, shape, as, bs);                                      \
    c[co + i] = a[ao + o.x] op b[bo + o.y];                                           \
  }

IBINARY_ND(add)
IBINARY_ND(sub)
IBINARY_ND(mul)
IBINARY_ND(div)
IBINARY_ND(max)
IBINARY_ND(min)
IBINARY_ND(pow)
IBINARY_ND(bitwise_and)
IBINARY_ND(bitwise_or)
IBINARY_ND(bitwise_xor)
ICMP_ND(equal, ==)
ICMP_ND(less, <)
ICMP_ND(less_equal, <=)
ICMP_ND(greater, >)
ICMP_ND(greater_equal, >=)

/* cl.unary.clip on integers: the host has already brought lo and hi into
 * T's range (as long). */
__kernel void iunary_clip(__global const T *x, int xo, __global T *y, int yo, int n, long lo,
                          long hi) {
  int i = get_global_id(0);
  if (i >= n) return;
  T v = x[xo + i], l = (T)lo, h = (T)hi;
  T m = v < l ? l : v;
  y[yo + i] = m > h ? h : m; /* hi wins when lo > hi, as NumPy's clip */
}
