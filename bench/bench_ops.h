/* What the operator benches (bench_kernels, bench_nnops, bench_quant)
 * share: a device with its allocator and operator registry, a fatal
 * status check, and an operator's device time. Define BENCH_NAME (the
 * program's name, for messages) before including it. */
#ifndef VMRPC_BENCH_OPS_H
#define VMRPC_BENCH_OPS_H

#include <stdio.h>
#include <stdlib.h>

#include "bench_stats.h"
#include "vm/vm.h"

#ifndef BENCH_NAME
#error "define BENCH_NAME before including bench_ops.h"
#endif

typedef struct bench {
  vm_device_t *dev;
  vm_allocator_t *alloc;
  vm_registry_t *reg;
  int runs;
} bench_t;

static void check(vm_status_t st, const char *what) {
  if (!st) return;
  fprintf(stderr, BENCH_NAME ": %s: %s: %s\n", what, vm_code_name(vm_status_code(st)),
          vm_status_message(st));
  exit(1);
}

/* Device seconds of one call of op(args) (its kernels' own time from the
 * device's timer, not the launch): the median over `calls` calls, after
 * one synced warm-up call (the program's build) where `warm` is set. */
static inline double op_device_s(bench_t *b, const char *op, const vm_value_t *args, uint32_t nargs,
                                 int calls, int warm) {
  vm_packed_fn fn;
  void *user;
  if (vm_registry_find(b->reg, op, &fn, &user) != 0) {
    fprintf(stderr, BENCH_NAME ": %s not registered\n", op);
    exit(1);
  }
  vm_value_t out = vm_value_none();
  if (warm) {
    check(fn(NULL, args, nargs, &out, user), op);
    check(b->dev->ops->sync(b->dev), "sync");
  }
  double *t = calloc((size_t)(calls > 0 ? calls : 1), sizeof(double));
  if (!t) exit(1);
  for (int i = 0; i < calls; i++) {
    check(b->dev->ops->timer_begin(b->dev), "timer_begin");
    check(fn(NULL, args, nargs, &out, user), op);
    check(b->dev->ops->timer_end(b->dev, &t[i]), "timer_end");
  }
  double m = median(t, calls);
  free(t);
  return m;
}

#endif
