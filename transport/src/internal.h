/* Shared inside the transport library only. */
#ifndef VMTRANSPORT_INTERNAL_H
#define VMTRANSPORT_INTERNAL_H

#include "vmtransport/conn.h"

/* An nng error number for errno e. */
int vmt_errno(int e);
/* A new plain connection owning fd (tcp or ipc). */
int vmt_sock_wrap(int fd, int ipc, vmt_conn_t **out);
/* A TLS connection owning fd; the handshake comes with vmt_tls_handshake
 * (server: accept side). */
int vmt_tls_wrap(vmt_tls_t *t, int fd, vmt_conn_t **out);
int vmt_tls_handshake(vmt_conn_t *c, int32_t timeout_ms);
/* Whether c is a TLS connection. */
int vmt_conn_is_tls(const vmt_conn_t *c);
/* Monotonic clock, ns. */
int64_t vmt_now_ns(void);
/* Waits until fd shows events (or an error) or deadline_ns (< 0: none)
 * passes, or c (may be NULL) is closed: 0, NNG_ETIMEDOUT, NNG_ECLOSED. */
int vmt_poll(vmt_conn_t *c, int fd, short events, int64_t deadline_ns);

#endif
