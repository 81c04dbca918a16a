#!/usr/bin/env bash
# A lossy network: 4 hosts, each a network namespace with a veth on one
# bridge, their links impaired on every host's egress (tc netem; without it,
# iptables and tbf, and no delay case). For each
# impairment (none, 1 % loss, 5 % loss, 5 ms delay with reordering, a
# 100 Mbit/s rate limit) a world formed through a seed runs the soak's mixed
# traffic (every collective, p2p, RPC, split; every result checked) for the
# given seconds, then an allreduce (nexar-bench, 64 MiB by default) whose time
# is compared with the unimpaired one (reported, not asserted). Then, with no impairment: a link down for 2 s
# must be survived without error, and a link down for longer than the
# heartbeat timeout must be reported as a peer failure (NEXAR_ERR_PEER_FAILED).
#   scripts/lossy.sh [seconds per case] [allreduce bytes]   (default 30 64M;
#                                                           root or sudo)
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-30}"
size="${2:-64M}"
scripts/install-deps.sh iproute2 iptables python3
[ -f build/build.ninja ] || scripts/build.sh build
ninja -C build nexar-seed nexar-soak-worker nexar-bench >/dev/null
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"

prefix="nxl$$"
ns() { echo "$prefix-$1"; }
addr() { echo "10.78.0.$(($1 + 1))"; }
cleanup() {
  for n in h0 h1 h2 h3 hub; do $SUDO ip netns del "$(ns "$n")" 2>/dev/null || true; done
}
trap cleanup EXIT
$SUDO ip netns add "$(ns hub)"
$SUDO ip -n "$(ns hub)" link add br0 type bridge
$SUDO ip -n "$(ns hub)" link set br0 up
for i in 0 1 2 3; do
  h="$(ns "h$i")"
  $SUDO ip netns add "$h"
  $SUDO ip -n "$h" link add eth0 type veth peer name "p$i" netns "$(ns hub)"
  $SUDO ip -n "$h" addr add "$(addr "$i")/24" dev eth0
  $SUDO ip -n "$h" link set eth0 up
  $SUDO ip -n "$h" link set lo up
  $SUDO ip -n "$(ns hub)" link set "p$i" master br0
  $SUDO ip -n "$(ns hub)" link set "p$i" up
done

out=build/lossy
rm -rf "$out" && mkdir -p "$out"
token="lossy-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
printf '%s\n' "$token" >"$out/token"
seed_addr="$(addr 0):29700"

# Impairs every host's egress (so each packet meets one impairment). With
# netem (CONFIG_NET_SCH_NETEM) every case uses it; a kernel without it gets
# loss from iptables' statistic match, the rate from tbf, and no delay case.
on() { local i="$1"; shift; $SUDO ip netns exec "$(ns "h$i")" "$@"; }
have_netem=0
if on 0 tc qdisc add dev eth0 root netem delay 1ms 2>/dev/null; then
  have_netem=1
  on 0 tc qdisc del dev eth0 root
fi
impair() {
  local c="$1"
  for i in 0 1 2 3; do
    on "$i" tc qdisc del dev eth0 root 2>/dev/null || true
    on "$i" iptables -F OUTPUT 2>/dev/null || true
  done
  local opts="" drop="" tbf=""
  case "$c" in
    none) return 0 ;;
    loss1) opts="loss 1%" drop=0.01 ;;
    loss5) opts="loss 5%" drop=0.05 ;;
    delay_reorder) opts="delay 5ms 1ms reorder 25% 50%" ;;
    rate100) opts="rate 100mbit" tbf="rate 100mbit burst 128kb latency 100ms" ;;
  esac
  for i in 0 1 2 3; do
    if [ "$have_netem" = 1 ]; then
      on "$i" tc qdisc add dev eth0 root netem $opts
    elif [ -n "$drop" ]; then
      on "$i" iptables -A OUTPUT -o eth0 -p udp -m statistic --mode random \
        --probability "$drop" -j DROP
    elif [ -n "$tbf" ]; then
      on "$i" tc qdisc add dev eth0 root tbf $tbf
    else
      return 1  # needs netem
    fi
  done
}

