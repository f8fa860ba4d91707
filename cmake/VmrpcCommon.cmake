# Flags and helpers shared by every folder of the project.

set(VMRPC_WARNINGS -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes
    -Wno-unused-parameter)
if(VMRPC_WERROR)
  list(APPEND VMRPC_WARNINGS -Werror)
endif()

set(VMRPC_SAN_FLAGS "")
if(VMRPC_SANITIZE)
  set(VMRPC_SAN_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=all
      -fno-omit-frame-pointer)
endif()
if(VMRPC_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "VMRPC_FUZZ needs clang: configure with -DCMAKE_C_COMPILER=clang")
  endif()
  # Instrument everything for coverage; the fuzz targets add -fsanitize=fuzzer.
  list(APPEND VMRPC_SAN_FLAGS -fsanitize=fuzzer-no-link,address,undefined
       -fno-sanitize-recover=all)
  # The same binary whatever folder the tree is in: libFuzzer feeds the
  # operands of comparisons (some of them addresses of strings such as
  # file names) back into its mutations, so a path in the binary would
  # change the deterministic smoke's statistics (scripts/fuzz-ci.sh).
  add_compile_options(-ffile-prefix-map=${PROJECT_SOURCE_DIR}=.
                      -ffile-prefix-map=${PROJECT_BINARY_DIR}=build)
endif()

# vmrpc_target_defaults(TARGET): warnings and sanitizer flags for our own code.
function(vmrpc_target_defaults tgt)
  target_compile_options(${tgt} PRIVATE ${VMRPC_WARNINGS} ${VMRPC_SAN_FLAGS})
  target_compile_definitions(${tgt} PRIVATE _GNU_SOURCE)
  if(VMRPC_SAN_FLAGS)
    target_link_options(${tgt} PRIVATE ${VMRPC_SAN_FLAGS})
    get_target_property(type ${tgt} TYPE)
    if(type STREQUAL "EXECUTABLE")
      # Runtime defaults that keep LeakSanitizer's exit check working with
      # PoCL's threads (see the file).
      target_sources(${tgt} PRIVATE ${PROJECT_SOURCE_DIR}/cmake/sanitizer_defaults.c)
    endif()
  endif()
endfunction()
