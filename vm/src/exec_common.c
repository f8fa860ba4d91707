/* Pieces of the executable API shared by the builder, loader, writer and
 * text form: lifetime, limits, instruction decoding, loading and writing
 * files (over the base layer's file I/O, base/src/base.c). */
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

#include "exec_internal.h"
#include "vmrpc/checked.h"
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

int vmi_grow(void **ptr, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return 0;
  size_t nc = *cap ? *cap : 8;
  while (nc < need)
    if (vm_ckd_mul_size(nc, 2, &nc) != 0) return -1;
  size_t bytes;
  if (vm_ckd_mul_size(nc, elem, &bytes) != 0) return -1;
  void *p = realloc(*ptr, bytes);
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
