/* The host's state as Linux exposes it without root (devstate.c): read by
 * the DeviceState operation (op_state.c). */
#ifndef VMA_DEVSTATE_H
#define VMA_DEVSTATE_H

#include <stdint.h>

/* Bounds of what is read: larger machines report their first entries. */
#define VMA_DEVSTATE_MAX_CPUS 256
#define VMA_DEVSTATE_MAX_ZONES 64
#define VMA_DEVSTATE_MAX_TRIPS 12
#define VMA_DEVSTATE_MAX_DEVFREQ 16
#define VMA_DEVSTATE_NAME 64
#define VMA_DEVSTATE_PATH_MAX 4096

typedef struct vma_cpu_state {
  uint32_t cpu;
  int64_t cur_khz, max_khz, policy_max_khz; /* -1 unknown */
  char governor[VMA_DEVSTATE_NAME];         /* "" unknown */
} vma_cpu_state_t;

typedef struct vma_trip_state {
  char type[VMA_DEVSTATE_NAME];
  int64_t temp_mc;
} vma_trip_state_t;

typedef struct vma_zone_state {
  char name[32]; /* thermal_zoneN */
  char type[VMA_DEVSTATE_NAME];
  int temp_known;
  int64_t temp_mc;
  vma_trip_state_t trips[VMA_DEVSTATE_MAX_TRIPS];
  uint32_t num_trips;
} vma_zone_state_t;

typedef struct vma_devfreq_state {
  char name[VMA_DEVSTATE_NAME];
  int64_t cur_hz, max_hz, avail_max_hz; /* -1 unknown */
  char governor[VMA_DEVSTATE_NAME];
} vma_devfreq_state_t;

typedef struct vma_devstate {
  vma_cpu_state_t cpus[VMA_DEVSTATE_MAX_CPUS];
  uint32_t num_cpus;
  vma_zone_state_t zones[VMA_DEVSTATE_MAX_ZONES];
  uint32_t num_zones;
  vma_devfreq_state_t devfreq[VMA_DEVSTATE_MAX_DEVFREQ];
  uint32_t num_devfreq;
  int loadavg_known;
  double load1, load5, load15;
} vma_devstate_t;

/* Reads the state under root ("/" or NULL: the real one; a directory with
 * sys/ and proc/ below it: a fake tree). Never fails: what cannot be read
 * is unknown (-1, "", *_known 0) or absent from the lists. */
void vma_devstate_read(const char *root, vma_devstate_t *s);

#endif
