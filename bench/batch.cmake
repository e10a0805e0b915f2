# SPDX-License-Identifier: MIT
# Batched keyed calls against single calls (tw_tasks_*_many).
# Run: batch_keyed [N, default 1e6] [batch, default 256]
add_executable(batch_keyed ${CMAKE_CURRENT_LIST_DIR}/batch_keyed.c)
target_link_libraries(batch_keyed PRIVATE twheel_static)
# Lazy against eager re-arm (config.eager_rearm), for callgrind counts.
# Run: eager_keyed [N, default 1e5] [rounds, default 16] [--eager] [--batched]
add_executable(eager_keyed ${CMAKE_CURRENT_LIST_DIR}/eager_keyed.c)
target_link_libraries(eager_keyed PRIVATE twheel_static)
# tw_tasks' index probe lengths, grown against sized up front (white-box: it
# includes src/tasks/internal.h and builds on the sources the keyed layer needs).
# Run: tasks_probe [--seq]
file(GLOB twheel_core_sources ${PROJECT_SOURCE_DIR}/src/core/*.c ${PROJECT_SOURCE_DIR}/src/tasks/*.c)
add_executable(tasks_probe ${CMAKE_CURRENT_LIST_DIR}/tasks_probe.c
  ${PROJECT_SOURCE_DIR}/src/common/common.c ${PROJECT_SOURCE_DIR}/src/common/bigmem.c
  ${twheel_core_sources})
target_include_directories(tasks_probe PRIVATE ${PROJECT_SOURCE_DIR}/include
  ${PROJECT_SOURCE_DIR}/src)

# Heartbeats on tw_runner (bench/runner_beats.c): the tick thread's dearest
# pass with lazy or eager moves.
# Run: runner_beats [N] [SECONDS] [TICK_US] [--eager] [--burst]
add_executable(runner_beats ${CMAKE_CURRENT_LIST_DIR}/runner_beats.c)
target_link_libraries(runner_beats PRIVATE twheel_static Threads::Threads)
