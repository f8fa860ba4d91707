/* Invocation by name and value, and the stateful API: inputs and results
 * kept in the machine per function, and saved bindings (save_function). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_internal.h"
#include "machine_internal.h"

/* ---------------------------------------------------------------------------
 * Lookup
 */

static int64_t find_bytecode(const vm_machine_t *m, const char *name) {
  return vm_executable_find_function(m->exec, name, VM_FUNC_BYTECODE);
}

static vmi_saved_t *find_saved(const vm_machine_t *m, const char *name) {
  for (uint32_t i = 0; i < m->num_saved; i++)
    if (strcmp(m->saved[i].name, name) == 0) return &m->saved[i];
  return NULL;
}

static vm_status_t not_found(const char *name) {
  char shown[128];
  return vm_status_make(VM_NOT_FOUND, "no function or saved binding named '%s'",
                        vmi_show_name(name, shown, sizeof(shown)));
}

/* ---------------------------------------------------------------------------
 * Calls
 */

/* Calls a closure with extra args appended to its bound ones. */
static vm_status_t call_closure(vm_machine_t *m, vm_closure_t *c, const vm_value_t *args,
                                uint32_t nargs, vm_value_t *out) {
  *out = vm_value_none();
  uint64_t total = (uint64_t)c->num_bound + nargs;
  if (total > UINT32_MAX)
    return vm_status_make(VM_INVALID_ARGUMENT, "too many arguments for a closure call");
  vm_value_t small[16];
  vm_value_t *all = small;
  if (total > 16) {
    all = malloc((size_t)total * sizeof(*all));
    if (!all) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory for call arguments");
  }
  if (c->num_bound) memcpy(all, c->bound, c->num_bound * sizeof(*all));
  if (nargs) memcpy(all + c->num_bound, args, nargs * sizeof(*all));
  /* The bound values are borrowed from c: hold c for the call, in case the
   * callee drops the last other reference (a re-saved binding). */
  vm_object_retain(&c->hdr);
  vm_status_t st = vmi_call_function(m, c->func_idx, all, (uint32_t)total, out);
  vm_object_release(&c->hdr);
  if (all != small) free(all);
  return st;
}

vm_status_t vm_machine_call_value(vm_machine_t *m, const vm_value_t *callee, const vm_value_t *args,
                                  uint32_t nargs, vm_value_t *out) {
  *out = vm_value_none();
  if (!callee) return vm_status_make(VM_INVALID_ARGUMENT, "call of a NULL value");
  if (callee->kind == VM_VAL_FUNC) {
    if (callee->u.i < 0 || (uint64_t)callee->u.i >= m->exec->num_functions)
      return vm_status_make(VM_INVALID_ARGUMENT, "function value %lld out of range (%u functions)",
                            (long long)callee->u.i, m->exec->num_functions);
    return vmi_call_function(m, (uint32_t)callee->u.i, args, nargs, out);
  }
  if (callee->kind == VM_VAL_CLOSURE) {
    vm_closure_t *c = vm_value_as_closure(callee);
    if (c->func_idx >= m->exec->num_functions)
      return vm_status_make(VM_INVALID_ARGUMENT,
                            "closure of function %u out of range (%u functions)", c->func_idx,
                            m->exec->num_functions);
    return call_closure(m, c, args, nargs, out);
  }
  return vm_status_make(VM_INVALID_ARGUMENT, "a %s value cannot be called",
                        vm_value_kind_name(callee->kind));
}

vm_status_t vm_machine_invoke(vm_machine_t *m, const char *func, const vm_value_t *args,
                              uint32_t nargs, vm_value_t *out) {
  *out = vm_value_none();
  if (!func) return vm_status_make(VM_INVALID_ARGUMENT, "invoke needs a function name");
  int64_t fi = find_bytecode(m, func);
  if (fi >= 0) return vmi_call_function(m, (uint32_t)fi, args, nargs, out);
  vmi_saved_t *s = find_saved(m, func);
  if (s) return call_closure(m, vm_value_as_closure(&s->closure), args, nargs, out);
  return not_found(func);
}

/* ---------------------------------------------------------------------------
 * Inputs: type check and placement on device 0
 */

