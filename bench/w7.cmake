# SPDX-License-Identifier: MIT
# W7 durable (bench/WORKLOADS.md): the Redis layer against a polling sorted
# set on one redis-server started by the test fixture (tests/redis/). Built
# when TWHEEL_BUILD_REDIS is on (the layer, target twheel_redis).
# Hook it in from bench/CMakeLists.txt with
#   include(${CMAKE_CURRENT_SOURCE_DIR}/w7.cmake)
# Run: scripts/bench-redis (or w7_redis --help).
if(TWHEEL_BUILD_REDIS AND TARGET twheel_redis)
  set(TWHEEL_W7_RFX ${PROJECT_SOURCE_DIR}/tests/redis)
  add_executable(w7_worker ${TWHEEL_W7_RFX}/redis_worker.c)
  target_link_libraries(w7_worker PRIVATE twheel_redis ${TWHEEL_HIREDIS_LIBRARY} Threads::Threads)
  target_include_directories(w7_worker PRIVATE ${PROJECT_SOURCE_DIR}/src ${TWHEEL_HIREDIS_INCLUDE_DIR})
  add_executable(w7_redis ${CMAKE_CURRENT_LIST_DIR}/w7_redis.c
    ${TWHEEL_W7_RFX}/fixture.c ${TWHEEL_W7_RFX}/harness.c)
  target_include_directories(w7_redis PRIVATE ${TWHEEL_W7_RFX} ${PROJECT_SOURCE_DIR}/include
    ${PROJECT_SOURCE_DIR}/src ${TWHEEL_HIREDIS_INCLUDE_DIR})
  target_link_libraries(w7_redis PRIVATE twheel_redis ${TWHEEL_HIREDIS_LIBRARY} Threads::Threads m)
  target_compile_definitions(w7_redis PRIVATE W7_WORKER_PATH="$<TARGET_FILE:w7_worker>")
  if(TWHEEL_TLS_ON) # the TLS rows (without TLS in the layer: as --no-tls)
    target_compile_definitions(w7_redis PRIVATE W7_TLS)
  endif()
  add_dependencies(w7_redis w7_worker)
  # what one START call costs Redis: per call and per task started
  add_executable(w7_start ${CMAKE_CURRENT_LIST_DIR}/w7_start.c ${TWHEEL_W7_RFX}/fixture.c)
  target_include_directories(w7_start PRIVATE ${TWHEEL_W7_RFX} ${PROJECT_SOURCE_DIR}/include
    ${PROJECT_SOURCE_DIR}/src ${TWHEEL_HIREDIS_INCLUDE_DIR})
  target_link_libraries(w7_start PRIVATE twheel_redis ${TWHEEL_HIREDIS_LIBRARY} Threads::Threads m)
  # what a task's whole life costs Redis under the layer's schema, a batch
  # lease and a poller (a probe of a design, not the layer's own scripts)
  add_executable(w7_schemas ${CMAKE_CURRENT_LIST_DIR}/w7_schemas.c ${TWHEEL_W7_RFX}/fixture.c)
  target_include_directories(w7_schemas PRIVATE ${TWHEEL_W7_RFX} ${PROJECT_SOURCE_DIR}/include
    ${PROJECT_SOURCE_DIR}/src ${TWHEEL_HIREDIS_INCLUDE_DIR})
  target_link_libraries(w7_schemas PRIVATE ${TWHEEL_HIREDIS_LIBRARY} Threads::Threads m)
endif()
