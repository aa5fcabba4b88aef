# Finds CAF 0.17 (Debian ships neither a CMake config nor a .pc file).
# Defines CAF::core, CAF::io, CAF::openssl and CAF_VERSION (e.g. 0.17.6).
find_path(CAF_INCLUDE_DIR caf/all.hpp)
find_library(CAF_CORE_LIBRARY caf_core)
find_library(CAF_IO_LIBRARY caf_io)
find_library(CAF_OPENSSL_LIBRARY caf_openssl)

if(CAF_INCLUDE_DIR AND EXISTS ${CAF_INCLUDE_DIR}/caf/config.hpp)
  file(STRINGS ${CAF_INCLUDE_DIR}/caf/config.hpp caf_version_line REGEX "^#define CAF_VERSION [0-9]+")
  string(REGEX MATCH "[0-9]+" caf_version_number "${caf_version_line}")
  math(EXPR caf_major "${caf_version_number} / 10000")
  math(EXPR caf_minor "(${caf_version_number} / 100) % 100")
  math(EXPR caf_patch "${caf_version_number} % 100")
  set(CAF_VERSION "${caf_major}.${caf_minor}.${caf_patch}")
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CAF
  REQUIRED_VARS CAF_INCLUDE_DIR CAF_CORE_LIBRARY CAF_IO_LIBRARY CAF_OPENSSL_LIBRARY
  VERSION_VAR CAF_VERSION)

if(CAF_FOUND)
  if(CAF_VERSION VERSION_LESS 0.17 OR NOT CAF_VERSION VERSION_LESS 0.18)
    message(FATAL_ERROR "Archipelago needs CAF 0.17.x, found ${CAF_VERSION}")
  endif()
  foreach(part core io openssl)
    string(TOUPPER ${part} upper)
    if(NOT TARGET CAF::${part})
      add_library(CAF::${part} SHARED IMPORTED)
      set_target_properties(CAF::${part} PROPERTIES
        IMPORTED_LOCATION ${CAF_${upper}_LIBRARY}
        INTERFACE_INCLUDE_DIRECTORIES ${CAF_INCLUDE_DIR})
    endif()
  endforeach()
  set_property(TARGET CAF::io APPEND PROPERTY INTERFACE_LINK_LIBRARIES CAF::core)
  set_property(TARGET CAF::openssl APPEND PROPERTY INTERFACE_LINK_LIBRARIES CAF::io)
endif()