/* "float32[?, 4]" / "float32[any rank]" into buf. */
static const char *type_str(vm_dtype_t dt, int32_t ndim, const int64_t *dims, char *buf,
                            size_t len) {
  char d[24];
  vm_dtype_str(dt, d, sizeof(d));
  if (ndim < 0) {
    snprintf(buf, len, "%s[any rank]", d);
    return buf;
  }
  size_t at = (size_t)snprintf(buf, len, "%s[", d);
  for (int32_t i = 0; i < ndim && at < len; i++) {
    if (dims[i] < 0)
      at += (size_t)snprintf(buf + at, len - at, "%s?", i ? ", " : "");
    else
      at += (size_t)snprintf(buf + at, len - at, "%s%lld", i ? ", " : "", (long long)dims[i]);
  }
  if (at < len) snprintf(buf + at, len - at, "]");
  return buf;
}

/* Checks v against the declared type of parameter idx of f. */
static vm_status_t check_param_type(const vm_function_t *f, uint32_t idx, const vm_value_t *v) {
  const vm_param_t *p = &f->params[idx];
  if (!p->has_type) return VM_STATUS_OK;
  char fname[96], pname[96], want[256], got[256];
  vmi_show_name(f->name, fname, sizeof(fname));
  vmi_show_name(p->name, pname, sizeof(pname));
  type_str(p->dtype, p->ndim, p->shape, want, sizeof(want));
  const vm_tensor_t *t = vm_value_as_tensor(v);
  if (!t)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "input '%s' of '%s': expected a tensor %s, given a value of kind %s",
                          pname, fname, want, vm_value_kind_name(v->kind));
  type_str(t->dtype, (int32_t)t->ndim, t->shape, got, sizeof(got));
  if (!vm_dtype_equal(t->dtype, p->dtype))
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "input '%s' of '%s': dtype mismatch: expected %s, given %s", pname, fname,
                          want, got);
  if (p->ndim >= 0 && (uint32_t)p->ndim != t->ndim)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "input '%s' of '%s': rank mismatch: expected %s, given %s", pname, fname,
                          want, got);
  for (int32_t i = 0; p->ndim > 0 && i < p->ndim; i++) {
    if (p->shape[i] >= 0 && p->shape[i] != t->shape[i])
      return vm_status_make(VM_INVALID_ARGUMENT,
                            "input '%s' of '%s': extent mismatch in dim %d: expected %s, given %s",
                            pname, fname, i, want, got);
  }
  return VM_STATUS_OK;
}

/* An owned value for v with tensors moved onto device 0 (a copy when the
 * tensor lives elsewhere, else another reference). */
static vm_status_t to_device0(vm_machine_t *m, const vm_value_t *v, vm_value_t *out) {
  *out = vm_value_none();
  const vm_tensor_t *t = vm_value_as_tensor(v);
  vm_device_t *dst = m->devices[0];
  if (!t || t->storage->device == dst) {
    *out = *v;
    vm_value_retain(out);
    return VM_STATUS_OK;
  }
  vm_device_t *src = t->storage->device;
  vm_value_t nv;
  VM_RETURN_IF_ERROR(vm_tensor_alloc(m->allocators[0], t->dtype, t->shape, t->ndim, &nv));
  vm_tensor_t *d = vm_value_as_tensor(&nv);
  uint64_t nbytes = vm_tensor_nbytes_of(t);
  vm_status_t st = VM_STATUS_OK;
  if (nbytes == 0) {
    /* nothing to copy */
  } else if (src->type == VM_DEVICE_CPU) {
    st = dst->ops->copy_from_host(dst, d->storage->buffer, d->offset,
                                  (const char *)t->storage->buffer.handle + t->offset, nbytes);
  } else if (dst->type == VM_DEVICE_CPU) {
    st = src->ops->copy_to_host(src, (char *)d->storage->buffer.handle + d->offset,
                                t->storage->buffer, t->offset, nbytes);
  } else {
    /* Two non-host devices: bounce through host memory. */
    void *tmp = nbytes <= SIZE_MAX ? malloc((size_t)nbytes) : NULL;
    if (!tmp) {
      st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory staging %llu bytes",
                          (unsigned long long)nbytes);
    } else {
      st = src->ops->copy_to_host(src, tmp, t->storage->buffer, t->offset, nbytes);
      if (!st) st = dst->ops->copy_from_host(dst, d->storage->buffer, d->offset, tmp, nbytes);
      free(tmp);
    }
  }
  if (st) {
    vm_value_release(&nv);
    return vm_status_annotate(st, "copying an input onto device 0");
  }
  *out = nv;
  return VM_STATUS_OK;
}

/* Type-checks and places one argument of f; *out owned. */
static vm_status_t prepare_input(vm_machine_t *m, const vm_function_t *f, uint32_t idx,
                                 const vm_value_t *v, vm_value_t *out) {
  *out = vm_value_none();
  VM_RETURN_IF_ERROR(check_param_type(f, idx, v));
  return to_device0(m, v, out);
}

