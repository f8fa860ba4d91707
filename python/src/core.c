/* vmrpc._core: the CPython binding of libvmclient (client/include/vmrpc/vmclient.h).
 *
 * The Python package (python/vmrpc) builds its API on this module; nothing
 * here is meant to be used directly. What it guarantees:
 * - Every call that goes to the network releases the GIL while it waits.
 * - Inputs are read in place through the buffer protocol (NumPy arrays,
 *   memoryviews, bytes): no copy is made on this side, only a
 *   non-contiguous array is made contiguous first.
 * - A tensor output is fetched by the library into one allocation of its
 *   size, which becomes the memory of the NumPy array handed back (no
 *   second copy); get_output_into() fills caller memory instead.
 * - Ctrl-C while the main thread waits in invoke, time_evaluate or profile
 *   cancels the run on the agent (a watcher thread sends the Cancel, repeated
 *   until the run ends), then KeyboardInterrupt is raised as usual.
 * - Errors carry the library's status code and message: the Python package
 *   registers one exception class per code with _set_errors().
 * Only public APIs are used: libvmclient's and the compiler library's
 * (vmcompiler/onnx.h, for compile_onnx). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "vm/executable.h"
#include "vmrpc/vmclient.h"
#include "vmcompiler/onnx.h"

/* ------------------------------------------------------------ module state
 * Set once by the package at import; borrowed from nowhere (owned here). */
static PyObject *g_errors;     /* dict: int code -> exception class */
static PyObject *g_base_error; /* fallback class (VMError) */
static PyObject *g_shape_type; /* vmrpc.Shape: a tuple subclass for shape values */
static PyObject *g_asarray;    /* numpy.asarray */
static PyObject *g_ascontig;   /* numpy.ascontiguousarray */
static unsigned long g_main_ident;

/* Raises the exception class registered for st's code with st's message,
 * frees st and returns NULL. */
static PyObject *raise_status(vm_status_t st) {
  int code = (int)vm_status_code(st);
  PyObject *cls = NULL;
  if (g_errors) {
    PyObject *key = PyLong_FromLong(code);
    if (key) {
      cls = PyDict_GetItemWithError(g_errors, key);
      Py_DECREF(key);
    }
  }
  if (!cls) cls = g_base_error ? g_base_error : PyExc_RuntimeError;
  /* Messages quote names from models and peers: bytes that are not UTF-8
   * must not turn the error into a UnicodeDecodeError. */
  const char *msg = vm_status_message(st);
  PyObject *text = PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "replace");
  PyObject *exc = text ? PyObject_CallFunction(cls, "Oi", text, code) : NULL;
  Py_XDECREF(text);
  vm_status_free(st);
  if (exc) {
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
  }
  return NULL;
}

/* ------------------------------------------------------- Ctrl-C handling
 * While the main thread blocks in a long call (GIL released), SIGINT goes to
 * on_sigint(): it wakes the watcher thread and hands the signal on to the
 * handler that was installed before (Python's, which records it). The
 * watcher sends vmc_cancel() for every call that was registered when the
 * signal came, every 100 ms until that call is gone (a Cancel that reaches the
 * agent before the run starts is not remembered there). A call is marked by
 * the signal count it started under (g_sigint_gen), not by time: one that
 * starts after the signal, however soon, is never cancelled by it. Only calls
 * of the main thread register: it is the thread that receives
 * KeyboardInterrupt. */
typedef struct long_call {
  vmc_conn_t *conn;
  vmc_vm_t vm;
  int hooked;
  unsigned gen; /* g_sigint_gen when it registered */
  struct long_call *next;
} long_call_t;

static pthread_mutex_t g_calls_lock = PTHREAD_MUTEX_INITIALIZER;
static long_call_t *g_calls;
static struct sigaction g_old_sigint;
static sem_t g_wake;
static int g_wake_ok;
static int g_watcher_running;
/* SIGINTs seen by on_sigint() (lock-free, so safe in a signal handler). */
static atomic_uint g_sigint_gen;
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "the SIGINT count must be lock-free");

static void on_sigint(int sig, siginfo_t *info, void *uctx) {
  int saved = errno;
  atomic_fetch_add_explicit(&g_sigint_gen, 1, memory_order_seq_cst);
  if (g_wake_ok) sem_post(&g_wake);
  if (g_old_sigint.sa_flags & SA_SIGINFO) {
    if (g_old_sigint.sa_sigaction) g_old_sigint.sa_sigaction(sig, info, uctx);
  } else if (g_old_sigint.sa_handler != SIG_DFL && g_old_sigint.sa_handler != SIG_IGN) {
    g_old_sigint.sa_handler(sig);
  }
  errno = saved;
}

static void *watcher_main(void *arg) {
  (void)arg;
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
  for (;;) {
    while (sem_wait(&g_wake) != 0 && errno == EINTR) {
    }
    for (;;) {
      /* Calls registered before the latest signal were interrupted; a call
       * that registered since (its gen is the current count) was not. */
      unsigned now = atomic_load_explicit(&g_sigint_gen, memory_order_seq_cst);
      pthread_mutex_lock(&g_calls_lock);
      int any = 0;
      for (long_call_t *c = g_calls; c; c = c->next) {
        if (c->gen == now) continue;
        any = 1;
        vm_status_free(vmc_cancel(c->conn, c->vm));
      }
      pthread_mutex_unlock(&g_calls_lock);
      if (!any) break;
      struct timespec ts = {0, 100 * 1000 * 1000};
      nanosleep(&ts, NULL);
    }
    /* A wake-up left on the semaphore (a signal during that loop) makes one
     * more pass, which finds nothing or the calls that signal interrupted. */
  }
  return NULL;
}

/* fork(): the registry's lock is taken around it so that the child gets it
 * in a known state; the child has no watcher thread and no long call of
 * the parent's threads. */
static void fork_prepare(void) {
  pthread_mutex_lock(&g_calls_lock);
}

static void fork_parent(void) {
  pthread_mutex_unlock(&g_calls_lock);
}

static void fork_child(void) {
  g_calls = NULL;
  g_watcher_running = 0;
  pthread_mutex_unlock(&g_calls_lock);
}

/* Starts the watcher once per process (again in a forked child). */
static int watcher_ready(void) {
  if (g_watcher_running) return 1;
  if (!g_wake_ok) {
    if (sem_init(&g_wake, 0, 0) != 0) return 0;
    g_wake_ok = 1;
    pthread_atfork(fork_prepare, fork_parent, fork_child);
  }
  pthread_t th;
  if (pthread_create(&th, NULL, watcher_main, NULL) != 0) return 0;
  pthread_detach(th);
  g_watcher_running = 1;
  return 1;
}

/* Called with the GIL held before a long call. Hooks SIGINT when on the
 * main thread and SIGINT has a handler (Python's, normally): two sigaction
 * calls per long call, nothing else. */
static void long_call_enter(long_call_t *lc, vmc_conn_t *conn, vmc_vm_t vm) {
  lc->conn = conn;
  lc->vm = vm;
  lc->hooked = 0;
  lc->next = NULL;
  if (PyThread_get_thread_ident() != g_main_ident || !watcher_ready()) return;
  struct sigaction ours, old;
  memset(&ours, 0, sizeof(ours));
  ours.sa_sigaction = on_sigint;
  ours.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&ours.sa_mask);
  pthread_mutex_lock(&g_calls_lock);
  /* on_sigint() chains to g_old_sigint: know it before ours is in place (it
   * is Python's handler on every later call, so one query is enough). */
  static int old_known;
  if (!old_known && sigaction(SIGINT, NULL, &g_old_sigint) == 0) old_known = 1;
  /* Counted before ours is in place: a signal from then on interrupts this call. */
  lc->gen = atomic_load_explicit(&g_sigint_gen, memory_order_seq_cst);
  if (sigaction(SIGINT, &ours, &old) == 0) {
    if (!(old.sa_flags & SA_SIGINFO) && (old.sa_handler == SIG_DFL || old.sa_handler == SIG_IGN)) {
      sigaction(SIGINT, &old, NULL); /* nobody catches Ctrl-C: leave it be */
    } else {
      g_old_sigint = old;
      lc->hooked = 1;
      lc->next = g_calls;
      g_calls = lc;
    }
  }
  pthread_mutex_unlock(&g_calls_lock);
}

static void long_call_leave(long_call_t *lc) {
  if (!lc->hooked) return;
  pthread_mutex_lock(&g_calls_lock);
  for (long_call_t **p = &g_calls; *p; p = &(*p)->next) {
    if (*p == lc) {
      *p = lc->next;
      break;
    }
  }
  sigaction(SIGINT, &g_old_sigint, NULL);
  pthread_mutex_unlock(&g_calls_lock);
}

/* After a long call returned st (GIL held again): a pending KeyboardInterrupt
 * (or whatever the SIGINT handler raised) wins over the call's result. */
static int long_call_status(vm_status_t st) {
  if (PyErr_CheckSignals() < 0) {
    vm_status_free(st);
    return -1;
  }
  if (st) {
    raise_status(st);
    return -1;
  }
  return 0;
}

/* ------------------------------------------------------------ HostTensor
 * A tensor the library allocated, exposed through the buffer protocol so that
 * numpy.asarray() wraps it without a copy; freed with the last reference. */
