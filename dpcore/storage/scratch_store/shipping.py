"""Objects that travel through the scratch store: their scratch paths become references, their files objects.

:func:`ship` pickles an object (a chunk task, a :class:`~dpcore.storage.partitions.Partitions` handle, a fit's result):
every ``str`` or path in it that lies below the sender's scratch folder (``root``) is replaced by a reference
(its path relative to ``root``, and for an existing file the random key it was uploaded to). The
:class:`Shipment` unpickles, in the process it is meant for, to the same object with paths below that
process's own folder, the files downloaded there (mode 0600, folders 0700):

* ``"out"`` (flow or worker to a worker): a worker's private mirror ``<tmp>/dpr-scratch-<pid>/<shipment>``
  (:func:`drop_mirror` removes it when the work ends); sent on by a worker from its mirrors (a fit's EM
  passes), the same paths below the receiver's ``<tmp>/dpr-scratch-<pid>``: its mirror of the sender's
  shipment, kept until that shipment ends, so a later pass finds the chunks and what earlier passes wrote.
  In any other process (Dask's scheduler, which unpickles task graphs, or the sender itself) it stays a
  :class:`Shipment`.
* ``"back"`` (a worker's result): the flow's scratch folder (the process that opened the run,
  :func:`register_flow_run`), or, for a chunk sent on by a worker, that worker's mirror; its objects are
  deleted once downloaded.

A file downloaded from the store and sent on unchanged is referenced by its key again (no second upload: an
EM pass's chunks), a file uploaded for one outgoing shipment is sent by its key to the other shipments of the
run while it is unchanged (the items of one map, every template's fit; :func:`end_shipment` removes it with
the last shipment using it), and one the receiver already has is not downloaded again. A worker keeps each
object it downloaded for a shipment in its object cache (``<tmp>/dpr-scratch-<pid>/objects/<key>``: the key is
the store's random path, no name derived from the data) and hard-links it into the mirror of every later
shipment that references the same key (an EM pass's chunks, every template's export): a key is downloaded once
per worker while it exists. The copies go with the objects: when the sender removes a shipment's objects
(:func:`end_shipment` with the Dask client: every worker drops its copies of them, :func:`drop_on_worker`), when
the run ends, also failed (:func:`drop_run`, the runner's exit), and after a killed run when the next run of
the same release id opens (:func:`drop_stale_runs`, like the store's leftovers). Nothing here logs; the sizes
moved are added to :data:`MOVED` (bytes up, bytes down, bytes served from the cache) for the benchmark only.
"""
from __future__ import annotations

import io
import os
import shutil
import tempfile
import threading
from pathlib import Path, PurePath
from typing import Any, Callable

from ..lineage import new_nonce
from ..private_files import PRIVATE_DIR, private_open
from .store import ScratchStore

_TAG = "dpr-scratch"
#: Bytes uploaded and downloaded by this process, and bytes of downloaded files sent on by their key instead of
#: being uploaded again (an EM pass's chunks sent on by a worker) (tests and the benchmark only; never logged).
MOVED = {"up": 0, "down": 0, "reused": 0, "cached": 0}
#: Run prefixes this process opened as the flow: prefix -> the warehouse's scratch folder.
_FLOW_RUNS: dict[str, str] = {}
#: On a worker: shipment nonce -> (store URL, run prefix) of the shipments whose mirror is here.
_SHIPMENTS: dict[str, tuple[str, str]] = {}
#: Files downloaded here: local path -> (key, mtime_ns, size) (sent back by reference while unchanged).
_ORIGIN: dict[str, tuple[str, int, int]] = {}
#: Files this process uploaded for outgoing shipments: local path -> [key, mtime_ns, size, shipments using it].
#: A file sent again while unchanged (the detector's export, sent with every template's fit) goes by its key;
#: its object is removed when the last shipment using it ends (:func:`end_shipment`).
_SHARED: dict[str, list] = {}
#: On a worker: object key -> (cached copy, mtime_ns, size) of each object downloaded for a shipment.
_CACHE: dict[str, tuple[str, int, int]] = {}
#: The folder of :func:`mirror_base` that holds the object cache (not a shipment's nonce: those are hex).
CACHE_DIR = "objects"
#: On a worker: shipments whose files were dropped here (a late task of one is refused, not downloaded again).
_ENDED: dict[str, None] = {}
_LOCK = threading.RLock()


