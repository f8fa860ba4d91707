/* The agent's memory: resident size when idle, and whether a steady stream
 * of invocations makes it grow.
 *
 * A vmagent child with its default devices (every OpenCL device, then cpu)
 * is started and left idle: rss_idle_kib (VmRSS of /proc/PID/status; its
 * anonymous part, RssAnon, separately: the rest are pages of shared
 * libraries, which the kernel can drop and share with other processes).
 * A second child serving only the cpu device gives rss_idle_cpu_only_kib.
 * Then, on the first child, the example CNN runs `cycles` times (default
 * 1000) on opencl:0 (cpu when the agent has no OpenCL device): SetInput of
 * its input, Invoke, GetOutput of its result, each cycle. The baseline is
 * the same agent after the first 10% of the cycles (warm: programs built,
 * pools filled):
 *   rss_warm_kib, rss_after_kib   VmRSS after 10% and after all cycles
 *   rss_growth_kib                after - warm (aim: no growth)
 *   rss_growth_ratio              after / warm
 *   device_allocs_delta           device allocations of the VM's allocators
 *                                 (Stats) over the last 90% of the cycles:
 *                                 0 with the pooled allocator
 *
 * Usage: bench_memory [cycles]   (100..100000, default 1000). Needs
 * VMRPC_BUILD_DIR (defaults to the directory above this program). Prints
 * one JSON object.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent_proc.h"
#include "vm/executable.h"
#include "vm/vm.h"
#include "vmrpc/vmclient.h"
#include "vmexamples/models.h"

#define SEED 1u

static void check(vm_status_t st, const char *what) {
  if (!st) return;
  fprintf(stderr, "bench_memory: %s: %s: %s\n", what, vm_code_name(vm_status_code(st)),
          vm_status_message(st));
  exit(1);
}

/* A "Key:   N kB" line of /proc/PID/status, in KiB (-1 if absent). */
static long status_kib(pid_t pid, const char *key) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[256];
  long v = -1;
  size_t kl = strlen(key);
  while (fgets(line, sizeof(line), f)) {
    if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
      v = strtol(line + kl + 1, NULL, 10);
      break;
    }
  }
  fclose(f);
  return v;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static void set_build_dir(void) {
  if (agent_proc_set_build_dir() != 0) exit(1);
}

/* Device allocations of every allocator of the session's VMs. */
static uint64_t device_allocs(vmc_conn_t *c) {
  vmc_stats_t s;
  check(vmc_stats(c, &s), "stats");
  uint64_t n = 0;
  for (uint32_t i = 0; i < s.num_allocators; i++) n += s.allocators[i].device_allocs;
  vmc_stats_free(&s);
  return n;
}

typedef struct idle_rss {
  long rss_kib, anon_kib, file_kib;
  int threads;
} idle_rss_t;

/* Starts an agent, waits until it is idle, reads its memory. The agent
 * stays running (in *p) when keep is set. */
static void idle_agent(agent_proc_t *p, const char *const *args, idle_rss_t *out, int keep) {
  if (agent_proc_start(p, args) != 0) {
    fprintf(stderr, "bench_memory: could not start vmagent\n");
    exit(1);
  }
  /* It printed its line after opening the devices; give its threads a
   * moment to settle into their waits. */
  sleep_ms(300);
  out->rss_kib = status_kib(p->pid, "VmRSS");
  out->anon_kib = status_kib(p->pid, "RssAnon");
  out->file_kib = status_kib(p->pid, "RssFile");
  out->threads = (int)status_kib(p->pid, "Threads");
  if (!keep && agent_proc_stop(p) != 0) {
    fprintf(stderr, "bench_memory: vmagent did not exit cleanly\n");
    exit(1);
  }
}

