/* Connecting and closing (libvmclient): the URL and TLS set-up, the dial
 * with its SP handshake, the multiplexer over the connection (its view of
 * the message pool and of a reply body), Hello and Goodbye. The calls
 * themselves are conn.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>

#include "vmrpc/file.h"
#include "vmc_internal.h"

#ifndef VMRPC_VERSION
#define VMRPC_VERSION "0"
#endif

/* --------------------------------------------------------------- connect */

static char *dup_str(const char *s) {
  s = s ? s : "";
  size_t n = strlen(s);
  char *d = malloc(n + 1);
  if (d) memcpy(d, s, n + 1);
  return d;
}

static void copy_str(char *dst, size_t cap, const char *src) {
  snprintf(dst, cap, "%s", src ? src : "");
}

static vm_status_t read_pem(const char *path, const char *what, char **out) {
  uint8_t *data;
  size_t size;
  vm_status_t st = vm_read_file(path, 1u << 20, &data, &size);
  if (st) {
    /* Missing: NOT_FOUND; any other reason it cannot be read (permissions,
     * a directory, too big): PERMISSION_DENIED. Both are I/O errors to the
     * CLI (exit 4), not usage errors. */
    if (vm_status_code(st) != VM_NOT_FOUND) {
      vm_status_t io = vm_status_make(VM_PERMISSION_DENIED, "%s", vm_status_message(st));
      vm_status_free(st);
      st = io;
    }
    return vm_status_annotate(st, "reading the %s", what);
  }
  char *s = malloc(size + 1);
  if (!s) {
    free(data);
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory reading the %s", what);
  }
  memcpy(s, data, size);
  s[size] = '\0';
  free(data);
  *out = s;
  return VM_STATUS_OK;
}

/* The multiplexer's view of the message pool and of a reply body: a
 * frame header (u32 little-endian envelope length), the envelope, then
 * the payload. */
static void *mux_get(void *ctx, size_t size, uint8_t **mem) {
  vmci_msg_t *m = vmci_msg_get(ctx, size);
  if (!m) return NULL;
  *mem = m->body;
  return m;
}

static void mux_put(void *ctx, void *msg) {
  vmci_msg_put(ctx, msg);
}

static void mux_received(void *ctx, void *msg, size_t off, size_t len, uint8_t *ext,
                         size_t ext_len) {
  (void)ctx;
  vmci_msg_t *m = msg;
  m->body += off;
  m->len = len;
  m->ext = ext;
  m->ext_len = ext_len;
}

static uint64_t mux_payload_len(const uint8_t *head, uint64_t body_len) {
  uint64_t env = (uint64_t)head[0] | (uint64_t)head[1] << 8 | (uint64_t)head[2] << 16 |
                 (uint64_t)head[3] << 24;
  return env <= body_len - VMP_FRAME_HEADER ? body_len - VMP_FRAME_HEADER - env : 0;
}

/* Host and port of a tls+tcp://HOST:PORT URL (host without brackets). */
static int url_host_port(const char *url, char *host, size_t hcap, char *port, size_t pcap) {
  const char *p = strstr(url, "://");
  if (!p) return -1;
  p += 3;
  const char *end;
  if (*p == '[') {
    end = strchr(p, ']');
    if (!end || end[1] != ':') return -1;
    snprintf(host, hcap, "%.*s", (int)(end - p - 1), p + 1);
    end++;
  } else {
    end = strrchr(p, ':');
    if (!end) return -1;
    snprintf(host, hcap, "%.*s", (int)(end - p), p);
  }
  snprintf(port, pcap, "%.*s", (int)strcspn(end + 1, "/"), end + 1);
  return host[0] && port[0] ? 0 : -1;
}

/* The TLS configuration of a tls+tcp:// connection (see vmc_conn_opts_t):
 * trust in a pinned certificate, a CA file, the system store, or
 * (insecure) nothing; a client certificate when given. */
