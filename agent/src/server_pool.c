/* The worker threads and their queue (see server_internal.h). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "server_internal.h"
#include "vm/log.h"

/* Workers: each serves queued requests one at a time. A request that must
 * wait for a busy device keeps its worker, so when no other worker is idle
 * the pool grows by one (vma_on_block), up to VMA_MAX_EXTRA_WORKERS beyond
 * --workers: however many invocations queue behind a device, chunks of
 * other transfers find a worker. Extra workers retire as soon as they
 * finish a request while others are idle. */
static void *vma_worker_main(void *arg) {
  vma_worker_t *w = arg;
  vmagent_t *a = w->agent;
  pthread_mutex_lock(&a->pool_lock); /* the spawner counted us idle */
  for (;;) {
    while (!a->jobs_head && !atomic_load(&a->stopping))
      pthread_cond_wait(&a->jobs_cv, &a->pool_lock);
    if (atomic_load(&a->stopping)) break;
    vma_job_t *j = a->jobs_head;
    a->jobs_head = j->next;
    if (!a->jobs_head) a->jobs_tail = NULL;
    if (j->conn->queued-- == VMA_CONN_QUEUE_MAX) pthread_cond_broadcast(&a->space_cv);
    a->idle_workers--;
    pthread_mutex_unlock(&a->pool_lock);
    if (!atomic_load(&j->conn->closed)) vma_serve(j->conn, j->data, j->hdr_len, j->len);
    vma_conn_unref(j->conn);
    free(j);
    pthread_mutex_lock(&a->pool_lock);
    a->idle_workers++;
    if (w->extra && a->idle_workers > 1) break; /* others are idle: retire */
  }
  a->idle_workers--;
  pthread_mutex_unlock(&a->pool_lock);
  atomic_store(&w->exited, 1);
  return NULL;
}

/* Starts a worker in a free slot (reaping a retired one); pool_lock held.
 * Returns 0, or -1. */
int vma_spawn_locked(vmagent_t *a, int extra) {
  vma_worker_t *w = NULL;
  for (uint32_t i = 0; i < a->pool_size && !w; i++) {
    vma_worker_t *x = &a->workers[i];
    if (x->started && atomic_load(&x->exited)) { /* retired: reap the slot */
      pthread_join(x->thread, NULL);
      memset(x, 0, sizeof(*x));
    }
    if (!x->started) w = x;
  }
  if (!w) {
    if (!a->pool_full_logged) {
      a->pool_full_logged = 1;
      VM_LOGW("all %u workers are busy; further requests wait in the queue", a->pool_size);
    }
    return -1;
  }
  w->agent = a;
  w->extra = extra;
  atomic_init(&w->exited, 0);
  a->idle_workers++; /* idle until it takes a request */
  if (pthread_create(&w->thread, NULL, vma_worker_main, w) != 0) {
    a->idle_workers--;
    return -1;
  }
  w->started = 1;
  return 0;
}

void vma_on_block(vmagent_t *a) {
  pthread_mutex_lock(&a->pool_lock);
  if (!atomic_load(&a->stopping) && a->idle_workers == 0 && vma_spawn_locked(a, 1) != 0)
    VM_LOGD("cannot add a worker");
  pthread_mutex_unlock(&a->pool_lock);
}
