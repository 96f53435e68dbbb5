#!/usr/bin/env python3
"""A BGP speaker that misbehaves on purpose, for tests/hostile.rs.

    hostile_bgp.py stall HOST ASN ROUTER_ID HOLD PREFIX SECONDS
        Establishes with a tiny receive buffer, announces PREFIX, then stops reading: it only
        sends ROUTE-REFRESH in a loop (so the peer keeps queueing UPDATEs for it) and a
        KEEPALIVE every second. Prints {"established": true}, {"stalled": true} once it
        stops reading, and {"closed": S} (seconds after the stall) when the connection fails,
        or {"timeout": true} after SECONDS.

    hostile_bgp.py flood HOST ASN ROUTER_ID COUNT SECONDS BASE
        Establishes and announces COUNT /32 prefixes from address BASE on in packed UPDATEs,
        then reads. Prints one JSON line per event: {"established": true, "at": T},
        {"sent": COUNT, "at": T}, {"type": N, "code": C, "subcode": S, "at": T} per message,
        {"closed": true, "at": T}. After a close it reconnects every 0.5 s until SECONDS have
        passed since the start (the peer may refuse it for a while), and floods again.

Times are seconds since the start. Every line is flushed at once.
"""
import json
import socket
import struct
import sys
import time

# The framing is raw_bgp.py's (the script's own directory is on the import path).
from raw_bgp import message, read_message

START = time.time()


def out(**line):
    print(json.dumps(line), flush=True)


def now():
    return round(time.time() - START, 3)


def open_message(asn, router_id, hold):
    caps = bytes([1, 4, 0, 1, 0, 1])  # multiprotocol IPv4 unicast (RFC 4760)
    caps += bytes([2, 0])  # route refresh (RFC 2918)
    caps += bytes([65, 4]) + struct.pack("!I", asn)  # 4-octet AS (RFC 6793)
    params = bytes([2, len(caps)]) + caps
    my_as = asn if asn < 65536 else 23456
    body = struct.pack("!BHH4sB", 4, my_as, hold, socket.inet_aton(router_id), len(params))
    return message(1, body + params)


def attrs(asn, next_hop):
    origin = bytes([0x40, 1, 1, 0])
    path = bytes([0x40, 2, 6, 2, 1]) + struct.pack("!I", asn)
    nh = bytes([0x40, 3, 4]) + socket.inet_aton(next_hop)
    return origin + path + nh


def update(asn, next_hop, nlri):
    a = attrs(asn, next_hop)
    return message(2, struct.pack("!H", 0) + struct.pack("!H", len(a)) + a + nlri)


def prefix_nlri(text):
    addr, length = text.split("/")
    length = int(length)
    return bytes([length]) + socket.inet_aton(addr)[: (length + 7) // 8]


def connect(host, rcvbuf=None, until=None):
    while True:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            # Before connect, so the window we advertise stays this small.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.settimeout(5)
        try:
            sock.connect((host, 179))
            return sock
        except OSError:
            sock.close()
            if until is not None and time.time() > until:
                return None
            time.sleep(0.5)


def establish(sock, asn, router_id, hold):
    """OPEN/KEEPALIVE exchange; True once the peer's KEEPALIVE came."""
    sock.sendall(open_message(asn, router_id, hold))
    got = read_message(sock)
    if got is None or got[0] != 1:
        return False
    sock.sendall(message(4))
    while True:
        got = read_message(sock)
        if got is None or got[0] == 3:
            return False
        if got[0] == 4:
            return True


def stall(host, asn, router_id, hold, prefix, seconds):
    sock = connect(host, rcvbuf=4096, until=time.time() + 20)
    if sock is None or not establish(sock, asn, router_id, hold):
        out(error="not established")
        return
    local = sock.getsockname()[0]
    sock.sendall(update(asn, local, prefix_nlri(prefix)))
    out(established=True, at=now())
    # Give the peer a moment to install the prefix, then stop reading for good.
    time.sleep(1)
    stalled = time.time()
    out(stalled=True, at=now())
    refresh = message(5, struct.pack("!HBB", 1, 0, 1))
    last_keepalive = 0.0
    sock.settimeout(2)
    while time.time() - stalled < seconds:
        try:
            if time.time() - last_keepalive >= 1:
                sock.sendall(message(4))
                last_keepalive = time.time()
            sock.sendall(refresh * 20)
        except OSError:
            out(closed=round(time.time() - stalled, 3), at=now())
            return
        time.sleep(0.01)
    out(timeout=True, at=now())


def flood(host, asn, router_id, count, seconds, base_address):
    until = START + seconds
    while time.time() < until:
        sock = connect(host, until=until)
        if sock is None:
            break
        try:
            if not establish(sock, asn, router_id, 90):
                out(refused=True, at=now())
                sock.close()
                time.sleep(0.5)
                continue
        except OSError:
            out(refused=True, at=now())
            sock.close()
            time.sleep(0.5)
            continue
        out(established=True, at=now())
        local = sock.getsockname()[0]
        base = struct.unpack("!I", socket.inet_aton(base_address))[0]
        # 800 /32s (5 octets each) fit one 4096-octet UPDATE.
        try:
            for first in range(0, count, 800):
                nlri = b"".join(
                    bytes([32]) + struct.pack("!I", base + i)
                    for i in range(first, min(first + 800, count))
                )
                sock.sendall(update(asn, local, nlri))
            out(sent=count, at=now())
        except OSError:
            pass
        sock.settimeout(1)
        last_keepalive = time.time()
        while time.time() < until:
            if time.time() - last_keepalive > 10:
                try:
                    sock.sendall(message(4))
                except OSError:
                    break
                last_keepalive = time.time()
            try:
                got = read_message(sock)
            except socket.timeout:
                continue
            except OSError:
                got = None
            if got is None:
                break
            kind, body = got
            line = {"type": kind, "at": now()}
            if kind == 3 and len(body) >= 2:
                line["code"], line["subcode"] = body[0], body[1]
            out(**line)
        out(closed=True, at=now())
        sock.close()


def main():
    mode, host, asn, router_id = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    if mode == "stall":
        stall(host, asn, router_id, int(sys.argv[5]), sys.argv[6], float(sys.argv[7]))
    elif mode == "flood":
        flood(host, asn, router_id, int(sys.argv[5]), float(sys.argv[6]), sys.argv[7])
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
