/* libvmclient: the host side of vmrpc.
 *
 * A small blocking C API over the vmrpc wire protocol (docs/protocol.md):
 * connect to a `vmagent`, upload an executable, create a VM on one of the
 * agent's devices, set inputs, invoke statefully (outputs stay on the
 * device), fetch only the outputs wanted, and time or profile functions on
 * the device. Large payloads move in chunks with several requests in flight.
 * (One header by design, over 600 lines: it is the whole public API a user
 * includes, each declaration with its contract.)
 *
 * Conventions
 * - Every call that can fail returns a vm_status_t (vmrpc/status.h): NULL is
 *   OK, anything else carries a gRPC-style code and a message that says what
 *   to do next; the caller frees it with vm_status_free(). Errors reported
 *   by the agent keep the agent's code and message.
 * - On failure, out-parameters hold nothing the caller must free (they are
 *   left as they were or zeroed).
 * - Handles of things that live on the agent (vmc_exec_t, vmc_vm_t) are IDs
 *   valid within the session of the connection that made them; a stale or
 *   foreign ID is answered NOT_FOUND by the agent, never undefined behaviour.
 * - The session (and everything it holds on the agent) ends with
 *   vmc_close(), when the connection drops, or after the agent's idle
 *   timeout (vmc_limits_t.idle_timeout_ms). There is no transparent
 *   reconnection: once the connection is lost every call fails fast with
 *   UNAVAILABLE and the caller connects again.
 *
 * Threading
 * - vmc_connect() and the .npy / tensor helpers are reentrant.
 * - All other calls may be made concurrently from any number of threads on
 *   one connection. Requests are written whole, one after the other, and
 *   replies are matched to their callers by request id, so calls do not
 *   wait for one another's replies on the client; the connection-wide lock
 *   is held only for bookkeeping, never across network I/O.
 * - Chunk requests of all concurrent transfers on a connection share one
 *   budget of vmc_limits_t.max_inflight_chunks requests in flight (the
 *   agent's limit); a transfer waits for a free slot, so parallel big
 *   transfers are serialised chunk by chunk, not refused.
 * - vmc_cancel() uses no chunk slot and takes no lock that an invoke holds:
 *   it is meant to be called from another thread while vmc_invoke() (or
 *   vmc_time_evaluate() / vmc_profile()) blocks, and is never queued behind
 *   it on the client. On the agent, the invoke then returns CANCELLED.
 * - The agent serves one request per VM at a time and answers a second
 *   one that arrives meanwhile with FAILED_PRECONDITION "vm N is busy"
 *   (Cancel excepted); it does not queue them. Threads sharing a VM must
 *   order their calls themselves; use one VM per thread for independent
 *   work. Calls on different VMs never interfere on the client; on the
 *   agent, invocations on one device run one at a time, and more
 *   device-bound requests at once than its --workers allow are answered
 *   UNAVAILABLE "... retry later".
 * - vmc_close() must be the last call on a connection: no other thread may
 *   be inside a call on it, or start one, when it is called.
 * - Progress callbacks run on the calling thread, between chunk
 *   completions; they must not call back into the same transfer.
 */
#ifndef VMCLIENT_H
#define VMCLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "vmrpc/dtype.h"
#include "vmrpc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with hidden visibility; what this header declares
 * is its interface. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* ---------------------------------------------------------------------------
 * Tensors (host side)
 */

/* Most dimensions a tensor may have (the wire's limit). */
#define VMC_MAX_NDIM 16

/* A dense, C-ordered tensor in host memory. nbytes must equal
 * numel(shape) * vm_dtype_bytes(dtype). When owns_data is nonzero, data was
 * malloc'ed by the library (or handed over by the caller) and
 * vmc_tensor_free() frees it; otherwise the caller owns data. */
typedef struct vmc_tensor {
  vm_dtype_t dtype;
  uint32_t ndim;
  int64_t shape[VMC_MAX_NDIM];
  void *data;
  uint64_t nbytes;
  int owns_data;
} vmc_tensor_t;

/* Allocates a zero-filled tensor of dtype and shape (overflow-checked).
 * INVALID_ARGUMENT for an invalid dtype, ndim > VMC_MAX_NDIM or a negative
 * dim; RESOURCE_EXHAUSTED if memory runs out. Free with vmc_tensor_free(). */
vm_status_t vmc_tensor_alloc(vm_dtype_t dtype, uint32_t ndim, const int64_t *shape,
                             vmc_tensor_t *out);

/* Fills *out to describe caller-owned memory (owns_data = 0, no copy).
 * INVALID_ARGUMENT as for vmc_tensor_alloc(), or if data is NULL while the
 * tensor has bytes. */
vm_status_t vmc_tensor_wrap(vm_dtype_t dtype, uint32_t ndim, const int64_t *shape, void *data,
                            vmc_tensor_t *out);

