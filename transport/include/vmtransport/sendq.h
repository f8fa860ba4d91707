/* Send queues: messages written without blocking the thread that made
 * them. A message goes out at once as far as the socket takes it; what is
 * left waits in its connection's queue, written by one flusher thread
 * (for all queues) as the peer reads. Messages of one queue go out whole,
 * in the order they were sent. A queue whose peer reads nothing for the
 * write timeout, or whose unsent bytes pass its cap, fails: its failed()
 * callback runs once (NNG_ETIMEDOUT, NNG_EMSGSIZE or the write's error),
 * and it sends nothing more.
 *
 * Lock order: a queue's mu, then the flusher's; neither is held across
 * I/O or a callback.
 */
#ifndef VMTRANSPORT_SENDQ_H
#define VMTRANSPORT_SENDQ_H

#include <pthread.h>
#include <stdint.h>

#include "vmtransport/conn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A message to send. It heads its own heap block (free() releases it),
 * so queueing allocates nothing. */
typedef struct vmt_sendbuf {
  struct vmt_sendbuf *next;
  const uint8_t *p; /* the next byte to write */
  size_t left;
} vmt_sendbuf_t;

typedef struct vmt_flusher vmt_flusher_t;

typedef struct vmt_sendq {
  vmt_conn_t *conn;
  vmt_flusher_t *f;
  uint64_t cap;  /* most unsent bytes */
  uint64_t soft; /* vmt_sendq_wait_room waits while more are unsent */
  void (*failed)(void *ctx, int rv);
  void *ctx;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* the queue shrank, emptied, or closed */
  vmt_sendbuf_t *head, *tail;
  uint64_t bytes;
  int writing; /* one writer: a sender's try, or the flusher */
  int closed;
  int64_t progress_ns; /* the last write that moved bytes */
} vmt_sendq_t;

/* Starts the flusher thread: 0 or NNG_ENOMEM. */
int vmt_flusher_start(int32_t write_timeout_ms, vmt_flusher_t **out);
/* Stops it (every queue must be destroyed first). */
void vmt_flusher_stop(vmt_flusher_t *f);

int vmt_sendq_init(vmt_sendq_t *q, vmt_conn_t *c, vmt_flusher_t *f, uint64_t cap, uint64_t soft,
                   void (*failed)(void *ctx, int rv), void *ctx);
/* Takes b (its p and left set). Never waits. Silently dropped when q is
 * closed or failed. */
void vmt_sendq_send(vmt_sendq_t *q, vmt_sendbuf_t *b);
/* Waits while more than soft bytes are unsent: 0, or -1 once q is
 * closed. */
int vmt_sendq_wait_room(vmt_sendq_t *q);
/* Sends nothing more; what is queued is dropped; waiters wake. */
void vmt_sendq_close(vmt_sendq_t *q);
/* Closes q and waits until the flusher has let go of it. */
void vmt_sendq_destroy(vmt_sendq_t *q);

#ifdef __cplusplus
}
#endif
#endif /* VMTRANSPORT_SENDQ_H */