typedef struct {
  PyObject_HEAD vmc_tensor_t t;
  Py_ssize_t shape[VMC_MAX_NDIM + 1];
  Py_ssize_t strides[VMC_MAX_NDIM + 1];
  int ndim;
  Py_ssize_t itemsize;
  char format[4];
} HostTensor;

static void host_tensor_dealloc(HostTensor *self) {
  vmc_tensor_free(&self->t);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static int host_tensor_getbuffer(HostTensor *self, Py_buffer *view, int flags) {
  view->obj = (PyObject *)self;
  Py_INCREF(self);
  view->buf = self->t.data;
  view->len = (Py_ssize_t)self->t.nbytes;
  view->readonly = 0;
  view->itemsize = self->itemsize;
  view->format = (flags & PyBUF_FORMAT) ? self->format : NULL;
  view->ndim = self->ndim;
  view->shape = (flags & PyBUF_ND) ? self->shape : NULL;
  view->strides = ((flags & PyBUF_STRIDES) == PyBUF_STRIDES) ? self->strides : NULL;
  view->suboffsets = NULL;
  view->internal = NULL;
  return 0;
}

static PyBufferProcs host_tensor_as_buffer = {(getbufferproc)host_tensor_getbuffer, NULL};

static PyTypeObject HostTensorType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "vmrpc._core.HostTensor",
    .tp_basicsize = sizeof(HostTensor),
    .tp_dealloc = (destructor)host_tensor_dealloc,
    .tp_as_buffer = &host_tensor_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A tensor fetched from the agent (buffer protocol; use numpy.asarray).",
};

/* The buffer format of one lane of dt, or NULL. bfloat16 has no NumPy type:
 * its raw bits are exposed as uint16. */
static const char *dtype_format(vm_dtype_t dt) {
  switch (dt.code) {
    case VM_DTYPE_FLOAT:
      return dt.bits == 16 ? "e" : dt.bits == 32 ? "f" : dt.bits == 64 ? "d" : NULL;
    case VM_DTYPE_BFLOAT: return dt.bits == 16 ? "H" : NULL;
    case VM_DTYPE_INT:
      return dt.bits == 8    ? "b"
             : dt.bits == 16 ? "h"
             : dt.bits == 32 ? "i"
             : dt.bits == 64 ? "q"
                             : NULL;
    case VM_DTYPE_UINT:
      return dt.bits == 8    ? "B"
             : dt.bits == 16 ? "H"
             : dt.bits == 32 ? "I"
             : dt.bits == 64 ? "Q"
                             : NULL;
    case VM_DTYPE_BOOL: return dt.bits == 8 ? "?" : NULL;
    default: return NULL;
  }
}

/* Wraps t (taking over its memory; t is reset) as a NumPy array. Vector
 * dtypes (lanes > 1) get a trailing axis of the lanes. */
static PyObject *tensor_to_array(vmc_tensor_t *t) {
  const char *fmt = dtype_format(t->dtype);
  if (!fmt) {
    char buf[24];
    vm_dtype_str(t->dtype, buf, sizeof(buf));
    vmc_tensor_free(t);
    return PyErr_Format(PyExc_TypeError, "output dtype %s has no NumPy equivalent", buf);
  }
  HostTensor *h = PyObject_New(HostTensor, &HostTensorType);
  if (!h) {
    vmc_tensor_free(t);
    return NULL;
  }
  h->t = *t;
  memset(t, 0, sizeof(*t));
  h->itemsize = (Py_ssize_t)((h->t.dtype.bits + 7) / 8);
  snprintf(h->format, sizeof(h->format), "%s", fmt);
  h->ndim = (int)h->t.ndim;
  for (int i = 0; i < h->ndim; i++) h->shape[i] = (Py_ssize_t)h->t.shape[i];
  if (h->t.dtype.lanes > 1) h->shape[h->ndim++] = h->t.dtype.lanes;
  Py_ssize_t stride = h->itemsize;
  for (int i = h->ndim - 1; i >= 0; i--) {
    h->strides[i] = stride;
    stride *= h->shape[i];
  }
  PyObject *arr = PyObject_CallOneArg(g_asarray, (PyObject *)h);
  Py_DECREF(h);
  return arr;
}

/* ---------------------------------------------------------------- inputs */

/* One input being set: the value and, for a tensor, the buffer it views. */
typedef struct input {
  vmc_value_t v;
  uint32_t index;
  const char *name;
  Py_buffer view;
  int has_view;
  PyObject *keep; /* a converted object the view belongs to */
} input_t;

static void input_release(input_t *in) {
  if (in->has_view) PyBuffer_Release(&in->view);
  in->has_view = 0;
  Py_CLEAR(in->keep);
}

/* The dtype of a buffer's format string and item size. */
static int dtype_of_format(const char *format, Py_ssize_t itemsize, vm_dtype_t *out) {
  const char *f = format ? format : "B";
  if (*f == '@' || *f == '=' || *f == '<')
    f++;
  else if (*f == '>' || *f == '!') {
    PyErr_SetString(PyExc_ValueError,
                    "big-endian arrays are not supported: convert with "
                    "x.astype(x.dtype.newbyteorder('<'))");
    return -1;
  }
  if (f[0] == '\0' || f[1] != '\0') goto unsupported;
  uint8_t bits = (uint8_t)(itemsize * 8);
  switch (f[0]) {
    case 'b':
    case 'h':
    case 'i':
    case 'l':
    case 'q':
    case 'n': *out = VM_DTYPE_MAKE(VM_DTYPE_INT, bits, 1); break;
    case 'B':
    case 'H':
    case 'I':
    case 'L':
    case 'Q':
    case 'N': *out = VM_DTYPE_MAKE(VM_DTYPE_UINT, bits, 1); break;
    case 'e':
    case 'f':
    case 'd': *out = VM_DTYPE_MAKE(VM_DTYPE_FLOAT, bits, 1); break;
    case '?': *out = VM_BOOL; break;
    default: goto unsupported;
  }
  if (vm_dtype_valid(*out)) return 0;
unsupported:
  PyErr_Format(PyExc_TypeError,
               "unsupported element type '%s' (%zd bytes): use float16/32/64, "
               "int8/16/32/64, uint8/16/32/64 or bool",
               format ? format : "B", itemsize);
  return -1;
}

/* Fills in->v from o: bool, int, float, str, vmrpc.Shape, or anything with
 * the buffer protocol or that numpy.asarray() takes (as a tensor). */
static int input_from_py(PyObject *o, input_t *in) {
  memset(&in->v, 0, sizeof(in->v));
  if (PyBool_Check(o)) {
    in->v.kind = VMC_VALUE_BOOL;
    in->v.b = o == Py_True;
    return 0;
  }
  if (PyLong_CheckExact(o)) {
    in->v.kind = VMC_VALUE_INT;
    in->v.i = PyLong_AsLongLong(o);
    return (in->v.i == -1 && PyErr_Occurred()) ? -1 : 0;
  }
  if (PyFloat_CheckExact(o)) {
    in->v.kind = VMC_VALUE_FLOAT;
    in->v.f = PyFloat_AS_DOUBLE(o);
    return 0;
  }
  if (PyUnicode_Check(o)) {
    in->v.kind = VMC_VALUE_STRING;
    in->v.s = (char *)PyUnicode_AsUTF8(o);
    return in->v.s ? 0 : -1;
  }
  if (g_shape_type && PyObject_TypeCheck(o, (PyTypeObject *)g_shape_type)) {
    Py_ssize_t n = PyTuple_GET_SIZE(o);
    if (n > VMC_MAX_NDIM) {
      PyErr_Format(PyExc_ValueError, "a shape of %zd dims; at most %d", n, VMC_MAX_NDIM);
      return -1;
    }
    in->v.kind = VMC_VALUE_SHAPE;
    in->v.shape_ndim = (uint32_t)n;
    for (Py_ssize_t i = 0; i < n; i++) {
      in->v.shape[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(o, i));
      if (in->v.shape[i] == -1 && PyErr_Occurred()) return -1;
    }
    return 0;
  }
  const int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT;
  if (!PyObject_CheckBuffer(o) || PyObject_GetBuffer(o, &in->view, flags) != 0) {
    /* numpy refuses a non-contiguous view with ValueError, others with
     * BufferError: either way NumPy makes a contiguous copy (or says why not). */
    PyErr_Clear();
    /* Not contiguous, or not a buffer at all: one conversion by NumPy. */
    in->keep = PyObject_CallOneArg(g_ascontig, o);
    if (!in->keep) return -1;
    if (PyObject_GetBuffer(in->keep, &in->view, flags) != 0) return -1;
  }
  in->has_view = 1;
  vm_dtype_t dt;
  if (dtype_of_format(in->view.format, in->view.itemsize, &dt) != 0) return -1;
  if (in->view.ndim > VMC_MAX_NDIM) {
    PyErr_Format(PyExc_ValueError, "an array of %d dims; at most %d", in->view.ndim, VMC_MAX_NDIM);
    return -1;
  }
  int64_t shape[VMC_MAX_NDIM];
  for (int i = 0; i < in->view.ndim; i++) shape[i] = (int64_t)in->view.shape[i];
  if (in->view.ndim == 0 && in->view.len != in->view.itemsize) {
    /* A buffer without shape (bytes, array.array ...): one dimension. */
    shape[0] = in->view.len / in->view.itemsize;
    vm_status_t st = vmc_tensor_wrap(dt, 1, shape, in->view.buf, &in->v.tensor);
    if (st) {
      raise_status(st);
      return -1;
    }
  } else {
    vm_status_t st =
        vmc_tensor_wrap(dt, (uint32_t)in->view.ndim, shape, in->view.buf, &in->v.tensor);
    if (st) {
      raise_status(st);
      return -1;
    }
  }
  in->v.kind = VMC_VALUE_TENSOR;
  return 0;
}

