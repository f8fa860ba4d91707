#include "vmrpc/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct vm_status_obj {
  vm_code_t code;
  char *message; /* heap, NUL-terminated */
};

/* Returned when the status itself cannot be allocated. Never freed. */
static struct vm_status_obj g_oom_status = {
    VM_RESOURCE_EXHAUSTED, "out of host memory while reporting an error"};

const char *vm_code_name(vm_code_t code) {
  switch (code) {
#define VM_CODE_NAME_(name, value) \
  case VM_##name:                  \
    return #name;
    VM_CODE_LIST(VM_CODE_NAME_)
#undef VM_CODE_NAME_
  }
  return "UNKNOWN_CODE";
}

int vm_code_from_name(const char *name, vm_code_t *out_code) {
#define VM_CODE_PARSE_(n, value) \
  if (strcmp(name, #n) == 0) {   \
    *out_code = VM_##n;          \
    return 0;                    \
  }
  VM_CODE_LIST(VM_CODE_PARSE_)
#undef VM_CODE_PARSE_
  return -1;
}

vm_status_t vm_status_makev(vm_code_t code, const char *fmt, va_list ap) {
  if (code == VM_OK) code = VM_INTERNAL; /* an error status must not read as OK */
  struct vm_status_obj *st = malloc(sizeof(*st));
  if (!st) return &g_oom_status;
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0) n = 0;
  st->message = malloc((size_t)n + 1);
  if (!st->message) {
    free(st);
    return &g_oom_status;
  }
  vsnprintf(st->message, (size_t)n + 1, fmt, ap);
  st->code = code;
  return st;
}

vm_status_t vm_status_make(vm_code_t code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vm_status_t st = vm_status_makev(code, fmt, ap);
  va_end(ap);
  return st;
}

vm_status_t vm_status_annotate(vm_status_t st, const char *fmt, ...) {
  if (!st || st == &g_oom_status) return st;
  va_list ap;
  va_start(ap, fmt);
  char prefix[512];
  vsnprintf(prefix, sizeof(prefix), fmt, ap);
  va_end(ap);
  size_t pl = strlen(prefix), ml = strlen(st->message);
  char *msg = malloc(pl + 2 + ml + 1);
  if (!msg) return st; /* keep the original message rather than lose it */
  memcpy(msg, prefix, pl);
  memcpy(msg + pl, ": ", 2);
  memcpy(msg + pl + 2, st->message, ml + 1);
  free(st->message);
  st->message = msg;
  return st;
}

vm_code_t vm_status_code(vm_status_t st) { return st ? st->code : VM_OK; }

const char *vm_status_message(vm_status_t st) { return st ? st->message : ""; }

void vm_status_free(vm_status_t st) {
  if (!st || st == &g_oom_status) return;
  free(st->message);
  free(st);
}

vm_code_t vm_status_consume_code(vm_status_t st) {
  vm_code_t c = vm_status_code(st);
  vm_status_free(st);
  return c;
}
