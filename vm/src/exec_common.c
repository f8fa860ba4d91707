/* Pieces of the executable API shared by the builder, loader, writer and
 * text form: lifetime, limits, instruction decoding, identity, file I/O. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "exec_internal.h"
#include "vm/executable.h"

const char *vm_opcode_name(int64_t op) {
  switch (op) {
#define VM_OPCODE_NAME_(name, value, mnem, words) \
  case value:                                     \
    return mnem;
    VM_OPCODE_LIST(VM_OPCODE_NAME_)
#undef VM_OPCODE_NAME_
    default:
      return NULL;
  }
}

vm_limits_t vm_limits_default(void) {
  vm_limits_t l = {
      .max_file_bytes = UINT64_C(4) << 30,
      .max_sections = 64,
      .max_functions = 65536,
      .max_constants = 1u << 20,
      .max_instrs = UINT64_C(1) << 24,
      .max_words = UINT64_C(1) << 26,
      .max_registers = 65536,
      .max_call_args = 1024,
      .max_ndim = 16,
      .max_string_bytes = 1u << 20,
      .max_kernel_source = 16u << 20,
      .max_kernels = 4096,
      .max_meta = 4096,
      .max_tensor_bytes = UINT64_C(2) << 30,
  };
  return l;
}

void vmi_function_clear(vm_function_t *f) {
  free(f->name);
  if (f->params) {
    for (uint32_t i = 0; i < f->num_args; i++) {
      free(f->params[i].name);
      free(f->params[i].shape);
    }
  }
  free(f->params);
  memset(f, 0, sizeof(*f));
}

void vmi_constant_clear(vm_constant_t *c) {
  free(c->scope);
  switch (c->kind) {
    case VM_CONST_STRING:
      free(c->u.str.data);
      break;
    case VM_CONST_SHAPE:
      free(c->u.shape.dims);
      break;
    case VM_CONST_TENSOR:
      free(c->u.tensor.shape);
      break; /* data lives in the executable's blob */
    default:
      break;
  }
  memset(c, 0, sizeof(*c));
}

void vmi_functions_free(vm_function_t *f, size_t n) {
  if (!f) return;
  for (size_t i = 0; i < n; i++) vmi_function_clear(&f[i]);
  free(f);
}

void vmi_constants_free(vm_constant_t *c, void **data, size_t n) {
  if (c)
    for (size_t i = 0; i < n; i++) vmi_constant_clear(&c[i]);
  if (data)
    for (size_t i = 0; i < n; i++) free(data[i]);
  free(c);
  free(data);
}

void vmi_kernels_free(vm_kernel_module_t *k, size_t n) {
  if (!k) return;
  for (size_t i = 0; i < n; i++) {
    free(k[i].name);
    free(k[i].source);
    free(k[i].options);
  }
  free(k);
}

void vmi_meta_free(vm_meta_entry_t *m, size_t n) {
  if (!m) return;
  for (size_t i = 0; i < n; i++) {
    free(m[i].key);
    free(m[i].value);
  }
  free(m);
}

void vm_executable_free(vm_executable_t *exec) {
  if (!exec) return;
  vmi_functions_free(exec->functions, exec->num_functions);
  vmi_constants_free(exec->constants, NULL, exec->num_constants);
  free(exec->instr_offset);
  free(exec->instr_data);
  vmi_kernels_free(exec->kernels, exec->num_kernels);
  vmi_meta_free(exec->meta, exec->num_meta);
  free(exec->blob_);
  free(exec);
}

vm_instr_t vm_executable_instr(const vm_executable_t *exec, uint64_t pc) {
  const int64_t *w = exec->instr_data + exec->instr_offset[pc];
  vm_instr_t in;
  memset(&in, 0, sizeof(in));
  in.op = (vm_opcode_t)w[0];
  switch (in.op) {
    case VM_OP_CALL:
      in.dst = w[1];
      in.func_idx = w[2];
      in.num_args = (uint32_t)w[3];
      in.args = w + 4;
      break;
    case VM_OP_RET:
      in.result = w[1];
      break;
    case VM_OP_GOTO:
      in.pc_offset = w[1];
      break;
    case VM_OP_IF:
      in.cond = w[1];
      in.false_offset = w[2];
      break;
  }
  return in;
}

