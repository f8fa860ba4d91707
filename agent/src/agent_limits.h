/* The agent's fixed limits: handle caps per session, sizes taken from the
 * wire before anything else is known. Constants only. */
#ifndef VMA_AGENT_LIMITS_H
#define VMA_AGENT_LIMITS_H

#ifndef VMRPC_VERSION
#define VMRPC_VERSION "0.0.0"
#endif

#define VMA_MAX_DEVICES 32
#define VMA_MAX_VM_DEVICES 8
/* Per-session handle caps: a session cannot grow its tables without bound. */
#define VMA_MAX_EXECS 256
#define VMA_MAX_VMS 64
#define VMA_MAX_TRANSFERS 256
#define VMA_MAX_UPLOADS 4
#define VMA_MAX_PATH 64   /* GetOutput path components */
#define VMA_MAX_NAME 1024 /* function / parameter names from the wire */
#define VMA_MAX_SAVE_ARGS 256
#define VMA_CLOSED_CONNS 1024 /* ring of recently closed connection ids */
/* Largest message taken from a connection with no live session: Hello and
 * Ping fit in it (a token is at most VMA_MAX_TOKEN bytes). Anything larger
 * is refused before it is decoded. */
#define VMA_PRE_HELLO_MAX_BYTES 8192
#define VMA_MAX_TOKEN 4096

#endif /* VMA_AGENT_LIMITS_H */
