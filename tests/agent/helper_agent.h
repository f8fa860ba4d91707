/* Request builders for the agent suites (test_agent_*.c) on top of
 * helper_wire: each sends one operation and returns the reply's status code
 * (0 OK, -1 transport failure), keeping the reply in *out for the caller to
 * inspect and free (hw_reply_free). */
#ifndef VMRPC_TEST_HELPER_AGENT_H
#define VMRPC_TEST_HELPER_AGENT_H

#include <stddef.h>
#include <stdint.h>

#include "helper_wire.h"
#include "vmrpc/vmclient.h"

/* The test program (text form), built by ha_test_exec():
 *   main(x: float32[?]) -> (x, shape_of(x))
 *   ident(x) -> x
 *   pair(a, b) -> (a, b)
 *   spin() -> loops forever (for Cancel and deadlines) */
extern const char ha_test_program[];

/* Assembles + serialises a program; returns 0 or -1 (message on stderr).
 * *out is malloc'ed. */
int ha_exec_bytes(const char *text, uint8_t **out, size_t *out_len);
/* The example MLP (examples/, weights from seed) serialised the same way. */
int ha_mlp_bytes(uint64_t seed, uint8_t **out, size_t *out_len);
/* Runs that MLP (mlp: ha_mlp_bytes of seed 11) as a new client of the agent
 * at url on device, checking its output against the host reference: the
 * first failing status (owned), OK when it is served correctly. */
vm_status_t ha_mlp_check(const char *url, const char *device, const uint8_t *mlp, size_t len);

/* UploadBegin + chunks of `chunk` bytes + UploadCommit. *out_present tells
 * whether Begin was a store hit. */
int ha_upload(hw_conn_t *c, const uint8_t *data, size_t len, size_t chunk, uint64_t *out_exec,
              int *out_present, hw_reply_t *out);
int ha_upload_begin(hw_conn_t *c, const uint8_t sha[32], uint64_t size, hw_reply_t *out);
int ha_upload_chunk(hw_conn_t *c, uint64_t upload_id, uint64_t offset, const void *data, size_t len,
                    hw_reply_t *out);
int ha_upload_commit(hw_conn_t *c, uint64_t upload_id, hw_reply_t *out);

/* CreateVM on one device (selector NULL = no device list). */
int ha_create_vm(hw_conn_t *c, uint64_t exec_id, const char *selector, const char *allocator,
                 const char *mode, uint64_t *out_vm, hw_reply_t *out);

/* SetInput of an inline tensor (index >= 0) or by name (index < 0). */
int ha_set_input_tensor(hw_conn_t *c, uint64_t vm, const char *func, int index, const char *name,
                        const char *dtype, const int64_t *shape, size_t ndim, uint64_t nbytes,
                        const void *data, size_t data_len, hw_reply_t *out);
int ha_set_input_ref(hw_conn_t *c, uint64_t vm, const char *func, int index, uint64_t transfer,
                     hw_reply_t *out);
int ha_set_input_int(hw_conn_t *c, uint64_t vm, const char *func, int index, int64_t v,
                     hw_reply_t *out);

int ha_tensor_begin(hw_conn_t *c, uint64_t vm, const char *dtype, const int64_t *shape, size_t ndim,
                    uint64_t nbytes, uint64_t *out_transfer, hw_reply_t *out);
int ha_tensor_chunk(hw_conn_t *c, uint64_t transfer, uint64_t offset, const void *data, size_t len,
                    hw_reply_t *out);

int ha_invoke(hw_conn_t *c, uint64_t vm, const char *func, uint32_t deadline_ms, hw_reply_t *out);
int ha_get_output(hw_conn_t *c, uint64_t vm, const char *func, const uint32_t *path,
                  size_t path_len, uint64_t offset, uint64_t max_bytes, hw_reply_t *out);
int ha_get_arity(hw_conn_t *c, uint64_t vm, const char *func, const uint32_t *path, size_t path_len,
                 int64_t *out_arity, hw_reply_t *out);
/* Fetches a whole tensor output chunk by chunk into a malloc'ed buffer. */
int ha_fetch_output(hw_conn_t *c, uint64_t vm, const char *func, const uint32_t *path,
                    size_t path_len, uint8_t **out_data, size_t *out_len, int *out_chunks);

