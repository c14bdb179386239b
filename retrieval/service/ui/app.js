// semhist inspector: a page over the service's documented API (docs/guides/inspector.md).
// Every stored text is user input: it is only ever set as text (textContent), never as markup.
"use strict";

const WORDS = {
  en: {
    threads: "Threads", thread: "Thread", messages: "messages", first: "first", last: "last activity",
    retention: "retention (days)", timeline: "Timeline", turns: "Turns", try: "Try a request", memory: "Memory",
    block: "block", open_tail: "open tail (not yet a block)", tokens: "tokens", pause: "pause", earlier: "Load earlier",
    forget: "Forget", forget_thread: "Forget this thread", confirm_thread: "Forget the whole thread {id}? This cannot be undone.",
    confirm_message: "Forget message {id}? This cannot be undone.", forgotten: "Forgotten: {n} messages.",
    at: "at", request: "request", strategy: "strategy", keyword: "keyword", prompt: "prompt", full: "full history",
    cached: "cached", retrieved: "Retrieved (best first)", rank: "rank", score: "score", range: "time range",
    why: "why", search: "search", time: "in the named time", no_turns: "No logged asks yet.",
    budget: "budget", run: "Build the prompts", billed: "billed at a warm cache", kept: "history kept",
    evidence: "ground truth kept", summary: "Summary", statements: "Statements", none: "none",
    superseded: "superseded by", quote: "quote", kind: "kind", text: "text", token_label: "Bearer token",
    save: "Save", token_set: "token: set", token_none: "token: none", need_token: "This service needs a token.",
    intent: "intent", source: "from", view: "view", notes: "notes", show_in_timeline: "show in the timeline",
    compactions: "compactions", asks: "asks", strategies: "strategies", skipped: "needs an LLM",
    covers: "covers", no_summary: "No summary yet.", no_statements: "No statements kept.",
    loading: "Loading…", not_found: "Not found.", tool: "tool", calls: "calls",
    topics: "topic segments", topic_shift: "topic shift", sent_vs_full: "sent / full history",
    cached_share: "cached share", recent: "Recent verbatim turns", dense: "dense (cosine)", lexical: "lexical (BM25)",
    fused: "fused", who: "who", search_placeholder: "search this thread (dense and lexical)", search_button: "Search",
    left_out: "Left out for the budget (ranked, did not fit)",
    listed: "Named by a dated line only (about the request, not shown whole)", sent: "The messages sent", not_kept: "Not kept: the service keeps them with SEMHIST_LOG_PROMPTS=on (cleared by any forget of the thread).",
    forgotten_forget: "{n} message(s) forgotten on {at} (from {from} to {to})",
    forgotten_edit: "edited on {at}: the earlier version of a message from {from} was forgotten",
    forgotten_before: "{n} message(s) before {to} forgotten by a date cut (retention), last on {at}",
    zone_thread: "Times in the thread's own zone, {zone}", zone_browser: "Times in this browser's zone, {zone}",
    zone_each: "Times in each thread's own zone", to_browser: "show in this browser's zone",
    to_thread: "show in the thread's own zone",
    cause_start: "the thread's start", cause_pause: "starts after a pause of {span}", cause_closing: "starts after a closing",
    cause_size: "starts at the size limit", cause_topic: "starts at a topic shift (score {score})",
    cause_drift: "starts where the topic drifts ({score})", cause_depth: "starts in a similarity valley ({score})",
    cause_unknown: "",
  },
  ja: {
    threads: "スレッド", thread: "スレッド", messages: "メッセージ", first: "最初", last: "最終更新",
    retention: "保持 (日)", timeline: "タイムライン", turns: "ターン", try: "リクエストを試す", memory: "メモリ",
    block: "ブロック", open_tail: "未確定の末尾 (まだブロックではない)", tokens: "トークン", pause: "間隔", earlier: "さらに前を読む",
    forget: "忘れる", forget_thread: "このスレッドを忘れる", confirm_thread: "スレッド {id} をすべて忘れますか？元に戻せません。",
    confirm_message: "メッセージ {id} を忘れますか？元に戻せません。", forgotten: "{n} 件のメッセージを忘れました。",
    at: "日時", request: "リクエスト", strategy: "戦略", keyword: "キーワード", prompt: "プロンプト", full: "全履歴",
    cached: "キャッシュ", retrieved: "取得した範囲 (スコア順)", rank: "順位", score: "スコア", range: "期間",
    why: "理由", search: "検索", time: "指定された期間", no_turns: "記録されたターンはまだありません。",
    budget: "予算", run: "プロンプトを作る", billed: "キャッシュ込みの課金", kept: "残した履歴",
    evidence: "正解の保持", summary: "要約", statements: "ステートメント", none: "なし",
    superseded: "置き換え先", quote: "引用", kind: "種類", text: "内容", token_label: "Bearer トークン",
    save: "保存", token_set: "トークン: 設定済み", token_none: "トークン: なし", need_token: "このサービスにはトークンが必要です。",
    intent: "意図", source: "出所", view: "ビュー", notes: "注記", show_in_timeline: "タイムラインで見る",
    compactions: "圧縮", asks: "問い合わせ", strategies: "戦略", skipped: "LLM が必要",
    covers: "対象", no_summary: "要約はまだありません。", no_statements: "ステートメントはありません。",
    loading: "読み込み中…", not_found: "見つかりません。", tool: "ツール", calls: "呼び出し",
    topics: "話題の区切り", topic_shift: "話題の切り替わり", sent_vs_full: "送信 / 全履歴",
    cached_share: "キャッシュ率", recent: "直近のやり取り (そのまま)", dense: "意味 (cosine)", lexical: "語 (BM25)",
    fused: "統合", who: "話者", search_placeholder: "このスレッドを検索 (意味と語)", search_button: "検索",
    left_out: "予算に入らなかった候補", listed: "日付の一行だけで示した範囲 (全文は入らず)", sent: "送ったメッセージ", not_kept: "保存されていません: SEMHIST_LOG_PROMPTS=on で保存します (スレッドの忘却で消えます)。",
    forgotten_forget: "{at} に {n} 件のメッセージを忘れました ({from} 〜 {to})",
    forgotten_edit: "{at} に編集: {from} のメッセージの以前の版を忘れました",
    forgotten_before: "{to} より前の {n} 件を日付で忘れました (保持期間)。最終 {at}",
    zone_thread: "時刻はスレッドのタイムゾーン ({zone})", zone_browser: "時刻はこのブラウザのタイムゾーン ({zone})",
    zone_each: "時刻は各スレッドのタイムゾーン", to_browser: "ブラウザのタイムゾーンで表示",
    to_thread: "スレッドのタイムゾーンで表示",
    cause_start: "スレッドの始まり", cause_pause: "{span} の間隔のあとから", cause_closing: "締めのあいさつのあとから",
    cause_size: "サイズの上限で区切り", cause_topic: "話題の切り替わりから (スコア {score})",
    cause_drift: "話題のずれから ({score})", cause_depth: "類似度の谷から ({score})", cause_unknown: "",
  },
};
const STRATEGIES = ["full", "window", "token-budget", "utterances", "blocks", "summary", "structured"];
const PAUSE_S = 3600;  // a gap drawn on the timeline