static vm_status_t tls_setup(vmc_conn_t *c, const vmc_conn_opts_t *o) {
  char host[256], port[16];
  if (url_host_port(c->url, host, sizeof(host), port, sizeof(port)) != 0)
    return vm_status_make(VM_INVALID_ARGUMENT, "'%s' names no host: use tls+tcp://HOST:PORT", c->url);
  int has_ca = o->tls_ca_file && o->tls_ca_file[0], has_pin = o->tls_pin && o->tls_pin[0];
  if (has_ca + has_pin + (o->tls_insecure != 0) > 1)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "give at most one of --tls-ca, --tls-pin and --tls-insecure");
  int has_cert = o->tls_cert && o->tls_cert[0], has_key = o->tls_key && o->tls_key[0];
  if (has_cert != has_key)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "a TLS client certificate needs both --tls-cert and --tls-key");
  vmt_tls_opts_t to;
  memset(&to, 0, sizeof(to));
  char *ca = NULL, *cert = NULL, *key = NULL;
  const char *what = NULL;
  vm_status_t st = VM_STATUS_OK;
  if (has_pin) {
    uint8_t pin[32];
    if ((st = vmci_tls_pin_parse(o->tls_pin, pin))) goto done;
    if ((st = vmci_tls_probe_pin(c->url, host, port, c->connect_timeout_ms, o->tls_pin, pin, &ca)))
      goto done;
    /* No host name check: the pinned key is the identity. */
    what = "the pinned certificate";
  } else if (!o->tls_insecure) {
    what = has_ca ? o->tls_ca_file : vmci_tls_system_ca();
    if (!what) {
      st = vm_status_make(VM_FAILED_PRECONDITION,
                          "no system CA store to verify the agent's certificate with (looked "
                          "at $SSL_CERT_FILE and /etc/ssl/certs/ca-certificates.crt ...): give "
                          "--tls-ca FILE or --tls-pin sha256:HEX (or, on a trusted network "
                          "only, --tls-insecure)");
      goto done;
    }
    if ((st = read_pem(what, has_ca ? "TLS CA file" : "system CA store", &ca))) goto done;
    to.server_name = host;
  }
  to.ca_pem = ca;
  if (has_cert) {
    if ((st = read_pem(o->tls_cert, "TLS client certificate", &cert))) goto done;
    if ((st = read_pem(o->tls_key, "TLS client key", &key))) goto done;
    to.cert_pem = cert;
    to.key_pem = key;
  }
  char err[256];
  int rv = vmt_tls_new(&to, &c->tls, err, sizeof(err));
  if (rv == NNG_EINVAL && ca && strstr(err, "no PEM certificate"))
    st = vm_status_make(VM_INVALID_ARGUMENT,
                        "cannot use '%s' as TLS trust anchors: %s (expected PEM certificates)",
                        what, err);
  else if (rv == NNG_EINVAL)
    st = vm_status_make(VM_INVALID_ARGUMENT,
                        "cannot use the TLS certificate '%s' with key '%s': %s (expected PEM "
                        "files that belong together)",
                        o->tls_cert, o->tls_key, err);
  else if (rv)
    st = vmci_nng_error(c, rv, "setting up TLS", 0);
done:
  if (key) {
    memset(key, 0, strlen(key));
    free(key);
  }
  free(cert);
  free(ca);
  return st;
}

/* Connects within the connect timeout: the socket, the TLS handshake on
 * tls+tcp://, then the SP handshake. */
