/* vmagent --cpus LIST: the thread that measures (TimeEvaluate, Profile)
 * runs on these cores while it measures (pin.c). */
#ifndef VMA_PIN_H
#define VMA_PIN_H

#include <sched.h>

#include "vmrpc/status.h"

typedef struct vma_pin {
  int on;
  cpu_set_t set;
  char list[128]; /* as given, for worker processes */
} vma_pin_t;

/* Parses "0,2-3" into p: every core must be one this process may run on.
 * NULL or "" leaves p off. INVALID_ARGUMENT naming the problem. */
vm_status_t vma_pin_parse(const char *list, vma_pin_t *p);

/* Pins the calling thread to p's cores (when on), keeping its former
 * affinity in *saved; returns 1 when it changed anything. */
int vma_pin_enter(const vma_pin_t *p, cpu_set_t *saved);
/* Restores the affinity vma_pin_enter() saved. */
void vma_pin_exit(int pinned, const cpu_set_t *saved);

#endif
