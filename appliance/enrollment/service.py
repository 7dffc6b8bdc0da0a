"""EnrollmentService: tokens, per-agent certificates, scripts; StreamGate: certificate binding and revocation."""

from __future__ import annotations

import base64
import datetime as dt
import logging
import time
import uuid
from collections.abc import Callable
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit

from cryptography.hazmat.primitives import hashes, serialization

from appliance.artifacts import ArtifactStore
from appliance.enrollment.scripts import SLOTS, Template, quote_powershell, quote_sh
from appliance.enrollment.store import CertificateRecord, EnrollmentError, EnrollmentStore, TokenRefused
from appliance.ingest.identity import AgentIdentity
from appliance.pki import SERVER_SAN_NAME, CertificateAuthority

# Runs the piped script as root: directly when the shell already is root (minimal systems often
# have no sudo), through sudo otherwise.
RUN_AS_ROOT = '{ if [ "$(id -u)" = 0 ]; then sh; else sudo sh; fi; }'

log = logging.getLogger(__name__)

OS_KINDS = ("windows", "linux", "macos")

# Where each piece of the agent payload lives under /static (docs/enrollment.md shows the same table).
AGENT_BINARIES: dict[str, tuple[str, ...]] = {
    "windows": ("agents/windows-amd64/sensor-agent.exe", "agents/windows-arm64/sensor-agent.exe"),
    "linux": ("agents/linux-amd64/sensor-agent", "agents/linux-arm64/sensor-agent"),
    "macos": ("agents/macos-amd64/sensor-agent", "agents/macos-arm64/sensor-agent"),
}
DRIVER_FILES = tuple(f"driver/sensor-driver.{ext}" for ext in ("sys", "inf", "cat", "cer"))

# The first statement of the Windows command: without elevation it stops before anything is fetched,
# so the single-use token is not spent (the script it would fetch cannot install anything then).
ELEVATION_CHECK = (
    "if(-not([Security.Principal.WindowsPrincipal][Security.Principal.WindowsIdentity]::GetCurrent())"
    ".IsInRole([Security.Principal.WindowsBuiltInRole]::Administrator)){"
    "throw 'enroll: this must run elevated: open PowerShell with \"Run as administrator\" and paste the command "
    "again. Nothing was downloaded; the token is still valid.'};"
)

_TEMPLATES = {"windows": ("windows/enroll.ps1", quote_powershell), "linux": ("unix/enroll.sh", quote_sh),
              "macos": ("unix/enroll.sh", quote_sh)}


# What an admin does when /static holds no agent for a system (the 409 of an enrollment says it).
_PUSH = ('push it with SENSOR_DEPLOY_TOKEN set on the appliance: curl --cacert <certs_dir>/ca.pem -H "Authorization: '
         'Bearer $SENSOR_DEPLOY_TOKEN" -F "file=@{file};filename=agents/{os}-amd64/{file}" '
         'https://<appliance>:<rest port>/api/v1/artifacts (arm64: agents/{os}-arm64/). The token stays usable')
HOW_TO_PROVIDE = {
    "linux": "the appliance holds no linux agent: run `make agents` on the appliance (`make run` does it), or build "
             "packaging/pyinstaller/sensor-agent-linux.spec on a Linux machine and " + _PUSH.format(file="sensor-agent", os="linux"),
    "windows": "the appliance holds no windows agent: build it on Windows (the windows job of .github/workflows/agents.yml, "
               "or `pyinstaller packaging/pyinstaller/sensor-agent-windows.spec`) and "
               + _PUSH.format(file="sensor-agent.exe", os="windows"),
    "macos": "the appliance holds no macos agent: build it on a Mac (the macos job of .github/workflows/agents.yml, "
             "or `pyinstaller packaging/pyinstaller/sensor-agent-macos.spec`) and "
             + _PUSH.format(file="sensor-agent", os="macos"),
}


class PayloadMissing(EnrollmentError):
    """The static directory holds no agent binary for the requested system (the token is not used up)."""


