# Tickets (protocol pdshim): the codec (common/ticket.c), its fuzz target, the shim's ticket calls, pdsim's
# refusals and the router end to end.
add_executable(test_ticket unit/test_ticket.c)
target_link_libraries(test_ticket PRIVATE pdr_keyring)
add_test(NAME ticket_unit COMMAND test_ticket)
set_tests_properties(ticket_unit PROPERTIES TIMEOUT 120 LABELS unit)

add_executable(fuzz_ticket fuzz/fuzz_ticket.c)
target_link_libraries(fuzz_ticket PRIVATE pdr_keyring)
pdr_fuzz_corpus_test(ticket_fuzz_corpus fuzz_ticket ticket 120)

# pdsim with --ticket-key behind pdrouter with protocol pdshim (tests/integration/test_tickets.py).
pdr_scenario_tests(tickets_ ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_tickets.py LABEL integration TIMEOUT 120)

# The shim's ticket calls through the Python binding (the library's environment as test_shim_python's).
add_test(NAME tickets_shim_python
         COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_shim_tickets.py ${CMAKE_BINARY_DIR})
set_tests_properties(tickets_shim_python PROPERTIES TIMEOUT 60 LABELS integration ENVIRONMENT "${PDR_XFER_PY_ENV}")

# A streamed offer by ticket (pdshim_offer_open_ticket) through the Python binding.
add_test(NAME tickets_shim_parts_python
         COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_shim_parts_tickets.py ${CMAKE_BINARY_DIR})
set_tests_properties(tickets_shim_parts_python PROPERTIES TIMEOUT 60 LABELS integration ENVIRONMENT "${PDR_XFER_PY_ENV}")

# pdsim --kv-parts behind pdrouter with protocol pdshim: ticketed streamed offers end to end.
add_test(NAME tickets_kv_parts COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_kv_parts_tickets.py)
set_tests_properties(tickets_kv_parts PROPERTIES TIMEOUT 120 LABELS integration ENVIRONMENT "PDR_BUILD=${CMAKE_BINARY_DIR}")
