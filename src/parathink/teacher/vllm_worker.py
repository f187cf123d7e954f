"""vLLM's offline engine in vLLM's own venv: the process the ``vllm`` teacher backend talks to.

Run by :class:`parathink.teacher.vllm_offline.VLLMTeacher` as ``<vLLM venv's python> vllm_worker.py SETTINGS_JSON``.
It imports nothing of parathink (that venv pins a transformers parathink cannot use), only vllm and the standard
library. Protocol: each line on stdin is a JSON list of conversations (chat messages); for each, one line on stdout
is a JSON list of ``{"text", "finish_reason"}`` in the same order. Everything vLLM prints goes to stderr, the stage's
log. EOF on stdin ends it.
"""

import json
import os
import sys


def main() -> int:
    settings = json.loads(sys.argv[1])
    replies = os.fdopen(os.dup(1), "w")  # the protocol's channel; stdout itself becomes stderr for vLLM's prints
    os.dup2(2, 1)
    import vllm

    llm = vllm.LLM(model=settings["model"], seed=settings["seed"], **settings["engine_kwargs"])
    params = vllm.SamplingParams(**settings["sampling"], seed=settings["seed"])
    for line in sys.stdin:
        conversations = json.loads(line)
        outputs = llm.chat(conversations, params, use_tqdm=False)
        replies.write(json.dumps([{"text": o.outputs[0].text, "finish_reason": o.outputs[0].finish_reason}
                                  for o in outputs]) + "\n")
        replies.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
