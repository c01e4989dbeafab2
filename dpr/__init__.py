"""``dpr``: the data owner's command line (issue 20).

From a CSV to a first release without typing Python: draft and check a spec,
preview a release's cost, run it, ask operator queries and read the budget's
history. Layering: ``dpr`` sits over ``flows`` (releases and operator queries
run as real Prefect flows) and ``dpcore`` (checks, plans and the ledger, which
need no Prefect); nothing below imports it.

Exit codes (every subcommand)
-----------------------------
0
    Success (``spec check``: no problem; ``plan``: the release fits).
1
    An environment failure: a full disk, a home that is not writable, a symlink
    loop, an I/O error, a damaged warehouse file (its first cause in one line:
    fix the machine and run the same command again); or an unexpected internal
    error (a traceback is printed: please report it).
2
    Refused: a bad spec, input, flag or request, or a release that does not
    fit the budget. Nothing was charged unless the message says what was.
"""
