"""Named, ordered schema migrations of the store, applied once each, in order, on open.

A migration is SQL ({id}, {blob}, {real} filled per backend; a dict when the backends need
different statements) and optionally a data step in Python, run in the same transaction, for
what SQL alone cannot derive (token counts, the hashed lexical terms of closed blocks).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from semhist.kernel.tokens import count_message
from .partitions import partition_tables
from .rows import column_terms, request_key

SQLITE, POSTGRES = "sqlite", "postgresql"


def _identity_and_costs(store: Any, cur: Any) -> None:
    """Give every existing thread an incarnation id, every message its prompt cost."""
    cur.execute("SELECT thread_id FROM threads")
    for (thread_id,) in cur.fetchall():
        cur.execute(store._sql("UPDATE threads SET uid = ? WHERE thread_id = ?"), (uuid.uuid4().hex, thread_id))
    cur.execute("SELECT id, role, content, name, tool_calls FROM messages")
    costs = []
    for mid, role, content, name, calls in cur.fetchall():
        message = {"role": role, "content": content}
        if name and role in ("user", "assistant"):
            message["name"] = name
        if calls:
            message["tool_calls"] = json.loads(calls)
        costs.append((count_message(message), mid))
    cur.executemany(store._sql("UPDATE messages SET tokens = ? WHERE id = ?"), costs)
    cur.execute("UPDATE threads SET n_tokens = (SELECT COALESCE(SUM(tokens), 0) FROM messages m "
                "WHERE m.thread_id = threads.thread_id AND m.role <> 'system')")


def _block_documents(store: Any, cur: Any) -> None:
    """Index the terms of every block closed before lexical candidates existed."""
    cur.execute("SELECT thread_id, block_no, terms FROM messages WHERE block_no IS NOT NULL AND block_no >= 0 "
                "ORDER BY thread_id, block_no")
    docs: dict[tuple[str, int], list[str]] = {}
    for thread_id, block_no, terms in cur.fetchall():
        docs.setdefault((thread_id, int(block_no)), []).extend(column_terms(terms))
    for (thread_id, block_no), terms in docs.items():
        store._index_terms(cur, thread_id, block_no, terms)


def _request_keys(store: Any, cur: Any) -> None:
    cur.execute("SELECT id, payload FROM turn_log")
    requests = [(i, json.loads(p).get("request")) for i, p in cur.fetchall()]
    cur.executemany(store._sql("UPDATE turn_log SET request_key = ? WHERE id = ?"),
                    [(request_key(r), i) for i, r in requests if isinstance(r, str)])


_DF = "CREATE TABLE block_term_df (thread_id TEXT NOT NULL, token TEXT NOT NULL, df INTEGER NOT NULL, " \
      "PRIMARY KEY (thread_id, token));"

Migration = tuple[str, "str | dict[str, str]", "Callable[[Any, Any], None] | None"]

MIGRATIONS: tuple[Migration, ...] = (
    ("0001_threads_messages_blocks", """
CREATE TABLE threads (thread_id TEXT PRIMARY KEY, created_at TEXT NOT NULL, generation INTEGER NOT NULL DEFAULT 0);
CREATE TABLE messages (
  id {id}, thread_id TEXT NOT NULL REFERENCES threads(thread_id) ON DELETE CASCADE,
  ts {real}, sort_ts {real} NOT NULL, tz TEXT, role TEXT NOT NULL, name TEXT, content TEXT NOT NULL,
  tool_calls TEXT, tool_call_id TEXT, source_key TEXT, terms TEXT NOT NULL DEFAULT '',
  embedder TEXT, vector {blob}, block_no INTEGER);
