"""TeacherConfig, the teacher stage's Hydra schema: typed while composing, checked before any stage starts."""

import pytest

from parathink.config.teacher import TeacherConfig
from parathink.errors import ConfigError
from parathink.pipeline.compose import compose


@pytest.mark.parametrize("override, message", [
    ("teacher.slef.fork=start", "config: unknown config key 'teacher.slef'"),
    ("teacher.self.num_paths=three", "config: teacher.self.num_paths: must be an integer >= 2, got 'three'"),
    ("teacher.openai.timeout_s=soon", "config: teacher.openai.timeout_s: must be an integer >= 1, got 'soon'"),
    ("teacher.vllm.engine_kwargs=4", "config: teacher.vllm.engine_kwargs: must be a mapping, got 4"),
])
def test_a_misspelt_key_or_a_wrong_type_fails_while_composing(override, message):
    with pytest.raises(ConfigError) as e:
        compose([override])
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_every_backend_typed():
    t = TeacherConfig.of(compose(["teacher.backend=openai", "teacher.openai.model=m", "teacher.openai.timeout_s=30",
                                  "teacher.self.temperature=1"]))
    assert t.backend_config is t.openai and t.openai.timeout_s == 30 and t.openai.extra_body == {}
    assert isinstance(t.self.temperature, float) and t.self.num_threads == 1 and t.hf.num_threads is None
    assert t.grammar == "parallel_r1" and t.problems[0]["source"] == "synthetic"
    with pytest.raises(ConfigError, match=r"^teacher.vllm.model: required for teacher.backend=vllm$"):
        TeacherConfig.of(compose(["teacher.backend=vllm"]))
