"""Machines exchange their launch facts at machine 0's address and port.

Machine 0 listens at ``main_address:main_port`` (proving the port free and the address its
own); every other machine connects there (proving it reachable), sends its facts as one
JSON line and receives every machine's facts back. Each machine then judges the same
facts, so all of them stop (or go on to the rehearsal) together. The socket is closed
before any rank starts: the rendezvous uses the same port afterwards.
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Any

from .findings import Finding, fault, ok

#: Seconds machine 0 waits for the others (and they for it); the launch part stays < 15 s.
WAIT_S = float(os.environ.get("TUNER_CHECK_WAIT", "10"))


def _recv_line(conn: socket.socket, deadline: float) -> bytes:
    buf = b""
    while not buf.endswith(b"\n"):
        conn.settimeout(max(0.1, deadline - time.monotonic()))
        chunk = conn.recv(65536)
        if not chunk:
            break
        buf += chunk
    return buf


def serve(address: str, port: int, facts: dict[str, Any], n: int) -> tuple[list[dict], list[Finding]]:
    """Machine 0: collect the others' facts until all came or `WAIT_S` passed; answer each."""
    from .preflight import bind_problem

    fix_port = (f"free port {port} on machine 0 (`ss -ltnp 'sport = :{port}'` names the holder) or compile with "
                "another hardware.main_process_port")
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        srv.bind((address, port))
    except OSError:
        srv.close()
        check, saw = bind_problem(address, port) or ("port", f"cannot listen at {address}:{port}")
        fix = fix_port if check == "port" else (f"{address} is not an address of this machine: compile with "
                                                "hardware.main_process_ip = machine 0's address (or pass --main-address)")
        return [facts], [fault(check, "machine 0", saw, fix)]
    srv.listen(max(1, n))
    got: list[dict] = [facts]
    conns = []
    deadline = time.monotonic() + WAIT_S
    try:
        while len(got) < n and time.monotonic() < deadline:
            srv.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                break
            try:
                got.append(json.loads(_recv_line(conn, deadline)))
                conns.append(conn)
            except (OSError, ValueError):
                conn.close()
        reply = (json.dumps(got) + "\n").encode()
        for c in conns:
            try:
                c.sendall(reply)
            except OSError:
                pass
    finally:
        for c in conns:
            c.close()
        srv.close()
    seen = {f.get("machine") for f in got}
    findings = [ok("address", "machine 0", f"listening at {address}:{port}")]
    missing = [m for m in range(n) if m not in seen]
    if missing:
        findings.append(fault("port", ", ".join(f"machine {m}" for m in missing),
                              f"did not report to {address}:{port} within {WAIT_S:.0f} s",
                              f"run `tuner check BUILD ... --machine-rank N` on every machine within {WAIT_S:.0f} s of "
                              f"each other, and make sure each reaches {address}:{port} (firewall, address)"))
    else:
        findings.append(ok("port", "all", f"{n} machines met at {address}:{port}"))
    return got, findings


def join(address: str, port: int, facts: dict[str, Any]) -> tuple[list[dict], list[Finding]]:
    """Machine N > 0: send this machine's facts to machine 0, get everyone's back."""
    m = f"machine {facts['machine']}"
    deadline = time.monotonic() + WAIT_S
    last = ""
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((address, port), timeout=max(0.2, min(2.0, deadline - time.monotonic()))) as c:
                c.sendall((json.dumps(facts) + "\n").encode())
                data = _recv_line(c, deadline + 3)
            all_facts = json.loads(data)
            return all_facts, [ok("port", m, f"reached machine 0 at {address}:{port}")]
        except (OSError, ValueError) as exc:
            last = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            time.sleep(0.3)
    return [facts], [fault("port", m, f"cannot reach machine 0 at {address}:{port} within {WAIT_S:.0f} s ({last})",
                           f"check hardware.main_process_ip (or --main-address) is machine 0's address as seen from "
                           f"here, that `tuner check` runs on machine 0, and that no firewall blocks port {port}")]