/* ----------------------------------------------------------- Connection */

typedef struct {
  PyObject_HEAD vmc_conn_t *conn;
  int busy; /* calls in flight (GIL released): close() waits for none */
} Connection;

/* Takes the connection for a call; sets an exception when closed. */
static vmc_conn_t *conn_take(Connection *self) {
  if (!self->conn) {
    vm_status_t st = vm_status_make(VM_FAILED_PRECONDITION,
                                    "the session is closed: connect again with vmrpc.connect()");
    raise_status(st);
    return NULL;
  }
  self->busy++;
  return self->conn;
}

static void conn_give(Connection *self) {
  self->busy--;
}

static int Connection_init(Connection *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"url",
                           "token",
                           "tls_ca",
                           "tls_cert",
                           "tls_key",
                           "connect_timeout_ms",
                           "request_timeout_ms",
                           "long_timeout_ms",
                           "client_name",
                           NULL};
  const char *url;
  vmc_conn_opts_t o;
  memset(&o, 0, sizeof(o));
  if (!PyArg_ParseTupleAndKeywords(args, kw, "s|zzzziiiz", kwlist, &url, &o.token, &o.tls_ca_file,
                                   &o.tls_cert, &o.tls_key, &o.connect_timeout_ms,
                                   &o.request_timeout_ms, &o.long_timeout_ms, &o.client_name))
    return -1;
  if (self->conn) {
    PyErr_SetString(PyExc_RuntimeError, "already connected");
    return -1;
  }
  vmc_conn_t *c = NULL;
  vm_status_t st;
  PyThreadState *ts = PyEval_SaveThread();
  st = vmc_connect(url, &o, &c);
  PyEval_RestoreThread(ts);
  if (st) {
    raise_status(st);
    return -1;
  }
  self->conn = c;
  return 0;
}

static void Connection_dealloc(Connection *self) {
  if (self->conn) {
    vmc_conn_t *c = self->conn;
    self->conn = NULL;
    PyThreadState *ts = PyEval_SaveThread();
    vmc_close(c);
    PyEval_RestoreThread(ts);
  }
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Connection_close(Connection *self, PyObject *unused) {
  (void)unused;
  if (self->busy) {
    return raise_status(vm_status_make(
        VM_FAILED_PRECONDITION,
        "the session is in use by %d call(s) of other threads: close it after they return",
        self->busy));
  }
  if (self->conn) {
    vmc_conn_t *c = self->conn;
    self->conn = NULL;
    PyThreadState *ts = PyEval_SaveThread();
    vmc_close(c);
    PyEval_RestoreThread(ts);
  }
  Py_RETURN_NONE;
}

static PyObject *Connection_closed(Connection *self, void *unused) {
  (void)unused;
  return PyBool_FromLong(self->conn == NULL);
}

/* Runs `call` with the GIL released on a taken connection; on error raises
 * and returns -1. */
#define CONN_CALL(self, c, st, call)          \
  do {                                        \
    PyThreadState *ts_ = PyEval_SaveThread(); \
    st = (call);                              \
    PyEval_RestoreThread(ts_);                \
    conn_give(self);                          \
  } while (0)

/* As CONN_CALL for the calls that Ctrl-C cancels (invoke, time_evaluate,
 * profile); then long_call_status(st) raises. */
#define LONG_CALL(self, c, vm, st, call)      \
  do {                                        \
    long_call_t lc_;                          \
    long_call_enter(&lc_, c, vm);             \
    PyThreadState *ts_ = PyEval_SaveThread(); \
    st = (call);                              \
    PyEval_RestoreThread(ts_);                \
    long_call_leave(&lc_);                    \
    conn_give(self);                          \
  } while (0)

static PyObject *Connection_ping(Connection *self, PyObject *unused) {
  (void)unused;
  vmc_conn_t *c = conn_take(self);
  if (!c) return NULL;
  double rtt = 0;
  vm_status_t st;
  CONN_CALL(self, c, st, vmc_ping(c, &rtt));
  if (st) return raise_status(st);
  return PyFloat_FromDouble(rtt);
}

static PyObject *device_dict(const vmc_device_info_t *d) {
  return Py_BuildValue("{s:s,s:s,s:s,s:s,s:s,s:s,s:I,s:K,s:K,s:K,s:O,s:O}", "selector", d->selector,
                       "name", d->name, "vendor", d->vendor, "driver_version", d->driver_version,
                       "version", d->version, "platform", d->platform, "compute_units",
                       d->compute_units, "global_mem_bytes",
                       (unsigned long long)d->global_mem_bytes, "local_mem_bytes",
                       (unsigned long long)d->local_mem_bytes, "max_alloc_bytes",
                       (unsigned long long)d->max_alloc_bytes, "supports_fp16",
                       d->supports_fp16 ? Py_True : Py_False, "has_device_timer",
                       d->has_device_timer ? Py_True : Py_False);
}

static PyObject *Connection_info(Connection *self, PyObject *unused) {
  (void)unused;
  vmc_conn_t *c = conn_take(self);
  if (!c) return NULL;
  conn_give(self);
  vmc_info_t in;
  vmc_info(c, &in);
  PyObject *devs = PyList_New(in.num_devices);
  if (!devs) return NULL;
  for (uint32_t i = 0; i < in.num_devices; i++) {
    PyObject *d = device_dict(&in.devices[i]);
    if (!d) {
      Py_DECREF(devs);
      return NULL;
    }
    PyList_SET_ITEM(devs, i, d);
  }
  const vmc_limits_t *l = &in.limits;
  PyObject *limits = Py_BuildValue(
      "{s:K,s:K,s:I,s:I,s:K,s:K,s:I}", "max_message_bytes",
      (unsigned long long)l->max_message_bytes, "chunk_bytes", (unsigned long long)l->chunk_bytes,
      "max_inflight_chunks", l->max_inflight_chunks, "max_sessions", l->max_sessions,
      "session_mem_bytes", (unsigned long long)l->session_mem_bytes, "max_executable_bytes",
      (unsigned long long)l->max_executable_bytes, "idle_timeout_ms", l->idle_timeout_ms);
  if (!limits) {
    Py_DECREF(devs);
    return NULL;
  }
  return Py_BuildValue("{s:s,s:s,s:(II),s:(II),s:K,s:N,s:N}", "url", in.url, "agent_version",
                       in.agent_version, "protocol", in.protocol_major, in.protocol_minor,
                       "client_protocol", in.client_protocol_major, in.client_protocol_minor,
                       "session", (unsigned long long)in.session, "devices", devs, "limits",
                       limits);
}

static PyObject *upload_result(vm_status_t st, vmc_exec_t ex, const vmc_upload_result_t *r) {
  if (st) return raise_status(st);
  char hex[65];
  for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", r->sha256[i]);
  return Py_BuildValue("(KOKs)", (unsigned long long)ex.id, r->store_hit ? Py_True : Py_False,
                       (unsigned long long)r->bytes_sent, hex);
}

static PyObject *Connection_upload_file(Connection *self, PyObject *args) {
  PyObject *path_obj;
  if (!PyArg_ParseTuple(args, "O&", PyUnicode_FSConverter, &path_obj)) return NULL;
  vmc_conn_t *c = conn_take(self);
  if (!c) {
    Py_DECREF(path_obj);
    return NULL;
  }
  const char *path = PyBytes_AS_STRING(path_obj);
  vmc_exec_t ex = {0};
  vmc_upload_result_t r;
  memset(&r, 0, sizeof(r));
  vm_status_t st;
  CONN_CALL(self, c, st, vmc_upload_file(c, path, NULL, NULL, &ex, &r));
  Py_DECREF(path_obj);
  return upload_result(st, ex, &r);
}

static PyObject *Connection_upload_memory(Connection *self, PyObject *args) {
  Py_buffer b;
  if (!PyArg_ParseTuple(args, "y*", &b)) return NULL;
  vmc_conn_t *c = conn_take(self);
  if (!c) {
    PyBuffer_Release(&b);
    return NULL;
  }
  vmc_exec_t ex = {0};
  vmc_upload_result_t r;
  memset(&r, 0, sizeof(r));
  vm_status_t st;
  CONN_CALL(self, c, st, vmc_upload_memory(c, b.buf, (size_t)b.len, NULL, NULL, &ex, &r));
  PyBuffer_Release(&b);
  return upload_result(st, ex, &r);
}

/* create_vm(exec_id, [(selector, allocator|None), ...], exec_mode|None) */
static PyObject *Connection_create_vm(Connection *self, PyObject *args) {
  unsigned long long id;
  PyObject *devs;
  const char *mode = NULL;
  if (!PyArg_ParseTuple(args, "KO!z", &id, &PyList_Type, &devs, &mode)) return NULL;
  Py_ssize_t n = PyList_GET_SIZE(devs);
  if (n > 64) return PyErr_Format(PyExc_ValueError, "%zd devices; at most 64", n);
  vmc_device_spec_t spec[64];
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *d = PyList_GET_ITEM(devs, i);
    if (!PyArg_ParseTuple(d, "sz", &spec[i].selector, &spec[i].allocator)) return NULL;
  }
  vmc_conn_t *c = conn_take(self);
  if (!c) return NULL;
  vmc_exec_t ex = {id};
  vmc_vm_t vm = {0};
  vm_status_t st;
  CONN_CALL(self, c, st, vmc_create_vm(c, ex, spec, (uint32_t)n, mode, &vm));
  if (st) return raise_status(st);
  return PyLong_FromUnsignedLongLong(vm.id);
}

