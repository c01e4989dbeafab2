"""Privacy mechanisms. Each one states its neighbour relation, privacy notion,
exponential-mechanism convention where relevant, and knows its own privacy map
(cost as a function of the neighbour distance).

Also the mechanisms' shared parts: :mod:`.accuracy` (the intervals stated with every published
value), :mod:`.normal_quantile`, :mod:`.neighbors` and :mod:`.neighbors_sql` (neighbour counts).

Who may import it: :mod:`dpcore.steps`, :mod:`dpcore.run` and ``tasks/``/``flows/``/``dpr/``. It imports
:mod:`dpcore.budget`, :mod:`dpcore.noise`, :mod:`dpcore.storage` and :mod:`dpcore.runtime` only (nothing of
its layer's siblings :mod:`dpcore.publish`, :mod:`dpcore.detect`, :mod:`dpcore.validation`).
"""
