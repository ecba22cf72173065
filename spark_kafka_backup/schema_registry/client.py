"""A small client of the Confluent Schema Registry REST API (Confluent, Karapace, Apicurio's ``ccompat``, ...).

Only what backing up and restoring a registry needs: list subjects and versions (deleted ones too), read a
version, look a schema up under a subject, register one, read and set compatibility levels, soft-delete a
version. Python's ``urllib`` underneath; no client library state crosses to Spark executors (only the driver talks
to registries).

Credentials: ``https://USER:PASSWORD@host`` in the URL, or ``USER:PASSWORD`` in an environment variable
(:class:`RegistryAddress`); never written to the backup or the logs. TLS: the system's trust store or a CA file.

Every failure is a :class:`~spark_kafka_backup.errors.SchemaRegistryError` naming the registry (without credentials),
the request and the registry's answer; a refusal the caller can handle (a subject that does not exist) is a
:class:`RegistryRefusalError` with the HTTP status and the registry's ``error_code``.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from spark_kafka_backup.errors import SchemaRegistryError, UsageError

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"

#: The HTTP status this package acts on (a schema the subject's compatibility rule refuses).
INCOMPATIBLE_SCHEMA = 409

#: Attempts of a request that fails to connect or gets a 5xx answer (a registry restarting, a leader moving).
ATTEMPTS = 3


class RegistryRefusalError(SchemaRegistryError):
    """The registry answered a request with an error status."""

    def __init__(self, message: str, *, status: int, error_code: int | None) -> None:
        self.status = status
        self.error_code = error_code
        super().__init__(message)

    @property
    def not_found(self) -> bool:
        return self.status == 404


@dataclass(frozen=True)
class RegistryAddress:
    """Where a registry is and how to log in (picklable; the password is read where it is used)."""

    #: Without credentials (for logs, messages and the backup's copy).
    url: str
    #: Environment variable holding ``USER:PASSWORD`` (instead of credentials in the URL).
    user_info_env: str | None = None
    ca_file: str | None = None
    timeout: float = 30.0
    _user_info: str | None = field(default=None, repr=False, compare=False)

    @classmethod
    def parse(cls, url: str, *, user_info_env: str | None = None, ca_file: str | None = None) -> RegistryAddress:
        """Check the flags' values (raises :class:`UsageError`, never showing the URL's credentials)."""
        scheme, sep, rest = url.partition("://")
        if not sep or scheme.lower() not in ("http", "https"):
            raise UsageError("--schema-registry: expected http(s)://[USER:PASSWORD@]host[:port][/path]")
        user_info = None
        at = rest.rfind("@")  # credentials end at the last @ (a password may hold /, ? or # unencoded)
        if at >= 0:
            user, _, password = rest[:at].partition(":")
            user_info = urllib.parse.unquote(user) + ":" + urllib.parse.unquote(password)
            rest = rest[at + 1 :]
        clean = f"{scheme.lower()}://{rest}".rstrip("/")
        parts = urllib.parse.urlsplit(clean)
        try:
            host, _ = parts.hostname, parts.port
        except ValueError as exc:
            raise UsageError(f"--schema-registry {clean!r}: the port is not a number") from exc
        if not host or parts.query or parts.fragment:
            raise UsageError(f"--schema-registry {clean!r}: expected http(s)://[USER:PASSWORD@]host[:port][/path]")
        if user_info_env is not None:
            if user_info is not None:
                raise UsageError("give the schema registry's credentials in the URL or in a variable, not both")
            user_info = os.environ.get(user_info_env)
            if not user_info or ":" not in user_info:
                raise UsageError(f"--schema-registry-user-info-env: ${user_info_env} is not set to USER:PASSWORD")
        if ca_file is not None and not os.path.isfile(ca_file):
            raise UsageError(f"--schema-registry-ca-file {ca_file}: no such file")
        return cls(clean, user_info_env, ca_file, _user_info=user_info)

    @property
    def shown(self) -> str:
        """The URL without credentials (for logs, messages and the backup's copy)."""
        return self.url


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A registry does not redirect; following one would send the credentials to another host."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def quoted(subject: str) -> str:
    """A subject name as one path segment (names may hold ``/``, ``:``, spaces)."""
    return urllib.parse.quote(subject, safe="")


class RegistryClient:
    """Requests to one registry. Not thread-safe; build one where it is used."""

    def __init__(self, address: RegistryAddress) -> None:
        self.address = address
        self._base = address.url
        self._headers = {"Accept": f"{CONTENT_TYPE}, application/json"}
        user_info = address._user_info
        if user_info is None and address.user_info_env is not None:
            user_info = os.environ.get(address.user_info_env)
        if user_info:
            token = base64.b64encode(user_info.encode()).decode()
            self._headers["Authorization"] = f"Basic {token}"
        handlers: list[urllib.request.BaseHandler] = [_NoRedirects()]
        if address.url.startswith("https:"):
            handlers.append(urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=address.ca_file)))
        self._opener = urllib.request.build_opener(*handlers)

    def get(self, path: str, **query: str) -> Any:
        return self.request("GET", path, query=query)

    def post(self, path: str, body: Any, **query: str) -> Any:
        return self.request("POST", path, body=body, query=query)

    def put(self, path: str, body: Any) -> Any:
        return self.request("PUT", path, body=body)

    def delete(self, path: str, **query: str) -> Any:
        return self.request("DELETE", path, query=query)

    def compatibility(self, subject: str | None = None) -> str | None:
        """The registry's compatibility level, or ``subject``'s own (``None`` where it has none)."""
        try:
            if subject is None:
                document = self.get("/config")
            else:
                document = self.get(f"/config/{quoted(subject)}", defaultToGlobal="false")
        except RegistryRefusalError as exc:
            if exc.not_found:  # 40408: no level of its own (40401: no such subject)
                return None
            raise
        if not isinstance(document, dict):
            return None
        level = document.get("compatibilityLevel", document.get("compatibility"))
        if level is None or (subject is not None and self._apicurio_without_rule(subject)):
            return None
        return str(level)

    def _apicurio_without_rule(self, subject: str) -> bool:
        """Apicurio Registry's ``ccompat`` API answers a level (``NONE``) for a subject without one of its own; its
        own API says whether the subject has a compatibility rule. False for other registries."""
        rules = self._apicurio(f"/groups/default/artifacts/{quoted(subject)}/rules")
        return isinstance(rules, list) and "COMPATIBILITY" not in rules

    def apicurio_version_id(self, subject: str, version: int) -> int | None:
        """The schema id of a subject version, from Apicurio Registry's own API: its ``ccompat`` API answers 404 for
        a version of a subject whose versions are all soft-deleted. ``None`` for other registries."""
        found = self._apicurio(f"/groups/default/artifacts/{quoted(subject)}/versions/{version}")
        content = found.get("contentId") if isinstance(found, dict) else None
        return content if isinstance(content, int) and not isinstance(content, bool) else None

    def _apicurio(self, path: str) -> Any:
        """The answer of Apicurio Registry's own API (``/apis/registry/v3`` beside ``/apis/ccompat/vN``) to a GET of
        ``path``; ``None`` when the registry is not one (its URL does not end in ``/apis/ccompat/vN``) or the API
        does not answer with JSON."""
        root, ccompat, _ = self._base.rpartition("/apis/ccompat/")
        if not ccompat:
            return None
        native = urllib.request.Request(f"{root}/apis/registry/v3{path}", headers=self._headers)
        try:
            with self._opener.open(native, timeout=self.address.timeout) as answer:
                return json.loads(answer.read())
        except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError):
            return None

    def request(self, method: str, path: str, *, body: Any = None, query: dict[str, str] | None = None) -> Any:
        """The decoded JSON answer; :class:`RegistryRefusalError` for an error status, :class:`SchemaRegistryError` when
        the registry cannot be reached (after :data:`ATTEMPTS` tries) or answers something that is not JSON."""
        url = self._base + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        what = f"schema registry {self.address.shown}: {method} {path}"
        data = None if body is None else json.dumps(body).encode()
        headers = dict(self._headers)
        if data is not None:
            headers["Content-Type"] = CONTENT_TYPE
        payload = b""
        for attempt in range(1, ATTEMPTS + 1):
            request = urllib.request.Request(url, data=data, method=method, headers=headers)
            try:
                with self._opener.open(request, timeout=self.address.timeout) as answer:
                    payload = answer.read()
                break
            except urllib.error.HTTPError as exc:
                refusal = _refusal(what, exc)
                if exc.code < 500 or attempt == ATTEMPTS:
                    raise refusal from exc
            except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
                reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
                if attempt == ATTEMPTS:
                    raise SchemaRegistryError(f"{what}: cannot reach the registry ({reason})") from exc
            time.sleep(attempt)
        try:
            return json.loads(payload) if payload.strip() else None
        except ValueError as exc:
            raise SchemaRegistryError(f"{what}: the answer is not JSON: {payload[:100]!r}") from exc


def _refusal(what: str, error: urllib.error.HTTPError) -> RegistryRefusalError:
    try:
        body = error.read(4096)
    except (OSError, http.client.HTTPException):
        body = b""
    code: int | None = None
    message = body.decode("utf-8", "replace") or str(error.reason or "")
    try:
        document = json.loads(body)
        if isinstance(document, dict):
            found = document.get("error_code")
            code = found if isinstance(found, int) else None
            message = str(document.get("message", message))
    except ValueError:
        pass
    message = " ".join(message.split())[:300]  # one line, whatever the body (an HTML error page)
    text = f"{what}: HTTP {error.code}" + (f" (error {code})" if code is not None else "") + f": {message}"
    if error.code in (401, 403):
        text += " (check the registry's credentials: --schema-registry-user-info-env, or USER:PASSWORD@ in the URL)"
    return RegistryRefusalError(text, status=error.code, error_code=code)
