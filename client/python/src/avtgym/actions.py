"""The text-to-action rule: how a policy model's raw output becomes an Action.

Rule, in order (the first that applies decides):

0. BIRD-Interact's agentic grammar, when the text holds an <action>...</action> block (the last
   one, when there are several): its body must be one call (else the output is malformed):
     ask("...")                         -> Action.ask
     submit("...")  (alias submit_sql)  -> Action.submit_sql
     execute("...")                     -> Action.execute
     get_schema()                       -> Action.get_schema()
     get_all_column_meanings()          -> Action.get_all_column_meanings()
     get_column_meaning("t", "c")       -> Action.get_column_meaning("t", "c")
     get_all_external_knowledge_names() -> Action.get_all_external_knowledge_names()
     get_knowledge_definition("name")   -> Action.get_knowledge_definition("name")
     get_all_knowledge_definitions()    -> Action.get_all_knowledge_definitions()
     stop()                             -> Action.stop()   (avtgym's; not in BIRD-Interact)
   Names are case-insensitive. A string argument may be written with double, single or triple
   quotes, with backslash escapes (\\", \\', \\\\, \\n, \\t); the one argument of ask, submit,
   execute and get_knowledge_definition is everything between its first and last quote, so
   unescaped quotes inside SQL are kept; an unquoted argument is taken as it is. A tool without
   arguments takes none; ask, submit and execute need a non-empty argument. Without the wrapper,
   when the whole text (or the body of a ``` fence) is one such call, it is that action (tried
   before rule 1: SQL in a call may hold braces).
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
   "sql", "query", "text" or "content" (so TIDE-Bench's {"type": "ask", "content": ...} and
   {"type": "sql", "content": ...} parse). A JSON object with a missing/unknown type or an empty
   question or SQL is malformed (ok=False): once a JSON object is found, the lenient rules are
   not tried.
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
second in a row as STOP; BIRD_C spends a turn on it; BIRD_A charges 0.2 coins.) The raw output is
also in .text.
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
_SQL_KEYS = ("sql", "query", "text", "content")

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


_ACTION_BLOCK = re.compile(r"<action>(.*?)</action>", re.DOTALL | re.IGNORECASE)
_CALL = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*\((.*)\)\s*;?\s*\Z", re.DOTALL)
# Calls with one string argument: the Action they make.
_ONE_ARG = {
    "ask": Action.ask,
    "submit": Action.submit_sql,
    "submit_sql": Action.submit_sql,
    "execute": Action.execute,
    "get_knowledge_definition": Action.get_knowledge_definition,
}
_NO_ARG = {
    "get_schema": Action.get_schema,
    "get_all_column_meanings": Action.get_all_column_meanings,
    "get_all_external_knowledge_names": Action.get_all_external_knowledge_names,
    "get_all_knowledge_definitions": Action.get_all_knowledge_definitions,
    "stop": Action.stop,
}
_NEED_TEXT = {"ask", "submit", "submit_sql", "execute", "get_knowledge_definition"}
_ESCAPES = {"\\": "\\", '"': '"', "'": "'", "n": "\n", "t": "\t"}


def _unescape(s: str) -> str:
    """Undo the backslash escapes \\ \" \' \n \t; any other backslash is kept."""
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s) and s[i + 1] in _ESCAPES:
            out.append(_ESCAPES[s[i + 1]])
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _one_string(args: str) -> str:
    """The one argument of a call: between its first and last quote (triple quotes first), with
    escapes undone; an unquoted argument as it is."""
    a = args.strip()
    for q in ('"""', "'''"):
        if len(a) >= 6 and a.startswith(q) and a.endswith(q):
            return a[3:-3]
    if len(a) >= 2 and a[0] in "\"'" and a[-1] == a[0]:
        return _unescape(a[1:-1])
    return a


def _strings(args: str) -> list[str] | None:
    """The string arguments of a call with several, or None when they cannot be read: quoted
    strings separated by commas (escapes undone), or bare words separated by commas."""
    a, out, i = args.strip(), [], 0
    if not a:
        return []
    if a[0] not in "\"'":
        return [p.strip() for p in a.split(",")]
    while i < len(a):
        q = a[i]
        if q not in "\"'":
            return None
        j, buf = i + 1, []
        while j < len(a) and a[j] != q:
            if a[j] == "\\" and j + 1 < len(a):
                buf.append(a[j:j + 2])
                j += 2
                continue
            buf.append(a[j])
            j += 1
        if j >= len(a):
            return None
        out.append(_unescape("".join(buf)))
        i = j + 1
        while i < len(a) and a[i].isspace():
            i += 1
        if i < len(a):
            if a[i] != ",":
                return None
            i += 1
            while i < len(a) and a[i].isspace():
                i += 1
    return out


def _call(body: str) -> ParsedAction | None:
    """The action of one call of the agentic grammar; None when body is not a call of a known
    name (a malformed call of a known name is a malformed ParsedAction)."""
    m = _CALL.match(body)
    if not m:
        return None
    name, args = m.group(1).lower(), m.group(2)
    if name in _NO_ARG:
        if args.strip():
            return _bad(f"{name}() takes no argument")
        return ParsedAction(_NO_ARG[name](), True)
    if name in _ONE_ARG:
        v = _one_string(args).strip()
        if not v and name in _NEED_TEXT:
            return _bad(f"{name}(...) needs a non-empty argument")
        return ParsedAction(_ONE_ARG[name](v), True)
    if name == "get_column_meaning":
        parts = _strings(args)
        if parts is None or len(parts) != 2 or not all(p.strip() for p in parts):
            return _bad('get_column_meaning needs two arguments: ("table", "column")')
        return ParsedAction(Action.get_column_meaning(parts[0].strip(), parts[1].strip()), True)
    return None


def _agentic(text: str) -> ParsedAction | None:
    """Rule 0: the last <action>...</action> block of the text; None when there is none."""
    blocks = _ACTION_BLOCK.findall(text)
    if not blocks:
        return None
    body = blocks[-1].strip()
    fence = _FENCE.fullmatch(body)
    if fence:
        body = fence.group(2).strip()
    found = _call(body)
    if found is None:
        return _bad("the <action> block holds no known call: want ask(\"...\"), execute(\"...\"), "
                    "submit(\"...\"), get_schema(), get_all_column_meanings(), "
                    "get_column_meaning(\"table\", \"column\"), get_all_external_knowledge_names(), "
                    "get_knowledge_definition(\"name\") or get_all_knowledge_definitions()")
    return found


def parse_action(text: str) -> ParsedAction:
    """Map a policy's raw output to an Action by the rule in this module's docstring; the result
    carries the output in .text (use .or_unparsed() to step with it when it is malformed)."""
    raw = "" if text is None else str(text)
    return replace(_parse(raw), text=raw)


def _parse(text: str) -> ParsedAction:
    if not text.strip():
        return _bad("empty output")
    agentic = _agentic(text)
    if agentic is not None:
        return agentic
    s = text.strip()
    fence = _FENCE.fullmatch(s)
    call = _call(fence.group(2).strip() if fence else s)
    if call is not None:
        return call
    found = _find_json(text)
    if isinstance(found, dict):
        return _from_json(found)
    if isinstance(found, str):
        return _bad(found)
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
