/* Small helpers shared by test suites. Include after <cmocka.h>. */
#ifndef VMRPC_TEST_UTIL_H
#define VMRPC_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmrpc/status.h"

/* Fails the test with the status message unless st is OK; frees st. */
#define ASSERT_OK(expr)                                                         \
  do {                                                                          \
    vm_status_t aok_st_ = (expr);                                               \
    if (aok_st_) {                                                              \
      char aok_buf_[1024];                                                      \
      snprintf(aok_buf_, sizeof(aok_buf_), "%s -> %s: %s", #expr,               \
               vm_code_name(vm_status_code(aok_st_)), vm_status_message(aok_st_)); \
      vm_status_free(aok_st_);                                                  \
      fail_msg("%s", aok_buf_);                                                 \
    }                                                                           \
  } while (0)

/* Asserts expr fails with exactly code and a message containing substr
 * (NULL: any message, but never empty); frees the status. */
#define ASSERT_STATUS(expr, code, substr)                                            \
  do {                                                                               \
    vm_status_t as_st_ = (expr);                                                     \
    if (!as_st_) fail_msg("%s succeeded, expected %s", #expr, vm_code_name(code));  \
    char as_buf_[1024];                                                              \
    snprintf(as_buf_, sizeof(as_buf_), "%s", vm_status_message(as_st_));             \
    vm_code_t as_code_ = vm_status_code(as_st_);                                     \
    vm_status_free(as_st_);                                                          \
    if (as_code_ != (code))                                                          \
      fail_msg("%s: got %s (%s), expected %s", #expr, vm_code_name(as_code_), as_buf_, \
               vm_code_name(code));                                                  \
    if (as_buf_[0] == '\0') fail_msg("%s: empty error message", #expr);              \
    const char *as_sub_ = (substr);                                                  \
    if (as_sub_ && !strstr(as_buf_, as_sub_))                                        \
      fail_msg("%s: message '%s' lacks '%s'", #expr, as_buf_, as_sub_);              \
  } while (0)

/* ASSERT_STATUS for helpers that check on behalf of their caller: fails
 * the test, naming expr and the caller's line, unless st has exactly code
 * and a message containing substr (not NULL); frees st. */
static inline void assert_status_at(vm_status_t st, vm_code_t code, const char *substr,
                                    const char *expr, int line) {
  if (!st)
    fail_msg("line %d: %s: expected %s ('%s'), got OK", line, expr, vm_code_name(code), substr);
  const char *msg = vm_status_message(st);
  if (vm_status_code(st) != code || !strstr(msg, substr)) {
    char copy[512];
    snprintf(copy, sizeof(copy), "%s", msg);
    vm_code_t got = vm_status_code(st);
    vm_status_free(st);
    fail_msg("line %d: %s: expected %s containing '%s', got %s: %s", line, expr, vm_code_name(code),
             substr, vm_code_name(got), copy);
  }
  vm_status_free(st);
}

/* The VM execution mode this run of a test_rt_* suite covers: 0 bytecode
 * (default), 1 compiled — from VMRPC_EXEC_MODE. */
static inline int test_exec_mode(void) {
  const char *m = getenv("VMRPC_EXEC_MODE");
  return m && strcmp(m, "compiled") == 0 ? 1 : 0;
}

#endif
