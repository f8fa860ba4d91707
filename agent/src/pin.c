/* Pinning the measuring thread to a core set (vmagent --cpus): a
 * measurement that the scheduler moves between big and little cores, or
 * onto a core busy with the agent's other threads, measures the move. */
#include "pin.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "0-1,3" of the cores in s, into buf. */
static void list_of(const cpu_set_t *s, char *buf, size_t n) {
  size_t k = 0;
  buf[0] = '\0';
  for (int i = 0; i < CPU_SETSIZE && k < n; i++) {
    if (!CPU_ISSET(i, s)) continue;
    int j = i;
    while (j + 1 < CPU_SETSIZE && CPU_ISSET(j + 1, s)) j++;
    int w = j > i ? snprintf(buf + k, n - k, "%s%d-%d", k ? "," : "", i, j)
                  : snprintf(buf + k, n - k, "%s%d", k ? "," : "", i);
    if (w < 0) break;
    k += (size_t)w;
    i = j;
  }
}

vm_status_t vma_pin_parse(const char *list, vma_pin_t *p) {
  memset(p, 0, sizeof(*p));
  if (!list || !*list) return VM_STATUS_OK;
  if (strlen(list) >= sizeof(p->list))
    return vm_status_make(VM_INVALID_ARGUMENT, "--cpus: the list is longer than %zu bytes",
                          sizeof(p->list) - 1);
  CPU_ZERO(&p->set);
  const char *s = list;
  while (*s) {
    char *end;
    long lo = strtol(s, &end, 10), hi;
    if (end == s || lo < 0 || lo >= CPU_SETSIZE) goto bad;
    hi = lo;
    if (*end == '-') {
      const char *t = end + 1;
      hi = strtol(t, &end, 10);
      if (end == t || hi < lo || hi >= CPU_SETSIZE) goto bad;
    }
    for (long i = lo; i <= hi; i++) CPU_SET((int)i, &p->set);
    if (*end == ',' && end[1]) end++;
    else if (*end) goto bad;
    s = end;
  }
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0) {
    for (int i = 0; i < CPU_SETSIZE; i++) {
      if (CPU_ISSET(i, &p->set) && !CPU_ISSET(i, &allowed)) {
        char al[256];
        list_of(&allowed, al, sizeof(al));
        return vm_status_make(VM_INVALID_ARGUMENT,
                              "--cpus %s: cpu %d is not one this process may run on "
                              "(allowed: %s)",
                              list, i, al);
      }
    }
  }
  snprintf(p->list, sizeof(p->list), "%s", list);
  p->on = 1;
  return VM_STATUS_OK;
bad:
  return vm_status_make(VM_INVALID_ARGUMENT,
                        "--cpus %s: expected a list of cores such as 0,2-3", list);
}

int vma_pin_enter(const vma_pin_t *p, cpu_set_t *saved) {
  if (!p || !p->on) return 0;
  if (pthread_getaffinity_np(pthread_self(), sizeof(*saved), saved) != 0) return 0;
  return pthread_setaffinity_np(pthread_self(), sizeof(p->set), &p->set) == 0;
}

void vma_pin_exit(int pinned, const cpu_set_t *saved) {
  if (pinned) pthread_setaffinity_np(pthread_self(), sizeof(*saved), saved);
}
