#!/usr/bin/env python3
"""ctest check of quic_ack_gaps.py: on a made-up log its counts are asserted
exactly; on the trace log of a real 2-rank run it must find the packets (so
a change in the log's format fails here, not in a reader's hands). The real
run's counts are ngtcp2's behaviour and are not asserted."""
import os
import subprocess
import sys

bench = sys.argv[1]
here = os.path.dirname(os.path.abspath(__file__))
tool = os.path.join(here, "quic_ack_gaps.py")


def pkt(rank, way, pkn, *frames):
    head = f"nexar[vm:1:r{rank}] trace: ngtcp2: I00000001 0xab"
    lines = [f"{head} pkt {way} pkn={pkn} dcid=0xcd type=1RTT k=0"]
    lines += [f"{head} frm {way} {pkn} 1RTT {f}(0x00) x=1" for f in frames]
    return lines


# Rank 0 receives data 10, answers ACK-only 20, sends data 21; receives data
# 12 (a gap: 11 was the peer's ACK-only), answers ACK-only 22; receives data
# 13 (no gap) and sends data 23. Rank 1's lines interleave and are its own.
log = (pkt(0, "rx", 10, "STREAM") + pkt(1, "tx", 10, "STREAM") + pkt(0, "tx", 20, "ACK") +
       pkt(0, "tx", 21, "STREAM", "ACK") + pkt(0, "rx", 11, "ACK") + pkt(0, "rx", 12, "STREAM") +
       pkt(0, "tx", 22, "ACK") + pkt(0, "rx", 13, "STREAM", "PADDING") +
       pkt(0, "tx", 23, "STREAM") + pkt(1, "rx", 20, "ACK") + pkt(1, "rx", 21, "STREAM"))
p = subprocess.run([sys.executable, tool], input="\n".join(log) + "\n", capture_output=True,
                   text=True, timeout=60)
want = ("4 ack-eliciting packets received\n"
        "  after a gap       1, answered with an ACK-only packet: 1\n"
        "  no gap            3, answered with an ACK-only packet: 1\n")
if p.returncode != 0 or p.stdout != want:
    sys.exit(f"made-up log: exit {p.returncode}\n{p.stdout}{p.stderr}wanted:\n{want}")

env = dict(os.environ, NEXAR_LOG_LEVEL="trace")
run = subprocess.run([bench, "--in-process", "allreduce", "--ranks", "2", "--sizes", "8",
                      "--iters", "20", "--warmup", "2"], env=env, capture_output=True,
                     text=True, timeout=300)
if run.returncode != 0:
    sys.exit(f"nexar-bench exited {run.returncode}: {run.stderr[-2000:]}")
p = subprocess.run([sys.executable, tool], input=run.stdout + run.stderr, capture_output=True,
                   text=True, timeout=60)
sys.stdout.write(p.stdout)
if p.returncode != 0:
    sys.exit(f"real log: quic_ack_gaps.py exited {p.returncode}: {p.stderr}")
total = int(p.stdout.split()[0])
# 22 allreduces each way, and the barriers around them: dozens of packets.
if total < 40:
    sys.exit(f"real log: only {total} ack-eliciting packets found")
print("check_quic_ack_gaps: ok")
