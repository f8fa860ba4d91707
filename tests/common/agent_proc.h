/* Runs the real vmagent binary as a child process for end-to-end tests.
 * libc only (compiled into every test suite). The binary is
 * $VMRPC_BUILD_DIR/agent/vmagent (VMRPC_BUILD_DIR is set by ctest).
 *
 * Children are never left behind: a child dies with its parent
 * (PR_SET_PDEATHSIG on Linux) and an atexit handler kills any child that a
 * failed test did not stop. */
#ifndef VMRPC_TEST_AGENT_PROC_H
#define VMRPC_TEST_AGENT_PROC_H

#include <stddef.h>
#include <sys/types.h>

typedef struct agent_proc {
  pid_t pid;     /* 0 when not running */
  char url[256]; /* the URL from the agent's "vmagent listening on URL" line */
} agent_proc_t;

/* Starts vmagent with "--listen tcp://127.0.0.1:0" followed by extra_args
 * (NULL-terminated, may be NULL; flags are last-wins, so extra_args may
 * override --listen). Unless extra_args name --cache-dir, the agent gets
 * "--cache-dir $VMRPC_BUILD_DIR/test-cache" so tests never touch the user's
 * cache yet share compiled OpenCL programs; "--log-level warn" (or
 * $VMRPC_AGENT_LOG); and "--isolate $VMRPC_AGENT_ISOLATE" when that is set
 * (the agent suites run isolated that way). Waits (at most 60 s) for the
 * "vmagent listening on URL" line. Returns 0 and fills *p, or -1 (reason on
 * stderr; the child, if any, is reaped). */
int agent_proc_start(agent_proc_t *p, const char *const *extra_args);

/* Sends SIGTERM and waits at most 10 s, then SIGKILL. Returns the exit status
 * (0..255) when the agent exited by itself, or -1 (killed by a signal, not
 * running, or wait failure). Safe to call twice; clears p->pid. */
int agent_proc_stop(agent_proc_t *p);

/* Runs vmagent with exactly args (NULL-terminated; no --listen added) and
 * waits at most timeout_s seconds for it to exit, capturing stdout and stderr
 * together into out (NUL-terminated, truncated to out_size). Returns the exit
 * status, or -1 (signal, timeout — the child is killed — or spawn failure).
 * For --help, --version and refused configurations. */
int agent_proc_run(const char *const *args, char *out, size_t out_size, int timeout_s);

/* CPU nanoseconds run so far by every thread of pid (schedstat), plus, with
 * children set, by every thread of pid's child processes (an isolated
 * agent's workers). 0 when pid is gone. */
unsigned long long agent_proc_cpu_ns(pid_t pid, int children);

/* The live (not zombie) child processes of pid, at most max into out: an
 * isolated agent's workers. */
size_t agent_proc_children(pid_t pid, pid_t *out, size_t max);

/* For programs run outside ctest (the benches, two levels below the build
 * tree): sets VMRPC_BUILD_DIR from this program's own path unless it is
 * set. 0, or -1 (reason on stderr). */
int agent_proc_set_build_dir(void);

/* The vmagent binary path ($VMRPC_BUILD_DIR/agent/vmagent) in a static
 * buffer, or NULL when VMRPC_BUILD_DIR is unset. */
const char *agent_proc_binary(void);

#endif
