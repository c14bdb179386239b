"""Query time, stage 3: which messages go into the prompt.

History is cut in *turn units*: a user message with the assistant and tool messages that
follow it. Cutting only between units keeps the history starting on a user turn and never
separates a tool call from its result.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace

from semhist.kernel.model import Message, Thread, content_text, message_text
from semhist.kernel.quoting import quoted, speaker
from semhist.indexers.store import NoteRecord, StoredMessage, SummaryRecord
from semhist.kernel.tokens import count_message, count_text

from .elsewhere import Excerpt
from .toolresults import call_name, placeholder

PROTECTED_UNITS = 2  # the last two exchanges stay verbatim ("それ" needs them)
RUN_OVERHEAD = 8  # tokens of a stretch's [date time] header line, on average
MIN_USEFUL = 40  # below this many free tokens, packing stops


def message_line(msg: Message | StoredMessage) -> str:
    """How one old message reads inside the context message or a summarizer's input. It is
    named by its author when known (that tells user from assistant in a chat between people,
    and costs fewer tokens than role plus name), else by its role. Its text is quoted: it can
    neither close the block it is in nor start a line as another speaker (kernel/quoting.py)."""
    return f"{speaker(msg.name, msg.role)}: {quoted(message_text(msg))}"


def context_line(thread: Thread, pos: int, whole: bool = False) -> str:
    """A retrieved message's line; a cleared tool result keeps its placeholder unless it is
    what the search hit (`whole`): a block retrieved for its talk does not bring back every
    search result read in it."""
    msg = thread.messages[pos]
    if msg.cleared is not None and not whole:
        return f"{msg.role}: {quoted(msg.cleared)}"
    return message_line(msg)


def line_cost(thread: Thread, pos: int, whole: bool = False) -> int:
    return count_text(context_line(thread, pos, whole)) + 1


@dataclass(frozen=True)
class Retrieved:
    """A group of old messages placed in the context message; rank 0 is the best.

    `score` is the best cosine in the group (None when it was taken for its time); `whole`:
    messages shown whole even when the prompt's turns show them cleared (the search's hit)."""

    message_ids: tuple[int, ...]
    score: float | None
    rank: int
    block_id: int | None = None
    whole: tuple[int, ...] = ()
    needed: int | None = None  # left out by the budget: the fewest tokens any of its alternatives needed


@dataclass(frozen=True)
class Earlier:
    """Retrieved history an earlier turn's prompt carried (the cache layout): its context
    message, kept where it was, just before the user message at position `before`, so the
    prompt's start stays what the provider cached."""

    before: int
    retrieved: Retrieved
    tokens: int = 0  # what its context message costs (counted once per request)


@dataclass(frozen=True)
class Carried:
    """What this strategy's previous prompts of the thread carried (the cache layout, read from
    the turn log), by store id: where the last prompt's turns started, and each earlier turn's
    retrieved history as (the user message it came before, its messages, those shown whole)."""

    start: int | None = None
    contexts: tuple[tuple[int, tuple[int, ...], tuple[int, ...]], ...] = ()

    @classmethod
    def from_turns(cls, records: Sequence[dict], strategy: str) -> Carried:
        """From turn-log records, oldest first: the newest record of the strategy holds the
        whole state (where its turns started, every retrieved history it carried)."""
        for r in reversed(records):
            cache = r.get("cache")
            if r.get("strategy") == strategy and isinstance(cache, dict):
                contexts = tuple((c[0], tuple(c[1]), tuple(c[2])) for c in cache.get("contexts", ()))
                return cls(cache.get("start"), contexts)
        return cls()


def goes_on(carried: Carried | None) -> bool:
    """Whether the cache layout has an earlier prompt to go on from (else a prompt is chosen as
    in the head layout: the first ask of a thread, a file)."""
    return carried is not None and carried.start is not None


@dataclass(frozen=True)
class Selection:
    """What a strategy keeps: retrieved groups (best first) and verbatim history units."""

    retrieved: tuple[Retrieved, ...] = ()
    history: tuple[tuple[int, ...], ...] = ()  # turn units, chronological
    summary: SummaryRecord | None = None  # rolling summary of what precedes `history`
    notes: tuple[NoteRecord, ...] = ()  # the structured list of user statements, always kept
    quoted: tuple[int | None, ...] = ()  # per note, the position of the message it quotes (None: not here)
    cleared: tuple[int, ...] = ()  # tool results of the kept turns the budget shows as placeholders
    earlier: tuple[Earlier, ...] = ()  # earlier turns' retrieved history, among the kept turns
    restarted: bool = True  # the cache layout: the turns start afresh (nothing is carried over)
    elsewhere: tuple[Excerpt, ...] = ()  # other threads of the channel (a request with a wider scope)
    left_out: tuple[Retrieved, ...] = ()  # candidates ranked high enough that the budget could not hold
    listed: tuple[int, ...] = ()  # stretches about the request left out, each named by a dated line (listing.py)
    room: int | None = None  # under a budget, the tokens retrieval had (its context message included)
    whole_thread: bool = False  # the whole thread fit the budget: sent as `full` sends it, nothing retrieved

    @property
    def history_ids(self) -> tuple[int, ...]:
        return tuple(p for unit in self.history for p in unit)

    @property
    def included(self) -> frozenset[int]:
        """Messages whose own text is in the prompt (a summary does not count)."""
        return frozenset(self.history_ids) | {p for r in self.retrieved for p in r.message_ids} | {
            p for p in self.quoted if p is not None} | {p for e in self.earlier for p in e.retrieved.message_ids}


