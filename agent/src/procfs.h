/* What the agent reads from /proc (procfs.c), in one place: Linux only,
 * and each reader says what it returns when /proc has no answer. */
#ifndef VMA_PROCFS_H
#define VMA_PROCFS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Resident bytes of this process (/proc/self/statm), 0 when unknown. */
uint64_t vma_rss_bytes(void);
/* Resident bytes of process pid (/proc/PID/statm), 0 when unknown. */
uint64_t vma_proc_rss_bytes(pid_t pid);
/* Whether process pid is stopped by a signal (/proc/PID/stat state 'T').
 * A traced process ('t', a debugger's stop) is not; 0 when unknown. */
int vma_proc_is_stopped(pid_t pid);
/* The path of this process's program (/proc/self/exe) into out (cap
 * bytes, cut to cap - 1): 0, or -1 when unknown. */
int vma_proc_self_exe(char *out, size_t cap);
/* Makes this process the first the OOM killer picks
 * (/proc/self/oom_score_adj 1000); nothing when it cannot. */
void vma_proc_oom_first(void);
/* A description of its own for the file behind this process's descriptor
 * fd (/proc/self/fd/FD reopened read-write, close-on-exec): byte-range
 * locks taken through it are this process's alone. -1 (errno) on
 * failure. */
int vma_proc_reopen_fd(int fd);

#endif /* VMA_PROCFS_H */
