/* The agent-wide failure budget of Hello tokens (auth.c), under the agent
 * lock. Types only: struct vmagent holds one. */
#ifndef VMA_AUTH_STATE_H
#define VMA_AUTH_STATE_H

#include <stdint.h>

typedef struct vma_auth {
  uint64_t tat_ns;      /* GCRA: when the budget is whole again */
  uint64_t failures;    /* wrong or missing tokens, all time */
  uint64_t over;        /* of them refused over the budget */
  uint64_t last_log_ns; /* the latest failure line */
  uint32_t unlogged;    /* failures since that line */
} vma_auth_t;

#endif /* VMA_AUTH_STATE_H */
