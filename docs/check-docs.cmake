# SPDX-License-Identifier: MIT
# Run by the `docs` target after doxygen: the documentation gaps doxygen
# itself does not report.
#  1. A public header without a /** @file */ comment: doxygen then checks
#     nothing that the header declares.
#  2. An enumerator without a description: doxygen warns about undocumented
#     functions, types, macros and fields, but not enumerators; this reads its
#     XML output instead.
#  3. A public function missing from the reference: every function a header
#     declares (`TW_API ... name(` or `static inline ... name(`) must be in
#     the HTML index of functions. Doxygen leaves static functions out
#     without a warning unless EXTRACT_STATIC is on, and the API has static
#     inline ones (tw_slack_fraction, which the README tells users to call).
#   cmake -DINCLUDE_DIR=include -DXML_DIR=<doxygen output>/xml
#         -DHTML_DIR=<doxygen output>/html -P docs/check-docs.cmake
if(NOT INCLUDE_DIR OR NOT IS_DIRECTORY "${INCLUDE_DIR}")
  message(FATAL_ERROR "check-docs: INCLUDE_DIR (the public headers) not found: '${INCLUDE_DIR}'")
endif()
if(NOT XML_DIR OR NOT IS_DIRECTORY "${XML_DIR}")
  message(FATAL_ERROR "check-docs: XML_DIR (doxygen's XML output) not found: '${XML_DIR}'")
endif()
if(NOT HTML_DIR OR NOT IS_DIRECTORY "${HTML_DIR}")
  message(FATAL_ERROR "check-docs: HTML_DIR (doxygen's HTML output) not found: '${HTML_DIR}'")
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

# 3. Every public function is in the reference: in the HTML index of
# functions (the XML lists static members even when they are not extracted,
# so it proves nothing here).
set(functions_html "${HTML_DIR}/globals_func.html")
if(NOT EXISTS "${functions_html}")
  message(FATAL_ERROR "check-docs: no index of functions in the HTML output: '${functions_html}'")
endif()
file(READ "${functions_html}" text)
string(REGEX MATCHALL "<li>[A-Za-z_0-9]+\\(\\)" items "${text}")
set(documented "")
foreach(item IN LISTS items)
  string(REGEX REPLACE "^<li>([A-Za-z_0-9]+).*" "\\1" name "${item}")
  list(APPEND documented "${name}")
endforeach()
set(declared "")
set(absent "")
foreach(header IN LISTS headers)
  file(STRINGS "${INCLUDE_DIR}/${header}" lines REGEX "^(TW_API|static inline)[^;(]*[ *][A-Za-z_0-9]+\\(")
  foreach(line IN LISTS lines)
    string(REGEX MATCH "([A-Za-z_0-9]+)\\(" unused "${line}")
    set(name "${CMAKE_MATCH_1}")
    list(APPEND declared "${name}")
    list(FIND documented "${name}" at)
    if(at EQUAL -1)
      list(APPEND absent "${header}: ${name}")
    endif()
  endforeach()
endforeach()
# The function that started this check: if it is not even seen as declared,
# the pattern above has stopped matching the headers.
list(FIND declared tw_slack_fraction at)
if(at EQUAL -1)
  message(FATAL_ERROR "check-docs: tw_slack_fraction (static inline, twheel/wheel.h) is not "
                      "among the functions found in the headers: this check no longer sees them")
endif()
if(absent)
  string(REPLACE ";" "\n  " absent "${absent}")
  message(FATAL_ERROR "public functions missing from the API reference (a static one needs "
                      "EXTRACT_STATIC = YES in docs/Doxyfile):\n  ${absent}")
endif()
