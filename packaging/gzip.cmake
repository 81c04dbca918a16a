# nexar_gzip(IN OUT): a build rule that compresses IN into OUT as Debian
# wants installed documentation: gzip -9 without the name and time stamp
# (-n), so that the same input always gives the same bytes.
function(nexar_gzip in out)
  add_custom_command(OUTPUT ${out}
                     COMMAND sh -c "gzip -9nc \"$1\" > \"$2\"" nexar_gzip ${in} ${out}
                     DEPENDS ${in} VERBATIM)
endfunction()
