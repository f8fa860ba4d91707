/* A small leveled logger shared by the agent, the client and the VM.
 *
 * Messages at or above the current level go to the sink (stderr by default)
 * as one line: "<time> <LEVEL> <message>". Thread-safe: each line is written
 * with a single call to the sink.
 */
#ifndef VM_LOG_H
#define VM_LOG_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum vm_log_level {
  VM_LOG_DEBUG = 0,
  VM_LOG_INFO = 1,
  VM_LOG_WARN = 2,
  VM_LOG_ERROR = 3,
  VM_LOG_OFF = 4,
} vm_log_level_t;

/* Receives one formatted line without trailing newline. */
typedef void (*vm_log_sink_fn)(vm_log_level_t level, const char *line, void *user);

/* Sets the minimum level that is emitted. Default: VM_LOG_WARN. */
void vm_log_set_level(vm_log_level_t level);
vm_log_level_t vm_log_get_level(void);

/* Parses "debug", "info", "warn", "error", "off". Returns 0 or -1. */
int vm_log_level_parse(const char *name, vm_log_level_t *out_level);
const char *vm_log_level_name(vm_log_level_t level);

/* Replaces the sink; NULL restores stderr. */
void vm_log_set_sink(vm_log_sink_fn fn, void *user);

void vm_log(vm_log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define VM_LOGD(...) vm_log(VM_LOG_DEBUG, __VA_ARGS__)
#define VM_LOGI(...) vm_log(VM_LOG_INFO, __VA_ARGS__)
#define VM_LOGW(...) vm_log(VM_LOG_WARN, __VA_ARGS__)
#define VM_LOGE(...) vm_log(VM_LOG_ERROR, __VA_ARGS__)

#ifdef __cplusplus
}
#endif
#endif /* VM_LOG_H */
