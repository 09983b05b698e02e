"""save_pretrained after injection: with offline-packed weights (the originals released) it
refuses and writes nothing, and state_dict refuses as it does; with the model's own weights (kernelize, inject without packed) it
writes the original checkpoint, which reloads into a stock model computing exactly what the
stock original computes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "testdata" / "fixtures" / "llama-odd"
IDS = torch.randint(3, 500, (2, 13), generator=torch.Generator().manual_seed(8))


def load(path=FIXTURE, device="cpu"):
    return transformers.LlamaForCausalLM.from_pretrained(path, dtype=torch.bfloat16).eval().to(device)


def logits(model):
    with torch.no_grad():
        return model(input_ids=IDS.to(model.device)).logits.float()


def test_save_after_packed_inject_refuses_and_writes_nothing(llama_odd_run, llama_odd_pkg, tmp_path, device):
    model = load(device=device)
    llama_odd_pkg.inject(model, packed=llama_odd_run / "packed")
    logits(model)
    dest = tmp_path / "saved"
    with pytest.raises(llama_odd_pkg.InjectError, match=r"save the original model instead.*xpuinject pack"):
        model.save_pretrained(dest)
    with pytest.raises(llama_odd_pkg.InjectError, match="cannot be saved"):
        model.push_to_hub("someone/never-pushed")
    # state_dict refuses too, rather than return the few tensors that were not released
    with pytest.raises(llama_odd_pkg.InjectError, match=r"LlamaForCausalLM.state_dict: .*cannot be saved"):
        model.state_dict()
    assert not dest.exists()
    assert "save_pretrained" not in load().__dict__  # other models, and the class, are untouched


@pytest.mark.parametrize("how", ["kernelize", "inject"])
def test_save_with_own_weights_reloads_to_the_stock_outputs(llama_odd_pkg, tmp_path, how, device):
    model = load(device=device)
    if how == "kernelize":
        llama_odd_pkg.kernelize(model)
    else:
        llama_odd_pkg.inject(model)
    injected = logits(model)  # packs the layers' tensors into buffers on the modules
    assert any(n.startswith("xpuinject_") for m in model.modules() for n in m._buffers)
    model.save_pretrained(tmp_path / "saved")
    reloaded = load(tmp_path / "saved", device)
    assert not any("forward" in m.__dict__ for m in reloaded.modules())
    want = logits(load(device=device))
    assert torch.equal(logits(reloaded), want)
    assert not torch.equal(injected, want)  # the saved model ran our kernels, the reloaded one is stock
    assert sorted(reloaded.state_dict()) == sorted(load().state_dict())
