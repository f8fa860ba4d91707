# Every external dependency is a Debian package (scripts/install-deps.sh).
# Each is found here once, so a missing one fails at configure time with its
# package name rather than halfway through a build.

# SHA-256 (executable identity, program cache keys) comes from OpenSSL's
# libcrypto, which uses the CPU's SHA instructions; mbedTLS 2.28 (pulled in
# by nng's TLS) has only portable code, about 7x slower here.
pkg_check_modules(LIBCRYPTO REQUIRED IMPORTED_TARGET libcrypto)
add_library(vmrpc_dep_mbedcrypto INTERFACE) # name kept: the crypto dependency
target_link_libraries(vmrpc_dep_mbedcrypto INTERFACE PkgConfig::LIBCRYPTO)

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
pkg_check_modules(CLBLAST REQUIRED IMPORTED_TARGET clblast)

if(VMRPC_TESTS)
  pkg_check_modules(CMOCKA REQUIRED IMPORTED_TARGET cmocka)
endif()
