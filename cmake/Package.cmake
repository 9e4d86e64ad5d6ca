# The Debian package (cpack -G DEB; scripts/package-deb.sh builds it). Its dependencies
# come from dpkg-shlibdeps, which reads the shared libraries the installed binaries link
# (Qt 6, SimGrid, Open MPI, SQLite, TBB, fmt, yaml-cpp, ...), plus what no binary links
# but tessel runs: mpirun (openmpi-bin). A CUDA build cannot be packaged this way: its
# cudart, cuBLASLt and NCCL come from NVIDIA's toolkit, not from a Debian package, so
# dpkg-shlibdeps finds no package for them; cpack refuses such a build in one line (the
# project config file below) and docs/INSTALL.md tells GPU users to build from source.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME tessel)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "plans, simulates and runs parallel transformer training")
set(CPACK_PACKAGE_DESCRIPTION
    "tessel searches data, tensor (1D to 3D), pipeline and sequence parallel plans for a\n"
    "transformer on a cluster, prices them from device profiles, replays them in SimGrid,\n"
    "and trains them on CPU ranks over MPI. This build has no CUDA backend.")
string(JOIN "" CPACK_PACKAGE_DESCRIPTION ${CPACK_PACKAGE_DESCRIPTION})
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "tessel developers <tessel@localhost>" CACHE STRING
    "Maintainer field of the Debian package")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "openmpi-bin")
# `tessel gui` needs a Qt platform plugin (xcb) on a desktop; planning and runs do not.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "qt6-qpa-plugins")
set(TESSEL_PACKAGE_GUARD ${CMAKE_BINARY_DIR}/TesselPackageGuard.cmake)
if(TESSEL_CUDA)
  file(WRITE ${TESSEL_PACKAGE_GUARD}
       "message(FATAL_ERROR \"tessel: this build has the CUDA backend, whose libraries no Debian package provides; "
       "package a CPU-only build with scripts/package-deb.sh (docs/INSTALL.md)\")\n")
else()
  file(WRITE ${TESSEL_PACKAGE_GUARD} "# CPU-only build: nothing to refuse.\n")
endif()
set(CPACK_PROJECT_CONFIG_FILE ${TESSEL_PACKAGE_GUARD})
include(CPack)
