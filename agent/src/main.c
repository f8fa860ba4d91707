/* vmagent: the vmrpc device daemon.
 *
 * Prints exactly one line, "vmagent listening on URL", to stdout once it
 * serves (logs go to stderr), and shuts down cleanly on SIGTERM/SIGINT.
 * Exit codes: 0 clean shutdown (or --help/--version), 1 runtime failure
 * (devices, listen), 2 bad flags or a refused configuration, 3 stopped on a
 * signal without the clean shutdown finishing within VMA_STOP_GRACE_S: a
 * device still busy with a kernel that does not end cannot be waited for.
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "isolation/xlock.h"
#include "procfs.h"
#include "vmrpc/log.h"
#include "vmproto/wire.h"
#include "worker.h"

#define VMA_MAX_DEVICE_FLAGS 32
/* Seconds a clean shutdown may take after SIGTERM/SIGINT before the agent
 * exits without it (status 3). */
#define VMA_STOP_GRACE_S 5

static void usage(FILE *f) {
  fprintf(f,
          "usage: vmagent [flags]\n"
          "\n"
          "The vmrpc device daemon: hosts VMs that run uploaded executables on this\n"
          "device's OpenCL GPUs and CPU, for vmclient / libvmclient.\n"
          "\n"
          "flags (default in brackets):\n"
          "  --listen URL            where to listen: tcp://HOST:PORT, tls+tcp://HOST:PORT,\n"
          "                          ipc://PATH; port 0 picks a free one\n"
          "                          [tcp://127.0.0.1:9090]\n"
          "  --device SEL            serve this device: cpu, opencl:N or a substring of an\n"
          "                          OpenCL device name; repeatable; a cpu device is always\n"
          "                          added [every OpenCL device, then cpu]\n"
          "  --token-file FILE       clients must send the token in FILE (first line) with\n"
          "                          Hello; required to listen beyond loopback [none]\n"
          "  --tls-cert FILE         PEM certificate for tls+tcp:// [none]\n"
          "  --tls-key FILE          PEM private key for tls+tcp:// [none]\n"
          "  --cache-dir DIR         executable store and OpenCL program cache; '' = memory\n"
          "                          only [$XDG_CACHE_HOME/vmrpc or ~/.cache/vmrpc]\n"
          "  --cache-max-bytes SIZE  cap of the executable store, LRU eviction [2G]\n"
          "  --cpus LIST             run the measuring thread (time evaluator, profile) on\n"
          "                          these cores while it measures, e.g. 2-3 or 4,6 [any]\n"
          "  --state-root DIR        read the host's state (clocks, thermal zones, load)\n"
          "                          under DIR/sys and DIR/proc instead of / (tests) [/]\n"
          "  --max-sessions N        sessions served at once [64]\n"
          "  --session-mem-limit SIZE  device + host bytes per session, 0 = none [0]\n"
          "  --host-mem-limit SIZE   host memory that clients cause, all sessions together\n"
          "                          (upload staging, VM register stacks, frames, compiled\n"
          "                          code, constants, timing buffers), 0 = none\n"
          "                          [half the physical memory]\n"
          "  --device-mem-limit SIZE  memory cap of the cpu device (all sessions together;\n"
          "                          OpenCL devices have their own), 0 = none [0]\n"
          "  --idle-timeout SECONDS  end sessions idle this long, 0 = never [600]\n"
          "  --hello-timeout SECONDS  close a connection that has not said Hello (with\n"
          "                          the token) this long after connecting [10]\n"
          "  --max-unauthenticated N  connections without a Hello open at once; a new\n"
          "                          one closes the oldest, 1..1000 [64]\n"
          "  --write-timeout SECONDS  drop a connection whose peer takes none of its\n"
          "                          replies for this long [60]\n"
          "  --max-message SIZE      largest request accepted [chunk size + 64K]\n"
          "  --chunk-size SIZE       chunk size of uploads and downloads, 4K..64M [1M]\n"
          "  --max-executable SIZE   largest executable accepted [1G]\n"
          "  --workers N             requests served in parallel (worker threads) [8]\n"
          "  --log-level LEVEL       debug, info, warn, error or off [info]\n"
          "  --insecure              allow a non-loopback --listen without a token [off]\n"
          "  --kernels POLICY        kernels carried by executables (cl.kernel): allow,\n"
          "                          deny, or per device class cpu=allow|deny,gpu=...;\n"
          "                          on a cpu OpenCL device a kernel runs as native code\n"
          "                          inside the agent [deny]\n"
          "  --kernel-timeout SECONDS  longest a carried kernel may run; past it the call\n"
          "                          fails and the device refuses work until the kernel\n"
          "                          ends, 0 = no bound [10]\n"
          "  --isolate MODE          where sessions' VMs run: session (a worker process\n"
          "                          per session: a crash or hung kernel there ends that\n"
          "                          session's VMs only), none (inside the agent), or\n"
          "                          auto: session when --kernels allows carried kernels\n"
          "                          on some device class, else none [auto]\n"
          "  --spare-workers N       worker processes started ahead of sessions [1]\n"
          "  --version               print the version and exit\n"
          "  --help                  print this help and exit\n"
          "\n"
          "SIZE takes a K, M or G suffix (powers of 1024).\n"
          "exit status: 0 clean shutdown, 1 runtime failure, 2 bad flags or refused setup,\n"
          "3 stopped on a signal without cleaning up: a device was still busy (a kernel\n"
          "that does not end) 5 s after the signal\n");
}

