# Every external dependency is a Debian package (scripts/install-deps.sh).
# Each is found here once, so a missing one fails at configure time with its
# package name rather than halfway through a build.

# SHA-256 comes from mbedTLS's crypto library, which nng's TLS support
# already pulls in (libnng-dev depends on libmbedtls-dev).
find_path(MBEDCRYPTO_INCLUDE_DIR mbedtls/sha256.h)
find_library(MBEDCRYPTO_LIBRARY mbedcrypto)
if(NOT MBEDCRYPTO_INCLUDE_DIR OR NOT MBEDCRYPTO_LIBRARY)
  message(FATAL_ERROR "mbedTLS crypto not found: run scripts/install-deps.sh (libmbedtls-dev)")
endif()
add_library(vmrpc_dep_mbedcrypto INTERFACE)
target_include_directories(vmrpc_dep_mbedcrypto INTERFACE ${MBEDCRYPTO_INCLUDE_DIR})
target_link_libraries(vmrpc_dep_mbedcrypto INTERFACE ${MBEDCRYPTO_LIBRARY})

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
