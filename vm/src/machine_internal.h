/* Private layout of a machine: resolved functions, materialised constants,
 * the frame and register stacks of the interpreter, the pre-decoded code of
 * compiled mode and the state kept by the stateful API.
 *
 * Only vm/src files include this. The interpreter (interp.c) may rely on
 * everything vm_executable_verify() checked and only asserts it.
 */
#ifndef VMI_MACHINE_INTERNAL_H
#define VMI_MACHINE_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "vm/vm.h"

#if defined(__GNUC__)
#define VMI_LIKELY(x) __builtin_expect(!!(x), 1)
#define VMI_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define VMI_LIKELY(x) (x)
#define VMI_UNLIKELY(x) (x)
#endif

#define VMI_DEFAULT_MAX_CALL_DEPTH 1024u

/* A function of the executable as the machine runs it. */
typedef struct vmi_func {
  vm_packed_fn fn; /* PACKED: resolved in the registry at creation */
  void *user;      /* PACKED: registry user pointer */
  uint32_t kind;   /* vm_func_kind_t */
  uint32_t idx;    /* index in the function table */
  uint32_t num_args;
  uint32_t num_regs;
  uint64_t start; /* BYTECODE: first pc */
  const vm_function_t *def;
} vmi_func_t;

/* Operations the dispatch loop switches on. RET, GOTO and IF keep the
 * values of the bytecode opcodes so that bytecode mode decodes them by
 * reading the opcode word; CALL splits by callee kind (0 packed, 1
 * bytecode), which bytecode mode decodes from the function table and
 * compiled mode stores in the record. */
typedef enum vmi_op {
  VMI_OP_CALL_PACKED = 0,
  VMI_OP_CALL_BYTECODE = 1,
  VMI_OP_RET = VM_OP_RET,
  VMI_OP_GOTO = VM_OP_GOTO,
  VMI_OP_IF = VM_OP_IF,
} vmi_op_t;

/* A pre-resolved argument of compiled mode: a pointer to an immutable
 * value (constant, immediate, function, %vm) with the low bit clear, or
 * (register << 1) | 1. One word, decoded with a test and a load. */
typedef uintptr_t vmi_carg_t;

/* Compiled mode's pre-decoded instruction: 32 bytes, indexed by the same
 * absolute pc as the bytecode, so frames, jumps and error messages are the
 * same in both modes. */
#define VMI_REG_NONE UINT32_MAX /* void dst in a record */
typedef struct vmi_crec {
  uint8_t op;       /* vmi_op_t */
  uint8_t backward; /* GOTO / IF: target <= own pc (cancellation point) */
  uint16_t pad_;
  uint32_t nargs; /* CALL */
  uint32_t a;     /* CALL: dst (VMI_REG_NONE = void); RET: result; IF: cond */
  union {
    const vmi_func_t *callee; /* CALL */
    uint64_t target;          /* GOTO: target pc; IF: pc when cond is zero */
  } u;
  const vmi_carg_t *args; /* CALL: nargs entries */
} vmi_crec_t;

/* A chunk of the register stack. Chunks never move, so a frame's register
 * pointer stays valid however deep later calls go. */
typedef struct vmi_regchunk {
  struct vmi_regchunk *prev, *next;
  size_t cap;  /* values */
  size_t used; /* values in use */
  vm_value_t vals[];
} vmi_regchunk_t;

/* Where the register stack was before a push; restored by the pop. */
typedef struct vmi_regmark {
  vmi_regchunk_t *chunk;
  size_t used;
} vmi_regmark_t;

/* One active bytecode call. */
typedef struct vmi_frame {
  vm_value_t *regs;       /* num_regs registers, owned values */
  const vmi_func_t *func; /* the function running in this frame */
  uint64_t pc;            /* while a callee runs: pc of the Call */
  uint32_t ret_dst;       /* caller register for the result, VMI_REG_NONE = void */
  uint8_t instrumented;   /* BEFORE ran for this call: run AFTER on return */
  uint8_t entry;          /* bottom frame of one run of the loop */
  vmi_regmark_t mark;
} vmi_frame_t;

