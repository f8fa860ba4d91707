/* vmrpc-gen-model: writes an example model's executable and, on request,
 * its deterministic input, its reference output and the planner figures.
 *
 *   vmrpc-gen-model mlp|cnn [--seed N] [--out FILE.vmx] [--input FILE]
 *                   [--expected FILE] [--npy] [--plan]
 *
 * --input/--expected are raw little-endian float32, or NumPy .npy files
 * (with the model's shapes) with --npy or when the name ends in ".npy".
 *
 * Exit codes: 0 ok, 1 the model could not be generated, 2 usage, 4 I/O.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vm/executable.h"
#include "vmexamples/models.h"

enum { EXIT_OK = 0, EXIT_GEN = 1, EXIT_USAGE = 2, EXIT_IO = 4 };

static void usage(FILE *f) {
  fprintf(f,
          "usage: vmrpc-gen-model mlp|cnn [--seed N] [--out FILE.vmx] [--input FILE]\n"
          "                       [--expected FILE] [--npy] [--plan]\n"
          "\n"
          "Writes an example model (weights from a seeded PRNG) as a .vmx executable.\n"
          "  --seed N           PRNG seed (default 1)\n"
          "  --out FILE         executable to write (default MODEL.vmx)\n"
          "  --input FILE       also write the deterministic input for the seed\n"
          "                     (raw little-endian float32, or .npy: see --npy)\n"
          "  --expected FILE    also write the host reference output for that input\n"
          "                     (raw little-endian float32, or .npy: see --npy)\n"
          "  --npy              write --input and --expected as NumPy .npy files with\n"
          "                     the model's shapes (also chosen by a .npy name)\n"
          "  --plan             print the memory planner figures as one JSON line\n"
          "Exit codes: 0 ok, 1 generation failed, 2 usage, 4 I/O error.\n");
}

/* Matches "--name VALUE" or "--name=VALUE"; advances *i past a separate
 * value. Returns 1 and sets *val on a match, -1 if the value is missing. */
static int opt_value(int argc, char **argv, int *i, const char *name, const char **val) {
  size_t n = strlen(name);
  const char *a = argv[*i];
  if (strncmp(a, name, n) != 0) return 0;
  if (a[n] == '=') {
    *val = a + n + 1;
    return 1;
  }
  if (a[n] != '\0') return 0;
  if (*i + 1 >= argc) return -1;
  *val = argv[++*i];
  return 1;
}

static int parse_seed(const char *s, uint64_t *out) {
  if (!s || !*s || *s == '-' || *s == '+') return -1;
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end) return -1;
  *out = (uint64_t)v;
  return 0;
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Writes n float32 values of the given shape as a version 1.0 .npy file
 * (little-endian '<f4', C order), atomically. */
static vm_status_t write_f32_npy(const char *path, const float *data, uint32_t ndim,
                                 const int64_t *shape, size_t n) {
  char hdr[256];
  int k = snprintf(hdr, sizeof(hdr), "{'descr': '<f4', 'fortran_order': False, 'shape': (");
  for (uint32_t i = 0; i < ndim; i++)
    k += snprintf(hdr + k, sizeof(hdr) - (size_t)k, "%lld%s", (long long)shape[i],
                  ndim == 1      ? ","
                  : i + 1 < ndim ? ", "
                                 : "");
  k += snprintf(hdr + k, sizeof(hdr) - (size_t)k, "), }");
  /* magic (6) + version (2) + header length (2) + header, padded with
   * spaces to a multiple of 64 and ended by a newline. */
  size_t total_hdr = 10 + (size_t)k + 1;
  size_t padded = (total_hdr + 63) / 64 * 64;
  size_t size = padded + n * sizeof(float);
  uint8_t *buf = malloc(size);
  if (!buf) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory for %s", path);
  memcpy(buf, "\x93NUMPY\x01\x00", 8);
  uint16_t hl = (uint16_t)(padded - 10);
  buf[8] = (uint8_t)(hl & 0xff);
  buf[9] = (uint8_t)(hl >> 8);
  memcpy(buf + 10, hdr, (size_t)k);
  memset(buf + 10 + k, ' ', padded - 10 - (size_t)k);
  buf[padded - 1] = '\n';
  for (size_t i = 0; i < n; i++) {
    uint32_t w;
    memcpy(&w, &data[i], 4);
    uint8_t *p = buf + padded + i * 4;
    p[0] = (uint8_t)w;
    p[1] = (uint8_t)(w >> 8);
    p[2] = (uint8_t)(w >> 16);
    p[3] = (uint8_t)(w >> 24);
  }
  vm_status_t st = vm_write_file_atomic(path, buf, size);
  free(buf);
  return st;
}

/* Writes a float32 tensor raw or as .npy. */
static vm_status_t write_f32(const char *path, int npy, const float *data, uint32_t ndim,
                             const int64_t *shape, size_t n) {
  if (npy || ends_with(path, ".npy")) return write_f32_npy(path, data, ndim, shape, n);
  return vmex_write_f32_raw(path, data, n);
}

