/* Fixture (common.h). */
#include "common.h"

int vma_one(void) {
  return vma_two() + 1;
}
