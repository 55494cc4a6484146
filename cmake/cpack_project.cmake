# Run by cpack before it packages: the Depends field from the shared libraries the binary links,
# as dpkg-shlibdeps reads them from the installed Debian packages. (CPack's own
# CPACK_DEBIAN_PACKAGE_SHLIBDEPS would also scan the CUDA plugin and fail on libcudart, which no
# Debian package owns; the plugin's libraries are Suggests, see packaging.cmake.)
if(CPACK_GENERATOR STREQUAL "DEB" AND NOT CPACK_DEBIAN_PACKAGE_DEPENDS)
  set(dir "${CPACK_PACKAGE_DIRECTORY}/_shlibdeps")
  file(MAKE_DIRECTORY "${dir}/debian")
  file(TOUCH "${dir}/debian/control")
  execute_process(COMMAND dpkg-shlibdeps -O --ignore-missing-info "-e${MOELSP_BINARY}" WORKING_DIRECTORY "${dir}"
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "shlibs:Depends=")
    message(FATAL_ERROR "dpkg-shlibdeps failed (${rc}): ${err}")
  endif()
  string(REGEX REPLACE ".*shlibs:Depends=([^\n]*).*" "\\1" depends "${out}")
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "${depends}")
endif()
