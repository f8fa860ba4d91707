/* cl.linear_attention against a plain C recurrence in double: every
 * update rule (linear, gated per head / per key dim, delta, gated_delta
 * with beta per head or one), grouped query heads, with and without an
 * initial state, every tensor at an offset between guards; then the
 * argument errors.
 *
 * Tolerance 1e-4 absolute and relative: the state accumulates T steps of
 * float32 products of inputs in [-1, 1).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "helper_ref.h"
#include "test_util.h"
#include "vm/vm.h"
#include "vmcl/vmcl.h"

#define DIMS(...) ((const int64_t[]){__VA_ARGS__})

enum { B = 2, T = 5, HQ = 4, HKV = 2, DK = 3, DV = 4 };

typedef struct la_case {
  const char *what;
  int g_mode; /* 0 none, 1 per head [B, T, Hkv], 2 per key dim [B, T, Hkv*dk] */
  int b_mode; /* 0 none, 1 per head [B, T, Hkv], 2 one [B, T, 1] */
  int has_s0;
  double scale;
} la_case_t;

/* The reference: ONNX LinearAttention's recurrence, state per (b, h). */
static void la_ref(const la_case_t *lc, const float *q, const float *k, const float *v,
                   const float *s0, const float *g, const float *beta, float *y, float *sout) {
  static double S[B][HKV][DK][DV];
  int G = HQ / HKV, gw = lc->g_mode == 1 ? HKV : HKV * DK, bw = lc->b_mode == 1 ? HKV : 1;
  for (int b = 0; b < B; b++)
    for (int h = 0; h < HKV; h++)
      for (int d = 0; d < DK; d++)
        for (int m = 0; m < DV; m++)
          S[b][h][d][m] = lc->has_s0 ? s0[((b * HKV + h) * DK + d) * DV + m] : 0.0;
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      int row = b * T + t;
      for (int h = 0; h < HKV; h++) {
        const float *kt = k + (row * HKV + h) * DK, *vt = v + (row * HKV + h) * DV;
        for (int d = 0; d < DK; d++)
          for (int m = 0; m < DV; m++) {
            if (lc->g_mode == 1) S[b][h][d][m] *= exp(g[row * gw + h]);
            if (lc->g_mode == 2) S[b][h][d][m] *= exp(g[row * gw + h * DK + d]);
          }
        double u[DV];
        for (int m = 0; m < DV; m++) {
          u[m] = vt[m];
          if (lc->b_mode) {
            double r = 0;
            for (int d = 0; d < DK; d++) r += S[b][h][d][m] * kt[d];
            u[m] = beta[row * bw + (lc->b_mode == 1 ? h : 0)] * (vt[m] - r);
          }
        }
        for (int d = 0; d < DK; d++)
          for (int m = 0; m < DV; m++) S[b][h][d][m] += kt[d] * u[m];
        for (int j = 0; j < G; j++) {
          int hq = h * G + j;
          for (int m = 0; m < DV; m++) {
            double o = 0;
            for (int d = 0; d < DK; d++) o += q[(row * HQ + hq) * DK + d] * S[b][h][d][m];
            y[(row * HQ + hq) * DV + m] = (float)(lc->scale * o);
          }
        }
      }
    }
  for (int b = 0; b < B; b++)
    for (int h = 0; h < HKV; h++)
      for (int d = 0; d < DK; d++)
        for (int m = 0; m < DV; m++) sout[((b * HKV + h) * DK + d) * DV + m] = (float)S[b][h][d][m];
}

