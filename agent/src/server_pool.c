/* The pool threads and their queue (server_pool.h). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "server_conn.h"
#include "server_pool.h"
#include "vmrpc/log.h"

/* Workers: each serves queued requests one at a time. A request that must
 * wait for a busy device keeps its worker, so when no other worker is idle
 * the pool grows by one (vma_on_block), up to VMA_MAX_EXTRA_THREADS beyond
 * --workers: however many invocations queue behind a device, chunks of
 * other transfers find a worker. Extra workers retire as soon as they
 * finish a request while others are idle. */
static void *vma_pool_thread_main(void *arg) {
  vma_pool_thread_t *w = arg;
  vmagent_t *a = w->agent;
  pthread_mutex_lock(&a->srv.pool_lock); /* the spawner counted us idle */
  for (;;) {
    while (!a->srv.jobs_head && !atomic_load(&a->stopping))
      pthread_cond_wait(&a->srv.jobs_cv, &a->srv.pool_lock);
    if (atomic_load(&a->stopping)) break;
    vma_job_t *j = a->srv.jobs_head;
    a->srv.jobs_head = j->next;
    if (!a->srv.jobs_head) a->srv.jobs_tail = NULL;
    if (j->conn->queued-- == VMA_CONN_QUEUE_MAX) pthread_cond_broadcast(&a->srv.space_cv);
    a->srv.idle_threads--;
    pthread_mutex_unlock(&a->srv.pool_lock);
    if (!atomic_load(&j->conn->closed)) vma_serve(j->conn, j->data, j->hdr_len, j->len);
    vma_conn_unref(j->conn);
    free(j);
    pthread_mutex_lock(&a->srv.pool_lock);
    a->srv.idle_threads++;
    if (w->extra && a->srv.idle_threads > 1) break; /* others are idle: retire */
  }
  a->srv.idle_threads--;
  pthread_mutex_unlock(&a->srv.pool_lock);
  atomic_store(&w->exited, 1);
  return NULL;
}

/* Starts a worker in a free slot (reaping a retired one); pool_lock held.
 * Returns 0, or -1. */
int vma_spawn_locked(vmagent_t *a, int extra) {
  vma_pool_thread_t *w = NULL;
  for (uint32_t i = 0; i < a->srv.pool_size && !w; i++) {
    vma_pool_thread_t *x = &a->srv.threads[i];
    if (x->started && atomic_load(&x->exited)) { /* retired: reap the slot */
      pthread_join(x->thread, NULL);
      memset(x, 0, sizeof(*x));
    }
    if (!x->started) w = x;
  }
  if (!w) {
    if (!a->srv.pool_full_logged) {
      a->srv.pool_full_logged = 1;
      VM_LOGW("all %u workers are busy; further requests wait in the queue", a->srv.pool_size);
    }
    return -1;
  }
  w->agent = a;
  w->extra = extra;
  atomic_init(&w->exited, 0);
  a->srv.idle_threads++; /* idle until it takes a request */
  if (pthread_create(&w->thread, NULL, vma_pool_thread_main, w) != 0) {
    a->srv.idle_threads--;
    return -1;
  }
  w->started = 1;
  return 0;
}

void vma_on_block(vmagent_t *a) {
  pthread_mutex_lock(&a->srv.pool_lock);
  if (!atomic_load(&a->stopping) && a->srv.idle_threads == 0 && vma_spawn_locked(a, 1) != 0)
    VM_LOGD("cannot add a worker");
  pthread_mutex_unlock(&a->srv.pool_lock);
}
