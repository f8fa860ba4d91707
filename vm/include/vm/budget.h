/* Memory budgets: counters of host bytes with a limit, checked before an
 * allocation is made (docs/security.md, "Host memory"). A budget may have a
 * parent (a session's budget inside the agent's): a charge must fit every
 * budget up the chain and is counted in all of them. Thread-safe. */
#ifndef VM_BUDGET_H
#define VM_BUDGET_H

#include <stdatomic.h>
#include <stdint.h>

#include "vmrpc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vm_budget vm_budget_t;
struct vm_budget {
  _Atomic uint64_t used;
  /* Where the count lives: &used, or a counter shared with other
   * processes (vm_budget_share). */
  _Atomic uint64_t *counter;
  uint64_t limit;      /* 0 = none */
  vm_budget_t *parent; /* NULL = none; must outlive this budget */
  const char *name;    /* for messages: "the session memory limit" */
  const char *flag;    /* for messages: "--session-mem-limit" */
};

/* name and flag are borrowed (string literals). */
void vm_budget_init(vm_budget_t *b, uint64_t limit, vm_budget_t *parent, const char *name,
                    const char *flag);

/* Counts n bytes in b and its parents, or, when they do not fit one of
 * them, nothing: RESOURCE_EXHAUSTED "WHAT (N bytes) would exceed NAME: U of
 * L bytes in use (FLAG)". b == NULL or n == 0: OK. */
vm_status_t vm_budget_charge(vm_budget_t *b, uint64_t n, const char *what);

/* Gives back n bytes charged before (b == NULL: nothing). */
void vm_budget_release(vm_budget_t *b, uint64_t n);

uint64_t vm_budget_used(const vm_budget_t *b);

/* Makes b count in *counter (e.g. in memory shared between processes, for
 * a limit of them all) instead of its own field. Before any charge. */
void vm_budget_share(vm_budget_t *b, _Atomic uint64_t *counter);

#ifdef __cplusplus
}
#endif
#endif /* VM_BUDGET_H */
