/* The virtual machine: builtin registry, machine creation, invocation, the
 * stateful API, cancellation, instrumentation, profiling and timing.
 *
 * A machine runs one verified executable. It is used by one thread at a time
 * (vm_machine_cancel() is the exception: any thread may call it). Values
 * handed out by a machine must be released before vm_machine_free().
 */
#ifndef VM_VM_H
#define VM_VM_H

#include <stdint.h>

#include "vm/allocator.h"
#include "vm/budget.h"
#include "vm/device.h"
#include "vm/executable.h"
#include "vmrpc/status.h"
#include "vm/value.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vm_machine vm_machine_t;

/* ---------------------------------------------------------------------------
 * Builtin registry: named C functions that executables call as packed
 * functions. Names are resolved once, when a machine is created.
 */

/* A packed function. args are borrowed (valid for the call only); *out is
 * none on entry and receives an owned result (leave it none for no result).
 * Misuse is an error status, never a crash. */
typedef vm_status_t (*vm_packed_fn)(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                    vm_value_t *out, void *user);

typedef struct vm_registry vm_registry_t;

vm_status_t vm_registry_create(vm_registry_t **out_reg);
void vm_registry_free(vm_registry_t *reg);
/* Registers name -> fn. ALREADY_EXISTS if the name is taken. name is copied. */
vm_status_t vm_registry_add(vm_registry_t *reg, const char *name, vm_packed_fn fn, void *user);
/* Finds a name; returns 0 and fills fn/user, or -1. */
int vm_registry_find(const vm_registry_t *reg, const char *name, vm_packed_fn *out_fn,
                     void **out_user);
/* Registers every vm.builtin.* function. */
vm_status_t vm_registry_add_builtins(vm_registry_t *reg);

/* ---------------------------------------------------------------------------
 * Machine creation
 */

typedef enum vm_exec_mode {
  VM_EXEC_BYTECODE = 0, /* decode each instruction as it runs */
  VM_EXEC_COMPILED = 1, /* translate each function once at creation, then run
                           the pre-decoded form; same results */
} vm_exec_mode_t;

const char *vm_exec_mode_name(vm_exec_mode_t mode);
int vm_exec_mode_parse(const char *name, vm_exec_mode_t *out_mode);

typedef struct vm_machine_config {
  vm_exec_mode_t mode;
  /* Devices in order; device 0 is where tensors go by default. A cpu
   * device is appended if none of the given ones is a cpu device (shapes
   * and host-side values live there). Borrowed: must outlive the machine. */
  uint32_t num_devices;
  vm_device_t *const *devices;
  /* One allocator kind per device given (NULL = pooled for all). The
   * appended cpu device gets pooled. */
  const vm_allocator_kind_t *allocators;
  /* Borrowed; must outlive the machine. */
  const vm_registry_t *registry;
  /* Max nested bytecode calls (0 = default 1024). Past it: RESOURCE_EXHAUSTED. */
  uint32_t max_call_depth;
  /* Cap on bytes reserved per device allocator (0 = none). */
  uint64_t mem_limit_bytes;
  /* Host memory the machine allocates on its program's behalf (register
   * stack, call frames, compiled records, string and shape constants, the
   * time evaluator's cache-flush buffer) is charged here before it is
   * allocated and given back when freed; a charge that does not fit fails
   * the creation or the call with RESOURCE_EXHAUSTED. NULL = uncounted.
   * Borrowed: must outlive the machine. */
  vm_budget_t *host_budget;
} vm_machine_config_t;

/* Creates a machine for exec (borrowed: must outlive the machine).
 * Resolves every packed function name in the registry: all missing names
 * are listed in one NOT_FOUND error. In compiled mode every bytecode
 * function is translated here. Tensor constants are made available on
 * device 0 (copied at creation). */
vm_status_t vm_machine_create(const vm_executable_t *exec, const vm_machine_config_t *cfg,
                              vm_machine_t **out_m);
void vm_machine_free(vm_machine_t *m);

const vm_executable_t *vm_machine_executable(const vm_machine_t *m);
vm_exec_mode_t vm_machine_mode(const vm_machine_t *m);
uint32_t vm_machine_num_devices(const vm_machine_t *m);
vm_device_t *vm_machine_device(const vm_machine_t *m, uint32_t idx);
vm_allocator_t *vm_machine_allocator(const vm_machine_t *m, uint32_t idx);
/* Index of the (possibly appended) cpu device. */
uint32_t vm_machine_cpu_device_index(const vm_machine_t *m);

/* ---------------------------------------------------------------------------
 * Invocation
 */

