"""Pod IPs for the node runner's pods, from a loopback network."""

from __future__ import annotations

import ipaddress
import threading

POD_NETWORK = "127.17.0.0/16"  # loopback only


class IPAM:
    """Pod IPs from 127.17.0.0/16, round robin, so an address is reused as late as possible."""

    def __init__(self, network: str = POD_NETWORK) -> None:
        net = ipaddress.IPv4Network(network)
        if not net.subnet_of(ipaddress.IPv4Network("127.0.0.0/8")):
            raise ValueError(f"pod network {network} is not loopback")
        self._hosts = [str(h) for h in net.hosts()][1:]  # .0.1 left out
        self._used: dict[str, str] = {}  # uid -> ip
        self._next = 0
        self._lock = threading.Lock()

    def allocate(self, uid: str, prefer: str | None = None) -> str:
        with self._lock:
            if uid in self._used:
                return self._used[uid]
            taken = set(self._used.values())
            if prefer and prefer in self._hosts and prefer not in taken:
                self._used[uid] = prefer
                return prefer
            for _ in range(len(self._hosts)):
                ip = self._hosts[self._next % len(self._hosts)]
                self._next += 1
                if ip not in taken:
                    self._used[uid] = ip
                    return ip
        raise RuntimeError("pod network exhausted")

    def release(self, uid: str) -> None:
        with self._lock:
            self._used.pop(uid, None)
