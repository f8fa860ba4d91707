/* The request/reply multiplexer: many calls in flight on one connection,
 * each answered by the reply that echoes its id.
 *
 * A caller registers its call and writes its request (whole, one writer
 * at a time: wmu). Then it waits. Whichever waiting thread finds nobody
 * reading takes the reading turn: it reads messages one by one, hands
 * each to the call it answers and goes on until one of its own calls is
 * done or its deadline passes, then gives the turn up; the others sleep
 * on cv meanwhile. So a lone call costs one write and one read on the
 * caller's own thread. A call may name a destination for its reply's
 * payload: a reply whose payload has exactly that size is read straight
 * from the socket into it. When the connection fails (a write cut short,
 * a read error, a malformed reply) every call in flight completes with
 * NNG_ECONNSHUT and every later one fails at once: the mux is lost.
 *
 * A call may instead bring its own buffer for a reply of any size
 * (alloc): the first msgs.peek bytes of the reply's body go to the call's
 * head[], the rest straight from the socket into what alloc gives once
 * the size is known. The agent<->worker link reads every reply so.
 *
 * The serving end of a connection uses the same mux: its threads take the
 * reading turn in turn (vmt_mux_next: one reads the next request while
 * the others wait, then passes the turn on with vmt_mux_pass) and write
 * replies whole, one at a time (vmt_mux_reply). The worker process of
 * session isolation serves its link so.
 *
 * The mux knows the frame (prefix, id word) but not the body: message
 * buffers and the payload's place in a body come from the caller's
 * vmt_mux_msgs_t.
 *
 * Lock order: wmu before mu. mu is never held across I/O, nor while a
 * msgs or alloc callback runs; wmu only by the thread writing a message.
 * A caller may hold a lock of its own while it calls in (the agent holds
 * its isolation lock for vmt_mux_is_done); no callback takes such a lock.
 */
#ifndef VMTRANSPORT_MUX_H
#define VMTRANSPORT_MUX_H

#include <pthread.h>
#include <stdint.h>
#include <sys/uio.h>

#include "vmtransport/conn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Body bytes a reply may be told apart by (vmt_mux_msgs_t.peek). */
#define VMT_MUX_PEEK_MAX 64

/* One call in flight: registered until its reply or the loss of the
 * connection completes it (fields under the mux's mu). */
typedef struct vmt_call {
  struct vmt_call *next;
  uint32_t id;  /* the id word its request carries (high bit set) */
  int done;
  int rv;       /* 0 when the reply came, else an nng error */
  void *reply;  /* the reply (a buffer from msgs.get) */
  /* Where a reply payload of exactly dst_len bytes goes. */
  uint8_t *dst;
  size_t dst_len;
  int filling;  /* the reader writes into dst now */
  uint64_t tag; /* the caller's */
  /* Or (alloc not NULL): any reply of at least msgs.peek body bytes is
   * read here, those bytes into head[] and the rest, reply_len bytes,
   * into alloc(actx, reply_len) (NULL: no memory, the mux is lost with
   * NNG_ENOMEM). reply stays NULL. */
  uint8_t *(*alloc)(void *actx, size_t len);
  void *actx;
  uint8_t head[VMT_MUX_PEEK_MAX];
  size_t reply_len;
} vmt_call_t;

/* The caller's message buffers and body format. */
typedef struct vmt_mux_msgs {
  void *ctx;
  /* A buffer for size bytes: its handle, *mem its bytes; NULL: none. */
  void *(*get)(void *ctx, size_t size, uint8_t **mem);
  void (*put)(void *ctx, void *msg);
  /* A reply was read into msg: its body is mem[off, off+len); the
   * payload went to ext (ext_len bytes; NULL: it is in the body). */
  void (*received)(void *ctx, void *msg, size_t off, size_t len, uint8_t *ext, size_t ext_len);
  /* Bytes at the end of a body_len-byte body that are its payload, told
   * from its first peek bytes (0: none or unknown). */
  uint64_t (*payload_len)(const uint8_t *head, uint64_t body_len);
  size_t peek; /* at most VMT_MUX_PEEK_MAX */
  /* A reply that no call waits for loses the mux (NNG_EPROTO) instead of
   * being dropped: for a peer whose calls are never given up, where such
   * a reply can only be a fault. */
  int strict;
} vmt_mux_msgs_t;

typedef struct vmt_mux {
  vmt_conn_t *conn;
  vmt_reader_t *rd;
  vmt_mux_msgs_t msgs;
  uint64_t max_msg;    /* longest reply, id included */
  int32_t io_timeout_ms; /* write waits, and the rest of a begun reply */
  pthread_mutex_t wmu;   /* one request written at a time; before mu */
  pthread_mutex_t mu;
  pthread_cond_t cv; /* a call completed, or the reading turn is free */
  pthread_cond_t turn_cv; /* the serving end's reading turn is free */
  vmt_call_t *calls;
  int reading;
  int lost, lost_rv;
} vmt_mux_t;

/* Sets m up over c (still the caller's): 0 or NNG_ENOMEM. */
int vmt_mux_init(vmt_mux_t *m, vmt_conn_t *c, const vmt_mux_msgs_t *msgs, uint64_t max_msg,
                 int32_t io_timeout_ms);
void vmt_mux_destroy(vmt_mux_t *m);

/* Registers k under id and writes the request (prefix and id are added
 * here; body is the message after them). 0, or the error: k is then
 * done with it (a write cut short loses the mux). */
int vmt_mux_send(vmt_mux_t *m, vmt_call_t *k, uint32_t id, const struct iovec *body, unsigned n);
/* Waits until one of calls[0..n) is done (0), deadline_ns (monotonic,
 * vmt_mux_now_ns; 0: none) passes (NNG_ETIMEDOUT), or the mux is lost
 * (NNG_ECONNSHUT; its calls are then done). Takes the reading turn when
 * it is free. */
int vmt_mux_wait(vmt_mux_t *m, vmt_call_t *const *calls, unsigned n, int64_t deadline_ns);
/* A call not done yet is given up: off the list (a reply that still
 * comes is dropped) and done with rv. */
void vmt_mux_abandon(vmt_mux_t *m, vmt_call_t *k, int rv);
int vmt_mux_is_done(vmt_mux_t *m, vmt_call_t *k);
/* 0, or the error that lost m. */
int vmt_mux_lost(vmt_mux_t *m);
/* Loses m: every call completes with NNG_ECONNSHUT. */
void vmt_mux_lose(vmt_mux_t *m, int rv);
int64_t vmt_mux_now_ns(void);

/* ---- the serving end ---- */

/* Waits for the reading turn and reads the next request into a buffer
 * from msgs.get (msgs.received tells its body; give it back with
 * msgs.put): 0 with *msg and its id, keeping the turn; or the error that
 * lost the mux (NNG_ECONNSHUT when the peer closed, NNG_EMSGSIZE over
 * max_msg, NNG_EPROTO a malformed frame), the turn given up. */
int vmt_mux_next(vmt_mux_t *m, void **msg, uint32_t *id);
/* Passes the reading turn on to the next thread waiting in vmt_mux_next. */
void vmt_mux_pass(vmt_mux_t *m);
/* Writes a reply (or any message) with id whole: 0, or the error that
 * lost the mux. */
int vmt_mux_reply(vmt_mux_t *m, uint32_t id, const struct iovec *body, unsigned n);

#ifdef __cplusplus
}
#endif
#endif /* VMTRANSPORT_MUX_H */
