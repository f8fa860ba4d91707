/* Program cache of an OpenCL device: in memory, and on disk when a cache
 * directory is set.
 *
 * Key: SHA-256 over length-prefixed fields (a tag, source, build options,
 * device name, driver version, platform name, platform version), so no two
 * different field tuples can hash the same bytes and a driver update
 * invalidates every entry.
 *
 * Memory: one entry per (source, options) holding the cl_program and the
 * kernels created from it by name. Operators look their kernel up on every
 * launch: their sources live for the process, so the address and the
 * options identify the entry; other sources (carried modules) are compared
 * byte for byte, options first (no hashing on the hot path).
 *
 * Disk: <dir>/<hex key>.clbin, written atomically after a kernel has been
 * created from the program (Mali compiles lazily in clCreateKernel, so the
 * binary is only complete then). Layout, little-endian:
 *
 *   offset size
 *        0    8  magic "VMCLBIN\0"
 *        8    4  format version (1)
 *       12    4  header size (88)
 *       16   32  key (SHA-256 as above)
 *       48    8  payload length in bytes
 *       56   32  SHA-256 of the payload
 *       88    -  payload: the CL_PROGRAM_BINARIES bytes of the device
 *
 * A file whose size, magic, version, header size, key, payload length or
 * payload hash does not match, or that the driver refuses, is deleted,
 * counted in disk_corrupt and the program is rebuilt from source — a cached
 * binary is never used unverified.
 *
 * All entry points run under the device lock (recursive).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cl_internal.h"
#include "vm/executable.h"
#include "vmrpc/log.h"

#define VMCL_BIN_MAGIC "VMCLBIN" /* 7 chars + NUL = 8 bytes */
#define VMCL_BIN_VERSION 1u
#define VMCL_BIN_HEADER 88u
#define VMCL_BIN_MAX_BYTES (1ull << 30) /* refuse to read larger files */
#define VMCL_BUILD_LOG_MAX 16384        /* bytes of build log kept in a status */
#define VMCL_KEY_TAG "vmcl-program-cache/1"
#define VMCL_EXACT_DIV_OPTION "-cl-fp32-correctly-rounded-divide-sqrt"

typedef struct vmcl_cached_kernel {
  char *name;
  cl_kernel kernel;
} vmcl_cached_kernel_t;

typedef struct vmcl_program_entry {
  uint8_t key[VM_SHA256_BYTES];
  char *source;
  size_t source_len;
  const char *static_source; /* the caller's process-lifetime text, or NULL */
  char *options;             /* the caller's, which identify the entry */
  char *build_options;       /* options and the device's own (cache's build_suffix) */
  cl_program program;
  int on_disk; /* binary saved (or loaded, or saving is off / has failed) */
  vmcl_cached_kernel_t *kernels;
  uint32_t num_kernels, cap_kernels;
} vmcl_program_entry_t;

struct vmcl_program_cache {
  vmcl_dev_t *d;
  char *dir; /* NULL: memory only */
  /* device identity, part of every key */
  char *device_name, *driver_version, *platform_name, *platform_version;
  /* appended to every program's options: "-cl-fp32-correctly-rounded-
   * divide-sqrt" where the device offers it (CL_DEVICE_SINGLE_FP_CONFIG),
   * so float32 division and sqrt round as IEEE 754 and the CPU references
   * do. Without it a GPU's compiler may use a 2.5-ulp division (OpenCL's
   * default): NVIDIA's gave DynamicQuantizeLinear a scale 1 ulp off, which
   * moves quantized values by one step. */
  const char *build_suffix;
  vmcl_program_entry_t **entries;
  uint32_t num_entries, cap_entries;
  vmcl_cache_stats_t stats;
};

/* ---------------------------------------------------------------------------
 * Helpers
 */

static char *vmcl_strdup(const char *s) {
  size_t n = strlen(s);
  char *d = malloc(n + 1);
  if (d) memcpy(d, s, n + 1);
  return d;
}

static vm_status_t vmcl_oom(const char *what) {
  return vm_status_make(VM_RESOURCE_EXHAUSTED, "%s: out of host memory", what);
}

