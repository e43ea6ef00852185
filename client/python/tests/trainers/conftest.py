"""Opt-in trainer adapter tests (TRL, verl): skipped unless AVTGYM_TEST_TRAINERS=1.

`make test-trainers` (client/python/scripts/test_trainers.sh) installs torch, trl and verl into
client/python/.venv-trainers, starts `bin/avtgym serve` and runs this folder with
AVTGYM_TEST_TRAINERS=1 and AVTGYM_ADDR set. Without AVTGYM_ADDR the session server fixture of
../conftest.py is used.
"""

from __future__ import annotations

import os

import pytest

ENABLED = os.environ.get("AVTGYM_TEST_TRAINERS") == "1"
SKIP_REASON = ("trainer adapter tests are opt-in: run `make test-trainers` "
               "(or set AVTGYM_TEST_TRAINERS=1 with torch/trl/verl installed)")


def pytest_collection_modifyitems(config, items):
    if ENABLED:
        return
    here = os.path.dirname(__file__)
    skip = pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def trainer_addr(request) -> str:
    addr = os.environ.get("AVTGYM_ADDR")
    if addr:
        return addr
    return request.getfixturevalue("addr")


def char_tokenizer():
    """A character-level fast tokenizer with a ChatML-style template, built offline (no hub)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<unk>", "<|im_start|>", "<|im_end|>"]
    chars = ["\n", "\t"] + [chr(i) for i in range(32, 127)] + [chr(i) for i in range(160, 256)] + ["’", "“", "”", "–", "—"]
    vocab = {t: i for i, t in enumerate(specials + chars)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")  # newlines too
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>",
                                   eos_token="<|im_end|>", bos_token=None,
                                   additional_special_tokens=["<|im_start|>"])
    fast.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    fast.padding_side = "left"
    return fast


@pytest.fixture(scope="session")
def tokenizer():
    pytest.importorskip("tokenizers", reason="tokenizers is not installed (make test-trainers installs it)")
    pytest.importorskip("transformers", reason="transformers is not installed (make test-trainers installs it)")
    return char_tokenizer()
