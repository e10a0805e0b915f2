# SPDX-License-Identifier: MIT
# Run by the `docs` target after doxygen: fail if an enumerator of the public
# headers has no description. Doxygen warns about undocumented functions,
# types, macros and fields, but not about undocumented enumerators, so this
# reads its XML output instead.
#   cmake -DXML_DIR=<doxygen output>/xml -P docs/check-enums.cmake
if(NOT XML_DIR OR NOT IS_DIRECTORY "${XML_DIR}")
  message(FATAL_ERROR "check-enums: XML_DIR (doxygen's XML output) not found: '${XML_DIR}'")
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