/* Frees data if owns_data and resets *t to an empty tensor (ndim 0, no
 * data). NULL is a no-op. */
void vmc_tensor_free(vmc_tensor_t *t);

/* Checks that t is consistent: valid dtype, ndim <= VMC_MAX_NDIM, dims
 * >= 0, nbytes matching the shape, data present when nbytes > 0.
 * INVALID_ARGUMENT naming what is wrong. */
vm_status_t vmc_tensor_check(const vmc_tensor_t *t);

/* ---------------------------------------------------------------------------
 * .npy files (NumPy's format, versions 1.0, 2.0 and 3.0)
 *
 * Supported: float16/32/64, int8/16/32/64, uint8/16/32/64 and bool, little
 * endian ('<', or '|' for one-byte types), C order. Fortran order,
 * big-endian data and other dtypes are refused with INVALID_ARGUMENT saying
 * how to convert the array in NumPy. Hostile input (truncated or oversized
 * headers, shapes that overflow, data shorter or longer than the shape
 * needs, non-ASCII headers) gives INVALID_ARGUMENT naming the problem;
 * nothing is allocated for data the input does not actually contain.
 */

/* Parses an .npy image in memory. *out owns a copy of the data. */
vm_status_t vmc_npy_read_memory(const void *data, size_t size, vmc_tensor_t *out);

/* Reads an .npy file: the header first, then the data straight into one
 * allocation of the exact size. NOT_FOUND / UNAVAILABLE for I/O errors
 * (naming the path); parse errors are prefixed with the path. */
vm_status_t vmc_npy_read_file(const char *path, vmc_tensor_t *out);

/* Writes t as a version 1.0 .npy image into a new malloc'ed buffer
 * (*out_data, *out_size; the caller frees it). INVALID_ARGUMENT for a
 * tensor that fails vmc_tensor_check() or a dtype .npy cannot hold
 * (bfloat16, vector lanes). */
vm_status_t vmc_npy_write_memory(const vmc_tensor_t *t, uint8_t **out_data, size_t *out_size);

/* Writes t to path atomically (path.tmp.<pid>, then rename), header then
 * data without copying the data. Errors as vmc_npy_write_memory(), plus
 * UNAVAILABLE / NOT_FOUND for I/O. */
vm_status_t vmc_npy_write_file(const char *path, const vmc_tensor_t *t);

/* ---------------------------------------------------------------------------
 * Connections
 */

/* A connection to one agent and the session it holds there. Opaque. */
typedef struct vmc_conn vmc_conn_t;

/* Default timeouts, in milliseconds. */
#define VMC_DEFAULT_CONNECT_TIMEOUT_MS 5000
#define VMC_DEFAULT_REQUEST_TIMEOUT_MS 30000

/* Options of vmc_connect(). Zero-initialise, then set what you need; NULL
 * strings and 0 numbers take the defaults. */
typedef struct vmc_conn_opts {
  const char *token;          /* required when the agent has --token-file */
  const char *tls_ca_file;    /* PEM CA bundle that signed the agent's
                                 certificate (tls+tcp:// only; default: the
                                 system CA store) */
  const char *tls_cert;       /* PEM client certificate (tls+tcp://, optional) */
  const char *tls_key;        /* PEM private key of tls_cert */
  int32_t connect_timeout_ms; /* dial + Hello (default 5000) */
  int32_t request_timeout_ms; /* any one request/reply (default 30000) */
  /* Wait for a reply to Invoke without a deadline, TimeEvaluate and
   * Profile: 0 = no limit (a lost connection still ends the wait at once);
   * Invoke with a deadline waits deadline + request_timeout_ms. */
  int32_t long_timeout_ms;
  const char *client_name; /* shown in the agent's log (default "libvmclient/VERSION") */
  /* tls+tcp:// trusts, in this order of choice (at most one of the three):
   * tls_pin "sha256:HEX": exactly the agent certificate with that SHA-256
   * fingerprint (64 hex digits, colons allowed; the certificate must be
   * self-signed); tls_ca_file; tls_insecure != 0: nothing — the agent's
   * certificate is not checked, so anyone on the path can read the token
   * and the data. Without any of them the system CA store verifies the
   * agent's certificate and its host name. */
  const char *tls_pin;
  int32_t tls_insecure;
} vmc_conn_opts_t;

