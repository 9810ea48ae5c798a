# The event monitors (docs/observability.md): DeepSpeed's csv_monitor and tensorboard blocks,
# written by a torch-free library. Included from the top-level CMakeLists.txt.

add_library(zero_monitor STATIC
  src/monitor/append_file.cpp
  src/monitor/crc32c.cpp
  src/monitor/csv_monitor.cpp
  src/monitor/event_encoding.cpp
  src/monitor/monitor_master.cpp
  src/monitor/python_float.cpp
  src/monitor/tensorboard_monitor.cpp)
target_include_directories(zero_monitor PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
                           PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(zero_monitor PUBLIC zero_config)
target_compile_options(zero_monitor PRIVATE ${ZERO_WARNINGS})

if(NOT ZERO_BUILD_TESTS)
  return()
endif()

find_package(GTest REQUIRED)
add_executable(monitor_tests tests/unit/monitor_test.cpp tests/monitor/event_encoding_test.cpp)
target_include_directories(monitor_tests PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(monitor_tests PRIVATE zero_monitor GTest::gtest_main)
target_compile_options(monitor_tests PRIVATE ${ZERO_WARNINGS})
add_test(NAME monitor COMMAND monitor_tests)
set_tests_properties(monitor PROPERTIES LABELS unit)

# The independent reader: Python's protobuf runtime, with classes protoc generates at test time
# from our own subset of TensorBoard's protos, reads what monitor_writer_demo wrote.
add_executable(monitor_writer_demo tests/monitor/monitor_writer_demo.cpp)
target_link_libraries(monitor_writer_demo PRIVATE zero_monitor)
target_compile_options(monitor_writer_demo PRIVATE ${ZERO_WARNINGS})

# Note: the python3 first on PATH (pyenv, a venv) often lacks the protobuf module that
# scripts/bootstrap installs for the system's python3, so try that one too.
find_program(ZERO_PROTOC protoc)
if(NOT ZERO_MONITOR_PYTHON)
  find_program(_zero_path_python3 NAMES python3)
  foreach(_candidate ${_zero_path_python3} /usr/bin/python3)
    execute_process(COMMAND ${_candidate} -c "import google.protobuf" RESULT_VARIABLE _zero_rc
                    OUTPUT_QUIET ERROR_QUIET)
    if(_zero_rc EQUAL 0)
      set(ZERO_MONITOR_PYTHON ${_candidate} CACHE FILEPATH "python3 with google.protobuf, for the monitor reader test")
      break()
    endif()
  endforeach()
endif()

if(ZERO_PROTOC AND ZERO_MONITOR_PYTHON)
  add_test(NAME monitor_reader COMMAND bash ${PROJECT_SOURCE_DIR}/tests/monitor/reader_test.sh
           $<TARGET_FILE:monitor_writer_demo> ${ZERO_MONITOR_PYTHON} ${ZERO_PROTOC})
else()
  # Missing tools fail the test rather than skip it: a skipped reader proves nothing.
  add_test(NAME monitor_reader COMMAND bash -c
           "echo 'monitor_reader needs protoc and python3 with google.protobuf (scripts/bootstrap installs protobuf-compiler and python3-protobuf)' >&2; exit 1")
endif()
set_tests_properties(monitor_reader PROPERTIES LABELS unit)