@dataclass
class MemoryResult:
    """What compaction gives a strategy (the summary and the user statements), and what it
    cost."""

    summary: SummaryRecord | None = None
    notes: tuple[NoteRecord, ...] = ()
    llm_calls: int = 0
    llm_ms: float = 0.0
    call_ms: list[float] = field(default_factory=list)  # each compaction call, for monitoring
    compacted: bool = False
    summaries: int = 0  # summary chunks written
    extracted: int = 0  # user messages read for the structured list
    backlog: int = 0  # user messages and turns left for later asks
    problems: list[str] = field(default_factory=list)


def turn_units(messages: Sequence[Message]) -> list[tuple[int, ...]]:
    """Non-system messages grouped into units that each start on a user message.

    Messages before the first user message form a unit of their own; it can never open the
    kept history, so it is only ever kept when the whole history is.
    """
    units: list[list[int]] = []
    for pos, msg in enumerate(messages):
        if msg.role == "system":
            continue
        if msg.role == "user" or not units:
            units.append([pos])
        else:
            units[-1].append(pos)
    return [tuple(u) for u in units]


def last_units(messages: Sequence[Message], units: Sequence[tuple[int, ...]], max_messages: int,
               minimum_units: int = PROTECTED_UNITS) -> tuple[tuple[int, ...], ...]:
    """The newest units holding at most `max_messages` messages, but never fewer than
    `minimum_units` units (the last exchanges are always kept)."""
    kept: list[tuple[int, ...]] = []
    count = 0
    for unit in reversed(units):
        if len(kept) >= minimum_units and count + len(unit) > max_messages:
            break
        kept.append(unit)
        count += len(unit)
    kept.reverse()
    # A leading unit that does not start on a user turn (an assistant greeting) may only
    # stay when everything is kept.
    if kept and len(kept) < len(units) and messages[kept[0][0]].role != "user":
        kept = kept[1:]
    return tuple(kept)


def stable_units(messages: Sequence[Message], units: Sequence[tuple[int, ...]], max_messages: int,
                 step: int = 1) -> tuple[tuple[int, ...], ...]:
    """`last_units`, started at a multiple of `step` units: between a turn and the next, the
    recent turns then only grow at their end, and every `step` exchanges they are cut back at
    once. A provider's prompt cache keeps what did not change at a prompt's start: a window
    that slides every turn changes everything after it."""
    kept = last_units(messages, units, max_messages)
    if step <= 1 or not kept:
        return kept
    start = (len(units) - len(kept)) // step * step
    out = tuple(units[start:])
    if start and messages[out[0][0]].role != "user":  # as last_units: a turn starts on the user
        out = out[1:]
    return out


# -- the current turn and the last exchanges ------------------------------------------------
def current_turn(messages: Sequence[Message], unit: tuple[int, ...], request: str,
                 as_stored: str | None = None) -> bool:
    """Whether `unit` is the request's own turn, stored before the ask (a bot stores the
    user's message first; an agent in a tool loop has its calls and results after it). It is
    no exchange yet: the last two exchanges are the ones before it."""
    first = messages[unit[0]]
    if first.role != "user" or content_text(first.to_openai().get("content")) not in (request, as_stored):
        return False
    return all(messages[p].role in ("tool", "system") or (messages[p].role == "assistant" and messages[p].tool_calls)
               for p in unit[1:])


def protected_count(messages: Sequence[Message], units: Sequence[tuple[int, ...]], request: str,
                    as_stored: str | None = None) -> int:
    """How many of the newest units a budget gives up last: the last two exchanges, and the
    current turn when it is stored."""
    return PROTECTED_UNITS + (1 if units and current_turn(messages, units[-1], request, as_stored) else 0)


# -- tool results a budget clears ------------------------------------------------------------
def clearable_results(messages: Sequence[Message], unit: tuple[int, ...], cleared: Collection[int] = ()) -> list[int]:
    """The tool results of `unit` still shown whole: what a budget clears to their
    placeholders before it drops the exchange (its answer is worth more than what it read).
    Never called for the current turn: the answer under way needs its results."""
    return [p for p in unit if messages[p].role == "tool" and messages[p].cleared is None and p not in cleared]