/* mkdir -p. */
static vm_status_t vmcl_mkdirs(const char *path) {
  char *p = vmcl_strdup(path);
  if (!p) return vmcl_oom("creating cache directory");
  for (char *s = p + 1;; s++) {
    if (*s == '/' || *s == '\0') {
      char c = *s;
      *s = '\0';
      if (mkdir(p, 0755) != 0 && errno != EEXIST) {
        vm_status_t st = vm_status_make(VM_UNAVAILABLE, "cannot create cache directory '%s': %s", p,
                                        strerror(errno));
        free(p);
        return st;
      }
      *s = c;
      if (c == '\0') break;
    }
  }
  free(p);
  struct stat sb;
  if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
    return vm_status_make(VM_UNAVAILABLE, "cache directory '%s' is not a directory", path);
  }
  return VM_STATUS_OK;
}

static void vmcl_put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void vmcl_put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t vmcl_get_u32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}
static uint64_t vmcl_get_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

/* SHA-256 over (u64 length, bytes) of each field. */
static vm_status_t vmcl_compute_key(const vmcl_program_cache_t *c, const char *source,
                                    size_t source_len, const char *options,
                                    uint8_t key[VM_SHA256_BYTES]) {
  const char *fields[] = {
      VMCL_KEY_TAG,       source, options, c->device_name, c->driver_version, c->platform_name,
      c->platform_version};
  size_t lens[sizeof(fields) / sizeof(fields[0])];
  size_t total = 0;
  for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
    lens[i] = i == 1 ? source_len : strlen(fields[i]);
    total += 8 + lens[i]; /* source is capped by the executable's limits */
  }
  uint8_t *buf = malloc(total);
  if (!buf) return vmcl_oom("program cache key");
  size_t at = 0;
  for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
    vmcl_put_u64(buf + at, (uint64_t)lens[i]);
    at += 8;
    memcpy(buf + at, fields[i], lens[i]);
    at += lens[i];
  }
  vm_sha256(buf, total, key);
  free(buf);
  return VM_STATUS_OK;
}

/* <dir>/<hex>.clbin, malloc'ed. */
static char *vmcl_bin_path(const vmcl_program_cache_t *c, const uint8_t key[VM_SHA256_BYTES]) {
  char hex[2 * VM_SHA256_BYTES + 1];
  vm_sha256_hex(key, hex);
  size_t n = strlen(c->dir) + 1 + sizeof(hex) + 6 + 1;
  char *path = malloc(n);
  if (path) snprintf(path, n, "%s/%s.clbin", c->dir, hex);
  return path;
}

/* A build log of the program for the device, truncated to a sane size;
 * malloc'ed (never NULL unless out of memory). */
static char *vmcl_build_log(vmcl_dev_t *d, cl_program program) {
  size_t size = 0;
  cl_int err = clGetProgramBuildInfo(program, d->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &size);
  if (err != CL_SUCCESS || size == 0) {
    char *s = malloc(64);
    if (s) snprintf(s, 64, "(no build log: %s)", vmcl_error_name(err));
    return s;
  }
  char *log = malloc(size + 1);
  if (!log) return NULL;
  err = clGetProgramBuildInfo(program, d->device, CL_PROGRAM_BUILD_LOG, size, log, NULL);
  if (err != CL_SUCCESS) {
    snprintf(log, size + 1, "(no build log: %s)", vmcl_error_name(err));
    return log;
  }
  log[size] = '\0';
  size_t len = strlen(log);
  if (len > VMCL_BUILD_LOG_MAX) {
    /* the first errors are the useful ones: keep the head */
    snprintf(log + VMCL_BUILD_LOG_MAX - 64, 64, "\n... (build log truncated, %zu bytes)", len);
  }
  return log;
}

/* ---------------------------------------------------------------------------
 * Entries
 */

static void vmcl_entry_free(vmcl_program_entry_t *e) {
  if (!e) return;
  for (uint32_t i = e->num_kernels; i-- > 0;) {
    vmcl_released(clReleaseKernel(e->kernels[i].kernel), "clReleaseKernel");
    free(e->kernels[i].name);
  }
  free(e->kernels);
  if (e->program) vmcl_released(clReleaseProgram(e->program), "clReleaseProgram");
  free(e->options);
  free(e->build_options);
  free(e->source);
  free(e);
}

