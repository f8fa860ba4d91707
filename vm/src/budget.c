/* Memory budgets (vm/budget.h). */
#include "vm/budget.h"

void vm_budget_init(vm_budget_t *b, uint64_t limit, vm_budget_t *parent, const char *name,
                    const char *flag) {
  atomic_init(&b->used, 0);
  b->counter = &b->used;
  b->limit = limit;
  b->parent = parent;
  b->name = name ? name : "the memory limit";
  b->flag = flag ? flag : "";
}

/* Adds n to b alone if it fits its limit. */
static int vm_budget_take(vm_budget_t *b, uint64_t n) {
  uint64_t cur = atomic_load(b->counter);
  for (;;) {
    if (cur + n < cur || (b->limit && cur + n > b->limit)) return 0;
    if (atomic_compare_exchange_weak(b->counter, &cur, cur + n)) return 1;
  }
}

vm_status_t vm_budget_charge(vm_budget_t *b, uint64_t n, const char *what) {
  if (!b || n == 0) return VM_STATUS_OK;
  for (vm_budget_t *x = b; x; x = x->parent) {
    if (vm_budget_take(x, n)) continue;
    for (vm_budget_t *y = b; y != x; y = y->parent) atomic_fetch_sub(y->counter, n);
    return vm_status_make(VM_RESOURCE_EXHAUSTED,
                          "%s (%llu bytes of host memory) would exceed %s: %llu of %llu bytes in "
                          "use (%s)",
                          what, (unsigned long long)n, x->name,
                          (unsigned long long)atomic_load(x->counter), (unsigned long long)x->limit,
                          x->flag);
  }
  return VM_STATUS_OK;
}

void vm_budget_release(vm_budget_t *b, uint64_t n) {
  for (; b && n; b = b->parent) atomic_fetch_sub(b->counter, n);
}

uint64_t vm_budget_used(const vm_budget_t *b) {
  return b ? atomic_load(b->counter) : 0;
}

void vm_budget_share(vm_budget_t *b, _Atomic uint64_t *counter) {
  b->counter = counter;
}