CREATE UNIQUE INDEX messages_source ON messages (thread_id, source_key);
CREATE INDEX messages_order ON messages (thread_id, sort_ts, id);
CREATE INDEX messages_tail ON messages (thread_id, sort_ts, id) WHERE block_no IS NULL;
CREATE INDEX messages_block ON messages (thread_id, block_no);
CREATE INDEX messages_thread_id ON messages (thread_id, id);
CREATE TABLE blocks (thread_id TEXT NOT NULL REFERENCES threads(thread_id) ON DELETE CASCADE,
  block_no INTEGER NOT NULL, tokens INTEGER NOT NULL, parts TEXT NOT NULL, PRIMARY KEY (thread_id, block_no));
CREATE TABLE manifests (thread_id TEXT PRIMARY KEY REFERENCES threads(thread_id) ON DELETE CASCADE,
  payload TEXT NOT NULL);
CREATE TABLE store_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
""", None),
    ("0002_turn_log", """
CREATE TABLE turn_log (id {id}, thread_id TEXT NOT NULL REFERENCES threads(thread_id) ON DELETE CASCADE,
  at {real} NOT NULL, payload TEXT NOT NULL);
CREATE INDEX turn_log_thread ON turn_log (thread_id, id);
""", None),
    ("0003_retention", "ALTER TABLE threads ADD COLUMN retention_days {real};", None),
    # COUNT(*) over a million-message thread is a scan; the write that changes a count keeps it.
    ("0004_thread_counters", """
ALTER TABLE threads ADD COLUMN n_messages INTEGER NOT NULL DEFAULT 0;
ALTER TABLE threads ADD COLUMN n_vectors INTEGER NOT NULL DEFAULT 0;
UPDATE threads SET n_messages = (SELECT COUNT(*) FROM messages m WHERE m.thread_id = threads.thread_id),
  n_vectors = (SELECT COUNT(*) FROM messages m WHERE m.thread_id = threads.thread_id AND m.vector IS NOT NULL);
""", None),
    # Query-time state in long-running processes is checked against (uid, generation, version);
    # the token counters let a budget or a compaction trigger be priced without reading a thread.
    ("0005_thread_identity_and_costs", """
ALTER TABLE threads ADD COLUMN uid TEXT;
ALTER TABLE threads ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
ALTER TABLE threads ADD COLUMN n_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE threads ADD COLUMN segment_history {blob};
ALTER TABLE messages ADD COLUMN tokens INTEGER NOT NULL DEFAULT 0;
CREATE INDEX messages_system ON messages (thread_id, id) WHERE role = 'system';
""", _identity_and_costs),
    # Lexical candidates for long threads: the terms of each closed block, in full-text search.
    # A term's block count (per thread) lets a lookup leave out terms too common to choose by.
    ("0006_block_terms", {
        SQLITE: "CREATE VIRTUAL TABLE block_terms USING fts5(body, thread_id UNINDEXED, block_no UNINDEXED, "
                "tokenize = 'ascii');" + _DF,
        POSTGRES: "ALTER TABLE blocks ADD COLUMN terms tsvector; "
                  "CREATE INDEX blocks_terms ON blocks USING gin (terms);" + _DF,
    }, _block_documents),
    # Summaries, the structured list and its progress live with the messages they come from,
    # keyed by message ids, so every replica shares them and forgetting reaches them.
    ("0007_memory", """
CREATE TABLE summaries (id {id}, thread_id TEXT NOT NULL REFERENCES threads(thread_id) ON DELETE CASCADE,
  upto_ts {real} NOT NULL, upto_id BIGINT NOT NULL, first_ts {real}, covered_tokens INTEGER NOT NULL,
  text TEXT NOT NULL, model TEXT NOT NULL, llm_ms {real} NOT NULL, created_at TEXT NOT NULL);
CREATE INDEX summaries_thread ON summaries (thread_id, upto_ts, upto_id);
CREATE TABLE notes (id {id}, thread_id TEXT NOT NULL REFERENCES threads(thread_id) ON DELETE CASCADE,
  source_id BIGINT NOT NULL, source_ts {real}, kind TEXT NOT NULL, text TEXT NOT NULL, quote TEXT NOT NULL,
  superseded_by BIGINT, model TEXT NOT NULL, llm_ms {real} NOT NULL, created_at TEXT NOT NULL);