let lang = localStorage.getItem("semhist.lang") || (navigator.language.startsWith("ja") ? "ja" : "en");

function t(key, values) {
  let s = (WORDS[lang] || WORDS.en)[key] || WORDS.en[key] || key;
  for (const [k, v] of Object.entries(values || {})) s = s.replace(`{${k}}`, String(v));
  return s;
}

// el("td", {class: "num"}, "text", child): strings become text nodes, never markup
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

// Times: one zone per view, always named. "thread" (the default): the thread's own UTC offset,
// its newest message's, as its prompts write dates; "browser": this browser's zone.
let zoneMode = localStorage.getItem("semhist.zone") === "browser" ? "browser" : "thread";
let viewOffset = null;  // minutes east of UTC of the thread on screen

function offsetOf(iso) {
  const m = /(?:([+-])(\d\d):?(\d\d)|Z)$/.exec(iso || "");
  if (!m) return null;
  return m[1] ? (m[1] === "-" ? -1 : 1) * (Number(m[2]) * 60 + Number(m[3])) : 0;
}

function offsetName(minutes) {
  const a = Math.abs(minutes), pad = (n) => String(n).padStart(2, "0");
  return `UTC${minutes < 0 ? "-" : "+"}${pad(Math.floor(a / 60))}:${pad(a % 60)}`;
}