/* Inputs and result that the stateful API keeps per bytecode function. */
typedef struct vmi_fstate {
  vm_value_t *inputs; /* num_args, owned; allocated on first set_input */
  uint8_t *input_set; /* num_args flags */
  vm_value_t result;  /* owned when has_result */
  uint8_t has_result;
} vmi_fstate_t;

/* A binding made by save_function. */
typedef struct vmi_saved {
  char *name;
  vm_value_t closure; /* owned CLOSURE */
  vm_value_t result;  /* owned when has_result (invoke_stateful of the name) */
  uint8_t has_result;
} vmi_saved_t;

struct vm_machine {
  const vm_executable_t *exec;
  vm_exec_mode_t mode;
  const vm_registry_t *registry;
  uint32_t max_call_depth;
  vm_budget_t *budget;  /* host memory (cfg.host_budget), may be NULL */
  uint64_t const_bytes; /* charged for string and shape constants */
  uint64_t compiled_bytes; /* charged for the compiled records */
  vm_status_t regs_error; /* why the last register push failed, owned */

  /* Devices: the configured ones, then possibly an appended cpu device
   * (owned_cpu, destroyed with the machine). One allocator each, owned. */
  uint32_t num_devices;
  vm_device_t **devices;
  vm_allocator_t **allocators;
  vm_device_t *owned_cpu;
  uint32_t cpu_index;

  vmi_func_t *funcs;     /* num_functions */
  vm_value_t *consts;    /* num_constants, owned */
  vm_value_t *func_vals; /* num_functions FUNC values, for compiled args */
  vm_value_t vm_val;     /* OPAQUE pointer to this machine (%vm) */

  /* Compiled mode: one record per instruction (NULL in bytecode mode). */
  vmi_crec_t *crecs;
  vmi_carg_t *cargs; /* all argument words of all records */
  vm_value_t *cimms; /* immediates referred to by cargs */

  /* Interpreter stacks. */
  vmi_frame_t *frames;
  uint32_t depth; /* frames in use */
  uint32_t frames_cap;
  vmi_regchunk_t *chunk; /* current register chunk (NULL until first push) */
  uint32_t nesting;      /* runs of the loop in progress (re-entry via builtins) */

  /* Cancellation and deadline. */
  atomic_int cancel_requested; /* sticky: set by cancel, cleared only by cancel_reset */
  uint64_t deadline_ns;        /* for invocations started from now on */
  uint64_t active_deadline_ns; /* of the invocation running now */
  uint32_t calls_since_clock;   /* bytecode calls; the deadline is read every 1024th */

  /* Instrumentation. */
  vm_instrument_fn instrument_fn;
  void *instrument_user;

  /* Stateful API. */
  vmi_fstate_t *fstate; /* num_functions */
  vmi_saved_t *saved;
  uint32_t num_saved;
  uint32_t cap_saved;
};

/* ---- interp.c ---- */

/* Translates every bytecode function into records (compiled mode). */
vm_status_t vmi_compile(vm_machine_t *m);
void vmi_compiled_free(vm_machine_t *m);
/* Frees the register chunks and frames (none may be in use). */
void vmi_stacks_free(vm_machine_t *m);

/* Calls function func_idx (packed or bytecode) with borrowed args; *out
 * receives an owned result (none on error). This is the one entry into the
 * interpreter: it handles nesting, cancellation and the deadline. */
vm_status_t vmi_call_function(vm_machine_t *m, uint32_t func_idx, const vm_value_t *args,
                              uint32_t nargs, vm_value_t *out);

/* ---- stateful.c ---- */

/* Frees all stateful data. */
void vmi_state_free(vm_machine_t *m);

#endif
