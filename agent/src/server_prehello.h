/* What a connection without Hello is served (server_prehello.c): its
 * reader serves every request itself; docs/security.md, "Before
 * authentication". */
#ifndef VMA_SERVER_PREHELLO_H
#define VMA_SERVER_PREHELLO_H

#include <stdint.h>

#include "server_conn.h"

/* A LEN-byte message beyond the pre-Hello cap: read and dropped, its id
 * words kept for the refusal. 0, or an NNG_ error (the connection ends). */
int vma_drain_pre_hello(vma_conn_t *c, uint64_t len);
/* After a refused token: the connection lingers until the peer has read
 * the refusal. Returns the error that ends the reader. */
int vma_refused_pre_hello(vma_conn_t *c);
/* Reads and serves one LEN-byte request of c before Hello: 0, or an NNG_
 * error (the connection ends). */
int vma_serve_pre_hello(vma_conn_t *c, uint64_t len);

#endif /* VMA_SERVER_PREHELLO_H */
