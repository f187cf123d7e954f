"""Small files in the verl layout, written the way verl and Parallel-R1 write theirs (tests import these)."""

import json

import pyarrow as pa
import pyarrow.parquet as pq

# Instruction wrappers in the shapes the known sources use (our own wording), each around the problem ``{p}``.
WRAPPED = {
    "none": "{p}",
    "parallel_r1": ("Solve the following problem step by step.\nWhen several views help, open a <Parallel> block with "
                    "two or more <Path>...</Path> and close it with a <Summary>.\n\nEnd your response with a line "
                    "starting with Final Answer: followed by the final result.\n\nProblem: {p}"),
    "parallel_r1_ruled": ("You are solving the following problem with parallel thinking.\n\n═══ Instructions ═══\n"
                          "Branch when it helps.\n\n═════ Problem ═════\n{p}"),
    "baseline": "{p} Let's think step by step and output the final answer after \"Final Answer: \".",
    "verl_gsm8k": "{p} Let's think step by step and output the final answer after \"####\".",
    "qwen_boxed": "{p}\nPlease reason step by step, and put your final answer within \\boxed{{}}.",
    "dapo": ("Solve the following math problem step by step. The last line of your response should be of the form "
             "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n{p}\n\n"
             "Remember to put your answer on its own line after \"Answer:\"."),
}

# The combined evaluation file in miniature: AIME24, AIME25 and AMC problems, each 4 times and interleaved as in
# Parallel-R1's file, then three MATH problems once. Ground truths are strings there, LaTeX included.
AIME = [("Find the remainder when $7^{2024}$ is divided by $100$.", "1"),
        ("How many positive divisors does $2024$ have?", "16")]
AIME25 = [("How many ordered pairs $(a,b)$ of positive integers have $a+b=10$?", "9")]
AMC = [("What is $\\frac{1}{2}+\\frac{1}{3}$?", "\\frac{5}{6}")]
MATH = [("Compute $\\dbinom{6}{2}$.", "15"),
        ("Solve the following equation for $x$: $2x+3=11$.", "4"),  # a problem, not a wrapper
        ("What is $\\sqrt{2}\\cdot\\sqrt{8}$?", "4")]
REPEATED = [("APO_AIME24", p, a) for p, a in AIME] + [("APO_AIME25", p, a) for p, a in AIME25] + \
    [("APO_AMC23", p, a) for p, a in AMC]
REPEATS = 4


def row(data_source, problem, answer, wrapper="none", system=False, extra=None):
    prompt = [{"content": WRAPPED[wrapper].format(p=problem), "role": "user"}]
    if system:
        prompt.insert(0, {"content": "You are a careful mathematician.", "role": "system"})
    return {"data_source": data_source, "prompt": prompt, "ability": "MATH",
            "reward_model": {"ground_truth": answer, "style": "rule-lighteval/MATH_v2"},
            "extra_info": extra if extra is not None else {"reward_method": "accuracy_reward"}}


def combined_rows(wrapper="none", system=False):
    rows = [row(ds, p, a, wrapper, system) for _ in range(REPEATS) for ds, p, a in REPEATED]
    return rows + [row("APO_MATH300", p, a, wrapper, system) for p, a in MATH]


def write(path, rows):
    if str(path).endswith(".parquet"):
        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path
