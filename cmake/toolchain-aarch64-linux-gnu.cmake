# Cross-compiling for 64-bit Arm Linux (aarch64) on Debian with the
# gcc-aarch64-linux-gnu cross compiler and multiarch (:arm64) -dev packages,
# which install headers and libraries under /usr/include/aarch64-linux-gnu
# and /usr/lib/aarch64-linux-gnu (no separate sysroot).
# scripts/cross-aarch64.sh installs them and uses this file:
#   cmake -S . -B build-aarch64 \
#     -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64-linux-gnu.cmake \
#     -DVMRPC_TESTS=OFF -DVMRPC_BENCH=OFF
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(VMRPC_CROSS_TRIPLE aarch64-linux-gnu)

set(CMAKE_C_COMPILER ${VMRPC_CROSS_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${VMRPC_CROSS_TRIPLE}-g++)
# find_library / find_package look in lib/aarch64-linux-gnu of each prefix.
set(CMAKE_LIBRARY_ARCHITECTURE ${VMRPC_CROSS_TRIPLE})

# Build tools (protoc-c) are the host's; libraries and headers the target's.
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)

# pkg-config must read the target's .pc files, never the host's.
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/${VMRPC_CROSS_TRIPLE}/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
