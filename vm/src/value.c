/* Reference-counted VM values: constructors and release.
 *
 * Release of containers (tuple, closure) is iterative: a program can build a
 * tuple nested a million deep in a loop, and freeing it recursively would
 * overflow the C stack of the daemon. Dead containers go on an explicit
 * work stack instead.
 */
#include "vm/value.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vm/allocator.h"
#include "vmrpc/checked.h"
#include "vmrpc/log.h"

/* Largest tensor rank accepted at run time. Operators keep per-dimension
 * arrays on the stack, so the rank must be bounded; 32 (NumPy's historical
 * limit) is above the executable loader's default max_ndim of 16, so every
 * constant a raised loader limit lets through still makes a tensor. */
#define VMI_TENSOR_MAX_NDIM 32u

static vm_status_t host_oom(const char *what, size_t bytes) {
  return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory allocating %s (%zu bytes)", what,
                        bytes);
}

/* Writes "[2, 3, 4]" into buf, cut with "...]" when too long. */
static const char *format_dims(const int64_t *dims, uint32_t ndim, char *buf, size_t buflen) {
  size_t pos = 0;
  buf[0] = '\0';
  pos += (size_t)snprintf(buf, buflen, "[");
  for (uint32_t i = 0; i < ndim; i++) {
    char item[32];
    int n = snprintf(item, sizeof(item), "%s%" PRId64, i ? ", " : "", dims[i]);
    if (pos + (size_t)n + 5 >= buflen) {
      snprintf(buf + pos, buflen - pos, "...]");
      return buf;
    }
    memcpy(buf + pos, item, (size_t)n + 1);
    pos += (size_t)n;
  }
  snprintf(buf + pos, buflen - pos, "]");
  return buf;
}

/* ---------------------------------------------------------------- release */

static int is_container(const vm_object_t *obj) {
  return obj->kind == VM_VAL_TUPLE || obj->kind == VM_VAL_CLOSURE;
}

/* Frees an object without children to walk (refcount already 0). A tensor
 * drops its storage, which is a leaf itself, so this recursion is bounded. */
static void free_leaf(vm_object_t *obj) {
  switch (obj->kind) {
    case VM_VAL_STRING:
    case VM_VAL_SHAPE: break;
    case VM_VAL_TENSOR: {
      vm_tensor_t *t = (vm_tensor_t *)obj;
      if (t->storage) vm_object_release(&t->storage->hdr);
      break;
    }
    case VM_VAL_STORAGE: {
      vm_storage_t *s = (vm_storage_t *)obj;
      if (s->allocator)
        vm_allocator_free(s->allocator, s->buffer, s->nbytes, s->alloc_size);
      else if (s->user_release)
        s->user_release(s->user);
      break;
    }
    default:
      /* A corrupted kind: freeing the header is all that is safe. */
      VM_LOGE("releasing an object of unknown kind %u", obj->kind);
      break;
  }
  free(obj);
}

/* Work stack of dead containers whose fields are still to be dropped. Starts
 * on the C stack; grows on the heap for wide or deep structures. */
typedef struct dead_stack {
  vm_object_t **items;
  size_t n, cap;
  vm_object_t *local[32];
} dead_stack_t;

static void destroy_container(vm_object_t *obj);

static void dead_push(dead_stack_t *st, vm_object_t *obj) {
  if (st->n == st->cap) {
    size_t ncap = st->cap * 2;
    vm_object_t **p = NULL;
    if (ncap > st->cap && ncap <= SIZE_MAX / sizeof(*p)) {
      p = st->items == st->local ? malloc(ncap * sizeof(*p))
                                 : realloc(st->items, ncap * sizeof(*p));
    }
    if (!p) {
      /* No host memory for the work stack: fall back to recursion rather
       * than leak. Only reachable under memory pressure and wide nesting. */
      destroy_container(obj);
      return;
    }
    if (st->items == st->local) memcpy(p, st->local, st->n * sizeof(*p));
    st->items = p;
    st->cap = ncap;
  }
  st->items[st->n++] = obj;
}

/* Drops one reference of each child; dead children that are containers are
 * pushed, leaves freed at once. */
static void drop_fields(dead_stack_t *st, vm_value_t *fields, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    if (!VM_VAL_IS_OBJECT(fields[i].kind)) continue;
    vm_object_t *child = fields[i].u.obj;
    if (--child->refcount != 0) continue;
    if (is_container(child))
      dead_push(st, child);
    else
      free_leaf(child);
  }
}

