/* libvmclient internals: the connection (a transport connection carrying
 * nng's req0 wire format, vmtransport/), single request/reply, long calls
 * and pipelined chunk transfers. Internal symbols use the vmci_ prefix. */
#ifndef VMC_INTERNAL_H
#define VMC_INTERNAL_H

#include <nng/nng.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "vmrpc/vmclient.h"
#include "vmproto/wire.h"
#include "vmtransport/conn.h"
#include "vmtransport/frame.h"
#include "vmtransport/mux.h"

/* Internal functions stay out of the shared library's interface. */
#define VMCI_API __attribute__((visibility("hidden")))

/* Largest chunk size the client accepts from an agent: every response is
 * at most one chunk plus an envelope; bigger messages end the connection. */
#define VMCI_MAX_CHUNK (64u << 20)
/* Most chunk requests the client overlaps, whatever the agent allows. */
#define VMCI_MAX_INFLIGHT 64
/* Inputs one Run request may carry (the protocol's bound, docs/protocol.md);
 * vmc_run() sets the ones after them with SetInput first. */
#define VMCI_RUN_MAX_INPUTS 256
/* Message buffers a connection keeps for reuse. */
#define VMCI_POOL_MAX (VMCI_MAX_INFLIGHT + 4)

/* A message buffer: a request being built and sent, or a reply. Requests
 * leave room before body for the SP prefix and id; their payload may stay
 * in the caller's memory (ext), written straight from there. */
typedef struct vmci_msg {
  struct vmci_msg *next; /* in the connection's pool */
  uint8_t *mem;
  size_t cap;
  uint8_t *body;
  size_t len;
  const uint8_t *ext;
  size_t ext_len;
} vmci_msg_t;

/* One request in flight (the multiplexer's). */
typedef vmt_call_t vmci_call_t;

/* A connection: the transport's, its multiplexer (which owns the calls in
 * flight and the reading turn), and the message pool and chunk slots.
 * Lock order: the mux's wmu, then its mu; mu here is a leaf. */
struct vmc_conn {
  char *url;
  vmt_tls_t *tls;
  vmt_conn_t *s;
  vmt_mux_t mux;
  int mux_ready;

  pthread_mutex_t mu;     /* the pool and the slots */
  pthread_cond_t slot_cv; /* chunk slots */
  vmci_msg_t *pool;
  uint32_t pool_n;
  uint32_t slots_free; /* chunk requests that may still start */

  atomic_uint_fast64_t next_id;
  uint64_t session;
  int32_t request_timeout_ms;
  int32_t connect_timeout_ms;
  int32_t long_timeout_ms;

  char *agent_version;
  uint32_t protocol_major, protocol_minor;
  uint32_t num_devices;
  vmc_device_info_t *devices;
  vmc_limits_t limits;
};

/* A decoded reply. payload aliases msg (a buffer of conn's pool). */
typedef struct vmci_reply {
  vmc_conn_t *conn;
  vmci_msg_t *msg;
  Vmrpc__Response *resp;
  const uint8_t *payload;
  size_t payload_len;
} vmci_reply_t;

VMCI_API void vmci_reply_free(vmci_reply_t *r);

/* Builds a request message (the envelope; the payload is referenced, not
 * copied, and must stay valid until the message is sent) with a fresh id
 * and the session. *out_msg belongs to the caller until sent. */
VMCI_API vm_status_t vmci_build(vmc_conn_t *c, Vmrpc__Request *req, const void *payload,
                                size_t plen, vmci_msg_t **out_msg);

/* Sends req (+ payload) and waits for its reply; checks the frame, the id,
 * the status (an agent error is returned with its code) and that the reply
 * carries op `expect`. what names the operation in error messages
 * ("SetInput main[0]"); timeout_ms <= 0 waits without limit. */
VMCI_API vm_status_t vmci_call(vmc_conn_t *c, Vmrpc__Request *req, const void *payload, size_t plen,
                               Vmrpc__Response__OpCase expect, int32_t timeout_ms, const char *what,
                               vmci_reply_t *out);

/* As vmci_call(); *out_rv (may be NULL) receives the nng error (0 when
 * the reply arrived, even if it carries an error status). */
VMCI_API vm_status_t vmci_call_rv(vmc_conn_t *c, Vmrpc__Request *req, const void *payload,
                                  size_t plen, Vmrpc__Response__OpCase expect, int32_t timeout_ms,
                                  const char *what, vmci_reply_t *out, int *out_rv);

