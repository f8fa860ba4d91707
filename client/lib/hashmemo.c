/* The SHA-256 of executable files this process has read, so that uploading
 * the same file again costs one UploadBegin instead of reading and hashing
 * every byte (64 MiB: tens to hundreds of milliseconds, almost all of a
 * store-hit upload; docs/performance.md).
 *
 * An entry is keyed by the file's identity and change marks (device,
 * inode, size, mtime, ctime) and is only made from bytes read while those
 * marks stayed the same and were at least VMCI_MEMO_SETTLE_S older than the
 * start of the read: a file rewritten within one timestamp tick of being
 * hashed (git's "racily clean" case; FAT has 2 s ticks) never gets an entry.
 * Even a wrong entry cannot load wrong code: the agent hashes what it
 * receives, so a miss uploads the file's bytes and UploadCommit refuses
 * them with DATA_LOSS if they do not match the announced hash (the entry
 * is then dropped). */
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "vmc_internal.h"

#define VMCI_MEMO_SLOTS 32
#define VMCI_MEMO_SETTLE_S 2

typedef struct memo_entry {
  int used;
  uint64_t last_use;
  dev_t dev;
  ino_t ino;
  off_t size;
  struct timespec mtime, ctime;
  uint8_t sha[32];
} memo_entry_t;

static memo_entry_t g_memo[VMCI_MEMO_SLOTS];
static uint64_t g_tick;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

static int ts_eq(const struct timespec *a, const struct timespec *b) {
  return a->tv_sec == b->tv_sec && a->tv_nsec == b->tv_nsec;
}

static int same_file(const memo_entry_t *e, const struct stat *st) {
  return e->used && e->dev == st->st_dev && e->ino == st->st_ino && e->size == st->st_size &&
         ts_eq(&e->mtime, &st->st_mtim) && ts_eq(&e->ctime, &st->st_ctim);
}

static int same_stat(const struct stat *a, const struct stat *b) {
  return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
         ts_eq(&a->st_mtim, &b->st_mtim) && ts_eq(&a->st_ctim, &b->st_ctim);
}

int vmci_memo_get(const struct stat *st, uint8_t out[32]) {
  int hit = 0;
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < VMCI_MEMO_SLOTS && !hit; i++) {
    if (same_file(&g_memo[i], st)) {
      memcpy(out, g_memo[i].sha, 32);
      g_memo[i].last_use = ++g_tick;
      hit = 1;
    }
  }
  pthread_mutex_unlock(&g_mu);
  return hit;
}

void vmci_memo_put(const struct stat *before, const struct stat *after, time_t read_start,
                   const uint8_t sha[32]) {
  if (!S_ISREG(before->st_mode) || !same_stat(before, after)) return;
  if (before->st_mtim.tv_sec > read_start - VMCI_MEMO_SETTLE_S ||
      before->st_ctim.tv_sec > read_start - VMCI_MEMO_SETTLE_S)
    return; /* changed too recently to trust its marks */
  pthread_mutex_lock(&g_mu);
  int slot = 0;
  for (int i = 0; i < VMCI_MEMO_SLOTS; i++) {
    memo_entry_t *e = &g_memo[i];
    if (e->used && e->dev == before->st_dev && e->ino == before->st_ino) {
      slot = i; /* the same file, changed since: replace its entry */
      break;
    }
    if (!e->used || e->last_use < g_memo[slot].last_use) slot = i;
    if (!e->used) break;
  }
  memo_entry_t *e = &g_memo[slot];
  e->used = 1;
  e->last_use = ++g_tick;
  e->dev = before->st_dev;
  e->ino = before->st_ino;
  e->size = before->st_size;
  e->mtime = before->st_mtim;
  e->ctime = before->st_ctim;
  memcpy(e->sha, sha, 32);
  pthread_mutex_unlock(&g_mu);
}

void vmci_memo_forget(const struct stat *st) {
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < VMCI_MEMO_SLOTS; i++)
    if (g_memo[i].used && g_memo[i].dev == st->st_dev && g_memo[i].ino == st->st_ino)
      memset(&g_memo[i], 0, sizeof(g_memo[i]));
  pthread_mutex_unlock(&g_mu);
}
