"""Privacy mechanisms. Each one states its neighbour relation, privacy notion,
exponential-mechanism convention where relevant, and knows its own privacy map
(cost as a function of the neighbour distance)."""
