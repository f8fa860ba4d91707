/* Builtin registry, machine creation and teardown, accessors, cancellation,
 * deadline and instrumentation settings. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec_internal.h"
#include "machine_internal.h"
#include "vmrpc/log.h"

/* ---------------------------------------------------------------------------
 * Registry: open addressing on FNV-1a, load <= 1/2. Lookups only happen at
 * machine creation, but an agent registers a few hundred names and creates
 * many machines, so linear scans would add up.
 */

typedef struct vmi_reg_entry {
  char *name; /* NULL = empty slot */
  uint64_t hash;
  vm_packed_fn fn;
  void *user;
} vmi_reg_entry_t;

struct vm_registry {
  vmi_reg_entry_t *slots;
  size_t cap; /* power of two */
  size_t count;
};

static uint64_t fnv1a(const char *s) {
  uint64_t h = UINT64_C(14695981039346656037);
  for (; *s; s++) h = (h ^ (uint8_t)*s) * UINT64_C(1099511628211);
  return h;
}

vm_status_t vm_registry_create(vm_registry_t **out_reg) {
  *out_reg = NULL;
  vm_registry_t *r = calloc(1, sizeof(*r));
  if (!r) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory creating a registry");
  r->cap = 64;
  r->slots = calloc(r->cap, sizeof(*r->slots));
  if (!r->slots) {
    free(r);
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory creating a registry");
  }
  *out_reg = r;
  return VM_STATUS_OK;
}

void vm_registry_free(vm_registry_t *reg) {
  if (!reg) return;
  for (size_t i = 0; i < reg->cap; i++) free(reg->slots[i].name);
  free(reg->slots);
  free(reg);
}

/* Slot holding name, or the empty slot where it would go. */
static vmi_reg_entry_t *reg_slot(const vm_registry_t *reg, const char *name, uint64_t h) {
  size_t mask = reg->cap - 1;
  for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
    vmi_reg_entry_t *e = &reg->slots[i];
    if (!e->name || (e->hash == h && strcmp(e->name, name) == 0)) return e;
  }
}

static int reg_grow(vm_registry_t *reg) {
  size_t ncap = reg->cap * 2;
  vmi_reg_entry_t *ns = calloc(ncap, sizeof(*ns));
  if (!ns) return -1;
  vmi_reg_entry_t *old = reg->slots;
  size_t ocap = reg->cap;
  reg->slots = ns;
  reg->cap = ncap;
  for (size_t i = 0; i < ocap; i++)
    if (old[i].name) *reg_slot(reg, old[i].name, old[i].hash) = old[i];
  free(old);
  return 0;
}

vm_status_t vm_registry_add(vm_registry_t *reg, const char *name, vm_packed_fn fn, void *user) {
  if (!reg || !name || !name[0] || !fn)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "registry add needs a registry, a name and a function");
  uint64_t h = fnv1a(name);
  vmi_reg_entry_t *e = reg_slot(reg, name, h);
  if (e->name)
    return vm_status_make(VM_ALREADY_EXISTS, "function '%s' is already registered", name);
  if ((reg->count + 1) * 2 > reg->cap) {
    if (reg_grow(reg) != 0)
      return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory growing the registry");
    e = reg_slot(reg, name, h);
  }
  char *copy = strdup(name);
  if (!copy) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory registering '%s'", name);
  e->name = copy;
  e->hash = h;
  e->fn = fn;
  e->user = user;
  reg->count++;
  return VM_STATUS_OK;
}

int vm_registry_find(const vm_registry_t *reg, const char *name, vm_packed_fn *out_fn,
                     void **out_user) {
  if (!reg || !name) return -1;
  const vmi_reg_entry_t *e = reg_slot(reg, name, fnv1a(name));
  if (!e->name) return -1;
  if (out_fn) *out_fn = e->fn;
  if (out_user) *out_user = e->user;
  return 0;
}

/* ---------------------------------------------------------------------------
 * Modes, clock
 */

const char *vm_exec_mode_name(vm_exec_mode_t mode) {
  switch (mode) {
    case VM_EXEC_BYTECODE: return "bytecode";
    case VM_EXEC_COMPILED: return "compiled";
  }
  return "unknown";
}