function zoneLine() {
  const browser = zoneMode === "browser" || viewOffset === null;
  const text = browser ? t("zone_browser", {zone: Intl.DateTimeFormat().resolvedOptions().timeZone})
    : t("zone_thread", {zone: offsetName(viewOffset)});
  return zoneSwitch(text);
}

function zoneSwitch(text) {
  return el("p", {class: "zone muted", id: "zone"}, `${text} · `, el("button", {class: "small", type: "button", id: "zone-switch",
    onclick: () => { zoneMode = zoneMode === "browser" ? "thread" : "browser"; localStorage.setItem("semhist.zone", zoneMode); route(); }},
    zoneMode === "browser" ? t("to_thread") : t("to_browser")));
}

function when(iso, offset = viewOffset) {
  if (!iso) return "";
  const d = new Date(iso);
  if (isNaN(d)) return iso;
  const locale = lang === "ja" ? "ja-JP" : "en-GB", style = {dateStyle: "medium", timeStyle: "short"};
  if (zoneMode === "browser" || offset === null) return d.toLocaleString(locale, style);
  return new Date(d.getTime() + offset * 60000).toLocaleString(locale, {...style, timeZone: "UTC"});
}

// why a block starts (the blocks API's `starts`), in words
function cause(why) {
  if (!why || !(`cause_${why.kind}` in WORDS.en) || why.kind === "unknown") return "";
  const s = why.seconds || 0;
  return t(`cause_${why.kind}`, {span: s < 60 ? `${s} s` : span(s), score: why.score ?? ""});
}

function span(seconds) {
  const d = Math.floor(seconds / 86400), h = Math.floor((seconds % 86400) / 3600), m = Math.round((seconds % 3600) / 60);
  return [d && `${d} d`, h && `${h} h`, !d && m && `${m} min`].filter(Boolean).join(" ");
}

class Refused extends Error {}

async function api(path, options) {
  const headers = {"content-type": "application/json"};
  const token = sessionStorage.getItem("semhist.token");
  if (token) headers.authorization = `Bearer ${token}`;
  const response = await fetch(path, {...options, headers});
  if (response.status === 401) { askToken(); throw new Refused(t("need_token")); }
  const body = response.status === 204 ? null : await response.json().catch(() => null);
  if (!response.ok) throw new Refused((body && body.error && body.error.message) || `${response.status}`);
  return body;
}

function askToken() {
  const dialog = document.getElementById("ask-token");
  if (!dialog.open) dialog.showModal();
}

function show(...nodes) {
  const view = document.getElementById("view");
  view.replaceChildren(...nodes);
}

function crumbs(...parts) {
  document.getElementById("crumbs").replaceChildren(...parts.map(([label, href]) => el("a", {href}, label)));
}

// -- threads ---------------------------------------------------------------------------------
const FIGURES = ["tokens", "asks", "sent_vs_full", "cached_share", "compactions"];
const STATS_ROWS = 100;  // figures are read for the first rows only: one request per thread

async function threadsView() {
  crumbs();
  const threads = await api("/v1/threads");
  const rows = threads.map((th) => el("tr", {"data-thread": th.thread},
    el("td", {}, el("a", {href: `#/t/${encodeURIComponent(th.thread)}`}, th.thread)),
    el("td", {class: "num"}, th.messages), FIGURES.map((f) => el("td", {class: "num", "data-figure": f}, "")),
    el("td", {}, !th.last || offsetOf(th.last) === null || zoneMode === "browser" ? when(th.last, null)
      : `${when(th.last, offsetOf(th.last))} (${offsetName(offsetOf(th.last))})`),
    el("td", {class: "num"}, th.retention_days ?? "")));
  viewOffset = null;
  show(el("h1", {}, t("threads")), zoneMode === "browser" ? zoneLine() : zoneSwitch(t("zone_each")), el("table", {id: "threads"},
    el("thead", {}, el("tr", {}, el("th", {}, t("thread")), el("th", {class: "num"}, t("messages")),
      FIGURES.map((f) => el("th", {class: "num"}, t(f))), el("th", {}, t("last")), el("th", {class: "num"}, t("retention")))),
    el("tbody", {}, rows)));
  await Promise.all(rows.slice(0, STATS_ROWS).map(async (row) => {
    const figures = await api(`/v1/threads/${encodeURIComponent(row.dataset.thread)}/stats`).catch(() => null);
    if (!figures) return;
    const cached = figures.tokens_sent ? `${Math.round(100 * figures.cached_tokens / figures.tokens_sent)}%` : "-";
    const values = {tokens: figures.tokens, asks: figures.asks, compactions: figures.compactions, cached_share: cached,
                    sent_vs_full: figures.sent_vs_full === null ? "-" : `${Math.round(100 * figures.sent_vs_full)}%`};
    for (const cell of row.querySelectorAll("[data-figure]")) cell.textContent = values[cell.dataset.figure] ?? "";
  }));
}

