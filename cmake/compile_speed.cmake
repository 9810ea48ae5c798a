# What the build does to compile less (docs/testing.md has the measurements behind each choice).
#
# LibTorch's headers are most of every translation unit that uses them: <torch/torch.h> costs
# GCC ~14 s alone, of which ~10 s is parsing and ~4 s the template instantiations GCC defers to
# the end of each unit. One precompiled <torch/torch.h> (zero_torch_pch, ~600 MB) removes the
# parsing from every LibTorch unit of the project; unity batches (the tests) pay the deferred
# instantiations once per batch instead of once per file.
option(ZERO_PCH "Precompile <torch/torch.h> once and reuse it in every target that compiles against LibTorch" ON)
# Unity batches everywhere (a cache default: -DCMAKE_UNITY_BUILD=OFF builds file by file). The
# project's files keep the names in their anonymous namespaces distinct for this.
set(CMAKE_UNITY_BUILD ON CACHE BOOL "Compile each target's sources in batches (docs/testing.md)")
set(CMAKE_UNITY_BUILD_BATCH_SIZE 8 CACHE STRING "Source files per unity batch")

if(ZERO_PCH)
  # The one precompiled header. Its flags are the directory's (the build type's -O, ZERO_SANITIZE's
  # -fsanitize) and LibTorch's definitions (_GLIBCXX_USE_CXX11_ABI): every reusing unit has them.
  add_library(zero_torch_pch OBJECT ${PROJECT_SOURCE_DIR}/cmake/torch_pch.cpp)
  target_link_libraries(zero_torch_pch PRIVATE ${TORCH_LIBRARIES})
  target_precompile_headers(zero_torch_pch PRIVATE <torch/torch.h>)
endif()

# Every buildsystem target under DIR (recursively) into OUT.
function(_zero_targets_under dir out)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    _zero_targets_under(${sub} sub_targets)
    list(APPEND targets ${sub_targets})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

# Sets OUT to TRUE when LIBS (a target's link libraries) bring LibTorch's headers: LibTorch
# itself, or a target of this project that passes them on (_zero_passes_torch).
function(_zero_links_torch_headers libs out)
  set(result FALSE)
  foreach(lib IN LISTS libs)
    if(lib MATCHES "^\\$<LINK_ONLY:")  # a static library's private link: no headers come with it
      continue()
    endif()
    if(lib IN_LIST TORCH_LIBRARIES OR lib STREQUAL "torch")
      set(result TRUE)
      break()
    endif()
    if(TARGET ${lib})
      get_target_property(imported ${lib} IMPORTED)
      get_target_property(aliased ${lib} ALIASED_TARGET)
      if(aliased)
        set(lib ${aliased})
      endif()
      if(NOT imported OR aliased)
        _zero_passes_torch(${lib} passes)
        if(passes)
          set(result TRUE)
          break()
        endif()
      endif()
    endif()
  endforeach()
  set(${out} ${result} PARENT_SCOPE)
endfunction()

# Sets OUT to TRUE when TARGET passes LibTorch's headers to what links it: its interface (public)
# links bring them, directly or further down. A library that uses LibTorch privately does not:
# bench/main.cpp links zero_bench_programs and compiles without them.
function(_zero_passes_torch target out)
  get_property(known GLOBAL PROPERTY _zero_passes_torch_${target} SET)
  if(known)
    get_property(result GLOBAL PROPERTY _zero_passes_torch_${target})
    set(${out} ${result} PARENT_SCOPE)
    return()
  endif()
  get_target_property(interface ${target} INTERFACE_LINK_LIBRARIES)
  set(result FALSE)
  if(interface)
    _zero_links_torch_headers("${interface}" result)
  endif()
  set_property(GLOBAL PROPERTY _zero_passes_torch_${target} ${result})
  set(${out} ${result} PARENT_SCOPE)
endfunction()

# Sets OUT to TRUE when TARGET compiles against LibTorch: its own links, or its interface's, bring
# LibTorch's headers.
function(_zero_uses_torch target out)
  get_target_property(type ${target} TYPE)
  set(libs "")
  if(NOT type STREQUAL "INTERFACE_LIBRARY")
    get_target_property(direct ${target} LINK_LIBRARIES)
    if(direct)
      list(APPEND libs ${direct})
    endif()
  endif()
  get_target_property(interface ${target} INTERFACE_LINK_LIBRARIES)
  if(interface)
    list(APPEND libs ${interface})
  endif()
  _zero_links_torch_headers("${libs}" result)
  set(${out} ${result} PARENT_SCOPE)
endfunction()

# Called once every target exists: each target that compiles against LibTorch reuses
# zero_torch_pch. A new test, app or benchmark gets it without a line of its own.
function(zero_reuse_torch_pch)
  if(NOT ZERO_PCH)
    return()
  endif()
  _zero_targets_under(${PROJECT_SOURCE_DIR} targets)
  set(reusing "")
  foreach(target IN LISTS targets)
    get_target_property(type ${target} TYPE)
    if(target STREQUAL "zero_torch_pch" OR NOT type MATCHES "^(EXECUTABLE|STATIC_LIBRARY|SHARED_LIBRARY|OBJECT_LIBRARY)$")
      continue()
    endif()
    _zero_uses_torch(${target} uses)
    if(uses)
      target_precompile_headers(${target} REUSE_FROM zero_torch_pch)
      list(APPEND reusing ${target})
    endif()
  endforeach()
  list(LENGTH reusing n)
  message(STATUS "zerocpp: ${n} targets reuse the precompiled <torch/torch.h> (ZERO_PCH)")
endfunction()
