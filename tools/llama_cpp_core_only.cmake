# Included by CMake right after llama.cpp's project() call when llama-cpp-python builds from
# source (the Makefile passes -DCMAKE_PROJECT_llama.cpp_INCLUDE=<this file>).
#
# llama-cpp-python forces LLAMA_BUILD_COMMON on, which compiles llama.cpp's `common` library and
# cpp-httplib: half of the build's CPU time (about 270 of 530 core-seconds), for libraries the
# Python bindings never load (only libllama, libggml* and, with LLAVA_BUILD, libmtmd are used).
# The project builds with LLAVA_BUILD=OFF, so nothing needs them: switch the option off again
# before llama.cpp's CMakeLists reads it.
set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama: build common utils library" FORCE)