// -- one thread --------------------------------------------------------------------------------
const TABS = ["timeline", "turns", "try", "memory"];

async function threadView(id, tab, query) {
  const base = `#/t/${encodeURIComponent(id)}`;
  crumbs([t("threads"), "#/"], [id, base]);
  const tabs = el("div", {class: "tabs"}, TABS.map((name) =>
    el("a", {href: `${base}/${name}`, class: name === tab ? "on" : null, "data-tab": name}, t(name))));
  const panel = el("div", {class: "panel", id: `panel-${tab}`}, t("loading"));
  const path = `/v1/threads/${encodeURIComponent(id)}`;
  const newest = await api(`${path}/messages?limit=1`).catch(() => null);
  viewOffset = offsetOf(newest && newest.messages.length ? newest.messages[newest.messages.length - 1].timestamp : null);
  show(el("h1", {}, id), zoneLine(), tabs, panel);
  const build = {timeline: timeline, turns: turns, try: tryRequest, memory: memoryView}[tab];
  panel.replaceChildren(...await build(path, id, query));
}

function messageRow(m, path, focus) {
  const who = m.name ? `${m.name} (${m.role})` : m.role;
  const calls = (m.tool_calls || []).map((c) => el("div", {class: "calls"},
    `${t("calls")}: ${c.function ? c.function.name : ""}(${c.function ? c.function.arguments : ""})`));
  const forget = el("button", {class: "small danger", type: "button", "data-forget": m.id, onclick: async () => {
    if (!confirm(t("confirm_message", {id: m.id}))) return;
    await api(`${path}/messages/${m.id}`, {method: "DELETE"});
    route();
  }}, t("forget"));
  const hit = focus && m.id >= focus[0] && m.id <= focus[1];
  return el("div", {class: `msg ${m.role}${hit ? " hit" : ""}`, "data-id": m.id},
    el("span", {class: "when"}, when(m.timestamp)), el("span", {class: "who"}, who),
    el("div", {}, el("div", {class: "text"}, m.content ?? ""), calls), forget);
}

async function timeline(path, id, query) {
  const before = query.get("before");
  const focus = (query.get("focus") || "").split("-").map(Number).filter((n) => n > 0);
  const [page, blocks, forgotten] = await Promise.all([
    api(`${path}/messages?limit=500${before ? `&before=${before}` : ""}`), api(`${path}/blocks`), api(`${path}/forgotten`)]);
  // what was forgotten, drawn where it was: before the first message after its span
  const gaps = forgotten.map((f) => ({...f, end: new Date(f.to)})).sort((a, b) => a.end - b.end);
  const gapNode = (f) => el("div", {class: `forgotten ${f.reason}`, "data-reason": f.reason},
    t(`forgotten_${f.reason}`, {n: f.messages, at: when(f.at), from: when(f.from), to: when(f.to)}));
  const sizes = new Map(blocks.map((b) => [b.block, b]));
  const out = [searchBox(path, id)];
  if (page.earlier) out.push(el("p", {}, el("a", {href: `#/t/${encodeURIComponent(id)}/timeline?before=${page.messages[0].id}`},
    t("earlier"))));
  let group = null, last = null;
  for (const m of page.messages) {
    const key = m.block ?? "tail";
    while (gaps.length && m.timestamp && gaps[0].end <= new Date(m.timestamp)) {
      const f = gaps.shift();
      if (page.earlier && new Date(f.to) < new Date(page.messages[0].timestamp)) continue;  // an earlier page's
      (group && group.key === key ? group.node : {append: (n) => out.push(n)}).append(gapNode(f));
    }
    if (last && m.timestamp && last.timestamp) {
      const gap = (new Date(m.timestamp) - new Date(last.timestamp)) / 1000;
      if (gap >= PAUSE_S) out.push(el("div", {class: "pause"}, `${t("pause")} ${span(gap)}`));
    }
    if (!group || group.key !== key) {
      const b = sizes.get(m.block);
      const head = m.block === null ? [t("open_tail"), blocks.length ? cause(blocks[blocks.length - 1].ends) : ""] :
        [`${t("block")} ${m.block}`, b ? `${b.messages} ${t("messages")}` : "", b ? `${b.tokens} ${t("tokens")}` : "",
         b && b.parts.length > 1 ? `${b.parts.length} ${t("topics")}` : "", b ? cause(b.starts) : ""];
      group = {key, n: 0, starts: new Set(b ? b.parts.filter((p) => p > 0) : []), node: el("section", {class: `block${m.block === null ? " tail" : ""}`, "data-block": key},
        el("div", {class: "head"}, head.filter(Boolean).map((h) => el("span", {}, h))))};
      out.push(group.node);
    }
    if (group.starts.has(group.n)) group.node.append(el("div", {class: "topic"}, t("topic_shift")));
    group.node.append(messageRow(m, path, focus.length === 2 ? focus : null));
    group.n += 1;
    last = m;
  }
  if (!before) out.push(...gaps.map(gapNode));  // after the newest message
  setTimeout(() => { const hit = document.querySelector(".msg.hit"); if (hit) hit.scrollIntoView({block: "center"}); });
  return out;
}

