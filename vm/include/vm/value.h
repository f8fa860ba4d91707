/* Register values of the VM.
 *
 * A value is a small tagged struct. Scalars (none, int, float, bool, dtype,
 * device, func) live inline; string, shape, tensor, storage, tuple and closure
 * are reference-counted heap objects.
 *
 * Ownership convention: a vm_value_t that a function hands out "owned" holds
 * one reference; release it with vm_value_release(). Arrays of arguments
 * passed into a function are borrowed: the callee retains what it keeps.
 * Reference counts are not atomic: objects belong to one VM, and a VM is used
 * by one thread at a time (the agent serialises calls per VM).
 */
#ifndef VM_VALUE_H
#define VM_VALUE_H

#include <stdint.h>

#include "vm/device.h"
#include "vmrpc/dtype.h"
#include "vmrpc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum vm_value_kind {
  VM_VAL_NONE = 0,
  VM_VAL_INT = 1,
  VM_VAL_FLOAT = 2,
  VM_VAL_BOOL = 3,
  VM_VAL_DTYPE = 4,
  VM_VAL_DEVICE = 5, /* index into the VM's device list */
  VM_VAL_FUNC = 6,   /* index into the executable's function table */
  VM_VAL_OPAQUE = 7, /* borrowed pointer (the VM itself for %vm); never freed */
  /* heap objects from here on */
  VM_VAL_STRING = 16,
  VM_VAL_SHAPE = 17,
  VM_VAL_TENSOR = 18,
  VM_VAL_STORAGE = 19,
  VM_VAL_TUPLE = 20,
  VM_VAL_CLOSURE = 21,
} vm_value_kind_t;

#define VM_VAL_IS_OBJECT(kind) ((kind) >= VM_VAL_STRING)

/* Common header of heap objects. */
typedef struct vm_object {
  uint32_t refcount;
  uint32_t kind; /* vm_value_kind_t */
} vm_object_t;

typedef struct vm_value {
  uint32_t kind; /* vm_value_kind_t */
  union {
    int64_t i;        /* INT, BOOL (0/1), DEVICE, FUNC */
    double f;         /* FLOAT */
    vm_dtype_t dtype; /* DTYPE */
    void *ptr;        /* OPAQUE */
    vm_object_t *obj; /* heap kinds */
  } u;
} vm_value_t;

typedef struct vm_string {
  vm_object_t hdr;
  uint32_t len;
  char data[]; /* len bytes + NUL */
} vm_string_t;

typedef struct vm_shape {
  vm_object_t hdr;
  uint32_t ndim;
  int64_t dims[];
} vm_shape_t;

/* A block of device memory. Either allocated through an allocator (freed
 * back to it when the last reference goes) or borrowed (external memory such
 * as constant data mapped from the executable: never freed here). */
typedef struct vm_storage {
  vm_object_t hdr;
  vm_device_t *device;
  struct vm_allocator *allocator; /* NULL for borrowed memory */
  vm_buffer_t buffer;
  uint64_t nbytes;     /* usable bytes */
  uint64_t alloc_size; /* bytes reserved from the allocator */
  void *user;          /* keeps borrowed memory alive: released via user_release */
  void (*user_release)(void *user);
} vm_storage_t;

/* A dense, C-order tensor view into a storage. */
typedef struct vm_tensor {
  vm_object_t hdr;
  vm_storage_t *storage; /* one reference held */
  uint64_t offset;       /* bytes from the start of the storage */
  vm_dtype_t dtype;
  uint32_t ndim;
  int64_t shape[];
} vm_tensor_t;

typedef struct vm_tuple {
  vm_object_t hdr;
  uint32_t size;
  vm_value_t fields[]; /* each owned */
} vm_tuple_t;

/* A function with arguments bound in front of the caller's (save_function). */
typedef struct vm_closure {
  vm_object_t hdr;
  uint32_t func_idx;
  uint32_t num_bound;
  vm_value_t bound[]; /* each owned */
} vm_closure_t;

/* ---- scalars ---- */
static inline vm_value_t vm_value_none(void) {
  vm_value_t v;
  v.kind = VM_VAL_NONE;
  v.u.i = 0;
  return v;
}
static inline vm_value_t vm_value_int(int64_t i) {
  vm_value_t v;
  v.kind = VM_VAL_INT;
  v.u.i = i;
  return v;
}
static inline vm_value_t vm_value_float(double f) {
  vm_value_t v;
  v.kind = VM_VAL_FLOAT;
  v.u.f = f;
  return v;
}
static inline vm_value_t vm_value_bool(int b) {
  vm_value_t v;
  v.kind = VM_VAL_BOOL;
  v.u.i = b != 0;
  return v;
}
static inline vm_value_t vm_value_dtype(vm_dtype_t dt) {
  vm_value_t v;
  v.kind = VM_VAL_DTYPE;
  v.u.i = 0;
  v.u.dtype = dt;
  return v;
}
static inline vm_value_t vm_value_object(vm_object_t *obj) {
  vm_value_t v;
  v.kind = obj->kind;
  v.u.obj = obj;
  return v;
}

