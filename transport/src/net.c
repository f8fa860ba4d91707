/* URLs, dialing and listening: the sockets under every connection are
 * made here, so they are ours from the start. See vmtransport/conn.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <nng/nng.h>

#include "internal.h"
#include "vmtransport/frame.h"

enum { K_TCP, K_IPC, K_ABSTRACT };

/* A parsed URL. */
typedef struct url {
  int kind, tls, family;
  char host[256], port[16];
  struct sockaddr_un un;
  socklen_t un_len;
} url_t;

static int hexval(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

static int parse_url(const char *s, url_t *u) {
  memset(u, 0, sizeof(*u));
  if (!s) return NNG_EADDRINVAL;
  const char *rest = NULL;
  static const struct {
    const char *scheme;
    int kind, tls, family;
  } schemes[] = {
      {"tcp://", K_TCP, 0, AF_UNSPEC},       {"tcp4://", K_TCP, 0, AF_INET},
      {"tcp6://", K_TCP, 0, AF_INET6},       {"tls+tcp://", K_TCP, 1, AF_UNSPEC},
      {"tls+tcp4://", K_TCP, 1, AF_INET},    {"tls+tcp6://", K_TCP, 1, AF_INET6},
      {"ipc://", K_IPC, 0, AF_UNIX},         {"abstract://", K_ABSTRACT, 0, AF_UNIX},
  };
  for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]) && !rest; i++) {
    size_t n = strlen(schemes[i].scheme);
    if (strncmp(s, schemes[i].scheme, n) == 0) {
      rest = s + n;
      u->kind = schemes[i].kind;
      u->tls = schemes[i].tls;
      u->family = schemes[i].family;
    }
  }
  if (!rest) return strstr(s, "://") ? NNG_ENOTSUP : NNG_EADDRINVAL;
  if (u->kind == K_IPC) {
    size_t n = strlen(rest);
    if (n == 0 || n >= sizeof(u->un.sun_path)) return NNG_EADDRINVAL;
    u->un.sun_family = AF_UNIX;
    memcpy(u->un.sun_path, rest, n + 1);
    u->un_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
    return 0;
  }
  if (u->kind == K_ABSTRACT) { /* URL-encoded name after a NUL byte */
    size_t k = 1;
    u->un.sun_family = AF_UNIX;
    for (const char *p = rest; *p; p++) {
      int ch = (unsigned char)*p;
      if (ch == '%') {
        int hi = hexval(p[1]), lo = hi < 0 ? -1 : hexval(p[2]);
        if (lo < 0) return NNG_EADDRINVAL;
        ch = hi * 16 + lo;
        p += 2;
      }
      if (k >= sizeof(u->un.sun_path)) return NNG_EADDRINVAL;
      u->un.sun_path[k++] = (char)ch;
    }
    u->un_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + k);
    return 0;
  }
  /* HOST:PORT, HOST may be [v6] or empty or '*' (any). */
  const char *colon;
  if (rest[0] == '[') {
    const char *close = strchr(rest, ']');
    if (!close || close[1] != ':') return NNG_EADDRINVAL;
    if ((size_t)(close - rest - 1) >= sizeof(u->host)) return NNG_EADDRINVAL;
    memcpy(u->host, rest + 1, (size_t)(close - rest - 1));
    colon = close + 1;
  } else {
    colon = strrchr(rest, ':');
    if (!colon || (size_t)(colon - rest) >= sizeof(u->host)) return NNG_EADDRINVAL;
    memcpy(u->host, rest, (size_t)(colon - rest));
    if (strchr(u->host, '/')) return NNG_EADDRINVAL;
  }
  const char *port = colon + 1;
  size_t pl = strcspn(port, "/");
  if (pl == 0 || pl >= sizeof(u->port) || (port[pl] && strcmp(port + pl, "/") != 0))
    return NNG_EADDRINVAL;
  memcpy(u->port, port, pl);
  for (size_t i = 0; i < pl; i++)
    if (u->port[i] < '0' || u->port[i] > '9') return NNG_EADDRINVAL;
  if (atoi(u->port) > 65535) return NNG_EADDRINVAL;
  if (strcmp(u->host, "*") == 0) u->host[0] = '\0';
  return 0;
}

