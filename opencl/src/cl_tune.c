/* The device's tuning table: for an operator with several formulations
 * (cl.conv2d: direct kernel or im2col + GEMM), which one measured fastest
 * on this device for a shape, so that it is measured once and never
 * guessed. Keys are short strings the operator builds from the shape
 * ("conv2d f32 n1 c256 h1 w512 ..."); a choice is a small integer.
 *
 * With a cache directory (vmagent --cache-dir) the table persists in
 * <dir>/tune-<identity>.txt, identity being the SHA-256 of the device
 * name, driver version, platform name and version (vmcl_cache_identity):
 * another driver or device reads another file. One line per choice,
 * "KEY<TAB>CHOICE<TAB>DETAIL", appended as choices are made. The file is
 * read as untrusted input: lines that are too long, keys with other
 * characters, choices out of range and entries past the table's limit are
 * skipped (and said once in the log); the operator then measures again.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cl_internal.h"
#include "vmrpc/log.h"

#define TUNE_KEY_MAX 160       /* bytes of a key, NUL included */
#define TUNE_ENTRIES_MAX 4096  /* shapes per device */
#define TUNE_FILE_MAX (1u << 20)
#define TUNE_CHOICE_MAX 15

typedef struct tune_entry {
  char key[TUNE_KEY_MAX];
  int choice;
} tune_entry_t;

struct vmcl_tune {
  tune_entry_t *entries;
  uint32_t n, cap;
  char *path; /* NULL: memory only */
};

static int key_ok(const char *k, size_t n) {
  if (n == 0 || n >= TUNE_KEY_MAX) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = k[i];
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == ' ' || c == '_' || c == '-'))
      return 0;
  }
  return 1;
}

static tune_entry_t *find(vmcl_tune_t *t, const char *key) {
  for (uint32_t i = 0; i < t->n; i++)
    if (strcmp(t->entries[i].key, key) == 0) return &t->entries[i];
  return NULL;
}

/* Sets key's choice in memory; 0, or -1 when the table is full or out of
 * memory (the operator then measures each time the shape first comes in a
 * process: correct, only slower). */
static int put(vmcl_tune_t *t, const char *key, int choice) {
  tune_entry_t *e = find(t, key);
  if (e) {
    e->choice = choice;
    return 0;
  }
  if (t->n >= TUNE_ENTRIES_MAX) return -1;
  if (t->n == t->cap) {
    uint32_t cap = t->cap ? t->cap * 2 : 32;
    tune_entry_t *ne = realloc(t->entries, cap * sizeof(*ne));
    if (!ne) return -1;
    t->entries = ne;
    t->cap = cap;
  }
  e = &t->entries[t->n++];
  snprintf(e->key, sizeof(e->key), "%s", key);
  e->choice = choice;
  return 0;
}

/* Reads the table's file (missing: empty table). */
static void load(vmcl_tune_t *t) {
  uint8_t *data = NULL;
  size_t size = 0;
  vm_status_t st = vm_read_file(t->path, TUNE_FILE_MAX, &data, &size);
  if (st) {
    if (vm_status_code(st) != VM_NOT_FOUND)
      VM_LOGW("tuning table %s not read (%s): measuring again", t->path, vm_status_message(st));
    vm_status_free(st);
    return;
  }
  uint32_t bad = 0;
  size_t i = 0;
  while (i < size) {
    const char *line = (const char *)data + i;
    const char *nl = memchr(line, '\n', size - i);
    size_t len = nl ? (size_t)(nl - line) : size - i;
    i += len + 1;
    if (len == 0) continue;
    const char *tab = memchr(line, '\t', len);
    char *end = NULL;
    long choice = -1;
    if (tab && tab + 1 < line + len) {
      char num[8];
      size_t nn = 0;
      for (const char *p = tab + 1; p < line + len && *p != '\t' && nn < sizeof(num) - 1; p++)
        num[nn++] = *p;
      num[nn] = '\0';
      choice = strtol(num, &end, 10);
      if (end == num || *end) choice = -1;
    }
    if (!tab || !key_ok(line, (size_t)(tab - line)) || choice < 0 || choice > TUNE_CHOICE_MAX) {
      bad++;
      continue;
    }
    char key[TUNE_KEY_MAX];
    memcpy(key, line, (size_t)(tab - line));
    key[tab - line] = '\0';
    if (put(t, key, (int)choice) != 0) {
      bad++;
      break;
    }
  }
  free(data);
  if (bad)
    VM_LOGW("tuning table %s: %u line(s) skipped (malformed or over the %u-entry limit)", t->path,
            bad, TUNE_ENTRIES_MAX);
}

/* The table, created (and its file read) on first use. Lock held. */
static vmcl_tune_t *table(vmcl_dev_t *d) {
  if (d->tune) return d->tune;
  vmcl_tune_t *t = calloc(1, sizeof(*t));
  if (!t) return NULL;
  const char *dir = vmcl_cache_dir(d->cache);
  if (dir) {
    char id[2 * VM_SHA256_BYTES + 1];
    vmcl_cache_identity(d->cache, id);
    size_t n = strlen(dir) + sizeof("/tune-.txt") + 16;
    t->path = malloc(n);
    if (t->path) {
      /* 16 hex digits name the identity well enough for one directory */
      snprintf(t->path, n, "%s/tune-%.16s.txt", dir, id);
      load(t);
    }
  }
  d->tune = t;
  return t;
}

int vmcl_tune_lookup(vmcl_dev_t *d, const char *key) {
  pthread_mutex_lock(&d->lock);
  vmcl_tune_t *t = table(d);
  tune_entry_t *e = t ? find(t, key) : NULL;
  int choice = e ? e->choice : -1;
  pthread_mutex_unlock(&d->lock);
  return choice;
}

void vmcl_tune_record(vmcl_dev_t *d, const char *key, int choice, const char *detail) {
  if (!key_ok(key, strlen(key)) || choice < 0 || choice > TUNE_CHOICE_MAX) return;
  pthread_mutex_lock(&d->lock);
  vmcl_tune_t *t = table(d);
  if (t && put(t, key, choice) == 0 && t->path) {
    /* one write(2) of a whole line with O_APPEND: agents sharing the
     * directory interleave lines, never parts of lines */
    char line[TUNE_KEY_MAX + 128];
    int n = snprintf(line, sizeof(line), "%s\t%d\t%s\n", key, choice, detail ? detail : "");
    if (n > 0 && (size_t)n >= sizeof(line)) {
      line[sizeof(line) - 1] = '\n';
      n = (int)sizeof(line);
    }
    int fd = open(t->path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, line, (size_t)n) != n)
      VM_LOGW("tuning table %s: choice for '%s' not saved", t->path, key);
    if (fd >= 0) close(fd);
  }
  pthread_mutex_unlock(&d->lock);
}

void vmcl_tune_destroy(vmcl_tune_t *t) {
  if (!t) return;
  free(t->entries);
  free(t->path);
  free(t);
}
