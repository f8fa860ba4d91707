/* The C API half of bench/bench_python.py: the calls the Python package
 * makes, made straight through libvmclient's public API, so that the
 * difference is what Python and the binding cost. Built as a shared library
 * (libcapi_calls.so) that the benchmark loads with ctypes: both halves run
 * in the same process, in alternating batches, so that the load of a shared
 * machine hits them alike.
 *
 * On a VM on the agent's cpu device running `ident(x) -> x`:
 *   capi_ping      n x vmc_ping
 *   capi_call      n x (vmc_set_input of the caller's float32 tensor, wrapped
 *                  without a copy + vmc_invoke + vmc_get_output into one new
 *                  allocation + vmc_tensor_free): what vm["ident"](x) does
 *   capi_call_into the same, the output into the caller's buffer
 *                  (vmc_get_output_into): what get_output(out=) does
 * Each returns the batch's wall seconds and stores the calling thread's CPU
 * seconds in *cpu_s; a negative return is an error (printed on stderr). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vmrpc/vmclient.h"

#define EXPORT __attribute__((visibility("default")))

typedef struct capi {
  vmc_conn_t *conn;
  vmc_vm_t vm;
} capi_t;

static int failed(vm_status_t st, const char *what) {
  if (!st) return 0;
  fprintf(stderr, "capi_calls: %s: %s: %s\n", what, vm_code_name(vm_status_code(st)),
          vm_status_message(st));
  vm_status_free(st);
  return 1;
}

static double clock_s(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

EXPORT capi_t *capi_open(const char *url, const char *model);
EXPORT void capi_close(capi_t *h);
EXPORT double capi_ping(capi_t *h, long n, double *cpu_s);
EXPORT double capi_call(capi_t *h, long n, float *x, long numel, double *cpu_s);
EXPORT double capi_call_into(capi_t *h, long n, float *x, long numel, float *out, double *cpu_s);

/* Connects, uploads model and makes a VM on the cpu device; NULL on error. */
capi_t *capi_open(const char *url, const char *model) {
  capi_t *h = calloc(1, sizeof(*h));
  if (!h) return NULL;
  vmc_exec_t ex;
  vmc_device_spec_t dev = {"cpu", NULL};
  if (failed(vmc_connect(url, NULL, &h->conn), "connect") ||
      failed(vmc_upload_file(h->conn, model, NULL, NULL, &ex, NULL), "upload") ||
      failed(vmc_create_vm(h->conn, ex, &dev, 1, NULL, &h->vm), "create_vm")) {
    capi_close(h);
    return NULL;
  }
  return h;
}

void capi_close(capi_t *h) {
  if (!h) return;
  vmc_close(h->conn);
  free(h);
}

double capi_ping(capi_t *h, long n, double *cpu_s) {
  double w0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
  for (long i = 0; i < n; i++)
    if (failed(vmc_ping(h->conn, NULL), "ping")) return -1;
  *cpu_s = clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
  return clock_s(CLOCK_MONOTONIC) - w0;
}

/* One set_input + invoke, then the output into out (NULL: a new allocation). */
static int call_once(capi_t *h, const vmc_tensor_t *t, float *out) {
  if (failed(vmc_set_input(h->conn, h->vm, "ident", 0, t), "set_input") ||
      failed(vmc_invoke(h->conn, h->vm, "ident", 0, NULL), "invoke"))
    return -1;
  if (out)
    return failed(vmc_get_output_into(h->conn, h->vm, "ident", NULL, 0, out, t->nbytes, NULL),
                  "get_output_into")
               ? -1
               : 0;
  vmc_tensor_t got;
  if (failed(vmc_get_output(h->conn, h->vm, "ident", NULL, 0, &got), "get_output")) return -1;
  vmc_tensor_free(&got);
  return 0;
}

static double call_batch(capi_t *h, long n, float *x, long numel, float *out, double *cpu_s) {
  int64_t shape = numel;
  vmc_tensor_t t;
  if (failed(vmc_tensor_wrap(VM_F32, 1, &shape, x, &t), "wrap")) return -1;
  double w0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
  for (long i = 0; i < n; i++)
    if (call_once(h, &t, out) != 0) return -1;
  *cpu_s = clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
  return clock_s(CLOCK_MONOTONIC) - w0;
}

double capi_call(capi_t *h, long n, float *x, long numel, double *cpu_s) {
  return call_batch(h, n, x, numel, NULL, cpu_s);
}

double capi_call_into(capi_t *h, long n, float *x, long numel, float *out, double *cpu_s) {
  return call_batch(h, n, x, numel, out, cpu_s);
}
