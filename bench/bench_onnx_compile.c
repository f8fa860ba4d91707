/* How compile time grows with the graph: chains of n Relu nodes (x -> t1
 * -> ... -> y over [2, 4]) compiled in-process by vmcc_onnx_compile, the
 * 10,000-node chain the baseline. A compiler linear in the graph keeps the
 * time per node flat, so per_node_ratio_<n> (time per node at n over time
 * per node at 10,000) stays near 1; a quadratic pass makes it grow with n
 * (about n / 10,000).
 *
 * Figures (median over rounds, seconds): compile_<n>_s, and
 * per_node_ratio_<n> for n = 40,000 and 200,000.
 *
 * Usage: bench_onnx_compile [rounds]: default 3. Prints one JSON object. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "onnx_bytes.h"
#include "vm/executable.h"
#include "vmcompiler/onnx.h"

#include "bench_stats.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Median compile time of the chain of n nodes over rounds; < 0 on error. */
static double time_chain(uint32_t n, int rounds) {
  pb_t m = onnx_relu_chain(n);
  double t[16];
  for (int r = 0; r < rounds; r++) {
    vm_executable_t *e = NULL;
    double t0 = now_s();
    vm_status_t st = vmcc_onnx_compile(m.d, m.n, NULL, NULL, &e, NULL);
    t[r] = now_s() - t0;
    if (st) {
      fprintf(stderr, "bench_onnx_compile: chain of %u: %s\n", n, vm_status_message(st));
      vm_status_free(st);
      free(m.d);
      return -1;
    }
    vm_executable_free(e);
  }
  free(m.d);
  return median(t, rounds);
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 3;
  if (rounds < 1 || rounds > 16) {
    fprintf(stderr, "usage: bench_onnx_compile [rounds (1..16)]\n");
    return 2;
  }
  static const uint32_t sizes[3] = {10000, 40000, 200000};
  double s[3];
  for (int i = 0; i < 3; i++)
    if ((s[i] = time_chain(sizes[i], rounds)) < 0) return 1;
  printf("{\"rounds\": %d", rounds);
  for (int i = 0; i < 3; i++) printf(", \"compile_%u_s\": %.3f", sizes[i], s[i]);
  for (int i = 1; i < 3; i++)
    printf(", \"per_node_ratio_%u\": %.2f", sizes[i],
           (s[i] / sizes[i]) / (s[0] / sizes[0]));
  printf("}\n");
  return 0;
}
