# SPDX-License-Identifier: MIT
# twheel.pc, relocatable: its prefix is computed from the .pc file's own
# place (${pcfiledir}), so an installed tree still works after it is moved.
# An absolute CMAKE_INSTALL_LIBDIR or INCLUDEDIR is kept as given.
# A .pc.in starts with these three lines (see twheel.pc.in):
#   prefix=@TWHEEL_PC_PREFIX@
#   libdir=@TWHEEL_PC_LIBDIR@
#   includedir=@TWHEEL_PC_INCLUDEDIR@
# and twheel_install_pc(NAME) configures cmake/NAME.pc.in and installs it
# (an optional layer's own .pc file too).
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(TWHEEL_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(TWHEEL_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  # lib -> ../.., lib/x86_64-linux-gnu -> ../../..
  file(RELATIVE_PATH _twheel_up "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
  string(REGEX REPLACE "/$" "" _twheel_up "${_twheel_up}")
  set(TWHEEL_PC_PREFIX "\${pcfiledir}/${_twheel_up}")
  set(TWHEEL_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(TWHEEL_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(TWHEEL_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
# Definitions the library's users must share (e.g. one that changes a struct's
# layout) go to Cflags, as the CMake package passes them on.
set(TWHEEL_PC_CFLAGS "")
get_target_property(_twheel_defs twheel_static INTERFACE_COMPILE_DEFINITIONS)
if(_twheel_defs)
  foreach(_twheel_def IN LISTS _twheel_defs)
    if(_twheel_def MATCHES "^[A-Za-z_][A-Za-z0-9_]*(=.*)?$")
      string(APPEND TWHEEL_PC_CFLAGS " -D${_twheel_def}")
    else()
      message(WARNING "twheel.pc: definition '${_twheel_def}' not passed on")
    endif()
  endforeach()
endif()
set(_TWHEEL_PC_IN_DIR ${CMAKE_CURRENT_LIST_DIR})
function(twheel_install_pc name)
  configure_file(${_TWHEEL_PC_IN_DIR}/${name}.pc.in ${CMAKE_CURRENT_BINARY_DIR}/${name}.pc @ONLY)
  install(FILES ${CMAKE_CURRENT_BINARY_DIR}/${name}.pc
    DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endfunction()
twheel_install_pc(twheel)
