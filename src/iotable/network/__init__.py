"""Table networks: a model's tables and graph (:mod:`.network`), built by :mod:`.precompute`, verified
against the model, and restricted to observed rows (:mod:`.observe`)."""
