"""Issue 46.4 (DESIGN.md rule 14): no step reuses work across release ids keyed on the input's content.

Before, an input whose bytes had passed validation was not validated again (nor loaded, nor fingerprinted)
under a new release id: ``validate`` took 0.04 s on bytes seen before and seconds on changed bytes, so an
operator learned whether today's data equals an earlier version. Now the raw table, and with it the
validation and the ledger's fingerprinting, is reused only by a run of the same release id.
"""
from __future__ import annotations

import asyncio

import pytest
from owner_registration import register_spec
from tiny_ids import D1, D1_PLUS, ids_spec

import dpcore.budget.ledger as ledger_module
import dpcore.validation as validation_module
from child_runs import read_runs

_spec = ids_spec


@pytest.mark.usefixtures("prefect_harness")
def test_a_new_release_of_equal_or_changed_data_does_the_same_work(tmp_path, monkeypatch):
    """(D1 as release r1, D1 as r2) and (D1 as r1, D1 + x as r2), each in its own home, through the ``validate``
    flow: the same task states, and the same work in both (each release loads, fingerprints and validates its
    input). A resumed r2 (same release id, same bytes) may reuse its own work, and does."""
    from flows.validate import validate_flow

    for v in ("DPR_WAREHOUSE", "DPR_BUNDLES", "DPR_OWNER_KEY_FILE"):
        monkeypatch.delenv(v, raising=False)
    work: list[str] = []
    real_validate, real_fingerprint = validation_module.validate_table, ledger_module._fingerprint_table

    def validate(*a, **kw):
        work.append("validate")
        return real_validate(*a, **kw)

    def fingerprint(*a, **kw):
        work.append("fingerprint")
        return real_fingerprint(*a, **kw)

    monkeypatch.setattr(validation_module, "validate_table", validate)
    monkeypatch.setattr(ledger_module, "_fingerprint_table", fingerprint)
    traces: dict[str, list] = {}
    for name, sequence in (("A", (D1, D1, D1)), ("B", (D1, D1_PLUS))):
        folder = tmp_path / name
        monkeypatch.setenv("DPR_HOME", str(folder / "home"))
        spec_path = _spec(folder)
        traces[name] = []
        for i, (data, release) in enumerate(zip(sequence, ("ids-r1", "ids-r2", "ids-r2"))):
            (folder / "input.csv").write_text(data)
            if i == 0:
                register_spec(spec_path)  # the data owner, once (ingests and fingerprints D1 under ids-r1)
            work.clear()
            state = validate_flow(spec_path=str(spec_path), release_id=release, return_state=True)
            _, _, _, tasks = asyncio.run(read_runs([str(state.state_details.flow_run_id)]))
            traces[name].append((sorted((t.name.rsplit("-", 1)[0], t.state.name) for t in tasks), list(work)))
    assert traces["A"][:2] == traces["B"]
    first, second, resumed = traces["A"]
    assert first[1] == ["validate"]  # r1: the registration's table (same release), validated once
    assert second[1] == ["fingerprint", "validate"]  # r2 on equal bytes: loaded, fingerprinted, validated again
    assert resumed[1] == []  # r2 resumed: its own work reused
    assert first[0] == second[0] == resumed[0] and {s for _, s in first[0]} == {"Completed"}
