/* The bodies of the fuzz targets (tests/fuzz/fuzz_*.c), shared with the
 * regression suite (test_fuzz_regressions.c) so that every crash input the
 * fuzzers found is replayed through exactly the same code in the normal and
 * sanitizer builds. No cmocka inside: a violated invariant calls
 * fuzz_fail_hook (default: print and abort(), which libFuzzer reports as a
 * crash; the regression suite points it at cmocka's fail_msg). */
#ifndef VMRPC_TEST_HELPER_FUZZ_H
#define VMRPC_TEST_HELPER_FUZZ_H

#include <stddef.h>
#include <stdint.h>

#include "vm/executable.h"

extern void (*fuzz_fail_hook)(const char *msg);

void fuzz_fail(const char *file, int line, const char *what);
#define FUZZ_CHECK(cond, what)                          \
  do {                                                  \
    if (!(cond)) fuzz_fail(__FILE__, __LINE__, (what)); \
  } while (0)

/* The loader limits the fuzzers use: the defaults, as the agent uses them
 * (with its --max-executable as max_file_bytes). */
vm_limits_t fuzz_limits(void);

/* The target bodies. Each returns normally for any input. */
void fuzz_loader_one(const uint8_t *data, size_t size);
void fuzz_asm_one(const uint8_t *data, size_t size);
void fuzz_npy_one(const uint8_t *data, size_t size);
/* The input is a sequence of frames, each a u16 LE length then that many
 * bytes (a length past the end takes the rest); each frame is one message
 * body for vmagent_handle_message on one pipe, which is closed at the end.
 * Frames that parse as a Request are adjusted before they are served so
 * that the fuzzer can reach deep states and every input ends quickly:
 * - Request.session k in 1..8 names the k-th session this input's Hellos
 *   created (real ids are random);
 * - Invoke deadlines are capped at 10 ms; TimeEvaluate counts, repeats,
 *   minimum times, cooldowns and cache flushes are capped small;
 * - a watchdog cancels an Invoke/TimeEvaluate/Profile running over 30 ms.
 * Checks: every message gets exactly one well-formed Response echoing the
 * request id; closing the pipe leaves the agent without sessions. The
 * agent (cpu device only, no listening, token "fuzz-token") is created on
 * first use and recreated every 2000 inputs. */
void fuzz_request_one(const uint8_t *data, size_t size);
/* When set, fuzz_request_one reports each reply ("Op -> CODE: message"). */
extern void (*fuzz_trace_hook)(const char *line);
/* Frees the agent fuzz_request_one made (for the regression suite). */
void fuzz_request_reset(void);

/* Encodes frames for fuzz_request_one's input format (seed generator and
 * tests): appends a u16 LE length and the body to *buf (realloc'ed).
 * Returns 0 or -1 (body over 65535 bytes, out of memory). */
int fuzz_frames_append(uint8_t **buf, size_t *len, const uint8_t *body, size_t body_len);

#endif
