"""Public lineage without data-derived identifiers (DESIGN.md rule 7).

A content hash of the input, an idempotency key built from it, or a hash of
a spec that carries data-derived metadata is a deterministic function of the
private data: with one unknown cell and a guessable range, hashing the
candidates recovers the cell. So nothing public is derived from the data
without a secret:

* **random nonces** name each ingest (``ingest_id``, fresh on every ingest,
  also of bytes ingested before; the raw table has its own private random
  name) and each ledger charge (``public_ref``, in the manifest and the
  operator sub-bundle names);
* an **HMAC-SHA256 under the data owner's secret key** fingerprints things
  that must be recognised again (record ids for budget identity, the spec in
  the manifest). Without the key these are pseudo-random; the key is created
  on first use with the OS CSPRNG, stored outside the bundle with mode 0600
  (``$DPR_HOME/owner/owner.key``, or ``DPR_OWNER_KEY_FILE``), and never logged
  or put in any exception message.

Idempotency keys and content hashes stay inside the warehouse (``raw``,
``ledger``), which is the data owner's private store.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

from .private_files import private_dir

#: Length in bytes of the owner's secret key.
KEY_BYTES = 32


class OwnerKeyError(RuntimeError):
    """The owner's secret key file exists but cannot be used (the message names the path only)."""


def new_nonce(nbytes: int = 8) -> str:
    """A random hex nonce from the OS CSPRNG (public lineage: ingest ids, charge refs)."""
    return secrets.token_hex(nbytes)


def load_owner_key(path: Path) -> bytes:
    """Read the owner's secret key, creating it (mode 0600) on first use.

    Parameters
    ----------
    path : Path
        Where the key lives (outside any bundle).

    Returns
    -------
    bytes
        ``KEY_BYTES`` secret bytes.

    Raises
    ------
    OwnerKeyError
        The file exists but is not a key written by this module.
    """
    path = Path(path)
    if not path.exists():
        private_dir(path.parent)  # 0700, created so (never opened first)
        tmp = path.with_name(f".{path.name}.{new_nonce()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(KEY_BYTES) + "\n")
        try:
            os.link(tmp, path)  # atomic: a concurrent first use keeps the key that won
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    text = path.read_text().strip()
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) != KEY_BYTES:
        raise OwnerKeyError(
            f"owner key file {path} is not a {KEY_BYTES}-byte hex key; restore it from the data owner's backup "
            "(fingerprints in the ledger were made with it) or, for a new warehouse, delete it to create a new one"
        )
    return key


def owner_hmac(key: bytes, *parts: str) -> str:
    """HMAC-SHA256 (hex) of ``parts`` joined by NUL under the owner's key."""
    msg = "\x00".join(parts).encode()
    return hmac.new(key, msg, hashlib.sha256).hexdigest()


def hmac_sql(column_sql: str) -> str:
    """SQL (DuckDB) computing ``HMAC-SHA256(key, column)`` as hex, equal to :func:`owner_hmac` of the text.

    The expression takes two BLOB parameters, in order: the outer pad and the
    inner pad from :func:`hmac_pads`. Vectorised over the whole column (no
    per-record Python loop).
    """
    return f"sha256(?::BLOB || unhex(sha256(?::BLOB || encode(CAST({column_sql} AS VARCHAR)))))"


def hmac_pads(key: bytes) -> list[bytes]:
    """``[outer pad, inner pad]`` of HMAC-SHA256 (RFC 2104) for :func:`hmac_sql`'s parameters."""
    block = key.ljust(64, b"\x00")
    return [bytes(b ^ 0x5C for b in block), bytes(b ^ 0x36 for b in block)]
