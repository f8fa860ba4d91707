/* The operation table (vmproto/ops.h) as data. */
#include "vmproto/ops.h"

#include <stddef.h>

#define VMP_OP_ROW(C, f, N, fl) {VMRPC__REQUEST__OP_##C, VMRPC__RESPONSE__OP_##C, #f, #N, (fl)},
const vmp_op_t vmp_ops[] = {VMP_OPS(VMP_OP_ROW)};
#undef VMP_OP_ROW
/* Every row says where it is served under session isolation, and how long
 * a worker process may take when it is forwarded (ops.h). */
#define VMP_OP_ROUTE_CHECK(C, f, N, fl)                           \
  _Static_assert(VMP_OP_ROUTED(fl), #N                            \
                 ": give it VMP_OP_LOCAL, or VMP_OP_FORWARD and " \
                 "one of VMP_OP_KBOUND, VMP_OP_DEADLINE, VMP_OP_UNBOUND");
VMP_OPS(VMP_OP_ROUTE_CHECK)
#undef VMP_OP_ROUTE_CHECK
const size_t vmp_num_ops = sizeof(vmp_ops) / sizeof(vmp_ops[0]);

const vmp_op_t *vmp_op_find(Vmrpc__Request__OpCase op) {
  for (size_t i = 0; i < vmp_num_ops; i++)
    if (vmp_ops[i].op == op) return &vmp_ops[i];
  return NULL;
}

uint32_t vmp_op_flags(Vmrpc__Request__OpCase op) {
  const vmp_op_t *o = vmp_op_find(op);
  return o ? o->flags : 0;
}

const char *vmp_op_name(Vmrpc__Request__OpCase op) {
  const vmp_op_t *o = vmp_op_find(op);
  return o ? o->name : "unknown";
}

const void *vmp_request_op_msg(const Vmrpc__Request *rq) {
  switch (rq->op_case) {
#define VMP_OP_MSG(C, f, N, fl) \
  case VMRPC__REQUEST__OP_##C: return rq->f;
    VMP_OPS(VMP_OP_MSG)
#undef VMP_OP_MSG
    default: return NULL;
  }
}
