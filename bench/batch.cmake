# SPDX-License-Identifier: MIT
# Batched keyed calls against single calls (tw_tasks_*_many).
# Run: batch_keyed [N, default 1e6] [batch, default 256]
add_executable(batch_keyed ${CMAKE_CURRENT_LIST_DIR}/batch_keyed.c)
target_link_libraries(batch_keyed PRIVATE twheel_static)
