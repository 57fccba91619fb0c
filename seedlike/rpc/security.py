"""Transport security: mutual TLS and a per-run token, from one credentials directory.

`scripts/make_credentials.sh DIR HOST...` writes, into DIR:
  ca.pem, ca.key            a CA of the run's own (keep ca.key to issue more certificates)
  server.pem, server.key    the learner's certificate, valid for HOST... and localhost
  client.pem, client.key    the actors' certificate
  token                     a random secret every actor stream must present

The learner reads ca.pem, server.*, token; an actor reads ca.pem, client.*, token (copy only those
to actor machines). With credentials (`transport.credentials=DIR`) every stream is TLS with client
certificates and must carry the token; without them the server speaks plaintext and is refused
anywhere but loopback, where the machine's own users are the only ones who can connect.
"""

from __future__ import annotations

import dataclasses
import hmac
import ipaddress
import os
import socket
import ssl

import grpc

TOKEN_METADATA = "x-seedlike-token"
_LOOPBACK_NAMES = ("localhost",)


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

    @classmethod
    def load(cls, directory: str, side: str) -> Credentials:
        """Reads DIR/ca.pem, DIR/<side>.pem, DIR/<side>.key and DIR/token (side: server|client)."""
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
        )

    def server_credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials(
            [(self.key, self.cert)], root_certificates=self.ca, require_client_auth=True
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


def load(directory: str, side: str) -> Credentials | None:
    """Credentials.load, or None for an empty `transport.credentials`."""
    return Credentials.load(directory, side) if directory else None
