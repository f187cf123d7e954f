"""The GPU check script (benchmarks/gpu_check.py) keeps working and keeps fitting the device call.

Its boxes sum to its budget; they are cooperative deadlines (no signal, so nothing can interrupt a CUDA-graph
capture) on a fixed schedule; the KV bytes its bandwidth limit counts are the window each decode step reads; and its
dry run on the CPU runs every section's code at toy sizes, as a lent GPU's call runs it at the real ones, writing a
record with every section's figures."""

import importlib.util
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / f"benchmarks/{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gpu_check():
    module = _load("gpu_check")
    module.DEVICE = "cpu"
    return module


# ------------------------------------------------------------------------------------------------------- the boxes


def test_every_plan_s_boxes_sum_to_its_budget(gpu_check):
    for name, boxes in gpu_check.PLANS.items():
        assert sum(s for _, s in boxes) == gpu_check.BUDGET_S, name
    # the check plan: the cheapest and most informative first, the RL step last of the 4B sections
    order = [n for n, _ in gpu_check.BOXES]
    assert order[:5] == ["environment", "qwen3_4b.build", "qwen3_4b.ceilings", "qwen3_4b.decode_check",
                         "qwen3_4b.decode"]
    assert order.index("qwen3_4b.sft") < order.index("qwen3_4b.fork") < order.index("qwen3_4b.rl")
    # with the watchdog's grace, the call fits one device command (at most 600 s) with room for pip and imports
    assert gpu_check.BUDGET_S + gpu_check.GRACE_S <= 600 - 60
    # --budget scales every box, so that they still sum to it
    assert sum(s for _, s in gpu_check.schedule(gpu_check.BOXES, 300)) == pytest.approx(300)


def test_only_runs_the_named_sections_and_what_they_need(gpu_check):
    picked = gpu_check.select("check", ["decode", "rl"])
    assert [n for n, _ in picked] == ["environment", "qwen3_4b.build", "qwen3_4b.ceilings", "qwen3_4b.decode",
                                      "qwen3_4b.rl"]
    assert dict(picked) == {n: s for n, s in gpu_check.BOXES if n in dict(picked)}  # each in its own box
    assert [n for n, _ in gpu_check.select("check", ["rl"])] == ["environment", "qwen3_4b.rl"]  # builds its own model
    with pytest.raises(SystemExit, match="not sections of the check plan"):
        gpu_check.select("check", ["nonsense"])


def test_no_signal_and_a_unit_of_work_is_never_interrupted(gpu_check, monkeypatch):
    """A unit that outlasts its box (a graph capture, say) runs to its end; the section stops at its next check,
    keeps what it measured, and the next section still runs in its own box."""
    seen = {}
    # pytest-timeout may hold SIGALRM itself: the check is that gpu_check neither arms nor handles it
    handler, (timer, _), t0 = signal.getsignal(signal.SIGALRM), signal.getitimer(signal.ITIMER_REAL), time.monotonic()

    def capture_then_more(part, deadline):
        seen["timer"] = signal.getitimer(signal.ITIMER_REAL)[0]
        seen["handler"] = signal.getsignal(signal.SIGALRM)
        seen["elapsed"] = time.monotonic() - t0
        time.sleep(0.4)  # the "capture": longer than the box
        part["captured"] = True  # reached: nothing interrupted it
        deadline.check("the timing")
        part["timed"] = True

    monkeypatch.setattr(gpu_check, "MIN_START_S", 0.05)  # boxes of a fraction of a second here
    figures = {}
    # "next" gets a wide box: between sections box() runs gc.collect(), which took 1.8 s late in a loaded CI run
    failed = gpu_check.run_plan([("slow", 0.2), ("next", 30.0)],
                                {"slow": capture_then_more, "next": lambda p, d: p.update(ran=True)}, figures)
    assert "signal" not in vars(gpu_check) and seen["handler"] is handler
    assert seen["timer"] == 0.0 if timer == 0.0 else abs(timer - seen["timer"] - seen["elapsed"]) < 0.5
    slow = figures["slow"]
    assert slow["captured"] and "timed" not in slow
    assert "OutOfTime" in slow["error"] and "box ended before the timing" in slow["error"]
    assert failed == ["slow"] and figures["next"]["ran"], figures["next"]


