"""Model factory: one ``load_model`` for every place a model comes from.

Sources, tried in this order:
- ``builtin:tiny_base``: the tiny base checkpoint shipped in ``parathink/assets/tiny_base`` (made by the
  project's own ``base`` stage);
- ``s3://bucket/prefix``: a checkpoint directory, downloaded once into the cache (boto3, credentials and
  ``AWS_ENDPOINT_URL`` from the environment);
- a ``.gguf`` file (or a directory holding exactly one): loaded through transformers' ``gguf_file=`` and
  converted once into a normal checkpoint in the cache;
- a local checkpoint directory;
- otherwise a hub id (needs the hub to be reachable).
After loading, the tiny path and a Qwen3-4B path share every line: same tag tokens, same attention code.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import torch

from parathink.modeling.cpu_sdpa import ensure_cpu_sdpa
from parathink.modeling.paths import CONFIG_KEY, install_path_vectors
from parathink.modeling.tags import add_tag_tokens

BUILTIN = "builtin:"
ASSETS = Path(__file__).resolve().parent.parent / "assets"
_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
           "float16": torch.float16, "fp16": torch.float16}


def cache_root() -> Path:
    return Path(os.environ.get("PARATHINK_CACHE", Path.home() / ".cache" / "parathink"))


def to_dtype(dtype: str | torch.dtype | None) -> torch.dtype | None:
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in _DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {sorted(_DTYPES)}")
    return _DTYPES[dtype]


def _download_s3(uri: str, cache: Path) -> Path:
    """The checkpoint under ``uri``, downloaded once into the cache (``storage.download_dir``: a key that would
    climb out of the cache folder is refused before anything is written)."""
    from parathink import storage

    bucket, _, prefix = uri[len("s3://"):].partition("/")
    prefix = prefix.strip("/")
    dest = cache / "s3" / bucket / prefix
    if (dest / ".complete").exists():
        return dest
    if not storage.list_files(f"s3://{bucket}/{prefix}"):
        raise FileNotFoundError(f"model source {uri}: no objects under that prefix")
    part = dest.with_name(dest.name + ".part")
    shutil.rmtree(part, ignore_errors=True)
    storage.download_dir(f"s3://{bucket}/{prefix}", part)
    (part / ".complete").touch()
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(part, dest)
    return dest


def _convert_gguf(gguf: Path, cache: Path) -> Path:
    """GGUF -> normal checkpoint, once per file (keyed by path, size and mtime)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    st = gguf.stat()
    key = hashlib.sha1(f"{gguf.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:16]
    dest = cache / "gguf" / f"{gguf.stem}-{key}"
    if (dest / "config.json").exists():
        return dest
    tmp = dest.with_name(dest.name + ".tmp")
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # The weights are already de-quantised to fp32; only a "gguf quantizer" marker remains, which refuses to save.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    os.replace(tmp, dest)
    return dest


def resolve_source(source: str | os.PathLike) -> Path | str:
    """A local checkpoint directory for ``source``, or the hub id unchanged."""
    s = str(source)
    cache = cache_root()
    if s.startswith(BUILTIN):
        path = ASSETS / s[len(BUILTIN):]
        if not (path / "config.json").exists():
            raise FileNotFoundError(f"model source {s}: no shipped checkpoint at {path} "
                                    "(run `parathink stage base base.train=true`)")
        return path
    if s.startswith("s3://"):
        return _download_s3(s, cache)
    path = Path(s).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise FileNotFoundError(f"model source {s}: GGUF file does not exist")
        return _convert_gguf(path, cache)
    if path.is_dir():
        ggufs = sorted(path.glob("*.gguf"))
        if not (path / "config.json").exists() and len(ggufs) == 1:
            return _convert_gguf(ggufs[0], cache)
        if not (path / "config.json").exists():
            raise FileNotFoundError(f"model source {s}: directory has no config.json (not a checkpoint)")
        return path
    if path.is_absolute() or s.startswith((".", "~")) or path.exists() or s.count("/") > 1:
        raise FileNotFoundError(f"model source {s}: path does not exist")
    return s  # hub id ("org/name" or "name")


def _load_path_vectors(model, local: Path) -> None:
    from safetensors.torch import load_file

    files = sorted(local.glob("*.safetensors"))
    state = {}
    for f in files:
        state.update({k: v for k, v in load_file(str(f)).items() if ".path_vectors." in k})
    missing, unexpected = model.load_state_dict(state, strict=False)
    absent = [k for k in model.state_dict() if ".path_vectors." in k and k not in state]
    if absent or unexpected:
        raise ValueError(f"{local}: path vectors do not match the config "
                         f"({len(absent)} missing, {len(unexpected)} unexpected)")


def load_tokenizer(source: str | os.PathLike):
    from transformers import AutoTokenizer

    direct = Path(str(source)).expanduser()
    local = direct if (direct / "tokenizer_config.json").exists() else resolve_source(source)
    try:
        tok = AutoTokenizer.from_pretrained(str(local))
    except Exception as e:
        where = "local checkpoint" if isinstance(local, Path) else "hub id (not a local path; is the hub reachable?)"
        raise ValueError(f"cannot load a tokenizer from {source} [{where}]: {type(e).__name__}: {str(e)[:300]}") from e
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(path_or_uri: str | os.PathLike, *, device: str | torch.device = "cpu", dtype=None,
               attn_implementation: str | None = None, add_tags: bool = True):
    """(model, tokenizer) from any source above, in eval mode on ``device``.

    ``add_tags``: make every grammar's tags single tokens (mean-of-sub-token init) when they are not yet,
    so ``TagIds.from_tokenizer`` works on any loaded model. ``dtype`` None keeps the checkpoint's dtype.
    """
    from transformers import AutoModelForCausalLM

    local = resolve_source(path_or_uri)
    tok = load_tokenizer(local)
    kwargs = {"dtype": to_dtype(dtype) or "auto"}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    try:
        model = AutoModelForCausalLM.from_pretrained(str(local), **kwargs)
    except OSError as e:
        raise FileNotFoundError(f"cannot load model {path_or_uri}: {e}") from e
    max_paths = getattr(model.config, CONFIG_KEY, None)
    if max_paths:
        install_path_vectors(model, int(max_paths))
        _load_path_vectors(model, Path(local))
    if add_tags:
        add_tag_tokens(model, tok)
    ensure_cpu_sdpa()
    return model.to(device).eval(), tok


def save_model(model, tokenizer, out_dir: str | os.PathLike, state_dict: dict | None = None) -> Path:
    """Write a plain Hugging Face checkpoint directory (config, safetensors, tokenizer files).

    ``state_dict``: the tensors to write instead of the model's own (a training stage's fp32 master weights); the
    config then records their dtype, so that a load with ``dtype=None`` reads what was written.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dtypes = {str(v.dtype).split(".")[1] for v in (state_dict or {}).values() if v.is_floating_point()}
    # a copy: save_pretrained empties the dict it is given
    model.save_pretrained(out, state_dict=None if state_dict is None else dict(state_dict))
    if state_dict is not None:
        if len(dtypes) == 1:
            path = out / "config.json"
            config = json.loads(path.read_text(encoding="utf-8"))
            config["dtype"] = dtypes.pop()
            path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tokenizer.save_pretrained(out)
    return out


def build_tiny_model(model_cfg, tokenizer):
    """A freshly initialised Qwen3-architecture model from ``model.config`` in hydra_conf/model/tiny.yaml."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    arch = dict(model_cfg.config)
    config = Qwen3Config(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id, **arch)
    config._attn_implementation = model_cfg.get("attn_implementation", "sdpa")
    torch.manual_seed(int(model_cfg.get("init_seed", 0)))
    ensure_cpu_sdpa()
    return Qwen3ForCausalLM(config)


def describe(model) -> dict:
    n = sum(p.numel() for p in model.parameters())
    return {"params": n, "config": json.loads(model.config.to_json_string())}
