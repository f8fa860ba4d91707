/* vmagent as a library: the device daemon of vmrpc, runnable in-process so
 * tests and fuzz targets can drive it with or without a network.
 *
 *   vmagent_config_t cfg;
 *   vmagent_config_default(&cfg);
 *   cfg.listen_url = "tcp://127.0.0.1:0";
 *   vmagent_t *a;
 *   vm_status_t st = vmagent_create(&cfg, &a);   // opens devices, the store
 *   st = vmagent_start(a);                       // listens, starts workers
 *   printf("%s\n", vmagent_url(a));
 *   ...
 *   vmagent_stop(a);                             // sessions torn down
 *   vmagent_free(a);
 *
 * Without vmagent_start(), vmagent_handle_message() still serves requests:
 * it is the transport-free request dispatcher (the request decoder fuzzer
 * feeds it raw bodies). docs/protocol.md describes the messages.
 */
#ifndef VMAGENT_AGENT_H
#define VMAGENT_AGENT_H

#include <stddef.h>
#include <stdint.h>

#include "vmrpc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vmagent_config {
  /* nng URL: tcp://host:port, tls+tcp://host:port, ipc://path. Port 0 picks
   * a free port (vmagent_url() tells which). */
  const char *listen_url;
  /* Device selectors ("cpu", "opencl:N" or a substring of an OpenCL device
   * name), opened in this order; a cpu device is appended when none is
   * named. NULL/0: every OpenCL device, then cpu. Borrowed during create. */
  const char *const *devices;
  uint32_t num_devices;
  /* The shared secret Hello must carry (NULL or "" = none). Copied. */
  const char *token;
  /* PEM files for tls+tcp:// listen URLs. */
  const char *tls_cert_file;
  const char *tls_key_file;
  /* Executable store + OpenCL program cache root; NULL = no disk store
   * (executables live in memory only, programs are not cached on disk). */
  const char *cache_dir;
  uint64_t cache_max_bytes;      /* disk store cap (LRU eviction) */
  uint32_t max_sessions;         /* Hello past it: RESOURCE_EXHAUSTED */
  uint64_t session_mem_limit;    /* device + staging bytes per session, 0 = none */
  uint32_t idle_timeout_ms;      /* sessions idle this long are torn down, 0 = never */
  uint64_t max_message_bytes;    /* 0 = chunk_bytes + 64 KiB */
  uint64_t chunk_bytes;          /* 4 KiB .. 64 MiB */
  uint64_t max_executable_bytes; /* largest executable accepted */
  uint32_t workers;              /* nng contexts / worker threads, 1 .. 256 */
  /* Memory cap of the agent's cpu device, all sessions together (as if the
   * device had that much memory; past it, allocations there fail with
   * RESOURCE_EXHAUSTED), 0 = none. OpenCL devices have their own. */
  uint64_t cpu_mem_limit;
  /* Brute-force protection of the token, agent-wide (never per address:
   * the right token always opens a session). A Hello with a wrong token
   * closes its connection after the refusal; wrong tokens are answered at
   * most auth_failures_per_s a second after a burst of auth_failure_burst,
   * each waiting for its turn up to auth_max_wait_ms (then
   * RESOURCE_EXHAUSTED); while that budget is spent every Hello is
   * answered auth_delay_ms after it arrived, right or wrong. 0 = the
   * defaults (10 a second, 20, 250 ms, 5000 ms). docs/security.md. */
  uint32_t auth_failures_per_s;
  uint32_t auth_failure_burst;
  uint32_t auth_delay_ms;
  uint32_t auth_max_wait_ms;
  /* Work before authentication (docs/security.md): a connection that has
   * not completed the SP handshake and a successful Hello within
   * hello_timeout_ms of being accepted is closed, and at most
   * max_unauth_conns such connections are open at once (a new one closes
   * the oldest). 0 = the defaults (10 s, 64). */
  uint32_t hello_timeout_ms;
  uint32_t max_unauth_conns;
  /* A connection whose peer takes none of its replies for this long is
   * dropped (ms; 0 = the default, 60 s). */
  uint32_t write_timeout_ms;
  /* Listen beyond loopback without a token. */
  int insecure;
  /* Kernels carried by executables (cl.kernel) per OpenCL device class:
   * VMAGENT_KERNELS_DENY or _ALLOW. cpu: CL_DEVICE_TYPE_CPU devices (PoCL),
   * where a kernel is native code inside the agent; gpu: every other
   * OpenCL device. Denied: cl.kernel fails with PERMISSION_DENIED and the
   * kernel's source is never compiled. Default: denied on both. */
  int kernels_cpu;
  int kernels_gpu;
  /* Longest a carried kernel may run, ms (0 = no bound): past it the call
   * fails with DEADLINE_EXCEEDED and, until the kernel ends, the device
   * answers UNAVAILABLE at once instead of queueing work behind it.
   * Default 10 s. */
  uint32_t kernel_timeout_ms;
  /* Host memory that clients cause, all sessions together (upload staging,
   * the VMs' register stacks, call frames, compiled records, string and
   * shape constants, timing buffers), 0 = none. Past it: RESOURCE_EXHAUSTED
   * before the allocation. Each session's share also counts towards
   * session_mem_limit. */
  uint64_t host_mem_limit;
  /* Where sessions' VMs run (docs/security.md, "Session isolation"):
   * VMAGENT_ISOLATE_NONE: in the agent's process; _SESSION: each session in
   * a worker process of its own, which a fault there ends without touching
   * the agent or other sessions; _AUTO (the default): _SESSION when carried
   * kernels are allowed on some device class, else _NONE. */
  int isolate;
  /* The vmagent binary started as workers (isolation needs it; vmagent's
   * main() supplies itself). NULL with _SESSION: FAILED_PRECONDITION;
   * with _AUTO: no isolation. Copied. */
  const char *worker_exe;
  /* Workers started ahead of sessions (isolation only). Default 1. */
  uint32_t spare_workers;
  /* Where DeviceState reads sysfs and procfs: NULL or "/" the host's; a
   * directory holding a fake sys/ and proc/ for tests. Copied. */
  const char *state_root;
  /* The cores the measuring thread runs on while it measures (TimeEvaluate,
   * Profile), e.g. "2-3" or "4,6"; NULL or "" = wherever the scheduler
   * puts it. Each must be one the process may run on. Copied. */
  const char *cpus;
} vmagent_config_t;

