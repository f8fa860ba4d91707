/* What the files of libvmclient's operations share (hidden, like all of
 * vmc_internal.h). The operations are split by what they move:
 *   ops.c         ping, VMs, invoke and the long operations, timing,
 *                 profile, stats; the helpers below
 *   ops_upload.c  executable upload; the chunk pipeline of transfers
 *   ops_tensor.c  values and tensors in and out, SaveFunction
 *   ops_run.c     the fused Run */
#ifndef VMC_OPS_INTERNAL_H
#define VMC_OPS_INTERNAL_H

#include <stdint.h>

#include "vmc_internal.h"

#define OP(name) VMRPC__REQUEST__OP_##name
#define ROP(name) VMRPC__RESPONSE__OP_##name

/* Argument checks every operation starts with. */
VMCI_API vm_status_t vmci_need_func(const char *func);
VMCI_API vm_status_t vmci_need_conn(const vmc_conn_t *c);

/* Formats "Op func[path]" for messages. */
VMCI_API void vmci_path_str(char *buf, size_t cap, const char *op, const char *func,
                            const uint32_t *path, uint32_t path_len);

/* The reply case of req's operation (vmproto/ops.h). */
VMCI_API Vmrpc__Response__OpCase vmci_reply_of(const Vmrpc__Request *req);

/* One request with the connection's request timeout and no payload. */
VMCI_API vm_status_t vmci_call_plain(vmc_conn_t *c, Vmrpc__Request *req, const char *what,
                                     vmci_reply_t *out);
/* One request whose reply carries nothing but success. */
VMCI_API vm_status_t vmci_call_ack(vmc_conn_t *c, Vmrpc__Request *req, const void *payload,
                                   size_t plen, const char *what);

/* Bytes of the chunk at off of a total-byte transfer in chunks of cb. */
VMCI_API uint64_t vmci_chunk_len(uint64_t total, uint64_t off, uint64_t cb);

/* A pipeline's done callback for replies that carry nothing. */
VMCI_API vm_status_t vmci_ignore_reply(void *ctx, uint64_t idx, vmci_reply_t *r);
/* Sends size bytes of data as the chunks of upload (tensor 0) or tensor
 * transfer (tensor 1) id. */
VMCI_API vm_status_t vmci_send_chunks(vmc_conn_t *c, int tensor, uint64_t id, const void *data,
                                      uint64_t size, vmc_progress_fn progress, void *user);
/* vmc_upload_memory() with the hash already in res->sha256. */
VMCI_API vm_status_t vmci_upload_hashed(vmc_conn_t *c, const void *data, size_t size,
                                        vmc_progress_fn progress, void *user, vmc_exec_t *out_exec,
                                        vmc_upload_result_t *res);

/* The wire form of a VM's device list (at most 64). */
VMCI_API vm_status_t vmci_device_specs(const vmc_device_spec_t *devices, uint32_t num_devices,
                                       Vmrpc__DeviceSpec specs[64],
                                       Vmrpc__DeviceSpec *spec_ptrs[64]);

/* How long to wait for a long operation's reply. */
VMCI_API int32_t vmci_long_wait_ms(const vmc_conn_t *c, uint32_t deadline_ms);
/* A long operation on vm, cancelled there when its wait runs out. */
VMCI_API vm_status_t vmci_call_vm_long(vmc_conn_t *c, vmc_vm_t vm, Vmrpc__Request *req,
                                       uint32_t deadline_ms, const char *what, vmci_reply_t *out);

/* Storage a wire Value points into. */
typedef struct vmci_wire_value {
  Vmrpc__Value v;
  Vmrpc__TensorMeta meta;
  Vmrpc__ShapeValue shape;
  int64_t dims[VMC_MAX_NDIM];
  char dtype[24];
} vmci_wire_value_t;

/* Fills w from a scalar or shape value. Tensors are handled by callers. */
VMCI_API vm_status_t vmci_scalar_to_wire(const vmc_value_t *v, vmci_wire_value_t *w);
/* Decodes a value of a reply into *out (zeroed first): scalars whole,
 * a tensor's kind and meta only (data NULL, nbytes checked). */
VMCI_API vm_status_t vmci_value_from_wire(const Vmrpc__Value *wv, const char *what,
                                          vmc_value_t *out);

/* A tensor fetched in GetOutput chunks into dst (nbytes). */
typedef struct vmci_tout_ctx {
  vmc_conn_t *c;
  vmc_vm_t vm;
  const char *func;
  const uint32_t *path;
  uint32_t path_len;
  uint8_t *dst;
  uint64_t nbytes;
  const char *what;
} vmci_tout_ctx_t;

/* Makes *req the GetOutput request (in *go) of up to one chunk at offset. */
VMCI_API void vmci_get_output_request(const vmc_conn_t *c, vmc_vm_t vm, const char *func,
                                      const uint32_t *path, uint32_t path_len, uint64_t offset,
                                      Vmrpc__Request *req, Vmrpc__GetOutputRequest *go);
/* Checks a chunk reply and copies its payload into place. */
VMCI_API vm_status_t vmci_chunk_into(vmci_tout_ctx_t *t, const vmci_reply_t *r, uint64_t offset,
                                     uint64_t expect_len);

#endif