CREATE INDEX notes_thread ON notes (thread_id, id);
CREATE INDEX notes_source ON notes (thread_id, source_id);
ALTER TABLE threads ADD COLUMN notes_ts {real};
ALTER TABLE threads ADD COLUMN notes_id BIGINT;
""", None),
    # What a message carries that semhist keeps but does not read (content parts that are not
    # text, the role it was sent with), and the masking a thread was started with: once a
    # thread is masked, every later write and turn-log entry of it is too.
    # ... and the key of each ask's request, so forgetting a message finds the asks made with it.
    ("0008_verbatim_and_pii", """
ALTER TABLE messages ADD COLUMN verbatim TEXT;
ALTER TABLE threads ADD COLUMN pii TEXT;
ALTER TABLE turn_log ADD COLUMN request_key TEXT;
""", _request_keys),
    # Where a thread belongs: a Teams tenant and channel (a channel's reply chains are threads of
    # their own that may search each other), so an ask can reach its channel and never further.
    ("0009_scopes", """
ALTER TABLE threads ADD COLUMN tenant TEXT;
ALTER TABLE threads ADD COLUMN channel TEXT;
CREATE INDEX threads_scope ON threads (tenant, channel);
""", None),
    # The thread of each reply the proxy relayed on the Responses API: a request that names only
    # `previous_response_id` continues that thread, on whichever replica it reaches.
    ("0010_response_threads", """
CREATE TABLE response_threads (response_id TEXT PRIMARY KEY,
  thread_id TEXT NOT NULL REFERENCES threads(thread_id) ON DELETE CASCADE, at {real} NOT NULL);
CREATE INDEX response_threads_thread ON response_threads (thread_id, at);
""", None),
    # When messages were forgotten, how many, from when to when, and why (a forget, an edit, a
    # date cut such as retention): never what they said. The inspector draws them on the timeline.
    ("0011_forgotten", """
CREATE TABLE forgotten (id {id}, thread_id TEXT NOT NULL REFERENCES threads(thread_id) ON DELETE CASCADE,
  at {real} NOT NULL, first_ts {real} NOT NULL, last_ts {real} NOT NULL, messages INTEGER NOT NULL,
  reason TEXT NOT NULL);
CREATE INDEX forgotten_thread ON forgotten (thread_id, id);
""", None),
    # The messages a logged ask sent, kept only with SEMHIST_LOG_PROMPTS (they quote the thread,
    # so any forget of the thread clears them).
    ("0012_turn_prompts", """
CREATE TABLE turn_prompts (turn_id BIGINT PRIMARY KEY, thread_id TEXT NOT NULL REFERENCES threads(thread_id)
  ON DELETE CASCADE, messages TEXT NOT NULL);
CREATE INDEX turn_prompts_thread ON turn_prompts (thread_id);
""", None),
    # PostgreSQL: every table of thread rows in hash partitions of thread_id, keyed by it first
    # (partitions.py says why and how the count grows); SQLite keeps its tables as they are.
    ("0013_partitions_by_thread", "", partition_tables),
    # who stored an operator (system) message: the turn log names it (retrieval/kernel/writers.py)
    ("0014_writer", "ALTER TABLE messages ADD COLUMN writer TEXT;", None),
    # why a block starts and why the next one does (a pause, a topic shift and its score, a size
    # cut), as the segmenter decided: the inspector and the turn log show it. Both are kept so a
    # view that reads a few blocks, and the open tail after the last one, each have theirs.
    ("0015_block_causes", "ALTER TABLE blocks ADD COLUMN cause TEXT; ALTER TABLE blocks ADD COLUMN cut TEXT;", None),
)


def script(migration: Migration, dialect: str, types: dict[str, str]) -> list[str]:
    """The statements of one migration for one backend."""
    sql = migration[1] if isinstance(migration[1], str) else migration[1][dialect]
    return [s for s in (part.strip() for part in sql.format(**types).split(";")) if s]
