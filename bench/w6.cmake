# SPDX-License-Identifier: MIT
# W6 cache benchmark (bench/w6_cache.c). Include this from bench/CMakeLists.txt:
#   include(${CMAKE_CURRENT_SOURCE_DIR}/w6.cmake)
# Needs only twheel and libm; run: ./w6_cache [--keys 1e6] [--csv results/w6.csv]
add_executable(w6_cache ${CMAKE_CURRENT_LIST_DIR}/w6_cache.c)
target_link_libraries(w6_cache PRIVATE twheel_static m)
