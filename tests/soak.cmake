# bench/soak.py in an 18 s smoke run: the load, each fault kind, the sampling, the lost-request accounting
# and the idle fd check work (RSS and fd growth are judged only in runs of a minute or more; see
# docs/reliability.md "Soak" for the real runs).
add_test(NAME soak_smoke
         COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/bench/soak.py --minutes 0.3 --fault-every 2 --sample 1
                 --clients 3 --third --csv ${CMAKE_CURRENT_BINARY_DIR}/soak_smoke.csv)
set_tests_properties(soak_smoke PROPERTIES TIMEOUT 180 LABELS soak ENVIRONMENT "PDR_BUILD=${CMAKE_BINARY_DIR}")
