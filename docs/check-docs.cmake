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
#     the HTML index of functions, and every function-like macro
#     (`#define name(`) in the index of macros. Doxygen leaves static
#     functions out without a warning unless EXTRACT_STATIC is on, and the API
#     has static inline ones (tw_deadline_in), and a macro call such as tw_arm
#     is the API itself. What a header keeps between `@cond` and `@endcond`
#     (the typed forms behind tw_arm), and a macro whose name ends in `_`,
#     is internal, hidden from the reference on purpose, and skipped.
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
# functions, every function-like macro in that of macros (the XML lists
# static members even when they are not extracted, so it proves nothing
# here).
# The names an HTML index lists: each item is <li>NAME followed by `item_tail`.
function(index_names page what item_tail out)
  if(NOT EXISTS "${HTML_DIR}/${page}")
    message(FATAL_ERROR "check-docs: no index of ${what} in the HTML output: '${HTML_DIR}/${page}'")
  endif()
  file(READ "${HTML_DIR}/${page}" text)
  string(REGEX MATCHALL "<li>[A-Za-z_0-9]+${item_tail}" items "${text}")
  set(names "")
  foreach(item IN LISTS items)
    string(REGEX REPLACE "^<li>([A-Za-z_0-9]+).*" "\\1" name "${item}")
    list(APPEND names "${name}")
  endforeach()
  set(${out} "${names}" PARENT_SCOPE)
endfunction()
index_names(globals_func.html functions "\\(\\)" documented)
index_names(globals_defs.html macros "(&#160;| )*:" documented_macros)
set(declared "")
set(absent "")
foreach(header IN LISTS headers)
  file(STRINGS "${INCLUDE_DIR}/${header}" lines
       REGEX "^(TW_API|static inline)[^;(]*[ *][A-Za-z_0-9]+\\(|^#define [A-Za-z_0-9]+\\(|@cond|@endcond")
  # A line ending in a backslash (a macro continued) escapes the list
  # separator after it, joining the next line to it: split those again (the
  # other pieces a split makes, after a declaration's `;`, match nothing).
  string(REPLACE "\\;" ";" lines "${lines}")
  set(internal OFF)
  foreach(line IN LISTS lines)
    if(line MATCHES "@endcond")
      set(internal OFF)
      continue()
    elseif(line MATCHES "@cond")
      set(internal ON)
      continue()
    elseif(internal OR line MATCHES "^#define [A-Za-z_0-9]+_\\(")
      continue() # a name ending in _ is internal too (TW_ERRNO_ENUM_)
    elseif(line MATCHES "^#define ([A-Za-z_0-9]+)\\(")
      set(name "${CMAKE_MATCH_1}")
    elseif(line MATCHES "^(TW_API|static inline)[^;(]*[ *]([A-Za-z_0-9]+)\\(")
      set(name "${CMAKE_MATCH_2}")
    else()
      continue()
    endif()
    list(APPEND declared "${name}")
    if(line MATCHES "^#define")
      list(FIND documented_macros "${name}" at)
    else()
      list(FIND documented "${name}" at)
    endif()
    if(at EQUAL -1)
      list(APPEND absent "${header}: ${name}")
    endif()
  endforeach()
endforeach()
# A static inline function and a macro call: if either is not even seen as
# declared, the patterns above have stopped matching the headers.
foreach(name tw_deadline_in tw_arm)
  list(FIND declared ${name} at)
  if(at EQUAL -1)
    message(FATAL_ERROR "check-docs: ${name} (twheel/wheel.h) is not among the functions "
                        "found in the headers: this check no longer sees them")
  endif()
endforeach()
if(absent)
  string(REPLACE ";" "\n  " absent "${absent}")
  message(FATAL_ERROR "public functions or macros missing from the API reference (a static "
                      "one needs EXTRACT_STATIC = YES in docs/Doxyfile; an internal one goes "
                      "between @cond and @endcond):\n  ${absent}")
endif()
