/* The host's state as Linux exposes it without root: cpufreq per core,
 * thermal zones with their trip points, devfreq devices (GPUs, buses) and
 * the load average. Everything is read under a root directory ("/"
 * normally; a test points it at a fake tree). A file that is missing,
 * unreadable or malformed leaves its figure unknown: nothing is guessed.
 * Every list and every read is bounded. */
#include "devstate.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Reads at most n-1 bytes of root/rel into buf (NUL-terminated, trailing
 * whitespace removed). 0, or -1 when it cannot be read. */
static int read_text(const char *root, const char *rel, char *buf, size_t n) {
  char path[VMA_DEVSTATE_PATH_MAX];
  int k = snprintf(path, sizeof(path), "%s/%s", root, rel);
  if (k < 0 || (size_t)k >= sizeof(path)) return -1;
  /* Non-blocking: a fake tree's FIFO must not hang the agent. */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return -1;
  size_t got = 0;
  while (got + 1 < n) {
    ssize_t r = read(fd, buf + got, n - 1 - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(fd);
  buf[got] = '\0';
  while (got > 0 && isspace((unsigned char)buf[got - 1])) buf[--got] = '\0';
  return 0;
}

/* A non-negative decimal integer file; -1 when unknown. */
static int64_t read_i64(const char *root, const char *rel) {
  char buf[64];
  if (read_text(root, rel, buf, sizeof(buf)) != 0 || !buf[0]) return -1;
  char *end;
  errno = 0;
  long long v = strtoll(buf, &end, 10);
  if (errno || *end || end == buf || v < 0) return -1;
  return v;
}

/* A signed decimal integer file (temperatures go below zero). 0 and *out,
 * or -1 when unknown. */
static int read_signed(const char *root, const char *rel, int64_t *out) {
  char buf[64];
  if (read_text(root, rel, buf, sizeof(buf)) != 0 || !buf[0]) return -1;
  char *end;
  errno = 0;
  long long v = strtoll(buf, &end, 10);
  if (errno || *end || end == buf) return -1;
  *out = v;
  return 0;
}

/* A short name (governor, zone type): printable ASCII only. */
static void read_name(const char *root, const char *rel, char *out, size_t n) {
  char buf[VMA_DEVSTATE_NAME];
  out[0] = '\0';
  if (read_text(root, rel, buf, sizeof(buf)) != 0) return;
  for (const char *p = buf; *p; p++)
    if (*p < 0x20 || *p > 0x7e) return;
  snprintf(out, n, "%s", buf);
}

/* The numbered entries prefix<N> of root/dir, ascending, at most cap. */
static uint32_t list_numbered(const char *root, const char *dir, const char *prefix,
                              uint32_t *out, uint32_t cap) {
  char path[VMA_DEVSTATE_PATH_MAX];
  int k = snprintf(path, sizeof(path), "%s/%s", root, dir);
  if (k < 0 || (size_t)k >= sizeof(path)) return 0;
  DIR *d = opendir(path);
  if (!d) return 0;
  uint32_t n = 0;
  size_t pl = strlen(prefix);
  struct dirent *e;
  while ((e = readdir(d)) && n < cap) {
    if (strncmp(e->d_name, prefix, pl) != 0 || !e->d_name[pl]) continue;
    const char *q = e->d_name + pl;
    if (strspn(q, "0123456789") != strlen(q) || strlen(q) > 6) continue;
    out[n++] = (uint32_t)strtoul(q, NULL, 10);
  }
  closedir(d);
  /* insertion sort: n is small */
  for (uint32_t i = 1; i < n; i++)
    for (uint32_t j = i; j > 0 && out[j - 1] > out[j]; j--) {
      uint32_t t = out[j];
      out[j] = out[j - 1];
      out[j - 1] = t;
    }
  return n;
}

static void read_cpus(const char *root, vma_devstate_t *s) {
  uint32_t ids[VMA_DEVSTATE_MAX_CPUS];
  uint32_t n = list_numbered(root, "sys/devices/system/cpu", "cpu", ids, VMA_DEVSTATE_MAX_CPUS);
  for (uint32_t i = 0; i < n; i++) {
    vma_cpu_state_t *c = &s->cpus[s->num_cpus++];
    char rel[128];
    c->cpu = ids[i];
#define CPUF(file) (snprintf(rel, sizeof(rel), "sys/devices/system/cpu/cpu%u/cpufreq/" file, ids[i]), rel)
    c->cur_khz = read_i64(root, CPUF("scaling_cur_freq"));
    c->max_khz = read_i64(root, CPUF("cpuinfo_max_freq"));
    c->policy_max_khz = read_i64(root, CPUF("scaling_max_freq"));
    read_name(root, CPUF("scaling_governor"), c->governor, sizeof(c->governor));
#undef CPUF
  }
}

static void read_zones(const char *root, vma_devstate_t *s) {
  uint32_t ids[VMA_DEVSTATE_MAX_ZONES];
  uint32_t n =
      list_numbered(root, "sys/class/thermal", "thermal_zone", ids, VMA_DEVSTATE_MAX_ZONES);
  for (uint32_t i = 0; i < n; i++) {
    vma_zone_state_t *z = &s->zones[s->num_zones++];
    char rel[160];
    snprintf(z->name, sizeof(z->name), "thermal_zone%u", ids[i]);
    snprintf(rel, sizeof(rel), "sys/class/thermal/thermal_zone%u/type", ids[i]);
    read_name(root, rel, z->type, sizeof(z->type));
    snprintf(rel, sizeof(rel), "sys/class/thermal/thermal_zone%u/temp", ids[i]);
    z->temp_known = read_signed(root, rel, &z->temp_mc) == 0;
    /* trip_point_K_temp and _type for K = 0, 1, ... until one is missing. */
    for (uint32_t k = 0; k < VMA_DEVSTATE_MAX_TRIPS; k++) {
      int64_t t;
      snprintf(rel, sizeof(rel), "sys/class/thermal/thermal_zone%u/trip_point_%u_temp", ids[i], k);
      if (read_signed(root, rel, &t) != 0) break;
      vma_trip_state_t *tp = &z->trips[z->num_trips++];
      tp->temp_mc = t;
      snprintf(rel, sizeof(rel), "sys/class/thermal/thermal_zone%u/trip_point_%u_type", ids[i], k);
      read_name(root, rel, tp->type, sizeof(tp->type));
    }
  }
}

/* The highest of a space-separated list of frequencies; -1 when none. */
static int64_t max_of_list(const char *root, const char *rel) {
  char buf[1024];
  if (read_text(root, rel, buf, sizeof(buf)) != 0) return -1;
  int64_t best = -1;
  char *p = buf;
  while (*p) {
    char *end;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (end == p || errno || v < 0) return -1;
    if (v > best) best = v;
    p = end;
    while (*p == ' ' || *p == '\t' || *p == '\n') p++;
  }
  return best;
}

static void read_devfreq(const char *root, vma_devstate_t *s) {
  char path[VMA_DEVSTATE_PATH_MAX];
  int k = snprintf(path, sizeof(path), "%s/sys/class/devfreq", root);
  if (k < 0 || (size_t)k >= sizeof(path)) return;
  DIR *d = opendir(path);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)) && s->num_devfreq < VMA_DEVSTATE_MAX_DEVFREQ) {
    if (e->d_name[0] == '.' || strlen(e->d_name) >= VMA_DEVSTATE_NAME) continue;
    vma_devfreq_state_t *f = &s->devfreq[s->num_devfreq++];
    int printable = 1;
    for (const char *p = e->d_name; *p; p++)
      if (*p < 0x20 || *p > 0x7e) printable = 0;
    if (!printable) {
      s->num_devfreq--;
      continue;
    }
    memcpy(f->name, e->d_name, strlen(e->d_name) + 1); /* shorter than the field: checked */
    char rel[VMA_DEVSTATE_NAME + 64];
#define DF(file) (snprintf(rel, sizeof(rel), "sys/class/devfreq/%s/" file, f->name), rel)
    f->cur_hz = read_i64(root, DF("cur_freq"));
    f->max_hz = read_i64(root, DF("max_freq"));
    f->avail_max_hz = max_of_list(root, DF("available_frequencies"));
    read_name(root, DF("governor"), f->governor, sizeof(f->governor));
#undef DF
  }
  closedir(d);
  /* readdir's order is the filesystem's: sort by name for stable output. */
  for (uint32_t i = 1; i < s->num_devfreq; i++)
    for (uint32_t j = i; j > 0 && strcmp(s->devfreq[j - 1].name, s->devfreq[j].name) > 0; j--) {
      vma_devfreq_state_t t = s->devfreq[j];
      s->devfreq[j] = s->devfreq[j - 1];
      s->devfreq[j - 1] = t;
    }
}

static void read_loadavg(const char *root, vma_devstate_t *s) {
  char buf[128];
  if (read_text(root, "proc/loadavg", buf, sizeof(buf)) != 0) return;
  double a, b, c;
  if (sscanf(buf, "%lf %lf %lf", &a, &b, &c) == 3 && a >= 0 && b >= 0 && c >= 0 && a < 1e9 &&
      b < 1e9 && c < 1e9) {
    s->loadavg_known = 1;
    s->load1 = a;
    s->load5 = b;
    s->load15 = c;
  }
}

void vma_devstate_read(const char *root, vma_devstate_t *s) {
  memset(s, 0, sizeof(*s));
  if (!root || !*root) root = "";
  /* "/" + "sys/..." would give "//sys": harmless, but keep paths tidy. */
  if (strcmp(root, "/") == 0) root = "";
  read_cpus(root, s);
  read_zones(root, s);
  read_devfreq(root, s);
  read_loadavg(root, s);
}
