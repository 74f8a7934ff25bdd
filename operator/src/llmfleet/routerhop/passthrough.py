"""One request passed on to one upstream (vllm-router or an engine) and its answer passed back
as it arrives: status, headers and body bytes unchanged, a streamed (SSE) body chunk by chunk,
never gathered. Only hop-by-hop headers (RFC 9110 7.6.1) are the hop's own."""

from __future__ import annotations

from collections.abc import Callable

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, MultiMapping
from yarl import URL

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        # Set again for the bytes actually sent, on either side.
        "content-length",
        "host",
    }
)
# Those aiohttp's client would add on its own: a client that did not send one must not get one.
CLIENT_AUTO_HEADERS = ("User-Agent", "Accept", "Accept-Encoding", "Content-Type")


class NotServedError(Exception):
    """The engine answered that it does not serve the model: try another, nothing was sent back."""


def upstream_session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=None),
        # Bytes as the upstream sent them: a gzip body stays gzip, with its Content-Encoding.
        auto_decompress=False,
        skip_auto_headers=CLIENT_AUTO_HEADERS,
        # The upstream's own timeouts rule (a generation may stream for minutes).
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=5),
    )


def _headers(headers: MultiMapping[str]) -> CIMultiDict[str]:
    out: CIMultiDict[str] = CIMultiDict()
    for key, value in headers.items():
        if key.lower() not in HOP_BY_HOP:
            out.add(key, value)
    return out


async def forward(
    session: aiohttp.ClientSession,
    request: web.Request,
    body: bytes,
    base: str,
    refuse: Callable[[int, bytes], bool] | None = None,
) -> web.StreamResponse:
    """Pass `request` (whose body was read: `body`) to `base` + its path and query. Raises
    aiohttp.ClientConnectionError where nothing came back (the caller may try elsewhere), and
    NotServedError where `refuse(status, body)` says the answer must not reach the client; `refuse`
    reads only the body of a 404, an error body."""
    url = URL(base + request.raw_path, encoded=True)
    async with session.request(
        request.method,
        url,
        headers=_headers(request.headers),
        data=body if body else None,
        allow_redirects=False,
    ) as upstream:
        if refuse is not None and upstream.status == 404:
            head = await upstream.read()  # an error: small, and never streamed
            if refuse(upstream.status, head):
                raise NotServedError()
            first = head
        else:
            first = b""
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
        response.headers.extend(_headers(upstream.headers))
        if upstream.content_length is not None:
            response.content_length = upstream.content_length
        await response.prepare(request)
        if first:
            await response.write(first)
        async for chunk in upstream.content.iter_any():
            await response.write(chunk)
        await response.write_eof()
        return response
