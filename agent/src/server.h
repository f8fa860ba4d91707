/* The transport (server.c): listens, reads requests, hands them to the
 * router (route.h) and writes the replies. Its state is server_state.h. */
#ifndef VMA_SERVER_H
#define VMA_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "vmrpc/status.h"
#include "vmagent/agent.h"

vm_status_t vma_server_start(vmagent_t *a);
void vma_server_stop(vmagent_t *a);
/* The peer of connection id for logs and the Hello brute-force table: its
 * IP address, "ipc", or "pipe N" when no such connection is open. Others
 * reach it through a->hooks.conn_peer (agent_core.h). */
void vma_conn_peer(vmagent_t *a, uint32_t id, char *out, size_t cap);

#endif /* VMA_SERVER_H */
