/* The table of protocol operations: the one place an operation is listed.
 *
 * VMP_OPS(X) expands X(CASE, field, Name, flags) once per operation:
 *   CASE   the suffix of its oneof case: VMRPC__REQUEST__OP_##CASE and
 *          VMRPC__RESPONSE__OP_##CASE (request and response share the
 *          field number);
 *   field  the oneof member of Vmrpc__Request and Vmrpc__Response (the agent
 *          names its handler vma_op_##field);
 *   Name   the operation's name in messages and logs; the request and reply
 *          types are Vmrpc__##Name##Request and Vmrpc__##Name##Response;
 *   flags  VMP_OP_* below.
 *
 * The wire decoding (vmp_request_op_msg), the agent's dispatch and pre-Hello
 * check, and the client's request building all read this table;
 * tests/agent/test_op_table.c checks it against vmrpc.proto's oneofs.
 * Adding an operation: its messages in vmrpc.proto, one row here, its
 * handler vma_op_<field> (docs/protocol.md, "Adding an operation").
 */
#ifndef VMPROTO_OPS_H
#define VMPROTO_OPS_H

#include <stdint.h>

#include "vmrpc.pb-c.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Needs a live session: refused with FAILED_PRECONDITION "no session: send
 * Hello first" on a connection that has none. Operations without it are
 * answered before Hello (and a session id they carry, if live, is kept from
 * going idle). */
#define VMP_OP_SESSION 0x1u
/* Opens the session: the client sends no session id with it. */
#define VMP_OP_OPENS 0x2u
/* May carry bytes after the envelope. Without it, any payload is refused
 * with INVALID_ARGUMENT before the handler runs. */
#define VMP_OP_PAYLOAD 0x4u
/* Never waits for a device (no run lock, no quiet gate, no VM code) and
 * holds no lock for long: a serving loop may answer it at once, even while
 * other requests wait for devices. */
#define VMP_OP_CHEAP 0x8u

#define VMP_OP_S VMP_OP_SESSION
#define VMP_OPS(X)                                                             \
  X(HELLO, hello, Hello, VMP_OP_OPENS | VMP_OP_CHEAP)                          \
  X(LIST_DEVICES, list_devices, ListDevices, VMP_OP_S | VMP_OP_CHEAP)          \
  X(UPLOAD_BEGIN, upload_begin, UploadBegin, VMP_OP_S)                         \
  X(UPLOAD_CHUNK, upload_chunk, UploadChunk, VMP_OP_S | VMP_OP_PAYLOAD)        \
  X(UPLOAD_COMMIT, upload_commit, UploadCommit, VMP_OP_S)                      \
  X(CREATE_VM, create_vm, CreateVM, VMP_OP_S)                                  \
  X(TENSOR_BEGIN, tensor_begin, TensorBegin, VMP_OP_S)                         \
  X(TENSOR_CHUNK, tensor_chunk, TensorChunk, VMP_OP_S | VMP_OP_PAYLOAD)        \
  X(SET_INPUT, set_input, SetInput, VMP_OP_S | VMP_OP_PAYLOAD)                 \
  X(INVOKE, invoke, Invoke, VMP_OP_S)                                          \
  X(GET_OUTPUT_ARITY, get_output_arity, GetOutputArity, VMP_OP_S)              \
  X(GET_OUTPUT, get_output, GetOutput, VMP_OP_S)                               \
  X(SAVE_FUNCTION, save_function, SaveFunction, VMP_OP_S | VMP_OP_PAYLOAD)     \
  X(TIME_EVALUATE, time_evaluate, TimeEvaluate, VMP_OP_S)                      \
  X(PROFILE, profile, Profile, VMP_OP_S)                                       \
  X(STATS, stats, Stats, VMP_OP_S | VMP_OP_CHEAP)                              \
  X(CANCEL, cancel, Cancel, VMP_OP_S | VMP_OP_CHEAP)                           \
  X(FREE_VM, free_vm, FreeVM, VMP_OP_S)                                        \
  X(FREE_EXECUTABLE, free_executable, FreeExecutable, VMP_OP_S | VMP_OP_CHEAP) \
  X(PING, ping, Ping, VMP_OP_CHEAP)                                            \
  X(GOODBYE, goodbye, Goodbye, VMP_OP_S | VMP_OP_CHEAP)                        \
  X(RUN, run, Run, VMP_OP_S | VMP_OP_PAYLOAD)                                  \
  X(DEVICE_STATE, device_state, DeviceState, VMP_OP_S | VMP_OP_CHEAP)

/* One row of the table. */
typedef struct vmp_op {
  Vmrpc__Request__OpCase op;
  Vmrpc__Response__OpCase reply;
  const char *field; /* oneof member, e.g. "list_devices" */
  const char *name;  /* e.g. "ListDevices" */
  uint32_t flags;    /* VMP_OP_* */
} vmp_op_t;

/* Every row, in table order, and their number. */
extern const vmp_op_t vmp_ops[];
extern const size_t vmp_num_ops;

/* The row of op, NULL for an unset or unknown case. */
const vmp_op_t *vmp_op_find(Vmrpc__Request__OpCase op);
/* Flags of op, 0 for an unknown case. */
uint32_t vmp_op_flags(Vmrpc__Request__OpCase op);
/* Name of a request's operation ("Hello", "UploadChunk", ...), "unknown"
 * for an unset or unknown case. */
const char *vmp_op_name(Vmrpc__Request__OpCase op);
/* The sub-message of rq's operation, NULL when the case is unknown or its
 * message absent. */
const void *vmp_request_op_msg(const Vmrpc__Request *rq);

#ifdef __cplusplus
}
#endif
#endif /* VMPROTO_OPS_H */