def mirror_base() -> Path:
    """This process's private folder for the mirrors of shipments (created 0700)."""
    base = Path(tempfile.gettempdir()) / f"dpr-scratch-{os.getpid()}"
    base.mkdir(mode=PRIVATE_DIR, exist_ok=True)
    return base


def register_flow_run(prefix: str, scratch_root: str | Path) -> None:
    """Mark this process as the flow of the run ``prefix`` (its results arrive in ``scratch_root``)."""
    _FLOW_RUNS[prefix] = str(Path(scratch_root))


def unregister_flow_run(prefix: str) -> None:
    _FLOW_RUNS.pop(prefix, None)


def flow_runs() -> tuple[str, ...]:
    """The run prefixes this process has open as the flow."""
    return tuple(_FLOW_RUNS)


def on_worker() -> bool:
    """True in a process that hosts a Dask worker."""
    import sys

    if "distributed" not in sys.modules:
        return False
    from distributed.worker import Worker

    return bool(list(Worker._instances))


def worker_transport() -> tuple[str, str] | None:
    """On a worker: (store URL, run prefix) of the latest shipment received, or None."""
    with _LOCK:
        return next(reversed(_SHIPMENTS.values()), None) if _SHIPMENTS else None


class _Pickler:
    """Pickles with scratch paths below ``root`` replaced by references (files uploaded on the way)."""

    def __init__(self, store: ScratchStore | None, folder: str | None, root: str,
                 share: tuple[str, str] | None = None):
        import cloudpickle

        self.store, self.folder, self.root = store, folder, root.rstrip("/")
        self.share = share  # (run prefix, shipment) of an outgoing shipment: its uploads are shared
        self.uploaded: dict[str, str] = {}
        self.found: list[str] = []
        outer = self

        class P(cloudpickle.CloudPickler):
            def persistent_id(self, obj: Any):
                return outer.reference(obj)

        self._cls = P

    def dumps(self, obj: Any) -> bytes:
        buf = io.BytesIO()
        self._cls(buf, protocol=5).dump(obj)
        return buf.getvalue()

    def reference(self, obj: Any):
        if isinstance(obj, str):
            typ = "s"
        elif isinstance(obj, PurePath):
            typ = "p"
        else:
            return None
        s = str(obj)
        if not (s == self.root or s.startswith(self.root + "/")):
            return None
        rel = s[len(self.root) + 1:]
        self.found.append(s)
        if self.store is None:  # a scan only
            return (_TAG, rel, "n", None, typ)
        if os.path.isfile(s):
            return (_TAG, rel, "f", self._upload(s), typ)
        return (_TAG, rel, "d" if os.path.isdir(s) else "n", None, typ)

    def _upload(self, local: str) -> str:
        key = self.uploaded.get(local)
        if key is not None:
            return key
        st = os.stat(local)
        origin = _ORIGIN.get(local)
        if origin is not None and origin[1:] == (st.st_mtime_ns, st.st_size):
            key = origin[0]  # came from the store unchanged: send its key again
            MOVED["reused"] += st.st_size
        elif self.share is None:
            key = f"{self.folder}/{new_nonce(12)}"
            self.store.put_file(local, key)
            MOVED["up"] += st.st_size
        else:
            prefix, shipment = self.share
            with _LOCK:
                got = _SHARED.get(local)
                if got is not None and got[1:3] == [st.st_mtime_ns, st.st_size] and got[0].startswith(prefix + "/"):
                    got[3].add(shipment)  # uploaded for another shipment of this run, unchanged since
                    key = got[0]
                    MOVED["reused"] += st.st_size
                else:
                    key = f"{prefix}/s-{new_nonce(12)}"
                    self.store.put_file(local, key)
                    MOVED["up"] += st.st_size
                    _SHARED[local] = [key, st.st_mtime_ns, st.st_size, {shipment}]
        self.uploaded[local] = key
        return key


class Shipment:
    """An object on its way through the scratch store (see the module's docstring)."""

    __slots__ = ("payload", "url", "prefix", "ship", "direction", "back")

    def __init__(self, payload: bytes, url: str, prefix: str, ship: str, direction: str, back: str | None):
        self.payload, self.url, self.prefix, self.ship = payload, url, prefix, ship
        self.direction, self.back = direction, back

    def __reduce__(self):
        return (_arrive, (self.payload, self.url, self.prefix, self.ship, self.direction, self.back))