/* Calls a bytecode function or closure by name with borrowed args; *out
 * receives an owned result. Errors: NOT_FOUND (no such function),
 * INVALID_ARGUMENT (arity), CANCELLED, DEADLINE_EXCEEDED,
 * RESOURCE_EXHAUSTED (depth or memory), or what a builtin returned,
 * annotated with the function and pc. */
vm_status_t vm_machine_invoke(vm_machine_t *m, const char *func, const vm_value_t *args,
                              uint32_t nargs, vm_value_t *out);

/* Calls a value that is a FUNC or CLOSURE. */
vm_status_t vm_machine_call_value(vm_machine_t *m, const vm_value_t *callee,
                                  const vm_value_t *args, uint32_t nargs, vm_value_t *out);

/* Cancellation is a sticky token owned by the caller: vm_machine_cancel()
 * sets it (safe from any thread) and the running invocation or time
 * evaluation stops with CANCELLED at its next check (function entry,
 * backward jumps, between timed runs). The machine never clears it: while
 * it is set, every invocation and evaluation stops at its first check, so a
 * cancel that lands just before an invocation starts is honoured, not lost.
 * The caller resets it with vm_machine_cancel_reset() before the next
 * invocation it wants to run (not from another thread while one runs). */
void vm_machine_cancel(vm_machine_t *m);
void vm_machine_cancel_reset(vm_machine_t *m);
/* Whether the cancel token is set (safe from any thread). */
int vm_machine_cancel_requested(const vm_machine_t *m);

/* Absolute deadline on CLOCK_MONOTONIC in nanoseconds for invocations that
 * start from now on (0 = none). Past it: DEADLINE_EXCEEDED. The clock is
 * read when an invocation enters the machine and on every 1024th call or
 * backward jump inside it. */
void vm_machine_set_deadline(vm_machine_t *m, uint64_t deadline_ns);

/* For builtins that wait (e.g. on a device): CANCELLED when the running
 * invocation was cancelled, DEADLINE_EXCEEDED when it is past its deadline,
 * else OK. Reads the clock. */
vm_status_t vm_machine_check_stop(const vm_machine_t *m);

/* Monotonic clock in nanoseconds. */
uint64_t vm_now_ns(void);

/* ---------------------------------------------------------------------------
 * Stateful API (what the agent exposes over the wire)
 */

/* Sets input index of func. Tensors are copied onto device 0 when they are
 * on another device (to_device); a declared parameter type is checked
 * (INVALID_ARGUMENT naming expected and given dtype/shape). */
vm_status_t vm_machine_set_input(vm_machine_t *m, const char *func, uint32_t index,
                                 const vm_value_t *value);
vm_status_t vm_machine_set_input_by_name(vm_machine_t *m, const char *func, const char *param,
                                         const vm_value_t *value);
/* Runs func with its inputs (all must be set: FAILED_PRECONDITION names the
 * missing ones) and keeps the result in the machine. */
vm_status_t vm_machine_invoke_stateful(vm_machine_t *m, const char *func);
/* Reads the kept result of func: path walks into nested tuples (path_len 0
 * = the whole result). NOT_FOUND if func has no result yet, OUT_OF_RANGE
 * for a bad index. *out is owned. */
vm_status_t vm_machine_get_output(vm_machine_t *m, const char *func, const uint32_t *path,
                                  uint32_t path_len, vm_value_t *out);
/* Number of fields if the result (at path) is a tuple, else -1. */
vm_status_t vm_machine_get_output_arity(vm_machine_t *m, const char *func, const uint32_t *path,
                                        uint32_t path_len, int64_t *out_arity);
/* Binds args to func under saved_name: calling saved_name with no further
 * args calls func(args). Replaces an earlier binding of that name. */
vm_status_t vm_machine_save_function(vm_machine_t *m, const char *func, const char *saved_name,
                                     const vm_value_t *args, uint32_t nargs);
/* Drops the inputs and result kept for func (or for all if func is NULL). */
void vm_machine_clear_state(vm_machine_t *m, const char *func);

/* ---------------------------------------------------------------------------
 * Instrumentation and profiling
 */

typedef enum vm_instrument_phase {
  VM_INSTRUMENT_BEFORE = 0,
  VM_INSTRUMENT_AFTER = 1,
} vm_instrument_phase_t;

typedef enum vm_instrument_action {
  VM_INSTRUMENT_CONTINUE = 0,
  VM_INSTRUMENT_SKIP = 1, /* BEFORE only: do not run the call; dst is left none */
} vm_instrument_action_t;

