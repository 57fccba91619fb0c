"""Transport security: mutual TLS, a per-run token and one certificate per actor identity.

`scripts/make_credentials.sh DIR HOST...` writes, into DIR:
  ca.pem, ca.key            a CA of the run's own (keep ca.key where certificates are issued)
  server.pem, server.key    the learner's certificate, valid for HOST... and localhost
  token                     a random secret every actor stream must present
  revoked                   actor names the learner refuses (`--revoke DIR NAME`), reread each
                            second
and `scripts/make_credentials.sh --actors DIR NAME...` one directory per actor, DIR/actors/NAME:
  ca.pem, client.pem, client.key, token   with the subject "CN=seedlike actor NAME"

The learner reads DIR; an actor reads its own directory (`transport.credentials=DIR/actors/NAME`,
or DIR itself, where it picks DIR/actors/actor-<its actor id>). With credentials every stream is
TLS with client certificates and must carry the token; without them the server speaks plaintext and
is refused anywhere but loopback, where the machine's own users are the only ones who can connect.

What a stream is counted as (its *identity*, the unit of every influence bound, see
seedlike.server.influence) is decided here, from what the client proved, never from what it says:
the NAME of its certificate; for a certificate without one (a shared client.pem of older runs), or
plaintext on loopback, its peer host, which a client can multiply only by the addresses its host
has (IPv4 and IPv6 count apart); the peer host and declared actor id only where the operator says
the actors are trusted (server.trust_actor_ids).
"""

from __future__ import annotations

import dataclasses
import hmac
import ipaddress
import os
import socket
import ssl
import threading
import time

import grpc

TOKEN_METADATA = "x-seedlike-token"
_LOOPBACK_NAMES = ("localhost",)
ACTOR_SUBJECT = "seedlike actor "  # the common name of an actor's certificate, before its name
REVOKED_FILE = "revoked"


class TransportError(ValueError):
    """Unusable transport settings; entrypoints print the message alone."""


class InsecureBind(TransportError):
    """A plaintext server on an address other machines can reach."""


@dataclasses.dataclass(frozen=True)
class Credentials:
    """The files of one side (server or client) of a credentials directory."""

    ca: bytes
    cert: bytes
    key: bytes
    token: bytes
    cert_path: str = ""  # where cert and key were read (ssl, unlike gRPC, reads them from files)
    key_path: str = ""
    directory: str = ""

    @classmethod
    def load(cls, directory: str, side: str, actor: str = "") -> Credentials:
        """Reads DIR/ca.pem, DIR/<side>.pem, DIR/<side>.key and DIR/token (side: server|client).
        A client given a run's directory (no client.pem, an actors/ folder) reads
        DIR/actors/<actor> instead."""
        if side == "client" and not os.path.exists(os.path.join(directory, "client.pem")):
            mine = os.path.join(directory, "actors", actor)
            if actor and os.path.isfile(os.path.join(mine, "client.pem")):
                directory = mine
            elif os.path.isdir(os.path.join(directory, "actors")):
                raise TransportError(
                    f"transport.credentials: {directory} holds no certificate for actor "
                    f"{actor!r}: issue one with scripts/make_credentials.sh --actors {directory} "
                    f"{actor or 'NAME'} (or point the actor at its own DIR/actors/NAME)"
                )
        files = {"ca": "ca.pem", "cert": f"{side}.pem", "key": f"{side}.key", "token": "token"}
        values = {}
        for field, name in files.items():
            path = os.path.join(directory, name)
            try:
                with open(path, "rb") as f:
                    values[field] = f.read().strip() if field == "token" else f.read()
            except OSError as e:
                raise TransportError(
                    f"transport.credentials: cannot read {path} ({e.strerror}); make the "
                    "directory with scripts/make_credentials.sh DIR HOST"
                ) from None
        if len(values["token"]) < 16:
            raise TransportError(
                f"transport.credentials: {directory}/token is shorter than 16 bytes"
            )
        return cls(
            **values,
            cert_path=os.path.join(directory, files["cert"]),
            key_path=os.path.join(directory, files["key"]),
            directory=directory,
        )

    def server_credentials(self) -> grpc.ServerCredentials:
        """Mutual TLS whose certificate follows the files: a certificate rotated in the
        directory (`make_credentials.sh --rotate`) is served to every new connection, while open
        ones go on under the old."""
        files = [self.cert_path, self.key_path, os.path.join(self.directory, "ca.pem")]
        state = {"seen": _stamps(files)}

        def fetch():  # called by gRPC at each handshake; None: keep the current configuration
            stamps = _stamps(files)
            if stamps == state["seen"]:
                return None
            try:
                contents = [open(path, "rb").read() for path in files]
            except OSError:
                return None  # a rotation in progress: the next handshake looks again
            state["seen"] = stamps
            return grpc.ssl_server_certificate_configuration(
                [(contents[1], contents[0])], root_certificates=contents[2]
            )

        initial = grpc.ssl_server_certificate_configuration(
            [(self.key, self.cert)], root_certificates=self.ca
        )
        return grpc.dynamic_ssl_server_credentials(
            initial, fetch, require_client_authentication=True
        )

    def channel_credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca, private_key=self.key, certificate_chain=self.cert
        )

    def accepts(self, metadata) -> bool:
        """Whether a stream's invocation metadata carries the run token (constant-time compare)."""
        sent = [v for k, v in metadata or () if k == TOKEN_METADATA]
        if len(sent) != 1:
            return False
        value = sent[0].encode() if isinstance(sent[0], str) else sent[0]
        return hmac.compare_digest(value, self.token)


