#!/usr/bin/env python3
"""A deliberately minimal BGP speaker for sending malformed messages to uplink.

    raw_bgp.py HOST ASN ROUTER_ID SECONDS HEX [HEX ...]

Connects to HOST:179, exchanges OPEN (4-octet AS, IPv4 unicast) and KEEPALIVE, sends each
HEX as a complete message (header included), keeps the session alive for SECONDS, and prints
one JSON line per message received after the exchange: {"type": N, "code": C, "subcode": S}.
Exits 0 once the time is up or the peer closes.
"""
import json
import socket
import struct
import sys
import time


def message(kind, body=b""):
    return b"\xff" * 16 + struct.pack("!HB", 19 + len(body), kind) + body


def open_message(asn, router_id):
    caps = bytes([1, 4, 0, 1, 0, 1])  # multiprotocol IPv4 unicast (RFC 4760)
    caps += bytes([65, 4]) + struct.pack("!I", asn)  # 4-octet AS (RFC 6793)
    params = bytes([2, len(caps)]) + caps
    my_as = asn if asn < 65536 else 23456
    body = struct.pack("!BHH4sB", 4, my_as, 30, socket.inet_aton(router_id), len(params)) + params
    return message(1, body)


def read_message(sock):
    header = b""
    while len(header) < 19:
        chunk = sock.recv(19 - len(header))
        if not chunk:
            return None
        header += chunk
    length, kind = struct.unpack("!HB", header[16:19])
    body = b""
    while len(body) < length - 19:
        chunk = sock.recv(length - 19 - len(body))
        if not chunk:
            return None
        body += chunk
    return kind, body


def main():
    host, asn, router_id, seconds = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
    args = sys.argv[5:]
    # "open:HEX" replaces our OPEN; the exchange then stops at whatever the peer answers.
    custom_open = bytes.fromhex(args.pop(0)[5:]) if args and args[0].startswith("open:") else None
    payloads = [bytes.fromhex(h) for h in args]
    deadline = time.time() + 20
    while True:
        try:
            sock = socket.create_connection((host, 179), timeout=5)
            break
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.5)
    sock.sendall(custom_open or open_message(asn, router_id))
    got = read_message(sock)
    if custom_open is not None:
        # Report what the peer sent back (its OPEN, then a NOTIFICATION) and stop.
        sock.settimeout(3)
        while got is not None:
            kind, body = got
            line = {"type": kind}
            if kind == 3 and len(body) >= 2:
                line["code"], line["subcode"] = body[0], body[1]
            print(json.dumps(line), flush=True)
            try:
                got = read_message(sock)
            except OSError:
                break
        return
    if got is None or got[0] != 1:
        print(json.dumps({"error": "no OPEN", "got": got[0] if got else None}))
        return
    sock.sendall(message(4))
    while True:
        got = read_message(sock)
        if got is None:
            print(json.dumps({"error": "closed during OPEN exchange"}))
            return
        if got[0] == 4:
            break
    print(json.dumps({"established": True}), flush=True)
    for p in payloads:
        sock.sendall(p)
    end = time.time() + seconds
    sock.settimeout(1)
    last_keepalive = 0
    while time.time() < end:
        if time.time() - last_keepalive > 5:
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
            break
        if got is None:
            print(json.dumps({"closed": True}), flush=True)
            break
        kind, body = got
        line = {"type": kind}
        if kind == 3 and len(body) >= 2:
            line["code"], line["subcode"] = body[0], body[1]
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
