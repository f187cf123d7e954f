"""The CPU rehearsal's problem files (hydra_conf/scale/cpu_data), written in the layouts the GPU experiments read.

The experiments read GSM8K and DAPO-Math-17k from the hub and Parallel-R1's combined evaluation file (verl layout);
the rehearsal has no network, so ``scale=cpu`` points the same sources at these small local copies: the loaders,
layouts, wrappers and ``data_source`` selection the experiments use then run, on synthetic problems the tiny model's
tokenizer knows (short prompts keep the rehearsal's lengths tiny).

    python tests/rehearsal/rehearsal_data.py            # rewrite the files (a test keeps them equal to this output)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from parathink.data import synthetic

OUT = Path(__file__).resolve().parents[2] / "hydra_conf" / "scale" / "cpu_data"
# Parallel-R1's combined file repeats AIME/AMC rows 16 times (avg@16) and holds MATH once; here twice and once.
EVAL_SETS = (("APO_AIME24", "hard", 2), ("APO_AIME25", "hard", 2), ("APO_AMC23", "easy", 2), ("APO_MATH300", "easy", 1))
DAPO_WRAPPER = ("Solve the following math problem step by step. The last line of your response should be of the form "
                "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n{p}\n\n"
                "Remember to put your answer on its own line after \"Answer:\".")


def verl_row(data_source: str, problem: str, answer: str, index: int) -> dict:
    return {"data_source": data_source, "prompt": [{"role": "user", "content": problem}], "ability": "math",
            "reward_model": {"ground_truth": answer, "style": "rule"}, "extra_info": {"index": index}}


def files() -> dict[str, list[dict]]:
    """File name -> rows. Test-split problems for evaluation, train-split ones for training (never the same)."""
    gsm8k = [{"question": r["problem"], "answer": f"{synthetic.worked_solution(r)}\n#### {r['answer']}"}
             for r in synthetic.generate("easy", "train", 32, seed=47)]
    dapo = [verl_row("math_dapo", DAPO_WRAPPER.format(p=r["problem"]), r["answer"], i)
            for i, r in enumerate(synthetic.generate("hard", "train", 32, seed=47))]
    evaluation, seed = [], 48
    for data_source, level, repeats in EVAL_SETS:
        problems = synthetic.generate(level, "test", 2, seed=seed)
        seed += 1
        evaluation += [verl_row(data_source, r["problem"], r["answer"], i)
                       for _ in range(repeats) for i, r in enumerate(problems)]
    return {"gsm8k.jsonl": gsm8k, "dapo_math_17k.jsonl": dapo, "eval_verl.jsonl": evaluation}


def render(rows: list[dict]) -> str:
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)


def main(out: Path = OUT) -> int:
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in files().items():
        (out / name).write_text(render(rows), encoding="utf-8")
        print(f"{out / name}: {len(rows)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT))