@dataclass(frozen=True)
class Endpoints:
    """Where agents reach the appliance: REST base URL (enrollment, /static) and gRPC target."""

    base_url: str
    target_url: str

    @property
    def loopback(self) -> bool:
        """True when the base URL names this machine only (localhost, 127.0.0.0/8, ::1): no other machine can use it."""
        host = (urlsplit(self.base_url).hostname or "").rstrip(".").lower()
        if host == "localhost" or host.endswith(".localhost"):
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False

    def loopback_warning(self) -> str:
        """What the admin should know about commands that use a loopback address ("" otherwise)."""
        if not self.loopback:
            return ""
        return (f"The commands use {self.base_url}, which only this machine can reach. To enroll another machine, "
                "create the token through an address that machine reaches (https://<appliance address>:<port>/"
                "api/v1/agent/tokens), or set enrollment.base_url.")


@dataclass(frozen=True)
class NewToken:
    token: str
    expires_at: float
    command: str
    command_unix: str
    base_url: str
    warning: str = ""  # set when the commands use a loopback address


@dataclass(frozen=True)
class EnrollmentScript:
    os_kind: str
    text: str
    fingerprint: str
    serial: int
    common_name: str


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def parse_token(raw: str | None) -> str | None:
    """The canonical form of a UUIDv4 token, or None when `raw` is not one."""
    if not raw or len(raw) > 64:
        return None
    try:
        value = uuid.UUID(raw)
    except ValueError:
        return None
    if value.version != 4 or str(value) != raw.lower():
        return None
    return str(value)


def iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