def test_the_schedule_is_fixed_from_the_start(gpu_check, monkeypatch):
    """Section i ends by the sum of the boxes up to it: an early finish leaves its time to the next, a section
    whose box ended while earlier ones ran is skipped (and recorded so), and the call ends by its budget. On a clock
    the sections advance themselves, so that nothing here depends on how busy the machine is."""
    now = [100.0]
    monkeypatch.setattr(gpu_check, "clock", lambda: now[0])
    monkeypatch.setattr(gpu_check, "MIN_START_S", 0.05)

    def spend(seconds):
        now[0] += seconds

    figures = {}
    fns = {"quick": lambda p, d: spend(0.1),
           "inherits": lambda p, d: p.update(left=d.left()),
           "overruns": lambda p, d: spend(2.6),
           "starved": lambda p, d: p.update(ran=True)}
    failed = gpu_check.run_plan([("quick", 1.0), ("inherits", 0.5), ("overruns", 0.5), ("starved", 0.5)], fns,
                                figures, now[0])
    assert figures["inherits"]["left"] == pytest.approx(1.4)  # its own 0.5 s and the 0.9 s quick left
    assert figures["starved"]["error"].startswith("skipped") and "ran" not in figures["starved"]
    assert failed == ["starved"]  # overruns finished its unit (no check inside it): late, not failed
    assert figures["overruns"]["over_box_s"] == pytest.approx(0.7)  # began at 0.1 s, ran 2.6 s, box ended at 2.0
    assert [figures[n]["deadline_s"] for n in fns] == [1.0, 1.5, 2.0, 2.5]