/* Parses an id and runs fn on it (free_vm, cancel, free_exec). */
static PyObject *vm_op(Connection *self, PyObject *args,
                       vm_status_t (*fn)(vmc_conn_t *, vmc_vm_t)) {
  unsigned long long id;
  if (!PyArg_ParseTuple(args, "K", &id)) return NULL;
  vmc_conn_t *c = conn_take(self);
  if (!c) return NULL;
  vmc_vm_t vm = {id};
  vm_status_t st;
  CONN_CALL(self, c, st, fn(c, vm));
  if (st) return raise_status(st);
  Py_RETURN_NONE;
}

static PyObject *Connection_free_vm(Connection *self, PyObject *args) {
  return vm_op(self, args, vmc_free_vm);
}

static vm_status_t free_exec_id(vmc_conn_t *c, vmc_vm_t id) {
  vmc_exec_t ex = {id.id};
  return vmc_free_exec(c, ex);
}

static PyObject *Connection_free_exec(Connection *self, PyObject *args) {
  return vm_op(self, args, free_exec_id);
}

/* Sets args (by index) and kwargs (by name) of func: all are converted with
 * the GIL held, then sent with it released once. Returns 0 or -1. */
#define INPUTS_ON_STACK 16
static int set_inputs(Connection *self, vmc_vm_t vm, const char *func, PyObject *args,
                      PyObject *kwargs) {
  Py_ssize_t na = args ? PyTuple_GET_SIZE(args) : 0;
  Py_ssize_t nk = kwargs ? PyDict_GET_SIZE(kwargs) : 0;
  Py_ssize_t n = na + nk;
  if (n == 0) return 0;
  input_t stack[INPUTS_ON_STACK];
  input_t *in = n <= INPUTS_ON_STACK ? stack : PyMem_Calloc((size_t)n, sizeof(input_t));
  if (!in) {
    PyErr_NoMemory();
    return -1;
  }
  if (in == stack) memset(stack, 0, sizeof(input_t) * (size_t)n);
  int rc = -1;
  for (Py_ssize_t i = 0; i < na; i++) {
    in[i].index = (uint32_t)i;
    if (input_from_py(PyTuple_GET_ITEM(args, i), &in[i]) != 0) goto out;
  }
  {
    Py_ssize_t pos = 0, i = na;
    PyObject *key, *val;
    while (kwargs && PyDict_Next(kwargs, &pos, &key, &val)) {
      if (!PyUnicode_Check(key)) {
        PyErr_SetString(PyExc_TypeError, "parameter names must be strings");
        goto out;
      }
      in[i].name = PyUnicode_AsUTF8(key);
      if (!in[i].name || input_from_py(val, &in[i]) != 0) goto out;
      i++;
    }
  }
  {
    vmc_conn_t *c = conn_take(self);
    if (!c) goto out;
    vm_status_t st = VM_STATUS_OK;
    PyThreadState *ts = PyEval_SaveThread();
    for (Py_ssize_t i = 0; i < n && !st; i++)
      st = vmc_set_input_value(c, vm, func, in[i].index, in[i].name, &in[i].v);
    PyEval_RestoreThread(ts);
    conn_give(self);
    if (st) {
      raise_status(st);
      goto out;
    }
  }
  rc = 0;
out:
  for (Py_ssize_t i = 0; i < n; i++) input_release(&in[i]);
  if (in != stack) PyMem_Free(in);
  return rc;
}

static PyObject *Connection_set_inputs(Connection *self, PyObject *args) {
  unsigned long long id;
  const char *func;
  PyObject *pos, *kw;
  if (!PyArg_ParseTuple(args, "KsO!O!", &id, &func, &PyTuple_Type, &pos, &PyDict_Type, &kw))
    return NULL;
  vmc_vm_t vm = {id};
  if (set_inputs(self, vm, func, pos, kw) != 0) return NULL;
  Py_RETURN_NONE;
}

/* invoke with Ctrl-C cancelling; returns the agent's seconds or -1. */
static int do_invoke(Connection *self, vmc_vm_t vm, const char *func, uint32_t deadline_ms,
                     double *agent_s) {
  vmc_conn_t *c = conn_take(self);
  if (!c) return -1;
  vm_status_t st;
  LONG_CALL(self, c, vm, st, vmc_invoke(c, vm, func, deadline_ms, agent_s));
  return long_call_status(st);
}

static PyObject *Connection_invoke(Connection *self, PyObject *args) {
  unsigned long long id;
  const char *func;
  unsigned int deadline_ms = 0;
  if (!PyArg_ParseTuple(args, "Ks|I", &id, &func, &deadline_ms)) return NULL;
  vmc_vm_t vm = {id};
  double agent_s = 0;
  if (do_invoke(self, vm, func, deadline_ms, &agent_s) != 0) return NULL;
  return PyFloat_FromDouble(agent_s);
}

static PyObject *Connection_cancel(Connection *self, PyObject *args) {
  return vm_op(self, args, vmc_cancel);
}

#define MAX_PATH 64

/* The value of func's last result at path[0..depth): tuples become tuples,
 * tensors NumPy arrays, shapes vmrpc.Shape, scalars Python scalars. */
static PyObject *fetch_output(Connection *self, vmc_vm_t vm, const char *func, uint32_t *path,
                              uint32_t depth);

/* The Python object of value v (freed here) at path[0..depth) of func's
 * result; a tuple's fields are fetched. */
static PyObject *value_to_py(Connection *self, vmc_vm_t vm, const char *func, uint32_t *path,
                             uint32_t depth, vmc_value_t v) {
  PyObject *r = NULL;
  switch (v.kind) {
    case VMC_VALUE_NONE: r = Py_NewRef(Py_None); break;
    case VMC_VALUE_INT: r = PyLong_FromLongLong(v.i); break;
    case VMC_VALUE_FLOAT: r = PyFloat_FromDouble(v.f); break;
    case VMC_VALUE_BOOL: r = PyBool_FromLong(v.b); break;
    case VMC_VALUE_STRING: r = PyUnicode_DecodeUTF8(v.s, (Py_ssize_t)strlen(v.s), "replace"); break;
    case VMC_VALUE_SHAPE: {
      PyObject *t = PyTuple_New(v.shape_ndim);
      if (!t) break;
      for (uint32_t i = 0; i < v.shape_ndim; i++) {
        PyObject *d = PyLong_FromLongLong(v.shape[i]);
        if (!d) {
          Py_CLEAR(t);
          break;
        }
        PyTuple_SET_ITEM(t, i, d);
      }
      if (t) {
        r = PyObject_CallOneArg(g_shape_type, t);
        Py_DECREF(t);
      }
      break;
    }
    case VMC_VALUE_TENSOR: r = tensor_to_array(&v.tensor); break;
    case VMC_VALUE_TUPLE: {
      if (depth >= MAX_PATH) {
        vmc_value_free(&v);
        return PyErr_Format(PyExc_ValueError, "result tuples nested deeper than %d levels",
                            MAX_PATH);
      }
      r = PyTuple_New(v.tuple_arity);
      for (uint32_t i = 0; r && i < v.tuple_arity; i++) {
        path[depth] = i;
        PyObject *f = fetch_output(self, vm, func, path, depth + 1);
        if (!f) {
          Py_CLEAR(r);
          break;
        }
        PyTuple_SET_ITEM(r, i, f);
      }
      break;
    }
    default: PyErr_Format(PyExc_TypeError, "output of unknown kind %d", (int)v.kind);
  }
  vmc_value_free(&v);
  return r;
}

static PyObject *fetch_output(Connection *self, vmc_vm_t vm, const char *func, uint32_t *path,
                              uint32_t depth) {
  vmc_conn_t *c = conn_take(self);
  if (!c) return NULL;
  vmc_value_t v;
  vm_status_t st;
  CONN_CALL(self, c, st, vmc_get_output_value(c, vm, func, path, depth, &v));
  if (st) return raise_status(st);
  return value_to_py(self, vm, func, path, depth, v);
}

static int parse_path(PyObject *seq, uint32_t *path, uint32_t *depth) {
  PyObject *fast = PySequence_Fast(seq, "path must be a sequence of ints");
  if (!fast) return -1;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  if (n > MAX_PATH) {
    Py_DECREF(fast);
    PyErr_Format(PyExc_ValueError, "output path of %zd levels; at most %d", n, MAX_PATH);
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    unsigned long x = PyLong_AsUnsignedLong(PySequence_Fast_GET_ITEM(fast, i));
    if (PyErr_Occurred() || x > UINT32_MAX) {
      Py_DECREF(fast);
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_OverflowError, "path index too large");
      return -1;
    }
    path[i] = (uint32_t)x;
  }
  *depth = (uint32_t)n;
  Py_DECREF(fast);
  return 0;
}

