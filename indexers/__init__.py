"""semhist build time (installed as `semhist.indexers`): load and validate histories, segment them
into blocks, embed, index, and the store they are written to.

Nothing heavy is imported here; embedders and FAISS load on first use.
"""
