/* Project-wide status: a gRPC-style code plus a human message.
 *
 * A status is a pointer; NULL means OK. Any other value owns a heap
 * message that the receiver must release with vm_status_free() (or hand on
 * by returning it). Failures of OpenCL, CLBlast, nng and protobuf-c are
 * mapped into a status at the boundary where they are called, with the
 * original code named in the message.
 */
#ifndef VM_STATUS_H
#define VM_STATUS_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Codes and values follow the gRPC set so they can cross the wire as-is. */
#define VM_CODE_LIST(X)            \
  X(OK, 0)                         \
  X(CANCELLED, 1)                  \
  X(UNKNOWN, 2)                    \
  X(INVALID_ARGUMENT, 3)           \
  X(DEADLINE_EXCEEDED, 4)          \
  X(NOT_FOUND, 5)                  \
  X(ALREADY_EXISTS, 6)             \
  X(PERMISSION_DENIED, 7)          \
  X(RESOURCE_EXHAUSTED, 8)         \
  X(FAILED_PRECONDITION, 9)        \
  X(ABORTED, 10)                   \
  X(OUT_OF_RANGE, 11)              \
  X(UNIMPLEMENTED, 12)             \
  X(INTERNAL, 13)                  \
  X(UNAVAILABLE, 14)               \
  X(DATA_LOSS, 15)                 \
  X(UNAUTHENTICATED, 16)

typedef enum vm_code {
#define VM_CODE_ENUM_(name, value) VM_##name = value,
  VM_CODE_LIST(VM_CODE_ENUM_)
#undef VM_CODE_ENUM_
} vm_code_t;

typedef struct vm_status_obj *vm_status_t;

#define VM_STATUS_OK ((vm_status_t)0)

/* Upper-case gRPC name of a code ("INVALID_ARGUMENT"); "UNKNOWN_CODE" for
 * values outside the set. */
const char *vm_code_name(vm_code_t code);

/* Parses a name produced by vm_code_name(). Returns 0 and sets *out_code, or
 * -1 if the name is not a code. */
int vm_code_from_name(const char *name, vm_code_t *out_code);

/* Makes a status with a printf-style message. code must not be VM_OK. Never
 * returns NULL: if memory runs out, a static RESOURCE_EXHAUSTED status is
 * returned (vm_status_free() accepts it). */
vm_status_t vm_status_make(vm_code_t code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
vm_status_t vm_status_makev(vm_code_t code, const char *fmt, va_list ap);

/* Prefixes context to a failing status ("loading x.vmx: <old message>") and
 * returns it. OK passes through untouched. Takes ownership of st. */
vm_status_t vm_status_annotate(vm_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* VM_OK for NULL. */
vm_code_t vm_status_code(vm_status_t st);
/* "" for NULL. Valid until the status is freed. */
const char *vm_status_message(vm_status_t st);
/* Frees a status; NULL is a no-op. */
void vm_status_free(vm_status_t st);

/* Returns the code and frees the status: for callers that only branch. */
vm_code_t vm_status_consume_code(vm_status_t st);

/* Propagates a failing status to the caller. */
#define VM_RETURN_IF_ERROR(expr)       \
  do {                                 \
    vm_status_t vm_rie_st_ = (expr);   \
    if (vm_rie_st_) return vm_rie_st_; \
  } while (0)

#ifdef __cplusplus
}
#endif
#endif /* VM_STATUS_H */