static vm_status_t dial(vmc_conn_t *c) {
  int64_t start = vmt_mux_now_ns();
  int rv = vmt_dial(c->url, c->tls, c->connect_timeout_ms, &c->s);
  if (!rv) {
    int64_t left = c->connect_timeout_ms - (vmt_mux_now_ns() - start) / 1000000;
    rv = vmt_conn_handshake(c->s, VMT_SP_REQ0, VMT_SP_REP0, left > 0 ? (int32_t)left : 1);
  }
  if (!rv) {
    uint64_t max_reply = (uint64_t)VMCI_MAX_CHUNK + VMP_MAX_ENVELOPE + VMP_FRAME_HEADER + 4;
    vmt_mux_msgs_t msgs = {.ctx = c,
                           .get = mux_get,
                           .put = mux_put,
                           .received = mux_received,
                           .payload_len = mux_payload_len,
                           .peek = VMP_FRAME_HEADER};
    rv = vmt_mux_init(&c->mux, c->s, &msgs, max_reply, c->request_timeout_ms);
    c->mux_ready = rv == 0;
  }
  if (rv == NNG_ETIMEDOUT)
    return vm_status_make(VM_DEADLINE_EXCEEDED,
                          "could not connect to the agent at %s within %d ms (connect timeout): "
                          "check the host, the port and any firewall, and that a vmagent (not "
                          "another service) listens there, or raise the timeout "
                          "(--connect-timeout MS, vmc_conn_opts_t.connect_timeout_ms)",
                          c->url, (int)c->connect_timeout_ms);
  if (rv == 0) return VM_STATUS_OK;
  switch (rv) {
    case NNG_ECONNREFUSED:
      return vm_status_make(VM_UNAVAILABLE,
                            "cannot reach the agent at %s: %s — is vmagent running? start it "
                            "with `vmagent --listen %s`",
                            c->url, nng_strerror(rv), c->url);
    case NNG_EADDRINVAL:
    case NNG_EINVAL:
      return vm_status_make(VM_INVALID_ARGUMENT,
                            "cannot connect to '%s': %s — check that the host name resolves "
                            "and that the URL reads tcp://HOST:PORT, tls+tcp://HOST:PORT or "
                            "ipc:///PATH",
                            c->url, nng_strerror(rv));
    case NNG_EUNREACHABLE:
    case NNG_ETIMEDOUT:
    case NNG_EPROTO:
      return vm_status_make(VM_UNAVAILABLE,
                            "cannot reach the agent at %s: %s (nng error %d) — check the "
                            "address, the network and any firewall, and that a vmagent (not "
                            "another service) listens there",
                            c->url, nng_strerror(rv), rv);
    case NNG_EPEERAUTH:
    case NNG_ECRYPTO:
      return vm_status_make(VM_UNAVAILABLE,
                            "TLS handshake with the agent at %s failed: %s — its certificate "
                            "must be signed by --tls-ca (default: the system CA store) and name "
                            "the host, or match --tls-pin sha256:HEX; check also that the agent "
                            "listens on tls+tcp://",
                            c->url, nng_strerror(rv));
    default:
      return vm_status_make(VM_UNAVAILABLE,
                            "cannot reach the agent at %s: %s (nng error %d) — is vmagent "
                            "running there? start it with `vmagent --listen %s`",
                            c->url, nng_strerror(rv), rv, c->url);
  }
}

