/* The heap reply place (out.h). */
#include "out.h"

#include <stdlib.h>

uint8_t *vma_heap_alloc(vma_out_t *o, size_t size) {
  free(o->buf);
  o->buf = malloc(size ? size : 1);
  o->len = o->buf ? size : 0;
  return o->buf;
}