function searchBox(path, id) {
  const hits = el("div", {id: "hits"});
  const form = el("form", {class: "search", onsubmit: async (ev) => {
    ev.preventDefault();
    hits.replaceChildren(t("loading"));
    try {
      const found = await api(`${path}/search`, {method: "POST", body: JSON.stringify({query: form.query.value, k: 20})});
      hits.replaceChildren(el("table", {class: "hits"},
        el("thead", {}, el("tr", {}, ["dense", "lexical", "fused", "at", "who", "text", ""].map((k) => el("th", {}, t(k))))),
        el("tbody", {}, found.hits.map((h) => el("tr", {"data-id": h.id},
          el("td", {class: "num"}, h.dense), el("td", {class: "num"}, h.lexical), el("td", {class: "num"}, h.fused),
          el("td", {}, when(h.timestamp)), el("td", {}, h.name || h.role), el("td", {class: "text"}, h.content ?? ""),
          el("td", {}, el("a", {href: `#/t/${encodeURIComponent(id)}/timeline?focus=${h.id}-${h.id}`}, t("show_in_timeline"))))))));
    } catch (err) { hits.replaceChildren(el("p", {class: "error"}, err.message)); }
  }},
    el("input", {type: "text", name: "query", placeholder: t("search_placeholder"), required: true}),
    el("button", {type: "submit"}, t("search_button")));
  return el("div", {}, form, hits);
}

async function turns(path, id) {
  const log = await api(`${path}/log?limit=200`);
  if (!log.length) return [el("p", {class: "muted"}, t("no_turns"))];
  const asked = log.length, prompt = log.reduce((s, e) => s + (e.prompt_tokens || 0), 0);
  const full = log.reduce((s, e) => s + (e.full_tokens || 0), 0), cached = log.reduce((s, e) => s + (e.cached_tokens || 0), 0);
  const figures = el("div", {class: "figures"},
    el("div", {}, el("b", {}, asked), t("asks")),
    el("div", {}, el("b", {}, `${prompt} / ${full}`), `${t("prompt")} / ${t("full")} ${t("tokens")}`),
    el("div", {}, el("b", {}, prompt ? `${Math.round(100 * cached / prompt)}%` : "-"), t("cached")),
    el("div", {}, el("b", {}, log.filter((e) => e.memory && e.memory.compacted).length), t("compactions")));
  const items = log.slice().reverse().map((e, i) => turnDetail(e, id, log.length - i));
  return [figures, ...items];
}