static int parse_size(const char *s, uint64_t *out) {
  errno = 0;
  char *end = NULL;
  if (!s || !*s || *s == '-') return -1;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s) return -1;
  uint64_t mul = 1;
  switch (*end) {
    case 'k':
    case 'K':
      mul = 1ull << 10;
      end++;
      break;
    case 'm':
    case 'M':
      mul = 1ull << 20;
      end++;
      break;
    case 'g':
    case 'G':
      mul = 1ull << 30;
      end++;
      break;
    case 't':
    case 'T':
      mul = 1ull << 40;
      end++;
      break;
    default: break;
  }
  if (mul > 1 && (*end == 'i' || *end == 'I')) end++;
  if (*end == 'b' || *end == 'B') end++;
  if (*end != '\0') return -1;
  if (v > UINT64_MAX / mul) return -1;
  *out = v * mul;
  return 0;
}

static int parse_u32(const char *s, uint32_t *out) {
  uint64_t v;
  if (!s || !*s) return -1;
  char *end = NULL;
  errno = 0;
  if (*s == '-') return -1;
  v = strtoull(s, &end, 10);
  if (errno || *end || v > UINT32_MAX) return -1;
  *out = (uint32_t)v;
  return 0;
}

/* Reads the token: the first line of the file, surrounding whitespace
 * stripped. */
static char *read_token(const char *path) {
  struct stat st;
  if (stat(path, &st) == 0 && (st.st_mode & 0077))
    VM_LOGW("token file %s is readable by other users; chmod 600 it", path);
  uint8_t *data = NULL;
  size_t len = 0;
  vm_status_t s = vm_read_file(path, 4096, &data, &len);
  if (s) {
    fprintf(stderr, "vmagent: --token-file %s: %s\n", path, vm_status_message(s));
    vm_status_free(s);
    return NULL;
  }
  char *tok = malloc(len + 1);
  if (!tok) {
    free(data);
    return NULL;
  }
  memcpy(tok, data, len);
  tok[len] = '\0';
  free(data);
  char *nl = strpbrk(tok, "\r\n");
  if (nl) *nl = '\0';
  size_t b = 0, e = strlen(tok);
  while (tok[b] == ' ' || tok[b] == '\t') b++;
  while (e > b && (tok[e - 1] == ' ' || tok[e - 1] == '\t')) e--;
  memmove(tok, tok + b, e - b);
  tok[e - b] = '\0';
  if (!tok[0]) {
    fprintf(stderr, "vmagent: --token-file %s is empty\n", path);
    free(tok);
    return NULL;
  }
  return tok;
}

enum {
  OPT_LISTEN = 256,
  OPT_DEVICE,
  OPT_TOKEN_FILE,
  OPT_TLS_CERT,
  OPT_TLS_KEY,
  OPT_CACHE_DIR,
  OPT_CACHE_MAX,
  OPT_MAX_SESSIONS,
  OPT_SESSION_MEM,
  OPT_DEVICE_MEM,
  OPT_HOST_MEM,
  OPT_IDLE,
  OPT_HELLO_TIMEOUT,
  OPT_MAX_UNAUTH,
  OPT_WRITE_TIMEOUT,
  OPT_MAX_MESSAGE,
  OPT_CHUNK,
  OPT_MAX_EXEC,
  OPT_WORKERS,
  OPT_LOG_LEVEL,
  OPT_INSECURE,
  OPT_KERNELS,
  OPT_KERNEL_TIMEOUT,
  OPT_ISOLATE,
  OPT_SPARE_WORKERS,
  OPT_WORKER_FD,
  OPT_WORKER_LOCKS,
  OPT_WORKER_SLOT,
  OPT_STATE_ROOT,
  OPT_CPUS,
  OPT_VERSION,
  OPT_HELP,
};

