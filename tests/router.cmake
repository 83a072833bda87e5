# Router unit tests (pure modules, no sockets).
foreach(t rewrite pool)
  add_executable(test_${t} unit/test_${t}.c)
  target_link_libraries(test_${t} PRIVATE pdr_router)
  add_test(NAME router_unit_${t} COMMAND test_${t})
  set_tests_properties(router_unit_${t} PROPERTIES TIMEOUT 60)
endforeach()

# Router integration scenarios: real pdrouter and pdsim processes on loopback (see test_router.py).
foreach(s routes errors policy prefill_killed all_prefills_dead prefill_stopped prefill_stopped_retry
          disconnect decode_reset check_config shutdown slow_client)
  add_test(NAME router_${s} COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_router.py ${s})
  set_tests_properties(router_${s} PROPERTIES TIMEOUT 120 ENVIRONMENT "PDR_BUILD=${CMAKE_BINARY_DIR}")
endforeach()
