# What `cmake --install BUILD --prefix P` puts under P (docs/INSTALL.md says the same):
#   bin/                  tessel, and the two helpers it starts from its own folder
#                         (tessel-rank for `tessel run`, tessel-mpi-bench for `tessel profile`)
#   share/tessel/         configs/ (model and cluster presets), profiles/ (datasheet device
#                         profiles) and examples/ (plans): for reading and copying only, since
#                         the tessel binary embeds the presets and profiles (EmbedConfigs.cmake)
#   share/doc/tessel/     README.md and docs/, with their relative links intact
# Built this way because the installed command must not need the source or build tree:
# nothing installed names a path into either, and the helpers are found next to
# /proc/self/exe. The GUI is part of the tessel binary. The tessel_* libraries are static
# and are not installed (tessel is an application, not a library to link against), but
# for the CUDA backend's, which is shared (one copy of the device code): it goes to lib/,
# where the programs find it relative to themselves.
install(TARGETS tessel tessel-rank tessel-mpi-bench RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(TARGET tessel_cuda)
  install(TARGETS tessel_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  set_target_properties(tessel tessel-rank tessel-mpi-bench PROPERTIES
                        INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
endif()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/configs/ DESTINATION ${CMAKE_INSTALL_DATADIR}/tessel/configs)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/profiles/data/ DESTINATION ${CMAKE_INSTALL_DATADIR}/tessel/profiles)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/examples/ DESTINATION ${CMAKE_INSTALL_DATADIR}/tessel/examples)
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs)
