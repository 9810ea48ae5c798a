# `cmake --install` and the .deb: the engine as a package other CMake projects find with
# find_package(zerocpp) and link as zerocpp::zero, its public headers, and the apps.
# Internal headers (src/, models/) stay out: include/zero/*.h include only each other.
include(CMakePackageConfigHelpers)
set(ZERO_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/zerocpp)

# zero's dependencies among the project's own libraries travel with it (all static).
install(TARGETS zero_config zero_core zero_checkpoint zero_offload zero_monitor zero_metrics zero EXPORT zerocppTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS zero-run zero-train zero-config zero-ckpt zero-estimate RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# nccl.h declares a function that only a ZERO_WITH_CUDA build defines.
if(ZERO_WITH_CUDA)
  set(ZERO_HEADER_EXCLUDE)
else()
  set(ZERO_HEADER_EXCLUDE PATTERN nccl.h EXCLUDE)
endif()
install(DIRECTORY include/zero DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h"
        ${ZERO_HEADER_EXCLUDE})

install(EXPORT zerocppTargets NAMESPACE zerocpp:: DESTINATION ${ZERO_CMAKE_DIR})
configure_package_config_file(cmake/zerocppConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/zerocppConfig.cmake
                              INSTALL_DESTINATION ${ZERO_CMAKE_DIR})
# 0.x: a minor release may change the API.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/zerocppConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/zerocppConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/zerocppConfigVersion.cmake
        DESTINATION ${ZERO_CMAKE_DIR})

# `cpack -G DEB` in the build directory: installs under /usr. It depends on the -dev packages
# because a user compiles against torch's, MPI's, fmt's and json's headers and links the static
# libraries' dependencies (xxhash, highway) too.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME zerocpp)
set(CPACK_PACKAGE_VENDOR zerocpp)
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "DeepSpeed's ZeRO in C++ for LibTorch models (library, headers, apps)")
set(CPACK_PACKAGE_CONTACT "zerocpp maintainers <maintainers@users.noreply.a-seed-351de4c0.example>")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_PACKAGE_DEPENDS
    "libtorch-dev, libopenmpi-dev, openmpi-bin, libfmt-dev, nlohmann-json3-dev, libxxhash-dev, libhwy-dev, liburing-dev, libcpp-httplib-dev, libssl-dev, pkg-config")
# Debian's default reference BLAS makes LibTorch's fp32 ~30x slower (scripts/bootstrap).
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "libopenblas0-pthread, cmake")
include(CPack)