enum { VMAGENT_KERNELS_DENY = 0, VMAGENT_KERNELS_ALLOW = 1 };
enum { VMAGENT_ISOLATE_AUTO = 0, VMAGENT_ISOLATE_NONE = 1, VMAGENT_ISOLATE_SESSION = 2 };

/* The defaults: listen tcp://127.0.0.1:9090, all devices, no token, no
 * cache dir (main.c supplies ~/.cache/vmrpc), cache cap 2 GiB, 64 sessions,
 * no session memory limit, idle timeout 600 s, chunks of 1 MiB, messages up
 * to chunk + 64 KiB, executables up to 1 GiB, 8 workers, no cpu memory cap,
 * 5 failed tokens per peer per 60 s, Hello within 10 s of connecting and
 * at most 64 connections without one, carried kernels denied on every
 * device, a 10 s bound on a carried kernel. */
void vmagent_config_default(vmagent_config_t *cfg);

typedef struct vmagent vmagent_t;

/* Validates cfg (INVALID_ARGUMENT naming the field; FAILED_PRECONDITION for
 * a non-loopback listen URL without token or insecure), opens the devices
 * (NOT_FOUND / UNAVAILABLE from the device layer), the registry and the
 * executable store. Does not listen. */
vm_status_t vmagent_create(const vmagent_config_t *cfg, vmagent_t **out_agent);

/* Listens on cfg.listen_url and starts the workers and the session reaper.
 * UNAVAILABLE / INVALID_ARGUMENT from nng (address in use, bad URL, TLS). */
vm_status_t vmagent_start(vmagent_t *a);

/* The URL actually listened on (real port); "" before vmagent_start(). */
const char *vmagent_url(const vmagent_t *a);

/* Serves one request body as if it had arrived on connection pipe_id, and
 * returns the framed response in *out_reply (malloc'ed, caller frees with
 * free()). Never fails on any input: garbage gets an INVALID_ARGUMENT
 * response. Returns 0, or -1 when no reply could be allocated. Thread-safe. */
int vmagent_handle_message(vmagent_t *a, uint32_t pipe_id, const uint8_t *body, size_t len,
                           uint8_t **out_reply, size_t *out_reply_len);

/* Tears down every session bound to pipe_id, as when that connection drops
 * (deferred until their in-flight requests finish). */
void vmagent_close_pipe(vmagent_t *a, uint32_t pipe_id);

/* Stops listening, cancels running invocations, joins the workers and tears
 * down every session. Idempotent. */
void vmagent_stop(vmagent_t *a);

/* Stops (if needed) and frees everything. NULL is a no-op. */
void vmagent_free(vmagent_t *a);

#ifdef __cplusplus
}
#endif
#endif /* VMAGENT_AGENT_H */
