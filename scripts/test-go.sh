#!/usr/bin/env bash
# The Go binding (bindings/go): builds and installs libnexar into
# build/prefix, then vets and tests the package against it through
# pkg-config (scripts/stage-prefix.sh), with go on PATH three times: plainly,
# under the race detector, and with the strictest cgo pointer checks
# (cgocheck=2); then, when it is another version, once plainly with
# /usr/bin/go (Debian 12's Go 1.19, the oldest supported).
# Offline: the module has no dependencies; caches stay under build/.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
scripts/install-deps.sh golang-go pkg-config

. scripts/stage-prefix.sh
export GOCACHE="$root/build/go/cache" GOPATH="$root/build/go/path"
export GOPROXY=off GOFLAGS= GOTOOLCHAIN=local CGO_ENABLED=1

run_with() {
  local go="$1" checks="$2"
  local version minor
  version="$("$go" env GOVERSION)"
  minor="$(echo "$version" | sed -E 's/^go1\.([0-9]+).*/\1/')"
  echo "== go binding with $go ($version)"
  (
    cd bindings/go
    fmt="$("$(dirname "$(readlink -f "$go")")/gofmt" -l .)"
    if [ -n "$fmt" ]; then echo "gofmt: not formatted: $fmt"; exit 1; fi
    "$go" vet ./...
    timeout 900 "$go" test -count=1 -timeout 600s ./...
    [ "$checks" = all ] || exit 0
    echo "-- with -race"
    timeout 900 "$go" test -count=1 -timeout 600s -race ./...
    echo "-- with cgocheck=2"
    if [ "$minor" -ge 21 ]; then  # a build-time experiment since Go 1.21
      GOEXPERIMENT=cgocheck2 timeout 900 "$go" test -count=1 -timeout 600s ./...
    else
      GODEBUG=cgocheck=2 timeout 900 "$go" test -count=1 -timeout 600s ./...
    fi
  )
}

first="$(command -v go || true)"
[ -n "$first" ] || first=/usr/bin/go
run_with "$first" all
if [ -x /usr/bin/go ] && [ "$(/usr/bin/go env GOVERSION)" != "$("$first" env GOVERSION)" ]; then
  run_with /usr/bin/go plain  # the oldest supported Go builds and passes
fi
