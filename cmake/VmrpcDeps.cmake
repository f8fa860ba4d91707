# Every external dependency is a Debian package (scripts/install-deps.sh).
# Each is found here once, so a missing one fails at configure time with its
# package name rather than halfway through a build.

# SHA-256 (executable identity, program cache keys) comes from OpenSSL's
# libcrypto, which uses the CPU's SHA instructions; mbedTLS 2.28 (pulled in
# by nng's TLS) has only portable code, about 7x slower here.
pkg_check_modules(LIBCRYPTO REQUIRED IMPORTED_TARGET libcrypto)
add_library(vmrpc_dep_crypto INTERFACE)
target_link_libraries(vmrpc_dep_crypto INTERFACE PkgConfig::LIBCRYPTO)
# libssl: tls+tcp:// (transport/src/tls.c) and the client's --tls-pin
# probe.
pkg_check_modules(LIBSSL REQUIRED IMPORTED_TARGET libssl)

find_package(nng CONFIG QUIET)
if(NOT nng_FOUND)
  message(FATAL_ERROR "nng not found: run scripts/install-deps.sh (libnng-dev)")
endif()

pkg_check_modules(PROTOBUFC REQUIRED IMPORTED_TARGET libprotobuf-c)
find_program(PROTOC_C NAMES protoc-c)
if(NOT PROTOC_C)
  message(FATAL_ERROR "protoc-c not found: run scripts/install-deps.sh (protobuf-c-compiler)")
endif()

pkg_check_modules(OPENCL REQUIRED IMPORTED_TARGET OpenCL)
# CLBlast: only its header at build time. The library is opened on the
# first GEMM that wants it (opencl/src/cl_ops_gemm.c): it and the C++
# runtime it pulls in cost an idle agent ~4.6 MiB of its ~11 MiB, and most
# runs (CPU devices, models without GEMM) never call it. Its run-time name
# is the SONAME of the library pkg-config finds.
pkg_check_modules(CLBLAST REQUIRED clblast)
set(VMRPC_CLBLAST_SONAME "libclblast.so.1")
find_library(VMRPC_CLBLAST_LIBRARY NAMES clblast HINTS ${CLBLAST_LIBRARY_DIRS})
if(VMRPC_CLBLAST_LIBRARY AND CMAKE_OBJDUMP)
  execute_process(COMMAND ${CMAKE_OBJDUMP} -p ${VMRPC_CLBLAST_LIBRARY}
                  OUTPUT_VARIABLE _clblast_dump ERROR_QUIET)
  if(_clblast_dump MATCHES "SONAME +([^ \n]+)")
    set(VMRPC_CLBLAST_SONAME "${CMAKE_MATCH_1}")
  endif()
endif()

if(VMRPC_TESTS)
  pkg_check_modules(CMOCKA REQUIRED IMPORTED_TARGET cmocka)
endif()
