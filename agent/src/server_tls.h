/* The agent's TLS configuration (server_tls.c). */
#ifndef VMA_SERVER_TLS_H
#define VMA_SERVER_TLS_H

#include "vmrpc/status.h"
#include "vmagent/agent.h"

/* a->srv.tls from --tls-cert/--tls-key (and logs the certificate's
 * fingerprint). */
vm_status_t vma_tls_setup(vmagent_t *a);

#endif /* VMA_SERVER_TLS_H */