/* Connects to url ("tcp://HOST:PORT", "tls+tcp://HOST:PORT", "ipc:///path")
 * and opens a session (Hello: protocol version check, token, devices,
 * limits). opts may be NULL. On success *out_conn is set; release it with
 * vmc_close().
 * Errors: INVALID_ARGUMENT for a malformed URL or options; UNAVAILABLE when
 * the agent cannot be reached (the message says how to start one);
 * DEADLINE_EXCEEDED after connect_timeout_ms; UNAVAILABLE also when the
 * agent's TLS certificate fails verification or does not match tls_pin;
 * NOT_FOUND / PERMISSION_DENIED for a TLS file that cannot be read;
 * UNAUTHENTICATED for a missing
 * or wrong token; FAILED_PRECONDITION for an agent of another protocol
 * major version; RESOURCE_EXHAUSTED when the agent is at --max-sessions. */
vm_status_t vmc_connect(const char *url, const vmc_conn_opts_t *opts, vmc_conn_t **out_conn);

/* Ends the session (Goodbye, bounded wait, errors ignored), closes the
 * connection and frees conn. Everything the session held on the agent is
 * freed there. NULL is a no-op. See the threading rules above. */
void vmc_close(vmc_conn_t *conn);

/* The URL this connection was made to (valid until vmc_close()). */
const char *vmc_conn_url(const vmc_conn_t *conn);

/* What a device of the agent is (from Hello). */
typedef struct vmc_device_info {
  char selector[32]; /* "cpu", "opencl:0", ...: pass to vmc_create_vm() */
  char name[128];
  char vendor[128];
  char driver_version[64];
  char version[128];
  char platform[128];
  uint32_t compute_units;
  uint64_t global_mem_bytes;
  uint64_t local_mem_bytes;
  uint64_t max_alloc_bytes;
  int supports_fp16;
  int has_device_timer;
} vmc_device_info_t;

/* The agent's limits (from Hello). */
typedef struct vmc_limits {
  uint64_t max_message_bytes;   /* largest request message */
  uint64_t chunk_bytes;         /* chunk size of every chunked transfer */
  uint32_t max_inflight_chunks; /* chunk requests in flight per connection */
  uint32_t max_sessions;
  uint64_t session_mem_bytes; /* 0 = no limit */
  uint64_t max_executable_bytes;
  uint32_t idle_timeout_ms; /* 0 = none */
} vmc_limits_t;

/* Everything Hello told (no network traffic). Pointers stay valid until
 * vmc_close(). */
typedef struct vmc_info {
  const char *url;
  const char *agent_version;
  uint32_t protocol_major, protocol_minor; /* the agent's */
  uint32_t client_protocol_major, client_protocol_minor;
  uint64_t session;
  uint32_t num_devices;
  const vmc_device_info_t *devices;
  vmc_limits_t limits;
} vmc_info_t;

/* Fills *out from the Hello of this connection. Never fails. */
void vmc_info(const vmc_conn_t *conn, vmc_info_t *out);

/* Round trip of a Ping (no work on the agent). out_rtt_s (may be NULL)
 * receives the wall seconds it took. */
vm_status_t vmc_ping(vmc_conn_t *conn, double *out_rtt_s);

/* ---------------------------------------------------------------------------
 * Executables
 */

/* An executable loaded in the session. id 0 is never valid. */
typedef struct vmc_exec {
  uint64_t id;
} vmc_exec_t;

/* Called after each chunk is acknowledged: bytes_done of total. Runs on the
 * calling thread. */
typedef void (*vmc_progress_fn)(uint64_t bytes_done, uint64_t total, void *user);

/* What an upload did. */
typedef struct vmc_upload_result {
  int store_hit;       /* the agent had it (loaded or in its cache): nothing sent */
  uint64_t bytes_sent; /* executable bytes sent (0 on a store hit) */
  uint8_t sha256[32];  /* identity of the bytes */
} vmc_upload_result_t;

/* Uploads a .vmx image: SHA-256 (vm_sha256), UploadBegin; on a store hit
 * nothing more is sent and progress is never called; otherwise the bytes go
 * in chunk_bytes chunks with up to max_inflight_chunks requests in flight,
 * then UploadCommit (the agent checks the hash and verifies the
 * executable). progress and out_result may be NULL.
 * Errors: the agent's (INVALID_ARGUMENT from its verifier, DATA_LOSS for a
 * hash mismatch, RESOURCE_EXHAUSTED over max_executable_bytes, ...). */
vm_status_t vmc_upload_memory(vmc_conn_t *conn, const void *data, size_t size,
                              vmc_progress_fn progress, void *user, vmc_exec_t *out_exec,
                              vmc_upload_result_t *out_result);

/* Reads path (capped at the agent's max_executable_bytes) and uploads it as
 * vmc_upload_memory() does. The process remembers the SHA-256 of files it
 * read (by device, inode, size, mtime and ctime, for files left unchanged
 * for a few seconds before): uploading such a file again starts with
 * UploadBegin and reads nothing when the agent has it. A remembered hash
 * never loads wrong code: on a miss the agent checks the bytes it gets
 * (DATA_LOSS if the file changed unnoticed; the entry is then dropped).
 * NOT_FOUND / UNAVAILABLE for I/O errors. */
