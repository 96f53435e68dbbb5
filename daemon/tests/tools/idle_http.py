#!/usr/bin/env python3
"""Clients of an HTTP endpoint that hold connections without asking anything, and one that
scrapes it, for the metrics endpoint's connection-limit test.

    idle_http.py hold HOST PORT IDLE PARTIAL
    idle_http.py scrape HOST PORT TIMEOUT

`hold` keeps IDLE connections that send nothing and PARTIAL connections that send a request
head without its final blank line; each one the server closes is opened again at once (a
client that renews its connections). Prints {"opened": N} after the first round, then every
second {"open": N, "renewed": M} (M: connections closed by the server and opened again).
Runs until killed.

`scrape` sends one `GET /metrics` and reads the whole answer, giving up after TIMEOUT
seconds. Prints one JSON line: {"status": "HTTP/1.1 200 OK", "bytes": N, "seconds": S,
"port": P}, or {"error": "...", "seconds": S, "port": P} (P: its own port, to find it in the
server's log).
"""
import json
import selectors
import socket
import sys
import time

PARTIAL_HEAD = b"GET /metrics HTTP/1.1\r\nHost: node\r\n"


def connect(host, port, partial):
    try:
        s = socket.create_connection((host, port), timeout=1.0)
        if partial:
            s.sendall(PARTIAL_HEAD)
        s.setblocking(False)
        return s
    except OSError:
        return None


def hold(host, port, idle, partial):
    kinds = [False] * idle + [True] * partial
    sel = selectors.DefaultSelector()
    slots = [None] * len(kinds)
    renewed = 0

    def open_slot(i):
        s = connect(host, port, kinds[i])
        slots[i] = s
        if s is not None:
            sel.register(s, selectors.EVENT_READ, i)

    for i in range(len(kinds)):
        open_slot(i)
    print(json.dumps({"opened": sum(s is not None for s in slots)}), flush=True)
    last_report = time.monotonic()
    while True:
        for key, _ in sel.select(timeout=0.1):
            i = key.data
            try:
                data = key.fileobj.recv(4096)
            except OSError:
                data = b""
            if data:
                continue  # an answer (say, 408): wait for the close
            sel.unregister(key.fileobj)
            key.fileobj.close()
            slots[i] = None
            renewed += 1
        for i, s in enumerate(slots):
            if s is None:
                open_slot(i)
        now = time.monotonic()
        if now - last_report >= 1.0:
            last_report = now
            open_now = sum(s is not None for s in slots)
            print(json.dumps({"open": open_now, "renewed": renewed}), flush=True)


def scrape(host, port, timeout):
    start = time.monotonic()
    deadline = start + timeout
    out = {}
    try:
        s = socket.create_connection((host, port), timeout=timeout)
        out["port"] = s.getsockname()[1]
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: node\r\n\r\n")
        data = b""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no whole answer in {timeout} s ({len(data)} bytes)")
            s.settimeout(left)
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        status = data.split(b"\r\n", 1)[0].decode(errors="replace")
        if not data:
            raise ConnectionError("closed without an answer")
        out.update(status=status, bytes=len(data))
    except OSError as e:
        out["error"] = f"{type(e).__name__}: {e}"
    out["seconds"] = round(time.monotonic() - start, 3)
    print(json.dumps(out), flush=True)


def main():
    mode, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode == "hold":
        hold(host, port, int(sys.argv[4]), int(sys.argv[5]))
    elif mode == "scrape":
        scrape(host, port, float(sys.argv[4]))
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
