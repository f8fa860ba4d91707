/* The base layer's files: whole-file I/O and SHA-256, used by the
 * executable format, the agent's store, the client library and the tools
 * alike (library vmbase: libc and OpenSSL's libcrypto only). */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "vmrpc/file.h"

void vm_sha256(const void *data, size_t size, uint8_t out[VM_SHA256_BYTES]) {
  /* OpenSSL's libcrypto picks the CPU's SHA instructions when it has them
   * (about 7x mbedTLS 2.28's portable code here), which matters because
   * both sides of every upload hash every byte. EVP_Digest with the
   * built-in SHA-256 cannot fail short of memory corruption. */
  unsigned int n = VM_SHA256_BYTES;
  if (EVP_Digest(data, size, out, &n, EVP_sha256(), NULL) != 1) memset(out, 0, VM_SHA256_BYTES);
}

void vm_sha256_hex(const uint8_t digest[VM_SHA256_BYTES], char out[2 * VM_SHA256_BYTES + 1]) {
  static const char hex[] = "0123456789abcdef";
  for (int i = 0; i < VM_SHA256_BYTES; i++) {
    out[2 * i] = hex[digest[i] >> 4];
    out[2 * i + 1] = hex[digest[i] & 15];
  }
  out[2 * VM_SHA256_BYTES] = '\0';
}

vm_status_t vm_read_file(const char *path, uint64_t max_bytes, uint8_t **out_data,
                         size_t *out_size) {
  *out_data = NULL;
  *out_size = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    return vm_status_make(e == ENOENT ? VM_NOT_FOUND : VM_UNAVAILABLE, "cannot open '%s': %s", path,
                          strerror(e));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return vm_status_make(VM_INVALID_ARGUMENT, "'%s' is not a regular file", path);
  }
  if ((uint64_t)st.st_size > max_bytes) {
    close(fd);
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "'%s' is %lld bytes, over the limit of %llu bytes",
                          path, (long long)st.st_size, (unsigned long long)max_bytes);
  }
  size_t size = (size_t)st.st_size;
  uint8_t *buf = malloc(size ? size : 1);
  if (!buf) {
    close(fd);
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory reading '%s' (%zu bytes)", path,
                          size);
  }
  size_t got = 0;
  while (got < size) {
    ssize_t n = read(fd, buf + got, size - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = n < 0 ? errno : EIO;
      free(buf);
      close(fd);
      return vm_status_make(VM_UNAVAILABLE, "reading '%s': %s", path,
                            n == 0 ? "file shrank while reading" : strerror(e));
    }
    got += (size_t)n;
  }
  close(fd);
  *out_data = buf;
  *out_size = size;
  return VM_STATUS_OK;
}

/* Out of room (a full disk, a quota, a file-size limit) is RESOURCE_EXHAUSTED:
 * the caller may free space and retry; anything else is UNAVAILABLE. */
static vm_code_t vm_write_errno_code(int e) {
  return e == ENOSPC || e == EDQUOT || e == EFBIG ? VM_RESOURCE_EXHAUSTED : VM_UNAVAILABLE;
}

vm_status_t vm_write_file_atomic_parts(const char *path, const void *const *parts,
                                       const size_t *sizes, size_t num_parts) {
  size_t pl = strlen(path);
  char *tmp = malloc(pl + 48);
  if (!tmp) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  /* Unique per process and call: two threads may write the same path. */
  static _Atomic unsigned seq;
  snprintf(tmp, pl + 48, "%s.tmp.%ld.%u", path, (long)getpid(), atomic_fetch_add(&seq, 1));
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    int e = errno;
    vm_status_t st = vm_status_make(e == ENOENT ? VM_NOT_FOUND : vm_write_errno_code(e),
                                    "cannot create '%s': %s", tmp, strerror(e));
    free(tmp);
    return st;
  }
  vm_status_t st = VM_STATUS_OK;
  for (size_t i = 0; i < num_parts && !st; i++) {
    const uint8_t *p = parts[i];
    for (size_t done = 0; done < sizes[i];) {
      ssize_t n = write(fd, p + done, sizes[i] - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        int e = n < 0 ? errno : EIO;
        st = vm_status_make(vm_write_errno_code(e), "writing '%s': %s", tmp, strerror(e));
        break;
      }
      done += (size_t)n;
    }
  }
  /* Both always run: a failed fsync must not leak the descriptor. */
  int err = !st && fsync(fd) != 0 ? errno : 0;
  if (close(fd) != 0 && !err) err = errno;
  if (err && !st)
    st = vm_status_make(vm_write_errno_code(err), "flushing '%s': %s", tmp, strerror(err));
  if (!st && rename(tmp, path) != 0) {
    int e = errno;
    st = vm_status_make(VM_UNAVAILABLE, "renaming '%s' to '%s': %s", tmp, path, strerror(e));
  }
  if (st) unlink(tmp);
  free(tmp);
  return st;
}

vm_status_t vm_write_file_atomic(const char *path, const void *data, size_t size) {
  return vm_write_file_atomic_parts(path, &data, &size, 1);
}
