/* A streaming writer of one compact JSON object on stdout (--json). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>

#include "cli.h"

#define MAX_DEPTH ((int)(sizeof(((cli_json_t *)0)->need_comma) / sizeof(int)))

static void put_string(const char *s) {
  putchar('"');
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    unsigned c = *p;
    if (c == '"' || c == '\\') {
      putchar('\\');
      putchar((int)c);
    } else if (c == '\n') {
      fputs("\\n", stdout);
    } else if (c == '\t') {
      fputs("\\t", stdout);
    } else if (c < 0x20 || c == 0x7f) {
      printf("\\u%04x", c);
    } else if (c >= 0x80) {
      /* Messages and names from the agent or a file may not be UTF-8: a
       * well-formed sequence passes through, any other byte is escaped as
       * its Latin-1 code point, so the output is always valid JSON. */
      int n = c >= 0xC2 && c <= 0xDF   ? 2
              : c >= 0xE0 && c <= 0xEF ? 3
              : c >= 0xF0 && c <= 0xF4 ? 4
                                       : 0;
      int ok = n > 0;
      for (int k = 1; ok && k < n; k++) ok = (p[k] & 0xC0) == 0x80;
      if (ok) {
        fwrite(p, 1, (size_t)n, stdout);
        p += n - 1;
      } else {
        printf("\\u%04x", c);
      }
    } else {
      putchar((int)c);
    }
  }
  putchar('"');
}

/* Comma and key before a value at the current level. */
static void prefix(cli_json_t *j, const char *key) {
  int d = j->depth < MAX_DEPTH ? j->depth : MAX_DEPTH - 1;
  if (j->need_comma[d]) putchar(',');
  j->need_comma[d] = 1;
  if (key) {
    put_string(key);
    putchar(':');
  }
}

static void open_level(cli_json_t *j, int c) {
  putchar(c);
  if (j->depth < MAX_DEPTH - 1) j->depth++;
  j->need_comma[j->depth] = 0;
}

static void close_level(cli_json_t *j, int c) {
  putchar(c);
  if (j->depth > 0) j->depth--;
}

void cli_json_begin(cli_json_t *j) {
  j->depth = 0;
  j->need_comma[0] = 0;
  open_level(j, '{');
}

void cli_json_end(cli_json_t *j) {
  close_level(j, '}');
  putchar('\n');
}

void cli_json_obj(cli_json_t *j, const char *key) {
  prefix(j, key);
  open_level(j, '{');
}

void cli_json_obj_end(cli_json_t *j) {
  close_level(j, '}');
}

void cli_json_arr(cli_json_t *j, const char *key) {
  prefix(j, key);
  open_level(j, '[');
}

void cli_json_arr_end(cli_json_t *j) {
  close_level(j, ']');
}

void cli_json_str(cli_json_t *j, const char *key, const char *v) {
  prefix(j, key);
  if (v)
    put_string(v);
  else
    fputs("null", stdout);
}

void cli_json_num(cli_json_t *j, const char *key, double v) {
  prefix(j, key);
  if (isfinite(v))
    printf("%.9g", v);
  else
    fputs("null", stdout);
}

void cli_json_int(cli_json_t *j, const char *key, int64_t v) {
  prefix(j, key);
  printf("%" PRId64, v);
}

void cli_json_uint(cli_json_t *j, const char *key, uint64_t v) {
  prefix(j, key);
  printf("%" PRIu64, v);
}

void cli_json_bool(cli_json_t *j, const char *key, int v) {
  prefix(j, key);
  fputs(v ? "true" : "false", stdout);
}

void cli_json_null(cli_json_t *j, const char *key) {
  prefix(j, key);
  fputs("null", stdout);
}
