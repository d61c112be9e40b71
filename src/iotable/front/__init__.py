"""The torch front end: decomposition metadata (:mod:`.spec`: the records in :mod:`.layout` and :mod:`.metadata`,
the :func:`decompose` decorator in :mod:`.declaration`), layer kinds (:mod:`.registry`), tracing a model
(:mod:`.trace`) into layer steps (:mod:`.segment`, with the elementwise glue of :mod:`.glue`) and planning each
table layer (:mod:`.plan`: the :class:`LayerPlan` record in :mod:`.layerplan`, its window in :mod:`.window`)
before any row is computed."""
