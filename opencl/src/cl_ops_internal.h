/* Internals of the cl.* operator library (cl_ops*.c): embedded kernel
 * sources, argument checking and launch helpers. Not installed.
 *
 * Every operator is a vm_packed_fn taking its inputs, then its attributes,
 * then its preallocated outputs last (destination-passing, as TVM's
 * call_dps_packed); it returns no value. See docs/operators.md.
 */
#ifndef VMCL_OPS_INTERNAL_H
#define VMCL_OPS_INTERNAL_H

#include <stdint.h>

#include "cl_internal.h"
#include "vm/vm.h"

/* ---- embedded kernel sources (cmake/EmbedKernels.cmake) ---- */
extern const char vmcl_src_common[];
extern const char vmcl_src_elementwise[];
extern const char vmcl_src_reduce[];
extern const char vmcl_src_pool[];
extern const char vmcl_src_gemm[];
extern const char vmcl_src_conv[];
extern const char vmcl_src_copy[];
extern const char vmcl_src_cast[];
extern const char vmcl_src_resize[];
extern const char vmcl_src_intops[];
extern const char vmcl_src_quant[];
extern const char vmcl_src_rnn[];
extern const char vmcl_src_attention[];
extern const char vmcl_src_spatial[];
extern const char vmcl_src_select[];

/* Operator families. Each is one OpenCL program (per set of build options)
 * holding all the kernels of the family, so a process builds few
 * programs: a PoCL build costs ~0.5 s, a mobile GPU's several. */
typedef enum vmcl_family {
  VMCL_FAM_ELEMENTWISE = 0, /* cl.binary.*, cl.unary.* */
  VMCL_FAM_REDUCE,          /* cl.reduce.*, cl.arg*, cl.softmax, cl.layer_norm, global_avg */
  VMCL_FAM_POOL,            /* cl.pool2d.{max,avg} */
  VMCL_FAM_GEMM,            /* cl.gemm (tiled kernel) */
  VMCL_FAM_CONV,            /* cl.conv2d, cl.conv_transpose2d */
  VMCL_FAM_COPY,            /* cl.transpose, cl.slice, cl.concat, cl.broadcast_to, ... */
  VMCL_FAM_CAST,            /* cl.cast */
  VMCL_FAM_RESIZE,          /* cl.resize */
  VMCL_FAM_INT,             /* integer cl.binary.*, cl.unary.clip */
  VMCL_FAM_QUANT,           /* cl.quantize, cl.dequantize, cl.qgemm, cl.qconv2d, ... */
  VMCL_FAM_RNN,             /* cl.rnn */
  VMCL_FAM_ATTENTION,       /* cl.linear_attention */
  VMCL_FAM_SPATIAL,         /* cl.grid_sample, cl.roi_align, cl.deform_conv2d, cl.det, ... */
  VMCL_FAM_SELECT,          /* cl.topk, cl.cumulative, cl.tensor_scatter */
  VMCL_FAM_COUNT
} vmcl_family_t;

/* Most dims a kernel iterates over (after collapsing; int8 arguments). */
#define VMCL_MAX_RANK 8

/* Most elements (offset included) of a tensor that operators address:
 * 32-bit indices, with room for rounding a launch up to whole groups. */
#define VMCL_MAX_ELEMENTS ((uint64_t)INT32_MAX - 65536u)

/* Returns a kernel of a family's program built with options (the device
 * lock must be held from here until the launch: cached kernels are shared
 * and their arguments are state). The program text is common.cl followed
 * by the family's file. */
vm_status_t vmcl_family_kernel(vmcl_dev_t *d, vmcl_family_t fam, const char *options,
                               const char *name, cl_kernel *out_kernel);

/* Build options selecting the storage of a float dtype: "" for float32,
 * "-DVMCL_F16" for float16, "-DVMCL_F64" for float64 (double storage and
 * compute; only families whose kernels use common.cl's F types take it). */
const char *vmcl_float_options(vm_dtype_t dt);
/* Bytes of the compute type F of a float dtype's program (double for
 * float64, else float): local scratch of work-group reductions. */
size_t vmcl_real_bytes(vm_dtype_t dt);

/* ---- argument checking ----
 * Errors are INVALID_ARGUMENT and read "<op>: <what> (argument <i>) ...",
 * naming what was expected and what was given. */

