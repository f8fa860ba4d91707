/* Absolute times for timed waits (time_in.h). */
#include "time_in.h"

void vma_time_in(clockid_t clock, uint32_t ms, struct timespec *out) {
  clock_gettime(clock, out);
  out->tv_sec += ms / 1000;
  out->tv_nsec += (long)(ms % 1000) * 1000000L;
  if (out->tv_nsec >= 1000000000L) {
    out->tv_sec++;
    out->tv_nsec -= 1000000000L;
  }
}
