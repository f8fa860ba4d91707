/* A place for a reply: the transport decides where the bytes live so that
 * bulk payloads are written once, straight into the outgoing message. */
#ifndef VMA_OUT_H
#define VMA_OUT_H

#include <stddef.h>
#include <stdint.h>

typedef struct vma_out {
  /* Returns size writable bytes (replacing any earlier buffer), or NULL. */
  uint8_t *(*alloc)(struct vma_out *o, size_t size);
  void *user;
  uint8_t *buf;
  size_t len;
  /* Set by the handler: the transport closes the connection once this
   * reply is written (a failed Hello: auth.c). */
  int close_after;
} vma_out_t;

/* A vma_out_t allocator on the heap (malloc; the caller frees o->buf). */
uint8_t *vma_heap_alloc(vma_out_t *o, size_t size);

#endif /* VMA_OUT_H */
