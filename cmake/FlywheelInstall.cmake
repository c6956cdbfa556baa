# `cmake --install` lays out headers, component libraries, the binary and a CMake package so
# that out-of-tree plugins can `find_package(flywheel)` and link `flywheel::core`.
include(CMakePackageConfigHelpers)

get_property(_components GLOBAL PROPERTY FLYWHEEL_COMPONENTS)
install(TARGETS ${_components} flywheel_warnings EXPORT flywheelTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS flywheel RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The code sandbox's launcher: Sandbox looks for it next to libflywheel_rewards.so.
install(TARGETS flywheel_sandbox_init RUNTIME DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY include/flywheel DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_BINARY_DIR}/include/flywheel DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set(_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/flywheel)
install(EXPORT flywheelTargets NAMESPACE flywheel:: DESTINATION ${_cmake_dir})
configure_package_config_file(cmake/flywheelConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/flywheelConfig.cmake
                              INSTALL_DESTINATION ${_cmake_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/flywheelConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/flywheelConfig.cmake
              ${PROJECT_BINARY_DIR}/flywheelConfigVersion.cmake DESTINATION ${_cmake_dir})