vm_status_t vmc_upload_file(vmc_conn_t *conn, const char *path, vmc_progress_fn progress,
                            void *user, vmc_exec_t *out_exec, vmc_upload_result_t *out_result);

/* Drops the session's reference to an executable. A VM made from it keeps
 * it alive until the VM is freed. NOT_FOUND if unknown. */
vm_status_t vmc_free_exec(vmc_conn_t *conn, vmc_exec_t exec);

/* ---------------------------------------------------------------------------
 * Virtual machines
 */

/* A VM in the session. id 0 is never valid. */
typedef struct vmc_vm {
  uint64_t id;
} vmc_vm_t;

/* One device of a VM. */
typedef struct vmc_device_spec {
  const char *selector;  /* vmc_device_info_t.selector: "cpu", "opencl:0" */
  const char *allocator; /* "pooled" (NULL = default) or "naive" */
} vmc_device_spec_t;

/* Creates a VM running exec on devices[0..num_devices) (num_devices 0 = the
 * agent's first device). exec_mode: "bytecode" (NULL = default) or
 * "compiled". Errors (the agent's): NOT_FOUND for a device selector the
 * agent lacks (the message lists its devices), an unknown exec, or missing
 * builtins (all listed); INVALID_ARGUMENT for an unknown allocator or
 * mode. */
vm_status_t vmc_create_vm(vmc_conn_t *conn, vmc_exec_t exec, const vmc_device_spec_t *devices,
                          uint32_t num_devices, const char *exec_mode, vmc_vm_t *out_vm);

/* Frees a VM and everything it holds on the device. NOT_FOUND if unknown. */
vm_status_t vmc_free_vm(vmc_conn_t *conn, vmc_vm_t vm);

/* Kinds of values that cross the wire. */
typedef enum vmc_value_kind {
  VMC_VALUE_NONE = 0,
  VMC_VALUE_INT = 1,    /* i */
  VMC_VALUE_FLOAT = 2,  /* f */
  VMC_VALUE_BOOL = 3,   /* b */
  VMC_VALUE_STRING = 4, /* s */
  VMC_VALUE_SHAPE = 5,  /* shape_ndim, shape */
  VMC_VALUE_TENSOR = 6, /* tensor */
  VMC_VALUE_TUPLE = 7,  /* tuple_arity: fetch fields with a longer path */
} vmc_value_kind_t;

/* A scalar, a shape or a tensor. As an input, tensor.data is only read and
 * s is borrowed; as an output (vmc_get_output_value()), s and tensor.data
 * are owned by the value: free with vmc_value_free(). */
typedef struct vmc_value {
  vmc_value_kind_t kind;
  int64_t i;
  double f;
  int b;
  char *s;
  uint32_t shape_ndim;
  int64_t shape[VMC_MAX_NDIM];
  uint32_t tuple_arity;
  vmc_tensor_t tensor;
} vmc_value_t;

/* Frees what an output value owns and resets it to NONE. NULL is a no-op. */
void vmc_value_free(vmc_value_t *v);

/* Sets parameter `index` of func to tensor t (copied to the VM's device;
 * t is not kept). Tensors up to chunk_bytes travel inline in SetInput;
 * larger ones as TensorBegin + parallel TensorChunk requests + SetInput by
 * reference. INVALID_ARGUMENT for an inconsistent tensor or a dtype/shape
 * the parameter refuses (the agent's message). */
vm_status_t vmc_set_input(vmc_conn_t *conn, vmc_vm_t vm, const char *func, uint32_t index,
                          const vmc_tensor_t *t);

/* As vmc_set_input(), selecting the parameter by its name. */
vm_status_t vmc_set_input_named(vmc_conn_t *conn, vmc_vm_t vm, const char *func, const char *name,
                                const vmc_tensor_t *t);

/* Sets a parameter to any value (scalar, shape or tensor): by name when
 * name is not NULL, else by index. */
vm_status_t vmc_set_input_value(vmc_conn_t *conn, vmc_vm_t vm, const char *func, uint32_t index,
                                const char *name, const vmc_value_t *v);

/* Runs func with its stateful inputs; the result stays on the agent.
 * deadline_ms 0 = none; past it the agent stops the run with
 * DEADLINE_EXCEEDED. out_agent_seconds (may be NULL) receives the agent's
 * wall time of the run. Another thread may vmc_cancel() it (CANCELLED).
 * If the client gives up waiting (long_timeout_ms, or deadline +
 * request_timeout_ms), it sends a Cancel for the VM and waits up to
 * request_timeout_ms for the cancelled run to end, then returns
 * DEADLINE_EXCEEDED saying whether the agent confirmed (so the VM is
 * normally idle again on return). vmc_time_evaluate() and vmc_profile()
 * behave the same with long_timeout_ms. */
