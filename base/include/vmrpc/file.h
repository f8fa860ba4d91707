/* Whole files and their digests (base layer, library vmbase: see
 * base/CMakeLists.txt): reading a file under a size cap, writing one
 * atomically, SHA-256. Below the executable format, the agent and the
 * client; libc and libcrypto only. */
#ifndef VMRPC_FILE_H
#define VMRPC_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "vmrpc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reads a whole file into a malloc'ed buffer, refusing files over max_bytes
 * (RESOURCE_EXHAUSTED), missing ones (NOT_FOUND), anything but a regular
 * file (INVALID_ARGUMENT) and unreadable ones (UNAVAILABLE). */
vm_status_t vm_read_file(const char *path, uint64_t max_bytes, uint8_t **out_data,
                         size_t *out_size);
/* Writes data to path atomically: path.tmp.<pid>.<n>, fsync, then rename;
 * on failure nothing is left. Out of room (ENOSPC, EDQUOT, EFBIG):
 * RESOURCE_EXHAUSTED; other I/O errors: UNAVAILABLE. */
vm_status_t vm_write_file_atomic(const char *path, const void *data, size_t size);
/* As vm_write_file_atomic(), the file being the concatenation of parts.
 * A missing directory: NOT_FOUND. */
vm_status_t vm_write_file_atomic_parts(const char *path, const void *const *parts,
                                       const size_t *sizes, size_t num_parts);

/* SHA-256 (OpenSSL libcrypto: the CPU's SHA instructions where present). */
#define VM_SHA256_BYTES 32
void vm_sha256(const void *data, size_t size, uint8_t out[VM_SHA256_BYTES]);
/* Lower-case hex, 64 chars + NUL. */
void vm_sha256_hex(const uint8_t digest[VM_SHA256_BYTES], char out[2 * VM_SHA256_BYTES + 1]);

#ifdef __cplusplus
}
#endif

#endif /* VMRPC_FILE_H */