/* ---- references ---- */
static inline void vm_value_retain(const vm_value_t *v) {
  if (VM_VAL_IS_OBJECT(v->kind)) v->u.obj->refcount++;
}
/* Drops one reference and sets *v to none. */
void vm_value_release(vm_value_t *v);
void vm_object_release(vm_object_t *obj);
static inline void vm_object_retain(vm_object_t *obj) { obj->refcount++; }

/* Name of a kind ("tensor"), for error messages. */
const char *vm_value_kind_name(uint32_t kind);

/* ---- constructors: each returns an owned value ----
 * All return RESOURCE_EXHAUSTED when host memory runs out. */
vm_status_t vm_string_new(const char *s, uint32_t len, vm_value_t *out);
vm_status_t vm_shape_new(const int64_t *dims, uint32_t ndim, vm_value_t *out);
vm_status_t vm_tuple_new(const vm_value_t *fields, uint32_t size, vm_value_t *out); /* retains */
vm_status_t vm_closure_new(uint32_t func_idx, const vm_value_t *bound, uint32_t num_bound,
                           vm_value_t *out); /* retains */

/* Allocates nbytes through the allocator (see allocator.h). */
vm_status_t vm_storage_alloc(struct vm_allocator *alloc, uint64_t nbytes, vm_value_t *out);
/* Wraps memory the VM does not own (e.g. constant data) as a storage. */
vm_status_t vm_storage_borrow(vm_device_t *dev, vm_buffer_t buffer, uint64_t nbytes,
                              void *user, void (*user_release)(void *), vm_value_t *out);

/* A tensor view: checks dtype validity, dims >= 0, byte size without
 * overflow, and offset + bytes <= storage->nbytes (INVALID_ARGUMENT naming
 * the sizes). Retains the storage. */
vm_status_t vm_tensor_new(vm_storage_t *storage, uint64_t offset, vm_dtype_t dtype,
                          const int64_t *shape, uint32_t ndim, vm_value_t *out);
/* Allocates a fresh storage of the exact size and a tensor on it. */
vm_status_t vm_tensor_alloc(struct vm_allocator *alloc, vm_dtype_t dtype, const int64_t *shape,
                            uint32_t ndim, vm_value_t *out);

/* Bytes of a tensor's data (numel * dtype bytes; verified at creation). */
uint64_t vm_tensor_nbytes_of(const vm_tensor_t *t);
int64_t vm_tensor_numel(const vm_tensor_t *t);

/* ---- typed access: NULL if the value is not of that kind ---- */
static inline vm_tensor_t *vm_value_as_tensor(const vm_value_t *v) {
  return v->kind == VM_VAL_TENSOR ? (vm_tensor_t *)v->u.obj : 0;
}
static inline vm_shape_t *vm_value_as_shape(const vm_value_t *v) {
  return v->kind == VM_VAL_SHAPE ? (vm_shape_t *)v->u.obj : 0;
}
static inline vm_storage_t *vm_value_as_storage(const vm_value_t *v) {
  return v->kind == VM_VAL_STORAGE ? (vm_storage_t *)v->u.obj : 0;
}
static inline vm_tuple_t *vm_value_as_tuple(const vm_value_t *v) {
  return v->kind == VM_VAL_TUPLE ? (vm_tuple_t *)v->u.obj : 0;
}
static inline vm_string_t *vm_value_as_string(const vm_value_t *v) {
  return v->kind == VM_VAL_STRING ? (vm_string_t *)v->u.obj : 0;
}
static inline vm_closure_t *vm_value_as_closure(const vm_value_t *v) {
  return v->kind == VM_VAL_CLOSURE ? (vm_closure_t *)v->u.obj : 0;
}

/* Reads an integer from INT or BOOL; INVALID_ARGUMENT otherwise, naming
 * what (e.g. "argument 2 of vm.builtin.alloc_storage"). */
vm_status_t vm_value_get_int(const vm_value_t *v, const char *what, int64_t *out);

#ifdef __cplusplus
}
#endif
#endif /* VM_VALUE_H */