/* Reports a failed status on stderr and frees it. */
static int fail(vm_status_t st, const char *what, int code) {
  fprintf(stderr, "vmrpc-gen-model: %s: %s: %s\n", what, vm_code_name(vm_status_code(st)),
          vm_status_message(st));
  vm_status_free(st);
  return code;
}

int main(int argc, char **argv) {
  const char *model_name = NULL, *out_path = NULL, *input_path = NULL, *expected_path = NULL;
  const char *seed_str = NULL;
  int plan = 0, npy = 0;
  for (int i = 1; i < argc; i++) {
    const char *v = NULL;
    int r;
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      usage(stdout);
      return EXIT_OK;
    }
    if (strcmp(argv[i], "--plan") == 0) {
      plan = 1;
      continue;
    }
    if (strcmp(argv[i], "--npy") == 0) {
      npy = 1;
      continue;
    }
    if ((r = opt_value(argc, argv, &i, "--seed", &v)) != 0) {
      if (r < 0) goto missing;
      seed_str = v;
      continue;
    }
    if ((r = opt_value(argc, argv, &i, "--out", &v)) != 0) {
      if (r < 0) goto missing;
      out_path = v;
      continue;
    }
    if ((r = opt_value(argc, argv, &i, "--input", &v)) != 0) {
      if (r < 0) goto missing;
      input_path = v;
      continue;
    }
    if ((r = opt_value(argc, argv, &i, "--expected", &v)) != 0) {
      if (r < 0) goto missing;
      expected_path = v;
      continue;
    }
    if (argv[i][0] == '-' || model_name) {
      fprintf(stderr, "vmrpc-gen-model: unexpected argument '%s'\n", argv[i]);
      usage(stderr);
      return EXIT_USAGE;
    }
    model_name = argv[i];
    continue;
  missing:
    fprintf(stderr, "vmrpc-gen-model: %s needs a value\n", argv[i]);
    usage(stderr);
    return EXIT_USAGE;
  }
  vmex_model_t model;
  if (!model_name || vmex_model_parse(model_name, &model) != 0) {
    fprintf(stderr, "vmrpc-gen-model: %s; expected mlp or cnn\n",
            model_name ? "unknown model" : "no model given");
    usage(stderr);
    return EXIT_USAGE;
  }
  uint64_t seed = 1;
  if (seed_str && parse_seed(seed_str, &seed) != 0) {
    fprintf(stderr, "vmrpc-gen-model: --seed '%s' is not an unsigned decimal integer\n", seed_str);
    return EXIT_USAGE;
  }
  char default_out[32];
  if (!out_path) {
    snprintf(default_out, sizeof(default_out), "%s.vmx", vmex_model_name(model));
    out_path = default_out;
  }

  vm_executable_t *exec = NULL;
  vmex_plan_report_t rep;
  vm_status_t st = vmex_build(model, seed, &exec, &rep);
  if (st) return fail(st, "generating the model", EXIT_GEN);
  st = vm_executable_write_file(exec, out_path);
  vm_executable_free(exec);
  if (st) return fail(st, out_path, EXIT_IO);

  if (input_path || expected_path) {
    vmex_io_shape_t io;
    vmex_io_shape(model, &io);
    float *x = malloc(io.in_numel * sizeof(float));
    float *y = malloc(io.out_numel * sizeof(float));
    int code = EXIT_OK;
    if (!x || !y) {
      fprintf(stderr, "vmrpc-gen-model: out of host memory\n");
      code = EXIT_GEN;
      goto io_done;
    }
    vmex_make_input(seed, x, io.in_numel);
    if (input_path &&
        (st = write_f32(input_path, npy, x, io.in_ndim, io.in_shape, io.in_numel)) != NULL) {
      code = fail(st, input_path, EXIT_IO);
      goto io_done;
    }
    if (expected_path) {
      if ((st = vmex_reference(model, seed, x, y)) != NULL) {
        code = fail(st, "computing the reference", EXIT_GEN);
        goto io_done;
      }
      if ((st = write_f32(expected_path, npy, y, io.out_ndim, io.out_shape, io.out_numel)) !=
          NULL) {
        code = fail(st, expected_path, EXIT_IO);
        goto io_done;
      }
    }
  io_done:
    free(x);
    free(y);
    if (code != EXIT_OK) return code;
  }

  if (plan) {
    double ratio =
        rep.unplanned_bytes ? (double)rep.planned_bytes / (double)rep.unplanned_bytes : 0.0;
    printf("{\"model\":\"%s\",\"seed\":%" PRIu64 ",\"planned_bytes\":%" PRIu64
           ",\"unplanned_bytes\":%" PRIu64 ",\"live_peak_bytes\":%" PRIu64
           ",\"num_storages\":%u,\"ratio\":%.4f}\n",
           vmex_model_name(model), seed, rep.planned_bytes, rep.unplanned_bytes,
           rep.live_peak_bytes, rep.num_storages, ratio);
  }
  if (fflush(stdout) != 0) return EXIT_IO;
  return EXIT_OK;
}