static PyObject *Connection_get_output(Connection *self, PyObject *args) {
  unsigned long long id;
  const char *func;
  PyObject *path_obj;
  if (!PyArg_ParseTuple(args, "KsO", &id, &func, &path_obj)) return NULL;
  uint32_t path[MAX_PATH + 1];
  uint32_t depth;
  if (parse_path(path_obj, path, &depth) != 0) return NULL;
  vmc_vm_t vm = {id};
  return fetch_output(self, vm, func, path, depth);
}

/* get_output_into(vm, func, path, out): out is a writable C-contiguous
 * buffer whose dtype and shape must match the output. */
static PyObject *Connection_get_output_into(Connection *self, PyObject *args) {
  unsigned long long id;
  const char *func;
  PyObject *path_obj, *out;
  if (!PyArg_ParseTuple(args, "KsOO", &id, &func, &path_obj, &out)) return NULL;
  uint32_t path[MAX_PATH + 1];
  uint32_t depth;
  if (parse_path(path_obj, path, &depth) != 0) return NULL;
  Py_buffer view;
  if (PyObject_GetBuffer(out, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) != 0)
    return NULL;
  vm_dtype_t want;
  PyObject *result = NULL;
  if (dtype_of_format(view.format, view.itemsize, &want) != 0) goto done;
  vmc_conn_t *c = conn_take(self);
  if (!c) goto done;
  vmc_vm_t vm = {id};
  vmc_tensor_t meta;
  vm_status_t st;
  CONN_CALL(self, c, st,
            vmc_get_output_into(c, vm, func, path, depth, view.buf, (uint64_t)view.len, &meta));
  if (st) {
    raise_status(st);
    goto done;
  }
  int same = vm_dtype_equal(meta.dtype, want) && (int)meta.ndim == view.ndim &&
             meta.nbytes == (uint64_t)view.len;
  for (int i = 0; same && i < view.ndim; i++) same = meta.shape[i] == (int64_t)view.shape[i];
  if (!same) {
    char dt[24];
    vm_dtype_str(meta.dtype, dt, sizeof(dt));
    PyObject *shape = PyTuple_New(meta.ndim);
    for (uint32_t i = 0; shape && i < meta.ndim; i++)
      PyTuple_SET_ITEM(shape, i, PyLong_FromLongLong(meta.shape[i]));
    if (shape)
      PyErr_Format(PyExc_ValueError,
                   "the output is %s%R; out= must be an array of that dtype and shape", dt, shape);
    Py_XDECREF(shape);
    goto done;
  }
  result = Py_NewRef(out);
done:
  PyBuffer_Release(&view);
  return result;
}

/* call() with inputs by position only: one fused Run request (vmc_run)
 * sets them, invokes and brings back a plain result (a tensor up to the
 * chunk size inline); a tuple result's fields are then fetched. args are
 * call()'s (vm_id, func, *inputs). */
static PyObject *run_positional(Connection *self, vmc_vm_t vm, const char *func, PyObject *args) {
  Py_ssize_t n = PyTuple_GET_SIZE(args) - 2;
  input_t stack[INPUTS_ON_STACK];
  input_t *in = n <= INPUTS_ON_STACK ? stack : PyMem_Calloc((size_t)n, sizeof(input_t));
  vmc_value_t vstack[INPUTS_ON_STACK];
  vmc_value_t *v = n <= INPUTS_ON_STACK ? vstack : PyMem_Calloc((size_t)n, sizeof(vmc_value_t));
  PyObject *r = NULL;
  if (!in || !v) {
    PyErr_NoMemory();
    goto out;
  }
  memset(in, 0, sizeof(input_t) * (size_t)n);
  for (Py_ssize_t i = 0; i < n; i++) {
    if (input_from_py(PyTuple_GET_ITEM(args, i + 2), &in[i]) != 0) goto out;
    v[i] = in[i].v;
  }
  {
    vmc_conn_t *c = conn_take(self);
    if (!c) goto out;
    vmc_run_opts_t o;
    memset(&o, 0, sizeof(o));
    o.func = func;
    o.keep_remote = 1; /* a large or tuple result is fetched below */
    vmc_run_result_t res;
    vm_status_t st;
    LONG_CALL(self, c, vm, st, vmc_run(c, NULL, 0, vm, v, (uint32_t)n, &o, &res));
    if (long_call_status(st) != 0) goto out;
    uint32_t path[MAX_PATH + 1];
    if (res.num_outputs == 1 && res.outputs[0].path_len == 0 && !res.outputs[0].remote) {
      r = value_to_py(self, vm, func, path, 0, res.outputs[0].value);
      memset(&res.outputs[0].value, 0, sizeof(vmc_value_t)); /* taken over */
    } else {
      r = fetch_output(self, vm, func, path, 0);
    }
    vmc_run_result_free(&res);
  }
out:
  for (Py_ssize_t i = 0; in && i < n; i++) input_release(&in[i]);
  if (in && in != stack) PyMem_Free(in);
  if (v && v != vstack) PyMem_Free(v);
  return r;
}

/* call(vm_id, func, *inputs, **named_inputs): set inputs, invoke, fetch the
 * whole result. Its inputs are its own arguments so that vm["f"] can be a
 * functools.partial of it: no Python frame between the caller and here. */
static PyObject *Connection_call(Connection *self, PyObject *args, PyObject *kwargs) {
  Py_ssize_t n = PyTuple_GET_SIZE(args);
  if (n < 2) {
    PyErr_SetString(PyExc_TypeError, "call(vm_id, func, *inputs, **named_inputs)");
    return NULL;
  }
  vmc_vm_t vm = {PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(args, 0))};
  if (vm.id == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
  const char *func = PyUnicode_AsUTF8(PyTuple_GET_ITEM(args, 1));
  if (!func) return NULL;
  uint32_t path[MAX_PATH + 1];
  if (!kwargs || PyDict_GET_SIZE(kwargs) == 0) return run_positional(self, vm, func, args);
  PyObject *inputs = PyTuple_GetSlice(args, 2, n);
  if (!inputs) return NULL;
  int rc = set_inputs(self, vm, func, inputs, kwargs);
  Py_DECREF(inputs);
  if (rc != 0) return NULL;
  double agent_s;
  if (do_invoke(self, vm, func, 0, &agent_s) != 0) return NULL;
  return fetch_output(self, vm, func, path, 0);
}

static PyObject *seconds_list(const double *s, uint32_t n, int negative_is_none) {
  PyObject *l = PyList_New(n);
  for (uint32_t i = 0; l && i < n; i++) {
    PyObject *x = (negative_is_none && s[i] < 0) ? Py_NewRef(Py_None) : PyFloat_FromDouble(s[i]);
    if (!x) {
      Py_CLEAR(l);
      break;
    }
    PyList_SET_ITEM(l, i, x);
  }
  return l;
}

static PyObject *Connection_time_evaluate(Connection *self, PyObject *args) {
  unsigned long long id;
  const char *func;
  vmc_time_params_t p = vmc_time_params_default();
  unsigned long long flush = 0;
  if (!PyArg_ParseTuple(args, "Ksiiiiii|K", &id, &func, &p.number, &p.repeat, &p.min_repeat_ms,
                        &p.limit_zero_time_iterations, &p.cooldown_interval_ms,
                        &p.repeats_to_cooldown, &flush))
    return NULL;
  p.cache_flush_bytes = flush;
  vmc_conn_t *c = conn_take(self);
  if (!c) return NULL;
  vmc_vm_t vm = {id};
  vmc_time_result_t r;
  memset(&r, 0, sizeof(r));
  vm_status_t st;
  LONG_CALL(self, c, vm, st, vmc_time_evaluate(c, vm, func, &p, &r));
  if (long_call_status(st) != 0) {
    vmc_time_result_free(&r);
    return NULL;
  }
  PyObject *secs = seconds_list(r.seconds, r.repeat, 0);
  PyObject *dev = secs ? seconds_list(r.device_seconds, r.repeat, 1) : NULL;
  PyObject *res = NULL;
  if (dev) {
    PyObject *dmed =
        r.device_median_s < 0 ? Py_NewRef(Py_None) : PyFloat_FromDouble(r.device_median_s);
    res = Py_BuildValue("{s:i,s:N,s:N,s:d,s:d,s:d,s:d,s:d,s:N,s:d,s:d}", "number", r.number,
                        "seconds", secs, "device_seconds", dev, "min", r.min_s, "mean", r.mean_s,
                        "median", r.median_s, "max", r.max_s, "std", r.std_s, "device_median",
                        dmed, "warmup", r.warmup_s, "gate_wait", r.gate_wait_s);
  } else {
    Py_XDECREF(secs);
  }
  vmc_time_result_free(&r);
  return res;
}

