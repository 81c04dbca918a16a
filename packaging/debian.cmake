# Debian packages through CPack (scripts/package-deb.sh builds them):
#   libnexar0     the shared library (component runtime)
#   libnexar-dev  nexar.h, the libnexar.so link and nexar.pc (component dev)
#   nexar-tools   nexar-seed, nexar-run, nexar-fr, nexar-bench and the demo (component tools)
# Dependencies on other packages come from dpkg-shlibdeps; libnexar0 ships a
# shlibs file and an ldconfig trigger. Every package's synopsis is the summary
# below; the descriptions say what each holds. Each package carries the
# copyright file and changelog Debian policy asks for (packaging/debian/),
# installed only into the packages (EXCLUDE_FROM_ALL: a plain install gets
# none), and nexar-tools the manual pages (packaging/man/, installed always).
# scripts/test-deb.sh runs lintian on the result.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME nexar)
set(CPACK_PACKAGE_VENDOR "nexar")
set(CPACK_PACKAGE_CONTACT "nexar maintainers <maintainers@nexar.invalid>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "distributed communication runtime over encrypted QUIC")
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL runtime dev tools)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_STRIP_FILES ON)  # built Release (scripts/build.sh); shipped stripped
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# dpkg-shlibdeps must find libnexar.so.0 for the tools; their dependency on
# it is stated below (it has no shlibs file until libnexar0 is installed).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${PROJECT_BINARY_DIR})
set(nexar_exact "libnexar0 (= ${PROJECT_VERSION}-1)")

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME libnexar0)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION libs)
# A shlibs file (only libnexar0 has a library).
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")  # any later 0.x keeps the ABI
# The loader cache is refreshed by libc-bin's ldconfig trigger, as policy
# asks. CPack also writes postinst and postrm scripts that run ldconfig
# themselves; scripts/package-deb.sh takes them out of the package.
set(CPACK_DEBIAN_RUNTIME_PACKAGE_CONTROL_EXTRA ${CMAKE_CURRENT_LIST_DIR}/debian/triggers)
set(CPACK_DEBIAN_RUNTIME_DESCRIPTION
    "Processes on one or many hosts form a communicator and exchange data with\n\
point-to-point messages, collectives, RPC and split communicators, over\n\
mutually authenticated QUIC. This package holds the shared library.")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libnexar-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "${nexar_exact}")
set(CPACK_DEBIAN_DEV_DESCRIPTION
    "The C header nexar.h (the stable C ABI), the libnexar.so link and the\n\
pkg-config file nexar.pc.")

set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME nexar-tools)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SECTION net)
set(CPACK_DEBIAN_TOOLS_PACKAGE_DEPENDS "${nexar_exact}")
# nexar-bench --plot runs its script with python3 and matplotlib.
set(CPACK_DEBIAN_TOOLS_PACKAGE_SUGGESTS "python3-matplotlib")
set(CPACK_DEBIAN_TOOLS_DESCRIPTION
    "nexar-seed (the discovery server), nexar-run (the launcher), nexar-bench\n\
(the benchmark, with its Open MPI and Gloo peers' sources),\n\
nexar-collectives-demo and nexar-fr (merges flight-recorder dumps).")

# /usr/share/doc/PACKAGE/{copyright,changelog.Debian.gz} of every package.
configure_file(${CMAKE_CURRENT_LIST_DIR}/debian/changelog.in debian/changelog @ONLY)
set(nexar_deb_changelog ${PROJECT_BINARY_DIR}/debian/changelog.Debian.gz)
nexar_gzip(${PROJECT_BINARY_DIR}/debian/changelog ${nexar_deb_changelog})
add_custom_target(nexar_deb_changelog ALL DEPENDS ${nexar_deb_changelog})
foreach(component runtime dev tools)
  string(TOUPPER ${component} upper)
  set(doc_dir ${CMAKE_INSTALL_DATADIR}/doc/${CPACK_DEBIAN_${upper}_PACKAGE_NAME})
  install(FILES ${CMAKE_CURRENT_LIST_DIR}/debian/copyright ${nexar_deb_changelog}
          DESTINATION ${doc_dir} COMPONENT ${component} EXCLUDE_FROM_ALL)
endforeach()

include(CPack)
