# The tools' manual pages (packaging/man/*.1), compressed and installed with
# nexar-tools into section 1. tests/packaging/man_pages_name_every_option.sh
# checks that each page names every option its tool's --help prints.
file(GLOB nexar_man_sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/man/*.1)
set(nexar_man_pages)
file(MAKE_DIRECTORY ${PROJECT_BINARY_DIR}/man)
foreach(src ${nexar_man_sources})
  get_filename_component(name ${src} NAME)
  set(out ${PROJECT_BINARY_DIR}/man/${name}.gz)
  nexar_gzip(${src} ${out})
  list(APPEND nexar_man_pages ${out})
endforeach()
add_custom_target(nexar_man_pages ALL DEPENDS ${nexar_man_pages})
install(FILES ${nexar_man_pages} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT tools)