static PyObject *Connection_profile(Connection *self, PyObject *args) {
  unsigned long long id;
  const char *func;
  if (!PyArg_ParseTuple(args, "Ks", &id, &func)) return NULL;
  vmc_conn_t *c = conn_take(self);
  if (!c) return NULL;
  vmc_vm_t vm = {id};
  vmc_profile_t p;
  memset(&p, 0, sizeof(p));
  vm_status_t st;
  LONG_CALL(self, c, vm, st, vmc_profile(c, vm, func, &p));
  if (long_call_status(st) != 0) {
    vmc_profile_free(&p);
    return NULL;
  }
  PyObject *rows = PyList_New(p.num_rows);
  for (uint32_t i = 0; rows && i < p.num_rows; i++) {
    const vmc_profile_row_t *w = &p.rows[i];
    PyObject *dev = w->device_s < 0 ? Py_NewRef(Py_None) : PyFloat_FromDouble(w->device_s);
    PyObject *row = Py_BuildValue("{s:s,s:K,s:d,s:d,s:N,s:d}", "name", w->name, "calls",
                                  (unsigned long long)w->calls, "total_s", w->total_s, "mean_s",
                                  w->mean_s, "device_s", dev, "share", w->share);
    if (!row) {
      Py_CLEAR(rows);
      break;
    }
    PyList_SET_ITEM(rows, i, row);
  }
  PyObject *res = rows ? Py_BuildValue("(Nd)", rows, p.total_s) : NULL;
  vmc_profile_free(&p);
  return res;
}

static PyObject *Connection_stats(Connection *self, PyObject *unused) {
  (void)unused;
  vmc_conn_t *c = conn_take(self);
  if (!c) return NULL;
  vmc_stats_t s;
  memset(&s, 0, sizeof(s));
  vm_status_t st;
  CONN_CALL(self, c, st, vmc_stats(c, &s));
  if (st) return raise_status(st);
  PyObject *allocs = PyList_New(s.num_allocators);
  for (uint32_t i = 0; allocs && i < s.num_allocators; i++) {
    const vmc_alloc_stats_t *a = &s.allocators[i];
    PyObject *d = Py_BuildValue(
        "{s:s,s:s,s:K,s:K,s:K,s:K,s:K}", "device", a->device, "kind", a->kind, "bytes_in_use",
        (unsigned long long)a->bytes_in_use, "peak_bytes", (unsigned long long)a->peak_bytes,
        "bytes_reserved", (unsigned long long)a->bytes_reserved, "device_allocs",
        (unsigned long long)a->device_allocs, "device_frees", (unsigned long long)a->device_frees);
    if (!d) {
      Py_CLEAR(allocs);
      break;
    }
    PyList_SET_ITEM(allocs, i, d);
  }
  PyObject *res = NULL;
  if (allocs)
    res = Py_BuildValue("{s:K,s:I,s:I,s:I,s:N,s:I,s:K,s:K,s:I,s:K,s:K}", "session_bytes",
                        (unsigned long long)s.session_bytes, "session_vms", s.session_vms,
                        "session_executables", s.session_executables, "session_transfers",
                        s.session_transfers, "allocators", allocs, "agent_sessions",
                        s.agent_sessions, "agent_bytes", (unsigned long long)s.agent_bytes,
                        "store_bytes", (unsigned long long)s.store_bytes, "store_entries",
                        s.store_entries, "requests", (unsigned long long)s.requests,
                        "agent_rss_bytes", (unsigned long long)s.agent_rss_bytes);
  vmc_stats_free(&s);
  return res;
}

/* ---------------------------------------------------------------------------
 * The device's state and compare (docs/timing.md, Compare).
 */

/* v * scale as a float, or None when v < 0 (unknown). */
static PyObject *freq_or_none(int64_t v, double scale) {
  return v < 0 ? Py_NewRef(Py_None) : PyFloat_FromDouble((double)v * scale);
}

/* The state as a dict, the shape of `vmclient info --state --json`. */
static PyObject *state_dict(const vmc_device_state_t *s) {
  PyObject *cpus = PyList_New(s->num_cpus), *zones = NULL, *devf = NULL;
  for (uint32_t i = 0; cpus && i < s->num_cpus; i++) {
    const vmc_cpu_state_t *c = &s->cpus[i];
    PyObject *d = Py_BuildValue(
        "{s:I,s:N,s:N,s:N,s:N}", "cpu", c->cpu, "cur_mhz", freq_or_none(c->cur_khz, 1e-3),
        "max_mhz", freq_or_none(c->max_khz, 1e-3), "policy_max_mhz",
        freq_or_none(c->policy_max_khz, 1e-3), "governor",
        c->governor[0] ? PyUnicode_FromString(c->governor) : Py_NewRef(Py_None));
    if (!d) Py_CLEAR(cpus);
    else PyList_SET_ITEM(cpus, i, d);
  }
  if (cpus) zones = PyList_New(s->num_zones);
  for (uint32_t i = 0; zones && i < s->num_zones; i++) {
    const vmc_thermal_zone_t *z = &s->zones[i];
    PyObject *trips = PyList_New(z->num_trips);
    for (uint32_t k = 0; trips && k < z->num_trips; k++) {
      PyObject *t = Py_BuildValue("{s:s,s:d}", "type", z->trips[k].type, "temp_c",
                                  (double)z->trips[k].temp_mc / 1e3);
      if (!t) Py_CLEAR(trips);
      else PyList_SET_ITEM(trips, k, t);
    }
    PyObject *d = trips ? Py_BuildValue(
                              "{s:s,s:N,s:N,s:N}", "name", z->name, "type",
                              z->type[0] ? PyUnicode_FromString(z->type) : Py_NewRef(Py_None),
                              "temp_c",
                              z->temp_known ? PyFloat_FromDouble((double)z->temp_mc / 1e3)
                                            : Py_NewRef(Py_None),
                              "trip_points", trips)
                        : NULL;
    if (!d) Py_CLEAR(zones);
    else PyList_SET_ITEM(zones, i, d);
  }
  if (zones) devf = PyList_New(s->num_devfreq);
  for (uint32_t i = 0; devf && i < s->num_devfreq; i++) {
    const vmc_devfreq_state_t *f = &s->devfreq[i];
    PyObject *d = Py_BuildValue("{s:s,s:N,s:N,s:N,s:s}", "name", f->name, "cur_mhz",
                                freq_or_none(f->cur_hz, 1e-6), "max_mhz",
                                freq_or_none(f->max_hz, 1e-6), "available_max_mhz",
                                freq_or_none(f->avail_max_hz, 1e-6), "governor", f->governor);
    if (!d) Py_CLEAR(devf);
    else PyList_SET_ITEM(devf, i, d);
  }
  if (!devf) {
    Py_XDECREF(cpus);
    Py_XDECREF(zones);
    return NULL;
  }
  PyObject *load = s->loadavg_known ? Py_BuildValue("(ddd)", s->load1, s->load5, s->load15)
                                    : Py_NewRef(Py_None);
  return Py_BuildValue("{s:N,s:N,s:N,s:N,s:I,s:I}", "cpus", cpus, "thermal_zones", zones,
                       "devfreq", devf, "loadavg", load, "sessions", s->sessions,
                       "busy_sessions", s->busy_sessions);
}

static PyObject *Connection_device_state(Connection *self, PyObject *unused) {
  (void)unused;
  vmc_conn_t *c = conn_take(self);
  if (!c) return NULL;
  vmc_device_state_t s;
  memset(&s, 0, sizeof(s));
  vm_status_t st;
  CONN_CALL(self, c, st, vmc_device_state(c, &s));
  if (st) return raise_status(st);
  PyObject *d = state_dict(&s);
  vmc_device_state_free(&s);
  return d;
}

/* vmc_compare() with the state read before and after (None each when the
 * agent does not report it), all with the GIL released. */
typedef struct compare_call {
  vmc_compare_side_t a, b;
  vmc_compare_opts_t o;
  vmc_compare_result_t r;
  vmc_device_state_t state[2];
  int have_state[2];
} compare_call_t;

static vm_status_t compare_run(compare_call_t *k, vmc_conn_t *c) {
  vm_status_t st = vmc_device_state(c, &k->state[0]);
  k->have_state[0] = st == NULL;
  vm_status_free(st);
  st = vmc_compare(&k->a, &k->b, &k->o, &k->r);
  if (st) return st;
  st = vmc_device_state(c, &k->state[1]);
  k->have_state[1] = st == NULL;
  vm_status_free(st);
  return NULL;
}

static PyObject *num_or_none(double v) {
  return isfinite(v) ? PyFloat_FromDouble(v) : Py_NewRef(Py_None);
}

