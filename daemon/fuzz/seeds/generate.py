#!/usr/bin/env python3
"""Writes the seed corpus of each fuzz target (daemon/fuzz/seeds/<target>/) from the byte
vectors below, so the seeds can be reviewed here and regenerated. The fuzz script copies them
into the working corpus daemon/fuzz/corpus/<target>/ (gitignored) before each run.
The seeds of the manifests, control and health_http targets are text, hand-written in their
directories, and not generated here.

The message and update targets take a first "selector" byte that picks the UPDATE context:
bit 0 = 4-octet AS, bit 1 = eBGP, bit 2 = IPv4 unicast only (else IPv4 + IPv6).
"""
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
MARKER = b"\xff" * 16


def msg(kind, body):
    return MARKER + struct.pack("!HB", 19 + len(body), kind) + body


def cap(code, value=b""):
    return bytes([code, len(value)]) + value


def open_body(asn, hold, bgp_id, caps, extended=False):
    params = b"".join(caps)
    head = struct.pack("!BHH4s", 4, asn, hold, bytes(bgp_id))
    if extended:
        # RFC 9072: Non-Ext OP Len 255, Non-Ext OP Type 255, 2-octet length, 2-octet param lengths.
        param = struct.pack("!BH", 2, len(params)) + params
        return head + struct.pack("!BBH", 255, 255, len(param)) + param
    return head + bytes([len(params) + 2, 2, len(params)]) + params


CAPS = [
    cap(1, struct.pack("!HBB", 1, 0, 1)),          # MP IPv4 unicast
    cap(1, struct.pack("!HBB", 2, 0, 1)),          # MP IPv6 unicast
    cap(2),                                        # route refresh
    cap(70),                                       # enhanced route refresh
    cap(65, struct.pack("!I", 4200000001)),        # 4-octet AS
    cap(64, struct.pack("!HHBBHBB", 0xC078, 1, 1, 0x80, 2, 1, 0)),  # GR, R+N, 120 s
]
OPEN = msg(1, open_body(23456, 90, [10, 0, 0, 1], CAPS))
OPEN_EXT = msg(1, open_body(65001, 9, [10, 0, 0, 2], CAPS[:3] + [cap(73, b"a" * 200), cap(73, b"b" * 100)], extended=True))
KEEPALIVE = msg(4, b"")
ROUTE_REFRESH = msg(5, struct.pack("!HBB", 2, 0, 1))
shutdown = "maintenance window".encode()
NOTIFICATION = msg(3, bytes([6, 2, len(shutdown)]) + shutdown)
NOTIFICATION_OPEN = msg(3, bytes([2, 7]) + CAPS[1])


def attr(flags, code, value):
    if flags & 0x10:
        return struct.pack("!BBH", flags, code, len(value)) + value
    return struct.pack("!BBB", flags, code, len(value)) + value


def update_body(withdrawn=b"", attrs=b"", nlri=b""):
    return struct.pack("!H", len(withdrawn)) + withdrawn + struct.pack("!H", len(attrs)) + attrs + nlri


AS_PATH4 = attr(0x40, 2, bytes([2, 2]) + struct.pack("!II", 4200000001, 65102))
BASE4 = attr(0x40, 1, b"\x00") + AS_PATH4 + attr(0x40, 3, bytes([172, 18, 20, 1]))
UPDATE_V4 = update_body(
    attrs=BASE4 + attr(0x80, 4, struct.pack("!I", 0)) + attr(0xC0, 8, struct.pack("!II", 0xFDE80064, 0xFFFFFF01))
    + attr(0xC0, 32, struct.pack("!III", 65801, 0, 100)),
    nlri=bytes([24, 10, 128, 7, 32, 172, 18, 20, 201, 0]),
)
UPDATE_WITHDRAW = update_body(withdrawn=bytes([24, 10, 128, 7, 8, 10]))
mp_reach = struct.pack("!HBB", 2, 1, 16) + bytes.fromhex("fd000000000000000000000000000001") + b"\x00" \
    + bytes([64]) + bytes.fromhex("fd00000000000001") + bytes([128]) + bytes(16)
mp_unreach = struct.pack("!HB", 2, 1) + bytes([48]) + bytes.fromhex("fd0000000001")
UPDATE_V6 = update_body(attrs=attr(0x40, 1, b"\x02") + AS_PATH4 + attr(0x90, 14, mp_reach) + attr(0x90, 15, mp_unreach))
AS_PATH2 = attr(0x40, 2, bytes([2, 2]) + struct.pack("!HH", 23456, 65102))
AS4_PATH = attr(0xC0, 17, bytes([2, 2]) + struct.pack("!II", 4200000001, 65102))
UPDATE_AS4 = update_body(attrs=attr(0x40, 1, b"\x01") + AS_PATH2 + AS4_PATH + attr(0x40, 3, bytes([192, 0, 2, 1])),
                         nlri=bytes([16, 10, 1]))
EOR_V4 = update_body()

