# Prometheus metrics (include/zero/metrics.h, docs/observability.md): the registry, the text
# exposition format and the /metrics HTTP server, torch-free. Included at the end of the
# top-level CMakeLists.txt.
# Note: Debian's cpp-httplib is a compiled library whose header changes layout with the
# CPPHTTPLIB_*_SUPPORT macros; pkg-config supplies the same ones it was built with.
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)

add_library(zero_metrics STATIC
  src/metrics/instruments.cpp
  src/metrics/registry.cpp
  src/metrics/exposition.cpp
  src/metrics/metrics_server.cpp
  src/metrics/training_metrics.cpp)
target_include_directories(zero_metrics PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> PRIVATE src)
# zero_config: zero::Error lives there.
target_link_libraries(zero_metrics PUBLIC zero_config Threads::Threads PRIVATE PkgConfig::HTTPLIB)
target_compile_options(zero_metrics PRIVATE ${ZERO_WARNINGS})

# examples/prometheus/README.md: the exported metrics with made-up values, printed or served.
add_executable(metrics_demo examples/prometheus/metrics_demo.cpp)
target_link_libraries(metrics_demo PRIVATE zero_metrics)
target_compile_options(metrics_demo PRIVATE ${ZERO_WARNINGS})

if(ZERO_BUILD_TESTS)
  find_package(GTest REQUIRED)
  add_executable(metrics_tests tests/unit/metrics_test.cpp tests/unit/metrics_server_test.cpp)
  target_include_directories(metrics_tests PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(metrics_tests PRIVATE zero_metrics PkgConfig::HTTPLIB GTest::gtest_main)
  add_test(NAME metrics COMMAND metrics_tests)

  # The alert rules, checked by Prometheus's own promtool (Debian's prometheus package;
  # scripts/bootstrap installs it). A missing promtool fails these tests rather than skipping them.
  set(ZERO_PROMETHEUS_DIR ${PROJECT_SOURCE_DIR}/examples/prometheus)
  set(ZERO_NEED_PROMTOOL
      "command -v promtool >/dev/null || { echo 'promtool not found: apt-get install prometheus (scripts/bootstrap)' >&2; exit 1; }")
  add_test(NAME promtool_check_rules COMMAND sh -c
    "${ZERO_NEED_PROMTOOL}; exec promtool check rules ${ZERO_PROMETHEUS_DIR}/deepspeed_rules.yml")
  # Run from the directory so that the test file's rule_files path resolves as it is written.
  add_test(NAME promtool_test_rules COMMAND sh -c
    "${ZERO_NEED_PROMTOOL}; exec promtool test rules deepspeed_rules_test.yml"
    WORKING_DIRECTORY ${ZERO_PROMETHEUS_DIR})
  add_test(NAME promtool_check_config COMMAND sh -c
    "${ZERO_NEED_PROMTOOL}; exec promtool check config ${ZERO_PROMETHEUS_DIR}/prometheus.yml")
  # Prometheus's own parser and linter on what zerocpp exports. promlint's only objection may be
  # the colons in the deepspeed:* names, which the alert rules query.
  add_test(NAME promtool_check_metrics COMMAND sh -c
    "${ZERO_NEED_PROMTOOL}; $<TARGET_FILE:metrics_demo> > metrics_demo.txt || exit 1
     promtool check metrics < metrics_demo.txt > promtool_lint.txt 2>&1; rc=$?; cat promtool_lint.txt
     [ $rc -eq 0 ] || [ $rc -eq 3 ] || exit 1
     ! grep -v \"metric names should not contain ':'\" promtool_lint.txt"
    WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(metrics promtool_check_rules promtool_test_rules promtool_check_config
                       promtool_check_metrics PROPERTIES LABELS unit)
endif()
