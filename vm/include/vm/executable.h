/* The vmrpc executable (.vmx): data model, builder, writer, loader+verifier,
 * text form and identity.
 *
 * Modelled on the Relax VM executable: a function table, a constant pool,
 * bytecode (instr_offset[] + instr_data[] of 64-bit words), plus OpenCL C
 * kernel modules carried by the executable and free metadata.
 * docs/executable-format.md specifies the bytes.
 *
 * Trust: an executable read from bytes is hostile until
 * vm_executable_load() has verified it. Every vm_executable_t handed out by
 * this API (loaded, assembled or built) has passed vm_executable_verify(), so
 * code that runs it may assume the rules listed there.
 */
#ifndef VM_EXECUTABLE_H
#define VM_EXECUTABLE_H

#include <stddef.h>
#include <stdint.h>

#include "vmrpc/file.h"
#include "vmrpc/dtype.h"
#include "vmrpc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Format version written by this build. A file with the same major and any
 * minor loads (unknown sections are skipped); another major is refused. */
#define VM_FORMAT_MAJOR 1
#define VM_FORMAT_MINOR 0

/* ---------------------------------------------------------------------------
 * Instructions
 *
 * An instruction is a run of 64-bit words in instr_data, starting at
 * instr_offset[pc]:
 *
 *   Call  [1, dst, func_idx, num_args, arg_0 .. arg_{n-1}]
 *   Ret   [2, result]
 *   Goto  [3, pc_offset]
 *   If    [4, cond, false_offset]
 *
 * dst, result and cond are register numbers; pc_offset and false_offset are
 * signed instruction counts relative to the instruction's own pc.
 *
 * An argument word packs a kind and a value:
 *
 *    63        56 55                                                     0
 *   +-----------+--------------------------------------------------------+
 *   |   kind    |            value (56-bit two's complement)             |
 *   +-----------+--------------------------------------------------------+
 */

/* One list drives the enum, the mnemonics, the text form and dispatch.
 * X(NAME, value, mnemonic, fixed words including the opcode) */
#define VM_OPCODE_LIST(X)   \
  X(CALL, 1, "call", 4) /* dst = func(args...) */                 \
  X(RET, 2, "ret", 2)   /* return register result to the caller */ \
  X(GOTO, 3, "goto", 2) /* pc += pc_offset */                      \
  X(IF, 4, "if", 3)     /* if reg cond is zero: pc += false_offset, else pc += 1 */

typedef enum vm_opcode {
#define VM_OPCODE_ENUM_(name, value, mnem, words) VM_OP_##name = value,
  VM_OPCODE_LIST(VM_OPCODE_ENUM_)
#undef VM_OPCODE_ENUM_
} vm_opcode_t;

/* Mnemonic of an opcode, or NULL if unknown. */
const char *vm_opcode_name(int64_t op);

typedef enum vm_arg_kind {
  VM_ARG_REG = 0,   /* register (including the special registers below) */
  VM_ARG_IMM = 1,   /* signed 56-bit immediate integer */
  VM_ARG_CONST = 2, /* index into the constant pool */
  VM_ARG_FUNC = 3,  /* index into the function table */
} vm_arg_kind_t;

#define VM_ARG_VALUE_BITS 56
#define VM_ARG_VALUE_MAX (((int64_t)1 << 55) - 1)
#define VM_ARG_VALUE_MIN (-((int64_t)1 << 55))

/* Special registers live above every real register number. */
#define VM_REG_SPECIAL_BEGIN ((int64_t)1 << 54)
#define VM_REG_VOID (VM_REG_SPECIAL_BEGIN + 0) /* discard a result / no value */
#define VM_REG_VM (VM_REG_SPECIAL_BEGIN + 1)   /* the VM itself, for builtins */

static inline int64_t vm_arg_make(vm_arg_kind_t kind, int64_t value) {
  return (int64_t)(((uint64_t)kind << VM_ARG_VALUE_BITS) |
                   ((uint64_t)value & ((UINT64_C(1) << VM_ARG_VALUE_BITS) - 1)));
}
static inline vm_arg_kind_t vm_arg_kind(int64_t word) {
  return (vm_arg_kind_t)(((uint64_t)word >> VM_ARG_VALUE_BITS) & 0xff);
}
static inline int64_t vm_arg_value(int64_t word) {
  /* sign-extend the low 56 bits */
  return (int64_t)((uint64_t)word << 8) >> 8;
}

#define VM_REG(n) vm_arg_make(VM_ARG_REG, (n))
#define VM_IMM(n) vm_arg_make(VM_ARG_IMM, (n))
#define VM_CONSTI(n) vm_arg_make(VM_ARG_CONST, (n))
#define VM_FUNCI(n) vm_arg_make(VM_ARG_FUNC, (n))

