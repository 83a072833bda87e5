# The admin status page in headless Chromium (test_status_page.py). It runs with Debian's
# /usr/bin/python3, the interpreter that sees python3-selenium (a pyenv python3 would not), and exits 77
# (skipped) when chromium, chromium-driver or python3-selenium is missing; CI installs them.
add_test(NAME router_status_page COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_status_page.py)
set_tests_properties(router_status_page PROPERTIES TIMEOUT 90 LABELS integration SKIP_RETURN_CODE 77 ENVIRONMENT
                                                   "PDR_BUILD=${CMAKE_BINARY_DIR}")