class EnrollmentService:
    """Creates tokens and turns one token, exactly once, into an enrollment script with a fresh certificate."""

    def __init__(
        self,
        store: EnrollmentStore,
        ca: CertificateAuthority,
        artifacts: ArtifactStore,
        *,
        template_dir: Path,
        endpoints: Callable[[str], Endpoints],
        token_ttl_s: float,
        cert_days: int,
        product: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self._ca = ca
        self._artifacts = artifacts
        self._endpoints = endpoints
        self._ttl = token_ttl_s
        self._cert_days = cert_days
        self._product = product
        self._clock = clock
        self._templates = {kind: Template.load(template_dir / rel, quoting) for kind, (rel, quoting) in _TEMPLATES.items()}

    # -- tokens ----------------------------------------------------------------------------
    def create_token(self, ttl_s: float | None = None, request_host: str = "") -> NewToken:
        """A token and its commands; `request_host` (host[:port] the admin used) is their address
        unless enrollment.base_url is set."""
        endpoints = self.endpoints(request_host)
        token = str(uuid.uuid4())
        now = self._clock()
        expires = now + (ttl_s if ttl_s is not None else self._ttl)
        self.store.add_token(token, now, expires)
        warning = endpoints.loopback_warning()
        log.info("enrollment token created prefix=%s expires=%s base_url=%s", token[:6], iso(expires),
                 endpoints.base_url)
        if warning:
            log.warning("enrollment token prefix=%s: %s", token[:6], warning)
        return NewToken(token, expires, self.windows_command(token, endpoints), self.unix_command(token, endpoints),
                        endpoints.base_url, warning)

    def endpoints(self, request_host: str = "") -> Endpoints:
        """The configured or default endpoints, checked like any other script value."""
        endpoints = self._endpoints(request_host)
        for name, value in (("enrollment.base_url", endpoints.base_url), ("enrollment.grpc_url", endpoints.target_url)):
            if not SLOTS["BASE_URL"](value):
                raise EnrollmentError(f"{name}: {value[:80]!r} is not a plain http(s)://host[:port][/path] URL")
        return endpoints

    def server_pins(self) -> tuple[str, str]:
        """(SHA-256 of the server certificate as hex, SHA-256 of its public key as base64 for curl)."""
        cert = self._ca.server_cert()
        spki = cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        digest = hashes.Hash(hashes.SHA256())
        digest.update(spki)
        return cert.fingerprint(hashes.SHA256()).hex(), _b64(digest.finalize())

    def windows_command(self, token: str, endpoints: Endpoints | None = None) -> str:
        """One line of PowerShell (5.1 and 7): fetch the script with the server certificate pinned, run it."""
        url = f"{(endpoints or self.endpoints()).base_url}/api/v1/enroll/windows?token={quote(token)}"
        cert_sha, _ = self.server_pins()
        return (
            "$ErrorActionPreference='Stop';"
            + ELEVATION_CHECK +
            "[Net.ServicePointManager]::SecurityProtocol=[Net.ServicePointManager]::SecurityProtocol -bor 3072;"
            "if(-not('SensorPin' -as [type])){Add-Type -TypeDefinition 'public static class SensorPin{"
            "public static string Fp=\"\";"
            "public static bool Check(object s,System.Security.Cryptography.X509Certificates.X509Certificate c,"
            "System.Security.Cryptography.X509Certificates.X509Chain ch,System.Net.Security.SslPolicyErrors e){"
            "if(c==null)return false;"
            "byte[] h=System.Security.Cryptography.SHA256.Create().ComputeHash(c.GetRawCertData());"
            "return System.BitConverter.ToString(h).Replace(\"-\",\"\").ToLowerInvariant()==Fp;}"
            "public static System.Net.Security.RemoteCertificateValidationCallback Callback{get{return Check;}}}'};"
            f"[SensorPin]::Fp='{cert_sha}';"
            f"$r=[Net.HttpWebRequest]::Create('{quote_powershell(url)}');"
            "$r.ServerCertificateValidationCallback=[SensorPin]::Callback;"
            # An error answer (409: no agent for Windows yet) is shown with the appliance's own sentence.
            "try{$p=$r.GetResponse()}catch [Net.WebException]{if($_.Exception.Response){"
            "throw (New-Object IO.StreamReader($_.Exception.Response.GetResponseStream())).ReadToEnd()};throw};"
            "$s=(New-Object IO.StreamReader($p.GetResponseStream())).ReadToEnd();"
            "& ([scriptblock]::Create($s))"
        )

    def unix_command(self, token: str, endpoints: Endpoints | None = None) -> str:
        """One line of POSIX sh for Linux and macOS: curl pinned to the server key, piped into a root sh."""
        _, spki = self.server_pins()
        base = (endpoints or self.endpoints()).base_url  # validated: no quote, $, backtick or backslash can be in it
        return (
            f"curl -fsS -k --pinnedpubkey 'sha256//{spki}' "
            f"\"{base}/api/v1/enroll/$(uname -s | sed 's/Darwin/macos/;s/Linux/linux/')"
            f"?token={quote(token)}\" | {RUN_AS_ROOT}"
        )

    # -- enrollment --------------------------------------------------------------------------
    def enroll(self, raw_token: str | None, os_kind: str, source: str, request_host: str = "") -> EnrollmentScript:
        """Redeem a token once and return the script for `os_kind`; its URLs use `request_host` (the
        address the machine itself reached) unless enrollment.base_url is set.

        TokenRefused for a malformed, unknown, expired or used token; PayloadMissing (token kept)
        when /static holds no agent for that system.
        """
        token = parse_token(raw_token)
        if token is None:
            raise TokenRefused("malformed")
        template = self._templates[os_kind]
        now = self._clock()
        with self.store.redeem(token, now, source, os_kind) as prefix:
            payload = self._artifacts.scan().files
            agents = [p for p in AGENT_BINARIES[os_kind] if p in payload and self._artifacts.exists(p)]
            if not agents:
                raise PayloadMissing(HOW_TO_PROVIDE[os_kind])
            has_driver = os_kind == "windows" and all(p in payload and self._artifacts.exists(p) for p in DRIVER_FILES)
            downloads = agents + (list(DRIVER_FILES) if has_driver else [])
            issued = self._ca.issue_agent(f"sensor-agent-{prefix}", self._cert_days)
            self.store.add_certificate(
                fingerprint=issued.fingerprint, serial=issued.serial, common_name=issued.common_name,
                token_prefix=prefix, os_kind=os_kind, issued_at=now, not_after=issued.not_after.timestamp(),
                cert_pem=issued.cert_pem.decode("ascii"),
            )
            endpoints = self.endpoints(request_host)
            cert_sha, spki = self.server_pins()
            text = template.render({
                "PRODUCT": self._product,
                "BASE_URL": endpoints.base_url,
                "TARGET_URL": endpoints.target_url,
                "SERVER_NAME": SERVER_SAN_NAME,
                "SERVER_SHA256": cert_sha,
                "SERVER_SPKI_SHA256": spki,
                "CA_PEM_B64": _b64(self._ca.ca_pem),
                "CERT_PEM_B64": _b64(issued.cert_pem),
                "KEY_PEM_B64": _b64(issued.key_pem),
                "TOKEN_PREFIX": prefix,
                "OS_KIND": os_kind,
                "HAS_DRIVER": "true" if has_driver else "false",
                "AGENT_PATHS": " ".join(agents),
                # Every file the script downloads, with the sha256 of the payload manifest: checked before use.
                "PAYLOAD_SHA256": " ".join(f"{p}={payload[p].sha256}" for p in downloads),
                "GENERATED_AT": iso(now),
            })
        log.info("enrolled os=%s token=%s cn=%s serial=%x fingerprint=%s source=%s driver=%s",
                 os_kind, prefix, issued.common_name, issued.serial, issued.fingerprint, source, has_driver)
        return EnrollmentScript(os_kind, text, issued.fingerprint, issued.serial, issued.common_name)

    # -- revocation --------------------------------------------------------------------------
    def revoke(self, agent_or_fingerprint: str, reason: str = "revoked by an administrator") -> tuple[int, int]:
        matched, revoked = self.store.revoke(agent_or_fingerprint, self._clock(), reason)
        if revoked:
            log.warning("certificates revoked id=%s count=%d", agent_or_fingerprint, revoked)
        return matched, revoked

    def certificates(self) -> list[CertificateRecord]:
        return self.store.certificates()


class StreamGate:
    """The gRPC stream authorizer: binds an enrolled certificate to the first machine id it presents.

    Refuses (PermissionError) a revoked certificate, an enrolled certificate presenting a machine
    id other than the one it is bound to, and an enrolled certificate that sends no machine id.
    Binding applies to certificates issued by enrollment; a certificate the CA issued outside it
    (`CertificateAuthority.issue_agent` from tooling or tests) is only checked for revocation,
    because the existing contract lets such a shared certificate serve several machines.
    """

    def __init__(self, store: EnrollmentStore, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._clock = clock

    def __call__(self, identity: AgentIdentity) -> None:
        fingerprint = identity.cert_fingerprint
        if not fingerprint:
            return  # plain gRPC (grpc.tls false): no certificate to bind
        record = self._store.certificate(fingerprint)
        if record is None:
            return
        if record.revoked_at is not None:
            raise PermissionError(f"certificate revoked ({record.revoke_reason})")
        if not record.enrolled:
            return
        machine_id = identity.machine_id
        if not machine_id:
            raise PermissionError("an enrolled agent must send its machine id (x-machine-id)")
        if record.machine_id is None:
            record, superseded = self._store.bind(fingerprint, machine_id, identity.agent_id, self._clock())
            if record.machine_id == machine_id:
                log.info("certificate bound fingerprint=%s machine=%s agent=%s", fingerprint[:16], machine_id,
                         identity.agent_id)
            for old in superseded:
                log.warning("certificate superseded by re-enrollment fingerprint=%s machine=%s", old[:16], machine_id)
        if record.machine_id != machine_id:
            raise PermissionError("certificate is bound to another machine")
        if record.revoked_at is not None:
            raise PermissionError(f"certificate revoked ({record.revoke_reason})")


def request_host(header: str | None) -> str:
    """The Host header as `host[:port]` when it is a plain host name or address (else ""): never trusted further."""
    if not header or len(header) > 260:
        return ""
    try:
        parts = urlsplit(f"https://{header}")
        port = parts.port
    except ValueError:
        return ""
    if parts.netloc != header or parts.username or parts.password or parts.path or not SLOTS["SERVER_NAME"](parts.hostname or ""):
        return ""
    return header if port is None or 0 < port < 65536 else ""


def default_endpoints(base_url: str, grpc_url: str, first_name: str, rest_port: int, grpc_port: int,
                      rest_tls: bool, request_host: str = "") -> Endpoints:
    """Endpoints from config; without enrollment.base_url, the address the admin (or the machine) used to reach
    the API (`request_host`, from the Host header), else https://<first server name>:<port>; gRPC on the same host."""
    scheme = "https" if rest_tls else "http"
    host = f"[{first_name}]" if ":" in first_name else first_name
    base = base_url.rstrip("/") or (f"{scheme}://{request_host}" if request_host else f"{scheme}://{host}:{rest_port}")
    if grpc_url:
        target = grpc_url.rstrip("/")
    else:
        base_host = urlsplit(base).hostname or first_name
        base_host = f"[{base_host}]" if ":" in base_host else base_host
        target = f"https://{base_host}:{grpc_port}"
    return Endpoints(base, target)
