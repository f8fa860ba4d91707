#include "vmrpc/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static _Atomic int g_level = VM_LOG_WARN;
static vm_log_sink_fn g_sink; /* set before threads start; read racily is fine */
static void *g_sink_user;

static const char *const k_level_names[] = {"debug", "info", "warn", "error", "off"};

void vm_log_set_level(vm_log_level_t level) { atomic_store(&g_level, (int)level); }

vm_log_level_t vm_log_get_level(void) { return (vm_log_level_t)atomic_load(&g_level); }

int vm_log_level_parse(const char *name, vm_log_level_t *out_level) {
  for (int i = 0; i <= VM_LOG_OFF; i++) {
    if (strcmp(name, k_level_names[i]) == 0) {
      *out_level = (vm_log_level_t)i;
      return 0;
    }
  }
  return -1;
}

const char *vm_log_level_name(vm_log_level_t level) {
  if ((int)level < 0 || level > VM_LOG_OFF) return "?";
  return k_level_names[level];
}

void vm_log_set_sink(vm_log_sink_fn fn, void *user) {
  g_sink = fn;
  g_sink_user = user;
}

void vm_log(vm_log_level_t level, const char *fmt, ...) {
  if ((int)level < atomic_load(&g_level) || level >= VM_LOG_OFF) return;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (g_sink) {
    g_sink(level, msg, g_sink_user);
    return;
  }
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  char line[1200];
  static const char *const upper[] = {"DEBUG", "INFO", "WARN", "ERROR"};
  snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s %s\n",
           tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
           ts.tv_nsec / 1000000, upper[level], msg);
  fputs(line, stderr);
}
