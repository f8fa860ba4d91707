/* Default AddressSanitizer options of every program of a sanitizer build
 * (VMRPC_SANITIZE or VMRPC_FUZZ); linked into executables only, by
 * vmrpc_target_defaults(). ASAN_OPTIONS from the environment still applies
 * on top of these, option by option.
 *
 * intercept_tls_get_addr=0: with it on (ASan's default), the runtime of GCC
 * up to 13 and LLVM up to 16 watches __tls_get_addr and, for a dynamic TLS
 * block whose address is 16 bytes past a 4 KiB boundary, assumes a glibc
 * 2.19-2.24 block header sits in front of it and records the two words
 * before the block as that block's address and size. Since glibc 2.25 there
 * is no such header: the block is a plain malloc chunk, and 1 in 256 of them
 * lands at such an address by chance. At exit LeakSanitizer's stop-the-world
 * tracer then scans the bogus range of that thread and dies ("Tracer caught
 * signal 11 ... LeakSanitizer has encountered a fatal error") after every
 * test passed. PoCL's worker threads take dynamic TLS blocks of the LLVM
 * libraries whenever they compile a kernel, which is why the failure needs
 * a cold PoCL cache and comes and goes with the heap layout.
 *
 * Leak checking loses nothing: glibc >= 2.25 allocates those blocks with
 * malloc and keeps them reachable from the thread's DTV, so LeakSanitizer
 * still scans them as heap. */
const char *__asan_default_options(void);

__attribute__((used, visibility("default"))) const char *__asan_default_options(void) {
  return "intercept_tls_get_addr=0";
}
