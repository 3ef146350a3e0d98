# Included by CMake after each project() of llama.cpp's build: llama-cpp-sys-2 passes every
# CMAKE_* variable of the environment on to CMake, and `.cargo/config.toml` names this file as
# CMAKE_PROJECT_INCLUDE. llama-cpp-sys-2 asks for llama.cpp's `common` library (its default
# feature, which llama-cpp-2 does not turn off); nothing here links it (JSON-schema outputs are
# sampled through llguidance), and it was half of llama.cpp's build.
set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama.cpp's common library: not linked" FORCE)
