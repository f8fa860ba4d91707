#include "fake_tree.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

void fake_tree_put(const char *root, const char *rel, const char *text) {
  char path[1024];
  int n = snprintf(path, sizeof(path), "%s/%s", root, rel);
  if (n < 0 || (size_t)n >= sizeof(path)) fail_msg("path too long: %s/%s", root, rel);
  mkdir(root, 0755);
  for (char *p = path + strlen(root) + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    mkdir(path, 0755);
    *p = '/';
  }
  FILE *f = fopen(path, "w");
  if (!f) fail_msg("cannot write %s", path);
  fputs(text, f);
  if (fclose(f) != 0) fail_msg("cannot write %s", path);
}