static void check_case(tops_env_t *e, const la_case_t *lc) {
  float *q = tops_rand(B * T * HQ * DK, 1, -1, 1), *k = tops_rand(B * T * HKV * DK, 2, -1, 1);
  float *v = tops_rand(B * T * HKV * DV, 3, -1, 1), *s0 = tops_rand(B * HKV * DK * DV, 4, -1, 1);
  float *g = tops_rand(B * T * HKV * DK, 5, -0.5f, 0), *beta = tops_rand(B * T * HKV, 6, 0, 1);
  float y[B * T * HQ * DV], s[B * HKV * DK * DV], wy[B * T * HQ * DV], ws[B * HKV * DK * DV];
  la_ref(lc, q, k, v, s0, g, beta, wy, ws);
  vm_value_t t[8] = {
      tops_tensor_f(e, VM_F32, 3, DIMS(B, T, HQ * DK), q),
      tops_tensor_f(e, VM_F32, 3, DIMS(B, T, HKV * DK), k),
      tops_tensor_f(e, VM_F32, 3, DIMS(B, T, HKV * DV), v),
      lc->has_s0 ? tops_tensor_f(e, VM_F32, 4, DIMS(B, HKV, DK, DV), s0) : vm_value_none(),
      lc->g_mode ? tops_tensor_f(e, VM_F32, 3, DIMS(B, T, lc->g_mode == 1 ? HKV : HKV * DK), g)
                 : vm_value_none(),
      lc->b_mode ? tops_tensor_f(e, VM_F32, 3, DIMS(B, T, lc->b_mode == 1 ? HKV : 1), beta)
                 : vm_value_none(),
      tops_tensor(e, VM_F32, 3, DIMS(B, T, HQ * DV), NULL),
      tops_tensor(e, VM_F32, 4, DIMS(B, HKV, DK, DV), NULL),
  };
  vm_value_t a[11] = {t[0],
                      t[1],
                      t[2],
                      t[3],
                      t[4],
                      t[5],
                      vm_value_float(lc->scale),
                      vm_value_int(HQ),
                      vm_value_int(HKV),
                      t[6],
                      t[7]};
  ASSERT_OK(tops_call(e, "cl.linear_attention", a, 11));
  for (int i = 0; i < 8; i++)
    if (t[i].kind != VM_VAL_NONE) tops_check_guard(e, &t[i]);
  tops_read_f(e, &t[6], y);
  tops_read_f(e, &t[7], s);
  char what[96];
  snprintf(what, sizeof(what), "%s: output", lc->what);
  tops_assert_close(y, wy, B * T * HQ * DV, 1e-4, 1e-4, what);
  snprintf(what, sizeof(what), "%s: state", lc->what);
  tops_assert_close(s, ws, B * HKV * DK * DV, 1e-4, 1e-4, what);
  for (int i = 0; i < 8; i++) vm_value_release(&t[i]);
  free(q), free(k), free(v), free(s0), free(g), free(beta);
}

static void test_linear_attention(void **state) {
  tops_env_t *e = *state;
  static const la_case_t cases[] = {
      {"linear", 0, 0, 0, 0.5},
      {"linear with a state", 0, 0, 1, 0.5},
      {"gated per head", 1, 0, 1, 1.0},
      {"gated per key dim", 2, 0, 0, 0.25},
      {"delta", 0, 1, 1, 0.5},
      {"gated_delta", 2, 1, 1, 0.5},
      {"gated_delta, one beta", 1, 2, 0, 2.0},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) check_case(e, &cases[i]);
}

static void test_linear_attention_errors(void **state) {
  tops_env_t *e = *state;
  vm_value_t q = tops_plain(e, VM_F32, 3, DIMS(1, 2, 4 * 3)),
             k = tops_plain(e, VM_F32, 3, DIMS(1, 2, 2 * 3)),
             v = tops_plain(e, VM_F32, 3, DIMS(1, 2, 2 * 5)),
             y = tops_plain(e, VM_F32, 3, DIMS(1, 2, 4 * 5)),
             s = tops_plain(e, VM_F32, 4, DIMS(1, 2, 3, 5)),
             g = tops_plain(e, VM_F32, 3, DIMS(1, 2, 4)),
             vh = tops_plain(e, VM_F16, 3, DIMS(1, 2, 2 * 5));
  vm_value_t a[11] = {q,
                      k,
                      v,
                      vm_value_none(),
                      vm_value_none(),
                      vm_value_none(),
                      vm_value_float(1),
                      vm_value_int(4),
                      vm_value_int(2),
                      y,
                      s};
  ASSERT_OK(tops_call(e, "cl.linear_attention", a, 11));
  ASSERT_STATUS(tops_call(e, "cl.linear_attention", a, 10), VM_INVALID_ARGUMENT,
                "cl.linear_attention: ");
  a[8] = vm_value_int(3);
  ASSERT_STATUS(tops_call(e, "cl.linear_attention", a, 11), VM_INVALID_ARGUMENT,
                "cl.linear_attention: q_heads 4 is not a multiple of kv_heads 3");
  a[8] = vm_value_int(2);
  a[4] = g;
  ASSERT_STATUS(tops_call(e, "cl.linear_attention", a, 11), VM_INVALID_ARGUMENT,
                "cl.linear_attention: decay (argument 4) has shape [1, 2, 4], expected [1, 2, 6]");
  a[4] = vm_value_none();
  a[2] = vh;
  ASSERT_STATUS(tops_call(e, "cl.linear_attention", a, 11), VM_INVALID_ARGUMENT,
                "cl.linear_attention: v (argument 2) has dtype float16, expected float32");
  a[2] = v;
  a[10] = y;
  ASSERT_STATUS(tops_call(e, "cl.linear_attention", a, 11), VM_INVALID_ARGUMENT,
                "cl.linear_attention: state (argument 10) must be [B, 2, dk, dv]");
  vm_value_t all[7] = {q, k, v, y, s, g, vh};
  for (int i = 0; i < 7; i++) vm_value_release(&all[i]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_linear_attention),
      cmocka_unit_test(test_linear_attention_errors),
  };
  return cmocka_run_group_tests(tests, tops_setup, tops_teardown);
}
