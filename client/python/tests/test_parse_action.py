"""The text-to-action rule on well-formed and malformed policy output."""

from __future__ import annotations

import pytest

from avtgym import Action, parse_action

ASK = Action.ask
STOP = Action.stop()
SQL = Action.submit_sql

CASES = [
    # AmbiTab JSON
    ('{"type": "clarification", "question": "What do you mean by top?"}', ASK("What do you mean by top?")),
    ('{"type": "done"}', STOP),
    ('{"type": "sql", "sql": "SELECT 1"}', SQL("SELECT 1")),
    # fenced JSON, prose around JSON
    ('```json\n{"type": "clarification", "question": "Which year?"}\n```', ASK("Which year?")),
    ('Sure.\n```\n{"type": "done"}\n```\nThanks', STOP),
    ('I think I should ask. {"type": "clarification", "question": "Which region?"} That is all.', ASK("Which region?")),
    ('Answer: {"type": "sql", "sql": "SELECT name FROM t WHERE x = \'{a}\'"}', SQL("SELECT name FROM t WHERE x = '{a}'")),
    # aliases
    ('{"action": "ask", "text": "Which metric?"}', ASK("Which metric?")),
    ('{"type": "STOP"}', STOP),
    ('{"type": "submit_sql", "query": "SELECT 2"}', SQL("SELECT 2")),
    # lenient fallback
    ("STOP", STOP),
    ("  done. ", STOP),
    ("<STOP>", STOP),
    ("[stop]", STOP),
    ("SELECT * FROM customers", SQL("SELECT * FROM customers")),
    ("with t as (select 1) select * from t", SQL("with t as (select 1) select * from t")),
    ("Here you go:\n```sql\nSELECT 3\n```", SQL("SELECT 3")),
    ("Do you mean net revenue or order count?", ASK("Do you mean net revenue or order count?")),
]

MALFORMED = [
    ("", "empty output"),
    ("   \n ", "empty output"),
    ('{"type": "dance"}', "unknown action type"),
    ('{"type": "clarification"}', "without a question"),
    ('{"type": "clarification", "question": "   "}', "without a question"),
    ('{"type": "sql"}', "without SQL"),
    ('{"question": "Which year?"}', "no \"type\""),
    ('[{"type": "done"}]', "list"),
    ("asdf qwerty", "no action found"),
    ("I am not sure what to do.\nMaybe ask?", "no action found"),
    ('{"type": "clarification", "question": "unterminated', "no action found"),
    ("STOPPING NOW", "no action found"),
]


@pytest.mark.parametrize("text,want", CASES)
def test_parses(text, want):
    got = parse_action(text)
    assert got.ok and got.error is None and got.action == want


@pytest.mark.parametrize("text,why", MALFORMED)
def test_malformed_has_defined_outcome(text, why):
    got = parse_action(text)
    assert not got.ok and got.action is None and why in got.error


def test_none_is_malformed():
    assert not parse_action(None).ok


def test_agentic_grammar_precedence():
    # An <action> block decides over JSON and the lenient rules; a malformed block is malformed.
    text = 'I could answer {"type": "done"} but <action>ask("Which year?")</action>'
    assert parse_action(text).action == Action.ask("Which year?")
    assert not parse_action('{"type": "done"} <action>nonsense</action>').ok
    # A bare call of the grammar is read before JSON; an unknown call falls through to the old rules.
    assert parse_action('submit("SELECT \'{}\'")').action == Action.submit_sql("SELECT '{}'")
    assert parse_action("count(*)").ok is False
    assert parse_action("SELECT max(x) FROM t").action == Action.submit_sql("SELECT max(x) FROM t")