function turnDetail(e, id, n) {
  const retrieved = (e.retrieved || []).map((r, rank) => el("tr", {},
    el("td", {class: "num"}, rank + 1), el("td", {class: "num"}, r.score ?? ""),
    el("td", {}, r.score === null || r.score === undefined ? t("time") : t("search")),
    el("td", {}, `${when(r.start)} – ${when(r.end)}`), el("td", {class: "num"}, r.messages ?? ""),
    el("td", {class: "cause"}, cause(r.block_starts)),
    el("td", {}, r.block_messages ? el("a", {href: `#/t/${encodeURIComponent(id)}/timeline?focus=${r.block_messages[0]}-${r.block_messages[1]}`},
      t("show_in_timeline")) : "")));
  const kw = (e.keyword || []).join(" ");
  return el("details", {class: "turn", "data-turn": n},
    el("summary", {}, `#${n} · ${when(e.at)} · ${e.strategy} · `, el("q", {}, e.request ?? ""),
      ` · ${e.prompt_tokens} / ${e.full_tokens} ${t("tokens")}`, e.cached_tokens ? ` · ${t("cached")} ${e.cached_tokens}` : ""),
    el("div", {class: "figures"},
      el("div", {}, el("b", {}, kw || "-"), `${t("keyword")} (${t("source")}: ${e.extractor ?? "-"}${e.extractor_reason ? `, ${e.extractor_reason}` : ""})`),
      el("div", {}, el("b", {}, e.intent ?? "-"), t("intent")),
      el("div", {}, el("b", {}, e.time_range ? `${when(e.time_range.start)} – ${when(e.time_range.end)}` : "-"), t("range")),
      el("div", {}, el("b", {}, e.budget_tokens ?? "-"), t("budget"))),
    e.recent ? el("p", {class: "recent"}, `${t("recent")}: ${e.recent[2]} ${t("messages")} `,
      el("a", {href: `#/t/${encodeURIComponent(id)}/timeline?focus=${e.recent[0]}-${e.recent[1]}`}, t("show_in_timeline"))) : null,
    el("h2", {}, t("retrieved")),
    el("table", {class: "retrieved"}, el("thead", {}, el("tr", {}, ["rank", "score", "why", "range", "messages", "block", ""].map(
      (k) => el("th", {}, k ? t(k) : "")))), el("tbody", {}, retrieved)),
    el("h2", {}, t("left_out")),
    (e.left_out || []).length ? el("table", {class: "left-out"}, el("tbody", {}, e.left_out.map((r) => el("tr", {},
      el("td", {class: "num"}, r.score ?? t("time")), el("td", {class: "num"}, `${r.messages} ${t("messages")}`),
      el("td", {}, el("a", {href: `#/t/${encodeURIComponent(id)}/timeline?focus=${r.block_messages[0]}-${r.block_messages[1]}`},
        t("show_in_timeline"))))))) : el("p", {class: "muted"}, t("none")),
    (e.listed || []).length ? [el("h2", {}, t("listed")), el("ul", {class: "listed"}, e.listed.map((id_) => el("li", {},
      el("a", {href: `#/t/${encodeURIComponent(id)}/timeline?focus=${id_}-${id_}`}, `#${id_}`))))] : null,
    (e.notes || []).length ? el("p", {class: "muted"}, `${t("notes")}: ${e.notes.join("; ")}`) : null,
    el("h2", {}, t("sent")),
    e.prompt ? el("div", {class: "prompt sent"}, e.prompt.map((m) => el("pre", {"data-role": m.role},
      el("span", {class: "role"}, `${m.name ? `${m.name} ` : ""}${m.role}: `),
      typeof m.content === "string" ? m.content : JSON.stringify(m.content ?? m.tool_calls))))
      : el("p", {class: "muted"}, t("not_kept")));
}

async function tryRequest(path, id) {
  const results = el("div", {class: "columns", id: "try-results"});
  const form = el("form", {class: "try", onsubmit: async (ev) => {
    ev.preventDefault();
    const data = new FormData(form);
    const body = {request: data.get("request"), strategies: data.getAll("strategy"), budget: data.get("budget") || null};
    results.replaceChildren(t("loading"));
    try {
      const out = await api(`${path}/try`, {method: "POST", body: JSON.stringify(body)});
      results.replaceChildren(...out.strategies.map((row) => strategyColumn(row, out.full_history_tokens)),
        ...out.skipped.map((s) => el("div", {class: "column muted"}, `${s}: ${t("skipped")}`)));
    } catch (err) { results.replaceChildren(el("p", {class: "error"}, err.message)); }
  }},
    el("label", {}, t("request"), el("textarea", {name: "request", rows: 2, required: true})),
    el("div", {class: "row"}, STRATEGIES.map((s) => el("label", {}, el("input", {type: "checkbox", name: "strategy", value: s,
      checked: ["full", "token-budget", "blocks"].includes(s)}), s)),
      el("label", {}, `${t("budget")} `, el("input", {type: "text", name: "budget", placeholder: "2000, 10%, 1000b", size: 12}))),
    el("div", {}, el("button", {type: "submit"}, t("run"))));
  return [form, results];
}

