"""Where a learner starts listening for actors: in this process or through stream front ends.

Kept apart from streams.py (the in-process server and what both ways share) and hub.py (the front
ends), which both import streams.py: choosing between them here keeps the imports one way.
"""

from __future__ import annotations

import logging
import os

from seedlike.rpc import ports, security
from seedlike.rpc.hub import FrontEnds
from seedlike.rpc.security import Credentials, check_bind
from seedlike.rpc.streams import LocalServer, Transport

ADDRESS_FILE = "server_address"  # <logdir>/server_address: "host:port", once actors can connect


def start_inference(service, config, logdir: str, bind: str, port: int):
    """Starts `service` (a seedlike.server.inference.InferenceService) and serves it to actors
    with the run's transport settings and credentials; writes <logdir>/server_address.

    Returns (server, "host:port"). A refused bind or a taken port stops the service again, so
    no threads are left behind.
    """
    credentials = security.load(config.transport.credentials, "server")
    bind = security.bind_address(bind)
    service.start()
    try:
        server, bound = listen(service, bind, port, config.server, credentials)
    except BaseException:
        service.stop(finished=True)
        raise
    address = f"{bind}:{bound}"
    os.makedirs(logdir, exist_ok=True)
    with open(os.path.join(logdir, ADDRESS_FILE), "w") as f:
        f.write(address + "\n")
    logging.info("serving actors on %s", address)
    return server, address


def listen(service, bind: str, port: int, server_config, credentials: Credentials | None = None):
    """Starts serving `service` to actors with the transport settings of `server_config` (the
    config's `server` section): stream front ends in processes of their own
    (server.front_ends, seedlike.rpc.hub), or the gRPC event loop in this process. Returns the
    server (`stop(grace_s)`) and the bound port (useful with port=0).

    Plaintext without credentials, which only a loopback `bind` allows (seedlike.rpc.security);
    a port another process listens on is refused (seedlike.rpc.ports.PortInUse).
    """
    check_bind(bind, credentials)
    transport = Transport.from_config(server_config)
    claim = ports.claim(bind, port)
    try:
        if transport.front_ends == 0:
            server = LocalServer(service, claim, transport, credentials)
        else:
            server = FrontEnds(service, claim, transport, credentials)
    except BaseException:
        claim.release()
        raise
    return server, server.port
