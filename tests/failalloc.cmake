# Allocation-failure injection, tests/failalloc/ (see failalloc.h): the program's own malloc, calloc,
# realloc, strdup, strndup and free go through counting wrappers (-Wl,--wrap: the shared libraries' allocations are not
# touched), and the N-th after arming fails.
set(PDR_FAILALLOC_WRAP "-Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=strdup,--wrap=strndup,--wrap=free")
add_library(pdr_failalloc OBJECT ${CMAKE_CURRENT_SOURCE_DIR}/failalloc/failalloc.c)
# One room, both engines in this process, failing the N-th allocation for every N of a clean room.
add_executable(test_failalloc_room ${CMAKE_CURRENT_SOURCE_DIR}/failalloc/test_failalloc_room.c
                                   $<TARGET_OBJECTS:pdr_failalloc>)
target_include_directories(test_failalloc_room PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/failalloc ${CMAKE_CURRENT_SOURCE_DIR}/integration)
target_link_libraries(test_failalloc_room PRIVATE pdr_transport pdr_common Threads::Threads)
target_link_options(test_failalloc_room PRIVATE ${PDR_FAILALLOC_WRAP})
add_test(NAME test_failalloc_room COMMAND test_failalloc_room)
set_tests_properties(test_failalloc_room PROPERTIES TIMEOUT 300 LABELS faults)

# pdrouter with the same wrappers: one PD request through the router to pdsim workers, the N-th allocation
# after SIGUSR2 failing, for every N of a clean request (test_failalloc_router.py).
add_executable(pdrouter_failalloc ${PROJECT_SOURCE_DIR}/router/main.c $<TARGET_OBJECTS:pdr_failalloc>)
target_compile_definitions(pdrouter_failalloc PRIVATE PDR_VERSION="${PROJECT_VERSION}")
target_link_libraries(pdrouter_failalloc PRIVATE pdr_router)
target_link_options(pdrouter_failalloc PRIVATE ${PDR_FAILALLOC_WRAP} -rdynamic)
add_test(NAME router_failalloc COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/failalloc/test_failalloc_router.py)
set_tests_properties(router_failalloc PROPERTIES TIMEOUT 600 LABELS faults ENVIRONMENT "PDR_BUILD=${CMAKE_BINARY_DIR}")
