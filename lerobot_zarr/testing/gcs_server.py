"""A Google Cloud Storage-compatible server for tests: the XML API obstore's GCS client speaks, in front of moto's
S3 (:mod:`.s3_server`: the same network model, request record and injected faults).

What obstore's ``GCSStore`` sends (object_store's ``gcp`` module): path-style ``{base_url}/{bucket}/{object}`` on
the XML API (``GET``/``HEAD`` with ``Range`` and ``If-Match``, ``PUT``, ``DELETE``, listings as
``GET /{bucket}?list-type=2&prefix=...&continuation-token=...``, multipart uploads as S3's ``?uploads``), a
``Authorization: Bearer <token>`` on every request, and conditional writes as ``x-goog-if-generation-match`` (``0``:
only if absent; else the object's generation, which answers carry as ``x-goog-generation``). GCS's XML API is S3's
in all of these but the generation, so this server asks moto and translates: it refuses a request without the
bearer token (401), answers a generation (a number derived from the object's ETag) on every answer that has an
ETag, turns a generation match into moto's ``If-None-Match: *`` or ``If-Match`` on the ETag of that generation (a
generation that is not the object's: 412), and drops moto's ``x-amz-*`` headers. The client is pointed at it by
obstore's ``base_url`` and ``bearer_token`` (:meth:`GCSServer.client_options`; no emulator variable exists).

Usage::

    with GCSServer() as gcs:
        gcs.create_bucket("data")
        Bucket("gs://data/folder", gcs.client_options())
"""

from __future__ import annotations

import hashlib
from urllib.parse import quote, unquote

from .s3_server import ACCESS_KEY, REGION, S3Server, _Handler, _moto_key

__all__ = ["GCSServer", "TOKEN", "generation"]

TOKEN = "lerobot-zarr-test-gcs-token"
_GENERATION_MATCH = "x-goog-if-generation-match"
# moto answers an unsigned request as anonymous (its ACLs refuse it); it does not check a signature's value
_MOTO_AUTH = (f"AWS4-HMAC-SHA256 Credential={ACCESS_KEY}/20260101/{REGION}/s3/aws4_request, SignedHeaders=host, "
              f"Signature={'0' * 64}")


def generation(etag: str) -> str:
    """The generation this server gives an object of this ETag (GCS's are decimal numbers)."""
    return str(int(hashlib.sha256(etag.strip('"').encode()).hexdigest()[:15], 16) or 1)


def _error(status: int, code: str) -> tuple[int, dict[str, str], bytes]:
    return status, {"Content-Type": "application/xml"}, f"<Error><Code>{code}</Code></Error>".encode()


class _GCSHandler(_Handler):
    def _moto(self, method: str, path: str, query: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            return _error(401, "AuthenticationRequired")
        # (obstore encodes every character of the bucket's name and the object's but letters and digits: GCS
        # decodes them, moto only the key's)
        path = quote(unquote(path), safe="/")
        self._condition: dict[str, str] = {}
        wanted = self.headers.get(_GENERATION_MATCH)
        if wanted is not None:
            if wanted == "0":
                self._condition["If-None-Match"] = "*"
            else:
                bucket, _, key = path.lstrip("/").partition("/")
                obj = _moto_key(bucket, unquote(key))
                if obj is None or generation(obj.etag) != wanted:
                    return _error(412, "PreconditionFailed")
                self._condition["If-Match"] = obj.etag  # (moto decides, should it have changed meanwhile)
        status, headers, data = super()._moto(method, path, query, body)
        headers = {k: v for k, v in headers.items() if not k.lower().startswith("x-amz-")}
        etag = next((v for k, v in headers.items() if k.lower() == "etag"), None)
        if etag and status < 300:
            headers["x-goog-generation"] = generation(etag)
        return status, headers, data

    def _forwarded(self) -> dict[str, str]:
        out = {k: v for k, v in self.headers.items() if k.lower() not in ("authorization", _GENERATION_MATCH)}
        return {**out, **getattr(self, "_condition", {}), "Authorization": _MOTO_AUTH}  # (checked above)


class GCSServer(S3Server):
    """:class:`~.s3_server.S3Server` answering GCS's XML API (see the module docstring): buckets, faults, the network
    model and the request record as there."""

    handler = _GCSHandler

    def client_options(self) -> dict[str, str]:
        """obstore's GCS settings reaching this server (a :class:`~lerobot_zarr.cloud.client.Bucket`'s ``options``)."""
        return {"base_url": self.endpoint, "bearer_token": TOKEN}

    def client_env(self, namespace: str | None = None) -> dict[str, str]:
        """The same, as the environment obstore reads (``GOOGLE_<KEY>``)."""
        return {f"GOOGLE_{k.upper()}": v for k, v in self.client_options().items()}