def ship(obj: Any, store: ScratchStore, prefix: str, shipment: str, root: str | Path, direction: str = "out",
         back: str | None = None) -> Any:
    """``obj`` as a :class:`Shipment` (its files uploaded now), or ``obj`` itself when it holds no path below ``root``.

    Parameters
    ----------
    obj : object
    store : ScratchStore
    prefix : str
        The run's prefix (:meth:`ScratchStore.open_run`).
    shipment : str
        Random nonce of the work this object belongs to; its objects live under ``<prefix>/<shipment>``.
    root : str or Path
        The sender's scratch folder (the flow's ``<warehouse>.scratch``, or a worker's mirror).
    direction : {"out", "back"}
    back : str, optional
        For ``"back"``: who receives it, ``"flow"`` or ``"worker"``. For ``"out"``: ``"worker"`` when a worker
        sends it on from its mirrors (``root`` is its :func:`mirror_base`: a fit's EM passes); each receiving
        worker then puts the files at the same paths below its own :func:`mirror_base`, in its mirror of the
        sender's shipment (a pass finds what the earlier passes downloaded or wrote there: the chunks, the
        detector's decoded-chunk cache), which goes when that shipment ends.

    An outgoing file is uploaded once while it is unchanged (same path, modification time and size) and a
    shipment of the run still uses it: the items of one map (each of a chunk source's items holds every
    chunk's path) and the fits of every template (each receives the same export) send its key again. The
    caller ends the shipment with :func:`end_shipment` (also when its work fails).
    """
    # a result's objects sit beside its shipment's, not in it: the shipment's folder may go when the work ends,
    # before the receiver has unpickled the result
    folder = f"{prefix}/{shipment}" if direction == "out" else f"{prefix}/back-{new_nonce(12)}"
    p = _Pickler(store, folder, str(root), (prefix, shipment) if direction == "out" else None)
    payload = p.dumps(obj)
    if not p.found:
        return obj
    return Shipment(payload, store.url, prefix, f"{shipment}|{folder}", direction, back)


def end_shipment(store: ScratchStore, prefix: str, shipment: str, client: Any = None) -> None:
    """The work of ``shipment`` ended (done or failed): remove its objects, and each shared upload no other
    shipment of the run still uses; with ``client`` (the Dask client the work went through) every worker first
    drops its mirror of the shipment and its cached copies of those objects (:func:`drop_on_worker`)."""
    with _LOCK:
        gone = []
        for local, got in list(_SHARED.items()):
            if shipment in got[3] and got[0].startswith(prefix + "/"):
                got[3].discard(shipment)
                if not got[3]:
                    gone.append(got[0])
                    del _SHARED[local]
    try:
        if client is not None:
            client.run(drop_on_worker, shipment, [f"{prefix}/{shipment}", *gone])
    finally:
        _remove(store, prefix, shipment, gone)


def _remove(store: ScratchStore, prefix: str, shipment: str, gone: list[str]) -> None:
    try:
        store.rm(f"{prefix}/{shipment}")
    finally:
        for key in gone:
            store.rm(key)


def forget_run(prefix: str) -> None:
    """The run ``prefix`` ended (its whole prefix is removed by the caller): forget its shared uploads."""
    with _LOCK:
        for local in [k for k, got in _SHARED.items() if got[0].startswith(prefix + "/")]:
            del _SHARED[local]


def holds_paths(obj: Any, root: str | Path) -> list[str]:
    """The paths below ``root`` in ``obj`` (nothing uploaded)."""
    p = _Pickler(None, None, str(root))
    p.dumps(obj)
    return p.found


def _arrive(payload: bytes, url: str, prefix: str, ship: str, direction: str, back: str | None):
    carrier = Shipment(payload, url, prefix, ship, direction, back)
    shipment, folder = ship.split("|", 1)
    peer = False
    if direction == "out":
        if prefix in _FLOW_RUNS or not on_worker():
            return carrier  # the scheduler (it unpickles task graphs) or the sender: not for here
        peer = back == "worker"  # sent on by a worker from its mirrors: into this worker's mirrors of the same
        dest = mirror_base() if peer else mirror_base() / shipment
        with _LOCK:
            _refuse_ended(shipment)
            _SHIPMENTS[shipment] = (url, prefix)
    elif back == "flow":
        if prefix not in _FLOW_RUNS:
            return carrier
        dest = Path(_FLOW_RUNS[prefix])
    else:
        if not on_worker():
            return carrier
        dest = mirror_base()
    store = ScratchStore(url)
    obj = _load(payload, store, dest, shipment if direction == "out" else None, peer, prefix)
    if direction == "back":
        store.rm(folder)  # downloaded: its objects go now
    return obj


