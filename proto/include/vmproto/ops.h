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
 * The wire decoding (vmp_request_op_msg), the agent's router (where a
 * request is served under session isolation, and how long its worker
 * process may take), dispatch and pre-Hello check, and the client's
 * request building all read this table;
 * tests/agent/test_op_table.c checks it against vmrpc.proto's oneofs.
 * Adding an operation: its messages in vmrpc.proto, one row here with its
 * routing flags (VMP_OP_LOCAL, or VMP_OP_FORWARD and one bound), its
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

/* Where a request is served under session isolation (--isolate session,
 * docs/security.md): every row has exactly one of these two (checked when
 * proto/src/ops.c compiles, and by tests/agent/test_op_table.c). */
/* By the agent process itself: the connection, the session table or the
 * host's own state (agent/src/route.c). */
#define VMP_OP_LOCAL 0x10u
/* By the session's worker process, which holds its VMs: the agent relays
 * the request's bytes and the reply (agent/src/isolation/forward.c). */
#define VMP_OP_FORWARD 0x20u
/* How long the session's worker process may take to answer a forwarded
 * request before the agent kills it: every VMP_OP_FORWARD row has exactly
 * one of these three, and no other row has any. */
/* Runs no VM code: the kernel time bound (--kernel-timeout) plus grace. */
#define VMP_OP_KBOUND 0x40u
/* Its request's deadline_ms (a uint32 field of its message; 0: none) plus
 * the kernel time bound plus grace; without a deadline, as VMP_OP_UNBOUND. */
#define VMP_OP_DEADLINE 0x80u
/* As long as it needs while it progresses: Cancel, Goodbye or a closed
 * connection end it. */
#define VMP_OP_UNBOUND 0x100u
#define VMP_OP_BOUNDS (VMP_OP_KBOUND | VMP_OP_DEADLINE | VMP_OP_UNBOUND)

/* Whether flags route correctly: one place; where forwarded, a session
 * (whose worker process serves it) and one bound. */
#define VMP_OP_ROUTED(fl)                                               \
  (((fl) & (VMP_OP_LOCAL | VMP_OP_FORWARD)) == VMP_OP_LOCAL             \
       ? ((fl)&VMP_OP_BOUNDS) == 0                                      \
       : ((fl) & (VMP_OP_LOCAL | VMP_OP_FORWARD)) == VMP_OP_FORWARD &&  \
             ((fl)&VMP_OP_SESSION) != 0 && ((fl)&VMP_OP_BOUNDS) != 0 && \
             (((fl)&VMP_OP_BOUNDS) & (((fl)&VMP_OP_BOUNDS) - 1)) == 0)

#define VMP_OP_S VMP_OP_SESSION
#define VMP_OP_L VMP_OP_LOCAL
/* forwarded, and its bound */
#define VMP_OP_FK (VMP_OP_FORWARD | VMP_OP_KBOUND)
#define VMP_OP_FD (VMP_OP_FORWARD | VMP_OP_DEADLINE)
#define VMP_OP_FU (VMP_OP_FORWARD | VMP_OP_UNBOUND)
#define VMP_OPS(X)                                                                         \
  X(HELLO, hello, Hello, VMP_OP_OPENS | VMP_OP_CHEAP | VMP_OP_L)                           \
  X(LIST_DEVICES, list_devices, ListDevices, VMP_OP_S | VMP_OP_CHEAP | VMP_OP_L)           \
  X(UPLOAD_BEGIN, upload_begin, UploadBegin, VMP_OP_S | VMP_OP_FU)                         \
  X(UPLOAD_CHUNK, upload_chunk, UploadChunk, VMP_OP_S | VMP_OP_PAYLOAD | VMP_OP_FU)        \
  X(UPLOAD_COMMIT, upload_commit, UploadCommit, VMP_OP_S | VMP_OP_FU)                      \
  X(CREATE_VM, create_vm, CreateVM, VMP_OP_S | VMP_OP_FU)                                  \
  X(TENSOR_BEGIN, tensor_begin, TensorBegin, VMP_OP_S | VMP_OP_FU)                         \
  X(TENSOR_CHUNK, tensor_chunk, TensorChunk, VMP_OP_S | VMP_OP_PAYLOAD | VMP_OP_FU)        \
  X(SET_INPUT, set_input, SetInput, VMP_OP_S | VMP_OP_PAYLOAD | VMP_OP_FU)                 \
  X(INVOKE, invoke, Invoke, VMP_OP_S | VMP_OP_FD)                                          \
  X(GET_OUTPUT_ARITY, get_output_arity, GetOutputArity, VMP_OP_S | VMP_OP_FU)              \
  X(GET_OUTPUT, get_output, GetOutput, VMP_OP_S | VMP_OP_FU)                               \
  X(SAVE_FUNCTION, save_function, SaveFunction, VMP_OP_S | VMP_OP_PAYLOAD | VMP_OP_FU)     \
  X(TIME_EVALUATE, time_evaluate, TimeEvaluate, VMP_OP_S | VMP_OP_FU)                      \
  X(PROFILE, profile, Profile, VMP_OP_S | VMP_OP_FU)                                       \
  X(STATS, stats, Stats, VMP_OP_S | VMP_OP_CHEAP | VMP_OP_FK)                              \
  X(CANCEL, cancel, Cancel, VMP_OP_S | VMP_OP_CHEAP | VMP_OP_FK)                           \
  X(FREE_VM, free_vm, FreeVM, VMP_OP_S | VMP_OP_FU)                                        \
  X(FREE_EXECUTABLE, free_executable, FreeExecutable, VMP_OP_S | VMP_OP_CHEAP | VMP_OP_FK) \
  X(PING, ping, Ping, VMP_OP_CHEAP | VMP_OP_L)                                             \
  X(GOODBYE, goodbye, Goodbye, VMP_OP_S | VMP_OP_CHEAP | VMP_OP_L)                         \
  X(RUN, run, Run, VMP_OP_S | VMP_OP_PAYLOAD | VMP_OP_FD)                                  \
  X(DEVICE_STATE, device_state, DeviceState, VMP_OP_S | VMP_OP_CHEAP | VMP_OP_L)

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
