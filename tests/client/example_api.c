/* The C API example of README.md, built with the tests so it keeps
 * compiling, and run by tests/client/test_cli_net.c on the example MLP.
 *   client_example_api URL MODEL.vmx INPUT.npy OUTPUT.npy */
#include <stdio.h>

#include "vmrpc/vmclient.h"

#define CHECK(call)                                               \
  do {                                                            \
    vm_status_t st_ = (call);                                     \
    if (st_) {                                                    \
      fprintf(stderr, "%s: %s\n", #call, vm_status_message(st_)); \
      vm_status_free(st_);                                        \
      return 1;                                                   \
    }                                                             \
  } while (0)

int main(int argc, char **argv) {
  if (argc != 5) return 2;
  vmc_conn_t *conn;
  vmc_exec_t exec;
  vmc_vm_t vm;
  vmc_tensor_t x, y;
  vmc_time_result_t t;
  vmc_device_spec_t dev = {"opencl:0", "pooled"};
  CHECK(vmc_connect(argv[1], NULL, &conn));                       /* e.g. tcp://127.0.0.1:9090 */
  CHECK(vmc_upload_file(conn, argv[2], NULL, NULL, &exec, NULL)); /* skipped if cached */
  CHECK(vmc_create_vm(conn, exec, &dev, 1, NULL, &vm));
  CHECK(vmc_npy_read_file(argv[3], &x));
  CHECK(vmc_set_input(conn, vm, "main", 0, &x));        /* copied to the device */
  CHECK(vmc_invoke(conn, vm, "main", 0, NULL));         /* the result stays there */
  CHECK(vmc_get_output(conn, vm, "main", NULL, 0, &y)); /* fetch output 0 */
  CHECK(vmc_npy_write_file(argv[4], &y));
  CHECK(vmc_time_evaluate(conn, vm, "main", NULL, &t)); /* timed on the device */
  printf("median %.3f ms per call\n", t.median_s * 1e3);
  vmc_time_result_free(&t);
  vmc_tensor_free(&x);
  vmc_tensor_free(&y);
  vmc_close(conn); /* ends the session: the agent frees the VM */
  return 0;
}