int64_t vm_executable_find_function(const vm_executable_t *exec, const char *name,
                                    vm_func_kind_t kind) {
  for (uint32_t i = 0; i < exec->num_functions; i++) {
    if (exec->functions[i].kind == kind && strcmp(exec->functions[i].name, name) == 0)
      return (int64_t)i;
  }
  return -1;
}

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

int vmi_grow(void **ptr, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return 0;
  size_t nc = *cap ? *cap : 8;
  while (nc < need) {
    if (nc > SIZE_MAX / 2) return -1;
    nc *= 2;
  }
  if (nc > SIZE_MAX / elem) return -1;
  void *p = realloc(*ptr, nc * elem);
  if (!p) return -1;
  memset((char *)p + *cap * elem, 0, (nc - *cap) * elem);
  *ptr = p;
  *cap = nc;
  return 0;
}

vm_status_t vmi_invalid(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vm_status_t st = vm_status_makev(VM_INVALID_ARGUMENT, fmt, ap);
  va_end(ap);
  return st;
}

void *vmi_aligned_alloc(size_t size) {
  size_t rounded = (size + VM_TENSOR_ALIGN - 1) / VM_TENSOR_ALIGN * VM_TENSOR_ALIGN;
  if (rounded == 0) rounded = VM_TENSOR_ALIGN;
  if (rounded < size) return NULL;
  void *p = aligned_alloc(VM_TENSOR_ALIGN, rounded);
  if (p) memset(p, 0, rounded);
  return p;
}

void *vmi_tensor_blob(const vm_constant_t *c, size_t n, size_t *out_size) {
  size_t blob = 0;
  for (size_t i = 0; i < n; i++) {
    if (c[i].kind != VM_CONST_TENSOR) continue;
    size_t nb = (size_t)c[i].u.tensor.nbytes;
    size_t r = (nb + VM_TENSOR_ALIGN - 1) / VM_TENSOR_ALIGN * VM_TENSOR_ALIGN;
    if (r < nb || blob + r < blob) return NULL;
    blob += r;
  }
  void *p = vmi_aligned_alloc(blob);
  if (p) *out_size = blob;
  return p;
}

char *vmi_strndup(const char *s, size_t n) {
  char *d = malloc(n + 1);
  if (!d) return NULL;
  if (n) memcpy(d, s, n);
  d[n] = '\0';
  return d;
}

vm_status_t vm_read_file(const char *path, uint64_t max_bytes, uint8_t **out_data,
                         size_t *out_size) {
  *out_data = NULL;
  *out_size = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    return vm_status_make(e == ENOENT ? VM_NOT_FOUND : VM_UNAVAILABLE, "cannot open '%s': %s",
                          path, strerror(e));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return vm_status_make(VM_INVALID_ARGUMENT, "'%s' is not a regular file", path);
  }
  if ((uint64_t)st.st_size > max_bytes) {
    close(fd);
    return vm_status_make(VM_RESOURCE_EXHAUSTED,
                          "'%s' is %lld bytes, over the limit of %llu bytes", path,
                          (long long)st.st_size, (unsigned long long)max_bytes);
  }
  size_t size = (size_t)st.st_size;
  uint8_t *buf = malloc(size ? size : 1);
  if (!buf) {
    close(fd);
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory reading '%s' (%zu bytes)",
                          path, size);
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

vm_status_t vm_executable_load_file(const char *path, const vm_limits_t *limits,
                                    vm_executable_t **out_exec) {
  *out_exec = NULL;
  vm_limits_t lim = limits ? *limits : vm_limits_default();
  uint8_t *data;
  size_t size;
  VM_RETURN_IF_ERROR(vm_read_file(path, lim.max_file_bytes, &data, &size));
  vm_status_t st = vm_executable_load(data, size, &lim, out_exec);
  free(data);
  return vm_status_annotate(st, "loading '%s'", path);
}

vm_status_t vm_executable_write_file(const vm_executable_t *exec, const char *path) {
  uint8_t *data;
  size_t size;
  VM_RETURN_IF_ERROR(vm_executable_write(exec, &data, &size));
  vm_status_t st = vm_write_file_atomic(path, data, size);
  free(data);
  return st;
}
