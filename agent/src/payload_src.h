/* A request's payload still on its connection: the transport reads the
 * envelope, and the handler reads the payload straight into its
 * destination (route.h, vma_route_direct). Types only. */
#ifndef VMA_PAYLOAD_SRC_H
#define VMA_PAYLOAD_SRC_H

#include <stddef.h>
#include <stdint.h>

typedef struct vma_payload_src {
  /* Reads the next n bytes of the payload into dst: 0, or nonzero when
   * the connection failed (it is then of no further use). */
  int (*read)(void *ctx, void *dst, size_t n);
  void *ctx;
  uint64_t len; /* the payload's bytes, all still unread */
} vma_payload_src_t;

#endif /* VMA_PAYLOAD_SRC_H */