vm_status_t vmc_invoke(vmc_conn_t *conn, vmc_vm_t vm, const char *func, uint32_t deadline_ms,
                       double *out_agent_seconds);

/* Asks the agent to stop the invocation running on vm (if any). Returns
 * once the agent acknowledged the request, not when the run stopped.
 * Thread-safe and never blocked behind the invocation it cancels. */
vm_status_t vmc_cancel(vmc_conn_t *conn, vmc_vm_t vm);

/* Arity of the (nested) result of the last invoke of func at path
 * (path_len 0 = the whole result): -1 when it is not a tuple. */
vm_status_t vmc_get_output_arity(vmc_conn_t *conn, vmc_vm_t vm, const char *func,
                                 const uint32_t *path, uint32_t path_len, int64_t *out_arity);

/* Fetches one value of func's last result at path. A tensor is fetched in
 * chunks, several in flight, each copied straight into one allocation of
 * the tensor's size (owned by *out). Free with vmc_value_free(). */
vm_status_t vmc_get_output_value(vmc_conn_t *conn, vmc_vm_t vm, const char *func,
                                 const uint32_t *path, uint32_t path_len, vmc_value_t *out);

/* As vmc_get_output_value() for a tensor result, into *out (owns_data =
 * 1; free with vmc_tensor_free()). Scalars come back as 0-d tensors (int64,
 * float64, bool) and a shape as a 1-d int64 tensor. FAILED_PRECONDITION
 * for a tuple (fetch a field with a longer path) and INVALID_ARGUMENT for
 * none/string results. */
vm_status_t vmc_get_output(vmc_conn_t *conn, vmc_vm_t vm, const char *func, const uint32_t *path,
                           uint32_t path_len, vmc_tensor_t *out);

/* As vmc_get_output() for a tensor result, into caller memory dst of
 * dst_capacity bytes (no allocation: the buffer can be reused across
 * calls). *out_meta (may be NULL) receives dtype/shape/nbytes with data =
 * dst and owns_data = 0. OUT_OF_RANGE if the tensor is larger than
 * dst_capacity (the message gives the size needed); FAILED_PRECONDITION if
 * the result is not a tensor. */
vm_status_t vmc_get_output_into(vmc_conn_t *conn, vmc_vm_t vm, const char *func,
                                const uint32_t *path, uint32_t path_len, void *dst,
                                uint64_t dst_capacity, vmc_tensor_t *out_meta);

/* Binds args[0..nargs) to func under saved_name, for repeated timing with
 * vmc_time_evaluate(vm, saved_name) (TVM's save_function). Tensor
 * arguments are transferred first (in chunks); scalars travel inline. */
vm_status_t vmc_save_function(vmc_conn_t *conn, vmc_vm_t vm, const char *func,
                              const char *saved_name, const vmc_value_t *args, uint32_t nargs);

/* ---------------------------------------------------------------------------
 * Fused run (protocol 1.1): one request instead of CreateVM, SetInput per
 * parameter, Invoke and the GetOutput requests of a small result.
 */

/* Tuple levels of a result that vmc_run() describes output by output. */
#define VMC_RUN_MAX_DEPTH 8

/* Options of vmc_run(). Zero-initialise, then set what you need. */
typedef struct vmc_run_opts {
  const char *func;                 /* NULL = "main" */
  const vmc_device_spec_t *devices; /* a new VM's devices, as vmc_create_vm() */
  uint32_t num_devices;
  const char *exec_mode; /* a new VM's mode, as vmc_create_vm() */
  uint32_t deadline_ms;  /* 0 = none, as vmc_invoke() */
  /* Output bytes the agent returns inside its reply (it caps this at its
   * chunk size): 0 = the chunk size. Tensors that do not fit are fetched
   * afterwards (several at once) unless keep_remote is set. */
  uint64_t inline_bytes;
  int32_t no_inline;        /* nonzero: no output bytes inline (inline_bytes ignored) */
  int32_t keep_remote;      /* nonzero: tensors not inline stay on the agent (data NULL) */
  vmc_progress_fn progress; /* of an upload on a store miss (may be NULL) */
  void *progress_user;
} vmc_run_opts_t;

/* One value of the result: the leaves of its tuples, depth first. */
typedef struct vmc_run_output {
  uint32_t path_len;
  uint32_t path[VMC_RUN_MAX_DEPTH];
  /* Owned. A tensor left on the agent has data NULL: fetch it with
   * vmc_get_output*() and this path. VMC_VALUE_TUPLE: a tuple the agent
   * did not walk (too deep or too many values): fetch its fields with a
   * longer path. */
  vmc_value_t value;
  int remote; /* a tensor whose bytes stayed on the agent */
} vmc_run_output_t;

