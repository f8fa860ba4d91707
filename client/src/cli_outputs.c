/* A run's outputs: the result's leaves as tensors (tuples flattened,
 * the ones the agent left walked here) and reading their elements. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_net.h"

/* ---------------------------------------------------------------------------
 * Outputs
 */

static vm_status_t value_to_tensor(vmc_value_t *v, cli_output_t *o) {
  o->kind = v->kind;
  switch (v->kind) {
    case VMC_VALUE_TENSOR:
      o->tensor = v->tensor;
      o->is_tensor = 1;
      memset(&v->tensor, 0, sizeof(v->tensor));
      return VM_STATUS_OK;
    case VMC_VALUE_INT:
    case VMC_VALUE_FLOAT:
    case VMC_VALUE_BOOL: {
      vm_dtype_t dt = v->kind == VMC_VALUE_INT     ? VM_I64
                      : v->kind == VMC_VALUE_FLOAT ? VM_F64
                                                   : VM_BOOL;
      VM_RETURN_IF_ERROR(vmc_tensor_alloc(dt, 0, NULL, &o->tensor));
      if (v->kind == VMC_VALUE_INT)
        memcpy(o->tensor.data, &v->i, 8);
      else if (v->kind == VMC_VALUE_FLOAT)
        memcpy(o->tensor.data, &v->f, 8);
      else
        *(uint8_t *)o->tensor.data = v->b ? 1 : 0;
      o->is_tensor = 1;
      return VM_STATUS_OK;
    }
    case VMC_VALUE_SHAPE: {
      int64_t n = v->shape_ndim;
      VM_RETURN_IF_ERROR(vmc_tensor_alloc(VM_I64, 1, &n, &o->tensor));
      if (n) memcpy(o->tensor.data, v->shape, (size_t)n * 8);
      o->is_tensor = 1;
      return VM_STATUS_OK;
    }
    case VMC_VALUE_STRING:
      o->text = strdup(v->s ? v->s : "");
      return o->text ? VM_STATUS_OK : vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
    default:
      o->text = strdup("none");
      return o->text ? VM_STATUS_OK : vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  }
}

typedef struct fetch_ctx {
  const cli_model_t *m;
  const char *func;
  cli_output_t *outs;
  uint32_t n;
  int rc;
  uint64_t nodes; /* tuple elements walked: bounds round trips to the agent */
} fetch_ctx_t;

/* The name an executable gives output i ("output.I.name" metadata, which
 * ONNX imports carry), or NULL. */
static const char *output_meta_name(const vm_executable_t *e, uint32_t i) {
  char key[48];
  snprintf(key, sizeof(key), "output.%u.name", i);
  for (uint32_t k = 0; e && k < e->num_meta; k++)
    if (strcmp(e->meta[k].key, key) == 0 && e->meta[k].value[0]) return e->meta[k].value;
  return NULL;
}

/* The name of the output at path: the model's own (an ONNX graph's, only
 * characters that are safe in a file name), else the path ("0", "1.0"). */
static const char *leaf_name(const fetch_ctx_t *c, const uint32_t *path, uint32_t depth, char *name,
                             size_t cap) {
  const char *mname = depth <= 1 ? output_meta_name(c->m->exec, depth ? path[0] : 0) : NULL;
  if (mname) {
    size_t k = 0;
    for (; mname[k] && k < cap - 1; k++) {
      char ch = mname[k];
      int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
               ch == '_' || ch == '-';
      name[k] = ok ? ch : '_';
    }
    name[k] = 0;
  } else if (depth == 0) {
    snprintf(name, cap, "0");
  } else {
    size_t k = 0;
    for (uint32_t i = 0; i < depth && k < cap; i++)
      k += (size_t)snprintf(name + k, cap - k, "%s%u", i ? "." : "", path[i]);
  }
  return name;
}

/* Adds the leaf at path with value v (taken over) to the outputs. */
static void leaf_take(fetch_ctx_t *c, const uint32_t *path, uint32_t depth, vmc_value_t *v) {
  if (c->n >= CLI_MAX_OUTPUTS) {
    vmc_value_free(v);
    cli_error(c->m->cmd, "the result has more than %d values", CLI_MAX_OUTPUTS);
    c->rc = CLI_EXIT_REMOTE;
    return;
  }
  cli_output_t *o = &c->outs[c->n];
  memset(o, 0, sizeof(*o));
  leaf_name(c, path, depth, o->name, sizeof(o->name));
  c->n++;
  vm_status_t st = value_to_tensor(v, o);
  vmc_value_free(v);
  if (st) {
    cli_error(c->m->cmd, "%s", vm_status_message(st));
    vm_status_free(st);
    c->rc = CLI_EXIT_INTERNAL;
  }
}

