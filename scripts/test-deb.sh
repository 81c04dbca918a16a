#!/usr/bin/env bash
# The Debian packages as a user gets them: builds them (scripts/package-deb.sh),
# checks what each holds and depends on, installs them with apt, builds the
# collectives demo's C source against the installed libnexar-dev through
# pkg-config, runs it on 2 processes with the installed nexar-run, and
# removes the packages again. lintian must find nothing to warn about, but
# initial-upload-closes-no-bugs: these packages are not uploaded to Debian,
# so their first changelog entry closes no ITP bug.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
mapfile -t debs < <(scripts/package-deb.sh 2>/dev/null)
[ "${#debs[@]}" -eq 3 ] || { echo "test-deb: expected 3 packages, got: ${debs[*]}" >&2; exit 1; }

fail() { echo "test-deb: $*" >&2; exit 1; }
deb_of() { printf '%s\n' "${debs[@]}" | grep "/$1_" || fail "no $1 package"; }
holds() { grep -q -- "$2" <<<"$(dpkg-deb -c "$(deb_of "$1")")" || fail "$1 does not hold $2"; }
field() { dpkg-deb -f "$(deb_of "$1")" "$2"; }

echo "== package contents and dependencies"
holds libnexar0 '/libnexar\.so\.0 '
holds libnexar-dev '/usr/include/nexar\.h$'
holds libnexar-dev '/pkgconfig/nexar\.pc$'
holds nexar-tools '/usr/bin/nexar-run$'
holds nexar-tools '/usr/bin/nexar-seed$'
holds nexar-tools '/usr/share/man/man1/nexar-run\.1\.gz$'
for p in libnexar0 libnexar-dev nexar-tools; do
  holds $p "/usr/share/doc/$p/copyright$"
  holds $p "/usr/share/doc/$p/changelog\.Debian\.gz$"
done
for dep in libngtcp2 libgnutls30 libev4; do
  field libnexar0 Depends | grep -q "$dep" || fail "libnexar0 does not depend on $dep"
done
field libnexar-dev Depends | grep -q 'libnexar0 (=' || fail "libnexar-dev does not depend on libnexar0"
field nexar-tools Depends | grep -q 'libnexar0 (=' || fail "nexar-tools does not depend on libnexar0"
grep -q '^libnexar 0 libnexar0' <<<"$(dpkg-deb -I "$(deb_of libnexar0)" shlibs)" ||
  fail "libnexar0 has no shlibs entry"
for d in "${debs[@]}"; do echo "$(basename "$d"): $(field "$(basename "$d" | cut -d_ -f1)" Depends)"; done

echo "== lintian"
scripts/install-deps.sh lintian
rc=0
report="$(lintian --fail-on error,warning --suppress-tags initial-upload-closes-no-bugs \
  "${debs[@]}" 2>&1)" || rc=$?
grep -v 'running with root privileges' <<<"$report" || true
[ "$rc" -eq 0 ] || fail "lintian found errors or warnings (above)"

echo "== apt install"
remove() { $SUDO apt-get purge -y -qq libnexar0 libnexar-dev nexar-tools >/dev/null 2>&1 || true; }
trap remove EXIT
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --reinstall "${debs[@]}" >/dev/null

# libc-bin's ldconfig trigger, not a maintainer script, put it in the cache.
grep -q 'libnexar\.so\.0 ' <<<"$(ldconfig -p)" || fail "libnexar.so.0 is not in the loader cache after install"

echo "== a program built against the installed packages"
pc="$(grep '/nexar\.pc$' <<<"$(dpkg -L libnexar-dev)")"
out="$PWD/build-deb/installed-demo"
# shellcheck disable=SC2046  # pkg-config's words are meant to split
cc -Wall -Wextra -Werror examples/collectives_demo.c -o "$out" \
  $(PKG_CONFIG_PATH="$(dirname "$pc")" pkg-config --cflags --libs nexar)
lib="$(ldd "$out" | awk '/libnexar\.so\.0/ {print $3}')"
installed="$(grep 'libnexar\.so\.0$' <<<"$(dpkg -L libnexar0)")"
[ "$(realpath "$lib")" = "$(realpath "$installed")" ] ||
  fail "the program loads $lib, not the packaged $installed"
log="$(/usr/bin/nexar-run -n 2 -- "$out" 2>&1)" || { echo "$log"; fail "the demo failed"; }
echo "$log" | tail -3
echo "$log" | grep -q "every collective returned correct results" || fail "the demo's results"
echo "test-deb: packages build, install, link and run"