# Forms a world of 4 through a seed on host 0 and runs "$@" on every host
# (in the background); run_wait collects them. Logs in $out/<case>/.
pids=()
run_start() {
  local name="$1"; shift
  local dir="$out/$name"
  mkdir -p "$dir"
  $SUDO ip netns exec "$(ns h0)" timeout 120 build/tools/seed/nexar-seed --listen "$seed_addr" \
    --world-size 4 --token-file "$out/token" >"$dir/seed.log" 2>&1 &
  for _ in $(seq 100); do
    grep -qs "listening on" "$dir/seed.log" && break
    sleep 0.2
  done
  pids=()
  for i in 0 1 2 3; do
    $SUDO ip netns exec "$(ns "h$i")" env NEXAR_SEED="$seed_addr" NEXAR_CLUSTER_TOKEN="$token" \
      timeout -k 10 $((secs + 600)) "$@" >"$dir/host$i.log" 2>&1 &
    pids+=($!)
  done
}
# Sets failed_hosts to how many exited non-zero.
run_wait() {
  failed_hosts=0
  for p in "${pids[@]}"; do wait "$p" || failed_hosts=$((failed_hosts + 1)); done
  wait || true  # the seed
}

problems=()
soak=(build/tests/soak/nexar-soak-worker --seconds "$secs" --sample-seconds 1000)
bench=(build/bench/nexar-bench --worker --lib nexar --op allreduce --sizes "$size" --iters 3 --warmup 1)
printf '%-14s %7s %16s %11s %8s\n' case rounds "allreduce $size" "busbw Gb/s" "vs none"
base_us=""
for c in none loss1 loss5 delay_reorder rate100; do
  if ! impair "$c"; then
    echo "$c: not run: this kernel has no netem (CONFIG_NET_SCH_NETEM), which delays and reorders"
    continue
  fi
  run_start "$c-soak" "${soak[@]}"
  run_wait
  rounds=$(sed -n 's/.*SOAK_DONE rank=0 rounds=\([0-9]*\).*/\1/p' "$out/$c-soak"/host*.log)
  if [ "$failed_hosts" -ne 0 ] || [ "$(cat "$out/$c-soak"/host*.log | grep -c SOAK_DONE)" -ne 4 ]; then
    problems+=("$c: the mixed traffic failed ($(grep -h SOAK_FAILED "$out/$c-soak"/host*.log | head -1))")
  fi
  run_start "$c-allreduce" "${bench[@]}"
  run_wait
  # The bench's JSON row (rank 0's): median time and bus bandwidth.
  read -r us bw ok < <(cat "$out/$c-allreduce"/host*.log | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.startswith("{") and "\"allreduce\"" in l]
r = rows[0] if rows else {}
print(r.get("median_us", 0), r.get("busbw_gbps", 0), r.get("check", "none"))')
  if [ "$failed_hosts" -ne 0 ] || [ "$ok" != ok ]; then
    problems+=("$c: the $size allreduce failed (check: $ok; logs: $out/$c-allreduce)")
  fi
  [ "$c" = none ] && base_us="$us"
  python3 - "$c" "${rounds:-?}" "$us" "$bw" "${base_us:-0}" <<'PY'
import sys
c, rounds, us, bw, base = sys.argv[1], sys.argv[2], *map(float, sys.argv[3:])
ratio = f"{100 * base / us:.0f} %" if base and us else "-"
print(f"{c:<14} {rounds:>7} {us / 1000:13.0f} ms {bw:11.3f} {ratio:>8}")
PY
done
impair none

# A link down for a while in the middle of the mixed traffic (host 2's).
flap() {
  local name="$1" down="$2"
  run_start "$name" build/tests/soak/nexar-soak-worker --seconds 40 --sample-seconds 1000
  sleep 12
  $SUDO ip -n "$(ns hub)" link set p2 down
  sleep "$down"
  $SUDO ip -n "$(ns hub)" link set p2 up
  run_wait
}
flap link_down_2s 2
if [ "$failed_hosts" -ne 0 ]; then
  problems+=("a link down for 2 s was not survived: $(grep -h SOAK_FAILED "$out/link_down_2s"/host*.log | head -1)")
else
  echo "link down for 2 s: survived, every result exact"
fi
# Past the heartbeat timeout (5 s by default): the others must report host
# 2's rank as failed (NEXAR_ERR_PEER_FAILED = -5), not hang or time out.
flap link_down_10s 10
if [ "$failed_hosts" -eq 0 ] || ! grep -qh "SOAK_FAILED.*status -5" "$out/link_down_10s"/host*.log; then
  problems+=("a link down for 10 s was not reported as a peer failure (logs: $out/link_down_10s)")
else
  echo "link down for 10 s: reported as a peer failure: $(grep -h SOAK_FAILED "$out/link_down_10s"/host*.log | head -1)"
fi

for p in "${problems[@]}"; do echo "lossy: FAILED: $p"; done
[ ${#problems[@]} -eq 0 ] && echo "lossy: ok"
[ ${#problems[@]} -eq 0 ]