/* Frees a dead container and everything only it kept alive. */
static void destroy_container(vm_object_t *obj) {
  dead_stack_t st;
  st.items = st.local;
  st.n = 0;
  st.cap = sizeof(st.local) / sizeof(st.local[0]);
  st.items[st.n++] = obj;
  while (st.n > 0) {
    vm_object_t *o = st.items[--st.n];
    if (o->kind == VM_VAL_TUPLE) {
      vm_tuple_t *t = (vm_tuple_t *)o;
      drop_fields(&st, t->fields, t->size);
    } else {
      vm_closure_t *c = (vm_closure_t *)o;
      drop_fields(&st, c->bound, c->num_bound);
    }
    free(o);
  }
  if (st.items != st.local) free(st.items);
}

void vm_object_release(vm_object_t *obj) {
  if (!obj) return;
  if (obj->refcount == 0) {
    /* Over-release is a caller bug; crashing later in free() is worse. */
    VM_LOGE("vm_object_release: %s object with refcount 0", vm_value_kind_name(obj->kind));
    return;
  }
  if (--obj->refcount != 0) return;
  if (is_container(obj))
    destroy_container(obj);
  else
    free_leaf(obj);
}

void vm_value_release(vm_value_t *v) {
  if (!v) return;
  if (VM_VAL_IS_OBJECT(v->kind)) vm_object_release(v->u.obj);
  *v = vm_value_none();
}

const char *vm_value_kind_name(uint32_t kind) {
  switch (kind) {
    case VM_VAL_NONE: return "none";
    case VM_VAL_INT: return "int";
    case VM_VAL_FLOAT: return "float";
    case VM_VAL_BOOL: return "bool";
    case VM_VAL_DTYPE: return "dtype";
    case VM_VAL_DEVICE: return "device";
    case VM_VAL_FUNC: return "func";
    case VM_VAL_OPAQUE: return "opaque";
    case VM_VAL_STRING: return "string";
    case VM_VAL_SHAPE: return "shape";
    case VM_VAL_TENSOR: return "tensor";
    case VM_VAL_STORAGE: return "storage";
    case VM_VAL_TUPLE: return "tuple";
    case VM_VAL_CLOSURE: return "closure";
    default: return "unknown";
  }
}

/* ----------------------------------------------------------- constructors */

/* Allocates an object of size bytes with refcount 1. NULL on no memory. */
static void *object_new(size_t size, vm_value_kind_t kind) {
  vm_object_t *obj = calloc(1, size);
  if (!obj) return NULL;
  obj->refcount = 1;
  obj->kind = (uint32_t)kind;
  return obj;
}

vm_status_t vm_string_new(const char *s, uint32_t len, vm_value_t *out) {
  size_t size;
  if (vm_ckd_flex_size(sizeof(vm_string_t), 1, (size_t)len + 1, &size) != 0)
    return host_oom("a string", SIZE_MAX);
  vm_string_t *str = object_new(size, VM_VAL_STRING);
  if (!str) return host_oom("a string", size);
  str->len = len;
  if (len) memcpy(str->data, s, len);
  str->data[len] = '\0';
  *out = vm_value_object(&str->hdr);
  return VM_STATUS_OK;
}

vm_status_t vm_shape_new(const int64_t *dims, uint32_t ndim, vm_value_t *out) {
  size_t size;
  if (vm_ckd_flex_size(sizeof(vm_shape_t), sizeof(int64_t), ndim, &size) != 0)
    return host_oom("a shape", SIZE_MAX);
  vm_shape_t *sh = object_new(size, VM_VAL_SHAPE);
  if (!sh) return host_oom("a shape", size);
  sh->ndim = ndim;
  if (ndim) memcpy(sh->dims, dims, (size_t)ndim * sizeof(int64_t));
  *out = vm_value_object(&sh->hdr);
  return VM_STATUS_OK;
}

/* Copies n values into dst, retaining each. */
static void copy_retained(vm_value_t *dst, const vm_value_t *src, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    dst[i] = src[i];
    vm_value_retain(&dst[i]);
  }
}

