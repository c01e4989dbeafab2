"""The public bundle and its pictures: what a release writes for the world to read.

Owns:

* :mod:`.bundle` -- the release bundle (``var/bundles/<dataset>/<release_id>/``): the tables, the
  report, the manifest with the ledger's section; :class:`~.bundle.StepOutput`, what a private step
  contributes.
* :mod:`.plots` -- the report's pictures, drawn from published (noisy) values only.
* :mod:`.background_plots` -- the count-of-counts and unattributed pictures drawn by a child process.
* :mod:`.series_page` -- the page across a series' released periods.

Everything here is post-processing of released values (DESIGN.md rule 4); nothing reads the data.

Who may import it: :mod:`dpcore.steps`, :mod:`dpcore.run` and ``tasks/``/``flows/``/``dpr/``. It imports
:mod:`dpcore.budget`, :mod:`dpcore.release`, :mod:`dpcore.storage` and :mod:`dpcore.runtime` only, and
nothing of its layer's siblings (:mod:`dpcore.detect`, :mod:`dpcore.validation`, :mod:`dpcore.mechanisms`).
"""