/* What vmc_run() did and got. Free with vmc_run_result_free(). */
typedef struct vmc_run_result {
  vmc_exec_t exec;            /* the executable (0 when vm was given) */
  vmc_vm_t vm;                /* the VM that ran: pass it to the next vmc_run() */
  vmc_upload_result_t upload; /* when run from executable bytes */
  double agent_seconds;       /* the agent's wall time of the invocation */
  uint32_t requests;          /* requests this call sent (chunks included) */
  uint32_t num_outputs;
  vmc_run_output_t *outputs;
} vmc_run_result_t;

/* Runs a function with inputs[0..num_inputs) as its parameters 0, 1, ...
 * (fewer: the VM keeps the values set before). With vm.id == 0, exec and
 * exec_size are the .vmx bytes: the agent runs them from its store (one
 * Run request) or, on a miss, they are uploaded first (as
 * vmc_upload_memory()) and run by handle; a new VM is created. With a vm,
 * exec must be NULL and that VM runs again. Inputs travel inside the Run
 * request while they fit one chunk in all; the others are transferred
 * first, every TensorBegin and then all their chunks in flight together.
 * Any number of inputs: a Run request carries the first 256 (the
 * protocol's bound), those after them are set with SetInput first, one
 * round trip each. Against an agent of protocol 1.0 the same is done with the stateful
 * requests. Errors: as the stateful operations, prefixed with the step
 * ("Run: input 1: ..."); a VM the call created is freed again when a
 * later step fails. */
vm_status_t vmc_run(vmc_conn_t *conn, const void *exec, size_t exec_size, vmc_vm_t vm,
                    const vmc_value_t *inputs, uint32_t num_inputs, const vmc_run_opts_t *opts,
                    vmc_run_result_t *out);

/* Frees the outputs and zeroes r (the VM stays on the agent). NULL is a
 * no-op. */
void vmc_run_result_free(vmc_run_result_t *r);

/* ---------------------------------------------------------------------------
 * Timing and profiling (runs entirely on the agent)
 */

/* TVM's time_evaluator parameters (docs/timing.md). */
typedef struct vmc_time_params {
  int32_t number;                     /* calls per repeat (10) */
  int32_t repeat;                     /* measurements (1) */
  int32_t min_repeat_ms;              /* grow number until a repeat lasts this (0) */
  int32_t limit_zero_time_iterations; /* (100) */
  int32_t cooldown_interval_ms;       /* (0) */
  int32_t repeats_to_cooldown;        /* (1) */
  uint64_t cache_flush_bytes;         /* (0) */
} vmc_time_params_t;

/* The defaults above. */
vmc_time_params_t vmc_time_params_default(void);

/* Result of vmc_time_evaluate(); seconds are per call. */
typedef struct vmc_time_result {
  int32_t number;                               /* calls per repeat used (after growth) */
  uint32_t repeat;                              /* entries in seconds[] and device_seconds[] */
  double *seconds;                              /* per repeat, wall */
  double *device_seconds;                       /* per repeat, device timer; < 0 unknown */
  double min_s, mean_s, median_s, max_s, std_s; /* over seconds[] */
  double device_median_s;                       /* < 0 unknown */
  double warmup_s;                              /* the discarded first call */
  /* Seconds the measurement waited at the device's quiet gate for other
   * sessions' copies to finish (0: the device was quiet). */
  double gate_wait_s;
} vmc_time_result_t;

/* Times func (a function with stateful inputs, or a saved name) on the
 * agent. params NULL = the evaluator's defaults. Free the result with
 * vmc_time_result_free(). INVALID_ARGUMENT for bad params. */
vm_status_t vmc_time_evaluate(vmc_conn_t *conn, vmc_vm_t vm, const char *func,
                              const vmc_time_params_t *params, vmc_time_result_t *out);

/* Frees the arrays of a time result and zeroes it. NULL is a no-op. */
void vmc_time_result_free(vmc_time_result_t *r);

/* One row of a profile: a packed function. */
typedef struct vmc_profile_row {
  char name[128];
  uint64_t calls;
  double total_s;
  double mean_s;
  double device_s; /* < 0 unknown */
  double share;    /* of the sum of total_s */
} vmc_profile_row_t;

/* Per-operator profile of one run, rows sorted by total_s, largest first. */
typedef struct vmc_profile {
  uint32_t num_rows;
  vmc_profile_row_t *rows;
  double total_s;
} vmc_profile_t;

/* Runs func once on the agent with per-call timing. Free with
 * vmc_profile_free(). */
vm_status_t vmc_profile(vmc_conn_t *conn, vmc_vm_t vm, const char *func, vmc_profile_t *out);

/* Frees the rows and zeroes p. NULL is a no-op. */
void vmc_profile_free(vmc_profile_t *p);