/* A decoded view of one instruction (valid while the executable lives). */
typedef struct vm_instr {
  vm_opcode_t op;
  int64_t dst;          /* CALL */
  int64_t func_idx;     /* CALL */
  uint32_t num_args;    /* CALL */
  const int64_t *args;  /* CALL: num_args argument words */
  int64_t result;       /* RET */
  int64_t pc_offset;    /* GOTO */
  int64_t cond;         /* IF */
  int64_t false_offset; /* IF */
} vm_instr_t;

/* ---------------------------------------------------------------------------
 * Data model
 */

typedef enum vm_func_kind {
  VM_FUNC_PACKED = 0,   /* resolved by name in the builtin registry */
  VM_FUNC_BYTECODE = 1, /* instructions [start_instr, end_instr) */
} vm_func_kind_t;

/* A parameter of a bytecode function. The type annotation is optional; when
 * present, set_input checks tensors against it. */
typedef struct vm_param {
  char *name;       /* NUL-terminated, non-empty */
  uint8_t has_type; /* 0: any value */
  vm_dtype_t dtype; /* if has_type */
  int32_t ndim;     /* if has_type: -1 = any rank, else number of dims */
  int64_t *shape;   /* if has_type and ndim > 0: dims, -1 = any extent */
} vm_param_t;

typedef struct vm_function {
  vm_func_kind_t kind;
  char *name;           /* unique among functions of its kind */
  uint64_t start_instr; /* BYTECODE: first pc */
  uint64_t end_instr;   /* BYTECODE: one past the last pc */
  uint32_t num_args;    /* BYTECODE: parameters, held in registers 0..num_args-1 */
  uint32_t num_regs;    /* BYTECODE: register file size (>= num_args) */
  vm_param_t *params;   /* BYTECODE: num_args entries */
} vm_function_t;

typedef enum vm_const_kind {
  VM_CONST_INT = 0,
  VM_CONST_FLOAT = 1,
  VM_CONST_STRING = 2,
  VM_CONST_DTYPE = 3,
  VM_CONST_SHAPE = 4,
  VM_CONST_TENSOR = 5,
} vm_const_kind_t;

/* Tensor data in the file is aligned to this many bytes, and so is the
 * in-memory copy, so weights can be used in place. */
#define VM_TENSOR_ALIGN 64

typedef struct vm_constant {
  vm_const_kind_t kind;
  char *scope; /* memory scope ("global", "texture", ...); "" = default */
  union {
    int64_t i;        /* INT */
    double f;         /* FLOAT */
    vm_dtype_t dtype; /* DTYPE */
    struct {          /* STRING: len bytes, NUL-terminated in memory */
      char *data;
      uint32_t len;
    } str;
    struct { /* SHAPE */
      uint32_t ndim;
      int64_t *dims;
    } shape;
    struct { /* TENSOR: dense, C order */
      vm_dtype_t dtype;
      uint32_t ndim;
      int64_t *shape;
      const void *data; /* VM_TENSOR_ALIGN-aligned; nbytes bytes */
      uint64_t nbytes;  /* == numel(shape) * dtype bytes */
    } tensor;
  } u;
} vm_constant_t;

/* An OpenCL C module carried by the executable (launched by cl.kernel). */
typedef struct vm_kernel_module {
  char *name;    /* unique, non-empty */
  char *source;  /* OpenCL C source */
  char *options; /* build options, may be "" */
} vm_kernel_module_t;

typedef struct vm_meta_entry {
  char *key; /* unique, non-empty */
  char *value;
} vm_meta_entry_t;

typedef struct vm_executable {
  uint16_t version_major;
  uint16_t version_minor;

  uint32_t num_functions;
  vm_function_t *functions;

  uint32_t num_constants;
  vm_constant_t *constants;

  uint64_t num_instrs;
  uint64_t *instr_offset; /* num_instrs entries, index into instr_data */
  uint64_t num_words;
  int64_t *instr_data;

  uint32_t num_kernels;
  vm_kernel_module_t *kernels;

  uint32_t num_meta;
  vm_meta_entry_t *meta;

  /* Owned storage that tensor constants point into (private). */
  void *blob_;
  size_t blob_size_;
} vm_executable_t;

/* ---------------------------------------------------------------------------
 * Limits. Every count and size read from bytes is checked against these
 * before anything is allocated. docs/executable-format.md lists the
 * defaults; the agent may lower them.
 */