/* Operations that carry only an id: FreeVM, FreeExecutable, Cancel, Stats,
 * Ping, Goodbye, ListDevices. */
int ha_free_vm(hw_conn_t *c, uint64_t vm, hw_reply_t *out);
int ha_free_exec(hw_conn_t *c, uint64_t exec, hw_reply_t *out);
int ha_cancel(hw_conn_t *c, int ctx, uint64_t vm, hw_reply_t *out);
int ha_stats(hw_conn_t *c, hw_reply_t *out);
int ha_ping(hw_conn_t *c, hw_reply_t *out);
int ha_goodbye(hw_conn_t *c, hw_reply_t *out);
int ha_list_devices(hw_conn_t *c, hw_reply_t *out);

/* Ping on a fresh connection: 0 when the agent answers OK. */
int ha_ping_fresh(const char *url);

/* ------------------------------------------------------------ cmocka
 * For the suites, which include <cmocka.h> before this header. */

/* Fails unless expr gives status code want, quoting reply r's message. */
#define CODE_IS(expr, want, r)                                                                \
  do {                                                                                        \
    int ci_code_ = (expr);                                                                    \
    if (ci_code_ != (want))                                                                   \
      fail_msg("%s: code %d (%s), expected %d", #expr, ci_code_, hw_message(r), (int)(want)); \
  } while (0)

/* CODE_IS, then frees reply r. */
#define CODE_IS_FREE(expr, want, r) \
  do {                              \
    CODE_IS(expr, want, r);         \
    hw_reply_free(r);               \
  } while (0)

/* hw_call of rq (+ payload), which must get a reply, with code want. */
#define CALL_CODE_IS(c, rq, payload, len, want, r)        \
  do {                                                    \
    assert_int_equal(hw_call(c, rq, payload, len, r), 0); \
    CODE_IS(hw_code(r), want, r);                         \
  } while (0)

/* Opens c to url and says Hello: both must succeed. */
void ha_open_session(hw_conn_t *c, const char *url);
/* ha_upload(), which must succeed; returns the executable id. */
uint64_t ha_upload_ok(hw_conn_t *c, const uint8_t *data, size_t len, size_t chunk);
/* ha_create_vm(), which must succeed; returns the vm id. */
uint64_t ha_create_vm_ok(hw_conn_t *c, uint64_t exec_id, const char *selector,
                         const char *allocator, const char *mode);
/* Sends an Invoke of func on context ctx without waiting for its reply;
 * *out_id (may be NULL) receives the request id. */
void ha_send_invoke(hw_conn_t *c, int ctx, uint64_t vm, const char *func, uint64_t *out_id);

/* A suite's fixtures: a program (text form, assembled) and the example MLP
 * (ha_mlp_bytes of seed 11), built once by ha_fixtures_load (0, or -1 with
 * the reason on stderr) for cmocka's group setup. */
typedef struct ha_fixtures {
  uint8_t *prog, *mlp;
  size_t prog_len, mlp_len;
} ha_fixtures_t;
int ha_fixtures_load(ha_fixtures_t *f, const char *prog_text);
void ha_fixtures_free(ha_fixtures_t *f);

/* Starts vmagent with base then extra flags (each NULL-terminated, extra may
 * be NULL); skips the test when it does not start (no OpenCL device for an
 * opencl:N in base). */
struct agent_proc;
void ha_start_agent_or_skip(struct agent_proc *p, const char *const *base,
                            const char *const *extra);

/* ------------------------------------------------------------ libvmclient */

/* Monotonic clock in seconds. */
double ha_now_s(void);
/* Whether the agent behind c lists the device selector sel. */
int ha_has_device(vmc_conn_t *c, const char *sel);
/* Skips the test (closing c) unless the agent has device; else uploads
 * prog and creates a VM on device with allocator and mode (may be NULL). */
vmc_vm_t ha_vm_on_device(vmc_conn_t *c, const uint8_t *prog, size_t size, const char *device,
                         const char *allocator, const char *mode);

/* An endless invoke of "spin", run on a thread by ha_spin_main(). */
typedef struct ha_spin_job {
  vmc_conn_t *conn;
  vmc_vm_t vm;
  vm_code_t code;
  char msg[512];
  volatile int done;
  double took;
} ha_spin_job_t;
void *ha_spin_main(void *arg);

#endif
