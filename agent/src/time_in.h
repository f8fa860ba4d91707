/* Absolute times for timed waits (pthread_cond_timedwait). */
#ifndef VMA_TIME_IN_H
#define VMA_TIME_IN_H

#include <stdint.h>
#include <time.h>

/* *out = now on clock + ms. */
void vma_time_in(clockid_t clock, uint32_t ms, struct timespec *out);

#endif /* VMA_TIME_IN_H */
