"""An fsspec store named by ``DPR_SCRATCH_URL``: checked once, objects under random prefixes, removed after use."""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import urlsplit

from ..lineage import new_nonce

#: The setting that names the store.
SETTING = "DPR_SCRATCH_URL"


class ScratchStoreError(RuntimeError):
    """The scratch store cannot be used (bad URL, unreachable, refused credentials); the message quotes no secret."""


def release_key(release_id: str) -> str:
    """The release's folder in the store: ``r-`` and a hash of the (public) release id, never the id's text."""
    return "r-" + hashlib.sha256(str(release_id).encode()).hexdigest()[:20]


def _checked_url(url: str) -> str:
    url = url.strip().rstrip("/")
    parts = urlsplit(url)
    if not parts.scheme or len(parts.scheme) < 2:
        raise ScratchStoreError(f"{SETTING} must be an fsspec URL such as s3://bucket/prefix or file:///folder")
    if "@" in parts.netloc or parts.password is not None or parts.query or parts.fragment:
        # the value is not quoted: it may hold a secret
        raise ScratchStoreError(
            f"{SETTING} holds credentials or options (user:password@ or ?…): give the bare URL and put the "
            "credentials in the environment of the flow and of the workers (e.g. AWS_ACCESS_KEY_ID)"
        )
    return url


@dataclass(frozen=True)
class ScratchStore:
    """A folder of an fsspec file system (credentials from the environment only).

    Parameters
    ----------
    url : str
        The store's root, e.g. ``s3://bucket/prefix`` (no credentials in it).
    """

    url: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "url", _checked_url(self.url))

    @property
    def fs(self) -> Any:
        """The fsspec file system (one per process and URL; fsspec caches instances)."""
        import fsspec

        fs, _ = fsspec.core.url_to_fs(self.url)
        return fs

    @property
    def root(self) -> str:
        """The root as the file system's own path (no scheme)."""
        import fsspec

        return fsspec.core.url_to_fs(self.url)[1].rstrip("/")

    def path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    # -- objects ---------------------------------------------------------------------------------------
    def put_file(self, local: str, key: str) -> None:
        """Upload the local file ``local`` to ``key`` (a path from :meth:`path`).

        On a ``file://`` store (a shared folder) the missing parent folders are created first, owner-only
        (0700), and the copy is made owner-only (0600): an object store has no folders to create.
        """
        fs = self.fs
        if _is_local(fs):
            os.makedirs(key.rsplit("/", 1)[0], mode=0o700, exist_ok=True)
            fs.put_file(local, key)
            os.chmod(key, 0o600)
            return
        fs.put_file(local, key)

    def get_file(self, key: str, local: str) -> None:
        """Download ``key`` to the local file ``local`` (the caller makes it private)."""
        self.fs.get_file(key, local)

    def rm(self, key: str) -> None:
        """Remove ``key`` and everything below it; a missing key is not an error."""
        fs = self.fs
        try:
            fs.rm(key, recursive=True)
        except FileNotFoundError:
            pass
        try:
            fs.invalidate_cache()
        except Exception:  # a backend without a listing cache
            pass

    def listing(self) -> list[str]:
        """Every object below the root (tests and the benchmark)."""
        fs = self.fs
        fs.invalidate_cache()
        try:
            return sorted(fs.find(self.root))
        except FileNotFoundError:
            return []

    # -- a run -----------------------------------------------------------------------------------------
    def check(self) -> None:
        """Write, read and delete a probe object under the root: refuse an unusable store in one line.

        Raises
        ------
        ScratchStoreError
            The store cannot be written or read back (unreachable, missing bucket, refused credentials).
            The message names the setting, the URL (which holds no credentials) and the error's class only:
            a backend's message may quote a key id or a signature.
        """
        key = self.path(f"probe-{new_nonce(8)}")
        try:
            with self.fs.open(key, "wb") as fh:
                fh.write(b"dpr")
            with self.fs.open(key, "rb") as fh:
                ok = fh.read() == b"dpr"
        except Exception as exc:
            raise ScratchStoreError(
                f"{SETTING}={self.url}: the scratch store cannot be written ({type(exc).__name__}): check that it "
                "exists and is reachable and that the credentials in the environment of the flow and of the "
                "workers may write it"
            ) from None
        finally:
            try:
                self.fs.rm(key)
            except Exception:
                pass
        if not ok:
            raise ScratchStoreError(f"{SETTING}={self.url}: an object written to the scratch store reads back changed")

    def open_run(self, release_id: str, keep: tuple[str, ...] = ()) -> str:
        """A new random prefix for a run of ``release_id``; the release's older run prefixes (a crashed run's
        leftovers) are removed first, except those in ``keep`` (runs of this process still going).

        Returns
        -------
        str
            The run's prefix (a path of :attr:`fs`).
        """
        release = self.path(release_key(release_id))
        fs = self.fs
        try:
            fs.invalidate_cache()
            old = [p.rstrip("/") for p in fs.ls(release, detail=False)]
        except FileNotFoundError:
            old = []
        for p in old:
            if p not in keep:
                self.rm(p)
        return f"{release}/{new_nonce(12)}"


def _is_local(fs: Any) -> bool:
    protocol = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
    return "file" in protocol or "local" in protocol


def store_from_env(env: Mapping[str, str] | None = None) -> ScratchStore | None:
    """The store named by ``DPR_SCRATCH_URL``, or None (unset: today's local scratch folder, no transport).

    Raises
    ------
    ScratchStoreError
        The value is not a bare fsspec URL, or its protocol's package is not installed.
    """
    env = os.environ if env is None else env
    url = (env.get(SETTING) or "").strip()
    if not url:
        return None
    store = ScratchStore(url)
    try:
        store.fs
    except (ImportError, ValueError) as exc:
        raise ScratchStoreError(
            f"{SETTING}={store.url}: fsspec cannot open this URL ({type(exc).__name__}): install the protocol's "
            "package (s3fs for s3://, gcsfs for gs://, adlfs for abfs://) in the flow's and the workers' environment"
        ) from None
    return store