static vmcl_program_entry_t *vmcl_find_entry(const vmcl_program_cache_t *c, const char *source,
                                             size_t source_len, const char *options) {
  for (uint32_t i = 0; i < c->num_entries; i++) {
    vmcl_program_entry_t *e = c->entries[i];
    if (e->source_len == source_len && strcmp(e->options, options) == 0 &&
        memcmp(e->source, source, source_len) == 0)
      return e;
  }
  return NULL;
}

static vmcl_program_entry_t *vmcl_find_static(const vmcl_program_cache_t *c, const char *source,
                                              const char *options) {
  for (uint32_t i = 0; i < c->num_entries; i++) {
    vmcl_program_entry_t *e = c->entries[i];
    if (e->static_source == source && strcmp(e->options, options) == 0) return e;
  }
  return NULL;
}

/* Loads the binary for e->key from disk into e->program. Returns 1 on a
 * hit, 0 on a miss (absent, unreadable, or corrupt: then deleted and
 * counted). */
static int vmcl_load_binary(vmcl_program_cache_t *c, vmcl_program_entry_t *e) {
  vmcl_dev_t *d = c->d;
  char *path = vmcl_bin_path(c, e->key);
  if (!path) return 0;
  uint8_t *data = NULL;
  size_t size = 0;
  const char *why = NULL;
  cl_program program = NULL;
  int hit = 0;

  vm_status_t st = vm_read_file(path, VMCL_BIN_MAX_BYTES, &data, &size);
  if (st) {
    vm_code_t code = vm_status_code(st);
    if (code != VM_NOT_FOUND)
      VM_LOGW("program cache: %s; rebuilding from source", vm_status_message(st));
    vm_status_free(st);
    if (code == VM_RESOURCE_EXHAUSTED) why = "file too large";
    goto done;
  }
  uint8_t digest[VM_SHA256_BYTES];
  if (size < VMCL_BIN_HEADER) {
    why = "truncated header";
  } else if (memcmp(data, VMCL_BIN_MAGIC, 8) != 0) {
    why = "bad magic";
  } else if (vmcl_get_u32(data + 8) != VMCL_BIN_VERSION) {
    why = "unknown version";
  } else if (vmcl_get_u32(data + 12) != VMCL_BIN_HEADER) {
    why = "bad header size";
  } else if (memcmp(data + 16, e->key, VM_SHA256_BYTES) != 0) {
    why = "key mismatch";
  } else if (vmcl_get_u64(data + 48) != (uint64_t)(size - VMCL_BIN_HEADER) ||
             size == VMCL_BIN_HEADER) {
    why = "payload length mismatch";
  } else {
    vm_sha256(data + VMCL_BIN_HEADER, size - VMCL_BIN_HEADER, digest);
    if (memcmp(digest, data + 56, VM_SHA256_BYTES) != 0) why = "payload hash mismatch";
  }
  if (why) goto done;

  const unsigned char *payload = data + VMCL_BIN_HEADER;
  size_t payload_len = size - VMCL_BIN_HEADER;
  cl_int bin_status = CL_SUCCESS, err = CL_SUCCESS;
  program = clCreateProgramWithBinary(d->context, 1, &d->device, &payload_len, &payload,
                                      &bin_status, &err);
  if (err != CL_SUCCESS || bin_status != CL_SUCCESS || !program) {
    why = "driver refused the binary";
    VM_LOGW("program cache: clCreateProgramWithBinary: %s / %s", vmcl_error_name(err),
            vmcl_error_name(bin_status));
    goto done;
  }
  err = clBuildProgram(program, 1, &d->device, e->build_options, NULL, NULL);
  if (err != CL_SUCCESS) {
    why = "driver could not build the binary";
    VM_LOGW("program cache: clBuildProgram (binary): %s", vmcl_error_name(err));
    goto done;
  }
  e->program = program;
  program = NULL;
  hit = 1;

done:
  if (program) vmcl_released(clReleaseProgram(program), "clReleaseProgram");
  if (why) {
    c->stats.disk_corrupt++;
    VM_LOGW("program cache: discarding '%s': %s", path, why);
    if (unlink(path) != 0 && errno != ENOENT)
      VM_LOGW("program cache: cannot delete '%s': %s", path, strerror(errno));
  }
  free(data);
  free(path);
  return hit;
}

/* Saves e->program's binary. Failures are logged, never fatal: the cache is
 * an optimisation. */