int vmt_url_check(const char *url) {
  url_t u;
  return parse_url(url, &u);
}

static void tcp_tune(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  /* Detects peers that vanished without closing. */
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
}

static void peer_name(vmt_conn_t *c, int ipc) {
  snprintf(c->peer, sizeof(c->peer), "ipc");
  if (ipc) return;
  struct sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  snprintf(c->peer, sizeof(c->peer), "?");
  if (getpeername(c->fd, (struct sockaddr *)&ss, &len) != 0) return;
  if (ss.ss_family == AF_INET)
    inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, c->peer, sizeof(c->peer));
  else if (ss.ss_family == AF_INET6)
    inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, c->peer, sizeof(c->peer));
}

/* Connects a non-blocking socket to sa within deadline: 0 or the error. */
static int connect_one(int fd, const struct sockaddr *sa, socklen_t len, int64_t deadline) {
  if (connect(fd, sa, len) == 0) return 0;
  if (errno != EINPROGRESS && errno != EINTR) return vmt_errno(errno);
  int rv = vmt_poll(NULL, fd, POLLOUT, deadline);
  if (rv) return rv;
  int err = 0;
  socklen_t el = sizeof(err);
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0) return vmt_errno(errno);
  return err ? vmt_errno(err) : 0;
}

static int new_socket(int family) {
  int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  return fd;
}

int vmt_dial(const char *url, vmt_tls_t *tls, int32_t timeout_ms, vmt_conn_t **out) {
  *out = NULL;
  url_t u;
  int rv = parse_url(url, &u);
  if (rv) return rv;
  if (u.tls && !tls) return NNG_EINVAL;
  int64_t deadline = timeout_ms > 0 ? vmt_now_ns() + (int64_t)timeout_ms * 1000000 : -1;
  int fd = -1;
  if (u.kind != K_TCP) {
    fd = new_socket(AF_UNIX);
    if (fd < 0) return vmt_errno(errno);
    rv = connect_one(fd, (struct sockaddr *)&u.un, u.un_len, deadline);
  } else {
    if (!u.host[0]) return NNG_EADDRINVAL;
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = u.family;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    int gr = getaddrinfo(u.host, u.port, &hints, &res);
    if (gr != 0) return gr == EAI_MEMORY ? NNG_ENOMEM : NNG_EADDRINVAL;
    rv = NNG_EADDRINVAL;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
      fd = new_socket(ai->ai_family);
      if (fd < 0) {
        rv = vmt_errno(errno);
        continue;
      }
      rv = connect_one(fd, ai->ai_addr, ai->ai_addrlen, deadline);
      if (!rv) break;
      close(fd);
      fd = -1;
      if (rv == NNG_ETIMEDOUT) break;
    }
    freeaddrinfo(res);
    if (!rv) tcp_tune(fd);
  }
  if (rv) {
    if (fd >= 0) close(fd);
    return rv;
  }
  vmt_conn_t *c = NULL;
  rv = u.tls ? vmt_tls_wrap(tls, fd, &c) : vmt_sock_wrap(fd, u.kind != K_TCP, &c);
  if (rv) {
    close(fd);
    return rv;
  }
  peer_name(c, u.kind != K_TCP);
  if (u.tls) {
    int32_t left = 0;
    if (deadline >= 0) {
      int64_t ms = (deadline - vmt_now_ns()) / 1000000;
      left = ms > 0 ? (int32_t)ms : 1;
    }
    rv = vmt_tls_handshake(c, left);
    if (rv) {
      vmt_conn_free(c);
      return rv;
    }
  }
  *out = c;
  return 0;
}

/* ------------------------------------------------------------ listening */

struct vmt_listener {
  int fd;
  int kind;
  int port;
  int closed; /* atomic */
  vmt_tls_t *tls;
  char path[sizeof(((struct sockaddr_un *)0)->sun_path)]; /* ipc: unlinked at the end */
};

