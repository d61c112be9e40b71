"""The interlayer graph: node kinds and their typed records (:mod:`.nodes`), the graph and its checks
(:mod:`.graph`, :mod:`.checks`), the node-by-node interpreter (:mod:`.interpret`) and pictures
(:mod:`.diagram`)."""