vm_status_t vm_tuple_new(const vm_value_t *fields, uint32_t size, vm_value_t *out) {
  size_t bytes;
  if (vm_ckd_flex_size(sizeof(vm_tuple_t), sizeof(vm_value_t), size, &bytes) != 0)
    return host_oom("a tuple", SIZE_MAX);
  vm_tuple_t *t = object_new(bytes, VM_VAL_TUPLE);
  if (!t) return host_oom("a tuple", bytes);
  t->size = size;
  copy_retained(t->fields, fields, size);
  *out = vm_value_object(&t->hdr);
  return VM_STATUS_OK;
}

vm_status_t vm_closure_new(uint32_t func_idx, const vm_value_t *bound, uint32_t num_bound,
                           vm_value_t *out) {
  size_t bytes;
  if (vm_ckd_flex_size(sizeof(vm_closure_t), sizeof(vm_value_t), num_bound, &bytes) != 0)
    return host_oom("a closure", SIZE_MAX);
  vm_closure_t *c = object_new(bytes, VM_VAL_CLOSURE);
  if (!c) return host_oom("a closure", bytes);
  c->func_idx = func_idx;
  c->num_bound = num_bound;
  copy_retained(c->bound, bound, num_bound);
  *out = vm_value_object(&c->hdr);
  return VM_STATUS_OK;
}

/* Takes the block (buf, nbytes, size) from alloc: on success the storage
 * owns it; on failure the block is returned to the allocator. */
vm_status_t vm_storage_alloc(struct vm_allocator *alloc, uint64_t nbytes, vm_value_t *out) {
  if (!alloc) return vm_status_make(VM_INVALID_ARGUMENT, "vm_storage_alloc: no allocator");
  vm_buffer_t buf;
  uint64_t size;
  VM_RETURN_IF_ERROR(vm_allocator_alloc(alloc, nbytes, &buf, &size));
  vm_storage_t *s = object_new(sizeof(vm_storage_t), VM_VAL_STORAGE);
  if (!s) {
    vm_allocator_free(alloc, buf, nbytes, size);
    return host_oom("a storage", sizeof(vm_storage_t));
  }
  s->device = vm_allocator_device(alloc);
  s->allocator = alloc;
  s->buffer = buf;
  s->nbytes = nbytes;
  s->alloc_size = size;
  *out = vm_value_object(&s->hdr);
  return VM_STATUS_OK;
}

/* On success the storage owns `user` and calls user_release(user) exactly
 * once, when its last reference goes; on failure nothing is called and the
 * caller keeps `user`. */
vm_status_t vm_storage_borrow(vm_device_t *dev, vm_buffer_t buffer, uint64_t nbytes, void *user,
                              void (*user_release)(void *), vm_value_t *out) {
  if (!dev) return vm_status_make(VM_INVALID_ARGUMENT, "vm_storage_borrow: no device");
  vm_storage_t *s = object_new(sizeof(vm_storage_t), VM_VAL_STORAGE);
  if (!s) return host_oom("a storage", sizeof(vm_storage_t));
  s->device = dev;
  s->allocator = NULL;
  s->buffer = buffer;
  s->nbytes = nbytes;
  s->alloc_size = nbytes;
  s->user = user;
  s->user_release = user_release;
  *out = vm_value_object(&s->hdr);
  return VM_STATUS_OK;
}

/* Checks dtype, rank and dims and computes the byte size. what names the
 * caller in messages. */
static vm_status_t check_tensor_type(const char *what, vm_dtype_t dtype, const int64_t *shape,
                                     uint32_t ndim, uint64_t *out_nbytes) {
  char dts[24], dims[160];
  if (!vm_dtype_valid(dtype))
    return vm_status_make(VM_INVALID_ARGUMENT, "%s: invalid dtype %s", what,
                          vm_dtype_str(dtype, dts, sizeof(dts)));
  if (ndim > VMI_TENSOR_MAX_NDIM)
    return vm_status_make(VM_INVALID_ARGUMENT, "%s: tensor rank %u exceeds the maximum of %u", what,
                          ndim, VMI_TENSOR_MAX_NDIM);
  if (ndim > 0 && !shape)
    return vm_status_make(VM_INVALID_ARGUMENT, "%s: no shape for rank %u", what, ndim);
  for (uint32_t i = 0; i < ndim; i++) {
    if (shape[i] < 0)
      return vm_status_make(VM_INVALID_ARGUMENT, "%s: shape %s has negative dimension %u", what,
                            format_dims(shape, ndim, dims, sizeof(dims)), i);
  }
  if (vm_tensor_nbytes(dtype, shape, ndim, out_nbytes) != 0)
    return vm_status_make(VM_INVALID_ARGUMENT, "%s: byte size of shape %s x %s overflows", what,
                          format_dims(shape, ndim, dims, sizeof(dims)),
                          vm_dtype_str(dtype, dts, sizeof(dts)));
  return VM_STATUS_OK;
}

