/* The executable store: content-addressed by SHA-256.
 *
 * Memory: a map hash -> loaded executable, shared by every session and VM
 * that uses it (reference counted; freed when the last user lets go, since
 * weights can be large and the disk copy makes a reload cheap).
 *
 * Disk: <cache_dir>/executables/<hex>.vmx, written atomically
 * (vm_write_file_atomic: temp file + rename) and only after the bytes hashed
 * to their name and passed the verifier, so a file there is complete unless
 * the disk itself corrupted it. Every read re-hashes the file: a corrupt or
 * unloadable file is deleted and treated as a miss (ggml's cache once served
 * truncated files). The total size is capped with LRU eviction; recency is
 * kept in memory and mirrored into the files' mtime so it survives restarts
 * (the list is rebuilt from mtimes at start). The file is written before
 * the upload is acknowledged: when it cannot be (disk full), older files
 * are evicted if that makes room, else the upload fails with
 * RESOURCE_EXHAUSTED and nothing of it is kept (vma_disk_write).
 *
 * One lock covers both maps. Disk reads happen under it: lookups of
 * different executables serialise, which keeps the code simple and is cheap
 * next to the upload it saves.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/time.h>
#include <unistd.h>

#include "store.h"

#include <pthread.h>
#include <time.h>
#include "vmrpc/log.h"

typedef struct vma_disk_entry {
  uint8_t hash[VM_SHA256_BYTES];
  uint64_t size;
  int64_t stamp_ns;                   /* last use (mtime) */
  struct vma_disk_entry *prev, *next; /* head = most recently used */
} vma_disk_entry_t;

struct vma_store {
  pthread_mutex_t lock;
  char *dir; /* <cache_dir>/executables, or NULL for memory only */
  uint64_t max_bytes;
  vm_limits_t limits;
  vma_exec_entry_t *loaded;
  uint32_t num_loaded;
  vma_disk_entry_t *head, *tail;
  uint64_t disk_bytes;
  uint32_t disk_entries;
};

/* mkdir -p; returns 0 or -1 (errno). */
static int vma_mkdirs(const char *path) {
  char buf[4096];
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof(buf)) {
    errno = ENAMETOOLONG;
    return -1;
  }
  memcpy(buf, path, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (buf[i] == '/' || buf[i] == '\0') {
      char c = buf[i];
      buf[i] = '\0';
      if (mkdir(buf, 0700) != 0 && errno != EEXIST) return -1;
      buf[i] = c;
    }
  }
  return 0;
}

static void vma_store_path(const vma_store_t *s, const uint8_t hash[VM_SHA256_BYTES], char *out,
                           size_t out_len) {
  char hex[2 * VM_SHA256_BYTES + 1];
  vm_sha256_hex(hash, hex);
  snprintf(out, out_len, "%s/%s.vmx", s->dir, hex);
}

