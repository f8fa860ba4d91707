/* The agent's /proc readers (procfs.h). */
#include "procfs.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static uint64_t vma_statm_rss(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  unsigned long long size = 0, rss = 0;
  int n = fscanf(f, "%llu %llu", &size, &rss);
  fclose(f);
  if (n != 2) return 0;
  long page = sysconf(_SC_PAGESIZE);
  return rss * (uint64_t)(page > 0 ? page : 4096);
}

uint64_t vma_rss_bytes(void) {
  return vma_statm_rss("/proc/self/statm");
}

uint64_t vma_proc_rss_bytes(pid_t pid) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/statm", (int)pid);
  return vma_statm_rss(path);
}

int vma_proc_is_stopped(pid_t pid) {
  char path[64], buf[256];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char *rp = strrchr(buf, ')'); /* the name may hold spaces and ')' */
  return rp && rp[1] == ' ' && rp[2] == 'T';
}

int vma_proc_reopen_fd(int fd) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
  return open(path, O_RDWR | O_CLOEXEC);
}

int vma_proc_self_exe(char *out, size_t cap) {
  if (cap < 2) return -1;
  ssize_t n = readlink("/proc/self/exe", out, cap - 1);
  if (n <= 0) return -1;
  out[n] = '\0';
  return 0;
}

void vma_proc_oom_first(void) {
  FILE *f = fopen("/proc/self/oom_score_adj", "w");
  if (!f) return;
  fputs("1000", f);
  fclose(f);
}