int vm_exec_mode_parse(const char *name, vm_exec_mode_t *out_mode) {
  if (!name) return -1;
  if (strcmp(name, "bytecode") == 0) {
    *out_mode = VM_EXEC_BYTECODE;
    return 0;
  }
  if (strcmp(name, "compiled") == 0) {
    *out_mode = VM_EXEC_COMPILED;
    return 0;
  }
  return -1;
}

uint64_t vm_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

/* ---------------------------------------------------------------------------
 * Creation
 */

/* Appends ", name" (or "name" first) to a growing message buffer. Returns
 * -1 on no memory. */
static int append_name(char **buf, size_t *len, size_t *cap, const char *name) {
  char shown[160];
  vmi_show_name(name, shown, sizeof(shown));
  size_t add = strlen(shown) + 2;
  if (*len + add + 1 > *cap) {
    size_t ncap = (*cap ? *cap * 2 : 256);
    while (ncap < *len + add + 1) ncap *= 2;
    char *nb = realloc(*buf, ncap);
    if (!nb) return -1;
    *buf = nb;
    *cap = ncap;
  }
  if (*len) {
    memcpy(*buf + *len, ", ", 2);
    *len += 2;
  }
  memcpy(*buf + *len, shown, add - 2);
  *len += add - 2;
  (*buf)[*len] = '\0';
  return 0;
}

/* Fills m->funcs; all missing packed names go into one NOT_FOUND. */
static vm_status_t resolve_functions(vm_machine_t *m) {
  const vm_executable_t *e = m->exec;
  m->funcs = calloc(e->num_functions ? e->num_functions : 1, sizeof(*m->funcs));
  m->func_vals = calloc(e->num_functions ? e->num_functions : 1, sizeof(*m->func_vals));
  if (!m->funcs || !m->func_vals)
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory resolving functions");
  char *missing = NULL;
  size_t len = 0, cap = 0;
  uint32_t num_missing = 0;
  for (uint32_t i = 0; i < e->num_functions; i++) {
    const vm_function_t *f = &e->functions[i];
    vmi_func_t *rf = &m->funcs[i];
    rf->kind = f->kind;
    rf->idx = i;
    rf->def = f;
    m->func_vals[i].kind = VM_VAL_FUNC;
    m->func_vals[i].u.i = i;
    if (f->kind == VM_FUNC_BYTECODE) {
      rf->num_args = f->num_args;
      rf->num_regs = f->num_regs;
      rf->start = f->start_instr;
      continue;
    }
    if (m->registry && vm_registry_find(m->registry, f->name, &rf->fn, &rf->user) == 0) continue;
    num_missing++;
    if (append_name(&missing, &len, &cap, f->name) != 0) {
      free(missing);
      return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory listing missing functions");
    }
  }
  if (num_missing) {
    vm_status_t st =
        vm_status_make(VM_NOT_FOUND, "executable needs function%s missing from this agent: %s",
                       num_missing > 1 ? "s" : "", missing);
    free(missing);
    return st;
  }
  return VM_STATUS_OK;
}

