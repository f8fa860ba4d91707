/* vmagent lifetime: configuration checks, devices, registry, store, and
 * the in-process entry points of agent.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "agent_core.h"
#include "device_gate.h"
#include "isolation/supervisor.h"
#include "isolation/xlock.h"
#include "listen_url.h"
#include "out.h"
#include "route.h"
#include "server.h"
#include "session.h"
#include "store.h"
#include "vmrpc/log.h"
#include "vmcl/vmcl.h"

void vmagent_config_default(vmagent_config_t *cfg) {
  memset(cfg, 0, sizeof(*cfg));
  cfg->listen_url = "tcp://127.0.0.1:9090";
  cfg->cache_max_bytes = 2ull << 30;
  cfg->max_sessions = 64;
  cfg->idle_timeout_ms = 600u * 1000u;
  cfg->chunk_bytes = 1u << 20;
  cfg->max_executable_bytes = 1ull << 30;
  cfg->workers = 8;
  cfg->auth_failures_per_s = 10;
  cfg->auth_failure_burst = 20;
  cfg->auth_delay_ms = 250;
  cfg->auth_max_wait_ms = 5000;
  cfg->hello_timeout_ms = 10u * 1000u;
  cfg->max_unauth_conns = 64;
  cfg->write_timeout_ms = 60u * 1000u;
  cfg->kernels_cpu = VMAGENT_KERNELS_DENY;
  cfg->kernels_gpu = VMAGENT_KERNELS_DENY;
  cfg->kernel_timeout_ms = 10u * 1000u;
  cfg->isolate = VMAGENT_ISOLATE_AUTO;
  cfg->spare_workers = 1;
}

static char *vma_strdup_or_null(const char *s) {
  return s && *s ? strdup(s) : NULL;
}

static vm_status_t vma_check_config(const vmagent_config_t *c, int has_token) {
  if (!c->listen_url || !*c->listen_url)
    return vm_status_make(VM_INVALID_ARGUMENT, "--listen URL is empty");
  if (c->workers < 1 || c->workers > 256)
    return vm_status_make(VM_INVALID_ARGUMENT, "--workers %u is out of range 1..256", c->workers);
  if (c->max_sessions < 1 || c->max_sessions > 65536)
    return vm_status_make(VM_INVALID_ARGUMENT, "--max-sessions %u is out of range 1..65536",
                          c->max_sessions);
  if (c->chunk_bytes < 4096 || c->chunk_bytes > (64u << 20))
    return vm_status_make(VM_INVALID_ARGUMENT, "--chunk-size %llu is out of range 4K..64M",
                          (unsigned long long)c->chunk_bytes);
  if (c->max_message_bytes &&
      (c->max_message_bytes < c->chunk_bytes + 4096 || c->max_message_bytes > (1ull << 31)))
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "--max-message %llu must be at least the chunk size + 4K (%llu) and at "
                          "most 2G",
                          (unsigned long long)c->max_message_bytes,
                          (unsigned long long)c->chunk_bytes + 4096);
  if (c->token && strlen(c->token) > VMA_MAX_TOKEN)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "the token is longer than %d bytes: Hello must fit in the %d bytes "
                          "taken before a session exists",
                          VMA_MAX_TOKEN, VMA_PRE_HELLO_MAX_BYTES);
  if (c->max_executable_bytes < 1024 || c->max_executable_bytes > (4ull << 30))
    return vm_status_make(VM_INVALID_ARGUMENT, "max executable size out of range 1K..4G");
  if (c->isolate < VMAGENT_ISOLATE_AUTO || c->isolate > VMAGENT_ISOLATE_SESSION)
    return vm_status_make(VM_INVALID_ARGUMENT, "isolate %d is not auto, none or session",
                          c->isolate);
  if (c->max_unauth_conns > 1000)
    return vm_status_make(VM_INVALID_ARGUMENT, "--max-unauthenticated %u is out of range 1..1000",
                          c->max_unauth_conns);
  if (c->write_timeout_ms > 3600u * 1000u)
    return vm_status_make(VM_INVALID_ARGUMENT, "--write-timeout %u ms is out of range 0..3600 s",
                          c->write_timeout_ms);
  if (c->hello_timeout_ms > 600u * 1000u)
    return vm_status_make(VM_INVALID_ARGUMENT, "--hello-timeout %u ms is out of range 0..600 s",
                          c->hello_timeout_ms);
  if (c->spare_workers > 64)
    return vm_status_make(VM_INVALID_ARGUMENT, "--spare-workers %u is out of range 0..64",
                          c->spare_workers);
  if (c->isolate == VMAGENT_ISOLATE_SESSION && !(c->worker_exe && *c->worker_exe))
    return vm_status_make(VM_FAILED_PRECONDITION,
                          "session isolation needs the vmagent binary to start as workers "
                          "(worker_exe); run vmagent, or use --isolate none");
  int tls = strncmp(c->listen_url, "tls+", 4) == 0;
  if (tls && !(c->tls_cert_file && *c->tls_cert_file && c->tls_key_file && *c->tls_key_file))
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "a tls+tcp:// listen URL needs --tls-cert and --tls-key");
  if (!tls && ((c->tls_cert_file && *c->tls_cert_file) || (c->tls_key_file && *c->tls_key_file)))
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "--tls-cert/--tls-key need a tls+tcp:// listen URL (got %s)",
                          c->listen_url);
  if (!vma_url_is_local(c->listen_url) && !has_token && !c->insecure)
    return vm_status_make(VM_FAILED_PRECONDITION,
                          "refusing to listen on %s without a token: anyone who reaches it could "
                          "run code on this device; pass --token-file FILE (or --insecure if the "
                          "network is trusted)",
                          c->listen_url);
  return VM_STATUS_OK;
}

static vm_status_t vma_add_device(vmagent_t *a, vm_device_t *dev) {
  char sel[32];
  if (dev->type == VM_DEVICE_CPU)
    snprintf(sel, sizeof(sel), "cpu");
  else
    snprintf(sel, sizeof(sel), "opencl:%d", dev->id);
  for (uint32_t i = 0; i < a->num_devices; i++) {
    if (strcmp(a->devices[i].selector, sel) == 0) {
      VM_LOGW("device %s named twice; using it once", sel);
      vm_device_destroy(dev);
      return VM_STATUS_OK;
    }
  }
  if (a->num_devices >= VMA_MAX_DEVICES) {
    vm_device_destroy(dev);
    return vm_status_make(VM_INVALID_ARGUMENT, "more than %d devices", VMA_MAX_DEVICES);
  }
  vma_device_t *d = &a->devices[a->num_devices];
  if (pthread_mutex_init(&d->run_lock, NULL) != 0) {
    vm_device_destroy(dev);
    return vm_status_make(VM_INTERNAL, "pthread_mutex_init failed");
  }
  if (vmcl_is_device(dev)) {
    int cpu = vmcl_device_is_cpu(dev);
    int allow = cpu ? a->cfg.kernels_cpu : a->cfg.kernels_gpu;
    vm_status_t st = vmcl_set_kernel_policy(
        dev,
        allow ? NULL
        : cpu ? "this agent denies them on CPU OpenCL devices, where a kernel runs as native code "
                "inside the agent (vmagent --kernels cpu=allow enables them; docs/security.md)"
              : "this agent denies them on GPU OpenCL devices (vmagent --kernels gpu=allow "
                "enables them; docs/security.md)",
        a->cfg.kernel_timeout_ms);
    if (st) {
      pthread_mutex_destroy(&d->run_lock);
      vm_device_destroy(dev);
      return st;
    }
    VM_LOGI("device %s: carried kernels %s (%s device)", sel, allow ? "allowed" : "denied",
            cpu ? "cpu" : "gpu");
  }
  vm_status_t gst = vma_gate_init(d);
  if (gst) {
    pthread_mutex_destroy(&d->run_lock);
    vm_device_destroy(dev);
    return gst;
  }
  d->dev = dev;
  d->owner = a;
  snprintf(d->selector, sizeof(d->selector), "%s", sel);
  a->num_devices++;
  VM_LOGI("device %s: %s (%s)", sel, dev->props.name, dev->props.version);
  return VM_STATUS_OK;
}

static vm_status_t vma_open_devices(vmagent_t *a) {
  char cl_cache[4200] = "";
  if (a->cache_dir) snprintf(cl_cache, sizeof(cl_cache), "%s/opencl", a->cache_dir);
  vmcl_options_t opts = {.cache_dir = cl_cache[0] ? cl_cache : NULL};
  int have_cpu = 0;
  if (a->cfg.num_devices == 0) {
    vm_device_props_t *props = NULL;
    uint32_t count = 0;
    vm_status_t st = vmcl_list_devices(&props, &count);
    if (st) {
      VM_LOGW("no OpenCL: %s; serving the cpu device only", vm_status_message(st));
      vm_status_free(st);
      count = 0;
    }
    free(props);
    for (uint32_t i = 0; i < count; i++) {
      char sel[32];
      snprintf(sel, sizeof(sel), "opencl:%u", i);
      vm_device_t *dev = NULL;
      st = vmcl_device_open(sel, &opts, &dev);
      if (st) { /* one broken device must not hide the others */
        VM_LOGW("skipping %s: %s", sel, vm_status_message(st));
        vm_status_free(st);
        continue;
      }
      VM_RETURN_IF_ERROR(vma_add_device(a, dev));
    }
  } else {
    for (uint32_t i = 0; i < a->cfg.num_devices; i++) {
      const char *sel = a->cfg.devices[i];
      vm_device_t *dev = NULL;
      if (strcasecmp(sel, "cpu") == 0 || strcasecmp(sel, "cpu:0") == 0) {
        if (have_cpu) continue;
        VM_RETURN_IF_ERROR(vm_cpu_device_create(a->cfg.cpu_mem_limit, &dev));
        have_cpu = 1;
      } else {
        VM_RETURN_IF_ERROR(
            vm_status_annotate(vmcl_device_open(sel, &opts, &dev), "--device %s", sel));
      }
      VM_RETURN_IF_ERROR(vma_add_device(a, dev));
    }
  }
  if (!have_cpu) { /* the agent always has a cpu device */
    vm_device_t *dev = NULL;
    VM_RETURN_IF_ERROR(vm_cpu_device_create(a->cfg.cpu_mem_limit, &dev));
    VM_RETURN_IF_ERROR(vma_add_device(a, dev));
  }
  return VM_STATUS_OK;
}