# FSM: 7 config bytes (flags, remote AS choice, hold, keepalive, retry, retry max, jitter seed),
# then events: opcode, its operands, and a time step byte (see fuzz_targets/fsm.rs).
FSM_CFG_ACTIVE = [1, 0, 3, 0, 0, 1, 0]          # IPv4, Fixed(peer AS), hold 90 s
FSM_CFG_PASSIVE = [3 | 4, 2, 2, 2, 1, 1, 9]     # IPv4+IPv6, iBGP, passive, hold 9 s
OPEN_OK = [0, 13, 0, 5, 1]                       # msg OPEN: MP v4, RR, 4-octet AS, AS peer, 90 s, 10.0.0.1
FSM_HAPPY = FSM_CFG_ACTIVE + [
    0, 1,            # ManualStart -> Connect
    4, 0, 1,         # TcpConnected(attempt) -> OPEN sent
    8, 0, *OPEN_OK, 1,
    8, 0, 2, 1,      # KEEPALIVE -> Established
    8, 0, 3, 1,      # UPDATE
    10, 0, 1,        # UpdateSent
    2, 1,            # Tick at the next deadline (keepalive)
    3, 200, 1,       # 50 s later
    8, 0, 5, 1,      # ROUTE-REFRESH
    3, 255, 0, 3, 255, 0,  # hold timer expires -> Down
    2, 0, 2, 0,      # restart after backoff
    1, 2, 5, 0,      # ManualStop with a reason
]
FSM_COLLISION = FSM_CFG_ACTIVE + [
    0, 0,
    6, 0,            # TcpAccepted
    4, 0, 0,         # TcpConnected
    8, 0, 0, 13, 0, 5, 1, 0,   # OPEN on incoming, peer id 10.0.0.1 < ours: incoming loses
    8, 0, 0, 13, 0, 5, 1, 0,   # OPEN on outgoing -> OpenConfirm
    8, 0, 2, 0,      # KEEPALIVE -> Established
    6, 0,            # TcpAccepted while Established -> collision reject
    7, 0, 0,         # TcpClosed -> Down
    2, 0, 2, 0,
]
FSM_PASSIVE = FSM_CFG_PASSIVE + [
    0, 0, 6, 0,
    8, 0, 0, 0x1B, 1, 3, 1, 0,  # iBGP OPEN with MP v4+v6, RR, 4-octet AS
    8, 0, 2, 0,
    11, 0, 1, 0,     # FatalUpdateError
    6, 0, 8, 0, 4, 1, 2, 0, 2, 0,
]

def bfd_header(length, flags):
    # Vers 1 / Diag 1, state Up plus `flags`, Detect Mult 3, Length, discriminators, intervals.
    return struct.pack("!BBBBIIIII", 0x21, 0xC0 | flags, 3, length, 0x01020304, 0x0A0B0C0D,
                       300000, 50000, 0)


SEEDS = {
    "message": {
        "open": b"\x07" + OPEN,
        "open-extended-params": b"\x01" + OPEN_EXT,
        "stream-open-keepalive-updates": b"\x03" + OPEN + KEEPALIVE + msg(2, UPDATE_V4) + msg(2, UPDATE_V6)
        + msg(2, EOR_V4),
        "update-as4": b"\x02" + msg(2, UPDATE_AS4),
        "notification-shutdown": b"\x00" + NOTIFICATION,
        "notification-unsupported-capability": b"\x00" + NOTIFICATION_OPEN,
        "route-refresh-keepalive": b"\x01" + ROUTE_REFRESH + KEEPALIVE,
    },
    "update": {
        "v4-announce": b"\x03" + UPDATE_V4,
        "v4-withdraw": b"\x05" + UPDATE_WITHDRAW,
        "v6-mp": b"\x01" + UPDATE_V6,
        "as4-path-2octet-session": b"\x02" + UPDATE_AS4,
        "end-of-rib": b"\x07" + EOR_V4,
    },
    "fsm": {
        "happy-path": bytes(FSM_HAPPY),
        "collision": bytes(FSM_COLLISION),
        "passive-ibgp": bytes(FSM_PASSIVE),
    },
    # RFC 5880 §4.1 header (Up, Poll, Detect Mult 3) alone and with authentication sections
    # (§4.2-4.4); the digests are those of the unit vectors in bfd/auth.rs (key "secret").
    "bfd_packet": {
        "plain-up-poll": bfd_header(24, 0x20),
        "keyed-md5": bfd_header(48, 0x24)
        + bytes.fromhex("0218050000000102104d0587cc7b760441d4ea4c94f41282"),
        "meticulous-keyed-sha1": bfd_header(52, 0x24)
        + bytes.fromhex("051c050000000102bf8c17a66496151b1dd22a856afe0d1f5842e4a5"),
        "simple-password": bfd_header(31, 0x24) + bytes([1, 7, 1]) + b"secr",
    },
    "config": {
        "minimal.toml": b'[[bgp.routers]]\nasn = 65001\n\n[[bgp.routers.neighbors]]\naddress = "192.0.2.1"\nasn = 65002\n',
        "vrf-v6.toml": b'[[bgp.routers]]\nasn = 4200000001\nid = "10.0.0.5"\nvrf = "red"\nprefixes = ["2001:db8::/48"]\n\n'
        b'[[bgp.routers.neighbors]]\naddress = "2001:db8::1"\nasn = 65002\nhold_time = "9s"\n',
        "empty.toml": b"",
    },
}


def main():
    for target, seeds in SEEDS.items():
        out = os.path.join(HERE, target)
        os.makedirs(out, exist_ok=True)
        for name, data in seeds.items():
            with open(os.path.join(out, name), "wb") as f:
                f.write(data)
    example = os.path.join(HERE, "..", "..", "..", "docs", "examples", "uplink.toml")
    shutil.copyfile(example, os.path.join(HERE, "config", "docs-example.toml"))


if __name__ == "__main__":
    main()
