"""build_prompt: chat template when there is one, plain template otherwise; the teacher prompt."""

import pytest

from parathink.data.prompts import PLAIN_TEMPLATE, build_prompt, load_template, teacher_prompt


class _ChatTokenizer:
    chat_template = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}<|assistant|>"

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        assert tokenize is False and add_generation_prompt is True
        return "".join(f"<|{m['role']}|>{m['content']}" for m in messages) + "<|assistant|>"


class _PlainTokenizer:
    chat_template = None


def test_plain_template_without_tokenizer_or_without_chat_template():
    assert build_prompt("What is 2+3?") == "Problem: What is 2+3?\nSolution:\n"
    assert build_prompt("What is 2+3?", _PlainTokenizer()) == PLAIN_TEMPLATE.format(problem="What is 2+3?")


def test_chat_template_when_the_tokenizer_has_one():
    assert build_prompt("What is 2+3?", _ChatTokenizer()) == "<|user|>What is 2+3?<|assistant|>"


def test_real_chat_template_of_a_hf_tokenizer():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]")))
    tok.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                         "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    assert build_prompt("Add 1 and 2.", tok) == "<|im_start|>user\nAdd 1 and 2.<|im_end|>\n<|im_start|>assistant\n"


def test_empty_problem_is_refused():
    with pytest.raises(ValueError, match="problem"):
        build_prompt("   ")


def test_teacher_prompt_asks_for_the_format_and_keeps_braces():
    text = teacher_prompt("Tom has 3 apples. He buys 2 more. How many apples does Tom have now?")
    for tag in ("<Parallel>", "<Path>", "</Path>", "</Parallel>", "<Summary>", "</Summary>"):
        assert tag in text
    assert "\\boxed{ANSWER}" in text and text.rstrip().endswith("How many apples does Tom have now?")
    with pytest.raises(FileNotFoundError, match="teacher_nope"):
        load_template("teacher_nope")