/* For operations that may run long (Invoke, TimeEvaluate, Profile): waits
 * up to wait_ms (<= 0: no limit) for the reply; past it, calls
 * on_timeout(arg) (which sends a Cancel), then waits up to the request
 * timeout for the reply to the cancelled run, and returns
 * DEADLINE_EXCEEDED saying whether the agent confirmed. */
VMCI_API vm_status_t vmci_call_long(vmc_conn_t *c, Vmrpc__Request *req,
                                    Vmrpc__Response__OpCase expect, int32_t wait_ms,
                                    const char *what, void (*on_timeout)(void *arg), void *arg,
                                    vmci_reply_t *out);

/* A pipelined chunk transfer: chunks [0, count) are requested with up to
 * the connection's free chunk slots in flight. make() builds the request of
 * chunk idx; done() consumes its successful reply (the reply is freed
 * after). progress (may be NULL) is called after each chunk with the bytes
 * of completed chunks (chunk_bytes(idx) tells each chunk's size). */
typedef struct vmci_pipeline {
  uint64_t count;
  vm_status_t (*make)(void *ctx, uint64_t idx, vmci_msg_t **out_msg, uint64_t *out_req_id);
  vm_status_t (*done)(void *ctx, uint64_t idx, vmci_reply_t *reply);
  uint64_t (*chunk_size)(void *ctx, uint64_t idx);
  /* May be NULL: where chunk idx's reply payload (chunk_size bytes) is to
   * go, so that it is read there from the socket without a copy. */
  uint8_t *(*dest)(void *ctx, uint64_t idx);
  Vmrpc__Response__OpCase expect;
  void *ctx;
  vmc_progress_fn progress;
  void *user;
  uint64_t progress_total;
  const char *what;
} vmci_pipeline_t;

VMCI_API vm_status_t vmci_pipeline_run(vmc_conn_t *c, const vmci_pipeline_t *p);

/* Decodes a reply message (frame, envelope, id, status, op). Takes msg. */
VMCI_API vm_status_t vmci_decode(vmc_conn_t *c, vmci_msg_t *msg, uint64_t req_id,
                                 Vmrpc__Response__OpCase expect, const char *what,
                                 vmci_reply_t *out);

/* The connection's message pool (conn.c): a buffer for a message of size
 * bytes (body after VMCI_HEAD bytes of room), back into the pool, freed. */
VMCI_API vmci_msg_t *vmci_msg_get(vmc_conn_t *c, size_t size);
VMCI_API void vmci_msg_put(vmc_conn_t *c, vmci_msg_t *m);
VMCI_API void vmci_msg_free(vmci_msg_t *m);
/* Whether c's connection is lost (or was never made). */
VMCI_API int vmci_conn_lost(vmc_conn_t *c);

/* Status for a failed nng operation during `what`, with advice. */
VMCI_API vm_status_t vmci_nng_error(vmc_conn_t *c, int rv, const char *what, int32_t timeout_ms);

/* Wire TensorMeta of a host tensor; dims_buf holds the shape copy the meta
 * points to, dtype_buf its dtype string. */
VMCI_API void vmci_meta_from_tensor(const vmc_tensor_t *t, Vmrpc__TensorMeta *meta,
                                    int64_t *dims_buf, char *dtype_buf, size_t dtype_buf_len);

/* Hashes of executable files (hashmemo.c). get: 1 and out filled when st
 * (a stat of the file now) matches an entry. put: records sha for the file
 * whose stat was `before` when reading began at read_start (realtime s)
 * and `after` once it ended; nothing is recorded unless both agree and the
 * file had been left alone for a while before. forget: drops the file's
 * entry. */
struct stat;
VMCI_API int vmci_memo_get(const struct stat *st, uint8_t out[32]);
VMCI_API void vmci_memo_put(const struct stat *before, const struct stat *after, time_t read_start,
                            const uint8_t sha[32]);
VMCI_API void vmci_memo_forget(const struct stat *st);

/* TLS trust (tls_trust.c). system_ca: the system's CA bundle ($SSL_CERT_FILE,
 * else the first readable well-known path), NULL when there is none.
 * pin_parse: "sha256:" + 64 hex digits (colons allowed) -> 32 bytes.
 * probe_pin: one TLS handshake with host:port; the presented certificate
 * must hash to pin and be self-signed; *out_pem receives it (PEM, malloc). */
VMCI_API const char *vmci_tls_system_ca(void);
VMCI_API vm_status_t vmci_tls_pin_parse(const char *pin, uint8_t out[32]);
VMCI_API vm_status_t vmci_tls_probe_pin(const char *url, const char *host, const char *port,
                                        int32_t timeout_ms, const char *pin_text,
                                        const uint8_t pin[32], char **out_pem);

#endif /* VMC_INTERNAL_H */