typedef struct vm_limits {
  uint64_t max_file_bytes;     /* default 4 GiB */
  uint32_t max_sections;       /* default 64 */
  uint32_t max_functions;      /* default 65536 */
  uint32_t max_constants;      /* default 1 << 20 */
  uint64_t max_instrs;         /* default 1 << 24 */
  uint64_t max_words;          /* default 1 << 26 */
  uint32_t max_registers;      /* per function, default 65536 */
  uint32_t max_call_args;      /* default 1024 */
  uint32_t max_ndim;           /* default 16 */
  uint32_t max_string_bytes;   /* names, strings, options: default 1 MiB */
  uint32_t max_kernel_source;  /* default 16 MiB */
  uint32_t max_kernels;        /* default 4096 */
  uint32_t max_meta;           /* default 4096 */
  uint64_t max_tensor_bytes;   /* one tensor constant, default 2 GiB */
} vm_limits_t;

/* The documented defaults. */
vm_limits_t vm_limits_default(void);

/* ---------------------------------------------------------------------------
 * Lifetime, verification, bytes
 */

/* Frees an executable and everything it owns. NULL is a no-op. */
void vm_executable_free(vm_executable_t *exec);

/* Checks every rule of the format on an in-memory executable:
 * - counts within limits; every name non-empty, NUL-free, within limits;
 *   function names unique per kind, kernel names unique, meta keys unique;
 * - bytecode functions: start < end <= num_instrs; ranges of different
 *   functions do not overlap; num_args <= num_regs <= max_registers;
 *   params present for each argument with valid types;
 * - code: instr_offset strictly increasing, each instruction's words inside
 *   instr_data and ending where the next begins (the last at num_words);
 *   known opcode; CALL num_args <= max_call_args; register operands below the
 *   function's num_regs or special (VOID as CALL dst only; VM as a CALL arg
 *   only); argument kinds known; constant and function indices in range;
 *   GOTO/IF targets inside the same function; every function's last
 *   instruction is RET or GOTO (no falling off the end);
 * - constants: known kind; valid dtypes; dims >= 0 and ndim <= max_ndim;
 *   tensor nbytes == numel * dtype bytes, data aligned to VM_TENSOR_ALIGN.
 * Returns INVALID_ARGUMENT naming the rule and the place ("function 'main'
 * pc 7: register 12 >= register file size 8"). limits NULL = defaults. */
vm_status_t vm_executable_verify(const vm_executable_t *exec, const vm_limits_t *limits);

/* Serialises to the .vmx bytes (little-endian, field by field, tensor data
 * 64-byte aligned). Deterministic: the same executable always gives the same
 * bytes. *out_data is malloc'ed, the caller frees it. */
vm_status_t vm_executable_write(const vm_executable_t *exec, uint8_t **out_data,
                                size_t *out_size);

/* Parses and verifies .vmx bytes. Copies what it keeps; data may be freed
 * after the call. Errors: INVALID_ARGUMENT (malformed, bad magic, verifier
 * rule), FAILED_PRECONDITION (newer major version, naming both),
 * RESOURCE_EXHAUSTED (a limit, or host memory). limits NULL = defaults. */
vm_status_t vm_executable_load(const void *data, size_t size, const vm_limits_t *limits,
                               vm_executable_t **out_exec);

/* File helpers: read whole file (capped by limits->max_file_bytes) and load;
 * write atomically (temp file + rename). NOT_FOUND / UNAVAILABLE for I/O. */
vm_status_t vm_executable_load_file(const char *path, const vm_limits_t *limits,
                                    vm_executable_t **out_exec);
vm_status_t vm_executable_write_file(const vm_executable_t *exec, const char *path);

/* An executable's identity is the SHA-256 of its file bytes (vm_sha256,
 * vmrpc/file.h). */

/* Decodes instruction pc of a verified executable. */
vm_instr_t vm_executable_instr(const vm_executable_t *exec, uint64_t pc);

/* Index of the function with this name and kind, or -1. */
int64_t vm_executable_find_function(const vm_executable_t *exec, const char *name,
                                    vm_func_kind_t kind);

/* ---------------------------------------------------------------------------
 * Text form (.vmasm). vm_executable_disasm() and vm_executable_asm() round
 * trip exactly: asm(disasm(x)) == x and disasm(asm(t)) == t for any t that
 * disasm produced.
 */

/* Writes the text form. *out_text is malloc'ed and NUL-terminated. */
vm_status_t vm_executable_disasm(const vm_executable_t *exec, char **out_text);

/* Parses the text form and verifies the result. Errors are INVALID_ARGUMENT
 * with "line L: ..." in the message. */
vm_status_t vm_executable_asm(const char *text, size_t len, const vm_limits_t *limits,
                              vm_executable_t **out_exec);

/* A human summary: counts per section, sizes, and each function with kind,
 * arity, registers and instruction count. file_size 0 = unknown. */
vm_status_t vm_executable_stats(const vm_executable_t *exec, size_t file_size,
                                char **out_text);

