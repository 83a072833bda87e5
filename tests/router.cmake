# Router unit tests (pure modules, no sockets).
foreach(t rewrite pool)
  add_executable(test_${t} unit/test_${t}.c)
  target_link_libraries(test_${t} PRIVATE pdr_router)
  add_test(NAME router_unit_${t} COMMAND test_${t})
  set_tests_properties(router_unit_${t} PROPERTIES TIMEOUT 60)
endforeach()
