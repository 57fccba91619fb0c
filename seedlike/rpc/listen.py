"""Where a learner starts listening for actors: in this process or through stream front ends.

Kept apart from streams.py (the in-process server and what both ways share) and hub.py (the front
ends), which both import streams.py: choosing between them here keeps the imports one way.
"""

from __future__ import annotations

from seedlike.rpc import ports
from seedlike.rpc.hub import FrontEnds
from seedlike.rpc.security import Credentials, check_bind
from seedlike.rpc.streams import LocalServer, Transport


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