static void vmcl_save_binary(vmcl_program_cache_t *c, vmcl_program_entry_t *e) {
  e->on_disk = 1; /* one attempt per entry, whatever the outcome */
  size_t bin_size = 0;
  cl_int err =
      clGetProgramInfo(e->program, CL_PROGRAM_BINARY_SIZES, sizeof(bin_size), &bin_size, NULL);
  if (err != CL_SUCCESS || bin_size == 0) {
    VM_LOGW("program cache: no binary to save (%s, %zu bytes)", vmcl_error_name(err), bin_size);
    return;
  }
  if (bin_size > VMCL_BIN_MAX_BYTES - VMCL_BIN_HEADER) {
    VM_LOGW("program cache: binary of %zu bytes too large to save", bin_size);
    return;
  }
  uint8_t *file = malloc(VMCL_BIN_HEADER + bin_size);
  char *path = vmcl_bin_path(c, e->key);
  if (!file || !path) {
    VM_LOGW("program cache: out of host memory saving a binary");
    goto done;
  }
  unsigned char *payload = file + VMCL_BIN_HEADER;
  err = clGetProgramInfo(e->program, CL_PROGRAM_BINARIES, sizeof(payload), &payload, NULL);
  if (err != CL_SUCCESS) {
    VM_LOGW("program cache: clGetProgramInfo(BINARIES): %s", vmcl_error_name(err));
    goto done;
  }
  memset(file, 0, VMCL_BIN_HEADER);
  memcpy(file, VMCL_BIN_MAGIC, 8);
  vmcl_put_u32(file + 8, VMCL_BIN_VERSION);
  vmcl_put_u32(file + 12, VMCL_BIN_HEADER);
  memcpy(file + 16, e->key, VM_SHA256_BYTES);
  vmcl_put_u64(file + 48, (uint64_t)bin_size);
  vm_sha256(payload, bin_size, file + 56);
  vm_status_t st = vm_write_file_atomic(path, file, VMCL_BIN_HEADER + bin_size);
  if (st) {
    VM_LOGW("program cache: %s", vm_status_message(st));
    vm_status_free(st);
  } else {
    c->stats.disk_writes++;
  }
done:
  free(path);
  free(file);
}

/* Builds e->program from source; a build failure is INVALID_ARGUMENT with
 * the build log. */
static vm_status_t vmcl_build_source(vmcl_program_cache_t *c, vmcl_program_entry_t *e) {
  vmcl_dev_t *d = c->d;
  const char *src = e->source;
  size_t len = e->source_len;
  cl_int err = CL_SUCCESS;
  cl_program program = clCreateProgramWithSource(d->context, 1, &src, &len, &err);
  if (err != CL_SUCCESS || !program)
    return vmcl_status(err != CL_SUCCESS ? err : CL_OUT_OF_RESOURCES, "clCreateProgramWithSource");
  err = clBuildProgram(program, 1, &d->device, e->build_options, NULL, NULL);
  if (err != CL_SUCCESS) {
    vm_status_t st = vmcl_status(err, "clBuildProgram");
    char *log = vmcl_build_log(d, program);
    vm_status_t full =
        vm_status_make(vm_status_code(st), "%s with options '%s'; build log:\n%s",
                       vm_status_message(st), e->build_options, log ? log : "(out of memory)");
    free(log);
    vm_status_free(st);
    vmcl_released(clReleaseProgram(program), "clReleaseProgram");
    return full;
  }
  e->program = program;
  c->stats.builds++;
  return VM_STATUS_OK;
}

/* NOT_FOUND naming the kernels the program has. */
static vm_status_t vmcl_no_kernel(vmcl_program_entry_t *e, const char *name, cl_int err) {
  char *names = NULL;
  size_t size = 0;
  if (clGetProgramInfo(e->program, CL_PROGRAM_KERNEL_NAMES, 0, NULL, &size) == CL_SUCCESS &&
      (names = malloc(size + 1)) != NULL) {
    if (clGetProgramInfo(e->program, CL_PROGRAM_KERNEL_NAMES, size, names, NULL) != CL_SUCCESS)
      names[0] = '\0';
    names[size] = '\0';
  }
  vm_status_t st = vm_status_make(VM_NOT_FOUND, "program has no kernel '%s' (%s; it has: %s)", name,
                                  vmcl_error_name(err), names && names[0] ? names : "?");
  free(names);
  return st;
}