def _load(payload: bytes, store: ScratchStore, dest: Path, shipment: str | None = None, peer: bool = False,
          prefix: str = "") -> Any:
    """Unpickle ``payload`` with its references below ``dest`` (files downloaded; with ``shipment``, an arriving
    shipment's, through the worker's object cache; with ``peer``, into this worker's mirrors of the sender's
    shipments, each registered as a shipment of the run ``prefix`` here)."""
    import pickle

    class U(pickle.Unpickler):
        def persistent_load(self, pid):
            tag, rel, kind, key, typ = pid
            if tag != _TAG:
                raise pickle.UnpicklingError("unknown reference")
            local = dest / rel if rel else dest
            guards = () if shipment is None else (shipment,)
            if peer and rel:
                owner = PurePath(rel).parts[0]
                guards = (shipment, owner)
                with _LOCK:
                    _refuse_ended(owner)
                    _SHIPMENTS.setdefault(owner, (store.url, prefix))
            if kind == "f":
                _download(store, key, local, guards)
            elif kind == "d":
                _private_dirs(local, dest)
            else:
                _private_dirs(local.parent, dest)
            return str(local) if typ == "s" else local

    return U(io.BytesIO(payload)).load()


def _private_dirs(path: Path, top: Path) -> None:
    top.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    if path == top:
        return
    here = top
    for part in path.relative_to(top).parts:
        here = here / part
        here.mkdir(mode=PRIVATE_DIR, exist_ok=True)


def _download(store: ScratchStore, key: str, local: Path, guards: tuple[str, ...] = ()) -> None:
    """``key`` to ``local`` (0600). With ``guards`` (the shipments of a shipment arriving on a worker, none of
    which may have ended): through the object cache, downloaded only if this worker holds no unchanged copy of
    ``key``, then hard-linked to ``local``."""
    with _LOCK:
        for shipment in guards:
            _refuse_ended(shipment)
        if local.exists():
            return
        local.parent.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
        if not guards:
            _fetch(store, key, local)
        else:
            copy = _cached_copy(store, key)
            _link(copy, local)
        st = os.stat(local)
        _ORIGIN[str(local)] = (key, st.st_mtime_ns, st.st_size)


def _refuse_ended(shipment: str) -> None:
    """A task of a shipment whose files were already dropped here (its map failed and ended while this task
    waited) stops before it writes a file (caller holds the lock)."""
    if shipment in _ENDED:
        raise RuntimeError("a chunk of a shipment that already ended reached this worker; its work was stopped")


def _fetch(store: ScratchStore, key: str, local: Path) -> None:
    """Download ``key`` to ``local`` (through a private temporary file; 0600)."""
    tmp = local.with_name(f".{local.name}.{new_nonce(4)}.part")
    with private_open(tmp, "xb"):
        pass
    try:
        store.get_file(key, str(tmp))
        os.chmod(tmp, 0o600)
        os.replace(tmp, local)
    finally:
        if tmp.exists():
            tmp.unlink()
    MOVED["down"] += os.stat(local).st_size


def _cache_path(key: str) -> Path:
    return mirror_base() / CACHE_DIR / key.lstrip("/")


def _cached_copy(store: ScratchStore, key: str) -> Path:
    """This worker's copy of ``key`` (downloaded now unless an unchanged copy is cached; caller holds the lock)."""
    got = _CACHE.get(key)
    if got is not None:
        try:
            st = os.stat(got[0])
            if (st.st_mtime_ns, st.st_size) == got[1:]:
                MOVED["cached"] += st.st_size
                return Path(got[0])
        except FileNotFoundError:
            pass
        del _CACHE[key]
    copy = _cache_path(key)
    _private_dirs(copy.parent, mirror_base())
    if copy.exists():
        copy.unlink()
    _fetch(store, key, copy)
    st = os.stat(copy)
    _CACHE[key] = (str(copy), st.st_mtime_ns, st.st_size)
    return copy


def _link(copy: Path, local: Path) -> None:
    """``local`` as a hard link of ``copy`` (a private copy if the file system has no hard links)."""
    try:
        os.link(copy, local)
    except OSError:
        tmp = local.with_name(f".{local.name}.{new_nonce(4)}.part")
        with private_open(tmp, "xb") as out, open(copy, "rb") as src:
            shutil.copyfileobj(src, out)
        os.replace(tmp, local)