static int vma_hex_nibble(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

/* Parses "<64 lower-case hex>.vmx"; returns 0 or -1. */
static int vma_parse_name(const char *name, uint8_t out[VM_SHA256_BYTES]) {
  if (strlen(name) != 2 * VM_SHA256_BYTES + 4 || strcmp(name + 2 * VM_SHA256_BYTES, ".vmx") != 0)
    return -1;
  for (int i = 0; i < VM_SHA256_BYTES; i++) {
    int hi = vma_hex_nibble(name[2 * i]), lo = vma_hex_nibble(name[2 * i + 1]);
    if (hi < 0 || lo < 0) return -1;
    out[i] = (uint8_t)(hi << 4 | lo);
  }
  return 0;
}

static void vma_lru_unlink(vma_store_t *s, vma_disk_entry_t *d) {
  if (d->prev)
    d->prev->next = d->next;
  else
    s->head = d->next;
  if (d->next)
    d->next->prev = d->prev;
  else
    s->tail = d->prev;
  d->prev = d->next = NULL;
}

static void vma_lru_push_head(vma_store_t *s, vma_disk_entry_t *d) {
  d->prev = NULL;
  d->next = s->head;
  if (s->head)
    s->head->prev = d;
  else
    s->tail = d;
  s->head = d;
}

/* Inserts keeping the list ordered by stamp, newest first (start-up scan). */
static void vma_lru_insert_sorted(vma_store_t *s, vma_disk_entry_t *d) {
  vma_disk_entry_t *at = s->head;
  while (at && at->stamp_ns >= d->stamp_ns) at = at->next;
  if (!at) {
    d->next = NULL;
    d->prev = s->tail;
    if (s->tail)
      s->tail->next = d;
    else
      s->head = d;
    s->tail = d;
    return;
  }
  d->next = at;
  d->prev = at->prev;
  if (at->prev)
    at->prev->next = d;
  else
    s->head = d;
  at->prev = d;
}

/* Lists a store file: at its place by stamp (sorted, while scanning) or as
 * the most recently used. NULL when out of memory. Lock held. */
static vma_disk_entry_t *vma_disk_add(vma_store_t *s, const uint8_t hash[VM_SHA256_BYTES],
                                      uint64_t size, int64_t stamp_ns, int sorted) {
  vma_disk_entry_t *d = calloc(1, sizeof(*d));
  if (!d) return NULL;
  memcpy(d->hash, hash, VM_SHA256_BYTES);
  d->size = size;
  d->stamp_ns = stamp_ns;
  if (sorted)
    vma_lru_insert_sorted(s, d);
  else
    vma_lru_push_head(s, d);
  s->disk_bytes += size;
  s->disk_entries++;
  return d;
}

static vma_disk_entry_t *vma_disk_find(vma_store_t *s, const uint8_t hash[VM_SHA256_BYTES]) {
  for (vma_disk_entry_t *d = s->head; d; d = d->next)
    if (memcmp(d->hash, hash, VM_SHA256_BYTES) == 0) return d;
  return NULL;
}

/* Deletes a disk entry and its file. Lock held. */
static void vma_disk_drop(vma_store_t *s, vma_disk_entry_t *d) {
  char path[4200];
  vma_store_path(s, d->hash, path, sizeof(path));
  if (unlink(path) != 0 && errno != ENOENT)
    VM_LOGW("store: cannot delete %s: %s", path, strerror(errno));
  vma_lru_unlink(s, d);
  s->disk_bytes -= d->size;
  s->disk_entries--;
  free(d);
}

/* Evicts least recently used files until the cap holds; keep is spared. */
static void vma_disk_evict(vma_store_t *s, const vma_disk_entry_t *keep) {
  vma_disk_entry_t *d = s->tail;
  while (d && s->disk_bytes > s->max_bytes) {
    vma_disk_entry_t *prev = d->prev;
    if (d != keep) {
      char hex[2 * VM_SHA256_BYTES + 1];
      vm_sha256_hex(d->hash, hex);
      VM_LOGI("store: evicting %s (%llu bytes) to stay under %llu bytes", hex,
              (unsigned long long)d->size, (unsigned long long)s->max_bytes);
      vma_disk_drop(s, d);
    }
    d = prev;
  }
}

static int64_t vma_now_real_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Marks a file used now: memory LRU and mtime (for the next start). */
static void vma_disk_touch(vma_store_t *s, vma_disk_entry_t *d) {
  vma_lru_unlink(s, d);
  vma_lru_push_head(s, d);
  d->stamp_ns = vma_now_real_ns();
  char path[4200];
  vma_store_path(s, d->hash, path, sizeof(path));
  (void)utimensat(AT_FDCWD, path, NULL, 0);
}

/* Whether the process that names a temp file ("PID.N...") still runs; a
 * name without a PID counts as dead. */
static int vma_tmp_writer_alive(const char *pid_part) {
  char *end;
  errno = 0;
  long pid = strtol(pid_part, &end, 10);
  if (errno || end == pid_part || *end != '.' || pid <= 0 || pid > INT32_MAX) return 0;
  if ((pid_t)pid == getpid()) return 1;
  return kill((pid_t)pid, 0) == 0 || errno == EPERM;
}

static void vma_store_scan(vma_store_t *s) {
  DIR *dir = opendir(s->dir);
  if (!dir) return;
  struct dirent *de;
  while ((de = readdir(dir)) != NULL) {
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", s->dir, de->d_name);
    /* Leftovers of an atomic write interrupted by a crash: NAME.vmx.tmp.PID.N
     * (vm_write_file_atomic). Another live agent sharing this folder may be
     * writing one right now, so only a dead writer's file goes. */
    const char *t = strstr(de->d_name, ".vmx.tmp.");
    if (t) {
      if (!vma_tmp_writer_alive(t + strlen(".vmx.tmp."))) (void)unlink(path);
      continue;
    }
    uint8_t hash[VM_SHA256_BYTES];
    if (vma_parse_name(de->d_name, hash) != 0) continue;
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
    int64_t stamp = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    if (!vma_disk_add(s, hash, (uint64_t)st.st_size, stamp, 1)) break;
  }
  closedir(dir);
  vma_disk_evict(s, NULL);
}

vm_status_t vma_store_open(const char *dir, uint64_t max_bytes, uint64_t max_exec_bytes,
                           vma_store_t **out_store) {
  *out_store = NULL;
  vma_store_t *s = calloc(1, sizeof(*s));
  if (!s) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory opening the store");
  s->max_bytes = max_bytes;
  s->limits = vm_limits_default();
  s->limits.max_file_bytes = max_exec_bytes;
  if (pthread_mutex_init(&s->lock, NULL) != 0) {
    free(s);
    return vm_status_make(VM_INTERNAL, "pthread_mutex_init failed");
  }
  if (dir && *dir) {
    size_t n = strlen(dir) + sizeof("/executables");
    s->dir = malloc(n);
    if (!s->dir) {
      vma_store_close(s);
      return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory opening the store");
    }
    snprintf(s->dir, n, "%s/executables", dir);
    if (vma_mkdirs(s->dir) != 0) {
      vm_status_t st = vm_status_make(VM_UNAVAILABLE, "cannot create the executable store %s: %s",
                                      s->dir, strerror(errno));
      vma_store_close(s);
      return st;
    }
    vma_store_scan(s);
  }
  *out_store = s;
  return VM_STATUS_OK;
}

void vma_store_close(vma_store_t *s) {
  if (!s) return;
  while (s->loaded) {
    vma_exec_entry_t *e = s->loaded;
    s->loaded = e->next;
    if (e->refs) VM_LOGW("store: executable still referenced %u times at close", e->refs);
    vm_executable_free(e->exec);
    free(e);
  }
  while (s->head) {
    vma_disk_entry_t *d = s->head;
    s->head = d->next;
    free(d);
  }
  pthread_mutex_destroy(&s->lock);
  free(s->dir);
  free(s);
}

static vma_exec_entry_t *vma_loaded_find(vma_store_t *s, const uint8_t hash[VM_SHA256_BYTES]) {
  for (vma_exec_entry_t *e = s->loaded; e; e = e->next)
    if (memcmp(e->hash, hash, VM_SHA256_BYTES) == 0) return e;
  return NULL;
}

static vma_exec_entry_t *vma_loaded_add(vma_store_t *s, const uint8_t hash[VM_SHA256_BYTES],
                                        uint64_t size, vm_executable_t *exec) {
  vma_exec_entry_t *e = calloc(1, sizeof(*e));
  if (!e) return NULL;
  memcpy(e->hash, hash, VM_SHA256_BYTES);
  e->size = size;
  e->exec = exec;
  e->refs = 1;
  e->next = s->loaded;
  s->loaded = e;
  s->num_loaded++;
  return e;
}

vm_status_t vma_store_lookup(vma_store_t *s, const uint8_t hash[VM_SHA256_BYTES], uint64_t size,
                             vma_exec_entry_t **out_entry) {
  *out_entry = NULL;
  vm_status_t st = VM_STATUS_OK;
  uint8_t *data = NULL;
  size_t len = 0;
  pthread_mutex_lock(&s->lock);
  vma_exec_entry_t *e = vma_loaded_find(s, hash);
  if (e) {
    /* Same hash, other size: the client is confused; let the upload's
     * hash check tell it. */
    if (e->size == size) {
      e->refs++;
      *out_entry = e;
    }
    goto done;
  }
  if (!s->dir) goto done;
  char path[4200];
  vma_store_path(s, hash, path, sizeof(path));
  vma_disk_entry_t *d = vma_disk_find(s, hash);
  struct stat fst;
  if (!d && stat(path, &fst) == 0 && S_ISREG(fst.st_mode) && (uint64_t)fst.st_size == size) {
    /* Written since the scan by another process sharing the directory (the
     * worker processes of an agent with session isolation). */
    d = vma_disk_add(s, hash, size, (int64_t)fst.st_mtim.tv_sec * 1000000000 + fst.st_mtim.tv_nsec,
                     0);
  }
  if (!d || d->size != size) goto done;

  char hex[2 * VM_SHA256_BYTES + 1];
  vm_sha256_hex(hash, hex);
  vm_status_t rst = vm_read_file(path, s->limits.max_file_bytes, &data, &len);
  if (rst) {
    VM_LOGW("store: dropping %s: %s", hex, vm_status_message(rst));
    vm_status_free(rst);
    vma_disk_drop(s, d);
    goto done;
  }
  uint8_t got[VM_SHA256_BYTES];
  vm_sha256(data, len, got);
  if (len != size || memcmp(got, hash, VM_SHA256_BYTES) != 0) {
    VM_LOGW("store: %s is corrupt (its bytes do not hash to its name); deleted", hex);
    vma_disk_drop(s, d);
    goto done;
  }
  vm_executable_t *exec = NULL;
  vm_status_t lst = vm_executable_load(data, len, &s->limits, &exec);
  if (lst) {
    VM_LOGW("store: %s does not load (%s); deleted", hex, vm_status_message(lst));
    vm_status_free(lst);
    vma_disk_drop(s, d);
    goto done;
  }
  e = vma_loaded_add(s, hash, size, exec);
  if (!e) {
    vm_executable_free(exec);
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory loading a stored executable");
    goto done;
  }
  vma_disk_touch(s, d);
  *out_entry = e;
done:
  pthread_mutex_unlock(&s->lock);
  free(data);
  return st;
}

/* Bytes the file system holding the store can still give us (0 if
 * unknown). */
static uint64_t vma_disk_available(const vma_store_t *s) {
  struct statvfs v;
  if (statvfs(s->dir, &v) != 0) return 0;
  return (uint64_t)v.f_bavail * v.f_frsize;
}

/* Room for a file of `size` bytes: its blocks plus the file system's own
 * bookkeeping. */
#define VMA_DISK_SLACK (16u << 10)

/* Writes a new store file and lists it. The file system full (ENOSPC,
 * EDQUOT) while older store files would free enough: evicts those, least
 * recently used first, only as many as needed, and writes once more; when
 * eviction cannot help (a file-size limit, a disk filled by others) nothing
 * is evicted. On failure no file or temporary file is left. Lock held. */
static vm_status_t vma_disk_write(vma_store_t *s, const uint8_t hash[VM_SHA256_BYTES],
                                  const uint8_t *data, size_t size) {
  char path[4200];
  vma_store_path(s, hash, path, sizeof(path));
  vm_status_t st = vm_write_file_atomic(path, data, size);
  if (st && vm_status_code(st) == VM_RESOURCE_EXHAUSTED && s->tail) {
    uint64_t need = (uint64_t)size + VMA_DISK_SLACK, avail = vma_disk_available(s);
    if (avail < need && avail + s->disk_bytes >= need) {
      while (s->tail && vma_disk_available(s) < need) {
        char hex[2 * VM_SHA256_BYTES + 1];
        vm_sha256_hex(s->tail->hash, hex);
        VM_LOGI("store: disk full; evicting %s (%llu bytes) to make room", hex,
                (unsigned long long)s->tail->size);
        vma_disk_drop(s, s->tail);
      }
      vm_status_free(st);
      st = vm_write_file_atomic(path, data, size);
    }
  }
  if (st) {
    VM_LOGW("store: cannot keep an executable of %zu bytes: %s", size, vm_status_message(st));
    /* The client learns what to do; the agent's paths stay in its log. */
    vm_status_t out = vm_status_make(
        vm_status_code(st) == VM_RESOURCE_EXHAUSTED ? VM_RESOURCE_EXHAUSTED : VM_UNAVAILABLE,
        "the agent's executable store cannot keep this executable (%zu bytes): %s; nothing was "
        "stored. Free disk space in the agent's --cache-dir (or restart it with a smaller "
        "--cache-max-bytes, or --cache-dir '' to keep executables in memory only), then upload "
        "again",
        size,
        vm_status_code(st) == VM_RESOURCE_EXHAUSTED
            ? "its disk is full or a file size limit was reached"
            : "writing the store file failed (see the agent's log)");
    vm_status_free(st);
    return out;
  }
  vma_disk_entry_t *d = vma_disk_add(s, hash, size, vma_now_real_ns(), 0);
  if (!d) { /* an unlisted file is only found again at the next start */
    (void)unlink(path);
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory listing a stored executable");
  }
  vma_disk_evict(s, d);
  return VM_STATUS_OK;
}

vm_status_t vma_store_insert(vma_store_t *s, const uint8_t hash[VM_SHA256_BYTES],
                             const uint8_t *data, size_t size, vma_exec_entry_t **out_entry) {
  *out_entry = NULL;
  /* The verifier runs outside the lock: it is the slow part. */
  vm_executable_t *exec = NULL;
  VM_RETURN_IF_ERROR(vm_executable_load(data, size, &s->limits, &exec));
  pthread_mutex_lock(&s->lock);
  vma_exec_entry_t *e = vma_loaded_find(s, hash);
  if (e) { /* another session committed the same bytes meanwhile */
    e->refs++;
    pthread_mutex_unlock(&s->lock);
    vm_executable_free(exec);
    *out_entry = e;
    return VM_STATUS_OK;
  }
  /* Disk first: an upload the store cannot keep fails as a whole, so what
   * a client was told is stored is stored (an executable larger than the
   * whole --cache-max-bytes is the operator's choice: memory only). */
  if (s->dir && size <= s->max_bytes) {
    vma_disk_entry_t *d = vma_disk_find(s, hash);
    vm_status_t wst = d ? VM_STATUS_OK : vma_disk_write(s, hash, data, size);
    if (wst) {
      pthread_mutex_unlock(&s->lock);
      vm_executable_free(exec);
      return wst;
    }
    if (d) vma_disk_touch(s, d);
  }
  e = vma_loaded_add(s, hash, size, exec);
  pthread_mutex_unlock(&s->lock);
  if (!e) { /* a stored file stays: it is complete and valid */
    vm_executable_free(exec);
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory keeping an executable");
  }
  *out_entry = e;
  return VM_STATUS_OK;
}

void vma_store_retain(vma_store_t *s, vma_exec_entry_t *e) {
  pthread_mutex_lock(&s->lock);
  e->refs++;
  pthread_mutex_unlock(&s->lock);
}

void vma_store_release(vma_store_t *s, vma_exec_entry_t *e) {
  if (!e) return;
  vm_executable_t *to_free = NULL;
  pthread_mutex_lock(&s->lock);
  if (--e->refs == 0) {
    vma_exec_entry_t **pp = &s->loaded;
    while (*pp && *pp != e) pp = &(*pp)->next;
    if (*pp) *pp = e->next;
    s->num_loaded--;
    to_free = e->exec;
    free(e);
  }
  pthread_mutex_unlock(&s->lock);
  vm_executable_free(to_free);
}

void vma_store_stats(vma_store_t *s, uint64_t *out_disk_bytes, uint32_t *out_disk_entries,
                     uint32_t *out_loaded) {
  pthread_mutex_lock(&s->lock);
  *out_disk_bytes = s->disk_bytes;
  *out_disk_entries = s->disk_entries;
  *out_loaded = s->num_loaded;
  pthread_mutex_unlock(&s->lock);
}