static vm_status_t hello(vmc_conn_t *c, const vmc_conn_opts_t *o) {
  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__HelloRequest h = VMRPC__HELLO_REQUEST__INIT;
  h.protocol_major = VMRPC_PROTOCOL_MAJOR;
  h.protocol_minor = VMRPC_PROTOCOL_MINOR;
  h.client_name =
      (char *)(o->client_name && o->client_name[0] ? o->client_name : "libvmclient/" VMRPC_VERSION);
  h.token = (char *)(o->token ? o->token : "");
  req.op_case = VMRPC__REQUEST__OP_HELLO;
  req.hello = &h;
  vmci_reply_t r;
  int rv;
  vm_status_t cst = vmci_call_rv(c, &req, NULL, 0, VMRPC__RESPONSE__OP_HELLO, c->connect_timeout_ms,
                                 "Hello", &r, &rv);
  if (cst && rv == NNG_ETIMEDOUT) {
    vm_status_free(cst);
    return vm_status_make(VM_DEADLINE_EXCEEDED,
                          "connected to %s but no vmrpc Hello reply within %d ms (connect "
                          "timeout): is a vmagent listening there (and not some other service)? "
                          "If it is busy, raise the timeout (--connect-timeout MS, "
                          "vmc_conn_opts_t.connect_timeout_ms)",
                          c->url, (int)c->connect_timeout_ms);
  }
  if (cst) return cst;
  const Vmrpc__HelloResponse *hr = r.resp->hello;
  vm_status_t st = VM_STATUS_OK;
  if (!hr) {
    st = vm_status_make(VM_INTERNAL, "the agent at %s sent an empty Hello reply", c->url);
    goto done;
  }
  if (hr->protocol_major != VMRPC_PROTOCOL_MAJOR) {
    st = vm_status_make(VM_FAILED_PRECONDITION,
                        "the agent at %s speaks protocol %u.%u, this client %d.%d: use a "
                        "vmclient of the agent's major version (or upgrade the agent)",
                        c->url, hr->protocol_major, hr->protocol_minor, VMRPC_PROTOCOL_MAJOR,
                        VMRPC_PROTOCOL_MINOR);
    goto done;
  }
  if (hr->session == 0) {
    st = vm_status_make(VM_INTERNAL, "the agent at %s opened no session (session id 0)", c->url);
    goto done;
  }
  c->protocol_major = hr->protocol_major;
  c->protocol_minor = hr->protocol_minor;
  c->agent_version = dup_str(hr->agent_version);
  if (!c->agent_version) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
    goto done;
  }
  if (hr->n_devices > 1024) {
    st = vm_status_make(VM_INTERNAL, "the agent at %s lists %zu devices; at most 1024 expected",
                        c->url, hr->n_devices);
    goto done;
  }
  c->num_devices = (uint32_t)hr->n_devices;
  c->devices = calloc(c->num_devices ? c->num_devices : 1, sizeof(*c->devices));
  if (!c->devices) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
    goto done;
  }
  for (uint32_t i = 0; i < c->num_devices; i++) {
    const Vmrpc__DeviceInfo *d = hr->devices[i];
    vmc_device_info_t *o2 = &c->devices[i];
    copy_str(o2->selector, sizeof(o2->selector), d->selector);
    copy_str(o2->name, sizeof(o2->name), d->name);
    copy_str(o2->vendor, sizeof(o2->vendor), d->vendor);
    copy_str(o2->driver_version, sizeof(o2->driver_version), d->driver_version);
    copy_str(o2->version, sizeof(o2->version), d->version);
    copy_str(o2->platform, sizeof(o2->platform), d->platform);
    o2->compute_units = d->compute_units;
    o2->global_mem_bytes = d->global_mem_bytes;
    o2->local_mem_bytes = d->local_mem_bytes;
    o2->max_alloc_bytes = d->max_alloc_bytes;
    o2->supports_fp16 = d->supports_fp16;
    o2->has_device_timer = d->has_device_timer;
  }
  vmc_limits_t *l = &c->limits;
  const Vmrpc__Limits *wl = hr->limits;
  l->chunk_bytes = wl && wl->chunk_bytes ? wl->chunk_bytes : (1u << 20);
  l->max_inflight_chunks = wl && wl->max_inflight_chunks ? wl->max_inflight_chunks : 8;
  l->max_message_bytes =
      wl && wl->max_message_bytes ? wl->max_message_bytes : l->chunk_bytes + (64u << 10);
  l->max_sessions = wl ? wl->max_sessions : 0;
  l->session_mem_bytes = wl ? wl->session_mem_bytes : 0;
  l->max_executable_bytes = wl ? wl->max_executable_bytes : 0;
  l->idle_timeout_ms = wl ? wl->idle_timeout_ms : 0;
  if (l->chunk_bytes > VMCI_MAX_CHUNK || l->chunk_bytes < 64) {
    st = vm_status_make(VM_FAILED_PRECONDITION,
                        "the agent at %s uses %llu-byte chunks; this client supports 64 bytes to "
                        "%u bytes (restart the agent with a --chunk size in that range)",
                        c->url, (unsigned long long)l->chunk_bytes, (unsigned)VMCI_MAX_CHUNK);
    goto done;
  }
  if (l->max_message_bytes < l->chunk_bytes + 256) {
    st = vm_status_make(VM_FAILED_PRECONDITION,
                        "the agent at %s accepts messages of %llu bytes, too small for its own "
                        "%llu-byte chunks plus an envelope: fix its --max-message",
                        c->url, (unsigned long long)l->max_message_bytes,
                        (unsigned long long)l->chunk_bytes);
    goto done;
  }
  if (l->max_inflight_chunks > VMCI_MAX_INFLIGHT) l->max_inflight_chunks = VMCI_MAX_INFLIGHT;
  c->slots_free = l->max_inflight_chunks;
  c->session = hr->session;
done:
  vmci_reply_free(&r);
  return st;
}