vm_status_t vmagent_create(const vmagent_config_t *cfg, vmagent_t **out_agent) {
  *out_agent = NULL;
  int has_token = cfg->token && *cfg->token;
  VM_RETURN_IF_ERROR(vma_check_config(cfg, has_token));
  vmagent_t *a = calloc(1, sizeof(*a));
  if (!a) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  vm_status_t st = VM_STATUS_OK;
  a->cfg = *cfg;
  if (!a->cfg.max_message_bytes) a->cfg.max_message_bytes = a->cfg.chunk_bytes + (64u << 10);
  if (!a->cfg.auth_failures_per_s) a->cfg.auth_failures_per_s = 10;
  if (a->cfg.auth_failures_per_s > 1000000u) a->cfg.auth_failures_per_s = 1000000u;
  if (!a->cfg.auth_failure_burst) a->cfg.auth_failure_burst = 20;
  if (!a->cfg.auth_delay_ms) a->cfg.auth_delay_ms = 250;
  if (!a->cfg.auth_max_wait_ms) a->cfg.auth_max_wait_ms = 5000;
  if (!a->cfg.hello_timeout_ms) a->cfg.hello_timeout_ms = 10u * 1000u;
  if (!a->cfg.max_unauth_conns) a->cfg.max_unauth_conns = 64;
  if (!a->cfg.write_timeout_ms) a->cfg.write_timeout_ms = 60u * 1000u;
  a->listen_url = strdup(cfg->listen_url);
  a->token = vma_strdup_or_null(cfg->token);
  a->tls_cert_file = vma_strdup_or_null(cfg->tls_cert_file);
  a->tls_key_file = vma_strdup_or_null(cfg->tls_key_file);
  a->cache_dir = vma_strdup_or_null(cfg->cache_dir);
  a->worker_exe = vma_strdup_or_null(cfg->worker_exe);
  a->state_root = vma_strdup_or_null(cfg->state_root);
  a->cfg.cpus = NULL; /* parsed into a->pin below */
  a->in_worker.lock_fd = -1;
  /* auto: isolated when carried kernels (native code on a cpu device, the
   * driver's fault handling on a gpu) may run; docs/security.md. */
  int kernels =
      cfg->kernels_cpu == VMAGENT_KERNELS_ALLOW || cfg->kernels_gpu == VMAGENT_KERNELS_ALLOW;
  if (cfg->isolate == VMAGENT_ISOLATE_AUTO)
    a->cfg.isolate = kernels && a->worker_exe ? VMAGENT_ISOLATE_SESSION : VMAGENT_ISOLATE_NONE;
  a->cfg.worker_exe = a->worker_exe;
  a->cfg.listen_url = a->listen_url;
  a->cfg.token = a->token;
  a->cfg.tls_cert_file = a->tls_cert_file;
  a->cfg.tls_key_file = a->tls_key_file;
  a->cfg.cache_dir = a->cache_dir;
  a->cfg.state_root = a->state_root;
  a->cfg.devices = NULL; /* borrowed during create only */
  vm_budget_init(&a->host, a->cfg.host_mem_limit, NULL, "the agent's host memory limit",
                 "--host-mem-limit");
  atomic_init(&a->requests, 0);
  atomic_init(&a->stopping, 0);
  if (pthread_mutex_init(&a->lock, NULL) != 0) {
    free(a);
    return vm_status_make(VM_INTERNAL, "pthread_mutex_init failed");
  }
  a->sessions = calloc(a->cfg.max_sessions, sizeof(*a->sessions));
  if (!a->listen_url || !a->sessions || (cfg->token && *cfg->token && !a->token)) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
    goto fail;
  }
  st = vma_pin_parse(cfg->cpus, &a->pin);
  if (st) goto fail;
  a->cfg.devices = cfg->devices;
  st = vma_open_devices(a);
  a->cfg.devices = NULL;
  if (st) goto fail;
  st = vm_registry_create(&a->registry);
  if (!st) st = vm_registry_add_builtins(a->registry);
  if (!st) st = vmcl_register_ops(a->registry);
  if (st) goto fail;
  st = vma_store_open(a->cache_dir, a->cfg.cache_max_bytes, a->cfg.max_executable_bytes, &a->store);
  if (st) goto fail;
  *out_agent = a;
  return VM_STATUS_OK;
