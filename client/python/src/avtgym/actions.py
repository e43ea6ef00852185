"""The text-to-action rule: how a policy model's raw output becomes an Action.

Rule, in order (the first that applies decides):

1. JSON. The first JSON object found in the text is the action: the body of a ```json (or bare
   ```) fence if there is one, else the whole text, else the first parseable {...} inside
   surrounding prose. Its type (key "type", alias "action") says what it is, as in the AmbiTab
   prompts:
     {"type": "clarification", "question": "..."}  -> Action.ask(question)
     {"type": "done"}                              -> Action.stop()
     {"type": "sql", "sql": "..."}                 -> Action.submit_sql(sql)
   Type aliases (case-insensitive): clarification | clarify | question | ask -> ask;
   done | stop | finish | end -> stop; sql | submit | submit_sql | answer -> submit_sql.
   Text aliases: the question may be under "question", "text" or "content"; the SQL under
   "sql", "query" or "text". A JSON object with a missing/unknown type or an empty question or
   SQL is malformed (ok=False): once a JSON object is found, the lenient rules are not tried.
2. Lenient fallback, when the text holds no JSON object:
   - empty or blank text -> malformed;
   - the whole text (ignoring case, surrounding quotes, brackets and final punctuation) is
     STOP, DONE, <STOP> or [STOP] -> Action.stop();
   - a ```sql fence -> Action.submit_sql(its body);
   - text starting with the word SELECT or WITH -> Action.submit_sql(the text);
   - a single line ending with "?" -> Action.ask(the line);
   - anything else -> malformed.

Malformed output gives ParsedAction(action=None, ok=False, error=<why>, text=<the output>), as
it always has; the caller decides. Either apply a client-side convention (AmbiTab's: retry once,
then a fallback STOP, and leave that episode out of recall and F1), or report the output to the
server with the unparsed action, so that the episode's protocol applies its own rule:

    parsed = parse_action(output)
    res = client.step(ep, parsed.or_unparsed())   # the action, or Action.unparsed(output)

(AMBITAB answers a first unparsed output with a notice asking for a valid action and takes the
second in a row as STOP; BIRD_C spends a turn on it.) The raw output is also in .text.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace

from avtgym.types import Action

__all__ = ["ParsedAction", "parse_action"]

_ASK_TYPES = {"clarification", "clarify", "question", "ask"}
_STOP_TYPES = {"done", "stop", "finish", "end"}
_SQL_TYPES = {"sql", "submit", "submit_sql", "answer"}
_QUESTION_KEYS = ("question", "text", "content")
_SQL_KEYS = ("sql", "query", "text")

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_-]*)[ \t]*\n?(.*?)```", re.DOTALL)
_STOP_WORDS = {"STOP", "DONE"}


@dataclass(frozen=True)
class ParsedAction:
    """parse_action's result: action (None when the output is malformed), ok, error (why it is
    malformed) and text, the model output as it was given ("" for None)."""

    action: Action | None
    ok: bool
    error: str | None = None
    text: str = ""

    def or_unparsed(self) -> Action:
        """The action to step with: the parsed action, or Action.unparsed(text) when the output
        is malformed (the server's protocol then decides what it costs)."""
        if self.ok and self.action is not None:
            return self.action
        return Action.unparsed(self.text)


def _bad(why: str) -> ParsedAction:
    return ParsedAction(None, False, why)


def _find_json(text: str) -> dict | str | None:
    """The first JSON object of the text (a dict), an error string if a candidate was a JSON
    value but not an object, or None when there is none."""
    candidates: list[str] = []
    for m in _FENCE.finditer(text):
        if m.group(1).lower() in ("json", ""):
            candidates.append(m.group(2).strip())
    candidates.append(text.strip())
    dec = json.JSONDecoder()
    for c in candidates:
        try:
            v = json.loads(c)
        except ValueError:
            continue
        if isinstance(v, dict):
            return v
        if isinstance(v, list) and v and isinstance(v[0], dict):
            return "a JSON list, not an object"
    for i, ch in enumerate(text):
        if ch != "{":
            continue
        try:
            v, _ = dec.raw_decode(text, i)
        except ValueError:
            continue
        if isinstance(v, dict):
            return v
    return None


def _first_str(d: dict, keys: tuple[str, ...]) -> str:
    for k in keys:
        v = d.get(k)
        if isinstance(v, str) and v.strip():
            return v.strip()
    return ""


def _from_json(d: dict) -> ParsedAction:
    t = d.get("type", d.get("action"))
    if not isinstance(t, str) or not t.strip():
        return _bad("JSON object has no \"type\"")
    t = t.strip().lower()
    if t in _ASK_TYPES:
        q = _first_str(d, _QUESTION_KEYS)
        return ParsedAction(Action.ask(q), True) if q else _bad("clarification without a question")
    if t in _STOP_TYPES:
        return ParsedAction(Action.stop(), True)
    if t in _SQL_TYPES:
        s = _first_str(d, _SQL_KEYS)
        return ParsedAction(Action.submit_sql(s), True) if s else _bad("sql action without SQL")
    return _bad(f"unknown action type {t!r}")


def parse_action(text: str) -> ParsedAction:
    """Map a policy's raw output to an Action by the rule in this module's docstring; the result
    carries the output in .text (use .or_unparsed() to step with it when it is malformed)."""
    raw = "" if text is None else str(text)
    return replace(_parse(raw), text=raw)


def _parse(text: str) -> ParsedAction:
    if not text.strip():
        return _bad("empty output")
    found = _find_json(text)
    if isinstance(found, dict):
        return _from_json(found)
    if isinstance(found, str):
        return _bad(found)
    s = text.strip()
    bare = s.strip("\"'`*").strip().strip("<>[]").strip().rstrip(".!").strip().upper()
    if bare in _STOP_WORDS:
        return ParsedAction(Action.stop(), True)
    for m in _FENCE.finditer(s):
        if m.group(1).lower() == "sql" and m.group(2).strip():
            return ParsedAction(Action.submit_sql(m.group(2).strip()), True)
    if re.match(r"(?i)(select|with)\b", s):
        return ParsedAction(Action.submit_sql(s), True)
    if "\n" not in s and s.endswith("?"):
        return ParsedAction(Action.ask(s), True)
    return _bad("no action found: want a JSON action, STOP, SQL or a one-line question")