static const struct option options[] = {
    {"listen", required_argument, NULL, OPT_LISTEN},
    {"device", required_argument, NULL, OPT_DEVICE},
    {"token-file", required_argument, NULL, OPT_TOKEN_FILE},
    {"tls-cert", required_argument, NULL, OPT_TLS_CERT},
    {"tls-key", required_argument, NULL, OPT_TLS_KEY},
    {"cache-dir", required_argument, NULL, OPT_CACHE_DIR},
    {"cache-max-bytes", required_argument, NULL, OPT_CACHE_MAX},
    {"max-sessions", required_argument, NULL, OPT_MAX_SESSIONS},
    {"session-mem-limit", required_argument, NULL, OPT_SESSION_MEM},
    {"device-mem-limit", required_argument, NULL, OPT_DEVICE_MEM},
    {"host-mem-limit", required_argument, NULL, OPT_HOST_MEM},
    {"idle-timeout", required_argument, NULL, OPT_IDLE},
    {"hello-timeout", required_argument, NULL, OPT_HELLO_TIMEOUT},
    {"max-unauthenticated", required_argument, NULL, OPT_MAX_UNAUTH},
    {"write-timeout", required_argument, NULL, OPT_WRITE_TIMEOUT},
    {"max-message", required_argument, NULL, OPT_MAX_MESSAGE},
    {"chunk-size", required_argument, NULL, OPT_CHUNK},
    {"max-executable", required_argument, NULL, OPT_MAX_EXEC},
    {"workers", required_argument, NULL, OPT_WORKERS},
    {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
    {"insecure", no_argument, NULL, OPT_INSECURE},
    {"kernels", required_argument, NULL, OPT_KERNELS},
    {"kernel-timeout", required_argument, NULL, OPT_KERNEL_TIMEOUT},
    {"isolate", required_argument, NULL, OPT_ISOLATE},
    {"spare-workers", required_argument, NULL, OPT_SPARE_WORKERS},
    /* internal: how the agent starts its workers (isolation/) */
    {"worker-fd", required_argument, NULL, OPT_WORKER_FD},
    {"worker-locks", required_argument, NULL, OPT_WORKER_LOCKS},
    {"worker-slot", required_argument, NULL, OPT_WORKER_SLOT},
    {"state-root", required_argument, NULL, OPT_STATE_ROOT},
    {"cpus", required_argument, NULL, OPT_CPUS},
    {"version", no_argument, NULL, OPT_VERSION},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

/* --kernels: "allow", "deny", or a comma list of cpu=allow|deny and
 * gpu=allow|deny (a class not named keeps its default). */
static int parse_kernels(const char *s, vmagent_config_t *cfg) {
  if (strcmp(s, "allow") == 0 || strcmp(s, "deny") == 0) {
    cfg->kernels_cpu = cfg->kernels_gpu = s[0] == 'a';
    return 0;
  }
  while (*s) {
    size_t n = strcspn(s, ",");
    int *slot = NULL;
    const char *val = NULL;
    if (n > 4 && strncmp(s, "cpu=", 4) == 0) {
      slot = &cfg->kernels_cpu;
      val = s + 4;
    } else if (n > 4 && strncmp(s, "gpu=", 4) == 0) {
      slot = &cfg->kernels_gpu;
      val = s + 4;
    } else {
      return -1;
    }
    size_t vn = n - 4;
    if (vn == 5 && strncmp(val, "allow", 5) == 0)
      *slot = VMAGENT_KERNELS_ALLOW;
    else if (vn == 4 && strncmp(val, "deny", 4) == 0)
      *slot = VMAGENT_KERNELS_DENY;
    else
      return -1;
    s += n;
    if (*s == ',') {
      s++;
      if (!*s) return -1;
    }
  }
  return 0;
}

/* SECONDS as a decimal number of seconds in [0, max_s] -> milliseconds; a
 * positive value never rounds to 0. */
static int parse_seconds_ms(const char *v, double max_s, uint32_t *out_ms) {
  char *end = NULL;
  errno = 0;
  double s = strtod(v, &end);
  if (errno || end == v || *end || !(s >= 0) || s > max_s) return -1;
  *out_ms = (uint32_t)(s * 1000.0 + 0.5);
  if (s > 0 && *out_ms == 0) *out_ms = 1;
  return 0;
}

/* Started at the first signal: a clean shutdown waits for the workers, and
 * a worker may be waiting for a device that a kernel never gives back. If
 * the shutdown has not finished VMA_STOP_GRACE_S later, the process ends
 * here. Later signals are taken (and ignored) meanwhile. */
static void *stop_watchdog(void *arg) {
  const sigset_t *set = arg;
  uint64_t end = vm_now_ns() + (uint64_t)VMA_STOP_GRACE_S * 1000000000ull;
  for (uint64_t now = vm_now_ns(); now < end; now = vm_now_ns()) {
    struct timespec ts = {(time_t)((end - now) / 1000000000ull),
                          (long)((end - now) % 1000000000ull)};
    int sig = sigtimedwait(set, NULL, &ts);
    if (sig > 0) VM_LOGW("signal %d: already shutting down", sig);
  }
  VM_LOGE(
      "shutdown did not finish within %d s (a device is still busy, e.g. with a kernel that "
      "does not end): exiting without cleanup",
      VMA_STOP_GRACE_S);
  _exit(3);
  return NULL;
}

/* vmagent --worker-fd N: one session's worker process, started by an agent
 * with session isolation (isolation/supervisor.h). It serves the agent over fd N until
 * the agent closes it, and is the first the OOM killer picks. */
static int worker_main(vmagent_config_t *cfg, int fd, int locks_fd, int slot) {
  vma_proc_oom_first();
  cfg->isolate = VMAGENT_ISOLATE_NONE;
  cfg->listen_url = "ipc:///nonexistent"; /* never listens */
  cfg->token = NULL;
  cfg->tls_cert_file = cfg->tls_key_file = NULL;
  signal(SIGPIPE, SIG_IGN);
  vmagent_t *a = NULL;
  vm_status_t st = vmagent_create(cfg, &a);
  if (!st && locks_fd >= 0) st = vma_xlock_open(a, locks_fd, slot);
  if (st) {
    fprintf(stderr, "vmagent worker: %s\n", vm_status_message(st));
    vm_status_free(st);
    return 1;
  }
  vma_worker_serve(a, fd);
}

static int bad_value(const char *flag, const char *value) {
  fprintf(stderr, "vmagent: bad value '%s' for --%s (see vmagent --help)\n", value, flag);
  return 2;
}

int main(int argc, char **argv) {
  vmagent_config_t cfg;
  vmagent_config_default(&cfg);
  const char *devices[VMA_MAX_DEVICE_FLAGS];
  uint32_t num_devices = 0;
  const char *token_file = NULL;
  const char *cache_dir = NULL;
  int cache_dir_set = 0;
  int host_mem_set = 0;
  vm_log_level_t level = VM_LOG_INFO;
  char default_cache[4096];
  char *token = NULL;
  int rc = 0;
  vmagent_t *a = NULL;
  uint32_t worker_fd = UINT32_MAX, worker_locks = UINT32_MAX, worker_slot = UINT32_MAX;
  char self_exe[4096];

  opterr = 0;
  int opt;
  while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
    const char *v = optarg;
    switch (opt) {
      case OPT_LISTEN: cfg.listen_url = v; break;
      case OPT_DEVICE:
        if (num_devices >= VMA_MAX_DEVICE_FLAGS) {
          fprintf(stderr, "vmagent: at most %d --device flags\n", VMA_MAX_DEVICE_FLAGS);
          return 2;
        }
        devices[num_devices++] = v;
        break;
      case OPT_TOKEN_FILE: token_file = v; break;
      case OPT_TLS_CERT: cfg.tls_cert_file = v; break;
      case OPT_TLS_KEY: cfg.tls_key_file = v; break;
      case OPT_CPUS: cfg.cpus = v; break;
      case OPT_STATE_ROOT:
        if (!*v) return bad_value("state-root", v);
        cfg.state_root = v;
        break;
      case OPT_CACHE_DIR:
        cache_dir = v;
        cache_dir_set = 1;
        break;
      case OPT_CACHE_MAX:
        if (parse_size(v, &cfg.cache_max_bytes)) return bad_value("cache-max-bytes", v);
        break;
      case OPT_MAX_SESSIONS:
        if (parse_u32(v, &cfg.max_sessions)) return bad_value("max-sessions", v);
        break;
      case OPT_SESSION_MEM:
        if (parse_size(v, &cfg.session_mem_limit)) return bad_value("session-mem-limit", v);
        break;
      case OPT_HOST_MEM:
        if (parse_size(v, &cfg.host_mem_limit)) return bad_value("host-mem-limit", v);
        host_mem_set = 1;
        break;
      case OPT_DEVICE_MEM:
        if (parse_size(v, &cfg.cpu_mem_limit)) return bad_value("device-mem-limit", v);
        break;
      case OPT_IDLE:
        if (parse_seconds_ms(v, 30.0 * 86400, &cfg.idle_timeout_ms))
          return bad_value("idle-timeout", v);
        break;
      case OPT_HELLO_TIMEOUT:
        if (parse_seconds_ms(v, 600, &cfg.hello_timeout_ms) || cfg.hello_timeout_ms == 0)
          return bad_value("hello-timeout", v);
        break;
      case OPT_MAX_UNAUTH:
        if (parse_u32(v, &cfg.max_unauth_conns) || cfg.max_unauth_conns < 1 ||
            cfg.max_unauth_conns > 1000)
          return bad_value("max-unauthenticated", v);
        break;
      case OPT_WRITE_TIMEOUT:
        if (parse_seconds_ms(v, 3600, &cfg.write_timeout_ms) || cfg.write_timeout_ms == 0)
          return bad_value("write-timeout", v);
        break;
      case OPT_KERNELS:
        if (parse_kernels(v, &cfg)) return bad_value("kernels", v);
        break;
      case OPT_KERNEL_TIMEOUT:
        if (parse_seconds_ms(v, 86400, &cfg.kernel_timeout_ms))
          return bad_value("kernel-timeout", v);
        break;
      case OPT_ISOLATE:
        if (strcmp(v, "auto") == 0)
          cfg.isolate = VMAGENT_ISOLATE_AUTO;
        else if (strcmp(v, "none") == 0)
          cfg.isolate = VMAGENT_ISOLATE_NONE;
        else if (strcmp(v, "session") == 0)
          cfg.isolate = VMAGENT_ISOLATE_SESSION;
        else
          return bad_value("isolate", v);
        break;
      case OPT_SPARE_WORKERS:
        if (parse_u32(v, &cfg.spare_workers) || cfg.spare_workers > 64)
          return bad_value("spare-workers", v);
        break;
      case OPT_WORKER_FD:
        if (parse_u32(v, &worker_fd) || worker_fd > 1024) return bad_value("worker-fd", v);
        break;
      case OPT_WORKER_LOCKS:
        if (parse_u32(v, &worker_locks) || worker_locks > 1024) return bad_value("worker-locks", v);
        break;
      case OPT_WORKER_SLOT:
        if (parse_u32(v, &worker_slot) || worker_slot > (1u << 20))
          return bad_value("worker-slot", v);
        break;
      case OPT_MAX_MESSAGE:
        if (parse_size(v, &cfg.max_message_bytes)) return bad_value("max-message", v);
        break;
      case OPT_CHUNK:
        if (parse_size(v, &cfg.chunk_bytes)) return bad_value("chunk-size", v);
        break;
      case OPT_MAX_EXEC:
        if (parse_size(v, &cfg.max_executable_bytes)) return bad_value("max-executable", v);
        break;
      case OPT_WORKERS:
        if (parse_u32(v, &cfg.workers)) return bad_value("workers", v);
        break;
      case OPT_LOG_LEVEL:
        if (vm_log_level_parse(v, &level)) return bad_value("log-level", v);
        break;
      case OPT_INSECURE: cfg.insecure = 1; break;
      case OPT_VERSION:
        printf("vmagent %s (protocol %d.%d)\n", VMRPC_VERSION, VMRPC_PROTOCOL_MAJOR,
               VMRPC_PROTOCOL_MINOR);
        return 0;
      case OPT_HELP: usage(stdout); return 0;
      default:
        if (optopt >= OPT_LISTEN && optopt <= OPT_HELP)
          fprintf(stderr, "vmagent: flag --%s needs a value (see vmagent --help)\n",
                  options[optopt - OPT_LISTEN].name);
        else
          fprintf(stderr, "vmagent: unknown flag '%s' (see vmagent --help)\n", argv[optind - 1]);
        return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "vmagent: unexpected argument '%s' (see vmagent --help)\n", argv[optind]);
    return 2;
  }
  vm_log_set_level(level);

  if (!cache_dir_set) {
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    if (xdg && *xdg)
      snprintf(default_cache, sizeof(default_cache), "%s/vmrpc", xdg);
    else if (home && *home)
      snprintf(default_cache, sizeof(default_cache), "%s/.cache/vmrpc", home);
    else
      default_cache[0] = '\0';
    cache_dir = default_cache;
  }
  cfg.cache_dir = cache_dir && *cache_dir ? cache_dir : NULL;
  if (token_file) {
    token = read_token(token_file);
    if (!token) return 2;
    cfg.token = token;
  }
  if (!host_mem_set) { /* half the physical memory */
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) cfg.host_mem_limit = (uint64_t)pages * (uint64_t)page / 2;
  }
  cfg.devices = num_devices ? devices : NULL;
  cfg.num_devices = num_devices;
  if (vma_proc_self_exe(self_exe, sizeof(self_exe)) == 0) cfg.worker_exe = self_exe;

  /* Signals are taken synchronously by this thread with sigwait(); block
   * them before any thread (ours, nng's, the OpenCL driver's) exists so
   * they all inherit the mask. */
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
  signal(SIGPIPE, SIG_IGN);

#ifdef __GLIBC__
  /* The agent allocates a buffer per request and per reply: with the default
   * chunk size, 1 MiB each. glibc's defaults return such blocks to the
   * kernel (its dynamic mmap threshold and heap trimming), so every chunk
   * would land in fresh pages and pay a page fault per 4 KiB. Keep
   * message-sized blocks in the heap and some free heap for reuse (at
   * most 16 chunks' worth stays resident once a transfer ends).
   * docs/performance.md has the figures. */
  {
    uint64_t msg = cfg.chunk_bytes + (64u << 10);
    uint64_t mmap_min = 2 * msg < (32u << 20) ? 2 * msg : (32u << 20);
    if (mmap_min > (128u << 10)) mallopt(M_MMAP_THRESHOLD, (int)mmap_min);
    uint64_t trim = 16 * msg < (256u << 20) ? 16 * msg : (256u << 20);
    mallopt(M_TRIM_THRESHOLD, (int)trim);
    /* One heap for all threads: requests land on any of the workers and
     * nng's threads, and a heap per thread (glibc's default, up to 8 per
     * core) keeps growing until every thread has seen every kind of
     * request. */
    mallopt(M_ARENA_MAX, 1);
  }
#endif

  /* A worker of an isolated agent: the same signal mask and malloc tuning
   * (it moves the same chunks), then its own loop. */
  if (worker_fd != UINT32_MAX)
    return worker_main(&cfg, (int)worker_fd, (int)worker_locks, (int)worker_slot);

  vm_status_t st = vmagent_create(&cfg, &a);
  if (st) {
    vm_code_t code = vm_status_code(st);
    fprintf(stderr, "vmagent: %s\n", vm_status_message(st));
    vm_status_free(st);
    rc = code == VM_INVALID_ARGUMENT || code == VM_FAILED_PRECONDITION ? 2 : 1;
    goto done;
  }
  st = vmagent_start(a);
  if (st) {
    fprintf(stderr, "vmagent: %s\n", vm_status_message(st));
    vm_status_free(st);
    rc = 1;
    goto done;
  }
  printf("vmagent listening on %s\n", vmagent_url(a));
  fflush(stdout);

  int sig = 0;
  while (sigwait(&set, &sig) != 0) {
  }
  VM_LOGI("signal %d: shutting down", sig);
  pthread_t watchdog;
  if (pthread_create(&watchdog, NULL, stop_watchdog, &set) == 0) pthread_detach(watchdog);
done:
  vmagent_free(a);
  if (token) {
    volatile char *p = token;
    while (*p) *p++ = 0;
    free(token);
  }
  return rc;
}
