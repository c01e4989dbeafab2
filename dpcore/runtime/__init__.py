"""Runtime helpers: how work runs in this process and its children, with no knowledge of releases.

Owns:

* :mod:`.chunks` -- the memory cap (``DPR_MEMORY_LIMIT``), chunk sizes and the serial mapper.
* :mod:`.pooled_map`, :mod:`.child_map`, :mod:`.shared_scope` -- a shared thread pool per core, work in a
  child process, process-wide scopes.
* :mod:`.blas_threads` -- BLAS held to one thread while fits run.
* :mod:`.heap` -- freed memory given back to the system.
* :mod:`.lazy_modules`, :mod:`.lazy_exports`, :mod:`.deferred_imports` -- heavy modules imported on first use.
* :mod:`.faults`, :mod:`.fault_injection` -- failures of the machine told from the user's, and the
  tests' crash points.

Who may import it: anyone. It imports no other ``dpcore`` package (the bottom layer).
"""
