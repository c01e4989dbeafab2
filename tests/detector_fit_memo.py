"""Flow tests reuse the detector's fit of an identical export within a test process (issue 49 §2: suite time).

Most flow tests release the same 3,000 flights under the same templates, and each release fitted the detector
again: about 2 s of CPU of a 3.8 s release of the small spec (BENCHMARKS "Test suite time"). The fit is a pure,
seeded function of its inputs: the exported rows (the export file's bytes), the template, the spec's public
schema and the detector settings. :func:`memo_fit_streamed` stands in for ``tasks.detect.fit_streamed`` (the
name the flow's ``fit-template`` task calls) in every test unless it is marked ``real_detector_fit``: on a key
seen before in this process it writes the stored scores as a new private score file next to the export and
returns the stored parameters, otherwise it calls :func:`dpcore.steps.detect.fit_streamed` and stores its result.

What still fits for real: every test of the detector (they call ``dpcore`` directly, not the task), the first
release of each distinct input in a worker, every fit whose chunks go to Dask workers (the mapper is not the
in-process pool), and the tests marked ``real_detector_fit``. A change in what the task passes to the fit (the
export's rows, the template, the settings) changes the key, so the memo never answers for other inputs.
"""
from __future__ import annotations

import copy
import hashlib
import os
import pickle
from dataclasses import replace
from pathlib import Path

#: key -> (StreamedFit with its scores_path and export_path cleared, the score file's bytes)
_FITS: dict[str, tuple[object, bytes]] = {}
#: How many fits the memo answered and how many it passed on (read by its own test).
COUNTS = {"hits": 0, "misses": 0}


def _key(parts, template, spec) -> str | None:
    from dpcore.detect.settings import DetectorSettings

    try:
        inputs = pickle.dumps((template, spec.public_schema, DetectorSettings.from_spec(spec), parts.rows,
                               parts.n_chunks, parts.columns))
    except Exception:  # noqa: BLE001 (something that does not pickle: no memo)
        return None
    h = hashlib.sha256(inputs)
    h.update(Path(parts.path).read_bytes())
    return h.hexdigest()


def memo_fit_streamed(parts, template, spec, mapper=None):
    """``dpcore.steps.detect.fit_streamed`` answered from this process's earlier fit of the same inputs."""
    import dpcore.steps.detect as detect
    from dpcore.runtime.chunks import serial_map
    from dpcore.runtime.pooled_map import pooled_map
    from dpcore.storage.lineage import new_nonce

    kwargs = {} if mapper is None else {"mapper": mapper}
    key = _key(parts, template, spec) if mapper in (None, serial_map, pooled_map) else None
    if key is None or key not in _FITS:
        fit = detect.fit_streamed(parts, template, spec, **kwargs)
        if key is not None and fit.scores_path is not None and Path(fit.scores_path).exists():
            _FITS[key] = (replace(fit, params=copy.deepcopy(fit.params)), Path(fit.scores_path).read_bytes())
        COUNTS["misses"] += 1
        return fit
    stored, scores = _FITS[key]
    path = Path(parts.path).parent / f"scores-{new_nonce(8)}.parquet"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(scores)
    COUNTS["hits"] += 1
    return replace(stored, template=template, params=copy.deepcopy(stored.params), scores_path=path,
                   export_path=Path(parts.path))
