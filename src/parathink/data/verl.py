"""The verl layout: the parquet rows that verl's RL trainer reads, and that Parallel-R1 ships its data sets in.

One row per prompt::

    data_source   the set the row belongs to ("APO_AIME24", "openai/gsm8k", "math_dapo", ...)
    prompt        chat messages; the last user message holds the problem, often inside an instruction wrapper
    ability       e.g. "math" (not used here)
    reward_model  {"ground_truth": the answer (a string, an int, LaTeX), "style": ...}
    extra_info    {"index": the row's id in its set, ...}; optional

A file may hold several sets (Parallel-R1's combined evaluation file: AIME24, AIME25 and AMC23 with every problem
16 times for avg@16, and 316 MATH problems once), told apart by ``data_source``. Selecting rows by data source and
counting repeated rows happen in ``parathink.data.sources``, for every layout; this module turns one row into the
record fields and knows the wrappers to strip.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# The instruction wrappers that known sources put around the problem in the user message. Each pattern's
# ``problem`` group is the problem itself; the first pattern that matches wins, text that none matches is kept whole.
# The training and evaluation stages add their own prompt, so a wrapper left in would be asked twice.
WRAPPERS: dict[str, re.Pattern[str]] = {
    # DAPO-Math-17k: an "Answer:" instruction before the problem and a reminder after it.
    "dapo": re.compile(r"\ASolve the following math problem.*?\n\n(?P<problem>.*?)"
                       r"(?:\n\nRemember to put your answer.*)?\Z", re.S),
    # Parallel-R1's parallel-thinking instructions (the <Parallel>/<Path>/<Summary> rules), then "Problem: ...".
    "parallel_r1": re.compile(r"\ASolve the following problem step by step\..*?\n\nProblem:[ \t]*(?P<problem>.*)\Z",
                              re.S),
    # Parallel-R1's boxed variant of those instructions: the problem follows a "═══ Problem ═══" rule.
    "parallel_r1_ruled": re.compile(r"\A.*?═+ *Problem *═+[ \t]*\n(?P<problem>.*)\Z", re.S),
    # A step-by-step request after the problem: verl's GSM8K and MATH preprocessing ("... after \"####\".",
    # "... within \boxed{}."), Parallel-R1's baseline ("... after \"Final Answer: \"."), Qwen-math style files.
    "step_by_step": re.compile(r"\A(?P<problem>.*?)\s*(?:Let's think step by step and output the final answer"
                               r"|Please reason step by step, and put your final answer)\b[^\n]*\Z", re.S),
}


def strip_wrapper(text: str) -> str:
    """The problem inside ``text``, without the instruction wrapper of a known source (``WRAPPERS``)."""
    for pattern in WRAPPERS.values():
        m = pattern.match(text)
        if m and m.group("problem").strip():
            return m.group("problem").strip()
    return text.strip()


def user_message(prompt: Any) -> str:
    """The content of the last user message of a chat ``prompt`` (a plain string is taken as that content)."""
    if isinstance(prompt, str):
        return prompt
    if not isinstance(prompt, (list, tuple)):
        raise TypeError(f"prompt: chat messages expected, got {type(prompt).__name__}")
    for message in reversed(prompt):
        if isinstance(message, Mapping) and message.get("role", "user") == "user":
            return str(message["content"])
    raise KeyError("prompt has no user message")


def ground_truth(row: Mapping) -> str:
    """``reward_model.ground_truth`` as the answer string math-verify compares (27.0 -> "27", 18 -> "18")."""
    value = row["reward_model"]["ground_truth"]
    if isinstance(value, (list, tuple, dict)) or isinstance(value, bool):
        raise TypeError(f"reward_model.ground_truth: one answer expected, got {type(value).__name__}")
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def to_record(row: Mapping, index: int, split: str) -> dict:
    """Record fields of one verl row; ``index`` (the row's place in the file) is the id when extra_info has none.

    The id carries the data source: a combined file restarts ``extra_info.index`` in every set it holds."""
    data_source = str(row["data_source"])
    extra = row.get("extra_info") or {}
    native = extra.get("index") if isinstance(extra, Mapping) else None
    return {"id": f"{data_source}-{index if native is None else native}",
            "problem": strip_wrapper(user_message(row["prompt"])), "answer": ground_truth(row),
            "data_source": data_source}
