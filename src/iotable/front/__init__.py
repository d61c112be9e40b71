"""The torch front end: decomposition metadata (:mod:`.spec`), layer kinds (:mod:`.registry`), tracing a model
into layer steps (:mod:`.trace`) and planning each table layer (:mod:`.plan`) before any row is computed."""