static vm_status_t vmcl_entry_kernel(vmcl_program_entry_t *e, const char *name,
                                     cl_kernel *out_kernel) {
  for (uint32_t i = 0; i < e->num_kernels; i++) {
    if (strcmp(e->kernels[i].name, name) == 0) {
      *out_kernel = e->kernels[i].kernel;
      return VM_STATUS_OK;
    }
  }
  if (e->num_kernels == e->cap_kernels) {
    uint32_t cap = e->cap_kernels ? e->cap_kernels * 2 : 4;
    vmcl_cached_kernel_t *grown = realloc(e->kernels, cap * sizeof(*grown));
    if (!grown) return vmcl_oom("program cache");
    e->kernels = grown;
    e->cap_kernels = cap;
  }
  char *copy = vmcl_strdup(name);
  if (!copy) return vmcl_oom("program cache");
  cl_int err = CL_SUCCESS;
  cl_kernel k = clCreateKernel(e->program, name, &err);
  if (err != CL_SUCCESS || !k) {
    free(copy);
    if (err == CL_INVALID_KERNEL_NAME) return vmcl_no_kernel(e, name, err);
    return vmcl_status(err != CL_SUCCESS ? err : CL_OUT_OF_RESOURCES, "clCreateKernel");
  }
  e->kernels[e->num_kernels].name = copy;
  e->kernels[e->num_kernels].kernel = k;
  e->num_kernels++;
  *out_kernel = k;
  return VM_STATUS_OK;
}

/* ---------------------------------------------------------------------------
 * API
 */

vm_status_t vmcl_cache_create(vmcl_dev_t *d, const char *cache_dir,
                              vmcl_program_cache_t **out_cache) {
  *out_cache = NULL;
  vm_status_t st = VM_STATUS_OK;
  vmcl_program_cache_t *c = calloc(1, sizeof(*c));
  if (!c) return vmcl_oom("program cache");
  c->d = d;
  st = vmcl_info_string(NULL, d->device, CL_DEVICE_NAME, "clGetDeviceInfo(NAME)", &c->device_name);
  if (st) goto fail;
  st = vmcl_info_string(NULL, d->device, CL_DRIVER_VERSION, "clGetDeviceInfo(DRIVER_VERSION)",
                         &c->driver_version);
  if (st) goto fail;
  st = vmcl_info_string(d->platform, NULL, CL_PLATFORM_NAME, "clGetPlatformInfo(NAME)",
                         &c->platform_name);
  if (st) goto fail;
  st = vmcl_info_string(d->platform, NULL, CL_PLATFORM_VERSION, "clGetPlatformInfo(VERSION)",
                         &c->platform_version);
  if (st) goto fail;
  cl_device_fp_config fp = 0;
  if (clGetDeviceInfo(d->device, CL_DEVICE_SINGLE_FP_CONFIG, sizeof(fp), &fp, NULL) != CL_SUCCESS)
    fp = 0;
  c->build_suffix = fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT ? VMCL_EXACT_DIV_OPTION : "";
  if (cache_dir && cache_dir[0]) {
    size_t n = strlen(cache_dir);
    while (n > 1 && cache_dir[n - 1] == '/') n--; /* "dir/" -> "dir" */
    c->dir = malloc(n + 1);
    if (!c->dir) {
      st = vmcl_oom("program cache");
      goto fail;
    }
    memcpy(c->dir, cache_dir, n);
    c->dir[n] = '\0';
    st = vmcl_mkdirs(c->dir);
    if (st) goto fail;
  }
  *out_cache = c;
  return VM_STATUS_OK;

fail:
  vmcl_cache_destroy(c);
  return st;
}

void vmcl_cache_destroy(vmcl_program_cache_t *c) {
  if (!c) return;
  for (uint32_t i = c->num_entries; i-- > 0;) vmcl_entry_free(c->entries[i]);
  free(c->entries);
  free(c->dir);
  free(c->platform_version);
  free(c->platform_name);
  free(c->driver_version);
  free(c->device_name);
  free(c);
}

const char *vmcl_cache_dir(const vmcl_program_cache_t *c) { return c ? c->dir : NULL; }