static vm_status_t set_input_idx(vm_machine_t *m, uint32_t fi, uint32_t index,
                                 const vm_value_t *value) {
  const vm_function_t *f = &m->exec->functions[fi];
  char fname[96];
  if (index >= f->num_args)
    return vm_status_make(VM_OUT_OF_RANGE, "input index %u out of range: '%s' has %u parameter%s",
                          index, vmi_show_name(f->name, fname, sizeof(fname)), f->num_args,
                          f->num_args == 1 ? "" : "s");
  if (!value) return vm_status_make(VM_INVALID_ARGUMENT, "set_input of a NULL value");
  vmi_fstate_t *s = &m->fstate[fi];
  if (!s->inputs) {
    s->inputs = calloc(f->num_args, sizeof(*s->inputs));
    s->input_set = calloc(f->num_args, 1);
    if (!s->inputs || !s->input_set) {
      free(s->inputs);
      free(s->input_set);
      s->inputs = NULL;
      s->input_set = NULL;
      return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory for inputs");
    }
  }
  vm_value_t v;
  VM_RETURN_IF_ERROR(prepare_input(m, f, index, value, &v));
  vm_value_t old = s->inputs[index];
  s->inputs[index] = v;
  s->input_set[index] = 1;
  vm_value_release(&old);
  return VM_STATUS_OK;
}

vm_status_t vm_machine_set_input(vm_machine_t *m, const char *func, uint32_t index,
                                 const vm_value_t *value) {
  if (!func) return vm_status_make(VM_INVALID_ARGUMENT, "set_input needs a function name");
  int64_t fi = find_bytecode(m, func);
  if (fi < 0) {
    char shown[128];
    return vm_status_make(VM_NOT_FOUND, "no function named '%s'",
                          vmi_show_name(func, shown, sizeof(shown)));
  }
  return set_input_idx(m, (uint32_t)fi, index, value);
}

vm_status_t vm_machine_set_input_by_name(vm_machine_t *m, const char *func, const char *param,
                                         const vm_value_t *value) {
  if (!func || !param)
    return vm_status_make(VM_INVALID_ARGUMENT, "set_input needs a function and a parameter name");
  int64_t fi = find_bytecode(m, func);
  char shown[128], pshown[128];
  if (fi < 0)
    return vm_status_make(VM_NOT_FOUND, "no function named '%s'",
                          vmi_show_name(func, shown, sizeof(shown)));
  const vm_function_t *f = &m->exec->functions[fi];
  for (uint32_t i = 0; i < f->num_args; i++)
    if (strcmp(f->params[i].name, param) == 0) return set_input_idx(m, (uint32_t)fi, i, value);
  return vm_status_make(VM_NOT_FOUND, "function '%s' has no parameter named '%s'",
                        vmi_show_name(func, shown, sizeof(shown)),
                        vmi_show_name(param, pshown, sizeof(pshown)));
}

/* ---------------------------------------------------------------------------
 * Stateful invocation and results
 */

/* Runs bytecode function fi with its set inputs. */
static vm_status_t run_with_inputs(vm_machine_t *m, uint32_t fi, vm_value_t *out) {
  const vm_function_t *f = &m->exec->functions[fi];
  vmi_fstate_t *s = &m->fstate[fi];
  uint32_t missing = 0;
  for (uint32_t i = 0; i < f->num_args; i++)
    if (!s->input_set || !s->input_set[i]) missing++;
  if (missing) {
    char list[1024], shown[96];
    size_t at = 0;
    list[0] = '\0';
    for (uint32_t i = 0; i < f->num_args && at < sizeof(list); i++) {
      if (s->input_set && s->input_set[i]) continue;
      at += (size_t)snprintf(list + at, sizeof(list) - at, "%s%s", at ? ", " : "",
                             vmi_show_name(f->params[i].name, shown, sizeof(shown)));
    }
    return vm_status_make(VM_FAILED_PRECONDITION,
                          "function '%s' has %u input%s not set: %s (set them with set_input)",
                          vmi_show_name(f->name, shown, sizeof(shown)), missing,
                          missing == 1 ? "" : "s", list);
  }
  /* Hold the inputs for the call: a builtin may re-enter and replace them. */
  vm_value_t small[16];
  vm_value_t *args = small;
  if (f->num_args > 16) {
    args = malloc((size_t)f->num_args * sizeof(*args));
    if (!args) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory for call arguments");
  }
  for (uint32_t i = 0; i < f->num_args; i++) {
    args[i] = s->inputs[i];
    vm_value_retain(&args[i]);
  }
  vm_status_t st = vmi_call_function(m, fi, f->num_args ? args : NULL, f->num_args, out);
  for (uint32_t i = 0; i < f->num_args; i++) vm_value_release(&args[i]);
  if (args != small) free(args);
  return st;
}

