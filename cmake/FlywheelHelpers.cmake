# Helpers for flywheel targets.

# flywheel_add_component(NAME SOURCES ... [PUBLIC_DEPS ...] [PRIVATE_DEPS ...])
# One shared library per component (DESIGN.md §2): `flywheel_<name>`, alias `flywheel::<name>`.
# Shared so that dlopen()ed plugins and the binary see one copy of every registry.
function(flywheel_add_component name)
  cmake_parse_arguments(C "" "" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  set(target flywheel_${name})
  add_library(${target} SHARED ${C_SOURCES})
  add_library(flywheel::${name} ALIAS ${target})
  target_include_directories(${target}
    PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
           $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/include>
           $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
    PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  target_link_libraries(${target} PUBLIC ${C_PUBLIC_DEPS} PRIVATE ${C_PRIVATE_DEPS}
                                         flywheel::warnings)
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name} OUTPUT_NAME ${target}
                                             VERSION ${PROJECT_VERSION} SOVERSION 0
                                             INSTALL_RPATH "$ORIGIN")
  set_property(GLOBAL APPEND PROPERTY FLYWHEEL_COMPONENTS ${target})
endfunction()

# flywheel_torch_pch(TARGET): precompile the LibTorch headers for a LibTorch-heavy target (one PCH
# per target: sharing one with REUSE_FROM breaks between libraries (-fPIC) and executables
# (-fPIE)). Worth it once a target has several TUs that include ATen.
function(flywheel_torch_pch target)
  target_precompile_headers(${target} PRIVATE <ATen/ATen.h>)
endfunction()