static void fetch_rec(fetch_ctx_t *c, uint32_t *path, uint32_t depth) {
  if (c->rc) return;
  int64_t arity = -1;
  vm_status_t st = vmc_get_output_arity(c->m->conn, c->m->vm, c->func, path, depth, &arity);
  if (st) {
    c->rc = cli_remote_error(c->m->cmd, "get output arity", st);
    return;
  }
  if (arity >= 0) {
    if (depth >= CLI_MAX_OUTPUT_DEPTH) {
      cli_error(c->m->cmd, "the result is nested deeper than %d tuples", CLI_MAX_OUTPUT_DEPTH);
      c->rc = CLI_EXIT_REMOTE;
      return;
    }
    /* The arity comes from the agent: a result of empty tuples has no
     * values to count, so the walk itself is bounded. */
    if ((uint64_t)arity > 4u * CLI_MAX_OUTPUTS - c->nodes) {
      cli_error(c->m->cmd, "the result has more than %d values", CLI_MAX_OUTPUTS);
      c->rc = CLI_EXIT_REMOTE;
      return;
    }
    c->nodes += (uint64_t)arity;
    for (int64_t i = 0; i < arity && !c->rc; i++) {
      path[depth] = (uint32_t)i;
      fetch_rec(c, path, depth + 1);
    }
    return;
  }
  if (c->n >= CLI_MAX_OUTPUTS) {
    cli_error(c->m->cmd, "the result has more than %d values", CLI_MAX_OUTPUTS);
    c->rc = CLI_EXIT_REMOTE;
    return;
  }
  vmc_value_t v;
  memset(&v, 0, sizeof(v));
  st = vmc_get_output_value(c->m->conn, c->m->vm, c->func, path, depth, &v);
  if (st) {
    char what[96];
    snprintf(what, sizeof(what), "get output %s",
             leaf_name(c, path, depth, c->outs[c->n].name, sizeof(c->outs[c->n].name)));
    c->rc = cli_remote_error(c->m->cmd, what, st);
    return;
  }
  leaf_take(c, path, depth, &v);
}

int cli_outputs_from_run(const cli_model_t *m, vmc_run_result_t *res, cli_output_t **out,
                         uint32_t *out_n) {
  *out = NULL;
  *out_n = 0;
  fetch_ctx_t c = {m, m->o->func ? m->o->func : "main", NULL, 0, 0, 0};
  c.outs = calloc(CLI_MAX_OUTPUTS, sizeof(cli_output_t));
  if (!c.outs) {
    cli_error(m->cmd, "out of memory");
    return CLI_EXIT_INTERNAL;
  }
  uint32_t path[CLI_MAX_OUTPUT_DEPTH + 1] = {0};
  for (uint32_t i = 0; i < res->num_outputs && !c.rc; i++) {
    vmc_run_output_t *ro = &res->outputs[i];
    if (ro->path_len > CLI_MAX_OUTPUT_DEPTH) {
      cli_error(m->cmd, "the result is nested deeper than %d tuples", CLI_MAX_OUTPUT_DEPTH);
      c.rc = CLI_EXIT_REMOTE;
      break;
    }
    memcpy(path, ro->path, ro->path_len * sizeof(uint32_t));
    c.nodes++;
    if (ro->value.kind == VMC_VALUE_TUPLE)
      fetch_rec(&c, path, ro->path_len); /* left for the client to walk */
    else
      leaf_take(&c, path, ro->path_len, &ro->value);
  }
  if (c.rc) {
    cli_outputs_free(c.outs, c.n);
    return c.rc;
  }
  *out = c.outs;
  *out_n = c.n;
  return CLI_EXIT_OK;
}

void cli_outputs_free(cli_output_t *o, uint32_t n) {
  if (!o) return;
  for (uint32_t i = 0; i < n; i++) {
    vmc_tensor_free(&o[i].tensor);
    free(o[i].text);
  }
  free(o);
}

/* ---------------------------------------------------------------------------
 * Elements
 */

uint64_t cli_tensor_count(const vmc_tensor_t *t) {
  size_t b = (t->dtype.bits + 7) / 8;
  return b ? t->nbytes / b : 0;
}

double cli_tensor_elem(const vmc_tensor_t *t, uint64_t i) {
  return vm_dtype_load_f64(t->dtype, t->data, i);
}

const char *cli_tensor_type(const vmc_tensor_t *t, char *buf, size_t n) {
  char dt[32];
  vm_dtype_str(t->dtype, dt, sizeof(dt));
  size_t k = (size_t)snprintf(buf, n, "%s[", dt);
  for (uint32_t i = 0; i < t->ndim && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
  if (k < n) snprintf(buf + k, n - k, "]");
  return buf;
}

void cli_tensor_json(cli_json_t *j, const vmc_tensor_t *t) {
  char dt[32];
  cli_json_str(j, "dtype", vm_dtype_str(t->dtype, dt, sizeof(dt)));
  cli_json_arr(j, "shape");
  for (uint32_t i = 0; i < t->ndim; i++) cli_json_int(j, NULL, t->shape[i]);
  cli_json_arr_end(j);
}

double cli_percentile(const double *sorted, uint32_t n, double p) {
  if (n == 0) return NAN;
  double pos = p / 100.0 * (double)(n - 1);
  uint32_t lo = (uint32_t)floor(pos);
  if (lo >= n - 1) return sorted[n - 1];
  double frac = pos - lo;
  return sorted[lo] + (sorted[lo + 1] - sorted[lo]) * frac;
}
