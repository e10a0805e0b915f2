# SPDX-License-Identifier: MIT
# W8, the runner's half: tw_runner with 1e6 keys pending and P
# producers. scripts/bench-w8-runner runs it beside the Go peer.
# Run: w8_runner SECONDS PRODUCERS [SHARDS, or -1 for 8 per producer]
add_executable(w8_runner ${CMAKE_CURRENT_LIST_DIR}/w8_runner.c)
target_link_libraries(w8_runner PRIVATE twheel_static Threads::Threads)

# W8 cache benchmark (bench/w8_cache.c); the peers in bench/peers/ are built
# and run by scripts/bench-w8-cache (javac, go), not by CMake.
add_executable(w8_cache ${CMAKE_CURRENT_LIST_DIR}/w8_cache.c)
target_link_libraries(w8_cache PRIVATE twheel_static m)

# W8, many instances: 1,000 runners and 1,000 caches on one shared clock and
# pool (threads, memory per instance, idle CPU), against runners with their
# own tick threads. Run: w8_many [--n N] [--pool-threads T].
add_executable(w8_many ${CMAKE_CURRENT_LIST_DIR}/w8_many.c)
target_link_libraries(w8_many PRIVATE twheel_static Threads::Threads)
