#!/usr/bin/env python3
"""Which received QUIC packets were answered with an ACK-only packet, and
whether a gap in the peer's ack-eliciting packet numbers came before them.

Reads a log written with NEXAR_LOG_LEVEL=trace (ngtcp2's packet and frame
lines, prefixed by nexar with the rank), from a file or standard input. For
each rank, every received ack-eliciting 1-RTT packet (one with a frame other
than ACK and PADDING) is paired with the next 1-RTT packet that rank sent,
and counted by two questions: was its number more than one past the last
ack-eliciting packet received (a "gap", though the packets in between may
have arrived), and was the next packet sent ACK-only. docs/performance.md,
"Acknowledgements that answer acknowledgements", has what it showed.
"""
import collections
import re
import sys

# nexar[host:pid:r1] trace: ngtcp2: I00000035 0x5a50... pkt tx pkn=221 dcid=... type=1RTT k=0
PACKET = re.compile(r"nexar\[[^\]]*:r(\d+)\] trace: ngtcp2: \S+ \S+ pkt (rx|tx) pkn=(\d+) .*type=1RTT")
# ... frm tx 221 1RTT ACK(0x02) largest_ack=220 ...
FRAME = re.compile(r"nexar\[[^\]]*:r(\d+)\] trace: ngtcp2: \S+ \S+ frm (rx|tx) (\d+) 1RTT (\w+)")
NOT_ELICITING = {"ACK", "PADDING"}


def packets_by_rank(lines):
    """rank -> [[direction, packet number, set of frame types]] in log order."""
    packets = collections.defaultdict(list)
    for line in lines:
        m = PACKET.search(line)
        if m:
            rank, way, pkn = m.groups()
            packets[rank].append([way, int(pkn), set()])
            continue
        m = FRAME.search(line)
        if m:
            rank, way, pkn, frame = m.groups()
            last = packets[rank][-1] if packets[rank] else None
            if last and last[0] == way and last[1] == int(pkn):
                last[2].add(frame)
    return packets


def count(packets):
    """(gap or not, answered with ACK-only or not) -> received packets."""
    counts = collections.Counter()
    for seq in packets.values():
        last_eliciting = None
        for i, (way, pkn, frames) in enumerate(seq):
            if way != "rx" or frames <= NOT_ELICITING:
                continue
            gap = last_eliciting is not None and pkn != last_eliciting + 1
            last_eliciting = pkn
            sent = next((p for p in seq[i + 1:] if p[0] == "tx"), None)
            ack_only = sent is not None and sent[2] <= NOT_ELICITING
            counts[(gap, ack_only)] += 1
    return counts


def main():
    source = open(sys.argv[1]) if len(sys.argv) > 1 else sys.stdin
    counts = count(packets_by_rank(source))
    total = sum(counts.values())
    if total == 0:
        print("quic_ack_gaps: no ack-eliciting 1-RTT packets received in the log "
              "(run with NEXAR_LOG_LEVEL=trace)", file=sys.stderr)
        return 1
    print(f"{total} ack-eliciting packets received")
    for gap in (True, False):
        n = counts[(gap, True)] + counts[(gap, False)]
        print(f"  {'after a gap' if gap else 'no gap':12} {n:6}, answered with an ACK-only "
              f"packet: {counts[(gap, True)]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
