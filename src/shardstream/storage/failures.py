"""What a failed download attempt was: permanent (never retried) or transient, and a short
label for the error message, so that a final error says what happened on every attempt
(``failed 3 times: HTTP 503 x2, timed out x1``) instead of only the last one.

Permanent: the file does not exist, cannot be read (permission), is a directory or lies
under a file, or the store answered 4xx (except 408 and 429, and S3's throttling and
request-timeout codes). Everything else (5xx, resets, timeouts, short bodies, an endpoint that
cannot be reached) is transient.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterator, Optional

_TRANSIENT_4XX = frozenset({408, 429})
_TRANSIENT_CODES = frozenset({"RequestTimeout", "Throttling", "ThrottlingException", "SlowDown", "TooManyRequests",
                              "RequestLimitExceeded", "RequestTimeTooSkewed", "RequestThrottled"})


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from (clients wrap the HTTP error in their own)."""
    seen = set()
    while exc is not None and id(exc) not in seen and len(seen) < 8:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def http_status(exc: BaseException) -> tuple[Optional[int], Optional[str]]:
    """(HTTP status, the store's error code) behind ``exc``, if a store answered with an error."""
    for e in _chain(exc):
        name = type(e).__name__
        response = getattr(e, "response", None)
        if name == "ClientResponseError" and isinstance(getattr(e, "status", None), int):  # aiohttp (http, hf)
            return e.status, None
        if isinstance(response, dict) and "ResponseMetadata" in response:  # botocore (s3)
            status = response["ResponseMetadata"].get("HTTPStatusCode")
            return (status if isinstance(status, int) else None), response.get("Error", {}).get("Code")
        if name == "HttpError" and isinstance(getattr(e, "code", None), int):  # gcsfs
            return e.code, None
        if isinstance(getattr(e, "status_code", None), int):  # azure
            return e.status_code, getattr(e, "error_code", None)
    return None, None


# client-side refusals of a malformed request (botocore's bad bucket names, parameters): never transient
_INVALID_REQUESTS = frozenset({"ParamValidationError", "InvalidBucketName", "InvalidS3ObjectLambdaArn"})


def permanent(exc: BaseException) -> Optional[str]:
    """What makes ``exc`` permanent (retrying cannot help), or None for a transient failure."""
    if isinstance(exc, FileNotFoundError):
        return "does not exist"
    if isinstance(exc, PermissionError):
        return "cannot be read with these credentials (permission denied)"
    if isinstance(exc, IsADirectoryError):
        return "is a directory, not a file"
    if isinstance(exc, NotADirectoryError):
        return "lies under a path that is a file, not a directory"
    if any(type(e).__name__ in _INVALID_REQUESTS for e in _chain(exc)):
        return "is not a valid name for the store (the request was refused before it was sent)"
    status, code = http_status(exc)
    if status is not None and 400 <= status < 500 and status not in _TRANSIENT_4XX and code not in _TRANSIENT_CODES:
        if status == 404:
            return "does not exist (HTTP 404)"
        if status in (401, 403):
            return f"cannot be read with these credentials (HTTP {status})"
        return f"was refused by the store (HTTP {status}{f' {code}' if code else ''})"
    return None


SHORT_BODY = "short body"
CANNOT_CONNECT = "could not connect"
# a client's errors for an endpoint it cannot reach (refused, no route, name unknown, no TCP handshake in time)
CONNECTION_ERRORS = frozenset({"EndpointConnectionError", "ConnectTimeoutError", "ConnectionRefusedError",
                               "ClientConnectorError", "ClientConnectorDNSError", "gaierror"})


class ShortBody(Exception):
    """A store answered with fewer bytes than asked for (a body cut short, or a well-formed short answer):
    transient, tried again."""


def cannot_connect(exc: BaseException) -> bool:
    """Whether ``exc`` says the endpoint could not be reached at all (no answer came from the store)."""
    return any(type(e).__name__ in CONNECTION_ERRORS for e in _chain(exc))


CREDENTIALS_FIX = ("check the credentials in storage_options (key and secret, token or profile, or the environment "
                   "the store's client reads, such as AWS_ACCESS_KEY_ID / AWS_PROFILE) and that they may list and read "
                   "this path")


def refused_credentials(exc: BaseException) -> bool:
    """Whether the store refused the credentials (permission denied, HTTP 401 or 403)."""
    return isinstance(exc, PermissionError) or http_status(exc)[0] in (401, 403)


def refusal_fix(exc: BaseException) -> str:
    """What to change after a permanent failure ``exc`` (see :func:`permanent`)."""
    return CREDENTIALS_FIX if refused_credentials(exc) else "check the path or URL, and storage_options"


def is_timeout(exc: BaseException) -> bool:
    import asyncio

    return isinstance(exc, (TimeoutError, asyncio.TimeoutError)) or type(exc).__name__ == "FSTimeoutError"


def label(exc: BaseException) -> str:
    """A short name for one failed attempt: ``HTTP 503``, ``timed out``, ``ConnectionResetError``..."""
    if is_timeout(exc):
        return "timed out"
    status, code = http_status(exc)
    if status is not None:
        return f"HTTP {status}{f' {code}' if code and code != str(status) else ''}"
    if isinstance(exc, ShortBody):
        return SHORT_BODY
    if cannot_connect(exc):
        return CANNOT_CONNECT
    return type(exc).__name__


def summary(labels: list[str]) -> str:
    """``HTTP 503 x2, timed out x1`` in order of first occurrence."""
    return ", ".join(f"{what} x{n}" for what, n in Counter(labels).items())


def advice(labels: list[str], errors_within: bool = False) -> str:
    """What to change, given what the attempts ran into (``errors_within``: the store answered errors
    that the client retried by itself inside the attempts)."""
    if errors_within:
        return "check that the store is healthy, or raise download_retry (and download_timeout) to ride it out"
    if CANNOT_CONNECT in labels:
        return ("check the store's address (endpoint_url in storage_options, or S3_ENDPOINT_URL / AWS_ENDPOINT_URL) "
                "and that this machine can reach it")
    if labels and all(what == SHORT_BODY for what in labels):
        return ("the store sent fewer bytes than asked for on every attempt: the file is shorter than when it was "
                "listed (rewritten since?) or something between here and the store cuts answers short; open the "
                "dataset again")
    timeouts = labels.count("timed out")
    if timeouts == len(labels):
        return "raise download_timeout if the store is slow, or download_retry if it is flaky"
    if timeouts:
        return "raise download_retry (and download_timeout if the store is slow) to ride out a flaky store"
    return "raise download_retry to ride out a flaky store, or check that the store is healthy"