/* Makes the value of one constant; tensors are copied onto device 0. */
static vm_status_t materialise_constant(vm_machine_t *m, uint32_t idx, vm_value_t *out) {
  const vm_constant_t *c = &m->exec->constants[idx];
  switch (c->kind) {
    case VM_CONST_INT: *out = vm_value_int(c->u.i); return VM_STATUS_OK;
    case VM_CONST_FLOAT: *out = vm_value_float(c->u.f); return VM_STATUS_OK;
    case VM_CONST_DTYPE: *out = vm_value_dtype(c->u.dtype); return VM_STATUS_OK;
    case VM_CONST_STRING:
    case VM_CONST_SHAPE: {
      /* a copy per machine: counted */
      uint64_t bytes = c->kind == VM_CONST_STRING ? (uint64_t)c->u.str.len + 1
                                                  : (uint64_t)c->u.shape.ndim * sizeof(int64_t);
      VM_RETURN_IF_ERROR(vm_budget_charge(m->budget, bytes, "a string or shape constant"));
      m->const_bytes += bytes;
      if (c->kind == VM_CONST_STRING) return vm_string_new(c->u.str.data, c->u.str.len, out);
      return vm_shape_new(c->u.shape.dims, c->u.shape.ndim, out);
    }
    case VM_CONST_TENSOR: {
      vm_value_t t = vm_value_none();
      VM_RETURN_IF_ERROR(vm_tensor_alloc(m->allocators[0], c->u.tensor.dtype, c->u.tensor.shape,
                                         c->u.tensor.ndim, &t));
      if (c->u.tensor.nbytes) {
        vm_tensor_t *tt = vm_value_as_tensor(&t);
        vm_device_t *dev = m->devices[0];
        vm_status_t st = dev->ops->copy_from_host(dev, tt->storage->buffer, tt->offset,
                                                  c->u.tensor.data, c->u.tensor.nbytes);
        if (st) {
          vm_value_release(&t);
          return st;
        }
      }
      *out = t;
      return VM_STATUS_OK;
    }
  }
  return vm_status_make(VM_INTERNAL, "constant %u has unknown kind %d", idx, (int)c->kind);
}

static vm_status_t setup_devices(vm_machine_t *m, const vm_machine_config_t *cfg) {
  uint32_t given = cfg->num_devices;
  if (given && !cfg->devices)
    return vm_status_make(VM_INVALID_ARGUMENT, "%u devices configured but no device list", given);
  int has_cpu = 0;
  for (uint32_t i = 0; i < given; i++) {
    if (!cfg->devices[i])
      return vm_status_make(VM_INVALID_ARGUMENT, "device %u of the configuration is NULL", i);
    if (cfg->devices[i]->type == VM_DEVICE_CPU && !has_cpu) {
      has_cpu = 1;
      m->cpu_index = i;
    }
  }
  uint32_t n = given + (has_cpu ? 0 : 1);
  m->devices = calloc(n, sizeof(*m->devices));
  m->allocators = calloc(n, sizeof(*m->allocators));
  if (!m->devices || !m->allocators)
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory creating a machine");
  for (uint32_t i = 0; i < given; i++) m->devices[i] = cfg->devices[i];
  if (!has_cpu) {
    VM_RETURN_IF_ERROR(vm_cpu_device_create(0, &m->owned_cpu));
    m->devices[given] = m->owned_cpu;
    m->cpu_index = given;
  }
  m->num_devices = n;
  for (uint32_t i = 0; i < n; i++) {
    vm_allocator_kind_t kind = VM_ALLOC_POOLED;
    if (i < given && cfg->allocators) kind = cfg->allocators[i];
    if (kind != VM_ALLOC_NAIVE && kind != VM_ALLOC_POOLED)
      return vm_status_make(VM_INVALID_ARGUMENT, "device %u: unknown allocator kind %d", i,
                            (int)kind);
    VM_RETURN_IF_ERROR(vm_allocator_create(m->devices[i], kind, &m->allocators[i]));
    if (cfg->mem_limit_bytes) vm_allocator_set_limit(m->allocators[i], cfg->mem_limit_bytes);
  }
  return VM_STATUS_OK;
}

