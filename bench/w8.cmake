# SPDX-License-Identifier: MIT
# W8 cache benchmark (bench/w8_cache.c); the peers in bench/peers/ are built
# and run by scripts/bench-w8-cache (javac, go), not by CMake.
add_executable(w8_cache ${CMAKE_CURRENT_LIST_DIR}/w8_cache.c)
target_link_libraries(w8_cache PRIVATE twheel_static m)