def cleared_form(messages: Sequence[Message], pos: int) -> Message:
    """The tool result at `pos` shown as its placeholder, named by the call it answers (in the
    same turn, before it)."""
    result = messages[pos]
    name, arguments = "a tool", ""
    for q in range(pos - 1, -1, -1):
        call = next((c for c in messages[q].tool_calls or () if str(c.get("id")) == str(result.tool_call_id)), None)
        if call is not None:
            name, arguments = call_name(call)
            break
        if messages[q].role == "user":
            break
    return replace(result, cleared=placeholder(name, arguments, len(result.content)))


def with_cleared(thread: Thread, positions: Collection[int]) -> Thread:
    """The thread as the prompt shows it with the tool results at `positions` cleared."""
    if not positions:
        return thread
    messages = list(thread.messages)
    for p in positions:
        messages[p] = cleared_form(messages, p)
    return thread.with_messages(tuple(messages))


def shown_cost(messages: Sequence[Message], positions: Iterable[int], cleared: Collection[int] = ()) -> int:
    """The prompt cost of these messages, the ones in `cleared` as their placeholders."""
    return sum(count_message((cleared_form(messages, p) if p in cleared else messages[p]).to_openai())
               for p in positions)


def unit_cost(thread: Thread, unit: tuple[int, ...], cleared: Collection[int] = (), request: str | None = None) -> int:
    """A turn's prompt cost, the results in `cleared` as their placeholders. `request`: the
    turn is the current one, stored; its first message is sent as the request, which
    `fixed_cost` counts already."""
    cost = shown_cost(thread.messages, unit, cleared)
    if request is None:
        return cost
    stored = thread.messages[unit[0]].to_openai()
    sent = {**stored, "content": request} if isinstance(stored.get("content"), str) else stored
    return cost - count_message(stored) + count_message(sent) - count_message({"role": "user", "content": request})


# (alternatives largest first, cosine shown to the user or None for a time match, block id,
# the position the search hit or None); candidates are packed in list order, the rank order
Candidate = tuple[Iterable[tuple[int, ...]], "float | None", "int | None", "int | None"]

LEFT_OUT = 3  # candidates the budget left out, recorded for the turn log


def pack(candidates: Iterable[Candidate],
         cost: Callable[[int, bool], int], budget: int, exclude: frozenset[int],
         max_groups: int | None = None, count_kept: bool = False) -> tuple[list[Retrieved], list[Retrieved]]:
    """Fill `budget` tokens greedily in rank order; also what the budget left out (the
    candidates none of whose alternatives fit, and the next one when it ran out).

    Each candidate offers alternatives, largest first (a whole block, then shorter stretches
    of it, then a window around its best message), made as they are read; the first
    alternative that still fits is taken, so a block is never
    cut below the window a fact needs. Messages already kept are not paid for twice. A
    candidate's hit (its 4th item) is priced and shown whole (`cost(position, whole)`).
    With `count_kept`, a candidate the prompt already holds whole counts towards `max_groups`:
    the best groups are the best ones, whether or not an earlier turn already brought them.
    """
    out: list[Retrieved] = []
    taken = set(exclude)
    spent = 0
    priced: dict[tuple[int, bool], int] = {}  # a block's alternatives share their messages

    def cost_of(p: int, whole: bool) -> int:
        key = (p, whole)
        if key not in priced:
            priced[key] = cost(p, whole)
        return priced[key]

    left: list[Retrieved] = []  # what ranked high enough but did not fit (at most LEFT_OUT)
    held = 0  # candidates the prompt already held whole (counted with `count_kept`)
    remaining = iter(candidates)
    for alternatives, score, block_id, hit in remaining:
        offered, least = None, None
        for ids in alternatives:
            new = tuple(p for p in ids if p not in taken)
            if not new:
                offered = None
                held += 1 if count_kept else 0  # the prompt holds what this candidate is about
                break
            offered = offered or new
            price = sum(cost_of(p, p == hit) for p in new) + RUN_OVERHEAD
            least = price if least is None else min(least, price)
            if spent + price <= budget:
                out.append(Retrieved(new, score, len(out), block_id, (hit,) if hit in new else ()))
                taken.update(new)
                spent += price
                offered = None
                break
        if offered is not None and len(left) < LEFT_OUT:
            # what the smallest part needed: when nothing fits, the prompt says so (assemble.fit)
            left.append(Retrieved(offered, score, -1, block_id, needed=least))
        if max_groups and len(out) + held >= max_groups:
            break
        if budget - spent < MIN_USEFUL:
            # the budget is spent: the next candidate is what it left out
            following = next(remaining, None)
            if following is not None and len(left) < LEFT_OUT:
                parts = [tuple(p for p in ids if p not in taken) for ids in following[0]]
                if parts and parts[0]:
                    least = min(sum(cost_of(p, p == following[3]) for p in new) + RUN_OVERHEAD
                                for new in parts if new)
                    left.append(Retrieved(parts[0], following[1], -1, following[2], needed=least))
            break
    return out, left