/* ---------------------------------------------------------------------------
 * Builder: how a compiler or a test produces an executable.
 *
 *   vm_builder_t *b; vm_builder_create(&b);
 *   uint32_t alloc; vm_builder_declare_packed(b, "vm.builtin.alloc_storage", &alloc);
 *   const char *params[] = {"x"};
 *   uint32_t main; vm_builder_declare_function(b, "main", 1, params, &main);
 *   vm_builder_begin_function(b, main);
 *   ... vm_builder_emit_call(b, VM_REG(1), alloc, 2, args) ...
 *   vm_builder_emit_ret(b, 1);
 *   vm_builder_end_function(b, 0);        // 0: register count inferred
 *   vm_builder_finish(b, &exec);          // verifies; b is still to be freed
 *
 * Errors are sticky: after the first failing call every later call returns
 * FAILED_PRECONDITION naming the first error, so a caller may check only
 * vm_builder_finish().
 */
typedef struct vm_builder vm_builder_t;
typedef uint32_t vm_label_t;

vm_status_t vm_builder_create(vm_builder_t **out_builder);
void vm_builder_free(vm_builder_t *b);

/* Declares (or finds) a packed function by name; returns its index. */
vm_status_t vm_builder_declare_packed(vm_builder_t *b, const char *name, uint32_t *out_idx);

/* Declares a bytecode function so calls can refer to it before its body is
 * emitted. param_names may be NULL (names become "arg0", "arg1", ...). */
vm_status_t vm_builder_declare_function(vm_builder_t *b, const char *name, uint32_t num_args,
                                        const char *const *param_names, uint32_t *out_idx);

/* Annotates parameter param of function func with a tensor type (ndim -1 =
 * any rank; dims entries -1 = any extent). */
vm_status_t vm_builder_set_param_type(vm_builder_t *b, uint32_t func, uint32_t param,
                                      vm_dtype_t dtype, int32_t ndim, const int64_t *dims);

/* Starts emitting the body of a declared bytecode function. Bodies are
 * emitted one at a time. */
vm_status_t vm_builder_begin_function(vm_builder_t *b, uint32_t func);

/* Labels for jumps, forward or backward, within the current function. */
vm_label_t vm_builder_new_label(vm_builder_t *b);
vm_status_t vm_builder_bind_label(vm_builder_t *b, vm_label_t label);

/* dst is a register number or VM_REG_VOID; args are argument words
 * (VM_REG(n), VM_IMM(v), VM_CONSTI(i), VM_FUNCI(i)). */
vm_status_t vm_builder_emit_call(vm_builder_t *b, int64_t dst, uint32_t func_idx,
                                 uint32_t num_args, const int64_t *args);
vm_status_t vm_builder_emit_ret(vm_builder_t *b, int64_t result_reg);
vm_status_t vm_builder_emit_goto(vm_builder_t *b, vm_label_t target);
vm_status_t vm_builder_emit_if(vm_builder_t *b, int64_t cond_reg, vm_label_t false_target);

/* Ends the current function. num_regs 0 = one more than the highest
 * register used (and at least num_args); otherwise must not be smaller. */
vm_status_t vm_builder_end_function(vm_builder_t *b, uint32_t num_regs);

/* Constant pool. Each returns the new constant's index. */
vm_status_t vm_builder_const_int(vm_builder_t *b, int64_t v, uint32_t *out_idx);
vm_status_t vm_builder_const_float(vm_builder_t *b, double v, uint32_t *out_idx);
vm_status_t vm_builder_const_string(vm_builder_t *b, const char *s, size_t len,
                                    uint32_t *out_idx);
vm_status_t vm_builder_const_dtype(vm_builder_t *b, vm_dtype_t dt, uint32_t *out_idx);
vm_status_t vm_builder_const_shape(vm_builder_t *b, uint32_t ndim, const int64_t *dims,
                                   uint32_t *out_idx);
/* Copies data (nbytes must equal numel * dtype bytes). scope NULL = "". */
vm_status_t vm_builder_const_tensor(vm_builder_t *b, vm_dtype_t dt, uint32_t ndim,
                                    const int64_t *shape, const void *data, uint64_t nbytes,
                                    const char *scope, uint32_t *out_idx);
/* Sets the memory scope of any constant. */
vm_status_t vm_builder_set_const_scope(vm_builder_t *b, uint32_t idx, const char *scope);

vm_status_t vm_builder_add_kernel(vm_builder_t *b, const char *name, const char *source,
                                  const char *options);
vm_status_t vm_builder_add_meta(vm_builder_t *b, const char *key, const char *value);

/* Verifies and returns a new executable (the builder keeps its own state
 * and must still be freed). */
vm_status_t vm_builder_finish(vm_builder_t *b, vm_executable_t **out_exec);

#ifdef __cplusplus
}
#endif
#endif /* VM_EXECUTABLE_H */
