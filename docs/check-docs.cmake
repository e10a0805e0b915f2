# SPDX-License-Identifier: MIT
# Run by the `docs` target after doxygen: the two documentation gaps doxygen
# itself does not report.
#  1. A public header without a /** @file */ comment: doxygen then checks
#     nothing that the header declares.
#  2. An enumerator without a description: doxygen warns about undocumented
#     functions, types, macros and fields, but not enumerators; this reads its
#     XML output instead.
#   cmake -DINCLUDE_DIR=include -DXML_DIR=<doxygen output>/xml -P docs/check-docs.cmake
if(NOT INCLUDE_DIR OR NOT IS_DIRECTORY "${INCLUDE_DIR}")
  message(FATAL_ERROR "check-docs: INCLUDE_DIR (the public headers) not found: '${INCLUDE_DIR}'")
endif()
if(NOT XML_DIR OR NOT IS_DIRECTORY "${XML_DIR}")
  message(FATAL_ERROR "check-docs: XML_DIR (doxygen's XML output) not found: '${XML_DIR}'")
endif()

file(GLOB_RECURSE headers RELATIVE "${INCLUDE_DIR}" "${INCLUDE_DIR}/*.h")
set(no_file "")
foreach(header IN LISTS headers)
  file(READ "${INCLUDE_DIR}/${header}" text)
  if(NOT text MATCHES "/\\*\\*[ \t\r\n]*@file")
    list(APPEND no_file "${header}")
  endif()
endforeach()
if(no_file)
  string(REPLACE ";" "\n  " no_file "${no_file}")
  message(FATAL_ERROR "public headers without a /** @file ... */ comment "
                      "(doxygen checks nothing in them):\n  ${no_file}")
endif()

file(GLOB xml_files "${XML_DIR}/*_8h.xml")
set(missing "")
foreach(xml_file IN LISTS xml_files)
  file(READ "${xml_file}" text)
  # Split after each enumerator (semicolons, list separators in CMake, and
  # brackets, which group list items, are replaced first).
  string(REPLACE ";" "," text "${text}")
  string(REPLACE "[" "(" text "${text}")
  string(REPLACE "]" ")" text "${text}")
  string(REPLACE "</enumvalue>" ";" pieces "${text}")
  foreach(piece IN LISTS pieces)
    string(FIND "${piece}" "<enumvalue " at REVERSE)
    if(at EQUAL -1)
      continue()
    endif()
    string(SUBSTRING "${piece}" ${at} -1 enumvalue)
    if(enumvalue MATCHES "<briefdescription>[ \t\r\n]*</briefdescription>[ \t\r\n]*<detaileddescription>[ \t\r\n]*</detaileddescription>")
      string(REGEX MATCH "<name>([^<]*)</name>" unused "${enumvalue}")
      get_filename_component(header "${xml_file}" NAME_WE)
      string(REPLACE "_8h" ".h" header "${header}")
      list(APPEND missing "${header}: ${CMAKE_MATCH_1}")
    endif()
  endforeach()
endforeach()
list(REMOVE_DUPLICATES missing)
if(missing)
  string(REPLACE ";" "\n  " missing "${missing}")
  message(FATAL_ERROR "enumerators without a description (add /**< ... */):\n  ${missing}")
endif()