/* Runs func the way invoke_stateful does (a bytecode function with its set
 * inputs, or a saved binding with no further args) without keeping the
 * result: *out is owned by the caller. */
static vm_status_t vmi_run_stateful(vm_machine_t *m, const char *func, vm_value_t *out) {
  *out = vm_value_none();
  if (!func) return vm_status_make(VM_INVALID_ARGUMENT, "no function name given");
  int64_t fi = find_bytecode(m, func);
  if (fi >= 0) return run_with_inputs(m, (uint32_t)fi, out);
  vmi_saved_t *s = find_saved(m, func);
  if (s) return call_closure(m, vm_value_as_closure(&s->closure), NULL, 0, out);
  return not_found(func);
}

vm_status_t vm_machine_invoke_stateful(vm_machine_t *m, const char *func) {
  vm_value_t res;
  VM_RETURN_IF_ERROR(vmi_run_stateful(m, func, &res));
  /* Look the slot up again: the run may have re-saved bindings. */
  vm_value_t *slot;
  uint8_t *has;
  int64_t fi = find_bytecode(m, func);
  if (fi >= 0) {
    slot = &m->fstate[fi].result;
    has = &m->fstate[fi].has_result;
  } else {
    vmi_saved_t *s = find_saved(m, func);
    if (!s) {
      vm_value_release(&res);
      return not_found(func);
    }
    slot = &s->result;
    has = &s->has_result;
  }
  vm_value_t old = *slot;
  *slot = res;
  *has = 1;
  vm_value_release(&old);
  return VM_STATUS_OK;
}

/* The kept result of func at path (borrowed). */
static vm_status_t output_at(vm_machine_t *m, const char *func, const uint32_t *path,
                             uint32_t path_len, const vm_value_t **out) {
  if (!func) return vm_status_make(VM_INVALID_ARGUMENT, "no function name given");
  if (path_len && !path)
    return vm_status_make(VM_INVALID_ARGUMENT, "path of %u entries is NULL", path_len);
  char shown[128];
  const vm_value_t *v = NULL;
  int64_t fi = find_bytecode(m, func);
  vmi_saved_t *s = fi < 0 ? find_saved(m, func) : NULL;
  if (fi < 0 && !s) return not_found(func);
  if (fi >= 0 && m->fstate[fi].has_result) v = &m->fstate[fi].result;
  if (s && s->has_result) v = &s->result;
  if (!v)
    return vm_status_make(VM_NOT_FOUND, "'%s' has no result yet: run invoke_stateful first",
                          vmi_show_name(func, shown, sizeof(shown)));
  for (uint32_t d = 0; d < path_len; d++) {
    const vm_tuple_t *t = vm_value_as_tuple(v);
    if (!t)
      return vm_status_make(VM_INVALID_ARGUMENT,
                            "output path step %u: index %u into a %s value, not a tuple", d,
                            path[d], vm_value_kind_name(v->kind));
    if (path[d] >= t->size)
      return vm_status_make(VM_OUT_OF_RANGE,
                            "output path step %u: index %u out of range for a tuple of %u", d,
                            path[d], t->size);
    v = &t->fields[path[d]];
  }
  *out = v;
  return VM_STATUS_OK;
}

vm_status_t vm_machine_get_output(vm_machine_t *m, const char *func, const uint32_t *path,
                                  uint32_t path_len, vm_value_t *out) {
  *out = vm_value_none();
  const vm_value_t *v = NULL;
  VM_RETURN_IF_ERROR(output_at(m, func, path, path_len, &v));
  *out = *v;
  vm_value_retain(out);
  return VM_STATUS_OK;
}

vm_status_t vm_machine_get_output_arity(vm_machine_t *m, const char *func, const uint32_t *path,
                                        uint32_t path_len, int64_t *out_arity) {
  *out_arity = -1;
  const vm_value_t *v = NULL;
  VM_RETURN_IF_ERROR(output_at(m, func, path, path_len, &v));
  const vm_tuple_t *t = vm_value_as_tuple(v);
  if (t) *out_arity = t->size;
  return VM_STATUS_OK;
}

/* ---------------------------------------------------------------------------
 * Saved bindings
 */

