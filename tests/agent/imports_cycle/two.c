/* Fixture (common.h). */
#include "common.h"

int vma_two(void) {
  return 2;
}