/* ipc: a socket file nobody accepts on is a dead listener's; it goes. */
static int ipc_clear_stale(const url_t *u) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return vmt_errno(errno);
  int r = connect(fd, (const struct sockaddr *)&u->un, u->un_len);
  int e = errno;
  close(fd);
  if (r == 0) return NNG_EADDRINUSE;
  if (e == ECONNREFUSED) unlink(u->un.sun_path);
  return 0;
}

int vmt_listen(const char *url, vmt_tls_t *tls, vmt_listener_t **out) {
  *out = NULL;
  url_t u;
  int rv = parse_url(url, &u);
  if (rv) return rv;
  if (u.tls && !tls) return NNG_EINVAL;
  vmt_listener_t *l = calloc(1, sizeof(*l));
  if (!l) return NNG_ENOMEM;
  l->fd = -1;
  l->kind = u.kind;
  l->tls = u.tls ? tls : NULL;
  if (u.kind != K_TCP) {
    if (u.kind == K_IPC && (rv = ipc_clear_stale(&u))) goto fail;
    l->fd = new_socket(AF_UNIX);
    if (l->fd < 0 || bind(l->fd, (struct sockaddr *)&u.un, u.un_len) != 0 ||
        listen(l->fd, 128) != 0) {
      rv = vmt_errno(errno);
      goto fail;
    }
    if (u.kind == K_IPC) snprintf(l->path, sizeof(l->path), "%s", u.un.sun_path);
  } else {
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = u.family;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE;
    int gr = getaddrinfo(u.host[0] ? u.host : NULL, u.port, &hints, &res);
    if (gr != 0) {
      rv = gr == EAI_MEMORY ? NNG_ENOMEM : NNG_EADDRINVAL;
      goto fail;
    }
    rv = NNG_EADDRINVAL;
    for (struct addrinfo *ai = res; ai && l->fd < 0; ai = ai->ai_next) {
      int fd = new_socket(ai->ai_family);
      if (fd < 0) {
        rv = vmt_errno(errno);
        continue;
      }
      int one = 1;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 128) != 0) {
        rv = vmt_errno(errno);
        close(fd);
        continue;
      }
      l->fd = fd;
      rv = 0;
    }
    freeaddrinfo(res);
    if (rv) goto fail;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(l->fd, (struct sockaddr *)&ss, &sl) == 0)
      l->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                               : ((struct sockaddr_in *)&ss)->sin_port);
  }
  *out = l;
  return 0;
fail:
  if (l->fd >= 0) close(l->fd);
  free(l);
  return rv;
}

int vmt_listener_port(const vmt_listener_t *l) {
  return l ? l->port : 0;
}

int vmt_listener_accept(vmt_listener_t *l, vmt_conn_t **out) {
  *out = NULL;
  for (;;) {
    if (atomic_load((_Atomic int *)&l->closed)) return NNG_ECLOSED;
    int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      if (l->kind == K_TCP) tcp_tune(fd);
      vmt_conn_t *c = NULL;
      int rv = l->tls ? vmt_tls_wrap(l->tls, fd, &c) : vmt_sock_wrap(fd, l->kind != K_TCP, &c);
      if (rv) {
        close(fd);
        return rv;
      }
      peer_name(c, l->kind != K_TCP);
      *out = c;
      return 0;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      int rv = vmt_poll(NULL, l->fd, POLLIN, -1);
      if (rv && rv != NNG_ETIMEDOUT) return rv;
      continue;
    }
    if (atomic_load((_Atomic int *)&l->closed)) return NNG_ECLOSED;
    return vmt_errno(errno);
  }
}

int vmt_conn_start(vmt_conn_t *c, int32_t timeout_ms) {
  return vmt_conn_is_tls(c) ? vmt_tls_handshake(c, timeout_ms) : 0;
}

void vmt_listener_close(vmt_listener_t *l) {
  if (!l) return;
  atomic_store((_Atomic int *)&l->closed, 1);
  shutdown(l->fd, SHUT_RDWR); /* wakes the acceptor's poll() */
}

void vmt_listener_free(vmt_listener_t *l) {
  if (!l) return;
  if (l->fd >= 0) close(l->fd);
  if (l->path[0]) unlink(l->path);
  free(l);
}