function strategyColumn(row, full) {
  const kept = row.evidence_total ? `${row.evidence_kept}/${row.evidence_total}` : "-";
  return el("div", {class: "column", "data-strategy": row.strategy},
    el("h2", {}, row.strategy),
    el("div", {class: "figures"},
      el("div", {}, el("b", {}, row.input_tokens), `${t("tokens")} (${t("full")} ${full})`),
      el("div", {}, el("b", {}, row.billed_warm), t("billed")),
      el("div", {}, el("b", {}, row.messages_kept), t("kept")),
      el("div", {}, el("b", {}, kept), t("evidence"))),
    row.keyword ? el("p", {class: "muted"}, `${t("keyword")}: ${row.keyword} (${row.keyword_source})`) : null,
    el("div", {class: "prompt"}, row.messages.map((m) => el("pre", {"data-role": m.role},
      el("span", {class: "role"}, `${m.name ? `${m.name} ` : ""}${m.role}: `),
      typeof m.content === "string" ? m.content : JSON.stringify(m.content ?? m.tool_calls)))));
}

async function memoryView(path, id) {
  const memory = await api(`${path}/memory`);
  const s = memory.summary;
  const statements = memory.statements.map((n) => el("tr", {class: n.superseded_by ? "muted" : null},
    el("td", {}, n.kind), el("td", {}, n.text), el("td", {}, el("q", {}, n.quote)), el("td", {}, when(n.at)),
    el("td", {class: "num"}, n.superseded_by ?? "")));
  const forget = el("button", {class: "danger", type: "button", id: "forget-thread", onclick: async () => {
    if (!confirm(t("confirm_thread", {id}))) return;
    const done = await api(path, {method: "DELETE"});
    alert(t("forgotten", {n: done.forgotten}));
    location.hash = "#/";
  }}, t("forget_thread"));
  return [
    el("h2", {}, t("summary")),
    s ? el("div", {}, el("p", {class: "muted"}, `${t("covers")}: ${when(s.from)} – ${when(s.to)} · ${s.covered_tokens} ${t("tokens")} · ${s.model}`),
      el("p", {class: "text"}, s.text)) : el("p", {class: "muted"}, t("no_summary")),
    el("h2", {}, t("statements")),
    statements.length ? el("table", {}, el("thead", {}, el("tr", {}, ["kind", "text", "quote", "at", "superseded"].map(
      (k) => el("th", {}, t(k))))), el("tbody", {}, statements)) : el("p", {class: "muted"}, t("no_statements")),
    el("h2", {}, t("forget")), forget];
}

// -- routing -----------------------------------------------------------------------------------
async function route() {
  const [hashPath, search] = location.hash.slice(1).split("?");
  const parts = (hashPath || "/").split("/").filter(Boolean);
  try {
    if (parts[0] === "t" && parts[1]) {
      const tab = TABS.includes(parts[2]) ? parts[2] : "timeline";
      await threadView(decodeURIComponent(parts[1]), tab, new URLSearchParams(search || ""));
    } else {
      await threadsView();
    }
  } catch (err) {
    show(el("p", {class: "error", id: "error"}, err.message));
  }
}

function paintChrome() {
  document.documentElement.lang = lang;
  document.getElementById("lang").textContent = lang === "ja" ? "English" : "日本語";
  document.getElementById("token").textContent = sessionStorage.getItem("semhist.token") ? t("token_set") : t("token_none");
  for (const node of document.querySelectorAll("[data-t]")) node.textContent = t(node.dataset.t);
}

document.getElementById("lang").addEventListener("click", () => {
  lang = lang === "ja" ? "en" : "ja";
  localStorage.setItem("semhist.lang", lang);
  paintChrome();
  route();
});
document.getElementById("token").addEventListener("click", askToken);
document.getElementById("ask-token").addEventListener("close", () => {
  const value = document.getElementById("token-input").value.trim();
  if (value) sessionStorage.setItem("semhist.token", value); else sessionStorage.removeItem("semhist.token");
  paintChrome();
  route();
});
window.addEventListener("hashchange", route);
paintChrome();
route();
