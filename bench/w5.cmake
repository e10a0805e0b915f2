# SPDX-License-Identifier: MIT
# W5 keyed benchmark (docs/workloads.md): tw_tasks single-threaded and
# tw_runner with 1 and 2 producers. Hook it in from bench/CMakeLists.txt with
#   include(${CMAKE_CURRENT_SOURCE_DIR}/w5.cmake)
# Run: w5_keyed [seconds per runner case, default 5] [max N, default 1e6]
add_executable(w5_keyed ${CMAKE_CURRENT_LIST_DIR}/w5_keyed.c)
target_link_libraries(w5_keyed PRIVATE twheel_static Threads::Threads)