/* Allocates the tensor header; retains storage on success only. */
static vm_status_t tensor_make(vm_storage_t *storage, uint64_t offset, vm_dtype_t dtype,
                               const int64_t *shape, uint32_t ndim, vm_value_t *out) {
  size_t bytes;
  if (vm_ckd_flex_size(sizeof(vm_tensor_t), sizeof(int64_t), ndim, &bytes) != 0)
    return host_oom("a tensor", SIZE_MAX);
  vm_tensor_t *t = object_new(bytes, VM_VAL_TENSOR);
  if (!t) return host_oom("a tensor", bytes);
  vm_object_retain(&storage->hdr);
  t->storage = storage;
  t->offset = offset;
  t->dtype = dtype;
  t->ndim = ndim;
  if (ndim) memcpy(t->shape, shape, (size_t)ndim * sizeof(int64_t));
  *out = vm_value_object(&t->hdr);
  return VM_STATUS_OK;
}

vm_status_t vm_tensor_new(vm_storage_t *storage, uint64_t offset, vm_dtype_t dtype,
                          const int64_t *shape, uint32_t ndim, vm_value_t *out) {
  if (!storage) return vm_status_make(VM_INVALID_ARGUMENT, "tensor view: no storage");
  uint64_t nbytes;
  VM_RETURN_IF_ERROR(check_tensor_type("tensor view", dtype, shape, ndim, &nbytes));
  uint64_t end;
  if (vm_ckd_add_u64(offset, nbytes, &end) != 0 || end > storage->nbytes) {
    char dts[24], dims[160];
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "tensor view %s %s of %" PRIu64 " bytes at offset %" PRIu64
                          " exceeds its storage of %" PRIu64 " bytes",
                          format_dims(shape, ndim, dims, sizeof(dims)),
                          vm_dtype_str(dtype, dts, sizeof(dts)), nbytes, offset, storage->nbytes);
  }
  return tensor_make(storage, offset, dtype, shape, ndim, out);
}

vm_status_t vm_tensor_alloc(struct vm_allocator *alloc, vm_dtype_t dtype, const int64_t *shape,
                            uint32_t ndim, vm_value_t *out) {
  uint64_t nbytes;
  /* Checked before allocating so a bad shape never touches the device. */
  VM_RETURN_IF_ERROR(check_tensor_type("alloc tensor", dtype, shape, ndim, &nbytes));
  vm_value_t sv;
  VM_RETURN_IF_ERROR(vm_storage_alloc(alloc, nbytes, &sv));
  vm_status_t st = tensor_make(vm_value_as_storage(&sv), 0, dtype, shape, ndim, out);
  /* The tensor holds its own reference; on failure this frees the block. */
  vm_value_release(&sv);
  return st;
}

int64_t vm_tensor_numel(const vm_tensor_t *t) {
  int64_t n = 1;
  for (uint32_t i = 0; i < t->ndim; i++) n *= t->shape[i]; /* no overflow: checked at creation */
  return n;
}

uint64_t vm_tensor_nbytes_of(const vm_tensor_t *t) {
  uint64_t n = (uint64_t)vm_tensor_numel(t);
  unsigned per = vm_dtype_per_byte(t->dtype);
  if (per > 1) return n / per + (n % per != 0); /* packed: ceil(n / per) */
  return n * (uint64_t)vm_dtype_bytes(t->dtype);
}

vm_status_t vm_value_get_int(const vm_value_t *v, const char *what, int64_t *out) {
  if (v->kind == VM_VAL_INT || v->kind == VM_VAL_BOOL) {
    *out = v->u.i;
    return VM_STATUS_OK;
  }
  return vm_status_make(VM_INVALID_ARGUMENT, "%s: expected an int, got %s", what ? what : "value",
                        vm_value_kind_name(v->kind));
}