typedef struct vmcl_op {
  const char *name;  /* "cl.gemm" */
  const char *usage; /* "(A, B, trans_a, trans_b, alpha, beta, C)" */
  const vm_value_t *args;
  uint32_t nargs;
  /* the OpenCL device of the first tensor checked; all others must match */
  const vm_device_t *dev;
  char dev_what[24]; /* its argument's name (copied: names may be built on the stack) */
  vmcl_dev_t *d;
} vmcl_op_t;

/* Starts checking a call. A leading %vm argument (VM_VAL_OPAQUE) is
 * skipped: op->args/op->nargs and the argument numbers in messages count
 * from the first operator argument. */
void vmcl_op_init(vmcl_op_t *op, const char *name, const char *usage, const vm_value_t *args,
                  uint32_t nargs);

/* An INVALID_ARGUMENT status "<op>: <message>". */
vm_status_t vmcl_op_error(const vmcl_op_t *op, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Checks min <= nargs <= max (naming the usage). */
vm_status_t vmcl_op_arity(const vmcl_op_t *op, uint32_t min, uint32_t max);

/* args[idx] must be a tensor on an OpenCL device (the same as the other
 * tensors of the call) with at most VMCL_MAX_RANK dims, whose byte offset
 * is a whole number of elements and whose last element lies within
 * VMCL_MAX_ELEMENTS of its storage. */
vm_status_t vmcl_op_tensor(vmcl_op_t *op, uint32_t idx, const char *what, vm_tensor_t **out);
/* As vmcl_op_tensor, but none gives *out = NULL. */
vm_status_t vmcl_op_opt_tensor(vmcl_op_t *op, uint32_t idx, const char *what, vm_tensor_t **out);

/* An int (or bool) within [lo, hi]. */
vm_status_t vmcl_op_int(const vmcl_op_t *op, uint32_t idx, const char *what, int64_t lo, int64_t hi,
                        int64_t *out);
/* A float (an int is accepted and converted). */
vm_status_t vmcl_op_float(const vmcl_op_t *op, uint32_t idx, const char *what, double *out);
/* A list of ints: a shape, a tuple of ints, or a single int; at most max. */
vm_status_t vmcl_op_int_list(const vmcl_op_t *op, uint32_t idx, const char *what, int64_t *out,
                             uint32_t max, uint32_t *out_n);

/* The OpenCL C type of an integer dtype (int8..64, uint8..64) and the
 * unsigned type of its size, with its value range; NULL for other dtypes. */
const char *vmcl_int_type(vm_dtype_t dt, const char **utype, int64_t *lo, int64_t *hi);
/* Build options "-DT=<type> -DU=<unsigned type> -DSIGNED=<0|1>" of an
 * integer dtype. */
void vmcl_int_options(vm_dtype_t dt, char *buf, size_t len);

/* t's dtype must be float32 or float16. */
vm_status_t vmcl_op_float_dtype(const vmcl_op_t *op, const vm_tensor_t *t, uint32_t idx,
                                const char *what);
/* UNIMPLEMENTED when t is float64 and the device lacks fp64
 * (vmcl_dev_t.fp64), naming the operator, the argument and the device. */
vm_status_t vmcl_op_fp64(const vmcl_op_t *op, const vm_tensor_t *t, uint32_t idx,
                         const char *what);
/* t's dtype must be float32, float16 or float64 (the last where the device
 * has fp64: vmcl_op_fp64). For the operators whose kernels compute in F. */
vm_status_t vmcl_op_real_dtype(const vmcl_op_t *op, const vm_tensor_t *t, uint32_t idx,
                               const char *what);
/* t's dtype must equal dt (from_what names where dt came from). */
vm_status_t vmcl_op_dtype_eq(const vmcl_op_t *op, const vm_tensor_t *t, uint32_t idx,
                             const char *what, vm_dtype_t dt, const char *from_what);
/* t must have exactly this shape. */
/* Refuses a read operand a whose elements share memory with the written
 * b ("a (argument ia) overlaps b (argument ib); give b its own memory"),
 * both taken as vm_tensor_numel(b) elements from their offsets; exact_ok
 * lets a be b itself (a kernel that reads each element where it then
 * writes it). */
vm_status_t vmcl_op_disjoint(const vmcl_op_t *op, const vm_tensor_t *a, uint32_t ia,
                             const char *aname, const vm_tensor_t *b, uint32_t ib,
                             const char *bname, int exact_ok);
vm_status_t vmcl_op_shape_eq(const vmcl_op_t *op, const vm_tensor_t *t, uint32_t idx,
                             const char *what, const int64_t *shape, uint32_t ndim);

/* Both: t must have dtype dt (the operator's) and exactly this shape. */
vm_status_t vmcl_op_want(const vmcl_op_t *op, const vm_tensor_t *t, uint32_t idx, const char *what,
                         vm_dtype_t dt, uint32_t ndim, const int64_t *shape);

/* t's dtype must be a single-lane type of 1, 2, 4 or 8 bytes (what the
 * copy kernels move). */
vm_status_t vmcl_op_copyable(const vmcl_op_t *op, const vm_tensor_t *t, uint32_t idx,
                             const char *what);
/* Encodes the float, int or bool argument vidx as one element of dt (the
 * dtype of the output, argument yidx) into pattern (8 bytes), its size in
 * *size. Integer dtypes need an integral value that fits. */
vm_status_t vmcl_value_pattern(const vmcl_op_t *op, uint32_t vidx, vm_dtype_t dt, uint32_t yidx,
                               uint8_t *pattern, size_t *size);

/* a, b, c and d joined into buf (cut to fit, always terminated): a kernel's
 * name made on every call, without formatting. */
void vmcl_join(char *buf, size_t len, const char *a, const char *b, const char *c, const char *d);

/* "[2, 3, 4]" into buf (always terminated); returns buf. */
char *vmcl_shape_str(const int64_t *shape, uint32_t ndim, char *buf, size_t len);

/* Element offset of a tensor in its storage (checked by vmcl_op_tensor). */
static inline cl_int vmcl_elem_offset(const vm_tensor_t *t) {
  return (cl_int)(t->offset / vm_dtype_bytes(t->dtype));
}

/* ---- launching ---- */

/* Kernel arguments set in order; the first failure sticks in err (checked
 * once before the launch). */
typedef struct vmcl_args {
  cl_kernel k;
  cl_uint next;
  cl_int err;
} vmcl_args_t;

static inline vmcl_args_t vmcl_args_begin(cl_kernel k) {
  vmcl_args_t a = {k, 0, CL_SUCCESS};
  return a;
}
void vmcl_arg_mem(vmcl_args_t *a, cl_mem m);
void vmcl_arg_int(vmcl_args_t *a, int64_t v);  /* callers keep v in int range */
void vmcl_arg_long(vmcl_args_t *a, int64_t v); /* a long (or ulong, same bits) */
void vmcl_arg_float(vmcl_args_t *a, float v);
/* A scalar of the compute type F of dt's program (double for float64). */
void vmcl_arg_real(vmcl_args_t *a, vm_dtype_t dt, double v);
/* v[0..rank) in row-major order (outermost first) as an int8 stored
 * innermost first; unused components are fill. */
void vmcl_arg_dims(vmcl_args_t *a, const int64_t *v, int rank, int fill);
void vmcl_arg_local(vmcl_args_t *a, size_t bytes);

/* The largest power of two <= want that the kernel can run as a
 * work-group on this device (at least 1). */
size_t vmcl_local_size(vmcl_dev_t *d, cl_kernel k, size_t want);
/* The compute units of a CPU device; 0 for other device types (or when the
 * driver does not say). */
cl_uint vmcl_cpu_units(vmcl_dev_t *d);
/* Sets a family kernel's arguments (set_args on ctx) and launches it over
 * items work-items in groups of about local, under the device lock. */
typedef void (*vmcl_args_fn)(vmcl_args_t *a, const void *ctx);
vm_status_t vmcl_family_launch(vmcl_dev_t *d, vmcl_family_t fam, const char *options,
                               const char *name, int64_t items, size_t local, vmcl_args_fn set_args,
                               const void *ctx);

/* Enqueues a 1-D launch of at least items work-items (rounded up to a
 * multiple of local; kernels guard the tail). */
vm_status_t vmcl_launch_1d(vmcl_dev_t *d, cl_kernel k, size_t items, size_t local);

/* ---- shapes ---- */

/* Most stride sets of an iteration space: cl.elementwise's 8 inputs. */
#define VMCL_MAX_STRIDES 8

/* An iteration space over up to VMCL_MAX_RANK dims with up to
 * VMCL_MAX_STRIDES stride sets (in elements, outermost first). */
typedef struct vmcl_iter {
  int rank;
  int64_t shape[VMCL_MAX_RANK];
  int64_t stride[VMCL_MAX_STRIDES][VMCL_MAX_RANK];
} vmcl_iter_t;

/* Collapses it in place: drops size-1 dims and merges a dim into the next
 * when, for each of the first nstr stride sets, it is contiguous with it
 * (stride[i] == stride[i+1] * shape[i+1]). Rank 0 means one element. */
void vmcl_collapse(vmcl_iter_t *it, int nstr);

/* NumPy broadcast of shapes a and b (trailing dims aligned; a dim of 1
 * stretches) into out (may alias a or b). Returns 0, or -1 when they
 * conflict or the result has more than VMCL_MAX_RANK dims. */
int vmcl_broadcast_shape(const int64_t *a, uint32_t na, const int64_t *b, uint32_t nb, int64_t *out,
                         uint32_t *out_ndim);
/* Element strides of dense t viewed with nd >= t->ndim dims (trailing
 * aligned): 0 along dims that t lacks or has as 1. */
void vmcl_broadcast_strides(const vm_tensor_t *t, uint32_t nd, int64_t *out);

/* Row-major element strides of a shape. */
void vmcl_dense_strides(const int64_t *shape, uint32_t ndim, int64_t *strides);

/* The unsigned OpenCL type moving elements of 1, 2, 4 or 8 bytes (the T
 * of copy.cl), NULL for other sizes. */
const char *vmcl_copy_type(size_t elem_bytes);

/* Strided copy over it (stride set 0: source, 1: destination; offsets in
 * elements), dtype-agnostic (elem_bytes 1, 2, 4 or 8). Used by transpose,
 * slice and concat. Collapses it. */
vm_status_t vmcl_copy_strided(vmcl_dev_t *d, size_t elem_bytes, cl_mem src, int64_t src_off,
                              cl_mem dst, int64_t dst_off, vmcl_iter_t *it);

/* Reduction of x over the axes flagged in reduce[] into y (whose element
 * count is the product of the kept dims; both float32 or both float16).
 * Used by cl.reduce.* and cl.pool2d.global_avg. */
typedef enum vmcl_reduce_kind {
  VMCL_REDUCE_SUM,
  VMCL_REDUCE_MEAN,
  VMCL_REDUCE_MAX,
  VMCL_REDUCE_MIN,
  VMCL_REDUCE_PROD
} vmcl_reduce_kind_t;
vm_status_t vmcl_reduce_launch(vmcl_dev_t *d, vmcl_reduce_kind_t kind, const vm_tensor_t *x,
                               const int *reduce, const vm_tensor_t *y);

/* ---- GEMM for other operators (cl_ops_gemm.c) ---- */
/* One (batched) row-major GEMM: C = alpha op(A) op(B) + beta C (+ bias). */
typedef struct vmcl_gemm_shape {
  int64_t batch, m, n, k;
  int ta, tb;
  int64_t lda, ldb, ldc;
  int64_t sa, sb, sc; /* batch strides in elements; 0 broadcasts */
  /* The epilogue: bias[j] (bias_o + j elements into the buffer, of C's
   * type) added to column j of every row and batch entry; NULL: none. */
  cl_mem bias;
  int64_t bias_o;
} vmcl_gemm_shape_t;

/* Whether cl.gemm runs on kernels/gemm.cl for dt on this device (CPU
 * devices; cl_ops_gemm.c) rather than CLBlast. */
int vmcl_gemm_is_tiled(vmcl_dev_t *d, const vm_device_t *dev, vm_dtype_t dt);

/* The GEMM on the backend cl.gemm takes for dt on this device (CLBlast on
 * GPUs when it loads, else kernels/gemm.cl); operands are buffers with the
 * element offsets of their starts. */
vm_status_t vmcl_gemm_mem(vmcl_dev_t *d, const vm_device_t *dev, const vmcl_gemm_shape_t *g,
                          vm_dtype_t dt, cl_mem A, int64_t ao, cl_mem B, int64_t bo, cl_mem C,
                          int64_t co, float alpha, float beta);

/* How kernels/gemm.cl runs a GEMM (cl_ops_gemm.c's shape-to-kernel
 * choice; tests check it): the kernel, its block of bm rows by bn columns
 * (0 for gemv_n/gemv_t, which take 8 or 4 outputs of the one row), K per
 * launch (kc; below K: launches over chunks of K) and whether op(B) is
 * packed into 16-column panels first (gemm_pack16). */
typedef struct vmcl_gemm_plan {
  const char *kernel;
  int64_t bm, bn, kc;
  int packed;
} vmcl_gemm_plan_t;
void vmcl_gemm_plan(const vmcl_gemm_shape_t *g, vm_dtype_t dt, vmcl_gemm_plan_t *p);

/* The GEMM on kernels/gemm.cl; operands are buffers with the element
 * offsets of their starts. Takes d->lock itself. */
vm_status_t vmcl_gemm_tiled(vmcl_dev_t *d, const vmcl_gemm_shape_t *g, vm_dtype_t dt, cl_mem A,
                            int64_t ao, cl_mem B, int64_t bo, cl_mem C, int64_t co, float alpha,
                            float beta);

/* ---- float16 on the host ---- */
uint16_t vmcl_f32_to_f16(float f); /* round to nearest even */

/* ---- the operators (cl_ops_*.c) ---- */
vm_status_t vmcl_op_gemm(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                         void *user);
vm_status_t vmcl_op_gemm_packed(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                vm_value_t *out, void *user);
vm_status_t vmcl_op_gemm_strided(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                 vm_value_t *out, void *user);
vm_status_t vmcl_op_conv2d(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                           void *user);
vm_status_t vmcl_op_conv_transpose2d(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                     vm_value_t *out, void *user);
/* user: a const char* naming the operation ("add", "relu"...) */
vm_status_t vmcl_op_binary(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                           void *user);
vm_status_t vmcl_op_unary(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                          void *user);
/* user: "argmax" or "argmin" */
vm_status_t vmcl_op_argmax(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                           void *user);
vm_status_t vmcl_op_softmax(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                            vm_value_t *out, void *user);
vm_status_t vmcl_op_layer_norm(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                               vm_value_t *out, void *user);
/* user: "sum", "mean" or "max" */
vm_status_t vmcl_op_reduce(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                           void *user);
/* user: "max" or "avg" */
vm_status_t vmcl_op_pool2d(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                           void *user);
vm_status_t vmcl_op_global_avg_pool2d(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                      vm_value_t *out, void *user);
vm_status_t vmcl_op_squeeze_excite(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                   vm_value_t *out, void *user);
vm_status_t vmcl_op_transpose(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                              vm_value_t *out, void *user);
vm_status_t vmcl_op_concat(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                           void *user);
vm_status_t vmcl_op_slice(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                          void *user);
vm_status_t vmcl_op_cast(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                         void *user);
vm_status_t vmcl_op_bitcast(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                            vm_value_t *out, void *user);
vm_status_t vmcl_op_fill(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                         void *user);
vm_status_t vmcl_op_broadcast_to(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                 vm_value_t *out, void *user);
vm_status_t vmcl_op_pad(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                        void *user);
vm_status_t vmcl_op_resize(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                           void *user);
vm_status_t vmcl_op_where(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                          void *user);
vm_status_t vmcl_op_elementwise(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                vm_value_t *out, void *user);
vm_status_t vmcl_op_rnn(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                        void *user);
vm_status_t vmcl_op_linear_attention(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                     vm_value_t *out, void *user);
/* cl_ops_select.c */
vm_status_t vmcl_op_topk(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                         void *user);
vm_status_t vmcl_op_cumulative(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                               vm_value_t *out, void *user);
vm_status_t vmcl_op_tensor_scatter(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                   vm_value_t *out, void *user);
vm_status_t vmcl_op_nonzero(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                            vm_value_t *out, void *user);
vm_status_t vmcl_op_unique(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                           void *user);
vm_status_t vmcl_op_nms(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                        void *user);
vm_status_t vmcl_op_gather(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                           void *user);
vm_status_t vmcl_op_embedding(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                              vm_value_t *out, void *user);
/* cl_ops_quant.c */
vm_status_t vmcl_op_quantize(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                             vm_value_t *out, void *user);
vm_status_t vmcl_op_dequantize(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                               vm_value_t *out, void *user);
vm_status_t vmcl_op_dynamic_quantize(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                     vm_value_t *out, void *user);
vm_status_t vmcl_op_qgemm(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                          vm_value_t *out, void *user);
vm_status_t vmcl_op_qgemm_packed(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                 vm_value_t *out, void *user);
vm_status_t vmcl_op_qconv2d(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                            vm_value_t *out, void *user);

/* cl_ops_spatial.c */
vm_status_t vmcl_op_grid_sample(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                vm_value_t *out, void *user);
vm_status_t vmcl_op_roi_align(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                              vm_value_t *out, void *user);
vm_status_t vmcl_op_deform_conv2d(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                  vm_value_t *out, void *user);
vm_status_t vmcl_op_maxpool_indices(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                    vm_value_t *out, void *user);
vm_status_t vmcl_op_det(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                        void *user);
vm_status_t vmcl_op_conv_transpose3d(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                     vm_value_t *out, void *user);
vm_status_t vmcl_op_stft(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                         void *user);

#endif