/* ---------------------------------------------------------------------------
 * Statistics
 */

/* Counters of one device allocator of the session's VMs. */
typedef struct vmc_alloc_stats {
  char device[32];
  char kind[16];
  uint64_t bytes_in_use, peak_bytes, bytes_reserved;
  uint64_t device_allocs, device_frees;
} vmc_alloc_stats_t;

/* Memory and counts of this session and of the whole agent. */
typedef struct vmc_stats {
  uint64_t session_bytes; /* device + host bytes held by this session */
  uint32_t session_vms;
  uint32_t session_executables;
  uint32_t session_transfers;
  uint32_t num_allocators;
  vmc_alloc_stats_t *allocators;
  uint32_t agent_sessions;
  uint64_t agent_bytes; /* all sessions */
  uint64_t store_bytes;
  uint32_t store_entries;
  uint64_t requests;
  uint64_t agent_rss_bytes;
} vmc_stats_t;

/* Asks the agent for its counters. Free with vmc_stats_free(). */
vm_status_t vmc_stats(vmc_conn_t *conn, vmc_stats_t *out);

/* Frees the allocator list and zeroes s. NULL is a no-op. */
void vmc_stats_free(vmc_stats_t *s);

/* ---------------------------------------------------------------------------
 * The device's state: what the agent's host exposes without root (Linux
 * sysfs and procfs; docs/protocol.md, DeviceState). Unknown figures are -1
 * or *_known 0, never guessed; empty lists mean not exposed.
 */

typedef struct vmc_cpu_state {
  uint32_t cpu;           /* N of cpuN */
  int64_t cur_khz;        /* -1 unknown */
  int64_t max_khz;        /* the hardware's maximum; -1 unknown */
  int64_t policy_max_khz; /* the cap now (scaling_max_freq); -1 unknown */
  char governor[32];      /* "" unknown */
} vmc_cpu_state_t;

#define VMC_MAX_TRIPS 12

typedef struct vmc_trip_point {
  char type[32]; /* passive, active, hot, critical, ... */
  int64_t temp_mc;
} vmc_trip_point_t;

typedef struct vmc_thermal_zone {
  char name[32]; /* thermal_zoneN */
  char type[64]; /* "" unknown */
  int temp_known;
  int64_t temp_mc; /* millidegrees Celsius */
  uint32_t num_trips;
  vmc_trip_point_t trips[VMC_MAX_TRIPS];
} vmc_thermal_zone_t;

typedef struct vmc_devfreq_state {
  char name[64];
  int64_t cur_hz, max_hz, avail_max_hz; /* -1 unknown */
  char governor[32];
} vmc_devfreq_state_t;

typedef struct vmc_device_state {
  uint32_t num_cpus;
  vmc_cpu_state_t *cpus;
  uint32_t num_zones;
  vmc_thermal_zone_t *zones;
  uint32_t num_devfreq;
  vmc_devfreq_state_t *devfreq;
  int loadavg_known;
  double load1, load5, load15;
  uint32_t sessions;      /* on the agent, the caller's included */
  uint32_t busy_sessions; /* other sessions with a request in flight */
  uint64_t agent_time_ns; /* the agent's monotonic clock */
} vmc_device_state_t;

/* Asks the agent for its host's state (protocol 1.2; an older agent:
 * UNIMPLEMENTED). Free with vmc_device_state_free(). */
vm_status_t vmc_device_state(vmc_conn_t *conn, vmc_device_state_t *out);
void vmc_device_state_free(vmc_device_state_t *s);

/* Throttling seen in snapshots s[0..n) of one measurement: a clock whose
 * cap was below its maximum, a zone at or past one of its passive, hot or
 * critical trip points. Writes one "; "-separated description (each clock
 * and zone named once) into buf and returns how many were found; 0: none
 * seen (or nothing exposed). */
uint32_t vmc_state_throttling(const vmc_device_state_t *s, uint32_t n, char *buf, size_t cap);

/* Whether s shows any clock (a maximum) or temperature at all: without
 * one, throttling is unknown rather than absent. */
int vmc_state_exposed(const vmc_device_state_t *s);

/* The hottest zone of s: 1 and *out_mc (millidegrees), or 0 when no zone
 * reports a temperature. */
int vmc_state_max_temp(const vmc_device_state_t *s, int64_t *out_mc);

/* ---------------------------------------------------------------------------
 * Compare: is B faster, slower or the same as A on this device?
 * (docs/timing.md, Compare)
 */

/* Most rounds a comparison takes (and values the interval accepts). */
#define VMC_COMPARE_MAX_ROUNDS 1000u