vm_status_t vmc_connect(const char *url, const vmc_conn_opts_t *opts, vmc_conn_t **out_conn) {
  vmc_conn_opts_t o;
  memset(&o, 0, sizeof(o));
  if (opts) o = *opts;
  if (!out_conn) return vm_status_make(VM_INVALID_ARGUMENT, "vmc_connect: out_conn is NULL");
  *out_conn = NULL;
  if (!url || !url[0])
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "no agent URL given: pass --host tcp://HOST:PORT or set VMCLIENT_HOST");
  int is_tls = strncmp(url, "tls+", 4) == 0;
  if (!is_tls && ((o.tls_ca_file && o.tls_ca_file[0]) || (o.tls_cert && o.tls_cert[0]) ||
                  (o.tls_key && o.tls_key[0]) || (o.tls_pin && o.tls_pin[0]) || o.tls_insecure))
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "TLS options were given but '%s' is not a tls+tcp:// URL: use "
                          "tls+tcp://HOST:PORT",
                          url);
  if (o.connect_timeout_ms < 0 || o.request_timeout_ms < 0 || o.long_timeout_ms < 0)
    return vm_status_make(VM_INVALID_ARGUMENT, "timeouts must be >= 0 ms (0 = default)");

  vmc_conn_t *c = calloc(1, sizeof(*c));
  if (!c) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->slot_cv, NULL);
  atomic_init(&c->next_id, 1);
  c->connect_timeout_ms =
      o.connect_timeout_ms ? o.connect_timeout_ms : VMC_DEFAULT_CONNECT_TIMEOUT_MS;
  c->request_timeout_ms =
      o.request_timeout_ms ? o.request_timeout_ms : VMC_DEFAULT_REQUEST_TIMEOUT_MS;
  c->long_timeout_ms = o.long_timeout_ms;
  c->limits.max_inflight_chunks = 1;
  c->slots_free = 1;
  vm_status_t st = VM_STATUS_OK;
  c->url = dup_str(url);
  if (!c->url) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
    goto fail;
  }
  int rv = vmt_url_check(url);
  if (rv) {
    st = vm_status_make(VM_INVALID_ARGUMENT,
                        "'%s' is not a valid agent URL (%s): use tcp://HOST:PORT, "
                        "tls+tcp://HOST:PORT or ipc:///PATH",
                        url, nng_strerror(rv));
    goto fail;
  }
  if (is_tls && (st = tls_setup(c, &o))) goto fail;
  if ((st = dial(c))) goto fail;
  if ((st = hello(c, &o))) goto fail;
  *out_conn = c;
  return VM_STATUS_OK;
fail:
  vmc_close(c);
  return st;
}

void vmc_close(vmc_conn_t *c) {
  if (!c) return;
  if (c->session && !vmci_conn_lost(c)) {
    Vmrpc__Request req = VMRPC__REQUEST__INIT;
    Vmrpc__GoodbyeRequest g = VMRPC__GOODBYE_REQUEST__INIT;
    req.op_case = VMRPC__REQUEST__OP_GOODBYE;
    req.goodbye = &g;
    vmci_reply_t r;
    int32_t t = c->request_timeout_ms < 2000 ? c->request_timeout_ms : 2000;
    vm_status_t st = vmci_call(c, &req, NULL, 0, VMRPC__RESPONSE__OP_GOODBYE, t, "Goodbye", &r);
    if (st)
      vm_status_free(st);
    else
      vmci_reply_free(&r);
  }
  if (c->mux_ready) vmt_mux_destroy(&c->mux);
  vmt_conn_free(c->s);
  vmt_tls_free(c->tls);
  while (c->pool) {
    vmci_msg_t *m = c->pool;
    c->pool = m->next;
    vmci_msg_free(m);
  }
  free(c->devices);
  free(c->agent_version);
  free(c->url);
  pthread_cond_destroy(&c->slot_cv);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

const char *vmc_conn_url(const vmc_conn_t *c) {
  return c ? c->url : "";
}

void vmc_info(const vmc_conn_t *c, vmc_info_t *out) {
  memset(out, 0, sizeof(*out));
  out->url = c->url;
  out->agent_version = c->agent_version ? c->agent_version : "";
  out->protocol_major = c->protocol_major;
  out->protocol_minor = c->protocol_minor;
  out->client_protocol_major = VMRPC_PROTOCOL_MAJOR;
  out->client_protocol_minor = VMRPC_PROTOCOL_MINOR;
  out->session = c->session;
  out->num_devices = c->num_devices;
  out->devices = c->devices;
  out->limits = c->limits;
}
