/* The median the bench programs report: median() sorts v in place,
 * median_copy() leaves it as it is. */
#ifndef VMRPC_BENCH_STATS_H
#define VMRPC_BENCH_STATS_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static inline double median(double *v, int n) {
  if (n <= 0) return NAN; /* no samples: printed as NaN, never a read before v */
  qsort(v, (size_t)n, sizeof(*v), bench_cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static inline double median_copy(const double *v, int n) {
  double *t = malloc((size_t)(n > 0 ? n : 1) * sizeof(*t));
  if (!t) {
    fprintf(stderr, "bench: out of memory for %d samples\n", n);
    exit(1);
  }
  memcpy(t, v, (size_t)n * sizeof(*t));
  double m = median(t, n);
  free(t);
  return m;
}

#endif
