# Compiler settings shared by every flywheel target.

if(FLYWHEEL_USE_CCACHE)
  find_program(FLYWHEEL_CCACHE ccache)
  if(FLYWHEEL_CCACHE)
    # pch_defines/time_macros let ccache reuse objects built with precompiled headers.
    # CCACHE_BASEDIR/NOHASHDIR make paths under the checkout relative in the cache key, so a
    # second clone (CI's fresh one, a worktree) reuses the objects another clone built. Debug
    # info then names the clone that compiled an object first.
    set(CMAKE_CXX_COMPILER_LAUNCHER
        ${CMAKE_COMMAND} -E env CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime
        CCACHE_BASEDIR=${PROJECT_SOURCE_DIR} CCACHE_NOHASHDIR=1 ${FLYWHEEL_CCACHE})
    message(STATUS "flywheel: using ccache (${FLYWHEEL_CCACHE})")
  endif()
endif()

add_library(flywheel_warnings INTERFACE)
target_compile_options(flywheel_warnings INTERFACE -Wall -Wextra -Wno-unused-parameter)
add_library(flywheel::warnings ALIAS flywheel_warnings)