static PyObject *Connection_compare(Connection *self, PyObject *args) {
  unsigned long long va, vb;
  const char *fa, *fb;
  compare_call_t *k = calloc(1, sizeof(*k));
  if (!k) return PyErr_NoMemory();
  k->o = vmc_compare_opts_default();
  unsigned int min_rounds = k->o.min_rounds, max_rounds = k->o.max_rounds;
  if (!PyArg_ParseTuple(args, "KsKs|ddIIdiii", &va, &fa, &vb, &fb, &k->o.threshold,
                        &k->o.confidence, &min_rounds, &max_rounds, &k->o.max_seconds,
                        &k->o.round_ms, &k->o.repeats, &k->o.cooldown_ms)) {
    free(k);
    return NULL;
  }
  k->o.min_rounds = min_rounds;
  k->o.max_rounds = max_rounds;
  vmc_conn_t *c = conn_take(self);
  if (!c) {
    free(k);
    return NULL;
  }
  k->a = (vmc_compare_side_t){c, {va}, fa};
  k->b = (vmc_compare_side_t){c, {vb}, fb};
  vm_status_t st;
  CONN_CALL(self, c, st, compare_run(k, c));
  PyObject *res = NULL;
  if (st) {
    raise_status(st);
    goto done;
  }
  PyObject *rounds = PyList_New(k->r.num_rounds);
  for (uint32_t i = 0; rounds && i < k->r.num_rounds; i++) {
    const vmc_compare_round_t *w = &k->r.rounds[i];
    PyObject *d = Py_BuildValue("{s:s,s:d,s:d,s:N,s:N,s:d,s:d}", "order", w->b_first ? "BA" : "AB",
                                "a_s", w->a_s, "b_s", w->b_s, "a_device_s",
                                w->a_device_s < 0 ? Py_NewRef(Py_None)
                                                  : PyFloat_FromDouble(w->a_device_s),
                                "b_device_s",
                                w->b_device_s < 0 ? Py_NewRef(Py_None)
                                                  : PyFloat_FromDouble(w->b_device_s),
                                "end_s", w->end_s, "gate_wait_s", w->gate_wait_s);
    if (!d) Py_CLEAR(rounds);
    else PyList_SET_ITEM(rounds, i, d);
  }
  if (!rounds) goto done;
  PyObject *sb = k->have_state[0] ? state_dict(&k->state[0]) : Py_NewRef(Py_None);
  PyObject *sa = sb && k->have_state[1] ? state_dict(&k->state[1]) : sb ? Py_NewRef(Py_None) : NULL;
  if (!sa) {
    Py_XDECREF(sb);
    Py_DECREF(rounds);
    goto done;
  }
  /* Throttling over the snapshots there are (None: nothing exposed). */
  vmc_device_state_t snaps[2];
  uint32_t ns = 0;
  for (int i = 0; i < 2; i++)
    if (k->have_state[i]) snaps[ns++] = k->state[i];
  char buf[2048] = "";
  uint32_t t = vmc_state_throttling(snaps, ns, buf, sizeof(buf));
  PyObject *throttled = ns == 0 || !vmc_state_exposed(&snaps[0]) ? Py_NewRef(Py_None)
                                                                  : PyBool_FromLong(t > 0);
  PyObject *throttling = t ? PyUnicode_FromString(buf) : Py_NewRef(Py_None);
  res = Py_BuildValue(
      "{s:s,s:N,s:N,s:N,s:d,s:d,s:d,s:d,s:I,s:I,s:s,s:O,s:i,s:i,s:N,s:d,s:d,s:N,s:N,s:N,s:N}",
      "verdict", vmc_verdict_name(k->r.verdict), "ratio", num_or_none(k->r.ratio), "ci_low",
      num_or_none(k->r.lo), "ci_high", num_or_none(k->r.hi), "threshold", k->r.threshold,
      "confidence", k->r.confidence, "look_confidence", k->r.look_confidence,
      "achieved_confidence", k->r.achieved_confidence, "looks", k->r.looks, "looks_planned",
      k->r.looks_planned, "time_base", k->r.device_time ? "device" : "wall", "budget_exhausted",
      k->r.budget_exhausted ? Py_True : Py_False, "number_a", k->r.number_a, "number_b",
      k->r.number_b, "rounds", rounds, "calibrate_s", k->r.calibrate_s, "seconds",
      k->r.seconds, "state_before", sb, "state_after", sa, "throttled", throttled, "throttling",
      throttling);
done:
  vmc_compare_result_free(&k->r);
  vmc_device_state_free(&k->state[0]);
  vmc_device_state_free(&k->state[1]);
  free(k);
  return res;
}

static PyMethodDef Connection_methods[] = {
    {"close", (PyCFunction)Connection_close, METH_NOARGS, "End the session."},
    {"ping", (PyCFunction)Connection_ping, METH_NOARGS, "Round trip; returns seconds."},
    {"info", (PyCFunction)Connection_info, METH_NOARGS, "What Hello told, as a dict."},
    {"upload_file", (PyCFunction)Connection_upload_file, METH_VARARGS,
     "upload_file(path) -> (exec_id, store_hit, bytes_sent, sha256_hex)"},
    {"upload_memory", (PyCFunction)Connection_upload_memory, METH_VARARGS,
     "upload_memory(bytes) -> (exec_id, store_hit, bytes_sent, sha256_hex)"},
    {"free_exec", (PyCFunction)Connection_free_exec, METH_VARARGS, "free_exec(exec_id)"},
    {"create_vm", (PyCFunction)Connection_create_vm, METH_VARARGS,
     "create_vm(exec_id, [(selector, allocator)], exec_mode) -> vm_id"},
    {"free_vm", (PyCFunction)Connection_free_vm, METH_VARARGS, "free_vm(vm_id)"},
    {"set_inputs", (PyCFunction)Connection_set_inputs, METH_VARARGS,
     "set_inputs(vm_id, func, args_tuple, kwargs_dict)"},
    {"invoke", (PyCFunction)Connection_invoke, METH_VARARGS,
     "invoke(vm_id, func, deadline_ms=0) -> agent seconds"},
    {"cancel", (PyCFunction)Connection_cancel, METH_VARARGS, "cancel(vm_id)"},
    {"get_output", (PyCFunction)Connection_get_output, METH_VARARGS,
     "get_output(vm_id, func, path) -> value"},
    {"get_output_into", (PyCFunction)Connection_get_output_into, METH_VARARGS,
     "get_output_into(vm_id, func, path, out) -> out"},
    {"call", (PyCFunction)(void (*)(void))Connection_call, METH_VARARGS | METH_KEYWORDS,
     "call(vm_id, func, *inputs, **named_inputs) -> result"},
    {"time_evaluate", (PyCFunction)Connection_time_evaluate, METH_VARARGS,
     "time_evaluate(vm_id, func, number, repeat, min_repeat_ms, limit_zero_time_iterations, "
     "cooldown_interval_ms, repeats_to_cooldown, cache_flush_bytes=0) -> dict"},
    {"profile", (PyCFunction)Connection_profile, METH_VARARGS,
     "profile(vm_id, func) -> (rows, total_s)"},
    {"stats", (PyCFunction)Connection_stats, METH_NOARGS, "The agent's counters, as a dict."},
    {"device_state", (PyCFunction)Connection_device_state, METH_NOARGS,
     "The host's clocks, thermal zones, devfreq, load and sessions, as a dict."},
    {"compare", (PyCFunction)Connection_compare, METH_VARARGS,
     "compare(vm_a, func_a, vm_b, func_b, threshold, confidence, min_rounds, max_rounds, "
     "max_seconds, round_ms, repeats, cooldown_ms) -> dict"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Connection_getset[] = {
    {"closed", (getter)Connection_closed, NULL, "True after close()", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ConnectionType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "vmrpc._core.Connection",
    .tp_basicsize = sizeof(Connection),
    .tp_dealloc = (destructor)Connection_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc =
        "Connection(url, token=None, tls_ca=None, tls_cert=None, tls_key=None, "
        "connect_timeout_ms=0, request_timeout_ms=0, long_timeout_ms=0, client_name=None)",
    .tp_methods = Connection_methods,
    .tp_getset = Connection_getset,
    .tp_init = (initproc)Connection_init,
    .tp_new = PyType_GenericNew,
};

/* --------------------------------------------------------- ONNX import
 * The compiler library (compiler/include/vmcompiler/onnx.h) is linked in
 * like libvmclient: vmrpc.compile() (python/vmrpc/compiler.py) is built on
 * compile_onnx(). */

/* The report of a compilation as the dict `vmclient compile --json` prints. */
static PyObject *onnx_report_dict(const vmcc_onnx_report_t *r) {
  PyObject *ops = PyDict_New();
  for (uint32_t i = 0; ops && i < r->num_ops && i < VMCC_ONNX_MAX_REPORT_OPS; i++) {
    PyObject *n = PyLong_FromUnsignedLong(r->ops[i].count);
    if (!n || PyDict_SetItemString(ops, r->ops[i].name, n) != 0) Py_CLEAR(ops);
    Py_XDECREF(n);
  }
  if (!ops) return NULL;
  const vmcc_plan_report_t *p = &r->plan;
  return Py_BuildValue(
      "{s:L,s:I,s:I,s:N,s:I,s:K,s:{s:K,s:K,s:K,s:I,s:I,s:K},s:I,s:s}", "opset", (long long)r->opset,
      "nodes", r->num_nodes, "folded_nodes", r->num_folded, "ops", ops, "constants", r->num_consts,
      "constants_bytes", (unsigned long long)r->const_bytes, "memory", "planned_bytes",
      (unsigned long long)p->planned_bytes, "unplanned_bytes",
      (unsigned long long)p->unplanned_bytes, "live_peak_bytes",
      (unsigned long long)p->live_peak_bytes, "storages", p->num_storages, "planned_tensors",
      p->num_tensors, "output_bytes", (unsigned long long)p->output_bytes, "warnings",
      r->num_warnings, "warning", r->num_warnings ? r->warning : "");
}

/* A (name, value) pair of the lists compile_onnx() takes: the name (UTF-8,
 * kept alive by the pair) and the value (borrowed). */
static int onnx_named(PyObject *pair, const char *what, const char **name, PyObject **value) {
  if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 ||
      !PyUnicode_Check(PyTuple_GET_ITEM(pair, 0))) {
    PyErr_Format(PyExc_TypeError, "%s: expected (name, value) pairs with str names", what);
    return -1;
  }
  *name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(pair, 0));
  *value = PyTuple_GET_ITEM(pair, 1);
  return *name ? 0 : -1;
}

/* compile_onnx(path, data, input_shapes, consts) -> (vmx bytes, report):
 * the model is the file at path (external data beside it), or, when path
 * is None, the bytes-like data (no external data). input_shapes: a list of
 * (name, sequence of ints); consts: a list of (name, array) binding graph
 * inputs to constants (arrays read in place). The GIL is released while
 * compiling. */
static PyObject *mod_compile_onnx(PyObject *mod, PyObject *args) {
  (void)mod;
  PyObject *path_obj, *data_obj, *shapes_obj, *consts_obj;
  if (!PyArg_ParseTuple(args, "OOO!O!", &path_obj, &data_obj, &PyList_Type, &shapes_obj,
                        &PyList_Type, &consts_obj))
    return NULL;
  Py_ssize_t ns = PyList_GET_SIZE(shapes_obj), nc = PyList_GET_SIZE(consts_obj);
  PyObject *path_bytes = NULL, *result = NULL;
  Py_buffer data = {0};
  int has_data = 0;
  vmcc_input_shape_t *shapes = PyMem_Calloc((size_t)ns + 1, sizeof(*shapes));
  vmcc_const_binding_t *binds = PyMem_Calloc((size_t)nc + 1, sizeof(*binds));
  vmcc_tensor_t *cvals = PyMem_Calloc((size_t)nc + 1, sizeof(*cvals));
  input_t *in = PyMem_Calloc((size_t)nc + 1, sizeof(*in));
  if (!shapes || !binds || !cvals || !in) {
    PyErr_NoMemory();
    goto out;
  }
  for (Py_ssize_t i = 0; i < ns; i++) {
    PyObject *dims;
    if (onnx_named(PyList_GET_ITEM(shapes_obj, i), "input_shapes", &shapes[i].name, &dims) != 0)
      goto out;
    PyObject *fast = PySequence_Fast(dims, "an input shape must be a sequence of ints");
    if (!fast) goto out;
    Py_ssize_t nd = PySequence_Fast_GET_SIZE(fast);
    if (nd > VMCC_MAX_NDIM) {
      Py_DECREF(fast);
      PyErr_Format(PyExc_ValueError, "input shape for '%s' has %zd dims; at most %d",
                   shapes[i].name, nd, VMCC_MAX_NDIM);
      goto out;
    }
    shapes[i].ndim = (uint32_t)nd;
    for (Py_ssize_t d = 0; d < nd; d++) {
      shapes[i].dims[d] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, d));
      if (shapes[i].dims[d] == -1 && PyErr_Occurred()) {
        Py_DECREF(fast);
        goto out;
      }
    }
    Py_DECREF(fast);
  }
  for (Py_ssize_t i = 0; i < nc; i++) {
    PyObject *value;
    if (onnx_named(PyList_GET_ITEM(consts_obj, i), "consts", &binds[i].name, &value) != 0 ||
        input_from_py(value, &in[i]) != 0)
      goto out;
    const vmc_tensor_t *t = &in[i].v.tensor;
    if (in[i].v.kind != VMC_VALUE_TENSOR || t->ndim > VMCC_MAX_NDIM) {
      PyErr_Format(PyExc_ValueError, "constant for '%s' must be an array of at most %d dims",
                   binds[i].name, VMCC_MAX_NDIM);
      goto out;
    }
    cvals[i].dtype = t->dtype;
    cvals[i].ndim = t->ndim;
    memcpy(cvals[i].shape, t->shape, t->ndim * sizeof(int64_t));
    cvals[i].data = t->data;
    cvals[i].nbytes = t->nbytes;
    binds[i].value = &cvals[i];
  }
  if (path_obj != Py_None) {
    if (!PyUnicode_FSConverter(path_obj, &path_bytes)) goto out;
  } else {
    if (PyObject_GetBuffer(data_obj, &data, PyBUF_SIMPLE) != 0) goto out;
    has_data = 1;
  }
  vmcc_onnx_options_t o;
  memset(&o, 0, sizeof(o));
  o.num_input_shapes = (uint32_t)ns;
  o.input_shapes = shapes;
  o.num_consts = (uint32_t)nc;
  o.consts = binds;
  vmcc_onnx_report_t rep;
  vm_executable_t *exec = NULL;
  uint8_t *vmx = NULL;
  size_t size = 0;
  vm_status_t st;
  PyThreadState *ts = PyEval_SaveThread();
  if (path_bytes)
    st = vmcc_onnx_compile_file(PyBytes_AS_STRING(path_bytes), &o, &exec, &rep);
  else
    st = vmcc_onnx_compile(data.buf, (size_t)data.len, NULL, &o, &exec, &rep);
  if (!st) st = vm_executable_write(exec, &vmx, &size);
  vm_executable_free(exec);
  PyEval_RestoreThread(ts);
  if (st) {
    raise_status(st);
    goto out;
  }
  PyObject *report = onnx_report_dict(&rep);
  if (report) result = Py_BuildValue("(y#N)", (const char *)vmx, (Py_ssize_t)size, report);
  free(vmx);
