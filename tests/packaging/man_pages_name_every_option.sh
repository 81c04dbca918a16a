#!/usr/bin/env bash
# Each tool's manual page (packaging/man/TOOL.1) names every long option the
# tool's own help prints, so a new option cannot ship undocumented.
#   man_pages_name_every_option.sh MAN_DIR TOOL_BINARY [TOOL_BINARY...]
# nexar-bench's in-process mode has its own help (--in-process -h).
set -uo pipefail
man_dir="$1"; shift
failed=0
for tool in "$@"; do
  name="$(basename "$tool")"
  page="$man_dir/$name.1"
  if [ ! -f "$page" ]; then
    echo "FAIL: $name has no manual page ($page)"; failed=1; continue
  fi
  help="$("$tool" --help 2>&1)"
  [ "$name" = nexar-bench ] && help+=$'\n'"$("$tool" --in-process -h 2>&1)"
  options="$(grep -oE -- '--[a-z][a-z-]*' <<<"$help" | sort -u)"
  if [ -z "$options" ]; then
    echo "FAIL: $name --help printed no options: $help"; failed=1; continue
  fi
  # roff writes a hyphen in an option as \- .
  text="$(sed 's/\\-/-/g' "$page")"
  missing=0
  for opt in $options; do
    grep -qF -- "$opt" <<<"$text" || { echo "FAIL: $page does not name $opt"; missing=1; }
  done
  if [ "$missing" -eq 0 ]; then
    echo "$name: $(wc -w <<<"$options") options, all named in $page"
  else
    failed=1
  fi
done
exit "$failed"
