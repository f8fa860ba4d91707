# Cross-compiling vmagent (and vmclient) for Android with the NDK: a thin
# wrapper around the NDK's own toolchain file that fixes the ABI and API
# level the project supports and points the dependency search at a prefix
# holding the dependencies built for Android. See README.md ("Android").
#
#   cmake -S . -B build-android \
#     -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-android.cmake \
#     -DANDROID_NDK=$HOME/Android/Sdk/ndk/26.1.10909125 \
#     -DVMRPC_ANDROID_PREFIX=$HOME/vmrpc-android-deps \
#     -DVMRPC_TESTS=OFF -DVMRPC_BENCH=OFF
#   cmake --build build-android --target vmagent vmclient
#
# VMRPC_ANDROID_PREFIX must hold, built with the same NDK, ABI and API level
# (include/, lib/, lib/pkgconfig/, lib/cmake/): nng (with mbedTLS for
# tls+tcp://), mbedTLS, OpenSSL (libcrypto: SHA-256; libssl: the client's
# --tls-pin check; with their libcrypto.pc / libssl.pc), protobuf-c (the
# library; protoc-c runs on the host), CLBlast (its header is used at build time, the library opened at
# run time), and an OpenCL loader to link against: the ICD loader
# (ocl-icd / Khronos OpenCL-ICD-Loader) or a stub libOpenCL.so with the
# device's exports. At run time the device's vendor libOpenCL.so
# (/vendor/lib64 or /system/vendor/lib64) is the one that is loaded.

if(NOT ANDROID_NDK)
  if(DEFINED ENV{ANDROID_NDK_HOME})
    set(ANDROID_NDK $ENV{ANDROID_NDK_HOME})
  elseif(DEFINED ENV{ANDROID_NDK_ROOT})
    set(ANDROID_NDK $ENV{ANDROID_NDK_ROOT})
  endif()
endif()
if(NOT ANDROID_NDK OR NOT EXISTS "${ANDROID_NDK}/build/cmake/android.toolchain.cmake")
  message(FATAL_ERROR "Android NDK not found: pass -DANDROID_NDK=/path/to/ndk (or set "
                      "ANDROID_NDK_HOME); it must contain build/cmake/android.toolchain.cmake")
endif()
if(NOT VMRPC_ANDROID_PREFIX AND DEFINED ENV{VMRPC_ANDROID_PREFIX})
  set(VMRPC_ANDROID_PREFIX $ENV{VMRPC_ANDROID_PREFIX})
endif()

set(ANDROID_ABI arm64-v8a CACHE STRING "Android ABI")
set(ANDROID_PLATFORM android-28 CACHE STRING "Android API level")
# try_compile() projects re-read this file: hand them the same settings.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES ANDROID_NDK VMRPC_ANDROID_PREFIX)

include("${ANDROID_NDK}/build/cmake/android.toolchain.cmake")

if(VMRPC_ANDROID_PREFIX)
  list(APPEND CMAKE_FIND_ROOT_PATH "${VMRPC_ANDROID_PREFIX}")
  list(APPEND CMAKE_PREFIX_PATH "${VMRPC_ANDROID_PREFIX}")
  set(ENV{PKG_CONFIG_LIBDIR} "${VMRPC_ANDROID_PREFIX}/lib/pkgconfig")
  set(ENV{PKG_CONFIG_PATH} "")
  set(ENV{PKG_CONFIG_SYSROOT_DIR} "")
endif()
# protoc-c is a host program.
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