out:
  for (Py_ssize_t i = 0; in && i < nc; i++) input_release(&in[i]);
  if (has_data) PyBuffer_Release(&data);
  Py_XDECREF(path_bytes);
  PyMem_Free(shapes);
  PyMem_Free(binds);
  PyMem_Free(cvals);
  PyMem_Free(in);
  return result;
}

/* ------------------------------------------------------------- module */

/* _setup(errors: dict[int, type], base_error: type, shape_type: type) */
static PyObject *mod_setup(PyObject *mod, PyObject *args) {
  (void)mod;
  PyObject *errors, *base, *shape;
  if (!PyArg_ParseTuple(args, "O!OO", &PyDict_Type, &errors, &base, &shape)) return NULL;
  PyObject *np = PyImport_ImportModule("numpy");
  if (!np) return NULL;
  PyObject *asarray = PyObject_GetAttrString(np, "asarray");
  PyObject *ascontig = PyObject_GetAttrString(np, "ascontiguousarray");
  Py_DECREF(np);
  if (!asarray || !ascontig) {
    Py_XDECREF(asarray);
    Py_XDECREF(ascontig);
    return NULL;
  }
  PyObject *threading = PyImport_ImportModule("threading");
  PyObject *main_thread = threading ? PyObject_CallMethod(threading, "main_thread", NULL) : NULL;
  PyObject *ident = main_thread ? PyObject_GetAttrString(main_thread, "ident") : NULL;
  Py_XDECREF(threading);
  Py_XDECREF(main_thread);
  if (!ident) {
    Py_DECREF(asarray);
    Py_DECREF(ascontig);
    return NULL;
  }
  g_main_ident = PyLong_AsUnsignedLong(ident);
  Py_DECREF(ident);
  Py_XSETREF(g_asarray, asarray);
  Py_XSETREF(g_ascontig, ascontig);
  Py_XSETREF(g_errors, Py_NewRef(errors));
  Py_XSETREF(g_base_error, Py_NewRef(base));
  Py_XSETREF(g_shape_type, Py_NewRef(shape));
  Py_RETURN_NONE;
}

static PyObject *mod_code_name(PyObject *mod, PyObject *arg) {
  (void)mod;
  long code = PyLong_AsLong(arg);
  if (code == -1 && PyErr_Occurred()) return NULL;
  return PyUnicode_FromString(vm_code_name((vm_code_t)code));
}

static PyMethodDef module_methods[] = {
    {"_setup", mod_setup, METH_VARARGS, "Called once by the vmrpc package."},
    {"code_name", mod_code_name, METH_O, "code_name(code) -> 'INVALID_ARGUMENT' ..."},
    {"compile_onnx", mod_compile_onnx, METH_VARARGS,
     "compile_onnx(path, data, input_shapes, consts) -> (vmx_bytes, report)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT,
    "_core",
    "CPython binding of libvmclient (used by vmrpc).",
    -1,
    module_methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__core(void);
PyMODINIT_FUNC PyInit__core(void) {
  if (PyType_Ready(&ConnectionType) < 0 || PyType_Ready(&HostTensorType) < 0) return NULL;
  PyObject *m = PyModule_Create(&core_module);
  if (!m) return NULL;
  Py_INCREF(&ConnectionType);
  if (PyModule_AddObject(m, "Connection", (PyObject *)&ConnectionType) < 0) {
    Py_DECREF(&ConnectionType);
    Py_DECREF(m);
    return NULL;
  }
  Py_INCREF(&HostTensorType);
  if (PyModule_AddObject(m, "HostTensor", (PyObject *)&HostTensorType) < 0) {
    Py_DECREF(&HostTensorType);
    Py_DECREF(m);
    return NULL;
  }
  if (PyModule_AddIntConstant(m, "MAX_NDIM", VMC_MAX_NDIM) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