def _stamps(paths: list[str]) -> tuple:
    out = []
    for path in paths:
        try:
            st = os.stat(path)
            out.append((st.st_mtime_ns, st.st_size, st.st_ino))
        except OSError:
            out.append(None)
    return tuple(out)


def certificate_name(auth_context: dict) -> str:
    """The actor name of a verified client certificate ("" for one without: the shared client
    certificate of older runs, or no TLS). gRPC fills auth_context from the chain it verified
    against the run's CA, so a client cannot choose it."""
    for value in auth_context.get("x509_common_name", ()):
        name = value.decode(errors="replace") if isinstance(value, bytes) else str(value)
        if name.startswith(ACTOR_SUBJECT) and len(name) > len(ACTOR_SUBJECT):
            return name[len(ACTOR_SUBJECT) :]
    return ""


def identity(auth_context: dict, host: str, actor_id: int, trust_actor_ids: bool) -> str:
    """What the influence bounds count a stream as (the module docstring): its certificate's
    name, else its peer host, or host and declared actor id where they are trusted."""
    name = certificate_name(auth_context)
    if name:
        return f"cert:{name}"
    return f"{host}/{actor_id}" if trust_actor_ids else host


class Revocations:
    """The actor names in DIR/revoked, reread when the file changes (looked at most once per
    `every_s`, so asking per step costs a clock read). Thread-safe."""

    def __init__(self, directory: str, every_s: float = 1.0):
        self._path = os.path.join(directory, REVOKED_FILE) if directory else ""
        self._every_s = float(every_s)
        self._lock = threading.Lock()
        self._next = 0.0
        self._stamp = None
        self._names: frozenset = frozenset()

    def __contains__(self, name: str) -> bool:
        if not self._path:
            return False
        now = time.monotonic()
        if now >= self._next:
            with self._lock:
                if now >= self._next:
                    self._next = now + self._every_s
                    self._reread()
        return name in self._names

    def _reread(self) -> None:
        stamp = _stamps([self._path])
        if stamp == self._stamp:
            return
        try:
            with open(self._path) as f:
                names = {line.strip() for line in f}
        except OSError:
            names = set()
        self._stamp = stamp
        self._names = frozenset(n for n in names if n)


def is_loopback(host: str) -> bool:
    host = host.strip("[]")
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def tls_failure(host: str, port: int, credentials: Credentials, timeout: float = 5.0) -> str | None:
    """Why a TLS session with host:port fails with these credentials (the server's certificate not
    signed by our CA or not naming `host`, ours refused by the server), or None when it works or
    nothing accepts TCP connections there. gRPC reports every one of these as an unavailable
    server; retrying cannot fix them."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cadata=credentials.ca.decode())
    if credentials.cert_path:
        context.load_cert_chain(credentials.cert_path, credentials.key_path)
    context.set_alpn_protocols(["h2"])
    try:
        raw = socket.create_connection((host, port), timeout=timeout)
    except OSError:
        return None
    try:
        with context.wrap_socket(raw, server_hostname=host) as tls:
            # A TLS 1.3 server judges the client's certificate after the handshake: its verdict
            # comes with the first read (a gRPC server that accepts it sends HTTP/2's first
            # frame; one that refuses it closes the connection).
            if not tls.recv(1):
                return "the server refused this actor's certificate (it closed the connection)"
    except ssl.SSLCertVerificationError as e:
        return f"the server's certificate: {e.verify_message}"
    except ssl.SSLError as e:
        return f"the server refused this actor's certificate ({e.reason or e})"
    except OSError:
        return None
    finally:
        raw.close()
    return None


def speaks_tls(host: str, port: int, timeout: float = 5.0) -> bool:
    """Whether the server at host:port answers a TLS handshake (an actor without credentials
    cannot talk to it, however often it retries). A plaintext gRPC server answers a ClientHello
    with HTTP/2 bytes or a closed connection; a TLS one completes the handshake or sends an alert
    (our missing certificate); nothing listening is not TLS."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        raw = socket.create_connection((host, port), timeout=timeout)
    except OSError:
        return False
    try:
        with context.wrap_socket(raw, server_hostname=host):
            return True
    except ssl.SSLError as e:
        return str(e.reason or "").startswith(("TLSV1", "SSLV3_ALERT"))
    except OSError:
        return False
    finally:
        raw.close()


def bind_address(bind: str) -> str:
    """`bind` as gRPC and actors read it in "host:port": IPv6 addresses in brackets ("::1" ->
    "[::1]")."""
    host = bind.strip()
    if ":" in host and not host.startswith("["):
        return f"[{host}]"
    return host


def check_bind(bind: str, credentials: Credentials | None) -> None:
    """Refuses a plaintext server on an address other machines can reach."""
    if credentials is None and not is_loopback(bind):
        raise InsecureBind(
            f"--bind={bind} without transport credentials would let anyone who reaches the port "
            "act in and steer this run. Make them with `scripts/make_credentials.sh DIR "
            "<learner host>` and pass --config.transport.credentials=DIR to the learner and the "
            "actors (loopback binds need none)"
        )


def load(directory: str, side: str, actor: str = "") -> Credentials | None:
    """Credentials.load, or None for an empty `transport.credentials`."""
    return Credentials.load(directory, side, actor) if directory else None
