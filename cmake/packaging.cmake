# `cpack` in the build directory writes moelsp_<version>_amd64.deb: the binary, the CUDA plugin
# (when built), the embedded default model, the man page and bash completions generated from
# --help (tools/make_manpage.py), the licence. Installed under /usr; the binary finds its model
# and plugin relative to itself, so `dpkg --root` and other prefixes work too.
find_package(Python3 COMPONENTS Interpreter REQUIRED)
set(MOELSP_GENERATED_DOCS ${CMAKE_BINARY_DIR}/generated-docs)
add_custom_command(
  OUTPUT ${MOELSP_GENERATED_DOCS}/moelsp.1.gz ${MOELSP_GENERATED_DOCS}/moelsp
  COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tools/make_manpage.py $<TARGET_FILE:moelsp> --man
          ${MOELSP_GENERATED_DOCS}/moelsp.1.gz --bash ${MOELSP_GENERATED_DOCS}/moelsp
  DEPENDS moelsp ${PROJECT_SOURCE_DIR}/tools/make_manpage.py
  COMMENT "man page and bash completions from moelsp --help")
add_custom_target(moelsp_docs ALL DEPENDS ${MOELSP_GENERATED_DOCS}/moelsp.1.gz ${MOELSP_GENERATED_DOCS}/moelsp)
install(FILES ${MOELSP_GENERATED_DOCS}/moelsp.1.gz DESTINATION share/man/man1)
install(FILES ${MOELSP_GENERATED_DOCS}/moelsp DESTINATION share/bash-completion/completions)
install(FILES ${PROJECT_SOURCE_DIR}/LICENSE DESTINATION share/doc/moelsp RENAME copyright)
install(FILES ${PROJECT_SOURCE_DIR}/models/README.md DESTINATION share/doc/moelsp RENAME models.md)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME moelsp)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
# (.invalid: the project has no mail address yet; dpkg wants one in this form.)
set(CPACK_PACKAGE_CONTACT "the moelsp authors <noreply@moelsp.invalid>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "local coding assistant: LSP and HTTP server with an embedded MoE inference engine")
set(CPACK_PACKAGE_DESCRIPTION
    "moelsp serves inline completions and chat to editors (Language Server Protocol over stdio) and an
OpenAI-compatible HTTP API to coding agents, from Mixture-of-Experts models (Qwen3-Coder, DeepSeek-Coder-V2,
GLM, gpt-oss; GGUF files) running on this machine. A small default model is included; `moelsp pull` fetches
others from the Hugging Face hub. The CUDA backend (/usr/lib/moelsp/libmoelsp_cuda.so) is used when the CUDA
runtime and cuBLAS libraries of the version it was built with are installed; otherwise moelsp runs on the CPU.")
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
# Depends from the libraries the binary links (dpkg-shlibdeps, run by cmake/cpack_project.cmake);
# the CUDA libraries come from NVIDIA's repository, not Debian's: suggested, not required.
if(MOELSP_HAVE_CUDA)
  set(CPACK_DEBIAN_PACKAGE_SUGGESTS
      "cuda-cudart-${CUDAToolkit_VERSION_MAJOR}-${CUDAToolkit_VERSION_MINOR}, libcublas-${CUDAToolkit_VERSION_MAJOR}-${CUDAToolkit_VERSION_MINOR}")
endif()
set(CPACK_PROJECT_CONFIG_FILE ${CMAKE_BINARY_DIR}/cpack_project.cmake)
file(GENERATE OUTPUT ${CMAKE_BINARY_DIR}/cpack_project.cmake
     CONTENT "set(MOELSP_BINARY \"$<TARGET_FILE:moelsp>\")\ninclude(\"${PROJECT_SOURCE_DIR}/cmake/cpack_project.cmake\")\n")
include(CPack)
