"""The hf teacher: the zero-shot teacher prompt goes through the model's chat template, one response each."""

from parathink.data import synthetic
from parathink.data.prompts import teacher_prompt
from parathink.engine import SamplingConfig
from parathink.teacher.hf import HFTeacher


class _ChatTok:
    chat_template = "x"

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        return f"<user>{messages[0]['content']}<assistant>"


class _Recorder:
    def __init__(self):
        self.prompts = []

    def generate_texts(self, prompts, sampling, num_samples=1):
        self.prompts += prompts
        return [[f"answer {i}"] for i in range(len(prompts))]


def test_prompts_are_chat_wrapped_teacher_prompts():
    problems = synthetic.generate("easy", "train", 3)
    gen = _Recorder()
    out = list(HFTeacher(gen, _ChatTok(), SamplingConfig(seed=0), chunk=2).generate(problems))
    assert gen.prompts == [f"<user>{teacher_prompt(p['problem'])}<assistant>" for p in problems]
    assert [r["response"] for r in out] == ["answer 0", "answer 1", "answer 0"]
    assert [r["id"] for r in out] == [p["id"] for p in problems]
