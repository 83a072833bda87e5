# Admission (router/admission.c): the token bucket's arithmetic (unit), and the in-flight limits, the queue
# and the rate limit end to end (test_admission.py, real pdrouter and pdsim processes).
add_executable(test_admission unit/test_admission.c)
target_link_libraries(test_admission PRIVATE pdr_router)
add_test(NAME router_unit_admission COMMAND test_admission)
set_tests_properties(router_unit_admission PROPERTIES TIMEOUT 60)

foreach(s inflight_cap fifo_order queue_full queue_timeout client_disconnect client_disconnect_h2 per_worker_cap per_pool_cap rate_limit
          rate_limit_queued threads_global_cap sglang_flags)
  add_test(NAME router_admission_${s} COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_admission.py ${s})
  set_tests_properties(router_admission_${s} PROPERTIES TIMEOUT 120 ENVIRONMENT "PDR_BUILD=${CMAKE_BINARY_DIR}")
endforeach()