fail:
  vmagent_free(a);
  return st;
}

vm_status_t vmagent_start(vmagent_t *a) {
  if (a->started) return vm_status_make(VM_FAILED_PRECONDITION, "the agent is already started");
  a->started = 1;
  vm_status_t st = VM_STATUS_OK;
  if (a->cfg.isolate == VMAGENT_ISOLATE_SESSION) st = vma_iso_start(a);
  if (!st) st = vma_server_start(a);
  if (st) vma_server_stop(a);
  return st;
}

const char *vmagent_url(const vmagent_t *a) {
  return a->url;
}

int vmagent_handle_message(vmagent_t *a, uint32_t conn_id, const uint8_t *body, size_t len,
                           uint8_t **out_reply, size_t *out_reply_len) {
  vma_out_t out = {.alloc = vma_heap_alloc};
  int rc = vma_route(a, conn_id, body, len, &out);
  if (rc != 0) {
    free(out.buf);
    *out_reply = NULL;
    *out_reply_len = 0;
    return -1;
  }
  *out_reply = out.buf;
  *out_reply_len = out.len;
  return 0;
}

void vmagent_close_pipe(vmagent_t *a, uint32_t conn_id) {
  vma_sessions_close_conn(a, conn_id);
}

void vmagent_stop(vmagent_t *a) {
  if (!a || a->stopped) return;
  a->stopped = 1;
  vma_iso_stop(a); /* requests waiting for workers return at once */
  if (a->started) vma_server_stop(a);
  vma_sessions_destroy_all(a);
  vma_iso_free(a);
}

void vmagent_free(vmagent_t *a) {
  if (!a) return;
  vmagent_stop(a);
  vma_store_close(a->store);
  vm_registry_free(a->registry);
  for (uint32_t i = 0; i < a->num_devices; i++) {
    vm_device_destroy(a->devices[i].dev);
    pthread_mutex_destroy(&a->devices[i].run_lock);
    vma_gate_destroy(&a->devices[i]);
  }
  free(a->sessions);
  pthread_mutex_destroy(&a->lock);
  free(a->listen_url);
  if (a->token) { /* do not leave the secret in freed memory */
    volatile char *p = a->token;
    while (*p) *p++ = 0;
  }
  free(a->token);
  free(a->tls_cert_file);
  free(a->tls_key_file);
  free(a->cache_dir);
  free(a->worker_exe);
  free(a->state_root);
  vma_xlock_close(a);
  free(a);
}