vm_status_t vm_machine_save_function(vm_machine_t *m, const char *func, const char *saved_name,
                                     const vm_value_t *args, uint32_t nargs) {
  if (!func || !saved_name || !saved_name[0])
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "save_function needs a function and a non-empty name");
  if (nargs && !args)
    return vm_status_make(VM_INVALID_ARGUMENT, "%u arguments but no array", nargs);
  char shown[128], sshown[128];
  int64_t fi = find_bytecode(m, func);
  if (fi < 0)
    return vm_status_make(VM_NOT_FOUND, "no function named '%s' to save",
                          vmi_show_name(func, shown, sizeof(shown)));
  /* A binding named like a function would be unreachable by name. */
  if (find_bytecode(m, saved_name) >= 0)
    return vm_status_make(VM_ALREADY_EXISTS,
                          "'%s' is a function of the executable; pick another name",
                          vmi_show_name(saved_name, sshown, sizeof(sshown)));
  const vm_function_t *f = &m->exec->functions[fi];
  if (nargs != f->num_args)
    return vm_status_make(VM_INVALID_ARGUMENT, "function '%s' takes %u argument%s, %u given",
                          vmi_show_name(func, shown, sizeof(shown)), f->num_args,
                          f->num_args == 1 ? "" : "s", nargs);

  vm_status_t st = VM_STATUS_OK;
  vm_value_t *prep = calloc(nargs ? nargs : 1, sizeof(*prep));
  vm_value_t clo = vm_value_none();
  char *name_copy = NULL;
  if (!prep) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory saving a binding");
  for (uint32_t i = 0; i < nargs; i++)
    if ((st = prepare_input(m, f, i, &args[i], &prep[i]))) goto done;
  if ((st = vm_closure_new((uint32_t)fi, prep, nargs, &clo))) goto done;

  vmi_saved_t *s = find_saved(m, saved_name);
  if (s) {
    vm_value_t old = s->closure, old_res = s->result;
    s->closure = clo;
    s->result = vm_value_none();
    s->has_result = 0;
    clo = vm_value_none();
    vm_value_release(&old);
    vm_value_release(&old_res);
    goto done;
  }
  if (m->num_saved == m->cap_saved) {
    uint32_t ncap = m->cap_saved ? m->cap_saved * 2 : 4;
    vmi_saved_t *ns = realloc(m->saved, ncap * sizeof(*ns));
    if (!ns) {
      st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory saving a binding");
      goto done;
    }
    m->saved = ns;
    m->cap_saved = ncap;
  }
  if (!(name_copy = strdup(saved_name))) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory saving a binding");
    goto done;
  }
  s = &m->saved[m->num_saved++];
  s->name = name_copy;
  s->closure = clo;
  s->result = vm_value_none();
  s->has_result = 0;
  clo = vm_value_none();

done:
  for (uint32_t i = 0; i < nargs; i++) vm_value_release(&prep[i]);
  free(prep);
  vm_value_release(&clo);
  return st;
}

/* ---------------------------------------------------------------------------
 * Clearing
 */

static void fstate_clear(vmi_fstate_t *s, uint32_t num_args) {
  if (s->inputs)
    for (uint32_t i = 0; i < num_args; i++) vm_value_release(&s->inputs[i]);
  free(s->inputs);
  free(s->input_set);
  s->inputs = NULL;
  s->input_set = NULL;
  vm_value_release(&s->result);
  s->has_result = 0;
}

void vm_machine_clear_state(vm_machine_t *m, const char *func) {
  const vm_executable_t *e = m->exec;
  if (!func) {
    for (uint32_t i = 0; i < e->num_functions; i++)
      fstate_clear(&m->fstate[i], e->functions[i].num_args);
    for (uint32_t i = 0; i < m->num_saved; i++) {
      vm_value_release(&m->saved[i].result);
      m->saved[i].has_result = 0;
    }
    return;
  }
  int64_t fi = find_bytecode(m, func);
  if (fi >= 0) {
    fstate_clear(&m->fstate[fi], e->functions[fi].num_args);
    return;
  }
  vmi_saved_t *s = find_saved(m, func);
  if (s) {
    vm_value_release(&s->result);
    s->has_result = 0;
  }
}

void vmi_state_free(vm_machine_t *m) {
  if (m->fstate) {
    vm_machine_clear_state(m, NULL);
    free(m->fstate);
    m->fstate = NULL;
  }
  for (uint32_t i = 0; i < m->num_saved; i++) {
    free(m->saved[i].name);
    vm_value_release(&m->saved[i].closure);
    vm_value_release(&m->saved[i].result);
  }
  free(m->saved);
  m->saved = NULL;
  m->num_saved = m->cap_saved = 0;
}