void vmcl_cache_identity(const vmcl_program_cache_t *c, char out[2 * VM_SHA256_BYTES + 1]) {
  char buf[1024];
  int n = snprintf(buf, sizeof(buf), "%s\n%s\n%s\n%s", c->device_name, c->driver_version,
                   c->platform_name, c->platform_version);
  uint8_t dig[VM_SHA256_BYTES];
  vm_sha256(buf, n < 0 ? 0 : (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1, dig);
  vm_sha256_hex(dig, out);
}

void vmcl_cache_stats(const vm_device_t *dev, vmcl_cache_stats_t *out) {
  memset(out, 0, sizeof(*out));
  vmcl_dev_t *d = vmcl_get(dev);
  if (!d || !d->cache) return;
  pthread_mutex_lock(&d->lock);
  *out = d->cache->stats;
  pthread_mutex_unlock(&d->lock);
}

/* Finds or creates the entry for (source, options). Lock held. */
static vm_status_t vmcl_lookup_locked(vmcl_program_cache_t *c, const char *source,
                                      int source_static, const char *options,
                                      vmcl_program_entry_t **out_entry) {
  vmcl_program_entry_t *e = source_static ? vmcl_find_static(c, source, options) : NULL;
  size_t source_len = e ? 0 : strlen(source);
  if (!e) e = vmcl_find_entry(c, source, source_len, options);
  if (e) {
    c->stats.memory_hits++;
    *out_entry = e;
    return VM_STATUS_OK;
  }
  vm_status_t st = VM_STATUS_OK;
  if (c->num_entries == c->cap_entries) {
    uint32_t cap = c->cap_entries ? c->cap_entries * 2 : 16;
    vmcl_program_entry_t **grown = realloc(c->entries, cap * sizeof(*grown));
    if (!grown) return vmcl_oom("program cache");
    c->entries = grown;
    c->cap_entries = cap;
  }
  e = calloc(1, sizeof(*e));
  if (!e) return vmcl_oom("program cache");
  e->source = malloc(source_len + 1);
  e->options = vmcl_strdup(options);
  size_t olen = strlen(options), slen = strlen(c->build_suffix);
  e->build_options = malloc(olen + 1 + slen + 1);
  if (e->build_options)
    snprintf(e->build_options, olen + 1 + slen + 1, "%s%s%s", options, olen && slen ? " " : "",
             c->build_suffix);
  if (!e->source || !e->options || !e->build_options) {
    st = vmcl_oom("program cache");
    goto fail;
  }
  memcpy(e->source, source, source_len + 1);
  e->static_source = source_static ? source : NULL;
  e->source_len = source_len;
  st = vmcl_compute_key(c, source, source_len, e->build_options, e->key);
  if (st) goto fail;

  if (c->dir && vmcl_load_binary(c, e)) {
    c->stats.disk_hits++;
    e->on_disk = 1;
  } else {
    st = vmcl_build_source(c, e);
    if (st) goto fail;
    e->on_disk = c->dir == NULL; /* nothing to save without a directory */
  }
  c->entries[c->num_entries++] = e;
  *out_entry = e;
  return VM_STATUS_OK;

fail:
  vmcl_entry_free(e);
  return st;
}

vm_status_t vmcl_get_kernel(vmcl_dev_t *d, const char *source, int source_static,
                            const char *options, const char *kernel_name, cl_kernel *out_kernel) {
  *out_kernel = NULL;
  if (!d || !d->cache) return vm_status_make(VM_INTERNAL, "vmcl_get_kernel: no device");
  if (!source || !kernel_name || !kernel_name[0])
    return vm_status_make(VM_INVALID_ARGUMENT, "vmcl_get_kernel: missing source or kernel name");
  if (!options) options = "";
  vmcl_program_cache_t *c = d->cache;
  pthread_mutex_lock(&d->lock);
  vmcl_program_entry_t *e = NULL;
  vm_status_t st = vmcl_lookup_locked(c, source, source_static, options, &e);
  if (!st) st = vmcl_entry_kernel(e, kernel_name, out_kernel);
  /* after a kernel exists: the driver's binary is complete (Mali) */
  if (!st && !e->on_disk) vmcl_save_binary(c, e);
  pthread_mutex_unlock(&d->lock);
  return st;
}