int main(int argc, char **argv) {
  int cycles = 1000;
  if (argc > 1) {
    char *end;
    long v = strtol(argv[1], &end, 10);
    if (*end || v < 100 || v > 100000) {
      fprintf(stderr, "usage: bench_memory [cycles(100..100000)]\n");
      return 2;
    }
    cycles = (int)v;
  }
  set_build_dir();
  char cache[PATH_MAX + 32];
  snprintf(cache, sizeof(cache), "%s/test-cache", getenv("VMRPC_BUILD_DIR"));

  /* Idle, cpu device only. */
  agent_proc_t cpu_agent;
  idle_rss_t cpu_idle;
  const char *cpu_args[] = {"--device", "cpu", "--cache-dir", cache, NULL};
  idle_agent(&cpu_agent, cpu_args, &cpu_idle, 0);

  /* Idle, default devices; this one then runs the cycles. */
  agent_proc_t agent;
  idle_rss_t idle;
  /* the CNN carries a kernel (cl.kernel): allowed for this trusted run */
  const char *args[] = {"--cache-dir", cache, "--kernels", "allow", NULL};
  idle_agent(&agent, args, &idle, 1);

  vmc_conn_t *c;
  check(vmc_connect(agent.url, NULL, &c), "connecting");
  vmc_info_t info;
  vmc_info(c, &info);
  const char *sel = "cpu";
  const char *dev_name = "cpu";
  for (uint32_t i = 0; i < info.num_devices; i++) {
    if (strcmp(info.devices[i].selector, "opencl:0") == 0) {
      sel = "opencl:0";
      dev_name = info.devices[i].name;
    }
  }

  vm_executable_t *exec;
  check(vmex_build_cnn(SEED, NULL, &exec, NULL), "building the CNN");
  uint8_t *bytes;
  size_t nbytes;
  check(vm_executable_write(exec, &bytes, &nbytes), "serialising the CNN");
  vm_executable_free(exec);
  vmc_exec_t ex;
  check(vmc_upload_memory(c, bytes, nbytes, NULL, NULL, &ex, NULL), "upload");
  free(bytes);
  vmc_device_spec_t spec = {sel, "pooled"};
  vmc_vm_t vm;
  check(vmc_create_vm(c, ex, &spec, 1, "bytecode", &vm), "create VM");

  vmex_io_shape_t io;
  vmex_io_shape(VMEX_MODEL_CNN, &io);
  float *x = malloc(io.in_numel * sizeof(float));
  float *y = malloc(io.out_numel * sizeof(float));
  if (!x || !y) return 1;
  vmex_make_input(SEED, x, io.in_numel);
  vmc_tensor_t xt;
  check(vmc_tensor_wrap(VM_F32, io.in_ndim, io.in_shape, x, &xt), "wrap");

  int warm_at = cycles / 10;
  long rss_warm = 0, anon_warm = 0;
  uint64_t allocs_warm = 0;
  uint64_t t0 = vm_now_ns(), t_warm = 0;
  for (int i = 0; i < cycles; i++) {
    if (i == warm_at) {
      rss_warm = status_kib(agent.pid, "VmRSS");
      anon_warm = status_kib(agent.pid, "RssAnon");
      allocs_warm = device_allocs(c);
      t_warm = vm_now_ns();
    }
    check(vmc_set_input(c, vm, "main", 0, &xt), "set_input");
    check(vmc_invoke(c, vm, "main", 0, NULL), "invoke");
    check(vmc_get_output_into(c, vm, "main", NULL, 0, y, io.out_numel * sizeof(float), NULL),
          "get_output");
  }
  uint64_t t_end = vm_now_ns();
  long rss_after = status_kib(agent.pid, "VmRSS");
  long anon_after = status_kib(agent.pid, "RssAnon");
  uint64_t allocs_after = device_allocs(c);

  /* The result must still be the model's: a leak hunt on wrong output
   * would prove nothing. */
  float *ref = malloc(io.out_numel * sizeof(float));
  if (!ref) return 1;
  check(vmex_reference_cnn(SEED, NULL, x, ref), "reference");
  double max_err = 0;
  for (size_t i = 0; i < io.out_numel; i++) {
    double e = y[i] - ref[i];
    if (e < 0) e = -e;
    if (e > max_err) max_err = e;
  }
  free(ref);
  if (max_err > 1e-3) {
    fprintf(stderr, "bench_memory: the CNN's output is off by %g\n", max_err);
    return 1;
  }

  check(vmc_free_vm(c, vm), "free VM");
  check(vmc_free_exec(c, ex), "free exec");
  vmc_close(c);
  int rc = agent_proc_stop(&agent);
  free(x);
  free(y);

  double cycle_ms = (double)(t_end - t_warm) / 1e6 / (cycles - warm_at);
  printf(
      "{\"bench\":\"memory\",\"device\":\"%s\",\"device_name\":\"%s\",\"cycles\":%d,"
      "\"warm_cycles\":%d,\"cycle_ms\":%.3f,\"setup_and_warm_s\":%.3f,",
      sel, dev_name, cycles, warm_at, cycle_ms, (double)(t_warm - t0) / 1e9);
  printf(
      "\"rss_idle_kib\":%ld,\"rss_idle_anon_kib\":%ld,\"rss_idle_file_kib\":%ld,"
      "\"idle_threads\":%d,\"rss_idle_cpu_only_kib\":%ld,\"rss_idle_cpu_only_anon_kib\":%ld,"
      "\"rss_idle_cpu_only_file_kib\":%ld,",
      idle.rss_kib, idle.anon_kib, idle.file_kib, idle.threads, cpu_idle.rss_kib, cpu_idle.anon_kib,
      cpu_idle.file_kib);
  printf(
      "\"rss_warm_kib\":%ld,\"rss_after_kib\":%ld,\"rss_growth_kib\":%ld,"
      "\"rss_growth_ratio\":%.4f,\"anon_warm_kib\":%ld,\"anon_after_kib\":%ld,"
      "\"device_allocs_warm\":%llu,\"device_allocs_after\":%llu,\"device_allocs_delta\":%llu,"
      "\"agent_exit\":%d}\n",
      rss_warm, rss_after, rss_after - rss_warm, (double)rss_after / (double)rss_warm, anon_warm,
      anon_after, (unsigned long long)allocs_warm, (unsigned long long)allocs_after,
      (unsigned long long)(allocs_after - allocs_warm), rc);
  return rc == 0 ? 0 : 1;
}