def drop_on_worker(shipment: str | None, keys: list[str] | tuple[str, ...] = ()) -> None:
    """On a worker (``client.run``): remove ``shipment``'s mirror and the cached copies of ``keys`` and of every
    object below them (the objects the sender just removed from the store)."""
    if shipment:
        with _LOCK:
            _ENDED[shipment] = None
            while len(_ENDED) > 10000:
                del _ENDED[next(iter(_ENDED))]
        drop_mirror(shipment)
    with _LOCK:
        for key in keys:
            key = key.rstrip("/")
            for k in [k for k in _CACHE if k == key or k.startswith(key + "/")]:
                del _CACHE[k]
            path = _cache_path(key)
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            elif path.exists():
                path.unlink()
            _prune(path.parent)


def _prune(folder: Path) -> None:
    """Remove ``folder`` and its parents up to (and with) the cache folder while they are empty."""
    top = mirror_base() / CACHE_DIR
    if folder != top and top not in folder.parents:
        return
    while True:
        try:
            folder.rmdir()
        except OSError:
            return
        if folder == top:
            return
        folder = folder.parent


def drop_run(prefix: str) -> None:
    """On a worker (``client.run``): every file of the run ``prefix`` here (its shipments' mirrors, its cached
    objects): the run ended, done or failed."""
    with _LOCK:
        mine = [n for n, (_, p) in _SHIPMENTS.items() if p == prefix]
    for n in mine:
        drop_on_worker(n)
    drop_on_worker(None, [prefix])


def drop_stale_runs(release: str, keep: tuple[str, ...] = ()) -> None:
    """On a worker (``client.run``): the files of every run of the release folder ``release`` (a path of the
    store, :func:`~dpcore.storage.scratch_store.store.release_key`) other than ``keep``: what a killed run of
    that release left here, removed when the next run of the release opens (as :meth:`ScratchStore.open_run`
    removes its objects)."""
    release = release.rstrip("/")
    with _LOCK:
        runs = {p for _, p in _SHIPMENTS.values() if p.startswith(release + "/")}
        runs |= {k[: k.index("/", len(release) + 1)] for k in _CACHE
                 if k.startswith(release + "/") and "/" in k[len(release) + 1:]}
        folder = _cache_path(release)
        if folder.is_dir():
            runs |= {f"{release}/{p.name}" for p in folder.iterdir()}
    for prefix in runs - set(keep):
        drop_run(prefix)


def run_shipped(fn: Callable, url: str, prefix: str, shipment: str, back: str, item: Any) -> Any:
    """On a worker: ``fn(item)`` (``item`` arrived with its files in this shipment's mirror), its result shipped back."""
    if isinstance(item, Shipment):  # not unpickled on a worker (cannot happen with distributed; kept safe)
        raise RuntimeError("a chunk reached a process that is not a Dask worker")
    result = fn(item)
    return ship(result, ScratchStore(url), prefix, shipment, mirror_base() / shipment, "back", back)


def _argument_shipments(args: tuple, kwargs: dict) -> list[str]:
    """On a worker: the shipments whose mirror holds paths of a task's arguments."""
    base = mirror_base()
    nonces = {Path(p).relative_to(base).parts[0] for p in holds_paths((args, kwargs), base) if p != str(base)}
    return [n for n in nonces if n in _SHIPMENTS]


def drop_argument_mirrors(args: tuple, kwargs: dict) -> None:
    """On a worker, after a task whose arguments arrived through the store failed: remove their mirrors."""
    for n in _argument_shipments(args, kwargs):
        drop_mirror(n)


def return_from_worker(args: tuple, kwargs: dict, result: Any) -> Any:
    """On a worker, for a Prefect task whose arguments arrived through the store: its result shipped back to the
    flow, and the shipment's mirror removed. Arguments that came from no shipment: ``result`` unchanged."""
    base = mirror_base()
    nonces = _argument_shipments(args, kwargs)
    if not nonces:
        return result
    shipment = nonces[0]
    url, prefix = _SHIPMENTS[shipment]
    try:
        return ship(result, ScratchStore(url), prefix, shipment, base / shipment, "back", "flow")
    finally:
        for n in nonces:
            drop_mirror(n)


def drop_mirror(shipment: str) -> None:
    """Remove a shipment's mirror from this process (every file downloaded or written for it)."""
    with _LOCK:
        _SHIPMENTS.pop(shipment, None)
        folder = mirror_base() / shipment
        for path in [p for p in _ORIGIN if p.startswith(str(folder) + "/")]:
            del _ORIGIN[path]
    shutil.rmtree(folder, ignore_errors=True)