typedef enum vmc_verdict {
  VMC_VERDICT_SAME = 0,     /* the interval lies within 1 +- threshold */
  VMC_VERDICT_FASTER,       /* the interval lies below 1 - threshold */
  VMC_VERDICT_SLOWER,       /* the interval lies above 1 + threshold */
  VMC_VERDICT_INCONCLUSIVE, /* the budget ran out before the interval decided */
} vmc_verdict_t;

/* "same", "faster", "slower", "inconclusive". */
const char *vmc_verdict_name(vmc_verdict_t v);

/* One side of a comparison: a function of a VM on a connection. The two
 * sides may share the connection or use two on the same agent. */
typedef struct vmc_compare_side {
  vmc_conn_t *conn;
  vmc_vm_t vm;
  const char *func;
} vmc_compare_side_t;

/* One round: A and B timed back to back (B first when b_first); seconds per
 * call of each side's fastest batch, device ones < 0 when unknown. */
typedef struct vmc_compare_round {
  int b_first;
  double a_s, b_s;               /* wall */
  double a_device_s, b_device_s; /* device timer; < 0 unknown */
  double end_s;                  /* since the comparison began */
  double gate_wait_s;            /* both sides' waits at the device's quiet gate (0: quiet) */
} vmc_compare_round_t;

typedef struct vmc_compare_opts {
  double threshold;    /* relative difference that matters (0.02) */
  double confidence;   /* family-wise over every look, 0.5 to below 1 (0.95) */
  uint32_t min_rounds; /* rounds before the first look, 2..1000 (10) */
  uint32_t max_rounds; /* 1..1000 (100) */
  double max_seconds;  /* no round starts that would end past this (300) */
  int32_t round_ms;    /* each batch of calls lasts about this, 1..60000 (1) */
  int32_t repeats;     /* batches per side per round, the fastest counts, 1..100 (20) */
  int32_t cooldown_ms; /* sleep between rounds, 0..600000 (0) */
  /* Called before every round (n rounds done so far; after the cooldown):
   * a temperature gate may wait here. */
  void (*before_round)(void *user, uint32_t n);
  /* Called after every round (r is rounds[n - 1] of the result). */
  void (*on_round)(void *user, const vmc_compare_round_t *r, uint32_t n);
  void *user;
} vmc_compare_opts_t;

/* The defaults above. */
vmc_compare_opts_t vmc_compare_opts_default(void);

typedef struct vmc_compare_result {
  vmc_verdict_t verdict;
  double ratio;               /* B / A: exp of the Hodges-Lehmann estimate */
  double lo, hi;              /* its interval; NAN before the first look */
  double threshold, confidence;
  double look_confidence;     /* each look's level: 1 - (1 - confidence) / looks_planned */
  double achieved_confidence; /* the last look's exact level (>= look_confidence) */
  uint32_t looks, looks_planned;
  int device_time;            /* the interval is over device time (else wall) */
  int budget_exhausted;       /* inconclusive because rounds or seconds ran out */
  int time_exhausted;         /* ... the seconds */
  int32_t number_a, number_b; /* calls per batch after calibration */
  uint32_t num_rounds;
  vmc_compare_round_t *rounds;
  double calibrate_s, seconds; /* calibration, and everything */
} vmc_compare_result_t;

/* Compares b with a: calibrates, then runs rounds A B, B A, ... until the
 * interval decides or the budget runs out. Errors of the agent are
 * returned as they come (no partial result); INVALID_ARGUMENT for bad
 * options. Free the result with vmc_compare_result_free(). */
vm_status_t vmc_compare(const vmc_compare_side_t *a, const vmc_compare_side_t *b,
                        const vmc_compare_opts_t *opts, vmc_compare_result_t *out);
void vmc_compare_result_free(vmc_compare_result_t *r);

/* The verdict an interval [lo, hi] of B / A gives. */
vmc_verdict_t vmc_compare_decide(double lo, double hi, double threshold);

/* Number of looks (and, into looks[0..cap), their round counts) of the
 * schedule: min_rounds, then 1.5 times more each look, the last at
 * max_rounds. */
uint32_t vmc_compare_looks(uint32_t min_rounds, uint32_t max_rounds, uint32_t *looks,
                           uint32_t cap);

/* Hodges-Lehmann estimate of the centre of d[0..n) (the median of the
 * Walsh averages) and its Wilcoxon signed-rank interval at level 1 - alpha
 * (exact up to 200 values, normal approximation beyond); lo/hi are
 * -inf/+inf when n is too small for that level. */
typedef struct vmc_interval {
  double estimate, lo, hi;
  double confidence; /* exact coverage under symmetry, >= 1 - alpha */
  uint64_t rank;     /* c: the interval is the c-th smallest and largest Walsh average */
} vmc_interval_t;
vm_status_t vmc_signed_rank_interval(const double *d, uint32_t n, double alpha,
                                     vmc_interval_t *out);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif /* VMCLIENT_H */