vm_status_t vm_machine_create(const vm_executable_t *exec, const vm_machine_config_t *cfg,
                              vm_machine_t **out_m) {
  if (!out_m) return vm_status_make(VM_INVALID_ARGUMENT, "vm_machine_create: out_m is NULL");
  *out_m = NULL;
  if (!exec || !cfg)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "vm_machine_create needs an executable and a config");
  if (cfg->mode != VM_EXEC_BYTECODE && cfg->mode != VM_EXEC_COMPILED)
    return vm_status_make(VM_INVALID_ARGUMENT, "unknown execution mode %d", (int)cfg->mode);
  vm_status_t st = VM_STATUS_OK;
  vm_machine_t *m = calloc(1, sizeof(*m));
  if (!m) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory creating a machine");
  m->exec = exec;
  m->mode = cfg->mode;
  m->registry = cfg->registry;
  m->max_call_depth = cfg->max_call_depth ? cfg->max_call_depth : VMI_DEFAULT_MAX_CALL_DEPTH;
  m->budget = cfg->host_budget;
  atomic_init(&m->cancel_requested, 0);
  m->vm_val.kind = VM_VAL_OPAQUE;
  m->vm_val.u.ptr = m;

  if ((st = resolve_functions(m))) goto fail;
  if ((st = setup_devices(m, cfg))) goto fail;

  m->consts = calloc(exec->num_constants ? exec->num_constants : 1, sizeof(*m->consts));
  m->fstate = calloc(exec->num_functions ? exec->num_functions : 1, sizeof(*m->fstate));
  if (!m->consts || !m->fstate) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory creating a machine");
    goto fail;
  }
  for (uint32_t i = 0; i < exec->num_constants; i++) {
    if ((st = materialise_constant(m, i, &m->consts[i]))) {
      st = vm_status_annotate(st, "constant %u", i);
      goto fail;
    }
  }
  if (m->mode == VM_EXEC_COMPILED && (st = vmi_compile(m))) goto fail;
  *out_m = m;
  return VM_STATUS_OK;

fail:
  vm_machine_free(m);
  return st;
}

void vm_machine_free(vm_machine_t *m) {
  if (!m) return;
  vmi_state_free(m);
  if (m->consts && m->exec)
    for (uint32_t i = 0; i < m->exec->num_constants; i++) vm_value_release(&m->consts[i]);
  free(m->consts);
  vm_budget_release(m->budget, m->const_bytes);
  vmi_compiled_free(m);
  vmi_stacks_free(m);
  /* Allocators after every value that may hold their memory. */
  if (m->allocators)
    for (uint32_t i = 0; i < m->num_devices; i++) vm_allocator_destroy(m->allocators[i]);
  free(m->allocators);
  free(m->devices);
  vm_device_destroy(m->owned_cpu);
  free(m->funcs);
  free(m->func_vals);
  free(m);
}

/* ---------------------------------------------------------------------------
 * Accessors and settings
 */

const vm_executable_t *vm_machine_executable(const vm_machine_t *m) {
  return m->exec;
}
vm_exec_mode_t vm_machine_mode(const vm_machine_t *m) {
  return m->mode;
}
uint32_t vm_machine_num_devices(const vm_machine_t *m) {
  return m->num_devices;
}
vm_device_t *vm_machine_device(const vm_machine_t *m, uint32_t idx) {
  return idx < m->num_devices ? m->devices[idx] : NULL;
}
vm_allocator_t *vm_machine_allocator(const vm_machine_t *m, uint32_t idx) {
  return idx < m->num_devices ? m->allocators[idx] : NULL;
}
uint32_t vm_machine_cpu_device_index(const vm_machine_t *m) {
  return m->cpu_index;
}

void vm_machine_cancel(vm_machine_t *m) {
  atomic_store_explicit(&m->cancel_requested, 1, memory_order_relaxed);
}

vm_status_t vm_machine_check_stop(const vm_machine_t *m) {
  if (atomic_load_explicit(&m->cancel_requested, memory_order_relaxed))
    return vm_status_make(VM_CANCELLED, "invocation cancelled");
  if (m->active_deadline_ns && vm_now_ns() >= m->active_deadline_ns)
    return vm_status_make(VM_DEADLINE_EXCEEDED, "invocation deadline exceeded");
  return VM_STATUS_OK;
}

void vm_machine_cancel_reset(vm_machine_t *m) {
  atomic_store_explicit(&m->cancel_requested, 0, memory_order_relaxed);
}

int vm_machine_cancel_requested(const vm_machine_t *m) {
  return atomic_load_explicit(&m->cancel_requested, memory_order_relaxed) != 0;
}

void vm_machine_set_deadline(vm_machine_t *m, uint64_t deadline_ns) {
  m->deadline_ns = deadline_ns;
}

void vm_machine_set_instrument(vm_machine_t *m, vm_instrument_fn fn, void *user) {
  m->instrument_fn = fn;
  m->instrument_user = fn ? user : NULL;
}