def test_the_watchdog_writes_the_record_and_ends_a_call_that_overruns(tmp_path):
    code = ("import sys, time; sys.path.insert(0, 'benchmarks'); import gpu_check as g; from pathlib import Path; "
            f"g.DEVICE = 'cpu'; g.OUT_DIR = Path({str(tmp_path)!r}); g.FIGURES['done'] = {{'x': 1}}; "
            "g.CURRENT[0] = 'qwen3_4b.rl'; g.start_watchdog(time.perf_counter() + 0.5); time.sleep(60)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 3, proc.stderr[-2000:]
    record = json.loads((tmp_path / "gpu_dry_run.json").read_text())
    assert record["done"] == {"x": 1} and "inside qwen3_4b.rl" in record["watchdog"]
    assert record["failed_sections"] == ["qwen3_4b.rl"]


# ------------------------------------------------------------------------------------------------------- KV reads


def test_kv_reads_count_the_window_each_step_reads_not_the_live_kv():
    """Static decode reads the power-of-two bucket of rows x window (at least MIN_WINDOW); a paged step the live
    rows' gathered entries. The bandwidth limit adds those bytes to every step's weights."""
    import torch

    q4b = _load("gpu_qwen3_4b")
    from parathink.engine import Engine, SamplingConfig
    from parathink.engine.decode import MIN_WINDOW, bucket
    from parathink.engine.kv_budget import model_kv_bytes_per_token

    model, tok = q4b.new_model(q4b.TOY, 1000, "cpu", torch.float32)
    prompts = q4b._prompts(tok, 3, 5)
    n = 6
    sampling = SamplingConfig(max_new_tokens=n, batch_size=3, seed=0, logit_bias={tok.eos_token_id: q4b.NEG})
    max_len = 5 + n + 1
    static = Engine(model, tok, "parallel_r1", "causal", decode="static")
    with q4b.counting_reads() as reads:
        static.generate(prompts, sampling)
    # n steps (the first feeds the prompt's last token), each over 3 rows (the cache's capacity) and the window
    # bucket: at least MIN_WINDOW, capped by the cache's length; the live entries are 5..10
    window = bucket(5 + 1, max_len, MIN_WINDOW)
    assert window == max_len and reads == {"steps": n, "entries": n * bucket(3, 3) * window}
    token_bytes = model_kv_bytes_per_token(model.config, "float32")
    budget = q4b.paged_budget(3, 5, n, token_bytes)
    paged = Engine(model, tok, "parallel_r1", "causal", kv_cache_bytes=budget)
    with q4b.counting_reads() as reads:
        paged.generate(prompts, sampling)
    # just under the contiguous cache: one block besides the sink, so one row at a time, each step reading that
    # row's entries (5 + t) and the one it writes, no bucket
    assert paged.stats["paged"] and paged.stats["preemptions"] == 0 and paged.stats["max_rows_in_flight"] == 1
    assert reads == {"steps": 3 * n, "entries": 3 * sum(5 + t + 1 for t in range(n))}
    limit = q4b.bandwidth_limit(18, {"steps": 5, "entries": 1000}, 10_000, 10, 1.0)
    assert limit["weight_bytes_read"] == 60_000 and limit["kv_bytes_read"] == 10_000
    assert limit["bandwidth_limit_tok_s"] == pytest.approx(18 * 1e9 / 70_000)
    assert limit["weights_only_limit_tok_s"] > limit["bandwidth_limit_tok_s"]


def test_the_rl_step_is_sized_by_the_memory_model_for_an_80_gb_gpu():
    q4b = _load("gpu_qwen3_4b")
    layers, cfg, budget = q4b.rl_shape(q4b.GPU, 80 * 2**30)
    assert budget.estimate <= q4b.RL_TARGET_GIB * 2**30
    assert 1 <= layers < q4b.QWEN3_4B["num_hidden_layers"]  # the whole 4B step with fp32 masters does not fit
    bigger = q4b.rl_shape(q4b.dataclasses.replace(q4b.GPU, arch={**q4b.QWEN3_4B, "num_hidden_layers": layers + 1}),
                          80 * 2**30)
    assert bigger[0] == layers  # one more layer would go over the target
    assert cfg.gradient_checkpointing and cfg.kv_cache_gib > 0


def test_stages_section_names_the_missing_run_dir_and_its_remedy(gpu_check, tmp_path):
    (tmp_path / "base").mkdir()
    (tmp_path / "base/_manifest.json").write_text("{}")
    deadline = gpu_check.Deadline(time.perf_counter() + 60, 60)
    with pytest.raises(FileNotFoundError, match=r"lacks the published stages \['teacher', 'filter'\].*gpu_prepare.sh"):
        gpu_check.stages({}, deadline, tmp_path)


# ------------------------------------------------------------------------------------------------------- dry run


@pytest.mark.slow
def test_gpu_check_dry_run_on_cpu(tmp_path):
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks/gpu_check.py"), "--device", "cpu",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    seconds = time.perf_counter() - t
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert [p.name for p in tmp_path.iterdir()] == ["gpu_dry_run.json"]  # written where asked, nothing else
    record = json.loads((tmp_path / "gpu_dry_run.json").read_text())
    plan = record["plan"]
    assert plan["budget_s"] == plan["boxes_sum_s"] == 420 and list(plan["boxes_s"]) == [n for n, _ in _boxes()]
    assert record["failed_sections"] == [] and "watchdog" not in record
    for name, seconds_box in plan["boxes_s"].items():  # every section ran, inside its box, with its own figures
        part = record
        for key in name.split("."):
            part = part[key]
        assert "error" not in part and part["box_s"] == seconds_box and part["section_s"] <= seconds_box, name
        assert any(isinstance(v, (int, float, dict)) for k, v in part.items()
                   if k not in ("box_s", "deadline_s", "section_s")), name
    assert record["wall_s"] < 120 and seconds < 240  # a few tens of seconds on an idle core
    q = record["qwen3_4b"]
    assert q["build"]["params"] > 0 and q["build"]["kv_bytes_per_token"] == 2 * 2 * 16 * 2 * 2
    assert q["ceilings"]["bandwidth_gb_s"] > 0 and q["ceilings"]["matmul_tflops"] > 0
    assert q["decode_check"]["passed"] and q["decode_check"]["forks"] > 0
    assert q["decode_check"]["graphs_vs_static_max_logprob_diff"] == 0.0
    assert set(q["decode"]) >= {"1", "2", "4"}
    for b in ("1", "2", "4"):
        row = q["decode"][b]
        assert row["engine_tok_s"] > 0 and row["generate_tok_s"] > 0 and row["engine_graph_captures_timed"] == 0
        limit = row["engine_limit"]
        assert limit["kv_bytes_read"] > 0 and limit["bandwidth_limit_tok_s"] < limit["weights_only_limit_tok_s"]
        assert row["engine_kv_entries_per_step"] >= row["live_kv_entries_per_step"]  # the window, not the live KV
    head = q["decode"]["4"]
    assert head["no_graphs_tok_s"] > 0 and head["no_graphs_same_tokens"]
    assert head["paged_stats"]["paged"] and head["paged_tok_s"] > 0 and head["paged_same_samples"] == 1.0
    assert head["paged_kv_entries_per_step"] < head["engine_kv_entries_per_step"]  # live rows, no bucket
    assert q["sft"]["tokens_per_step"] == 128 and "scaled_dot_product" in " ".join(q["sft"]["attention"]["names"])
    assert q["sft"]["memory"]["estimate_gib"] > 0 and q["sft"]["memory"]["measured_peak_gib"] > 0
    assert set(q["fork"]["fork_speedup"]) == {"2", "4"}
    probe = q["probe"]  # issue 47: the gates' probe under the KV budget the memory model gives it
    assert probe["rows"] == 8 and probe["tokens"] == 8 * 8 and probe["kv_cache_bytes"] > 0
    assert probe["memory"]["estimate_gib"] > 0 and probe["memory"]["measured_peak_gib"] > 0
    paged = q["paged"]  # paged decode under half the KV every row needs: streams wait and are preempted
    assert paged["stats"]["paged"] and paged["all_to_their_end"] and paged["stats"]["preemptions"] > 0
    assert paged["memory"]["estimate_gib"] > 0 and paged["tok_s"] > 0
    rl = q["rl"]
    assert rl["rollouts"] == 4 and rl["generated_tokens"] > 0 and rl["update_recompute_s"] > 0
    assert rl["layers"] == 2 and rl["memory"]["estimate_gib"] > 0 and rl["memory"]["measured_peak_gib"] > 0
    assert set(rl["memory"]["phase_peaks_gib"]) == {"setup", "rollout", "update_engine", "update_recompute"}
    assert set(q["headline"]) >= {"engine_bandwidth_fraction_b64", "engine_over_generate_b64", "sft_mfu_4096",
                                  "rl_measured_over_estimate"}
    c = record["consistency"]
    assert c["fp32_within_1e-4"] and c["fp32_structured"]["forks"] > 0
    for mode in ("causal", "structured"):
        assert c[f"fp32_{mode}"]["max_abs_diff"] <= 1e-4
        # bf16 really ran: its mismatch is orders of magnitude above fp32's (CPU: mean ~5e-3 nats per token)
        assert c[f"bf16_weights_{mode}"]["mean_abs_diff"] > 1e-3
        assert c[f"fp32_weights_bf16_autocast_{mode}"]["mean_abs_diff"] > 1e-3
    assert "== gpu_check on cpu: plan check" in proc.stdout and "failed: none" in proc.stdout


def _boxes():
    return _load("gpu_check").BOXES
