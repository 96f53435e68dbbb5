#!/usr/bin/env python3
"""An API client on one kept TLS connection, for the Kubernetes benchmark: the time of a
request is then the apiserver's (as for a controller, or kubectl's apply once connected), not
a process's start and a TLS handshake.

    api_client.py URL CA CERT KEY

Reads one JSON request per line from stdin: {"method": "POST", "path": "/api/v1/...",
"content_type": "application/json", "body": "..."}. Answers each with one JSON line:
{"sent": T0, "answered": T1, "status": N, "reconnected": B} and, for a status of 300 or more,
"body" (the answer's text). T0 is the wall clock right before the request's first byte is
written, T1 right after the answer's last byte is read (seconds since the epoch, the clock of
tcpdump's timestamps). The connection is made, and its handshake done, before the first line
is read; one that the server closed is made again before the request's clock starts.
"""
import http.client
import json
import ssl
import sys
import time
from urllib.parse import urlsplit


def connect(url, context):
    parts = urlsplit(url)
    connection = http.client.HTTPSConnection(parts.hostname, parts.port, context=context)
    # The handshake now, not in the first request's time.
    connection.connect()
    return connection


def main():
    url, ca, cert, key = sys.argv[1:5]
    context = ssl.create_default_context(cafile=ca)
    context.load_cert_chain(cert, key)
    connection = connect(url, context)
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        reconnected = False
        # A connection the server closed since (an idle timeout) is made again first.
        if connection.sock is None:
            connection = connect(url, context)
            reconnected = True
        headers = {"Content-Type": request["content_type"], "Accept": "application/json"}
        body = request["body"].encode()
        sent = time.time()
        try:
            connection.request(request["method"], request["path"], body=body, headers=headers)
            response = connection.getresponse()
            text = response.read()
        except (http.client.HTTPException, ConnectionError):
            # Closed under the request: once again on a new connection, timed from there.
            connection.close()
            connection = connect(url, context)
            reconnected = True
            sent = time.time()
            connection.request(request["method"], request["path"], body=body, headers=headers)
            response = connection.getresponse()
            text = response.read()
        answered = time.time()
        answer = {
            "sent": sent,
            "answered": answered,
            "status": response.status,
            "reconnected": reconnected,
        }
        if response.status >= 300:
            answer["body"] = text.decode(errors="replace")
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
