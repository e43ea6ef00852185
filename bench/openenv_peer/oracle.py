"""A Python port of avtgym's deterministic oracle (oracle/deterministic.go) and of the policy
checks of an ask step (env/limits.go), on the demo records."""

from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEMO_RECORDS = REPO / "corpus" / "demo" / "records.jsonl"

REFUSAL = "I can't answer that; please ask about something specific in the request."
MAX_QUESTION_BYTES = 16 << 10
BUDGET_NOTICE = "The question budget is spent: this question was not answered, and asking has ended."


def _is_token_char(ch: str) -> bool:
    if ch < "\x80":
        return ch.isascii() and ch.isalnum()
    cat = unicodedata.category(ch)
    return cat[0] in ("L", "M") or cat == "Nd"


def _fold(ch: str) -> str:
    # Go's unicode.ToLower(unicode.ToUpper(r)): simple (one-rune) case mappings only.
    up = ch.upper()
    if len(up) != 1:
        up = ch
    low = up.lower()
    return low if len(low) == 1 else up


def tokens(s: str) -> list[str]:
    out, cur = [], []
    for ch in s:
        if _is_token_char(ch):
            cur.append(_fold(ch))
        elif cur:
            out.append("".join(cur))
            cur = []
    if cur:
        out.append("".join(cur))
    return out


@dataclass
class _Phrase:
    toks: tuple[str, ...]
    chars: int
    order: int
    amb: list[int]


class Record:
    """One demo record, its phrases compiled in matching order."""

    def __init__(self, raw: dict):
        self.id = raw["id"]
        self.request = raw["request"]
        self.ambiguities = raw.get("ambiguities") or []
        by_text: dict[str, _Phrase] = {}
        phrases: list[_Phrase] = []
        for i, a in enumerate(self.ambiguities):
            for text in [a["term"], *(a.get("aliases") or [])]:
                toks = tokens(text)
                if not toks:
                    continue
                key = " ".join(toks)
                p = by_text.get(key)
                if p is not None:
                    if p.amb[-1] != i:
                        p.amb.append(i)
                    continue
                p = _Phrase(tuple(toks), len(key), len(phrases), [i])
                by_text[key] = p
                phrases.append(p)
        self.phrases = sorted(phrases, key=lambda p: (-len(p.toks), -p.chars, p.order))
        # avtgym's default budget: m counted ambiguities (critical or knowledge) plus 2 extra
        # questions, or the zero-ambiguity budget (0) when m is 0.
        self.counted = sum(1 for a in self.ambiguities if a.get("kind") in ("critical", "knowledge"))
        self.budget = self.counted + 2 if self.counted else 0

    def match(self, question: str) -> list[int]:
        ids = tokens(question)
        covered = [False] * len(ids)
        credited: set[int] = set()
        for p in self.phrases:
            n = len(p.toks)
            i = 0
            while i + n <= len(ids):
                if any(covered[i + k] or ids[i + k] != p.toks[k] for k in range(n)):
                    i += 1
                    continue
                for k in range(i, i + n):
                    covered[k] = True
                credited.update(p.amb)
                i += n
        return sorted(credited)

    def respond(self, credits: list[int]) -> tuple[str, bool]:
        texts: list[str] = []
        for a in credits:
            t = (self.ambiguities[a].get("resolution") or "").strip()
            if t and t not in texts:
                texts.append(t)
        if not texts:
            return REFUSAL, True
        return " ".join(texts), False

    def ask(self, question: str) -> tuple[str, bool, list[int]]:
        """The reply to a question, whether it is a refusal, and the credited ambiguities."""
        fault = policy_fault(question)
        if fault:
            return f"I can't answer that: the question {fault}.", True, []
        credits = self.match(question)
        text, refused = self.respond(credits)
        return text, refused, ([] if refused else credits)


def policy_fault(q: str) -> str:
    if len(q.encode("utf-8", "surrogatepass")) > MAX_QUESTION_BYTES:
        return f"is longer than the limit of {MAX_QUESTION_BYTES} bytes"
    if not q.strip():
        return "is empty"
    return ""


def load_records(path: Path = DEMO_RECORDS) -> dict[str, Record]:
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                r = Record(json.loads(line))
                out[r.id] = r
    return out


def demo_questions(records: dict[str, Record]) -> list[tuple[str, str]]:
    """(task id, question) pairs: each term and alias in the full-policy template, each record's
    terms asked together, and a question about nothing registered."""
    out = []
    for rid, r in records.items():
        terms = []
        for a in r.ambiguities:
            terms.append(a["term"])
            for text in [a["term"], *(a.get("aliases") or [])]:
                out.append((rid, f"Could you clarify what exactly you mean by {text}?"))
        if len(terms) > 1:
            out.append((rid, "What do you mean by " + " and by ".join(terms) + "?"))
        out.append((rid, "What is the weather like today?"))
    return out