/* Called before and after every Call instruction (packed and bytecode). */
typedef vm_instrument_action_t (*vm_instrument_fn)(vm_machine_t *m, vm_instrument_phase_t phase,
                                                   uint32_t func_idx, const char *func_name,
                                                   const vm_value_t *args, uint32_t nargs,
                                                   void *user);

/* Installs (fn != NULL) or removes the callback. */
void vm_machine_set_instrument(vm_machine_t *m, vm_instrument_fn fn, void *user);

typedef struct vm_profile_row {
  char name[128];    /* packed function name */
  uint64_t calls;
  double total_s;    /* wall seconds, device synced around each call */
  double mean_s;
  double device_s;   /* device seconds, < 0 when the device cannot tell */
  double share;      /* total_s / sum of total_s over rows */
} vm_profile_row_t;

typedef struct vm_profile {
  uint32_t num_rows; /* sorted by total_s, largest first */
  vm_profile_row_t *rows;
  double total_s;    /* whole invocation, wall */
} vm_profile_t;

/* Runs func once (with its stateful inputs, or a saved binding) and returns
 * a per-packed-function table. */
vm_status_t vm_machine_profile(vm_machine_t *m, const char *func, vm_profile_t *out);
void vm_profile_free(vm_profile_t *p);

/* ---------------------------------------------------------------------------
 * Time evaluator (TVM's parameters and semantics; see docs)
 */

typedef struct vm_time_params {
  int32_t number;                     /* calls per repeat (default 10) */
  int32_t repeat;                     /* measurements (default 1) */
  int32_t min_repeat_ms;              /* grow number until a repeat lasts this long (0) */
  int32_t limit_zero_time_iterations; /* stop growing after this many zero readings (100) */
  int32_t cooldown_interval_ms;       /* sleep between repeats (0) */
  int32_t repeats_to_cooldown;        /* sleep after every this many repeats (1) */
  uint64_t cache_flush_bytes;         /* write this many bytes before each repeat (0) */
} vm_time_params_t;

vm_time_params_t vm_time_params_default(void);

typedef struct vm_time_result {
  uint32_t repeat;
  int32_t number;       /* calls per repeat actually used (after growth) */
  double *seconds;      /* per repeat: wall seconds per call */
  double *device_seconds; /* per repeat: device seconds per call, < 0 if unknown */
  double min_s, mean_s, median_s, max_s, std_s;             /* over seconds[] */
  double device_min_s, device_mean_s, device_median_s, device_max_s,
      device_std_s; /* over device_seconds[]; < 0 if unknown */
  double warmup_s;  /* the discarded first call, wall */
} vm_time_result_t;

void vm_time_result_free(vm_time_result_t *r);

/* The hooks the evaluator runs on; tests pass a fake clock. */
typedef struct vm_time_hooks {
  vm_status_t (*run)(void *ctx);                         /* one call */
  vm_status_t (*sync)(void *ctx);                        /* wait for the device */
  vm_status_t (*device_timer_begin)(void *ctx);          /* optional */
  vm_status_t (*device_timer_end)(void *ctx, double *s); /* optional, < 0 = unknown */
  vm_status_t (*flush_cache)(void *ctx, uint64_t bytes); /* optional */
  uint64_t (*now_ns)(void *ctx);                         /* monotonic */
  void (*sleep_ms)(void *ctx, int32_t ms);
  void *ctx;
} vm_time_hooks_t;

/* The evaluator itself. Validates params (INVALID_ARGUMENT for number < 1,
 * repeat < 1, negatives, ...). One discarded warm-up call; then for each
 * repeat: flush (if asked), sync, start timers, call `number` times, sync,
 * stop; while the batch took less than min_repeat_ms, grow number to
 * max(min_repeat_ms / per-call ms + 1, number * 1.618) and retry (a zero
 * reading counts toward limit_zero_time_iterations and grows number by the
 * golden ratio only; number is capped so it cannot overflow). The grown
 * number stays for the following repeats of this call only; nothing leaks
 * into later calls. Cooldown after every repeats_to_cooldown repeats. */
vm_status_t vm_time_evaluate(const vm_time_params_t *params, const vm_time_hooks_t *hooks,
                             vm_time_result_t *out);

/* Times func on the machine (stateful inputs or a saved binding), with the
 * devices' sync and timers. */
vm_status_t vm_machine_time_evaluate(vm_machine_t *m, const char *func,
                                     const vm_time_params_t *params, vm_time_result_t *out);

#ifdef __cplusplus
}
#endif
#endif /* VM_VM_H */
